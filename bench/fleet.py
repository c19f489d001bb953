"""A fleet on one ledger: admissions per second against raw commits, same processes, same run.

    sudo .venv/bin/python bench/fleet.py [--quick] [--rounds R] [--seconds S]
        [--processes 8,32,64] [--accounts 1,8,50] [--rtt 0,1,5] [--backends sqlite,postgres]

Printed, never asserted (docs/performance.md "Fleet"). For each number of processes N a pool of N
worker processes is started once; every arm sends the same pool the same command and counts what
each process did between one start and one stop instant:

- **raw**: single-row commits (``BEGIN; INSERT one row; COMMIT``) on the same server or in a file
  beside the ledger, with the same durability (``synchronous_commit=on``, fsync on;
  ``synchronous=FULL`` and the same journal for SQLite);
- **ledger k**: admissions through the ledger's own API, ``reserve`` then ``settle`` (two ledger
  transactions), with k accounts declared; process i is pinned to account ``i mod k``, so with
  k = 1 every process admits on one hot account and with k = 50 the admissions can only touch
  different accounts when N <= 50.

The ratio is ledger transactions per second (2 x admissions) over raw commits per second, each arm's
raw taken from the same round. Arms are interleaved, their order rotated each round, so drift in
a shared machine affects both.

SQLite: a rollback journal (``journal_mode=DELETE``) against WAL, both ``synchronous=FULL``, each
with raw commits in the same journal mode; then the ledger again with a reader process running
``status`` and a ``mode=ro`` read summing the attempt table (what Datasette does) 20 times a
second, to see whether readers delay admission. ``ledger_busy`` refusals are counted.

PostgreSQL: a throwaway server (tests/pgserver.py, fsync and synchronous_commit on). The worker
processes run in a network namespace joined to the host by a veth pair with a private /30
(one of 10.231.0.0/16 no interface uses, chosen from the run's process id, so two runs at once
never share one), set up and torn down here (root needed; without it everything runs on the
loopback and the round-trip arms are skipped). The server listens on 127.0.0.1 and the host end of
the veth. Round trip 0 connects across the veth directly; 1 ms and 5 ms add ``tc qdisc netem
delay`` of half the round trip on each end of the veth, or, on a kernel without ``sch_netem``,
relay each connection through a delaying TCP relay on the host end (half the round trip each
way, order kept; the relay is a process of its own, its CPU is not the server's).

Server CPU: the time on a CPU (``/proc/<pid>/schedstat``, nanoseconds) of the arm's own server
backends (found by application_name in ``pg_stat_activity``) over the arm, divided by what the arm
did: the statements, triggers, locking and commits each backend ran, with no extension to load.
Background processes (WAL writer, checkpointer, autovacuum) are left out, for both arms alike. Client CPU: each worker's
``time.process_time()`` over the arm. *CPU ratio*: a raw commit's CPU (server and client) over a
ledger transaction's, the ratio the machine's cores alone would allow when the server and the
clients share them; a measured ratio near it says the run was CPU-bound. Waits: ``pg_stat_activity`` sampled every 10 ms during every
arm (so the sampling loads each alike), counted for the ledger's connections (application_name ``llm-accounts``): a wait event, or
``CPU`` for an active backend not waiting, or ``ClientRead (idle in transaction)`` for a backend
holding a transaction open while it waits for its client.

Floors (``--floors``): one process's server CPU per admission against the same rows written by
hand, and a cold process (connect, open, one admission) against a warm admission: on a direct
connection beside its floor (the rows written by hand from a new connection), and through
PgBouncer in transaction mode where it is installed (docs/postgresql.md).
"""

import argparse
import asyncio
import collections
import ctypes
import multiprocessing
import os
import pathlib
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NS_PREFIX = 30
BUDGET = 10**15  # nanodollars: never the limit
CEILING = 3_000_000_000
COST = 4_500_000
MODEL = "claude-sonnet-4-5-20250929"
USAGE = {"input_tokens": 1200, "output_tokens": 300, "cache_read_input_tokens": 0}


def declared(name):
    """A declared account as ``llm accounts`` reads one (``declarations.Account``, frozen, so the
    ledger checks it once per process, as it does for a real declaration)."""
    from llm_accounts.declarations import Account

    return Account(name, name.upper() + "_KEY", BUDGET)


class Quote:
    requested_model = MODEL
    ceiling_nusd = CEILING
    price_revision = "bench"
    request_digest = "0" * 64
    cert = None
    hour_after_key = False


ACCOUNTS = [declared(f"acct{i:02d}") for i in range(50)]
READ_EVERY_S = 0.05  # the reader arm: status and a Datasette-style read 20 times a second


# ---------------------------------------------------------------------------------------------
# Network: a namespace for the clients, a veth pair, a delay on it


def sh(*argv, check=True):
    return subprocess.run(argv, check=check, capture_output=True, text=True)


class Network:
    """The clients' namespace and its veth pair; ``delay(rtt_ms)`` sets netem on both ends when
    the kernel has it (``self.netem``), else the caller relays."""

    def __init__(self):
        tag = f"{os.getpid() % 100000}"
        self.ns, self.host_if, self.peer_if = f"llmfleet{tag}", f"flh{tag}", f"fln{tag}"
        self.host, self.peer = private_pair()
        self.up = self.netem = False

    def __enter__(self):
        try:
            sh("ip", "netns", "add", self.ns)
            self.up = True
            sh("ip", "link", "add", self.host_if, "type", "veth", "peer", "name", self.peer_if)
            sh("ip", "link", "set", self.peer_if, "netns", self.ns)
            sh("ip", "addr", "add", f"{self.host}/{NS_PREFIX}", "dev", self.host_if)
            sh("ip", "link", "set", self.host_if, "up")
            sh("ip", "-n", self.ns, "addr", "add", f"{self.peer}/{NS_PREFIX}", "dev", self.peer_if)
            sh("ip", "-n", self.ns, "link", "set", self.peer_if, "up")
            sh("ip", "-n", self.ns, "link", "set", "lo", "up")
            self.netem = sh("tc", "qdisc", "add", "dev", self.host_if, "root", "netem", "delay", "0ms", check=False).returncode == 0
        except (subprocess.CalledProcessError, FileNotFoundError) as error:
            self.__exit__()
            raise RuntimeError(f"network namespace setup failed: {getattr(error, 'stderr', error)}") from None
        return self

    def delay(self, rtt_ms):
        half = f"{rtt_ms / 2:g}ms"
        sh("tc", "qdisc", "replace", "dev", self.host_if, "root", "netem", "delay", half)
        sh("tc", "-n", self.ns, "qdisc", "replace", "dev", self.peer_if, "root", "netem", "delay", half)

    def __exit__(self, *exc):
        if self.up:
            sh("ip", "link", "del", self.host_if, check=False)
            sh("ip", "netns", "del", self.ns, check=False)
            self.up = False


def private_pair():
    """The host and peer addresses of a /30 in 10.231.0.0/16 that no interface here uses, chosen
    from this process's id: two runs at once (each its own process) never share one."""
    used = sh("ip", "-o", "-4", "addr", "show", check=False).stdout
    for step in range(16384):
        block = (os.getpid() + step) % 16384  # 16,384 blocks of 4 addresses
        base = f"10.231.{block // 64}."
        host, peer = f"{base}{block % 64 * 4 + 1}", f"{base}{block % 64 * 4 + 2}"
        if f" {host}/" not in used and f" {peer}/" not in used:
            return host, peer
    raise RuntimeError("no free /30 in 10.231.0.0/16")


def enter_netns(name):
    """Join the network namespace ``name`` (this process is single-threaded here)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
            raise OSError(ctypes.get_errno(), "setns")
    finally:
        os.close(fd)


def relay_main(listen_host, ports, target, ready):
    """A TCP relay per ``(listen_port, rtt_ms)`` forwarding to ``target`` with half the round trip
    added each way. Each direction keeps a queue of (due, bytes) flushed in order by one timer."""

    async def pipe(reader, writer, delay):
        loop = asyncio.get_running_loop()
        queue, timer = collections.deque(), [None]

        def flush():
            timer[0] = None
            now = loop.time()
            while queue and queue[0][0] <= now:
                writer.write(queue.popleft()[1])
            if queue:
                timer[0] = loop.call_at(queue[0][0], flush)

        try:
            while data := await reader.read(65536):
                queue.append((loop.time() + delay, data))
                if timer[0] is None:
                    timer[0] = loop.call_at(queue[0][0], flush)
            await asyncio.sleep(delay)
            flush()
            writer.write_eof()
        except (ConnectionError, OSError):
            pass

    def serve(rtt_ms):
        async def handle(reader, writer):
            up_reader, up_writer = await asyncio.open_connection(*target)
            for s in (writer, up_writer):
                s.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            delay = rtt_ms / 2000
            await asyncio.gather(pipe(reader, up_writer, delay), pipe(up_reader, writer, delay))
            for s in (writer, up_writer):
                s.close()

        return handle

    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))  # stopped by the bench: nothing to flush

    async def main():
        servers = [await asyncio.start_server(serve(rtt), listen_host, port) for port, rtt in ports]
        ready.set()
        await asyncio.gather(*(s.serve_forever() for s in servers))

    asyncio.run(main())


# ---------------------------------------------------------------------------------------------
# Workers: one pool of N processes per N, commanded arm by arm


def worker_main(index, netns, commands, results):
    if netns:
        enter_netns(netns)
    from llm_accounts.ledger import sqlite as ledger_sqlite
    from llm_accounts.errors import AccountsError
    from llm_accounts.ledger import Complete, Ledger, Scope

    ledgers, raws = {}, {}

    def close_all():
        for conn in [*ledgers.values(), *raws.values()]:
            conn.close()
        ledgers.clear()
        raws.clear()

    def raw_conn(target):
        if target["key"] not in raws:
            if target["kind"] == "sqlite":
                conn = sqlite3.connect(target["raw"], timeout=5.0, isolation_level=None)
                conn.execute(f"PRAGMA journal_mode = {target['journal']}")
                conn.execute("PRAGMA synchronous = FULL")
            else:
                import psycopg

                conn = psycopg.connect(target["raw"], autocommit=True, application_name="fleet-raw")
            raws[target["key"]] = conn
        return raws[target["key"]]

    def ledger(target):
        if target["key"] not in ledgers:
            if target["kind"] == "sqlite":
                ledger_sqlite.JOURNAL_MODE = target["journal"]
            ledgers[target["key"]] = Ledger(target["ledger"])
        return ledgers[target["key"]]

    results.put(("ready", index))
    n = 0
    while True:
        command = commands.get()
        if command[0] == "stop":
            close_all()
            return
        if command[0] == "switch":  # a new server address: drop the old connections
            close_all()
            results.put(("switched", index))
            continue
        arm, target, k, start_at, stop_at = command
        try:
            if arm == "raw":
                conn, sqlite = raw_conn(target), target["kind"] == "sqlite"
                insert = "INSERT INTO bench_raw (v) VALUES (?)" if sqlite else "INSERT INTO bench_raw (v) VALUES (%s)"
                begin = "BEGIN IMMEDIATE" if sqlite else "BEGIN"
            else:
                led = ledger(target)
                declared, pinned = ACCOUNTS[:k], ACCOUNTS[index % k].name
            done = busy = 0
            while time.time() < start_at:
                time.sleep(0.0005)
            cpu = time.process_time()
            while time.time() < stop_at:
                if arm == "raw":
                    try:
                        conn.execute(begin)
                        conn.execute(insert, (uuid.uuid4().hex,))
                        conn.execute("COMMIT")
                        done += 1
                    except sqlite3.OperationalError:
                        conn.execute("ROLLBACK") if conn.in_transaction else None
                        busy += 1
                    continue
                n += 1
                attempt = f"w{index}-{n}-{uuid.uuid4().hex[:8]}"
                try:
                    led.reserve(Scope("conversation", f"w{index}-{n // 4}"), attempt, Quote, declared, pinned=pinned)
                except AccountsError as error:
                    busy += error.code == "ledger_busy"
                    continue
                try:
                    led.settle(attempt, Complete(COST, USAGE, MODEL, None))
                    done += 1
                except AccountsError as error:
                    busy += error.code == "ledger_busy"
            results.put(("done", index, done, busy, time.process_time() - cpu))
        except Exception as error:  # reported, never hidden
            results.put(("failed", index, f"{type(error).__name__}: {error}"))


class Pool:
    def __init__(self, processes, netns):
        ctx = multiprocessing.get_context("spawn")
        self.results = ctx.Queue()
        self.commands = [ctx.Queue() for _ in range(processes)]
        self.workers = [ctx.Process(target=worker_main, args=(i, netns, self.commands[i], self.results), daemon=True)
                        for i in range(processes)]
        for w in self.workers:
            w.start()
        self._collect("ready", timeout=600)
        self.warm = set()

    def _collect(self, kind, timeout):
        got = []
        deadline = time.time() + timeout
        while len(got) < len(self.workers):
            message = self.results.get(timeout=max(1, deadline - time.time()))
            if message[0] == "failed":
                raise SystemExit(f"worker {message[1]} failed: {message[2]}")
            if message[0] == kind:
                got.append(message)
        return got

    def switch(self):
        self.warm = set()
        for q in self.commands:
            q.put(("switch",))
        self._collect("switched", timeout=120)

    def warmup(self, arm, target):
        """Connect (and open the ledger) outside any measured window, once per pool and target."""
        if (arm, target["key"]) not in self.warm:
            self.warm.add((arm, target["key"]))
            self.run(arm, target, 1, 0.3)  # a few operations too: plans, caches, trigger functions

    def run(self, arm, target, k, seconds):
        self.warmup(arm, target)
        start_at = time.time() + 0.3
        for q in self.commands:
            q.put((arm, target, k, start_at, start_at + seconds))
        got = self._collect("done", timeout=seconds + 120)
        return sum(m[2] for m in got), sum(m[3] for m in got), sum(m[4] for m in got)

    def stop(self):
        for q in self.commands:
            q.put(("stop",))
        for w in self.workers:
            w.join(30)


# ---------------------------------------------------------------------------------------------
# Server CPU and waits


def backend_cpu(pids):
    """Seconds on a CPU of each server backend in ``pids`` (gone ones left out), from
    ``/proc/<pid>/schedstat``: the scheduler's own nanoseconds, where ``/proc/<pid>/stat`` rounds each
    backend to 10 ms ticks (64 backends, 64 rounding errors)."""
    spent = {}
    for pid in pids:
        try:
            spent[pid] = int(open(f"/proc/{pid}/schedstat").read().split()[0]) / 1e9
        except OSError:
            continue
    return spent


class WaitSampler(threading.Thread):
    def __init__(self, url):
        super().__init__(daemon=True)
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.lock = threading.Lock()
        self.counts, self.on, self.stopped = collections.Counter(), threading.Event(), threading.Event()
        self.app = "llm-accounts"  # whose backends to sample: the arm's (it runs in every arm, alike)

    def query(self, sql, params=()):
        with self.lock:
            return self.conn.execute(sql, params).fetchall()

    def run(self):
        query = ("SELECT state, wait_event_type, wait_event FROM pg_stat_activity "
                 "WHERE application_name = %s AND pid <> pg_backend_pid()")
        while not self.stopped.is_set():
            if self.on.wait(0.05):
                for state, kind, event in self.query(query, (self.app,)):
                    if state == "idle":
                        continue  # between transactions: the client's own time
                    if state == "idle in transaction":
                        self.counts["ClientRead (idle in transaction)"] += 1
                    elif event is None:
                        self.counts["CPU (active, not waiting)"] += 1
                    else:
                        self.counts[f"{kind}:{event}"] += 1
                time.sleep(0.01)


# ---------------------------------------------------------------------------------------------
# Arms and reports


def rotated(items, by):
    by %= len(items)
    return items[by:] + items[:by]


def reader_main(ledger_path, journal, ready, stop_at, out):
    from llm_accounts.ledger import sqlite as ledger_sqlite
    from llm_accounts.ledger import Ledger

    ledger_sqlite.JOURNAL_MODE = journal
    led = Ledger(ledger_path)
    ro = sqlite3.connect(f"{pathlib.Path(ledger_path).as_uri()}?mode=ro", uri=True, timeout=5.0)
    ready.set()
    reads = 0
    while time.time() < stop_at.value or stop_at.value == 0:
        led.status(ACCOUNTS[:8])
        ro.execute("SELECT count(*), sum(cost_nusd) FROM attempt").fetchone()
        reads += 1
        time.sleep(READ_EVERY_S)
    out.value = reads


def sqlite_section(pool, n, args, work):
    print(f"\n### SQLite {sqlite3.sqlite_version}, N = {n} processes, synchronous=FULL")
    rows = []
    targets = {}
    for journal in ("delete", "wal"):
        raw_path, ledger_path = str(work / f"raw-{journal}.db"), str(work / f"ledger-{journal}-{n}.db")
        conn = sqlite3.connect(raw_path, isolation_level=None)
        conn.execute(f"PRAGMA journal_mode = {journal}")
        conn.execute("CREATE TABLE IF NOT EXISTS bench_raw (id INTEGER PRIMARY KEY, v TEXT NOT NULL)")
        conn.close()
        targets[journal] = {"kind": "sqlite", "key": f"sqlite-{journal}", "journal": journal, "raw": raw_path,
                            "ledger": ledger_path}
    arms = [(j, a, k) for j in targets for a, k in [("raw", 0)] + [("ledger", k) for k in args.accounts]]
    arms += [(j, "ledger+reader", args.accounts[-1]) for j in targets]
    results = collections.defaultdict(list)
    ctx = multiprocessing.get_context("spawn")
    for round_ in range(args.rounds):
        for journal, arm, k in rotated(arms, round_):
            target = targets[journal]
            reader = None
            if arm == "ledger+reader":
                ready, stop_at, out = ctx.Event(), ctx.Value("d", 0.0), ctx.Value("l", 0)
                reader = ctx.Process(target=reader_main, args=(target["ledger"], journal, ready, stop_at, out))
                reader.start()
                ready.wait(120)
            done, busy, cpu = pool.run("raw" if arm == "raw" else "ledger", target, k, args.seconds)
            reads = None
            if reader is not None:
                stop_at.value = time.time()
                reader.join(60)
                reads = out.value
            results[(journal, arm, k)].append((done / args.seconds, busy, cpu / max(done, 1), reads))
    for journal in targets:
        raws = [r[0] for r in results[(journal, "raw", 0)]]
        for arm, k in [("ledger", k) for k in args.accounts] + [("ledger+reader", args.accounts[-1])]:
            got = results[(journal, arm, k)]
            ratios = [2 * g[0] / r for g, r in zip(got, raws)]
            rows.append((journal, arm, k, statistics.mean(raws), statistics.mean(g[0] for g in got), ratios,
                         sum(g[1] for g in got), statistics.mean(g[2] for g in got),
                         None if got[0][3] is None else sum(g[3] for g in got) / (args.seconds * len(got))))
    print("| journal | arm | accounts | raw commits/s | admissions/s | ratio (2 x adm / raw), per round | ledger_busy | client CPU ms/adm | reads/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for journal, arm, k, raw, adm, ratios, busy, cpu, reads in rows:
        print(f"| {journal} | {arm} | {k} | {raw:.0f} | {adm:.0f} | {statistics.mean(ratios):.2f} "
              f"({', '.join(f'{r:.2f}' for r in ratios)}) | {busy} | {cpu * 1000:.2f} | {'' if reads is None else f'{reads:.0f}'} |")
    return rows


def postgres_section(pool, n, args, pg, rtts, summary):
    for rtt in rtts:
        target_ledger, target_raw = pg["urls"][rtt]
        pool.switch()
        if pg["network"] is not None and pg["network"].netem:
            pg["network"].delay(rtt)
        print(f"\n### PostgreSQL {pg['version']}, N = {n} processes, round trip {rtt} ms{pg['how'][rtt]}")
        ledger_target = {"kind": "pg", "key": f"pg-ledger-{rtt}", "ledger": target_ledger}
        raw_target = {"kind": "pg", "key": f"pg-raw-{rtt}", "raw": target_raw}
        arms = [("raw", 0)] + [("ledger", k) for k in args.accounts]
        results = collections.defaultdict(list)
        waits = collections.defaultdict(collections.Counter)  # per ledger arm (k accounts)
        for round_ in range(args.rounds):
            for arm, k in rotated(arms, round_):
                target = raw_target if arm == "raw" else ledger_target
                pool.warmup(arm, target)
                pids = [row[0] for row in pg["sampler"].query(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                    ("fleet-raw" if arm == "raw" else "llm-accounts",))]
                before = backend_cpu(pids)
                # Sampled in every arm, so its queries load the machine alike; counted for the ledger's.
                pg["sampler"].counts = collections.Counter()
                pg["sampler"].app = "fleet-raw" if arm == "raw" else "llm-accounts"
                pg["sampler"].on.set()
                done, busy, cpu = pool.run(arm, target, k, args.seconds)
                pg["sampler"].on.clear()
                after = backend_cpu(pids)
                spent = sum(after[pid] - before[pid] for pid in after if pid in before)
                if arm == "ledger":
                    waits[k].update(pg["sampler"].counts)
                results[(arm, k)].append((done / args.seconds, busy, cpu / max(done, 1),
                                          spent / max(done, 1)))
        raws = results[("raw", 0)]
        raw_rate = statistics.mean(r[0] for r in raws)
        raw_server = statistics.mean(r[3] for r in raws)
        raw_client = statistics.mean(r[2] for r in raws)
        print(f"raw: {raw_rate:.0f} commits/s; server CPU {raw_server * 1000:.3f} ms/commit; client CPU {raw_client * 1000:.3f} ms/commit")
        print("| accounts | admissions/s | ledger tx/s | ratio (2 x adm / raw): median of rounds (min, max) | ledger_busy | server CPU ms/adm | / raw commit | client CPU ms/adm | CPU ratio |")
        print("|---|---|---|---|---|---|---|---|---|")
        for k in args.accounts:
            got = results[("ledger", k)]
            ratios = [2 * g[0] / r[0] for g, r in zip(got, raws)]
            adm = statistics.mean(g[0] for g in got)
            server = statistics.mean(g[3] for g in got)
            client = statistics.mean(g[2] for g in got)
            # The ratio the machine's CPU alone would allow (both sides on the same cores): a raw
            # commit's CPU, server and client, over a ledger transaction's. Near the measured
            # ratio, the run was CPU-bound.
            cpu_ratio = (raw_server + raw_client) / ((server + client) / 2)
            print(f"| {k} | {adm:.0f} | {2 * adm:.0f} | {ratio_text(ratios)} | "
                  f"{sum(g[1] for g in got)} | {server * 1000:.3f} | {server / raw_server:.1f} x | {client * 1000:.3f} | {cpu_ratio:.2f} |")
            summary.append((n, rtt, k, raw_rate, adm, statistics.median(ratios), server / raw_server, cpu_ratio))
        for k in args.accounts:
            total = sum(waits[k].values()) or 1
            print(f"top waits of the ledger's backends over {k} account{'s' if k > 1 else ''} (share of samples of "
                  "non-idle backends): " + "; ".join(f"{name} {count / total:.0%}" for name, count in waits[k].most_common(5)))


def wal_bytes(conn, since):
    return conn.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", (str(since),)).fetchone()[0]


def breakdown(pg, admissions):
    """One process, sequential: server CPU per admission with the totals triggers and without
    them (a second ledger schema whose attempt triggers are disabled), per admission's skeleton
    (its reads and writes with the attempt row alone: the floor of its shape), per raw commit,
    WAL per admission and per raw commit, and where the statement time goes (pg_stat_statements
    and track_functions, when the server has them)."""
    import psycopg

    from llm_accounts.ledger import Complete, Ledger, Scope

    server = pg["server"]
    admin = psycopg.connect(server.url, autocommit=True)
    print(f"\n### Where the server's time goes: one process, {admissions} admissions in a row, round trip 0")

    def backend_pid(app):
        return admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s AND datname = current_database()",
                             (app,)).fetchone()[0]

    def admit(led, tag, n):
        for i in range(n):
            attempt = f"{tag}-{i}-{uuid.uuid4().hex[:8]}"
            led.reserve(Scope("conversation", f"{tag}-{i // 4}"), attempt, Quote, ACCOUNTS[:8], pinned=ACCOUNTS[0].name)
            led.settle(attempt, Complete(COST, USAGE, MODEL, None))

    def cpu_per(fn, pid, n):
        before, started = backend_cpu([pid]), time.process_time()
        fn()
        after = backend_cpu([pid])
        return (after[pid] - before[pid]) / n, (time.process_time() - started) / n

    rows = []
    for schema, triggers in (("ledger_seq", True), ("ledger_notrig", False)):
        admin.execute(f"CREATE SCHEMA {schema}")
        led = Ledger(f"{server.url}?options=-csearch_path%3D{schema}")
        if not triggers:
            admin.execute(f"ALTER TABLE {schema}.attempt DISABLE TRIGGER USER")
        admit(led, "warm", 20)
        pid = backend_pid("llm-accounts")
        if triggers and pg["stats"]:
            admin.execute("SELECT pg_stat_statements_reset()")
            admin.execute("SELECT pg_stat_reset()")
        before = admin.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
        server_cpu, client_cpu = cpu_per(lambda: admit(led, "seq", admissions), pid, admissions)
        if triggers:
            ledger_wal = wal_bytes(admin, before) / admissions
        rows.append(("admission (reserve + settle)" + ("" if triggers else ", totals triggers disabled"), server_cpu, client_cpu))
        if triggers and pg["stats"]:
            statements = admin.execute(
                "SELECT calls, total_exec_time, toplevel, regexp_replace(query, '\\s+', ' ', 'g') FROM pg_stat_statements "
                "WHERE query NOT LIKE '%pg_stat%' ORDER BY total_exec_time DESC").fetchall()
            functions = admin.execute(
                "SELECT funcname, calls, self_time FROM pg_stat_user_functions WHERE funcname LIKE 'llm_accounts%' "
                "ORDER BY self_time DESC").fetchall()
        led.close()
    raw = psycopg.connect(server.url + "?options=-csearch_path%3Draw", autocommit=True, application_name="fleet-seq-raw")
    pid = backend_pid("fleet-seq-raw")

    def commits(n):
        for _ in range(n):
            raw.execute("BEGIN")
            raw.execute("INSERT INTO bench_raw (v) VALUES (%s)", (uuid.uuid4().hex,))
            raw.execute("COMMIT")

    def skeleton(n):
        # An admission's shape with nothing but the attempt row: an unlocked read, then a write
        # that commits, twice (reserve, settle), on a table with the attempt's four indexes.
        for _ in range(n):
            key = uuid.uuid4().hex
            raw.execute("SELECT 1 FROM bench_attempt WHERE id = %s", (key,)).fetchall()
            raw.execute("INSERT INTO bench_attempt (id, account, state, ceiling_nusd, created_at) "
                        "VALUES (%s, 'a', 'open', 5, '2026-01-01')", (key,))
            raw.execute("SELECT * FROM bench_attempt WHERE id = %s", (key,)).fetchall()
            raw.execute("UPDATE bench_attempt SET state = 'settled', cost_nusd = 3 WHERE id = %s", (key,))

    raw.execute("""CREATE TABLE bench_attempt (seq bigint GENERATED ALWAYS AS IDENTITY, id text PRIMARY KEY,
        account text NOT NULL, state text NOT NULL, ceiling_nusd bigint NOT NULL, cost_nusd bigint,
        created_at text NOT NULL)""")
    raw.execute("CREATE INDEX ON bench_attempt (seq)")
    raw.execute("CREATE INDEX ON bench_attempt (state) WHERE state = 'open'")
    raw.execute("CREATE INDEX ON bench_attempt (account, created_at) WHERE state = 'open'")
    skeleton(20)
    server_cpu, client_cpu = cpu_per(lambda: skeleton(admissions), pid, admissions)
    rows.append(("admission's skeleton: the attempt row alone, read and written twice", server_cpu, client_cpu))
    commits(20)
    before = raw.execute("SELECT pg_current_wal_lsn()").fetchone()[0]
    server_cpu, client_cpu = cpu_per(lambda: commits(4 * admissions), pid, 4 * admissions)
    raw_wal = wal_bytes(raw, before) / (4 * admissions)
    rows.append(("raw commit", server_cpu, client_cpu))
    raw.close()
    print("| unit | server CPU ms | / raw commit | client CPU ms |")
    print("|---|---|---|---|")
    for name, server_cpu, client_cpu in rows:
        print(f"| {name} | {server_cpu * 1000:.3f} | {server_cpu / rows[-1][1]:.1f} x | {client_cpu * 1000:.3f} |")
    print(f"\nWAL per admission {ledger_wal:,.0f} bytes, per raw commit {raw_wal:,.0f} bytes (pg_current_wal_lsn)")
    if pg["stats"]:
        top = [s for s in statements if s[2]]
        total = sum(s[1] for s in top)
        print(f"\nstatements per admission: {sum(s[0] for s in top) / admissions:.1f} sent by the client; "
              f"execution time {total / admissions:.3f} ms per admission (pg_stat_statements, wall time inside the executor, "
              f"triggers included in the statement that fires them)")
        print("| per admission | calls | ms | statement |")
        print("|---|---|---|---|")
        for calls, spent, toplevel, query in statements[:12]:
            print(f"| {'client' if toplevel else 'trigger'} | {calls / admissions:.2f} | {spent / admissions:.3f} | `{query[:90]}` |")
        spent = sum(f[2] for f in functions)
        print(f"\ntotals trigger functions (track_functions, own time): {spent / admissions:.3f} ms per admission, "
              f"{spent / total:.0%} of the statements' execution time: " + ", ".join(
                  f"{name} {self_time / admissions:.3f} ms" for name, calls, self_time in functions))
    admin.close()


def ratio_text(ratios):
    """The median of per-round ratios, with the smallest and the largest (docs/performance.md)."""
    return f"{statistics.median(ratios):.2f} (min {min(ratios):.2f}, max {max(ratios):.2f})"


def hand_written(raw, n, tag, month, day):
    """``n`` admissions written by hand: per admission, the rows a reserve and its settle write
    (the attempt, the month's running totals, the binding of a new conversation, the day,
    month_outcome, month_model, month_conversation and month_conversation_total rows), each
    transaction one message of plain statements with its values inline, on a schema whose totals
    triggers are disabled. No read, no lock, no re-check: the floor of what an admission writes."""
    import psycopg

    cursor = psycopg.ClientCursor(raw)
    key = "provider = 'anthropic' AND account = 'acct00'"
    for i in range(n):
        attempt, conversation = f"{tag}-{i}-{uuid.uuid4().hex[:8]}", f"{tag}-{i // 4}"
        ts = time.strftime("%Y-%m-%dT%H:%M:%S.000000+00:00", time.gmtime())
        new = i % 4 == 0
        values = {"id": attempt, "c": conversation, "m": month, "d": day, "ts": ts, "ceiling": CEILING, "cost": COST,
                  "model": MODEL, "new": 1 if new else 0}
        reserve = [
            """INSERT INTO attempt (id, scope_kind, scope_id, provider, account, month_utc, day_utc, ceiling_nusd,
                 price_revision, requested_model, request_digest, state, created_at, host, pid, pid_started)
               VALUES (%(id)s, 'conversation', %(c)s, 'anthropic', 'acct00', %(m)s, %(d)s, %(ceiling)s, 'bench',
                 %(model)s, repeat('0', 64), 'open', %(ts)s, 'bench-host', 1, '1')""",
            """UPDATE month SET open_nusd = open_nusd + %(ceiling)s, day_open_nusd = day_open_nusd + %(ceiling)s
               WHERE provider = 'anthropic' AND name = 'acct00' AND month_utc = %(m)s""",
            *(["""INSERT INTO binding (scope_kind, scope_id, provider, account, created_at)
                  VALUES ('conversation', %(c)s, 'anthropic', 'acct00', %(ts)s)"""] if new else []),
            """INSERT INTO day (day_utc, provider, account, attempts, settled_nusd, open_nusd)
               VALUES (%(d)s, 'anthropic', 'acct00', 1, 0, %(ceiling)s) ON CONFLICT (day_utc, provider, account)
               DO UPDATE SET attempts = day.attempts + 1, open_nusd = day.open_nusd + excluded.open_nusd""",
            """INSERT INTO month_outcome (month_utc, provider, account, state, outcome, provider_error_type,
                 rejection_class, http_status, attempts, cost_nusd, open_nusd, last_at)
               VALUES (%(m)s, 'anthropic', 'acct00', 'open', '', '', '', 0, 1, 0, %(ceiling)s, %(ts)s)
               ON CONFLICT (month_utc, provider, account, state, outcome, provider_error_type, rejection_class, http_status)
               DO UPDATE SET attempts = month_outcome.attempts + 1, open_nusd = month_outcome.open_nusd + excluded.open_nusd,
                 last_at = GREATEST(month_outcome.last_at, excluded.last_at)""",
            """INSERT INTO month_model (month_utc, provider, account, model, attempts, settled_nusd, open_nusd)
               VALUES (%(m)s, 'anthropic', 'acct00', %(model)s, 1, 0, %(ceiling)s)
               ON CONFLICT (month_utc, provider, account, model) DO UPDATE SET attempts = month_model.attempts + 1,
                 open_nusd = month_model.open_nusd + excluded.open_nusd""",
            """INSERT INTO month_conversation (month_utc, provider, account, conversation, attempts, settled_nusd, open_nusd)
               VALUES (%(m)s, 'anthropic', 'acct00', %(c)s, 1, 0, %(ceiling)s)
               ON CONFLICT (month_utc, provider, account, conversation) DO UPDATE SET
                 attempts = month_conversation.attempts + 1, open_nusd = month_conversation.open_nusd + excluded.open_nusd""",
            """INSERT INTO month_conversation_total (month_utc, provider, account, conversations, attempts, settled_nusd,
                 open_nusd) VALUES (%(m)s, 'anthropic', 'acct00', %(new)s, 1, 0, %(ceiling)s)
               ON CONFLICT (month_utc, provider, account) DO UPDATE SET
                 conversations = month_conversation_total.conversations + excluded.conversations,
                 attempts = month_conversation_total.attempts + 1,
                 open_nusd = month_conversation_total.open_nusd + excluded.open_nusd""",
        ]
        settle = [
            """UPDATE attempt SET state = 'settled', settled_at = %(ts)s, outcome_at = %(ts)s, outcome = 'complete',
                 cost_nusd = %(cost)s, served_model = %(model)s, usage_json = '{"input_tokens": 1200, "output_tokens": 300}',
                 http_status = 200, tokens = 1500 WHERE id = %(id)s""",
            """UPDATE month SET open_nusd = open_nusd - %(ceiling)s, settled_nusd = settled_nusd + %(cost)s,
                 day_open_nusd = day_open_nusd - %(ceiling)s, day_settled_nusd = day_settled_nusd + %(cost)s
               WHERE provider = 'anthropic' AND name = 'acct00' AND month_utc = %(m)s""",
            f"""UPDATE day SET settled_nusd = settled_nusd + %(cost)s, open_nusd = open_nusd - %(ceiling)s
               WHERE day_utc = %(d)s AND {key}""",
            f"""UPDATE month_outcome SET attempts = attempts - 1, open_nusd = open_nusd - %(ceiling)s
               WHERE month_utc = %(m)s AND {key} AND state = 'open' AND outcome = '' AND provider_error_type = ''
                 AND rejection_class = '' AND http_status = 0""",
            """INSERT INTO month_outcome (month_utc, provider, account, state, outcome, provider_error_type,
                 rejection_class, http_status, attempts, cost_nusd, open_nusd, last_at)
               VALUES (%(m)s, 'anthropic', 'acct00', 'settled', 'complete', '', '', 200, 1, %(cost)s, 0, %(ts)s)
               ON CONFLICT (month_utc, provider, account, state, outcome, provider_error_type, rejection_class, http_status)
               DO UPDATE SET attempts = month_outcome.attempts + 1, cost_nusd = month_outcome.cost_nusd + excluded.cost_nusd,
                 last_at = GREATEST(month_outcome.last_at, excluded.last_at)""",
            f"""UPDATE month_model SET settled_nusd = settled_nusd + %(cost)s, open_nusd = open_nusd - %(ceiling)s
               WHERE month_utc = %(m)s AND {key} AND model = %(model)s""",
            f"""UPDATE month_conversation SET settled_nusd = settled_nusd + %(cost)s, open_nusd = open_nusd - %(ceiling)s
               WHERE month_utc = %(m)s AND {key} AND conversation = %(c)s""",
            f"""UPDATE month_conversation_total SET settled_nusd = settled_nusd + %(cost)s, open_nusd = open_nusd - %(ceiling)s
               WHERE month_utc = %(m)s AND {key}""",
        ]
        for statements in (reserve, settle):
            cursor.execute(";\n".join(["BEGIN", *(cursor.mogrify(sql, values) for sql in statements), "COMMIT"]))


def floors(pg, admissions, rounds, cold):
    """Server CPU per admission against its floors, in ``rounds`` rounds (the arms in turn in each,
    so drift in the machine touches each alike); the goals are ratios of the same round:

    - warm: a ledger's admissions (reserve + settle) on one connection kept open;
    - hand-written: the rows those admissions write, written by hand (``hand_written``);
    - cold process: what an ``llm`` prompt's process costs the server, one admission per
      connection: connect, open the ledger, reserve and settle once (the backend's whole CPU);
    - a fresh plain connection and one raw commit;
    - cold hand-written rows: a fresh plain connection writing the rows of one admission by hand
      (``hand_written``), the cold arm's floor: what any ledger writing those rows pays in a new
      server backend (its connection, the catalog entries of the tables it touches, planning);
    - cold process through PgBouncer in transaction mode (``pgserver.Bouncer``, where it is
      installed): a new connection to the pooler, open, one admission, on a server backend the
      pooler keeps; the server CPU of its backends per process, and the pooler's own beside it."""
    import psycopg
    import pgserver

    from llm_accounts import clock
    from llm_accounts.ledger import Complete, Ledger, Scope

    server = pg["server"]
    admin = psycopg.connect(server.url, autocommit=True)
    print(f"\n### Server CPU per admission against its floors: one process, {rounds} rounds of {admissions} "
          f"admissions and {cold} cold processes, round trip 0")

    def pid_of(app):
        return admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s AND datname = current_database()",
                             (app,)).fetchone()[0]

    def cpu_of(pid):
        return backend_cpu([pid])[pid]

    def admit(led, tag, n):
        for i in range(n):
            attempt = f"{tag}-{i}-{uuid.uuid4().hex[:8]}"
            led.reserve(Scope("conversation", f"{tag}-{i // 4}"), attempt, Quote, ACCOUNTS[:1], pinned=ACCOUNTS[0].name)
            led.settle(attempt, Complete(COST, USAGE, MODEL, None))

    def cold_connections(schema_name, work):
        """The mean server CPU of ``cold`` new plain connections on ``schema_name``, each doing
        ``work(raw, i)`` once: its backend's whole CPU."""
        spent = []
        for i in range(cold):
            raw = psycopg.connect(f"{server.url}?options=-csearch_path%3D{schema_name}", autocommit=True,
                                  application_name="fleet-cold-plain")
            work(raw, i)
            spent.append(cpu_of(pid_of("fleet-cold-plain")))
            raw.close()
        return statistics.mean(spent)

    for name in ("floor_ledger", "floor_hand"):
        admin.execute(f"CREATE SCHEMA {name}")
    admin.execute("CREATE DATABASE floor_pooled")  # PgBouncer passes no search_path: its own database
    bouncer = pgserver.Bouncer(server, "floor_pooled").start()
    if bouncer is not None:
        Ledger(bouncer.url.replace(f":{bouncer.port}/", f":{server.port}/")).close()  # created directly
        for i in range(10):  # the pool's server connection, warmed as a fleet's would be
            with Ledger(bouncer.url) as led:
                admit(led, f"pooled-warmup-{i}", 1)
    url = f"{server.url}?options=-csearch_path%3Dfloor_ledger"
    warm = Ledger(url)
    admit(warm, "warmup", 20)
    warm_pid = pid_of("llm-accounts")
    with Ledger(f"{server.url}?options=-csearch_path%3Dfloor_hand") as made:  # the same schema, rows to start from
        admit(made, "made", 1)
    admin.execute("ALTER TABLE floor_hand.attempt DISABLE TRIGGER USER")
    hand = psycopg.connect(f"{server.url}?options=-csearch_path%3Dfloor_hand", autocommit=True, application_name="fleet-hand")
    hand_pid = pid_of("fleet-hand")
    now = clock.now()
    month, day = clock.credit_month(now), clock.utc_day(now)
    hand_written(hand, 20, "warmup", month, day)
    figures = collections.defaultdict(list)
    for round_ in range(rounds):
        before = cpu_of(warm_pid)
        admit(warm, f"warm{round_}", admissions)
        figures["warm"].append((cpu_of(warm_pid) - before) / admissions)
        before = cpu_of(hand_pid)
        hand_written(hand, admissions, f"hand{round_}", month, day)
        figures["hand"].append((cpu_of(hand_pid) - before) / admissions)
        spent = []
        for i in range(cold):
            led = Ledger(url)  # connect and open, as a prompt's process does
            admit(led, f"cold{round_}-{i}", 1)
            pid = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = 'llm-accounts' AND pid <> %s "
                                "AND datname = current_database()", (warm_pid,)).fetchone()[0]
            spent.append(cpu_of(pid))
            led.close()
        figures["cold"].append(statistics.mean(spent))
        def raw_commit(raw, i):
            raw.execute("BEGIN")
            raw.execute("INSERT INTO bench_raw (v) VALUES (%s)", (uuid.uuid4().hex,))
            raw.execute("COMMIT")

        figures["cold raw"].append(cold_connections("raw", raw_commit))
        figures["cold hand"].append(cold_connections(
            "floor_hand", lambda raw, i: hand_written(raw, 1, f"cold-hand{round_}-{i}", month, day)))
        if bouncer is not None:
            def pooled_backends():
                return {row[0]: cpu_of(row[0]) for row in admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE datname = 'floor_pooled' AND backend_type = 'client backend'")}

            before, bouncer_before = pooled_backends(), cpu_of(bouncer.pid)
            for i in range(cold):
                with Ledger(bouncer.url) as led:
                    admit(led, f"pooled{round_}-{i}", 1)
            after = pooled_backends()
            figures["pooled"].append(sum(after[pid] - before.get(pid, 0) for pid in after) / cold)
            figures["pooler"].append((cpu_of(bouncer.pid) - bouncer_before) / cold)
    if bouncer is not None:
        bouncer.stop()
    warm.close()
    hand.close()
    admin.close()
    median = {name: statistics.median(values) for name, values in figures.items()}
    print("| unit | server CPU ms (median of rounds) |")
    print("|---|---|")
    for name, label in (("warm", "warm admission (reserve + settle), one connection kept open"),
                        ("hand", "the same rows written by hand, one message per transaction, no triggers"),
                        ("cold", "cold process: connect + open + first admission (reserve + settle)"),
                        ("cold raw", "cold plain connection + one raw commit"),
                        ("cold hand", "cold plain connection + the rows of one admission written by hand"),
                        ("pooled", "cold process through PgBouncer (transaction mode): its server backends"),
                        ("pooler", "the same: PgBouncer's own CPU")):
        if name in median:
            print(f"| {label} | {median[name] * 1000:.3f} |")
    if bouncer is None:
        print("| cold process through PgBouncer | skipped: no pgbouncer binary (Debian: apt-get install pgbouncer) |")
    # On a direct connection the 3 x goal is below the floor: the same rows written by hand from a
    # new connection already cost more than 3 x a warm admission (docs/performance.md "Fleet"), so
    # the cold process is shown against that floor too, with no goal of its own.
    rows = [("warm admission / hand-written rows", [w / h for w, h in zip(figures["warm"], figures["hand"])], 1.5),
            ("cold process / warm admission, direct connection", [c / w for c, w in zip(figures["cold"], figures["warm"])], 3.0),
            ("the floor: cold hand-written rows / warm admission", [c / w for c, w in zip(figures["cold hand"], figures["warm"])], None),
            ("cold process / cold hand-written rows, direct connection",
             [c / h for c, h in zip(figures["cold"], figures["cold hand"])], None)]
    if bouncer is not None:
        rows += [("cold process through PgBouncer / warm admission (server)",
                  [c / w for c, w in zip(figures["pooled"], figures["warm"])], 3.0),
                 ("the same, PgBouncer's CPU counted too",
                  [(c + b) / w for c, b, w in zip(figures["pooled"], figures["pooler"], figures["warm"])], 3.0)]
    print("\n| ratio (per round) | median (min, max) | goal | |")
    print("|---|---|---|---|")
    for name, ratios, goal in rows:
        if goal is None:
            print(f"| {name} | {ratio_text(ratios)} | | |")
            continue
        met = statistics.median(ratios) <= goal
        print(f"| {name} | {ratio_text(ratios)} | <= {goal} | {'met' if met else 'MISSED'} |")


def start_postgres(network, rtts, extra_settings):
    sys.path.insert(0, str(ROOT / "tests"))
    import psycopg
    import pgserver

    listen = ("127.0.0.1", network.host) if network else ("127.0.0.1",)
    hba = (f"host all all {network.peer}/32 trust",) if network else ()
    settings = ["max_connections=300", *extra_settings]
    lib = pathlib.Path(os.path.realpath(os.path.join(pgserver.binaries(), "initdb"))).parent.parent / "lib"
    stats = (lib / "pg_stat_statements.so").exists()
    if stats:  # the breakdown's statement times; the same small cost in every arm
        settings += ["shared_preload_libraries=pg_stat_statements", "pg_stat_statements.track=all", "track_functions=all"]
    server = pgserver.Server(durable=True, listen=listen, hba=hba, settings=settings).start()
    pg = {"server": server, "urls": {}, "how": {}, "relay": None, "network": network, "stats": stats}
    try:
        admin = psycopg.connect(server.url, autocommit=True)
        if stats:
            admin.execute("CREATE EXTENSION pg_stat_statements")
        pg["version"] = admin.execute("SHOW server_version").fetchone()[0]
        admin.execute("CREATE SCHEMA ledger")
        admin.execute("CREATE SCHEMA raw")
        admin.execute("CREATE TABLE raw.bench_raw (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, v text NOT NULL)")
        admin.close()
        from llm_accounts.ledger import Ledger

        Ledger(f"{server.url}?options=-csearch_path%3Dledger").close()
        relayed = [rtt for rtt in rtts if rtt and network and not network.netem]
        if relayed:
            ctx = multiprocessing.get_context("spawn")
            ready = ctx.Event()
            ports = [(free_port(network.host), rtt) for rtt in relayed]
            pg["relay"] = ctx.Process(target=relay_main, args=(network.host, ports, ("127.0.0.1", server.port), ready), daemon=True)
            pg["relay"].start()
            ready.wait(60)
            relay_port = dict((rtt, port) for port, rtt in ports)
        for rtt in rtts:
            host, port = (network.host, server.port) if network else ("127.0.0.1", server.port)
            how = " (loopback)" if not network else " (veth)"
            if rtt and network and network.netem:
                how = f" (veth, netem {rtt / 2:g} ms each way)"
            elif rtt:
                port, how = relay_port[rtt], f" (veth, relay adding {rtt / 2:g} ms each way: no sch_netem in this kernel)"
            base = f"postgresql://postgres@{host}:{port}/postgres"
            pg["urls"][rtt] = (f"{base}?options=-csearch_path%3Dledger", f"{base}?options=-csearch_path%3Draw")
            pg["how"][rtt] = how
        pg["sampler"] = WaitSampler(server.url)
        pg["sampler"].start()
        return pg
    except BaseException:
        stop_postgres(pg)
        raise


def stop_postgres(pg):
    if pg.get("sampler"):
        pg["sampler"].stopped.set()
    if pg.get("relay") is not None:
        pg["relay"].terminate()
        pg["relay"].join(10)
    pg["server"].stop()


def parse_cpus(text, option):
    """A CPU list as Linux writes one ("0-3,6"), checked against the CPUs this process may use."""
    cpus = set()
    try:
        for part in text.split(","):
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    except ValueError:
        raise SystemExit(f"{option}: a CPU list such as 0-3,6") from None
    if not cpus or not cpus <= os.sched_getaffinity(0):
        raise SystemExit(f"{option}: CPUs this machine has and this process may use: {sorted(os.sched_getaffinity(0))}")
    return cpus


def pin_server(server, cpus):
    """The PostgreSQL server's processes on ``cpus``: the postmaster (every backend it forks later
    inherits it) and the processes it already runs."""
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    pids = [postmaster]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                pids.append(int(entry))
    for pid in pids:
        try:
            os.sched_setaffinity(pid, cpus)
        except ProcessLookupError:
            pass


def free_port(host):
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="a short run: 2 rounds of 1.5 s, N = 8 and 64, 1 and 50 accounts")
    parser.add_argument("--rounds", type=int, help="rounds per arm (default 3; --quick 2)")
    parser.add_argument("--seconds", type=float, help="seconds per arm (default 3; --quick 1.5)")
    parser.add_argument("--processes", help="comma-separated N (default 8,32,64; --quick 8,64; none: the sequential sections only)")
    parser.add_argument("--accounts", help="comma-separated account counts (default 1,8,50; --quick 1,50)")
    parser.add_argument("--rtt", default="0,1,5", help="simulated round trips in ms for PostgreSQL (default 0,1,5)")
    parser.add_argument("--backends", default="sqlite,postgres", help="sqlite, postgres or both (default)")
    parser.add_argument("--sqlite-processes", help="N for the SQLite arms (default 8)")
    parser.add_argument("--breakdown", type=int, default=300, metavar="ADMISSIONS",
                        help="sequential admissions for the server-CPU breakdown (default 300; 0 skips it)")
    parser.add_argument("--floors", type=int, default=200, metavar="ADMISSIONS",
                        help="admissions per round for server CPU against its floors (hand-written rows; a cold "
                             "process directly, its floor of hand-written rows from a new connection, and through "
                             "PgBouncer where installed); default 200, 0 skips it")
    parser.add_argument("--cold", type=int, default=20, metavar="PROCESSES",
                        help="cold connections per round, one admission each (default 20)")
    parser.add_argument("--pg-setting", action="append", default=[], metavar="NAME=VALUE",
                        help="an extra PostgreSQL server setting, e.g. deadlock_timeout=10s (repeatable)")
    parser.add_argument("--dir", help="directory for the SQLite files (default: a new temporary directory)")
    parser.add_argument("--server-cpus", metavar="LIST",
                        help="run the PostgreSQL server on these CPUs only (e.g. 0-7): with --client-cpus, measures "
                             "the ratios on a machine whose clients do not share the server's cores")
    parser.add_argument("--client-cpus", metavar="LIST",
                        help="run the bench's clients (workers, relay, the sequential breakdown) on these CPUs only")
    args = parser.parse_args()
    server_cpus = args.server_cpus and parse_cpus(args.server_cpus, "--server-cpus")
    client_cpus = args.client_cpus and parse_cpus(args.client_cpus, "--client-cpus")
    quick = args.quick
    args.rounds = args.rounds or (2 if quick else 3)
    args.seconds = args.seconds or (1.5 if quick else 3.0)
    processes = args.processes or ("8,64" if quick else "8,32,64")
    args.processes = [] if processes == "none" else [int(x) for x in processes.split(",")]
    args.accounts = [int(x) for x in (args.accounts or ("1,50" if quick else "1,8,50")).split(",")]
    rtts = [float(x) if "." in x else int(x) for x in args.rtt.split(",")]
    backends = set(args.backends.split(","))
    sqlite_ns = [int(x) for x in (args.sqlite_processes or "8").split(",")]

    network = None
    if "postgres" in backends and any(rtts) and os.geteuid() == 0:
        try:
            network = Network().__enter__()
        except RuntimeError as error:
            print(f"round trips skipped: {error}")
    if network is None:
        rtts = [0]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    work = pathlib.Path(tempfile.mkdtemp(prefix="fleet-bench-", dir=args.dir))
    pg = None
    summary = []
    try:
        print(f"# bench/fleet.py: {args.rounds} rounds x {args.seconds:g} s per arm; processes {args.processes}; "
              f"accounts {args.accounts}; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
        if "postgres" in backends:
            pg = start_postgres(network, rtts, args.pg_setting)
            if extra := ", ".join(args.pg_setting):
                print(f"PostgreSQL settings added: {extra}")
            if server_cpus:
                pin_server(pg["server"], server_cpus)
                print(f"PostgreSQL server on CPUs {args.server_cpus}")
        if client_cpus:
            # This process and the relay; the pools' workers start later and inherit it.
            os.sched_setaffinity(0, client_cpus)
            if pg is not None and pg["relay"] is not None:
                os.sched_setaffinity(pg["relay"].pid, client_cpus)
            print(f"clients on CPUs {args.client_cpus}")
        if pg is not None and args.floors:
            floors(pg, args.floors, args.rounds, args.cold)
        if pg is not None and args.breakdown:
            breakdown(pg, args.breakdown)
        pools = (set(args.processes) if pg is not None else set()) | (set(sqlite_ns) if "sqlite" in backends else set())
        for n in sorted(pools):
            started = time.time()
            pool = Pool(n, network.ns if network else None)
            print(f"\n## N = {n} (pool started in {time.time() - started:.1f} s, load {os.getloadavg()[0]:.1f})")
            try:
                if "sqlite" in backends and n in sqlite_ns:
                    sqlite_section(pool, n, args, work)
                if pg is not None and n in args.processes:
                    postgres_section(pool, n, args, pg, rtts, summary)
            finally:
                pool.stop()
        if summary:
            print("\n## PostgreSQL summary: ledger transactions / raw commits (goal >= 0.8 at N = 64 over 50 accounts)")
            print("| N | round trip ms | accounts | raw commits/s | admissions/s | ratio | server CPU / raw commit | CPU ratio |")
            print("|---|---|---|---|---|---|---|---|")
            for n, rtt, k, raw, adm, ratio, cpu, cpu_ratio in summary:
                print(f"| {n} | {rtt} | {k} | {raw:.0f} | {adm:.0f} | {ratio:.2f} | {cpu:.1f} x | {cpu_ratio:.2f} |")
    finally:
        if pg is not None:
            stop_postgres(pg)
        if network is not None:
            network.__exit__()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
