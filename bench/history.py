"""Spend views against the length of history, measured in one run (docs/performance.md).

    .venv/bin/python bench/history.py [--sizes 1e3,1e5,1e6] [--rounds 3] [--repeat 3] [--admissions 60] [--dir DIR]
    .venv/bin/python bench/history.py --quick   # 10^3 and 2x10^4, one round: a minute, to try a change

For each size it builds a ledger of that many attempts and times, on that ledger:

- admission: one reserve and its settle (a new conversation over the declared accounts) on a
  connection opened for it, as a prompt's process would;
- every canned query with its default parameters, through Datasette's in-process client
  (``/<db>/<query>.json``) and as its bare SQL on a read-only connection;
- the dashboard page ``/-/llm-accounts`` and its JSON ``/-/llm-accounts.json``;
- ``llm accounts status``, ``attempts``, ``ladder`` and ``spend --by model|client|conversation|day``
  (and ``--by conversation --account main``) through click's CliRunner.

It also times, per size, what an existing ledger pays the first time a build that adds the
conversation views' indexes and ``month_conversation_total`` opens it: they are dropped from the
generated file and ``Ledger`` opens it (creating the indexes, filling the table from
``month_conversation``), under the write lock like any migration.

Each figure is the median of ``--rounds`` x ``--repeat`` runs, the sizes taking turns round by
round; admission, two fsync'd commits and so the noisiest, is the median of ``--admissions`` pairs
per size with the sizes taking turns pair by pair. The minimum is printed beside each median. A
table per size, then every figure across sizes with the ratio of the largest size to the smallest:
the median of the per-round ratios (per pair, for admission), with their min and max. Goal: each
ratio <= 2, admission <= 1.2.

The default sizes stop at 10^6 (about a minute to generate on a laptop-class machine). 10^7 is
opt-in, ``--sizes 1e3,1e5,1e6,1e7``: about ten minutes to generate and 6 GB of disk.

How the ledgers are made. Each is created by ``llm_accounts.ledger.Ledger``, so the schema,
indexes and triggers are the project's own, then filled with bulk ``INSERT ... SELECT``
statements (the attempt triggers keep ``day``, ``month_outcome``, ``month_client``, ``month_model``
and ``month_conversation`` as they would in service;
the ``month`` running totals are then set from those, and ``Ledger.audit()`` checks them against
the rows for sizes up to 10^5). Every size has the same shape: 12 accounts over 4 credit periods
ending now, the same outcome mix (complete, not sent, 429, 529, two rejection classes, 401,
and unknown outcomes left open: a 500, a truncated stream, a transport failure), clients on most
attempts, conversations of three attempts with their bindings, a few attempts in flight, health
rows (cooling, probe due, blocked, out of credit), adjustments and warm prefixes. Each period
starts with one attempt of every account and outcome, so every view returns the same rows at
every size: only the number of attempts behind them grows.
"""

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import pathlib
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from tabulate import tabulate  # noqa: E402

NANO = 10**9
PERIODS = 4
ACCOUNTS = [  # name, rank, weight, daily budget (USD) or None
    ("main", 0, 3, None), ("batch", 0, 2, None), ("eval", 0, 1, "40"), ("research", 1, 2, None),
    ("eu-team", 1, 1, None), ("us-team", 1, 1, None), ("ci", 2, 1, "25"), ("notebooks", 2, 1, None),
    ("staging", 2, 1, None), ("backup-a", 3, 1, None), ("backup-b", 3, 1, None), ("sandbox", 4, 1, "5"),
]
CLIENTS = ("web", "batch", "ci", "notebook")
# state, outcome, provider_error_type, rejection_class, failure_class, http_status, share per 10,000
OUTCOMES = [
    ("settled", "complete", None, None, None, 200, 9420),
    ("settled", "not_sent", None, None, None, None, 50),
    ("settled", "rate_limited", "rate_limit_error", "other", "rate_limited", 429, 250),
    ("settled", "overloaded", "overloaded_error", "other", "provider_outage", 529, 100),
    ("settled", "request_rejected", "invalid_request_error", "prompt_too_long", "semantic", 400, 100),
    ("settled", "request_rejected", "invalid_request_error", "credit_balance_too_low", "quota_exhausted", 400, 20),
    ("settled", "auth_required", "authentication_error", "other", "auth", 401, 5),
    ("open", "provider_error", "api_error", "other", "provider_outage", 500, 25),
    ("open", "stream_truncated", None, None, "transport", None, 20),
    ("open", "transport_error", None, None, "transport", None, 10),
]
assert sum(share for *_, share in OUTCOMES) == 10_000
GRID = len(ACCOUNTS) * len(OUTCOMES)  # the first attempts of each period: every account x outcome
# The ids attempts record: the price revision's canonical ids, dated where the model's is
# (`llm accounts attempts --model claude-sonnet-4-5` looks for the dated one).
MODELS = ("claude-sonnet-4-5-20250929", "claude-haiku-4-5-20251001", "claude-opus-4-6")
IN_FLIGHT = 6
CHECKED = 100_000  # sizes up to this are written through the triggers and recounted by check()


def sql_case(expression, values):
    """``CASE expression WHEN 0 THEN v0 WHEN 1 THEN v1 ... END`` with SQL literals."""
    def literal(value):
        if value is None:
            return "NULL"
        return str(value) if isinstance(value, int) else "'" + value.replace("'", "''") + "'"

    return "CASE " + expression + " " + " ".join(f"WHEN {i} THEN {literal(v)}" for i, v in enumerate(values)) + " END"


def mix(i, k):
    """A reproducible pseudo-random integer in [0, 2^31) from row number ``i`` and stream ``k``."""
    return f"((({i}) * 1103515245 + {k * 2654435761 % 2147483648} + (({i}) / 7) * {k * 40503 + 12345}) % 2147483648)"


def periods(now):
    """The ``PERIODS`` credit periods ending with ``now``'s: (month, start, end) as aware datetimes."""
    from llm_accounts import clock

    result, month = [], clock.credit_month(now)
    for _ in range(PERIODS):
        start, end = clock.credit_period(month)
        result.append((month, start, min(end, now - dt.timedelta(minutes=2))))
        month = clock.credit_month(start - dt.timedelta(days=1))
    return list(reversed(result))


def generate(path, size, now):
    """Create a ledger at ``path`` with the project's code and fill it with ``size`` attempts."""
    from llm_accounts import clock, schema
    from llm_accounts.ledger import Ledger

    with Ledger(path) as ledger:
        ledger.status(())  # creates the file with the project's schema, indexes and triggers
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = OFF")  # a file being generated: nothing to roll back to
    conn.execute("PRAGMA synchronous = OFF")
    conn.execute("PRAGMA cache_size = -1000000")
    conn.execute("BEGIN")
    bulk = size > CHECKED
    if bulk:
        # Past what check() recounts, the attempts go in without their indexes and triggers, which
        # are then recreated (the project's schema statements) and the totals filled from the rows
        # by the project's own migration SQL (schema.BACKFILL), one pass per table: several
        # times faster than a trigger firing per row, and the same totals.
        for kind, name in conn.execute(
            "SELECT type, name FROM sqlite_master WHERE tbl_name = 'attempt' AND type IN ('index', 'trigger') AND sql IS NOT NULL"
        ).fetchall():
            conn.execute(f"DROP {kind.upper()} {name}")
    iso = clock.isoformat
    created = iso(periods(now)[0][1])
    conn.executemany(
        "INSERT INTO account (provider, name, key_env, rank, weight, created_at) VALUES ('anthropic', ?, ?, ?, ?, ?)",
        [(name, key_env(name), rank, weight, created) for name, rank, weight, _ in ACCOUNTS],
    )
    spans = periods(now)
    per_period = [size // PERIODS + (1 if p < size % PERIODS else 0) for p in range(PERIODS)]
    first = 0
    for p, ((month, start, end), count) in enumerate(zip(spans, per_period)):
        conn.executemany(
            """INSERT INTO month (provider, name, month_utc, budget_nusd, daily_budget_nusd, key_env, created_at)
               VALUES ('anthropic', ?, ?, ?, ?, ?, ?)""",
            [
                (name, month, 10**15, int(daily) * NANO if daily and p == PERIODS - 1 else None, key_env(name), iso(start))
                for name, _, _, daily in ACCOUNTS
            ],
        )
        insert_attempts(conn, first, count, month, start.timestamp(), (end - start).total_seconds() / max(count, 1),
                        in_flight=IN_FLIGHT if p == PERIODS - 1 else 0)
        first += count
    if bulk:
        for statement in [*schema.statements(), *schema.statements(schema.INDEXES)]:
            conn.execute(statement)
        # month_conversation's inserts reach month_conversation_total through its triggers.
        for table in ("day", "month_outcome", "month_client", "month_model", "month_conversation"):
            for statement in schema.statements(schema.BACKFILL[table]):
                conn.execute(statement)
    conn.execute(
        """INSERT INTO binding (scope_kind, scope_id, provider, account, created_at)
           SELECT scope_kind, scope_id, provider, account, MIN(created_at) FROM attempt GROUP BY scope_kind, scope_id, provider"""
    )
    settle_totals(conn, now, spans)
    extras(conn, now)
    conn.execute("COMMIT")
    conn.execute("PRAGMA journal_mode = DELETE")
    conn.execute("ANALYZE")  # what SQLite would know of a ledger in service (optional; no view relies on it)
    conn.close()


def key_env(name):
    return name.upper().replace("-", "_") + "_KEY"


def insert_attempts(conn, first, count, month, start_s, step_s, in_flight):
    """Rows ``first`` .. ``first + count`` of one credit period, in time order (admission order)."""
    accounts = len(ACCOUNTS)
    j = "(n.i - :first)"  # the row's place in its period
    cell = f"CASE WHEN {j} < {GRID} THEN {j} / {accounts} ELSE ({outcome_of(mix('n.i', 1))}) END"
    account = f"CASE WHEN {j} < {GRID} THEN {j} % {accounts} ELSE ({mix('n.i / 3', 2)} % {accounts}) END"
    t = f"(:start + ({j} + 0.5) * :step)"
    conn.execute(
        f"""
WITH RECURSIVE n(i) AS (SELECT :first UNION ALL SELECT i + 1 FROM n WHERE i + 1 < :first + :count),
rows AS (
  SELECT n.i, {cell} AS cell, {account} AS acc, {t} AS t,
         {mix('n.i', 3)} AS r3, {mix('n.i', 4)} AS r4, {mix('n.i', 5)} AS r5,
         (n.i >= :first + :count - :in_flight) AS flying
  FROM n
),
shaped AS (
  SELECT *, CAST(t AS INTEGER) AS ts, CAST((t - CAST(t AS INTEGER)) * 1000000 AS INTEGER) AS us,
         100000000 + r3 % 2900000000 AS ceiling
  FROM rows
)
INSERT INTO attempt (id, scope_kind, scope_id, provider, account, month_utc, day_utc, ceiling_nusd, price_revision,
    requested_model, served_model, request_digest, client, llm_response_id, state, outcome, provider_error_type,
    rejection_class, failure_class, http_status, cost_nusd, usage_json, request_id, created_at, settled_at, tokens)
SELECT
  lower(hex(randomblob(4)) || '-' || hex(randomblob(2)) || '-4' || substr(hex(randomblob(2)), 2) || '-'
        || hex(randomblob(2)) || '-' || hex(randomblob(6))),
  'conversation',
  CASE WHEN i - :first < {GRID} THEN 'grid-' || i ELSE 'conv-' || (i / 3) END,
  'anthropic',
  {sql_case('acc', [a[0] for a in ACCOUNTS])},
  :month,
  date(ts, 'unixepoch'),
  ceiling,
  '2026-01-01',
  {sql_case('r4 % 3', MODELS)},
  CASE WHEN NOT flying AND cell = 0 THEN {sql_case('r4 % 3', MODELS)} END,
  lower(hex(randomblob(32))),
  CASE WHEN r5 % 10 < 6 THEN {sql_case('r5 % 4', CLIENTS)} END,
  '01' || upper(hex(randomblob(12))),
  CASE WHEN flying THEN 'open' ELSE {sql_case('cell', [o[0] for o in OUTCOMES])} END,
  CASE WHEN NOT flying THEN {sql_case('cell', [o[1] for o in OUTCOMES])} END,
  CASE WHEN NOT flying THEN {sql_case('cell', [o[2] for o in OUTCOMES])} END,
  CASE WHEN NOT flying THEN {sql_case('cell', [o[3] for o in OUTCOMES])} END,
  CASE WHEN NOT flying THEN {sql_case('cell', [o[4] for o in OUTCOMES])} END,
  CASE WHEN NOT flying THEN {sql_case('cell', [o[5] for o in OUTCOMES])} END,
  CASE WHEN flying OR cell >= 7 THEN NULL WHEN cell = 0 THEN ceiling * (5 + r4 % 55) / 100 ELSE 0 END,
  CASE WHEN NOT flying AND cell = 0 THEN printf(
    '{{"input_tokens": %d, "output_tokens": %d, "cache_creation_input_tokens": 0, "cache_read_input_tokens": %d}}',
    200 + r3 % 20000, 20 + r4 % 4000, (r5 % 3) * 4096) END,
  CASE WHEN NOT flying AND cell = 0 THEN 'req_' || lower(hex(randomblob(12))) END,
  strftime('%Y-%m-%dT%H:%M:%S', ts, 'unixepoch') || printf('.%06d+00:00', us),
  CASE WHEN NOT flying AND cell < 7 THEN strftime('%Y-%m-%dT%H:%M:%S', ts + 3 + r3 % 40, 'unixepoch') || printf('.%06d+00:00', us) END,
  CASE WHEN flying OR cell >= 7 THEN NULL WHEN cell = 0 THEN 220 + r3 % 20000 + r4 % 4000 + (r5 % 3) * 4096 ELSE 0 END
FROM shaped
""",
        {"first": first, "count": count, "start": start_s, "step": step_s, "month": month, "in_flight": in_flight},
    )


def outcome_of(r):
    """The outcome index for pseudo-random ``r``, by the shares in ``OUTCOMES``."""
    cases, bound = [], 0
    for index, (*_, share) in enumerate(OUTCOMES):
        bound += share
        cases.append(f"WHEN {r} % 10000 < {bound} THEN {index}")
    return "CASE " + " ".join(cases) + " END"


def settle_totals(conn, now, spans):
    """The ``month`` running totals from the ``day`` and ``month_outcome`` totals the triggers
    kept, and budgets that leave the current period open for admission, except ``ci`` (budget
    reached) and ``notebooks`` (near it)."""
    conn.execute(
        """UPDATE month SET
             settled_nusd = (SELECT COALESCE(SUM(cost_nusd), 0) FROM month_outcome o WHERE o.month_utc = month.month_utc
                 AND o.provider = month.provider AND o.account = month.name AND o.state = 'settled'),
             open_nusd = (SELECT COALESCE(SUM(open_nusd), 0) FROM month_outcome o WHERE o.month_utc = month.month_utc
                 AND o.provider = month.provider AND o.account = month.name),
             day_utc = (SELECT MAX(day_utc) FROM day d WHERE d.provider = month.provider AND d.account = month.name
                 AND strftime('%Y-%m', d.day_utc, '+1 day') = month.month_utc)"""
    )
    conn.execute(
        """UPDATE month SET
             day_settled_nusd = COALESCE((SELECT settled_nusd FROM day d WHERE d.day_utc = month.day_utc
                 AND d.provider = month.provider AND d.account = month.name), 0),
             day_open_nusd = COALESCE((SELECT open_nusd FROM day d WHERE d.day_utc = month.day_utc
                 AND d.provider = month.provider AND d.account = month.name), 0)"""
    )
    current = spans[-1][0]
    for name, *_ in ACCOUNTS:
        (used,) = conn.execute(
            "SELECT settled_nusd + open_nusd FROM month WHERE name = ? AND month_utc = ?", (name, current)
        ).fetchone()
        budget = {"ci": used, "notebooks": used * 20 // 19}.get(name, max(4 * used, 100 * NANO))
        conn.execute("UPDATE month SET budget_nusd = ? WHERE name = ? AND month_utc = ?", (max(budget, 1), name, current))
    conn.execute(
        "UPDATE month SET budget_nusd = MAX(100 * ?, (settled_nusd + open_nusd) * 13 / 10) WHERE month_utc != ?",
        (NANO, current),
    )


def extras(conn, now):
    """Health rows, adjustments and warm prefixes: a constant handful at every size."""
    from llm_accounts import clock

    iso = clock.isoformat
    health = [  # account, failure class, status, cooldown from now
        ("research", "rate_limited", 429, dt.timedelta(seconds=50)),
        ("eu-team", "rate_limited", 429, -dt.timedelta(minutes=5)),  # probe due
        ("backup-b", "auth", 401, None),
        ("staging", "quota_exhausted", 400, dt.timedelta(minutes=40)),
    ]
    for name, failure, status, cooldown in health:
        conn.execute(
            """INSERT INTO health (provider, account, state, failure_class, http_status, since, last_failure_at,
                 last_success_at, cooldown_until) VALUES ('anthropic', ?, 'failing', ?, ?, ?, ?, ?, ?)""",
            (name, failure, status, iso(now - dt.timedelta(hours=1)), iso(now - dt.timedelta(minutes=20)),
             iso(now - dt.timedelta(hours=2)), None if cooldown is None else iso(now + cooldown)),
        )
    conn.execute("UPDATE account SET block_reason = 'auth_failed', blocked_at = ? WHERE name = 'backup-b'", (iso(now),))
    for index, (month, *_rest) in enumerate(periods(now)):
        for name in ("main", "batch", "eval", "research", "ci"):
            conn.execute(
                """INSERT INTO adjustment (id, kind, provider, account, month_utc, delta_nusd, source_ref, created_at)
                   VALUES (?, 'correction', 'anthropic', ?, ?, ?, 'invoice', ?)""",
                (uuid.uuid4().hex, name, month, (index + 1) * 1_234_567, iso(now - dt.timedelta(days=1))),
            )
    for index in range(40):
        conn.execute(
            "INSERT INTO warm_prefix (provider, account, cert, stable_tokens, expires_at) VALUES ('anthropic', ?, ?, ?, ?)",
            (ACCOUNTS[index % 6][0], uuid.uuid4().hex * 2, 4096, iso(now + dt.timedelta(minutes=index))),
        )


def declaration(path):
    """The accounts as ``ANTHROPIC_ACCOUNTS`` declares them, with this period's budgets."""
    from llm_accounts import clock
    from llm_accounts.money import usd_exact

    conn = sqlite3.connect(path)
    budgets = dict(conn.execute("SELECT name, budget_nusd FROM month WHERE month_utc = ?", (clock.credit_month(clock.now()),)))
    conn.close()
    result = []
    for name, rank, weight, daily in ACCOUNTS:
        item = {"name": name, "key_env": key_env(name), "budget_usd": usd_exact(budgets[name]), "rank": rank, "weight": weight}
        if daily:
            item["daily_budget_usd"] = daily
        result.append(item)
    return result


# ---------------------------------------------------------------------------------------------
# Timings


def timed(fn, repeat):
    """Seconds of each of ``repeat`` calls of ``fn``, after one untimed call."""
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return samples


class Quote:
    requested_model = MODELS[0]
    ceiling_nusd = 3_000_000_000
    price_revision = "bench"
    request_digest = "0" * 64
    cert = None
    hour_after_key = False


def admission(path, accounts):
    """Seconds of one reserve+settle pair on a connection opened for it, as a prompt's process."""
    from llm_accounts.ledger import Complete, Ledger, Scope

    ledger = Ledger(path)
    ledger.status(())  # opens the file: what a prompt's process has done before it reserves
    attempt_id = uuid.uuid4().hex
    start = time.perf_counter()
    ledger.reserve(Scope("conversation", uuid.uuid4().hex), attempt_id, Quote, accounts)
    ledger.settle(attempt_id, Complete(4_500_000, {"input_tokens": 1200, "output_tokens": 300}, Quote.requested_model))
    elapsed = time.perf_counter() - start
    ledger.close()
    return elapsed


def admissions(paths, count):
    """``{size: [seconds, ...]}``: ``count`` pairs per ledger, the sizes taking turns pair by pair,
    so the machine's load (each pair is two fsync'd commits) touches every size alike."""
    from llm_accounts.declarations import load_declaration

    declared = {}
    for size, path in paths.items():
        os.environ["ANTHROPIC_ACCOUNTS"] = json.dumps(declaration(path))
        declared[size] = load_declaration().accounts
        admission(path, declared[size])  # untimed: the first pair opens a cold file
    samples = {size: [] for size in paths}
    for _ in range(count):
        for size, path in paths.items():
            samples[size].append(admission(path, declared[size]))
    return samples


def measure(path, repeat):
    """Every figure for the ledger at ``path``: ``{name: ([seconds, ...], rows or None)}``."""
    from click.testing import CliRunner
    from datasette.app import Datasette

    import datasette_plugin
    from datasette_plugin.queries import QUERIES
    from llm_accounts import schema
    from llm_accounts.cli import accounts as accounts_cli

    os.environ["LLM_ACCOUNTS_LEDGER"] = str(path)
    os.environ["ANTHROPIC_ACCOUNTS"] = json.dumps(declaration(path))
    results = {}

    ds = Datasette([str(path)])
    loop = asyncio.new_event_loop()
    loop.run_until_complete(ds.invoke_startup())
    database = pathlib.Path(path).stem

    def get(url):
        response = loop.run_until_complete(ds.client.get(url))
        assert response.status_code == 200, (url, response.status_code, response.text[:300])
        return response

    readonly = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    for query in QUERIES:
        route = datasette_plugin.route_name(ds, query, schema.TABLE_NAMES)
        url = f"/{database}/{route}.json?_shape=array"
        rows = len(get(url).json())
        results[f"query {query.name}"] = (timed(lambda: get(url), repeat), rows)
        params = {name: "" for name in query.params}
        results[f"sql {query.name}"] = (timed(lambda: readonly.execute(query.sql, params).fetchall(), repeat), rows)
        if "limit" in query.params:
            # The default limit (1,000) returns more rows at 10^6 than a small ledger has
            # conversations; the same 100 rows at every size show the cost of the walk alone.
            url_100, params_100 = url + "&limit=100", dict(params, limit="100")
            rows = len(get(url_100).json())
            results[f"query {query.name} limit=100"] = (timed(lambda: get(url_100), repeat), rows)
            results[f"sql {query.name} limit=100"] = (
                timed(lambda: readonly.execute(query.sql, params_100).fetchall(), repeat), rows)
    readonly.close()
    results["dashboard /-/llm-accounts"] = (timed(lambda: get("/-/llm-accounts"), repeat), None)
    accounts_json = get("/-/llm-accounts.json").json()["ledgers"][0]["accounts"]
    results["dashboard /-/llm-accounts.json"] = (timed(lambda: get("/-/llm-accounts.json"), repeat), len(accounts_json))
    loop.close()

    runner = CliRunner()

    def command(*args):
        def run():
            result = runner.invoke(accounts_cli, list(args))
            if result.exit_code != 0:
                raise SystemExit(f"llm accounts {' '.join(args)} failed: {result.output[-500:]!r} {result.exception!r}")
            return result

        return run

    for args in (("status",), ("attempts",), ("ladder",), ("spend", "--by", "model"), ("spend", "--by", "client"),
                 ("spend", "--by", "conversation"), ("spend", "--by", "conversation", "--account", "main"),
                 ("spend", "--by", "day"), ("attempts", "--model", "claude-sonnet-4-5")):
        lines = len(command(*args)().output.splitlines())
        results["llm accounts " + " ".join(args)] = (timed(command(*args), repeat), lines)
    return results


def check(path, size):
    """Totals against rows: ``Ledger.audit()`` for the month totals, and the day, month_outcome,
    month_model, month_conversation and month_conversation_total tables against a GROUP BY over the attempts (sizes up to 10^5; both read every row)."""
    from llm_accounts import schema
    from llm_accounts.ledger import Ledger

    if size > CHECKED:
        return "not checked (size > 10^5)"
    with Ledger(path) as ledger:
        problems = ledger.audit()
    conn = sqlite3.connect(path)
    for table, order in (("day", "day_utc, provider, account"), ("month_outcome", "1, 2, 3, 4, 5, 6, 7, 8"),
                         ("month_model", "1, 2, 3, 4"), ("month_conversation", "1, 2, 3, 4"),
                         ("month_conversation_total", "1, 2, 3")):
        kept = conn.execute(f"SELECT * FROM {table} WHERE attempts > 0 ORDER BY {order}").fetchall()
        conn.execute("SAVEPOINT recount")
        for statement in schema.statements(schema.BACKFILL[table]):
            conn.execute(statement)
        recounted = conn.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
        conn.execute("ROLLBACK TO recount")
        conn.execute("RELEASE recount")
        if kept != recounted:
            problems.append(f"{table} totals differ from the rows")
    conn.close()
    return "totals match the rows" if not problems else "; ".join(problems)


MIGRATED = ("DROP INDEX month_conversation_top", "DROP INDEX month_conversation_account_top",
            "DROP TABLE month_conversation_total")
"""What the conversation views added (issue 23): dropped, then gained again by the next open."""


def migration(path):
    """Seconds the first open of a build with the conversation views' indexes and totals takes on
    the ledger at ``path`` (an open that finds nothing missing costs a few milliseconds)."""
    from llm_accounts.ledger import Ledger

    conn = sqlite3.connect(path, isolation_level=None)
    for statement in MIGRATED:
        conn.execute(statement)
    conn.close()
    start = time.perf_counter()
    with Ledger(path) as ledger:
        ledger.status(())
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1e3,1e5,1e6", help="attempts per ledger, comma-separated (add 1e7 to opt in)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over the sizes in turn, so drift in the machine touches each")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each figure per round (median and minimum of all)")
    parser.add_argument("--admissions", type=int, default=60, help="reserve+settle pairs timed per size")
    parser.add_argument("--dir", help="directory for the ledgers (default: a new temporary directory, removed after)")
    parser.add_argument("--quick", action="store_true",
                        help="sizes 1e3,2e4, one round of two runs, 6 admissions: to try a change, not to quote")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.rounds, args.repeat, args.admissions = "1e3,2e4", 1, 2, 6
    sizes = [int(float(text)) for text in args.sizes.split(",")]

    from llm_accounts import clock

    with contextlib.ExitStack() as stack:
        directory = pathlib.Path(args.dir) if args.dir else pathlib.Path(stack.enter_context(tempfile.TemporaryDirectory()))
        directory.mkdir(parents=True, exist_ok=True)
        user = directory / "llm-user"
        user.mkdir(exist_ok=True)
        os.environ["LLM_USER_PATH"] = str(user)
        for name in ("LLM_ACCOUNTS_BASE_URL", "LLM_ACCOUNTS_CLIENT", "ANTHROPIC_API_KEY"):
            os.environ.pop(name, None)
        print(f"SQLite {sqlite3.sqlite_version}; {len(ACCOUNTS)} accounts, {PERIODS} credit periods; "
              f"{args.rounds} rounds of {args.repeat} runs per figure (admission: {args.admissions} pairs per size, "
              "the sizes taking turns); milliseconds")
        paths, notes = {}, {}
        for size in sizes:
            path = paths[size] = directory / f"ledger-{size}.db"
            if path.exists():
                path.unlink()
            started = time.perf_counter()
            generate(path, size, clock.now())
            made = time.perf_counter() - started
            conn = sqlite3.connect(path)
            (opened,) = conn.execute("SELECT COUNT(*) FROM attempt WHERE state = 'open'").fetchone()
            conn.close()
            checked = check(path, size)
            gained = migration(path)
            notes[size] = (f"{size:,} attempts ({opened:,} open), {path.stat().st_size / 2**20:,.0f} MiB, "
                           f"generated in {made:.1f} s; {checked}; the conversation views' indexes and totals "
                           f"gained on open in {gained:.2f} s")
            print(notes[size], flush=True)
        measure(paths[min(sizes)], 1)  # warm-up: imports, Datasette's templates, caches
        # Per size and figure, the timings of each round: admission's rounds are its pairs.
        samples = {size: {"admission (reserve+settle)": ([[t] for t in times], None)}
                   for size, times in admissions(paths, args.admissions).items()}
        for _ in range(args.rounds):
            for size in sizes:
                for name, (times, rows) in measure(paths[size], args.repeat).items():
                    samples[size].setdefault(name, ([], rows))[0].append(times)
        table = {size: {name: (statistics.median(sum(rounds, [])), min(sum(rounds, [])), rows)
                        for name, (rounds, rows) in figures.items()}
                 for size, figures in samples.items()}
        for size in sizes:
            print(f"\n{notes[size]}")
            print(tabulate(
                [(name, f"{median * 1000:.2f}", f"{low * 1000:.2f}", "" if rows is None else rows)
                 for name, (median, low, rows) in table[size].items()],
                headers=("figure", "median ms", "min ms", "rows"), disable_numparse=True,
            ))
        if len(sizes) > 1:
            small, large = min(sizes), max(sizes)
            rows, worst = [], 0.0
            for name in table[small]:
                # The ratio of the largest size to the smallest in each round (each pair, for
                # admission), so drift in the machine between rounds cancels: their median, min, max.
                ratios = [statistics.median(big) / statistics.median(little)
                          for big, little in zip(samples[large][name][0], samples[small][name][0])]
                ratio = statistics.median(ratios)
                goal = 1.2 if name.startswith("admission") else 2.0
                worst = max(worst, ratio / goal)
                rows.append((name, *(f"{table[size][name][0] * 1000:.2f}" for size in sizes), f"{ratio:.2f}",
                             f"{min(ratios):.2f}", f"{max(ratios):.2f}", f"<= {goal}", "met" if ratio <= goal else "MISSED"))
            print(f"\nmedian ms per size; ratio = {large:,} / {small:,}, the median of per-round ratios, with min and max")
            print(tabulate(rows, headers=("figure", *(f"{size:,}" for size in sizes), "ratio", "min", "max", "goal", ""),
                           disable_numparse=True))
            print("\nall figures within their goal" if worst <= 1 else "\nsome figures MISSED their goal")


if __name__ == "__main__":
    main()
