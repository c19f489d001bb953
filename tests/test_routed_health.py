"""Health on the routed path: a failing account's half-open probe is not a new conversation's
first choice while a healthy account can take the prompt (docs/architecture.md "Failure classes
and health")."""

import datetime as dt

import pytest

from llm_accounts import clock
from llm_accounts.ledger import Ledger
from llm_accounts.money import NANO
from routed_helpers import attempts, llm_cli
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm migrates logs.db once per session)

MODEL = "claude-routed/claude-haiku-4-5"
T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)


@pytest.fixture
def clock_at(monkeypatch):
    """The ledger's clock, set by the test."""
    now = {"t": T0}
    monkeypatch.setattr(clock, "now", lambda: now["t"])
    return now


def test_after_an_accounts_outage_cools_a_new_prompt_goes_to_the_healthy_account(accounts, ledger_path, clock_at):
    assert llm_cli("-m", MODEL, "-o", "account", "beta", "Hello").exit_code == 0
    Ledger().adjust("pre-spend", "beta", "2026-11", 5 * NANO, "test")  # beta is far ahead of pace
    accounts.set_behaviour("alpha", "ok", script=["api_error"])
    assert llm_cli("-m", MODEL, "-o", "account", "alpha", "Hello").exit_code == 1  # a 500: provider_outage
    clock_at["t"] = T0 + dt.timedelta(minutes=5)  # alpha's cooldown is long over
    result = llm_cli("-m", MODEL, "Hello again")
    assert result.exit_code == 0, result.output
    assert [row["account"] for row in attempts(ledger_path)] == ["beta", "alpha", "beta"]


def test_the_probe_goes_out_when_the_failing_account_is_the_only_one_left(accounts, ledger_path, clock_at):
    accounts.set_behaviour("alpha", "ok", script=["api_error"])
    llm_cli("-m", MODEL, "-o", "account", "alpha", "Hello")
    accounts.set_behaviour("beta", "unauthorized")
    llm_cli("-m", MODEL, "-o", "account", "beta", "Hello")  # beta is blocked now
    clock_at["t"] = T0 + dt.timedelta(minutes=5)
    result = llm_cli("-m", MODEL, "Hello again")
    assert result.exit_code == 0, result.output
    assert [row["account"] for row in attempts(ledger_path)] == ["alpha", "beta", "alpha"]
