"""An admission's write: lock the chosen account, re-check its limits where the data is, insert.

Admission reads its candidates without a lock (one snapshot), chooses with ``selection``, then
writes (docs/architecture.md "Ledger on PostgreSQL"): take the chosen account's lock, insert the
attempt only if every limit the verdict checked still holds, update the month totals, the binding
and the waiter only if it was inserted, commit. On PostgreSQL the statements go out as one message
(``postgres.Connection``), so the account's lock is held for server time and the commit only,
never across a client round trip; on SQLite the same statements run in one short
``BEGIN IMMEDIATE``. If another writer changed the account since the read, nothing is
inserted and the ledger reads and chooses again.

Every limit is per account, so re-checking the chosen account under its lock is enough: a write
that changes an account's totals, health or block holds that account's lock, so the re-check
sees every such write that committed before it and none can commit between it and the insert.

The re-check's SQL is generated from ``selection.limits``: the same ``Limit`` objects, and the same
``Limit.fits`` inequality, evaluated over SQL expressions for where each total lives (``Sql``).
What cannot be generated that way (where a day's totals are when the clock went back, the probe
slot, a health row's identity, a binding) is held equal to the Python rule by property tests
(tests/test_recheck_properties.py).
"""

import dataclasses

from .. import clock, health, selection


class Sql:
    """An SQL expression built by the rule's own arithmetic: ``+`` and ``<=`` make SQL text, and
    every integer the rule brings becomes a named parameter (never text in the statement)."""

    def __init__(self, text, params=None):
        self.text, self.params = text, params

    @staticmethod
    def of(value, params):
        if isinstance(value, Sql):
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError("a limit's figures are integers")
        name = f"k{len(params)}"
        params[name] = value
        return Sql(f":{name}", params)

    def _join(self, other, op):
        params = self.params
        return Sql(f"({self.text} {op} {Sql.of(other, params).text})", params)

    def __add__(self, other):
        if isinstance(other, int) and not isinstance(other, bool) and other == 0:
            return self
        return self._join(other, "+")

    def __radd__(self, other):
        if isinstance(other, int) and not isinstance(other, bool) and other == 0:
            return self
        return Sql.of(other, self.params)._join(self, "+")

    def __le__(self, other):
        return self._join(other, "<=")


# Where each total of the locked account lives, as the re-check reads it: ``m`` its month row,
# ``mc`` the client's month_client row (LEFT JOIN), ``:day`` today.
SETTLED = "m.settled_nusd"
OPEN = "m.open_nusd"
ADJUSTED = """(SELECT COALESCE(SUM(j.delta_nusd), 0) FROM adjustment j
    WHERE j.provider = m.provider AND j.account = m.name AND j.month_utc = m.month_utc)"""
# Today's totals as ``reads.day_totals`` reads them: the month row's for its newest day, none
# for a day after it, the ``day`` table's when the clock went back within the month.
_DAY = """CASE WHEN m.day_utc = :day THEN m.day_{0}_nusd WHEN m.day_utc IS NULL OR m.day_utc < :day THEN 0
    ELSE COALESCE((SELECT d.{0}_nusd FROM day d WHERE d.day_utc = :day AND d.provider = m.provider AND d.account = m.name), 0) END"""
DAY_SETTLED, DAY_OPEN = _DAY.format("settled"), _DAY.format("open")
CLIENT = ("COALESCE(mc.settled_nusd, 0)", "COALESCE(mc.open_nusd, 0)")
CLIENT_TOKENS = ("COALESCE(mc.tokens, 0)", "COALESCE(mc.open_tokens, 0)")

# The health rows admission gated on, as one text: a failure, a cooldown or a block recorded since
# the read changes it, and the attempt is not inserted (the ledger reads again).
STAMPED = (("h", "state", "state"), ("h", "failure_class", "class"), ("h", "cooldown_until", "cooldown_until"),
           ("h", "last_failure_at", "last_failure_at"), ("hh", "state", "state"), ("hh", "failure_class", "class"),
           ("hh", "cooldown_until", "cooldown_until"), ("hh", "last_failure_at", "last_failure_at"),
           ("mh", "cooldown_until", "cooldown_until"))
STAMP_SQL = " || '|' || ".join(f"COALESCE({alias}.{column}, '')" for alias, column, _ in STAMPED)


EMPTY_STAMP = "|" * (len(STAMPED) - 1)  # an account with no health rows (or not in the ledger yet)


@dataclasses.dataclass
class Plan:
    """What the unlocked read chose: admit ``verdict`` (one account) for this attempt."""

    scope: object
    attempt_id: str
    quote: object
    verdict: selection.Verdict
    month: str
    day: str
    ts: str
    now: object
    host: str
    client: str | None = None
    llm_response_id: str | None = None
    ahead_nusd: int = 0
    bound: str | None = None  # the account the scope is bound to, as read (None: a new binding)
    moving: bool = False  # a new conversation moving on from ``bound`` (docs/architecture.md "Failover")
    old_binding: object = None  # the binding row it moves from, as read
    waiter: str | None = None  # a waiter row of this caller to delete with the admission
    stamp: str = ""
    process: tuple = (None, None)  # (pid, start token) of the reserving process (llm_accounts.liveness)


def limit_sql(account, client, quote, ahead_nusd, params):
    """``selection.limits`` of this attempt over SQL: every limit's ``fits()``, joined with AND."""
    f = selection.Facts(name=account.name, settled_nusd=Sql(SETTLED, params), open_nusd=Sql(OPEN, params),
                        adjusted_nusd=Sql(ADJUSTED, params))
    found = selection.limits(
        account, f, Sql("m.budget_nusd", params), Sql.of(quote.ceiling_nusd, params), client,
        day_totals=(Sql(DAY_SETTLED, params), Sql(DAY_OPEN, params)),
        client_totals=tuple(Sql(text, params) for text in CLIENT),
        ahead=(Sql.of(ahead_nusd, params), 0),
        ceiling_tokens=getattr(quote, "ceiling_tokens", None),
        client_token_totals=tuple(Sql(text, params) for text in CLIENT_TOKENS),
    )
    figures = ("spent", "open", "limit", "ceiling", "ahead")
    checks = [
        dataclasses.replace(lim, **{name: Sql.of(getattr(lim, name), params) for name in figures}).fits().text
        for lim in found
    ]
    return " AND ".join(checks)


def _probe_free(on_host):
    """No other attempt holds the half-open slot of a failing row (``health.probe_outstanding``,
    ``reads._probe_sql``): none admitted since the dwell's end, without an outcome, within its
    lease. The row is the one read (its stamp is re-checked too)."""
    row, host = ("hh", " AND p.host = :host") if on_host else ("h", "")
    return f"""NOT EXISTS (SELECT 1 FROM attempt p WHERE p.state = 'open' AND p.outcome IS NULL
        AND p.provider = m.provider AND p.account = m.name{host}
        AND p.created_at >= COALESCE({row}.cooldown_until, {row}.last_failure_at) AND p.created_at > :lease_start)"""


def condition(plan, params):
    """The re-check: the attempt is inserted only where this holds for the locked account."""
    v = plan.verdict
    account = v.account
    params.update(budget=account.budget_nusd, key_env=account.key_env, stamp=plan.stamp)
    parts = [
        "a.block_reason IS NULL",
        # The period's budget and key, fixed by its first attempt (selection.period_conflict).
        "m.budget_nusd = :budget AND m.key_env = :key_env",
        # An admission whose credit period ended before its write is read again, in the new one.
        "NOT EXISTS (SELECT 1 FROM month n WHERE n.provider = m.provider AND n.month_utc > m.month_utc)",
        f"({STAMP_SQL}) = :stamp",
        limit_sql(account, plan.client, plan.quote, plan.ahead_nusd, params),
    ]
    f = v.facts
    rows = ((health.shared(f.record), False), (f.host_record, True))
    failing = [(record, on_host) for record, on_host in rows if record is not None and record.state == "failing"]
    if failing:
        params["lease_start"] = clock.isoformat(plan.now - health.PROBE_LEASE)
        parts.extend(_probe_free(on_host) for _, on_host in failing)
    # One binding per conversation: a new one only where none is; a bound one still where it was.
    binding = "SELECT 1 FROM binding b WHERE b.scope_kind = :scope_kind AND b.scope_id = :scope_id AND b.provider = m.provider"
    if plan.bound is None:
        parts.append(f"NOT EXISTS ({binding})")
    else:
        params["bound"] = plan.bound
        parts.append(f"EXISTS ({binding} AND b.account = :bound)")
    return " AND ".join(f"({part})" for part in parts)


def _max_searches(quote):
    """The most web searches the quote allows (0 without a web search tool), or None when the
    quote does not say (a quote built by hand in a test or a notebook)."""
    uses = getattr(quote, "tool_uses", None)
    if uses is None or getattr(quote, "max_output", None) is None:
        return None
    return uses.max_uses.get("web_search_requests") or 0


def insert_sql(plan, params):
    """``INSERT INTO attempt ... SELECT ... WHERE <re-check>``: one row, or none."""
    quote = plan.quote
    params.update(
        id=plan.attempt_id, scope_kind=plan.scope.kind, scope_id=plan.scope.id, provider=plan.scope.provider,
        account=plan.verdict.account.name, month=plan.month, day=plan.day, ceiling=quote.ceiling_nusd,
        price_revision=quote.price_revision, model=quote.requested_model, digest=quote.request_digest,
        client=plan.client, llm_response_id=plan.llm_response_id, ts=plan.ts,
        ceiling_tokens=getattr(quote, "ceiling_tokens", None), host=plan.host,
        pid=plan.process[0], pid_started=plan.process[1],
        # What a usage report's remainder must fit (docs/architecture.md "Settling from the provider").
        max_output=getattr(quote, "max_output", None), max_web_searches=_max_searches(quote),
    )
    return f"""INSERT INTO attempt (id, scope_kind, scope_id, provider, account, month_utc, day_utc, ceiling_nusd,
           price_revision, requested_model, request_digest, client, llm_response_id, state, created_at,
           ceiling_tokens, host, pid, pid_started, max_output, max_web_searches)
        SELECT :id, :scope_kind, :scope_id, :provider, :account, :month, :day, :ceiling, :price_revision, :model,
           :digest, :client, :llm_response_id, 'open', :ts, :ceiling_tokens, :host, :pid, :pid_started,
           :max_output, :max_web_searches
        FROM month m JOIN account a ON a.provider = m.provider AND a.name = m.name
        LEFT JOIN health h ON h.provider = m.provider AND h.account = m.name
        LEFT JOIN host_health hh ON hh.provider = m.provider AND hh.account = m.name AND hh.host = :host
        LEFT JOIN model_health mh ON mh.provider = m.provider AND mh.account = m.name AND mh.model = :model
        LEFT JOIN month_client mc ON mc.month_utc = m.month_utc AND mc.provider = m.provider
            AND mc.account = m.name AND mc.client = :client
        WHERE m.provider = :provider AND m.name = :account AND m.month_utc = :month AND {condition(plan, params)}"""


_IF_ADMITTED = "EXISTS (SELECT 1 FROM attempt WHERE id = :id)"


def admit(conn, backend, plan):
    """Begin, lock and write ``plan``, short of the commit. Returns the attempt's INSERT cursor:
    after the commit, one row if the re-check admitted it, none if another writer changed the
    account since the read. Nothing here reads before it writes, so on PostgreSQL every statement
    is held and sent with the COMMIT, as one message (``postgres.Connection``)."""
    v, provider = plan.verdict, plan.scope.provider
    account, f, name = v.account, v.facts, v.account.name
    daily = getattr(account, "daily_budget_nusd", None)
    params = {}
    insert = insert_sql(plan, params)
    backend.begin_admission(conn, provider, name, None if f.month_row else account.key_env)
    settings = (account.key_env, account.rank, account.weight)
    if not f.in_ledger or (f.key_env, f.rank, f.weight) != settings or f.removed_at is not None:
        conn.execute(
            """INSERT INTO account (provider, name, key_env, rank, weight, created_at) VALUES (?, ?, ?, ?, ?, ?)
               ON CONFLICT (provider, name) DO UPDATE SET key_env = excluded.key_env, rank = excluded.rank,
               weight = excluded.weight, removed_at = NULL""",
            (provider, name, *settings, plan.ts),
        )
    if not f.month_row:
        # The period's first attempt fixes its budget and key; a key holds one budget a period
        # (selection.period_conflict): the key's lock is held, so this sees any other holder.
        conn.execute(
            """INSERT INTO month (provider, name, month_utc, budget_nusd, daily_budget_nusd, key_env, created_at,
                 settled_nusd, open_nusd, day_utc, day_settled_nusd, day_open_nusd)
               SELECT :provider, :name, :month, :budget, :daily, :key_env, :ts, 0, 0, :day, 0, 0
               WHERE NOT EXISTS (SELECT 1 FROM month o WHERE o.provider = :provider AND o.month_utc = :month
                 AND o.key_env = :key_env AND o.name <> :name)
               ON CONFLICT (provider, name, month_utc) DO NOTHING""",
            {"provider": provider, "name": name, "month": plan.month, "budget": account.budget_nusd,
             "daily": daily, "key_env": account.key_env, "ts": plan.ts, "day": plan.day},
        )
    cursor = conn.execute(insert, params)
    # The month's running totals, and the daily budget in force at the latest admission.
    conn.execute(
        f"""UPDATE month SET open_nusd = open_nusd + :ceiling, daily_budget_nusd = :daily,
             day_open_nusd = CASE WHEN day_utc = :day THEN day_open_nusd + :ceiling
               WHEN day_utc IS NULL OR day_utc < :day THEN :ceiling ELSE day_open_nusd END,
             day_settled_nusd = CASE WHEN day_utc IS NULL OR day_utc < :day THEN 0 ELSE day_settled_nusd END,
             day_utc = CASE WHEN day_utc IS NULL OR day_utc < :day THEN :day ELSE day_utc END
           WHERE provider = :provider AND name = :name AND month_utc = :month AND {_IF_ADMITTED}""",
        {"ceiling": plan.quote.ceiling_nusd, "daily": daily, "day": plan.day, "provider": provider, "name": name,
         "month": plan.month, "id": plan.attempt_id},
    )
    scope = {"kind": plan.scope.kind, "scope": plan.scope.id, "provider": provider, "name": name,
             "warm": v.warm, "ts": plan.ts, "id": plan.attempt_id}
    if plan.moving:
        old = plan.old_binding
        if old is not None and old["warm"] is not None and selection.parse_time(old["created_at"]) is not None:
            month = clock.credit_month(selection.parse_time(old["created_at"]))
            _count_bound(conn, month, provider, old["account"], old["warm"], -1, plan.attempt_id)
        _count_bound(conn, plan.month, provider, name, v.warm, 1, plan.attempt_id)
        conn.execute(
            f"""UPDATE binding SET account = :name, warm = :warm
                WHERE scope_kind = :kind AND scope_id = :scope AND provider = :provider AND {_IF_ADMITTED}""",
            scope,
        )
    elif plan.bound is None:
        conn.execute(
            f"""INSERT INTO binding (scope_kind, scope_id, provider, account, created_at, warm)
                SELECT :kind, :scope, :provider, :name, :ts, :warm WHERE {_IF_ADMITTED}""",
            scope,
        )
        _count_bound(conn, plan.month, provider, name, v.warm, 1, plan.attempt_id)
    if plan.waiter is not None:
        conn.execute(f"DELETE FROM waiter WHERE id = :waiter AND {_IF_ADMITTED}",
                     {"waiter": plan.waiter, "id": plan.attempt_id})
    return cursor


def _count_bound(conn, month, provider, name, warm, delta, attempt_id):
    """Count a new conversation that bound warm or cold in ``warm_month`` (none without a one-hour
    prefix), with the attempt only."""
    if warm is None:
        return
    column = "bound_warm" if warm else "bound_cold"
    conn.execute(
        f"""INSERT INTO warm_month (month_utc, provider, account, {column}) SELECT :month, :provider, :name, :delta
            WHERE {_IF_ADMITTED}
            ON CONFLICT (month_utc, provider, account) DO UPDATE SET {column} = warm_month.{column} + excluded.{column}""",
        {"month": month, "provider": provider, "name": name, "delta": delta, "id": attempt_id},
    )

