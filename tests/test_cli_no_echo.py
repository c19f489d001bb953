"""No ``llm accounts`` error repeats an argument that could be a key: errors name the argument
and the rule, and echo only values that matched a declaration or the ledger exactly."""

import datetime as dt
import json
import secrets
import string

import pytest
from click.testing import CliRunner
from llm.cli import cli

from conftest import assert_no_key_material
from llm_accounts import clock
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)


@pytest.fixture(autouse=True)
def declared(monkeypatch, ledger_path):
    monkeypatch.setenv(
        "ANTHROPIC_ACCOUNTS", json.dumps([{"name": "work", "key_env": "WORK_KEY", "budget_usd": "5.00"}])
    )


def run(*args):
    result = CliRunner().invoke(cli, list(args))
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    return result


def name_shaped():
    """A run-time secret that passes the account-name rule: what a lowercase key could look like."""
    return "k" + "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(30))


# A well-formed credit period from a fixed instant: each line is refused for its key-bearing
# argument, whatever period it names, so no line depends on today's date.
MONTH = clock.credit_month(dt.datetime(2027, 3, 10, tzinfo=dt.timezone.utc))

COMMAND_LINES = [
    # Usage errors click would word with the value.
    ["accounts", "{key}"],
    ["accounts", "--{key}"],
    ["accounts", "status", "{key}"],
    ["accounts", "status", "--{key}"],
    ["accounts", "attempts", "--limit", "{key}"],
    ["accounts", "browse", "--port", "{key}"],
    ["accounts", "standin", "--port", "{key}", "--config", "x.json"],
    ["accounts", "lookup", "{key}"],
    ["accounts", "lookup", "show", "{key}"],
    # Each command's own arguments and options.
    ["accounts", "refresh-models", "{key}"],
    ["accounts", "refresh-models", "work", "{key}"],
    ["accounts", "add", "{key}", "--key-env", "OTHER_KEY", "--budget", "1.00"],
    ["accounts", "add", "home", "--key-env", "{key}", "--budget", "1.00"],
    ["accounts", "add", "home", "--key-env", "HOME_KEY", "--budget", "{key}"],
    ["accounts", "add", "home", "--key-env", "HOME_KEY", "--budget", "1", "--daily-budget", "{key}"],
    ["accounts", "add", "home", "--key-env", "HOME_KEY", "--budget", "1", "--rank", "{key}"],
    ["accounts", "add", "home", "--key-env", "HOME_KEY", "--budget", "1", "--weight", "{key}"],
    ["accounts", "add", "home", "--key-env", "HOME_KEY", "--budget", "1", "--model", "{key}"],
    ["accounts", "add", "home", "--key-env", "HOME_KEY", "--budget", "1", "--client-cap", "{key}=1.00"],
    ["accounts", "add", "home", "--key-env", "HOME_KEY", "--budget", "1", "--client-cap", "ci={key}"],
    ["accounts", "remove", "{key}"],
    ["accounts", "lookup", "set", "--", "pass", "show", "{key}"],
    ["accounts", "prices", "--model", "{key}"],
    ["accounts", "standin", "--host", "{key}", "--config", "x.json"],
    ["accounts", "standin", "--config", "{key}"],
    ["accounts", "block", "{key}"],
    ["accounts", "unblock", "{key}"],
    ["accounts", "unblock", "work", "--source", "{key}"],
    ["accounts", "unblock", "work", "--id", "{key}"],
    ["accounts", "reconcile", "{key}", "--cost", "0", "--source", "invoice"],
    ["accounts", "reconcile", "a1", "--cost", "{key}", "--source", "invoice"],
    ["accounts", "reconcile", "a1", "--cost", "0", "--source", "{key}"],
    ["accounts", "reconcile", "a1", "--cost", "0", "--source", "invoice", "--id", "{key}"],
    ["accounts", "adjust", "{key}", "--month", "{month}", "--delta", "1", "--source", "invoice"],
    ["accounts", "adjust", "work", "--month", "{key}", "--delta", "1", "--source", "invoice"],
    ["accounts", "adjust", "work", "--month", "{month}", "--delta", "{key}", "--source", "invoice"],
    ["accounts", "adjust", "work", "--month", "{month}", "--delta", "1", "--source", "{key}"],
    ["accounts", "adjust", "work", "--month", "{month}", "--delta", "1", "--source", "invoice", "--attempt", "{key}"],
    ["accounts", "adjust", "work", "--month", "{month}", "--delta", "1", "--source", "invoice", "--id", "{key}"],
    ["accounts", "rebind", "{key}", "work"],
    ["accounts", "rebind", "c1", "{key}"],
    ["accounts", "rebind", "c1", "work", "--source", "{key}"],
]


@pytest.mark.parametrize("line", COMMAND_LINES, ids=lambda line: " ".join(line[1:3]))
def test_no_error_repeats_a_key_given_as_an_argument(line, canary_key):
    result = run(*(part.replace("{key}", canary_key).replace("{month}", MONTH) for part in line))
    assert result.exit_code != 0
    assert "Error:" in result.output
    assert_no_key_material(result.output, canary_key)


@pytest.mark.parametrize(
    "line",
    [
        ["accounts", "block", "{name}"],
        ["accounts", "unblock", "{name}"],
        ["accounts", "adjust", "{name}", "--month", "{month}", "--delta", "1", "--source", "invoice"],
        ["accounts", "rebind", "c1", "{name}"],
        ["accounts", "refresh-models", "{name}"],
        ["accounts", "remove", "{name}"],
    ],
    ids=lambda line: line[1],
)
def test_an_unknown_account_name_is_not_repeated_even_when_it_is_a_valid_name(line):
    name = name_shaped()
    result = run(*(part.replace("{name}", name) for part in line))
    assert result.exit_code == 1
    assert "Error: not_found: NAME" in result.output
    assert_no_key_material(result.output, name)


def test_refresh_models_names_the_argument_and_rule_for_an_undeclared_name(canary_key):
    result = run("accounts", "refresh-models", canary_key)
    assert result.exit_code == 1
    assert result.output == (
        "Error: not_found: NAMES: each must be a declared account's name (see llm accounts list)\n"
    )


def test_rebind_does_not_repeat_the_conversation_id(canary_key):
    conversation_id = "c" + canary_key[13:]  # passes the id rule (no sk-ant) and is no option (no leading -)
    result = run("accounts", "rebind", conversation_id, "work")
    assert result.exit_code == 1
    assert result.output.startswith("Error: not_found: CONVERSATION_ID: the ledger holds no conversation with this id")
    assert_no_key_material(result.output, canary_key)


def test_a_usage_error_names_the_parameter_and_its_rule(canary_key):
    result = run("accounts", "attempts", "--limit", canary_key)
    assert result.exit_code == 2
    assert result.output.splitlines()[-1] == "Error: Invalid value for '--limit': must be a whole number, 1 or more"
