"""`llm accounts set NAME`: change some settings of a declared account and keep the rest
(docs/accounts.md "Per-client caps"; docs/architecture.md "What a credit period fixes").

`llm accounts add --replace` declares an account anew, so a setting it is not given returns to its
default: it says which ones it changed, and `set` is the way to change only the settings given.
"""

import datetime as dt
import json

import pytest
from click.testing import CliRunner
from conftest import assert_no_key_material
from llm.cli import cli

from llm_accounts import clock
from llm_accounts.declarations import Account
from llm_accounts.ledger import Ledger, Scope
from llm_accounts.pricing.prices import Quote

T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)


def run(*args):
    return CliRunner().invoke(cli, ["accounts", *args], catch_exceptions=False)


def stored(user_path):
    return json.loads((user_path / "accounts.json").read_text())["accounts"]


def one_line_error(result):
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1, result.output
    return result.output.strip()


@pytest.fixture
def shared(user_path):
    """docs/accounts.md's restricted account: two client caps, only listed clients."""
    result = run(
        "add", "shared", "--key-env", "SHARED_KEY", "--budget", "40.00", "--daily-budget", "4.00", "--rank", "1",
        "--client-cap", "ci-bot=5.00", "--client-cap", "alice@example.com=20.00", "--clients-only",
    )
    assert result.exit_code == 0, result.output
    return stored(user_path)[0]


def test_set_changes_only_the_settings_it_is_given(shared, user_path):
    result = run("set", "shared", "--weight", "2")
    assert result.exit_code == 0, result.output
    assert stored(user_path) == [{**shared, "weight": 2}]


def test_set_prints_each_change_old_to_new(shared):
    result = run("set", "shared", "--daily-budget", "6.50", "--rank", "0")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()  # stderr warns of limits below a ceiling (docs/errors.md "Warnings")
    assert lines[0].startswith("Changed account shared in ")
    assert lines[1:] == ["  daily_budget_usd: $4.00 -> $6.50", "  rank: 1 -> 0"]


def test_set_a_client_cap_changes_that_client_and_keeps_the_others(shared, user_path):
    result = run("set", "shared", "--client-cap", "ci-bot=2000000tokens", "--client-cap", "nightly=500000tokens")
    assert result.exit_code == 0, result.output
    [account] = stored(user_path)
    assert account["clients"] == {
        "alice@example.com": {"budget_usd": "20.00"},
        "ci-bot": {"budget_usd": "5.00", "tokens": 2000000},
        "nightly": {"tokens": 500000},
    }
    assert account["clients_only"] is True
    assert "  clients.ci-bot.tokens: none -> 2,000,000" in result.output.splitlines()


def test_set_remove_client_drops_that_clients_caps(shared, user_path):
    result = run("set", "shared", "--remove-client", "ci-bot")
    assert result.exit_code == 0, result.output
    assert stored(user_path)[0]["clients"] == {"alice@example.com": {"budget_usd": "20.00"}}
    assert "  clients.ci-bot.budget_usd: $5.00 -> none" in result.output.splitlines()


def test_set_remove_client_of_a_client_without_a_cap_is_refused(shared, user_path):
    line = one_line_error(run("set", "shared", "--remove-client", "nobody"))
    assert line.startswith("Error: not_found: --remove-client <entry 1>: ")
    assert "nobody" not in line
    assert stored(user_path) == [shared]


@pytest.mark.parametrize(
    "args, field",
    [
        (["--clear", "daily-budget"], "daily_budget_usd"),
        (["--clear", "rank"], "rank"),
    ],
)
def test_set_clear_returns_an_optional_setting_to_its_default(shared, user_path, args, field):
    result = run("set", "shared", *args)
    assert result.exit_code == 0, result.output
    assert field not in stored(user_path)[0]


def test_set_clear_models_serves_every_priced_model_again(user_path):
    run("add", "work", "--key-env", "WORK_KEY", "--budget", "10", "--model", "claude-haiku-4-5")
    result = run("set", "work", "--clear", "models")
    assert result.exit_code == 0, result.output
    assert "models" not in stored(user_path)[0]
    assert "  models: claude-haiku-4-5 -> every priced model" in result.output.splitlines()


def test_set_model_replaces_the_list(user_path):
    run("add", "work", "--key-env", "WORK_KEY", "--budget", "10", "--model", "claude-haiku-4-5")
    run("set", "work", "--model", "claude-sonnet-4-6", "--model", "claude-opus-4-6")
    assert stored(user_path)[0]["models"] == ["claude-sonnet-4-6", "claude-opus-4-6"]


def test_set_all_clients_opens_a_clients_only_account(shared, user_path):
    result = run("set", "shared", "--all-clients")
    assert result.exit_code == 0, result.output
    assert "clients_only" not in stored(user_path)[0]
    assert stored(user_path)[0]["clients"] == shared["clients"]
    assert "  clients_only: true -> false" in result.output.splitlines()


def test_set_clear_client_caps_of_a_clients_only_account_says_what_else_to_do(shared, user_path):
    line = one_line_error(run("set", "shared", "--clear", "client-caps"))
    assert line.startswith("Error: declaration_invalid: --clear client-caps: ")
    assert "--all-clients" in line
    assert stored(user_path) == [shared]


def test_set_clear_client_caps_with_all_clients_removes_them(shared, user_path):
    result = run("set", "shared", "--clear", "client-caps", "--all-clients")
    assert result.exit_code == 0, result.output
    assert not {"clients", "clients_only"} & set(stored(user_path)[0])


def test_set_a_setting_and_its_clear_together_is_refused(shared, user_path):
    line = one_line_error(run("set", "shared", "--daily-budget", "1.00", "--clear", "daily-budget"))
    assert line.startswith("Error: declaration_invalid: --clear daily-budget: ")
    assert stored(user_path) == [shared]


def test_set_with_nothing_to_change_is_refused(shared):
    line = one_line_error(run("set", "shared"))
    assert line.startswith("Error: declaration_invalid: ")
    assert "--help" in line


def test_set_to_the_values_it_has_changes_nothing(shared, user_path):
    before = (user_path / "accounts.json").read_text()
    result = run("set", "shared", "--rank", "1")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Account shared is unchanged")
    assert (user_path / "accounts.json").read_text() == before


def test_set_of_an_undeclared_account_is_not_found_without_echoing_it(user_path, canary_key):
    run("add", "work", "--key-env", "WORK_KEY", "--budget", "10")
    line = one_line_error(run("set", canary_key, "--rank", "1"))
    assert line.startswith("Error: ")
    assert_no_key_material(line, canary_key)
    line = one_line_error(run("set", "home", "--rank", "1"))
    assert line.startswith("Error: not_found: NAME: ")


@pytest.mark.parametrize("option", ["--budget", "--daily-budget", "--rank", "--weight", "--model", "--client-cap", "--remove-client"])
def test_a_key_pasted_into_any_set_option_is_never_echoed(shared, user_path, canary_key, option):
    line = one_line_error(run("set", "shared", option, canary_key))
    assert option in line
    assert_no_key_material(line, canary_key)
    assert stored(user_path) == [shared]


def test_set_another_monthly_budget_is_refused_while_this_period_holds_one(shared, user_path, ledger_path, monkeypatch):
    monkeypatch.setattr(clock, "now", lambda: T0)
    with Ledger() as ledger:
        quote = Quote("claude-haiku-4-5-20251001", 10_000_000, "2026-11-01", "ab" * 32)
        account = Account("shared", "SHARED_KEY", 40_000_000_000)
        ledger.reserve(Scope("conversation", "c1"), "a1", quote, [account], pinned="shared", client="ci-bot", now=T0)
    line = one_line_error(run("set", "shared", "--budget", "99"))
    assert line.startswith("Error: account_config_conflict: ")
    assert stored(user_path) == [shared]
    # Policy may change within the period.
    assert run("set", "shared", "--daily-budget", "9.00").exit_code == 0


def test_set_warns_when_a_higher_source_overrides_accounts_json(shared, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_ACCOUNTS", "[]")
    result = run("set", "shared", "--rank", "0")
    assert result.exit_code == 0, result.output
    assert "Warning: ANTHROPIC_ACCOUNTS in the environment overrides accounts.json" in result.output


# add --replace


def test_add_replace_says_which_settings_it_returned_to_their_defaults(shared, user_path):
    result = run("add", "shared", "--key-env", "SHARED_KEY", "--budget", "40.00", "--replace")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("Replaced account shared")
    assert "  clients_only: true -> false" in lines
    assert "  clients.alice@example.com.budget_usd: $20.00 -> none" in lines
    assert any("llm accounts set" in line for line in lines)


def test_set_warns_when_a_limit_it_sets_is_below_the_default_models_ceiling(user_path):
    run("add", "work", "--key-env", "WORK_KEY", "--budget", "50.00")
    result = run("set", "work", "--daily-budget", "2.50")
    assert result.exit_code == 0, result.output
    assert "Warning: account 'work': its daily budget of $2.50 is below the $3.828 ceiling" in result.stderr


def test_set_declares_an_admin_key_and_keeps_every_other_setting(shared, user_path):
    result = run("set", "shared", "--admin-key-env", "SHARED_ADMIN_KEY", "--api-key-id", "apikey_01shared")
    assert result.exit_code == 0, result.output
    assert stored(user_path) == [{**shared, "admin_key_env": "SHARED_ADMIN_KEY", "api_key_id": "apikey_01shared"}]
    assert result.stdout.splitlines()[1:] == [
        "  admin_key_env: none -> SHARED_ADMIN_KEY",
        "  api_key_id: none -> apikey_01shared",
    ]


def test_set_clear_admin_key_drops_the_admin_key_and_the_key_id(shared, user_path):
    assert run("set", "shared", "--admin-key-env", "SHARED_ADMIN_KEY", "--api-key-id", "apikey_01shared").exit_code == 0
    result = run("set", "shared", "--clear", "admin-key")
    assert result.exit_code == 0, result.output
    assert stored(user_path) == [shared]


def test_set_refuses_an_admin_key_env_that_is_the_accounts_own_key_env(shared, user_path):
    line = one_line_error(run("set", "shared", "--admin-key-env", "SHARED_KEY"))
    assert line.startswith("Error: declaration_invalid: --admin-key-env: names the same variable as the account's key_env")
    assert stored(user_path) == [shared]


def test_set_refuses_an_api_key_id_another_account_declares_without_writing(shared, user_path):
    assert run("add", "work", "--key-env", "WORK_KEY", "--budget", "50", "--api-key-id", "apikey_01QzSharedMarker7").exit_code == 0
    before = (user_path / "accounts.json").read_text()
    line = one_line_error(run("set", "shared", "--api-key-id", "apikey_01QzSharedMarker7"))
    assert line == (
        "Error: declaration_invalid: --api-key-id: account work already declares this api_key_id; "
        "one API key id belongs to one account"
    )
    assert (user_path / "accounts.json").read_text() == before
