"""Admission: whether one physical attempt may be sent, on which account, and recording that it
was (docs/architecture.md "Ledger", "Selection", "Scope", "Waiting for room").

``reserve`` is a read and a write (docs/architecture.md "Ledger"): ``choose`` reads what the
ledger knows without a lock (``reads``; on PostgreSQL one statement, no transaction), asks the pure rules for a verdict per account
(``selection.verdict``: budgets, client caps, health gates, the probe) and, for a new
conversation, an order (``selection.order``, warm prefixes first within bounds); then
``recheck.admit`` writes under the chosen account's lock only, inserting the attempt only if its
limits still hold, and raises the month's open total and binds the conversation with it. A
refusal that only ceilings in flight stand in the way of queues the caller as a waiter, in a
write of its own. ``ladder`` asks the same ``account_verdict``.
"""

import dataclasses
import datetime as dt
import time

from .. import clock, liveness, selection
from .. import ledger as package  # the tunables tests and benches set (package.WARM_AFFINITY)
from ..errors import AccountsError
from ..records import Reservation, client_cap, client_token_cap
from . import core, reads, recheck, writes


def reserve(ledger, host, scope, attempt_id, quote, declared, pinned, client, llm_response_id, exclude, now, waiter=None):
    """``Ledger.reserve``: read and choose without a lock (``choose``), then write under the
    chosen account's lock, re-checking its limits (``recheck.admit``); again while another writer
    changed that account between the two, up to ``BUSY_TIMEOUT_S`` (docs/architecture.md "Ledger").
    A ``Reservation``, or an ``AccountsError``."""
    deadline = time.monotonic() + package.BUSY_TIMEOUT_S
    # A new conversation over several accounts reads each one's place first and the facts of those
    # it asks (``reads.Placed``), where the reads share the admission's snapshot.
    placed = pinned is None and len(declared) >= PLACED_FROM and ledger._backend.rechecked_reads_in_transaction
    args = (host, scope, attempt_id, quote, declared, pinned, client, llm_response_id, exclude, now, waiter, placed)
    while True:
        plan = core.in_transaction(ledger, choose, args, core.RECHECKED)
        if callable(plan):  # a refusal that queues or drops this caller's place first: it raises
            core.in_transaction(ledger, plan, (), True)
        if _write(ledger, plan):
            return Reservation(
                attempt_id=attempt_id,
                scope=scope,
                account=plan.verdict.account.name,
                month_utc=plan.month,
                day_utc=plan.day,
                ceiling_nusd=quote.ceiling_nusd,
                new_binding=plan.bound is None or plan.moving,
                probe=plan.verdict.probe,
            )
        if time.monotonic() >= deadline:
            raise core.busy()


def _write(ledger, plan):
    """The admission's write (``recheck.admit``), one message on PostgreSQL; whether the attempt
    went in."""
    conn, backend = ledger._conn, ledger._backend
    if conn is None:
        raise backend.unavailable("the ledger is closed")
    try:
        cursor = recheck.admit(conn, backend, plan)
        backend.commit(conn)
        return backend.rowcount(cursor) == 1
    except BaseException as error:
        backend.rollback(conn)
        if isinstance(error, backend.errors):
            if backend.is_conflict(error):
                return False  # read again: the conversation is bound now, or the id taken
            raise backend.map(error) from None
        raise


#: From how many declared accounts a new conversation reads their places before their facts
#: (``reads.Placed``): with fewer, reading the facts of the one or two asked again costs more than
#: the columns it leaves out (docs/performance.md "Declared accounts").
PLACED_FROM = 4


def choose(conn, host, scope, attempt_id, quote, declared, pinned, client, llm_response_id, exclude, now, waiter=None,
           placed=False):
    """The read half of an admission, in one snapshot: a ``recheck.Plan``, an ``AccountsError``,
    or a refusal's write (a function of ``conn`` returning ``core.Deferred``) that queues or drops
    this caller's place as a waiter first."""
    now = now or clock.now()
    provider = scope.provider
    month, day = clock.credit_month(now), clock.utc_day(now)
    # Only the pinned or bound account's facts, unless a conversation may move on (``exclude``).
    duplicate, newest, bound, waiting, facts = reads.admission_facts(
        conn, scope, attempt_id, month, now, host, quote.requested_model, pinned, every=bool(exclude), placed=placed
    )
    if duplicate:
        raise AccountsError(
            "duplicate_attempt", "this attempt id is already in the ledger; an attempt id authorizes one send", attempt_id=attempt_id
        )
    if newest is not None and month < newest:
        raise core.Unavailable(
            f"the clock says credit period {month}, but the ledger already holds {newest}; correct the system clock (UTC)"
        )
    moving = bound is not None and bound in exclude and _unbilled(conn, scope)
    old_binding = None
    if moving:
        old_binding = conn.execute(
            "SELECT account, warm, created_at FROM binding WHERE scope_kind = ? AND scope_id = ? AND provider = ?",
            (scope.kind, scope.id, provider),
        ).fetchone()
    keeps = bound if bound is not None and not moving else None  # the binding this admission keeps
    target = keeps or pinned
    if target is not None and not getattr(facts.get(target), "month_row", False):
        # The account's first attempt of the period: whether another name holds its key this
        # period (selection.period_conflict) needs every account's facts.
        facts = reads.read_facts(conn, provider, month, now, host, full=False, model=quote.requested_model)
    older, own = _waiters(conn, provider, waiter, now) if waiting else ((), None)
    try:
        if keeps is not None:
            verdict = bound_verdict(conn, scope, keeps, pinned, declared, facts, quote, day, now, client, older)
        elif pinned is not None:
            if pinned not in declared:
                raise AccountsError("no_account_available", f"account '{pinned}' is not declared", account=pinned)
            verdict = account_verdict(conn, provider, declared[pinned], facts, quote, day, now, client, older)
        else:
            pool = {name: account for name, account in declared.items() if name not in exclude}
            verdict = select(conn, provider, pool, facts, quote, day, now, client, older)
        if verdict.code:
            raise AccountsError(
                verdict.code, verdict.message, account=verdict.account.name, retry_at=verdict.retry_at,
                held=[_held(verdict)] if verdict.held else (),
            )
    except AccountsError as error:
        if error.held and waiter is not None:
            # Queue (or keep) this caller's place, committed with nothing else (docs/architecture.md
            # "Waiting for room"); one writer at a time numbers a place.
            def queue(conn, refusal=error):
                writes.lock_waiters(conn)
                _queue(conn, provider, waiter, own, keeps or pinned, quote, now, client)
                return core.Deferred(refusal)

            return queue
        if own is not None:  # nothing to wait for any more: its place goes
            def leave_queue(conn, refusal=error):
                conn.execute("DELETE FROM waiter WHERE id = ?", (waiter,))
                return core.Deferred(refusal)

            return leave_queue
        raise
    f = verdict.facts
    ahead = _ahead(conn, provider, older, verdict.account, f, verdict.budget_nusd, reads.day_totals(conn, provider, f, day), month)
    return recheck.Plan(
        scope=scope, attempt_id=attempt_id, quote=quote, verdict=verdict, month=month, day=day,
        ts=clock.isoformat(now), now=now, host=host, client=client, llm_response_id=llm_response_id,
        ahead_nusd=ahead[0], bound=bound, moving=moving, old_binding=old_binding,
        waiter=waiter if own is not None else None, stamp=recheck.EMPTY_STAMP if f.stamp is None else f.stamp,
        process=liveness.this_process(),
    )


def bound_verdict(conn, scope, name, pinned, declared, facts, quote, day, now, client, older=()):
    """A bound scope never moves by itself; ``llm accounts rebind`` moves it (docs/architecture.md "Scope")."""
    conversation = scope.id if scope.kind in ("conversation", "prompt") else "CONVERSATION_ID"
    if pinned is not None and pinned != name:
        raise AccountsError(
            "no_account_available",
            f"this conversation is bound to account '{name}', not '{pinned}'; to move it run: llm accounts rebind {conversation} {pinned}",
            account=name,
        )
    if name not in declared:
        raise AccountsError(
            "account_blocked",
            f"account '{name}', bound to this conversation, is no longer declared; declare it again or run: llm accounts rebind {conversation} NAME",
            account=name,
        )
    verdict = account_verdict(conn, scope.provider, declared[name], facts, quote, day, now, client, older)
    if verdict.code and verdict.code != "account_config_conflict":
        verdict.message += "; a conversation never moves by itself (llm accounts rebind)"
    return verdict


def account_verdict(conn, provider, account, facts, quote, day, now, client=None, older=()):
    """Read what ``selection.verdict`` needs beyond ``facts`` (today's totals with a daily
    budget, the client's totals with a cap, what ``older`` waiters are owed here) and ask it.
    Admission and ``ladder`` both come here (``verdicts`` for several accounts)."""
    return verdicts(conn, provider, [account], facts, quote, day, now, client, older)[0]


def verdicts(conn, provider, accounts, facts, quote, day, now, client=None, older=()):
    """``account_verdict`` of each of ``accounts``, in order. A budget refusal names how many
    attempts hold the open ceilings and which of them are left open with an unknown outcome (no
    longer in flight, so not waited for): counted for every refused account at once, in one read
    of the credit period's open attempts (``_open_counts``), on the refusals' path only, so an
    admission that fits reads no attempt rows (docs/performance.md "Spend views at any length of
    history")."""
    month = clock.credit_month(now)
    asked = [_ask(conn, provider, account, facts, quote, day, now, client, older, month) for account in accounts]
    refused = [v.account.name for _, v in asked if v.limit is not None and v.limit.open]
    if not refused:
        return [v for _, v in asked]
    counts = _open_counts(conn, provider, refused, month, day, client)
    return [ask(counts[v.account.name]) if v.account.name in counts else v for ask, v in asked]


def _ask(conn, provider, account, facts, quote, day, now, client, older, month):
    """``(ask, verdict)``: ``selection.verdict`` of ``account`` without open counts, and ``ask``,
    which asks again with a refusal's open counts."""
    f = facts.get(account.name) or selection.Facts(name=account.name)
    day_totals = (0, 0)
    if getattr(account, "daily_budget_nusd", None) is not None:
        day_totals = reads.day_totals(conn, provider, f, day)
    totals = (0, 0, 0, 0)
    if client_cap(account, client) is not None or client_token_cap(account, client) is not None:
        totals = tuple(reads.client_totals(conn, provider, account.name, month, client))
    budget = f.budget_nusd or account.budget_nusd

    def ask(counts=None):
        return selection.verdict(
            account, f, quote.ceiling_nusd, quote.requested_model, now, client=client,
            others=facts.values(), day_totals=day_totals, client_totals=totals[:2],
            ceiling_tokens=getattr(quote, "ceiling_tokens", None), client_token_totals=totals[2:],
            ahead=_ahead(conn, provider, older, account, f, budget, day_totals, month),
            open_counts=counts,
        )

    return ask, ask()


def select(conn, provider, declared, facts, quote, day, now, client=None, older=()):
    """Order the candidates (docs/architecture.md "Selection") and bind the first. With none,
    the refusal carries the room held in flight on every account that would hold the attempt
    once its attempts in flight settled: a new conversation waits only when no account has room
    (docs/architecture.md "Waiting for room")."""
    warm = set()
    cert = getattr(quote, "cert", None)
    if cert is not None and package.WARM_AFFINITY:
        for row in conn.execute(
            "SELECT account, expires_at FROM warm_prefix WHERE provider = ? AND cert = ?", (provider, cert)
        ):
            expires = selection.parse_time(row["expires_at"])
            if expires is not None and expires > now:
                warm.add(row["account"])
    fit = _first_fit(conn, provider, declared, facts, quote, day, now, client, older, warm)
    if not fit:
        reads.load(facts, list(declared))
        found = verdicts(conn, provider, list(declared.values()), facts, quote, day, now, client, older)
        codes = {v.code for v in found}
        # One account: its own line. Several: each one's cause in a few words, the figures in
        # llm accounts status (docs/errors.md "One line").
        if len(found) == 1:
            reasons = found[0].message
        elif found:
            reasons = "; ".join(f"{v.account.name}: {selection.cause(v)}" for v in found) + "; llm accounts status shows why"
        else:
            reasons = "no untried account is declared"
        code = next(
            (c for c in ("budget_exhausted", "account_config_conflict") if c in codes), "no_account_available"
        )
        held = [_held(v) for v in found if v.held]
        raise AccountsError(
            "budget_exhausted" if held else code, f"no account can take a new conversation: {reasons}", held=held
        )
    candidates = [c for c, _ in fit]
    if len(candidates) > 1 and selection.tied_before_scopes(candidates[0], candidates[1]):
        # Only a tie needs the count of conversations in flight, so only a tie reads it.
        scopes = dict(
            conn.execute(
                """SELECT account, COUNT(DISTINCT scope_kind || ':' || scope_id) FROM attempt
                   WHERE state = 'open' AND provider = ? GROUP BY account""",
                (provider,),
            ).fetchall()
        )
        # Only those tied with the first can come first once the scope count breaks the tie.
        candidates = selection.first(
            dataclasses.replace(c, open_scopes=scopes.get(c.name, 0))
            for c in candidates if selection.tied_before_scopes(c, candidates[0])
        )
    chosen = dict((c.name, v) for c, v in fit)[candidates[0].name]
    if cert is not None and package.WARM_AFFINITY:
        chosen.warm = candidates[0].warm  # recorded on the binding (docs/architecture.md "Warm prefixes")
    return chosen


#: How many accounts' facts a new conversation reads at once, the first in order: the two it needs
#: and one more, for a refusal among them (``reads.Placed``).
ASKED_AT_ONCE = 3


def _first_fit(conn, provider, declared, facts, quote, day, now, client, older, warm):
    """``[(candidate, verdict)]`` of the accounts that may take the attempt, in
    ``selection.order``: the first two, and every one tied with the first before the count of
    conversations in flight; empty when none may.

    Only the accounts that can come first are asked for a verdict: each account's place in the
    order is known from its facts before its verdict but for the probe key, which a verdict can
    only move later (every healthy account comes before a probe). So the accounts are taken in
    the order of their places as if healthy, and asked in turn until nothing left can come before
    those found: a new conversation over 50 declared accounts asks two or three of them, not
    fifty (docs/performance.md "Declared accounts")."""
    month = clock.credit_month(now)
    places = []
    for account in declared.values():
        budget, spent, open_ = reads.place(facts, account.name)
        budget = budget or account.budget_nusd
        places.append(selection.Candidate(
            name=account.name, budget_nusd=budget, committed_nusd=spent + open_, rank=account.rank,
            weight=account.weight,
            warm=account.name in warm and selection.within_warm_bound(spent, open_, quote.ceiling_nusd, budget),
        ))
    healthy, probes = [], []
    places = selection.ordered(places)
    reads.load(facts, [c.name for c in places[:ASKED_AT_ONCE]])  # the facts of those likely asked, in one read
    for i, c in enumerate(places):
        if len(healthy) > 1 and not (
            selection.tied_before_scopes(healthy[0][0], healthy[1][0]) and selection.tied_before_scopes(c, healthy[0][0])
        ):
            return healthy  # nothing left comes before the second found, or ties with the first
        v = _ask(conn, provider, declared[c.name], facts, quote, day, now, client, older, month)[1]
        if v.code:
            continue
        if v.probe:  # its place is after every healthy account, among probes in the same order
            probes.append((selection.candidate(v, warm=c.warm), v))
        else:
            healthy.append((c, v))
    return healthy + probes


# Waiting for room (docs/architecture.md "Waiting for room")

#: How long a waiter's place lasts without a renewal: a waiter renews it at least every half of
#: this while it polls, so one killed while waiting stops holding others back within this.
WAITER_TTL = dt.timedelta(seconds=10)


def _ahead(conn, provider, older, account, f, budget, day_totals, month):
    """What the ``older`` waiters are owed on ``account`` (``selection.ahead``), reading the totals
    of each of their clients the account caps, so a waiter its own client keeps out is not counted."""
    if not older:
        return (0, 0)
    totals = {}
    for w in older:
        if w.client not in totals and (client_cap(account, w.client) is not None or client_token_cap(account, w.client) is not None):
            totals[w.client] = tuple(reads.client_totals(conn, provider, account.name, month, w.client))
    return selection.ahead(older, account, f, budget, day_totals, totals)


def _waiters(conn, provider, waiter, now):
    """The live waiters that arrived before ``waiter`` (all live ones for a caller not waiting
    yet), as ``selection.Waiter`` in arrival order, and ``waiter``'s own row (or None)."""
    rows = conn.execute(
        "SELECT id, seq, account, model, ceiling_nusd, client, ceiling_tokens, expires_at FROM waiter WHERE provider = ? ORDER BY seq",
        (provider,),
    ).fetchall()
    live, own = [], None
    for row in rows:
        expires = selection.parse_time(row["expires_at"])
        if expires is None or expires <= now:
            continue
        if row["id"] == waiter:
            own = row
            break  # the rest arrived later
        live.append(selection.Waiter(
            row["seq"], row["account"], row["model"], row["ceiling_nusd"], row["client"], row["ceiling_tokens"]
        ))
    return live, own


def _queue(conn, provider, waiter, own, account, quote, now, client=None):
    """Queue ``waiter`` behind every live waiter (expired places are dropped first), or renew its
    place once half its time is gone; a place kept is never moved back."""
    expires = now + WAITER_TTL
    if own is not None:
        if selection.parse_time(own["expires_at"]) - now >= WAITER_TTL / 2:
            return
        conn.execute("UPDATE waiter SET expires_at = ? WHERE id = ?", (clock.isoformat(expires), waiter))
        return
    conn.execute("DELETE FROM waiter WHERE expires_at <= ? OR id = ?", (clock.isoformat(now), waiter))
    conn.execute(
        """INSERT INTO waiter (id, seq, provider, account, model, ceiling_nusd, client, ceiling_tokens, created_at, expires_at)
           VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM waiter), ?, ?, ?, ?, ?, ?, ?, ?)""",
        (waiter, provider, account, quote.requested_model, quote.ceiling_nusd, client,
         getattr(quote, "ceiling_tokens", None), clock.isoformat(now), clock.isoformat(expires)),
    )


# The open attempts of some accounts in one credit period, read through the attempt_open_period
# index (schema.py): keyed by credit period, so attempts left open in earlier periods are never
# visited, and covering, so no attempt row is read. ``{names}`` is one ``?`` per account.
OPEN_COUNTS_SQL = """SELECT account, day_utc = ? AS today, client = ? AS mine, outcome IS NOT NULL AS unknown, COUNT(*),
                  COALESCE(SUM(ceiling_nusd), 0), COALESCE(SUM(ceiling_tokens), 0)
           FROM attempt WHERE state = 'open' AND provider = ? AND month_utc = ? AND account IN ({names})
           GROUP BY 1, 2, 3, 4"""


def _open_counts(conn, provider, names, month, day, client):
    """``{name: {limit noun: selection.OpenCount}}`` for each account of ``names``: its open
    attempts this period, today, and ``client``'s, with those left open with an unknown outcome (a
    recorded outcome: no longer in flight) and their ceilings (docs/architecture.md "Waiting for
    room"). One statement for every account."""
    found = {name: {"budget": [0, 0, 0], "daily budget": [0, 0, 0], "cap": [0, 0, 0], "token cap": [0, 0, 0]}
             for name in names}
    sql = OPEN_COUNTS_SQL.format(names=", ".join("?" * len(names)))
    for row in conn.execute(sql, (day, client, provider, month, *names)):
        counts = found[row[0]]
        today, mine, unknown, n, nusd, tokens = row[1], row[2], row[3], row[4], row[5], row[6]
        for noun, applies, amount in (
            ("budget", True, nusd), ("daily budget", today, nusd), ("cap", mine, nusd), ("token cap", mine, tokens),
        ):
            if applies:
                counts[noun][0] += n
                if unknown:
                    counts[noun][1] += n
                    counts[noun][2] += amount
    return {name: {noun: selection.OpenCount(*values) for noun, values in counts.items()} for name, counts in found.items()}


def _held(verdict):
    lim = verdict.limit
    in_flight = lim.counted.attempts - lim.counted.unknown_attempts
    return selection.Held(verdict.account.name, lim.held, in_flight, lim.spent, lim.ahead, lim.queued)


def _unbilled(conn, scope):
    """Every attempt of the scope settled at zero as refused before processing (429/529) or never sent."""
    row = conn.execute(
        """SELECT COUNT(*) FROM attempt WHERE scope_kind = ? AND scope_id = ? AND provider = ?
           AND NOT (state = 'settled' AND outcome IN ('rate_limited', 'overloaded', 'not_sent'))""",
        (scope.kind, scope.id, scope.provider),
    ).fetchone()
    return row[0] == 0


def leave(conn, waiter):
    """A waiter that stops waiting gives up its place (docs/architecture.md "Waiting for room")."""
    conn.execute("DELETE FROM waiter WHERE id = ?", (waiter,))


def check_declaration(conn, host, provider, name, declared, now):
    """Refuse, with ``account_config_conflict``, a declaration this credit period cannot admit
    (``selection.period_conflict``)."""
    facts = reads.read_facts(conn, provider, clock.credit_month(now), now, host)
    problem = selection.period_conflict(declared, facts.get(name) or selection.Facts(name=name), facts.values(), now)
    if problem is not None:
        raise AccountsError("account_config_conflict", problem, account=name)
