"""docs/security.md says what the code does: the log line httpx writes, and the ledger's file
modes (checked against a real request and a real ledger)."""

import logging
import os
import pathlib
import re
import sqlite3
import stat

from llm_accounts.ledger import Ledger
from llm_accounts.wire import transport

SECURITY = (pathlib.Path(__file__).resolve().parent.parent / "docs" / "security.md").read_text()


def test_the_httpx_line_in_the_logging_table_is_the_one_logged(standin, canary_key, caplog):
    caplog.set_level(logging.INFO, logger="httpx")
    with transport.client() as client:
        client.post(
            standin.base_url + "/v1/messages",
            headers={"x-api-key": canary_key, "anthropic-version": "2023-06-01"},
            json={"model": "claude-haiku-4-5", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
        )
    [logged] = [record.getMessage() for record in caplog.records if record.name == "httpx"]
    [row] = [line for line in SECURITY.splitlines() if line.startswith("| `httpx` |")]
    documented = re.search(r"`(HTTP Request: [^`]*)`", row).group(1)
    assert documented.replace("<base URL>", standin.base_url) == logged


def test_a_new_ledger_and_its_write_ahead_log_are_user_only_and_an_existing_directory_keeps_its_mode(tmp_path):
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o755)
    os.chmod(folder, 0o755)
    path = folder / "ledger.db"
    with Ledger(path):
        writer = sqlite3.connect(path)
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("CREATE TABLE scratch (x)")  # a write transaction writes to the log
        try:
            names = ("ledger.db", "ledger.db-wal", "ledger.db-shm")
            modes = {name: stat.S_IMODE(os.stat(folder / name).st_mode) for name in names}
        finally:
            writer.rollback()
            writer.close()
    assert modes == {"ledger.db": 0o600, "ledger.db-wal": 0o600, "ledger.db-shm": 0o600}
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o755
    assert "an existing directory keeps its mode" in " ".join(SECURITY.split())
