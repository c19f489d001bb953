"""The Datasette queries and dashboard on a ledger filled through the routed model (issue 6)."""

import datetime as dt
import shutil
import sqlite3

import pytest
from click.testing import CliRunner
from datasette.app import Datasette
from llm.cli import cli

import datasette_plugin
from datasette_plugin.queries import QUERIES
from llm_accounts import catalog, clock, schema
from llm_accounts.money import usd_exact

MODEL = "claude-routed/claude-haiku-4-5"
NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def written_once(tmp_path_factory):
    """Where the first test's routed ledger is kept, so the others start from a copy of it."""
    return tmp_path_factory.mktemp("routed") / "ledger"


@pytest.fixture
def routed_ledger(accounts, ledger_path, monkeypatch, written_once):
    """A ledger written only by real routed prompts: completions, refusals, an open attempt.

    The ledger's clock is fixed at ``NOW`` for the whole test, so every attempt and the test's
    reading of the current credit period fall in one period whatever the date. The prompts run
    once per module; each later test gets a copy of the ledger directory they wrote."""
    monkeypatch.setattr(clock, "now", lambda: NOW)
    if written_once.exists():
        shutil.copytree(written_once, ledger_path.parent, dirs_exist_ok=True)
        return ledger_path

    def prompt(*args):
        return CliRunner().invoke(cli, ["-m", MODEL, *args])

    prompt("First conversation")
    prompt("-o", "account", "beta", "Second conversation")
    accounts.set_behaviour("alpha", "prompt_too_long")
    prompt("-o", "account", "alpha", "Refused as too long")
    # A 429 puts alpha in a cooldown, so it comes last for alpha.
    accounts.set_behaviour("alpha", "rate_limited")
    prompt("-o", "account", "alpha", "-o", "retries", "0", "Refused by a 429")
    accounts.set_behaviour("beta", "drop")
    prompt("-o", "account", "beta", "Dropped mid-stream")
    catalog.wait_for_background(30)  # nothing still writing while the ledger is copied
    shutil.copytree(ledger_path.parent, written_once)
    return ledger_path


def ledger_rows(path, sql):
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    return [dict(row) for row in db.execute(sql)]


async def query_rows(ds, name, **params):
    (query,) = [q for q in QUERIES if q.name == name]
    route = datasette_plugin.route_name(ds, query, schema.TABLE_NAMES)
    qs = "&".join(f"{k}={v}" for k, v in params.items())
    response = await ds.client.get(f"/accounts-ledger/{route}.json?_shape=array&{qs}")
    assert response.status_code == 200, response.text
    return response.json()


@pytest.mark.asyncio
@pytest.mark.parametrize("query", [q.name for q in QUERIES])
async def test_every_query_runs_on_a_routed_ledger(routed_ledger, query):
    ds = Datasette([str(routed_ledger)])
    assert isinstance(await query_rows(ds, query), list)


@pytest.mark.asyncio
async def test_spend_by_month_matches_the_attempt_rows(routed_ledger):
    ds = Datasette([str(routed_ledger)])
    result = {row["account"]: row for row in await query_rows(ds, "spend_by_month")}
    for account in ("alpha", "beta"):
        settled = ledger_rows(
            routed_ledger, f"select coalesce(sum(cost_nusd), 0) as n from attempt where account = '{account}' and state = 'settled'"
        )[0]["n"]
        open_ = ledger_rows(
            routed_ledger, f"select coalesce(sum(ceiling_nusd), 0) as n from attempt where account = '{account}' and state = 'open'"
        )[0]["n"]
        assert result[account]["settled_usd"] == usd_exact(settled)
        assert result[account]["open_ceilings_usd"] == usd_exact(open_)
        assert result[account]["credit_period"] == clock.credit_month(clock.now())


@pytest.mark.asyncio
async def test_open_attempts_shows_the_dropped_stream(routed_ledger):
    ds = Datasette([str(routed_ledger)])
    [row] = await query_rows(ds, "open_attempts")
    assert (row["account"], row["outcome"]) == ("beta", "stream_truncated")


@pytest.mark.asyncio
async def test_rejection_classes_show_the_routed_refusals(routed_ledger):
    ds = Datasette([str(routed_ledger)])
    result = await query_rows(ds, "rejection_classes")
    classes = {(row["account"], row["provider_error_type"], row["rejection_class"]) for row in result}
    assert ("alpha", "invalid_request_error", "prompt_too_long") in classes
    assert ("alpha", "rate_limit_error", "other") in classes


@pytest.mark.asyncio
async def test_dashboard_shows_each_routed_account(routed_ledger):
    ds = Datasette([str(routed_ledger)])
    response = await ds.client.get("/-/llm-accounts")
    assert response.status_code == 200
    for account in ("alpha", "beta"):
        assert account in response.text
    assert "<svg" in response.text


def test_the_day_totals_match_the_routed_attempts(routed_ledger):
    kept = ledger_rows(
        routed_ledger, "select day_utc, account, attempts, settled_nusd, open_nusd from day where attempts > 0 order by 1, 2"
    )
    counted = ledger_rows(
        routed_ledger,
        """select day_utc, account, count(*) as attempts, coalesce(sum(cost_nusd), 0) as settled_nusd,
             coalesce(sum(case when state = 'open' then ceiling_nusd end), 0) as open_nusd
           from attempt group by day_utc, account order by 1, 2""",
    )
    assert kept == counted and kept


@pytest.mark.asyncio
async def test_attempts_by_outcome_matches_the_attempt_rows(routed_ledger):
    ds = Datasette([str(routed_ledger)])
    shown = {
        (row["account"], row["state"], row["outcome"]): (row["attempts"], row["cost_usd"], row["open_ceilings_usd"])
        for row in await query_rows(ds, "attempts_by_outcome")
    }
    counted = {
        (row["account"], row["state"], row["outcome"]): (row["n"], usd_exact(row["cost"]), usd_exact(row["open"]))
        for row in ledger_rows(
            routed_ledger,
            """select account, state, outcome, count(*) as n, coalesce(sum(cost_nusd), 0) as cost,
                 coalesce(sum(case when state = 'open' then ceiling_nusd end), 0) as open
               from attempt group by account, state, outcome""",
        )
    }
    assert shown == counted
    assert ("beta", "open", "stream_truncated") in shown


@pytest.mark.asyncio
async def test_the_dashboard_json_matches_the_attempt_rows(routed_ledger, monkeypatch):
    monkeypatch.setattr(clock, "now", lambda: NOW)
    response = await Datasette([str(routed_ledger)]).client.get("/-/llm-accounts.json")
    accounts = {account["account"]: account for account in response.json()["ledgers"][0]["accounts"]}
    for account in ("alpha", "beta"):
        settled, open_ = ledger_rows(
            routed_ledger,
            f"""select coalesce(sum(cost_nusd), 0) as s, coalesce(sum(case when state = 'open' then ceiling_nusd end), 0) as o
                from attempt where account = '{account}'""",
        )[0].values()
        assert (accounts[account]["settled"]["nusd"], accounts[account]["open_ceilings"]["nusd"]) == (settled, open_)
        assert accounts[account]["settled"]["usd"] == usd_exact(settled)
    assert accounts["alpha"]["status"] == "cooling"  # the 429's cooldown, read at NOW
