"""`llm accounts add / remove / list / lookup` (architecture.md "Commands", "Environment")."""

import json
import stat

import pytest
from click.testing import CliRunner
from conftest import assert_no_key_material
from llm.cli import cli


def run(*args, env=None):
    return CliRunner().invoke(cli, ["accounts", *args], env=env, catch_exceptions=False)


def stored(user_path):
    return json.loads((user_path / "accounts.json").read_text())


def add_work(*extra):
    result = run("add", "work", "--key-env", "WORK_KEY", "--budget", "12.50", *extra)
    assert result.exit_code == 0, result.output
    return result


# add


def test_add_writes_the_declaration(user_path):
    result = add_work(
        "--daily-budget", "1.25", "--rank", "1", "--weight", "3", "--model", "claude-haiku-4-5"
    )
    assert (
        "Added account work: key from WORK_KEY, budget $12.50 a month, $1.25 a day" in result.output
    )
    assert stored(user_path) == {
        "accounts": [
            {
                "name": "work",
                "key_env": "WORK_KEY",
                "budget_usd": "12.50",
                "daily_budget_usd": "1.25",
                "rank": 1,
                "weight": 3,
                "models": ["claude-haiku-4-5"],
            }
        ]
    }


def test_add_declares_the_organizations_admin_key_variable_and_the_key_id(user_path):
    add_work("--admin-key-env", "WORK_ADMIN_KEY", "--api-key-id", "apikey_01Rj2N8SVvo6BePZj99NhmiT")
    [account] = stored(user_path)["accounts"]
    assert (account["admin_key_env"], account["api_key_id"]) == ("WORK_ADMIN_KEY", "apikey_01Rj2N8SVvo6BePZj99NhmiT")


def test_add_refuses_an_admin_key_env_that_is_the_key_env(user_path):
    result = run("add", "work", "--key-env", "WORK_KEY", "--budget", "1", "--admin-key-env", "WORK_KEY")
    assert result.exit_code == 1
    assert "--admin-key-env: names the same variable as --key-env" in result.output


def test_add_writes_a_user_only_file(user_path):
    add_work()
    assert stat.S_IMODE((user_path / "accounts.json").stat().st_mode) == 0o600


def test_add_with_a_comma_budget_says_how_to_fix_it_in_one_line():
    result = run("add", "work", "--key-env", "WORK_KEY", "--budget", "12,50")
    assert result.exit_code == 1
    assert result.output == (
        "Error: declaration_invalid: --budget: use a dot for cents and no thousands separators, such as 12.50\n"
    )


@pytest.mark.parametrize(
    "args, complaint",
    [
        (["--budget", "twelve"], "--budget: must be a positive decimal number"),
        (["--budget", "$12.50"], "--budget: give the amount without '$', such as 12.50"),
        (["--budget", "0"], "--budget: must be greater than zero"),
        (
            ["--budget", "1", "--daily-budget", "1.0000000001"],
            "--daily-budget: must be a positive decimal",
        ),
        (["--budget", "1", "--rank", "-1"], "--rank: must be a whole number from 0"),
        (["--budget", "1", "--weight", "0"], "--weight: must be from 1"),
        (
            ["--budget", "1", "--model", "Claude Sonnet"],
            "--model[0]: must be an Anthropic model id",
        ),
    ],
)
def test_add_refuses_bad_options_in_one_line(args, complaint, user_path):
    result = run("add", "work", "--key-env", "WORK_KEY", *args)
    assert result.exit_code == 1
    assert result.output.count("\n") == 1
    assert complaint in result.output
    assert not (user_path / "accounts.json").exists()


@pytest.mark.parametrize(
    "option", ["NAME", "--key-env", "--budget", "--daily-budget", "--rank", "--weight", "--model"]
)
def test_a_key_pasted_into_any_option_is_never_echoed(option, canary_key, user_path):
    values = {"NAME": "work", "--key-env": "WORK_KEY", "--budget": "1.00"}
    values[option] = canary_key
    name = values.pop("NAME")
    args = [arg for pair in values.items() for arg in pair]
    result = run("add", name, *args)
    assert result.exit_code == 1
    assert f"{option}" in result.output
    assert_no_key_material(result.output, canary_key)
    assert not (user_path / "accounts.json").exists()


def test_add_refuses_a_duplicate_name(user_path):
    add_work()
    result = run("add", "work", "--key-env", "WORK_KEY", "--budget", "99")
    assert result.exit_code == 1
    assert "use --replace" in result.output
    assert stored(user_path)["accounts"][0]["budget_usd"] == "12.50"


def test_add_replace_changes_the_budget(user_path):
    add_work()
    result = run("add", "work", "--key-env", "WORK_KEY", "--budget", "99", "--replace")
    assert result.output.startswith("Replaced account work")
    assert stored(user_path)["accounts"] == [
        {"name": "work", "key_env": "WORK_KEY", "budget_usd": "99.00"}
    ]


def test_add_replace_refuses_a_new_key_env(user_path):
    add_work()
    result = run("add", "work", "--key-env", "OTHER_KEY", "--budget", "12.50", "--replace")
    assert result.exit_code == 1
    assert "account_config_conflict" in result.output
    assert stored(user_path)["accounts"][0]["key_env"] == "WORK_KEY"


def test_add_refuses_a_key_env_another_account_uses(user_path):
    add_work()
    result = run("add", "home", "--key-env", "WORK_KEY", "--budget", "5")
    assert result.exit_code == 1
    assert "account work already uses this key_env" in result.output
    assert len(stored(user_path)["accounts"]) == 1


def test_add_refuses_an_api_key_id_another_account_declares_without_writing(user_path):
    add_work("--admin-key-env", "ORG_ADMIN", "--api-key-id", "apikey_01QzSharedMarker7")
    before = (user_path / "accounts.json").read_text()
    result = run("add", "home", "--key-env", "HOME_KEY", "--budget", "5", "--admin-key-env", "OTHER_ORG_ADMIN",
                 "--api-key-id", "apikey_01QzSharedMarker7")
    assert result.exit_code == 1
    assert result.output == (
        "Error: declaration_invalid: --api-key-id: account work already declares this api_key_id; "
        "one API key id belongs to one account\n"
    )
    assert (user_path / "accounts.json").read_text() == before


def test_add_replace_keeps_its_own_api_key_id(user_path):
    add_work("--api-key-id", "apikey_01work")
    result = run("add", "work", "--key-env", "WORK_KEY", "--budget", "20", "--api-key-id", "apikey_01work", "--replace")
    assert result.exit_code == 0, result.output
    assert stored(user_path)["accounts"][0]["api_key_id"] == "apikey_01work"


def test_add_refuses_to_build_on_an_invalid_file(user_path):
    (user_path / "accounts.json").write_text('{"accounts": [{"name": "x"}]}')
    result = run("add", "work", "--key-env", "WORK_KEY", "--budget", "1")
    assert result.exit_code == 1
    assert "accounts[0].key_env in accounts.json: is required" in result.output
    assert stored(user_path) == {"accounts": [{"name": "x"}]}


def test_add_keeps_the_lookup_command(user_path):
    run("lookup", "set", "--", "pass", "show", "{name}")
    add_work()
    assert stored(user_path)["lookup"] == ["pass", "show", "{name}"]


def test_add_warns_when_the_environment_overrides_accounts_json():
    result = CliRunner().invoke(
        cli,
        ["accounts", "add", "work", "--key-env", "WORK_KEY", "--budget", "1"],
        env={"ANTHROPIC_ACCOUNTS": "[]"},
    )
    assert result.exit_code == 0
    assert "ANTHROPIC_ACCOUNTS in the environment overrides accounts.json" in result.stderr
    assert "overrides" not in result.stdout


def test_add_warns_when_a_dotenv_overrides_accounts_json(tmp_path):
    (tmp_path / "work" / ".env").write_text("ANTHROPIC_ACCOUNTS=[]\n")
    result = add_work()
    assert "ANTHROPIC_ACCOUNTS in .env in this directory overrides accounts.json" in result.stderr


def test_add_does_not_warn_without_a_higher_source():
    assert add_work().stderr == ""


# remove


def test_remove_deletes_the_account(user_path):
    add_work()
    run("add", "home", "--key-env", "HOME_KEY", "--budget", "5")
    result = run("remove", "work")
    assert result.exit_code == 0
    assert [a["name"] for a in stored(user_path)["accounts"]] == ["home"]


def test_removing_the_last_account_leaves_nothing_declared(user_path):
    add_work()
    run("remove", "work")
    assert "No accounts declared" in run("list").output


def test_remove_of_an_unknown_name_fails(user_path):
    add_work()
    result = run("remove", "home")
    assert result.exit_code == 1
    assert "NAME: no account in accounts.json has this name" in result.output


def test_remove_never_echoes_a_pasted_key(canary_key):
    result = run("remove", canary_key)
    assert result.exit_code == 1
    assert_no_key_material(result.output, canary_key)


# list


def test_list_when_nothing_is_declared():
    result = run("list")
    assert (
        result.output
        == "No accounts declared: claude-routed sends unrouted with your 'anthropic' key\n"
    )


def test_list_shows_accounts_and_their_source(user_path):
    add_work("--daily-budget", "2", "--model", "claude-haiku-4-5")
    run("add", "home", "--key-env", "HOME_KEY", "--budget", "5", "--rank", "1", "--weight", "2")
    lines = run("list").output.splitlines()
    assert lines[0].split() == ["name", "key_env", "budget", "daily", "rank", "weight", "models"]
    assert lines[1].split() == ["work", "WORK_KEY", "$12.50", "$2.00", "0", "1", "claude-haiku-4-5"]
    assert lines[2].split() == ["home", "HOME_KEY", "$5.00", "-", "1", "2", "all", "priced"]
    assert lines[3] == f"Declared by {user_path / 'accounts.json'}"


def test_list_names_the_environment_as_source():
    env = {
        "ANTHROPIC_ACCOUNTS": json.dumps([{"name": "env", "key_env": "ENV_KEY", "budget_usd": "3"}])
    }
    result = run("list", env=env)
    assert "Declared by ANTHROPIC_ACCOUNTS in the environment" in result.output


def test_list_json(tmp_path):
    (tmp_path / "work" / ".env").write_text(
        'ANTHROPIC_ACCOUNTS=\'[{"name": "dot", "key_env": "DOT_KEY", "budget_usd": "0.5"}]\'\n'
    )
    data = json.loads(run("list", "--json").output)
    assert data == {
        "routed": True,
        "source": ".env",
        "source_path": f"ANTHROPIC_ACCOUNTS in {tmp_path / 'work' / '.env'}",
        "accounts": [
            {
                "name": "dot",
                "key_env": "DOT_KEY",
                "budget_usd": "0.50",
                "budget_nusd": 500_000_000,
                "daily_budget_usd": None,
                "daily_budget_nusd": None,
                "rank": 0,
                "weight": 1,
                "models": None,
                "clients": {},
                "clients_only": False,
                "admin_key_env": None,
                "api_key_id": None,
                "dedicated_key": False,
            }
        ],
        "lookup": None,
    }


def test_list_never_shows_a_key(user_path, tmp_path, canary_key):
    add_work()
    (tmp_path / "work" / ".env").write_text(f"WORK_KEY={canary_key}\n")
    (user_path / "keys.json").write_text(json.dumps({"WORK_KEY": canary_key}))
    for args in (["list"], ["list", "--json"]):
        result = CliRunner().invoke(cli, ["accounts", *args], env={"WORK_KEY": canary_key})
        assert result.exit_code == 0
        assert_no_key_material(result.output, canary_key)


def test_list_reports_an_invalid_declaration_in_one_line(canary_key):
    result = run("list", env={"ANTHROPIC_ACCOUNTS": canary_key})
    assert result.exit_code == 1
    assert result.output.count("\n") == 1
    assert "ANTHROPIC_ACCOUNTS: is not valid JSON" in result.output
    assert_no_key_material(result.output, canary_key)


# lookup


def test_lookup_set_show_and_clear(user_path):
    assert run("lookup").output.startswith("No lookup command set")
    assert run("lookup", "set", "--", "op", "read", "op://Private/{name}/credential").exit_code == 0
    assert stored(user_path) == {"lookup": ["op", "read", "op://Private/{name}/credential"]}
    assert run("lookup").output == "op read 'op://Private/{name}/credential'\n"
    assert json.loads(run("lookup", "show", "--json").output) == {
        "lookup": ["op", "read", "op://Private/{name}/credential"]
    }
    assert run("lookup", "clear").exit_code == 0
    assert stored(user_path) == {}


def test_lookup_set_takes_options_of_the_command_as_arguments(user_path):
    run("lookup", "set", "security", "find-generic-password", "-s", "{name}", "-w")
    assert stored(user_path)["lookup"] == [
        "security",
        "find-generic-password",
        "-s",
        "{name}",
        "-w",
    ]


def test_lookup_set_keeps_the_accounts(user_path):
    add_work()
    run("lookup", "set", "pass", "{name}")
    assert [a["name"] for a in stored(user_path)["accounts"]] == ["work"]


def test_lookup_set_requires_a_name_placeholder(user_path):
    result = run("lookup", "set", "pass", "show", "work")
    assert result.exit_code == 1
    assert "no argument holds {name}" in result.output
    assert not (user_path / "accounts.json").exists()


def test_lookup_set_refuses_a_pasted_key(canary_key, user_path):
    result = run("lookup", "set", "echo", canary_key, "{name}")
    assert result.exit_code == 1
    assert "COMMAND[1]" in result.output
    assert_no_key_material(result.output, canary_key)
    assert not (user_path / "accounts.json").exists()


# help


@pytest.mark.parametrize(
    "command",
    [
        ["add"],
        ["remove"],
        ["list"],
        ["lookup"],
        ["lookup", "set"],
        ["lookup", "show"],
        ["lookup", "clear"],
    ],
)
def test_every_command_has_help_with_an_example(command):
    result = run(*command, "--help")
    assert result.exit_code == 0
    assert "Example:" in result.output


def admit_once(name="work", attempt_id="a1"):
    """One attempt on the declared account ``name``, so the ledger holds it."""
    from llm_accounts.declarations import load_declaration
    from llm_accounts.ledger import Ledger, NotSent, Scope
    from llm_accounts.pricing.prices import Quote

    [account] = [a for a in load_declaration().accounts if a.name == name]
    with Ledger() as ledger:
        ledger.reserve(
            Scope("conversation", attempt_id), attempt_id, Quote("claude-haiku-4-5", 1000, "2026-11-01", "ab" * 32), [account]
        )
        ledger.settle(attempt_id, NotSent())


def removed_at(ledger_path, name="work"):
    import sqlite3

    db = sqlite3.connect(ledger_path)
    try:
        return db.execute("SELECT removed_at FROM account WHERE name = ?", (name,)).fetchone()[0]
    finally:
        db.close()


def test_remove_marks_the_account_removed_in_the_ledger(user_path, ledger_path):
    add_work()
    admit_once()
    assert removed_at(ledger_path) is None
    assert run("remove", "work").exit_code == 0
    assert removed_at(ledger_path) is not None


def test_remove_creates_no_ledger(user_path, ledger_path):
    add_work()
    assert run("remove", "work").exit_code == 0
    assert not ledger_path.exists()


def test_an_account_added_again_is_no_longer_removed_once_it_is_used(user_path, ledger_path):
    add_work()
    admit_once()
    run("remove", "work")
    add_work()
    admit_once(attempt_id="a2")
    assert removed_at(ledger_path) is None
