"""The ledger's records and the checks on every value it stores (docs/architecture.md "Ledger").

Scopes, reservations, the evidence a settlement carries and the status line of an account, with
the validation each passes before it reaches SQLite. Errors name the field and the rule, never
the value: a pasted key can land in any field.
"""

import dataclasses
import json
import re

from . import health
from .errors import AccountsError
from .money import INT64_MAX
from .wire import classify

# docs/architecture.md "Attempt outcomes"
OUTCOMES = frozenset(classify.OUTCOMES)
# A documented 4xx or 529 refusal settles at zero with one of these.
REFUSED_OUTCOMES = frozenset({"rate_limited", "overloaded", "auth_required", "request_rejected"})
UNKNOWN_OUTCOMES = OUTCOMES - {"complete", "not_sent"}
# The caller ended the request: says nothing about the account, so it keeps its warm prefixes
# (docs/architecture.md "Warm prefixes").
CALLER_OUTCOMES = frozenset({"cancelled", "stream_closed"})
# docs/errors.md "Rejection classes": the documented values, or "other".
ERROR_TYPES = frozenset(classify.PROVIDER_ERROR_TYPES) | {"other"}
REJECTION_CLASSES = frozenset(classify.REJECTION_CLASSES) | {"other"}
BLOCK_REASONS = frozenset({"auth_failed", "settlement_conflict", "ceiling_exceeded", "manual"})
SCOPE_KINDS = frozenset({"conversation", "prompt", "instance"})  # instance: rows of releases before 2026-12


_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}")
NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_PROVIDER = NAME_RE
_KEY_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@/-]{0,127}")
_REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,63}")
_DIGEST = re.compile(r"[a-z0-9:]{16,128}")
CLIENT_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:@/-]{0,63}")
_REQUEST_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")
_USAGE_KEY = re.compile(r"[a-z][a-z0-9_]{0,63}")
_MONTH = re.compile(r"(\d{4})-(0[1-9]|1[0-2])")
_SOURCE = re.compile(r"[\x20-\x7e]{1,200}")


# ---------------------------------------------------------------------------------------------
# The public value types


@dataclasses.dataclass(frozen=True)
class Scope:
    """What a binding is keyed by: ``("conversation", <llm conversation id>)``, or
    ``("prompt", <llm response id>)`` for a prompt with no conversation (docs/architecture.md
    "Scope"). Ledgers written before 2026-12 also hold ``("instance", <uuid>)``, one per model
    object."""

    kind: str
    id: str
    provider: str = "anthropic"


@dataclasses.dataclass(frozen=True)
class Reservation:
    """An admitted attempt: send it with ``account``'s key, then ``settle`` it by ``attempt_id``."""

    attempt_id: str
    scope: Scope
    account: str
    month_utc: str
    day_utc: str
    ceiling_nusd: int
    new_binding: bool
    probe: bool


@dataclasses.dataclass(frozen=True)
class Complete:
    """Complete usage, priced by the caller at the served model's rates
    (docs/pricing.md "Settlement cost")."""

    cost_nusd: int
    usage: dict
    served_model: str
    request_id: str | None = None


@dataclasses.dataclass(frozen=True)
class NotSent:
    """Proven never sent: settles at zero, outcome ``not_sent``. ``caller_cancelled`` is not stored;
    it only keeps a caller's own cancellation from clearing warm prefixes
    (docs/architecture.md "Warm prefixes")."""

    caller_cancelled: bool = False


@dataclasses.dataclass(frozen=True)
class Refused:
    """A documented 4xx/529 error body: the provider refused before processing; settles at zero."""

    outcome: str
    http_status: int
    provider_error_type: str
    rejection_class: str
    failure_class: str
    # The provider's retry-after, in whole seconds, when it gave one: it sets a short cooldown.
    retry_after_s: int | None = None


@dataclasses.dataclass(frozen=True)
class Unknown:
    """No proof either way (5xx, broken stream, cancellation): the attempt stays open, keeping its
    ceiling until reconciled (docs/architecture.md "Attempt outcomes"). An answer that was not
    a documented refusal still keeps what the user was shown of it: its error type and rejection
    class, ``other`` when the body said nothing documented (docs/errors.md "Rejection classes")."""

    outcome: str
    failure_class: str | None = None
    http_status: int | None = None
    # What the user was shown of an HTTP refusal left open, or of a mid-stream error event
    # (docs/errors.md "Rejection classes").
    provider_error_type: str | None = None
    rejection_class: str | None = None


@dataclasses.dataclass(frozen=True)
class ClientCapStatus:
    """One client's cap on one account this credit period (docs/architecture.md "Client caps").

    ``committed_nusd`` is what admission compares with the cap: the client's settled costs plus
    its open ceilings on the account. Adjustments are account-wide and not in it. The token
    figures are the same for billed tokens (input, cache writes, cache reads, output): settled
    attempts' tokens plus open attempts' token ceilings. A cap the account does not set is None,
    and so is its remaining room."""

    client: str
    cap_nusd: int | None
    settled_nusd: int
    open_ceiling_nusd: int
    committed_nusd: int
    remaining_nusd: int | None
    token_cap: int | None = None
    tokens_used: int = 0
    tokens_open: int = 0
    tokens_committed: int = 0
    tokens_remaining: int | None = None


@dataclasses.dataclass(frozen=True)
class AccountStatus:
    """One account's line in ``llm accounts status`` for the current credit period."""

    name: str
    declared: bool
    key_env: str | None
    rank: int | None
    weight: int | None
    month_utc: str
    period_start: str
    resets_at: str
    budget_nusd: int | None
    settled_nusd: int
    adjustments_nusd: int
    open_ceiling_nusd: int
    open_attempts: int
    remaining_nusd: int | None
    daily_budget_nusd: int | None
    today_settled_nusd: int
    today_open_nusd: int
    today_remaining_nusd: int | None
    day_resets_at: str
    health: str
    failure_class: str | None
    http_status: int | None
    cooldown_until: str | None
    last_success_at: str | None
    last_failure_at: str | None
    blocked_reason: str | None
    blocked_at: str | None
    config_conflict: bool
    client_caps: tuple[ClientCapStatus, ...] = ()
    clients_only: bool = False
    # (model id, cooldown_until) of each model cooling on this account after a model_unavailable
    model_cooldowns: tuple[tuple[str, str], ...] = ()
    failing_since: str | None = None  # health ``since`` of a failing account
    removed_at: str | None = None  # set by ``llm accounts remove``
    forecast: object = None  # llm_accounts.forecast.Forecast, None without a budget

    @property
    def spent_nusd(self):
        return self.settled_nusd + self.adjustments_nusd

    def as_dict(self):
        data = dataclasses.asdict(self)
        data["spent_nusd"] = self.spent_nusd
        return data


# ---------------------------------------------------------------------------------------------
# Validation: errors name the field and the rule, never the value.


def invalid(field, rule):
    return AccountsError("declaration_invalid", f"{field}: {rule}")


def check_pattern(value, pattern, field, rule):
    if not isinstance(value, str) or not pattern.fullmatch(value) or "sk-ant" in value.lower():
        raise invalid(field, rule)
    return value


def check_id(value, field):
    return check_pattern(value, _ID, field, "must be 1-128 letters, digits, '_', '.', ':' or '-'")


def check_int(value, field, *, minimum=0, code="declaration_invalid"):
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= INT64_MAX:
        raise AccountsError(code, f"{field}: must be an integer number of nanodollars from {minimum} to 2**63-1")
    return value


def check_source(value):
    if not isinstance(value, str) or not _SOURCE.fullmatch(value) or "sk-ant" in value.lower():
        raise invalid("source_ref", "must be 1-200 printable ASCII characters naming where the figure comes from (an invoice, a console page)")
    return value


def check_month(value):
    if not isinstance(value, str) or not _MONTH.fullmatch(value):
        raise invalid("month", "must be a credit period key YYYY-MM, such as 2026-11")
    return value


def check_scope(scope):
    if getattr(scope, "kind", None) not in SCOPE_KINDS:
        raise invalid("scope.kind", "must be 'conversation', 'prompt' or 'instance'")
    check_id(scope.id, "scope.id")
    check_pattern(scope.provider, _PROVIDER, "scope.provider", "must be a provider name such as 'anthropic'")
    return scope


def check_quote(quote):
    """A quote's validity is checked again inside admission: no integer ceiling, no send. An
    unknown cost is never zero (docs/architecture.md "Attempt outcomes")."""
    ceiling = getattr(quote, "ceiling_nusd", None)
    if isinstance(ceiling, bool) or not isinstance(ceiling, int) or not 0 <= ceiling <= INT64_MAX:
        raise AccountsError("unsupported_pricing", "the quote has no integer ceiling in nanodollars; nothing was sent")
    for field, pattern in (
        ("requested_model", _MODEL),
        ("price_revision", _REVISION),
        ("request_digest", _DIGEST),
    ):
        value = getattr(quote, field, None)
        if not isinstance(value, str) or not pattern.fullmatch(value):
            raise AccountsError("unsupported_pricing", f"quote.{field}: missing or malformed; nothing was sent")
    cert = getattr(quote, "cert", None)
    if cert is not None:
        check_id(cert, "quote.cert")
    tokens_ = getattr(quote, "ceiling_tokens", None)
    if tokens_ is not None and (isinstance(tokens_, bool) or not isinstance(tokens_, int) or not 0 <= tokens_ <= INT64_MAX):
        raise AccountsError("unsupported_pricing", "quote.ceiling_tokens: must be an integer number of tokens; nothing was sent")
    return quote


def _check_account(account, field="account"):
    name = check_pattern(getattr(account, "name", None), NAME_RE, f"{field}.name", "must match [a-z][a-z0-9_-]{0,31}")
    check_pattern(getattr(account, "key_env", None), _KEY_ENV, f"{name}.key_env", "must be an environment variable name")
    check_int(getattr(account, "budget_nusd", None), f"{name}.budget_nusd", minimum=1)
    daily = getattr(account, "daily_budget_nusd", None)
    if daily is not None:
        check_int(daily, f"{name}.daily_budget_nusd", minimum=1)
    rank, weight = getattr(account, "rank", 0), getattr(account, "weight", 1)
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
        raise invalid(f"{name}.rank", "must be an integer >= 0")
    if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
        raise invalid(f"{name}.weight", "must be an integer >= 1")
    caps = client_caps(account)
    if not isinstance(caps, tuple) or not all(isinstance(cap, tuple) and len(cap) == 2 for cap in caps):
        raise invalid(f"{name}.clients", "must be a tuple of (client label, cap in nanodollars) pairs")
    for label, cap in caps:
        check_pattern(label, CLIENT_RE, f"{name}.clients", "client labels must be 1-64 letters, digits, '_', '.', ':', '@', '/' or '-'")
        check_int(cap, f"{name}.clients", minimum=1)
    if len({label for label, _ in caps}) != len(caps):
        raise invalid(f"{name}.clients", "names a client twice")
    token_caps = client_token_caps(account)
    if not isinstance(token_caps, tuple) or not all(isinstance(cap, tuple) and len(cap) == 2 for cap in token_caps):
        raise invalid(f"{name}.client_tokens", "must be a tuple of (client label, cap in tokens) pairs")
    for label, cap in token_caps:
        check_pattern(label, CLIENT_RE, f"{name}.client_tokens", "client labels must be 1-64 letters, digits, '_', '.', ':', '@', '/' or '-'")
        if isinstance(cap, bool) or not isinstance(cap, int) or not 1 <= cap <= INT64_MAX:
            raise invalid(f"{name}.client_tokens", "a token cap must be an integer from 1 to 2**63-1")
    if len({label for label, _ in token_caps}) != len(token_caps):
        raise invalid(f"{name}.client_tokens", "names a client twice")
    if not isinstance(clients_only(account), bool):
        raise invalid(f"{name}.clients_only", "must be True or False")
    return account


def client_caps(account):
    """An account's ``(client label, monthly cap)`` pairs (docs/architecture.md "Client caps"); () for an
    Account-like without them."""
    return getattr(account, "clients", ()) or ()


def clients_only(account):
    """``clients_only``: whether only the listed clients may use the account."""
    return getattr(account, "clients_only", False)


def client_cap(account, client):
    """The monthly cap ``account`` sets for ``client`` in nanodollars, or None."""
    if client is None:
        return None
    return dict(client_caps(account)).get(client)


def client_token_caps(account):
    """An account's ``(client label, monthly cap in billed tokens)`` pairs; () without them."""
    return getattr(account, "client_tokens", ()) or ()


def client_token_cap(account, client):
    """The monthly token cap ``account`` sets for ``client``, or None."""
    if client is None:
        return None
    return dict(client_token_caps(account)).get(client)


def capped_clients(account):
    """Every client label ``account`` caps in dollars or tokens, sorted: the clients a
    ``clients_only`` account serves."""
    return tuple(sorted({label for label, _ in client_caps(account)} | {label for label, _ in client_token_caps(account)}))


def lists_client(account, client):
    """Whether ``account`` names ``client`` in its caps (either kind)."""
    return client is not None and client in capped_clients(account)


def billed_tokens(usage):
    """Every token the provider bills in ``usage``: input, cache writes, cache reads and output
    (docs/architecture.md "Client caps")."""
    return sum(
        tokens(usage, key)
        for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
    )


_VALID_ACCOUNTS = {}


def declared_accounts(accounts):
    declared = {}
    for account in accounts or ():
        # Declarations are re-checked on every reserve; remember the ones already found valid, by
        # identity: hashing a declaration hashes every field, once per declared account on every
        # new conversation (docs/performance.md "Declared accounts"). The remembered object stays
        # alive in the dict, so its id is never reused by another. Only frozen dataclasses (such
        # as declarations.Account) are remembered: they cannot change.
        if _VALID_ACCOUNTS.get(id(account)) is not account:
            _check_account(account)
            frozen = dataclasses.is_dataclass(account) and account.__dataclass_params__.frozen
            if frozen and len(_VALID_ACCOUNTS) < 1024:
                _VALID_ACCOUNTS[id(account)] = account
        if account.name in declared:
            raise invalid(f"{account.name}.name", "declared twice")
        declared[account.name] = account
    return declared


def account_ref(account):
    """``account`` is a name or an Account-like; an Account-like can create the ledger's row."""
    if isinstance(account, str):
        return check_pattern(account, NAME_RE, "account", "must match [a-z][a-z0-9_-]{0,31}"), None
    _check_account(account)
    return account.name, account


def clean_usage(usage):
    """Numeric usage only: non-negative integers, one level of nesting, short keys. Text such as
    ``service_tier`` is dropped, so nothing the provider wrote is stored
    (docs/security.md "What is stored")."""
    if not isinstance(usage, dict):
        raise invalid("usage", "must be a dict of token counts")
    clean = {}
    for key, value in usage.items():
        if not isinstance(key, str) or not _USAGE_KEY.fullmatch(key):
            continue
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= INT64_MAX:
            clean[key] = value
        elif isinstance(value, dict):
            inner = {
                k: v
                for k, v in value.items()
                if isinstance(k, str) and _USAGE_KEY.fullmatch(k)
                and isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= INT64_MAX
            }
            if inner:
                clean[key] = inner
    return clean


def tokens(usage, key, inner=None):
    value = usage.get(key)
    if inner is not None:
        value = value.get(inner) if isinstance(value, dict) else None
    return value if isinstance(value, int) else 0


def check_evidence(evidence):
    if isinstance(evidence, Complete):
        check_int(evidence.cost_nusd, "cost_nusd")
        check_pattern(evidence.served_model, _MODEL, "served_model", "must be a model id")
        return {
            "outcome": "complete",
            "cost_nusd": evidence.cost_nusd,
            "served_model": evidence.served_model,
            "usage_json": json.dumps(clean_usage(evidence.usage), sort_keys=True, separators=(",", ":")),
            "request_id": evidence.request_id
            if isinstance(evidence.request_id, str) and _REQUEST_ID.fullmatch(evidence.request_id)
            and "sk-ant" not in evidence.request_id.lower()
            else None,
        }
    if isinstance(evidence, NotSent):
        return {"outcome": "not_sent", "cost_nusd": 0}
    if isinstance(evidence, Refused):
        if evidence.outcome not in REFUSED_OUTCOMES:
            raise invalid("outcome", "a refusal is rate_limited, overloaded, auth_required or request_rejected")
        if isinstance(evidence.http_status, bool) or not isinstance(evidence.http_status, int) or not (
            400 <= evidence.http_status <= 499 or evidence.http_status == 529
        ):
            raise invalid("http_status", "a documented refusal is a 4xx or 529")
        if evidence.provider_error_type not in ERROR_TYPES:
            raise invalid("provider_error_type", "must be a documented error.type or 'other'")
        if evidence.rejection_class not in REJECTION_CLASSES:
            raise invalid("rejection_class", "must be a rejection class or 'other'")
        if evidence.failure_class not in health.FAILURE_CLASSES:
            raise invalid("failure_class", "must be a failure class")
        return {
            "outcome": evidence.outcome,
            "cost_nusd": 0,
            "http_status": evidence.http_status,
            "provider_error_type": evidence.provider_error_type,
            "rejection_class": evidence.rejection_class,
            "failure_class": evidence.failure_class,
        }
    if isinstance(evidence, Unknown):
        if evidence.outcome not in UNKNOWN_OUTCOMES:
            raise invalid("outcome", "must be an attempt outcome other than complete and not_sent")
        if evidence.failure_class is not None and evidence.failure_class not in health.FAILURE_CLASSES:
            raise invalid("failure_class", "must be a failure class")
        status = evidence.http_status
        # Any three-digit status httpx hands back, so an unexpected one (600 and up) is recorded
        # with its outcome rather than refused (docs/errors.md "An unexpected status").
        if status is not None and (isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 999):
            raise invalid("http_status", "must be an HTTP status code")
        if evidence.provider_error_type is not None and evidence.provider_error_type not in ERROR_TYPES:
            raise invalid("provider_error_type", "must be a documented error.type or 'other'")
        if evidence.rejection_class is not None and evidence.rejection_class not in REJECTION_CLASSES:
            raise invalid("rejection_class", "must be a rejection class or 'other'")
        return None
    raise invalid("evidence", "must be Complete, NotSent, Refused or Unknown")
