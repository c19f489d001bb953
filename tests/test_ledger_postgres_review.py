"""Review of the PostgreSQL write path (docs/architecture.md "Ledger on PostgreSQL"): points where
the held messages, the session's prepared statements or the guarded settlement were found to
break a promise, each held by a test that failed before its fix."""

import datetime as dt

import psycopg
import pytest

from llm_accounts.declarations import Account
from llm_accounts.ledger import Complete, Ledger, Scope
from llm_accounts.ledger import postgres
from llm_accounts.pricing.prices import Quote

MODEL = "claude-sonnet-4-5-20250929"
NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)
WORK = Account("work", "WORK_KEY", 10**9)
QUOTE = Quote(MODEL, 1_000_000, "2026-11-01", "ab" * 32)
USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 0}


def prepared_in(ledger):
    return ledger._conn.raw.execute(
        "SELECT count(*) FROM pg_prepared_statements WHERE name LIKE 'llm\\_accounts\\_%'"
    ).fetchone()[0]


def test_messages_that_fail_past_a_prepare_never_leave_the_session_more_statements_than_its_limit(pg_url, monkeypatch):
    # PREPARE is not undone when its message's transaction fails, so a statement prepared in a
    # message that failed (a guard that found a change, a lock wait past its bound, a conflict)
    # stays on the server, and the next use prepares it again under a new name: the limit must
    # count every name the session gave, or a busy session's server memory grows without bound.
    with Ledger(pg_url) as first:
        first.reserve(Scope("conversation", "c1"), "a1", QUOTE, [WORK], now=NOW)
    monkeypatch.setattr(postgres, "PREPARED_LIMIT", 3)
    with Ledger(pg_url) as ledger:  # a new session: nothing prepared yet
        for _ in range(6):
            ledger._backend.begin(ledger._conn, True)
            ledger._backend.lock_account(ledger._conn, "anthropic", "work")
            ledger._conn.execute(  # refused by the table's CHECK: the whole message fails
                "UPDATE attempt SET ceiling_nusd = ? WHERE id = ?", (-1, "a1")
            )
            with pytest.raises(psycopg.errors.CheckViolation):
                ledger._backend.commit(ledger._conn)
            ledger._backend.rollback(ledger._conn)
        assert prepared_in(ledger) <= 3
        ledger.reserve(Scope("conversation", "c2"), "a2", QUOTE, [WORK], now=NOW)  # still works, inline
        assert prepared_in(ledger) <= 3
        assert ledger.attempt_count(account="work") == 2


def test_a_rolled_back_transaction_does_not_cost_the_session_its_prepared_statements(pg_url):
    # psycopg prepares a query it runs often (the admission's read) and, on seeing a ROLLBACK,
    # sends DEALLOCATE ALL, which drops this session's own statements too: the next write then
    # finds them gone, as through a pooler, and the session would never prepare again.
    with Ledger(pg_url) as first:
        first.reserve(Scope("conversation", "c0"), "a0", QUOTE, [WORK], now=NOW)
    with Ledger(pg_url) as ledger:
        for n in range(1, 7):  # past psycopg's prepare_threshold (5)
            ledger.reserve(Scope("conversation", f"c{n}"), f"a{n}", QUOTE, [WORK], now=NOW)
        ledger._backend.begin(ledger._conn, False)  # a read transaction that ends in an error
        ledger._conn.execute("SELECT 1")
        ledger._backend.rollback(ledger._conn)
        ledger.reserve(Scope("conversation", "c7"), "a7", QUOTE, [WORK], now=NOW)
        assert ledger._conn._prepare
        assert prepared_in(ledger) > 0
        assert ledger.attempt_count(account="work") == 8


def test_a_session_whose_server_lost_every_prepared_statement_keeps_admitting_and_settling(pg_url):
    # A pooler in transaction mode loses psycopg's own prepared statements as well as the
    # session's: psycopg prepares a read it runs often (the admission's, the settlement's), and
    # its EXECUTE then fails with 26000. That is the same loss, and is met the same way: the read
    # is sent again unprepared and the session prepares nothing more, instead of every admission
    # and settlement being ledger_unavailable until the process ends.
    with Ledger(pg_url) as ledger:
        for n in range(6):  # past psycopg's prepare_threshold (5)
            ledger.reserve(Scope("conversation", f"c{n}"), f"a{n}", QUOTE, [WORK], now=NOW)
            ledger.settle(f"a{n}", Complete(5, USAGE, MODEL), now=NOW)
        ledger._conn.raw.pgconn.exec_(b"DEALLOCATE ALL")  # as another server connection has none
        ledger.reserve(Scope("conversation", "c6"), "a6", QUOTE, [WORK], now=NOW)
        assert ledger.settle("a6", Complete(5, USAGE, MODEL), now=NOW) == "settled"
        assert ledger.attempt_count(account="work") == 7


def test_a_column_another_build_adds_does_not_stop_a_session_that_prepared_its_statements(pg_url):
    # A newer build migrating the schema on open adds a column: a statement this session (or
    # psycopg) prepared over ``SELECT t.*`` now changes its result type (SQLSTATE 0A000). The
    # message failed whole, so it is sent again unprepared, and the settlement goes in.
    model = "claude-sonnet-4-5-20250929"
    now = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)
    work, quote = Account("work", "WORK_KEY", 10**12), Quote(model, 1_000, "2026-11-01", "ab" * 32)
    usage = {"input_tokens": 1, "output_tokens": 1, "cache_read_input_tokens": 0}
    with Ledger(pg_url) as ledger:
        for i in range(8):  # past psycopg's prepare threshold (5) for the reads too
            ledger.reserve(Scope("conversation", f"c{i}"), f"a{i}", quote, [work], now=now)
            ledger.settle(f"a{i}", Complete(10, usage, model), now=now)
        ledger.reserve(Scope("conversation", "c9"), "a9", quote, [work], now=now)
        with psycopg.connect(pg_url, autocommit=True) as other:
            other.execute("ALTER TABLE attempt ADD COLUMN later_build text")
        assert ledger.settle("a9", Complete(10, usage, model), now=now) == "settled"
        ledger.reserve(Scope("conversation", "c10"), "a10", quote, [work], now=now)
        assert ledger.attempt_count(state="open") == 1
