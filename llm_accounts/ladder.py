"""The owner's ladder as a document: the order new conversations try accounts, and why not.

Built from ``Ledger.ladder``: the status lines and, per declared account, the verdict of the very
function admission uses (``selection.verdict``) for an attempt on one model, so an account shown
as available is one ``reserve`` admits and a prompt can be sent on, and any other carries the
refusal's code (``credential_missing`` for an account whose key is missing). Available
accounts are ordered as the reservation orders candidates (``selection.order``): ranks first,
then committed utilization over budget x weight, then name. A request's warm prefix and the
conversations in flight can still reorder accounts within a rank; unavailable accounts are
listed last with the reason.
"""

import dataclasses

from . import selection
from .errors import AccountsError


@dataclasses.dataclass(frozen=True)
class Rung:
    position: int | None  # None: not a candidate now
    name: str
    rank: int | None
    weight: int | None
    committed_nusd: int
    budget_nusd: int | None
    available: bool
    reason: str  # "available", or why not
    code: str | None = None  # None when available, else the error code admission refuses with


def quote_for(model_id, revision=None, max_tokens=None):
    """The quote of a prompt on ``model_id`` (at the model's default max_tokens unless given):
    its ceiling depends only on the model and max_tokens, so any text gives the same one."""
    from .capabilities import for_price, routed_max_tokens
    from .pricing import prices
    from .wire.payload import freeze

    revision = prices.revision_pricing(revision or prices.current_revision(), model_id)
    model = revision.model(model_id)
    if model is None:
        # The id is not repeated: it is free text from the command line.
        raise AccountsError(
            "unsupported_pricing",
            f"--model: not priced by price revision {revision.id}; run 'llm accounts prices' for the list",
        )
    body = {
        "model": model.id,
        "max_tokens": max_tokens or routed_max_tokens(for_price(model)),
        "messages": [{"role": "user", "content": "ladder"}],
    }
    return prices.quote(freeze(body), revision)


def build(statuses, verdicts, keyless=None):
    """Rungs from ``Ledger.ladder``'s ``(status lines, {name: Verdict})``.

    ``keyless`` maps accounts whose key is missing to their ``key_env`` (``keys.key_state``):
    the ledger would admit them, but a new conversation finds no key and moves past them
    (docs/architecture.md "Failover"), so they are listed with the others it does not take."""
    keyless = keyless or {}
    available, unavailable = [], []
    for status in statuses:
        committed = status.spent_nusd + status.open_ceiling_nusd
        verdict = verdicts.get(status.name)
        if verdict is not None and verdict.code is None and status.name in keyless:
            key_env = keyless[status.name]
            unavailable.append(
                Rung(None, status.name, status.rank, status.weight, committed, status.budget_nusd, False,
                     f"no key: {key_env} is in none of the places keys are read from "
                     f"(set it, or run 'llm keys set {key_env}'); new conversations move past it",
                     "credential_missing")
            )
        elif verdict is None:
            # What a reservation pinned to it answers.
            unavailable.append(
                Rung(None, status.name, status.rank, status.weight, committed, status.budget_nusd, False,
                     "not declared", "no_account_available")
            )
        elif verdict.code is None:
            available.append(selection.candidate(verdict))
        else:
            unavailable.append(
                Rung(None, status.name, status.rank, status.weight, committed, status.budget_nusd, False,
                     verdict.reason, verdict.code)
            )
    rungs = [
        Rung(position, c.name, c.rank, c.weight, c.committed_nusd, c.budget_nusd, True, "available")
        for position, c in enumerate(selection.order(available), start=1)
    ]
    unavailable.sort(key=lambda rung: (rung.rank if rung.rank is not None else 1 << 62, rung.name))
    return rungs + unavailable
