"""`dedicated_key`: the user's promise that an account's key is used only through the ledger, so the
legacy usage report may settle its open attempts (docs/architecture.md "An account declaration" and
"Settling from the provider"; docs/provider.md "Settling unknown outcomes from the provider").

It needs `admin_key_env` and `api_key_id`, it is a JSON boolean, and it is policy, not credit.
"""

import datetime as dt
import json

import pytest
from click.testing import CliRunner
from llm.cli import cli

from llm_accounts import clock
from llm_accounts.declarations import Account, load_declaration, parse_accounts, save_accounts_file
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Ledger, Scope
from llm_accounts.pricing.prices import Quote

T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)
# A value no rule text holds: an error that repeats it shows it.
MARKER = "QzDedicatedMarker42"
KEY_ID = f"apikey_01{MARKER}"
PROVIDER = {"admin_key_env": "WORK_ADMIN_KEY", "api_key_id": KEY_ID}
GOOD = {"name": "work", "key_env": "WORK_KEY", "budget_usd": "50.00"}


def declared(**fields):
    [account] = parse_accounts(json.dumps([{**GOOD, **fields}]), "environment")
    return account


def refusal(**fields):
    with pytest.raises(AccountsError) as info:
        declared(**fields)
    message = str(info.value)
    assert info.value.code == "declaration_invalid"
    assert "\n" not in message
    assert MARKER not in message
    return message


def run(*args):
    return CliRunner().invoke(cli, ["accounts", *args], catch_exceptions=False)


def stored(user_path):
    return json.loads((user_path / "accounts.json").read_text())["accounts"]


def one_line_error(result):
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1, result.output
    assert MARKER not in result.output
    return result.output.strip()


def add_work(*extra):
    result = run("add", "work", "--key-env", "WORK_KEY", "--budget", "50.00", *extra)
    assert result.exit_code == 0, result.output
    return result


PROVIDER_OPTIONS = ("--admin-key-env", "WORK_ADMIN_KEY", "--api-key-id", KEY_ID)


# The declaration field


def test_dedicated_key_defaults_to_false():
    assert declared(**PROVIDER).dedicated_key is False


def test_dedicated_key_true_is_kept():
    assert declared(**PROVIDER, dedicated_key=True).dedicated_key is True


def test_dedicated_key_false_needs_no_admin_key_or_key_id():
    assert declared(dedicated_key=False).dedicated_key is False


@pytest.mark.parametrize("value", ["true", 1, 0, None, [], {}, MARKER])
def test_dedicated_key_must_be_a_json_boolean(value):
    message = refusal(**PROVIDER, dedicated_key=value)
    assert message == "declaration_invalid: ANTHROPIC_ACCOUNTS[0].dedicated_key: must be true or false"


def test_dedicated_key_without_an_api_key_id_is_refused_naming_it():
    message = refusal(admin_key_env="WORK_ADMIN_KEY", dedicated_key=True)
    assert message.startswith("declaration_invalid: ANTHROPIC_ACCOUNTS[0].dedicated_key: is true but no api_key_id is declared")


def test_dedicated_key_without_an_admin_key_env_is_refused_naming_it():
    message = refusal(api_key_id=KEY_ID, dedicated_key=True)
    assert message.startswith("declaration_invalid: ANTHROPIC_ACCOUNTS[0].dedicated_key: is true but no admin_key_env is declared")


def test_an_unknown_field_close_to_dedicated_key_suggests_it():
    message = refusal(**PROVIDER, dedicated_keys=True)
    assert "did you mean dedicated_key?" in message


def test_accounts_json_round_trips_dedicated_key(user_path):
    account = Account("work", "WORK_KEY", 10**9, admin_key_env="WORK_ADMIN", api_key_id=KEY_ID, dedicated_key=True)
    save_accounts_file([account], None)
    assert stored(user_path)[0]["dedicated_key"] is True
    assert load_declaration().accounts == (account,)


def test_accounts_json_leaves_a_false_dedicated_key_out(user_path):
    save_accounts_file([Account("work", "WORK_KEY", 10**9, admin_key_env="WORK_ADMIN", api_key_id=KEY_ID)], None)
    assert "dedicated_key" not in stored(user_path)[0]


# llm accounts add


def test_add_dedicated_key_writes_it(user_path):
    add_work(*PROVIDER_OPTIONS, "--dedicated-key")
    assert stored(user_path) == [{**GOOD, **PROVIDER, "dedicated_key": True}]


def test_add_without_dedicated_key_leaves_it_false(user_path):
    add_work(*PROVIDER_OPTIONS)
    assert "dedicated_key" not in stored(user_path)[0]


def test_add_dedicated_key_without_an_api_key_id_is_refused_without_writing(user_path):
    line = one_line_error(run("add", "work", "--key-env", "WORK_KEY", "--budget", "50", "--admin-key-env", "WORK_ADMIN_KEY", "--dedicated-key"))
    assert line == "Error: declaration_invalid: --dedicated-key: needs --api-key-id naming this key's id in the usage report"
    assert not (user_path / "accounts.json").exists()


def test_add_dedicated_key_without_an_admin_key_env_is_refused_without_writing(user_path):
    line = one_line_error(run("add", "work", "--key-env", "WORK_KEY", "--budget", "50", "--api-key-id", KEY_ID, "--dedicated-key"))
    assert line == "Error: declaration_invalid: --dedicated-key: needs --admin-key-env naming the organization's Admin API key"
    assert not (user_path / "accounts.json").exists()


def test_add_replace_without_dedicated_key_says_it_returns_to_false(user_path):
    add_work(*PROVIDER_OPTIONS, "--dedicated-key")
    result = run("add", "work", "--key-env", "WORK_KEY", "--budget", "50.00", *PROVIDER_OPTIONS, "--replace")
    assert result.exit_code == 0, result.output
    assert "  dedicated_key: true -> false" in result.output.splitlines()
    assert "dedicated_key" not in stored(user_path)[0]


# llm accounts set


def test_set_dedicated_key_turns_it_on_and_says_so(user_path):
    add_work(*PROVIDER_OPTIONS)
    result = run("set", "work", "--dedicated-key")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1:] == ["  dedicated_key: false -> true"]
    assert stored(user_path) == [{**GOOD, **PROVIDER, "dedicated_key": True}]


def test_set_no_dedicated_key_withdraws_the_promise_and_keeps_the_rest(user_path):
    add_work(*PROVIDER_OPTIONS, "--dedicated-key")
    result = run("set", "work", "--no-dedicated-key")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1:] == ["  dedicated_key: true -> false"]
    assert stored(user_path) == [{**GOOD, **PROVIDER}]


def test_set_dedicated_key_with_the_admin_key_and_key_id_in_one_command(user_path):
    add_work()
    result = run("set", "work", *PROVIDER_OPTIONS, "--dedicated-key")
    assert result.exit_code == 0, result.output
    assert stored(user_path) == [{**GOOD, **PROVIDER, "dedicated_key": True}]


def test_set_dedicated_key_on_an_account_without_an_api_key_id_is_refused_without_writing(user_path):
    add_work("--admin-key-env", "WORK_ADMIN_KEY")
    before = (user_path / "accounts.json").read_text()
    line = one_line_error(run("set", "work", "--dedicated-key"))
    assert line.startswith("Error: declaration_invalid: --dedicated-key: the account declares no api_key_id; give --api-key-id")
    assert (user_path / "accounts.json").read_text() == before


def test_set_dedicated_key_on_an_account_without_an_admin_key_env_is_refused_without_writing(user_path):
    add_work("--api-key-id", KEY_ID)
    before = (user_path / "accounts.json").read_text()
    line = one_line_error(run("set", "work", "--dedicated-key"))
    assert line.startswith("Error: declaration_invalid: --dedicated-key: the account declares no admin_key_env; give --admin-key-env")
    assert (user_path / "accounts.json").read_text() == before


def test_set_clear_admin_key_of_a_dedicated_account_is_refused_naming_no_dedicated_key(user_path):
    add_work(*PROVIDER_OPTIONS, "--dedicated-key")
    before = (user_path / "accounts.json").read_text()
    line = one_line_error(run("set", "work", "--clear", "admin-key"))
    assert line.startswith("Error: declaration_invalid: --clear admin-key: the account declares dedicated_key")
    assert "--no-dedicated-key" in line
    assert (user_path / "accounts.json").read_text() == before


def test_set_clear_admin_key_with_no_dedicated_key_drops_all_three(user_path):
    add_work(*PROVIDER_OPTIONS, "--dedicated-key")
    result = run("set", "work", "--clear", "admin-key", "--no-dedicated-key")
    assert result.exit_code == 0, result.output
    assert stored(user_path) == [GOOD]


def test_set_clear_admin_key_and_dedicated_key_together_is_refused(user_path):
    add_work(*PROVIDER_OPTIONS)
    line = one_line_error(run("set", "work", "--clear", "admin-key", "--dedicated-key"))
    assert line.startswith("Error: declaration_invalid: --clear admin-key: --admin-key-env, --api-key-id or --dedicated-key is given too")


def test_set_dedicated_key_may_change_while_a_credit_period_holds_a_budget(user_path, ledger_path, monkeypatch):
    add_work(*PROVIDER_OPTIONS)
    monkeypatch.setattr(clock, "now", lambda: T0)
    with Ledger() as ledger:
        quote = Quote("claude-haiku-4-5-20251001", 10_000_000, "2026-11-01", "ab" * 32)
        ledger.reserve(Scope("conversation", "c1"), "a1", quote, [Account("work", "WORK_KEY", 50_000_000_000)], pinned="work", now=T0)
    assert run("set", "work", "--dedicated-key").exit_code == 0
    assert run("set", "work", "--no-dedicated-key").exit_code == 0


# llm accounts list


def test_list_shows_a_dedicated_key_column_once_an_account_declares_one(user_path):
    add_work(*PROVIDER_OPTIONS, "--dedicated-key")
    assert run("add", "home", "--key-env", "HOME_KEY", "--budget", "50").exit_code == 0
    lines = run("list").output.splitlines()
    assert lines[0].split()[-2:] == ["dedicated", "key"]
    assert lines[1].split()[-1] == "yes"
    assert lines[2].split()[-1] == "-"


def test_list_has_no_dedicated_key_column_when_no_account_declares_one(user_path):
    add_work(*PROVIDER_OPTIONS)
    assert run("list").output.splitlines()[0].split() == ["name", "key_env", "budget", "daily", "rank", "weight", "models"]


def test_list_json_shows_dedicated_key_and_the_provider_fields(user_path):
    add_work(*PROVIDER_OPTIONS, "--dedicated-key")
    assert run("add", "home", "--key-env", "HOME_KEY", "--budget", "50").exit_code == 0
    accounts = json.loads(run("list", "--json").output)["accounts"]
    assert [(a["dedicated_key"], a["admin_key_env"], a["api_key_id"]) for a in accounts] == [
        (True, "WORK_ADMIN_KEY", KEY_ID),
        (False, None, None),
    ]
