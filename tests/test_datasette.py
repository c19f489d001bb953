"""The Datasette plugin: canned queries, the spend dashboard, and ``llm accounts browse``.

The ledger here is written with sqlite-utils following ``llm_accounts.schema``. Attempts are
placed around ``NOW``, a fixed instant in credit period 2026-11 (2026-10-31 to 2026-11-29), and
the dashboard tests fix ``clock.now()`` to it. Warm-prefix expiries and cooldowns are set around
the real clock, since the queries compare them with SQLite's ``now``.
"""

import datetime as dt
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request

import pytest
import sqlite_utils
import yaml
from click.testing import CliRunner
from datasette.app import Datasette

import datasette_plugin
from datasette_plugin import dashboard
from datasette_plugin.queries import QUERIES, canned_queries, metadata, usd_sql
from llm_accounts import clock, schema
from llm_accounts.browse import child_environment
from llm_accounts.cli import accounts as accounts_cli
from llm_accounts.money import INT64_MAX, usd_exact, usd_fine

from conftest import assert_no_key_material

DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy
ROOT = pathlib.Path(__file__).resolve().parent.parent
NOW = dt.datetime(2026, 11, 5, 12, 0, tzinfo=dt.timezone.utc)
# The credit period and UTC day of ``NOW``, and the period before it: what the queries and the
# dashboard are asked about, taken from the fixed instant the ledger is built around.
PERIOD = clock.credit_month(NOW)
PREVIOUS_PERIOD = clock.credit_month(clock.credit_period(PERIOD)[0] - dt.timedelta(days=1))
USD = 10**9
HOUR = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)

# name, rank, monthly budget, daily budget, block reason
ACCOUNTS = [
    ("alpha", 0, 50 * USD, 10 * USD, None),
    ("beta", 1, 20 * USD, None, None),
    ("gamma", 2, 100 * USD, None, None),
    ("delta", 3, 5 * USD, 1 * USD, "auth_failed"),
    ("omega", 4, 15 * USD, None, None),
]
PREVIOUS_BUDGETS = {"alpha": 40 * USD}
LIVE_CERT = "3f2a9c7d1e5b" + "8" * 52
LAPSED_CERT = "a1b2c3d4e5f6" + "0" * 52


def attempts(now):
    """The ledger's attempts: (id, account, created, state, outcome, cost, ceiling,
    provider_error_type, rejection_class, failure_class, http_status)."""
    previous = clock.credit_period(clock.credit_month(now))[0] - 10 * DAY
    return [
        ("a1", "alpha", now - 2 * DAY, "settled", "complete", 1_250_000_000, 3 * USD, None, None, None, 200),
        ("a2", "alpha", now - DAY, "settled", "complete", 2_000_000_001, 3 * USD, None, None, None, 200),
        ("a3", "alpha", now - 2 * HOUR, "settled", "complete", 750_000_000, 3 * USD, None, None, None, 200),
        ("a4", "alpha", now - HOUR, "open", "provider_error", None, 1_500_000_000, "api_error", None, "provider_outage", 500),
        ("a5", "alpha", now - DAY - 3 * HOUR, "open", None, None, 500_000_000, None, None, None, None),
        ("a6", "alpha", now - HOUR / 2, "settled", "rate_limited", 0, 3 * USD, "rate_limit_error", "other", "rate_limited", 429),
        ("a7", "alpha", previous, "settled", "complete", 30_123_456_789, 40 * USD, None, None, None, 200),
        ("b1", "beta", now - 4 * DAY, "settled", "complete", 18_500_000_000, 19 * USD, None, None, None, 200),
        ("b2", "beta", now - 3 * HOUR, "open", "stream_error", None, 250_000_000, None, None, "transport", None),
        ("g1", "gamma", now - 4 * HOUR, "settled", "request_rejected", 0, USD, "invalid_request_error", "prompt_too_long", "semantic", 400),
        ("g2", "gamma", now - 3 * HOUR, "settled", "request_rejected", 0, USD, "invalid_request_error", "prompt_too_long", "semantic", 400),
        ("g3", "gamma", now - DAY, "settled", "rate_limited", 0, USD, "rate_limit_error", "other", "rate_limited", 429),
        ("g4", "gamma", now - DAY - HOUR, "settled", "complete", 1, USD, None, None, None, 200),
        ("g5", "gamma", now - 2 * DAY, "settled", "request_rejected", 0, USD, "invalid_request_error", "credit_balance_too_low", "quota_exhausted", 400),
        ("e1", "delta", now - 3 * DAY, "settled", "complete", 4_500_000_000, 5 * USD, None, None, None, 200),
        ("e2", "delta", now - 3 * DAY + HOUR, "settled", "auth_required", 0, USD, "authentication_error", "other", "auth", 401),
        ("o1", "omega", previous, "settled", "complete", 2 * USD, 3 * USD, None, None, None, 200),
    ]


def build_ledger(path, now=NOW, wall=None):
    """Write a ledger at ``path`` with the rows above, placed around ``now``.

    ``wall`` (default: the real clock) anchors what the queries compare with SQLite's ``now``:
    warm-prefix expiries and the failing account's cooldown.
    """
    wall = wall or clock.now()
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite_utils.Database(path)
    db.executescript(schema.TABLES)
    for table, column, declaration in getattr(schema, "COLUMNS", ()):
        db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
    db.execute(f"PRAGMA user_version = {schema.VERSION}")
    iso = clock.isoformat
    created = iso(now - 30 * DAY)
    budgets = {name: (budget, daily) for name, _, budget, daily, _ in ACCOUNTS}
    for name, rank, _, _, block in ACCOUNTS:
        db["account"].insert(
            dict(provider="anthropic", name=name, key_env=f"{name.upper()}_ANTHROPIC", rank=rank,
                 weight=1, block_reason=block, blocked_at=iso(now - 2 * DAY) if block else None,
                 removed_at=None, created_at=created)
        )
    months = set()
    # In admission order, as a ledger writes them (its lists follow the rowid).
    for (id_, account, at, state, outcome, cost, ceiling, error_type, rejection, failure, status) in sorted(
        attempts(now), key=lambda attempt: attempt[2]
    ):
        month = clock.credit_month(at)
        if (account, month) not in months:
            months.add((account, month))
            current = month == clock.credit_month(now)
            budget, daily = budgets[account]
            db["month"].insert(
                dict(provider="anthropic", name=account, month_utc=month,
                     budget_nusd=budget if current else PREVIOUS_BUDGETS.get(account, budget),
                     daily_budget_nusd=daily if current else None,
                     key_env=f"{account.upper()}_ANTHROPIC", created_at=iso(at))
            )
        db["attempt"].insert(
            dict(id=id_, scope_kind="conversation", scope_id=f"conv-{id_}", provider="anthropic",
                 account=account, month_utc=month, day_utc=clock.utc_day(at), ceiling_nusd=ceiling,
                 price_revision="2026-11-01", requested_model="claude-sonnet-4-5",
                 served_model="claude-sonnet-4-5" if outcome == "complete" else None,
                 request_digest="0" * 64, client="nightly" if account == "beta" else None, llm_response_id=None, state=state,
                 outcome=outcome, provider_error_type=error_type, rejection_class=rejection,
                 failure_class=failure, http_status=status, cost_nusd=cost, usage_json=None,
                 request_id=None, created_at=iso(at),
                 settled_at=iso(at + dt.timedelta(seconds=5)) if state == "settled" else None)
        )
    month = clock.credit_month(now)
    for id_, account, delta in (("adj-beta", "beta", 1_250_000_000), ("adj-delta", "delta", USD)):
        db["adjustment"].insert(
            dict(id=id_, kind="correction", attempt_id=None, provider="anthropic", account=account,
                 month_utc=month, delta_nusd=delta, source_ref="invoice", detail=None,
                 created_at=iso(now - DAY))
        )
    db["warm_prefix"].insert_all(
        [
            dict(provider="anthropic", account="alpha", cert=LIVE_CERT, stable_tokens=4096,
                 expires_at=iso(wall + HOUR)),
            dict(provider="anthropic", account="gamma", cert=LAPSED_CERT, stable_tokens=None,
                 expires_at=iso(wall - 2 * HOUR)),
        ]
    )
    db["health"].insert_all(
        [
            dict(provider="anthropic", account="gamma", state="failing", failure_class="rate_limited",
                 http_status=429, since=iso(now - DAY), last_failure_at=iso(now - DAY),
                 last_success_at=iso(now - DAY - HOUR), cooldown_until=iso(wall + HOUR),
                 probe_attempt_id=None),
            dict(provider="anthropic", account="delta", state="failing", failure_class="auth",
                 http_status=401, since=iso(now - 3 * DAY + HOUR),
                 last_failure_at=iso(now - 3 * DAY + HOUR), last_success_at=None,
                 cooldown_until=None, probe_attempt_id=None),
        ]
    )
    for script in getattr(schema, "BACKFILL", {}).values():  # the month rows' running totals
        db.executescript(script)
    db.close()
    return path


@pytest.fixture(scope="module")
def built_ledger(tmp_path_factory):
    """The ledger above, written once per module (each ``build_ledger`` takes seconds on a loaded
    machine); its wall-clock rows are an hour or more from the real clock, far past a module's run."""
    return build_ledger(tmp_path_factory.mktemp("built") / "accounts-ledger.db")


@pytest.fixture
def ledger(ledger_path, built_ledger):
    """A copy of the built ledger at ``ledger_path``: a test may change its own."""
    ledger_path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(built_ledger, ledger_path)
    return ledger_path


@pytest.fixture
def ds(ledger):
    return Datasette([str(ledger)])


def route(ds, name):
    """Where query ``name`` is served: its name, or on Datasette 1.0 its alias if a table has it."""
    (query,) = [query for query in QUERIES if query.name == name]
    return datasette_plugin.route_name(ds, query, schema.TABLE_NAMES)


async def rows(ds, query, **params):
    query_string = "&".join(f"{key}={value}" for key, value in params.items())
    response = await ds.client.get(f"/accounts-ledger/{route(ds, query)}.json?_shape=array&{query_string}")
    assert response.status_code == 200, response.text
    return response.json()


def money(row, *columns):
    return tuple(row[column] for column in columns)


# The queries' one definition


def test_metadata_yml_carries_the_module_queries():
    with open(ROOT / "metadata.yml") as fp:
        assert yaml.safe_load(fp) == metadata()


def test_metadata_yml_is_regenerated_from_the_module():
    from cogapp import Cog

    assert Cog().main(["cog", "--check", str(ROOT / "metadata.yml")]) == 0


def test_metadata_yml_names_the_default_ledger_database():
    from llm_accounts.paths import ledger_path

    assert pathlib.Path(ledger_path()).stem in metadata()["databases"]


@pytest.fixture
def without_plugin():
    from datasette.plugins import pm

    name = pm.get_name(datasette_plugin)
    pm.unregister(datasette_plugin)
    yield
    pm.register(datasette_plugin, name=name)


@pytest.mark.asyncio
async def test_metadata_yml_serves_the_queries_without_the_plugin(ledger, without_plugin):
    with open(ROOT / "metadata.yml") as fp:
        settings = yaml.safe_load(fp)
    if hasattr(Datasette, "add_query"):  # 1.0 alphas read queries from config: -c metadata.yml
        ds = Datasette([str(ledger)], config=settings)
    else:  # 0.65: -m metadata.yml
        ds = Datasette([str(ledger)], metadata=settings)
    assert (await ds.client.get("/-/llm-accounts")).status_code == 404
    for query in QUERIES:  # metadata.yml lists each by the name no table shadows, on either version
        response = await ds.client.get(f"/accounts-ledger/{query.unshadowed_name}.json?_shape=array")
        assert response.status_code == 200, query.name
    first = (await rows(ds, "spend_by_month"))[0]
    assert money(first, "account", "settled_usd", "remaining_usd") == ("alpha", "4.000000001", "43.999999999")


@pytest.mark.parametrize("query", QUERIES, ids=lambda query: query.name)
def test_each_query_has_a_title_and_a_description(query):
    assert query.title and query.description
    assert canned_queries()[query.name]["title"] == query.title


@pytest.mark.parametrize("nusd", [0, 1, 999_999_999, USD, 12_340_000_000, -1, -1_500_000_000, INT64_MAX])
def test_usd_sql_formats_nanodollars_exactly(nusd):
    (text,) = sqlite3.connect(":memory:").execute(f"select {usd_sql('n')} from (select ? as n)", [nusd]).fetchone()
    assert text == usd_exact(nusd)


def test_usd_sql_keeps_null_as_null():
    (text,) = sqlite3.connect(":memory:").execute(f"select {usd_sql('n')} from (select null as n)").fetchone()
    assert text is None


# Read-only

WRITE_WORDS = re.compile(r"\b(insert|update|delete|drop|alter|create|attach|detach|pragma|replace|vacuum|reindex)\b", re.I)


@pytest.mark.parametrize("query", QUERIES, ids=lambda query: query.name)
def test_query_is_declared_read_only(query):
    assert not canned_queries()[query.name].get("write")
    assert not metadata()["databases"]["ledger"]["queries"][query.unshadowed_name].get("write")
    assert not WRITE_WORDS.search(query.sql)


def test_the_health_query_has_a_name_no_table_shadows():
    assert not {query.unshadowed_name for query in QUERIES} & set(schema.TABLE_NAMES)


@pytest.mark.parametrize("query", QUERIES, ids=lambda query: query.name)
def test_query_runs_on_a_read_only_copy_with_only_reads_authorized(query, ledger, tmp_path):
    copy = tmp_path / "copy.db"
    shutil.copy(ledger, copy)
    before = copy.read_bytes()
    conn = sqlite3.connect(f"file:{copy}?mode=ro", uri=True)
    allowed = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
    denied = []

    def authorizer(action, *args):
        if action in allowed:
            return sqlite3.SQLITE_OK
        denied.append(action)
        return sqlite3.SQLITE_DENY

    conn.set_authorizer(authorizer)
    result = conn.execute(query.sql, {name: "" for name in query.params}).fetchall()
    conn.close()
    assert denied == []
    assert result
    assert copy.read_bytes() == before


@pytest.mark.asyncio
async def test_datasette_registers_every_query_as_read_only(ds):
    await ds.invoke_startup()
    if hasattr(ds, "get_query"):  # Datasette 1.0 alphas: stored queries
        names = {query.unshadowed_name for query in QUERIES}
        registered = {name: await ds.get_query("accounts-ledger", name) for name in names}
        assert all(stored is not None and not stored.is_write for stored in registered.values())
    else:  # Datasette 0.65: canned queries
        names = {query.name for query in QUERIES}
        registered = await ds.get_canned_queries("accounts-ledger", None)
        assert all(not registered[name].get("write") for name in names)
    assert set(registered) == names


# Each query's numbers


@pytest.mark.asyncio
async def test_spend_by_month_shows_exact_dollars_per_account_and_period(ds):
    result = await rows(ds, "spend_by_month")
    period = clock.credit_month(NOW)  # the fixed instant the ledger is built around
    previous = clock.credit_month(clock.credit_period(period)[0] - DAY)
    columns = ("account", "credit_period", "budget_usd", "settled_usd", "open_ceilings_usd", "remaining_usd", "utilization_percent")
    assert [money(row, *columns) for row in result] == [
        ("alpha", period, "50.000000000", "4.000000001", "2.000000000", "43.999999999", 12.0),
        ("beta", period, "20.000000000", "19.750000000", "0.250000000", "0.000000000", 100.0),
        ("delta", period, "5.000000000", "5.500000000", "0.000000000", "-0.500000000", 110.0),
        ("gamma", period, "100.000000000", "0.000000001", "0.000000000", "99.999999999", 0.0),
        ("alpha", previous, "40.000000000", "30.123456789", "0.000000000", "9.876543211", 75.31),
        ("omega", previous, "15.000000000", "2.000000000", "0.000000000", "13.000000000", 13.33),
    ]


@pytest.mark.asyncio
async def test_spend_by_month_filters_by_account_and_month(ds):
    period = clock.credit_month(NOW)  # the fixed instant the ledger is built around
    previous = clock.credit_month(clock.credit_period(period)[0] - DAY)
    assert [(row["account"], row["credit_period"]) for row in await rows(ds, "spend_by_month", account="alpha")] == [
        ("alpha", period),
        ("alpha", previous),
    ]
    assert [row["account"] for row in await rows(ds, "spend_by_month", month=previous)] == ["alpha", "omega"]
    assert [row["settled_usd"] for row in await rows(ds, "spend_by_month", account="beta", month=period)] == [
        "19.750000000"
    ]


@pytest.mark.asyncio
async def test_spend_today_shows_one_utc_day_against_daily_budgets(ds):
    result = await rows(ds, "spend_today", day="2026-11-05")
    columns = ("account", "day", "attempts", "settled_usd", "open_ceilings_usd", "daily_budget_usd", "remaining_today_usd")
    assert [money(row, *columns) for row in result] == [
        ("alpha", "2026-11-05", 3, "0.750000000", "1.500000000", "10.000000000", "7.750000000"),
        ("beta", "2026-11-05", 1, "0.000000000", "0.250000000", None, None),
        ("delta", "2026-11-05", 0, "0.000000000", "0.000000000", "1.000000000", "1.000000000"),
        ("gamma", "2026-11-05", 2, "0.000000000", "0.000000000", None, None),
        ("omega", "2026-11-05", 0, "0.000000000", "0.000000000", None, None),
    ]


@pytest.mark.asyncio
async def test_spend_today_filters_by_account(ds):
    result = await rows(ds, "spend_today", day="2026-11-04", account="alpha")
    assert [money(row, "attempts", "settled_usd", "open_ceilings_usd") for row in result] == [
        (2, "2.000000001", "0.500000000")
    ]


@pytest.mark.asyncio
async def test_spend_today_defaults_to_the_current_utc_day(ds):
    before = clock.utc_day(clock.now())
    result = await rows(ds, "spend_today")
    after = clock.utc_day(clock.now())
    assert {row["day"] for row in result} <= {before, after}
    assert len(result) == len(ACCOUNTS)


@pytest.mark.asyncio
async def test_open_attempts_lists_unknown_outcomes_oldest_first(ds):
    result = await rows(ds, "open_attempts")
    assert [money(row, "attempt_id", "account", "outcome", "ceiling_usd") for row in result] == [
        ("a5", "alpha", None, "0.500000000"),
        ("b2", "beta", "stream_error", "0.250000000"),
        ("a4", "alpha", "provider_error", "1.500000000"),
    ]
    assert all(re.fullmatch(r"\d+d \d\dh \d\dm", row["open_for"]) for row in result)
    assert [row["attempt_id"] for row in await rows(ds, "open_attempts", account="beta")] == ["b2"]


@pytest.mark.asyncio
async def test_attempts_by_outcome_counts_and_costs(ds):
    result = await rows(ds, "attempts_by_outcome", account="alpha", month=PERIOD)
    columns = ("state", "outcome", "attempts", "cost_usd", "open_ceilings_usd")
    assert [money(row, *columns) for row in result] == [
        ("settled", "complete", 3, "4.000000001", "0.000000000"),
        ("open", None, 1, "0.000000000", "0.500000000"),
        ("open", "provider_error", 1, "0.000000000", "1.500000000"),
        ("settled", "rate_limited", 1, "0.000000000", "0.000000000"),
    ]


@pytest.mark.asyncio
async def test_rejection_classes_group_by_type_and_class(ds):
    result = await rows(ds, "rejection_classes", month=PERIOD)
    columns = ("account", "provider_error_type", "rejection_class", "attempts", "http_statuses")
    assert [money(row, *columns) for row in result] == [
        ("alpha", "api_error", None, 1, "500"),
        ("alpha", "rate_limit_error", "other", 1, "429"),
        ("delta", "authentication_error", "other", 1, "401"),
        ("gamma", "invalid_request_error", "prompt_too_long", 2, "400"),
        ("gamma", "invalid_request_error", "credit_balance_too_low", 1, "400"),
        ("gamma", "rate_limit_error", "other", 1, "429"),
    ]


@pytest.mark.asyncio
async def test_rejection_classes_filter_by_account(ds):
    result = await rows(ds, "rejection_classes", account="gamma")
    assert {row["account"] for row in result} == {"gamma"}
    assert sum(row["attempts"] for row in result) == 4


@pytest.mark.asyncio
async def test_warm_prefixes_show_live_and_lapsed_with_short_certificates(ds):
    result = await rows(ds, "warm_prefixes")
    assert [money(row, "account", "cert", "status", "stable_tokens") for row in result] == [
        ("alpha", LIVE_CERT[:12], "live", 4096),
        ("gamma", LAPSED_CERT[:12], "lapsed", None),
    ]


@pytest.mark.asyncio
async def test_health_shows_ok_cooling_and_blocked_accounts(ds):
    result = await rows(ds, "health")
    columns = ("account", "status", "block_reason", "failure_class", "http_status")
    assert [money(row, *columns) for row in result] == [
        ("alpha", "ok", None, None, None),
        ("beta", "ok", None, None, None),
        ("gamma", "cooling", None, "rate_limited", 429),
        ("delta", "blocked", "auth_failed", "auth", 401),
        ("omega", "ok", None, None, None),
    ]


@pytest.mark.asyncio
async def test_health_lists_the_machines_an_account_is_failing_from(ledger):
    wall, iso = clock.now(), clock.isoformat
    db = sqlite_utils.Database(ledger)
    db["host_health"].insert_all(
        [
            dict(provider="anthropic", account="beta", host="build-02", state="failing", failure_class="transport",
                 since=iso(wall - HOUR), last_failure_at=iso(wall - HOUR), cooldown_until=iso(wall + HOUR),
                 transport_failures=3),
            dict(provider="anthropic", account="beta", host="build-01", state="failing", failure_class="transport",
                 since=iso(wall - 3 * HOUR), last_failure_at=iso(wall - 3 * HOUR),
                 cooldown_until=iso(wall - 2 * HOUR), transport_failures=1),
            dict(provider="anthropic", account="alpha", host="build-03", state="ok", last_success_at=iso(wall),
                 transport_failures=0),
        ]
    )
    db.close()
    result = await rows(Datasette([str(ledger)]), "health")
    assert [money(row, "account", "status", "failing_hosts") for row in result] == [
        ("alpha", "ok", None),
        ("beta", "ok", "build-01, build-02 (cooling)"),
        ("gamma", "cooling", None),
        ("delta", "blocked", None),
        ("omega", "ok", None),
    ]


# Which databases get the queries


@pytest.mark.asyncio
async def test_a_database_without_the_ledger_tables_gets_no_queries(ledger, tmp_path):
    other = tmp_path / "other.db"
    sqlite_utils.Database(other)["notes"].insert({"text": "hello"})
    ds = Datasette([str(ledger), str(other)])
    assert (await ds.client.get("/accounts-ledger/spend_by_month.json")).status_code == 200
    for query in QUERIES:
        assert (await ds.client.get(f"/other/{query.name}.json")).status_code == 404


@pytest.mark.asyncio
async def test_the_plugin_is_installed(ds):
    response = await ds.client.get("/-/plugins.json")
    assert "llm-accounts" in {plugin["name"] for plugin in response.json()}


# The dashboard


@pytest.fixture
def at_now(monkeypatch):
    monkeypatch.setattr(clock, "now", lambda: NOW)


async def dashboard_html(ds):
    response = await ds.client.get("/-/llm-accounts")
    assert response.status_code == 200
    return response.text


def account_row(html, name):
    match = re.search(rf'<tr class="llma-account[^"]*" data-account="{name}">(.*?)</tr>', html, re.S)
    assert match, f"no row for {name}"
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", match.group(1))).strip()


@pytest.mark.asyncio
async def test_dashboard_shows_each_account_with_its_money(ds, at_now):
    html = await dashboard_html(ds)
    # budget, settled, open ceilings, remaining, used, today (open part), daily budget
    assert "$50.00 $4.00 $2.00 $44.00 12.0% $2.25 $1.50 open $10.00" in account_row(html, "alpha")
    assert "$20.00 $19.75 $0.25 $0.00 100.0%" in account_row(html, "beta")
    assert "$5.00 $5.50 $0.00 -$0.50 110.0%" in account_row(html, "delta")
    # gamma's one settled nanodollar would read $0.00 like omega's nothing: it keeps its digits.
    assert "$100.00 $0.000000001 $0.00 $100.00 0.0%" in account_row(html, "gamma")


@pytest.mark.asyncio
async def test_dashboard_marks_a_reached_budget(ds, at_now):
    html = await dashboard_html(ds)
    assert "Budget reached" in account_row(html, "beta")
    assert "Budget reached" in account_row(html, "delta")
    assert "Budget reached" not in account_row(html, "alpha")


@pytest.mark.asyncio
async def test_dashboard_marks_failing_and_blocked_accounts(ds, at_now):
    html = await dashboard_html(ds)
    assert "Failing: rate_limited, HTTP 429" in account_row(html, "gamma")
    assert "cooling until" in account_row(html, "gamma")
    assert "Blocked: auth_failed" in account_row(html, "delta")
    assert "Failing" not in account_row(html, "alpha")


@pytest.mark.asyncio
async def test_dashboard_shows_the_last_success(ds, at_now):
    html = await dashboard_html(ds)
    assert account_row(html, "gamma").endswith("2026-11-04 11:00")  # the health row's
    assert account_row(html, "alpha").endswith("2026-11-05 10:00")  # the latest complete attempt


@pytest.mark.asyncio
async def test_dashboard_reads_a_budget_from_an_earlier_period_when_unused_this_one(ds, at_now):
    assert account_row(await dashboard_html(ds), "omega").startswith("omega ok $15.00 from 2026-10 $0.00")


@pytest.mark.asyncio
async def test_dashboard_draws_budget_bars_for_each_account(ds, at_now):
    html = await dashboard_html(ds)
    chart = re.search(r'<svg class="llma-chart llma-budget-chart".*?</svg>', html, re.S).group(0)
    for name in ("alpha", "beta", "gamma", "delta", "omega"):
        assert f"<title>{name}: budget " in chart
    assert "<title>alpha: settled $4.00</title>" in chart
    assert "<title>alpha: open ceilings $2.00</title>" in chart


@pytest.mark.asyncio
async def test_dashboard_draws_spend_per_day_of_the_credit_period(ds, at_now):
    html = await dashboard_html(ds)
    chart = re.search(r'<svg class="llma-chart llma-daily-chart".*?</svg>', html, re.S).group(0)
    today, b1_day = clock.utc_day(NOW), clock.utc_day(NOW - 4 * DAY)
    assert f"<title>{today} alpha: settled $0.75</title>" in chart
    assert f"<title>{today}: open ceilings $1.75</title>" in chart
    assert f"<title>{b1_day} beta: settled $18.50</title>" in chart
    assert PREVIOUS_PERIOD not in re.sub(r"<title id=.*?</title>", "", chart)  # a7 is last period's


@pytest.mark.asyncio
async def test_dashboard_links_to_every_query(ds, at_now):
    html = await dashboard_html(ds)
    for query in QUERIES:
        assert f'href="/accounts-ledger/{route(ds, query.name)}"' in html


@pytest.mark.asyncio
async def test_dashboard_leaves_out_databases_without_the_ledger(tmp_path, at_now):
    other = tmp_path / "other.db"
    sqlite_utils.Database(other)["notes"].insert({"text": "hello"})
    html = await dashboard_html(Datasette([str(other)]))
    assert "No attached database holds the llm-accounts ledger" in html
    assert 'href="/other/' not in html


@pytest.mark.asyncio
async def test_dashboard_of_an_empty_ledger_says_accounts_appear_after_the_first_call(ledger_path):
    from llm_accounts.ledger import Ledger

    with Ledger(ledger_path) as empty:
        assert empty.status(()) == []
    html = await dashboard_html(Datasette([str(ledger_path)]))
    assert "No accounts in this ledger yet" in html
    assert 'href="/accounts-ledger/spend_by_month"' in html


@pytest.mark.asyncio
async def test_menu_links_to_the_dashboard(ds):
    response = await ds.client.get("/")
    assert 'href="/-/llm-accounts"' in response.text


@pytest.mark.asyncio
async def test_no_menu_link_where_no_ledger_is_attached(tmp_path):
    import sqlite3

    other = tmp_path / "notes.db"
    sqlite3.connect(other).execute("CREATE TABLE note (text)").connection.close()
    response = await Datasette([str(other)]).client.get("/")
    assert response.status_code == 200
    assert 'href="/-/llm-accounts"' not in response.text


def test_summary_marks_near_budget_from_nine_tenths():
    near = dashboard.AccountSummary("a", budget_nusd=10 * USD, settled_nusd=8 * USD, open_nusd=USD)
    under = dashboard.AccountSummary("a", budget_nusd=10 * USD, settled_nusd=9 * USD - 1)
    assert ("warn", "Near budget") in near.marks
    assert under.marks == []


def test_summary_marks_a_reached_daily_budget():
    summary = dashboard.AccountSummary(
        "a", budget_nusd=10 * USD, daily_budget_nusd=USD, today_settled_nusd=USD // 2, today_open_nusd=USD // 2
    )
    assert summary.marks == [("bad", "Daily budget reached")]


def test_summary_marks_an_account_whose_room_is_below_the_default_prompts_ceiling():
    prompt = dashboard.DefaultPrompt("claude-sonnet-4-6", 2 * USD)
    short = dashboard.AccountSummary("a", budget_nusd=10 * USD, settled_nusd=8 * USD + 1, default_prompt=prompt)
    room = dashboard.AccountSummary("a", budget_nusd=10 * USD, settled_nusd=8 * USD, default_prompt=prompt)
    assert short.marks == [("bad", "Cannot take a plain claude-routed prompt: $1.999999999 left, below the $2.00 ceiling of claude-sonnet-4-6")]
    assert room.marks == []  # the ceiling fits exactly: admitted


def test_summary_marks_an_account_whose_room_today_is_below_the_default_prompts_ceiling():
    prompt = dashboard.DefaultPrompt("claude-sonnet-4-6", 2 * USD)
    summary = dashboard.AccountSummary(
        "a", budget_nusd=10 * USD, daily_budget_nusd=3 * USD, today_settled_nusd=USD // 2, today_open_nusd=USD,
        default_prompt=prompt,
    )
    assert summary.marks == [("bad", "Cannot take a plain claude-routed prompt: $1.50 left today, below the $2.00 ceiling of claude-sonnet-4-6")]


def test_summary_marks_a_blocked_account_by_its_block_and_takes_no_default_prompt():
    prompt = dashboard.DefaultPrompt("claude-sonnet-4-6", 2 * USD)
    summary = dashboard.AccountSummary("a", budget_nusd=10 * USD, block_reason="manual", default_prompt=prompt)
    assert summary.marks == [("bad", "Blocked: manual")]
    assert summary.default_prompt_refusal == "blocked"


def test_summary_marks_a_budget_warning_the_ledger_said_while_spend_is_past_it():
    warned = dashboard.AccountSummary("a", budget_nusd=10 * USD, settled_nusd=8_500_000_000, warned_threshold=80)
    refunded = dashboard.AccountSummary("a", budget_nusd=10 * USD, settled_nusd=7 * USD, warned_threshold=80)
    assert warned.marks == [("warn", "Budget warning: 85 % spent, past its 80 % threshold")]
    assert refunded.marks == []


def test_period_days_cover_the_credit_period():
    # The credit period of the file's fixed instant NOW (2026-11: 2026-10-31 to 2026-11-29).
    days = dashboard.period_days(clock.credit_month(NOW))
    assert (days[0], days[-1], len(days)) == ("2026-10-31", "2026-11-29", 30)


@pytest.mark.parametrize(
    "maximum, ticks",
    [(7 * USD, [0, 2 * USD, 4 * USD, 6 * USD, 8 * USD]), (100 * USD, [0, 50 * USD, 100 * USD]), (3, [0, 1, 2, 3])],
)
def test_chart_ticks_are_round_amounts(maximum, ticks):
    assert dashboard._ticks(maximum) == ticks


# llm accounts browse


def test_browse_child_environment_drops_every_key(canary_key):
    environ = {
        "PATH": "/usr/bin",
        "ALPHA_ANTHROPIC": canary_key,
        "ANTHROPIC_API_KEY": canary_key,
        "OPENAI_API_KEY": canary_key,
        "SOME_KEY": canary_key,
        "LLM_USER_PATH": "/tmp/x",
    }
    env = child_environment(environ, {"ALPHA_ANTHROPIC"})
    assert env == {"PATH": "/usr/bin", "LLM_USER_PATH": "/tmp/x"}


def test_browse_refuses_when_there_is_no_ledger(ledger_path):
    result = CliRunner().invoke(accounts_cli, ["browse"])
    assert result.exit_code == 1
    assert "ledger_unavailable: no ledger at" in result.output


def test_browse_refuses_an_invalid_declaration_rather_than_guess_key_names(ledger, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_ACCOUNTS", '[{"name": "alpha"}]')
    result = CliRunner().invoke(accounts_cli, ["browse"])
    assert result.exit_code == 1
    assert "declaration_invalid" in result.output


def test_browse_opens_the_dashboard_once_it_answers(monkeypatch):
    import http.server
    import threading

    from llm_accounts import browse

    opened = []
    monkeypatch.setattr(browse.webbrowser, "open", opened.append)

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/-/llm-accounts"
    try:
        browse.open_when_ready(url, timeout=10).join(15)
    finally:
        server.shutdown()
    assert opened == [url]


def test_browse_serves_datasette_on_loopback_without_its_own_open():
    from llm_accounts.browse import datasette_command

    argv = datasette_command(pathlib.Path("ledger.db"), port=8123)
    assert argv[1:] == ["-m", "datasette", "serve", "ledger.db", "--host", "127.0.0.1", "--port", "8123"]


def test_browse_help_has_an_example():
    result = CliRunner().invoke(accounts_cli, ["browse", "--help"])
    assert "Example:" in result.output and "llm accounts browse --open" in result.output


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(url, process, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            output = process.stdout.read().decode(errors="replace") if process.stdout else ""
            raise AssertionError(f"server exited with {process.returncode}: {output[-2000:]}")
        try:
            with DIRECT.open(url, timeout=2) as response:
                return response.read().decode()
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer")


def descendants(pid):
    """Process ids below ``pid``, read from /proc (Linux)."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        try:
            children = pathlib.Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        found += [int(child) for child in children]
        queue += [int(child) for child in children]
    return found


@pytest.mark.skipif(not pathlib.Path("/proc/self/task").exists(), reason="needs /proc to read the child's environment")
def test_browse_serves_the_dashboard_from_a_child_without_keys(ledger, canary_key, tmp_path):
    env = dict(os.environ)
    env["ANTHROPIC_ACCOUNTS"] = '[{"name": "alpha", "key_env": "ALPHA_ANTHROPIC", "budget_usd": "50"}]'
    env["ALPHA_ANTHROPIC"] = canary_key
    env["ANTHROPIC_API_KEY"] = canary_key
    port = free_port()
    llm = pathlib.Path(sys.executable).parent / "llm"
    process = subprocess.Popen(
        [str(llm), "accounts", "browse", "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        html = wait_for(f"http://127.0.0.1:{port}/-/llm-accounts", process)
        assert 'data-account="alpha"' in html
        children = descendants(process.pid)
        assert children
        for child in children:
            assert_no_key_material(pathlib.Path(f"/proc/{child}/environ").read_bytes().decode(errors="replace"), canary_key)
    finally:
        process.terminate()  # browse passes it on to Datasette
        try:
            output = process.communicate(timeout=15)[0].decode(errors="replace")
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert_no_key_material(output, canary_key)
    assert not [child for child in children if pathlib.Path(f"/proc/{child}").exists()]


# Spend views at any length of history (docs/performance.md)

ROW_SCAN = re.compile(r"\bSCAN (attempt|adjustment)\b")


def query_plan(path, sql, params):
    conn = sqlite3.connect(path)
    plan = " | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}", params))
    conn.close()
    return plan


@pytest.mark.parametrize("query", QUERIES, ids=lambda query: query.name)
def test_no_query_reads_every_attempt(query, ledger):
    # Aggregates only: the month, day and month_outcome totals, or an index on the attempts.
    plan = query_plan(ledger, query.sql, {name: "" for name in query.params})
    assert not ROW_SCAN.search(plan), plan


@pytest.mark.parametrize(
    "name", [name for name in dir(dashboard) if name.endswith("_SQL")]  # every statement the page runs
)
def test_the_dashboard_reads_aggregates_not_attempts(name, ledger):
    days = dashboard.period_days(clock.credit_month(NOW))
    params = {"month": clock.credit_month(NOW), "first_day": days[0], "last_day": days[-1]}
    plan = query_plan(ledger, getattr(dashboard, name), params)
    assert not re.search(r"\bSCAN attempt\b", plan), plan


def test_open_attempts_walk_the_open_index_in_admission_order(ledger):
    (query,) = [query for query in QUERIES if query.name == "open_attempts"]
    plan = query_plan(ledger, query.sql, {"account": "", "after": ""})
    assert "attempt_open" in plan and "TEMP B-TREE" not in plan


def add_open_attempts(path, count, now=NOW):
    """``count`` more open attempts of alpha, admitted after the fixture's, one second apart."""
    db = sqlite_utils.Database(path)
    db["attempt"].insert_all(
        dict(id=f"x{index:03d}", scope_kind="conversation", scope_id=f"conv-x{index}", provider="anthropic",
             account="alpha", month_utc=clock.credit_month(now), day_utc=clock.utc_day(now), ceiling_nusd=USD,
             price_revision="2026-11-01", requested_model="claude-sonnet-4-5", request_digest="0" * 64,
             state="open", created_at=clock.isoformat(now + dt.timedelta(seconds=index)))
        for index in range(count)
    )
    db.close()


@pytest.mark.asyncio
async def test_open_attempts_come_a_page_at_a_time(ledger):
    from datasette_plugin.queries import OPEN_PAGE

    add_open_attempts(ledger, OPEN_PAGE)
    ds = Datasette([str(ledger)])
    first = await rows(ds, "open_attempts")
    assert len(first) == OPEN_PAGE
    assert [row["attempt_id"] for row in first[:4]] == ["a5", "b2", "a4", "x000"]
    rest = await rows(ds, "open_attempts", after=first[-1]["attempt_id"])
    assert [row["attempt_id"] for row in rest] == [f"x{index:03d}" for index in range(OPEN_PAGE - 3, OPEN_PAGE)]
    assert await rows(ds, "open_attempts", after=rest[-1]["attempt_id"]) == []


@pytest.mark.asyncio
async def test_spend_today_counts_a_day_from_the_day_totals(ledger):
    # The day table, not the attempts: change a kept total and the query shows it.
    conn = sqlite3.connect(ledger)
    conn.execute("UPDATE day SET attempts = 42 WHERE day_utc = '2026-11-05' AND account = 'alpha'")
    conn.commit()
    conn.close()
    result = await rows(Datasette([str(ledger)]), "spend_today", day="2026-11-05", account="alpha")
    assert [row["attempts"] for row in result] == [42]


@pytest.mark.asyncio
@pytest.mark.parametrize("gained", ["month_outcome", "host_health"])
async def test_a_ledger_without_a_table_gained_on_open_gets_no_queries_and_the_dashboard_says_why(ledger, at_now, gained):
    conn = sqlite3.connect(ledger)
    conn.execute(f"DROP TABLE {gained}")
    conn.commit()
    conn.close()
    ds = Datasette([str(ledger)])
    assert (await ds.client.get("/accounts-ledger/spend_by_month.json")).status_code == 404
    html = await dashboard_html(ds)
    assert "older llm-accounts" in html and "llm accounts status" in html


# The dashboard at a glance


def test_the_palette_does_not_repeat_before_twelve_accounts():
    assert len(set(dashboard.ACCOUNT_COLOURS[:12])) == 12


def test_twelve_accounts_get_twelve_colours():
    accounts = [
        dict(provider="anthropic", name=f"a{index:02d}", rank=0, block_reason=None, removed_at=None, state=None,
             failure_class=None, http_status=None, since=None, last_failure_at=None, cooldown_until=None,
             probe_attempt_id=None, probe_created_at=None, last_success_at=None)
        for index in range(12)
    ]
    summaries = dashboard.summarize(accounts, [], [], [], [], month="2026-11", day="2026-11-05", now=NOW)
    assert len({summary.colour for summary in summaries}) == 12


@pytest.mark.parametrize(
    "values, shown",
    [
        ([3_000_000, 4_000_000], ["$0.003", "$0.004"]),  # both read $0.00 at cents
        ([4 * USD, 5 * USD, 4_000_000_001], ["$4.00", "$5.00", "$4.000000001"]),
        ([1, 0], ["$0.000000001", "$0.00"]),  # something spent is not shown as nothing
        ([4_000_000_001, 7 * USD], ["$4.00", "$7.00"]),  # cents already tell them apart
        ([None, 2_500_000_000], ["-", "$2.50"]),
    ],
)
def test_sub_cent_amounts_are_shown_where_they_tell_accounts_apart(values, shown):
    places = dashboard.distinguishing_places(values)
    assert [dashboard.usd_shown(value, place) for value, place in zip(values, places)] == shown


def set_cooldown(path, account, until):
    conn = sqlite3.connect(path)
    conn.execute("UPDATE health SET cooldown_until = ? WHERE account = ?", (clock.isoformat(until), account))
    conn.commit()
    conn.close()


@pytest.mark.asyncio
async def test_a_cooldown_that_has_ended_shows_as_probe_due_not_failing(ledger, at_now):
    set_cooldown(ledger, "gamma", NOW - dt.timedelta(minutes=5))
    html = await dashboard_html(Datasette([str(ledger)]))
    row = account_row(html, "gamma")
    assert "Probe due: rate_limited, HTTP 429" in row
    assert "Failing" not in row and "cooling until" not in row
    assert 'class="llma-account llma-status-probe_due' in html


@pytest.mark.asyncio
async def test_a_cooldown_still_running_shows_as_failing(ledger, at_now):
    set_cooldown(ledger, "gamma", NOW + dt.timedelta(minutes=5))
    row = account_row(await dashboard_html(Datasette([str(ledger)])), "gamma")
    assert "Failing: rate_limited, HTTP 429" in row and "cooling until" in row


@pytest.mark.asyncio
async def test_failing_blocked_and_exhausted_accounts_are_marked_in_the_charts(ds, at_now):
    html = await dashboard_html(ds)
    chart = re.search(r'<svg class="llma-chart llma-budget-chart".*?</svg>', html, re.S).group(0)
    marks = re.findall(r'<text [^>]*class="mark (\w+)">([^<]*)</text>', chart)
    assert ("bad", "Failing: rate_limited, HTTP 429") in marks  # gamma, cooling
    assert ("bad", "Blocked: auth_failed · Failing: auth, HTTP 401") in marks  # delta
    assert 'class="bar budget marked-bad"' in chart
    assert 'class="value bad">$20.00 of $20.00 (100.0%) budget reached' in chart  # beta
    legend = re.search(r'<h2>Spend per UTC day.*?</ul>', html, re.S).group(0)
    assert re.search(r'data-account="gamma">.*?\(Failing: rate_limited, HTTP 429\)', legend)
    assert re.search(r'data-account="beta">.*?\(Budget reached\)', legend)
    assert re.search(r'data-account="omega">[^(]*</li>', legend)  # nothing to notice


@pytest.fixture
def opus_default(monkeypatch):
    # Claude Opus 4.6 as the default model, at llm-anthropic's default max_tokens of 128,000: its
    # $9.02 ceiling is above alpha's $7.75 left today (at claude-routed's 32,000 it is $6.38).
    from llm_accounts import capabilities

    monkeypatch.setenv("LLM_ACCOUNTS_MODEL", "claude-opus-4-6")
    monkeypatch.setattr(capabilities, "ROUTED_MAX_TOKENS", 128_000)
    from llm_accounts.ladder import quote_for

    return "claude-opus-4-6", usd_fine(quote_for("claude-opus-4-6").ceiling_nusd)


@pytest.mark.asyncio
async def test_dashboard_marks_accounts_without_room_for_the_default_prompt(ds, at_now, opus_default):
    model, ceiling = opus_default
    html = await dashboard_html(ds)
    # alpha: $10.00 a day, $2.25 of it used; beta: its budget spent.
    assert f"Cannot take a plain claude-routed prompt: $7.75 left today, below the {ceiling} ceiling of {model}" in account_row(html, "alpha")
    assert f"Cannot take a plain claude-routed prompt: $0.00 left, below the {ceiling} ceiling of {model}" in account_row(html, "beta")
    for name in ("gamma", "omega"):
        assert "Cannot take" not in account_row(html, name)
    response = await ds.client.get("/-/llm-accounts.json")
    (ledger,) = response.json()["ledgers"]
    takes = {account["account"]: account["takes_default_prompt"] for account in ledger["accounts"]}
    assert takes == {"alpha": False, "beta": False, "gamma": True, "delta": False, "omega": True}  # delta: blocked
    assert ledger["default_prompt"]["model"] == model


@pytest.mark.asyncio
async def test_dashboard_marks_an_account_past_a_budget_warning_the_ledger_said(ledger, at_now):
    db = sqlite_utils.Database(ledger)
    # beta has spent $19.75 of $20.00 (98 %); alpha $4.00 of $50.00 (8 %), below what it was warned of.
    db["budget_warning"].insert_all([
        dict(provider="anthropic", account=name, month_utc=PERIOD, threshold=threshold, spent_nusd=spent,
             warned_at=clock.isoformat(NOW - HOUR))
        for name, threshold, spent in (("beta", 80, 16 * USD), ("beta", 95, 19 * USD), ("alpha", 5, 3 * USD), ("gamma", 80, 80 * USD))
    ])
    db.close()
    ds = Datasette([str(ledger)])
    html = await dashboard_html(ds)
    assert "Budget warning: 98 % spent, past its 95 % threshold" in account_row(html, "beta")
    assert "Budget warning: 8 % spent, past its 5 % threshold" in account_row(html, "alpha")
    assert "Budget warning" not in account_row(html, "gamma")  # spend is back below it (a correction)
    (ledger_json,) = (await ds.client.get("/-/llm-accounts.json")).json()["ledgers"]
    thresholds = {account["account"]: account["budget_warning_threshold"] for account in ledger_json["accounts"]}
    assert (thresholds["beta"], thresholds["gamma"], thresholds["omega"]) == (95, None, None)


@pytest.mark.asyncio
async def test_the_dashboard_as_json_carries_the_same_figures(ds, at_now):
    response = await ds.client.get("/-/llm-accounts.json")
    assert response.status_code == 200
    (ledger,) = response.json()["ledgers"]
    assert (ledger["database"], ledger["credit_period"], ledger["day"]) == (
        "accounts-ledger", clock.credit_month(NOW), NOW.date().isoformat()
    )
    accounts = {account["account"]: account for account in ledger["accounts"]}
    alpha = accounts["alpha"]
    assert alpha["budget"] == {"nusd": 50 * USD, "usd": "50.000000000"}
    assert alpha["settled"] == {"nusd": 4_000_000_001, "usd": "4.000000001"}
    assert alpha["open_ceilings"] == {"nusd": 2 * USD, "usd": "2.000000000"}
    assert alpha["remaining"] == {"nusd": 43_999_999_999, "usd": "43.999999999"}
    assert alpha["today_open_ceilings"]["nusd"] == 1_500_000_000
    assert (alpha["status"], alpha["colour"]) == ("ok", dashboard.ACCOUNT_COLOURS[0])
    assert accounts["gamma"]["status"] == "cooling"
    assert {"level": "bad", "label": "Blocked: auth_failed"} in accounts["delta"]["marks"]
    assert accounts["omega"]["budget_credit_period"] == PREVIOUS_PERIOD  # omega's budget is from the period before NOW's
    days = {day["day"]: day["accounts"] for day in ledger["days"]}
    assert len(days) == 30
    assert days["2026-11-05"]["alpha"]["settled"] == {"nusd": 750_000_000, "usd": "0.750000000"}
    assert days["2026-11-01"]["beta"]["settled"]["nusd"] == 18_500_000_000
    assert {query["name"] for query in ledger["queries"]} == {query.name for query in QUERIES}


@pytest.mark.asyncio
async def test_the_dashboard_json_has_no_ledger_when_none_is_attached(tmp_path, at_now):
    other = tmp_path / "other.db"
    sqlite_utils.Database(other)["notes"].insert({"text": "hello"})
    response = await Datasette([str(other)]).client.get("/-/llm-accounts.json")
    assert response.json()["ledgers"] == []


@pytest.mark.asyncio
async def test_the_dashboard_marks_an_account_llm_accounts_remove_removed(user_path, ledger_path):
    from test_cli_accounts import add_work, admit_once, run

    add_work()
    admit_once()
    assert run("remove", "work").exit_code == 0
    response = await Datasette([str(ledger_path)]).client.get("/-/llm-accounts.json")
    (ledger,) = response.json()["ledgers"]
    (work,) = [account for account in ledger["accounts"] if account["account"] == "work"]
    assert work["removed"] is True
    assert {"level": "info", "label": "Removed (llm accounts remove)"} in work["marks"]


@pytest.mark.asyncio
async def test_the_dashboard_names_the_machine_an_account_is_unreachable_from(ledger_path, at_now):
    from llm_accounts.declarations import Account
    from llm_accounts.ledger import Ledger, Scope, Unknown
    from llm_accounts.pricing.prices import Quote

    work = Account("work", "WORK_KEY", USD)
    with Ledger(ledger_path, host="m1") as ledger:
        for n in range(3):
            at = NOW - dt.timedelta(seconds=10 - n)
            ledger.reserve(Scope("conversation", "c1"), f"t{n}", Quote("claude-haiku-4-5", 1000, "2026-11-01", "ab" * 32), [work], now=at)
            ledger.settle(f"t{n}", Unknown("transport_error", "transport"), now=at)
    response = await Datasette([str(ledger_path)]).client.get("/-/llm-accounts.json")
    (ledger,) = response.json()["ledgers"]
    (account,) = ledger["accounts"]
    assert {"level": "warn", "label": "Unreachable from m1 (transport)"} in account["marks"]
    assert account["status"] == "ok"  # the account itself is healthy


# Pace, exact last success and _shape (docs/datasette.md)


@pytest.mark.asyncio
async def test_dashboard_last_success_is_the_newest_complete_attempt_not_a_stale_health_row(ledger, at_now):
    sqlite_utils.Database(ledger).execute(
        "update health set last_success_at = ? where account = 'gamma'", [clock.isoformat(NOW - 2 * DAY)]
    ).connection.commit()
    html = await dashboard_html(Datasette([str(ledger)]))
    assert account_row(html, "gamma").endswith("2026-11-04 11:00")  # g4, newer than the health row's


@pytest.mark.asyncio
async def test_dashboard_says_how_long_each_budget_lasts_at_this_pace(ds, at_now):
    html = await dashboard_html(ds)
    # alpha: $43.999999999 left over the 25 days (today counted whole) to 2026-11-30.
    assert (
        "Pace: at this pace alpha lasts until the period resets 2026-11-30; $1.76 a day left to last the period"
    ) in html
    assert "Pace: beta has nothing left of its budget; the period resets 2026-11-30" in html
    assert "Pace: omega has no settled spend since 2026-10-31, so no pace to forecast" in html


@pytest.mark.asyncio
async def test_the_dashboard_json_carries_the_pace_forecast(ds, at_now):
    (ledger,) = (await ds.client.get("/-/llm-accounts.json")).json()["ledgers"]
    alpha = next(account for account in ledger["accounts"] if account["account"] == "alpha")
    assert (alpha["forecast"]["state"], alpha["forecast"]["runs_out_on"], alpha["forecast"]["resets_on"]) == (
        "lasts", None, "2026-11-30"
    )
    # $4.000000001 settled in the 5.5 days since the period began (2026-10-31T00:00Z).
    assert alpha["forecast"]["rate_per_day"]["nusd"] == 4_000_000_001 * 86400 // (5 * 86400 + 43200)
    assert alpha["forecast"]["per_day_left"]["nusd"] == 43_999_999_999 // 25


@pytest.mark.asyncio
async def test_the_dashboard_json_array_shape_is_the_accounts(ds, at_now):
    rows = (await ds.client.get("/-/llm-accounts.json?_shape=array")).json()
    assert [(row["database"], row["account"]) for row in rows][:2] == [("accounts-ledger", "alpha"), ("accounts-ledger", "beta")]


@pytest.mark.asyncio
async def test_the_dashboard_json_arrays_and_objects_shapes(ds, at_now):
    arrays = (await ds.client.get("/-/llm-accounts.json?_shape=arrays")).json()
    objects = (await ds.client.get("/-/llm-accounts.json?_shape=objects")).json()
    assert arrays["columns"][:2] == ["database", "account"]
    assert [dict(zip(arrays["columns"], row)) for row in arrays["rows"]] == objects["rows"]


@pytest.mark.asyncio
async def test_the_dashboard_json_newline_delimited_array(ds, at_now):
    text = (await ds.client.get("/-/llm-accounts.json?_shape=array&_nl=1")).text
    assert [json.loads(line)["account"] for line in text.splitlines()][:1] == ["alpha"]


@pytest.mark.asyncio
async def test_the_dashboard_json_refuses_an_unknown_shape(ds, at_now):
    response = await ds.client.get("/-/llm-accounts.json?_shape=rows")
    assert response.status_code == 400
    assert response.json()["error"].startswith("Invalid _shape")


# Query pages


@pytest.mark.asyncio
async def test_account_health_is_listed_once_and_its_link_opens_the_query(ds):
    await ds.invoke_startup()
    html = (await ds.client.get("/accounts-ledger")).text
    links = re.findall(r'<a href="/accounts-ledger/([^"?]+)"[^>]*>Account health</a>', html)
    assert len(links) == 1, links
    response = await ds.client.get(f"/accounts-ledger/{links[0]}.json?_shape=array&account=delta")
    assert [row["status"] for row in response.json()] == ["blocked"]


@pytest.mark.asyncio
async def test_query_pages_hide_their_sql(ds):
    await ds.invoke_startup()
    html = (await ds.client.get(f"/accounts-ledger/{route(ds, 'spend_by_month')}")).text
    body = html.split("<body", 1)[1]  # (Datasette 0.65 puts the SQL in the page's <title>)
    assert "with spend as" not in body
    assert "_show_sql=1" in html  # one click shows it


def test_every_example_with_metadata_yml_names_a_database_it_covers():
    # Datasette names a database after its file's stem; metadata.yml's queries sit under
    # `databases: <name>:` for the names it covers, so another file name shows no queries.
    # The examples are in the README and the manual (docs/datasette.md, docs/postgresql.md).
    from llm_accounts.paths import ledger_path

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    files = [file for page in pages for file in re.findall(r"datasette (\S+) -[mc] metadata\.yml", page.read_text())]
    assert files
    for file in files:
        stem = pathlib.Path(ledger_path()).stem if "llm accounts path" in file else pathlib.Path(file).stem
        assert stem in metadata()["databases"], file
