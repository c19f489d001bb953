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

import datetime as dt
import dataclasses
import functools
import heapq

from . import clock, health
from .money import usd, usd_exact
from .records import client_cap, client_token_cap, clients_only, lists_client


# Candidate and Limit are made once per declared account on every new conversation, so they are
# plain slotted dataclasses: a frozen one costs five times as much to make (docs/performance.md
# "Declared accounts"). Nothing changes one once made.
@dataclasses.dataclass(slots=True)
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


def rough_key(c):
    """A sort key that never puts two candidates against ``compare``'s order, though it may leave
    them level: health, rank and warmth as ``compare`` takes them, then utilization as a float.
    Python divides two integers correctly rounded, and rounding keeps order, so a less committed
    account's float is never greater; accounts whose floats are level are ordered by ``compare``
    (``ordered``). Budgets and weights are at least 1 (``records``), so it never divides by zero."""
    return (c.probe, c.rank, not c.warm, c.committed_nusd / (c.budget_nusd * c.weight))


def ordered(candidates):
    """``order(candidates)``, sorted on ``rough_key`` (each comparison in C, once per candidate)
    and by ``compare`` only among candidates that key leaves level: a new conversation orders
    every declared account (docs/performance.md "Declared accounts")."""
    keyed = sorted((rough_key(c), i, c) for i, c in enumerate(candidates))
    out = []
    i = 0
    while i < len(keyed):
        j = i + 1
        while j < len(keyed) and keyed[j][0] == keyed[i][0]:
            j += 1
        if j == i + 1:
            out.append(keyed[i][2])
        else:
            out.extend(order(k[2] for k in keyed[i:j]))
        i = j
    return out


def first(candidates, n=2):
    """The first ``n`` of ``order(candidates)``, in order: what a new conversation needs (the one
    it binds, and the next to see whether they tie), in one pass over the candidates rather than a
    sort of every declared account."""
    return heapq.nsmallest(n, candidates, key=functools.cmp_to_key(compare))


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
    return clock.parse_aware(value)


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


def soon(t, now):
    """A cooldown's end for a one-line refusal: the time alone when it is within a day of ``now``
    (cooldowns last minutes), else ``when``."""
    if now <= t < now + dt.timedelta(hours=20):
        return t.strftime("%H:%M UTC" if t.second == 0 and t.microsecond == 0 else "%H:%M:%S UTC")
    return when(t)


def out_of_credit(name, until=None, now=None):
    """The one story of an account the provider says is out of credit (docs/architecture.md "Quota
    exhaustion"), told alike by the attempt that found it and by every prompt refused while it
    cools: not our ledger's budget (``budget_exhausted``), the provider's credit."""
    if until is None:
        skipped = f"for the next {health.DWELL['quota_exhausted'].seconds // 60} minutes"
    else:
        skipped = f"until {when(until) if now is None else soon(until, now)}"
    return (
        f"account '{name}' is out of credit at the provider (quota_exhausted) {skipped}; "
        f"after adding credit: llm accounts unblock {name}"
    )


# The block source of an answer that contradicted a manual reconcile (``ledger/settlement.py``).
MANUAL_CONFLICT = "reconcile:"
# The one command that frees room held by attempts left open with an unknown outcome.
SETTLE_OPEN = "llm accounts reconcile --open --account {name} --cost USD --source REF"


@dataclasses.dataclass(frozen=True)
class OpenCount:
    """The open attempts behind a limit's open ceilings: how many, and how many of them (holding
    ``unknown``) are left open with an unknown outcome, no longer in flight."""

    attempts: int = 0
    unknown_attempts: int = 0
    unknown: int = 0


NONE_OPEN = OpenCount()


@dataclasses.dataclass(slots=True)
class Limit:
    """One limit an attempt must fit: ``spent + open + ahead + ceiling <= limit`` (docs/architecture.md
    "Waiting for room"). ``open`` is every open ceiling (``counted`` says by how many attempts and
    how much of it is left open with an unknown outcome); ``ahead`` what earlier prompts waiting
    for this room are owed (``queued`` of them). Dollar limits count nanodollars, a token cap
    tokens (``tokens=True``)."""

    noun: str  # "budget", "daily budget", "cap", "token cap"
    spent: int
    open: int
    limit: int
    ceiling: int
    counted: OpenCount = NONE_OPEN
    ahead: int = 0
    queued: int = 0
    tokens: bool = False

    @property
    def held(self):
        """Ceilings of attempts still in flight: what settling by itself frees."""
        return self.open - self.counted.unknown

    def fits(self):
        return fits(self.spent, self.open + self.ahead, self.ceiling, self.limit)

    def fits_spent(self):
        """Whether the attempt would fit once every attempt in flight settled at zero: if so, only
        ceilings in flight (and prompts waiting before it) stand in the way, and it may wait for
        room. A ceiling left open with an unknown outcome counts as spent here: only evidence
        frees it (docs/architecture.md "Attempt outcomes")."""
        return self.spent + self.counted.unknown + self.ceiling <= self.limit

    def amount(self, n):
        return f"{n:,} tokens" if self.tokens else money(n)


def _attempts(n):
    return f"{n} attempt{'' if n == 1 else 's'}"


def budget_refusal(lim, who, period, resets, fix=None, account=None):
    """A budget_exhausted line of about 200 characters naming the one cause that applies and the
    one thing that helps (docs/errors.md "budget_exhausted"): the ceiling alone is larger than the
    limit; the spend leaves too little (the reset frees spent budget, ``fix`` raises a limit that
    is policy); attempts left open with an unknown outcome hold it (only a reconcile frees that);
    or attempts in flight hold it, which settling frees (``-o wait``). "Reached" is said only of a
    limit its spend has reached. The figures behind it are in ``llm accounts status``."""
    limit = f"{lim.limit:,}-token cap" if lim.tokens else f"{money(lim.limit)} {lim.noun}"
    need = f"this attempt (up to {lim.amount(lim.ceiling)})"
    if lim.ceiling > lim.limit:
        # No reset or settlement can make room: the attempt alone is larger than the limit.
        return f"{who} cannot take {need}: its ceiling alone is more than its {limit}; lower -o max_tokens"
    if lim.spent + lim.ceiling > lim.limit:
        spent = f"{lim.amount(lim.spent)} {'used' if lim.tokens else 'spent'}"
        head = f"{who} has reached its {limit} {period} ({spent})" if lim.spent >= lim.limit else (
            f"{who} cannot take {need} within its {limit} {period}: {spent}"
        )
        return f"{head}; the reset at {when(resets)} frees it" + (f", or raise it: {fix}" if fix else "")
    spent = f" ({lim.amount(lim.spent)} {'used' if lim.tokens else 'spent'})" if lim.spent else ""
    if lim.spent + lim.counted.unknown + lim.ceiling > lim.limit:
        n = lim.counted.unknown_attempts
        return (
            f"{who} cannot take {need}: {lim.amount(lim.counted.unknown)} of its {limit} is held by {_attempts(n)} "
            f"left open (unknown outcome){spent}; settle {'it' if n == 1 else 'them'}: {SETTLE_OPEN.format(name=account or 'NAME')}"
        )
    in_flight = lim.counted.attempts - lim.counted.unknown_attempts
    held = f"{lim.amount(lim.held)} of its {limit} is held by {_attempts(in_flight)} in flight"
    if lim.queued:
        held += f" and {lim.amount(lim.ahead)} kept for {lim.queued} earlier waiting prompt{'' if lim.queued == 1 else 's'}"
    return f"{who} cannot take {need} now: {held}{spent or ', not spent'}; -o wait SECONDS waits for room"


def cause(verdict):
    """A refused verdict's cause in a few words, for a refusal that names several accounts:
    whether the ceiling, spend, attempts left open or attempts in flight fill a limit, else the
    short form ``llm accounts ladder`` shows."""
    lim = verdict.limit
    if lim is None:
        return verdict.reason
    what = {"cap": "client cap"}.get(lim.noun, lim.noun)
    if lim.ceiling > lim.limit:
        return f"ceiling over its {what}"
    if lim.spent + lim.ceiling > lim.limit:
        return f"{what} spent"
    if lim.spent + lim.counted.unknown + lim.ceiling > lim.limit:
        return f"{what} held by attempts left open (llm accounts reconcile --open)"
    return f"{what} held in flight"


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
    # What recorded the block: ``reconcile:ATTEMPT`` for an answer that contradicted a manual
    # reconcile (docs/errors.md "A guess that conflicts"); read for settlement_conflict only.
    block_source: str | None = None
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
    # Its health rows' columns as read (``recheck.STAMPED``), for the re-check under its lock
    # (llm_accounts.ledger.recheck); joined into ``stamp`` only for the account admission chose.
    stamped: tuple | None = None

    @property
    def spent_nusd(self):
        return self.settled_nusd + self.adjusted_nusd

    @property
    def stamp(self):
        """The health rows as read, as one text (``recheck.STAMP_SQL`` makes the same under the lock)."""
        return None if self.stamped is None else "|".join(str(value or "") for value in self.stamped)


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
    # A budget refusal's limit, and whether only ceilings in flight (and earlier waiting prompts)
    # stand in the way: settled spend plus this ceiling fits every limit, so the prompt may wait
    # for room (docs/architecture.md "Waiting for room").
    limit: Limit | None = None
    held: bool = False

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
    if facts.month_row and (facts.budget_nusd, facts.month_key_env) == (account.budget_nusd, account.key_env):
        return None  # the common case, checked per declared account on every admission: no words needed
    month = clock.credit_month(now)
    ends = when(clock.credit_period(month)[1])
    if facts.month_row:
        # Only the one that differs is named, with the command that declares it again; the rule
        # is in docs/errors.md "Budget and key fixed for a credit period".
        if facts.budget_nusd != account.budget_nusd:
            return (
                f"account '{name}''s budget is fixed at {money(facts.budget_nusd)} until {ends}: "
                f"llm accounts set {name} --budget {_usd_argument(facts.budget_nusd)}"
            )
        return (
            f"account '{name}''s key_env is fixed to {facts.month_key_env} until {ends}; "
            f"declare that key_env for it again until then"
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
        f"key_env {account.key_env} holds '{holder}''s budget until {ends}; use "
        f"'{holder}' or give '{name}' its own key"
    )


def _usd_argument(nusd):
    """Nanodollars as a command's USD argument, exact and without a thousands separator:
    ``20.00``, ``0.123456789``."""
    whole, frac = divmod(nusd, 10**9)
    return f"{whole}.{f'{frac:09d}'.rstrip('0').ljust(2, '0')}"


def gated(facts, now):
    """``(gate, health record, probe_taken)`` of the row that restricts this account most: its
    own or this machine's (``health.worse``)."""
    if facts.record is None and facts.host_record is None:
        return "open", None, facts.probe_taken  # no health row: what health.worse gives, read for every account
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


def _no_token_room(client, used, open_, ceiling_tokens, cap):
    if cap - used - open_ <= 0:
        return f"client {client}'s token cap reached"
    return (
        f"client {client}'s token cap cannot hold this model's token ceiling "
        f"(needs up to {ceiling_tokens:,} tokens, {cap - used - open_:,} left)"
    )


def verdict(
    account, facts, ceiling_nusd, model, now, *, client=None, others=(), day_totals=(0, 0), client_totals=(0, 0),
    ceiling_tokens=None, client_token_totals=(0, 0), ahead=(0, 0), open_counts=None,
):
    """May ``account`` take an attempt of ``model`` with this ceiling now? Checks, in order: the
    model, the client list, a block, the period's fixed budget and key, health (account, then this
    model on it), month room, day room, then the client's dollar cap and token cap on this account.

    ``day_totals`` are today's ``(settled, open)`` on the account (needed with a daily budget),
    ``client_totals`` the client's ``(settled, open)`` on it this period (needed with a cap), and
    ``client_token_totals`` its ``(settled tokens, open token ceilings)`` (needed with a token cap,
    checked against ``ceiling_tokens``, the attempt's worst case in billed tokens). ``ahead`` is
    what earlier waiting prompts are owed on the account (``ahead()``). ``open_counts`` maps a
    limit's noun ("budget", "daily budget", "cap", "token cap") to ``OpenCount``: how many
    attempts hold its open ceilings, and how much of them is left open with an unknown outcome
    (the ledger reads it only for a budget refusal).

    A budget refusal sets ``limit`` (the first limit that cannot hold the attempt) and ``held``:
    whether the attempt would fit every limit once the attempts in flight settled, so it may wait
    for room instead of failing (docs/architecture.md "Waiting for room")."""
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
        if (f.block_source or "").startswith(MANUAL_CONFLICT):
            attempt = f.block_source[len(MANUAL_CONFLICT):]
            return v.refuse(
                "account_blocked",
                f"account '{name}' is blocked: attempt {attempt[:8]}'s answer contradicts your reconcile; "
                f"once checked: llm accounts unblock {name}",
                "blocked (settlement_conflict with a manual reconcile)",
            )
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
                out_of_credit(name, h.cooldown_until, now),
                f"out of credit at the provider until {h.cooldown_until:%H:%M} UTC",
            )
        if probe_taken:
            until, reason = "its probe attempt is in flight; wait for it", "a probe attempt is in flight"
        else:
            until = f"cooling until {soon(h.cooldown_until, now)}, then one probe is let through"
            reason = f"cooling down after {h.failure_class}{here} until {h.cooldown_until:%H:%M} UTC"
        if h.failure_class == "quota_exhausted":
            until += f"; after adding credit: llm accounts unblock {name}"
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
            f"account '{name}' does not offer {model} (model_unavailable) until {soon(until, now)}; "
            f"once enabled: llm accounts unblock {name}",
            f"model {model} unavailable here until {until:%H:%M} UTC",
        )
    v.probe = gate == "probe"
    counts = open_counts or {}
    limits = _limits(account, f, v.budget_nusd, ceiling_nusd, client, day_totals, client_totals, ahead, counts)
    token_cap = client_token_cap(account, client)
    if token_cap is not None:
        if ceiling_tokens is None:
            if all(lim.fits() for lim in limits):
                # Unknown is never zero: without a worst case in tokens the cap cannot admit.
                return v.refuse(
                    "unsupported_pricing",
                    f"client '{client}' has a token cap on account '{name}', and this attempt's quote carries no token ceiling; nothing was sent",
                    f"client {client}'s token cap needs a token ceiling",
                )
        else:
            limits.append(_token_limit(token_cap, ceiling_tokens, client_token_totals, counts))
    for lim in limits:
        if not lim.fits():
            v.limit = lim
            v.held = all(other.fits_spent() for other in limits)
            who, period, resets, fix = _words(lim, name, client, now)
            return v.refuse("budget_exhausted", budget_refusal(lim, who, period, resets, fix, name), _reason(lim, client))
    return v


def _limits(account, f, budget, ceiling, client, day_totals, client_totals, ahead, counts):
    """The dollar limits of one attempt, in the order they are checked: the monthly budget, the
    daily budget, the client's cap. Earlier waiting prompts (``ahead``: nanodollars, how many)
    count against the account's budgets, never a client's cap (docs/architecture.md "Waiting for
    room")."""
    ahead_nusd, queued = ahead
    limits = [Limit("budget", f.spent_nusd, f.open_nusd, budget, ceiling, counts.get("budget", NONE_OPEN), ahead_nusd, queued)]
    daily = getattr(account, "daily_budget_nusd", None)
    if daily is not None:
        day_settled, day_open = day_totals
        limits.append(
            Limit("daily budget", day_settled, day_open, daily, ceiling, counts.get("daily budget", NONE_OPEN), ahead_nusd, queued)
        )
    cap = client_cap(account, client)
    if cap is not None:
        settled, open_ = client_totals
        limits.append(Limit("cap", settled, open_, cap, ceiling, counts.get("cap", NONE_OPEN)))
    return limits


def _token_limit(token_cap, ceiling_tokens, client_token_totals, counts):
    used, open_ = client_token_totals
    return Limit("token cap", used, open_, token_cap, ceiling_tokens, counts.get("token cap", NONE_OPEN), tokens=True)


def limits(account, f, budget, ceiling, client=None, day_totals=(0, 0), client_totals=(0, 0), ahead=(0, 0),
           ceiling_tokens=None, client_token_totals=(0, 0)):
    """Every limit ``verdict`` checks an attempt against, in its order: the ones an admission
    re-checks under the account's lock (``llm_accounts.ledger.recheck`` builds its SQL from these, so the
    rule has one home: docs/architecture.md "Ledger on PostgreSQL")."""
    found = _limits(account, f, budget, ceiling, client, day_totals, client_totals, ahead, {})
    token_cap = client_token_cap(account, client)
    if token_cap is not None and ceiling_tokens is not None:
        found.append(_token_limit(token_cap, ceiling_tokens, client_token_totals, {}))
    return found


def _words(lim, name, client, now):
    """Whose limit it is, the period it covers, when that resets and the command that raises it
    (none for the monthly budget: the credit period fixes it), for a refusal's message."""
    month = clock.credit_month(now)
    period_end = clock.credit_period(month)[1]
    if lim.noun == "budget":
        return f"account '{name}'", f"for credit period {month}", period_end, None
    if lim.noun == "daily budget":
        return f"account '{name}'", f"for {clock.utc_day(now)} UTC", clock.next_day_start(now), f"llm accounts set {name} --daily-budget USD"
    amount = "Ntokens" if lim.tokens else "USD"
    return (f"client '{client}' on account '{name}'", f"for credit period {month}", period_end,
            f"llm accounts set {name} --client-cap {client}={amount}")


def _reason(lim, client):
    """The short form ``llm accounts ladder`` shows."""
    if lim.tokens:
        return _no_token_room(client, lim.spent, lim.open, lim.ceiling, lim.limit)
    what = {"cap": f"client {client}'s cap"}.get(lim.noun, lim.noun)
    return _no_room(what, lim.spent, lim.open + lim.ahead, lim.ceiling, lim.limit)


# ---------------------------------------------------------------------------------------------
# Waiting for room (docs/architecture.md "Waiting for room")


@dataclasses.dataclass(frozen=True)
class Waiter:
    """A prompt waiting for room: in arrival order (``seq``), for one account or any (``None``),
    with its client label (None: none) and token ceiling (None: its quote had none)."""

    seq: int
    account: str | None
    model: str
    ceiling_nusd: int
    client: str | None = None
    ceiling_tokens: int | None = None


def kept_out_by_own_client(account, waiter, totals=(0, 0, 0, 0)):
    """Whether ``waiter``'s own client keeps it out of ``account`` now, whatever room the account
    has: a ``clients_only`` account that does not list its client, or its client's dollar or token
    cap that its ceiling does not fit beside that client's settled and open amounts there
    (``totals``: ``reads.client_totals``). Room freed on the account could not go to it, so it is
    owed none (docs/architecture.md "Waiting for room")."""
    if clients_only(account) and not lists_client(account, waiter.client):
        return True
    settled, open_, tokens, open_tokens = totals
    cap = client_cap(account, waiter.client)
    if cap is not None and not fits(settled, open_, waiter.ceiling_nusd, cap):
        return True
    token_cap = client_token_cap(account, waiter.client)
    return token_cap is not None and waiter.ceiling_tokens is not None and not fits(
        tokens, open_tokens, waiter.ceiling_tokens, token_cap
    )


def ahead(waiters, account, f, budget, day_totals=(0, 0), client_totals=None):
    """``(nanodollars, how many)`` that earlier waiting prompts are owed on ``account``: every
    waiter that may use it (its own account, or any; a model it serves) and that its settled
    spend leaves room for. Admission counts them as held, so room that frees goes to the oldest
    waiter it fits, and a later prompt, waiting or new, never takes it first: no waiter starves
    behind later ones. A waiter the account could not hold even with nothing in flight is not
    waiting for it and is not counted, nor is one its own client keeps out of the account
    (``kept_out_by_own_client``, with ``client_totals``: ``{client: reads.client_totals}`` of the
    waiters' capped clients here): it is counted again once its client's attempts leave room."""
    daily = getattr(account, "daily_budget_nusd", None)
    total = count = 0
    for w in waiters:
        if w.account not in (None, account.name) or not serves(account, w.model):
            continue
        if f.spent_nusd + w.ceiling_nusd > budget or daily is not None and day_totals[0] + w.ceiling_nusd > daily:
            continue
        if kept_out_by_own_client(account, w, (client_totals or {}).get(w.client, (0, 0, 0, 0))):
            continue
        total, count = total + w.ceiling_nusd, count + 1
    return total, count


@dataclasses.dataclass(frozen=True)
class Held:
    """Room held on one account by attempts in flight (a refusal's ``held``)."""

    account: str
    held_nusd: int
    attempts: int
    spent_nusd: int
    ahead_nusd: int = 0  # owed to earlier waiting prompts
    queued: int = 0


def held_summary(held):
    """"$7.656 held by 2 attempts in flight on alpha and $3.828 by 1 on beta" (then what earlier
    waiting prompts are owed, if any)."""
    parts = [f"{money(h.held_nusd)} held by {_attempts(h.attempts)} in flight on {h.account}" for h in held[:1]]
    parts += [f"{money(h.held_nusd)} by {h.attempts} on {h.account}" for h in held[1:]]
    text = " and ".join(parts) if len(parts) < 3 else ", ".join(parts[:-1]) + " and " + parts[-1]
    queued = max((h.queued for h in held), default=0)  # a prompt waiting for any account counts on each
    if queued:
        text += f", behind {queued} earlier waiting prompt{'' if queued == 1 else 's'}"
    return text


def held_refusal(held, waited_s, bound_s):
    """The budget_exhausted line of a prompt refused only by ceilings in flight, once its wait
    (up to ``bound_s``, ``-o wait``) is over: the money is held, not spent, and what helps: a
    longer wait (docs/errors.md "budget_exhausted")."""
    spent = sum(h.spent_nusd for h in held)
    if bound_s > 0:
        waited, helps = f"after waiting {waited_s:.0f} s", "-o wait SECONDS (or LLM_ACCOUNTS_WAIT) waits longer"
    else:
        waited, helps = "without waiting", "-o wait SECONDS waits for them to settle"
    return f"no room for this attempt {waited}: {held_summary(held)}, not spent ({money(spent)} spent); {helps}"
