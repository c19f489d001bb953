"""Reports: what the ledger holds, read apart from the write path (docs/architecture.md "Ledger",
"Spend", "Pace forecast", "Budget warnings", "Auditing against the bill").

Each function runs inside one read transaction (``Ledger`` opens it) and takes no write lock,
except ``claim_thresholds``, the one write a report makes: a budget warning claimed so no other
process repeats it. Status lines and the ladder read the same facts admission reads
(``reads.read_facts``), and the ladder asks admission's own verdict, so what they show is what
``reserve`` would do.
"""

from .. import clock, forecast, health, selection, thresholds
from ..errors import AccountsError
from ..records import (
    AccountStatus, ClientCapStatus, capped_clients, client_cap, client_token_cap, clients_only, invalid,
)
from . import admission, reads

SPEND_DIMENSIONS = ("account", "model", "client", "conversation", "day")

FILTERS = ("id", "account", "state", "outcome", "month_utc", "day_utc", "scope_kind", "scope_id", "client", "provider")

# Beyond equality: ``model`` matches the requested or the served model; ``since`` and
# ``until`` bound created_at (ledger time strings, since inclusive, until exclusive).
RANGE_FILTERS = ("model", "since", "until")

# Filters the month_outcome totals carry: ``attempt_count`` sums a few of their rows, however
# long the history (schema.py); otherwise the rows are counted.
TOTAL_FILTERS = frozenset(("account", "state", "outcome", "month_utc", "provider"))


def status_lines(conn, host, declared, provider, now):
    """``Ledger.status``: one ``AccountStatus`` per account, declared ones first."""
    month, day = clock.credit_month(now), clock.utc_day(now)
    start, end = clock.credit_period(month)
    facts = reads.read_facts(conn, provider, month, now, host)
    cooling_models = {}
    for row in conn.execute(
        "SELECT account, model, cooldown_until FROM model_health WHERE provider = ? ORDER BY account, model", (provider,)
    ):
        until = selection.parse_time(row["cooldown_until"])
        if until is not None and until > now:
            cooling_models.setdefault(row["account"], []).append((row["model"], reads.iso(until)))
    open_counts = dict(
        conn.execute(
            """SELECT account, SUM(attempts) FROM month_outcome WHERE month_utc = ? AND provider = ? AND state = 'open'
               GROUP BY account""",
            (month, provider),
        ).fetchall()
    )
    names = list(declared) + sorted(set(facts) - set(declared))
    # "Last success" is the newest complete settlement the ledger counted, read from the
    # month_outcome totals (a few rows per account), not the health row's throttled
    # last_success_at (llm_accounts.health.SUCCESS_REFRESH).
    last_success = dict(
        conn.execute(
            """SELECT account, MAX(last_at) FROM month_outcome
               WHERE provider = ? AND state = 'settled' AND outcome = 'complete' AND attempts > 0
               GROUP BY account""",
            (provider,),
        ).fetchall()
    )
    # The pace forecast's window, from the day totals (docs/architecture.md "Pace forecast").
    window = {}
    for row in conn.execute(
        "SELECT account, day_utc, settled_nusd FROM day WHERE day_utc >= ? AND day_utc <= ? AND provider = ?",
        (forecast.window_start(now), day, provider),
    ):
        window.setdefault(row[0], {})[row[1]] = row[2]
    by_client = {}
    if any(capped_clients(account) for account in declared.values()):
        for row in conn.execute(
            """SELECT account, client, settled_nusd, open_nusd, tokens, open_tokens
               FROM month_client WHERE provider = ? AND month_utc = ?""",
            (provider, month),
        ):
            by_client[row[0], row[1]] = tuple(row[2:])
    lines = []
    for name in names:
        account, f = declared.get(name), facts.get(name) or selection.Facts(name=name)
        budget = f.budget_nusd if f.month_row else getattr(account, "budget_nusd", None)
        # The daily budget is policy: the declared one is in force; the month row keeps the
        # one in force at the account's latest admission.
        daily = getattr(account, "daily_budget_nusd", None) if account is not None else f.daily_budget_nusd
        day_settled, day_open = reads.day_totals(conn, provider, f, day)
        # The row that restricts the account most, its own or this machine's (transport).
        _, h, probe_taken = selection.gated(f, now)
        conflict = bool(
            account is not None and f.month_row
            and (f.budget_nusd, f.month_key_env) != (account.budget_nusd, account.key_env)
        )
        lines.append(
            AccountStatus(
                name=name,
                declared=account is not None,
                key_env=account.key_env if account is not None else f.key_env,
                rank=account.rank if account is not None else f.rank,
                weight=account.weight if account is not None else f.weight,
                month_utc=month,
                period_start=clock.isoformat(start),
                resets_at=clock.isoformat(end),
                budget_nusd=budget,
                settled_nusd=f.settled_nusd,
                adjustments_nusd=f.adjusted_nusd,
                open_ceiling_nusd=f.open_nusd,
                open_attempts=open_counts.get(name, 0),
                remaining_nusd=None if budget is None else budget - f.spent_nusd - f.open_nusd,
                daily_budget_nusd=daily,
                today_settled_nusd=day_settled,
                today_open_nusd=day_open,
                today_remaining_nusd=None if daily is None else daily - day_settled - day_open,
                day_resets_at=clock.isoformat(clock.next_day_start(now)),
                health=health.view(h, now, probe_taken),
                failure_class=None if h is None else h.failure_class,
                http_status=None if h is None else h.http_status,
                cooldown_until=None if h is None else reads.iso(h.cooldown_until),
                last_success_at=last_success.get(name) or (None if h is None else reads.iso(h.last_success_at)),
                last_failure_at=None if h is None else reads.iso(h.last_failure_at),
                blocked_reason=f.block_reason,
                blocked_at=f.blocked_at,
                config_conflict=conflict,
                client_caps=tuple(
                    _client_cap_status(
                        label, client_cap(account, label), client_token_cap(account, label),
                        *by_client.get((name, label), (0, 0, 0, 0)),
                    )
                    for label in capped_clients(account)
                ),
                clients_only=bool(clients_only(account)),
                model_cooldowns=tuple(cooling_models.get(name, ())),
                failing_since=reads.iso(h.since) if h is not None and h.state == "failing" else None,
                removed_at=f.removed_at,
                forecast=forecast.forecast(budget, f.spent_nusd, f.open_nusd, window.get(name, {}), now),
            )
        )
    return lines


def _client_cap_status(client, cap, token_cap, settled, open_, tokens_used, tokens_open):
    return ClientCapStatus(
        client=client,
        cap_nusd=cap,
        settled_nusd=settled,
        open_ceiling_nusd=open_,
        committed_nusd=settled + open_,
        remaining_nusd=None if cap is None else cap - settled - open_,
        token_cap=token_cap,
        tokens_used=tokens_used,
        tokens_open=tokens_open,
        tokens_committed=tokens_used + tokens_open,
        tokens_remaining=None if token_cap is None else token_cap - tokens_used - tokens_open,
    )


def ladder(conn, host, declared, quote, client, provider, now):
    """``Ledger.ladder`` inside its read transaction."""
    at = now or clock.now()
    month, day = clock.credit_month(at), clock.utc_day(at)
    facts = reads.read_facts(conn, provider, month, at, host, full=False, model=quote.requested_model)
    found = admission.verdicts(conn, provider, list(declared.values()), facts, quote, day, at, client)
    verdicts = dict(zip(declared, found))
    return status_lines(conn, host, declared, provider, at), verdicts


def warm_summary(conn, provider, now):
    """``Ledger.warm_summary``: one ``warm_month`` row per account."""
    month = clock.credit_month(now or clock.now())
    return {
        row["account"]: (row["bound_warm"], row["bound_cold"], row["cache_saved_nusd"])
        for row in conn.execute(
            "SELECT account, bound_warm, bound_cold, cache_saved_nusd FROM warm_month WHERE month_utc = ? AND provider = ?",
            (month, provider),
        )
    }


def unwarned_thresholds(conn, provider, account, month, warn_at):
    """The thresholds of ``warn_at`` this period's spend has reached and no process has claimed,
    with the spend and the budget: read first, so a prompt below every threshold takes no write lock."""
    row = conn.execute(
        """SELECT m.budget_nusd,
             (SELECT COALESCE(SUM(o.cost_nusd), 0) FROM month_outcome o WHERE o.month_utc = m.month_utc
               AND o.provider = m.provider AND o.account = m.name)
             + (SELECT COALESCE(SUM(j.delta_nusd), 0) FROM adjustment j WHERE j.provider = m.provider
               AND j.account = m.name AND j.month_utc = m.month_utc) AS spent_nusd
           FROM month m WHERE m.provider = ? AND m.name = ? AND m.month_utc = ?""",
        (provider, account, month),
    ).fetchone()
    if row is None:
        return (), 0, None
    warned = {
        r[0]
        for r in conn.execute(
            "SELECT threshold FROM budget_warning WHERE provider = ? AND account = ? AND month_utc = ?",
            (provider, account, month),
        )
    }
    passed = thresholds.reached(row["spent_nusd"], row["budget_nusd"], warn_at)
    return tuple(t for t in passed if t not in warned), row["spent_nusd"], row["budget_nusd"]


def claim_thresholds(conn, provider, account, month, new, spent, at):
    """Record ``new`` thresholds as warned of; a row another process inserted first wins."""
    ts = clock.isoformat(at)
    claimed = []
    for threshold in new:
        cursor = conn.execute(
            """INSERT INTO budget_warning (provider, account, month_utc, threshold, spent_nusd, warned_at)
               VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING""",
            (provider, account, month, threshold, spent, ts),
        )
        if cursor.rowcount == 1:
            claimed.append(threshold)
    return tuple(claimed)


def claim_poll(conn, provider, organization, at, every):
    """``Ledger.claim_poll``: the row's time moves to ``at`` only if ``every`` has passed since
    the last claim; whether it moved is whether this caller may poll."""
    cursor = conn.execute(
        """INSERT INTO provider_poll (provider, organization, polled_at) VALUES (?, ?, ?)
           ON CONFLICT (provider, organization) DO UPDATE SET polled_at = excluded.polled_at
           WHERE provider_poll.polled_at <= ?""",
        (provider, organization, clock.isoformat(at), clock.isoformat(at - every)),
    )
    return cursor.rowcount == 1


def spend(conn, provider, account, month_utc):
    """``Ledger.spend``: summed from the attempt and adjustment rows."""
    rows = conn.execute(
        """SELECT m.name AS account, m.month_utc, m.budget_nusd, m.daily_budget_nusd,
             COALESCE(SUM(t.cost_nusd), 0) AS settled_nusd,
             COALESCE(SUM(CASE WHEN t.state = 'open' THEN t.ceiling_nusd END), 0) AS open_ceiling_nusd,
             COUNT(t.id) AS attempts,
             COALESCE(SUM(CASE WHEN t.state = 'open' THEN 1 ELSE 0 END), 0) AS open_attempts,
             (SELECT COALESCE(SUM(j.delta_nusd), 0) FROM adjustment j WHERE j.provider = m.provider
               AND j.account = m.name AND j.month_utc = m.month_utc) AS adjustments_nusd
           FROM month m
           LEFT JOIN attempt t ON t.provider = m.provider AND t.account = m.name AND t.month_utc = m.month_utc
           WHERE m.provider = ?1 AND m.name = COALESCE(?2, m.name) AND m.month_utc = COALESCE(?3, m.month_utc)
           GROUP BY m.provider, m.name, m.month_utc
           ORDER BY m.month_utc, m.name""",
        (provider, account, month_utc),
    ).fetchall()
    result = []
    for row in rows:
        item = dict(row)
        item["spent_nusd"] = item["settled_nusd"] + item["adjustments_nusd"]
        item["remaining_nusd"] = item["budget_nusd"] - item["spent_nusd"] - item["open_ceiling_nusd"]
        result.append(item)
    return result


def spend_by(conn, by, month_utc, account, client, provider):
    """``Ledger.spend_by``: one credit period grouped by ``by``; see its docstring for the tables read."""
    start, end = clock.credit_period(month_utc)
    params = {"provider": provider, "month": month_utc, "account": account, "client": client,
              "first_day": start.date().isoformat(), "end_day": end.date().isoformat()}
    sums = "SUM(attempts) AS attempts, SUM(settled_nusd) AS settled_nusd, SUM(open_nusd) AS open_nusd"
    in_scope = "provider = :provider AND account = COALESCE(:account, account)"
    if client is None and by in ("account", "model"):
        sql = f"SELECT {by} AS key, {sums} FROM month_model WHERE {in_scope} AND month_utc = :month GROUP BY 1"
    elif client is None and by == "day":
        sql = (f"SELECT day_utc AS key, {sums} FROM day WHERE {in_scope} "
               "AND day_utc >= :first_day AND day_utc < :end_day GROUP BY 1")
    elif client is None and by == "client":
        # Labelled attempts from month_client; the unlabelled rest is the period's month_model
        # total minus them (every attempt is in month_model).
        sql = f"""SELECT client AS key, {sums} FROM month_client WHERE {in_scope} AND month_utc = :month GROUP BY 1
            UNION ALL
            SELECT NULL, t.attempts - COALESCE(c.attempts, 0), t.settled_nusd - COALESCE(c.settled_nusd, 0),
                   t.open_nusd - COALESCE(c.open_nusd, 0)
            FROM (SELECT {sums} FROM month_model WHERE {in_scope} AND month_utc = :month) t,
                 (SELECT {sums} FROM month_client WHERE {in_scope} AND month_utc = :month) c"""
    else:
        column = {"account": "account", "model": "requested_model", "client": "client", "day": "day_utc"}[by]
        sql = f"""SELECT {column} AS key, COUNT(*) AS attempts, COALESCE(SUM(cost_nusd), 0) AS settled_nusd,
                   COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0) AS open_nusd
            FROM attempt WHERE {in_scope} AND month_utc = :month
              {"AND client = :client" if client is not None else ""}
            GROUP BY 1"""
    rows = [
        {"key": row[0], "attempts": int(row[1] or 0), "settled_nusd": int(row[2] or 0), "open_nusd": int(row[3] or 0)}
        for row in conn.execute(sql, params)
    ]
    rows = [row for row in rows if row["attempts"] > 0]
    if by == "day":
        return sorted(rows, key=lambda row: row["key"])
    return sorted(rows, key=lambda row: (-(row["settled_nusd"] + row["open_nusd"]), row["key"] is None, row["key"] or ""))


def audit(conn, provider):
    """``Ledger.audit``: every month's running totals recomputed from its attempt rows."""
    problems = []
    for row in conn.execute(
        """SELECT m.name, m.month_utc, m.settled_nusd, m.open_nusd, m.day_utc, m.day_settled_nusd, m.day_open_nusd,
             (SELECT COALESCE(SUM(cost_nusd), 0) FROM attempt a WHERE a.provider = m.provider AND a.account = m.name
               AND a.month_utc = m.month_utc) AS settled,
             (SELECT COALESCE(SUM(ceiling_nusd), 0) FROM attempt a WHERE a.provider = m.provider AND a.account = m.name
               AND a.month_utc = m.month_utc AND a.state = 'open') AS open,
             (SELECT COALESCE(SUM(cost_nusd), 0) FROM attempt a WHERE a.provider = m.provider AND a.account = m.name
               AND a.day_utc = m.day_utc) AS day_settled,
             (SELECT COALESCE(SUM(ceiling_nusd), 0) FROM attempt a WHERE a.provider = m.provider AND a.account = m.name
               AND a.day_utc = m.day_utc AND a.state = 'open') AS day_open
           FROM month m WHERE m.provider = ?""",
        (provider,),
    ):
        for kept, actual in (("settled_nusd", "settled"), ("open_nusd", "open"),
                             ("day_settled_nusd", "day_settled"), ("day_open_nusd", "day_open")):
            if row[kept] != row[actual]:
                problems.append(f"{row['name']} {row['month_utc']}: {kept} is {row[kept]}, rows say {row[actual]}")
    return problems


def attempt_where(filters):
    """The ``WHERE`` of ``Ledger.attempts`` for ``filters``: equality on ``FILTERS``, and
    ``RANGE_FILTERS``; any other name is refused."""
    unknown = set(filters) - set(FILTERS) - set(RANGE_FILTERS)
    if unknown:
        raise invalid("filter", f"must be among {', '.join(FILTERS + RANGE_FILTERS)}")
    special = {
        "model": "(requested_model = :model OR served_model = :model)",
        "since": "created_at >= :since",
        "until": "created_at < :until",
    }
    return " AND ".join(special.get(column, f"{column} = :{column}") for column in filters) or "1 = 1"


def attempts_sql(filters, order_column, limit, oldest_first):
    """The statement of ``Ledger.attempts``."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise invalid("limit", "must be a positive integer")
    where = attempt_where(filters)
    direction = "ASC" if oldest_first else "DESC"
    # Admission order, SQLite's rowid (PostgreSQL's seq): the clock is read under the write
    # lock, so it follows created_at, and on SQLite it needs no index (a list of the newest
    # reads only its page; --open walks the partial attempt_open index, in rowid order).
    sql = f"SELECT * FROM attempt WHERE {where} ORDER BY {order_column} {direction}"
    if limit is not None:
        sql += f" LIMIT {limit}"
    return sql


def count_sql(filters):
    """The statement of ``Ledger.attempt_count``: from the ``month_outcome`` totals when they carry
    every filter (``TOTAL_FILTERS``), else a count of the rows."""
    sql = f"SELECT COUNT(*) FROM attempt WHERE {attempt_where(filters)}"
    if set(filters) <= TOTAL_FILTERS:
        where = " AND ".join(
            f"{column} = COALESCE(:{column}, '')" if column == "outcome" else f"{column} = :{column}" for column in filters
        ) or "1 = 1"
        sql = f"SELECT COALESCE(SUM(attempts), 0) FROM month_outcome WHERE {where}"
    return sql


def rows(conn, sql, args):
    return [dict(row) for row in conn.execute(sql, args)]


def count(conn, sql, args):
    return conn.execute(sql, args).fetchone()[0]


def ids_starting(conn, prefix):
    """Attempt ids equal to ``prefix``, or (at least 4 characters) up to two starting with it, read
    on the primary key's order."""
    if conn.execute("SELECT 1 FROM attempt WHERE id = ?", (prefix,)).fetchone():
        return [prefix]
    if len(prefix) < 4:
        return []
    upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    return [row[0] for row in conn.execute("SELECT id FROM attempt WHERE id >= ? AND id < ? ORDER BY id LIMIT 2", (prefix, upper))]


def one_attempt_id(prefix, found):
    """The one id ``ids_starting`` found; the prefix is never repeated (free text from the command line)."""
    if prefix in found:
        return prefix
    if not found:
        raise AccountsError("not_found", "ATTEMPT_ID: no attempt in the ledger has this id or starts with it (see llm accounts attempts)")
    if len(found) > 1:
        raise invalid("ATTEMPT_ID", "more than one attempt starts with this prefix; give more of the id")
    return found[0]


def daily_spend(conn, provider, account, first_day, last_day):
    """``Ledger.daily_spend``: ``{day_utc: (settled cost, settled attempts, open attempts)}``."""
    sql = """SELECT day_utc, COALESCE(SUM(cost_nusd), 0),
               SUM(CASE WHEN state = 'settled' THEN 1 ELSE 0 END), SUM(CASE WHEN state = 'open' THEN 1 ELSE 0 END)
             FROM attempt WHERE provider = ? AND account = ? AND day_utc >= ? AND day_utc <= ? GROUP BY day_utc"""
    args = (provider, account, first_day, last_day)
    return {row[0]: (int(row[1]), int(row[2]), int(row[3])) for row in conn.execute(sql, args)}
