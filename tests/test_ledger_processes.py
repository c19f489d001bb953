"""Real processes on one ledger file (ADR-0126 D4; issue 4 "Done when").

Each worker is ``python -c WORKER mode args``: it opens the ledger itself, says ``ready``, waits
for a go-file so every process starts together, and prints one line per thing it did, flushed,
so the parent knows what was admitted even for a process it kills. The workers and the tests
pass the ledger one instant, ``NOW``, so they all reserve, settle and read in one credit period
whatever the date.
"""

import datetime as dt
import json
import signal
import sqlite3
import subprocess
import sys

import pytest

from llm_accounts.declarations import Account
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Ledger, Scope
from llm_accounts.pricing.prices import Quote

MODEL = "claude-sonnet-4-5-20250929"
CEILING = 1_000_000
BUDGET = 20 * CEILING
NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)

WORKER = f"""
import datetime
NOW = datetime.datetime.fromisoformat({NOW.isoformat()!r})
""" + r"""
import json, os, random, sqlite3, sys, time, uuid
mode, path, go, *rest = sys.argv[1:]

class Account:
    def __init__(self, name, budget):
        self.name, self.key_env, self.budget_nusd = name, "KEY_" + name.upper(), budget
        self.daily_budget_nusd, self.rank, self.weight, self.models = None, 0, 1, None

class Quote:
    def __init__(self, ceiling):
        self.requested_model, self.ceiling_nusd = "claude-sonnet-4-5-20250929", ceiling
        self.price_revision, self.request_digest, self.cert = "2026-11-01", "ab" * 32, None

def say(*words):
    print(*words, flush=True)

def wait_for_go():
    say("ready")
    while not os.path.exists(go):
        time.sleep(0.001)

if mode == "reader":
    stop, budget = rest[0], int(rest[1])
    conn = sqlite3.connect(path, timeout=5, isolation_level=None)
    samples = violations = mismatches = 0
    peak = 0
    wait_for_go()
    while not os.path.exists(stop):
        conn.execute("BEGIN")
        settled, opened = conn.execute(
            "SELECT COALESCE(SUM(cost_nusd), 0), COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0) FROM attempt"
        ).fetchone()
        kept = conn.execute("SELECT COALESCE(SUM(settled_nusd), 0), COALESCE(SUM(open_nusd), 0) FROM month").fetchone()
        conn.execute("COMMIT")
        samples += 1
        peak = max(peak, settled + opened)
        violations += settled + opened > budget
        mismatches += tuple(kept) != (settled, opened)
    say(json.dumps({"samples": samples, "peak": peak, "violations": violations, "mismatches": mismatches}))
    sys.exit(0)

from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete, Ledger, NotSent, Scope, Unknown

ledger = Ledger(path)

if mode == "spend":
    index, budget, ceiling = int(rest[0]), int(rest[1]), int(rest[2])
    accounts, rng = [Account("solo", budget)], random.Random(index)
    wait_for_go()
    refusals, deadline = 0, time.time() + 20
    while refusals < 15 and time.time() < deadline:
        attempt_id = uuid.uuid4().hex
        try:
            reservation = ledger.reserve(Scope("conversation", f"w{index}"), attempt_id, Quote(rng.randint(ceiling // 2, ceiling)), accounts, now=NOW)
        except AccountsError as error:
            assert error.code == "budget_exhausted", error.code
            refusals += 1
            continue
        refusals = 0
        say("admitted", attempt_id, reservation.ceiling_nusd)
        roll = rng.random()
        if roll < 0.6:
            cost = rng.randint(0, reservation.ceiling_nusd)
            ledger.settle(attempt_id, Complete(cost, {"input_tokens": 1}, "claude-sonnet-4-5-20250929"), now=NOW)
            say("settled", attempt_id, cost)
        elif roll < 0.8:
            ledger.settle(attempt_id, Unknown("stream_truncated"), now=NOW)
        else:
            ledger.settle(attempt_id, NotSent(), now=NOW)
            say("settled", attempt_id, 0)
elif mode == "hang":
    budget, ceiling = int(rest[0]), int(rest[1])
    reservation = ledger.reserve(Scope("conversation", "doomed"), "doomed-1", Quote(ceiling), [Account("solo", budget)], now=NOW)
    say("reserved", reservation.attempt_id)
    time.sleep(60)
elif mode == "reserve":
    attempt_id = rest[0]
    wait_for_go()
    try:
        ledger.reserve(Scope("conversation", uuid.uuid4().hex), attempt_id, Quote(1), [Account("solo", 10**9)], now=NOW)
        say("admitted")
    except AccountsError as error:
        say(error.code)
elif mode == "settle":
    attempt_id, cost = rest[0], int(rest[1])
    wait_for_go()
    say(ledger.settle(attempt_id, Complete(cost, {"input_tokens": 7}, "claude-sonnet-4-5-20250929", "req_1"), now=NOW))
"""


class Workers:
    """Start worker processes, release them together, collect what each printed."""

    def __init__(self, tmp_path):
        self.go = tmp_path / "go"
        self.processes = []

    def start(self, mode, path, *args):
        process = subprocess.Popen(
            [sys.executable, "-c", WORKER, mode, str(path), str(self.go), *map(str, args)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.processes.append(process)
        return process

    def release(self):
        for process in self.processes:
            assert process.stdout.readline().strip() == "ready"
        self.go.touch()

    def finish(self, process, timeout=60):
        out, _ = process.communicate(timeout=timeout)
        assert process.returncode == 0, out
        return out.splitlines()

    def kill_all(self):
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture
def workers(tmp_path):
    started = Workers(tmp_path)
    yield started
    started.kill_all()


@pytest.fixture
def path(tmp_path):
    path = tmp_path / "ledger.db"
    Ledger(path).close()
    return path


def test_eight_processes_never_admit_past_a_small_budget_and_lose_no_row(tmp_path, path, workers):
    stop = tmp_path / "stop"
    reader = workers.start("reader", path, stop, BUDGET)
    spenders = [workers.start("spend", path, index, BUDGET, CEILING) for index in range(8)]
    workers.release()
    outputs = [workers.finish(spender) for spender in spenders]
    stop.touch()
    sampled = json.loads(workers.finish(reader)[-1])

    admitted, settled = {}, {}
    for lines in outputs:
        for line in lines:
            verb, attempt_id, amount = line.split()
            (admitted if verb == "admitted" else settled)[attempt_id] = int(amount)
    with Ledger(path) as ledger:
        rows = {row["id"]: row for row in ledger.attempts()}
        assert set(rows) == set(admitted)  # every admitted attempt is in the ledger, nothing else is
        assert {i: rows[i]["ceiling_nusd"] for i in admitted} == admitted
        assert {i: rows[i]["cost_nusd"] for i in settled} == settled
        total = sum(r["cost_nusd"] for r in rows.values() if r["state"] == "settled") + sum(
            r["ceiling_nusd"] for r in rows.values() if r["state"] == "open"
        )
        assert ledger.audit() == []
    assert total <= BUDGET
    assert total > BUDGET - CEILING  # the processes really pushed against the cap
    assert len(admitted) > 20
    assert sampled["samples"] > 0
    assert (sampled["violations"], sampled["mismatches"]) == (0, 0)
    assert sampled["peak"] <= BUDGET


def test_a_process_killed_between_reserve_and_settle_leaves_its_ceiling_open(path, workers):
    process = workers.start("hang", path, CEILING, CEILING)
    assert process.stdout.readline().split() == ["reserved", "doomed-1"]
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL
    solo = Account("solo", "KEY_SOLO", CEILING)
    with Ledger(path) as ledger:
        assert [(a["id"], a["ceiling_nusd"]) for a in ledger.open_attempts()] == [("doomed-1", CEILING)]
        with pytest.raises(AccountsError) as caught:
            ledger.reserve(Scope("conversation", "next"), "next-1", Quote(MODEL, 1, "2026-11-01", "ab" * 32), [solo], now=NOW)
        assert caught.value.code == "budget_exhausted"


def test_processes_racing_with_one_attempt_id_admit_it_once(path, workers):
    racers = [workers.start("reserve", path, "same-id") for _ in range(3)]
    workers.release()
    results = sorted(workers.finish(racer)[-1] for racer in racers)
    assert results == ["admitted", "duplicate_attempt", "duplicate_attempt"]
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT COUNT(*) FROM attempt").fetchone()[0] == 1
    assert conn.execute("SELECT COUNT(*) FROM binding").fetchone()[0] == 1


def test_processes_settling_one_attempt_identically_settle_it_once(path, workers):
    solo = Account("solo", "KEY_SOLO", 10**9)
    with Ledger(path) as ledger:
        ledger.reserve(Scope("conversation", "c1"), "shared", Quote(MODEL, CEILING, "2026-11-01", "ab" * 32), [solo], now=NOW)
    settlers = [workers.start("settle", path, "shared", 4321) for _ in range(2)]
    workers.release()
    results = sorted(workers.finish(settler)[-1] for settler in settlers)
    assert results == ["already_settled", "settled"]
    with Ledger(path) as ledger:
        (line,) = ledger.status([solo], now=NOW)
        assert (line.settled_nusd, line.open_ceiling_nusd, line.blocked_reason) == (4321, 0, None)
