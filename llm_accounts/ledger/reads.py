"""What the ledger knows about an account, read in one statement: the month totals, the
adjustments, the account's health, this machine's host health and the requested model's cooldown,
turned into the records the pure rules take (``selection.Facts``, ``health.Health``).

Admission, settlement, corrections and reports all read through here, so the columns and their
meaning are written once (docs/architecture.md "Ledger", "Failure classes and health"). Nothing
here writes.
"""

import collections.abc
import operator

from .. import clock, health, selection
from . import recheck


def _health_columns(alias):
    """A health row's columns (``health`` or ``host_health``), named ``<alias>_...`` for ``health_from``."""
    return ", ".join(
        f"{alias}.{column} AS {alias}_{name}"
        for column, name in (
            ("state", "state"), ("failure_class", "class"), ("http_status", "status"), ("since", "since"),
            ("last_failure_at", "last_failure_at"), ("last_success_at", "last_success_at"),
            ("cooldown_until", "cooldown_until"), ("probe_attempt_id", "probe"), ("transport_failures", "transport"),
        )
    )


def _probe_sql(alias, account, host=None):
    """When the half-open probe of health row ``alias`` was admitted, or NULL: the newest attempt
    on the account (from ``host``, for a host's row) admitted at or after the row's dwell ended and
    not yet given an outcome (``health.probe_outstanding``). Nothing is written to admit a probe,
    so a probe cycle writes its row once (docs/architecture.md "Failure classes and health").
    Read only for a failing row."""
    from_host = "" if host is None else f" AND p.host = {host}"
    return f"""CASE WHEN {alias}.state = 'failing' THEN (SELECT MAX(p.created_at) FROM attempt p
         WHERE p.state = 'open' AND p.outcome IS NULL AND p.provider = {account}.provider
         AND p.account = {account}.name{from_host}
         AND p.created_at >= COALESCE({alias}.cooldown_until, {alias}.last_failure_at)) END"""


# One attempt with its account's block, month totals, adjustments, health and its host's health,
# for settle and reconcile. Parameters: the attempt id, then this machine's host (for an attempt
# admitted before attempts recorded theirs).
ATTEMPT_SQL = f"""
SELECT t.*, a.block_reason, m.settled_nusd AS m_settled, m.open_nusd AS m_open,
       (SELECT COALESCE(SUM(j.delta_nusd), 0) FROM adjustment j WHERE j.provider = t.provider
         AND j.account = t.account AND j.month_utc = t.month_utc) AS m_adjusted,
       {_health_columns("h")}, {_health_columns("hh")}, COALESCE(t.host, ?2) AS attempt_host,
       mh.since AS mh_since, mh.last_failure_at AS mh_last_failure_at, mh.cooldown_until AS mh_cooldown_until
FROM attempt t
JOIN account a ON a.provider = t.provider AND a.name = t.account
LEFT JOIN month m ON m.provider = t.provider AND m.name = t.account AND m.month_utc = t.month_utc
LEFT JOIN health h ON h.provider = t.provider AND h.account = t.account
LEFT JOIN host_health hh ON hh.provider = t.provider AND hh.account = t.account AND hh.host = COALESCE(t.host, ?2)
LEFT JOIN model_health mh ON mh.provider = t.provider AND mh.account = t.account AND mh.model = t.requested_model
WHERE t.id = ?1
"""

# Each column of a ``_FACTS_SQL`` row, over ``account a`` and the tables ``_FACTS_JOINS`` joins.
_FACTS_COLUMNS = f"""a.name, a.key_env, a.rank, a.weight, a.block_reason, a.blocked_at, a.removed_at,
       CASE WHEN a.block_reason = 'settlement_conflict' THEN (SELECT j.source_ref FROM adjustment j
         WHERE j.provider = a.provider AND j.account = a.name AND j.kind = 'block'
         ORDER BY j.created_at DESC LIMIT 1) END AS block_source,
       m.budget_nusd, m.daily_budget_nusd, m.key_env AS month_key_env,
       m.settled_nusd, m.open_nusd, m.day_utc, m.day_settled_nusd, m.day_open_nusd,
       (SELECT COALESCE(SUM(j.delta_nusd), 0) FROM adjustment j
         WHERE j.provider = a.provider AND j.account = a.name AND j.month_utc = :month) AS adjusted_nusd,
       {_health_columns("h")}, {_probe_sql("h", "a")} AS h_probe_created_at,
       {_health_columns("hh")}, {_probe_sql("hh", "a", ":host")} AS hh_probe_created_at,
       mh.since AS mh_since, mh.last_failure_at AS mh_last_failure_at, mh.cooldown_until AS mh_cooldown_until"""

_FACTS_JOINS = """
LEFT JOIN month m ON m.provider = a.provider AND m.name = a.name AND m.month_utc = :month
LEFT JOIN health h ON h.provider = a.provider AND h.account = a.name
LEFT JOIN host_health hh ON hh.provider = a.provider AND hh.account = a.name AND hh.host = :host
LEFT JOIN model_health mh ON mh.provider = a.provider AND mh.account = a.name AND mh.model = :model"""

_FACTS_SQL = f"""
SELECT {_FACTS_COLUMNS}
FROM account a{_FACTS_JOINS}
WHERE a.provider = :provider
"""


# An admission's read (``admission.choose``): whether the attempt id is taken, the newest credit
# period, the scope's binding, whether anyone waits, and the facts of the accounts it may use, in
# one statement, so one snapshot and, on PostgreSQL, one round trip with no transaction around it
# (the write re-checks every figure it acts on under the account's lock: docs/architecture.md
# "Ledger on PostgreSQL"). A pinned account, or a bound conversation's account when nothing is
# excluded, is the only one read; a new conversation, or one moving on, reads every account. A
# ledger with no account yet still gives one row, its facts columns NULL. The accounts are joined
# to ``head`` directly, not through ``_FACTS_SQL`` as a subquery: SQLite would copy that subquery's
# rows into a table first, which doubled the read's cost at 50 accounts (docs/performance.md
# "Declared accounts").
_ADMISSION_SQL = f"""
WITH head AS (SELECT (SELECT 1 FROM attempt WHERE id = :attempt_id) AS duplicate,
       (SELECT MAX(month_utc) FROM month WHERE provider = :provider) AS newest,
       (SELECT account FROM binding WHERE scope_kind = :scope_kind AND scope_id = :scope_id
         AND provider = :provider) AS bound,
       (SELECT 1 FROM waiter LIMIT 1) AS waiting)
SELECT head.*, {_FACTS_COLUMNS}
FROM head LEFT JOIN account a ON a.provider = :provider
  AND (:every = 1 OR a.name = COALESCE(:pinned, head.bound) OR (:pinned IS NULL AND head.bound IS NULL)){_FACTS_JOINS}
"""


# The same read with only what places an account in a new conversation's order (its month
# budget, settled spend, adjustments and open ceilings): ``Placed`` reads the rest of an account's
# facts when a verdict needs them. Where the reads of one admission share a snapshot (SQLite,
# whose read runs in a transaction), a new conversation over many accounts reads five columns of
# each instead of about forty and the whole facts of the two or three it asks; taking a value out
# of SQLite costs 50 to 120 ns, so the forty cost more than the rest of the admission's read
# (docs/performance.md "Declared accounts").
_PLACES_SQL = _ADMISSION_SQL.replace(_FACTS_COLUMNS, """a.name, m.budget_nusd, m.settled_nusd, m.open_nusd,
       (SELECT COALESCE(SUM(j.delta_nusd), 0) FROM adjustment j
         WHERE j.provider = a.provider AND j.account = a.name AND j.month_utc = :month) AS adjusted_nusd""").replace(
    _FACTS_JOINS, "\nLEFT JOIN month m ON m.provider = a.provider AND m.name = a.name AND m.month_utc = :month")


def admission_facts(conn, scope, attempt_id, month, now, host, model, pinned=None, every=True, placed=False):
    """``(duplicate, newest, bound, waiting, facts)`` for an admission, from one statement
    (``_ADMISSION_SQL``); ``facts`` as ``read_facts(full=False)`` gives them, for every account
    with ``every``, else for the pinned or bound one only (every one for a new conversation).
    With ``placed`` (only where the reads share a snapshot), ``facts`` is a ``Placed``: each
    account's place from ``_PLACES_SQL``, its facts read when asked for."""
    params = {
        "attempt_id": attempt_id, "provider": scope.provider, "scope_kind": scope.kind, "scope_id": scope.id,
        "month": month, "model": model, "host": host, "pinned": pinned, "every": int(every),
    }
    rows = conn.execute(_PLACES_SQL if placed else _ADMISSION_SQL, params).fetchall()
    head = rows[0]
    if placed:
        facts = Placed(conn, params, now, rows)
    else:
        facts = _facts(rows, now, False, model)
    return head["duplicate"], head["newest"], head["bound"], head["waiting"], facts


class Placed(collections.abc.Mapping):
    """``{name: selection.Facts}`` as ``admission_facts`` gives them, reading an account's facts
    (``_FACTS_SQL``, in the admission's snapshot) only when they are looked up; ``place(name)``
    answers from the first read. ``load(names)`` reads several at once."""

    def __init__(self, conn, params, now, rows):
        self._conn, self._params, self._now = conn, params, now
        self._places = {}
        for row in rows:
            name, budget, settled, open_, adjusted = row[4], row[5], row[6], row[7], row[8]
            if name is not None:  # a ledger with no account yet
                self._places[name] = (budget, (settled or 0) + adjusted, open_ or 0)
        self._found = {}

    def place(self, name):
        """``(month budget or None, spent, open ceilings)`` of ``name``, as its ``Facts`` say."""
        return self._places.get(name, (None, 0, 0))

    def load(self, names):
        missing = [name for name in names if name in self._places and name not in self._found]
        if missing:
            named = {f"name{i}": name for i, name in enumerate(missing)}
            sql = f"{_FACTS_SQL} AND a.name IN ({', '.join(':' + key for key in named)})"
            params = {key: self._params[key] for key in ("provider", "month", "model", "host")}
            rows = self._conn.execute(sql, {**params, **named}).fetchall()
            self._found.update(_facts(rows, self._now, False, params["model"]))

    def __getitem__(self, name):
        if name not in self._found:
            if name not in self._places:
                raise KeyError(name)
            self.load([name])
        return self._found[name]

    def __iter__(self):
        return iter(self._places)

    def __len__(self):
        return len(self._places)

    def values(self):
        """Every account's facts, read at once the first time they are iterated (``others`` of a
        verdict is iterated only for an account's first attempt of the period)."""
        return _Values(self)


class _Values:
    def __init__(self, placed):
        self._placed = placed

    def __iter__(self):
        self._placed.load(list(self._placed))
        return (self._placed[name] for name in self._placed)


def load(facts, names):
    """Read the facts of ``names`` at once where ``facts`` reads them when asked (``Placed``)."""
    if isinstance(facts, Placed):
        facts.load(names)


def place(facts, name):
    """``(month budget or None, spent, open ceilings)`` of ``name`` in ``facts`` (a ``Placed`` or
    a dict of ``selection.Facts``)."""
    if isinstance(facts, Placed):
        return facts.place(name)
    f = facts.get(name)
    return (None, 0, 0) if f is None else (f.budget_nusd, f.spent_nusd, f.open_nusd)


def health_from(row, prefix="h_"):
    if row[f"{prefix}state"] is None:
        return None
    return health.Health(
        state=row[f"{prefix}state"],
        failure_class=row[f"{prefix}class"],
        http_status=row[f"{prefix}status"],
        since=selection.parse_time(row[f"{prefix}since"]),
        last_failure_at=selection.parse_time(row[f"{prefix}last_failure_at"]),
        last_success_at=selection.parse_time(row[f"{prefix}last_success_at"]),
        cooldown_until=selection.parse_time(row[f"{prefix}cooldown_until"]),
        probe_attempt_id=row[f"{prefix}probe"],
        transport_failures=row[f"{prefix}transport"] or 0,
    )


def iso(t):
    return None if t is None else clock.isoformat(t)


def model_health_from(row, model):
    """The ``model_health`` columns of ``row`` (prefix ``mh_``) as a record, or ``None``."""
    until = selection.parse_time(row["mh_cooldown_until"])
    if until is None:
        return None
    return health.ModelHealth(
        model=model,
        since=selection.parse_time(row["mh_since"]),
        last_failure_at=selection.parse_time(row["mh_last_failure_at"]),
        cooldown_until=until,
    )


# The columns of a facts row that ``Facts`` takes as they are, in this order.
_PLAIN = ("name", "key_env", "rank", "weight", "block_reason", "blocked_at", "budget_nusd", "daily_budget_nusd",
          "month_key_env", "settled_nusd", "open_nusd", "day_utc", "day_settled_nusd", "day_open_nusd",
          "adjusted_nusd", "removed_at", "block_source")
# The columns of a facts row that ``recheck.STAMPED`` names (``Facts.stamped``).
_STAMP_COLUMNS = tuple(f"{alias}_{name}" for alias, _, name in recheck.STAMPED)


def read_facts(conn, provider, month, now, host, full=True, model=None):
    return _facts(conn.execute(_FACTS_SQL, {"provider": provider, "month": month, "model": model, "host": host}).fetchall(),
                  now, full, model)


def _facts(rows, now, full, model):
    """``{name: selection.Facts}`` of ``_FACTS_SQL`` rows. ``full=False`` (admission) parses only
    the health rows that gate: a failing one, or the model's cooldown.

    The columns are found by position, once per statement: a row looks a column up by name by
    comparing it with each column's name in turn, and a new conversation reads every declared
    account's row (docs/performance.md "Declared accounts")."""
    if not rows:
        return {}
    names = rows[0].keys()
    at = {name: i for i, name in enumerate(names)}
    plain = operator.itemgetter(*(at[column] for column in _PLAIN))
    stamped = operator.itemgetter(*(at[column] for column in _STAMP_COLUMNS))
    h_state, hh_state, mh_until = at["h_state"], at["hh_state"], at["mh_cooldown_until"]
    found = {}
    for row in rows:
        (name, key_env, rank, weight, block_reason, blocked_at, budget, daily, month_key_env, settled, open_, day,
         day_settled, day_open, adjusted, removed_at, block_source) = plain(row)
        if name is None:  # a ledger with no account yet
            continue
        h = hh = model_record = None
        probe_taken = host_probe_taken = False
        gates = row[h_state] == "failing" or row[hh_state] == "failing" or row[mh_until] is not None
        if full or gates:
            named = dict(zip(names, row))
            h = health_from(named) if full or named["h_state"] == "failing" else None
            hh = health_from(named, "hh_") if full or named["hh_state"] == "failing" else None
            probe_taken = health.probe_outstanding(h, selection.parse_time(named["h_probe_created_at"]), now)
            host_probe_taken = health.probe_outstanding(hh, selection.parse_time(named["hh_probe_created_at"]), now)
            model_record = None if model is None else model_health_from(named, model)
        found[name] = selection.Facts(
            name=name, key_env=key_env, rank=rank, weight=weight, block_reason=block_reason, blocked_at=blocked_at,
            block_source=block_source,
            month_row=budget is not None, budget_nusd=budget, daily_budget_nusd=daily, month_key_env=month_key_env,
            settled_nusd=settled or 0, open_nusd=open_ or 0, day_utc=day, day_settled_nusd=day_settled or 0,
            day_open_nusd=day_open or 0, adjusted_nusd=adjusted, removed_at=removed_at, record=h,
            probe_taken=probe_taken, host_record=hh, host_probe_taken=host_probe_taken, in_ledger=True,
            model_record=model_record, stamped=stamped(row),
        )
    return found


def read_health(conn, provider, name):
    row = conn.execute(
        """SELECT state AS h_state, failure_class AS h_class, http_status AS h_status, since AS h_since,
             last_failure_at AS h_last_failure_at, last_success_at AS h_last_success_at,
             cooldown_until AS h_cooldown_until, probe_attempt_id AS h_probe, transport_failures AS h_transport
           FROM health WHERE provider = ? AND account = ?""",
        (provider, name),
    ).fetchone()
    return None if row is None else health_from(row)


def day_totals(conn, provider, f, day):
    if f.day_utc == day:
        return f.day_settled_nusd, f.day_open_nusd
    if f.day_utc is None or f.day_utc < day:
        return 0, 0
    # The clock went back within a month: that day's totals from the day table.
    row = conn.execute(
        "SELECT settled_nusd, open_nusd FROM day WHERE day_utc = ? AND provider = ? AND account = ?",
        (day, provider, f.name),
    ).fetchone()
    return (row[0], row[1]) if row else (0, 0)


def client_totals(conn, provider, account, month, client):
    """Per-client caps (docs/architecture.md "Client caps"): ``(settled costs, open ceilings, settled
    tokens, open token ceilings)`` of ``client``'s attempts on ``account`` in credit period
    ``month``, read from its ``month_client`` row: the attempt triggers keep it in the statement
    that writes an attempt, hence in that attempt's transaction, so admission reads one row
    however long the client's history (summing the attempts grew with it: bench/client_caps.py).
    Adjustments are account-wide and in dollars, so none count here."""
    row = conn.execute(
        """SELECT settled_nusd, open_nusd, tokens, open_tokens FROM month_client
           WHERE month_utc = ? AND provider = ? AND account = ? AND client = ?""",
        (month, provider, account, client),
    ).fetchone()
    return tuple(row) if row is not None else (0, 0, 0, 0)
