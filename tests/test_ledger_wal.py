"""The SQLite ledger's write-ahead log (docs/architecture.md "Ledger"): readers never delay an
admission, a ledger left in a rollback journal switches on open keeping every row, the log and its
index are user-only, and read-only readers (Datasette, ``Ledger.db``) still read it."""

import datetime as dt
import os
import sqlite3
import stat

from llm_accounts import ledger as ledger_module
from llm_accounts.declarations import Account
from llm_accounts.ledger import Complete, Ledger, Scope
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote

T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)
MODEL = "claude-sonnet-4-5-20250929"
USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 0}
WORK = Account("work", "WORK_KEY", NANO)


def admit(ledger, n):
    ledger.reserve(Scope("conversation", f"c{n}"), f"a{n}", Quote(MODEL, 10_000, "2026-11-01", "ab" * 32), [WORK], now=T0)
    ledger.settle(f"a{n}", Complete(5_000, USAGE, MODEL, f"req_{n}"), now=T0)


def test_a_reader_holding_a_read_transaction_never_delays_an_admission(tmp_path, monkeypatch):
    # In a rollback journal the reader's SHARED lock keeps the writer's commit waiting past the bound.
    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_S", 0.2)
    path = tmp_path / "ledger.db"
    with Ledger(path) as ledger:
        admit(ledger, 0)
        reader = sqlite3.connect(path, isolation_level=None)
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM attempt").fetchone() == (1,)
        try:
            admit(ledger, 1)
            assert reader.execute("SELECT count(*) FROM attempt").fetchone() == (1,)  # its snapshot
        finally:
            reader.execute("COMMIT")
            reader.close()
        assert [row["state"] for row in ledger.attempts()] == ["settled", "settled"]


def test_a_ledger_in_a_rollback_journal_switches_to_wal_on_open_keeping_every_row(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger(path) as ledger:
        admit(ledger, 0)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode = DELETE").fetchone() == ("delete",)
    conn.close()
    with Ledger(path) as ledger:
        assert ledger._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert [row["id"] for row in ledger.attempts()] == ["a0"]
        assert ledger.audit() == []


def test_the_write_ahead_log_and_its_index_are_user_only(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger(path) as ledger:
        admit(ledger, 0)
        modes = {name: stat.S_IMODE(os.stat(tmp_path / name).st_mode) for name in ("ledger.db-wal", "ledger.db-shm")}
    assert modes == {"ledger.db-wal": 0o600, "ledger.db-shm": 0o600}


def test_a_read_only_reader_reads_the_ledger_after_every_writer_has_closed(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger(path) as ledger:
        admit(ledger, 0)
        db = ledger.db
    assert not (tmp_path / "ledger.db-wal").exists()  # the last writer checkpointed and removed it
    assert db.execute("SELECT id, state FROM attempt").fetchall() == [("a0", "settled")]
    db.conn.close()



def test_a_second_ledger_opened_in_a_process_keeps_the_first_ones_commits_visible(tmp_path):
    """Opening the same file again in one process must not drop the first connection's locks
    (closing any descriptor of a file drops every POSIX lock the process holds on it): otherwise
    another process takes itself for the last connection, removes the write-ahead log still in use
    here, and this process's next commits are lost. Seen as requests sent with no attempt row
    (bench/load.py)."""
    import subprocess
    import sys

    path = tmp_path / "ledger.db"
    other_process = (
        "import sys, sqlite3; conn = sqlite3.connect(sys.argv[1]); "
        "print(conn.execute('SELECT count(*) FROM attempt').fetchone()[0]); conn.close()"
    )
    with Ledger(path) as first:
        admit(first, 0)
        Ledger(path).close()  # a second ledger of the same process: a notice, a worker thread
        subprocess.run([sys.executable, "-c", other_process, str(path)], check=True, capture_output=True)
        admit(first, 1)
        seen = subprocess.run([sys.executable, "-c", other_process, str(path)], check=True, capture_output=True, text=True)
    assert seen.stdout.strip() == "2"
