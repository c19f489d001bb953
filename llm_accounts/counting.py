"""Counting a prompt's input tokens on an account: ``POST /v1/messages/count_tokens``, which bills
nothing (docs/architecture.md "Token counting").

The equivalent of llm-anthropic 0.30's ``llm anthropic count`` and ``model.count_tokens()``: the
request is the Messages request the prompt would send (``payload.build_body``), less the fields
the endpoint does not take. It goes to one account the user may use:

- ``-o account NAME`` pins it; otherwise the first account of the usual order
  (``selection.order``) among those the ledger's own verdict admits (``Ledger.ladder``, read-only);
- a verdict refused only for money still counts: a count costs nothing, so there is no
  reservation and no ledger row, and budgets, open ceilings and caps do not stand in the way;
- the key is resolved for that one request (``keys.resolve_key``), exactly as for an attempt.

A count failure moves no health (docs/architecture.md "Token counting"): the endpoint has rate
limits of its own, so its 429 or 5xx says nothing of the account's Messages capacity, and nothing
a count sees clears a failure either. Errors carry the usual codes, worded from closed-set values
only (``transport.read_refusal``), and are raised outside every frame that held the key.
"""

import collections
import json
import os

import httpx

from . import catalog, selection
from .errors import AccountsError
from .pricing import price_book, prices
from .retries import parse_retry_after
from .wire import classify, payload, transport
from .wire.scrub import run_detector

COUNT_PATH = "/v1/messages/count_tokens"
# The Messages fields the endpoint takes; the others (max_tokens, stream, sampling, stop
# sequences, metadata) are refused by it as extra inputs.
COUNT_FIELDS = ("model", "system", "messages", "tools", "tool_choice", "thinking", "output_config")
# An answer is {"input_tokens": N}; anything past this many bytes is not one.
ANSWER_LIMIT = 4096
# Verdict codes that say only that money is short: a count spends none.
MONEY_CODES = frozenset({"budget_exhausted"})

# A count and the account that made it (None: unrouted).
Counted = collections.namedtuple("Counted", "tokens account")


def count_body(built):
    """The count request for a built Messages body (``payload.build_body``)."""
    return {name: built[name] for name in COUNT_FIELDS if name in built}


def prepare(model, prompt):
    """``(count request bytes, beta headers, quote)`` for ``prompt`` on a routed ``model``.

    The quote is the one the prompt would be admitted at: it refuses what the prompt would be
    refused (an unpriced model, server tools) and is what the ledger's verdicts are asked about.
    """
    from .options import check_prompt, not_utf8

    check_prompt(prompt)
    built = payload.build_body(
        prompt,
        model.claude_model_id,
        stream=False,
        capabilities=model.capabilities,
        hide_reasoning=bool(getattr(prompt, "hide_reasoning", False)),
    )
    try:
        messages_body, body = payload.freeze(built), payload.freeze(count_body(built))
    except UnicodeEncodeError:
        raise not_utf8("conversation") from None
    # Quoted by the revision that prices the model, shipped or the user's (docs/pricing.md "Which price wins").
    return body, tuple(payload.beta_headers(built, model.capabilities)), prices.quote(messages_body, price_book.current())


def choose(verdicts, pinned=None):
    """The account a count goes to, from ``Ledger.ladder``'s verdicts ``{name: Verdict}``.

    Every gate admission applies holds (the model served, the client allowed, no block, no
    conflict with the credit period, health), except money. Pinned, that account or its refusal;
    otherwise the first of ``selection.order``, healthy accounts before one awaiting its probe.
    """
    def usable(verdict):
        return verdict.code is None or verdict.code in MONEY_CODES

    if pinned is not None:
        verdict = verdicts.get(pinned)
        if verdict is None:
            raise AccountsError("no_account_available", f"account '{pinned}' is not declared", account=pinned)
        if not usable(verdict):
            raise AccountsError(verdict.code, verdict.message, account=pinned)
        return verdict.account
    fit = [verdict for verdict in verdicts.values() if usable(verdict)]
    if not fit:
        reasons = "; ".join(verdict.message for verdict in verdicts.values()) or "no account is declared"
        conflict = any(verdict.code == "account_config_conflict" for verdict in verdicts.values())
        code = "account_config_conflict" if conflict else "no_account_available"
        raise AccountsError(code, f"no account can count this prompt: {reasons}")
    by_name = {verdict.account.name: verdict for verdict in fit}
    first = selection.order(selection.candidate(verdict) for verdict in fit)[0]
    return by_name[first.name].account


def pick_account(declaration, quote, pinned=None, client=None):
    """Read the verdicts (one read-only transaction, nothing reserved) and choose."""
    from .ledger import Ledger

    accounts = catalog.effective_accounts(declaration.accounts, price_book.current(), catalog.load())
    with Ledger() as ledger:
        _, verdicts = ledger.ladder(accounts, quote, client=client)
    chosen = choose(verdicts, pinned)
    return next(account for account in declaration.accounts if account.name == chosen.name)


def refusal(status, info, account=None, key_env=None, retry_after_s=None):
    """The error of a non-200 answer (``info``: closed-set values only). Nothing was billed and
    the account's health is left as it is; the words say what to do."""
    failure = classify.failure_class(status, info)
    outcome = classify.outcome_for_status(status)
    code = classify.error_code_for(failure if failure in ("quota_exhausted", "auth") else outcome)
    detail = info.provider_error_type + (f" ({info.rejection_class})" if info.rejection_class != "other" else "")
    who = f"account '{account}'" if account else "Anthropic"
    advice = ""
    if failure == "auth":
        advice = f"; check its key ({key_env})" if key_env else "; check the key"
    elif failure == "rate_limited":
        advice = "; token counting has rate limits of its own: try again" + (
            f" in {retry_after_s} s" if retry_after_s else " shortly"
        )
    elif failure == "quota_exhausted" and account:
        advice = "; the account is out of credit at the provider"
    health = " (a count does not change the account's health)" if account else " (unrouted: no accounts declared)"
    return AccountsError(
        code,
        f"{who} answered the token count with HTTP {status} {detail}, failure class {failure}; "
        f"nothing was billed{advice}{health}",
        account=account,
        http_status=status,
    )


def unreachable(failure, account=None):
    who = f"account '{account}'" if account else "Anthropic"
    return AccountsError(
        "transport_error",
        f"{who} could not be reached {transport.where()} to count tokens ({failure.kind}); a count bills nothing",
        account=account,
    )


def read_count(raw, holds, account=None):
    """``input_tokens`` of an answer, or the error for one that is not ``{"input_tokens": N}``.

    The count is shown, so it is provider text like any other: digits holding a run of the key
    are refused (docs/security.md "Provider strings")."""
    try:
        answer = json.loads(raw) if raw is not None and len(raw) <= ANSWER_LIMIT else None
    except (ValueError, RecursionError):
        answer = None
    tokens = answer.get("input_tokens") if isinstance(answer, dict) else None
    if type(tokens) is int and tokens >= 0 and not holds(str(tokens)):
        return tokens, None
    where = f"account '{account}': " if account else ""
    return None, AccountsError(
        "provider_error", f"{where}the token count answer was malformed: no input_tokens count", account=account
    )


class Target:
    """Where one count goes: the account (None unrouted), its key_env and the key for this one
    request. ``take_secret`` hands the key over once; nothing else keeps it."""

    __slots__ = ("account", "key_env", "_secret")

    def __init__(self, account, key_env, secret):
        self.account, self.key_env, self._secret = account, key_env, secret

    def take_secret(self):
        secret, self._secret = self._secret, None
        return secret


def target(model, prompt, quote, explicit_key=None):
    """The account and key a count uses (``declaration``, verdicts and key resolution, all files
    and ledger reads: a worker thread's job for the async model)."""
    from . import keys
    from .declarations import load_declaration

    declaration = load_declaration()
    if not declaration.routed:
        return Target(None, None, keys.Secret(model.get_key(explicit_key)))
    model.get_key(explicit_key)  # --key is a credential_conflict while accounts are declared
    options = prompt.options
    client = options.client or os.environ.get("LLM_ACCOUNTS_CLIENT") or None
    account = pick_account(declaration, quote, pinned=options.account, client=client)
    try:
        secret = keys.resolve_key(account.key_env, declaration)
    except AccountsError as error:
        raise AccountsError(error.code, f"account '{account.name}': {error.message}", account=account.name) from None
    return Target(account.name, account.key_env, secret)


def count_sync(model, prompt, explicit_key=None):
    """The prompt's ``Counted`` input tokens; raises ``AccountsError``."""
    body, betas, quote = prepare(model, prompt)
    where = target(model, prompt, quote, explicit_key)
    error, tokens = _send(where, body, betas)
    if error is not None:
        raise error
    return Counted(tokens, where.account)


def _send(where, body, betas):
    """``(error, tokens)``: one request signed with the target's key, which no frame keeps past
    it; the caller raises, outside every frame that held the key or the response."""
    http = transport.shared_client()
    request, holds = _signed(http, where, body, betas)
    failure = None
    try:
        response = http.send(request, stream=True)
    except httpx.HTTPError as exc:
        failure = transport.describe_failure(exc)
    del request
    if failure is not None:
        return unreachable(failure, where.account), None
    try:
        if response.status_code != 200:
            return _refused(response, transport.read_refusal(response), where), None
        try:
            raw = transport.read_bounded(response, ANSWER_LIMIT)
        except httpx.HTTPError:
            raw = None
    finally:
        response.close()
    tokens, error = read_count(raw, holds, where.account)
    return error, tokens


def _signed(http, where, body, betas):
    """``(request, the key's runs)``: the count request signed with the target's key, and what
    scrubs the answer of it; the key itself is gone when this returns."""
    secret = where.take_secret()
    holds = run_detector(secret.reveal())
    request = http.build_request(
        "POST", transport.base_url() + COUNT_PATH, content=body, headers=transport.headers(secret, stream=False, betas=betas)
    )
    del secret
    return request, holds


def _refused(response, info, where):
    """The coded error for a count the provider refused (``info``: its body, read and bounded)."""
    retry_after = parse_retry_after(response.headers.get("retry-after"))
    return refusal(response.status_code, info, where.account, where.key_env, retry_after)


async def count_async(model, prompt, explicit_key=None):
    from .ledger import run_async

    body, betas, quote = await run_async(prepare, model, prompt)
    where = await run_async(target, model, prompt, quote, explicit_key)
    error, tokens = await _asend(where, body, betas)
    if error is not None:
        raise error
    return Counted(tokens, where.account)


async def _asend(where, body, betas):
    http = transport.shared_async_client()
    request, holds = _signed(http, where, body, betas)
    failure = None
    try:
        response = await http.send(request, stream=True)
    except httpx.HTTPError as exc:
        failure = transport.describe_failure(exc)
    del request
    if failure is not None:
        return unreachable(failure, where.account), None
    try:
        if response.status_code != 200:
            return _refused(response, await transport.aread_refusal(response), where), None
        try:
            raw = await transport.aread_bounded(response, ANSWER_LIMIT)
        except httpx.HTTPError:
            raw = None
    finally:
        await response.aclose()
    tokens, error = read_count(raw, holds, where.account)
    return error, tokens
