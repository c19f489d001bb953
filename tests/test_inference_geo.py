"""Inference geo (data residency): US-only inference bills every token category at the model's
multiplier (1.1x on Claude Opus 4.6, Sonnet 4.6 and later models), which ceilings cover and
settlement prices (docs/pricing.md "Inference geo (data residency)")."""

import copy
import json
import math
from fractions import Fraction

import llm
import pytest
from click.testing import CliRunner
from llm.cli import cli

from llm_accounts.errors import AccountsError
from llm_accounts.pricing import prices
from llm_accounts.pricing.prices import current_revision, geo_multiplier, quote, settlement_cost
from llm_accounts.provider import report as provider_report
from llm_accounts.wire import payload
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm migrates logs.db once per session)
from routed_helpers import attempts, llm_cli

SONNET_46 = "claude-sonnet-4-6"  # $3 in, $3.75 / $6 writes, $0.30 read, $15 out; us 1.1x
HAIKU_45 = "claude-haiku-4-5-20251001"  # released before Opus 4.6: no geo pricing
HAIKU_55 = "claude-haiku-5-5"  # $0.10 in, $0.50 out below 100K input; us 1.1x
CANARY = "canary-geo-5b1d-do-not-echo"
WEB_SEARCH_FEE = 10_000_000

# Claude 4.6 and later in the shipped revision, and the models before it.
GEO_PRICED = [
    "claude-opus-4-6", "claude-opus-4-7", "claude-opus-4-8", "claude-opus-5", "claude-opus-5-5",
    "claude-sonnet-4-6", "claude-sonnet-5", "claude-sonnet-5-5", "claude-haiku-5-5",
    "claude-fable-5", "claude-fable-5-1", "claude-mythos-5", "claude-mythos-5-1",
]
NOT_GEO_PRICED = [
    "claude-opus-4-5-20251101", "claude-opus-4-1-20250805", "claude-opus-4-20250514",
    "claude-sonnet-4-5-20250929", "claude-sonnet-4-20250514", "claude-3-7-sonnet-20250219",
    HAIKU_45, "claude-3-5-haiku-20241022", "claude-3-haiku-20240307",
]


def request(model=SONNET_46, max_tokens=4096, **fields):
    body = {"model": model, "max_tokens": max_tokens, "messages": [{"role": "user", "content": f"Hello {CANARY}"}]}
    body.update(fields)
    return payload.freeze(body)


def refusal(body, revision=None):
    with pytest.raises(AccountsError) as caught:
        quote(body, revision)
    assert caught.value.code == "unsupported_pricing"
    message = str(caught.value)
    assert CANARY not in message and CANARY not in repr(caught.value)
    return message


USER_REVISION = {
    "revision": "2026-12-09-geo",
    "applies_from": "2026-12-09",
    "models": [
        {
            "id": "claude-odd-7",
            "context_window": 1000,
            "max_output": 100,
            "status": "active",
            "rates": {"input": 7, "write_5m": 9, "write_1h": 14, "cache_read": 1, "output": 13},
            "inference_geo": {"us": "1.1", "eu": "1.25"},
        }
    ],
}


def user_revision(**model_fields):
    data = copy.deepcopy(USER_REVISION)
    data["models"][0].update(model_fields)
    return prices.revision_from_dict(data, prices.USER)


# The shipped revision -------------------------------------------------------------------------


@pytest.mark.parametrize("model_id", GEO_PRICED)
def test_every_claude_4_6_and_later_model_prices_us_at_exactly_1_1(model_id):
    assert current_revision().model(model_id).geo_multipliers == {"us": Fraction(11, 10)}


@pytest.mark.parametrize("model_id", NOT_GEO_PRICED)
def test_models_before_claude_4_6_have_no_geo_pricing(model_id):
    assert current_revision().model(model_id).geo_multipliers == {}


def test_the_shipped_revision_keeps_its_id_and_names_the_data_residency_page():
    revision = current_revision()
    assert revision.id == "anthropic-2026-11-29"
    assert "https://platform.claude.com/docs/en/manage-claude/data-residency" in revision.sources


# geo_multiplier ------------------------------------------------------------------------------------


def test_geo_multiplier_is_the_models_exact_fraction_for_a_priced_geo():
    assert geo_multiplier(current_revision().model(SONNET_46), "us") == Fraction(11, 10)


@pytest.mark.parametrize("geo", ["global", "not_available", None])
@pytest.mark.parametrize("model_id", [SONNET_46, HAIKU_45])
def test_geo_multiplier_of_the_standard_routing_is_one_on_every_model(model_id, geo):
    assert geo_multiplier(current_revision().model(model_id), geo) == 1


@pytest.mark.parametrize("model_id, geo", [(HAIKU_45, "us"), (SONNET_46, "eu"), (SONNET_46, 1), (SONNET_46, ["us"])])
def test_geo_multiplier_of_a_geo_the_model_does_not_price_is_none(model_id, geo):
    assert geo_multiplier(current_revision().model(model_id), geo) is None


# Settlement ------------------------------------------------------------------------------------


def test_us_usage_settles_at_exactly_1_1x_in_integer_nanodollars():
    usage = {"input_tokens": 1000, "output_tokens": 200, "inference_geo": "us"}
    cost = settlement_cost(usage, SONNET_46, request(), current_revision())
    assert cost == (1000 * 3000 + 200 * 15000) * 11 // 10 == 6_600_000
    assert type(cost) is int


def test_us_usage_multiplies_every_token_category():
    usage = {
        "input_tokens": 10, "output_tokens": 20, "cache_read_input_tokens": 30, "cache_creation_input_tokens": 70,
        "cache_creation": {"ephemeral_5m_input_tokens": 40, "ephemeral_1h_input_tokens": 30},
        "inference_geo": "us",
    }
    tokens = 10 * 3000 + 20 * 15000 + 30 * 300 + 40 * 3750 + 30 * 6000
    assert settlement_cost(usage, SONNET_46, request(), current_revision()) == tokens * 11 // 10
    assert tokens * 11 % 10 == 0


def test_us_usage_is_rounded_up_once_after_the_multiplier():
    # (3 x 7 + 1 x 13) x 1.1 = 37.4 -> 38; rounding each category up would give 24 + 15 = 39.
    usage = {"input_tokens": 3, "output_tokens": 1, "inference_geo": "us"}
    assert settlement_cost(usage, "claude-odd-7", None, user_revision()) == 38


def test_a_fractional_rate_and_the_multiplier_stay_exact_until_the_one_rounding():
    # 3 x 1/3 x 1.1 = 1.1 -> 2: no float ever rounds 1.1 down to 1.
    revision = user_revision(rates={"input": "1/3", "write_5m": 1, "write_1h": 1, "cache_read": 1, "output": 0})
    usage = {"input_tokens": 3, "output_tokens": 0, "inference_geo": "us"}
    assert settlement_cost(usage, "claude-odd-7", None, revision) == 2


def test_each_geo_a_user_price_lists_settles_at_its_own_multiplier():
    usage = {"input_tokens": 4, "output_tokens": 0, "inference_geo": "eu"}
    assert settlement_cost(usage, "claude-odd-7", None, user_revision()) == 35  # 28 x 1.25


@pytest.mark.parametrize("geo", ["global", "not_available", None, "absent"])
def test_the_standard_routing_settles_at_the_model_rates(geo):
    usage = {"input_tokens": 1000, "output_tokens": 200}
    if geo != "absent":
        usage["inference_geo"] = geo
    assert settlement_cost(usage, SONNET_46, request(), current_revision()) == 1000 * 3000 + 200 * 15000


@pytest.mark.parametrize("model_id, geo", [(HAIKU_45, "us"), (SONNET_46, "eu"), (SONNET_46, "US"), (SONNET_46, 7)])
def test_a_geo_the_model_does_not_price_keeps_the_attempt_open(model_id, geo):
    usage = {"input_tokens": 100, "output_tokens": 50, "inference_geo": geo}
    assert settlement_cost(usage, model_id, request(model=model_id), current_revision()) is None


def test_server_tool_fees_are_not_multiplied():
    usage = {"input_tokens": 1001, "output_tokens": 7, "server_tool_use": {"web_search_requests": 2}, "inference_geo": "us"}
    tokens = 1001 * 3000 + 7 * 15000
    expected = math.ceil(Fraction(tokens) * Fraction(11, 10)) + 2 * WEB_SEARCH_FEE
    assert settlement_cost(usage, SONNET_46, request(), current_revision()) == expected == 3_418_800 + 20_000_000


def test_a_usage_built_from_a_provider_report_row_settles_at_its_geo():
    # A usage report row (docs/architecture.md "Settling from the provider"), its counts as a
    # Messages usage, with the row's inference_geo; no request body is at hand.
    row = {
        "uncached_input_tokens": 500, "cache_read_input_tokens": 100, "output_tokens": 40,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 10},
        "server_tool_use": {"web_search_requests": 1}, "inference_geo": "us", "model": SONNET_46,
    }
    usage = provider_report.usage_of(row).as_message_usage(row["inference_geo"])
    tokens = 500 * 3000 + 100 * 300 + 10 * 6000 + 40 * 15000
    assert settlement_cost(usage, row["model"], None, "anthropic-2026-11-29") == tokens * 11 // 10 + WEB_SEARCH_FEE


# Ceilings --------------------------------------------------------------------------------------

SONNET_46_ONE_SAMPLING = 1_000_000 * 3000 + 4096 * 15000  # its window at the input rate (no cache mark) + max_tokens out
SONNET_46_ALL_WRITES = 1_000_000 * 6000 + 4096 * 15000  # at the 1h write rate: a server tool's samplings


def test_a_ceiling_without_the_field_covers_1_1x_on_a_4_6_model():
    assert quote(request()).ceiling_nusd == SONNET_46_ONE_SAMPLING * 11 // 10 == 3_367_584_000


def test_a_ceiling_with_global_pinned_is_1_0x():
    assert quote(request(inference_geo="global")).ceiling_nusd == SONNET_46_ONE_SAMPLING == 3_061_440_000


def test_a_ceiling_with_us_pinned_is_1_1x():
    assert quote(request(inference_geo="us")).ceiling_nusd == SONNET_46_ONE_SAMPLING * 11 // 10


def test_a_ceiling_on_a_model_without_geo_pricing_is_unchanged():
    assert quote(request(model=HAIKU_45, max_tokens=64_000)).ceiling_nusd == 200_000 * 1000 + 64_000 * 5000


def test_a_ceiling_covers_the_largest_multiplier_a_model_prices():
    revision = user_revision()
    # No cache mark: 1000 x 7 + 100 x 13 = 8,300 at 1.25 (eu, the largest) = 10,375.
    assert quote(request("claude-odd-7", 100), revision).ceiling_nusd == 10_375
    assert quote(request("claude-odd-7", 100, inference_geo="us"), revision).ceiling_nusd == 9_130
    assert quote(request("claude-odd-7", 100, inference_geo="global"), revision).ceiling_nusd == 8_300


@pytest.mark.parametrize("geo", ["us", "eu", "global", "not_available", None])
def test_the_worst_answer_at_any_geo_fits_the_unpinned_ceiling(geo):
    # A request with a one-hour mark: every input token written for an hour and max_tokens out,
    # the most it can bill.
    revision = user_revision()
    usage = {"input_tokens": 0, "output_tokens": 100, "cache_creation_input_tokens": 1000,
             "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 1000}, "inference_geo": geo}
    marked = request("claude-odd-7", 100, cache_control={"type": "ephemeral", "ttl": "1h"})
    ceiling = quote(marked, revision).ceiling_nusd
    assert ceiling == 19_125  # 1000 x 14 + 100 x 13 at 1.25
    assert settlement_cost(usage, "claude-odd-7", None, revision) <= ceiling


def test_a_server_tool_ceiling_multiplies_the_tokens_and_not_the_fees():
    tools = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 2}]
    samplings = 10 * SONNET_46_ALL_WRITES
    assert quote(request(tools=tools)).ceiling_nusd == samplings * 11 // 10 + 2 * WEB_SEARCH_FEE
    assert quote(request(tools=tools, inference_geo="global")).ceiling_nusd == samplings + 2 * WEB_SEARCH_FEE


def test_the_token_ceiling_is_not_multiplied():
    # Client token caps count billed tokens, which no geo changes.
    assert quote(request()).ceiling_tokens == quote(request(inference_geo="global")).ceiling_tokens == 1_004_096


# Refused before sending ------------------------------------------------------------------------


@pytest.mark.parametrize("geo", ["us", "global"])
def test_a_model_without_geo_pricing_refuses_inference_geo_before_sending(geo):
    message = refusal(request(model=HAIKU_45, inference_geo=geo))
    assert message.startswith("unsupported_pricing: inference_geo: claude-haiku-4-5-20251001 has no data-residency pricing")


@pytest.mark.parametrize("geo", [CANARY, "not_available", None, 1, ["us"]])
def test_a_geo_value_the_model_does_not_price_is_refused_without_repeating_it(geo):
    message = refusal(request(inference_geo=geo))
    assert message.startswith("unsupported_pricing: inference_geo: only 'global', 'us' are priced on claude-sonnet-4-6")


# The option --------------------------------------------------------------------------------------


def built(model_id, **options):
    model = llm.get_model(f"claude-routed/{model_id}")
    prompt = llm.Prompt("Hi", model=model, options=model.Options(**options))
    return payload.freeze(payload.build_body(prompt, model_id, stream=False, capabilities=model.capabilities))


def test_without_the_option_the_payload_bytes_are_what_they_were():
    assert built(HAIKU_45) == (
        b'{"model":"claude-haiku-4-5-20251001","max_tokens":32000,"messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}]}'
    )


@pytest.mark.parametrize("geo", ["us", "global"])
def test_the_option_puts_inference_geo_in_the_payload(geo):
    body = json.loads(built(SONNET_46, inference_geo=geo))
    assert body["inference_geo"] == geo
    assert json.loads(built(SONNET_46)) == {k: v for k, v in body.items() if k != "inference_geo"}


def test_an_option_value_other_than_us_or_global_is_refused_in_one_line(accounts, ledger_path):
    result = CliRunner().invoke(cli, ["-m", f"claude-routed/{SONNET_46}", "Hi", "-o", "inference_geo", CANARY])
    assert result.exit_code != 0
    assert "declaration_invalid: option inference_geo: must be one of: us, global" in result.output
    assert CANARY not in result.output
    assert accounts.requests == [] and attempts(ledger_path) == []


# End to end through the stand-in ----------------------------------------------------------------

HAIKU_55_ONE_SAMPLING = 1_000_000 * 500 + 32_000 * 2500  # upper tier input (reachable in its window), default max_tokens


def test_a_model_without_geo_pricing_refuses_the_option_before_anything_is_sent(accounts, ledger_path):
    result = llm_cli("-m", "claude-routed/claude-haiku-4-5", "Hi", "-o", "inference_geo", "us")
    assert result.exit_code != 0
    assert "unsupported_pricing: inference_geo: claude-haiku-4-5-20251001 has no data-residency pricing" in result.output
    assert accounts.requests == [] and attempts(ledger_path) == []


def test_a_routed_us_answer_settles_at_1_1x_under_a_1_1x_ceiling(accounts, ledger_path):
    for name in accounts.keys:
        accounts.set_behaviour(name, "ok", inference_geo="us")
    result = llm_cli("-m", f"claude-routed/{HAIKU_55}", "Say hello")
    assert result.exit_code == 0, result.output
    [row] = attempts(ledger_path)
    usage = accounts.requests[-1]["usage"]
    assert usage["inference_geo"] == "us" and not usage["cache_read_input_tokens"] and not usage["cache_creation_input_tokens"]
    tokens = usage["input_tokens"] * 100 + usage["output_tokens"] * 500
    assert (row["state"], row["outcome"]) == ("settled", "complete")
    assert row["cost_nusd"] == math.ceil(Fraction(tokens) * Fraction(11, 10))
    assert row["reserved_nusd"] == HAIKU_55_ONE_SAMPLING * 11 // 10  # reserved before sending
    assert "inference_geo" not in accounts.requests[-1]["body"]


def test_a_routed_prompt_pinning_global_sends_it_and_reserves_1_0x(accounts, ledger_path):
    result = llm_cli("-m", f"claude-routed/{HAIKU_55}", "Say hello", "-o", "inference_geo", "global")
    assert result.exit_code == 0, result.output
    [row] = attempts(ledger_path)
    assert accounts.requests[-1]["body"]["inference_geo"] == "global"
    assert row["reserved_nusd"] == HAIKU_55_ONE_SAMPLING  # reserved before sending
    usage = accounts.requests[-1]["usage"]
    assert row["cost_nusd"] == usage["input_tokens"] * 100 + usage["output_tokens"] * 500


# Your own price revisions -------------------------------------------------------------------------


def test_a_user_price_file_may_give_geo_multipliers():
    raw = json.dumps(USER_REVISION).encode()
    price = prices.parse_price_file(raw, prices.USER).model("claude-odd-7")
    assert price.geo_multipliers == {"eu": Fraction(5, 4), "us": Fraction(11, 10)}


@pytest.mark.parametrize(
    "geo, expected",
    [
        ({"us": "0.9"}, 'models[0].inference_geo.us: a multiplier must be a decimal string of at least 1, such as "1.1"'),
        ({"us": 1.1}, 'models[0].inference_geo.us: a multiplier must be a decimal string of at least 1'),
        ({"us": "1.1x"}, 'models[0].inference_geo.us: a multiplier must be a decimal string of at least 1'),
        ({"us": "1.0000000001"}, 'models[0].inference_geo.us: a multiplier must be a decimal string of at least 1'),
        ({"us": "11/10"}, 'models[0].inference_geo.us: a multiplier must be a decimal string of at least 1'),
        ({}, 'models[0].inference_geo: must be a non-empty object of geo to multiplier'),
        (["us"], 'models[0].inference_geo: must be a non-empty object of geo to multiplier'),
        ({"global": "1.1"}, "models[0].inference_geo.global: the standard routing is billed at the model's own rates"),
        ({CANARY.upper(): "1.1"}, "models[0].inference_geo: each name must be a geo such as us"),
    ],
)
def test_a_user_geo_multiplier_breaking_a_rule_is_refused_naming_the_field_and_the_rule(geo, expected):
    data = copy.deepcopy(USER_REVISION)
    data["models"][0]["inference_geo"] = geo
    with pytest.raises(prices.PriceFileError) as caught:
        prices.parse_price_file(json.dumps(data).encode(), prices.USER)
    assert str(caught.value).startswith(expected), str(caught.value)
    assert CANARY.upper() not in str(caught.value) and "0.9" not in str(caught.value)


def test_prices_add_refuses_a_multiplier_below_one_without_repeating_it(user_path, tmp_path):
    data = copy.deepcopy(USER_REVISION)
    data["models"][0]["inference_geo"] = {"us": "0.95"}
    path = tmp_path / "geo.json"
    path.write_text(json.dumps(data))
    result = CliRunner().invoke(cli, ["accounts", "prices", "add", str(path)])
    assert result.exit_code != 0
    assert "Error: declaration_invalid: FILE: models[0].inference_geo.us: a multiplier must be" in result.output
    assert "0.95" not in result.output


# llm accounts prices ---------------------------------------------------------------------------


def test_prices_json_gives_each_models_geo_multipliers_as_decimal_strings():
    result = CliRunner().invoke(cli, ["accounts", "prices", "--json"])
    models = {model["id"]: model for model in json.loads(result.output)["models"]}
    assert models[SONNET_46]["inference_geo"] == {"us": "1.1"}
    assert models[HAIKU_45]["inference_geo"] is None
    assert models[SONNET_46]["ceiling_nusd"] == 3_828_000_000  # $3.48 at standard rates, times 1.1
