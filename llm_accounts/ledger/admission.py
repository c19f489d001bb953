"""Admission: whether one physical attempt may be sent, on which account, and recording that it
was (docs/architecture.md "Ledger", "Selection", "Scope", "Waiting for room").

``reserve`` runs inside one write transaction, with the backend's write lock already held
(``core.transaction``): it reads what the ledger knows (``reads``), asks the pure rules for a
verdict per account (``selection.verdict``: budgets, client caps, health gates, the probe) and,
for a new conversation, an order (``selection.order``, warm prefixes first within bounds); then it
inserts the attempt, raises the month's open total and binds the conversation (``admit``). A
refusal that only ceilings in flight stand in the way of queues the caller as a waiter, in the
same transaction. ``ladder`` asks the same ``account_verdict``.
"""

import dataclasses
import datetime as dt

from .. import clock, selection
from .. import ledger as package  # the tunables tests and benches set (package.WARM_AFFINITY)
from ..errors import AccountsError
from ..records import Reservation, client_cap, client_token_cap
from . import core, reads, writes


def reserve(conn, host, scope, attempt_id, quote, declared, pinned, client, llm_response_id, exclude, now, waiter=None):
    """``Ledger.reserve`` inside its write transaction: a ``Reservation``, an ``AccountsError``,
    or a ``core.Deferred`` refusal whose waiter row commits first."""
    now = now or clock.now()  # after BEGIN IMMEDIATE: the lock is held
    provider = scope.provider
    month, day = clock.credit_month(now), clock.utc_day(now)
    duplicate, newest, bound, waiting = conn.execute(
        """SELECT (SELECT 1 FROM attempt WHERE id = ?1), (SELECT MAX(month_utc) FROM month WHERE provider = ?2),
             (SELECT account FROM binding WHERE scope_kind = ?3 AND scope_id = ?4 AND provider = ?2),
             (SELECT 1 FROM waiter LIMIT 1)""",
        (attempt_id, provider, scope.kind, scope.id),
    ).fetchone()
    if duplicate:
        raise AccountsError(
            "duplicate_attempt", "this attempt id is already in the ledger; an attempt id authorizes one send", attempt_id=attempt_id
        )
    if newest is not None and month < newest:
        raise core.Unavailable(
            f"the clock says credit period {month}, but the ledger already holds {newest}; correct the system clock (UTC)"
        )
    facts = reads.read_facts(conn, provider, month, now, host, full=False, model=quote.requested_model)
    moving = bound is not None and bound in exclude and _unbilled(conn, scope)
    if moving:
        bound = None
    older, own = _waiters(conn, provider, waiter, now) if waiting else ((), None)
    try:
        if bound is not None:
            verdict = bound_verdict(conn, scope, bound, pinned, declared, facts, quote, day, now, client, older)
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
            # "Waiting for room").
            _queue(conn, provider, waiter, own, bound or pinned, quote, now)
            return core.Deferred(error)
        if own is not None:  # nothing to wait for any more: its place goes
            conn.execute("DELETE FROM waiter WHERE id = ?", (waiter,))
            return core.Deferred(error)
        raise
    if own is not None:
        conn.execute("DELETE FROM waiter WHERE id = ?", (waiter,))
    admit(conn, host, scope, attempt_id, quote, verdict, month, day, now, not moving and bound is None, client, llm_response_id)
    if moving:
        _move_bound(conn, scope, month, verdict)
        conn.execute(
            "UPDATE binding SET account = ?, warm = ? WHERE scope_kind = ? AND scope_id = ? AND provider = ?",
            (verdict.account.name, verdict.warm, scope.kind, scope.id, provider),
        )
    return Reservation(
        attempt_id=attempt_id,
        scope=scope,
        account=verdict.account.name,
        month_utc=month,
        day_utc=day,
        ceiling_nusd=quote.ceiling_nusd,
        new_binding=bound is None,
        probe=verdict.probe,
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
        verdict.message += "; a conversation never moves by itself (llm accounts rebind moves it)"
    return verdict


def account_verdict(conn, provider, account, facts, quote, day, now, client=None, older=()):
    """Read what ``selection.verdict`` needs beyond ``facts`` (today's totals with a daily
    budget, the client's totals with a cap, what ``older`` waiters are owed here) and ask it.
    Admission and ``ladder`` both come here."""
    f = facts.get(account.name) or selection.Facts(name=account.name)
    day_totals = (0, 0)
    if getattr(account, "daily_budget_nusd", None) is not None:
        day_totals = reads.day_totals(conn, provider, f, day)
    totals = (0, 0, 0, 0)
    if client_cap(account, client) is not None or client_token_cap(account, client) is not None:
        totals = tuple(reads.client_totals(conn, provider, account.name, clock.credit_month(now), client))
    budget = f.budget_nusd or account.budget_nusd

    def ask(f, counts=None):
        return selection.verdict(
            account, f, quote.ceiling_nusd, quote.requested_model, now, client=client,
            others=facts.values(), day_totals=day_totals, client_totals=totals[:2],
            ceiling_tokens=getattr(quote, "ceiling_tokens", None), client_token_totals=totals[2:],
            ahead=selection.ahead(older, account, f, budget, day_totals) if older else (0, 0),
            open_counts=counts,
        )

    verdict = ask(f)
    if verdict.limit is not None and verdict.limit.open:
        # A budget refusal names how many attempts hold the open ceilings and which of them are
        # left open with an unknown outcome (no longer in flight, so not waited for): counted
        # here, on the refusal's path only, so an admission reads no attempt rows.
        verdict = ask(f, _open_counts(conn, provider, account.name, clock.credit_month(now), day, client))
    return verdict


def select(conn, provider, declared, facts, quote, day, now, client=None, older=()):
    """Order the candidates (docs/architecture.md "Selection") and bind the first. With none,
    the refusal carries the room held in flight on every account that would hold the attempt
    once its attempts in flight settled: a new conversation waits only when no account has room
    (docs/architecture.md "Waiting for room")."""
    verdicts = [
        account_verdict(conn, provider, account, facts, quote, day, now, client, older) for account in declared.values()
    ]
    fit = [v for v in verdicts if not v.code]
    if not fit:
        codes = {v.code for v in verdicts}
        reasons = "; ".join(v.message for v in verdicts) or "no untried account is declared"
        code = next(
            (c for c in ("budget_exhausted", "account_config_conflict") if c in codes), "no_account_available"
        )
        held = [_held(v) for v in verdicts if v.held]
        raise AccountsError(
            "budget_exhausted" if held else code, f"no account can take a new conversation: {reasons}", held=held
        )
    warm = set()
    cert = getattr(quote, "cert", None)
    if cert is not None and package.WARM_AFFINITY:
        for row in conn.execute(
            "SELECT account, expires_at FROM warm_prefix WHERE provider = ? AND cert = ?", (provider, cert)
        ):
            expires = selection.parse_time(row["expires_at"])
            if expires is not None and expires > now:
                warm.add(row["account"])
    by_name = {v.account.name: v for v in fit}
    candidates = selection.order(
        selection.candidate(
            v,
            warm=v.account.name in warm
            and selection.within_warm_bound(v.facts.spent_nusd, v.facts.open_nusd, quote.ceiling_nusd, v.budget_nusd),
        )
        for v in fit
    )
    if len(candidates) > 1 and selection.tied_before_scopes(candidates[0], candidates[1]):
        # Only a tie needs the count of conversations in flight, so only a tie reads it.
        scopes = dict(
            conn.execute(
                """SELECT account, COUNT(DISTINCT scope_kind || ':' || scope_id) FROM attempt
                   WHERE state = 'open' AND provider = ? GROUP BY account""",
                (provider,),
            ).fetchall()
        )
        candidates = selection.order(
            dataclasses.replace(c, open_scopes=scopes.get(c.name, 0)) for c in candidates
        )
    chosen = by_name[candidates[0].name]
    if cert is not None and package.WARM_AFFINITY:
        chosen.warm = candidates[0].warm  # recorded on the binding (docs/architecture.md "Warm prefixes")
    return chosen


def admit(conn, host, scope, attempt_id, quote, v, month, day, now, new_binding, client, llm_response_id):
    """Store verdict ``v``: the account row, the month's (and day's) open totals, the attempt, and
    a new conversation's binding (docs/architecture.md "Ceilings and settlement")."""
    account, f, ceiling, ts = v.account, v.facts, quote.ceiling_nusd, clock.isoformat(now)
    provider, name = scope.provider, account.name
    writes.ensure_account(conn, provider, account, f, ts)
    daily = getattr(account, "daily_budget_nusd", None)
    if f.month_row and f.daily_budget_nusd != daily:
        # The daily budget is policy: the month row shows the one in force at the latest admission.
        conn.execute(
            "UPDATE month SET daily_budget_nusd = ? WHERE provider = ? AND name = ? AND month_utc = ?",
            (daily, provider, name, month),
        )
    if not f.month_row:
        conn.execute(
            """INSERT INTO month (provider, name, month_utc, budget_nusd, daily_budget_nusd, key_env, created_at,
               settled_nusd, open_nusd, day_utc, day_settled_nusd, day_open_nusd)
               VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, 0, ?)""",
            (provider, name, month, account.budget_nusd, daily, account.key_env, ts, ceiling, day, ceiling),
        )
    elif f.day_utc == day:
        conn.execute(
            """UPDATE month SET open_nusd = open_nusd + ?1, day_open_nusd = day_open_nusd + ?1
               WHERE provider = ?2 AND name = ?3 AND month_utc = ?4""",
            (ceiling, provider, name, month),
        )
    elif f.day_utc is None or f.day_utc < day:
        conn.execute(
            """UPDATE month SET open_nusd = open_nusd + ?1, day_utc = ?2, day_settled_nusd = 0, day_open_nusd = ?1
               WHERE provider = ?3 AND name = ?4 AND month_utc = ?5""",
            (ceiling, day, provider, name, month),
        )
    else:
        conn.execute(
            "UPDATE month SET open_nusd = open_nusd + ? WHERE provider = ? AND name = ? AND month_utc = ?",
            (ceiling, provider, name, month),
        )
    conn.execute(
        """INSERT INTO attempt (id, scope_kind, scope_id, provider, account, month_utc, day_utc, ceiling_nusd,
           price_revision, requested_model, request_digest, client, llm_response_id, state, created_at,
           ceiling_tokens, host)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'open', ?, ?, ?)""",
        (attempt_id, scope.kind, scope.id, provider, name, month, day, ceiling, quote.price_revision,
         quote.requested_model, quote.request_digest, client, llm_response_id, ts,
         getattr(quote, "ceiling_tokens", None), host),
    )
    if new_binding:
        conn.execute(
            "INSERT INTO binding (scope_kind, scope_id, provider, account, created_at, warm) VALUES (?, ?, ?, ?, ?, ?)",
            (scope.kind, scope.id, provider, name, ts, v.warm),
        )
        _count_bound(conn, month, provider, name, v.warm)
    # A probe is admitted without a write: the attempt row itself holds the half-open slot
    # (``reads._probe_sql``).


# Waiting for room (docs/architecture.md "Waiting for room")

#: How long a waiter's place lasts without a renewal: a waiter renews it at least every half of
#: this while it polls, so one killed while waiting stops holding others back within this.
WAITER_TTL = dt.timedelta(seconds=10)


def _waiters(conn, provider, waiter, now):
    """The live waiters that arrived before ``waiter`` (all live ones for a caller not waiting
    yet), as ``selection.Waiter`` in arrival order, and ``waiter``'s own row (or None)."""
    rows = conn.execute(
        "SELECT id, seq, account, model, ceiling_nusd, expires_at FROM waiter WHERE provider = ? ORDER BY seq",
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
        live.append(selection.Waiter(row["seq"], row["account"], row["model"], row["ceiling_nusd"]))
    return live, own


def _queue(conn, provider, waiter, own, account, quote, now):
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
        """INSERT INTO waiter (id, seq, provider, account, model, ceiling_nusd, created_at, expires_at)
           VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM waiter), ?, ?, ?, ?, ?, ?)""",
        (waiter, provider, account, quote.requested_model, quote.ceiling_nusd, clock.isoformat(now),
         clock.isoformat(expires)),
    )


def _open_counts(conn, provider, name, month, day, client):
    """``selection.OpenCount`` per limit of account ``name``: its open attempts this period, today,
    and ``client``'s, with those left open with an unknown outcome (a recorded outcome: no longer
    in flight) and their ceilings (docs/architecture.md "Waiting for room")."""
    counts = {"budget": [0, 0, 0], "daily budget": [0, 0, 0], "cap": [0, 0, 0], "token cap": [0, 0, 0]}
    for row in conn.execute(
        """SELECT day_utc = ? AS today, client = ? AS mine, outcome IS NOT NULL AS unknown, COUNT(*),
                  COALESCE(SUM(ceiling_nusd), 0), COALESCE(SUM(ceiling_tokens), 0)
           FROM attempt WHERE state = 'open' AND provider = ? AND account = ? AND month_utc = ?
           GROUP BY 1, 2, 3""",
        (day, client, provider, name, month),
    ):
        today, mine, unknown, n, nusd, tokens = row[0], row[1], row[2], row[3], row[4], row[5]
        for noun, applies, amount in (
            ("budget", True, nusd), ("daily budget", today, nusd), ("cap", mine, nusd), ("token cap", mine, tokens),
        ):
            if applies:
                counts[noun][0] += n
                if unknown:
                    counts[noun][1] += n
                    counts[noun][2] += amount
    return {noun: selection.OpenCount(*values) for noun, values in counts.items()}


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


def _count_bound(conn, month, provider, name, warm, delta=1):
    """Count a new conversation that bound warm or cold in ``warm_month`` (none without a one-hour prefix)."""
    if warm is None:
        return
    column = "bound_warm" if warm else "bound_cold"
    conn.execute(
        f"""INSERT INTO warm_month (month_utc, provider, account, {column}) VALUES (?, ?, ?, ?)
            ON CONFLICT (month_utc, provider, account) DO UPDATE SET {column} = warm_month.{column} + excluded.{column}""",
        (month, provider, name, delta),
    )


def _move_bound(conn, scope, month, verdict):
    """A new conversation that moved on counts once: on the account it now binds."""
    old = conn.execute(
        "SELECT account, warm, created_at FROM binding WHERE scope_kind = ? AND scope_id = ? AND provider = ?",
        (scope.kind, scope.id, scope.provider),
    ).fetchone()
    created = selection.parse_time(old["created_at"])
    if old["warm"] is not None and created is not None:
        _count_bound(conn, clock.credit_month(created), scope.provider, old["account"], old["warm"], -1)
    _count_bound(conn, month, scope.provider, verdict.account.name, verdict.warm)


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
