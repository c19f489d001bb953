"""The stand-in's Usage and Cost Analytics API and the billing facts a report reader must cope
with: rows per bucket and group, paged by rows; requests per row; other tools' batch and priority
usage on the same key and minute; usage no API key authenticated; the us inference geo billed
1.1x; visibility after completion, and bucketing by arrival or completion; an organization
without the beta (docs/architecture.md "Settling from the provider"). Real HTTP on loopback."""

import datetime as dt
from fractions import Fraction

import httpx
import pytest

from llm_accounts.pricing.prices import current_revision
from llm_accounts.standin import ConfigError, StandIn, validate_config
from llm_accounts.standin.config import default_api_key_id
from conftest import assert_no_key_material, make_key
from test_standin_reports import HAIKU, START, Clock, prompt, report

SONNET_46 = "claude-sonnet-4-6"
BETA = "analytics-usage-cost-2026-08-24"
KEY_A, KEY_B = default_api_key_id("a"), "apikey_01bbbb"
DAY = {"starting_at": "2026-12-31T00:00:00Z", "ending_at": "2027-01-01T00:00:00Z"}


def standin(**settings):
    """Keys a and b of org-1 (b with its own api_key_id), a key of org-2, one admin key per
    organization, report_delay 120 s, the clock at START; ``settings`` override the config."""
    keys = {"a": make_key(), "b": make_key(), "other": make_key()}
    admin, other_admin = make_key(), make_key()
    config = {
        "keys": [
            {"label": "a", "key": keys["a"], "organization": "org-1"},
            {"label": "b", "key": keys["b"], "organization": "org-1", "api_key_id": KEY_B},
            {"label": "other", "key": keys["other"], "organization": "org-2"},
        ],
        "admin_keys": [{"key": admin, "organization": "org-1"}, {"key": other_admin, "organization": "org-2"}],
        "report_delay": 120,
        **settings,
    }
    server = StandIn(config, clock=Clock(START))
    server.keys, server.admin, server.other_admin, server.fake_clock = keys, admin, other_admin, server.clock
    return server


@pytest.fixture
def make_org():
    """Start a stand-in (``standin(**settings)``) with an HTTP client; stopped after the test."""
    started = []

    def start(**settings):
        server = standin(**settings).start()
        server.http = httpx.Client(base_url=server.base_url, timeout=10)
        started.append(server)
        return server

    yield start
    for server in started:
        server.http.close()
        server.stop()


@pytest.fixture
def org(make_org):
    return make_org()


def analytics(server, kind, beta=BETA, key=None, **params):
    headers = {"x-api-key": key or server.admin, "anthropic-version": "2023-06-01"}
    if beta:
        headers["anthropic-beta"] = beta
    return server.http.get(f"/v1/organizations/analytics/{kind}", params=params, headers=headers)


def rows(server, kind, **params):
    """Every row of a query, following next_page."""
    page = analytics(server, kind, **params)
    assert page.status_code == 200, page.text
    page = page.json()
    out = list(page["data"])
    while page["has_more"]:
        page = analytics(server, kind, page=page["next_page"], **params).json()
        out.extend(page["data"])
    return out


def ask(server, label, model=HAIKU, text="hello there", **fields):
    """A Messages request with any extra body fields (``inference_geo``)."""
    return server.http.post(
        "/v1/messages",
        headers={"x-api-key": server.keys[label], "anthropic-version": "2023-06-01"},
        json={"model": model, "max_tokens": 20, "messages": [{"role": "user", "content": text}], **fields},
    )


def usage(input_tokens=1000, output_tokens=100, **more):
    return {"input_tokens": input_tokens, "output_tokens": output_tokens, **more}


def nusd(tokens, model=HAIKU):
    """Nanodollars of a usage at the shipped list prices, standard tier and geo."""
    rates = current_revision().model(model).rates
    return tokens["input_tokens"] * Fraction(rates.input) + tokens["output_tokens"] * Fraction(rates.output)


def cents(value):
    return Fraction(value) * 10_000_000  # back to nanodollars


# The beta and the query's limits.


@pytest.mark.parametrize("kind", ["usage", "cost"])
def test_the_analytics_endpoints_require_their_beta_header(org, kind):
    answer = analytics(org, kind, beta=None, **DAY, time_bucket_width="1h")
    assert answer.status_code == 400
    body = answer.json()
    assert (body["type"], body["error"]["type"]) == ("error", "invalid_request_error")
    assert BETA in body["error"]["message"] and body["request_id"].startswith("req_")
    assert analytics(org, kind, beta="fast-mode-2026-02-01", **DAY).status_code == 400
    assert analytics(org, kind, beta=f"fast-mode-2026-02-01, {BETA}", **DAY).status_code == 200


def test_the_analytics_endpoints_take_only_an_admin_key(org):
    assert analytics(org, "usage", key=org.keys["a"], **DAY).status_code == 401


def test_a_minute_range_longer_than_24_hours_is_refused(org):
    longer = analytics(org, "usage", starting_at="2026-12-30T00:00:00Z", ending_at="2026-12-31T00:01:00Z",
                       time_bucket_width="1m")
    assert longer.status_code == 400 and "24 hours" in longer.json()["error"]["message"]
    day = analytics(org, "usage", starting_at="2026-12-30T00:00:00Z", ending_at="2026-12-31T00:00:00Z",
                    time_bucket_width="1m")
    assert day.status_code == 200


def test_a_range_longer_than_31_days_is_refused(org):
    answer = analytics(org, "cost", starting_at="2026-11-30T00:00:00Z", ending_at="2027-01-01T00:00:01Z",
                       time_bucket_width="1d")
    assert answer.status_code == 400 and "31 days" in answer.json()["error"]["message"]


def test_a_bucket_width_needs_an_ending_at(org):
    answer = analytics(org, "usage", starting_at="2026-12-31T00:00:00Z", time_bucket_width="1h")
    assert answer.status_code == 400 and answer.json()["error"]["message"].startswith("ending_at:")


def test_more_than_five_group_by_dimensions_are_refused(org):
    six = ["api_key_id", "model", "service_tier", "inference_geo", "speed", "context_window"]
    assert analytics(org, "usage", **DAY, **{"group_by[]": six}).status_code == 400
    assert analytics(org, "usage", **DAY, **{"group_by[]": six[:5]}).status_code == 200


def test_cost_dimensions_are_refused_by_the_usage_endpoint(org):
    assert analytics(org, "usage", **DAY, **{"group_by[]": "token_type"}).status_code == 400
    assert analytics(org, "cost", **DAY, **{"group_by[]": "token_type"}).status_code == 200


# Rows and paging.


def test_rows_exist_only_for_buckets_with_usage(org):
    prompt(org, "a")
    org.fake_clock.advance(300)
    page = analytics(org, "usage", starting_at="2026-12-31T23:50:00Z", ending_at="2027-01-01T00:10:00Z",
                     time_bucket_width="1m").json()
    assert [(row["starting_at"], row["ending_at"]) for row in page["data"]] == [
        ("2026-12-31T23:58:00Z", "2026-12-31T23:59:00Z")
    ]
    assert page["data"][0]["group"] == {}


def test_limit_counts_rows_and_paging_returns_every_row_once(org):
    for label in ("a", "b", "a"):
        prompt(org, label)
        org.fake_clock.advance(40)
    org.add_usage("org-1", None, HAIKU, usage(), at=START)
    org.fake_clock.advance(300)
    params = {"starting_at": "2026-12-31T23:50:00Z", "ending_at": "2027-01-01T00:10:00Z", "time_bucket_width": "1m",
              "group_by[]": ["api_key_id", "model"]}
    whole = analytics(org, "usage", limit=1000, **params).json()
    assert len(whole["data"]) == 4 and whole["has_more"] is False and whole["next_page"] is None
    first = analytics(org, "usage", limit=3, **params).json()
    assert len(first["data"]) == 3 and first["has_more"] is True
    paged = rows(org, "usage", limit=1, **params)
    assert paged == whole["data"]
    # The stable order: bucket, then group values (null first).
    assert [(row["starting_at"], row["group"]["api_key_id"]) for row in paged] == [
        ("2026-12-31T23:58:00Z", None), ("2026-12-31T23:58:00Z", KEY_A),
        ("2026-12-31T23:58:00Z", KEY_B), ("2026-12-31T23:59:00Z", KEY_A),
    ]


def test_later_pages_show_the_data_as_of_the_first_page(org):
    prompt(org, "a")
    prompt(org, "b")
    org.fake_clock.advance(300)
    params = {"starting_at": "2026-12-31T00:00:00Z", "ending_at": "2027-01-02T00:00:00Z", "group_by[]": "api_key_id"}
    first = analytics(org, "usage", limit=1, **params).json()
    prompt(org, "a")  # in the same (only) bucket, visible once the clock moves on
    org.fake_clock.advance(300)
    second = analytics(org, "usage", limit=1, page=first["next_page"], **params).json()
    assert second["data_refreshed_at"] == first["data_refreshed_at"]
    assert [row["usage"]["requests"] for row in first["data"] + second["data"]] == [1, 1]
    assert second["has_more"] is False
    assert [row["usage"]["requests"] for row in rows(org, "usage", **params)] == [2, 1]


def test_a_page_token_of_another_query_is_refused(org):
    prompt(org, "a")
    prompt(org, "b")
    org.fake_clock.advance(300)
    token = analytics(org, "usage", limit=1, **DAY, **{"group_by[]": "api_key_id"}).json()["next_page"]
    assert analytics(org, "usage", page=token, **DAY, **{"group_by[]": "model"}).status_code == 400
    assert analytics(org, "cost", page=token, **DAY, **{"group_by[]": "api_key_id"}).status_code == 400
    assert analytics(org, "usage", page="page_garbage", **DAY).status_code == 400


def test_usage_rows_count_requests_and_total_tokens(org):
    answers = [prompt(org, "a").json() for _ in range(3)] + [prompt(org, "b").json()]
    org.fake_clock.advance(300)
    found = {row["group"]["api_key_id"]: row["usage"] for row in rows(org, "usage", **DAY, **{"group_by[]": "api_key_id"})}
    assert (found[KEY_A]["requests"], found[KEY_B]["requests"]) == (3, 1)
    a = found[KEY_A]
    assert a["output_tokens"] == sum(answer["usage"]["output_tokens"] for answer in answers[:3])
    assert a["total_tokens"] == a["uncached_input_tokens"] + a["cache_read_input_tokens"] + a["output_tokens"] + sum(
        a["cache_creation"].values()
    )


def test_cost_rows_count_each_request_once_per_row(org):
    for label in ("a", "a", "a", "b"):
        prompt(org, label)
    org.fake_clock.advance(300)
    [whole] = rows(org, "cost", **DAY)
    assert whole["cost"]["requests"] == 4 and whole["cost"]["currency"] == "USD"
    by_kind = rows(org, "cost", **DAY, **{"group_by[]": ["api_key_id", "token_type"]})
    assert {(row["group"]["api_key_id"], row["group"]["token_type"], row["cost"]["requests"]) for row in by_kind} == {
        (KEY_A, "uncached_input_tokens", 3), (KEY_A, "output_tokens", 3),
        (KEY_B, "uncached_input_tokens", 1), (KEY_B, "output_tokens", 1),
    }
    assert sum(cents(row["cost"]["amount"]) for row in by_kind) == cents(whole["cost"]["amount"])


# Grouping, one dimension at a time: a served request (key a, Haiku 4.5, standard, not_available,
# standard speed, 0-200k) beside another tool's (key b, Sonnet 4.6, batch, us, fast, 200k-1M).

GROUPED = {
    "api_key_id": {KEY_A, KEY_B},
    "model": {HAIKU, SONNET_46},
    "service_tier": {"standard", "batch"},
    "inference_geo": {"not_available", "us"},
    "speed": {"standard", "fast"},
    "context_window": {"0-200k", "200k-1M"},
    "workspace_id": {None},
}


@pytest.mark.parametrize("dimension", list(GROUPED))
def test_usage_groups_by_each_dimension(org, dimension):
    prompt(org, "a")
    org.add_usage("org-1", KEY_B, SONNET_46, usage(input_tokens=250_000), at=START, service_tier="batch",
                  inference_geo="us", speed="fast")
    org.fake_clock.advance(300)
    found = rows(org, "usage", **DAY, **{"group_by[]": dimension})
    assert all(list(row["group"]) == [dimension] for row in found)
    assert {row["group"][dimension] for row in found} == GROUPED[dimension]
    assert sum(row["usage"]["requests"] for row in found) == 2


@pytest.mark.parametrize("dimension", ["service_tier", "inference_geo", "speed", "context_window"])
def test_the_legacy_usage_report_groups_by_the_new_dimensions_and_leaves_them_null_otherwise(org, dimension):
    prompt(org, "a")
    org.add_usage("org-1", KEY_B, SONNET_46, usage(input_tokens=250_000), at=START, service_tier="batch",
                  inference_geo="us", speed="fast")
    org.fake_clock.advance(300)
    beta = {"anthropic-beta": "fast-mode-2026-02-01"} if dimension == "speed" else {}
    page = org.http.get(
        "/v1/organizations/usage_report/messages",
        params={**DAY, "bucket_width": "1d", "limit": 1, "group_by[]": dimension},
        headers={"x-api-key": org.admin, "anthropic-version": "2023-06-01", **beta},
    ).json()
    results = page["data"][0]["results"]
    assert {row[dimension] for row in results} == GROUPED[dimension]
    others = {"service_tier", "inference_geo", "speed", "context_window"} - {dimension}
    assert all(row[other] is None for row in results for other in others)


def test_the_legacy_usage_report_needs_the_fast_mode_beta_to_group_by_speed(org):
    answer = report(org, "usage_report/messages", **DAY, **{"group_by[]": "speed"})
    assert answer.status_code == 400 and "fast-mode-2026-02-01" in answer.json()["error"]["message"]


def test_an_empty_api_key_ids_entry_also_matches_usage_no_key_authenticated(org):
    prompt(org, "a")
    prompt(org, "b")
    org.add_usage("org-1", None, HAIKU, usage(), at=START)  # the Console's Workbench
    org.fake_clock.advance(300)
    grouped = {**DAY, "group_by[]": "api_key_id"}
    with_null = rows(org, "usage", **grouped, **{"api_key_ids[]": [KEY_A, ""]})
    assert [row["group"]["api_key_id"] for row in with_null] == [None, KEY_A]
    only_a = rows(org, "usage", **grouped, **{"api_key_ids[]": KEY_A})
    assert [row["group"]["api_key_id"] for row in only_a] == [KEY_A]
    costs = rows(org, "cost", **grouped, **{"api_key_ids[]": ""})
    assert [row["group"]["api_key_id"] for row in costs] == [None]


def test_filters_by_model_tier_geo_speed_and_context_window(org):
    prompt(org, "a")
    org.add_usage("org-1", KEY_B, SONNET_46, usage(input_tokens=250_000), at=START, service_tier="batch",
                  inference_geo="us", speed="fast")
    org.fake_clock.advance(300)
    for name, value in [("models[]", SONNET_46), ("service_tiers[]", "batch"), ("inference_geos[]", "us"),
                        ("speeds[]", "fast"), ("context_window[]", "200k-1M")]:
        found = rows(org, "usage", **DAY, **{"group_by[]": "model", name: value})
        assert [row["group"]["model"] for row in found] == [SONNET_46], name
    assert analytics(org, "usage", **DAY, **{"service_tiers[]": "cheapest"}).status_code == 400


# Other tools on the same key and minute.


def test_another_tools_batch_and_priority_usage_shares_the_key_and_minute(org):
    answer = prompt(org, "a").json()
    org.add_usage("org-1", KEY_A, HAIKU, usage(), at=START, service_tier="batch")
    org.add_usage("org-1", KEY_A, HAIKU, usage(), at=START, service_tier="priority", requests=2)
    org.fake_clock.advance(300)
    found = rows(org, "usage", starting_at="2026-12-31T23:58:00Z", ending_at="2026-12-31T23:59:00Z",
                 time_bucket_width="1m", **{"group_by[]": ["api_key_id", "service_tier"]})
    assert [(row["group"]["service_tier"], row["usage"]["requests"]) for row in found] == [
        ("batch", 1), ("priority", 2), ("standard", 1)
    ]
    assert {row["group"]["api_key_id"] for row in found} == {KEY_A}
    # The legacy report, grouped as the settling pass reads it, holds all three in one result.
    [bucket] = report(org, "usage_report/messages", starting_at="2026-12-31T23:58:00Z", bucket_width="1m", limit=1,
                      **{"group_by[]": ["api_key_id", "model"]}).json()["data"]
    [result] = bucket["results"]
    assert result["output_tokens"] == answer["usage"]["output_tokens"] + 200


def test_batch_usage_costs_half_in_amount_and_full_in_list_amount(org):
    org.add_usage("org-1", KEY_A, HAIKU, usage(), at=START, service_tier="batch")
    org.fake_clock.advance(300)
    [row] = rows(org, "cost", **DAY, **{"group_by[]": "service_tier"})
    assert row["group"] == {"service_tier": "batch"}
    assert cents(row["cost"]["list_amount"]) == nusd(usage())
    assert cents(row["cost"]["amount"]) == nusd(usage()) / 2
    legacy = report(org, "cost_report", **DAY, **{"group_by[]": "description"}).json()["data"][0]["results"]
    assert sum(cents(each["amount"]) for each in legacy) == nusd(usage()) / 2
    assert {each["service_tier"] for each in legacy} == {"batch"}


def test_priority_usage_is_left_out_of_both_cost_reports(org):
    prompt(org, "a")
    org.add_usage("org-1", KEY_A, HAIKU, usage(), at=START, service_tier="priority")
    org.fake_clock.advance(300)
    found = rows(org, "cost", **DAY, **{"group_by[]": "service_tier"})
    assert [(row["group"]["service_tier"], row["cost"]["requests"]) for row in found] == [("standard", 1)]
    legacy = report(org, "cost_report", **DAY, **{"group_by[]": "description"}).json()["data"][0]["results"]
    assert {each["service_tier"] for each in legacy} == {"standard"}
    assert {row["group"]["service_tier"] for row in rows(org, "usage", **DAY, **{"group_by[]": "service_tier"})} == {
        "standard", "priority"
    }


def test_added_usage_stays_out_of_the_request_log(org):
    org.add_usage("org-1", None, HAIKU, usage(), at=START)
    assert org.requests == []


def test_add_usage_refuses_what_a_report_cannot_hold(org):
    with pytest.raises(ConfigError, match="service_tier"):
        org.add_usage("org-1", KEY_A, HAIKU, usage(), at=START, service_tier="cheapest")
    with pytest.raises(ConfigError, match="completed_at"):
        org.add_usage("org-1", KEY_A, HAIKU, usage(), at=START, completed_at=START - dt.timedelta(seconds=1))
    with pytest.raises(ConfigError, match="usage"):
        org.add_usage("org-1", KEY_A, HAIKU, usage(input_tokens=-1), at=START)


# The us inference geo.


def test_a_us_request_on_a_4_6_model_reports_us_and_is_billed_1_1x(org):
    answer = ask(org, "a", SONNET_46, inference_geo="us").json()
    assert answer["usage"]["inference_geo"] == "us"
    org.fake_clock.advance(300)
    [row] = rows(org, "cost", **DAY, **{"group_by[]": "inference_geo"})
    assert row["group"] == {"inference_geo": "us"}
    list_price = nusd(answer["usage"], SONNET_46)
    assert cents(row["cost"]["list_amount"]) == list_price * Fraction(11, 10)
    assert cents(row["cost"]["amount"]) == list_price * Fraction(11, 10)
    [legacy] = report(org, "cost_report", **DAY).json()["data"][0]["results"]
    assert cents(legacy["amount"]) == list_price * Fraction(11, 10)


def test_a_global_request_on_a_4_6_model_reports_global_at_list_price(org):
    answer = ask(org, "a", SONNET_46, inference_geo="global").json()
    assert answer["usage"]["inference_geo"] == "global"
    org.fake_clock.advance(300)
    [row] = rows(org, "cost", **DAY, **{"group_by[]": "inference_geo"})
    assert row["group"] == {"inference_geo": "global"}
    assert cents(row["cost"]["amount"]) == nusd(answer["usage"], SONNET_46)


def test_us_batch_usage_is_1_1x_then_halved_and_web_search_fees_are_not_raised(org):
    searched = usage(server_tool_use={"web_search_requests": 3})
    org.add_usage("org-1", KEY_A, SONNET_46, searched, at=START, inference_geo="us", service_tier="batch")
    org.fake_clock.advance(300)
    found = {row["group"]["cost_type"]: row["cost"] for row in rows(org, "cost", **DAY, **{"group_by[]": "cost_type"})}
    fee = 3 * current_revision().server_tool_fees["web_search_requests"]
    assert cents(found["web_search"]["amount"]) == cents(found["web_search"]["list_amount"]) == fee
    assert cents(found["tokens"]["list_amount"]) == nusd(searched, SONNET_46) * Fraction(11, 10)
    assert cents(found["tokens"]["amount"]) == nusd(searched, SONNET_46) * Fraction(11, 20)


def test_a_streamed_us_request_reports_us_in_message_start(org):
    with org.http.stream(
        "POST", "/v1/messages",
        headers={"x-api-key": org.keys["a"], "anthropic-version": "2023-06-01"},
        json={"model": SONNET_46, "max_tokens": 20, "stream": True, "inference_geo": "us",
              "messages": [{"role": "user", "content": "hi"}]},
    ) as response:
        text = response.read().decode()
    start = next(line for line in text.splitlines() if line.startswith("data:") and "message_start" in line)
    assert '"inference_geo":"us"' in start


@pytest.mark.parametrize("model", [HAIKU, "claude-sonnet-4-5", "claude-opus-4-5"])
def test_inference_geo_on_a_model_before_4_6_is_refused(org, model):
    answer = ask(org, "a", model, inference_geo="us")
    assert answer.status_code == 400 and answer.json()["error"]["type"] == "invalid_request_error"
    assert [entry["usage"] for entry in org.requests] == [None]


def test_an_inference_geo_outside_global_and_us_is_refused(org):
    assert ask(org, "a", SONNET_46, inference_geo="eu").status_code == 400


def test_a_workspace_default_us_geo_serves_4_6_models_in_us_and_leaves_older_ones_as_they_were(make_org):
    org = make_org(organizations={"org-1": {"inference_geo_default": "us"}})
    assert ask(org, "a", SONNET_46).json()["usage"]["inference_geo"] == "us"
    assert ask(org, "a", HAIKU).json()["usage"]["inference_geo"] == "not_available"
    assert ask(org, "a", SONNET_46, inference_geo="global").json()["usage"]["inference_geo"] == "global"
    org.fake_clock.advance(300)
    found = rows(org, "usage", **DAY, **{"group_by[]": ["model", "inference_geo"]})
    assert [(row["group"]["model"], row["group"]["inference_geo"]) for row in found] == [
        (HAIKU, "not_available"), (SONNET_46, "global"), (SONNET_46, "us")
    ]


def test_a_keys_own_default_geo_wins_over_its_organizations():
    key = make_key()
    config = {"keys": [{"label": "k", "key": key, "organization": "org-1", "inference_geo_default": "global"}],
              "organizations": {"org-1": {"inference_geo_default": "us"}}}
    with StandIn(config) as server, httpx.Client(base_url=server.base_url, timeout=10) as http:
        answer = http.post("/v1/messages", headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
                           json={"model": SONNET_46, "max_tokens": 20, "messages": [{"role": "user", "content": "hi"}]})
    assert answer.json()["usage"]["inference_geo"] == "global"


def test_without_a_geo_or_default_the_usage_bytes_are_unchanged(org):
    assert ask(org, "a", SONNET_46).json()["usage"]["inference_geo"] == "not_available"


# Visibility and bucketing.


def test_data_refreshed_at_is_the_clock_less_the_delay_floored_to_the_second(org):
    org.fake_clock.advance(0.75)
    page = analytics(org, "usage", **DAY).json()
    assert page["data_refreshed_at"] == "2026-12-31T23:56:10Z"
    assert analytics(org, "cost", **DAY).json()["data_refreshed_at"] == "2026-12-31T23:56:10Z"


def slow_request(org, label="a", held=90):
    """A slow stream that arrives at START and completes ``held`` seconds later on the clock."""
    org.set_behaviour(label, "slow", delay=0.1)
    with org.http.stream(
        "POST", "/v1/messages",
        headers={"x-api-key": org.keys[label], "anthropic-version": "2023-06-01"},
        json={"model": HAIKU, "max_tokens": 20, "stream": True, "messages": [{"role": "user", "content": "hi"}]},
    ) as response:
        chunks = response.iter_bytes()
        next(chunks)
        org.fake_clock.advance(held)
        for _ in chunks:
            pass
    [entry] = org.requests
    return entry


def test_a_request_is_visible_report_delay_after_it_completed_not_after_it_arrived(org):
    entry = slow_request(org)
    assert (entry["arrived_at"], entry["completed_at"]) == (START.timestamp(), START.timestamp() + 90)
    org.fake_clock.advance(200 - 90)  # 200 s after it arrived, 110 s after it completed
    params = {"starting_at": "2026-12-31T23:50:00Z", "ending_at": "2027-01-01T00:10:00Z", "time_bucket_width": "1m"}
    page = analytics(org, "usage", **params).json()
    assert page["data"] == [] and page["data_refreshed_at"] == "2026-12-31T23:59:30Z"
    assert all(bucket["results"] == [] for bucket in report(
        org, "usage_report/messages", bucket_width="1m", **params | {"ending_at": "2027-01-01T00:00:00Z"}
    ).json()["data"])
    org.fake_clock.advance(10)
    [row] = analytics(org, "usage", **params).json()["data"]
    assert row["usage"]["requests"] == 1


@pytest.mark.parametrize("bucketing, minute", [("arrival", "2026-12-31T23:58:00Z"), ("completion", "2026-12-31T23:59:00Z")])
def test_report_bucketing_puts_a_request_in_the_minute_it_arrived_or_completed(make_org, bucketing, minute):
    org = make_org(report_bucketing=bucketing)
    slow_request(org)  # arrives 23:58:10, completes 23:59:40
    org.fake_clock.advance(300)
    params = {"starting_at": "2026-12-31T23:50:00Z", "ending_at": "2027-01-01T00:10:00Z", "time_bucket_width": "1m"}
    assert [row["starting_at"] for row in analytics(org, "usage", **params).json()["data"]] == [minute]
    legacy = report(org, "usage_report/messages", bucket_width="1m", **params | {"ending_at": "2027-01-01T00:00:00Z"})
    assert [bucket["starting_at"] for bucket in legacy.json()["data"] if bucket["results"]] == [minute]


def test_added_usage_is_visible_after_its_completion_and_bucketed_by_its_arrival(org):
    org.add_usage("org-1", KEY_A, HAIKU, usage(), at=START, completed_at=START + dt.timedelta(minutes=5))
    org.fake_clock.advance(5 * 60 + 119)
    assert rows(org, "usage", **DAY) == []
    org.fake_clock.advance(1)
    [row] = rows(org, "usage", **DAY, time_bucket_width="1m")
    assert row["starting_at"] == "2026-12-31T23:58:00Z"


def test_each_served_request_logs_what_a_report_shows(org):
    ask(org, "a", SONNET_46, text="x" * 800_004, inference_geo="us")  # 200,001 input tokens
    [entry] = org.requests
    assert {name: entry[name] for name in ("service_tier", "inference_geo", "speed", "context_window")} == {
        "service_tier": "standard", "inference_geo": "us", "speed": "standard", "context_window": "200k-1M"
    }
    assert entry["arrived_at"] == entry["completed_at"] == START.timestamp()


# The beta's absence, keys and secrets.


def test_an_organization_without_the_beta_gets_404_and_keeps_the_legacy_reports(make_org):
    org = make_org(organizations={"org-1": {"analytics": False}})
    for kind in ("usage", "cost"):
        answer = analytics(org, kind, **DAY)
        assert answer.status_code == 404 and answer.json()["error"]["type"] == "not_found_error"
    assert report(org, "usage_report/messages", starting_at="2026-12-31T00:00:00Z").status_code == 200
    assert analytics(org, "usage", key=org.other_admin, **DAY).status_code == 200
    org.set_analytics("org-1", True)
    assert analytics(org, "usage", **DAY).status_code == 200
    org.set_analytics("org-2", False)
    assert analytics(org, "usage", key=org.other_admin, **DAY).status_code == 404


def test_the_api_keys_list_has_its_documented_fields_and_nothing_of_a_key(org):
    page = report(org, "api_keys")
    for key in page.json()["data"]:
        assert {"id", "type", "name", "status", "workspace_id", "created_at", "created_by", "expires_at"} <= set(key)
        assert key["expires_at"] is None
    for secret in (*org.keys.values(), org.admin):
        assert_no_key_material(page.text, secret)


def test_no_analytics_answer_holds_a_run_of_a_key(org):
    ask(org, "a", SONNET_46, inference_geo="us")
    org.add_usage("org-1", None, HAIKU, usage(), at=START, service_tier="batch")
    org.fake_clock.advance(300)
    every = {"group_by[]": ["api_key_id", "model", "service_tier", "inference_geo", "context_window"]}
    answers = [
        analytics(org, "usage", limit=1, **DAY, **every),
        analytics(org, "cost", **DAY, **{"group_by[]": ["api_key_id", "description"]}),
        analytics(org, "usage", beta=None, **DAY),
        analytics(org, "usage", **{"starting_at": org.keys["a"]}),
        analytics(org, "usage", page=org.keys["a"], **DAY),
        analytics(org, "usage", **DAY, **{"group_by[]": org.keys["b"]}),
    ]
    assert [answer.status_code for answer in answers] == [200, 200, 400, 400, 400, 400]
    for answer in answers:
        for secret in (*org.keys.values(), org.admin):
            assert_no_key_material(answer.text, secret)


def test_config_refuses_a_bad_geo_default_bucketing_or_organization_setting():
    key = make_key()
    with pytest.raises(ConfigError, match="inference_geo_default"):
        validate_config({"keys": [{"label": "a", "key": key, "inference_geo_default": "eu"}]})
    with pytest.raises(ConfigError, match="report_bucketing"):
        validate_config({"keys": [{"label": "a", "key": key}], "report_bucketing": "departure"})
    with pytest.raises(ConfigError, match="analytics"):
        validate_config({"keys": [{"label": "a", "key": key}], "organizations": {"org-a": {"analytics": "no"}}})
