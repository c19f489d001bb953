"""Account declarations: validation, sources and precedence, accounts.json (design.md
"Environment" and "An account declaration"; ADR-0126 D1, Amendment 3)."""

import dataclasses
import json
import os
import stat
import traceback

import pytest
from conftest import assert_no_key_material

from llm_accounts.declarations import (
    Account,
    Declaration,
    load_declaration,
    parse_accounts,
    read_accounts_file,
    read_dotenv,
    save_accounts_file,
)
from llm_accounts.errors import AccountsError

GOOD = {"name": "work", "key_env": "WORK_KEY", "budget_usd": "12.50"}


def declare(**changes):
    item = dict(GOOD)
    for field, value in changes.items():
        if value is _DROP:
            item.pop(field)
        else:
            item[field] = value
    return json.dumps([item])


_DROP = object()


def assert_clean(error, key):
    """The error, its repr, its chain and its printed traceback hold no run of the key."""
    assert error.__cause__ is None
    assert error.__context__ is None
    for text in (str(error), repr(error), "".join(traceback.format_exception(error))):
        assert_no_key_material(text, key)


def refusal(value, key, source="environment"):
    with pytest.raises(AccountsError) as info:
        parse_accounts(value, source)
    error = info.value
    assert error.code == "declaration_invalid"
    assert "\n" not in str(error)
    assert_clean(error, key)
    return str(error)


# Each rule, with the canary pasted into the offending field.

CANARY_CASES = {
    "name breaks the name rule": (
        lambda k: declare(name=k.replace("sk-ant", "work")),
        "ANTHROPIC_ACCOUNTS[0].name",
        "lower-case",
    ),
    "name holds sk-ant in lower case": (
        lambda k: declare(name=k.lower()[:32]),
        "ANTHROPIC_ACCOUNTS[0].name",
        "looks like an API key",
    ),
    "name is not a string": (
        lambda k: declare(name=[k]),
        "ANTHROPIC_ACCOUNTS[0].name",
        "must be a string",
    ),
    "key_env holds a key": (
        lambda k: declare(key_env=k),
        "ANTHROPIC_ACCOUNTS[0].key_env",
        "looks like an API key",
    ),
    "key_env breaks the variable-name rule": (
        lambda k: declare(key_env=k.replace("sk-ant", "xx_yyy")),
        "ANTHROPIC_ACCOUNTS[0].key_env",
        "variable name",
    ),
    "budget_usd is not a decimal": (
        lambda k: declare(budget_usd=k),
        "ANTHROPIC_ACCOUNTS[0].budget_usd",
        "decimal",
    ),
    "daily_budget_usd is not a decimal": (
        lambda k: declare(daily_budget_usd=k),
        "ANTHROPIC_ACCOUNTS[0].daily_budget_usd",
        "decimal",
    ),
    "rank is a string": (lambda k: declare(rank=k), "ANTHROPIC_ACCOUNTS[0].rank", "whole number"),
    "weight is a string": (
        lambda k: declare(weight=k),
        "ANTHROPIC_ACCOUNTS[0].weight",
        "whole number",
    ),
    "models is a string": (
        lambda k: declare(models=k),
        "ANTHROPIC_ACCOUNTS[0].models",
        "list of model id",
    ),
    "a model id breaks the model rule": (
        lambda k: declare(models=["claude-sonnet-4-5", k]),
        "ANTHROPIC_ACCOUNTS[0].models[1]",
        "looks like an API key",
    ),
    "a model id has upper case": (
        lambda k: declare(models=[k.replace("sk-ant", "claude")]),
        "ANTHROPIC_ACCOUNTS[0].models[0]",
        "model id",
    ),
    "a client label holds a key": (
        lambda k: declare(clients={k: {"budget_usd": "1.00"}}),
        "ANTHROPIC_ACCOUNTS[0].clients.<entry 1>:",
        "looks like an API key",
    ),
    "a client label breaks the label rule": (
        lambda k: declare(clients={"ci": {"budget_usd": "1.00"}, k.replace("sk-ant", "xx"): {"budget_usd": "1"}}),
        "ANTHROPIC_ACCOUNTS[0].clients.<entry 2>:",
        "client label must be 1-64",
    ),
    "a client cap is not a decimal": (
        lambda k: declare(clients={"ci": {"budget_usd": k}}),
        "ANTHROPIC_ACCOUNTS[0].clients.<entry 1>.budget_usd",
        "decimal",
    ),
    "a client cap is a bare string": (
        lambda k: declare(clients={"ci": k}),
        "ANTHROPIC_ACCOUNTS[0].clients.<entry 1>:",
        "must be an object",
    ),
    "a client cap has an unknown field holding a key": (
        lambda k: declare(clients={"ci": {"budget_usd": "1", "key": k}}),
        "ANTHROPIC_ACCOUNTS[0].clients.<entry 1>:",
        "unknown field",
    ),
    "clients is a string": (
        lambda k: declare(clients=k),
        "ANTHROPIC_ACCOUNTS[0].clients:",
        "must be an object mapping client labels",
    ),
    "clients_only is a string": (
        lambda k: declare(clients={"ci": {"budget_usd": "1"}}, clients_only=k),
        "ANTHROPIC_ACCOUNTS[0].clients_only",
        "true or false",
    ),
    "an unknown field named like a key": (
        lambda k: json.dumps([{**GOOD, k: "1.00"}]),
        "ANTHROPIC_ACCOUNTS[0]",
        "unknown field",
    ),
    "an unknown field holding a key": (
        lambda k: json.dumps([{**GOOD, "api_key": k}]),
        "ANTHROPIC_ACCOUNTS[0]",
        "unknown field",
    ),
    "an item is a string": (
        lambda k: json.dumps([k]),
        "ANTHROPIC_ACCOUNTS[0]",
        "must be a JSON object",
    ),
    "the declaration is an object": (
        lambda k: json.dumps({"name": k}),
        "ANTHROPIC_ACCOUNTS",
        "JSON array",
    ),
    "the declaration is a bare key": (lambda k: k, "ANTHROPIC_ACCOUNTS", "not valid JSON"),
    "the JSON is malformed around a key": (
        lambda k: '[{"name": "work", "key_env": "' + k,
        "ANTHROPIC_ACCOUNTS",
        "not valid JSON (error on line 1)",
    ),
    "a field is repeated": (
        lambda k: '[{"name": "work", "name": "' + k + '", "key_env": "K", "budget_usd": "1"}]',
        "ANTHROPIC_ACCOUNTS",
        "repeats a field",
    ),
    "a duplicate name": (
        lambda k: json.dumps([GOOD, {**GOOD, "key_env": "OTHER_KEY"}]),
        "ANTHROPIC_ACCOUNTS[1].name",
        "names must be unique",
    ),
    "a duplicate key_env": (
        lambda k: json.dumps([GOOD, {**GOOD, "name": "home"}]),
        "ANTHROPIC_ACCOUNTS[1].key_env",
        "its own key",
    ),
    "a duplicate api_key_id": (
        lambda k: json.dumps([{**GOOD, "api_key_id": "apikey_01QzDuplicate"}, {"name": "home", "key_env": "HOME_KEY", "budget_usd": "1", "api_key_id": "apikey_01QzDuplicate"}]),
        "ANTHROPIC_ACCOUNTS[1].api_key_id",
        "one API key id belongs to one account",
    ),
    "dedicated_key is a string": (
        lambda k: declare(admin_key_env="WORK_ADMIN", api_key_id="apikey_01abc", dedicated_key=k),
        "ANTHROPIC_ACCOUNTS[0].dedicated_key",
        "true or false",
    ),
}


@pytest.mark.parametrize("case", sorted(CANARY_CASES))
def test_each_rule_refuses_without_repeating_the_value(case, canary_key):
    build, path, rule = CANARY_CASES[case]
    message = refusal(build(canary_key), canary_key)
    assert path in message
    assert rule in message


@pytest.mark.parametrize(
    "source, path",
    [
        (".env.local", "ANTHROPIC_ACCOUNTS[0].budget_usd in .env.local"),
        (".env", "ANTHROPIC_ACCOUNTS[0].budget_usd in .env"),
        ("accounts.json", "accounts[0].budget_usd in accounts.json"),
    ],
)
def test_errors_name_the_source(source, path, canary_key):
    assert path in refusal(declare(budget_usd=canary_key), canary_key, source)


@pytest.mark.parametrize(
    "source, path",
    [
        ("environment", "ANTHROPIC_ACCOUNTS[1]: must be"),
        ("accounts.json", "accounts[1] in accounts.json: must be"),
    ],
)
def test_errors_about_a_whole_item_name_its_index(source, path):
    assert path in refusal(json.dumps([GOOD, "x"]), "x" * 20, source)


def test_error_from_an_already_parsed_value_is_clean(canary_key):
    refusal([{**GOOD, "budget_usd": canary_key}], canary_key, "accounts.json")


# Money (design.md: decimal strings, > 0, at most 9 fractional digits, int64 nanodollars).


@pytest.mark.parametrize("value", [12.5, 12, True, False, None])
def test_budget_refuses_json_numbers_booleans_and_null(value):
    message = refusal(json.dumps([{**GOOD, "budget_usd": value}]), "x" * 20)
    assert "decimal string" in message


@pytest.mark.parametrize("value", ["0", "0.000000000", "-1.00", "1e3", "", " 1.00", "1.0000000001"])
def test_budget_refuses_zero_negative_and_malformed_decimals(value):
    message = refusal(declare(budget_usd=value), "x" * 20)
    assert "ANTHROPIC_ACCOUNTS[0].budget_usd" in message


def test_budget_takes_nine_fractional_digits_exactly():
    (account,) = parse_accounts(declare(budget_usd="0.000000001"), "environment")
    assert account.budget_nusd == 1


def test_budget_up_to_the_int64_nanodollar_bound_is_accepted():
    (account,) = parse_accounts(declare(budget_usd="9223372036.854775807"), "environment")
    assert account.budget_nusd == 2**63 - 1


def test_budget_past_the_int64_nanodollar_bound_is_refused():
    message = refusal(declare(budget_usd="9223372036.854775808"), "x" * 20)
    assert "64-bit" in message


def test_daily_budget_follows_the_same_rules():
    message = refusal(declare(daily_budget_usd=5), "x" * 20)
    assert "daily_budget_usd" in message


def test_daily_budget_null_is_refused():
    refusal(declare(daily_budget_usd=None), "x" * 20)


# Rank, weight, models, required fields.


@pytest.mark.parametrize("value", [-1, True, 1.5, "1"])
def test_rank_must_be_an_integer_of_at_least_zero(value):
    assert "ANTHROPIC_ACCOUNTS[0].rank" in refusal(declare(rank=value), "x" * 20)


@pytest.mark.parametrize("value", [0, -1, True, 2.0])
def test_weight_must_be_an_integer_of_at_least_one(value):
    assert "ANTHROPIC_ACCOUNTS[0].weight" in refusal(declare(weight=value), "x" * 20)


@pytest.mark.parametrize("value", [[], [1], ["claude-sonnet-4-5", "claude-sonnet-4-5"], None])
def test_models_must_be_a_non_empty_list_of_distinct_ids(value):
    assert "ANTHROPIC_ACCOUNTS[0].models" in refusal(declare(models=value), "x" * 20)


@pytest.mark.parametrize("field", ["name", "key_env", "budget_usd"])
def test_required_fields(field):
    message = refusal(declare(**{field: _DROP}), "x" * 20)
    assert f"ANTHROPIC_ACCOUNTS[0].{field}: is required" in message


def test_unknown_field_suggests_the_known_one():
    message = refusal(json.dumps([{**GOOD, "budget": "1.00"}]), "x" * 20)
    assert "did you mean budget_usd?" in message


def test_a_full_declaration_parses_to_accounts():
    text = json.dumps(
        [
            {
                **GOOD,
                "daily_budget_usd": "1.5",
                "rank": 2,
                "weight": 3,
                "models": ["claude-haiku-4-5"],
            },
            {"name": "home-2", "key_env": "_home", "budget_usd": "7"},
        ]
    )
    assert parse_accounts(text, "environment") == (
        Account("work", "WORK_KEY", 12_500_000_000, 1_500_000_000, 2, 3, ("claude-haiku-4-5",)),
        Account("home-2", "_home", 7_000_000_000),
    )


# Client caps and client lists (ADR-0055).


def test_client_caps_parse_to_sorted_label_and_nanodollar_pairs():
    (account,) = parse_accounts(
        declare(clients={"team/b": {"budget_usd": "2"}, "ci-bot": {"budget_usd": "0.000000001"}}, clients_only=True),
        "environment",
    )
    assert (account.clients, account.clients_only) == ((("ci-bot", 1), ("team/b", 2_000_000_000)), True)
    assert hash(account) == hash(dataclasses.replace(account))


def test_an_account_without_client_fields_has_no_caps_and_serves_every_client():
    (account,) = parse_accounts(declare(), "environment")
    assert (account.clients, account.clients_only) == ((), False)


@pytest.mark.parametrize("value", [5, True, None, "0", "-1.00", "1.0000000001", "9223372036.854775808"])
def test_a_client_cap_follows_the_money_rules(value):
    message = refusal(declare(clients={"ci": {"budget_usd": value}}), "x" * 20)
    assert "ANTHROPIC_ACCOUNTS[0].clients.<entry 1>.budget_usd" in message


def test_a_client_cap_needs_budget_usd():
    message = refusal(declare(clients={"ci": {}}), "x" * 20)
    assert "ANTHROPIC_ACCOUNTS[0].clients.<entry 1>.budget_usd: is required" in message


def test_clients_must_name_at_least_one_client():
    assert "ANTHROPIC_ACCOUNTS[0].clients: must name at least one client" in refusal(declare(clients={}), "x" * 20)


@pytest.mark.parametrize("value", [1, "true", None])
def test_clients_only_must_be_a_json_boolean(value):
    message = refusal(declare(clients={"ci": {"budget_usd": "1"}}, clients_only=value), "x" * 20)
    assert "ANTHROPIC_ACCOUNTS[0].clients_only: must be true or false" in message


def test_clients_only_without_clients_is_refused():
    message = refusal(declare(clients_only=True), "x" * 20)
    assert "ANTHROPIC_ACCOUNTS[0].clients_only: is true but no clients are listed" in message


def test_saved_client_caps_load_back_equal(user_path):
    account = Account("work", "WORK_KEY", 5_000_000_000, clients=(("a@b", 1), ("ci", 2_500_000_000)), clients_only=True)
    save_accounts_file([account], None)
    assert read_accounts_file()[0] == (account,)
    assert json.loads((user_path / "accounts.json").read_text())["accounts"][0]["clients"] == {
        "a@b": {"budget_usd": "0.000000001"},
        "ci": {"budget_usd": "2.50"},
    }


# Null, empty, [] (ADR-0126 D1: invalid configuration never means an empty pool).


@pytest.mark.parametrize("value", ["null", "", "   ", None, "{}", "42", '"[]"'])
def test_null_empty_and_non_arrays_are_errors_not_empty_pools(value):
    refusal(value, "x" * 20)


def test_an_empty_array_is_an_empty_pool():
    assert parse_accounts("[]", "environment") == ()


# Sources and precedence.


def write_file_declaration(user_path, accounts, lookup=None):
    data = {"accounts": accounts}
    if lookup is not None:
        data["lookup"] = lookup
    (user_path / "accounts.json").write_text(json.dumps(data))


def named(name):
    return {"name": name, "key_env": f"{name.upper()}_KEY", "budget_usd": "1.00"}


def names(declaration):
    return [a.name for a in declaration.accounts]


def test_nothing_declared_is_unrouted():
    declaration = load_declaration(environ={})
    assert declaration == Declaration((), None, None)
    assert not declaration.routed


def test_accounts_json_is_the_lowest_source(user_path):
    write_file_declaration(user_path, [named("filed")])
    declaration = load_declaration(environ={})
    assert (names(declaration), declaration.source, declaration.routed) == (
        ["filed"],
        "accounts.json",
        True,
    )


def test_dotenv_replaces_accounts_json_whole(user_path, tmp_path):
    write_file_declaration(user_path, [named("filed"), named("other")])
    (tmp_path / "work" / ".env").write_text(
        f"ANTHROPIC_ACCOUNTS='{json.dumps([named('dotenv')])}'\n"
    )
    declaration = load_declaration(environ={})
    assert (names(declaration), declaration.source) == (["dotenv"], ".env")


def test_dotenv_local_beats_dotenv(tmp_path):
    (tmp_path / "work" / ".env").write_text(
        f"ANTHROPIC_ACCOUNTS='{json.dumps([named('dotenv')])}'\n"
    )
    (tmp_path / "work" / ".env.local").write_text(
        f"ANTHROPIC_ACCOUNTS='{json.dumps([named('local')])}'\n"
    )
    declaration = load_declaration(environ={})
    assert (names(declaration), declaration.source) == (["local"], ".env.local")


def test_environment_beats_every_file(user_path, tmp_path):
    write_file_declaration(user_path, [named("filed")])
    (tmp_path / "work" / ".env").write_text(
        f"ANTHROPIC_ACCOUNTS='{json.dumps([named('dotenv')])}'\n"
    )
    (tmp_path / "work" / ".env.local").write_text(
        f"ANTHROPIC_ACCOUNTS='{json.dumps([named('local')])}'\n"
    )
    declaration = load_declaration(environ={"ANTHROPIC_ACCOUNTS": json.dumps([named("env")])})
    assert (names(declaration), declaration.source) == (["env"], "environment")


def test_load_declaration_reads_os_environ_by_default(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_ACCOUNTS", json.dumps([named("env")]))
    assert names(load_declaration()) == ["env"]


def test_an_empty_array_in_a_higher_source_makes_it_unrouted(user_path):
    write_file_declaration(user_path, [named("filed")])
    declaration = load_declaration(environ={"ANTHROPIC_ACCOUNTS": "[]"})
    assert (declaration.accounts, declaration.source, declaration.routed) == (
        (),
        "environment",
        False,
    )


def test_an_invalid_higher_source_is_an_error_not_a_fall_through(user_path):
    write_file_declaration(user_path, [named("filed")])
    with pytest.raises(AccountsError) as info:
        load_declaration(environ={"ANTHROPIC_ACCOUNTS": ""})
    assert info.value.code == "declaration_invalid"


def test_an_invalid_dotenv_declaration_is_an_error(user_path, tmp_path):
    write_file_declaration(user_path, [named("filed")])
    (tmp_path / "work" / ".env").write_text("ANTHROPIC_ACCOUNTS=null\n")
    with pytest.raises(AccountsError) as info:
        load_declaration(environ={})
    assert ".env" in str(info.value)


def test_dotenv_is_read_from_the_given_working_directory(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / ".env").write_text(f"ANTHROPIC_ACCOUNTS='{json.dumps([named('there')])}'\n")
    assert names(load_declaration(environ={})) == []
    assert names(load_declaration(environ={}, cwd=elsewhere)) == ["there"]


def test_the_lookup_command_comes_from_accounts_json_whatever_declares_accounts(user_path):
    write_file_declaration(user_path, [named("filed")], lookup=["pass", "show", "{name}"])
    declaration = load_declaration(environ={"ANTHROPIC_ACCOUNTS": json.dumps([named("env")])})
    assert declaration.lookup == ("pass", "show", "{name}")


def test_accounts_json_with_only_a_lookup_declares_no_accounts(user_path):
    (user_path / "accounts.json").write_text(json.dumps({"lookup": ["pass", "{name}"]}))
    declaration = load_declaration(environ={})
    assert (declaration.source, declaration.lookup) == (None, ("pass", "{name}"))


@pytest.mark.parametrize(
    "document, rule",
    [
        ("[]", "JSON object"),
        ('{"accounts": [], "extra": 1}', "unknown top-level field"),
        ('{"lookup": ["pass", "show"]}', "{name}"),
        ('{"lookup": []}', "non-empty list"),
        ('{"lookup": "pass {name}"}', "non-empty list"),
        ('{"lookup": ["pass", ""]}', "non-empty string"),
        ('{"accounts": null}', "null"),
    ],
)
def test_accounts_json_rules(user_path, document, rule):
    (user_path / "accounts.json").write_text(document)
    with pytest.raises(AccountsError) as info:
        load_declaration(environ={})
    assert info.value.code == "declaration_invalid"
    assert "accounts.json" in str(info.value)
    assert rule in str(info.value)


def test_a_malformed_accounts_json_holding_a_key_is_reported_cleanly(user_path, canary_key):
    (user_path / "accounts.json").write_text('{"accounts": [{"name": "' + canary_key + '", ')
    with pytest.raises(AccountsError) as info:
        load_declaration(environ={})
    assert_clean(info.value, canary_key)


def test_a_lookup_command_holding_a_key_is_refused(user_path, canary_key):
    (user_path / "accounts.json").write_text(json.dumps({"lookup": ["echo", canary_key, "{name}"]}))
    with pytest.raises(AccountsError) as info:
        load_declaration(environ={})
    assert "lookup[1]" in str(info.value)
    assert_clean(info.value, canary_key)


# read_dotenv: our own small parser, which never touches os.environ.


def write_dotenv(tmp_path, text):
    path = tmp_path / ".env"
    path.write_text(text)
    return path


def test_dotenv_forms(tmp_path):
    path = write_dotenv(
        tmp_path,
        "# comment\n"
        "\n"
        "PLAIN=value one  # trailing comment\n"
        "export EXPORTED=yes\n"
        "SINGLE='a \"literal\" # not a comment'\n"
        'DOUBLE="line\\nbreak \\"quoted\\""\n'
        "SPACED = padded \n"
        "HASH=a#b\n"
        "CRLF=value\r\n",
    )
    assert read_dotenv(path) == {
        "PLAIN": "value one",
        "EXPORTED": "yes",
        "SINGLE": 'a "literal" # not a comment',
        "DOUBLE": 'line\nbreak "quoted"',
        "SPACED": "padded",
        "HASH": "a#b",
        "CRLF": "value",
    }


def test_dotenv_single_quoted_value_may_span_lines(tmp_path):
    path = write_dotenv(tmp_path, 'ANTHROPIC_ACCOUNTS=\'[\n  {"name": "a"}\n]\'\nAFTER=1\n')
    assert read_dotenv(path) == {"ANTHROPIC_ACCOUNTS": '[\n  {"name": "a"}\n]', "AFTER": "1"}


def test_dotenv_empty_and_bare_names_are_present_and_empty(tmp_path):
    path = write_dotenv(tmp_path, "EMPTY=\nBARE\nQUOTED=''\n")
    assert read_dotenv(path) == {"EMPTY": "", "BARE": "", "QUOTED": ""}


def test_dotenv_later_lines_override_earlier_ones(tmp_path):
    assert read_dotenv(write_dotenv(tmp_path, "A=1\nA=2\n")) == {"A": "2"}


def test_dotenv_does_not_interpolate(tmp_path):
    assert read_dotenv(write_dotenv(tmp_path, "A=${HOME}\n")) == {"A": "${HOME}"}


def test_missing_dotenv_is_empty(tmp_path):
    assert read_dotenv(tmp_path / "absent.env") == {}


def test_dotenv_never_touches_os_environ(tmp_path):
    before = dict(os.environ)
    read_dotenv(write_dotenv(tmp_path, "LLM_ACCOUNTS_TEST_ONLY=1\n"))
    assert dict(os.environ) == before


def test_unclosed_quote_is_an_error_naming_file_and_line(tmp_path, canary_key):
    path = write_dotenv(tmp_path, f"A=1\nWORK_KEY='{canary_key}\nB=2\n")
    with pytest.raises(AccountsError) as info:
        read_dotenv(path)
    assert ".env line 2" in str(info.value)
    assert_clean(info.value, canary_key)


def test_a_line_without_equals_sign_is_an_error(tmp_path, canary_key):
    with pytest.raises(AccountsError) as info:
        read_dotenv(write_dotenv(tmp_path, f"WORK_KEY {canary_key}\n"))
    assert ".env line 1: expected NAME=value" in str(info.value)
    assert_clean(info.value, canary_key)


# save_accounts_file: validated, atomic, user-only.

ACCOUNT = Account(
    "work",
    "WORK_KEY",
    12_500_000_000,
    daily_budget_nusd=1,
    rank=1,
    weight=2,
    models=("claude-haiku-4-5",),
)


def test_saved_file_loads_back_to_the_same_declaration(user_path):
    save_accounts_file([ACCOUNT], ("pass", "show", "{name}"))
    assert load_declaration(environ={}) == Declaration(
        (ACCOUNT,), "accounts.json", ("pass", "show", "{name}")
    )


def test_saved_money_is_decimal_strings(user_path):
    save_accounts_file([ACCOUNT], None)
    (item,) = json.loads((user_path / "accounts.json").read_text())["accounts"]
    assert (item["budget_usd"], item["daily_budget_usd"]) == ("12.50", "0.000000001")


def test_saved_file_is_user_only(user_path):
    save_accounts_file([ACCOUNT], None)
    assert stat.S_IMODE((user_path / "accounts.json").stat().st_mode) == 0o600


def test_saved_file_stays_user_only_when_replaced(user_path):
    path = user_path / "accounts.json"
    path.write_text("{}")
    path.chmod(0o644)
    save_accounts_file([ACCOUNT], None)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_missing_user_directory_is_created_user_only(tmp_path, monkeypatch):
    directory = tmp_path / "new" / "llm"
    monkeypatch.setenv("LLM_USER_PATH", str(directory))
    save_accounts_file([ACCOUNT], None)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_save_leaves_no_temporary_file(user_path):
    save_accounts_file([ACCOUNT], None)
    save_accounts_file([], ("pass", "{name}"))
    assert sorted(p.name for p in user_path.iterdir()) == ["accounts.json"]


def test_save_validates_before_writing(user_path):
    save_accounts_file([ACCOUNT], None)
    before = (user_path / "accounts.json").read_text()
    with pytest.raises(AccountsError):
        save_accounts_file([ACCOUNT, Account("home", "WORK_KEY", 1)], None)
    assert (user_path / "accounts.json").read_text() == before


def test_saving_no_accounts_declares_none(user_path):
    save_accounts_file([], None)
    assert read_accounts_file() == (None, None)


# The organization's Admin API key and this key's id (docs/architecture.md "Settling from the provider").


def test_admin_key_env_and_api_key_id_are_optional_and_kept():
    [account] = parse_accounts(declare(admin_key_env="WORK_ADMIN_KEY", api_key_id="apikey_01Rj2N8SVvo6BePZj99NhmiT"), "environment")
    assert (account.admin_key_env, account.api_key_id) == ("WORK_ADMIN_KEY", "apikey_01Rj2N8SVvo6BePZj99NhmiT")
    [plain] = parse_accounts(declare(), "environment")
    assert (plain.admin_key_env, plain.api_key_id) == (None, None)


def test_admin_key_env_follows_the_key_env_rule_and_never_repeats_a_key(canary_key):
    message = refusal(declare(admin_key_env=canary_key), canary_key)
    assert "admin_key_env: looks like an API key" in message
    assert "admin_key_env: must be a variable name" in refusal(declare(admin_key_env="1BAD"), "x" * 20)


def test_api_key_id_must_be_shaped_like_an_id_and_is_never_a_key(canary_key):
    assert "api_key_id: must be an API key id" in refusal(declare(api_key_id=canary_key), canary_key)
    assert "api_key_id: must be an API key id" in refusal(declare(api_key_id="apikey_01 x"), "x" * 20)


def test_an_admin_key_env_may_not_name_an_accounts_key_env():
    text = json.dumps([{**GOOD, "admin_key_env": "WORK_KEY"}])
    assert "key_env: is also named as an admin_key_env" in refusal(text, "x" * 20)
    other = json.dumps([GOOD, {"name": "home", "key_env": "HOME_KEY", "budget_usd": "1", "admin_key_env": "WORK_KEY"}])
    assert "admin_key_env: names the key_env of account [0]" in refusal(other, "x" * 20)


def test_two_accounts_of_one_organization_may_share_its_admin_key():
    text = json.dumps([{**GOOD, "admin_key_env": "ORG_ADMIN"}, {"name": "home", "key_env": "HOME_KEY", "budget_usd": "1", "admin_key_env": "ORG_ADMIN"}])
    assert [a.admin_key_env for a in parse_accounts(text, "environment")] == ["ORG_ADMIN", "ORG_ADMIN"]


def test_accounts_json_round_trips_the_admin_fields(user_path):
    account = Account("work", "WORK_KEY", 10**9, admin_key_env="WORK_ADMIN", api_key_id="apikey_01abc")
    save_accounts_file([account], None)
    assert load_declaration().accounts == (account,)


# One API key id belongs to one account (docs/architecture.md "An account declaration"): two
# accounts settled from one key's usage would each take the same report row.

SHARED_ID = "apikey_01QzSharedMarker7"


@pytest.mark.parametrize(
    "first_admin, second_admin",
    [("ORG_ADMIN", "ORG_ADMIN"), ("ORG_A_ADMIN", "ORG_B_ADMIN"), (None, None), ("ORG_ADMIN", None)],
    ids=["one organization", "two organizations", "no admin key", "one admin key"],
)
def test_two_accounts_declaring_one_api_key_id_are_refused_whatever_their_admin_keys(first_admin, second_admin):
    first = {**GOOD, "api_key_id": SHARED_ID, **({"admin_key_env": first_admin} if first_admin else {})}
    second = {"name": "home", "key_env": "HOME_KEY", "budget_usd": "1", "api_key_id": SHARED_ID,
              **({"admin_key_env": second_admin} if second_admin else {})}
    message = refusal(json.dumps([first, second]), "x" * 20)
    assert message == (
        "declaration_invalid: ANTHROPIC_ACCOUNTS[1].api_key_id: repeats the api_key_id of account [0]; "
        "one API key id belongs to one account"
    )


def test_a_repeated_api_key_id_is_never_repeated_in_the_error():
    accounts = [{**GOOD, "api_key_id": SHARED_ID}, {"name": "home", "key_env": "HOME_KEY", "budget_usd": "1"},
                {"name": "play", "key_env": "PLAY_KEY", "budget_usd": "1", "api_key_id": SHARED_ID}]
    message = refusal(json.dumps(accounts), "x" * 20, source="accounts.json")
    assert message.startswith("declaration_invalid: accounts[2].api_key_id in accounts.json: repeats the api_key_id of account [0]")
    assert "QzSharedMarker7" not in message


def test_accounts_with_distinct_api_key_ids_of_one_organization_are_accepted():
    text = json.dumps([{**GOOD, "admin_key_env": "ORG_ADMIN", "api_key_id": "apikey_01work"},
                       {"name": "home", "key_env": "HOME_KEY", "budget_usd": "1", "admin_key_env": "ORG_ADMIN", "api_key_id": "apikey_01home"}])
    assert [a.api_key_id for a in parse_accounts(text, "environment")] == ["apikey_01work", "apikey_01home"]
