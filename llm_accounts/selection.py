"""Which accounts may take an attempt, and which one a new conversation goes to: pure rules.

``verdict`` decides whether one account may take one attempt from what the ledger read about it
(``Facts``) inside its reservation transaction; ``llm accounts ladder`` asks the same function,
so what the ladder shows is what admission does. Storage stays in ``llm_accounts.ledger``.

The ledger builds one ``Candidate`` per account that may take the attempt (declared, unblocked,
not cooling, serves the model, has room) and binds the first of ``order(...)``. Order, first key
first (docs/architecture.md "Selection"):

0. healthy first: an account whose cooldown is over but whose half-open probe has not gone out
   comes after every healthy one. It failed, so it spent nothing and looks the least used; without
   this key every new conversation would be its probe (docs/architecture.md "Failure classes and
   health");
1. ``rank`` ascending: the owner's ladder, lower ranks preferred;
2. warm first: the account holds an unexpired ``warm_prefix`` row for the request's stable-prefix
   certificate and stays within the 90% bound with this attempt (docs/architecture.md "Warm prefixes");
3. committed utilization ``(settled + adjustments + open ceilings) / (budget * weight)``
   ascending, compared by integer cross-multiplication, never floats ("furthest behind pace");
4. distinct conversations with open attempts ascending;
5. account name.
"""

import dataclasses
import datetime as dt
import functools

from . import clock, health
from .money import usd, usd_exact
from .records import client_cap, client_token_cap, clients_only, lists_client


@dataclasses.dataclass(frozen=True)
class Candidate:
    name: str
    budget_nusd: int
    committed_nusd: int
    rank: int = 0
    weight: int = 1
    open_scopes: int = 0
    warm: bool = False
    probe: bool = False  # admitted only as the half-open probe of a failing account


def _sign(x):
    return (x > 0) - (x < 0)


def compare_utilization(a, b):
    """-1, 0 or 1 as ``a`` is less, equally or more committed than ``b`` relative to budget x weight."""
    return _sign(a.committed_nusd * b.budget_nusd * b.weight - b.committed_nusd * a.budget_nusd * a.weight)


def compare(a, b):
    return (
        _sign(int(a.probe) - int(b.probe))
        or _sign(a.rank - b.rank)
        or _sign(int(b.warm) - int(a.warm))
        or compare_utilization(a, b)
        or _sign(a.open_scopes - b.open_scopes)
        or _sign((a.name > b.name) - (a.name < b.name))
    )


def tied_before_scopes(a, b):
    """Whether health, rank, warmth and utilization leave ``a`` and ``b`` level (the scope count decides)."""
    return a.probe == b.probe and a.rank == b.rank and a.warm == b.warm and compare_utilization(a, b) == 0


def order(candidates):
    """Candidates, the one a new conversation binds first."""
    return sorted(candidates, key=functools.cmp_to_key(compare))


def fits(spent_nusd, open_nusd, ceiling_nusd, budget_nusd):
    """Admission inequality ``S + R + C <= B`` (equality admits)."""
    return spent_nusd + open_nusd + ceiling_nusd <= budget_nusd


def within_warm_bound(spent_nusd, open_nusd, ceiling_nusd, budget_nusd):
    """Warm only while ``10 * (S + R + C) <= 9 * B`` (equality is inside)."""
    return 10 * (spent_nusd + open_nusd + ceiling_nusd) <= 9 * budget_nusd


def serves(account, model):
    """An account serves every priced model unless its declaration lists ``models``."""
    models = getattr(account, "models", None)
    return models is None or model in models


def parse_time(value):
    """A stored time as an aware datetime, or ``None`` when it is not text, does not parse or has
    no offset (docs/architecture.md "Warm prefixes": such a ``warm_prefix`` row counts as absent,
    nothing refuses)."""
    if not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        return None
    return parsed


# ---------------------------------------------------------------------------------------------
# Messages: amounts and instants as every refusal shows them


def money(nusd):
    """Exact dollars, cents at least: figures set side by side in one message never round to
    the same text while they differ (``$19.999999999`` spent of a ``$20.00`` budget)."""
    if nusd % 10_000_000 == 0:
        return usd(nusd, 2)
    whole, frac = usd_exact(nusd).split(".")
    sign = "-" if whole.startswith("-") else ""
    return f"{sign}${int(whole.lstrip('-')):,}.{frac.rstrip('0')}"


def when(t):
    """A reset or cooldown end for people: to the minute, or to the second when that matters."""
    return t.strftime("%Y-%m-%d %H:%M UTC" if t.second == 0 and t.microsecond == 0 else "%Y-%m-%d %H:%M:%S UTC")


def out_of_credit(name, until=None):
    """The one story of an account the provider says is out of credit (docs/architecture.md "Quota
    exhaustion"), told alike by the attempt that found it and by every prompt refused while it
    cools: not our ledger's budget (``budget_exhausted``), the provider's credit."""
    skipped = f"until {when(until)}" if until is not None else f"for {health.DWELL['quota_exhausted'].seconds // 60} minutes"
    return (
        f"account '{name}' is out of credit at the provider (quota_exhausted): prompts skip it {skipped}, then one "
        f"prompt tries it again; after adding credit, clear it at once with: llm accounts unblock {name}"
    )


def over_limit(who, spent_nusd, open_nusd, limit, noun, ceiling_nusd, now):
    """The one-line budget_exhausted message: spend, the limit, what this attempt needs, the reset."""
    month = clock.credit_month(now)
    resets = clock.credit_period(month)[1]
    return (
        f"{who} has {money(spent_nusd)} spent and {money(open_nusd)} in open ceilings of its {limit} "
        f"for credit period {month}; this attempt needs up to {money(ceiling_nusd)}; the {noun} resets {when(resets)}"
    )


# ---------------------------------------------------------------------------------------------
# Verdicts


@dataclasses.dataclass
class Facts:
    """What the ledger knows about one account for the credit period being admitted in."""

    name: str
    key_env: str | None = None
    rank: int | None = None
    weight: int | None = None
    block_reason: str | None = None
    blocked_at: str | None = None
    month_row: bool = False
    budget_nusd: int | None = None
    daily_budget_nusd: int | None = None  # the daily budget in force at the latest admission
    month_key_env: str | None = None
    settled_nusd: int = 0
    open_nusd: int = 0
    day_utc: str | None = None
    day_settled_nusd: int = 0
    day_open_nusd: int = 0
    adjusted_nusd: int = 0
    removed_at: str | None = None
    record: health.Health | None = None
    probe_taken: bool = False
    # This machine's row for the host classes (transport): docs/architecture.md "Failure classes and health"
    host_record: health.Health | None = None
    host_probe_taken: bool = False
    in_ledger: bool = False
    model_record: health.ModelHealth | None = None  # the requested model's cooldown here, if any

    @property
    def spent_nusd(self):
        return self.settled_nusd + self.adjusted_nusd


@dataclasses.dataclass
class Verdict:
    """Whether one account may take this attempt, and the numbers behind the answer.

    ``code`` is ``None`` (admit) or the refusal's error code, ``message`` its one line and
    ``reason`` the short form ``llm accounts ladder`` shows."""

    account: object
    facts: Facts
    code: str | None = None
    message: str | None = None
    reason: str = "available"
    probe: bool = False
    budget_nusd: int = 0
    retry_at: object = None  # when a cooling account takes its probe (a refusal worth waiting out)
    # A new conversation's selection: whether it bound where its one-hour prefix was warm (None:
    # no certificate, or not chosen by selection) (docs/architecture.md "Warm prefixes").
    warm: bool | None = None

    def refuse(self, code, message, reason):
        self.code, self.message, self.reason = code, message, reason
        return self


def period_conflict(account, facts, others, now):
    """Why ``account``'s declaration cannot be admitted in this credit period, or ``None``.

    The first attempt of a period fixes its monthly budget and key_env: they are the account's
    credit. The daily budget and client caps are policy and may change at any time. A key holds
    one budget a period, whatever its label, so a key_env whose budget another name already holds
    this period cannot start a second one under this name. ``others`` are the ``Facts`` of every
    account the ledger holds."""
    name = account.name
    month = clock.credit_month(now)
    ends = when(clock.credit_period(month)[1])
    if facts.month_row:
        if (facts.budget_nusd, facts.month_key_env) == (account.budget_nusd, account.key_env):
            return None
        return (
            f"account '{name}' started credit period {month} with budget {money(facts.budget_nusd)} and key_env "
            f"{facts.month_key_env}, which stay fixed until the period ends at {ends}; declare those values until then "
            "(a new period may change them; the daily budget and client caps may change at any time), "
            "or correct spend with llm accounts adjust"
        )
    holder = next(
        (
            other.name
            for other in others
            if other.name != name and other.month_row and other.month_key_env == account.key_env
        ),
        None,
    )
    if holder is None:
        return None
    return (
        f"key_env {account.key_env} already holds account '{holder}''s budget for credit period {month}, "
        f"and a key has one budget a period, so account '{name}' cannot start another; use the name '{holder}' "
        f"until the period ends at {ends}, or give account '{name}' its own key"
    )


def gated(facts, now):
    """``(gate, health record, probe_taken)`` of the row that restricts this account most: its
    own or this machine's (``health.worse``)."""
    record = health.shared(facts.record)
    return health.worse(
        (health.gate(record, now, facts.probe_taken), record, facts.probe_taken),
        (health.gate(facts.host_record, now, facts.host_probe_taken), facts.host_record, facts.host_probe_taken),
    )


def candidate(verdict, warm=False):
    """The ``Candidate`` an admitted verdict competes with for a new conversation."""
    return Candidate(
        name=verdict.account.name,
        budget_nusd=verdict.budget_nusd,
        committed_nusd=verdict.facts.spent_nusd + verdict.facts.open_nusd,
        rank=verdict.account.rank,
        weight=verdict.account.weight,
        warm=warm,
        probe=verdict.probe,
    )


def _no_room(what, spent, open_, ceiling, limit):
    if limit - spent - open_ <= 0:
        return f"{what} reached"
    return f"{what} cannot hold this model's ceiling (needs up to {money(ceiling)}, {money(limit - spent - open_)} left)"


def over_token_cap(client, account_name, used, open_, cap, ceiling_tokens, now):
    """The one-line budget_exhausted message of a client's token cap, in the dollar cap's words."""
    month = clock.credit_month(now)
    resets = clock.credit_period(month)[1]
    return (
        f"client '{client}' has {used:,} tokens used and {open_:,} in open token ceilings of its {cap:,}-token cap "
        f"on account '{account_name}' for credit period {month}; this attempt needs up to {ceiling_tokens:,} tokens; "
        f"the cap resets {when(resets)}"
    )


def _no_token_room(client, used, open_, ceiling_tokens, cap):
    if cap - used - open_ <= 0:
        return f"client {client}'s token cap reached"
    return (
        f"client {client}'s token cap cannot hold this model's token ceiling "
        f"(needs up to {ceiling_tokens:,} tokens, {cap - used - open_:,} left)"
    )


def verdict(
    account, facts, ceiling_nusd, model, now, *, client=None, others=(), day_totals=(0, 0), client_totals=(0, 0),
    ceiling_tokens=None, client_token_totals=(0, 0),
):
    """May ``account`` take an attempt of ``model`` with this ceiling now? Checks, in order: the
    model, the client list, a block, the period's fixed budget and key, health (account, then this
    model on it), month room, day room, then the client's dollar cap and token cap on this account.

    ``day_totals`` are today's ``(settled, open)`` on the account (needed with a daily budget),
    ``client_totals`` the client's ``(settled, open)`` on it this period (needed with a cap), and
    ``client_token_totals`` its ``(settled tokens, open token ceilings)`` (needed with a token cap,
    checked against ``ceiling_tokens``, the attempt's worst case in billed tokens)."""
    f = facts
    v = Verdict(account=account, facts=f, budget_nusd=f.budget_nusd or account.budget_nusd)
    name = account.name
    if not serves(account, model):
        return v.refuse("no_account_available", f"account '{name}' does not serve model {model}", f"does not serve {model}")
    if clients_only(account) and not lists_client(account, client):
        # Not a candidate for any client it does not list.
        return v.refuse(
            "account_blocked",
            f"account '{name}' serves only its listed clients"
            f"{' and no client is set' if client is None else f', not client {client!r}'}; "
            "set the client with -o client NAME or LLM_ACCOUNTS_CLIENT",
            "serves only its listed clients",
        )
    if f.block_reason:
        return v.refuse(
            "account_blocked",
            f"account '{name}' is blocked ({f.block_reason}); after checking it, run: llm accounts unblock {name}",
            f"blocked ({f.block_reason})",
        )
    conflict = period_conflict(account, f, others, now)
    if conflict is not None:
        return v.refuse("account_config_conflict", conflict, "declaration conflicts with this credit period's budget")
    gate, h, probe_taken = gated(f, now)
    if gate == "blocked":
        return v.refuse(
            "auth_failed",
            f"account '{name}' failed authentication; after fixing its key run: llm accounts unblock {name}",
            "blocked (auth_failed)",
        )
    if gate == "cooling":
        here = " from this machine" if h is f.host_record else ""
        if h.failure_class == "quota_exhausted" and not probe_taken:
            return v.refuse(
                health.COOLING_CODES["quota_exhausted"],
                out_of_credit(name, h.cooldown_until),
                f"out of credit at the provider until {h.cooldown_until:%H:%M} UTC",
            )
        if probe_taken:
            until, reason = "its one probe attempt is in flight; wait for its outcome", "a probe attempt is in flight"
        else:
            until = f"cooling until {when(h.cooldown_until)}, then one probe attempt is let through"
            reason = f"cooling down after {h.failure_class}{here} until {h.cooldown_until:%H:%M} UTC"
        if h.failure_class == "quota_exhausted":
            until += f"; after adding credit, clear it with: llm accounts unblock {name}"
        if not probe_taken and h.failure_class in health.GROWING:
            v.retry_at = h.cooldown_until
        return v.refuse(
            health.COOLING_CODES.get(h.failure_class, "provider_error"),
            f"account '{name}' is failing ({h.failure_class}){here}; {until}",
            reason,
        )
    if health.model_cooling(f.model_record, now):
        until = f.model_record.cooldown_until
        return v.refuse(
            health.COOLING_CODES["model_unavailable"],
            f"account '{name}' answered that model {model} is not available to it (model_unavailable); the model "
            f"cools there until {when(until)} while other models still route there; once it is enabled, clear it with: "
            f"llm accounts unblock {name}",
            f"model {model} unavailable here until {until:%H:%M} UTC",
        )
    v.probe = gate == "probe"
    if not fits(f.spent_nusd, f.open_nusd, ceiling_nusd, v.budget_nusd):
        return v.refuse(
            "budget_exhausted",
            over_limit(f"account '{name}'", f.spent_nusd, f.open_nusd, f"{money(v.budget_nusd)} budget", "budget", ceiling_nusd, now),
            _no_room("budget", f.spent_nusd, f.open_nusd, ceiling_nusd, v.budget_nusd),
        )
    daily = getattr(account, "daily_budget_nusd", None)
    if daily is not None:
        day_settled, day_open = day_totals
        if not fits(day_settled, day_open, ceiling_nusd, daily):
            return v.refuse(
                "budget_exhausted",
                f"account '{name}' daily budget reached: {money(day_settled)} spent and {money(day_open)} in open ceilings "
                f"of {money(daily)} today ({clock.utc_day(now)} UTC); this attempt needs up to {money(ceiling_nusd)}; "
                f"it resets {when(clock.next_day_start(now))}",
                _no_room("daily budget", day_settled, day_open, ceiling_nusd, daily),
            )
    cap = client_cap(account, client)
    if cap is not None:
        settled, open_ = client_totals
        if not fits(settled, open_, ceiling_nusd, cap):
            return v.refuse(
                "budget_exhausted",
                over_limit(f"client '{client}'", settled, open_, f"{money(cap)} cap on account '{name}'", "cap", ceiling_nusd, now),
                _no_room(f"client {client}'s cap", settled, open_, ceiling_nusd, cap),
            )
    token_cap = client_token_cap(account, client)
    if token_cap is not None:
        if ceiling_tokens is None:
            # Unknown is never zero: without a worst case in tokens the cap cannot admit.
            return v.refuse(
                "unsupported_pricing",
                f"client '{client}' has a token cap on account '{name}', and this attempt's quote carries no token ceiling; nothing was sent",
                f"client {client}'s token cap needs a token ceiling",
            )
        used, open_ = client_token_totals
        if not fits(used, open_, ceiling_tokens, token_cap):
            return v.refuse(
                "budget_exhausted",
                over_token_cap(client, name, used, open_, token_cap, ceiling_tokens, now),
                _no_token_room(client, used, open_, ceiling_tokens, token_cap),
            )
    return v
