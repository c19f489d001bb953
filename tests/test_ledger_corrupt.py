"""A corrupt ledger gives one ``ledger_unavailable`` line, never a traceback or SQLite's own
text, for prompts and for every ``llm accounts`` command that opens the ledger. An existing
zero-byte ledger is refused (it may be a truncated ledger); only a missing one is created."""

import json
import os
import sqlite3
import threading

import pytest
from click.testing import CliRunner
from llm.cli import cli

from llm_accounts.errors import AccountsError
from llm_accounts.ledger import SQLITE_MAGIC, Ledger


def _patched_schema(path, sql, *params):
    """A real ledger whose sqlite_master is then rewritten with ``sql`` (writable_schema)."""
    Ledger(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA writable_schema = ON")
    conn.execute(sql, params)
    conn.commit()
    conn.close()


def schema_text_not_utf8(path):
    # Valid SQL, but the index's schema text carries a byte that is not UTF-8.
    _patched_schema(path, "UPDATE sqlite_master SET sql = CAST(sql || X'202f2aff2a2f' AS TEXT) WHERE name = 'attempt_open'")


def schema_name_not_utf8(path):
    # SQLite's own error message then quotes a name that is not UTF-8.
    _patched_schema(
        path,
        "UPDATE sqlite_master SET name = CAST(X'77ff0a78' AS TEXT), sql = 'CREATE INDEX w ON' WHERE name = 'warm_prefix_cert'",
    )


def error_on_several_lines(path):
    # "malformed database schema (heal<newline>th)": SQLite's message spans two lines.
    _patched_schema(
        path, "UPDATE sqlite_master SET name = ?, sql = ? WHERE name = 'health'", "heal\nth", 'CREATE TABLE "heal\nth" (x'
    )


def garbage(path):
    data = os.urandom(8192)
    while data.startswith(SQLITE_MAGIC[:4]):
        data = os.urandom(8192)
    path.write_bytes(data)


def garbage_after_the_header(path):
    Ledger(path).close()
    data = bytearray(path.read_bytes())
    data[100:] = os.urandom(len(data) - 100)
    path.write_bytes(bytes(data))


def zero_bytes(path):
    path.write_bytes(b"")


CORRUPT = [schema_text_not_utf8, schema_name_not_utf8, error_on_several_lines, garbage, garbage_after_the_header, zero_bytes]

COMMANDS = [
    ["status"],
    ["status", "--json"],
    ["attempts"],
    ["attempts", "--open", "--json"],
    ["block", "work"],
    ["unblock", "work"],
    ["reconcile", "a1", "--cost", "0", "--source", "invoice"],
    ["adjust", "work", "--month", "2026-11", "--delta", "1.00", "--source", "invoice"],
    ["rebind", "c1", "work"],
    ["ladder"],
    ["ladder", "--json"],
    ["browse"],
]


@pytest.fixture
def declared(monkeypatch, ledger_path):
    monkeypatch.setenv(
        "ANTHROPIC_ACCOUNTS", json.dumps([{"name": "work", "key_env": "WORK_KEY", "budget_usd": "50.00"}])
    )
    ledger_path.parent.mkdir(mode=0o700)
    return ledger_path


def files(path):
    return {name: (path.parent / name).read_bytes() for name in sorted(os.listdir(path.parent))}


def assert_one_unavailable_line(result, path):
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    assert len(result.output.splitlines()) == 1, result.output
    assert result.output.startswith(f"Error: ledger_unavailable: {path}: ")


@pytest.mark.parametrize("corrupt", CORRUPT)
@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_ledger_command_gives_one_ledger_unavailable_line_on_a_corrupt_ledger(declared, corrupt, command):
    corrupt(declared)
    before = files(declared)
    result = CliRunner().invoke(cli, ["accounts"] + command)
    assert_one_unavailable_line(result, declared)
    assert files(declared) == before  # nothing is reset, replaced or deleted


@pytest.mark.parametrize("corrupt", CORRUPT)
def test_a_prompt_gives_one_ledger_unavailable_line_on_a_corrupt_ledger(declared, corrupt, standin, canary_key, monkeypatch):
    monkeypatch.setenv("WORK_KEY", canary_key)
    corrupt(declared)
    before = files(declared)
    result = CliRunner().invoke(cli, ["--no-log", "-m", "claude-routed", "hi"])
    assert_one_unavailable_line(result, declared)
    assert not standin.requests  # nothing was sent
    assert files(declared) == before


def test_sqlite_text_is_never_repeated(declared):
    error_on_several_lines(declared)
    with pytest.raises(AccountsError) as caught:
        Ledger(declared)
    assert "malformed" not in str(caught.value) and "heal" not in str(caught.value)
    assert str(caught.value) == (
        f"ledger_unavailable: {declared}: SQLite reports it is corrupt (SQLITE_CORRUPT); "
        "the file was left as it is (nothing is ever reset or deleted)"
    )


def test_an_existing_zero_byte_ledger_is_refused_and_named(declared):
    zero_bytes(declared)
    with pytest.raises(AccountsError) as caught:
        Ledger(declared)
    assert caught.value.code == "ledger_unavailable"
    assert str(declared) in caught.value.message
    assert "remove it" in caught.value.message and "LLM_ACCOUNTS_LEDGER" in caught.value.message
    assert declared.read_bytes() == b""


def test_a_missing_ledger_is_created_whole_with_nothing_left_beside_it(declared):
    Ledger(declared).close()
    assert declared.read_bytes().startswith(SQLITE_MAGIC)
    assert os.listdir(declared.parent) == [declared.name]


def test_ledgers_opened_at_once_on_a_missing_path_all_open(declared):
    # No opener may find the file empty while another one is still creating it.
    start, errors = threading.Barrier(16), []

    def open_one():
        start.wait()
        try:
            Ledger(declared).close()
        except AccountsError as error:
            errors.append(error.code)

    threads = [threading.Thread(target=open_one) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    # No temporary file is left; the write-ahead log and its index may stay when two last
    # connections close at once (each sees the other, so neither removes them).
    left = set(os.listdir(declared.parent)) - {declared.name + "-wal", declared.name + "-shm"}
    assert left == {declared.name}


def test_without_hard_links_a_missing_ledger_is_still_created_in_place(declared, monkeypatch):
    from llm_accounts.ledger import sqlite as sqlite_backend  # where a missing ledger is linked into place

    def no_links(source, target):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(sqlite_backend.os, "link", no_links)
    with Ledger(declared) as ledger:
        assert ledger.attempts() == []
    assert declared.read_bytes().startswith(SQLITE_MAGIC)
    assert os.listdir(declared.parent) == [declared.name]
