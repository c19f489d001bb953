"""Streamed tool calls are scrubbed on their decoded values, held until their block ends.

A hostile provider writes the key into a tool_use block's ``partial_json`` with some characters
as ``\\u00XX`` JSON escapes: the raw JSON text holds no run of the key, the decoded arguments do.
"""

import json

import llm

from conftest import assert_no_key_material, assert_tree_has_no_key_material
from hostile import MODEL, escaped, hostile_account, raw_reply, sse, text_stream, tool_stream  # noqa: F401
from llm_accounts.wire import payload
from llm_accounts.wire.events import StreamReader
from llm_accounts.wire.scrub import MASK
from routed_helpers import attempts, llm_cli
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

FUNCTIONS = "def lookup(city: str) -> str:\n    return 'Sunny in ' + city\n"


def pieces_of(text, size=5):
    """Raw JSON text cut at awkward places (inside escapes too)."""
    return [text[i : i + size] for i in range(0, len(text), size)]


def escaped_arguments(key):
    return pieces_of('{"city": "' + escaped(key) + '"}')


def tool_then_text(tool_id, name, pieces):
    def answer(request):
        if request.has_tool_result:
            return raw_reply(sse(text_stream("Done.")))
        return raw_reply(sse(tool_stream(tool_id, name, pieces)))

    return answer


def test_escaped_key_in_streamed_tool_arguments_never_reaches_output_logs_or_ledger(
    hostile_account, canary_key, ledger_path, tmp_path
):
    hostile_account.answer = tool_then_text("toolu_01abc", "lookup", escaped_arguments(canary_key))
    result = llm_cli("-m", MODEL, "What is the weather?", "--functions", FUNCTIONS, "--td")
    assert result.exit_code == 0, result.output
    assert_no_key_material(result.output, canary_key)
    assert_tree_has_no_key_material(tmp_path, canary_key, ignore=("keys.json",))
    assert [row["outcome"] for row in attempts(ledger_path)] == ["complete", "complete"]
    # The tool result the provider got back quotes the masked argument.
    assert MASK in json.dumps(hostile_account.requests[-1].body["messages"][-1])


def test_a_tool_runs_with_its_streamed_arguments_masked_on_their_decoded_value(hostile_account, canary_key):
    hostile_account.answer = tool_then_text("toolu_01abc", "lookup", escaped_arguments(canary_key))
    seen = []

    def lookup(city: str) -> str:
        "Look up the weather"
        seen.append(city)
        return "Sunny"

    llm.get_model(MODEL).chain("What is the weather?", tools=[lookup]).text()
    assert seen == [MASK]


def test_a_tool_id_carrying_the_key_is_masked_in_events_tool_calls_and_logs(hostile_account, canary_key, tmp_path):
    hostile_account.answer = tool_then_text("toolu_" + canary_key, "lookup", ['{"city": "Paris"}'])
    response = llm.get_model(MODEL).prompt("What is the weather?", tools=[llm.Tool.function(lambda city: city, name="lookup")])
    response.text()
    [call] = response.tool_calls()
    assert call.tool_call_id == "toolu_" + MASK
    assert call.arguments == {"city": "Paris"}
    [message] = response.messages()
    assert [part.tool_call_id for part in message.parts if getattr(part, "tool_call_id", None)] == ["toolu_" + MASK]
    assert_no_key_material(json.dumps(response.json()), canary_key)
    result = llm_cli("-m", MODEL, "What is the weather?", "--functions", FUNCTIONS)
    assert result.exit_code == 0, result.output
    assert_tree_has_no_key_material(tmp_path, canary_key, ignore=("keys.json",))


def test_a_schema_answer_with_an_escaped_key_is_shown_masked_as_json(hostile_account, canary_key, tmp_path):
    def answer(request):
        return raw_reply(sse(tool_stream("toolu_01abc", payload.SCHEMA_TOOL, pieces_of('{"name": "' + escaped(canary_key) + '", "age": 3}'))))

    hostile_account.answer = answer
    result = llm_cli("-m", MODEL, "Invent a dog", "--schema", "name, age int")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {"name": MASK, "age": 3}
    assert_tree_has_no_key_material(tmp_path, canary_key, ignore=("keys.json",))


def test_tool_arguments_are_released_once_when_their_block_stops(canary_key):
    reader = StreamReader(canary_key)
    lines = sse(tool_stream("toolu_01abc", "lookup", escaped_arguments(canary_key))).decode().split("\n")
    emitted = []  # (event type, chunk) per SSE event, in order
    for line in lines:
        for event in reader.feed(line):
            emitted.append((event.type, event.chunk))
    emitted += [(event.type, event.chunk) for event in reader.finish()]
    assert emitted == [("tool_call_name", "lookup"), ("tool_call_args", json.dumps({"city": MASK}))]
    [block] = reader.final_message()["content"]
    assert block["input"] == {"city": MASK}


def test_async_streamed_tool_arguments_are_masked_on_their_decoded_value(hostile_account, canary_key):
    import asyncio

    hostile_account.answer = tool_then_text("toolu_" + canary_key, "lookup", escaped_arguments(canary_key))

    async def run():
        response = llm.get_async_model(MODEL).prompt("What is the weather?", tools=[llm.Tool.function(lambda city: city, name="lookup")])
        await response.text()
        return await response.tool_calls(), await response.json()

    [call], response_json = asyncio.run(run())
    assert (call.tool_call_id, call.arguments) == ("toolu_" + MASK, {"city": MASK})
    assert_no_key_material(json.dumps(response_json), canary_key)
