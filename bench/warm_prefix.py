"""Warm-prefix affinity measured in money: a replay through the stand-in (docs/performance.md
"Warm-prefix affinity").

Usage: python bench/warm_prefix.py [--seed 13] [--hours 3] [--accounts 4] [--speed 240] [--workers 8]

Many short conversations share a few one-hour system prompts (some with the same tools): two hot,
one warm, three rare. Each conversation runs through the real routed model (``llm.get_model(
"claude-routed/...")``, ``cache="1h"``, tools through ``conversation.chain``) against the loopback
stand-in, whose per-organization prompt caches make every cache read and write real. The replay
runs six arms, each on a fresh ledger and fresh caches, with the same seeded workload:

- sequential and concurrent (one thread per conversation in flight, arrivals in bursts);
- affinity on, affinity off (``ledger.WARM_AFFINITY = False``: new conversations go by pace alone),
  and a single account.

Time: the stand-in's cache and the ledger read one virtual clock that runs ``--speed`` times faster
than the wall clock and jumps ahead while nothing is in flight, so hours of traffic replay in
seconds while the one-hour TTL, row expiry and request latency (wall latency x speed) stay real.

Per arm it prints:

- new-scope one-hour writes: first requests of a conversation whose usage reports one-hour cache
  writes;
- the ideal, replayed from the same arm's own reservation and settle instants the way ADR-style
  idealized replays count it: per prefix, a new conversation finds a row only when an earlier
  writer has settled and the row (extended by every new conversation that found it) has not
  lapsed, otherwise it is a write: first uses and lapses, plus concurrent cold starts (a writer
  of the same prefix was still in flight);
- total input cost in base-input equivalents (uncached input x1, cache reads x0.1, five-minute
  writes x1.25, one-hour writes x2) and the cached-to-uncached cost ratio (that cost over the
  same tokens all billed as base input);
- how settled spend spread across accounts.

Goal (affinity on): new-scope one-hour writes <= 1.2 x the ideal, and the cost ratio within 5% of
the single-account ratio of the same mode. Nothing here is a test; no wall time is judged.

Keys are random strings made at run time, written only to a throwaway llm user directory's
keys.json; they never reach os.environ or the output.
"""

import argparse
import concurrent.futures
import contextlib
import dataclasses
import datetime as dt
import json
import os
import pathlib
import random
import secrets
import string
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

MODEL = "claude-routed/claude-sonnet-4-5"
START = dt.datetime(2026, 11, 10, 9, 0, tzinfo=dt.timezone.utc)  # mid credit period
HOUR = 3600.0
WRITE_GOAL = 1.2
RATIO_GOAL = 0.05
# Base-input equivalents of each input-side token class (docs/pricing.md).
WEIGHTS = {"input": 1.0, "read": 0.1, "write_5m": 1.25, "write_1h": 2.0}
WORDS = (
    "ledger account budget invoice refund shipment order customer policy escalation review "
    "summary incident priority severity release contract renewal region warehouse carrier"
).split()


# --- the workload ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Prefix:
    name: str
    kind: str  # hot, warm, rare
    system_tokens: int
    tools: bool
    mean_gap_s: float  # mean seconds between bursts of new conversations


PREFIXES = (
    Prefix("support", "hot", 3000, True, 90),
    Prefix("triage", "hot", 2000, False, 150),
    Prefix("review", "warm", 4000, True, 600),
    Prefix("legal", "rare", 2500, False, 2400),
    Prefix("audit", "rare", 1800, True, 4200),
    Prefix("onboard", "rare", 1500, False, 5400),
)


@dataclasses.dataclass
class Conversation:
    index: int
    prefix: Prefix
    arrival_s: float
    turns: list  # user texts
    gaps_s: list  # virtual seconds of "thinking" before each later turn


def system_text(rng, prefix):
    """A deterministic system prompt of about ``system_tokens`` stand-in tokens (4 bytes each)."""
    words = []
    while len(" ".join(words)) < prefix.system_tokens * 4:
        words.append(rng.choice(WORDS))
    return f"You are the {prefix.name} assistant. " + " ".join(words)


def workload(seed, hours):
    """Conversations in arrival order: bursts (a service fanning out units of work) per prefix."""
    rng = random.Random(seed)
    systems = {p.name: system_text(random.Random(f"{seed}:{p.name}"), p) for p in PREFIXES}
    arrivals = []
    for prefix in PREFIXES:
        t = rng.expovariate(1 / prefix.mean_gap_s) if prefix.kind != "hot" else rng.uniform(0, 30)
        while t < hours * HOUR:
            burst = 1 if rng.random() < 0.7 else rng.randint(2, 4)
            for k in range(burst):
                arrivals.append((t + k * rng.uniform(0, 2), prefix))
            t += rng.expovariate(1 / prefix.mean_gap_s)
    arrivals.sort(key=lambda a: a[0])
    conversations = []
    for index, (t, prefix) in enumerate(arrivals):
        count = rng.choices((1, 2, 3), weights=(50, 35, 15))[0]
        turns = [
            f"[conversation {index}, turn {turn}] " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 120)))
            for turn in range(count)
        ]
        conversations.append(Conversation(index, prefix, t, turns, [rng.uniform(5, 60) for _ in turns[1:]]))
    return conversations, systems


def lookup_order(order_id: str) -> str:
    """Look up an order by its id."""
    return f"order {order_id}: shipped"


def lookup_customer(customer_id: str) -> str:
    """Look up a customer by id."""
    return f"customer {customer_id}: active"


TOOLS = (lookup_order, lookup_customer)


# --- the virtual clock -------------------------------------------------------------------------


class VirtualClock:
    """``speed`` x the monotonic clock from ``START``, plus jumps taken while nothing is in flight."""

    def __init__(self, speed):
        self.speed = speed
        self._base = time.monotonic()
        self._offset = 0.0
        self._lock = threading.Lock()

    def seconds(self):
        with self._lock:
            return self._offset + (time.monotonic() - self._base) * self.speed

    def now(self):
        return START + dt.timedelta(seconds=self.seconds())

    def epoch(self):
        return self.now().timestamp()

    def jump_to(self, seconds):
        with self._lock:
            current = self._offset + (time.monotonic() - self._base) * self.speed
            if seconds > current:
                self._offset += seconds - current


# --- one arm -----------------------------------------------------------------------------------


def make_key():
    alphabet = string.ascii_letters + string.digits
    return "sk-ant-bench-" + "".join(secrets.choice(alphabet) for _ in range(40))


@dataclasses.dataclass
class Arm:
    name: str
    accounts: int
    affinity: bool
    concurrent: bool


def run_arm(arm, conversations, systems, args, root):
    """Replay ``conversations`` on a fresh llm user dir, ledger and stand-in; return the rows."""
    import llm

    from llm_accounts import clock as ledger_clock
    from llm_accounts import ledger as ledger_module
    from llm_accounts.standin import StandIn

    home = pathlib.Path(tempfile.mkdtemp(prefix=f"{arm.name}-", dir=root))
    names = [f"acct{n}" for n in range(arm.accounts)]
    keys = {name: make_key() for name in names}
    (home / "keys.json").write_text(json.dumps({f"{name.upper()}_KEY": keys[name] for name in names}))
    declaration = [{"name": name, "key_env": f"{name.upper()}_KEY", "budget_usd": "1000"} for name in names]
    config = {"keys": [{"label": name, "key": keys[name]} for name in names]}
    vclock = VirtualClock(args.speed)
    saved_env = {k: os.environ.get(k) for k in ("LLM_USER_PATH", "ANTHROPIC_ACCOUNTS", "LLM_ACCOUNTS_LEDGER", "LLM_ACCOUNTS_BASE_URL")}
    saved_now, saved_affinity = ledger_clock.now, ledger_module.WARM_AFFINITY
    scopes = {}
    inflight = [0]
    lock = threading.Lock()
    errors = []
    with StandIn(config, clock=vclock.epoch) as server:
        os.environ.update(
            LLM_USER_PATH=str(home),
            ANTHROPIC_ACCOUNTS=json.dumps(declaration),
            LLM_ACCOUNTS_LEDGER=str(home / "ledger.db"),
            LLM_ACCOUNTS_BASE_URL=server.base_url,
        )
        ledger_clock.now = vclock.now
        ledger_module.WARM_AFFINITY = arm.affinity
        try:

            def pause(seconds):
                if arm.concurrent:
                    time.sleep(seconds / args.speed)
                else:
                    vclock.jump_to(vclock.seconds() + seconds)

            def converse(c):
                try:
                    model = llm.get_model(MODEL)
                    conversation = model.conversation()
                    scopes[str(conversation.id)] = c
                    for turn, text in enumerate(c.turns):
                        if turn:
                            pause(c.gaps_s[turn - 1])
                        kwargs = dict(system=systems[c.prefix.name], options={"cache": "1h", "max_tokens": 64})
                        if c.prefix.tools:
                            conversation.chain(text, tools=list(TOOLS), **kwargs).text()
                        else:
                            conversation.prompt(text, **kwargs).text()
                except Exception as error:  # reported below: a benchmark that hides failures measures nothing
                    errors.append(f"conversation {c.index}: {type(error).__name__}: {error}")
                finally:
                    with lock:
                        inflight[0] -= 1

            with concurrent.futures.ThreadPoolExecutor(max_workers=args.workers if arm.concurrent else 1) as pool:
                futures = []
                for c in conversations:
                    while vclock.seconds() < c.arrival_s:
                        with lock:
                            idle = inflight[0] == 0
                        if idle:
                            vclock.jump_to(c.arrival_s)
                        else:
                            time.sleep(max(0.0, min(0.005, (c.arrival_s - vclock.seconds()) / args.speed)))
                    with lock:
                        inflight[0] += 1
                    futures.append(pool.submit(converse, c))
                    if not arm.concurrent:
                        futures[-1].result()
                for future in futures:
                    future.result()
        finally:
            ledger_clock.now, ledger_module.WARM_AFFINITY = saved_now, saved_affinity
            for k, v in saved_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    if errors:
        sys.exit(f"{arm.name}: {len(errors)} conversations failed, first: {errors[0]}")
    import sqlite3

    conn = sqlite3.connect(home / "ledger.db")
    conn.row_factory = sqlite3.Row
    rows = conn.execute(
        "SELECT scope_id, account, created_at, settled_at, cost_nusd, usage_json, outcome FROM attempt ORDER BY created_at, rowid"
    ).fetchall()
    conn.close()
    return [dict(row) | {"conversation": scopes[row["scope_id"]]} for row in rows]


# --- the figures -------------------------------------------------------------------------------


def seconds_of(text):
    return (dt.datetime.fromisoformat(text) - START).total_seconds()


def token_classes(usage):
    creation = usage.get("cache_creation") or {}
    w1h = creation.get("ephemeral_1h_input_tokens", 0)
    w5m = creation.get("ephemeral_5m_input_tokens", usage.get("cache_creation_input_tokens", 0) - w1h)
    return {
        "input": usage.get("input_tokens", 0),
        "read": usage.get("cache_read_input_tokens", 0),
        "write_5m": w5m,
        "write_1h": w1h,
    }


def ideal_writes(firsts):
    """The idealized replay: (writes, of which concurrent cold starts). ``firsts`` are the arm's
    new-conversation first attempts as (prefix, reserved_s, settled_s). Every writer's row becomes
    visible when it settles and lasts an hour from its reservation; a new conversation that finds
    a visible, unexpired row extends it an hour (any read refreshes) and writes nothing; one that
    finds none writes, and is a concurrent cold start when a writer of its prefix is in flight."""
    writes = cold = 0
    rows = {}  # prefix -> [[visible_from, expires, reserved]]
    for prefix, reserved, settled in sorted(firsts, key=lambda f: f[1]):
        found = [row for row in rows.get(prefix, []) if row[0] <= reserved < row[1]]
        if found:
            found[0][1] = max(found[0][1], reserved + HOUR)
            continue
        writes += 1
        cold += any(r < reserved < v for v, _, r in rows.get(prefix, []))
        rows.setdefault(prefix, []).append([settled, reserved + HOUR, reserved])
    return writes, cold


def figures(rows):
    seen = set()
    firsts, writes = [], 0
    by_kind = {}
    totals = dict.fromkeys(WEIGHTS, 0)
    spend = {}
    for row in rows:
        usage = json.loads(row["usage_json"] or "{}")
        classes = token_classes(usage)
        for name, value in classes.items():
            totals[name] += value
        spend[row["account"]] = spend.get(row["account"], 0) + (row["cost_nusd"] or 0)
        scope = row["scope_id"]
        if scope not in seen:
            seen.add(scope)
            firsts.append((row["conversation"].prefix.name, seconds_of(row["created_at"]), seconds_of(row["settled_at"])))
            writes += classes["write_1h"] > 0
            kind = row["conversation"].prefix.kind
            by_kind[kind] = by_kind.get(kind, 0) + (classes["write_1h"] > 0)
    cost = sum(WEIGHTS[name] * value for name, value in totals.items())
    uncached = sum(totals.values())
    ideal, cold = ideal_writes(firsts)
    return {
        "conversations": len(seen),
        "requests": len(rows),
        "writes": writes,
        "ideal": ideal,
        "cold": cold,
        "cost": cost,
        "ratio": cost / uncached,
        "spend": spend,
        "by_kind": by_kind,
    }


def spread(spend):
    total = sum(spend.values()) or 1
    return " ".join(f"{name} {100 * value / total:.0f}%" for name, value in sorted(spend.items()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--hours", type=float, default=3.0, help="virtual hours of arrivals")
    parser.add_argument("--accounts", type=int, default=4)
    parser.add_argument("--speed", type=float, default=240.0, help="virtual seconds per wall second")
    parser.add_argument("--workers", type=int, default=8, help="threads of the concurrent arms")
    args = parser.parse_args()

    conversations, systems = workload(args.seed, args.hours)
    counts = {p.name: sum(c.prefix is p for c in conversations) for p in PREFIXES}
    print(
        f"workload: seed {args.seed}, {len(conversations)} conversations over {args.hours:g} virtual hours, "
        f"{args.accounts} accounts, {MODEL}, cache 1h, speed x{args.speed:g}"
    )
    print("  " + ", ".join(f"{p.name} ({p.kind}{', tools' if p.tools else ''}) {counts[p.name]}" for p in PREFIXES))
    arms = [
        Arm(f"{mode}-{kind}", 1 if kind == "single" else args.accounts, kind != "off", mode == "concurrent")
        for mode in ("sequential", "concurrent")
        for kind in ("on", "off", "single")
    ]
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-warm-") as root:
        for arm in arms:
            started = time.perf_counter()
            results[arm.name] = figures(run_arm(arm, conversations, systems, args, root))
            results[arm.name]["wall_s"] = time.perf_counter() - started

    header = f"{'arm':<18} {'convs':>5} {'reqs':>5} {'1h writes':>9} {'ideal':>5} {'cold':>4} {'x ideal':>7} {'input cost':>11} {'ratio':>6} {'vs single':>9}  spend spread"
    print()
    print(header)
    print("-" * len(header))
    verdicts = []
    for arm in arms:
        r = results[arm.name]
        single = results[arm.name.rsplit("-", 1)[0] + "-single"]
        vs = r["ratio"] / single["ratio"] - 1
        print(
            f"{arm.name:<18} {r['conversations']:>5} {r['requests']:>5} {r['writes']:>9} {r['ideal']:>5} {r['cold']:>4} "
            f"{r['writes'] / max(r['ideal'], 1):>7.2f} {r['cost'] / 1e6:>10.3f}M {r['ratio']:>6.3f} {100 * vs:>+8.1f}%  {spread(r['spend'])}"
        )
        if arm.name.endswith("-on"):
            ok_writes = r["writes"] <= WRITE_GOAL * r["ideal"]
            ok_ratio = abs(vs) <= RATIO_GOAL
            verdicts.append(
                f"{arm.name}: writes {r['writes']} vs ideal {r['ideal']} ({'meets' if ok_writes else 'MISSES'} <= {WRITE_GOAL}x); "
                f"cost ratio {r['ratio']:.3f} vs single {single['ratio']:.3f} ({'meets' if ok_ratio else 'MISSES'} within {100 * RATIO_GOAL:.0f}%)"
            )
    print()
    print("input cost: base-input-token equivalents (uncached x1, read x0.1, 5m write x1.25, 1h write x2), in millions")
    print("ideal: one write per prefix first use or lapse, plus concurrent cold starts (cold); x ideal: 1h writes / ideal")
    for line in verdicts:
        print("goal " + line)
    print("1h writes by prefix kind: " + "; ".join(
        f"{name} " + " ".join(f"{k} {v}" for k, v in sorted(r["by_kind"].items())) for name, r in results.items()
    ))
    print("wall seconds per arm: " + ", ".join(f"{name} {r['wall_s']:.1f}" for name, r in results.items()))


if __name__ == "__main__":
    main()
