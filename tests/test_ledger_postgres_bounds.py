"""Every wait on a PostgreSQL ledger is bounded (docs/architecture.md "Ledger on PostgreSQL"): a
table lock held by maintenance (what ``VACUUM FULL``, ``REINDEX`` or a queued ``ALTER TABLE``
takes) makes a prompt or a command fail with ``ledger_busy`` after the busy timeout, one line
naming the ledger with its password masked, instead of hanging; nothing is lost.

A command runs in a thread joined with a generous timeout: the hang detector, never a measure of
how long the refusal took.
"""

import socket
import sqlite3
import threading

import psycopg
import pytest
from click.testing import CliRunner
from llm.cli import cli

from llm_accounts import ledger as ledger_module
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Ledger

MODEL = "claude-routed/claude-haiku-4-5"
HANG = 60  # seconds: far past the 0.3 s bound, only a hang reaches it


@pytest.fixture
def short_bound(monkeypatch):
    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_S", 0.3)


@pytest.fixture
def pg_ledger(pg_url, accounts, monkeypatch, short_bound):
    """The routed prompt's ledger on PostgreSQL, with a password in its URL (the server trusts
    any): it must never be shown."""
    url = pg_url.replace("postgresql://postgres@", "postgresql://postgres:s3cret-word@")
    monkeypatch.setenv("LLM_ACCOUNTS_LEDGER", url)
    return url


def run_llm(*args):
    """``llm ARGS`` in a thread; fails the test if it has not returned within HANG seconds."""
    done = {}

    def run():
        done["result"] = CliRunner().invoke(cli, list(args), catch_exceptions=False)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG)
    assert not thread.is_alive(), f"llm {' '.join(args)} hung behind the table lock"
    return done["result"]


class TableLock:
    """``LOCK TABLE <table> IN ACCESS EXCLUSIVE MODE`` held in another connection until exit."""

    def __init__(self, url, table):
        self.url, self.table = url, table

    def __enter__(self):
        self.conn = psycopg.connect(self.url.replace(":s3cret-word", ""), autocommit=True)
        self.conn.execute("BEGIN")
        self.conn.execute(f"LOCK TABLE {self.table} IN ACCESS EXCLUSIVE MODE")
        return self

    def __exit__(self, *exc):
        self.conn.execute("ROLLBACK")
        self.conn.close()


def busy_line(result):
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output
    assert lines[0].startswith("Error: ledger_busy: "), result.output
    return lines[0]


# Not ledger_meta: an open reads its stamp from the catalog, which no lock on the table holds back.
@pytest.mark.parametrize("table", ["month", "attempt"])
def test_a_routed_prompt_behind_a_table_lock_is_ledger_busy_and_nothing_is_lost(pg_ledger, accounts, table):
    assert run_llm("-m", MODEL, "first").exit_code == 0
    with TableLock(pg_ledger, table):
        line = busy_line(run_llm("-m", MODEL, "refused"))
    assert "postgresql://postgres:***@127.0.0.1" in line and "s3cret-word" not in line
    assert len(accounts.requests) == 1  # nothing was sent
    result = run_llm("-m", MODEL, "second")
    assert result.exit_code == 0, result.output
    with Ledger(pg_ledger) as ledger:
        rows = ledger.attempts()
        assert ledger.audit() == []
    assert len(rows) == 2 and {row["state"] for row in rows} == {"settled"} and len(accounts.requests) == 2


@pytest.mark.parametrize("table", ["attempt"])
def test_status_and_attempts_behind_a_table_lock_are_ledger_busy(pg_ledger, table):
    Ledger(pg_ledger).close()
    with TableLock(pg_ledger, table):
        lines = [busy_line(run_llm("accounts", command)) for command in ("status", "attempts")]
    for line in lines:
        assert "postgresql://postgres:***@127.0.0.1" in line and "s3cret-word" not in line


def test_a_server_that_never_answers_the_connection_is_ledger_unavailable_not_a_hang(short_bound):
    # A listening socket that accepts and never speaks: libpq's connect_timeout is the bound.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        caught = {}

        def run():
            try:
                Ledger(f"postgresql://postgres:s3cret-word@127.0.0.1:{port}/postgres")
            except AccountsError as error:
                caught["error"] = error

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(HANG)
        assert not thread.is_alive(), "opening the ledger hung on a silent server"
    assert caught["error"].code == "ledger_unavailable"
    assert "s3cret-word" not in str(caught["error"])


def test_an_export_behind_a_table_lock_is_ledger_busy_and_writes_no_file(pg_ledger, tmp_path):
    (tmp_path / "exports").mkdir()
    target = tmp_path / "exports" / "copy.db"
    with Ledger(pg_ledger) as ledger:
        with TableLock(pg_ledger, "attempt"):
            with pytest.raises(AccountsError) as caught:
                ledger.export(target)
        assert caught.value.code == "ledger_busy" and "s3cret-word" not in str(caught.value)
        assert list(target.parent.iterdir()) == []
        ledger.export(target)  # after the release
    assert sqlite3.connect(target).execute("SELECT count(*) FROM attempt").fetchone() == (0,)
