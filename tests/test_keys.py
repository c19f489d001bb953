"""Strict key resolution for one key_env (architecture.md "Key resolution", ADR-0126 D2)."""

import json
import os
import pickle
import sys
import textwrap
import traceback

import pytest
from conftest import assert_no_key_material, make_key

from llm_accounts.declarations import Account, Declaration
from llm_accounts.errors import AccountsError
from llm_accounts.keys import Secret, resolve_key

WORK = Account("work", "WORK_KEY", 10**9)
HOME = Account("home", "HOME_KEY", 10**9)
UNROUTED = Declaration((), None, None)


def routed(lookup=None):
    return Declaration((WORK, HOME), "accounts.json", lookup)


@pytest.fixture
def workdir(tmp_path):
    return tmp_path / "work"


@pytest.fixture
def keys_json(user_path):
    def write(entries):
        data = {"// Note": "This file stores secret API credentials. Do not share!", **entries}
        (user_path / "keys.json").write_text(json.dumps(data))

    return write


def assert_clean(error, key):
    assert error.__cause__ is None
    assert error.__context__ is None
    for text in (str(error), repr(error), "".join(traceback.format_exception(error))):
        assert_no_key_material(text, key)


def refused(code, key_env="WORK_KEY", declaration=None, **kwargs):
    with pytest.raises(AccountsError) as info:
        resolve_key(key_env, declaration or routed(), **kwargs)
    assert info.value.code == code
    assert "\n" not in str(info.value)
    return info.value


# 1. The process environment.


def test_environment_value_is_used(canary_key):
    secret = resolve_key("WORK_KEY", routed(), environ={"WORK_KEY": canary_key})
    assert secret.reveal() == canary_key


def test_environment_is_read_from_os_environ_by_default(monkeypatch, canary_key):
    monkeypatch.setenv("WORK_KEY", canary_key)
    assert resolve_key("WORK_KEY", routed()).reveal() == canary_key


def test_environment_beats_dotenv_and_llm_keys(workdir, keys_json, canary_key):
    (workdir / ".env").write_text(f"WORK_KEY={make_key()}\n")
    keys_json({"WORK_KEY": make_key()})
    assert (
        resolve_key("WORK_KEY", routed(), environ={"WORK_KEY": canary_key}).reveal() == canary_key
    )


def test_empty_environment_value_is_invalid_not_a_miss(workdir):
    (workdir / ".env").write_text(f"WORK_KEY={make_key()}\n")
    error = refused("credential_invalid", environ={"WORK_KEY": ""})
    assert "WORK_KEY is set but empty in the environment" in str(error)
    assert error.account == "work"


def test_invalid_environment_value_does_not_fall_through(workdir, canary_key):
    (workdir / ".env").write_text(f"WORK_KEY={make_key()}\n")
    error = refused("credential_invalid", environ={"WORK_KEY": canary_key + " "})
    assert_clean(error, canary_key)


# 2. .env.local, then .env, in the working directory.


def test_dotenv_value_is_used(workdir, canary_key):
    (workdir / ".env").write_text(f"WORK_KEY='{canary_key}'\n")
    assert resolve_key("WORK_KEY", routed(), environ={}).reveal() == canary_key


def test_dotenv_local_beats_dotenv(workdir, canary_key):
    (workdir / ".env").write_text(f"WORK_KEY={make_key()}\n")
    (workdir / ".env.local").write_text(f"WORK_KEY={canary_key}\n")
    assert resolve_key("WORK_KEY", routed(), environ={}).reveal() == canary_key


def test_dotenv_beats_llm_keys(workdir, keys_json, canary_key):
    (workdir / ".env").write_text(f"WORK_KEY={canary_key}\n")
    keys_json({"WORK_KEY": make_key()})
    assert resolve_key("WORK_KEY", routed(), environ={}).reveal() == canary_key


@pytest.mark.parametrize("line", ["WORK_KEY=", "WORK_KEY=''", "WORK_KEY"])
def test_empty_dotenv_value_is_invalid_not_a_miss(workdir, keys_json, line):
    keys_json({"WORK_KEY": make_key()})
    (workdir / ".env").write_text(line + "\n")
    assert "empty in .env" in str(refused("credential_invalid", environ={}))


def test_empty_dotenv_local_value_hides_dotenv(workdir):
    (workdir / ".env").write_text(f"WORK_KEY={make_key()}\n")
    (workdir / ".env.local").write_text("WORK_KEY=\n")
    assert "empty in .env.local" in str(refused("credential_invalid", environ={}))


def test_dotenv_is_read_from_the_given_working_directory(tmp_path, canary_key):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / ".env").write_text(f"WORK_KEY={canary_key}\n")
    refused("credential_missing", environ={})
    assert resolve_key("WORK_KEY", routed(), environ={}, cwd=elsewhere).reveal() == canary_key


# 3. The `llm keys` entry of exactly that name.


def test_llm_keys_entry_is_used(keys_json, canary_key):
    keys_json({"WORK_KEY": canary_key})
    assert resolve_key("WORK_KEY", routed(), environ={}).reveal() == canary_key


def test_llm_keys_name_is_matched_exactly(keys_json):
    keys_json({"work_key": make_key(), "work": make_key()})
    refused("credential_missing", environ={})


def test_an_unknown_name_is_never_taken_as_a_literal_key(keys_json):
    keys_json({})
    refused("credential_missing", environ={})


def test_empty_llm_keys_entry_is_invalid(keys_json):
    keys_json({"WORK_KEY": ""})
    assert "empty in 'llm keys'" in str(refused("credential_invalid", environ={}))


def test_malformed_keys_json_is_reported_without_its_text(user_path, canary_key):
    (user_path / "keys.json").write_text('{"WORK_KEY": "' + canary_key)
    error = refused("credential_lookup_failed", environ={})
    assert "keys.json" in str(error)
    assert_clean(error, canary_key)


# The accepted value (ADR-0126 D2).


@pytest.mark.parametrize(
    "value",
    [
        "short12",  # 7 characters
        "k" * 1025,
        "has space" + "x" * 10,
        "tab\tseparated-value",
        "trailing-newline-kept\n",
        "non-ascii-\u00e9-value",
    ],
)
def test_a_value_that_is_not_a_header_safe_key_is_invalid_and_the_message_tells_nothing_of_it(
    value,
):
    # One fixed message whatever the value: no length, no character, no position.
    error = refused("credential_invalid", environ={"WORK_KEY": value})
    assert str(error) == (
        "credential_invalid: WORK_KEY in the environment is not a valid API key "
        "(a key is 8 to 1,024 printable ASCII characters, no spaces or newlines)"
    )


@pytest.mark.parametrize("value", ["k" * 8, "k" * 1024, "".join(chr(c) for c in range(0x21, 0x7F))])
def test_bounds_of_a_valid_key(value):
    assert resolve_key("WORK_KEY", routed(), environ={"WORK_KEY": value}).reveal() == value


@pytest.mark.parametrize("key_env", ["WORK_KEY", "HOME_KEY_NAME"])
def test_a_value_equal_to_its_name_is_invalid(key_env):
    error = refused("credential_invalid", key_env=key_env, environ={key_env: key_env})
    assert "holds its own name" in str(error)


# Nothing found, and no fallback.


def test_missing_everywhere_says_where_it_looked_and_how_to_fix():
    message = str(refused("credential_missing", environ={}))
    assert "environment, .env.local, .env, 'llm keys'" in message
    assert "run 'llm keys set WORK_KEY'" in message


def test_no_fallback_to_anthropic_api_key_or_another_account(keys_json):
    keys_json({"anthropic": make_key(), "HOME_KEY": make_key()})
    refused("credential_missing", environ={"ANTHROPIC_API_KEY": make_key(), "HOME_KEY": make_key()})


def test_a_key_env_that_is_not_a_variable_name_is_refused(canary_key):
    error = refused("declaration_invalid", key_env=canary_key, environ={})
    assert_clean(error, canary_key)


def test_resolution_never_changes_os_environ(workdir, keys_json, canary_key):
    (workdir / ".env").write_text(f"WORK_KEY={canary_key}\n")
    before = dict(os.environ)
    resolve_key("WORK_KEY", routed())
    assert dict(os.environ) == before


# 4. The secret lookup command.


@pytest.fixture
def lookup_script(tmp_path):
    """Write a Python lookup script; returns the argv template that runs it with {name}."""

    def make(body):
        path = tmp_path / "lookup.py"
        path.write_text("import os, sys, time\nname = sys.argv[1]\n" + textwrap.dedent(body))
        return (sys.executable, str(path), "{name}")

    return make


def test_lookup_prints_the_key_for_the_name(lookup_script, canary_key):
    argv = lookup_script(f"print({canary_key!r} if name == 'WORK_KEY' else 'wrong-name')")
    assert resolve_key("WORK_KEY", routed(argv), environ={}).reveal() == canary_key


def test_lookup_removes_one_trailing_newline_only(lookup_script, canary_key):
    argv = lookup_script(f"sys.stdout.write({canary_key!r} + '\\n\\n')")
    refused("credential_invalid", declaration=routed(argv), environ={})


def test_lookup_output_without_a_newline_is_used(lookup_script, canary_key):
    argv = lookup_script(f"sys.stdout.write({canary_key!r})")
    assert resolve_key("WORK_KEY", routed(argv), environ={}).reveal() == canary_key


def test_lookup_of_1024_characters_and_a_newline_is_accepted(lookup_script):
    argv = lookup_script("print('k' * 1024)")
    assert resolve_key("WORK_KEY", routed(argv), environ={}).reveal() == "k" * 1024


def test_lookup_that_prints_too_much_fails(lookup_script, canary_key):
    argv = lookup_script(f"sys.stdout.write({canary_key!r} * 20)")
    error = refused("credential_lookup_failed", declaration=routed(argv), environ={})
    assert "printed too much" in str(error)
    assert_clean(error, canary_key)


def test_lookup_that_prints_endlessly_fails(lookup_script):
    argv = lookup_script("while True:\n    sys.stdout.write('k' * 4096)\n    sys.stdout.flush()")
    assert "printed too much" in str(
        refused("credential_lookup_failed", declaration=routed(argv), environ={})
    )


def test_lookup_that_times_out_fails(lookup_script):
    argv = lookup_script("time.sleep(30)")
    error = refused(
        "credential_lookup_failed", declaration=routed(argv), environ={}, lookup_timeout=0.3
    )
    assert "did not finish within 0.3 seconds" in str(error)


def test_lookup_that_closes_stdout_then_hangs_times_out(lookup_script):
    argv = lookup_script("os.close(1)\ntime.sleep(30)")
    refused("credential_lookup_failed", declaration=routed(argv), environ={}, lookup_timeout=0.3)


def test_lookup_that_exits_non_zero_fails_without_its_output(lookup_script, canary_key):
    argv = lookup_script(f"print({canary_key!r})\nsys.stderr.write({canary_key!r})\nsys.exit(3)")
    error = refused("credential_lookup_failed", declaration=routed(argv), environ={})
    assert "exit status 3" in str(error)
    assert_clean(error, canary_key)


def test_lookup_stderr_is_discarded(lookup_script, capfd, canary_key):
    argv = lookup_script(f"sys.stderr.write({canary_key!r})\nprint('k' * 20)")
    resolve_key("WORK_KEY", routed(argv), environ={})
    captured = capfd.readouterr()
    assert_no_key_material(captured.out + captured.err, canary_key)


def test_lookup_program_that_is_missing_fails(tmp_path):
    argv = (str(tmp_path / "no-such-program"), "{name}")
    error = refused("credential_lookup_failed", declaration=routed(argv), environ={})
    assert "program not found" in str(error)


def test_lookup_that_prints_nothing_is_invalid(lookup_script):
    argv = lookup_script("pass")
    assert "empty" in str(refused("credential_invalid", declaration=routed(argv), environ={}))


def test_lookup_is_not_run_when_an_earlier_step_has_the_key(lookup_script, tmp_path, canary_key):
    marker = tmp_path / "ran"
    argv = lookup_script(f"open({str(marker)!r}, 'w').close()\nprint('k' * 20)")
    resolve_key("WORK_KEY", routed(argv), environ={"WORK_KEY": canary_key})
    assert not marker.exists()


def test_lookup_child_environment_holds_no_account_key(lookup_script, tmp_path, canary_key):
    seen = tmp_path / "names.json"
    argv = lookup_script(f"""
        import json
        json.dump(sorted(os.environ), open({str(seen)!r}, "w"))
        print("k" * 20)
        """)
    environ = {
        "PATH": os.environ.get("PATH", ""),
        "HOME_KEY": make_key(),  # another account's key
        "ANTHROPIC_API_KEY": make_key(),
        "COPIED_ELSEWHERE": canary_key,  # an account key under a name we cannot know
        "UNRELATED": "kept",
    }
    resolve_key("WORK_KEY", routed(argv), environ=environ)
    names = json.loads(seen.read_text())
    assert "UNRELATED" in names
    assert not {"HOME_KEY", "WORK_KEY", "ANTHROPIC_API_KEY", "COPIED_ELSEWHERE"} & set(names)


def test_lookup_child_environment_does_not_carry_a_resolved_key(
    lookup_script, tmp_path, monkeypatch
):
    seen = tmp_path / "values.txt"
    argv = lookup_script(f"""
        open({str(seen)!r}, "w").write("\\n".join(os.environ.values()))
        print("k" * 20)
        """)
    home_key = make_key()
    monkeypatch.setenv("HOME_KEY", home_key)
    resolve_key("WORK_KEY", routed(argv))
    assert_no_key_material(seen.read_text(), home_key)


# Secret.


def test_secret_repr_and_str_hide_the_key(canary_key):
    secret = Secret(canary_key)
    for text in (repr(secret), str(secret), f"{secret}", repr([secret])):
        assert_no_key_material(text, canary_key)


def test_secret_refuses_to_be_pickled(canary_key):
    with pytest.raises(TypeError):
        pickle.dumps(Secret(canary_key))


def test_secret_has_no_instance_dict(canary_key):
    assert not hasattr(Secret(canary_key), "__dict__")


def test_an_admin_key_env_resolves_by_the_same_steps_and_names_its_account(workdir, keys_json, canary_key):
    declaration = Declaration((Account("work", "WORK_KEY", 10**9, admin_key_env="WORK_ADMIN"),), "environment")
    keys_json({"WORK_ADMIN": canary_key})
    assert resolve_key("WORK_ADMIN", declaration, environ={}).reveal() == canary_key
    with pytest.raises(AccountsError) as info:
        resolve_key("WORK_ADMIN", declaration, environ={"WORK_ADMIN": ""})
    assert (info.value.code, info.value.account) == ("credential_invalid", "work")


def test_lookup_child_environment_holds_no_admin_key(lookup_script, tmp_path, canary_key):
    seen = tmp_path / "names.json"
    argv = lookup_script(f"""
        import json
        json.dump(sorted(os.environ), open({str(seen)!r}, "w"))
        print("k" * 20)
        """)
    declaration = Declaration(
        (Account("work", "WORK_KEY", 10**9, admin_key_env="ORG_ADMIN"),), "accounts.json", tuple(argv)
    )
    environ = {"PATH": os.environ.get("PATH", ""), "ORG_ADMIN": "an-admin-key-value", "UNRELATED": "kept"}
    resolve_key("WORK_KEY", declaration, environ=environ)
    names = json.loads(seen.read_text())
    assert "UNRELATED" in names and "ORG_ADMIN" not in names
