"""Warn before the wall: budget thresholds, said once across processes, and status --check (issue 23)."""

import datetime as dt

import pytest

from llm_accounts import clock, thresholds
from llm_accounts.declarations import Account, account_from_options, parse_account, save_accounts_file
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete, Ledger, Scope
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote
from routed_helpers import llm_cli
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

UTC = dt.timezone.utc
NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=UTC)  # mid credit period 2026-11
MODEL = "claude-sonnet-4-5-20250929"
ROUTED = "claude-routed/claude-haiku-4-5"
WORK = Account("work", "WORK_KEY", 10 * NANO)


def spend(ledger, dollars_nusd, attempt_id="a1", at=NOW):
    """One settled attempt of ``dollars_nusd`` on work, at ``at``."""
    quote = Quote(MODEL, 10 * NANO - 1, "2026-11-01", "ab" * 32)
    ledger.reserve(Scope("prompt", attempt_id), attempt_id, quote, [WORK], now=at)
    ledger.settle(attempt_id, Complete(dollars_nusd, {"input_tokens": 1, "output_tokens": 1}, MODEL, None), now=at)


@pytest.fixture
def ledger(ledger_location):
    with Ledger(ledger_location) as ledger:
        yield ledger


# Pure rules ------------------------------------------------------------------------------------


def test_a_threshold_is_reached_at_exactly_its_share_of_the_budget():
    assert thresholds.reached(8 * NANO, 10 * NANO, (80, 95)) == (80,)
    assert thresholds.reached(8 * NANO - 1, 10 * NANO, (80, 95)) == ()


def test_the_warning_line_names_account_spend_budget_threshold_and_the_pace():
    pace = "at this pace work runs out about 2026-11-12; the period resets 2026-11-30"
    line = thresholds.warning_line("work", 80, 8_150_000_000, 10 * NANO, pace)
    assert line == (
        "budget warning: account 'work' has spent $8.15 of its $10.00 budget (81 %, past its 80 % threshold); "
        "at this pace work runs out about 2026-11-12; the period resets 2026-11-30 (see: llm accounts status)"
    )


# Declarations ----------------------------------------------------------------------------------


def test_warn_at_defaults_to_80_and_95_and_an_empty_list_turns_it_off():
    base = {"name": "work", "key_env": "WORK_KEY", "budget_usd": "10.00"}
    assert parse_account(base, lambda f: f).warn_thresholds == (80, 95)
    assert parse_account({**base, "warn_at": []}, lambda f: f).warn_thresholds == ()


def test_warn_at_that_does_not_rise_is_refused_naming_the_field_and_rule():
    base = {"name": "work", "key_env": "WORK_KEY", "budget_usd": "10.00", "warn_at": [95, 80]}
    with pytest.raises(AccountsError) as raised:
        parse_account(base, lambda f: f"accounts[0].{f}")
    assert raised.value.code == "declaration_invalid"
    assert str(raised.value).startswith("declaration_invalid: accounts[0].warn_at: must be a list of up to 5 rising whole percents")


def test_warn_at_option_takes_comma_separated_percents_or_off():
    assert account_from_options("work", "WORK_KEY", "10.00", warn_at="50,90").warn_at == (50, 90)
    assert account_from_options("work", "WORK_KEY", "10.00", warn_at="off").warn_at == ()


def test_set_warn_at_says_the_change(accounts):
    result = llm_cli("accounts", "set", "alpha", "--warn-at", "50,90")
    assert result.exit_code == 0, result.output
    assert "warn_at: default (80, 95) -> 50, 90" in result.output


# The ledger records each warning ---------------------------------------------------------------


def test_a_threshold_passed_is_claimed_once_across_ledger_connections(ledger, ledger_location):
    spend(ledger, 8_500_000_000)
    with Ledger(ledger_location) as other:
        first = ledger.claim_budget_warnings("work", (80, 95), now=NOW)
        again = other.claim_budget_warnings("work", (80, 95), now=NOW)
    assert first[:3] == ((80,), 8_500_000_000, 10 * NANO)
    assert again[0] == ()


def test_a_new_credit_period_warns_again(ledger):
    spend(ledger, 8_500_000_000)
    ledger.claim_budget_warnings("work", (80,), now=NOW)
    december = dt.datetime(2026, 12, 10, tzinfo=UTC)
    spend(ledger, 8_500_000_000, attempt_id="a2", at=december)
    assert ledger.claim_budget_warnings("work", (80,), now=december)[0] == (80,)


# A routed prompt warns on stderr; status --check ------------------------------------------------


@pytest.fixture
def at_now(monkeypatch):
    monkeypatch.setattr(clock, "now", lambda: NOW)


def push_alpha_to(share_nusd):
    """Add ``share_nusd`` of spend to alpha this period (a sourced correction)."""
    from llm_accounts.paths import ledger_path

    with Ledger(ledger_path()) as ledger:
        ledger.adjust("adj-1", "alpha", clock.credit_month(NOW), share_nusd, "test: spend so far", now=NOW)


def test_a_routed_prompt_past_a_threshold_warns_once_on_stderr(accounts, at_now):
    llm_cli("-m", ROUTED, "hi", "-o", "account", "alpha")
    push_alpha_to(16_200_000_000)  # 81 % of $20
    warned = llm_cli("-m", ROUTED, "hi again", "-o", "account", "alpha")
    quiet = llm_cli("-m", ROUTED, "and again", "-o", "account", "alpha")
    assert warned.stderr.count("budget warning: account 'alpha'") == 1
    assert "past its 80 % threshold" in warned.stderr
    assert "; at this pace alpha " in warned.stderr
    assert "budget warning" not in quiet.stderr


def test_a_warning_after_a_streamed_answer_starts_on_its_own_line(accounts, at_now):
    # Before: the answer's last line had no newline yet, so the warning was glued to it.
    llm_cli("-m", ROUTED, "hi", "-o", "account", "alpha")
    push_alpha_to(16_200_000_000)
    warned = llm_cli("-m", ROUTED, "hi again", "-o", "account", "alpha")
    answer, _ = warned.output.split("llm-accounts: budget warning")
    assert answer.strip() and answer.endswith("\n") and not answer.endswith("\n\n")


def test_a_warning_before_an_answer_that_was_not_streamed_adds_no_blank_line(accounts, at_now):
    llm_cli("-m", ROUTED, "hi", "-o", "account", "alpha")
    push_alpha_to(16_200_000_000)
    warned = llm_cli("-m", ROUTED, "--no-stream", "hi again", "-o", "account", "alpha")
    assert warned.output.startswith("llm-accounts: budget warning")


def test_warn_at_off_says_nothing(accounts, at_now):
    save_accounts_file([Account("alpha", "ALPHA_KEY", 20 * NANO, warn_at=())], None)
    llm_cli("-m", ROUTED, "hi")
    push_alpha_to(19 * NANO)
    assert "budget warning" not in llm_cli("-m", ROUTED, "hi again").stderr


def test_status_check_exits_1_naming_an_account_past_a_threshold(accounts, at_now):
    llm_cli("-m", ROUTED, "hi", "-o", "account", "alpha")
    push_alpha_to(16_200_000_000)
    result = llm_cli("accounts", "status", "--check")
    assert result.exit_code == 1
    assert "llm-accounts: check: account 'alpha' has spent" in result.stderr
    assert "past its 80 % threshold" in result.stderr


def test_status_check_exits_0_when_every_account_is_well(accounts, at_now):
    llm_cli("-m", ROUTED, "hi")
    result = llm_cli("accounts", "status", "--check")
    assert (result.exit_code, result.stderr) == (0, "")


def test_status_check_exits_1_naming_why_when_no_account_can_take_a_default_prompt(accounts, at_now):
    from llm_accounts.paths import ledger_path

    llm_cli("-m", ROUTED, "hi", "-o", "account", "alpha")
    llm_cli("-m", ROUTED, "hi", "-o", "account", "beta")
    with Ledger(ledger_path()) as ledger:
        ledger.block("alpha", now=NOW)
        ledger.adjust("adj-b", "beta", clock.credit_month(NOW), 19_900_000_000, "test: spend so far", now=NOW)
    result = llm_cli("accounts", "status", "--check")
    assert result.exit_code == 1
    lines = [line for line in result.stderr.splitlines() if "cannot take a default prompt" in line]
    assert lines == [
        "llm-accounts: check: account 'alpha' cannot take a default prompt (up to $3.828): blocked (manual)",
        "llm-accounts: check: account 'beta' cannot take a default prompt (up to $3.828): budget spent",
    ]


def test_status_check_names_no_account_when_one_can_take_a_default_prompt(accounts, at_now):
    from llm_accounts.paths import ledger_path

    llm_cli("-m", ROUTED, "hi", "-o", "account", "alpha")
    with Ledger(ledger_path()) as ledger:
        ledger.block("alpha", now=NOW)
    result = llm_cli("accounts", "status", "--check")
    assert "cannot take a default prompt" not in result.stderr
    assert "llm-accounts: check: account 'alpha' is blocked (manual)" in result.stderr
