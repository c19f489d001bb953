"""claude-routed builds the request llm-anthropic 0.30 builds for the same model, and behaves as
it does (docs/architecture.md "Model ids"). Each test asserts on the body the stand-in received."""

import asyncio
import json

import llm
import pytest

from llm_accounts import models
from llm_accounts.wire import transport
from llm_accounts.wire.payload import SCHEMA_TOOL
from routed_helpers import attempts, llm_cli, llm_ok, sent
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

HAIKU = "claude-routed/claude-haiku-4-5"
SONNET = "claude-routed/claude-sonnet-4-6"
OPUS_45 = "claude-routed/claude-opus-4-5"
OPUS_48 = "claude-routed/claude-opus-4-8"
SONNET_5 = "claude-routed/claude-sonnet-5"
FABLE = "claude-routed/claude-fable-5"




def refused(*args):
    result = llm_cli(*args)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


# Default max_tokens: claude-routed's own, at most 32,000 (tests/test_routed_max_tokens.py); the
# one deliberate difference from llm-anthropic's request (docs/prompting.md "max_tokens").


@pytest.mark.parametrize("model", ["claude-routed", SONNET, HAIKU, OPUS_45, SONNET_5])
def test_default_max_tokens_is_the_routed_default_not_llm_anthropics(accounts, model):
    llm_ok("-m", model, "Hello")
    assert sent(accounts)["max_tokens"] == 32_000


def test_max_tokens_option_still_sets_it(accounts):
    llm_ok("-m", SONNET, "Hello", "-o", "max_tokens", "300")
    assert sent(accounts)["max_tokens"] == 300


def test_llms_own_default_options_set_max_tokens_for_every_cli_prompt(accounts, ledger_path):
    # docs/prompting.md: "llm models options set claude-routed max_tokens N" is how a CLI user
    # lowers what every plain prompt holds once its answer starts.
    llm_ok("models", "options", "set", "claude-routed", "max_tokens", "4096")
    llm_ok("-m", "claude-routed", "Hello")
    assert sent(accounts)["max_tokens"] == 4096
    from llm_accounts import ladder

    [row] = attempts(ledger_path)
    assert row["reserved_nusd"] == ladder.quote_for("claude-sonnet-4-6", max_tokens=4096).ceiling_nusd


def test_the_ceiling_reserved_follows_the_default_max_tokens(accounts, ledger_path):
    from llm_accounts import ladder

    llm_ok("-m", HAIKU, "Hello")
    [row] = attempts(ledger_path)
    # What was reserved before sending (the hold shrinks once message_start counts the input).
    assert row["reserved_nusd"] == ladder.quote_for("claude-haiku-4-5").ceiling_nusd
    assert row["reserved_nusd"] == ladder.quote_for("claude-haiku-4-5", max_tokens=32_000).ceiling_nusd


# user_id


def test_user_id_is_sent_as_metadata(accounts):
    llm_ok("-m", HAIKU, "Hello", "-o", "user_id", "user-4f1c")
    assert sent(accounts)["metadata"] == {"user_id": "user-4f1c"}


def test_a_user_id_that_looks_like_a_key_is_refused_without_repeating_it(accounts):
    line = refused("-m", HAIKU, "Hello", "-o", "user_id", "sk-ant-api03-secretish")
    assert line.startswith("Error: declaration_invalid: option user_id:")
    assert "secretish" not in line
    assert accounts.requests == []


# prefill and hide_prefill


def test_prefill_is_sent_as_an_assistant_turn_and_shown_first(accounts):
    result = llm_ok("-m", HAIKU, "Name a colour", "-o", "prefill", "My answer:")
    assert sent(accounts)["messages"][-1] == {"role": "assistant", "content": [{"type": "text", "text": "My answer:"}]}
    assert result.output.startswith("My answer:Stand-in reply")


def test_hide_prefill_sends_it_but_does_not_show_it(accounts):
    result = llm_ok("-m", HAIKU, "Name a colour", "-o", "prefill", "My answer:", "-o", "hide_prefill", "1")
    assert sent(accounts)["messages"][-1]["role"] == "assistant"
    assert result.output.startswith("Stand-in reply")


def test_prefill_on_a_streamed_async_prompt_comes_first(accounts):
    async def run():
        model = llm.get_async_model(HAIKU)
        response = model.prompt("Name a colour", prefill="Answer:")
        return [chunk async for chunk in response]

    chunks = asyncio.run(run())
    assert chunks[0] == "Answer:"


def test_prefill_is_refused_on_a_model_with_adaptive_thinking(accounts):
    line = refused("-m", SONNET, "Hello", "-o", "prefill", "Sure:")
    assert line.startswith("Error: declaration_invalid: option prefill: claude-sonnet-4-6 does not accept a prefilled answer")
    assert accounts.requests == []


# cache: llm-anthropic's boolean as well as none|5m|1h


def test_cache_true_marks_the_newest_turn_for_five_minutes(accounts):
    llm_ok("-m", HAIKU, "Hello", "-o", "cache", "true")
    assert sent(accounts)["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_cache_true_from_python_is_the_same_mark(accounts):
    llm.get_model(HAIKU).prompt("Hello", cache=True).text()
    assert sent(accounts)["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_cache_false_sends_no_mark(accounts):
    llm_ok("-m", HAIKU, "Hello", "-s", "Be brief", "-o", "cache", "false")
    assert "cache_control" not in json.dumps(sent(accounts))


def test_cache_1h_still_marks_the_system_prompt_for_an_hour(accounts):
    llm_ok("-m", HAIKU, "Hello", "-s", "Be brief", "-o", "cache", "1h")
    assert sent(accounts)["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


def test_an_unknown_cache_value_is_refused_in_one_line(accounts):
    line = refused("-m", HAIKU, "Hello", "-o", "cache", "forever")
    assert line == "Error: declaration_invalid: option cache: must be one of: none, 5m, 1h (or true/false) (see llm models --options)"


# Thinking: adaptive where supported, effort, display for -R


def test_thinking_on_a_model_with_adaptive_thinking_is_adaptive_and_summarized(accounts):
    result = llm_ok("-m", SONNET, "Hello", "-o", "thinking", "1")
    assert sent(accounts)["thinking"] == {"type": "adaptive", "display": "summarized"}
    assert "A short, direct answer fits" in result.output  # the stand-in's thought, shown


def test_hide_reasoning_asks_for_the_trace_to_be_omitted(accounts):
    result = llm_ok("-m", SONNET, "Hello", "-o", "thinking", "1", "-R")
    assert sent(accounts)["thinking"] == {"type": "adaptive", "display": "omitted"}
    assert "A short, direct answer fits" not in result.output


def test_thinking_on_an_older_model_uses_the_default_budget(accounts):
    llm_ok("-m", HAIKU, "Hello", "-o", "thinking", "1")
    assert sent(accounts)["thinking"] == {"type": "enabled", "budget_tokens": 1024}


def test_thinking_budget_asks_for_the_budgeted_mode(accounts):
    llm_ok("-m", SONNET, "Hello", "-o", "thinking_budget", "2048")
    assert sent(accounts)["thinking"] == {"type": "enabled", "budget_tokens": 2048}


def test_thinking_effort_is_sent_as_output_config_with_adaptive_thinking(accounts):
    llm_ok("-m", SONNET, "Hello", "-o", "thinking_effort", "high")
    body = sent(accounts)
    assert body["output_config"] == {"effort": "high"}
    assert body["thinking"]["type"] == "adaptive"
    assert "anthropic-beta" not in accounts.requests[-1]["headers"]


def test_effort_on_opus_4_5_sends_its_beta_header(accounts):
    llm_ok("-m", OPUS_45, "Hello", "-o", "thinking_effort", "low")
    assert accounts.requests[-1]["headers"]["anthropic-beta"] == "effort-2025-11-24"
    assert sent(accounts)["output_config"] == {"effort": "low"}


def test_thinking_effort_on_a_model_without_effort_is_refused_saying_why(accounts):
    line = refused("-m", HAIKU, "Hello", "-o", "thinking_effort", "high")
    assert line.startswith("Error: declaration_invalid: option thinking_effort: this model does not take a thinking effort")


def test_an_unknown_effort_is_refused_in_one_line(accounts):
    line = refused("-m", SONNET, "Hello", "-o", "thinking_effort", "extreme")
    assert line.startswith("Error: declaration_invalid: option thinking_effort:")


def test_thinking_effort_is_listed_only_for_models_that_take_it():
    assert "thinking_effort" in llm.get_model(SONNET).Options.model_fields
    assert "thinking_effort" not in llm.get_model(HAIKU).Options.model_fields


def test_a_claude_5_model_thinks_unless_told_not_to(accounts):
    llm_ok("-m", SONNET_5, "Hello")
    assert sent(accounts)["thinking"] == {"type": "adaptive", "display": "summarized"}
    llm_ok("-m", SONNET_5, "Hello", "-o", "thinking", "0")
    assert sent(accounts)["thinking"] == {"type": "disabled"}


def test_a_model_that_always_thinks_refuses_thinking_off(accounts):
    line = refused("-m", FABLE, "Hello", "-o", "thinking", "0")
    assert line == "Error: declaration_invalid: option thinking: claude-fable-5 always thinks; thinking cannot be turned off"


# Native structured output


def test_schema_on_a_model_with_structured_outputs_uses_output_config(accounts):
    result = llm_ok("-m", SONNET, "Invent a dog", "--schema", "name, age int")
    body = sent(accounts)
    fmt = body["output_config"]["format"]
    assert fmt["type"] == "json_schema"
    assert fmt["schema"]["additionalProperties"] is False
    assert set(fmt["schema"]["properties"]) == {"name", "age"}
    assert "tools" not in body and "tool_choice" not in body
    assert set(json.loads(result.output)) == {"name", "age"}


def test_schema_on_a_model_without_structured_outputs_stays_a_forced_tool(accounts):
    result = llm_ok("-m", OPUS_45, "Invent a dog", "--schema", "name, age int")
    body = sent(accounts)
    assert body["tool_choice"] == {"type": "tool", "name": SCHEMA_TOOL}
    assert "output_config" not in body
    assert set(json.loads(result.output)) == {"name", "age"}


def test_structured_output_streams_as_json_text_too(accounts):
    chunks = list(llm.get_model(HAIKU).prompt("Invent a dog", schema={"type": "object", "properties": {"name": {"type": "string"}}}))
    assert json.loads("".join(chunks)) == {"name": "example"}


# System messages after the first


def test_a_later_system_message_is_sent_inline_after_its_user_turn(accounts):
    messages = [llm.system("Be brief"), llm.user("Hi"), llm.assistant("Hello"), llm.system("Now be formal"), llm.user("Bye")]
    llm.get_model(OPUS_48).prompt(messages=messages).text()
    body = sent(accounts)
    assert body["system"] == "Be brief"
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user", "system"]
    assert body["messages"][-1]["content"] == [{"type": "text", "text": "Now be formal"}]


def test_a_later_system_message_is_refused_on_a_model_without_them(accounts):
    messages = [llm.user("Hi"), llm.assistant("Hello"), llm.system("Now be formal"), llm.user("Bye")]
    with pytest.raises(llm.ModelError) as caught:
        llm.get_model(SONNET).prompt(messages=messages).text()
    assert str(caught.value).startswith("declaration_invalid: claude-sonnet-4-6 takes a system message only as the first message")
    assert accounts.requests == []


# Attachments by URL


def test_a_url_attachment_is_sent_as_its_url(accounts):
    image = llm.Attachment(url="https://example.com/cat.png", type="image/png")
    llm.get_model(HAIKU).prompt("Describe", attachments=[image]).text()
    [block] = [b for b in sent(accounts)["messages"][0]["content"] if b["type"] == "image"]
    assert block["source"] == {"type": "url", "url": "https://example.com/cat.png"}


# The refusal stop reason


def test_a_refusal_raises_a_model_error_after_settling_its_cost(accounts, ledger_path):
    accounts.set_behaviour("alpha", "refusal")
    accounts.set_behaviour("beta", "refusal")
    with pytest.raises(models.RoutedRefusal) as caught:
        llm.get_model(HAIKU).prompt("Something declined").text()
    error = caught.value
    assert isinstance(error, llm.ModelError)
    assert error.code == "request_rejected"
    assert error.category == "cyber"
    assert error.explanation == "The stand-in's refusal behaviour declined this request."
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"]) == ("settled", "complete") and row["cost_nusd"] > 0


def test_a_refusal_is_one_line_on_the_command_line(accounts):
    accounts.set_behaviour("alpha", "refusal")
    accounts.set_behaviour("beta", "refusal")
    line = refused("-m", HAIKU, "Something declined")
    assert line.startswith("Error: request_rejected: Claude refused this request (cyber): The stand-in's refusal")
    assert "settled at its billed cost" in line


def test_a_refusal_explanation_holding_a_run_of_the_key_is_dropped(canary_key):
    message = {"stop_reason": "refusal", "stop_details": {"category": "cyber", "explanation": f"because {canary_key[5:20]}"}}
    attempt = type("Unrouted", (), {"reservation": None})()
    error = models.refusal(message, canary_key, attempt)
    assert error.explanation is None and error.category == "cyber"
    assert canary_key[5:20] not in str(error)


# Options that are refused, with the reason


def test_fast_mode_is_refused_as_unpriced(accounts):
    line = refused("-m", HAIKU, "Hello", "-o", "fast", "1")
    assert line.startswith("Error: unsupported_pricing: option fast: fast mode is not offered")
    assert accounts.requests == []


def test_server_tools_go_by_llm_anthropic_names_and_are_sent_as_their_definitions():
    from llm_accounts.server_tools import WebFetch, WebSearch
    from llm_accounts.wire import payload

    model = llm.get_model(HAIKU)
    assert {tool.__name__ for tool in model.supported_server_side_tools} >= {"WebSearch", "WebFetch", "CodeExecution"}
    tools = [WebSearch(max_uses=2, allowed_domains=["example.com"]), WebFetch(max_content_tokens=1000)]
    built = payload.build_body(llm.Prompt("Hi", model=model, tools=tools), "claude-haiku-4-5-20251001", stream=False)
    assert built["tools"] == [
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 2, "allowed_domains": ["example.com"]},
        {"type": "web_fetch_20250910", "name": "web_fetch", "max_content_tokens": 1000},
    ]


# One connection pool per process


def test_prompts_in_one_process_share_one_connection(accounts):
    model = llm.get_model(HAIKU)
    before = accounts.connections_opened
    for turn in range(5):
        model.prompt(f"Hello {turn}").text()
    assert len(accounts.requests) == 5
    assert accounts.connections_opened - before == 1


def test_an_async_batch_reuses_its_connections_for_the_next_batch(accounts):
    async def batch(model, n):
        return await asyncio.gather(*(model.prompt(f"Hi {i}").text() for i in range(n)))

    async def run():
        model = llm.get_async_model(HAIKU)
        await batch(model, 4)
        first = accounts.connections_opened
        await batch(model, 4)
        return first, accounts.connections_opened

    first, second = asyncio.run(run())
    # Never more connections than prompts in flight: the second batch reuses the first's.
    assert 1 <= first <= 4 and second <= 4


def test_the_shared_pool_holds_no_key_and_keeps_no_cookie(accounts):
    llm.get_model(HAIKU).prompt("Hello").text()
    pooled = transport.shared_client()
    assert "x-api-key" not in pooled.headers
    assert len(pooled.cookies.jar) == 0
    for key in accounts.keys.values():
        assert key not in repr(vars(pooled))


# llm accounts prices shows what a plain prompt reserves


def test_prices_shows_each_models_default_max_tokens_and_its_ceiling():
    result = llm_ok("accounts", "prices", "--model", "claude-sonnet-4-6")
    header, row = [line for line in result.output.splitlines() if line.startswith(("model ", "claude-sonnet-4-6"))]
    assert header.split()[5:7] == ["default", "ceiling"]  # after "max out"
    # $3.48 at standard rates, covering US-only inference at 1.1x (docs/pricing.md "Inference geo (data residency)").
    assert row.split()[4:6] == ["32,000", "$3.828"]


def test_prices_json_gives_the_ceiling_in_nanodollars():
    [model] = json.loads(llm_ok("accounts", "prices", "--model", "claude-haiku-4-5", "--json").output)["models"]
    assert (model["default_max_tokens"], model["ceiling_nusd"]) == (32_000, 360_000_000)
