"""Price revisions of the user's own (issue 24 point 1; docs/pricing.md "Your own price
revisions" and "Which price wins"): a model released after this plugin becomes routable once the
user declares its prices, with the same ceilings and settlement as a shipped one."""

import asyncio
import copy
import json
import math

import llm
import pytest
from click.testing import CliRunner
from llm.cli import cli

from conftest import assert_no_key_material, make_key
from llm_accounts import catalog
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.errors import AccountsError
from llm_accounts.pricing import price_book, prices, user_prices
from llm_accounts.money import NANO
from routed_helpers import attempts

NOVA = "claude-nova-6"  # a model no shipped revision knows
NOVA_RATES = {"input": 2000, "write_5m": 2500, "write_1h": 4000, "cache_read": 200, "output": 10000}
HAIKU = "claude-haiku-4-5-20251001"
REVISION = {
    "revision": "2026-12-05-mine",
    "applies_from": "2026-12-05",
    "sources": ["https://example.com/pricing"],
    "models": [
        {
            "id": NOVA,
            "display_name": "Claude Nova 6",
            "context_window": 400000,
            "max_output": 32000,
            "status": "active",
            "rates": NOVA_RATES,
        }
    ],
}


def revision_data(**changes):
    data = copy.deepcopy(REVISION)
    data.update(changes)
    return data


def write(path, data):
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def accounts_cli(*args):
    return CliRunner().invoke(cli, ["accounts", *args], catch_exceptions=False)


# The file format: as strict as the shipped revision ----------------------------------------


def test_a_user_revision_is_read_with_its_id_marked_as_the_users():
    revision = prices.parse_price_file(json.dumps(REVISION).encode(), prices.USER)
    assert revision.id == "user:2026-12-05-mine"
    assert revision.applies_from == "2026-12-05"
    assert revision.model(NOVA).rates == prices.Rates(**NOVA_RATES)


def _drop_rate(data):
    del data["models"][0]["rates"]["cache_read"]


def _float_rate(data):
    data["models"][0]["rates"]["output"] = 10.5


def _no_window(data):
    del data["models"][0]["context_window"]


def _no_max_output(data):
    del data["models"][0]["max_output"]


def _no_date(data):
    del data["applies_from"]


def _bad_date(data):
    data["applies_from"] = "2026-13-01"


def _unknown_top(data):
    data["overrides"] = True


def _unknown_model_field(data):
    data["models"][0]["price"] = 3


def _spaced_id(data):
    data["models"][0]["id"] = "claude nova"


def _override_not_bool(data):
    data["overrides_shipped"] = "yes"


def _same_name_twice(data):
    data["models"].append(copy.deepcopy(data["models"][0]))


@pytest.mark.parametrize(
    "break_it, expected",
    [
        (_drop_rate, "models[0].rates: needs exactly the rates input, write_5m, write_1h, cache_read, output"),
        (_float_rate, "models[0].rates.output: a rate must be a non-negative integer of nanodollars per token"),
        (_no_window, "models[0].context_window: required"),
        (_no_max_output, "models[0].max_output: required"),
        (_no_date, "applies_from: required"),
        (_bad_date, "applies_from: must be a date YYYY-MM-DD"),
        (_unknown_top, "top level: 1 unknown field(s); allowed: revision,"),
        (_unknown_model_field, "models[0]: 1 unknown field(s); allowed: id,"),
        (_spaced_id, "models[0].id: a model id is ASCII without spaces or '/'"),
        (_override_not_bool, "overrides_shipped: must be true or false"),
        (_same_name_twice, "models[1].id: the same model name as models[0]"),
    ],
)
def test_a_price_file_breaking_a_rule_is_refused_naming_the_field_and_the_rule(break_it, expected):
    data = revision_data()
    break_it(data)
    with pytest.raises(prices.PriceFileError) as caught:
        prices.parse_price_file(json.dumps(data).encode(), prices.USER)
    assert str(caught.value).startswith(expected), str(caught.value)


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b'{"revision": "a", "revision": "b"}', "a JSON object holds the same field twice"),
        (b'{"revision": ', "not valid JSON (Expecting value at line 1 column 14)"),
        (b"\xff", "the file is not UTF-8 text"),
        (b'{"models": [NaN]}', "not valid JSON (NaN and Infinity are not numbers)"),
    ],
)
def test_a_price_file_that_is_not_strict_json_is_refused(raw, expected):
    with pytest.raises(prices.PriceFileError) as caught:
        prices.parse_price_file(raw, prices.USER)
    assert str(caught.value) == expected


def test_a_refusal_never_echoes_what_the_file_holds():
    key = make_key()
    for data in (
        revision_data(**{key: 1}),
        revision_data(notes=[key]),
        revision_data(models=[{**REVISION["models"][0], "id": key}]),
        revision_data(models=[{**REVISION["models"][0], "rates": {**NOVA_RATES, "output": key}}]),
        revision_data(revision=key.lower()),
    ):
        with pytest.raises(prices.PriceFileError) as caught:
            prices.parse_price_file(json.dumps(data).encode(), prices.USER)
        assert_no_key_material(str(caught.value), key)


# Which price wins (docs/pricing.md "Which price wins") -------------------------------------


def user_revision(**changes):
    return prices.revision_from_dict(revision_data(**changes), prices.USER)


def haiku_override(applies_from, overrides):
    # The shipped model's window and maximum output: a user revision may not declare less
    # (tests/test_user_price_rules.py).
    model = {**REVISION["models"][0], "id": HAIKU, "aliases": ["claude-haiku-4-5"], "context_window": 200000, "max_output": 64000}
    return user_revision(revision="haiku-" + applies_from, applies_from=applies_from, overrides_shipped=overrides, models=[model])


def test_a_model_only_the_user_prices_is_priced_by_the_users_revision():
    book = price_book.build(prices.current_revision(), [user_revision()])
    assert book.model(NOVA).rates.output == 10000
    assert book.revision_of(NOVA).id == "user:2026-12-05-mine"
    assert book.revision_of(HAIKU) is book.shipped


@pytest.mark.parametrize(
    "applies_from, overrides",
    [("2026-12-05", False), ("2026-11-29", True), ("2026-01-01", True)],
)
def test_the_shipped_price_wins_unless_the_user_revision_is_newer_and_says_so(applies_from, overrides):
    shipped = prices.current_revision()
    book = price_book.build(shipped, [haiku_override(applies_from, overrides)])
    assert book.revision_of("claude-haiku-4-5") is shipped
    assert book.model(HAIKU) == shipped.model(HAIKU)
    [unused] = [entry for entry in book.entries if not entry.in_force and entry.revision.is_user]
    assert "the shipped revision anthropic-2026-11-29 prices it" in unused.note


def test_a_newer_user_revision_that_says_so_replaces_the_shipped_price_under_every_name():
    override = haiku_override("2026-12-05", True)
    book = price_book.build(prices.current_revision(), [override])
    for name in (HAIKU, "claude-haiku-4-5"):
        assert book.revision_of(name) is override
        assert book.model(name).rates.output == 10000


@pytest.mark.parametrize("shipped_name", [HAIKU, "claude-haiku-4-5"])
def test_a_user_alias_may_not_shadow_a_shipped_name_without_overrides_shipped(shipped_name):
    # Issue 33, point 6: the rule is on every name the file gives, its aliases too.
    shipped = prices.current_revision()
    sneaky = user_revision(models=[{**REVISION["models"][0], "aliases": [shipped_name]}])
    book = price_book.build(shipped, [sneaky])
    assert book.revision_of(shipped_name) is shipped
    assert book.model(shipped_name) == shipped.model(HAIKU)


@pytest.mark.parametrize("listed", [[HAIKU], ["claude-haiku-4-5"]])
def test_an_override_replaces_every_name_of_the_shipped_model_not_only_those_it_lists(listed):
    # docs/pricing.md "Which price wins", rule 3: an alias the file leaves out must not fall back
    # to the shipped price, nor to no price at all.
    model = {**REVISION["models"][0], "id": listed[0], "context_window": 200000, "max_output": 64000}
    override = user_revision(revision="haiku-one-name", applies_from="2026-12-05", overrides_shipped=True, models=[model])
    book = price_book.build(prices.current_revision(), [override])
    for name in (HAIKU, "claude-haiku-4-5"):
        assert book.revision_of(name) is override
        assert book.model(name).rates.output == 10000


def test_of_two_user_revisions_for_one_model_the_later_applies():
    earlier = user_revision(revision="early", applies_from="2026-12-01")
    later_model = {**REVISION["models"][0], "rates": {**NOVA_RATES, "output": 12000}}
    later = user_revision(revision="late", applies_from="2026-12-10", models=[later_model])
    book = price_book.build(prices.current_revision(), [later, earlier])
    assert book.revision_of(NOVA) is later
    assert book.model(NOVA).rates.output == 12000


def test_of_two_user_revisions_the_later_applies_from_wins_whatever_their_ids():
    # Ordered by applies_from first: the id only breaks a tie (docs/pricing.md "Which price wins").
    later_model = {**REVISION["models"][0], "rates": {**NOVA_RATES, "output": 12000}}
    later = user_revision(revision="a-later", applies_from="2026-12-10", models=[later_model])
    earlier = user_revision(revision="z-earlier", applies_from="2026-12-01")
    book = price_book.build(prices.current_revision(), [earlier, later])
    assert book.revision_of(NOVA) is later
    assert book.model(NOVA).rates.output == 12000


def test_a_model_only_the_user_prices_is_priced_before_its_revisions_date():
    # The wait for applies_from keeps a shipped price in force; a model nothing else prices has
    # no other price to keep, so its revision prices it already.
    book = price_book.build(prices.current_revision(), [user_revision()], today="2026-12-01")
    assert book.revision_of(NOVA).id == "user:2026-12-05-mine"


# The commands --------------------------------------------------------------------------------


def test_prices_add_copies_the_file_and_its_models_become_routable(user_path, tmp_path):
    source = write(tmp_path / "mine.json", REVISION)
    result = accounts_cli("prices", "add", str(source))
    assert result.exit_code == 0, result.output
    stored = user_path / "llm-accounts" / "prices" / "2026-12-05-mine.json"
    assert stored.read_bytes() == source.read_bytes()
    assert f"routable: claude-routed/{NOVA}" in result.output
    assert llm.get_model(f"claude-routed/{NOVA}").claude_model_id == NOVA


def test_prices_add_refuses_a_broken_file_and_keeps_what_was_there(user_path, tmp_path):
    good = write(tmp_path / "mine.json", REVISION)
    assert accounts_cli("prices", "add", str(good)).exit_code == 0
    broken = revision_data()
    _float_rate(broken)
    result = accounts_cli("prices", "add", "--replace", str(write(tmp_path / "broken.json", broken)))
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: declaration_invalid: FILE: models[0].rates.output: a rate must be a non-negative integer of "
        'nanodollars per token ($1 per million tokens is 1000) or a string fraction "n/d"; nothing was added'
    ]
    assert [p.name for p in user_prices.prices_dir().iterdir()] == ["2026-12-05-mine.json"]
    assert (user_prices.prices_dir() / "2026-12-05-mine.json").read_bytes() == good.read_bytes()


def test_prices_add_replaces_a_revision_of_the_same_id_only_with_replace(user_path, tmp_path):
    assert accounts_cli("prices", "add", str(write(tmp_path / "a.json", REVISION))).exit_code == 0
    dearer = revision_data(models=[{**REVISION["models"][0], "rates": {**NOVA_RATES, "output": 15000}}])
    again = write(tmp_path / "b.json", dearer)
    refused = accounts_cli("prices", "add", str(again))
    assert refused.exit_code == 1
    assert "price revision user:2026-12-05-mine already exists" in refused.output
    assert price_book.current().model(NOVA).rates.output == 10000
    assert accounts_cli("prices", "add", "--replace", str(again)).exit_code == 0
    assert price_book.current().model(NOVA).rates.output == 15000


def test_prices_remove_deletes_the_users_revision(user_path, tmp_path):
    assert accounts_cli("prices", "add", str(write(tmp_path / "a.json", REVISION))).exit_code == 0
    result = accounts_cli("prices", "remove", "user:2026-12-05-mine")
    assert result.exit_code == 0, result.output
    assert price_book.current().model(NOVA) is None
    missing = accounts_cli("prices", "remove", "user:2026-12-05-mine")
    assert missing.exit_code == 1
    assert "Error: not_found: ID: no price revision of yours has this id" in missing.output


def test_a_file_put_in_the_directory_by_hand_works_the_same(user_path):
    user_prices.prices_dir().mkdir(parents=True)
    write(user_prices.prices_dir() / "2026-12-05-mine.json", REVISION)
    assert llm.get_model(f"claude-routed/{NOVA}").claude_model_id == NOVA
    assert price_book.load_revision("user:2026-12-05-mine").model(NOVA).rates.input == 2000


def test_a_price_file_whose_name_is_not_its_revision_id_is_not_read(user_path, capsys):
    user_prices.prices_dir().mkdir(parents=True)
    write(user_prices.prices_dir() / "another-name.json", REVISION)
    revisions, [problem] = user_prices.load_user_revisions()
    assert revisions == []
    assert str(problem).endswith("another-name.json in " + str(user_prices.prices_dir()) + ": its name must be its revision id followed by .json")
    assert price_book.current().model(NOVA) is None


def test_a_dot_file_in_the_price_directory_is_a_copy_being_written_and_not_read(user_path):
    # ``prices add`` writes a temporary ``.<name>`` file and renames it: a half-written copy is
    # never a price, and no warning is said of it.
    user_prices.prices_dir().mkdir(parents=True)
    write(user_prices.prices_dir() / ".2026-12-05-mine.json", revision_data(revision=".2026-12-05-mine"))
    write(user_prices.prices_dir() / ".hidden.json", "{half")
    assert user_prices.load_user_revisions() == ([], [])


def test_a_broken_file_by_hand_is_not_used_and_said_once_while_the_others_are(user_path, capsys):
    user_prices.prices_dir().mkdir(parents=True)
    write(user_prices.prices_dir() / "2026-12-05-mine.json", REVISION)
    broken = revision_data(revision="broken")
    _no_window(broken)
    write(user_prices.prices_dir() / "broken.json", broken)
    book = price_book.current()
    assert book.model(NOVA) is not None
    assert [str(problem) for problem in book.problems] == [
        f"declaration_invalid: price file broken.json in {user_prices.prices_dir()}: models[0].context_window: required"
    ]
    price_book.current()
    assert capsys.readouterr().err.count("models[0].context_window: required") == 1


def test_prices_shows_where_each_price_came_from(user_path, tmp_path):
    assert accounts_cli("prices", "add", str(write(tmp_path / "a.json", REVISION))).exit_code == 0
    text = accounts_cli("prices").output
    [nova] = [line for line in text.splitlines() if line.startswith(NOVA)]
    assert nova.split()[6] == "user:2026-12-05-mine"
    assert "Price revision user:2026-12-05-mine (yours: " in text
    assert "  claude-haiku-4-5 -> claude-haiku-4-5-20251001" in text  # the aliases stay listed
    data = json.loads(accounts_cli("prices", "--json").output)
    by_id = {model["id"]: model for model in data["models"]}
    assert by_id[NOVA]["price_revision"] == "user:2026-12-05-mine"
    assert by_id[NOVA]["rates"]["output"] == "10.00"
    assert by_id[HAIKU]["price_revision"] == "anthropic-2026-11-29"
    assert [r["kind"] for r in data["revisions"]] == ["shipped", "user"]


def test_a_settled_attempts_revision_is_gone_once_removed(user_path, tmp_path):
    assert accounts_cli("prices", "add", str(write(tmp_path / "a.json", REVISION))).exit_code == 0
    assert accounts_cli("prices", "remove", "user:2026-12-05-mine").exit_code == 0
    with pytest.raises(AccountsError) as caught:
        price_book.load_revision("user:2026-12-05-mine")
    assert caught.value.code == "unsupported_pricing"


# Routed prompts on a model only the user prices, against the stand-in ----------------------


@pytest.fixture
def nova_account(user_path, ledger_path, monkeypatch):
    """Account ``alpha`` on a stand-in that also serves ``claude-nova-6``."""
    from llm_accounts.standin import StandIn

    key = make_key()
    (user_path / "keys.json").write_text(json.dumps({"ALPHA_KEY": key}))
    save_accounts_file([Account("alpha", "ALPHA_KEY", 20 * NANO)], None)
    config = {
        "keys": [{"label": "alpha", "key": key}],
        "models": [{"id": NOVA, "context_window": 400000, "max_output": 32000}],
    }
    with StandIn(config) as server:
        monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", server.base_url)
        server.key = key
        yield server


@pytest.fixture
def nova_priced(nova_account, user_path):
    user_prices.prices_dir().mkdir(parents=True)
    write(user_prices.prices_dir() / "2026-12-05-mine.json", REVISION)
    return nova_account


def user_rate_cost(usage):
    return math.ceil(
        usage["input_tokens"] * NOVA_RATES["input"]
        + (usage.get("cache_read_input_tokens") or 0) * NOVA_RATES["cache_read"]
        + (usage.get("cache_creation_input_tokens") or 0) * NOVA_RATES["write_5m"]
        + usage["output_tokens"] * NOVA_RATES["output"]
    )


def _prompt(mode):
    name = f"claude-routed/{NOVA}"
    if mode.startswith("async"):

        async def run():
            response = llm.get_async_model(name).prompt("Hello nova", stream=mode == "async stream")
            return await response.text()

        return asyncio.run(run())
    response = llm.get_model(name).prompt("Hello nova", stream=mode == "sync stream")
    return response.text()


@pytest.mark.parametrize("mode", ["sync stream", "sync whole", "async stream", "async whole"])
def test_a_routed_prompt_on_a_user_priced_model_settles_at_the_users_rates(nova_priced, ledger_path, mode):
    assert _prompt(mode)
    [row] = attempts(ledger_path)
    [sent] = [r for r in nova_priced.requests if r["path"] == "/v1/messages"]
    assert sent["model"] == NOVA and sent["stream"] == mode.endswith("stream")
    assert (row["state"], row["outcome"]) == ("settled", "complete")
    assert row["price_revision"] == "user:2026-12-05-mine"
    assert row["cost_nusd"] == user_rate_cost(sent["usage"])
    # The ceiling is the user's window at its dearest input rate plus the default max_tokens,
    # capped at the model's maximum output.
    reserved = row["reserved_nusd"] or row["ceiling_nusd"]  # a streamed answer shrank the hold
    assert reserved == 400000 * NOVA_RATES["input"] + 32000 * NOVA_RATES["output"]  # no cache mark: the input rate


def test_the_default_model_can_be_a_user_priced_one(nova_priced, ledger_path, monkeypatch):
    monkeypatch.setenv("LLM_ACCOUNTS_MODEL", NOVA)
    assert llm.get_model("claude-routed").prompt("Hello").text()
    [row] = attempts(ledger_path)
    assert (row["requested_model"], row["price_revision"]) == (NOVA, "user:2026-12-05-mine")


def test_without_a_price_the_model_is_not_routable(nova_account, ledger_path):
    with pytest.raises(KeyError):
        llm.get_model(f"claude-routed/{NOVA}")
    assert attempts(ledger_path) == []


def test_refresh_models_lists_served_models_no_revision_prices(nova_account, user_path, ledger_path):
    result = accounts_cli("refresh-models")
    assert result.exit_code == 0, result.output
    assert (
        f"Served but not priced by any price revision, so not routable: {NOVA} "
        "(add a price revision for them: llm accounts prices add FILE" in result.output
    )
    as_json = json.loads(accounts_cli("refresh-models", "--json").output)
    assert as_json["alpha"]["unpriced"] == [NOVA]
    user_prices.prices_dir().mkdir(parents=True)
    write(user_prices.prices_dir() / "2026-12-05-mine.json", REVISION)
    assert "not priced" not in accounts_cli("refresh-models").output
    assert json.loads(accounts_cli("refresh-models", "--json").output)["alpha"]["unpriced"] == []
    assert NOVA in catalog.load()["alpha"]["models"]
    # An account whose fetched list names the model takes its prompts.
    assert llm.get_model(f"claude-routed/{NOVA}").prompt("Hello").text()


def test_prices_add_refuses_a_file_holding_a_run_of_a_declared_key(nova_account, user_path, tmp_path):
    # A stretch from the middle of the key: no key prefix, only its runs show it.
    piece = nova_account.key[20:60]
    source = write(tmp_path / "pasted.json", revision_data(models=[{**REVISION["models"][0], "aliases": [piece]}]))
    result = accounts_cli("prices", "add", str(source))
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: declaration_invalid: FILE: models[0].aliases[0]: must not hold an API key "
        "(it holds a run of a declared key); nothing was added"
    )
    assert not user_prices.prices_dir().exists() or not any(user_prices.prices_dir().iterdir())
    assert_no_key_material(result.output, nova_account.key)


@pytest.mark.parametrize("field", ["provider", "unit"])
def test_prices_add_refuses_a_run_of_a_declared_key_in_any_string_it_would_copy(nova_account, user_path, tmp_path, field):
    # provider and unit are read but not kept in the revision; add copies the file's bytes whole.
    source = write(tmp_path / "pasted.json", revision_data(**{field: nova_account.key[20:60]}))
    result = accounts_cli("prices", "add", str(source))
    assert result.exit_code == 1
    assert result.output.strip() == (
        f"Error: declaration_invalid: FILE: {field}: must not hold an API key "
        "(it holds a run of a declared key); nothing was added"
    )
    assert not user_prices.prices_dir().exists() or not any(user_prices.prices_dir().iterdir())


def test_settling_from_the_provider_reads_the_users_revision_as_it_is_now(user_path, tmp_path):
    from llm_accounts.pricing import cache_savings
    from llm_accounts.provider import rules as provider_usage

    usage = {"input_tokens": 1000, "output_tokens": 100, "cache_read_input_tokens": 10}
    assert accounts_cli("prices", "add", str(write(tmp_path / "a.json", REVISION))).exit_code == 0
    assert provider_usage.price_with_revision(usage, NOVA, "user:2026-12-05-mine") == user_rate_cost(usage)
    assert cache_savings.saved_nusd(usage, NOVA, "user:2026-12-05-mine") == 10 * (2000 - 200)
    # Corrected, then removed: a later settlement never uses the copy read before.
    dearer = revision_data(models=[{**REVISION["models"][0], "rates": {**NOVA_RATES, "output": 15000}}])
    assert accounts_cli("prices", "add", "--replace", str(write(tmp_path / "b.json", dearer))).exit_code == 0
    assert provider_usage.price_with_revision(usage, NOVA, "user:2026-12-05-mine") == user_rate_cost(usage) + 100 * 5000
    assert accounts_cli("prices", "remove", "user:2026-12-05-mine").exit_code == 0
    assert provider_usage.price_with_revision(usage, NOVA, "user:2026-12-05-mine") is None
    assert cache_savings.saved_nusd(usage, NOVA, "user:2026-12-05-mine") == 0


def test_a_quote_through_the_book_records_the_revision_whose_price_is_in_force():
    from llm_accounts.wire.payload import freeze

    override = haiku_override("2026-12-05", True)
    book = price_book.build(prices.current_revision(), [override, user_revision()])
    for model, expected in ((HAIKU, override.id), (NOVA, "user:2026-12-05-mine"), ("claude-opus-4-6", "anthropic-2026-11-29")):
        body = freeze({"model": model, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
        assert prices.quote(body, book).price_revision == expected
        assert prices.quote(body, book.revision_for_body(body)).price_revision == expected


def test_an_unpriced_model_is_refused_with_the_way_to_price_it(user_path):
    from llm_accounts.wire.payload import freeze

    body = freeze({"model": NOVA, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
    with pytest.raises(AccountsError) as caught:
        prices.quote(body, price_book.current())
    assert caught.value.code == "unsupported_pricing"
    assert "or give its prices with 'llm accounts prices add FILE'" in caught.value.message


def test_a_prompt_on_a_user_priced_model_can_be_counted(nova_priced, ledger_path):
    assert llm.get_model(f"claude-routed/{NOVA}").count_tokens("Hello nova") > 0
    [sent] = [r for r in nova_priced.requests if r["path"] == "/v1/messages/count_tokens"]
    assert sent["model"] == NOVA
    assert attempts(ledger_path) == []


# A revision whose date is still to come (docs/pricing.md "Which price wins") ---------------------


def _haiku_override_in(user_path, applies_from):
    model = {**REVISION["models"][0], "id": HAIKU, "aliases": ["claude-haiku-4-5"], "context_window": 200000, "max_output": 64000,
             "rates": {name: 1 for name in NOVA_RATES}}
    user_prices.prices_dir().mkdir(parents=True)
    data = revision_data(revision="haiku-cut", applies_from=applies_from, overrides_shipped=True, models=[model])
    write(user_prices.prices_dir() / "haiku-cut.json", data)


def test_an_override_dated_after_today_does_not_price_prompts_yet(nova_account, user_path, ledger_path, monkeypatch):
    import datetime

    from llm_accounts import clock

    monkeypatch.setattr(clock, "now", lambda: datetime.datetime(2026, 12, 4, 23, 59, 59, tzinfo=datetime.timezone.utc))
    _haiku_override_in(user_path, "2026-12-05")
    assert llm.get_model("claude-routed/claude-haiku-4-5").prompt("Hello").text()
    [row] = attempts(ledger_path)
    assert row["price_revision"] == prices.current_revision().id
    [unused] = [entry for entry in price_book.current().entries if entry.revision.is_user]
    assert not unused.in_force and "applies from 2026-12-05" in unused.note


def test_an_override_applies_from_its_own_date(nova_account, user_path, ledger_path, monkeypatch):
    import datetime

    from llm_accounts import clock

    monkeypatch.setattr(clock, "now", lambda: datetime.datetime(2026, 12, 5, 0, 0, tzinfo=datetime.timezone.utc))
    _haiku_override_in(user_path, "2026-12-05")
    assert llm.get_model("claude-routed/claude-haiku-4-5").prompt("Hello").text()
    [row] = attempts(ledger_path)
    assert row["price_revision"] == "user:haiku-cut"
