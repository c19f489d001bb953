"""Load with faults: many real ``llm`` client processes on one ledger and one stand-in, then
checks that read only the ledger and the stand-in's request log (docs/reliability.md "Load").

    .venv/bin/python bench/load.py [--processes 16] [--requests 12] [--seed 1] [--kill-storm SECONDS]

Each process (bench/load_worker.py) sends routed prompts through llm's Python API, sync and
async, streamed and not, new conversations and continued ones, to the project's stand-in
(``llm_accounts.standin``), started here. Each key of the stand-in follows a seeded script of
faults (ok, slow, 429, 529, 500, credit balance too low, a mid-stream error, a dropped
connection), and the accounts' monthly and daily budgets are small enough to run out midway.
Keys live only in the throwaway llm user directory's ``keys.json``.

With ``--kill-storm SECONDS``, processes are killed at random (SIGKILL, SIGTERM or SIGINT) for
that long and each is replaced by a new one.

Afterwards, from the ledger and the stand-in alone, it checks and prints:

1. commit order: admissions replayed in commit order never put settled + open + adjustments
   above a monthly budget, or a day's settled + open above a daily budget;
2. every request the stand-in received matches exactly one attempt (same request digest, the
   sha256 of the body bytes, and the key's label is the attempt's account), and every attempt
   that was sent matches one request;
3. every attempt is settled, or open with a recorded reason (an attempt of a process killed
   mid-flight may have none: at most one per kill);
4. per key, the stand-in's bill (its logged usage priced with
   ``llm_accounts.pricing.prices.settlement_cost``) equals the ledger's settled cost to the nanodollar
   on the attempts settled, and the bill minus settled equals the billed cost of the attempts
   still open, each within its ceiling;
5. the month, day and outcome totals equal the sums of their rows, and ``integrity_check`` is ok.

The exit status is 1 when any check fails.

Commit order is recorded, not inferred: before the run the bench adds a log table and triggers to
its throwaway ledger (``instrument``; the product never ships them). A trigger runs inside the
statement that fired it, so each log row commits or rolls back with the transaction that wrote
the attempt; writers are serialized by SQLite's file lock (every ledger write is ``BEGIN
IMMEDIATE``), so a later transaction's rows get larger ``AUTOINCREMENT`` sequence numbers than
an earlier one's. The log's order is therefore commit order.
"""

import argparse
import collections
import datetime as dt
import hashlib
import json
import os
import pathlib
import random
import secrets
import signal
import sqlite3
import string
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORKER = pathlib.Path(__file__).resolve().parent / "load_worker.py"
BASE = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)  # mid credit period 2026-11
MODEL = "claude-haiku-4-5"
MAX_TOKENS = 256  # what the worker asks for; the ceiling below is quoted at it

# Faults per key: (behaviour, weight). Each key's script draws from its own mix.
MIXES = {
    "alpha": [("ok", 75), ("slow", 10), ("rate_limited", 8), ("overloaded", 7)],
    "beta": [("ok", 75), ("api_error", 5), ("stream_error", 10), ("drop", 10)],
    "gamma": [("ok", 75), ("slow", 5), ("rate_limited", 5), ("overloaded", 3), ("api_error", 4),
              ("stream_error", 4), ("drop", 4)],
    "delta": [("ok", 80), ("slow", 8), ("api_error", 3), ("stream_error", 3), ("drop", 3), ("rate_limited", 3)],
}
# Budgets in ceilings of one prompt: (monthly, daily or None). Open ceilings of unknown outcomes
# (500, broken streams, dropped connections) hold their room, so the budgets run out midway.
BUDGETS = {"alpha": (8, None), "beta": (10, 6), "gamma": (8, None), "delta": (14, 5)}
# gamma's credit runs out for good part way through its script (a 1-hour quota dwell follows).
CREDIT_OUT = ("gamma", 0.6)

# The outcomes that may settle (docs/architecture.md "Attempt outcomes"); every other stays open.
SETTLES = ("complete", "not_sent", "rate_limited", "overloaded", "auth_required", "request_rejected")

LOG_SQL = """
CREATE TABLE IF NOT EXISTS bench_commit_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, event TEXT NOT NULL, attempt_id TEXT, account TEXT,
    month_utc TEXT, day_utc TEXT, old_state TEXT, new_state TEXT, ceiling_nusd INTEGER,
    old_cost INTEGER, new_cost INTEGER, delta_nusd INTEGER, old_ceiling INTEGER);
CREATE TRIGGER IF NOT EXISTS bench_log_insert AFTER INSERT ON attempt BEGIN
    INSERT INTO bench_commit_log (event, attempt_id, account, month_utc, day_utc, new_state, ceiling_nusd, new_cost)
    VALUES ('insert', NEW.id, NEW.account, NEW.month_utc, NEW.day_utc, NEW.state, NEW.ceiling_nusd, NEW.cost_nusd);
END;
CREATE TRIGGER IF NOT EXISTS bench_log_update AFTER UPDATE ON attempt BEGIN
    INSERT INTO bench_commit_log (event, attempt_id, account, month_utc, day_utc, old_state, new_state,
        ceiling_nusd, old_cost, new_cost, old_ceiling)
    VALUES ('update', NEW.id, NEW.account, NEW.month_utc, NEW.day_utc, OLD.state, NEW.state, NEW.ceiling_nusd,
        OLD.cost_nusd, NEW.cost_nusd, OLD.ceiling_nusd);
END;
CREATE TRIGGER IF NOT EXISTS bench_log_delete AFTER DELETE ON attempt BEGIN
    INSERT INTO bench_commit_log (event, attempt_id, account) VALUES ('delete', OLD.id, OLD.account);
END;
CREATE TRIGGER IF NOT EXISTS bench_log_adjust AFTER INSERT ON adjustment BEGIN
    INSERT INTO bench_commit_log (event, attempt_id, account, month_utc, delta_nusd)
    VALUES ('adjust', NEW.attempt_id, NEW.account, NEW.month_utc, NEW.delta_nusd);
END;
"""


def make_key():
    """A key-shaped random value, made at run time; it only ever goes to keys.json and the stand-in."""
    alphabet = string.ascii_letters + string.digits + "-_"
    return "sk-ant-api03-" + "".join(secrets.choice(alphabet) for _ in range(93)) + "AA"


def prompt_ceiling():
    """The ceiling one worker prompt reserves (the context window dominates it, so it hardly
    depends on the prompt's length)."""
    from llm_accounts.pricing import prices
    from llm_accounts.wire import payload

    body = {"model": MODEL, "max_tokens": MAX_TOKENS, "messages": [{"role": "user", "content": "x"}]}
    return prices.quote(payload.freeze(body)).ceiling_nusd


def scripts(seed, length, expected):
    """Each key's script; ``expected`` is about how many prompts one key will see."""
    rng = random.Random(seed)
    out = {}
    for label, mix in MIXES.items():
        names, weights = zip(*mix)
        # Every fault of the mix early on, so a short run meets each of them too.
        first = [name for name in names if name != "ok"]
        rng.shuffle(first)
        out[label] = [entry for fault in first for entry in ("ok", "ok", fault)] + rng.choices(names, weights, k=length)
    label, at = CREDIT_OUT
    out[label][int(expected * at)] = "credit_balance_too_low"
    return out


def record_raw_bodies():
    """Give each stand-in log entry the sha256 of the body bytes as received, and the bytes
    (``body_bytes``, for pricing cache writes). Wraps the stand-in's body hook in this process only."""
    from llm_accounts.standin import server

    original = server._Exchange._note_body
    if getattr(original, "bench_wrapped", False):
        return

    def note_body(self, raw):
        self.entry["body_sha256"] = hashlib.sha256(raw).hexdigest()
        self.entry["body_bytes"] = raw
        original(self, raw)

    note_body.bench_wrapped = True
    server._Exchange._note_body = note_body


def instrument(ledger_path):
    from llm_accounts.ledger import Ledger

    Ledger(ledger_path).close()
    conn = sqlite3.connect(ledger_path, isolation_level=None)
    conn.executescript(LOG_SQL)
    conn.close()


def save_log(workdir, requests_log, fleet):
    """The stand-in's log (labels and bodies, never keys) and what the fleet did, beside the ledger,
    so the checks can be run again on the same evidence (tests/test_load.py)."""
    entries = [{**entry, "body_bytes": entry.get("body_bytes", b"").hex()} for entry in requests_log]
    data = {"requests": entries, "kills": dict(fleet.kills), "t0": fleet.t0, "done": fleet.done,
            "processes": fleet.next_index}
    (workdir / "run.json").write_text(json.dumps(data))


def load_log(workdir):
    """``(requests_log, fleet)`` as ``save_log`` wrote them."""
    data = json.loads((pathlib.Path(workdir) / "run.json").read_text())
    for entry in data["requests"]:
        entry["body_bytes"] = bytes.fromhex(entry["body_bytes"])
    fleet = type("SavedFleet", (), {})()
    fleet.kills, fleet.t0, fleet.done, fleet.next_index = (
        collections.Counter(data["kills"]), data["t0"], data["done"], data["processes"])
    return data["requests"], fleet


def declared_accounts(ceiling=None):
    from llm_accounts.declarations import Account

    ceiling = ceiling or prompt_ceiling()
    return [
        Account(label, f"{label.upper()}_KEY", monthly * ceiling, daily * ceiling if daily else None)
        for label, (monthly, daily) in BUDGETS.items()
    ]


def spend_midway(ledger_path, accounts, ceiling, t0):
    """Halfway through, record a sourced correction (``Ledger.adjust``) on the accounts without a
    daily budget that leaves each room for two more ceilings: their monthly budgets run out in
    the second half, with adjustments in the sum admission checks."""
    from llm_accounts import clock
    from llm_accounts.ledger import Ledger

    now = BASE + dt.timedelta(seconds=time.time() - t0)
    month = clock.credit_month(now)
    done = {}
    with Ledger(ledger_path) as ledger:
        lines = {line.name: line for line in ledger.status(accounts, now=now)}
        for account in accounts:
            if account.daily_budget_nusd is not None:
                continue
            line = lines[account.name]
            delta = line.remaining_nusd - 2 * ceiling
            if delta > 0:
                ledger.adjust(f"bench-midway-{account.name}", account, month, delta, "bench:load.py midway", now=now)
                done[account.name] = delta
    return done


def child_env(user_dir, ledger_path, base_url):
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("ANTHROPIC_", "LLM_ACCOUNTS_")) and name != "LLM_USER_PATH"
    }
    env.update(LLM_USER_PATH=str(user_dir), LLM_ACCOUNTS_LEDGER=str(ledger_path), LLM_ACCOUNTS_BASE_URL=base_url)
    return env


class Fleet:
    """The client processes: start, release together, kill and replace, collect their lines."""

    def __init__(self, workdir, env, requests, seed):
        self.workdir, self.env, self.requests, self.seed = workdir, env, requests, seed
        self.go = workdir / "go"
        self.t0 = time.time()
        self.live, self.done, self.kills = {}, [], collections.Counter()
        self.next_index = 0

    def start(self):
        index, self.next_index = self.next_index, self.next_index + 1
        out = self.workdir / f"worker-{index}.out"
        # The child writes through its own file descriptions; this process reads with fresh ones.
        with open(out, "w") as stdout, open(out.with_suffix(".err"), "w") as stderr:
            process = subprocess.Popen(
                [sys.executable, str(WORKER), str(index), str(self.requests), str(self.seed), repr(self.t0),
                 BASE.isoformat(), str(self.go)],
                env=self.env, cwd=self.workdir, stdout=stdout, stderr=stderr,
            )
        self.live[index] = (process, out)
        return index

    def wait_ready(self, index, timeout=120):
        _, out = self.live[index]
        deadline = time.time() + timeout
        while time.time() < deadline:
            if out.read_text().startswith("ready"):
                return
            time.sleep(0.02)
        raise RuntimeError(f"worker {index} never became ready")

    def release(self):
        for index in list(self.live):
            self.wait_ready(index)
        self.go.touch()

    def prompts_done(self):
        done = sum(len(worker["lines"]) for worker in self.done)
        for _, out in self.live.values():
            done += out.read_text().count("\n{")
        return done

    def kill_one(self, rng):
        running = [index for index, (process, _) in self.live.items() if process.poll() is None]
        if not running:
            return None
        index = rng.choice(running)
        sig = rng.choice((signal.SIGKILL, signal.SIGKILL, signal.SIGTERM, signal.SIGINT))
        self.live[index][0].send_signal(sig)
        self.kills[signal.Signals(sig).name] += 1
        return index

    def reap(self, timeout=None):
        """Collect finished processes; with ``timeout``, wait for all of them."""
        for index, (process, out) in list(self.live.items()):
            if timeout is None and process.poll() is None:
                continue
            process.wait(timeout=timeout)
            lines = []
            for line in out.read_text().splitlines():
                try:
                    lines.append(json.loads(line))
                except ValueError:
                    pass  # "ready", or a line cut short by a kill
            stderr = out.with_suffix(".err").read_text()
            self.done.append({"index": index, "returncode": process.returncode, "lines": lines, "stderr": stderr})
            del self.live[index]


def run(processes, requests, seed, kill_storm=0.0, workdir=None):
    """Run the load; return (figures, failures)."""
    from llm_accounts.declarations import save_accounts_file
    from llm_accounts.standin import StandIn

    workdir = pathlib.Path(workdir or tempfile.mkdtemp(prefix="llm-accounts-load-"))
    user_dir = workdir / "llm-user"
    user_dir.mkdir(mode=0o700, parents=True)
    ledger_path = workdir / "ledger" / "accounts-ledger.db"
    ceiling = prompt_ceiling()
    keys = {label: make_key() for label in MIXES}
    accounts = declared_accounts(ceiling)
    (user_dir / "keys.json").write_text(json.dumps({f"{label.upper()}_KEY": key for label, key in keys.items()}))
    os.chmod(user_dir / "keys.json", 0o600)
    saved = os.environ.get("LLM_USER_PATH")
    os.environ["LLM_USER_PATH"] = str(user_dir)
    try:
        save_accounts_file(accounts, None)
    finally:
        if saved is None:
            del os.environ["LLM_USER_PATH"]
        else:
            os.environ["LLM_USER_PATH"] = saved
    instrument(ledger_path)
    record_raw_bodies()
    length = 4 * processes * requests + 50
    config = {
        "keys": [
            {"label": label, "key": keys[label], "organization": f"org-{label}", "behaviour": "ok",
             "script": script, "delay": 0.05, "retry_after": 1}
            for label, script in scripts(seed, length, processes * requests // len(MIXES)).items()
        ]
    }
    started = time.time()
    with StandIn(config) as standin:
        fleet = Fleet(workdir, child_env(user_dir, ledger_path, standin.base_url), requests, seed)
        for _ in range(processes):
            fleet.start()
        fleet.release()
        rng = random.Random(f"storm:{seed}")
        storm_end = time.time() + kill_storm
        adjusted = None
        while fleet.live:
            storming = time.time() < storm_end
            time.sleep(rng.uniform(0.2, 1.2) if storming else 0.1)
            if adjusted is None and fleet.prompts_done() >= processes * requests // 2:
                adjusted = spend_midway(ledger_path, accounts, ceiling, fleet.t0)
            fleet.reap()
            if storming and fleet.kill_one(rng) is not None:
                fleet.wait_ready(fleet.start())  # the go file exists: it starts at once
            while storming and len(fleet.live) < processes:  # replace those that finished on their own
                fleet.start()
        fleet.reap(timeout=600)
        requests_log = list(standin.requests)
    elapsed = time.time() - started
    save_log(workdir, requests_log, fleet)
    figures, failures = check(ledger_path, requests_log, accounts, keys, fleet)
    if not adjusted:
        failures.append("the midway adjustment was not made")
    figures["seconds"] = round(elapsed, 1)
    figures["ceiling_nusd"] = ceiling
    figures["workdir"] = str(workdir)
    return figures, failures


# ---------------------------------------------------------------------------------------------
# Checks: the ledger and the stand-in's log only


def check(ledger_path, requests_log, accounts, keys, fleet):
    """``(figures, failures)`` from the ledger file and the stand-in's log; then reconciles
    every open attempt at its billed cost (the ledger file is changed)."""
    from llm_accounts.pricing import prices
    from llm_accounts.standin import find_model

    failures = []
    db = sqlite3.connect(f"file:{ledger_path}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    attempts = [dict(row) for row in db.execute("SELECT rowid AS seq, * FROM attempt ORDER BY rowid")]
    by_id = {row["id"]: row for row in attempts}
    log = [dict(row) for row in db.execute("SELECT * FROM bench_commit_log ORDER BY seq")]
    budgets = {account.name: (account.budget_nusd, account.daily_budget_nusd) for account in accounts}
    kills = sum(fleet.kills.values())

    # 1. Admissions replayed in commit order.
    month_settled, month_open, month_adjusted = collections.Counter(), collections.Counter(), collections.Counter()
    day_settled, day_open = collections.Counter(), collections.Counter()
    over, admissions, replayed = [], 0, {}
    for event in log:
        name, month, day = event["account"], event["month_utc"], event["day_utc"]
        if event["event"] == "delete":
            failures.append(f"attempt row deleted: {event['attempt_id']}")
            continue
        if event["event"] == "adjust":
            month_adjusted[name, month] += event["delta_nusd"]
            continue
        old_state = event["old_state"]
        if old_state == "open":
            # The ceiling it held until now: a shrink on message_start lowers it while it stays
            # open (docs/pricing.md "Shrinking a hold on message_start").
            month_open[name, month] -= event["old_ceiling"]
            day_open[name, day] -= event["old_ceiling"]
        elif old_state == "settled":
            month_settled[name, month] -= event["old_cost"]
            day_settled[name, day] -= event["old_cost"]
        if event["new_state"] == "open":
            month_open[name, month] += event["ceiling_nusd"]
            day_open[name, day] += event["ceiling_nusd"]
        else:
            month_settled[name, month] += event["new_cost"]
            day_settled[name, day] += event["new_cost"]
        replayed[event["attempt_id"]] = (event["new_state"], event["new_cost"])
        if event["event"] == "insert":
            admissions += 1
            monthly, daily = budgets[name]
            committed = month_settled[name, month] + month_open[name, month] + month_adjusted[name, month]
            if committed > monthly:
                over.append(f"{event['attempt_id']} on {name}: month {committed} > {monthly}")
            if daily is not None and day_settled[name, day] + day_open[name, day] > daily:
                over.append(f"{event['attempt_id']} on {name}: day {day_settled[name, day] + day_open[name, day]} > {daily}")
    failures += [f"over-admission: {line}" for line in over]
    final = {row["id"]: (row["state"], row["cost_nusd"]) for row in attempts}
    lost = set(replayed) - set(final)
    unlogged = set(final) - set(replayed)
    if lost or unlogged or any(replayed[i] != final[i] for i in final if i in replayed):
        failures.append(f"commit log and attempt rows disagree: {len(lost)} lost, {len(unlogged)} unlogged")
    instants_in_order = all(a["created_at"] <= b["created_at"] for a, b in zip(attempts, attempts[1:]))

    # 2. Requests <-> attempts, by (request digest, account).
    messages = [entry for entry in requests_log if entry["path"].rstrip("/") == "/v1/messages"]
    others = len(requests_log) - len(messages)
    if others:
        failures.append(f"{others} requests to other endpoints than /v1/messages")
    requests_by = collections.defaultdict(list)
    for entry in messages:
        requests_by[entry["body_sha256"], entry["label"]].append(entry)
    attempts_by = collections.defaultdict(list)
    for row in attempts:
        attempts_by[row["request_digest"], row["account"]].append(row)
    unmatched_requests = 0
    pairs = []  # (attempt, request)
    unreasoned = [row for row in attempts if row["state"] == "open" and row["outcome"] is None]
    for group in set(requests_by) | set(attempts_by):
        sent = [row for row in attempts_by.get(group, []) if row["outcome"] != "not_sent"]
        received = requests_by.get(group, [])
        unsure = [row for row in sent if row["outcome"] is None]  # killed mid-flight: sent or not
        sure = [row for row in sent if row["outcome"] is not None]
        if not len(sure) <= len(received) <= len(sent):
            unmatched_requests += abs(len(received) - len(sent))
            failures.append(
                f"account {group[1]}: {len(received)} requests with one digest, {len(sure)} attempts sent"
                + (f" and {len(unsure)} of killed processes" if unsure else "")
            )
            continue
        pairs += list(zip(sure + unsure, received))
    not_sent_received = sum(
        1 for row in attempts if row["outcome"] == "not_sent" and requests_by.get((row["request_digest"], row["account"]))
        and len(requests_by[row["request_digest"], row["account"]]) > len(
            [r for r in attempts_by[row["request_digest"], row["account"]] if r["outcome"] != "not_sent"])
    )

    # 3. Settled, or open with a reason.
    if len(unreasoned) > kills:
        failures.append(f"{len(unreasoned)} open attempts without a reason, {kills} processes killed")
    for row in attempts:
        if row["state"] == "settled" and (row["outcome"] is None or row["cost_nusd"] is None):
            failures.append(f"attempt {row['id']} settled without outcome or cost")
        if row["state"] == "settled" and row["outcome"] not in SETTLES:
            failures.append(f"attempt {row['id']} settled as {row['outcome']}, an outcome that stays open")
        if row["state"] == "settled" and row["outcome"] != "complete" and row["cost_nusd"] != 0:
            failures.append(f"attempt {row['id']} settled as {row['outcome']} at a non-zero cost")

    # 4. The stand-in's bill against the ledger, per key.
    bill = collections.Counter()
    bill_settled, bill_open, ledger_settled = collections.Counter(), collections.Counter(), collections.Counter()
    for entry in messages:
        if entry["usage"] is not None:
            bill[entry["label"]] += _price(prices, find_model, entry, None)
    billed_open = {row["id"]: 0 for row in attempts if row["state"] == "open"}
    for row, entry in pairs:
        billed = _price(prices, find_model, entry, row["price_revision"]) if entry["usage"] is not None else 0
        if row["state"] == "open":
            billed_open[row["id"]] = billed
        if row["state"] == "settled":
            bill_settled[row["account"]] += billed
            if row["cost_nusd"] != billed:
                failures.append(f"attempt {row['id']}: settled at {row['cost_nusd']}, the stand-in billed {billed}")
        else:
            bill_open[row["account"]] += billed
            if billed > row["ceiling_nusd"]:
                failures.append(f"attempt {row['id']}: billed {billed} above its open ceiling {row['ceiling_nusd']}")
    for row in attempts:
        if row["state"] == "settled":
            ledger_settled[row["account"]] += row["cost_nusd"]
    per_key = {}
    for label in keys:
        difference = bill[label] - ledger_settled[label]
        per_key[label] = {"bill": bill[label], "settled": ledger_settled[label], "open_billed": bill_open[label]}
        if difference != bill_open[label]:
            failures.append(f"key {label}: bill - settled = {difference}, billed cost of open attempts = {bill_open[label]}")
        if bill_settled[label] != ledger_settled[label]:
            failures.append(f"key {label}: the stand-in billed {bill_settled[label]} for settled attempts, ledger settled {ledger_settled[label]}")

    # 5. Totals and integrity.
    failures += _totals(db)
    integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    if integrity != "ok":
        failures.append("integrity_check: not ok")
    db.close()

    # 6. Reconcile: every open attempt is listed, closes at the stand-in's bill, and then the
    #    ledger's settled cost is the stand-in's whole bill on every key.
    reconciled = _reconcile(ledger_path, billed_open, fleet.t0)
    db = sqlite3.connect(f"file:{ledger_path}?mode=ro", uri=True)
    after = dict(db.execute("SELECT account, SUM(cost_nusd) FROM attempt WHERE state = 'settled' GROUP BY account"))
    still_open = db.execute("SELECT COUNT(*) FROM attempt WHERE state = 'open'").fetchone()[0]
    failures += [f"after reconcile: {problem}" for problem in _totals(db)]
    db.close()
    if still_open:
        failures.append(f"{still_open} attempts still open after reconciling every listed one")
    for label in keys:
        if after.get(label, 0) != bill[label]:
            failures.append(f"key {label}: after reconcile the ledger settled {after.get(label, 0)}, the stand-in billed {bill[label]}")

    lines = [line for worker in fleet.done for line in worker["lines"]]
    exceptions = [line["result"] for line in lines if line["result"].startswith("exception:")]
    failures += [f"worker raised {name}" for name in sorted(set(exceptions))]
    crashed = [w for w in fleet.done if w["returncode"] not in (0, -9, -15, -2, 1, 130)]
    failures += [f"worker {w['index']} exited {w['returncode']}" for w in crashed]
    remaining = {}
    for account in accounts:
        name = account.name
        committed = sum(r["cost_nusd"] if r["state"] == "settled" else r["ceiling_nusd"] for r in attempts if r["account"] == name)
        committed += sum(adjusted for (who, _), adjusted in month_adjusted.items() if who == name)
        remaining[name] = account.budget_nusd - committed
    figures = {
        "processes": fleet.next_index,
        "prompts": len(lines),
        "prompts_by_kind": dict(collections.Counter(
            ("async" if l["async"] else "sync") + ("-stream" if l["stream"] else "") + ("-continued" if l["continued"] else "-new")
            for l in lines)),
        "results": dict(collections.Counter(line["result"] for line in lines)),
        "attempts": len(attempts),
        "outcomes": dict(collections.Counter(f"{r['state']}:{r['outcome']}" for r in attempts)),
        "requests_received": len(messages),
        "faults_injected": dict(collections.Counter(e["behaviour"] for e in messages if e["behaviour"] != "ok")),
        "kills": dict(fleet.kills),
        "admissions_replayed": admissions,
        "over_admissions": len(over),
        "lost_rows": len(lost) + sum(1 for e in log if e["event"] == "delete"),
        "unmatched_requests": unmatched_requests,
        "not_sent_but_received": not_sent_received,
        "open_without_reason": len(unreasoned),
        "per_key": per_key,
        "bill_difference_nusd": sum(abs(v["bill"] - v["settled"] - v["open_billed"]) for v in per_key.values()),
        "adjustments": sum(1 for e in log if e["event"] == "adjust"),
        "budget_left_in_ceilings": {name: round(left / prompt_ceiling(), 2) for name, left in remaining.items()},
        "reconciled": reconciled,
        "instants_follow_commit_order": instants_in_order,
        "integrity_check": integrity,
    }
    if not_sent_received:
        failures.append(f"{not_sent_received} attempts settled not_sent although the stand-in received their request")
    return figures, failures


def _reconcile(ledger_path, billed_open, t0):
    """Close each attempt ``Ledger.open_attempts()`` lists at its billed cost; it must list
    exactly the open rows."""
    from llm_accounts.ledger import Ledger

    now = BASE + dt.timedelta(seconds=time.time() - t0)
    with Ledger(ledger_path) as ledger:
        listed = [row["id"] for row in ledger.open_attempts()]
        if sorted(listed) != sorted(billed_open):
            raise RuntimeError("open_attempts() does not list exactly the open attempt rows")
        for attempt_id in listed:
            ledger.reconcile(f"bench-{attempt_id}", attempt_id, billed_open[attempt_id], "bench:load.py stand-in bill", now=now)
    return len(listed)


def _price(prices, find_model, entry, revision):
    served = find_model(entry["model"])
    cost = prices.settlement_cost(entry["usage"], served.id if served else entry["model"], entry["body_bytes"], revision)
    if cost is None:
        raise RuntimeError("the stand-in logged usage the price revision cannot price")
    return cost


def _totals(db):
    """The month, day and outcome totals against sums of the attempt rows."""
    problems = []
    queries = {
        "month": (
            "SELECT name, month_utc, settled_nusd, open_nusd, day_utc, day_settled_nusd, day_open_nusd FROM month",
            """SELECT account, month_utc,
                 COALESCE(SUM(CASE WHEN state = 'settled' THEN cost_nusd END), 0),
                 COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0) FROM attempt
               GROUP BY account, month_utc""",
        ),
    }
    months, sums = queries["month"]
    summed = {(r[0], r[1]): (r[2], r[3]) for r in db.execute(sums)}
    for name, month, settled, opened, day, day_settled, day_opened in db.execute(months):
        if summed.get((name, month), (0, 0)) != (settled, opened):
            problems.append(f"month {name} {month}: totals {settled}/{opened}, rows {summed.get((name, month))}")
        row = db.execute(
            """SELECT COALESCE(SUM(CASE WHEN state = 'settled' THEN cost_nusd END), 0),
                      COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0)
               FROM attempt WHERE account = ? AND day_utc = ?""", (name, day)).fetchone()
        if day is not None and tuple(row) != (day_settled, day_opened):
            problems.append(f"month {name} {month}: day totals {day_settled}/{day_opened}, rows {tuple(row)}")
    day_rows = {tuple(r[:3]): tuple(r[3:]) for r in db.execute(
        "SELECT day_utc, provider, account, attempts, settled_nusd, open_nusd FROM day WHERE attempts != 0")}
    day_sums = {tuple(r[:3]): tuple(r[3:]) for r in db.execute(
        """SELECT day_utc, provider, account, COUNT(*), COALESCE(SUM(cost_nusd), 0),
                  COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0)
           FROM attempt GROUP BY day_utc, provider, account""")}
    if day_rows != day_sums:
        problems.append("day totals differ from the sums of their rows")
    outcome_rows = {tuple(r[:8]): tuple(r[8:]) for r in db.execute(
        """SELECT month_utc, provider, account, state, outcome, provider_error_type, rejection_class, http_status,
                  attempts, cost_nusd, open_nusd FROM month_outcome WHERE attempts != 0""")}
    outcome_sums = {tuple(r[:8]): tuple(r[8:]) for r in db.execute(
        """SELECT month_utc, provider, account, state, COALESCE(outcome, ''), COALESCE(provider_error_type, ''),
                  COALESCE(rejection_class, ''), COALESCE(http_status, 0), COUNT(*), COALESCE(SUM(cost_nusd), 0),
                  COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0)
           FROM attempt GROUP BY 1, 2, 3, 4, 5, 6, 7, 8""")}
    if outcome_rows != outcome_sums:
        problems.append("month_outcome totals differ from the sums of their rows")
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=16)
    parser.add_argument("--requests", type=int, default=12, help="prompts per process")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--kill-storm", type=float, default=0.0, metavar="SECONDS",
                        help="kill processes at random and replace them for this long")
    parser.add_argument("--dir", help="work directory (default: a new temporary one)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures, failures = run(args.processes, args.requests, args.seed, args.kill_storm, args.dir)
    if args.json:
        print(json.dumps({**figures, "failures": failures}, indent=2))
    else:
        for name, value in figures.items():
            print(f"{name}: {json.dumps(value) if isinstance(value, (dict, list)) else value}")
        print(f"checks: {'all passed' if not failures else f'{len(failures)} failed'}")
        for failure in failures:
            print(f"FAILED: {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
