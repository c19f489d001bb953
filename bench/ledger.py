"""Ledger throughput against raw SQLite commits, measured in the same run (architecture.md "Performance targets").

    .venv/bin/python bench/ledger.py [--processes 8] [--seconds 3] [--rounds 2] [--pairs 400] [--dir DIR] [--postgres none]

Prints:

- ledger transactions per second from N processes on one ledger file (a reserve and its settle
  count as two transactions), each process reserving and settling attempts of its own conversations;
- raw SQLite commits per second from N processes doing ``BEGIN IMMEDIATE; INSERT; COMMIT`` on a
  file in the same directory with the same journal mode (WAL) and ``synchronous`` setting;
- their ratio (goal >= 0.8): the median of the per-round ratios, with their min and max;
- the sequential cost of one reserve+settle as a multiple of two raw commits (goal <= 1.1): the
  median over rounds of 50 pairs of each round's ratio of medians, with their min and max; and
  how much of it is the ledger's SQL alone (its statements replayed without its Python).

Raw and ledger runs alternate, ``--rounds`` times each, so drift in the machine affects both.

Then the same for a PostgreSQL ledger (docs/architecture.md "Ledger on PostgreSQL"): ledger
transactions per second from N processes as a ratio to raw PostgreSQL commits per second
(``BEGIN; INSERT; COMMIT`` from N processes, ``synchronous_commit`` on, the ledger's own
durability) on the same server, in the same run. ``--postgres URL`` uses that server (a new
schema in it, dropped afterwards); by default a throwaway server is started as the tests start
one (tests/pgserver.py), with fsync and synchronous_commit on; ``--postgres none`` skips it.
"""

import argparse
import multiprocessing
import pathlib
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

NANO = 10**9


class Account:
    def __init__(self, name, key_env, budget_nusd):
        self.name, self.key_env, self.budget_nusd = name, key_env, budget_nusd
        self.daily_budget_nusd, self.rank, self.weight, self.models = None, 0, 1, None


class Quote:
    requested_model = "claude-sonnet-4-5-20250929"
    ceiling_nusd = 3_000_000_000
    price_revision = "bench"
    request_digest = "0" * 64
    cert = None
    hour_after_key = False


ACCOUNTS = [Account("alpha", "ALPHA_KEY", 10**15), Account("beta", "BETA_KEY", 10**15)]
USAGE = {"input_tokens": 1200, "output_tokens": 300, "cache_read_input_tokens": 0}


def spread(ratios):
    """The median of per-round ratios with their min and max: how every bench reports a ratio
    (docs/performance.md "Goals and their latest figures")."""
    return f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}; {len(ratios)} rounds)"


def raw_connect(path):
    conn = sqlite3.connect(path, timeout=5.0, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 5000")
    conn.execute("PRAGMA synchronous = FULL")
    assert conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"  # the ledger's journal
    return conn


def wait_for_start(ready, window):
    with ready.get_lock():
        ready.value += 1
    while window[0] == 0:
        time.sleep(0.001)
    while time.time() < window[0]:
        time.sleep(0.0005)
    return window[1]


def raw_worker(path, ready, window, counts, index):
    conn = raw_connect(path)
    n = 0
    stop_at = wait_for_start(ready, window)
    while time.time() < stop_at:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (v) VALUES (?)", (uuid.uuid4().hex,))
        conn.execute("COMMIT")
        n += 1
    counts[index] = n


def raw_pg_worker(url, ready, window, counts, index):
    import psycopg

    conn = psycopg.connect(url, autocommit=True)
    assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "on"
    n = 0
    stop_at = wait_for_start(ready, window)
    while time.time() < stop_at:
        conn.execute("BEGIN")
        conn.execute("INSERT INTO bench_raw (v) VALUES (%s)", (uuid.uuid4().hex,))
        conn.execute("COMMIT")
        n += 1
    counts[index] = n


def postgres(args):
    """The PostgreSQL ledger against raw PostgreSQL commits on the same server."""
    try:
        import psycopg
    except ImportError:
        print("PostgreSQL: skipped (psycopg is not installed: pip install -e '.[postgres]')")
        return
    server = None
    base = args.postgres
    if base in (None, "start"):
        sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tests"))
        import pgserver

        if pgserver.binaries() is None:
            print("PostgreSQL: skipped (no server binaries; Debian: apt-get install postgresql)")
            return
        server = pgserver.Server(durable=True).start()
        base = server.url
    from llm_accounts.ledger import Ledger
    from llm_accounts.paths import mask_url

    name = f"bench_{uuid.uuid4().hex[:12]}"
    admin = psycopg.connect(base, autocommit=True)
    try:
        admin.execute(f"CREATE SCHEMA {name}")
        admin.execute(f"CREATE SCHEMA {name}_raw")  # beside it: a ledger's schema holds only the ledger
        url = f"{base}{'&' if '?' in base else '?'}options=-csearch_path%3D{name}"
        raw_url = f"{url}_raw"
        admin.execute(f"CREATE TABLE {name}_raw.bench_raw (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text NOT NULL)")
        Ledger(url).close()
        settings = {k: admin.execute(f"SHOW {k}").fetchone()[0] for k in ("fsync", "synchronous_commit", "server_version")}
        print(f"PostgreSQL {settings['server_version']} at {mask_url(base)}{' (started for this run)' if server else ''}; "
              f"fsync={settings['fsync']}, synchronous_commit={settings['synchronous_commit']}")
        raw_rates, ledger_rates = [], []
        for round_ in range(args.rounds):
            raw_rates.append(concurrent(raw_pg_worker, raw_url, args.processes, args.seconds))
            ledger_rates.append(concurrent(ledger_worker, url, args.processes, args.seconds))
            print(f"  round {round_ + 1}: raw {raw_rates[-1]:8.1f} commits/s   ledger {ledger_rates[-1]:8.1f} transactions/s")
        ratios = [ledger / raw for raw, ledger in zip(raw_rates, ledger_rates)]
        print(f"raw PostgreSQL commits/s:    {statistics.median(raw_rates):8.1f} (median)")
        print(f"ledger transactions/s:       {statistics.median(ledger_rates):8.1f} (median)")
        print(f"ratio ledger/raw:            {spread(ratios)}")
    finally:
        try:
            admin.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")
            admin.execute(f"DROP SCHEMA IF EXISTS {name}_raw CASCADE")
        finally:
            admin.close()
            if server is not None:
                server.stop()


def ledger_pair(ledger, Scope, Complete, scope, attempt_id):
    ledger.reserve(scope, attempt_id, Quote, ACCOUNTS)
    ledger.settle(attempt_id, Complete(4_500_000, USAGE, Quote.requested_model, None))


def ledger_worker(path, ready, window, counts, index):
    from llm_accounts.ledger import Complete, Ledger, Scope

    ledger = Ledger(path)
    n = 0
    stop_at = wait_for_start(ready, window)
    while time.time() < stop_at:
        scope = Scope("conversation", f"w{index}-{n // 8}")  # a new conversation every 4 pairs
        ledger_pair(ledger, Scope, Complete, scope, uuid.uuid4().hex)
        n += 2
    counts[index] = n


def concurrent(target, path, processes, seconds):
    ctx = multiprocessing.get_context("spawn")
    counts = ctx.Array("l", processes)
    ready = ctx.Value("i", 0)
    window = ctx.Array("d", 2, lock=False)  # start and stop times, set once every process is ready
    workers = [ctx.Process(target=target, args=(path, ready, window, counts, i)) for i in range(processes)]
    for w in workers:
        w.start()
    while ready.value < processes:
        if not all(w.is_alive() for w in workers):
            raise SystemExit("a worker failed to start")
        time.sleep(0.01)
    window[1] = time.time() + 0.1 + seconds
    window[0] = time.time() + 0.1
    for w in workers:
        w.join()
        if w.exitcode != 0:
            raise SystemExit(f"a worker failed (exit {w.exitcode})")
    return sum(counts) / seconds


class Recorder:
    """Wraps the ledger's connection to record one reserve+settle's statements for replay."""

    def __init__(self, conn):
        self.conn, self.statements = conn, []

    def execute(self, sql, *params):
        self.statements.append((sql, params))
        return self.conn.execute(sql, *params)

    def __getattr__(self, name):
        return getattr(self.conn, name)


def replayer(ledger, Scope, Complete):
    """The SQL of one reserve+settle on a bound conversation, to run again without the ledger's
    Python: what the statements and their pages cost by themselves."""
    marker = "replay-marker"
    ledger_pair(ledger, Scope, Complete, Scope("conversation", "replay"), uuid.uuid4().hex)
    conn, ledger._conn = ledger._conn, Recorder(ledger._conn)
    try:
        ledger_pair(ledger, Scope, Complete, Scope("conversation", "replay"), marker)
        statements = ledger._conn.statements
    finally:
        ledger._conn = conn

    def swap(value, new_id):
        return new_id if value == marker else value

    def replay():
        new_id = uuid.uuid4().hex
        for sql, params in statements:
            if not params:
                conn.execute(sql)
            elif isinstance(params[0], dict):
                conn.execute(sql, {k: swap(v, new_id) for k, v in params[0].items()})
            else:
                conn.execute(sql, tuple(swap(v, new_id) for v in params[0]))

    return replay


def sequential(raw_path, ledger_path, pairs):
    from llm_accounts.ledger import Complete, Ledger, Scope

    conn = raw_connect(raw_path)
    ledger = Ledger(ledger_path)
    replay = replayer(ledger, Scope, Complete)
    rounds = []
    for i in range(pairs):
        if i % SEQUENTIAL_ROUND == 0:
            rounds.append(([], [], []))
        raw_times, pair_times, replay_times = rounds[-1]
        t = time.perf_counter()
        for _ in range(2):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (v) VALUES (?)", (uuid.uuid4().hex,))
            conn.execute("COMMIT")
        raw_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        ledger_pair(ledger, Scope, Complete, Scope("conversation", f"seq-{i // 4}"), uuid.uuid4().hex)
        pair_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        replay()
        replay_times.append(time.perf_counter() - t)
    # Each round's medians: (two raw commits, reserve+settle, the same SQL replayed), in seconds.
    return [tuple(statistics.median(times) for times in r) for r in rounds]


#: Sequential pairs per round: each round's figure is the median of its pairs, and the ratio
#: reported the median of the rounds' ratios.
SEQUENTIAL_ROUND = 50


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=400, help="sequential reserve+settle pairs")
    parser.add_argument("--dir", help="directory for the two files (default: a new temporary directory)")
    parser.add_argument("--postgres", metavar="URL", help="PostgreSQL server to measure on; 'start' (default) starts one, 'none' skips")
    args = parser.parse_args()

    from llm_accounts.ledger import Ledger

    work = pathlib.Path(tempfile.mkdtemp(prefix="ledger-bench-", dir=args.dir))
    try:
        raw_path, ledger_path = str(work / "raw.db"), str(work / "ledger.db")
        conn = raw_connect(raw_path)
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        conn.close()
        Ledger(ledger_path).close()

        print(f"directory: {work} (both files); journal_mode=wal, synchronous=FULL; SQLite {sqlite3.sqlite_version}")
        print(f"{args.processes} processes, {args.seconds:g} s per run, {args.rounds} rounds alternating raw and ledger")
        raw_rates, ledger_rates = [], []
        for round_ in range(args.rounds):
            raw_rates.append(concurrent(raw_worker, raw_path, args.processes, args.seconds))
            ledger_rates.append(concurrent(ledger_worker, ledger_path, args.processes, args.seconds))
            print(f"  round {round_ + 1}: raw {raw_rates[-1]:8.1f} commits/s   ledger {ledger_rates[-1]:8.1f} transactions/s")
        ratios = [ledger / raw for raw, ledger in zip(raw_rates, ledger_rates)]
        ratio = statistics.median(ratios)
        print(f"raw SQLite commits/s:        {statistics.median(raw_rates):8.1f} (median)")
        print(f"ledger transactions/s:       {statistics.median(ledger_rates):8.1f} (median)")
        print(f"ratio ledger/raw:            {spread(ratios)}   (goal >= 0.8: {'met' if ratio >= 0.8 else 'MISSED'})")

        rounds = sequential(raw_path, ledger_path, args.pairs)
        multiples = [pair / raw_two for raw_two, pair, _ in rounds]
        multiple = statistics.median(multiples)
        raw_two, pair, sql_only = (statistics.median(r[i] for r in rounds) for i in range(3))
        print(
            f"sequential, {len(rounds)} rounds of {SEQUENTIAL_ROUND} pairs (each the median of its pairs): "
            f"two raw commits {raw_two * 1000:.3f} ms, reserve+settle {pair * 1000:.3f} ms"
        )
        print(f"reserve+settle / two raw commits: {spread(multiples)}   (goal <= 1.1: {'met' if multiple <= 1.1 else 'MISSED'})")
        print(
            f"  of which the same SQL replayed without the ledger's Python: {sql_only * 1000:.3f} ms "
            f"({sql_only / raw_two:.3f} x two raw commits); Python: {(pair - sql_only) * 1000:.3f} ms"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.postgres != "none":
        postgres(args)


if __name__ == "__main__":
    main()
