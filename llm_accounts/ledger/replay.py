"""A settlement on PostgreSQL that holds its account's lock for server time only: read unlocked,
decide, then write under the lock in one message guarded by what was read (docs/architecture.md
"Ledger on PostgreSQL").

``settlement.settle`` holds the rules; it runs here unchanged, over a ``Recorder`` and without a
lock or a transaction: its reads run (each its own statement), its writes are kept, not sent.
Then one message (``postgres.Connection``'s held statements) begins, takes the attempt's
account's lock, checks that every row the rules read is still what they read (``guard_sql``),
replays the writes and commits. A write that changes what a settlement reads (the attempt, the
account's block, its health rows, the model's cooldown, a reconciliation, a warm prefix) holds
that account's lock, so a guard that holds under the lock proves the rules decided on the rows
the writes change, as if they had run under it. If the guard fails, nothing is written and the
settlement reads and decides again, until ``BUSY_TIMEOUT_S`` (``ledger_busy``, the attempt left
as it was).

The month's running totals are the one thing read that the writes do not depend on (they move it
by deltas), and every admission changes them: the guard does not compare them, only the verdict
settlement took from them (a month's total past signed 64 bits).
"""

import logging
import threading
import time

from .. import ledger as package  # BUSY_TIMEOUT_S, as tests set it
from ..money import INT64_MAX
from . import core, settlement, wakeup
from .postgres import PLACEHOLDER, translate

# Each read also returns its row as jsonb text (month totals left out), which the guard compares
# with the row it finds under the lock, exactly: one value to send back, whatever the columns.
GUARD_COLUMN = "llm_accounts_guard"
_ROW_JSON = "(to_jsonb(q) - ARRAY['m_settled', 'm_open', 'm_adjusted']::text[])::text"
GUARD_FAILED = "22012"  # division_by_zero: the guard's way to abort the message's transaction
# ``reads.ATTEMPT_SQL``'s month totals: moved by deltas, compared only through the INT64 verdict.
MONTH_TOTALS = ("m_settled", "m_open", "m_adjusted")


class Recorder:
    """The connection ``settlement.settle`` sees: reads run (no transaction: the guard re-runs
    them together) and are kept with the row they found; writes are kept to be replayed under
    the lock. ``backend`` is None, so the rules take no lock here (``writes.lock_attempt_account``)."""

    backend = None

    def __init__(self, conn):
        self.conn = conn
        self.reads = []  # (sql, params, row or None)
        self.writes = []  # (sql, params)

    def execute(self, sql, params=()):
        if sql.lstrip().upper().startswith("SELECT"):
            rows = self.conn.execute(f"SELECT q.*, {_ROW_JSON} AS {GUARD_COLUMN} FROM ({sql}) q", params).fetchall()
            if len(rows) > 1:
                raise AssertionError("settlement reads one row by key")
            row = rows[0] if rows else None
            self.reads.append((sql, params, row))
            return _Found(row)
        self.writes.append((sql, params))
        return None


class _Found:
    def __init__(self, row):
        self.row = row

    def fetchone(self):
        return self.row


def settle(ledger, host, attempt_id, evidence, fields, cert, hour_after_key, server_tools, now, beyond_bounds):
    """``Ledger.settle`` on PostgreSQL (``settlement.settle``'s results, its rules unchanged)."""
    conn, backend = ledger._conn, ledger._backend
    deadline = time.monotonic() + package.BUSY_TIMEOUT_S
    args = (host, attempt_id, evidence, fields, cert, hour_after_key, server_tools, now, beyond_bounds)
    while True:
        recorder = Recorder(conn)
        with _HeldLog() as said:  # what the rules log is said once their writes commit
            result = _decide(conn, backend, recorder, args)
        if not recorder.writes:
            said.emit()
            return _result(result)
        if _write(conn, backend, recorder, fields):
            said.emit()
            return _result(result)
        if time.monotonic() >= deadline:
            raise core.busy("settle")


class _HeldLog(logging.Filter):
    """Holds back what ``settlement`` logs in this thread while it decides ("account blocked"),
    since a decision the guard turns down is thrown away and made again."""

    def __enter__(self):
        self.records, self.thread = [], threading.get_ident()
        settlement.log.addFilter(self)
        return self

    def __exit__(self, *exc):
        settlement.log.removeFilter(self)

    def filter(self, record):
        if record.thread != self.thread:
            return True
        self.records.append(record)
        return False

    def emit(self):
        for record in self.records:
            settlement.log.handle(record)


def _decide(conn, backend, recorder, args):
    """The rules over ``recorder``, each read its own statement: no transaction is needed, as
    the guard re-runs every read in one statement under the lock, so writes decided on reads
    that disagree with each other or with the rows then are never committed."""
    if conn is None:
        raise backend.unavailable("the ledger is closed")
    with core.mapped(backend):
        return settlement.settle(recorder, *args)


def _result(result):
    if isinstance(result, core.Deferred):
        raise result.error
    return result


def _write(conn, backend, recorder, fields):
    """One message: begin, the account's lock, the guard, the writes, commit. False when the
    guard failed (nothing written)."""
    attempt = recorder.reads[0][2]  # ``reads.ATTEMPT_SQL``, settlement's first read
    guard, params = guard_sql(recorder.reads, fields)
    try:
        backend.begin(conn, True)
        backend.lock_account(conn, attempt["provider"], attempt["account"])
        conn.hold_translated(guard, params)
        for sql, write_params in recorder.writes:
            conn.hold(sql, write_params)
        # Waiting prompts are woken by the commit, at no extra round trip (docs/architecture.md
        # "Waiting for room"); only while any wait.
        wakeup.hold_notify(conn, backend)
        backend.commit(conn)
        return True
    except BaseException as error:
        backend.rollback(conn)
        if isinstance(error, backend.errors):
            if getattr(error, "sqlstate", None) == GUARD_FAILED:
                return False
            raise backend.map(error) from None
        raise


def _named(query, values, prefix):
    """psycopg ``query``/``values`` with every placeholder renamed ``<prefix><name>``, so several
    reads' parameters can share one statement."""
    out, counter = {}, iter(range(len(values) if isinstance(values, (list, tuple)) else 0))

    def rename(match):
        if match.group(0) == "%%":
            return "%%"
        if match.group(1) is None:
            i = next(counter)
            out[f"{prefix}{i}"] = values[i]
            return f"%({prefix}{i})s"
        out[f"{prefix}{match.group(1)}"] = values[match.group(1)]
        return f"%({prefix}{match.group(1)})s"

    return PLACEHOLDER.sub(rename, query), out


def guard_sql(recorded, fields):
    """One statement that fails (division by zero, ``GUARD_FAILED``) unless every read returns
    what it returned unlocked: no row where there was none, the same row (as jsonb, every
    column's value) where there was one, the month totals only through the INT64 verdict."""
    checks, params = [], {}
    for i, (sql, read_params, row) in enumerate(recorded):
        query, values = translate(sql, read_params)
        query, renamed = _named(query, values or (), f"r{i}_")
        params.update(renamed)
        if row is None:
            checks.append(f"NOT EXISTS ({query})")
            continue
        params[f"r{i}_row"] = row[GUARD_COLUMN]
        same = [f"(to_jsonb(q) - ARRAY['m_settled', 'm_open', 'm_adjusted']::text[]) = %(r{i}_row)s::jsonb"]
        if i == 0 and fields is not None and row["m_settled"] is not None:
            # ``settlement.settle``'s check that the cost keeps the month within signed 64 bits.
            total = row["m_settled"] + row["m_open"] + row["m_adjusted"] - row["ceiling_nusd"] + fields["cost_nusd"]
            params.update(r_cost=fields["cost_nusd"], r_max=INT64_MAX, r_over=int(total > INT64_MAX))
            same.append("CASE WHEN q.m_settled::numeric + q.m_open + q.m_adjusted - q.ceiling_nusd + %(r_cost)s::numeric "
                        "> %(r_max)s::numeric THEN 1 ELSE 0 END = %(r_over)s")
        checks.append(f"EXISTS (SELECT 1 FROM ({query}) q WHERE {' AND '.join(same)})")
    return f"SELECT 1 / (CASE WHEN {' AND '.join(checks)} THEN 1 ELSE 0 END)", params
