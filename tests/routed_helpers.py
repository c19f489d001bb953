"""What routed-prompt tests share: llm's CLI in-process, the ledger's attempt rows, and waits
recorded instead of slept."""

import datetime as dt
import sqlite3
import types

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


def recorded_waits(monkeypatch, start):
    """The clock starts at ``start`` and each wait the sync loop makes moves it on instead of
    sleeping; returns the list the waits are recorded in, in seconds."""
    from llm_accounts import clock, models

    now, slept = [start], []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += dt.timedelta(seconds=seconds)

    monkeypatch.setattr(clock, "now", lambda: now[0])
    monkeypatch.setattr(models, "time", types.SimpleNamespace(sleep=sleep))
    return slept


def prompt_text(model_id, kind, stream, text="hello"):
    """The text of one prompt through llm's Python API, ``kind`` "sync" or "async"."""
    import asyncio

    import llm

    if kind == "sync":
        return llm.get_model(model_id).prompt(text, stream=stream).text()

    async def run():
        return await llm.get_async_model(model_id).prompt(text, stream=stream).text()

    return asyncio.run(run())
