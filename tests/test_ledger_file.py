"""The ledger file: creation, permissions, versions, migration, refusal, locking and timing records
(ADR-0126 D4, Amendments 5 and 6; design.md "Ledger")."""

import asyncio
import concurrent.futures
import datetime as dt
import logging
import os
import sqlite3
import stat
import threading

import pytest

from llm_accounts import ledger as ledger_module
from llm_accounts import schema
from llm_accounts.declarations import Account
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete, Ledger, Scope, open_ledger, run_async
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote

T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)
MODEL = "claude-sonnet-4-5-20250929"
WORK = Account("work", "WORK_KEY", NANO)


def quote(ceiling=100):
    return Quote(MODEL, ceiling, "2026-11-01", "ab" * 32)


def snapshot(path):
    """Every file in the ledger's directory with its bytes: a refusal must leave them all as they were."""
    files = [path.parent / name for name in sorted(os.listdir(path.parent))]
    return {f.name: f.read_bytes() for f in files if f.is_file()}


def refused(path):
    with pytest.raises(AccountsError) as caught:
        Ledger(path)
    assert caught.value.code == "ledger_unavailable"
    return caught.value


# Creation


def test_a_new_ledger_is_user_only_in_a_user_only_directory(tmp_path):
    path = tmp_path / "new-dir" / "ledger.db"
    Ledger(path).close()
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_the_default_ledger_is_the_configured_path(ledger_path):
    with Ledger() as ledger:
        assert ledger.path == ledger_path
    assert ledger_path.exists()


def test_a_new_ledger_has_schema_version_3_and_every_table(tmp_path):
    Ledger(tmp_path / "ledger.db").close()
    conn = sqlite3.connect(tmp_path / "ledger.db")
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 3
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert set(schema.TABLE_NAMES) <= tables


def test_the_ledger_uses_a_write_ahead_log_full_sync_and_foreign_keys(tmp_path):
    with Ledger(tmp_path / "ledger.db") as ledger:
        pragmas = [ledger._conn.execute(f"PRAGMA {name}").fetchone()[0] for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")]
    assert pragmas == ["wal", 2, 1, 5000]


# Refusing files it cannot trust


def test_a_file_that_is_not_sqlite_is_refused_and_left_unchanged(tmp_path):
    path = tmp_path / "ledger.db"
    path.write_bytes(b"this is not a database\n" * 300)
    before = snapshot(path)
    assert "not an SQLite database" in refused(path).message
    assert snapshot(path) == before


def test_a_corrupt_sqlite_file_is_refused_and_left_unchanged(tmp_path):
    path = tmp_path / "ledger.db"
    Ledger(path).close()
    data = bytearray(path.read_bytes())
    data[100:4096] = os.urandom(3996)  # keep the header, wreck the schema page
    path.write_bytes(bytes(data))
    before = snapshot(path)
    refused(path)
    assert snapshot(path) == before


def test_an_unknown_schema_version_is_refused_and_left_unchanged(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger(path) as ledger:
        ledger.reserve(Scope("conversation", "c1"), "a1", quote(), [WORK], now=T0)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 7")
    conn.close()
    before = snapshot(path)
    assert "schema version 7" in refused(path).message
    assert snapshot(path) == before


def test_a_version_1_file_missing_a_base_table_is_refused(tmp_path):
    path = tmp_path / "ledger.db"
    Ledger(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("DROP TABLE binding")
    conn.commit()
    conn.close()
    refused(path)


def test_a_database_that_is_not_a_ledger_is_refused_and_left_unchanged(tmp_path):
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (body TEXT)")
    conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.commit()
    conn.close()
    before = snapshot(path)
    refused(path)
    assert snapshot(path) == before


# Migration


def older_ledger(path):
    """A version-1 ledger as the first build shipped it: the five base tables, no warm_prefix or
    health table, no running-total columns, with history in it."""
    conn = sqlite3.connect(path)
    later = ("warm_prefix", "health", "adjustment_account_month",
             # the totals the spend views read, and the triggers that keep them (a later build)
             "TABLE IF NOT EXISTS day ", "month_outcome", "month_client", "month_model", "month_conversation", "TRIGGER")
    base = [s for s in schema.statements() if not any(n in s for n in later)]
    for statement in base:
        conn.execute(statement)
    conn.executescript(
        """
        INSERT INTO account (provider, name, key_env, created_at) VALUES ('anthropic', 'work', 'WORK_KEY', '2026-11-01T00:00:00+00:00');
        INSERT INTO month (provider, name, month_utc, budget_nusd, key_env, created_at)
            VALUES ('anthropic', 'work', '2026-11', 1000000000, 'WORK_KEY', '2026-11-01T00:00:00+00:00');
        INSERT INTO binding VALUES ('conversation', 'c1', 'anthropic', 'work', '2026-11-01T00:00:00+00:00');
        INSERT INTO attempt (id, scope_kind, scope_id, provider, account, month_utc, day_utc, ceiling_nusd, price_revision,
            requested_model, request_digest, state, outcome, cost_nusd, created_at, settled_at)
            VALUES ('old-settled', 'conversation', 'c1', 'anthropic', 'work', '2026-11', '2026-11-09', 500, 'r', 'm',
                    'abababababababababab', 'settled', 'complete', 200, '2026-11-09T10:00:00+00:00', '2026-11-09T10:00:01+00:00');
        INSERT INTO attempt (id, scope_kind, scope_id, provider, account, month_utc, day_utc, ceiling_nusd, price_revision,
            requested_model, request_digest, state, created_at)
            VALUES ('old-open', 'conversation', 'c1', 'anthropic', 'work', '2026-11', '2026-11-10', 300, 'r', 'm',
                    'abababababababababab', 'open', '2026-11-10T09:00:00+00:00');
        INSERT INTO adjustment (id, kind, provider, account, month_utc, delta_nusd, source_ref, created_at)
            VALUES ('j1', 'correction', 'anthropic', 'work', '2026-11', 50, 'invoice', '2026-11-09T11:00:00+00:00');
        PRAGMA user_version = 1;
        """
    )
    conn.close()


def test_an_older_ledger_gains_the_new_tables_and_columns_and_keeps_every_row(tmp_path):
    path = tmp_path / "ledger.db"
    older_ledger(path)
    with Ledger(path) as ledger:
        tables = {r[0] for r in ledger._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert {"warm_prefix", "health", "day", "month_outcome", "month_client"} <= tables
        day = ledger._conn.execute("SELECT attempts, settled_nusd, open_nusd FROM day ORDER BY day_utc").fetchall()
        assert [tuple(row) for row in day] == [(1, 200, 0), (1, 0, 300)]  # filled from the rows
        for table, column, _ in schema.COLUMNS:
            assert column in {r[1] for r in ledger._conn.execute(f"PRAGMA table_info({table})")}
        assert {a["id"] for a in ledger.attempts()} == {"old-settled", "old-open"}
        (line,) = ledger.status([WORK], now=T0)
        assert (line.settled_nusd, line.adjustments_nusd, line.open_ceiling_nusd, line.today_open_nusd) == (200, 50, 300, 300)
        assert ledger.audit() == []
        assert ledger.reserve(Scope("conversation", "c1"), "new", quote(), [WORK], now=T0).account == "work"


def test_opening_a_current_ledger_writes_nothing(tmp_path):
    path = tmp_path / "ledger.db"
    Ledger(path).close()
    before = snapshot(path)
    Ledger(path).close()
    assert snapshot(path) == before


# Locks and timing


def test_a_lock_held_past_the_bound_is_ledger_busy_and_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_S", 0.2)
    path = tmp_path / "ledger.db"
    ledger = Ledger(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(AccountsError) as caught:
            ledger.reserve(Scope("conversation", "c1"), "a1", quote(), [WORK], now=T0)
    finally:
        holder.execute("ROLLBACK")
    assert caught.value.code == "ledger_busy"
    assert ledger.attempts() == []


def ledger_events(caplog):
    return [r for r in caplog.records if r.name == "llm_accounts.ledger" and hasattr(r, "admission_wait_s")]


def test_each_ledger_call_logs_one_timing_event(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="llm_accounts.ledger")
    ledger = Ledger(tmp_path / "ledger.db")
    caplog.clear()
    ledger.reserve(Scope("conversation", "c1"), "a1", quote(NANO), [WORK], now=T0)
    with pytest.raises(AccountsError):
        ledger.reserve(Scope("conversation", "c1"), "a2", quote(1), [WORK], now=T0)
    events = ledger_events(caplog)
    assert [(e.ledger_op, e.outcome) for e in events] == [("reserve", "committed"), ("reserve", "budget_exhausted")]
    assert all(e.levelno == logging.DEBUG and e.admission_wait_s >= 0 and e.sqlite_wait_s > 0 for e in events)


def test_a_busy_lock_is_logged_as_ledger_busy(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_S", 0.1)
    caplog.set_level(logging.DEBUG, logger="llm_accounts.ledger")
    path = tmp_path / "ledger.db"
    ledger = Ledger(path)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    caplog.clear()
    with pytest.raises(AccountsError):
        ledger.status()
        ledger.block(WORK)
    holder.execute("ROLLBACK")
    assert [(e.ledger_op, e.outcome) for e in ledger_events(caplog)] == [("status", "committed"), ("block", "ledger_busy")]


@pytest.mark.asyncio
async def test_run_async_runs_a_ledger_call_in_a_worker_and_times_its_admission(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="llm_accounts.ledger")
    ledger = Ledger(tmp_path / "ledger.db")
    caplog.clear()
    reservation = await run_async(ledger.reserve, Scope("conversation", "c1"), "a1", quote(), [WORK], now=T0)
    assert reservation.account == "work"
    (event,) = ledger_events(caplog)
    assert (event.ledger_op, event.outcome) == ("reserve", "committed")
    assert event.admission_wait_s > 0 and event.sqlite_wait_s > 0


@pytest.mark.asyncio
async def test_run_async_gives_up_with_ledger_busy_when_no_worker_is_free(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(ledger_module, "ADMISSION_TIMEOUT_S", 0.2)
    caplog.set_level(logging.DEBUG, logger="llm_accounts.ledger")
    ledger = Ledger(tmp_path / "ledger.db")
    loop = asyncio.get_running_loop()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    loop.set_default_executor(pool)
    release = threading.Event()
    blocker = loop.run_in_executor(None, release.wait)
    caplog.clear()
    try:
        with pytest.raises(AccountsError) as caught:
            await run_async(ledger.reserve, Scope("conversation", "c1"), "a1", quote(), [WORK], now=T0)
    finally:
        release.set()
        await blocker
    assert caught.value.code == "ledger_busy"
    await loop.run_in_executor(None, lambda: None)  # the abandoned call has had its turn
    assert ledger.attempts() == []  # and it never ran
    (event,) = [e for e in ledger_events(caplog) if e.ledger_op == "reserve"]
    assert event.outcome == "ledger_busy" and not hasattr(event, "sqlite_wait_s")


@pytest.mark.asyncio
async def test_a_call_whose_worker_started_reports_its_real_outcome(tmp_path, monkeypatch):
    monkeypatch.setattr(ledger_module, "ADMISSION_TIMEOUT_S", 0.5)
    ledger = Ledger(tmp_path / "ledger.db")
    loop = asyncio.get_running_loop()
    loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=1))
    release = threading.Event()
    blocker = loop.run_in_executor(None, release.wait)
    loop.call_later(0.05, release.set)
    reservation = await run_async(ledger.reserve, Scope("conversation", "c1"), "a1", quote(), [WORK], now=T0)
    await blocker
    assert [a["id"] for a in ledger.attempts()] == [reservation.attempt_id]


# Notebooks


def test_a_notebook_reads_spend_and_open_attempts(ledger_path):
    with Ledger() as ledger:
        ledger.reserve(Scope("conversation", "c1"), "a1", quote(7), [WORK], now=T0)
        ledger.reserve(Scope("conversation", "c1"), "a2", quote(9), [WORK], now=T0)
        ledger.settle("a1", Complete(3, {"input_tokens": 1}, MODEL), now=T0)
    notebook = open_ledger()
    assert [(s["account"], s["month_utc"], s["spent_nusd"], s["open_ceiling_nusd"]) for s in notebook.spend()] == [
        ("work", "2026-11", 3, 9)
    ]
    assert [a["id"] for a in notebook.open_attempts()] == ["a2"]
    db = notebook.db
    assert db["attempt"].count == 2
    with pytest.raises(sqlite3.OperationalError):
        db["attempt"].delete_where()
