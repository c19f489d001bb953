"""What ``llm accounts status`` says beyond the money: exact last success, failing since,
removed accounts, today's remaining and the pace forecast (docs/spend.md "Status", docs/architecture.md
"Pace forecast")."""

import datetime as dt
import json

import pytest
from click.testing import CliRunner

from llm_accounts import clock
from llm_accounts.cli import accounts
from llm_accounts.declarations import Account, load_declaration
from llm_accounts.ledger import Complete, Ledger, Refused, Scope
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 12, 10, 12, 0, tzinfo=UTC)  # credit period 2026-12: 2026-11-30 to 2026-12-31
MODEL = "claude-sonnet-4-5-20250929"
USAGE = {"input_tokens": 100, "output_tokens": 20}
RATE_LIMITED = Refused("rate_limited", 429, "rate_limit_error", "other", "rate_limited")


def quote(ceiling=NANO // 100):
    return Quote(MODEL, ceiling, "2026-11-01", "ab" * 32)


@pytest.fixture
def ledger(ledger_location):
    with Ledger(ledger_location) as ledger:
        yield ledger


@pytest.fixture
def alpha():
    return Account("alpha", "ALPHA_KEY", 100 * NANO)


def spend(ledger, account, attempt_id, cost, at):
    ledger.reserve(Scope("conversation", attempt_id), attempt_id, quote(cost), [account], now=at)
    ledger.settle(attempt_id, Complete(cost, USAGE, MODEL), now=at)


def test_last_success_is_the_newest_complete_settlement_not_the_throttled_health_row(ledger, alpha):
    spend(ledger, alpha, "a1", NANO // 100, T0)
    spend(ledger, alpha, "a2", NANO // 100, T0 + dt.timedelta(minutes=3))  # inside health's 10-minute refresh
    (line,) = ledger.status([alpha], now=T0 + dt.timedelta(minutes=4))
    assert line.last_success_at == (T0 + dt.timedelta(minutes=3)).isoformat()


def test_a_failing_account_says_since_when(ledger, alpha):
    ledger.reserve(Scope("conversation", "f1"), "f1", quote(), [alpha], now=T0)
    ledger.settle("f1", RATE_LIMITED, now=T0)
    (line,) = ledger.status([alpha], now=T0 + dt.timedelta(seconds=1))
    assert line.failing_since == T0.isoformat()


def test_a_healthy_account_has_no_failing_since(ledger, alpha):
    spend(ledger, alpha, "a1", NANO // 100, T0)
    (line,) = ledger.status([alpha], now=T0)
    assert line.failing_since is None


def test_a_removed_account_is_listed_as_removed(ledger, alpha):
    spend(ledger, alpha, "a1", NANO // 100, T0)
    ledger.mark_removed("alpha", now=T0)
    (line,) = ledger.status([], now=T0)
    assert (line.declared, line.removed_at) == (False, T0.isoformat())


def test_status_forecasts_from_the_day_totals(ledger, alpha):
    # $10 a day for the last seven days before T0's day; $60 left at $10 a day runs out 2026-12-16.
    for n in range(7):
        spend(ledger, alpha, f"a{n}", 10 * NANO, T0 - dt.timedelta(days=7 - n))
    now = dt.datetime(2026, 12, 10, 0, 0, tzinfo=UTC)
    (line,) = ledger.status([alpha], now=now)
    f = line.forecast
    assert (f.window_start, f.window_nusd, f.rate_nusd_per_day) == ("2026-12-04", 60 * NANO, 10 * NANO)
    assert (f.state, f.runs_out_on, f.resets_on) == ("runs_out", "2026-12-13", "2026-12-31")


# The command


DECLARATION = json.dumps(
    [
        {"name": "alpha", "key_env": "ALPHA_KEY", "budget_usd": "100.00", "daily_budget_usd": "20.00"},
        {"name": "beta", "key_env": "BETA_KEY", "budget_usd": "50.00"},
    ]
)


@pytest.fixture
def declared(monkeypatch, ledger_path):
    monkeypatch.setenv("ANTHROPIC_ACCOUNTS", DECLARATION)
    monkeypatch.setattr(clock, "now", lambda: T0)
    return {a.name: a for a in load_declaration().accounts}


def run(*args):
    return CliRunner().invoke(accounts, list(args), catch_exceptions=False)


def test_status_prints_the_pace_forecast_and_the_daily_allowance(declared):
    with Ledger() as ledger:
        for n in (1, 2, 3):  # $20 (the daily budget) on each of the three days before T0's
            spend(ledger, declared["alpha"], f"a{n}", 20 * NANO, T0 - dt.timedelta(days=n))
    output = run("status").output
    # $60 over the 6.5 days since 2026-12-04T00:00Z; $40 left over 21 days.
    assert "Pace: at this pace alpha runs out about 2026-12-14; the period resets 2026-12-31; $1.904762 a day left" in output
    assert "Pace: beta has no settled spend since 2026-12-04, so no pace to forecast; the period resets 2026-12-31" in output


def test_status_shows_todays_remaining_failing_since_and_removed(declared):
    with Ledger() as ledger:
        spend(ledger, declared["alpha"], "a1", 5 * NANO, T0)
        ledger.reserve(Scope("conversation", "f1"), "f1", quote(), [declared["beta"]], now=T0)
        ledger.settle("f1", RATE_LIMITED, now=T0)
    lines = run("status").output.splitlines()
    alpha_line = next(line for line in lines if line.startswith("alpha"))
    beta_line = next(line for line in lines if line.startswith("beta"))
    assert "$5.00 of $20.00, $15.00 left" in alpha_line
    assert "failing since 2026-12-10 12:00 UTC" in beta_line


def test_status_json_carries_the_forecast_in_nanodollars(declared):
    with Ledger() as ledger:
        for n in (1, 2, 3):  # $20 (the daily budget) on each of the three days before T0's
            spend(ledger, declared["alpha"], f"a{n}", 20 * NANO, T0 - dt.timedelta(days=n))
    alpha = next(a for a in json.loads(run("status", "--json").output)["accounts"] if a["name"] == "alpha")
    assert alpha["forecast"]["runs_out_on"] == "2026-12-14"
    assert alpha["forecast"]["per_day_left_nusd"] == 40 * NANO // 21
    assert alpha["failing_since"] is None and alpha["removed_at"] is None


def test_status_lists_a_removed_account_as_removed(declared, monkeypatch):
    with Ledger() as ledger:
        spend(ledger, declared["beta"], "b1", NANO, T0)
        ledger.mark_removed("beta", now=T0)
    monkeypatch.setenv("ANTHROPIC_ACCOUNTS", json.dumps(json.loads(DECLARATION)[:1]))
    lines = run("status").output.splitlines()
    beta_line = next(line for line in lines if line.startswith("beta"))
    assert "REMOVED 2026-12-10 12:00 UTC" in beta_line and "not declared" not in beta_line
    assert not any(line.startswith("Pace: beta") for line in lines)
