"""The re-check an admission runs in SQL under its account's lock admits exactly when the Python
verdict does (docs/architecture.md "Ledger on PostgreSQL"): one rule, two evaluators, fed the
same histories here so they cannot drift.

Each example writes one account's history straight into a ledger (budget, daily budget, settled
and open attempts today and on other days, adjustments, a client's dollar and token caps, a
failing health row with or without a probe in flight, a binding, what earlier waiters are owed),
then asks both: ``admission.account_verdict`` (what admission decides, from the ledger's own reads) and
``recheck.admit`` (the write, rolled back). Every example uses its own account, key and
conversation, so one ledger serves a whole test. On SQLite always, on PostgreSQL when a server
is available (tests/pgserver.py).
"""

import datetime as dt
import itertools

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from llm_accounts import clock, health, selection
from llm_accounts.declarations import Account
from llm_accounts.ledger import Ledger, Scope, admission, core, reads, recheck
from llm_accounts.pricing.prices import Quote

MODEL = "claude-sonnet-4-5-20250929"
NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)
TODAY, MONTH = clock.utc_day(NOW), clock.credit_month(NOW)
DAYS = {"yesterday": clock.utc_day(NOW - dt.timedelta(days=1)), "today": TODAY,
        "tomorrow": clock.utc_day(NOW + dt.timedelta(days=1))}  # tomorrow: the clock went back
CLIENTS = (None, "c", "d")
# How the probe slot may be held: (minutes since the dwell ended, minutes since the attempt was admitted).
PROBES = {"free": (15, 0), "probe": (15, 5), "expired_probe": (15, 11), "before_dwell": (3, 5), "probe_with_outcome": (15, 5)}
names = itertools.count()

amount = st.integers(0, 60)
attempts = st.lists(
    st.fixed_dictionaries({
        "ceiling": amount, "cost_share": st.integers(0, 100), "client": st.sampled_from(CLIENTS),
        "day": st.sampled_from(("yesterday", "today", "tomorrow")), "settled": st.booleans(),
        "ceiling_tokens": st.one_of(st.none(), amount), "token_share": st.integers(0, 100),
    }),
    min_size=1,
    max_size=6,
)
near = st.sampled_from((-2, -1, 0, 1, 2))  # a limit a few nanodollars either side of what the attempt needs
LIMITS = ("budget", "daily", "cap", "token_cap")


BINDINGS = (("none", False), ("here", True), ("none", True), ("here", False), ("elsewhere", False), ("elsewhere", True))


@st.composite
def histories(draw, concern):
    """A history, for one concern of the re-check: ``limits`` (the budgets and caps set near what
    the attempt needs: one limit in focus always near, each other absent, far or near too),
    ``health`` (a failing row with or without a probe in flight) or ``binding``."""
    h = draw(st.fixed_dictionaries({
        "focus": st.sampled_from(LIMITS),
        "client": st.sampled_from(CLIENTS),
        "attempts": attempts,
        "adjustments": st.lists(st.integers(-30, 30), min_size=1, max_size=2),
        "ceiling": st.integers(0, 80),
        "ceiling_tokens": amount,
        "ahead": st.one_of(st.just(0), st.integers(0, 40)),
        # A failing health row (the account's or this machine's), and the attempt that may hold its
        # probe slot: none, one in its lease, one past it, one admitted before the dwell ended, one
        # whose outcome is recorded (no longer a probe); from this machine or another.
        "failing": st.sampled_from((None, *PROBES)) if concern == "health" else st.none(),
        "failing_row": st.sampled_from(("account", "host")),
        "probe_host": st.sampled_from(("here", "other")),
        # The binding now, and whether the admission read the conversation as bound here (else new).
        "binding": st.sampled_from(BINDINGS if concern == "binding" else BINDINGS[:2]),
    }))
    h["binding"], h["bound"] = h["binding"]
    if h["focus"] in ("cap", "token_cap"):
        h["client"] = "c"
    rows = h["attempts"]
    cost = lambda a: a["ceiling"] * a["cost_share"] // 100 if a["settled"] else a["ceiling"]  # noqa: E731
    tokens = lambda a: (a["ceiling_tokens"] or 0) * (a["token_share"] if a["settled"] else 100) // 100  # noqa: E731
    need = h["ceiling"] + h["ahead"]
    mine = [a for a in rows if a["client"] == h["client"] == "c"]
    used = {
        "budget": sum(map(cost, rows)) + max(0, sum(h["adjustments"])) + need,
        "daily": sum(cost(a) for a in rows if a["day"] == "today") + need,
        "cap": sum(map(cost, mine)) + h["ceiling"],
        "token_cap": sum(map(tokens, mine)) + h["ceiling_tokens"],
    }
    for limit in LIMITS:
        if concern != "limits":
            h[limit] = 10**6 if limit == "budget" else draw(st.sampled_from((None, 10**6)))
            continue
        nearby = near.map(lambda d, total=used[limit]: max(1, total + d))
        far = st.just(10**6) if limit == "budget" else st.sampled_from((None, 10**6))
        h[limit] = draw(nearby if limit == h["focus"] else st.integers(0, 3).flatmap(lambda i: nearby if i == 3 else far))
    return h


def _write_history(ledger, h):
    """One account's history, as rows, in one write transaction; returns the account."""
    n = next(names)
    name, other = f"a{n}", f"o{n}"
    caps = {"clients": (("c", h["cap"]),) if h["cap"] else (), "client_tokens": (("c", h["token_cap"]),) if h["token_cap"] else ()}
    account = Account(name, f"KEY_{n}", h["budget"], daily_budget_nusd=h["daily"], **caps)
    ts = clock.isoformat(NOW - dt.timedelta(hours=1))
    settled = opened = 0
    days = {}
    newest = None
    rows = []
    for i, a in enumerate(h["attempts"]):
        cost = a["ceiling"] * a["cost_share"] // 100 if a["settled"] else None
        tokens = (a["ceiling_tokens"] or 0) * a["token_share"] // 100 if a["settled"] else None
        day = DAYS[a["day"]]
        rows.append((f"{name}-{i}", name, day, a["ceiling"], a["client"], "settled" if a["settled"] else "open", cost,
                     a["ceiling_tokens"], tokens, "complete" if a["settled"] else None))
        settled += cost or 0
        opened += 0 if a["settled"] else a["ceiling"]
        total = days.setdefault(day, [0, 0])
        total[0 if a["settled"] else 1] += cost if a["settled"] else a["ceiling"]
        newest = day if newest is None or day > newest else newest
    if h["failing"] is not None:
        # The dwell ended fifteen minutes ago; an attempt admitted since holds the probe slot for
        # its lease (ten minutes); one admitted before the dwell ended never held it.
        probe_at = NOW - dt.timedelta(minutes=PROBES[h["failing"]][1])
        if h["failing"] != "free":
            rows.append((f"{name}-probe", name, TODAY, 0, None, "open", None, None, None,
                         "stream_truncated" if h["failing"] == "probe_with_outcome" else None))
            newest = TODAY if newest is None or TODAY > newest else newest
            days.setdefault(TODAY, [0, 0])

    day_utc = newest
    day_settled, day_open = days.get(day_utc, (0, 0)) if day_utc else (0, 0)

    def write(conn):
        for who in (name, other):
            conn.execute("INSERT INTO account (provider, name, key_env, created_at) VALUES ('anthropic', ?, ?, ?)",
                         (who, f"KEY_{n}" if who == name else f"OTHER_{n}", ts))
        conn.execute(
            """INSERT INTO month (provider, name, month_utc, budget_nusd, daily_budget_nusd, key_env, created_at,
                 settled_nusd, open_nusd, day_utc, day_settled_nusd, day_open_nusd)
               VALUES ('anthropic', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (name, MONTH, h["budget"], h["daily"], f"KEY_{n}", ts, settled, opened, day_utc, day_settled, day_open),
        )
        for attempt_id, who, day, ceiling, client, state, cost, ceiling_tokens, tokens, outcome in rows:
            created = clock.isoformat(probe_at) if attempt_id.endswith("-probe") else ts
            conn.execute(
                """INSERT INTO attempt (id, scope_kind, scope_id, provider, account, month_utc, day_utc, ceiling_nusd,
                     price_revision, requested_model, request_digest, client, state, created_at, cost_nusd, outcome,
                     ceiling_tokens, tokens, host)
                   VALUES (?, 'conversation', ?, 'anthropic', ?, ?, ?, ?, '2026-11-01', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                (attempt_id, f"history-{n}", who, MONTH, day, ceiling, MODEL, "ab" * 32, client, state, created, cost,
                 outcome, ceiling_tokens, tokens,
                 "elsewhere" if attempt_id.endswith("-probe") and h["probe_host"] == "other" else ledger.host),
            )
        for i, delta in enumerate(h["adjustments"]):
            if settled + sum(h["adjustments"][: i + 1]) >= 0:
                conn.execute(
                    """INSERT INTO adjustment (id, kind, provider, account, month_utc, delta_nusd, source_ref, created_at)
                       VALUES (?, 'correction', 'anthropic', ?, ?, ?, 'test', ?)""",
                    (f"{name}-adj-{i}", name, MONTH, delta, ts),
                )
        if h["failing"] is not None:
            until = clock.isoformat(NOW - dt.timedelta(minutes=PROBES[h["failing"]][0]))
            if h["failing_row"] == "account":
                conn.execute(
                    """INSERT INTO health (provider, account, state, failure_class, since, last_failure_at, cooldown_until)
                       VALUES ('anthropic', ?, 'failing', 'provider_outage', ?, ?, ?)""",
                    (name, until, until, until),
                )
            else:
                conn.execute(
                    """INSERT INTO host_health (provider, account, host, state, failure_class, since, last_failure_at,
                         cooldown_until) VALUES ('anthropic', ?, ?, 'failing', 'transport', ?, ?, ?)""",
                    (name, ledger.host, until, until, until),
                )
        if h["binding"] != "none":
            conn.execute(
                "INSERT INTO binding (scope_kind, scope_id, provider, account, created_at) VALUES ('conversation', ?, 'anthropic', ?, ?)",
                (f"c{n}", name if h["binding"] == "here" else other, ts),
            )

    core.in_transaction(ledger, write, (), True)
    return account, n


def _python_admits(ledger, account, n, h, quote):
    """What admission decides: the ledger's own reads and ``selection.verdict`` (through
    ``admission.account_verdict``), and a bound conversation keeps its binding (``admission.choose``)."""

    def read(conn):
        facts = reads.read_facts(conn, "anthropic", MONTH, NOW, ledger.host, full=False, model=MODEL)
        f = facts[account.name]
        older = [selection.Waiter(1, None, MODEL, h["ahead"])] if h["ahead"] else []
        day_totals = reads.day_totals(conn, "anthropic", f, TODAY)
        ahead = selection.ahead(older, account, f, f.budget_nusd, day_totals) if older else (0, 0)
        verdict = admission.account_verdict(conn, "anthropic", account, facts, quote, TODAY, NOW, h["client"], older)
        return f, ahead[0], verdict

    f, ahead, verdict = core.in_transaction(ledger, read, (), False)
    binding_holds = h["binding"] == ("here" if h["bound"] else "none")
    return f, ahead, verdict.code is None and binding_holds, verdict


def _sql_admits(ledger, account, n, h, quote, f, ahead):
    """What the write's re-check decides for a plan read from the same state: rolled back."""
    verdict = selection.Verdict(account=account, facts=f, budget_nusd=f.budget_nusd)
    plan = recheck.Plan(
        scope=Scope("conversation", f"c{n}"), attempt_id=f"new-{n}", quote=quote, verdict=verdict, month=MONTH,
        day=TODAY, ts=clock.isoformat(NOW), now=NOW, host=ledger.host, client=h["client"], ahead_nusd=ahead,
        bound=account.name if h["bound"] else None, stamp=f.stamp,
    )
    conn, backend = ledger._conn, ledger._backend
    try:
        cursor = recheck.admit(conn, backend, plan)
        return backend.rowcount(cursor) == 1
    finally:
        backend.rollback(conn)


def _agree(ledger, h):
    account, n = _write_history(ledger, h)
    quote = Quote(MODEL, h["ceiling"], "2026-11-01", "ab" * 32, ceiling_tokens=h["ceiling_tokens"])
    f, ahead, python, verdict = _python_admits(ledger, account, n, h, quote)
    # Only what the re-check covers refuses here: a limit, or a probe slot taken (a cooling code).
    assert verdict.code in {None, "budget_exhausted", *health.COOLING_CODES.values()}, verdict.message
    assert _sql_admits(ledger, account, n, h, quote, f, ahead) == python


@pytest.fixture(scope="module")
def sqlite_ledger(tmp_path_factory):
    with Ledger(tmp_path_factory.mktemp("recheck") / "ledger.db") as ledger:
        yield ledger


@pytest.fixture(scope="module")
def pg_ledger(pg_server):
    url, name = pg_server.new_schema_url()
    with Ledger(url) as ledger:
        yield ledger


EXAMPLES = settings(max_examples=30, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
CONCERNS = ("limits", "health", "binding")


def _history(**changes):
    """One history, for the cases a few random examples may miss (``example``)."""
    attempt = {"ceiling": 20, "cost_share": 50, "client": "c", "day": "today", "settled": False, "ceiling_tokens": 20,
               "token_share": 50}
    h = {"focus": "budget", "client": "c", "attempts": [attempt, {**attempt, "settled": True}], "adjustments": [5],
         "ceiling": 10, "ceiling_tokens": 10, "ahead": 0, "failing": None, "failing_row": "account", "probe_host": "here",
         "binding": "none", "bound": False, "budget": 10**6, "daily": None, "cap": None, "token_cap": None}
    return {**h, **changes}


# Each a nanodollar (or token) short of its limit, so each total must be where the rule reads it.
TIGHT = {
    "limits": [
        _history(budget=44), _history(budget=44, adjustments=[0]), _history(budget=54, ahead=10),
        _history(daily=39), _history(daily=29, attempts=[
            {"ceiling": 20, "cost_share": 50, "client": None, "day": "tomorrow", "settled": False, "ceiling_tokens": None,
             "token_share": 0},
            {"ceiling": 20, "cost_share": 50, "client": None, "day": "today", "settled": False, "ceiling_tokens": None,
             "token_share": 0}]),
        _history(cap=39), _history(token_cap=39),
    ],
    "health": [_history(failing=kind, failing_row=row, probe_host=host) for kind in PROBES
               for row in ("account", "host") for host in ("here", "other")],
    "binding": [_history(binding=binding, bound=bound) for binding, bound in BINDINGS],
}


def _property(ledger, concern):
    @EXAMPLES
    @given(histories(concern))
    def agree(h):
        _agree(ledger, h)

    for h in TIGHT[concern]:
        agree = example(h)(agree)
    agree()


@pytest.mark.parametrize("concern", CONCERNS)
def test_the_sqlite_recheck_admits_exactly_when_the_verdict_does(sqlite_ledger, concern):
    _property(sqlite_ledger, concern)


@pytest.mark.parametrize("concern", CONCERNS)
def test_the_postgresql_recheck_admits_exactly_when_the_verdict_does(pg_ledger, concern):
    _property(pg_ledger, concern)


def test_the_recheck_sql_is_the_verdicts_limits_over_columns():
    """Generated, not written twice: each limit ``selection.limits`` returns appears as its own
    ``fits`` inequality over the column holding its total."""
    account = Account("work", "WORK_KEY", 100, daily_budget_nusd=50, clients=(("c", 30),), client_tokens=(("c", 9),))
    quote = Quote(MODEL, 7, "2026-11-01", "ab" * 32, ceiling_tokens=3)
    params = {}
    sql = recheck.limit_sql(account, "c", quote, 5, params)
    assert sql.count("<=") == 4
    assert "m.budget_nusd" in sql and recheck.DAY_OPEN in sql and recheck.CLIENT[1] in sql and recheck.CLIENT_TOKENS[1] in sql
    assert {7, 5, 50, 30, 3, 9} <= set(params.values())  # figures are parameters, never statement text
    assert not any(str(figure) in sql for figure in (50, 30))
