"""The first errors a newcomer meets say what happened and what to type next (docs/errors.md
"Error codes"): an authentication failure that blocked the account, a prompt with nothing
declared and no key, an option name mistyped."""

import re

import pytest
from conftest import assert_no_key_material, make_key
from routed_helpers import attempts, llm_cli
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

MODEL = "claude-routed/claude-haiku-4-5"


def one_line(result):
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


# auth_failed


def test_an_auth_failure_says_the_account_is_now_blocked_and_how_to_unblock_it(accounts, ledger_path):
    accounts.set_behaviour("alpha", "unauthorized")
    line = one_line(llm_cli("-m", MODEL, "-o", "account", "alpha", "hello"))
    [row] = attempts(ledger_path)
    assert line == (
        f"Error: auth_failed: account 'alpha' answered HTTP 401 authentication_error; nothing was billed "
        f"(attempt {row['id']}); the account is now blocked: check its key (ALPHA_KEY), then run: "
        "llm accounts unblock alpha"
    )


def test_the_unblock_command_the_auth_failure_names_unblocks_it(accounts, ledger_path):
    accounts.set_behaviour("alpha", "unauthorized")
    line = one_line(llm_cli("-m", MODEL, "-o", "account", "alpha", "hello"))
    command = re.search(r"then run: (llm accounts unblock \S+)$", line).group(1)
    accounts.set_behaviour("alpha", "ok")
    assert llm_cli(*command.split()[1:]).exit_code == 0
    assert llm_cli("-m", MODEL, "-o", "account", "alpha", "hello").exit_code == 0


def test_a_403_says_the_account_is_now_blocked_too(accounts, ledger_path):
    accounts.set_behaviour("beta", "forbidden")
    line = one_line(llm_cli("-m", MODEL, "-o", "account", "beta", "hello"))
    assert line.endswith("the account is now blocked: check its key (BETA_KEY), then run: llm accounts unblock beta")


# Nothing declared, no key


def test_a_prompt_with_no_account_and_no_key_says_how_to_declare_one(user_path, standin):
    line = one_line(llm_cli("-m", MODEL, "hello"))
    assert line.startswith("Error: credential_missing: no accounts are declared and llm has no Anthropic key: ")
    assert "llm accounts add NAME --key-env VAR --budget USD" in line
    assert "llm keys set anthropic" in line and "ANTHROPIC_API_KEY" in line
    assert standin.requests == []


def test_from_python_the_missing_key_is_still_llms_needs_key_error(user_path):
    import llm

    from llm_accounts.errors import AccountsError

    model = llm.get_model(MODEL)
    with pytest.raises(llm.NeedsKeyException) as raised:
        model.prompt("hello").text()
    assert isinstance(raised.value, AccountsError) and raised.value.code == "credential_missing"


# Unknown options


def test_an_unknown_option_shaped_like_an_option_is_named_with_the_closest_one(accounts, ledger_path):
    line = one_line(llm_cli("-m", MODEL, "-o", "max_token", "100", "hello"))
    assert line == (
        "Error: declaration_invalid: option max_token: claude-routed has no such option; did you mean max_tokens? "
        "(see llm models --options)"
    )
    assert attempts(ledger_path) == []


@pytest.mark.parametrize("name", ["Temperature", "max tokens", "x" * 41])
def test_an_unknown_option_not_shaped_like_an_option_name_is_not_repeated(accounts, ledger_path, name):
    line = one_line(llm_cli("-m", MODEL, "-o", name, "1", "hello"))
    assert line.startswith("Error: declaration_invalid: an unknown option (its name is not repeated")
    assert name not in line


def test_a_key_given_as_an_option_name_is_never_repeated_even_without_its_prefix(accounts, ledger_path):
    key = make_key()
    bare = key[len("sk-ant-api03-"):]
    for name in (key, bare):
        line = one_line(llm_cli("-m", MODEL, "-o", name, "1", "hello"))
        assert_no_key_material(line, key)
