"""The stand-in's Admin API reports: the usage and cost reports of the requests it really served,
in the documented shapes, paged, after a delay, per organization, read with an admin key only
(docs/architecture.md "Settling from the provider")."""

import datetime as dt
from fractions import Fraction

import httpx
import pytest

from llm_accounts.pricing.prices import current_revision
from llm_accounts.standin import ConfigError, StandIn, validate_config
from llm_accounts.standin.config import default_api_key_id
from conftest import make_key

HAIKU = "claude-haiku-4-5-20251001"
START = dt.datetime(2026, 12, 31, 23, 58, 10, tzinfo=dt.timezone.utc)  # a year end, crossing midnight


class Clock:
    def __init__(self, at):
        self.now = at.timestamp()

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


@pytest.fixture
def org():
    keys = {"a": make_key(), "b": make_key(), "other": make_key()}
    admin, other_admin = make_key(), make_key()
    clock = Clock(START)
    config = {
        "keys": [
            {"label": "a", "key": keys["a"], "organization": "org-1"},
            {"label": "b", "key": keys["b"], "organization": "org-1", "api_key_id": "apikey_01bbbb"},
            {"label": "other", "key": keys["other"], "organization": "org-2"},
        ],
        "admin_keys": [{"key": admin, "organization": "org-1"}, {"key": other_admin, "organization": "org-2"}],
        "report_delay": 120,
    }
    with StandIn(config, clock=clock) as server:
        server.keys, server.admin, server.other_admin, server.fake_clock = keys, admin, other_admin, clock
        with httpx.Client(base_url=server.base_url, timeout=10) as http:
            server.http = http
            yield server


def prompt(server, label, text="hello there", max_tokens=20, stream=False):
    return server.http.post(
        "/v1/messages",
        headers={"x-api-key": server.keys[label], "anthropic-version": "2023-06-01"},
        json={"model": HAIKU, "max_tokens": max_tokens, "stream": stream, "messages": [{"role": "user", "content": text}]},
    )


def report(server, path, key=None, **params):
    return server.http.get(
        f"/v1/organizations/{path}",
        params=params,
        headers={"x-api-key": key or server.admin, "anthropic-version": "2023-06-01"},
    )


def minute_report(server, **extra):
    return report(
        server, "usage_report/messages", starting_at="2026-12-31T23:55:00Z", ending_at="2027-01-01T00:05:00Z",
        bucket_width="1m", **{"group_by[]": ["api_key_id", "model"]}, **extra,
    )


def test_usage_report_buckets_hold_each_billed_request_after_the_delay(org):
    answer = prompt(org, "a").json()
    assert minute_report(org).json()["data"][3]["results"] == []  # within the delay: not yet
    org.fake_clock.advance(120)
    page = minute_report(org).json()
    buckets = {bucket["starting_at"]: bucket["results"] for bucket in page["data"]}
    [row] = buckets["2026-12-31T23:58:00Z"]
    assert row["api_key_id"] == default_api_key_id("a")
    assert row["model"] == HAIKU
    assert row["uncached_input_tokens"] == answer["usage"]["input_tokens"]
    assert row["output_tokens"] == answer["usage"]["output_tokens"]
    assert row["cache_creation"] == {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0}
    assert row["server_tool_use"] == {"web_search_requests": 0}
    assert page["data"][0]["ending_at"] == "2026-12-31T23:56:00Z"


def test_usage_report_groups_by_key_id_and_keeps_other_organizations_out(org):
    prompt(org, "a")
    prompt(org, "b")
    prompt(org, "other")
    org.fake_clock.advance(180)
    rows = [row for bucket in minute_report(org).json()["data"] for row in bucket["results"]]
    assert sorted(row["api_key_id"] for row in rows) == sorted([default_api_key_id("a"), "apikey_01bbbb"])
    other = report(org, "usage_report/messages", key=org.other_admin, starting_at="2026-12-31T23:58:00Z",
                   bucket_width="1m", limit=1, **{"group_by[]": "api_key_id"}).json()
    assert [row["api_key_id"] for row in other["data"][0]["results"]] == [default_api_key_id("other")]


def test_a_stream_whose_client_went_away_is_billed_in_full(org):
    with org.http.stream(
        "POST", "/v1/messages",
        headers={"x-api-key": org.keys["a"], "anthropic-version": "2023-06-01"},
        json={"model": HAIKU, "max_tokens": 200, "stream": True, "messages": [{"role": "user", "content": "long story"}]},
    ) as response:
        next(response.iter_bytes())  # read the first chunk, then hang up
    org.fake_clock.advance(300)
    [entry] = org.requests
    rows = [row for bucket in minute_report(org).json()["data"] for row in bucket["results"]]
    assert [row["output_tokens"] for row in rows] == [entry["usage"]["output_tokens"]]
    assert entry["usage"]["output_tokens"] > 0


def test_refused_requests_are_not_billed(org):
    org.set_behaviour("a", "overloaded")
    assert prompt(org, "a").status_code == 529
    org.fake_clock.advance(300)
    assert all(bucket["results"] == [] for bucket in minute_report(org).json()["data"])


def test_usage_report_pages_with_has_more_and_next_page(org):
    prompt(org, "a")
    org.fake_clock.advance(300)
    first = minute_report(org, limit=2).json()
    assert first["has_more"] is True and len(first["data"]) == 2
    seen, page = list(first["data"]), first
    while page["has_more"]:
        page = minute_report(org, limit=2, page=page["next_page"]).json()
        seen.extend(page["data"])
    assert [bucket["starting_at"] for bucket in seen][:2] == ["2026-12-31T23:55:00Z", "2026-12-31T23:56:00Z"]
    assert len(seen) == 10 and seen[-1]["ending_at"] == "2027-01-01T00:05:00Z"
    assert sum(len(bucket["results"]) for bucket in seen) == 1


def test_reports_take_only_an_admin_key(org):
    assert report(org, "usage_report/messages", key=org.keys["a"], starting_at="2026-12-31T23:00:00Z").status_code == 401
    assert report(org, "cost_report", key=make_key(), starting_at="2026-12-31T00:00:00Z").status_code == 401
    assert org.http.get("/v1/organizations/cost_report", headers={"anthropic-version": "2023-06-01"}).status_code == 401


def test_cost_report_bills_each_day_in_cents_as_decimal_strings(org):
    answer = prompt(org, "a").json()
    org.fake_clock.advance(300)
    page = report(org, "cost_report", starting_at="2026-12-30T00:00:00Z", ending_at="2027-01-02T00:00:00Z").json()
    assert [bucket["starting_at"] for bucket in page["data"]] == [
        "2026-12-30T00:00:00Z", "2026-12-31T00:00:00Z", "2027-01-01T00:00:00Z"
    ]
    [row] = page["data"][1]["results"]
    rates = current_revision().model(HAIKU).rates
    nusd = answer["usage"]["input_tokens"] * Fraction(rates.input) + answer["usage"]["output_tokens"] * Fraction(rates.output)
    assert row["currency"] == "USD" and Fraction(row["amount"]) == nusd / 10_000_000
    assert page["data"][2]["results"] == []


def test_cost_report_by_description_splits_models_and_token_types(org):
    prompt(org, "a")
    org.fake_clock.advance(300)
    page = report(org, "cost_report", starting_at="2026-12-31T00:00:00Z", ending_at="2027-01-01T00:00:00Z",
                  **{"group_by[]": "description"}).json()
    rows = page["data"][0]["results"]
    assert {(row["model"], row["token_type"], row["cost_type"]) for row in rows} == {
        (HAIKU, "uncached_input_tokens", "tokens"), (HAIKU, "output_tokens", "tokens")
    }


def test_api_keys_lists_ids_and_names_of_the_organization_and_nothing_of_a_key(org):
    page = report(org, "api_keys", status="active").json()
    assert [(key["id"], key["name"]) for key in page["data"]] == [(default_api_key_id("a"), "a"), ("apikey_01bbbb", "b")]
    assert all("partial_key_hint" not in key for key in page["data"])


def test_config_refuses_a_bad_api_key_id_and_a_negative_delay():
    key = make_key()
    with pytest.raises(ConfigError, match="api_key_id"):
        validate_config({"keys": [{"label": "a", "key": key, "api_key_id": "not an id"}]})
    with pytest.raises(ConfigError, match="report_delay"):
        validate_config({"keys": [{"label": "a", "key": key}], "report_delay": -1})
    with pytest.raises(ConfigError, match=r"admin_keys\[0\].key: the same key"):
        validate_config({"keys": [{"label": "a", "key": key}], "admin_keys": [{"key": key, "organization": "o"}]})
