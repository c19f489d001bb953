"""Price revisions, ceilings and settlement (ADR-0126 D5, issue 4 "Pricing")."""

import hashlib
import json
from fractions import Fraction

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from llm_accounts.cli import accounts
from llm_accounts.errors import AccountsError
from llm_accounts.pricing.prices import (
    ModelPrice,
    Rates,
    Revision,
    current_revision,
    load_revision,
    quote,
    revision_from_dict,
    settlement_cost,
)

REVISION = "anthropic-2026-11-29"
SONNET_45 = "claude-sonnet-4-5-20250929"
CANARY = "canary-prompt-7f3a9c-do-not-echo"


def request(**fields):
    body = {
        "model": SONNET_45,
        "max_tokens": 1000,
        "messages": [{"role": "user", "content": f"Hello {CANARY}"}],
    }
    body.update(fields)
    return json.dumps({k: v for k, v in body.items() if v is not None}).encode()


def refusal(body):
    with pytest.raises(AccountsError) as caught:
        quote(body)
    assert caught.value.code == "unsupported_pricing"
    message = str(caught.value)
    assert CANARY not in message and CANARY not in repr(caught.value)
    return message


def usage(**fields):
    base = {"input_tokens": 100, "output_tokens": 50}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


def tiny_revision(**rates):
    """A one-model revision with fractional rates, to see rounding."""
    values = dict(input=Fraction(1, 3), write_5m=Fraction(1, 3), write_1h=Fraction(1, 3), cache_read=Fraction(1, 3), output=Fraction(1, 7))
    values.update(rates)
    price = ModelPrice("tiny", (), "Tiny", 10, 5, "active", Rates(**values), None)
    return Revision("test-rev", "2026-01-01", (), {"tiny": price})


# The shipped revision --------------------------------------------------------------------------


def test_current_revision_is_the_dated_sourced_shipped_file():
    revision = current_revision()
    assert revision.id == REVISION
    assert revision.read_on == "2026-11-29"
    assert "https://platform.claude.com/docs/en/about-claude/pricing" in revision.sources


@pytest.mark.parametrize(
    "model_id",
    [
        "claude-opus-4-6", "claude-opus-4-5-20251101", "claude-opus-4-1-20250805", "claude-opus-4-20250514",
        "claude-sonnet-4-6", SONNET_45, "claude-sonnet-4-20250514", "claude-3-7-sonnet-20250219",
        "claude-haiku-4-5-20251001", "claude-3-5-haiku-20241022", "claude-3-haiku-20240307",
        "claude-opus-4-7", "claude-opus-4-8", "claude-opus-5", "claude-opus-5-5", "claude-sonnet-5",
        "claude-sonnet-5-5", "claude-haiku-5-5", "claude-fable-5", "claude-fable-5-1",
        "claude-mythos-5", "claude-mythos-5-1",
    ],
)
def test_every_claude_model_in_the_reference_is_priced(model_id):
    assert current_revision().model(model_id).id == model_id


@pytest.mark.parametrize(
    "model_id, rates",
    [
        (SONNET_45, (3000, 3750, 6000, 300, 15000)),
        ("claude-opus-4-1-20250805", (15000, 18750, 30000, 1500, 75000)),
        ("claude-3-5-haiku-20241022", (800, 1000, 1600, 80, 4000)),
        ("claude-3-haiku-20240307", (250, 300, 500, 30, 1250)),
        ("claude-opus-5-5", (4000, 5000, 8000, 200, 20000)),
        ("claude-haiku-5-5", (100, 125, 200, 10, 500)),
        ("claude-fable-5-1", (10000, 12500, 20000, 250, 50000)),
    ],
)
def test_rates_are_integer_nanodollars_per_token(model_id, rates):
    price = current_revision().model(model_id).rates
    assert (price.input, price.write_5m, price.write_1h, price.cache_read, price.output) == rates
    assert all(type(rate) is int for rate in rates)


def test_sonnet_4_and_4_5_have_the_200k_long_context_tier():
    for model_id in (SONNET_45, "claude-sonnet-4-20250514"):
        threshold, rates = current_revision().model(model_id).long_context
        assert threshold == 200_000
        assert (rates.input, rates.write_5m, rates.write_1h, rates.cache_read, rates.output) == (6000, 7500, 12000, 600, 22500)


def test_4_6_models_have_1m_context_at_standard_pricing():
    for model_id in ("claude-opus-4-6", "claude-sonnet-4-6"):
        price = current_revision().model(model_id)
        assert price.context_window == 1_000_000
        assert price.long_context is None


def test_haiku_5_5_has_the_100k_whole_request_tier():
    threshold, rates = current_revision().model("claude-haiku-5-5").long_context
    assert threshold == 100_000
    assert (rates.input, rates.write_5m, rates.write_1h, rates.cache_read, rates.output) == (500, 625, 1000, 50, 2500)


def test_fable_5_2_is_not_priced_and_the_notes_say_why():
    revision = current_revision()
    assert revision.model("claude-fable-5-2") is None
    assert any("Fable 5.2" in note for note in revision.notes)


@pytest.mark.parametrize(
    "model_id, status",
    [
        ("claude-3-7-sonnet-20250219", "retired"),
        ("claude-3-5-haiku-20241022", "retired"),
        ("claude-3-haiku-20240307", "retired"),
        ("claude-sonnet-4-20250514", "retired"),
        ("claude-opus-4-20250514", "retired"),
        ("claude-opus-4-1-20250805", "retired"),
        (SONNET_45, "deprecated"),
        ("claude-opus-4-5-20251101", "deprecated"),
        ("claude-haiku-4-5-20251001", "active"),
    ],
)
def test_lifecycle_status(model_id, status):
    assert current_revision().model(model_id).status == status


def test_alias_resolves_to_its_model():
    assert current_revision().model("claude-sonnet-4-5").id == SONNET_45
    assert current_revision().model("claude-4-opus-20250514").id == "claude-opus-4-20250514"


@pytest.mark.parametrize(
    "name",
    ["claude-sonnet-4", "claude-sonnet", "sonnet", "claude-sonnet-4-5-2025", "CLAUDE-SONNET-4-5", " claude-sonnet-4-5", "claude-sonnet-4-5 ", None, 4],
)
def test_model_lookup_never_matches_by_substring_or_case(name):
    assert current_revision().model(name) is None


def test_load_revision_by_id_is_the_shipped_revision():
    assert load_revision(REVISION) == current_revision()


@pytest.mark.parametrize("revision_id", ["anthropic-1999-01-01", "../prices/anthropic-2026-11-29", "", "Anthropic"])
def test_load_revision_refuses_an_unshipped_or_malformed_id(revision_id):
    with pytest.raises(AccountsError) as caught:
        load_revision(revision_id)
    assert caught.value.code == "unsupported_pricing"


def test_revision_data_accepts_a_fraction_string_rate():
    data = {
        "revision": "test-rev",
        "read_on": "2026-01-01",
        "models": [
            {"id": "m", "context_window": 10, "max_output": 5, "status": "active",
             "rates": {"input": "125/2", "write_5m": "4/2", "write_1h": 3, "cache_read": 0, "output": 7}}
        ],
    }
    rates = revision_from_dict(data).model("m").rates
    assert rates.input == Fraction(125, 2)
    assert rates.write_5m == 2 and type(rates.write_5m) is int


@pytest.mark.parametrize("bad", [-1, 1.5, True, "1.5", "1/0", None])
def test_revision_data_refuses_a_rate_that_is_not_exact(bad):
    data = {
        "revision": "test-rev",
        "models": [
            {"id": "m", "context_window": 10, "max_output": 5, "status": "active",
             "rates": {"input": bad, "write_5m": 1, "write_1h": 1, "cache_read": 1, "output": 1}}
        ],
    }
    with pytest.raises(ValueError):
        revision_from_dict(data)


def test_revision_refuses_a_name_listed_twice():
    rates = Rates(1, 1, 1, 1, 1)
    a = ModelPrice("a", ("shared",), "A", 10, 5, "active", rates)
    b = ModelPrice("b", ("shared",), "B", 10, 5, "active", rates)
    with pytest.raises(ValueError):
        Revision("test-rev", "2026-01-01", (), {"a": a, "b": b})


# Ceilings --------------------------------------------------------------------------------------


def test_ceiling_for_sonnet_4_5_by_hand():
    # Imax 200,000 at the input rate $3/MTok (no cache mark, so no cache write can be billed)
    # + 1,000 output at $15/MTok; the >200K tier cannot apply to a 200K window.
    assert quote(request(max_tokens=1000)).ceiling_nusd == 200_000 * 3000 + 1000 * 15000 == 615_000_000


def marked(mark, where="system"):
    """A request whose system block, or the request itself (automatic caching), carries ``mark``."""
    block = {"type": "text", "text": "You are terse.", "cache_control": mark}
    if where == "system":
        return request(max_tokens=1000, system=[block])
    return request(max_tokens=1000, cache_control=mark)


def test_a_five_minute_mark_prices_the_window_at_the_five_minute_write_rate():
    assert quote(marked({"type": "ephemeral"})).ceiling_nusd == 200_000 * 3750 + 1000 * 15000


def test_a_one_hour_mark_prices_the_window_at_the_one_hour_write_rate():
    assert quote(marked({"type": "ephemeral", "ttl": "1h"})).ceiling_nusd == 200_000 * 6000 + 1000 * 15000


def test_automatic_caching_is_a_mark_at_its_ttl():
    assert quote(marked({"type": "ephemeral"}, where="request")).ceiling_nusd == 200_000 * 3750 + 1000 * 15000
    hour = marked({"type": "ephemeral", "ttl": "1h"}, where="request")
    assert quote(hour).ceiling_nusd == 200_000 * 6000 + 1000 * 15000


def test_a_mark_nested_in_a_tool_result_counts():
    content = [
        {"type": "tool_result", "tool_use_id": "toolu_1",
         "content": [{"type": "text", "text": "42", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]},
    ]
    body = request(max_tokens=1000, messages=[{"role": "user", "content": content}])
    assert quote(body).ceiling_nusd == 200_000 * 6000 + 1000 * 15000


def test_the_dearest_mark_decides_when_a_request_mixes_ttls():
    system = [
        {"type": "text", "text": "one", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        {"type": "text", "text": "two", "cache_control": {"type": "ephemeral"}},
    ]
    assert quote(request(max_tokens=1000, system=system)).ceiling_nusd == 200_000 * 6000 + 1000 * 15000


def test_ceiling_for_opus_4_6_by_hand():
    # Its workspace may default to US-only inference, billed 1.1x (docs/pricing.md "Inference
    # geo (data residency)"): a request that pins no geo is reserved at 1.1x.
    body = request(model="claude-opus-4-6", max_tokens=128_000)
    assert quote(body).ceiling_nusd == (1_000_000 * 5_000 + 128_000 * 25_000) * 11 // 10 == 9_020_000_000


def test_ceiling_for_haiku_5_5_uses_the_upper_tier_its_window_can_reach():
    body = request(model="claude-haiku-5-5", max_tokens=2000)
    # Above 100K input every token is billed at the upper tier: $0.50 input, $2.50 output.
    assert quote(body).ceiling_nusd == (1_000_000 * 500 + 2000 * 2500) * 11 // 10 == 555_500_000


MARKS = {
    "none": (),
    "5m": ({"type": "ephemeral"},),
    "1h": ({"type": "ephemeral", "ttl": "1h"},),
    "both": ({"type": "ephemeral", "ttl": "1h"}, {"type": "ephemeral"}),
}


@given(
    marks=st.sampled_from(sorted(MARKS)),
    model=st.sampled_from(["claude-sonnet-4-5-20250929", "claude-haiku-5-5", "claude-sonnet-4-6"]),
    shares=st.lists(st.integers(0, 1000), min_size=4, max_size=4),
    filled=st.integers(0, 1000),
    max_tokens=st.integers(1, 64_000),
    output=st.integers(0, 64_000),
    geo=st.sampled_from([None, "global", "us"]),
)
def test_no_usage_a_request_can_be_billed_costs_more_than_its_ceiling(marks, model, shares, filled, max_tokens, output, geo):
    """Any input up to the window, split over fresh, read and the writes of the TTLs the request
    marks, with any output up to max_tokens, at any geo the model prices: the ceiling covers it."""
    system = [{"type": "text", "text": f"block {i}", "cache_control": mark} for i, mark in enumerate(MARKS[marks])]
    body = request(model=model, max_tokens=max_tokens, **({"system": system} if system else {}))
    ceiling = quote(body).ceiling_nusd
    price = current_revision().model(model)
    total = price.context_window * filled // 1000
    ttls = {mark.get("ttl", "5m") for mark in MARKS[marks]}
    weights = [shares[0], shares[1], shares[2] if "5m" in ttls else 0, shares[3] if "1h" in ttls else 0]
    parts = [total * w // (sum(weights) or 1) for w in weights]
    parts[0] += total - sum(parts)  # fresh takes the rounding
    fresh, read, w5, w1h = parts
    usage = {
        "input_tokens": fresh, "cache_read_input_tokens": read, "cache_creation_input_tokens": w5 + w1h,
        "cache_creation": {"ephemeral_5m_input_tokens": w5, "ephemeral_1h_input_tokens": w1h},
        "output_tokens": min(output, max_tokens), "inference_geo": geo if price.geo_multipliers or geo != "us" else None,
    }
    assert settlement_cost(usage, model, body, None) <= ceiling


def test_ceiling_rounds_up_fractional_rates():
    body = request(model="tiny", max_tokens=1)
    # 10 * 1/3 + 1 * 1/7 = 73/21 = 3.47...
    assert quote(body, tiny_revision()).ceiling_nusd == 4


def test_ceiling_is_exact_when_the_sum_is_whole():
    body = request(model="tiny", max_tokens=2)
    # 10 * 1/3 + 2 * 1/3 = 4 exactly: ceil does not add a nanodollar to a whole sum.
    assert quote(body, tiny_revision(output=Fraction(1, 3))).ceiling_nusd == 4


def test_quote_by_alias_has_the_same_ceiling_and_keeps_the_requested_name():
    by_alias = quote(request(model="claude-sonnet-4-5"))
    assert by_alias.ceiling_nusd == quote(request()).ceiling_nusd
    assert by_alias.requested_model == "claude-sonnet-4-5"


def test_quote_names_the_revision_and_digests_the_exact_bytes():
    body = request()
    result = quote(body)
    assert result.price_revision == REVISION
    assert result.request_digest == hashlib.sha256(body).hexdigest()
    assert quote(body + b" ").request_digest != result.request_digest


def test_quote_takes_bytes_only():
    with pytest.raises(TypeError):
        quote(request().decode())


def test_max_tokens_equal_to_the_model_maximum_is_accepted():
    assert quote(request(max_tokens=64_000)).ceiling_nusd == 200_000 * 3000 + 64_000 * 15000


@pytest.mark.parametrize("max_tokens", [None, 0, -1, True, 1.0, "1000", 64_001])
def test_max_tokens_missing_not_positive_integer_or_above_the_model_maximum_is_refused(max_tokens):
    message = refusal(request(max_tokens=max_tokens))
    assert "max_tokens" in message


def test_unpriced_model_is_refused_without_echoing_it():
    message = refusal(request(model=f"claude-{CANARY}"))
    assert message.startswith("unsupported_pricing: model:")


@pytest.mark.parametrize("model_id", ["claude-3-5-haiku-20241022", "claude-3-5-haiku-latest", "claude-sonnet-4-0"])
def test_retired_model_is_refused(model_id):
    assert "retired" in refusal(request(model=model_id))


def test_deprecated_model_is_still_quoted():
    assert quote(request(model="claude-opus-4-5")).ceiling_nusd > 0


def _image(source):
    return {"role": "user", "content": [{"type": "text", "text": CANARY}, {"type": "image", "source": source}]}


UNPRICED = {
    "server tool": dict(tools=[{"type": "web_search_20250305", "name": CANARY}]),
    "mcp_servers": dict(mcp_servers=[{"type": "url", "url": f"https://{CANARY}"}]),
    "container": dict(container=CANARY),
    "context_management": dict(context_management={"edits": [CANARY]}),
    "speed": dict(speed="fast"),
    "inference_geo": dict(inference_geo="us"),  # on Sonnet 4.5, which has no geo pricing
    "priority tier": dict(service_tier="priority"),
    "batch tier": dict(service_tier="batch"),
    "batch request": dict(requests=[{"custom_id": CANARY}]),
    "unknown field": {CANARY: True},
    "image file": dict(messages=[_image({"type": "file", "file_id": CANARY})]),
    "document file": dict(messages=[{"role": "user", "content": [{"type": "document", "source": {"type": "file", "file_id": CANARY}}]}]),
    "nested file": dict(messages=[{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {"type": "file", "file_id": CANARY}}]}]}]),
    "mcp block": dict(messages=[{"role": "assistant", "content": [{"type": "mcp_tool_use", "id": CANARY}]}]),
    "unbounded server tool": dict(tools=[{"type": "code_execution_20250825", "name": CANARY}]),
    "server tool version": dict(tools=[{"type": f"web_search_{CANARY}", "name": CANARY, "max_uses": 1}]),
    "cache ttl": dict(system=[{"type": "text", "text": CANARY, "cache_control": {"type": "ephemeral", "ttl": "24h"}}]),
    "top-level cache ttl": dict(cache_control={"type": "ephemeral", "ttl": CANARY}),
    "non-object body": None,
}


@pytest.mark.parametrize("feature", sorted(UNPRICED))
def test_each_unpriced_feature_is_refused_without_repeating_request_content(feature):
    body = json.dumps([CANARY]).encode() if UNPRICED[feature] is None else request(**UNPRICED[feature])
    refusal(body)


@pytest.mark.parametrize("kind", ["image", "document"])
def test_a_url_source_is_priced_like_an_inline_one(kind):
    # The provider fetches it and bills its tokens as input, which the window already bounds.
    url_body = request(messages=[{"role": "user", "content": [{"type": kind, "source": {"type": "url", "url": "https://example.com/a"}}]}])
    assert quote(url_body).ceiling_nusd == quote(request()).ceiling_nusd


def test_body_that_is_not_json_is_refused():
    refusal(b"{" + CANARY.encode())


@pytest.mark.parametrize("tier", ["auto", "standard_only"])
def test_standard_service_tiers_are_priced(tier):
    assert quote(request(service_tier=tier)).ceiling_nusd > 0


def test_client_tools_text_documents_and_base64_images_are_priced():
    body = request(
        tools=[{"name": "lookup", "input_schema": {"type": "object"}}, {"type": "custom", "name": "b", "input_schema": {"type": "object"}}],
        messages=[
            _image({"type": "base64", "media_type": "image/png", "data": "AAAA"}),
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "lookup", "input": {"source": {"type": "url"}}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}]},
        ],
    )
    assert quote(body).ceiling_nusd > 0


# Warm-prefix certificate (ADR-0126 Amendment 5) --------------------------------------------------

HOUR = {"type": "ephemeral", "ttl": "1h"}
FIVE = {"type": "ephemeral"}
TOOL = {"name": "lookup", "description": "d", "input_schema": {"type": "object"}}


def system(*blocks):
    return [dict(type="text", text=text, **({"cache_control": mark} if mark else {})) for text, mark in blocks]


def test_no_one_hour_mark_means_no_certificate():
    result = quote(request(system=system(("stable", FIVE))))
    assert (result.cert, result.hour_after_key) == (None, False)


def test_plain_string_system_has_no_certificate():
    assert quote(request(system="stable prompt")).cert is None


def test_certificate_hashes_model_and_prefix_through_the_key_block():
    body = request(tools=[TOOL], system=system(("stable", HOUR)))
    prefix = {"model": SONNET_45, "tools": [TOOL], "system": [{"type": "text", "text": "stable"}]}
    expected = hashlib.sha256(json.dumps(prefix, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert quote(body).cert == expected


def test_certificate_ignores_messages_and_blocks_after_the_key():
    a = quote(request(system=system(("stable", HOUR), ("volatile one", None))))
    b = quote(request(system=system(("stable", HOUR), ("volatile two", None)), messages=[{"role": "user", "content": "other"}]))
    assert a.cert == b.cert


def test_certificate_changes_with_the_prefix_or_the_model():
    base = quote(request(system=system(("stable", HOUR)))).cert
    assert quote(request(system=system(("changed", HOUR)))).cert != base
    assert quote(request(model="claude-sonnet-4-6", system=system(("stable", HOUR)))).cert != base


def test_the_last_one_hour_mark_is_the_key():
    a = quote(request(system=system(("first", HOUR), ("second", HOUR))))
    b = quote(request(system=system(("first", HOUR), ("second changed", HOUR))))
    assert a.cert != b.cert


def test_a_one_hour_mark_on_the_last_tool_keys_a_string_system_request():
    result = quote(request(tools=[dict(TOOL, cache_control=HOUR)], system="plain"))
    assert result.cert is not None


def test_a_blank_text_block_is_never_the_key():
    assert quote(request(system=system(("   ", HOUR)))).cert is None


def test_the_mark_itself_is_not_part_of_the_certificate():
    a = quote(request(system=system(("intro", None), ("stable", HOUR))))
    b = quote(request(system=system(("intro", FIVE), ("stable", HOUR))))
    assert a.cert == b.cert


def test_hour_after_key_is_false_without_later_one_hour_marks():
    messages = [{"role": "user", "content": [{"type": "text", "text": "q", "cache_control": FIVE}]}]
    assert quote(request(system=system(("stable", HOUR)), messages=messages)).hour_after_key is False


def test_hour_after_key_sees_a_later_one_hour_mark_on_a_message_block():
    messages = [{"role": "user", "content": [{"type": "text", "text": "q", "cache_control": HOUR}]}]
    assert quote(request(system=system(("stable", HOUR)), messages=messages)).hour_after_key is True


def test_hour_after_key_sees_a_mark_nested_in_tool_result_content():
    messages = [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "lookup", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "r", "cache_control": HOUR}]}]},
    ]
    assert quote(request(system=system(("stable", HOUR)), messages=messages)).hour_after_key is True


def test_hour_after_key_sees_a_later_system_block_mark_only_after_the_key():
    # Two one-hour marks in the system tier: the later one is the key, so nothing follows it.
    assert quote(request(system=system(("a", HOUR), ("b", HOUR)))).hour_after_key is False


def test_top_level_one_hour_cache_control_counts_when_a_markable_block_follows():
    body = request(system=system(("stable", HOUR)), cache_control=HOUR)
    assert quote(body).hour_after_key is True


def test_top_level_one_hour_cache_control_at_the_key_block_does_not_count():
    body = request(system=system(("stable", HOUR)), cache_control=HOUR, messages=[])
    assert quote(body).hour_after_key is False


# Settlement ------------------------------------------------------------------------------------


def test_settlement_at_the_standard_tier_by_hand():
    u = usage(input_tokens=100, cache_read_input_tokens=1000, cache_creation_input_tokens=500,
              cache_creation={"ephemeral_5m_input_tokens": 200, "ephemeral_1h_input_tokens": 300}, output_tokens=50)
    expected = 100 * 3000 + 1000 * 300 + 200 * 3750 + 300 * 6000 + 50 * 15000
    assert settlement_cost(u, SONNET_45, request(), REVISION) == expected == 3_900_000


def test_settlement_above_200k_total_input_uses_the_long_context_tier():
    u = usage(input_tokens=150_000, cache_read_input_tokens=50_001, output_tokens=10)
    assert settlement_cost(u, SONNET_45, request(), REVISION) == 150_000 * 6000 + 50_001 * 600 + 10 * 22500


def test_settlement_at_exactly_200k_total_input_stays_standard():
    u = usage(input_tokens=150_000, cache_read_input_tokens=50_000, output_tokens=10)
    assert settlement_cost(u, SONNET_45, request(), REVISION) == 150_000 * 3000 + 50_000 * 300 + 10 * 15000


def test_cache_writes_count_towards_the_tier_threshold():
    u = usage(input_tokens=100_000, cache_creation_input_tokens=100_001, output_tokens=0,
              cache_creation={"ephemeral_5m_input_tokens": 100_001, "ephemeral_1h_input_tokens": 0})
    assert settlement_cost(u, SONNET_45, request(), REVISION) == 100_000 * 6000 + 100_001 * 7500


def test_haiku_5_5_above_100k_bills_the_whole_request_at_its_upper_tier():
    u = usage(input_tokens=100_001, output_tokens=1000)
    assert settlement_cost(u, "claude-haiku-5-5", request(), REVISION) == 100_001 * 500 + 1000 * 2500


def test_settlement_is_priced_at_the_served_model_not_the_requested_one():
    u = usage(input_tokens=1000, output_tokens=100)
    assert settlement_cost(u, "claude-haiku-4-5-20251001", request(), REVISION) == 1000 * 1000 + 100 * 5000


def test_retired_served_model_still_settles():
    u = usage(input_tokens=10, output_tokens=10)
    assert settlement_cost(u, "claude-3-haiku-20240307", request(), REVISION) == 10 * 250 + 10 * 1250


def test_unknown_served_model_keeps_the_ceiling_open():
    assert settlement_cost(usage(), "claude-sonnet-4", request(), REVISION) is None


def test_absent_and_null_cache_fields_mean_zero():
    expected = 100 * 3000 + 50 * 15000
    assert settlement_cost(usage(), SONNET_45, request(), REVISION) == expected
    nulls = usage(cache_read_input_tokens=None, cache_creation_input_tokens=None)
    nulls.update(cache_read_input_tokens=None, cache_creation_input_tokens=None, cache_creation=None)
    assert settlement_cost(nulls, SONNET_45, request(), REVISION) == expected


def test_thinking_tokens_are_not_added_to_output_twice():
    u = usage(output_tokens=50, output_tokens_details={"thinking_tokens": 40})
    assert settlement_cost(u, SONNET_45, request(), REVISION) == 100 * 3000 + 50 * 15000


@pytest.mark.parametrize("details", [
    {"thinking_tokens": 40, "audio_output_tokens": 7},  # a count this revision has no name for
    {"new_kind_tokens": 9},
    {"thinking_tokens": 40, "nested": {"more_tokens": 2}},
], ids=["known-and-unknown", "unknown-only", "nested"])
def test_an_unknown_count_in_the_output_breakdown_keeps_no_ceiling_open(details):
    """``output_tokens`` is the inclusive total billed; ``output_tokens_details`` only breaks it
    down, so a count there, named or not, changes neither the cost nor what is known
    (docs/pricing.md "What keeps an attempt open")."""
    plain = settlement_cost(usage(), SONNET_45, request(), REVISION)
    assert settlement_cost(usage(output_tokens_details=details), SONNET_45, request(), REVISION) == plain == (
        100 * 3000 + 50 * 15000)


def test_an_unknown_count_beside_output_tokens_keeps_the_ceiling_open():
    """The same count outside the breakdown may be billed on top: unknown is never zero."""
    assert settlement_cost(usage(audio_output_tokens=7), SONNET_45, request(), REVISION) is None


def test_a_split_that_does_not_add_up_keeps_the_ceiling_open():
    u = usage(cache_creation_input_tokens=500, cache_creation={"ephemeral_5m_input_tokens": 200, "ephemeral_1h_input_tokens": 200})
    assert settlement_cost(u, SONNET_45, request(), REVISION) is None


def _marked(*ttls):
    return request(system=[dict(type="text", text=f"s{i}", cache_control=mark) for i, mark in enumerate(ttls)])


def test_without_a_split_one_five_minute_ttl_makes_every_write_5m():
    body = _marked({"type": "ephemeral"}, {"type": "ephemeral", "ttl": "5m"})
    u = usage(cache_creation_input_tokens=400)
    assert settlement_cost(u, SONNET_45, body, REVISION) == 100 * 3000 + 400 * 3750 + 50 * 15000


def test_without_a_split_one_hour_ttls_make_every_write_1h():
    u = usage(cache_creation_input_tokens=400)
    assert settlement_cost(u, SONNET_45, _marked(HOUR, HOUR), REVISION) == 100 * 3000 + 400 * 6000 + 50 * 15000


def test_without_a_split_a_top_level_one_hour_mark_counts_as_a_ttl():
    u = usage(cache_creation_input_tokens=400)
    assert settlement_cost(u, SONNET_45, request(cache_control=HOUR), REVISION) == 100 * 3000 + 400 * 6000 + 50 * 15000


def test_without_a_split_mixed_ttls_keep_the_ceiling_open():
    u = usage(cache_creation_input_tokens=400)
    assert settlement_cost(u, SONNET_45, _marked(HOUR, FIVE), REVISION) is None


def test_without_a_split_writes_with_no_mark_keep_the_ceiling_open():
    assert settlement_cost(usage(cache_creation_input_tokens=400), SONNET_45, request(), REVISION) is None


@pytest.mark.parametrize(
    "u",
    [
        {"output_tokens": 50},
        {"input_tokens": 100},
        {"input_tokens": -1, "output_tokens": 50},
        {"input_tokens": 100, "output_tokens": True},
        {"input_tokens": 1.0, "output_tokens": 50},
        {"input_tokens": 100, "output_tokens": 50, "cache_read_input_tokens": "5"},
        {"input_tokens": 100, "output_tokens": 50, "cache_creation_input_tokens": False},
        {"input_tokens": 100, "output_tokens": 50, "cache_creation_input_tokens": 1,
         "cache_creation": {"ephemeral_5m_input_tokens": True, "ephemeral_1h_input_tokens": 0}},
        {"input_tokens": 100, "output_tokens": 50, "cache_creation": [0, 0]},
        "not a dict",
    ],
)
def test_counts_must_be_present_non_negative_integers(u):
    assert settlement_cost(u, SONNET_45, request(), REVISION) is None


@pytest.mark.parametrize(
    "modifier",
    [
        {"speed": "fast"},
        {"speed": "turbo"},
        {"service_tier": "batch"},
        {"service_tier": "priority"},
        # Sonnet 4.5 has no geo pricing (docs/pricing.md "Inference geo (data residency)").
        {"inference_geo": "us"},
        {"server_tool_use": {"code_execution_requests": 1}},
    ],
)
def test_each_unknown_rate_modifier_keeps_the_ceiling_open(modifier):
    assert settlement_cost(usage(**modifier), SONNET_45, request(), REVISION) is None


def test_standard_modifiers_settle():
    u = usage(speed="standard", service_tier="standard", inference_geo="not_available",
              server_tool_use={"web_search_requests": 0, "web_fetch_requests": 0})
    assert settlement_cost(u, SONNET_45, request(), REVISION) == 100 * 3000 + 50 * 15000
    assert settlement_cost(usage(inference_geo="global"), SONNET_45, request(), REVISION) == 100 * 3000 + 50 * 15000


def test_settlement_rounds_up_fractional_rates():
    u = {"input_tokens": 1, "output_tokens": 1}
    # 1/3 + 1/7 = 10/21
    assert settlement_cost(u, "tiny", request(model="tiny"), tiny_revision()) == 1


def test_settlement_accepts_a_revision_object_or_its_id():
    u = usage()
    assert settlement_cost(u, SONNET_45, request(), current_revision()) == settlement_cost(u, SONNET_45, request(), REVISION)


# llm accounts prices ---------------------------------------------------------------------------


def test_prices_command_lists_the_revision_and_every_model():
    result = CliRunner().invoke(accounts, ["prices"])
    assert result.exit_code == 0, result.output
    assert f"Price revision {REVISION}, read 2026-11-29" in result.output
    assert "https://platform.claude.com/docs/en/about-claude/pricing" in result.output
    for model_id in current_revision().models:
        assert model_id in result.output
    sonnet_row = next(line for line in result.output.splitlines() if line.startswith(SONNET_45))
    assert sonnet_row.split()[-5:] == ["3.00", "3.75", "6.00", "0.30", "15.00"]


def test_prices_json_for_one_model_by_alias():
    result = CliRunner().invoke(accounts, ["prices", "--json", "--model", "claude-haiku-5-5"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["revision"] == REVISION and data["read_on"] == "2026-11-29"
    (model,) = data["models"]
    assert model["context_window"] == 1_000_000 and model["max_output"] == 128_000
    assert model["rates"] == {"input": "0.10", "write_5m": "0.125", "write_1h": "0.20", "cache_read": "0.01", "output": "0.50"}
    assert model["long_context"]["above_input_tokens"] == 100_000


def test_prices_for_an_unpriced_model_fails_without_echoing_it():
    result = CliRunner().invoke(accounts, ["prices", "--model", CANARY])
    assert result.exit_code == 1
    assert "unsupported_pricing" in result.output and CANARY not in result.output
