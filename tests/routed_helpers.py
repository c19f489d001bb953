"""What routed-prompt tests share: llm's CLI in-process, the ledger's attempt rows, and waits
recorded instead of slept."""

import datetime as dt
import signal
import sqlite3
import subprocess
import sys
import types

from click.testing import CliRunner
from llm.cli import cli


def llm_cli(*args):
    """Run ``llm ARGS`` in this process; exceptions llm lets through fail the test."""
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def llm_ok(*args):
    """Run ``llm ARGS`` in this process; a non-zero exit fails the test with its output."""
    result = llm_cli(*args)
    assert result.exit_code == 0, result.output
    return result


def sent(standin):
    """The body of the last request the stand-in received."""
    return standin.requests[-1]["body"]


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
    import time

    from llm_accounts import clock, routing

    now, slept = [start], []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += dt.timedelta(seconds=seconds)

    monkeypatch.setattr(clock, "now", lambda: now[0])
    # The sync loop's waits are RoutedCall.pause's (and UnroutedCall's) sleeps.
    monkeypatch.setattr(routing, "time", types.SimpleNamespace(sleep=sleep, monotonic=time.monotonic))
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


RESERVE_THEN_HANG = """
import datetime as dt, sys, time
from llm_accounts.declarations import Account
from llm_accounts.ledger import Ledger, Scope
from llm_accounts.pricing.prices import Quote
location, host, now, attempt_id, ceiling, budget = sys.argv[1:]
ledger = Ledger(location, host=host)
ledger.reserve(Scope("conversation", attempt_id), attempt_id, Quote("claude-haiku-4-5", int(ceiling), "r", "ab" * 32),
               [Account("alpha", "ALPHA_KEY", int(budget))], now=dt.datetime.fromisoformat(now))
print("reserved", flush=True)
time.sleep(120)
"""


def killed_after_reserving(now, location, attempt_id, ceiling, budget, host=None):
    """A real process reserves ``attempt_id`` on account alpha (``ALPHA_KEY``, ``budget``) at
    instant ``now``, then is killed with SIGKILL before it records any outcome, as an OOM kill or
    a closed terminal would leave it; returns its pid."""
    from llm_accounts.ledger import core

    child = subprocess.Popen(
        [sys.executable, "-c", RESERVE_THEN_HANG, str(location), host or core.this_host(), now.isoformat(),
         attempt_id, str(ceiling), str(budget)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        line = child.stdout.readline()
        assert line.strip() == "reserved", child.stderr.read()
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    return child.pid
