"""On PostgreSQL a write holds its account's lock for server time only (docs/architecture.md
"Ledger on PostgreSQL"): an admission reads in one statement with no transaction around it, then
sends its locks and its re-checked insert as one message, which PostgreSQL runs as one implicit
transaction; a settlement reads and decides unlocked, then sends the lock, a guard that what it
read still holds and its writes as one message. A statement with values runs as ``EXECUTE`` of a
statement the session prepared once. Results on both backends are tests/test_ledger.py's; this
file holds PostgreSQL's own.

Round trips are counted on psycopg's cursors: each ``execute`` sends one message and waits for
its answer.
"""

import datetime as dt
import threading

import pytest

from llm_accounts.declarations import Account
from llm_accounts.ledger import Complete, Ledger, Scope, Unknown, settlement
from llm_accounts.pricing.prices import Quote

MODEL = "claude-sonnet-4-5-20250929"
NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)
WORK = Account("work", "WORK_KEY", 10**9)
QUOTE = Quote(MODEL, 1_000_000, "2026-11-01", "ab" * 32)
USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 0}


@pytest.fixture
def ledger(pg_url):
    with Ledger(pg_url) as opened:
        opened.reserve(Scope("conversation", "c1"), "a1", QUOTE, [WORK], now=NOW)
        yield opened


@pytest.fixture
def messages(pg_messages):
    return pg_messages


def takes_the_account_lock(message):
    return "pg_advisory_xact_lock(" in message and "'account:'" in message


def committed_alone(ledger, write):
    """The message took the account's lock, and committed with nothing left open after it."""
    from psycopg.pq import TransactionStatus

    return (takes_the_account_lock(write) and "COMMIT" not in write and "BEGIN" not in write
            and ledger._conn.raw.info.transaction_status == TransactionStatus.IDLE)


def month(ledger):
    return tuple(ledger._conn.execute("SELECT settled_nusd, open_nusd FROM month WHERE name = 'work'").fetchone())


def test_an_admission_is_one_unlocked_read_then_one_message_that_takes_the_lock_and_commits(ledger, pg_url, messages):
    with Ledger(pg_url) as fresh:  # a new session: the write's statements are prepared in it
        del messages[:]
        fresh.reserve(Scope("conversation", "c2"), "a2", QUOTE, [WORK], now=NOW)
        read, write = messages
        assert not takes_the_account_lock(read) and "BEGIN" not in read
        assert committed_alone(fresh, write) and "INSERT INTO attempt" in write
    assert ledger.attempt_count(account="work") == 2  # committed: another session sees it


@pytest.mark.parametrize(
    "evidence, result, totals",
    [(Complete(12_345, USAGE, MODEL), "settled", (12_345, 0)),
     (Unknown("provider_error", "provider_outage", 500), "still_open", (0, 1_000_000))],
    ids=["complete", "unknown"],
)
def test_a_settlement_is_one_unlocked_read_then_one_message_that_takes_the_lock_and_commits(
    ledger, pg_url, messages, evidence, result, totals
):
    with Ledger(pg_url) as fresh:
        del messages[:]
        assert fresh.settle("a1", evidence, now=NOW) == result
        read, write = messages
        assert not takes_the_account_lock(read) and "BEGIN" not in read
        assert committed_alone(fresh, write)
    assert month(ledger) == totals


def test_a_statement_is_sent_inline_once_then_prepared_once_per_session_then_executed(ledger, pg_url, messages):
    # A process that makes one admission (an llm prompt) never pays for preparing its statements.
    with Ledger(pg_url) as fresh:
        del messages[:]
        for n in (2, 3, 4):  # the same shape each time: a new conversation
            fresh.reserve(Scope("conversation", f"c{n}"), f"a{n}", QUOTE, [WORK], now=NOW)
    first, second, third = messages[1], messages[3], messages[5]
    assert "PREPARE" not in first and "EXECUTE" not in first and "INSERT INTO attempt" in first
    assert "PREPARE" in second and "EXECUTE" in second
    assert "PREPARE" not in third and "EXECUTE" in third


def test_a_settlement_overtaken_between_its_read_and_its_write_reads_again(ledger, pg_url, monkeypatch):
    # Another machine settles the same attempt after this one read it open: the guard sees the
    # attempt changed, nothing of the first decision is written, and the second read finds it settled.
    decide, overtaken = settlement.settle, []

    def decide_then_overtaken(conn, *args):
        decided = decide(conn, *args)
        if not overtaken:
            overtaken.append(True)
            with Ledger(pg_url) as other:
                assert other.settle("a1", Complete(12_345, USAGE, MODEL), now=NOW) == "settled"
        return decided

    monkeypatch.setattr(settlement, "settle", decide_then_overtaken)
    assert ledger.settle("a1", Complete(12_345, USAGE, MODEL), now=NOW) == "already_settled"
    assert month(ledger) == (12_345, 0)  # the cost counted once, the ceiling released once


def test_a_session_keeps_working_after_a_message_failed_past_a_prepare(ledger, pg_url, monkeypatch):
    # A message whose statement failed after a PREPARE ahead of it ran: PREPARE is not undone
    # with the transaction, so before its next use the session asks whether the server kept it,
    # and runs it by name rather than preparing a name the server already has (which would fail
    # the message and leave the session inline for good).
    from llm_accounts import ledger as ledger_module

    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_S", 0.3)
    with Ledger(pg_url) as short, Ledger(pg_url) as other:
        other._backend.begin(other._conn, True)
        other._backend.lock_account(other._conn, "anthropic", "work")
        other._conn.send()
        with pytest.raises(Exception) as caught:
            short.settle("a1", Complete(12_345, USAGE, MODEL), now=NOW)
        assert getattr(caught.value, "code", None) == "ledger_busy"
        other._backend.rollback(other._conn)
        assert short.settle("a1", Complete(12_345, USAGE, MODEL), now=NOW) == "settled"
    assert month(ledger) == (12_345, 0)


def test_a_statement_prepared_in_a_message_that_failed_runs_by_name_afterwards(ledger, pg_url, monkeypatch, messages):
    # The PREPARE ahead of the lock that timed out stays on the server though its transaction
    # failed. Preparing that name again would fail the next message whole and leave the session
    # inline for good; the session asks the server first, and runs the statement by name.
    from llm_accounts import ledger as ledger_module

    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_S", 0.3)
    with Ledger(pg_url) as short, Ledger(pg_url) as other:
        short.reserve(Scope("conversation", "c2"), "a2", QUOTE, [WORK], now=NOW)  # sent once, inline
        other._backend.begin(other._conn, True)
        other._backend.lock_account(other._conn, "anthropic", "work")
        other._conn.send()
        del messages[:]
        with pytest.raises(Exception) as caught:  # its second use: prepared, then the lock waits
            short.reserve(Scope("conversation", "c3"), "a3", QUOTE, [WORK], now=NOW)
        assert getattr(caught.value, "code", None) == "ledger_busy" and "PREPARE" in messages[-1]
        other._backend.rollback(other._conn)
        short.reserve(Scope("conversation", "c4"), "a4", QUOTE, [WORK], now=NOW)
        assert short._conn._prepare and "EXECUTE" in messages[-1]
    assert month(ledger) == (0, 3_000_000)


def test_a_session_whose_statements_the_server_lost_sends_its_messages_inline(ledger, messages):
    # What a pooler in transaction mode does (another server connection for each transaction):
    # the statements this session prepared are gone. The message fails whole, is sent again
    # inline, and the session prepares nothing more.
    ledger.reserve(Scope("conversation", "c1b"), "a1b", QUOTE, [WORK], now=NOW)  # prepared at its second use
    raw = ledger._conn.raw
    for (name,) in raw.execute("SELECT name FROM pg_prepared_statements WHERE name LIKE 'llm\\_accounts\\_%'").fetchall():
        raw.execute(f"DEALLOCATE {name}")
    del messages[:]
    ledger.reserve(Scope("conversation", "c2"), "a2", QUOTE, [WORK], now=NOW)
    assert "EXECUTE" in messages[1] and "EXECUTE" not in messages[-1]  # refused, then sent inline
    ledger.reserve(Scope("conversation", "c3"), "a3", QUOTE, [WORK], now=NOW)
    assert not any("EXECUTE" in m or "PREPARE" in m for m in messages[-2:])
    assert month(ledger) == (0, 4_000_000)


def test_a_block_decided_then_overtaken_is_logged_only_by_the_settlement_that_wrote_it(ledger, pg_url, monkeypatch, caplog):
    # The first decision (cost past the ceiling: block the account) is thrown away when another
    # machine settles the attempt first; only the block that was written is said.
    decide, overtaken = settlement.settle, []
    over = Complete(2_000_000, USAGE, MODEL)  # past the 1,000,000 ceiling

    def decide_then_overtaken(conn, *args):
        decided = decide(conn, *args)
        if not overtaken:
            overtaken.append(True)
            other = threading.Thread(target=settle_elsewhere)  # another machine: not this thread
            other.start()
            other.join()
        return decided

    def settle_elsewhere():
        with Ledger(pg_url) as other:
            overtaken.append(other.settle("a1", over, now=NOW))

    monkeypatch.setattr(settlement, "settle", decide_then_overtaken)
    with caplog.at_level("WARNING", logger="llm_accounts.ledger"):
        assert ledger.settle("a1", over, now=NOW) == "already_settled"
    assert overtaken == [True, "settled"]
    assert [r.getMessage() for r in caplog.records].count(
        "attempt cost exceeded its ceiling; account work blocked (ceiling_exceeded)") == 1


def test_opening_a_ledger_whose_schema_is_current_reads_one_stamp_in_one_message(ledger, pg_url, messages):
    # A prompt's process opens the ledger for one admission: the open checks the stamp this build's
    # schema left, not every table, column and index (docs/performance.md "Fleet").
    del messages[:]
    with Ledger(pg_url):
        assert len(messages) == 1 and "ledger_meta" in messages[0]
        assert not any("information_schema" in m or "pg_indexes" in m for m in messages)


def test_a_settlement_writes_each_totals_row_once(ledger):
    # The totals trigger moves the attempt's ceiling into its cost with one update of each row it
    # is counted in; only month_outcome, keyed by state, gives up one row and gains another.
    raw = ledger._conn.raw
    counts = ("SELECT relname, n_tup_ins, n_tup_upd FROM pg_stat_xact_user_tables WHERE relname IN "
              "('day', 'month_outcome', 'month_model', 'month_conversation', 'month_conversation_total')")
    raw.execute("BEGIN")
    try:
        # This session's counts not yet reported include earlier transactions': the difference is the update's.
        before = {name: (ins, upd) for name, ins, upd in raw.execute(counts).fetchall()}
        raw.execute("UPDATE attempt SET state = 'settled', outcome = 'complete', cost_nusd = 5, http_status = 200 "
                    "WHERE id = 'a1'")
        after = {name: (ins, upd) for name, ins, upd in raw.execute(counts).fetchall()}
    finally:
        raw.execute("ROLLBACK")
    written = {name: (ins - before.get(name, (0, 0))[0], upd - before.get(name, (0, 0))[1])
               for name, (ins, upd) in after.items()}
    assert written == {"day": (0, 1), "month_outcome": (1, 1), "month_model": (0, 1),
                       "month_conversation": (0, 1), "month_conversation_total": (0, 1)}


def test_a_write_planned_in_its_message_takes_its_joins_in_the_order_written_for_that_transaction_only(
    ledger, pg_url, messages
):
    # Where the server plans a write's statements (sent inline, or prepared), the planner takes
    # their joins as written instead of searching; a message of prepared statements plans
    # nothing, and the session's own setting (the reports' plans) is left as it was.
    with Ledger(pg_url) as fresh:
        del messages[:]
        for n in (2, 3, 4):
            fresh.reserve(Scope("conversation", f"c{n}"), f"a{n}", QUOTE, [WORK], now=NOW)
        inline, preparing, prepared = messages[1], messages[3], messages[5]
        assert "SET LOCAL join_collapse_limit = 1" in inline and "SET LOCAL join_collapse_limit = 1" in preparing
        assert "join_collapse_limit" not in prepared
        assert fresh._conn.raw.execute("SHOW join_collapse_limit").fetchone()[0] == "8"
    assert ledger.attempt_count(account="work") == 4
