"""What routed-prompt tests share: llm's CLI in-process, and the ledger's attempt rows."""

import sqlite3

from click.testing import CliRunner
from llm.cli import cli


def llm_cli(*args):
    """Run ``llm ARGS`` in this process; exceptions llm lets through fail the test."""
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def attempts(ledger_path):
    """Every attempt row, oldest first; none before the ledger exists."""
    if not ledger_path.exists():
        return []
    db = sqlite3.connect(ledger_path)
    db.row_factory = sqlite3.Row
    try:
        return [dict(row) for row in db.execute("select * from attempt order by created_at, rowid")]
    finally:
        db.close()
