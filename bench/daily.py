"""Everyday parallel use against honest ceilings: waiting for room, measured in one run
(docs/performance.md "Waiting for room"; issue 21).

    .venv/bin/python bench/daily.py [--delay 0.5] [--postgres start|none|URL] [--wait SECONDS]

Every attempt reserves its model's whole ceiling until its answer starts ($3.828 for plain
``claude-routed``; the figures in parentheses below were measured at $7.92), so a few prompts in
flight fill a small budget though almost nothing is spent. Each scenario runs on a
fresh llm user directory, ledger and loopback stand-in (``llm_accounts.standin``, every answer
slowed by ``--delay`` seconds before its headers and between its events, so prompts overlap),
with no option: the default wait bound (``llm_accounts.room.DEFAULT_WAIT_S``) unless ``--wait``.

- ``cli x6``: six real ``llm -m claude-routed`` processes started together on two $20 accounts
  (two ceilings fit an account at a time);
- ``async x20`` and ``async x100``: one process, a batch of 20 (then 100) prompts through llm's
  async Python API gathered at once, on two $50 accounts (five ceilings fit an account). Each
  prompt has its own model object, so its own scope (issue 21 point 4 makes that so for one
  object too);

each on the SQLite ledger, then on a PostgreSQL ledger (tests/pgserver.py starts a throwaway
server unless ``--postgres URL`` names one; ``none`` skips it).

For each it prints prompts completed and refused, the over-admissions found by replaying every
attempt write in commit order, the waits for room (from the first refusal that only ceilings in
flight caused to the admission; 0 for a prompt admitted at once) p50, p95 and max, how many
prompts waited, the median answer time, and the longest wait in answer times. Commit order is
recorded, not inferred: before the run the bench adds a log table and triggers to its throwaway
ledger (the product never ships them), which run inside the statement that wrote the attempt, so
each log row commits with it; ledger writers are serialized (SQLite's file lock, PostgreSQL's
advisory lock taken first in every write transaction), so the log's sequence is commit order.

Waits are measured inside each ``llm`` process by this file's ``--worker`` mode, which wraps
``RoutedCall.begin`` to note when the prompt was admitted and then runs llm's own CLI (or the
async batch) unchanged. The exit status is 1 when a prompt was refused or anything was
over-admitted.

The other half of everyday life under ceilings, the budget interrupted prompts hold before and
after the automatic pass settles them from the provider's usage report, is measured by
``bench/daily_provider.py`` (docs/architecture.md "Settling from the provider").
"""

import argparse
import asyncio
import collections
import importlib.util
import json
import os
import pathlib
import resource
import secrets
import sqlite3
import statistics
import string
import subprocess
import sys
import tempfile
import time
import uuid

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
LLM_BIN = os.path.join(os.path.dirname(sys.executable), "llm")
NANO = 1_000_000_000

SCENARIOS = (
    # (name, accounts' budget in dollars, prompts, how)
    ("cli x6", 20, 6, "cli"),
    ("async x20", 50, 20, "async"),
    ("async x100", 50, 100, "async"),
)

SQLITE_LOG = """
CREATE TABLE IF NOT EXISTS bench_commit_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, event TEXT NOT NULL, attempt_id TEXT, account TEXT, month_utc TEXT,
    old_state TEXT, new_state TEXT, ceiling_nusd INTEGER, old_cost INTEGER, new_cost INTEGER, old_ceiling INTEGER);
CREATE TRIGGER IF NOT EXISTS bench_log_insert AFTER INSERT ON attempt BEGIN
    INSERT INTO bench_commit_log (event, attempt_id, account, month_utc, new_state, ceiling_nusd, new_cost)
    VALUES ('insert', NEW.id, NEW.account, NEW.month_utc, NEW.state, NEW.ceiling_nusd, NEW.cost_nusd);
END;
CREATE TRIGGER IF NOT EXISTS bench_log_update AFTER UPDATE ON attempt BEGIN
    INSERT INTO bench_commit_log (event, attempt_id, account, month_utc, old_state, new_state, ceiling_nusd,
        old_cost, new_cost, old_ceiling)
    VALUES ('update', NEW.id, NEW.account, NEW.month_utc, OLD.state, NEW.state, NEW.ceiling_nusd, OLD.cost_nusd,
        NEW.cost_nusd, OLD.ceiling_nusd);
END;
"""

POSTGRES_LOG = """
CREATE TABLE IF NOT EXISTS bench_commit_log (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event text NOT NULL, attempt_id text, account text,
    month_utc text, old_state text, new_state text, ceiling_nusd bigint, old_cost bigint, new_cost bigint,
    old_ceiling bigint);
CREATE OR REPLACE FUNCTION bench_log() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO bench_commit_log (event, attempt_id, account, month_utc, new_state, ceiling_nusd, new_cost)
        VALUES ('insert', NEW.id, NEW.account, NEW.month_utc, NEW.state, NEW.ceiling_nusd, NEW.cost_nusd);
    ELSE
        INSERT INTO bench_commit_log (event, attempt_id, account, month_utc, old_state, new_state, ceiling_nusd,
            old_cost, new_cost, old_ceiling)
        VALUES ('update', NEW.id, NEW.account, NEW.month_utc, OLD.state, NEW.state, NEW.ceiling_nusd, OLD.cost_nusd,
            NEW.cost_nusd, OLD.ceiling_nusd);
    END IF;
    RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS bench_log ON attempt;
CREATE TRIGGER bench_log AFTER INSERT OR UPDATE ON attempt FOR EACH ROW EXECUTE FUNCTION bench_log();
"""


def make_key():
    """A key-shaped random value, made at run time; it only goes to keys.json and the stand-in."""
    alphabet = string.ascii_letters + string.digits + "-_"
    return "sk-ant-api03-" + "".join(secrets.choice(alphabet) for _ in range(93)) + "AA"


# ---------------------------------------------------------------------------------------------
# The worker: one llm process (the CLI, or an async batch), with admission times noted


def probe(log_path):
    """Wrap ``RoutedCall.begin`` so each admission appends ``{"wait": seconds}`` to ``log_path``."""
    from llm_accounts import routing

    begin = routing.RoutedCall.begin

    def noted(self):
        attempt = begin(self)
        if attempt is not None:
            waited = 0.0 if self.room.started is None else time.monotonic() - self.room.started
            with open(log_path, "a") as f:
                f.write(json.dumps({"wait": waited}) + "\n")
        return attempt

    routing.RoutedCall.begin = noted


def worker(argv):
    how, log_path, *rest = argv
    probe(log_path)
    if how == "cli":
        from llm.cli import cli

        sys.argv = ["llm", *rest]
        cli()
        return
    import llm

    count = int(rest[0])

    async def one(i):
        started = time.monotonic()
        model = llm.get_async_model("claude-routed")
        try:
            await model.prompt(f"Prompt {i}").text()
            outcome = "complete"
        except Exception as error:  # noqa: BLE001 (counted and shown, not handled)
            outcome = getattr(error, "code", None) or type(error).__name__
            print(f"prompt {i}: {str(error)[:300]}", file=sys.stderr)
        return {"outcome": outcome, "elapsed": time.monotonic() - started}

    async def batch():
        return await asyncio.gather(*(one(i) for i in range(count)))

    for result in asyncio.run(batch()):
        print(json.dumps(result), flush=True)


# ---------------------------------------------------------------------------------------------
# One scenario


def setup(workdir, budget_usd, base_url, location, keys):
    """A throwaway llm user directory declaring two accounts, alpha and beta, whose keys (the
    stand-in's) live only in its keys.json; returns the child environment."""
    user = workdir / "llm-user"
    user.mkdir()
    (user / "keys.json").write_text(json.dumps({"ALPHA_KEY": keys["alpha"], "BETA_KEY": keys["beta"]}))
    (user / "accounts.json").write_text(json.dumps({"accounts": [
        {"name": name, "key_env": f"{name.upper()}_KEY", "budget_usd": f"{budget_usd}.00"} for name in keys
    ]}))
    import sqlite_utils
    from llm.migrations import migrate

    # llm's own logs.db migrations race between processes starting together on a new directory.
    migrate(sqlite_utils.Database(user / "logs.db"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "LLM_ACCOUNTS_", "LLM_USER"))}
    env.update(LLM_USER_PATH=str(user), LLM_ACCOUNTS_LEDGER=str(location), LLM_ACCOUNTS_BASE_URL=base_url)
    return env


def instrument(location):
    from llm_accounts.ledger import Ledger

    Ledger(location).close()
    if str(location).startswith("postgresql://"):
        import psycopg

        with psycopg.connect(str(location), autocommit=True) as conn:
            conn.execute(POSTGRES_LOG)
    else:
        conn = sqlite3.connect(location, isolation_level=None)
        conn.executescript(SQLITE_LOG)
        conn.close()


def commit_log(location):
    sql = ("SELECT event, attempt_id, account, month_utc, old_state, new_state, ceiling_nusd, old_cost, new_cost, "
           "old_ceiling FROM bench_commit_log ORDER BY seq")
    if str(location).startswith("postgresql://"):
        import psycopg

        with psycopg.connect(str(location)) as conn:
            rows = conn.execute(sql).fetchall()
    else:
        conn = sqlite3.connect(location)
        rows = conn.execute(sql).fetchall()
        conn.close()
    names = ("event", "attempt_id", "account", "month_utc", "old_state", "new_state", "ceiling_nusd", "old_cost",
             "new_cost", "old_ceiling")
    return [dict(zip(names, row)) for row in rows]


def over_admissions(log, budget_nusd):
    """Replay the attempt writes in commit order: after each admission, settled + open on its
    account and credit period must be within the budget (no adjustments are made here)."""
    settled, held = collections.Counter(), collections.Counter()
    over = 0
    for e in log:
        key = e["account"], e["month_utc"]
        if e["old_state"] == "open":
            held[key] -= e["old_ceiling"]  # a shrink lowers it while the attempt stays open
        elif e["old_state"] == "settled":
            settled[key] -= e["old_cost"] or 0
        if e["new_state"] == "open":
            held[key] += e["ceiling_nusd"]
        else:
            settled[key] += e["new_cost"] or 0
        if e["event"] == "insert" and settled[key] + held[key] > budget_nusd:
            over += 1
    return over, sum(e["event"] == "insert" for e in log)


def run_scenario(name, budget_usd, count, how, location, delay, wait):
    from llm_accounts.standin import StandIn

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="llm-accounts-daily-"))
    waits_log = workdir / "waits.jsonl"
    keys = {"alpha": make_key(), "beta": make_key()}
    config = {"keys": [{"label": n, "key": k, "behaviour": "slow", "delay": delay} for n, k in keys.items()]}
    with StandIn(config) as server:
        env = setup(workdir, budget_usd, server.base_url, location, keys)
        if wait is not None:
            env["LLM_ACCOUNTS_WAIT"] = str(wait)
        instrument(location)
        me = [sys.executable, str(pathlib.Path(__file__).resolve()), "--worker"]
        started = time.monotonic()
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        if how == "cli":
            processes = [
                # --no-log: llm 0.36's own logs.db write (LogStore.log reads, then inserts a thread,
                # in one deferred transaction) fails "database is locked" for about one process in
                # six started together, after its answer is printed and settled: llm's, not the
                # ledger's (docs/performance.md "Waiting for room").
                subprocess.Popen([*me, "cli", str(waits_log), "-m", "claude-routed", "--no-log", f"Prompt {i}"], env=env,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for i in range(count)
            ]
            results = [(p.wait(timeout=1800), p.stderr.read()) for p in processes]
            notices = sum(err.count("llm-accounts: waiting for") for _, err in results)
            completed = sum(code == 0 for code, _ in results)
            errors = [err.strip().splitlines()[-1] for code, err in results if code != 0 and err.strip()]
        else:
            done = subprocess.run([*me, "async", str(waits_log), str(count)], env=env, capture_output=True, text=True,
                                  timeout=3600)
            lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
            completed = sum(line["outcome"] == "complete" for line in lines)
            errors = [line for line in done.stderr.splitlines() if line.startswith("prompt ")]
            notices = done.stderr.count("llm-accounts: waiting for")
        elapsed = time.monotonic() - started
        # CPU seconds (user + system) of every prompt process: what waiting costs beside answers.
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
        served = [r for r in server.requests if r["path"] == "/v1/messages" and r["status"] == 200]
    waits = [json.loads(line)["wait"] for line in waits_log.read_text().splitlines()] if waits_log.exists() else []
    log = commit_log(location)
    over, admissions = over_admissions(log, budget_usd * NANO)
    return {
        "scenario": name, "completed": completed, "refused": count - completed, "over": over,
        "admissions": admissions, "served": len(served), "waits": waits, "elapsed": elapsed, "errors": errors[:3],
        "cpu": cpu, "notices": notices,
    }


def answer_time(delay):
    """The stand-in's time for one answer at ``delay``: one prompt alone, on a scratch ledger."""
    from llm_accounts.standin import StandIn

    workdir = pathlib.Path(tempfile.mkdtemp(prefix="llm-accounts-daily-"))
    keys = {"alpha": make_key(), "beta": make_key()}
    config = {"keys": [{"label": n, "key": k, "behaviour": "slow", "delay": delay} for n, k in keys.items()]}
    with StandIn(config) as server:
        env = setup(workdir, 20, server.base_url, workdir / "ledger.db", keys)
        times = []
        for _ in range(3):
            code = (
                "import time, llm; m = llm.get_model('claude-routed'); t = time.monotonic(); "
                "m.prompt('Prompt').text(); print(time.monotonic() - t)"
            )
            out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
            times.append(float(out.stdout.strip().splitlines()[-1]))
    return statistics.median(times)


def quantile(values, q):
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def backends(choice):
    yield "sqlite", lambda: pathlib.Path(tempfile.mkdtemp(prefix="llm-accounts-daily-")) / "ledger.db"
    if choice == "none":
        return
    server = None
    base = choice
    if choice == "start":
        sys.path.insert(0, str(ROOT / "tests"))
        import pgserver

        if pgserver.binaries() is None:
            print("PostgreSQL: skipped (no server binaries; Debian: apt-get install postgresql)")
            return
        server = pgserver.Server(durable=True).start()
        base = server.url
    import psycopg

    def new_schema():
        name = f"daily_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{name}"

    try:
        yield "postgres", new_schema
    finally:
        if server is not None:
            server.stop()


# ---------------------------------------------------------------------------------------------
# Held money against llm-anthropic (--held): docs/performance.md "Held money"

# The child that runs one async batch in one process and reports its own wall and CPU time
# (start-up excluded) and how each prompt ended; llm-anthropic's side runs the same code.
BATCH_CHILD = r"""
import asyncio, collections, json, resource, sys, time
import llm
model_id, n, max_tokens, stream = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "stream"
options = {} if max_tokens == "default" else {"max_tokens": int(max_tokens)}

async def one(i):
    try:
        await llm.get_async_model(model_id).prompt(f"Prompt {i}: name three birds that can swim", stream=stream, **options).text()
        return "complete"
    except Exception as error:
        return getattr(error, "code", None) or type(error).__name__

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

async def batch():
    return await asyncio.gather(*(one(i) for i in range(n)))

cpu0, start = cpu(), time.perf_counter()
outcomes = asyncio.run(batch())
print(json.dumps({"wall": time.perf_counter() - start, "cpu": cpu() - cpu0,
                  "outcomes": dict(collections.Counter(outcomes))}))
"""
# llm-anthropic's id for the model plain claude-routed answers with (claude-sonnet-4-6).
DIRECT_DEFAULT = "anthropic/claude-sonnet-4-6"


def held_setup(workdir, budget_usd, base_url, keys):
    """Two routed accounts and llm-anthropic's key (alpha's) in one throwaway user directory;
    both plugins load, each side picks its model by id."""
    env = setup(workdir, budget_usd, base_url, workdir / "ledger.db", keys)
    user = pathlib.Path(env["LLM_USER_PATH"])
    stored = json.loads((user / "keys.json").read_text())
    stored["anthropic"] = keys["alpha"]
    (user / "keys.json").write_text(json.dumps(stored))
    env["ANTHROPIC_BASE_URL"] = base_url  # the anthropic SDK's base URL, for llm-anthropic only
    return env


def batch_round(env, model_id, count, max_tokens, stream=True):
    done = subprocess.run([sys.executable, "-c", BATCH_CHILD, model_id, str(count), max_tokens,
                           "stream" if stream else "whole"], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=3600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        sys.exit(f"the batch on {model_id} failed: {done.stderr.strip()[-600:]}")
    return json.loads(lines[-1])


def held_after_ctrl_cs(env, location, count, max_tokens):
    """``count`` real ``llm -m claude-routed`` processes, one after another, each sent SIGINT once
    its answer has started; what the ledger holds afterwards (before any provider report)."""
    import signal

    from llm_accounts.ledger import Ledger

    extra = [] if max_tokens == "default" else ["-o", "max_tokens", max_tokens]
    for i in range(count):
        child = subprocess.Popen([LLM_BIN, "-m", "claude-routed", *extra, f"Tell me about birds, part {i}"], env=env,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        child.stdout.read(1)
        child.send_signal(signal.SIGINT)
        child.communicate(timeout=120)
    with Ledger(location) as ledger:
        rows = ledger.attempts()
    return sum(r["ceiling_nusd"] for r in rows if r["state"] == "open"), sum(r["cost_nusd"] or 0 for r in rows)


def held_figures(args):
    """Interleaved rounds: the routed batch, then llm-anthropic's, on the same stand-in."""
    from llm_accounts.standin import StandIn

    if importlib.util.find_spec("llm_anthropic") is None:
        sys.exit("--held compares with llm-anthropic, which is not importable here: pip install -e '.[bench]' "
                 "(bench/overhead.py makes .venv-bench with it)")
    keys = {"alpha": make_key(), "beta": make_key()}
    config = {"keys": [{"label": n, "key": k, "behaviour": "slow", "delay": args.delay} for n, k in keys.items()]}
    print(f"stand-in delay {args.delay:g} s before headers and between events; two ${args.budget} accounts; "
          f"batches of {args.count}; {args.rounds} interleaved rounds")
    print(f"{'max_tokens':>10} {'routed s':>9} {'direct s':>9} {'ratio p50':>9} {'min':>5} {'max':>5} "
          f"{'routed cpu':>10} {'direct cpu':>10} {'refused':>7} {'unstreamed s':>12}")
    for max_tokens in args.max_tokens:
        ratios, rows = [], []
        for _ in range(args.rounds):
            with StandIn(config) as server:
                workdir = pathlib.Path(tempfile.mkdtemp(prefix="llm-accounts-held-"))
                env = held_setup(workdir, args.budget, server.base_url, keys)
                routed = batch_round(env, "claude-routed", args.count, max_tokens)
                direct = batch_round(env, DIRECT_DEFAULT, args.count, max_tokens)
                # The same routed batch not streamed: each attempt holds its ceiling to the end.
                whole = batch_round(env, "claude-routed", args.count, max_tokens, stream=False)
            ratios.append(routed["wall"] / direct["wall"])
            rows.append((routed, direct, whole))
        refused = sum(n for r, _, _ in rows for k, n in r["outcomes"].items() if k != "complete")
        failed = sum(n for _, d, _ in rows for k, n in d["outcomes"].items() if k != "complete")
        if failed:
            print(f"    llm-anthropic's side failed {failed} prompts: {[d['outcomes'] for _, d, _ in rows]}")
        print(f"{max_tokens:>10} {statistics.median(r['wall'] for r, _, _ in rows):>9.1f} "
              f"{statistics.median(d['wall'] for _, d, _ in rows):>9.1f} {statistics.median(ratios):>9.2f} "
              f"{min(ratios):>5.2f} {max(ratios):>5.2f} {statistics.median(r['cpu'] for r, _, _ in rows):>10.2f} "
              f"{statistics.median(d['cpu'] for _, d, _ in rows):>10.2f} {refused:>7} "
              f"{statistics.median(w['wall'] for _, _, w in rows):>12.1f}", flush=True)
    print("\nfour Ctrl-Cs mid-stream, one after another (held before any provider report; goal <= $4):")
    for max_tokens in args.max_tokens:
        with StandIn(config) as server:
            workdir = pathlib.Path(tempfile.mkdtemp(prefix="llm-accounts-held-"))
            env = held_setup(workdir, args.budget, server.base_url, keys)
            held, spent = held_after_ctrl_cs(env, workdir / "ledger.db", 4, max_tokens)
        print(f"  max_tokens {max_tokens}: held ${held / NANO:.4f}, spent ${spent / NANO:.4f}", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=0.5, help="stand-in delay before headers and between events")
    parser.add_argument("--postgres", default="start", help="start (a throwaway server), none, or a URL")
    parser.add_argument("--wait", type=float, default=None, help="LLM_ACCOUNTS_WAIT for the prompts (default: none set)")
    parser.add_argument("--only", default=None, help="run only the scenarios whose name contains this")
    parser.add_argument("--held", action="store_true",
                        help="instead: held money and batch wall time against llm-anthropic (docs/performance.md \"Held money\")")
    parser.add_argument("--count", type=int, default=100, help="--held: prompts in a batch")
    parser.add_argument("--rounds", type=int, default=3, help="--held: interleaved rounds")
    parser.add_argument("--budget", type=int, default=20, help="--held: each account's budget in dollars")
    parser.add_argument("--max-tokens", nargs="+", default=["default", "4096"], help="--held: max_tokens arms")
    args = parser.parse_args(argv)
    if args.held:
        held_figures(args)
        return 0
    from llm_accounts import room

    answer = answer_time(args.delay)
    print(f"stand-in delay {args.delay:g} s; one answer alone takes {answer:.2f} s (median of 3); "
          f"wait bound {args.wait if args.wait is not None else room.DEFAULT_WAIT_S:g} s")
    print(f"{'ledger':9} {'scenario':11} {'done':>5} {'refused':>7} {'over':>4} {'waited':>6} {'p50 s':>6} {'p95 s':>6} "
          f"{'max s':>6} {'max/answer':>10} {'total s':>7} {'cpu s':>6} {'notices':>7}")
    failed = False
    for backend, location in backends(args.postgres):
        for name, budget, count, how in SCENARIOS:
            if args.only and args.only not in name:
                continue
            r = run_scenario(name, budget, count, how, location(), args.delay, args.wait)
            waits = r["waits"]
            waited = sum(w > 0 for w in waits)
            print(f"{backend:9} {name:11} {r['completed']:>5} {r['refused']:>7} {r['over']:>4} {waited:>6} "
                  f"{quantile(waits, 0.5):>6.2f} {quantile(waits, 0.95):>6.2f} {max(waits, default=0):>6.2f} "
                  f"{max(waits, default=0) / answer:>10.1f} {r['elapsed']:>7.1f} {r['cpu']:>6.1f} {r['notices']:>7}", flush=True)
            for line in r["errors"]:
                print(f"    {line[:240]}")
            failed |= bool(r["refused"] or r["over"])
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2:])
    else:
        sys.exit(main())
