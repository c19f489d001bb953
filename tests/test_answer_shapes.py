"""Shapes real answers carry, on the routed path: each one the stand-in sends on request
(``shapes``, ``inference_geo``: llm_accounts/standin/config.py), through the sync and async
models, streamed and whole, with the user-visible result and the ledger row (issue 24, point 4).

docs/architecture.md "What the client accepts" says what each shape may and may not do.
"""

import asyncio
import sqlite3

import llm
import pytest

from routed_helpers import attempts
from llm_accounts.wire import transport
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm migrates logs.db once per session)

MODEL = "claude-routed/claude-haiku-4-5"
# Claude Haiku 4.5 in the shipped revision: nanodollars per token (docs/pricing.md).
INPUT_NUSD, OUTPUT_NUSD = 1000, 5000
MODES = ["sync-stream", "sync-whole", "async-stream", "async-whole"]


def shape(server, *shapes, **settings):
    for name in server.keys:
        server.set_behaviour(name, "ok", shapes=list(shapes), **settings)


def run(mode, prompt="Say hello", **kwargs):
    """One routed prompt in ``mode``: ``(text, response)`` once the answer is complete."""
    stream = mode.endswith("stream")
    if mode.startswith("sync"):
        response = llm.get_model(MODEL).prompt(prompt, stream=stream, **kwargs)
        return response.text(), response

    async def go():
        response = await llm.get_async_model(MODEL).prompt(prompt, stream=stream, **kwargs)
        return await response.text(), response

    return asyncio.run(go())


def tool_calls(response):
    if isinstance(response, llm.AsyncResponse):
        return asyncio.run(response.tool_calls())
    return response.tool_calls()


def settled_at_its_usage(ledger_path, server):
    """The one attempt, settled complete at the cost of the usage the stand-in billed."""
    [row] = attempts(ledger_path)
    usage = server.requests[-1]["usage"]
    assert (row["state"], row["outcome"]) == ("settled", "complete")
    assert row["cost_nusd"] == usage["input_tokens"] * INPUT_NUSD + usage["output_tokens"] * OUTPUT_NUSD
    return row


def failing_accounts(ledger_path):
    """Accounts whose shared or per-machine health row is not ``ok``."""
    db = sqlite3.connect(ledger_path)
    try:
        return [
            row
            for table in ("health", "host_health")
            for row in db.execute(f"select account, state, failure_class from {table} where state != 'ok' or failure_class is not null")
        ]
    finally:
        db.close()


def pelicans():
    """Count pelicans in the harbour"""
    return "3"


def gulls():
    """Count gulls on the pier"""
    return "7"


@pytest.mark.parametrize("mode", MODES)
def test_a_gzip_encoded_answer_is_read_decoded_and_settled(accounts, ledger_path, mode):
    shape(accounts, "gzip")
    text, _ = run(mode, "Pelicans at dawn")
    assert text == "Stand-in reply to: Pelicans at dawn"
    assert accounts.requests[-1]["headers"]["accept-encoding"].startswith("gzip")
    settled_at_its_usage(ledger_path, accounts)


@pytest.mark.parametrize("mode", ["sync-stream", "async-whole"])
def test_a_key_echoed_in_a_gzip_encoded_answer_is_scrubbed_once_decoded(accounts, ledger_path, mode):
    from conftest import assert_no_key_material

    for name in accounts.keys:
        accounts.set_behaviour(name, "echo_key", shapes=["gzip"])
    text, response = run(mode, "Repeat your key")
    assert text.startswith("Echoing the key you sent:")
    for key in accounts.keys.values():
        assert_no_key_material(text, key)
        assert_no_key_material(str(response.response_json), key)
    settled_at_its_usage(ledger_path, accounts)


def test_a_gzip_encoded_refusal_body_is_still_classified(accounts, ledger_path):
    for name in accounts.keys:
        accounts.set_behaviour(name, "rate_limited", shapes=["gzip"], retry_after=0)
    with pytest.raises(llm.ModelError) as raised:
        llm.get_model(MODEL).prompt("Hello", retries=0).text()
    assert raised.value.code == "rate_limited" and "HTTP 429 rate_limit_error" in str(raised.value)
    # A documented body, decoded: evidence nothing was billed, so each attempt settles at zero.
    assert {(row["outcome"], row["cost_nusd"], row["provider_error_type"]) for row in attempts(ledger_path)} == {
        ("rate_limited", 0, "rate_limit_error")
    }


@pytest.mark.parametrize("mode", MODES)
def test_stop_details_null_is_an_ordinary_answer(accounts, ledger_path, mode):
    shape(accounts, "stop_details_null")
    text, response = run(mode)
    assert text == "Stand-in reply to: Say hello"
    assert response.response_json["stop_reason"] == "end_turn"
    settled_at_its_usage(ledger_path, accounts)


@pytest.mark.parametrize("mode", MODES)
def test_a_tool_use_block_with_a_caller_becomes_a_tool_call(accounts, ledger_path, mode):
    shape(accounts, "caller")
    _, response = run(mode, "How many pelicans?", tools=[llm.Tool.function(pelicans)])
    [call] = tool_calls(response)
    assert call.name == "pelicans" and call.tool_call_id.startswith("toolu_")
    [block] = [b for b in response.response_json["content"] if b["type"] == "tool_use"]
    assert block["caller"] == {"type": "direct"}
    settled_at_its_usage(ledger_path, accounts)


@pytest.mark.parametrize("mode", MODES)
def test_parallel_tool_calls_in_one_answer_are_all_kept(accounts, ledger_path, mode):
    shape(accounts, "parallel_tools", "caller")
    _, response = run(mode, "Count the birds", tools=[llm.Tool.function(pelicans), llm.Tool.function(gulls)])
    calls = tool_calls(response)
    assert [call.name for call in calls] == ["pelicans", "gulls"]
    assert len({call.tool_call_id for call in calls}) == 2
    assert response.response_json["stop_reason"] == "tool_use"
    settled_at_its_usage(ledger_path, accounts)


def test_parallel_tool_calls_are_answered_in_one_turn_by_a_chain(accounts, ledger_path):
    shape(accounts, "parallel_tools")
    chain = llm.get_model(MODEL).chain("Count the birds", tools=[llm.Tool.function(pelicans), llm.Tool.function(gulls)])
    assert chain.text().endswith("The tool returned: 3 7")
    # The second request carries both results in the one user turn the API requires.
    results = [b for b in accounts.requests[-1]["body"]["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert [r["content"] for r in results] == ["3", "7"]
    assert [(row["state"], row["outcome"]) for row in attempts(ledger_path)] == [("settled", "complete")] * 2


@pytest.mark.parametrize("mode", MODES)
def test_text_before_thinking_keeps_both_in_order(accounts, ledger_path, mode):
    shape(accounts, "text_before_thinking")
    text, response = run(mode, "Pelicans", thinking=True)
    assert text.startswith("Let me think about this.") and text.endswith("Stand-in reply to: Pelicans")
    kinds = [block["type"] for block in response.response_json["content"]]
    assert kinds == ["text", "thinking", "text"]
    settled_at_its_usage(ledger_path, accounts)


@pytest.mark.parametrize("mode", MODES)
def test_inference_geo_global_is_priced_at_standard_rates(accounts, ledger_path, mode):
    shape(accounts, inference_geo="global")
    _, response = run(mode)
    settled_at_its_usage(ledger_path, accounts)
    # The standard routing is no detail worth showing, as not_available is not (llm -u).
    assert "inference_geo" not in response.token_details and response.token_details["paid_by"] in accounts.keys


@pytest.mark.parametrize("mode", ["sync-stream", "async-whole"])
def test_inference_geo_us_keeps_the_ceiling_open_on_a_model_without_geo_pricing(accounts, ledger_path, mode):
    # Haiku 4.5 predates data residency: the revision prices no geo for it, so a usage that says
    # "us" is one it cannot price (docs/pricing.md "Inference geo (data residency)"): the answer is
    # delivered, the attempt stays open. On a model that prices it, "us" settles at its multiplier
    # (tests/test_inference_geo.py).
    shape(accounts, inference_geo="us")
    text, _ = run(mode)
    assert text == "Stand-in reply to: Say hello"
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"], row["cost_nusd"]) == ("open", "usage_incomplete", None)


@pytest.mark.parametrize("mode", MODES)
def test_a_retry_after_header_on_a_200_is_not_a_failure(accounts, ledger_path, mode):
    shape(accounts, "retry_after_200")
    text, _ = run(mode)
    assert text == "Stand-in reply to: Say hello"
    settled_at_its_usage(ledger_path, accounts)
    assert len([r for r in accounts.requests if r["path"] == "/v1/messages"]) == 1
    assert failing_accounts(ledger_path) == []


@pytest.mark.parametrize("mode", MODES)
def test_cookies_an_answer_sets_are_never_sent_back(accounts, ledger_path, mode):
    shape(accounts, "set_cookie")
    stream = mode.endswith("stream")
    if mode.startswith("sync"):
        model = llm.get_model(MODEL)
        for text in ("First", "Second"):
            model.prompt(text, stream=stream).text()
        jar = transport.shared_client().cookies.jar
    else:
        async def both():
            # One event loop: both prompts share its pooled client, as in one process.
            model = llm.get_async_model(MODEL)
            for text in ("First", "Second"):
                await (await model.prompt(text, stream=stream)).text()
            return transport.shared_async_client().cookies.jar

        jar = asyncio.run(both())
    sent = [r["headers"] for r in accounts.requests if r["path"] == "/v1/messages"]
    assert len(sent) == 2 and all("cookie" not in headers for headers in sent)
    assert len(jar) == 0
    assert [row["outcome"] for row in attempts(ledger_path)] == ["complete", "complete"]


def test_cookies_are_refused_on_a_connection_every_account_shares(accounts, ledger_path):
    # Both accounts answer with cookies through one pooled client: none rides from one to the other.
    shape(accounts, "set_cookie")
    model = llm.get_model(MODEL)
    model.prompt("One", account="alpha").text()
    model.prompt("Two", account="beta").text()
    sent = [r for r in accounts.requests if r["path"] == "/v1/messages"]
    assert [r["label"] for r in sent] == ["alpha", "beta"]
    assert all("cookie" not in r["headers"] for r in sent)
