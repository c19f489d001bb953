"""llm accounts ladder: the order new conversations try accounts, from the ledger's own rules."""

import datetime as dt
import json

import pytest
from click.testing import CliRunner
from llm.cli import cli

from llm_accounts import clock
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.ledger import Ledger
from llm_accounts.money import NANO
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

# Budgets well above a plain claude-routed ceiling ($8.712 at its default max_tokens of 128,000),
# so a $3 spend changes the order, not whether an account can admit.
ALPHA = Account("alpha", "ALPHA_KEY", 20 * NANO)
BETA = Account("beta", "BETA_KEY", 20 * NANO)
GAMMA = Account("gamma", "GAMMA_KEY", 20 * NANO, rank=1)
NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)


@pytest.fixture
def at_now(monkeypatch):
    """The ledger's clock fixed at ``NOW``, so a spend and the ladder read one credit period."""
    monkeypatch.setattr(clock, "now", lambda: NOW)


@pytest.fixture
def keys_set(user_path):
    """Every account here has a key in llm keys: one without is listed as unavailable
    (tests/test_missing_key.py)."""
    from conftest import make_key

    (user_path / "keys.json").write_text(json.dumps({name: make_key() for name in ("ALPHA_KEY", "BETA_KEY", "GAMMA_KEY")}))


def ladder_json():
    result = CliRunner().invoke(cli, ["accounts", "ladder", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_ranks_come_first_then_the_account_furthest_behind_pace(ledger_path, at_now, keys_set):
    save_accounts_file([ALPHA, BETA, GAMMA], None)
    Ledger().adjust("spent", ALPHA, clock.credit_month(NOW), 3 * NANO, "test")
    assert [(r["position"], r["account"]) for r in ladder_json()] == [(1, "beta"), (2, "alpha"), (3, "gamma")]


def test_a_blocked_account_is_listed_last_with_its_reason(ledger_path, keys_set):
    save_accounts_file([ALPHA, BETA], None)
    Ledger().block(ALPHA, "manual")
    rungs = ladder_json()
    assert rungs[-1]["account"] == "alpha" and rungs[-1]["position"] is None
    assert rungs[-1]["reason"].startswith("blocked")


def test_an_account_out_of_budget_is_not_available(ledger_path, at_now, keys_set):
    save_accounts_file([ALPHA, BETA], None)
    Ledger().adjust("spent", BETA, clock.credit_month(NOW), BETA.budget_nusd, "test")
    assert [(r["account"], r["reason"]) for r in ladder_json()] == [("alpha", "available"), ("beta", "budget reached")]


def test_unrouted_says_so(ledger_path):
    result = CliRunner().invoke(cli, ["accounts", "ladder"])
    assert "No accounts declared" in result.output


def test_a_cooling_account_is_listed_with_its_cooldown(accounts, ledger_path):
    accounts.set_behaviour("alpha", "rate_limited")
    accounts.set_behaviour("beta", "rate_limited")
    CliRunner().invoke(cli, ["-m", "claude-routed/claude-haiku-4-5", "-o", "account", "alpha", "-o", "retries", "0", "Hello"])
    [alpha] = [r for r in ladder_json() if r["account"] == "alpha"]
    assert alpha["position"] is None
    assert alpha["reason"].startswith("cooling down after rate_limited until")


def test_ladder_json_gives_money_in_nanodollars_like_status(ledger_path, at_now, keys_set):
    save_accounts_file([ALPHA], None)
    Ledger().adjust("spent", ALPHA, clock.credit_month(NOW), 3 * NANO, "test")
    [rung] = ladder_json()
    assert (rung["committed_nusd"], rung["budget_nusd"]) == (3 * NANO, 20 * NANO)
