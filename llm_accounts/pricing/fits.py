"""Limits too small for the default model's ceiling, said when an account is declared
(docs/pricing.md "Small budgets").

An attempt is admitted only if its whole ceiling fits every limit, so a budget, daily budget or
client cap below the ceiling of a plain ``claude-routed`` prompt can never admit one. That is the
user's to decide (a small account may be meant for a small model), so ``llm accounts add`` and
``status`` warn and never refuse, naming what would fit: a lower ``-o max_tokens`` when the
model's window alone fits, else a model whose ceiling at its default ``max_tokens`` does, else a
model whose window fits with a lower ``-o max_tokens``.
"""

import os

from ..capabilities import for_price, routed_max_tokens
from ..ladder import quote_for
from ..money import usd_fine


def default_model():
    """The model plain ``claude-routed`` sends to (``LLM_ACCOUNTS_MODEL``, else the shipped default)."""
    from .. import DEFAULT_MODEL_ENV
    from ..models import DEFAULT_MODEL

    return os.environ.get(DEFAULT_MODEL_ENV) or DEFAULT_MODEL


def warnings(account, revision, model_id=None):
    """One ``Warning: ...`` line per limit of ``account`` below the default model's ceiling."""
    model = revision.model(model_id or default_model())
    if model is None or model.status == "retired" or not _serves(account, model.id):
        return []
    limits = [("dollars", "budget", "budget", account.budget_nusd)]
    if account.daily_budget_nusd is not None:
        limits.append(("dollars", "daily budget", "daily budget", account.daily_budget_nusd))
    limits += [("dollars", f"client '{label}' cap", "cap", cap) for label, cap in account.clients]
    limits += [("tokens", f"client '{label}' cap", "cap", cap) for label, cap in account.client_tokens]
    quote = quote_for(model.id, revision)
    lines = []
    for unit, what, noun, limit in limits:
        ceiling = _size(quote, unit)
        if ceiling <= limit:
            continue
        lines.append(
            f"Warning: account '{account.name}': its {what} of {_amount(limit, unit)} is below the "
            f"{_ceiling(ceiling, unit)} a plain claude-routed prompt reserves ({model.id} at its default "
            f"max_tokens {routed_max_tokens(for_price(model)):,}), so such a prompt is never admitted{' for that client' if noun == 'cap' else ' here'}; "
            f"{_what_fits(account, revision, model, unit, limit)}, or raise the {noun}"
        )
    return lines


def _what_fits(account, revision, model, unit, limit):
    tokens = largest_max_tokens(model.id, revision, unit, limit)
    if tokens is not None:
        return f"-o max_tokens {tokens} or lower fits"
    candidates = _candidates(account, revision)
    ceilings = ((other, _size(quote_for(other.id, revision), unit)) for other in candidates)
    fitting = [(*_preferred(revision, other), size, other.id) for other, size in ceilings if size <= limit]
    if fitting:
        *_, ceiling, best = max(fitting)
        return f"claude-routed/{best} fits ({_ceiling(ceiling, unit)} at its default max_tokens)"
    # No model fits at its default max_tokens: the one whose window alone fits with the most room
    # for output, and the largest -o max_tokens that fits it.
    room = ((other, largest_max_tokens(other.id, revision, unit, limit)) for other in candidates)
    lower = [(*_preferred(revision, other), tokens, other.id) for other, tokens in room if tokens is not None]
    if not lower:
        return "no model's window fits it (llm accounts prices)"
    *_, tokens, best = max(lower)
    return f"claude-routed/{best} with -o max_tokens {tokens} or lower fits"


def _candidates(account, revision):
    """The models a warning may name: not retired, and served by the account."""
    return [other for other in revision.models.values() if other.status != "retired" and _serves(account, other.id)]


def _preferred(revision, model):
    """A shipped model first, then an active one: a model only the user's own price file knows is
    named only when no shipped model fits (docs/pricing.md "Small budgets")."""
    return _shipped(revision, model.id), model.status == "active"


def largest_max_tokens(model_id, revision, unit, limit):
    """The largest ``max_tokens`` whose ceiling fits ``limit``, or None when even 1 does not
    (the ceiling grows with max_tokens, so a binary search over the quotes finds it)."""
    if _size(quote_for(model_id, revision, max_tokens=1), unit) > limit:
        return None
    low, high = 1, revision.model(model_id).max_output
    while low < high:
        middle = (low + high + 1) // 2
        if _size(quote_for(model_id, revision, max_tokens=middle), unit) <= limit:
            low = middle
        else:
            high = middle - 1
    return low


def _size(quote, unit):
    return quote.ceiling_nusd if unit == "dollars" else quote.ceiling_tokens


def _amount(value, unit):
    return usd_fine(value) if unit == "dollars" else f"{value:,} tokens"


def _ceiling(value, unit):
    return f"{usd_fine(value)} ceiling" if unit == "dollars" else f"{value:,}-token ceiling"


def _shipped(revision, model_id):
    """Whether the shipped price revision lists ``model_id`` (a ``price_book.Book`` also holds the
    user's own revisions; a plain revision is the shipped one)."""
    shipped = getattr(revision, "shipped", revision)
    return shipped.model(model_id) is not None


def _serves(account, model_id):
    return account.models is None or model_id in account.models
