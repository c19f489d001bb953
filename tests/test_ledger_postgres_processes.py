"""Real processes on one PostgreSQL ledger, each with its own llm user directory: separate
"machines" sharing accounts (docs/architecture.md "Ledger on PostgreSQL").

Each worker is ``python -c WORKER mode url go args``: it opens the ledger itself, says ``ready``,
waits for a go-file so every process starts together, and prints one line per thing it did,
flushed, so the parent knows what was admitted even for a process it kills. Every worker and
test passes the ledger one instant, ``NOW``, so they stay in one credit period whatever the date.
"""

import datetime as dt
import json
import os
import signal
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
import json, os, random, sys, time, uuid
mode, url, go, *rest = sys.argv[1:]

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
    import psycopg
    stop, budget = rest[0], int(rest[1])
    conn = psycopg.connect(url, autocommit=True)
    samples = violations = mismatches = peak = 0
    wait_for_go()
    while not os.path.exists(stop):
        # Per account: every limit is per account (one account, or disjoint groups of machines).
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
        rows = dict((account, (int(settled), int(opened))) for account, settled, opened in conn.execute(
            "SELECT account, COALESCE(SUM(cost_nusd), 0), COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0) "
            "FROM attempt GROUP BY account"
        ))
        kept = dict((name, (int(settled), int(opened))) for name, settled, opened in conn.execute(
            "SELECT name, settled_nusd, open_nusd FROM month"
        ))
        conn.execute("COMMIT")
        samples += 1
        peak = max([peak] + [settled + opened for settled, opened in rows.values()])
        violations += any(settled + opened > budget for settled, opened in rows.values())
        mismatches += {k: v for k, v in kept.items() if v != (0, 0) or k in rows} != rows
    say(json.dumps({"samples": samples, "peak": int(peak), "violations": violations, "mismatches": mismatches}))
    sys.exit(0)

from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete, Ledger, NotSent, Scope, Unknown

ledger = Ledger(url)

if mode == "spend":
    index, budget, ceiling = int(rest[0]), int(rest[1]), int(rest[2])
    accounts, rng = [Account(rest[3] if len(rest) > 3 else "solo", budget)], random.Random(index)
    wait_for_go()
    refusals, deadline = 0, time.time() + 20
    while refusals < 10 and time.time() < deadline:
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
elif mode == "hold_lock":
    # Killed while holding the write lock, inside a transaction that has written a row.
    def held(conn):
        conn.execute("UPDATE account SET rank = rank WHERE provider = 'anthropic'")
        say("holding")
        time.sleep(60)
    ledger._run("hold", held)
elif mode == "probe":
    wait_for_go()
    try:
        reservation = ledger.reserve(Scope("conversation", uuid.uuid4().hex), uuid.uuid4().hex, Quote(1), [Account("solo", 10**9)], now=NOW)
        say("probe" if reservation.probe else "admitted")
    except AccountsError as error:
        say(error.code)
"""


class Machines:
    """Worker processes, each with its own llm user directory, released together."""

    def __init__(self, tmp_path):
        self.tmp_path, self.go, self.processes = tmp_path, tmp_path / "go", []

    def start(self, mode, url, *args):
        user_dir = self.tmp_path / f"machine-{len(self.processes)}"
        user_dir.mkdir()
        env = {**os.environ, "LLM_USER_PATH": str(user_dir), "LLM_ACCOUNTS_LEDGER": url}
        process = subprocess.Popen(
            [sys.executable, "-c", WORKER, mode, url, str(self.go), *map(str, args)], stdout=subprocess.PIPE, text=True, env=env
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
def machines(tmp_path):
    started = Machines(tmp_path)
    yield started
    started.kill_all()


@pytest.fixture
def url(pg_url):
    Ledger(pg_url).close()
    return pg_url


def test_eight_machines_never_admit_past_a_small_budget_and_lose_no_row(tmp_path, url, machines):
    stop = tmp_path / "stop"
    reader = machines.start("reader", url, stop, BUDGET)
    spenders = [machines.start("spend", url, index, BUDGET, CEILING) for index in range(8)]
    machines.release()
    outputs = [machines.finish(spender) for spender in spenders]
    stop.touch()
    sampled = json.loads(machines.finish(reader)[-1])

    admitted, settled = {}, {}
    for lines in outputs:
        for line in lines:
            verb, attempt_id, amount = line.split()
            (admitted if verb == "admitted" else settled)[attempt_id] = int(amount)
    with Ledger(url) as ledger:
        rows = {row["id"]: row for row in ledger.attempts()}
        assert set(rows) == set(admitted)  # every admitted attempt is in the ledger, nothing else is
        assert {i: rows[i]["ceiling_nusd"] for i in admitted} == admitted
        assert {i: rows[i]["cost_nusd"] for i in settled} == settled
        total = sum(r["cost_nusd"] for r in rows.values() if r["state"] == "settled") + sum(
            r["ceiling_nusd"] for r in rows.values() if r["state"] == "open"
        )
        assert ledger.audit() == []
    assert total <= BUDGET
    assert total > BUDGET - CEILING  # the machines really pushed against the cap
    assert len(admitted) > 20
    assert sampled["samples"] > 0
    assert (sampled["violations"], sampled["mismatches"]) == (0, 0)
    assert sampled["peak"] <= BUDGET


def test_eight_machines_through_a_pooler_never_admit_past_a_small_budget(tmp_path, pg_pooled_url, machines):
    # PgBouncer in transaction mode (docs/postgresql.md): eight processes share one server
    # session, each handed it per transaction, running the statements others prepared on it.
    Ledger(pg_pooled_url).close()
    spenders = [machines.start("spend", pg_pooled_url, index, BUDGET, CEILING) for index in range(8)]
    machines.release()
    outputs = [machines.finish(spender) for spender in spenders]
    admitted = {line.split()[1]: int(line.split()[2]) for lines in outputs for line in lines if line.startswith("admitted")}
    with Ledger(pg_pooled_url) as ledger:
        rows = {row["id"]: row for row in ledger.attempts()}
        assert set(rows) == set(admitted)
        total = sum(r["cost_nusd"] for r in rows.values() if r["state"] == "settled") + sum(
            r["ceiling_nusd"] for r in rows.values() if r["state"] == "open"
        )
        assert ledger.audit() == []
    assert BUDGET - CEILING < total <= BUDGET
    assert len(admitted) > 20


def test_two_groups_of_machines_on_disjoint_accounts_interleave_and_never_admit_past_either_budget(tmp_path, url, machines):
    """Admissions serialize per account (docs/architecture.md "Ledger on PostgreSQL"): three
    machines spending on ``left`` and three on ``right`` interleave in the ledger's admission
    order, and neither account's committed state ever exceeds its budget."""
    stop = tmp_path / "stop"
    reader = machines.start("reader", url, stop, BUDGET)
    spenders = [machines.start("spend", url, index, BUDGET, CEILING, "left" if index % 2 else "right") for index in range(6)]
    machines.release()
    for spender in spenders:
        machines.finish(spender)
    stop.touch()
    sampled = json.loads(machines.finish(reader)[-1])
    with Ledger(url) as ledger:
        rows = ledger.attempts(oldest_first=True)
        assert ledger.audit() == []
    order = [row["account"] for row in rows]
    committed = {
        name: sum(r["cost_nusd"] if r["state"] == "settled" else r["ceiling_nusd"] for r in rows if r["account"] == name)
        for name in ("left", "right")
    }
    switches = sum(a != b for a, b in zip(order, order[1:]))
    assert order.count("left") > 10 and order.count("right") > 10
    assert switches >= 4  # each group admitted between two admissions of the other, more than once
    assert sampled["samples"] > 0 and (sampled["violations"], sampled["mismatches"]) == (0, 0)
    assert all(BUDGET - CEILING < total <= BUDGET for total in committed.values())  # each pushed against its cap


def test_a_machine_killed_between_reserve_and_settle_leaves_its_ceiling_open(url, machines):
    process = machines.start("hang", url, CEILING, CEILING)
    assert process.stdout.readline().split() == ["reserved", "doomed-1"]
    process.send_signal(signal.SIGKILL)
    process.wait()
    solo = Account("solo", "KEY_SOLO", CEILING)
    with Ledger(url) as ledger:
        assert [(a["id"], a["ceiling_nusd"]) for a in ledger.open_attempts()] == [("doomed-1", CEILING)]
        with pytest.raises(AccountsError) as caught:
            ledger.reserve(Scope("conversation", "next"), "next-1", Quote(MODEL, 1, "2026-11-01", "ab" * 32), [solo], now=NOW)
        assert caught.value.code == "budget_exhausted"


def test_a_machine_killed_inside_a_write_transaction_releases_the_lock_and_its_writes(url, machines):
    solo = Account("solo", "KEY_SOLO", 10**9)
    quote = Quote(MODEL, 1, "2026-11-01", "ab" * 32)
    with Ledger(url) as ledger:
        ledger.reserve(Scope("conversation", "c0"), "a0", quote, [solo], now=NOW)
    process = machines.start("hold_lock", url)
    assert process.stdout.readline().strip() == "holding"
    process.send_signal(signal.SIGKILL)
    process.wait()
    with Ledger(url) as ledger:  # the server ends the killed session: its lock and transaction go with it
        assert ledger.reserve(Scope("conversation", "c1"), "a1", quote, [solo], now=NOW).account == "solo"
        assert [a["id"] for a in ledger.attempts(oldest_first=True)] == ["a0", "a1"]


def test_one_half_open_probe_is_admitted_across_all_machines(url, machines):
    solo = Account("solo", "KEY_SOLO", 10**9)
    quote = Quote(MODEL, 1, "2026-11-01", "ab" * 32)
    with Ledger(url) as ledger:
        ledger.reserve(Scope("conversation", "c0"), "a0", quote, [solo], now=NOW - dt.timedelta(hours=1))
        ledger._conn.execute(
            """INSERT INTO health (provider, account, state, failure_class, http_status, since, last_failure_at, cooldown_until)
               VALUES ('anthropic', 'solo', 'failing', 'provider_outage', 529, ?, ?, ?)""",
            ((NOW - dt.timedelta(minutes=10)).isoformat(), (NOW - dt.timedelta(minutes=10)).isoformat(),
             (NOW - dt.timedelta(seconds=1)).isoformat()),
        )
    racers = [machines.start("probe", url) for _ in range(6)]
    machines.release()
    results = sorted(machines.finish(racer)[-1] for racer in racers)
    assert results.count("probe") == 1
    assert "admitted" not in results  # the rest are refused while the probe is out
    with Ledger(url) as ledger:
        assert [a["id"] for a in ledger.open_attempts()][:1] == ["a0"]
        assert len(ledger.open_attempts()) == 2  # a0 and the one probe: no refused racer left a row


@pytest.mark.parametrize("through", ["direct", "pooler"])
def test_eight_llm_processes_on_eight_machines_never_admit_past_a_postgresql_budget(request, through, tmp_path):
    """``llm -m claude-routed`` from eight processes, each with its own llm user directory (its own
    accounts.json and keys.json: separate machines), routed through one PostgreSQL ledger on a
    budget with room for two Haiku ceilings at a time: no committed state ever exceeds it, every
    prompt either answered or was refused with budget_exhausted, and every answer is one settled
    attempt the stand-in saw. Connected directly, and through PgBouncer in transaction mode
    (docs/postgresql.md), where a waiting prompt is woken by its fallback instead of LISTEN."""
    pg_url = request.getfixturevalue("pg_url" if through == "direct" else "pg_pooled_url")
    import threading
    import time

    import psycopg

    from conftest import make_key, under_faketime
    from llm_accounts.money import NANO
    from llm_accounts.standin import StandIn

    key = make_key()
    budget = 15 * NANO // 10  # two $0.72 ceilings fit, a third does not
    llm_bin = os.path.join(os.path.dirname(sys.executable), "llm")
    declaration = [{"name": "shared", "key_env": "SHARED_KEY", "budget_usd": "1.50"}]
    violations, samples, stop = [], [], threading.Event()

    def audit():
        with psycopg.connect(pg_url, autocommit=True) as conn:
            while not stop.is_set():
                try:
                    row = conn.execute("SELECT COALESCE(SUM(COALESCE(cost_nusd, ceiling_nusd)), 0) FROM attempt").fetchone()
                except psycopg.errors.UndefinedTable:
                    row = None  # the first process has not created the ledger yet
                if row is not None:
                    samples.append(row[0])
                    if row[0] > budget:
                        violations.append(row[0])
                time.sleep(0.02)

    with StandIn({"keys": [{"label": "shared", "key": key, "behaviour": "slow", "delay": 1.0}]}) as server:
        commands = []
        for machine in range(8):
            home = tmp_path / f"machine-{machine}"
            home.mkdir()
            (home / "keys.json").write_text(json.dumps({"SHARED_KEY": key}))
            (home / "accounts.json").write_text(json.dumps({"accounts": declaration}))
            env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "LLM_ACCOUNTS_", "LLM_USER"))}
            env.update(LLM_USER_PATH=str(home), LLM_ACCOUNTS_LEDGER=pg_url, LLM_ACCOUNTS_BASE_URL=server.base_url,
                       LLM_ACCOUNTS_WAIT="3")  # some wait for room, the rest are refused past it
            argv = [llm_bin, "-m", "claude-routed/claude-haiku-4-5", "-o", "retries", "0", f"Prompt {machine}"]
            commands.append(under_faketime(argv, NOW, env))
        auditor = threading.Thread(target=audit)
        auditor.start()
        try:
            processes = [
                subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
                for argv, env in commands
            ]
            results = [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in processes]
        finally:
            stop.set()
            auditor.join()
        answered = [r for r in server.requests if r["path"] == "/v1/messages" and r["status"] == 200]

    assert samples and not violations
    succeeded = [r for r in results if r[0] == 0]
    refused = [r for r in results if r[0] != 0]
    assert succeeded and len(succeeded) + len(refused) == 8
    # A refused prompt's last line is its error (a "waiting for ..." notice may come first).
    assert all(r[2].strip().splitlines()[-1].startswith("Error: budget_exhausted:") for r in refused), [r[2][-300:] for r in refused]
    with psycopg.connect(pg_url) as conn:
        rows = conn.execute("SELECT state, outcome, request_digest FROM attempt").fetchall()
    assert len(rows) == len(succeeded) == len(answered)
    assert all((state, outcome) == ("settled", "complete") for state, outcome, _ in rows)
    for _, _, stderr in results:
        assert key[10:30] not in stderr
