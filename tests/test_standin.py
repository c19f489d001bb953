"""The Messages API stand-in, spoken to over real loopback sockets by a plain httpx client.

Expected shapes come from reference anthropic-api.md sections 2-4 (the recorded responses);
expected token counts from the stand-in's documented fake tokenizer (llm_accounts/standin/tokens.py):
ceil(utf-8 bytes / 4) per text.
"""

import datetime as dt
import json
import os
import re
import socket
import subprocess
import sys

import httpx
import pytest
from click.testing import CliRunner

from llm_accounts.cli import accounts
from llm_accounts.standin import ConfigError, StandIn, load_config, validate_config
from conftest import assert_no_key_material, make_key

SONNET = "claude-sonnet-4-5-20250929"
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$")

# Reference section 3.4: a real stream (Sonnet 4.5), used for its structure: event order and the
# keys of every payload. Values differ; shapes must not.
RECORDED_STREAM = (
    'event: message_start\n'
    'data: {"type":"message_start","message":{"model":"claude-sonnet-4-5-20250929",'
    '"id":"msg_01LtFpmR8SbmiK2kRA5sWXNi","type":"message","role":"assistant","content":[],"stop_reason":null,'
    '"stop_sequence":null,"usage":{"input_tokens":135,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,'
    '"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":1,'
    '"service_tier":"standard","inference_geo":"not_available"}}   }\n\n'
    'event: content_block_start\n'
    'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}               }\n\n'
    'event: ping\n'
    'data: {"type": "ping"}\n\n'
    'event: content_block_delta\n'
    'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"["}   }\n\n'
    'event: content_block_delta\n'
    'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"12"}             }\n\n'
    'event: content_block_stop\n'
    'data: {"type":"content_block_stop","index":0           }\n\n'
    'event: message_delta\n'
    'data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":135,'
    '"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":10}               }\n\n'
    'event: message_stop\n'
    'data: {"type":"message_stop"       }\n\n'
)
# Reference section 2.1: a real non-streamed message.
RECORDED_MESSAGE = {
    "model": "claude-sonnet-4-5-20250929", "id": "msg_01EojSKby3oqoP7mb4PHsMJ7", "type": "message",
    "role": "assistant", "content": [{"type": "text", "text": "{}"}], "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 222, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
              "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
              "output_tokens": 14, "service_tier": "standard", "inference_geo": "not_available"},
}


# One plain httpx client for the module: creating a client per request costs more than the request.
client = httpx.Client(timeout=10)


class FakeClock:
    def __init__(self, start="2026-03-24T10:00:00+00:00"):
        self.now = dt.datetime.fromisoformat(start).timestamp()

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


def tokens(text):
    return -(-len(text.encode("utf-8")) // 4)


def shape(value):
    """Keys (in order) of every object, recursively; lists by their first element."""
    if isinstance(value, dict):
        return {name: shape(item) for name, item in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return None


def parse_sse(text):
    """``[(event name, parsed data)]``; also checks each event is exactly two lines and a blank line."""
    events = []
    assert text.endswith("\n\n")
    for chunk in text[:-2].split("\n\n"):
        event_line, data_line = chunk.split("\n")
        assert event_line.startswith("event: ") and data_line.startswith("data: ")
        name, data = event_line[len("event: "):], json.loads(data_line[len("data: "):])
        assert data["type"] == name
        events.append((name, data))
    return events


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def keys(canary_key):
    return {"a": canary_key, "b": make_key(), "c": make_key()}


@pytest.fixture
def server(keys, clock):
    """Keys a and c share organization org-a; b is org-b. Small cache minimum for cheap prompts."""
    config = {
        "keys": [
            {"label": "a", "key": keys["a"], "organization": "org-a"},
            {"label": "b", "key": keys["b"], "organization": "org-b"},
            {"label": "c", "key": keys["c"], "organization": "org-a"},
        ],
        "min_cache_tokens": 100,
    }
    with StandIn(config, clock=clock) as running:
        yield running


def headers(key, auth="x-api-key", version="2023-06-01"):
    result = {"anthropic-version": version} if version else {}
    if auth == "x-api-key":
        result["x-api-key"] = key
    elif auth == "bearer":
        result["authorization"] = f"Bearer {key}"
    return result


def request(prompt="Hello there", **extra):
    return {"model": "claude-sonnet-4-5", "max_tokens": 256, "messages": [{"role": "user", "content": prompt}], **extra}


def post(server, key, body, path="/v1/messages", **options):
    return client.post(server.base_url + path, headers=headers(key, **options), json=body, timeout=10)


def stream(server, key, body, **options):
    with client.stream("POST", server.base_url + "/v1/messages", headers=headers(key, **options),
                      json={**body, "stream": True}, timeout=10) as response:
        return response, response.read().decode("utf-8")


def text_of(events):
    return "".join(data["delta"].get("text", "") for name, data in events if name == "content_block_delta")


def assert_error(response, status, error_type, message=None):
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert list(body) == ["type", "error", "request_id"]
    assert body["type"] == "error"
    assert body["error"]["type"] == error_type
    assert body["request_id"] == response.headers["request-id"]
    assert body["request_id"].startswith("req_")
    if message is not None:
        assert body["error"]["message"] == message
    return body


# Messages, non-streamed and streamed.


def test_non_streamed_message_has_the_recorded_shape(server, keys):
    response = post(server, keys["a"], request("Hello there"))
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/json"
    message = response.json()
    assert shape(message) == shape(RECORDED_MESSAGE)
    assert message["model"] == SONNET
    assert message["id"].startswith("msg_01")
    assert message["content"][0]["text"] == "Stand-in reply to: Hello there"
    assert message["stop_reason"] == "end_turn"


def test_every_response_carries_request_id_and_organization(server, keys):
    response = post(server, keys["c"], request())
    assert response.headers["request-id"].startswith("req_")
    assert response.headers["anthropic-organization-id"] == "org-a"


def test_usage_is_counted_by_the_fake_tokenizer(server, keys):
    system = "You are terse. " * 20
    prompt = "How many tokens is this prompt?"
    usage = post(server, keys["a"], request(prompt, system=system)).json()["usage"]
    assert usage["input_tokens"] == tokens(system) + tokens(prompt)
    assert usage["output_tokens"] == tokens(f"Stand-in reply to: {prompt}")


def test_streamed_message_follows_the_recorded_event_sequence(server, keys):
    response, text = stream(server, keys["a"], request("Tell me about streams"))
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["cache-control"] == "no-cache"
    events = parse_sse(text)
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert set(names[3:-3]) == {"content_block_delta"}
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert text_of(events) == "Stand-in reply to: Tell me about streams"


def test_streamed_payloads_have_the_recorded_shapes(server, keys):
    ours = {name: shape(data) for name, data in parse_sse(stream(server, keys["a"], request())[1])}
    recorded = {name: shape(data) for name, data in parse_sse(RECORDED_STREAM)}
    assert ours == recorded


def test_stream_pads_data_lines_like_the_real_api(server, keys):
    text = stream(server, keys["a"], request())[1]
    assert re.search(r'^data: \{.*\} +\}$', text, re.MULTILINE)
    assert 'data: {"type": "ping"}\n' in text


def test_stream_usage_starts_at_one_output_token_and_ends_cumulative(server, keys):
    events = parse_sse(stream(server, keys["a"], request("Count me"))[1])
    start, delta = events[0][1]["message"]["usage"], events[-2][1]["usage"]
    expected_input = tokens("Count me")
    assert start["output_tokens"] == 1
    assert start["input_tokens"] == delta["input_tokens"] == expected_input
    assert delta["output_tokens"] == tokens("Stand-in reply to: Count me")
    assert events[-2][1]["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}


def test_same_request_gets_the_same_reply_apart_from_ids(server, keys):
    first, second = (post(server, keys["a"], request("Same")).json() for _ in range(2))
    assert first["id"] != second["id"]
    assert {**first, "id": None} == {**second, "id": None}


def test_streamed_and_non_streamed_replies_agree(server, keys):
    message = post(server, keys["a"], request("Agree")).json()
    events = parse_sse(stream(server, keys["a"], request("Agree"))[1])
    assert text_of(events) == message["content"][0]["text"]
    assert events[-2][1]["usage"]["output_tokens"] == message["usage"]["output_tokens"]


def test_max_tokens_truncates_the_reply(server, keys):
    message = post(server, keys["a"], request("A long enough prompt", max_tokens=3)).json()
    assert message["stop_reason"] == "max_tokens"
    assert message["usage"]["output_tokens"] == 3
    assert message["content"][0]["text"] == "Stand-in reply to: A long enough prompt"[:12]


def test_stop_sequence_ends_the_reply(server, keys):
    message = post(server, keys["a"], request("alpha STOP beta", stop_sequences=["beta", "STOP"])).json()
    assert message["stop_reason"] == "stop_sequence"
    assert message["stop_sequence"] == "STOP"
    assert message["content"][0]["text"] == "Stand-in reply to: alpha "


def test_stop_sequence_is_reported_in_the_stream(server, keys):
    events = parse_sse(stream(server, keys["a"], request("alpha STOP beta", stop_sequences=["STOP"]))[1])
    assert events[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "STOP"}
    assert text_of(events) == "Stand-in reply to: alpha "


WEATHER = {
    "name": "get_weather",
    "description": "Weather for a place",
    "input_schema": {
        "type": "object",
        "properties": {
            "location": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer"},
        },
        "required": ["location"],
    },
}
TIME = {"name": "get_time", "input_schema": {"type": "object", "properties": {"zone": {"type": "string"}}}}


def test_tools_get_a_tool_use_block_built_from_the_schema(server, keys):
    message = post(server, keys["a"], request("Weather in Paris?", tools=[WEATHER, TIME])).json()
    assert message["stop_reason"] == "tool_use"
    assert [block["type"] for block in message["content"]] == ["text", "tool_use"]
    tool_use = message["content"][1]
    assert tool_use["id"].startswith("toolu_01")
    assert tool_use["name"] == "get_weather"
    assert tool_use["input"] == {"location": "example", "unit": "celsius", "days": 1}


def test_forced_tool_choice_gets_only_that_tool(server, keys):
    body = request("What time is it?", tools=[WEATHER, TIME], tool_choice={"type": "tool", "name": "get_time"})
    message = post(server, keys["a"], body).json()
    assert [(block["type"], block["name"]) for block in message["content"]] == [("tool_use", "get_time")]


def test_streamed_tool_use_sends_input_json_deltas(server, keys):
    body = request("Weather?", tools=[WEATHER], tool_choice={"type": "any"})
    events = parse_sse(stream(server, keys["a"], body)[1])
    start = next(data for name, data in events if name == "content_block_start")
    assert start["content_block"]["type"] == "tool_use"
    assert start["content_block"]["input"] == {}
    parts = [data["delta"]["partial_json"] for name, data in events if name == "content_block_delta"]
    assert parts[0] == ""
    assert len(parts) > 2
    assert json.loads("".join(parts)) == {"location": "example", "unit": "celsius", "days": 1}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_tool_result_last_gets_text_mentioning_the_result(server, keys):
    body = request(tools=[WEATHER])
    body["messages"] = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01x", "name": "get_weather",
                                           "input": {"location": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01x", "content": "18C and sunny"}]},
    ]
    message = post(server, keys["a"], body).json()
    assert message["stop_reason"] == "end_turn"
    assert message["content"] == [{"type": "text", "text": "The tool returned: 18C and sunny"}]


def test_thinking_comes_first_with_a_signature(server, keys):
    body = request("Think first", max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024})
    message = post(server, keys["a"], body).json()
    assert [block["type"] for block in message["content"]] == ["thinking", "text"]
    assert message["content"][0]["thinking"]
    assert message["content"][0]["signature"]
    thought = message["content"][0]["thinking"]
    assert message["usage"]["output_tokens"] == tokens(thought) + tokens("Stand-in reply to: Think first")


def test_streamed_thinking_sends_thinking_then_signature_deltas(server, keys):
    body = request("Think first", max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024})
    events = parse_sse(stream(server, keys["a"], body)[1])
    thinking = [data["delta"]["type"] for name, data in events if name == "content_block_delta" and data["index"] == 0]
    assert set(thinking[:-1]) == {"thinking_delta"}
    assert thinking[-1] == "signature_delta"
    starts = [data["content_block"]["type"] for name, data in events if name == "content_block_start"]
    assert starts == ["thinking", "text"]


def test_thinking_budget_below_minimum_is_refused(server, keys):
    body = request(max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 500})
    assert_error(post(server, keys["a"], body), 400, "invalid_request_error",
                 "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")


# Authentication and headers.


def test_x_api_key_is_accepted(server, keys):
    assert post(server, keys["b"], request(), auth="x-api-key").status_code == 200
    assert server.requests[-1]["auth"] == "x-api-key"
    assert server.requests[-1]["label"] == "b"


def test_bearer_authorization_is_accepted(server, keys):
    assert post(server, keys["b"], request(), auth="bearer").status_code == 200
    assert server.requests[-1]["auth"] == "bearer"
    assert server.requests[-1]["label"] == "b"


def test_both_auth_headers_are_refused(server, keys):
    both = {**headers(keys["a"]), "authorization": f"Bearer {keys['a']}"}
    response = client.post(server.base_url + "/v1/messages", headers=both, json=request())
    assert_error(response, 400, "invalid_request_error")


def test_missing_key_gets_401(server):
    response = post(server, None, request(), auth=None)
    assert_error(response, 401, "authentication_error", "x-api-key header is required")
    assert server.requests[-1]["label"] is None


def test_unknown_key_gets_401(server):
    response = post(server, make_key(), request())
    assert_error(response, 401, "authentication_error", "invalid x-api-key")
    assert "anthropic-organization-id" not in response.headers


def test_unknown_bearer_key_gets_401(server):
    assert_error(post(server, make_key(), request(), auth="bearer"), 401, "authentication_error", "invalid x-api-key")


def test_missing_anthropic_version_gets_400(server, keys):
    assert_error(post(server, keys["a"], request(), version=None), 400, "invalid_request_error",
                 "anthropic-version: header is required")


def test_unknown_anthropic_version_gets_400(server, keys):
    assert_error(post(server, keys["a"], request(), version="2099-01-01"), 400, "invalid_request_error")


def test_version_2026_10_21_is_accepted(server, keys):
    assert post(server, keys["a"], request(), version="2026-10-21").status_code == 200


def test_version_2026_10_21_refuses_sampling_parameters(server, keys):
    response = post(server, keys["a"], request(temperature=0.5), version="2026-10-21")
    assert_error(response, 400, "invalid_request_error", "temperature: Extra inputs are not permitted")


def test_unknown_model_gets_404(server, keys):
    assert_error(post(server, keys["a"], request(model="sonnet")), 404, "not_found_error", "model: sonnet")


@pytest.mark.parametrize("model", [
    "claude-3-5-haiku-20241022", "claude-3-7-sonnet-20250219", "claude-sonnet-4-20250514", "claude-opus-4-20250514",
])
def test_retired_model_gets_404(server, keys, model):
    assert_error(post(server, keys["a"], request(model=model)), 404, "not_found_error", f"model: {model}")


def test_missing_max_tokens_gets_400(server, keys):
    body = request()
    del body["max_tokens"]
    assert_error(post(server, keys["a"], body), 400, "invalid_request_error", "max_tokens: Field required")


def test_unknown_path_gets_404(server, keys):
    response = client.get(server.base_url + "/v1/nothing", headers=headers(keys["a"]))
    assert_error(response, 404, "not_found_error")


def test_successful_responses_carry_rate_limit_headers(server, keys):
    response = post(server, keys["a"], request())
    assert int(response.headers["anthropic-ratelimit-requests-remaining"]) > 0
    assert RFC3339.match(response.headers["anthropic-ratelimit-tokens-reset"])


# Behaviours.

RATE_LIMIT_HEADERS = [
    f"anthropic-ratelimit-{family}-{part}"
    for family in ("requests", "tokens", "input-tokens", "output-tokens")
    for part in ("limit", "remaining", "reset")
]


def test_rate_limited_gets_429_with_retry_headers(server, keys, clock):
    server.set_behaviour("a", "rate_limited", retry_after=7)
    response = post(server, keys["a"], request())
    body = assert_error(response, 429, "rate_limit_error")
    assert "rate limit" in body["error"]["message"]
    assert response.headers["retry-after"] == "7"
    assert response.headers["x-should-retry"] == "true"
    assert response.headers["anthropic-organization-id"] == "org-a"
    for name in RATE_LIMIT_HEADERS:
        assert name in response.headers
    assert response.headers["anthropic-ratelimit-requests-remaining"] == "0"
    reset = dt.datetime.strptime(response.headers["anthropic-ratelimit-requests-reset"], "%Y-%m-%dT%H:%M:%SZ")
    assert reset.replace(tzinfo=dt.timezone.utc).timestamp() == clock() + 7


def test_spend_limit_gets_429_with_error_code_and_no_retry_after(server, keys):
    server.set_behaviour("a", "spend_limit")
    response = post(server, keys["a"], request())
    assert response.status_code == 429
    body = response.json()
    assert body["error"]["type"] == "rate_limit_error"
    assert body["error"]["details"] == {"error_code": "enforced_spend_limit_reached"}
    assert "retry-after" not in response.headers


@pytest.mark.parametrize("behaviour,status,error_type,message", [
    ("overloaded", 529, "overloaded_error", "Overloaded"),
    ("api_error", 500, "api_error", "Internal server error"),
    ("unauthorized", 401, "authentication_error", "invalid x-api-key"),
    ("forbidden", 403, "permission_error", None),
    ("credit_balance_too_low", 400, "invalid_request_error",
     "Your credit balance is too low to access the Anthropic API. "
     "Please go to Plans & Billing to upgrade or purchase credits."),
])
def test_error_behaviour_gets_its_documented_response(server, keys, behaviour, status, error_type, message):
    server.set_behaviour("a", behaviour)
    response = post(server, keys["a"], request())
    assert_error(response, status, error_type, message)
    assert response.headers["anthropic-organization-id"] == "org-a"


def test_usage_limit_reached_names_the_regain_date(server, keys):
    server.set_behaviour("a", "usage_limit_reached")
    assert_error(post(server, keys["a"], request()), 400, "invalid_request_error",
                 "You have reached your specified API usage limits. You will regain access on 2026-04-01 at 00:00 UTC.")


def test_prompt_too_long_behaviour(server, keys):
    server.set_behaviour("a", "prompt_too_long")
    body = assert_error(post(server, keys["a"], request()), 400, "invalid_request_error")
    assert re.fullmatch(r"prompt is too long: \d+ tokens > 200000 maximum", body["error"]["message"])


def test_prompt_over_the_context_window_is_refused(server, keys):
    prompt = "x" * (200_001 * 4)
    assert_error(post(server, keys["a"], request(prompt)), 400, "invalid_request_error",
                 "prompt is too long: 200001 tokens > 200000 maximum")


def test_max_tokens_too_large_behaviour(server, keys):
    server.set_behaviour("a", "max_tokens_too_large")
    body = assert_error(post(server, keys["a"], request()), 400, "invalid_request_error")
    assert "maximum allowed number of output tokens for claude-sonnet-4-5-20250929" in body["error"]["message"]


def test_max_tokens_over_the_model_maximum_is_refused(server, keys):
    assert_error(post(server, keys["a"], request(max_tokens=200_000)), 400, "invalid_request_error",
                 "max_tokens: 200000 > 64000, which is the maximum allowed number of output tokens for "
                 "claude-sonnet-4-5-20250929")


def test_stream_error_sends_an_error_event_and_no_message_stop(server, keys):
    server.set_behaviour("a", "stream_error")
    response, text = stream(server, keys["a"], request("A reply long enough to cut"))
    assert response.status_code == 200
    events = parse_sse(text)
    names = [name for name, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert "content_block_delta" in names
    assert names[-1] == "error"
    assert events[-1][1] == {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    assert "message_stop" not in names and "message_delta" not in names


@pytest.mark.parametrize(
    "behaviour, error_type, says",
    [
        ("stream_rate_limit_error", "rate_limit_error", "rate limit"),
        ("stream_authentication_error", "authentication_error", "x-api-key"),
        ("stream_permission_error", "permission_error", "permission"),
        ("stream_billing_error", "billing_error", "billing"),
        ("stream_credit_balance_too_low", "invalid_request_error", "credit balance is too low"),
    ],
)
def test_each_stream_error_behaviour_ends_the_stream_with_its_error_event(server, keys, behaviour, error_type, says):
    server.set_behaviour("a", behaviour)
    response, text = stream(server, keys["a"], request("A reply long enough to cut"))
    assert response.status_code == 200
    events = parse_sse(text)
    assert "content_block_delta" in [name for name, _ in events]
    name, data = events[-1]
    assert (name, data["type"], data["error"]["type"]) == ("error", "error", error_type)
    assert says in data["error"]["message"]


def test_stream_error_without_streaming_gets_529(server, keys):
    server.set_behaviour("a", "stream_error")
    assert_error(post(server, keys["a"], request()), 529, "overloaded_error", "Overloaded")


def test_drop_closes_a_stream_after_some_deltas(server, keys):
    server.set_behaviour("a", "drop")
    received = []
    with pytest.raises(httpx.RemoteProtocolError):
        with client.stream("POST", server.base_url + "/v1/messages", headers=headers(keys["a"]),
                          json={**request("A reply long enough to cut"), "stream": True}, timeout=10) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                received.append(line)
    assert "event: message_start" in received
    assert "event: content_block_delta" in received
    assert "event: message_stop" not in received
    assert (server.requests[-1]["status"], server.requests[-1]["dropped"]) == (200, True)


def test_drop_without_streaming_closes_without_a_response(server, keys):
    server.set_behaviour("a", "drop")
    with pytest.raises(httpx.RemoteProtocolError):
        post(server, keys["a"], request())
    assert (server.requests[-1]["status"], server.requests[-1]["dropped"]) == (0, True)


def test_slow_delays_the_response_headers(server, keys):
    server.set_behaviour("a", "slow", delay=0.3)
    with pytest.raises(httpx.ReadTimeout):
        client.post(server.base_url + "/v1/messages", headers=headers(keys["a"]), json=request(),
                   timeout=httpx.Timeout(5, read=0.05))
    server.set_behaviour("a", "slow", delay=0.05)
    assert post(server, keys["a"], request()).status_code == 200


def test_slow_waits_between_stream_events(server, keys):
    server.set_behaviour("a", "slow", delay=0.4)
    body = json.dumps({**request(), "stream": True}).encode()
    head = "".join(f"{name}: {value}\r\n" for name, value in headers(keys["a"]).items())
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        sock.sendall(
            f"POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {len(body)}\r\n{head}\r\n".encode()
            + body
        )
        received = b""
        while b"message_start" not in received:
            received += sock.recv(65536)
        # The next event is held back by the delay: a short read times out with nothing more.
        sock.settimeout(0.1)
        with pytest.raises(socket.timeout):
            while True:
                chunk = sock.recv(65536)
                assert b"content_block_start" not in chunk
                if not chunk:
                    break


def test_echo_key_splits_the_key_across_deltas(server, keys):
    server.set_behaviour("a", "echo_key")
    events = parse_sse(stream(server, keys["a"], request())[1])
    deltas = [data["delta"]["text"] for name, data in events if name == "content_block_delta"]
    assert keys["a"] in "".join(deltas)
    assert not any(keys["a"] in delta for delta in deltas)
    assert not any("sk-ant" in delta for delta in deltas), "the key's prefix itself is split"
    assert sum(1 for delta in deltas if delta and delta in keys["a"]) >= 3


def test_echo_key_without_streaming_quotes_the_key(server, keys):
    server.set_behaviour("a", "echo_key")
    assert keys["a"] in post(server, keys["a"], request()).json()["content"][0]["text"]


def test_script_runs_before_the_standing_behaviour(keys):
    config = {"keys": [{"label": "a", "key": keys["a"], "script": ["rate_limited", "overloaded"]}]}
    with StandIn(config) as running:
        statuses = [post(running, keys["a"], request()).status_code for _ in range(3)]
    assert statuses == [429, 529, 200]


def test_set_behaviour_replaces_the_script(keys):
    config = {"keys": [{"label": "a", "key": keys["a"], "script": ["rate_limited"]}]}
    with StandIn(config) as running:
        running.set_behaviour("a", "api_error", script=["forbidden"])
        statuses = [post(running, keys["a"], request()).status_code for _ in range(2)]
    assert statuses == [403, 500]


def test_models_follow_the_standing_behaviour_not_the_script(keys):
    config = {"keys": [{"label": "a", "key": keys["a"], "behaviour": "forbidden", "script": ["ok"]}]}
    with StandIn(config) as running:
        models = client.get(running.base_url + "/v1/models", headers=headers(keys["a"]))
        assert_error(models, 403, "permission_error")
        assert post(running, keys["a"], request()).status_code == 200


def test_set_behaviour_refuses_unknown_label_and_behaviour(server):
    with pytest.raises(ConfigError, match="label"):
        server.set_behaviour("zz", "ok")
    with pytest.raises(ConfigError, match="behaviour: must be one of"):
        server.set_behaviour("a", "explode")


def test_behaviour_of_one_key_leaves_others_alone(server, keys):
    server.set_behaviour("a", "overloaded")
    assert post(server, keys["b"], request()).status_code == 200


# Prompt cache.


def cached_system(text="S" * 4000, ttl=None):
    control = {"type": "ephemeral", **({"ttl": ttl} if ttl else {})}
    return [{"type": "text", "text": text, "cache_control": control}]


def usage_of(server, key, body):
    response = post(server, key, body)
    assert response.status_code == 200, response.text
    return response.json()["usage"]


def test_first_request_writes_the_prefix_and_the_repeat_reads_it(server, keys):
    body = request("Hello", system=cached_system())
    first, second = usage_of(server, keys["a"], body), usage_of(server, keys["a"], body)
    assert (first["cache_creation_input_tokens"], first["cache_read_input_tokens"], first["input_tokens"]) == (
        1000, 0, tokens("Hello"))
    assert first["cache_creation"] == {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 0}
    assert (second["cache_creation_input_tokens"], second["cache_read_input_tokens"], second["input_tokens"]) == (
        0, 1000, tokens("Hello"))


def test_cache_entry_expires_after_five_minutes(server, keys, clock):
    body = request(system=cached_system())
    usage_of(server, keys["a"], body)
    clock.advance(301)
    again = usage_of(server, keys["a"], body)
    assert (again["cache_read_input_tokens"], again["cache_creation_input_tokens"]) == (0, 1000)


def test_cache_hit_refreshes_the_entry(server, keys, clock):
    body = request(system=cached_system())
    usage_of(server, keys["a"], body)
    clock.advance(250)
    usage_of(server, keys["a"], body)
    clock.advance(250)  # 500 s after the write, 250 s after the refreshing hit
    assert usage_of(server, keys["a"], body)["cache_read_input_tokens"] == 1000


def test_one_hour_entry_outlives_five_minutes(server, keys, clock):
    body = request(system=cached_system(ttl="1h"))
    first = usage_of(server, keys["a"], body)
    assert first["cache_creation"] == {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 1000}
    clock.advance(3000)
    assert usage_of(server, keys["a"], body)["cache_read_input_tokens"] == 1000
    clock.advance(3601)
    assert usage_of(server, keys["a"], body)["cache_creation"]["ephemeral_1h_input_tokens"] == 1000


def test_cache_writes_split_between_one_hour_and_five_minute_breakpoints(server, keys):
    system = [
        {"type": "text", "text": "H" * 2000, "cache_control": {"type": "ephemeral", "ttl": "1h"}},
        {"type": "text", "text": "F" * 1200, "cache_control": {"type": "ephemeral"}},
    ]
    usage = usage_of(server, keys["a"], request("Hi", system=system))
    assert usage["cache_creation"] == {"ephemeral_5m_input_tokens": 300, "ephemeral_1h_input_tokens": 500}
    assert usage["cache_creation_input_tokens"] == 800
    assert usage["input_tokens"] == tokens("Hi")


def test_prefix_below_the_minimum_is_not_cached(server, keys):
    body = request("Hello", system=cached_system("S" * 200))  # 50 tokens < 100
    for _ in range(2):
        usage = usage_of(server, keys["a"], body)
        assert (usage["cache_creation_input_tokens"], usage["cache_read_input_tokens"]) == (0, 0)
        assert usage["input_tokens"] == 50 + tokens("Hello")


def test_model_minimum_applies_without_a_configured_one(standin, canary_key):
    body = request("Hello", system=cached_system("S" * 4000))  # 1000 tokens < Sonnet 4.5's 1024
    assert usage_of(standin, canary_key, body)["cache_creation_input_tokens"] == 0
    body = request("Hello", system=cached_system("S" * 4100))  # 1025 tokens
    assert usage_of(standin, canary_key, body)["cache_creation_input_tokens"] == 1025


def test_each_organization_has_its_own_cache(server, keys):
    body = request(system=cached_system())
    usage_of(server, keys["a"], body)
    assert usage_of(server, keys["b"], body)["cache_read_input_tokens"] == 0  # org-b
    assert usage_of(server, keys["c"], body)["cache_read_input_tokens"] == 1000  # org-a, like a


def test_cache_is_per_model(server, keys):
    usage_of(server, keys["a"], request(system=cached_system()))
    other = usage_of(server, keys["a"], request(system=cached_system(), model="claude-opus-4-1"))
    assert other["cache_read_input_tokens"] == 0


def test_automatic_cache_control_moves_forward_with_the_conversation(server, keys):
    system = "S" * 4000
    first = usage_of(server, keys["a"], request("Hello", system=system, cache_control={"type": "ephemeral"}))
    assert (first["cache_creation_input_tokens"], first["input_tokens"]) == (1000 + tokens("Hello"), 0)
    body = request("Hello", system=system, cache_control={"type": "ephemeral"})
    body["messages"] += [{"role": "assistant", "content": "Hi there"}, {"role": "user", "content": "More"}]
    second = usage_of(server, keys["a"], body)
    assert second["cache_read_input_tokens"] == 1000 + tokens("Hello")
    assert second["cache_creation_input_tokens"] == tokens("Hi there") + tokens("More")
    assert second["input_tokens"] == 0


def test_max_tokens_zero_writes_the_cache_without_output(server, keys):
    message = post(server, keys["a"], request(system=cached_system(), max_tokens=0)).json()
    assert (message["content"], message["stop_reason"]) == ([], "max_tokens")
    assert message["usage"]["cache_creation_input_tokens"] == 1000
    assert usage_of(server, keys["a"], request(system=cached_system()))["cache_read_input_tokens"] == 1000


def test_clear_cache_forgets_every_entry(server, keys):
    body = request(system=cached_system())
    usage_of(server, keys["a"], body)
    server.clear_cache()
    assert usage_of(server, keys["a"], body)["cache_read_input_tokens"] == 0


def test_streamed_usage_reports_cache_reads_and_writes(server, keys):
    body = request(system=cached_system())
    events = parse_sse(stream(server, keys["a"], body)[1])
    assert events[0][1]["message"]["usage"]["cache_creation"]["ephemeral_5m_input_tokens"] == 1000
    events = parse_sse(stream(server, keys["a"], body)[1])
    assert events[0][1]["message"]["usage"]["cache_read_input_tokens"] == 1000
    assert events[-2][1]["usage"]["cache_read_input_tokens"] == 1000


def test_more_than_four_breakpoints_are_refused(server, keys):
    system = [{"type": "text", "text": f"block {n}", "cache_control": {"type": "ephemeral"}} for n in range(5)]
    assert_error(post(server, keys["a"], request(system=system)), 400, "invalid_request_error",
                 "A maximum of 4 blocks with cache_control may be provided. Found 5.")


def test_one_hour_breakpoint_after_five_minute_one_is_refused(server, keys):
    system = [
        {"type": "text", "text": "first", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "second", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
    ]
    body = assert_error(post(server, keys["a"], request(system=system)), 400, "invalid_request_error")
    assert body["error"]["message"].startswith(
        "system.1.cache_control.ttl: a ttl='1h' cache_control block must not come after a ttl='5m' cache_control block"
    )


# Other endpoints.


def test_count_tokens_counts_tools_system_and_messages(server, keys):
    body = {"model": "claude-sonnet-4-5", "system": "S" * 40, "tools": [TIME],
            "messages": [{"role": "user", "content": "Hello"}]}
    response = post(server, keys["a"], body, path="/v1/messages/count_tokens")
    assert response.status_code == 200
    tool_json = json.dumps(TIME, sort_keys=True, separators=(",", ":"))
    assert response.json() == {"input_tokens": 346 + tokens(tool_json) + 10 + tokens("Hello")}


def test_count_tokens_matches_a_messages_request(server, keys):
    body = request("Some prompt", system="A system prompt")
    counted = post(server, keys["a"], {k: v for k, v in body.items() if k != "max_tokens"},
                   path="/v1/messages/count_tokens").json()["input_tokens"]
    assert usage_of(server, keys["a"], body)["input_tokens"] == counted


def test_models_list_has_the_documented_fields(server, keys):
    response = client.get(server.base_url + "/v1/models?limit=100", headers=headers(keys["a"]))
    assert response.status_code == 200
    page = response.json()
    ids = [model["id"] for model in page["data"]]
    assert SONNET in ids and "claude-opus-4-6" in ids
    assert "claude-sonnet-4-20250514" not in ids
    assert page["has_more"] is False
    assert (page["first_id"], page["last_id"]) == (ids[0], ids[-1])
    sonnet = next(model for model in page["data"] if model["id"] == SONNET)
    assert sonnet == {"type": "model", "id": SONNET, "display_name": "Claude Sonnet 4.5",
                      "created_at": "2025-09-29T00:00:00Z", "max_input_tokens": 200_000, "max_tokens": 64_000}


def test_models_list_pages_with_after_id(server, keys):
    first = client.get(server.base_url + "/v1/models?limit=2", headers=headers(keys["a"])).json()
    assert first["has_more"] is True and len(first["data"]) == 2
    second = client.get(server.base_url + f"/v1/models?limit=2&after_id={first['last_id']}",
                       headers=headers(keys["a"])).json()
    assert not {m["id"] for m in first["data"]} & {m["id"] for m in second["data"]}


def test_model_by_alias_returns_the_snapshot(server, keys):
    response = client.get(server.base_url + "/v1/models/claude-sonnet-4-5", headers=headers(keys["a"]))
    assert response.json()["id"] == SONNET


def test_model_lookup_of_a_retired_id_gets_404(server, keys):
    response = client.get(server.base_url + "/v1/models/claude-opus-4-20250514", headers=headers(keys["a"]))
    assert_error(response, 404, "not_found_error", "model: claude-opus-4-20250514")


def test_models_need_a_valid_key(server):
    assert_error(client.get(server.base_url + "/v1/models", headers=headers(make_key())), 401,
                 "authentication_error", "invalid x-api-key")


# The request log.


def test_request_log_records_each_request(server, keys):
    post(server, keys["a"], request("Logged", max_tokens=64))
    entry = server.requests[-1]
    assert {k: entry[k] for k in ("method", "path", "label", "auth", "model", "stream", "status")} == {
        "method": "POST", "path": "/v1/messages", "label": "a", "auth": "x-api-key",
        "model": "claude-sonnet-4-5", "stream": False, "status": 200,
    }
    assert entry["body"]["messages"] == [{"role": "user", "content": "Logged"}]
    assert entry["headers"]["anthropic-version"] == "2023-06-01"
    assert "x-api-key" not in entry["headers"] and "authorization" not in entry["headers"]


def test_request_log_keeps_the_body_of_a_refused_request(server):
    post(server, make_key(), request("Refused"))
    entry = server.requests[-1]
    assert (entry["status"], entry["label"], entry["model"]) == (401, None, "claude-sonnet-4-5")
    assert entry["body"]["messages"][0]["content"] == "Refused"


def test_request_log_never_holds_a_key(server, keys):
    post(server, keys["a"], request())
    post(server, keys["a"], request(), auth="bearer")
    post(server, make_key(), request())
    stream(server, keys["a"], request())
    server.set_behaviour("a", "echo_key")
    stream(server, keys["a"], request())
    post(server, keys["a"], request())
    server.set_behaviour("a", "rate_limited")
    post(server, keys["a"], request())
    assert len(server.requests) == 7
    for key in keys.values():
        assert_no_key_material(repr(server.requests), key)
        assert_no_key_material(repr(server), key)


def test_standin_fixture_serves_the_canary_key(standin, canary_key):
    assert os.environ["LLM_ACCOUNTS_BASE_URL"] == standin.base_url
    assert post(standin, canary_key, request()).status_code == 200
    assert standin.requests[-1]["label"] == "a"


# Config.


def test_config_errors_name_the_field_not_the_value(tmp_path, canary_key):
    path = tmp_path / "standin.json"
    path.write_text(json.dumps({"keys": [{"label": "a", "key": canary_key, "behaviour": canary_key}]}))
    with pytest.raises(ConfigError) as error:
        load_config(path)
    assert "keys[0].behaviour: must be one of" in str(error.value)
    assert_no_key_material(str(error.value), canary_key)


def test_config_refuses_a_duplicate_key_without_showing_it(canary_key):
    config = {"keys": [{"label": "a", "key": canary_key}, {"label": "b", "key": canary_key}]}
    with pytest.raises(ConfigError, match=r"keys\[1\]\.key") as error:
        validate_config(config)
    assert_no_key_material(str(error.value), canary_key)


def test_config_refuses_unknown_fields(canary_key):
    with pytest.raises(ConfigError, match=r"keys\[0\]: unknown field 'colour'"):
        validate_config({"keys": [{"label": "a", "key": canary_key, "colour": "red"}]})


def test_config_with_broken_json_names_the_position_only(tmp_path, canary_key):
    path = tmp_path / "standin.json"
    path.write_text('{"keys": [{"label": "a", "key": "' + canary_key + '",}]}')
    with pytest.raises(ConfigError, match="not valid JSON") as error:
        load_config(path)
    assert_no_key_material(str(error.value), canary_key)


def test_config_fills_in_defaults(canary_key):
    config = validate_config({"keys": [{"label": "a", "key": canary_key}]})
    entry = config["keys"][0]
    assert (entry["organization"], entry["behaviour"], entry["script"], entry["delay"]) == ("org-a", "ok", [], 0.0)


def test_standin_refuses_a_non_loopback_host(canary_key):
    with pytest.raises(ConfigError, match="loopback"):
        StandIn({"keys": [{"label": "a", "key": canary_key}]}, host="0.0.0.0")


# The command.


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_command_serves_on_the_given_port_until_terminated(tmp_path, canary_key):
    config = tmp_path / "standin.json"
    config.write_text(json.dumps({"keys": [{"label": "a", "key": canary_key}]}))
    port = free_port()
    # Load only this plugin: faster start-up, and nothing else sees the run.
    env = {**os.environ, "LLM_LOAD_PLUGINS": "llm-accounts"}
    process = subprocess.Popen(
        [sys.executable, "-m", "llm", "accounts", "standin", "--port", str(port), "--config", str(config)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    try:
        url = process.stdout.readline().strip()
        assert url == f"http://127.0.0.1:{port}"
        response = client.post(url + "/v1/messages", headers=headers(canary_key), json=request(), timeout=10)
        assert response.status_code == 200
        assert response.json()["content"][0]["text"] == "Stand-in reply to: Hello there"
    finally:
        process.terminate()
        out, err = process.communicate(timeout=10)
    assert_no_key_material(url + out + err, canary_key)


def test_command_refuses_a_non_loopback_host(tmp_path, canary_key):
    config = tmp_path / "standin.json"
    config.write_text(json.dumps({"keys": [{"label": "a", "key": canary_key}]}))
    result = CliRunner().invoke(accounts, ["standin", "--config", str(config), "--host", "0.0.0.0"])
    assert result.exit_code == 1
    assert "--host: must be a loopback address" in result.output


def test_command_reports_a_bad_config_in_one_line(tmp_path, canary_key):
    config = tmp_path / "standin.json"
    config.write_text(json.dumps({"keys": [{"label": "a", "key": canary_key, "delay": -1}]}))
    result = CliRunner().invoke(accounts, ["standin", "--config", str(config)])
    assert result.exit_code == 1
    assert result.output.strip() == "Error: keys[0].delay: must be a number of seconds >= 0"


def test_command_reports_a_busy_port_in_one_line(tmp_path, canary_key):
    config = tmp_path / "standin.json"
    config.write_text(json.dumps({"keys": [{"label": "a", "key": canary_key}]}))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(accounts, ["standin", "--config", str(config), "--port", str(port)])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1
    assert result.output.startswith(f"Error: declaration_invalid: --port: 127.0.0.1:{port} is already in use")


def test_standin_without_config_serves_demo_keys_it_stores_in_llms_key_store(user_path, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "LLM_ACCOUNTS_"))}
    env.update(LLM_USER_PATH=str(user_path), LLM_ACCOUNTS_LEDGER=str(tmp_path / "ledger.db"))
    llm_bin = os.path.join(os.path.dirname(sys.executable), "llm")
    server = subprocess.Popen(
        [llm_bin, "accounts", "standin", "--port", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        base_url = server.stdout.readline().strip()
        described = server.stderr.readline()
        assert base_url.startswith("http://127.0.0.1:")
        assert "STANDIN_ALPHA_KEY" in described and "STANDIN_BETA_KEY" in described
        stored = json.loads((user_path / "keys.json").read_text())
        assert stored["STANDIN_ALPHA_KEY"].startswith("sk-ant-") and stored["STANDIN_BETA_KEY"].startswith("sk-ant-")
        assert oct((user_path / "keys.json").stat().st_mode & 0o777) == "0o600"
        env["LLM_ACCOUNTS_BASE_URL"] = base_url
        subprocess.run([llm_bin, "accounts", "add", "alpha", "--key-env", "STANDIN_ALPHA_KEY", "--budget", "5.00"], env=env, check=True, capture_output=True)
        answer = subprocess.run(
            [llm_bin, "-m", "claude-routed/claude-haiku-4-5", "Hello"], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL
        )
        assert answer.returncode == 0, answer.stderr
        assert answer.stdout.startswith("Stand-in reply to: Hello")
        for key in (stored["STANDIN_ALPHA_KEY"], stored["STANDIN_BETA_KEY"]):
            assert_no_key_material(described + base_url + answer.stdout + answer.stderr, key)
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_standin_that_cannot_bind_its_port_leaves_the_stored_demo_keys_alone(user_path):
    """A second `llm accounts standin` on a taken port must not replace the keys the running one
    serves: that would break it and block the accounts that name them."""
    (user_path / "keys.json").write_text(json.dumps({"STANDIN_ALPHA_KEY": "sk-ant-running-alpha", "OTHER": "x"}))
    before = (user_path / "keys.json").read_text()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(accounts, ["standin", "--port", str(port)])
    assert result.exit_code == 1
    assert result.output == (
        f"Error: declaration_invalid: --port: 127.0.0.1:{port} is already in use (another stand-in may be serving "
        "there: use its URL, or choose another --port; 0 picks a free one); the stored demo keys were left as they are\n"
    )
    assert (user_path / "keys.json").read_text() == before


def test_the_standins_printed_suggestion_works_as_printed(user_path, tmp_path):
    """Without --config the stand-in prints how to declare a demo key and prompt through it; a
    newcomer who pastes those lines gets an answer (the default model's ceiling fits the budget)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "LLM_ACCOUNTS_"))}
    env.update(
        LLM_USER_PATH=str(user_path), LLM_ACCOUNTS_LEDGER=str(tmp_path / "ledger.db"),
        PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
    )
    server = subprocess.Popen(
        [sys.executable, "-m", "llm", "accounts", "standin", "--port", "0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        server.stdout.readline()
        printed = []
        for line in iter(server.stderr.readline, ""):
            if line.startswith("Messages API stand-in running"):
                break
            printed.append(line)
        suggested = [line.strip() for line in printed if line.startswith("  ")]
        assert [line.split()[0] for line in suggested] == ["llm", "LLM_ACCOUNTS_BASE_URL=" + line_url(suggested[1])]
        for line in suggested:
            result = subprocess.run(["bash", "-c", line], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
            assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("Stand-in reply to: hi")
    finally:
        server.terminate()
        server.wait(timeout=10)


def line_url(line):
    return line.split()[0].split("=", 1)[1]


def test_the_standin_help_example_is_the_printed_suggestion():
    from llm_accounts.standin.demo import suggestion

    help_text = CliRunner().invoke(accounts, ["standin", "--help"]).output
    add, prompt = suggestion("http://127.0.0.1:8765")
    assert add in " ".join(help_text.split())
    assert prompt in help_text


def test_count_tokens_refuses_the_fields_only_a_message_takes(server, keys):
    for name, value in (("max_tokens", 256), ("stream", False), ("stop_sequences", ["x"]), ("metadata", {"user_id": "u"})):
        body = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "Hi"}], name: value}
        assert_error(post(server, keys["a"], body, path="/v1/messages/count_tokens"), 400, "invalid_request_error",
                     f"{name}: Extra inputs are not permitted")


# Answer shapes (config.SHAPES): the bytes a key with a shape sends.


def raw_exchange(server, key, body, path="/v1/messages"):
    """Status, headers and the body's bytes as sent (before any content decoding)."""
    with client.stream("POST", server.base_url + path, headers={**headers(key), "accept-encoding": "gzip"},
                       json=body, timeout=10) as response:
        return response.status_code, response.headers, b"".join(response.iter_raw())


@pytest.mark.parametrize("streamed", [False, True])
def test_a_gzip_shape_encodes_the_body_for_a_client_that_accepts_it(server, keys, streamed):
    import gzip

    server.set_behaviour("a", "ok", shapes=["gzip"])
    status, sent, raw = raw_exchange(server, keys["a"], request(stream=streamed))
    assert (status, sent["content-encoding"]) == (200, "gzip")
    decoded = gzip.decompress(raw).decode("utf-8")
    if streamed:
        assert text_of(parse_sse(decoded)) == "Stand-in reply to: Hello there"
    else:
        assert json.loads(decoded)["content"][0]["text"] == "Stand-in reply to: Hello there"


def test_a_gzip_shape_sends_plain_bytes_to_a_client_that_does_not_accept_it(server, keys):
    server.set_behaviour("a", "ok", shapes=["gzip"])
    response = client.post(server.base_url + "/v1/messages", headers={**headers(keys["a"]), "accept-encoding": "identity"},
                           json=request(), timeout=10)
    assert "content-encoding" not in response.headers and response.json()["type"] == "message"


def test_shapes_add_null_stop_details_a_caller_and_parallel_tool_calls(server, keys):
    server.set_behaviour("a", "ok", shapes=["stop_details_null", "caller", "parallel_tools"])
    clock_tool = {**TIME, "name": "clock"}
    message = post(server, keys["a"], request(tools=[TIME, clock_tool])).json()
    assert message["stop_details"] is None
    uses = [block for block in message["content"] if block["type"] == "tool_use"]
    assert [block["name"] for block in uses] == [TIME["name"], "clock"]
    assert all(block["caller"] == {"type": "direct"} for block in uses)


def test_a_text_before_thinking_shape_puts_text_first(server, keys):
    server.set_behaviour("a", "ok", shapes=["text_before_thinking"])
    body = request(max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 1024})
    kinds = [block["type"] for block in post(server, keys["a"], body).json()["content"]]
    assert kinds == ["text", "thinking", "text"]


def test_inference_geo_retry_after_and_cookies_are_sent_on_a_200(server, keys):
    server.set_behaviour("a", "ok", shapes=["retry_after_200", "set_cookie"], inference_geo="global")
    response = post(server, keys["a"], request())
    assert response.status_code == 200 and response.headers["retry-after"] == "30"
    assert "standin_session=" in response.headers["set-cookie"]
    assert response.json()["usage"]["inference_geo"] == "global"


def test_an_unknown_shape_is_refused_naming_the_field(keys):
    with pytest.raises(ConfigError, match=r"keys\[0\]\.shapes: must be a list of shapes"):
        validate_config({"keys": [{"label": "a", "key": keys["a"], "shapes": ["brotli"]}]})
