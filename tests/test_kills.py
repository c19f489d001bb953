"""Routed ``llm`` processes killed at each point of an attempt (docs/reliability.md "Kills").

tests/test_ledger_processes.py kills a process that called the ledger directly between reserve
and settle; here a real routed prompt (llm's Python API against the stand-in) is stopped at every
point of its attempt. The child holds itself at the named point by wrapping one function in its
own process (the ``HOLD`` script below): nothing of it is in the product. Each child first
completes one prompt, so "no row lost" covers rows written before the kill.

After each kill: the earlier row is intact, the killed attempt keeps its ceiling (the month totals
match the rows), ``llm accounts attempts --open`` lists it, ``llm accounts reconcile`` closes it,
and ``PRAGMA integrity_check`` is ok. A kill inside a transaction before COMMIT leaves nothing of
it. The kill storm is ``bench/load.py --kill-storm SECONDS``.
"""

import datetime as dt
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from llm_accounts import clock
from llm_accounts.ledger import Ledger
from routed_helpers import attempts, llm_cli

NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)  # mid credit period 2026-11
MODEL = "claude-routed/claude-haiku-4-5"

HOLD = r"""
import datetime as dt, sys, time
point, stream, t0, base = sys.argv[1], sys.argv[2] == "stream", float(sys.argv[3]), sys.argv[4]
from llm_accounts import clock, ledger
from llm_accounts.ledger import recheck, settlement
start = dt.datetime.fromisoformat(base)
clock.now = lambda: start + dt.timedelta(seconds=time.time() - t0)
import httpx, llm

armed = False

def say(*words):
    print(*words, flush=True)

def hold_at(cls, name, when, sleep=True):
    original = getattr(cls, name)
    def held(*args, **kwargs):
        if armed and when == "before":
            say("at", point)
            if sleep:
                time.sleep(60)
        result = original(*args, **kwargs)
        if armed and when == "after":
            say("at", point)
            time.sleep(60)
        return result
    setattr(cls, name, held)

HOLDS = {
    "after_reserve": (ledger.Ledger, "reserve", "after"),
    "inside_reserve_before_commit": (recheck, "admit", "after"),  # its write, short of the commit
    "after_response_before_settle": (ledger.Ledger, "settle", "before"),
    "inside_settle_before_commit": (settlement, "settle", "after"),
}
if point in HOLDS:
    hold_at(*HOLDS[point])
elif point == "during_send":
    hold_at(httpx.Client, "send", "before", sleep=False)  # says so, then sends to a slow stand-in

model = llm.get_model("claude-routed/claude-haiku-4-5")
model.prompt("First, completed before the kill", stream=False).text()
say("first done")
sys.stdin.readline()  # the parent has set the stand-in's behaviour for the second prompt
armed = True
response = model.prompt("Second, the one killed", stream=stream, retries=0)
said = False
for chunk in response:  # mid-stream, the kill comes while the product reads the next event
    if point == "mid_stream" and not said:
        say("at", point)
        said = True
say("finished")
"""


@pytest.fixture
def at_now(monkeypatch):
    monkeypatch.setattr(clock, "now", lambda: NOW)


def start_child(point, stream, t0):
    return subprocess.Popen(
        [sys.executable, "-c", HOLD, point, "stream" if stream else "whole", repr(t0), NOW.isoformat()],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ),
    )


def go_on(child):
    child.stdin.write("go\n")
    child.stdin.flush()


def run_to(point, signum, *, stream=False, pause=0.0):
    """Start a child, wait until it says it is at ``point``, send ``signum``, wait for it."""
    child = start_child(point, stream, time.time())
    try:
        assert child.stdout.readline().strip() == "first done"
        go_on(child)
        assert child.stdout.readline().split() == ["at", point]
        time.sleep(pause)
        child.send_signal(signum)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    return child


def ledger_after_kill(ledger_path):
    """What a kill must leave: the month totals match the rows, and the file is sound."""
    conn = sqlite3.connect(ledger_path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    with Ledger(ledger_path) as ledger:
        assert ledger.audit() == []
    return attempts(ledger_path)


def listed_open():
    result = llm_cli("accounts", "attempts", "--open", "--json")
    assert result.exit_code == 0, result.output
    return [row["id"] for row in json.loads(result.output)]


def reconcile_all(ledger_path, ids):
    for attempt_id in ids:
        result = llm_cli("accounts", "reconcile", attempt_id, "--cost", "0", "--source", "test:kill")
        assert result.exit_code == 0, result.output
    assert listed_open() == []
    rows = ledger_after_kill(ledger_path)
    assert all(row["state"] == "settled" for row in rows)


def assert_killed_attempt_kept(ledger_path, outcome=None):
    """``outcome`` is the one expected, or a tuple of the ones that may be recorded."""
    first, killed = ledger_after_kill(ledger_path)
    assert (first["state"], first["outcome"]) == ("settled", "complete")  # no row lost
    outcomes = outcome if isinstance(outcome, tuple) else (outcome,)
    assert (killed["state"], killed["cost_nusd"]) == ("open", None) and killed["outcome"] in outcomes
    assert killed["ceiling_nusd"] > 0
    with Ledger(ledger_path) as ledger:
        (line,) = [line for line in ledger.status(now=NOW) if line.name == killed["account"]]
        assert line.open_ceiling_nusd == killed["ceiling_nusd"]  # the ceiling still counts
    assert listed_open() == [killed["id"]]
    reconcile_all(ledger_path, [killed["id"]])


@pytest.mark.parametrize(
    "point, stream, slow",
    [
        ("after_reserve", False, None),
        ("during_send", False, 30.0),
        ("mid_stream", True, 1.0),
        ("after_response_before_settle", False, None),
        ("inside_settle_before_commit", True, None),
    ],
)
def test_sigkill_leaves_the_attempt_open_with_its_ceiling_until_reconciled(
    accounts, ledger_path, at_now, point, stream, slow
):
    child = start_child(point, stream, time.time())
    try:
        assert child.stdout.readline().strip() == "first done"
        if slow:  # the first prompt is done: from now on the stand-in answers slowly
            for name in ("alpha", "beta"):
                accounts.set_behaviour(name, "slow", delay=slow)
        go_on(child)
        assert child.stdout.readline().split() == ["at", point]
        time.sleep(0.3 if point == "during_send" else 0)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    assert_killed_attempt_kept(ledger_path)


def test_sigkill_inside_the_reserve_transaction_leaves_no_trace_of_it(accounts, ledger_path, at_now):
    child = run_to("inside_reserve_before_commit", signal.SIGKILL)
    assert child.returncode == -signal.SIGKILL
    [first] = ledger_after_kill(ledger_path)  # the hot journal is rolled back on the next open
    assert (first["state"], first["outcome"]) == ("settled", "complete")
    conn = sqlite3.connect(ledger_path)
    assert conn.execute("SELECT COUNT(*) FROM binding").fetchone()[0] == 1  # only the first prompt's
    conn.close()
    assert len(accounts.requests) == 1  # the killed attempt never reached the stand-in
    assert listed_open() == []


# Ctrl-C raises KeyboardInterrupt wherever the child is: inside the product's read of the next
# event (recorded as cancelled) or, when it lands in the consumer's own loop body, outside it, so
# the stream is closed by its consumer going away (stream_closed). Both keep the ceiling open.
@pytest.mark.parametrize(
    "signum, outcome", [(signal.SIGINT, ("cancelled", "stream_closed")), (signal.SIGTERM, None)]
)
def test_sigint_and_sigterm_mid_stream_keep_the_ceiling_open(accounts, ledger_path, at_now, signum, outcome):
    child = start_child("mid_stream", True, time.time())
    try:
        assert child.stdout.readline().strip() == "first done"
        for name in ("alpha", "beta"):
            accounts.set_behaviour(name, "slow", delay=1.0)
        go_on(child)
        assert child.stdout.readline().split() == ["at", "mid_stream"]
        time.sleep(0.3)  # into the product's read of the next event (the stand-in waits 1 s)
        child.send_signal(signum)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode != 0
    assert_killed_attempt_kept(ledger_path, outcome)
