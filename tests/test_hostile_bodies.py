"""A hostile 200 body is one ``Error: provider_error: ...`` line, and its attempt stays open.

A body that is not a Messages answer (a JSON list, nesting past any sane depth, a delta naming
a block that is not open) says nothing about what was processed, and neither does usage whose
counts are not counts: the cost is unknown, so the attempt keeps its ceiling (unknown is never
zero). A malformed stream settles as ``stream_error``, a malformed whole message as
``provider_error``, and usage that cannot be priced as ``usage_incomplete``.
"""

import copy
import json

import pytest

from conftest import assert_no_key_material
from hostile import MODEL, hostile_account, json_reply, message, raw_reply, sse, text_stream, usage  # noqa: F401
from routed_helpers import attempts, llm_cli
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

DEEP = 100_000


def nested(depth):
    value = "bottom"
    for _ in range(depth):
        value = [value]
    return value


def stream_with(change):
    """A well-formed streamed text answer, edited by ``change(events)``."""
    events = text_stream()
    change(events)
    return raw_reply(sse(events))


def delta_index(index):
    def change(events):
        events[3]["index"] = index

    return change


def final_usage(**counts):
    def change(events):
        events[6]["usage"] = {"input_tokens": 12, "output_tokens": 7, **counts}

    return change


def message_start_nested(events):
    events[0]["message"]["container"] = nested(200)


ABSURD = {"negative": -1, "past-int64": 2**64, "float": 7.5, "string": "7", "boolean": True}

STREAMED = [
    ("data-is-a-json-list", lambda: raw_reply(sse(["[1, 2]"] + text_stream())), "stream_error"),
    ("body-is-a-json-list", lambda: raw_reply(json.dumps([message([])])), "stream_error"),
    ("data-nested-100k-deep", lambda: raw_reply(sse(["[" * DEEP + "]" * DEEP])), "stream_error"),
    ("message-nested-past-the-limit", lambda: stream_with(message_start_nested), "stream_error"),
    ("delta-index-out-of-range", lambda: stream_with(delta_index(5)), "stream_error"),
    ("delta-index-negative", lambda: stream_with(delta_index(-1)), "stream_error"),
    ("delta-index-a-string", lambda: stream_with(delta_index("0")), "stream_error"),
    ("delta-index-a-float", lambda: stream_with(delta_index(0.0)), "stream_error"),
    ("delta-index-a-boolean", lambda: stream_with(delta_index(False)), "stream_error"),
    ("delta-index-missing", lambda: stream_with(delta_index(None)), "stream_error"),
    ("delta-before-message-start", lambda: stream_with(lambda events: events.pop(0)), "stream_error"),
] + [
    (f"output-tokens-{name}", (lambda value=value: stream_with(final_usage(output_tokens=value))), "usage_incomplete")
    for name, value in ABSURD.items()
] + [
    ("input-tokens-pricing-past-int64", lambda: stream_with(final_usage(input_tokens=2**62)), "usage_incomplete"),
]


def whole(**changes):
    body = message([{"type": "text", "text": "Hello from a hostile provider."}])
    body.update(changes)
    return json_reply(body)


NOT_STREAMED = [
    ("body-is-a-json-list", lambda: json_reply([message([{"type": "text", "text": "Hi"}])]), "provider_error"),
    ("content-not-a-list", lambda: whole(content={"type": "text", "text": "Hi"}), "provider_error"),
    ("block-not-an-object", lambda: whole(content=["Hi", 5]), "provider_error"),
    ("nested-past-the-limit", lambda: whole(container=nested(200)), "provider_error"),
    ("body-nested-100k-deep", lambda: raw_reply("[" * DEEP + "]" * DEEP), "provider_error"),
    ("body-not-json", lambda: raw_reply("<html>not json</html>"), "provider_error"),
] + [
    (f"output-tokens-{name}", (lambda value=value: whole(usage=usage(output_tokens=value))), "usage_incomplete")
    for name, value in ABSURD.items()
] + [
    ("input-tokens-pricing-past-int64", lambda: whole(usage=usage(input_tokens=2**62)), "usage_incomplete"),
]


def ids(cases):
    return [case.id if hasattr(case, "id") else case[0] for case in cases]


def assert_one_error_line(result, code):
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    # A streamed answer's text may precede the error on its line (CliRunner mixes stderr in).
    assert result.output.count("Error: ") == 1, result.output
    error = result.output[result.output.index("Error: ") :]
    assert len(error.strip().splitlines()) == 1, error
    assert error.startswith(f"Error: {code}: account 'alpha'"), error


@pytest.mark.parametrize("name,reply,outcome", STREAMED, ids=ids(STREAMED))
def test_a_hostile_streamed_body_is_one_error_line_and_stays_open(hostile_account, canary_key, ledger_path, name, reply, outcome):
    hostile_account.answer = lambda request: copy.deepcopy(reply())
    result = llm_cli("-m", MODEL, "Hello")
    assert_one_error_line(result, "provider_error")
    assert_no_key_material(result.output, canary_key)
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"], row["cost_nusd"]) == ("open", outcome, None)


@pytest.mark.parametrize("name,reply,outcome", NOT_STREAMED, ids=ids(NOT_STREAMED))
def test_a_hostile_whole_body_is_one_error_line_and_stays_open(hostile_account, canary_key, ledger_path, name, reply, outcome):
    hostile_account.answer = lambda request: copy.deepcopy(reply())
    result = llm_cli("-m", MODEL, "Hello", "--no-stream")
    assert_one_error_line(result, "provider_error")
    assert_no_key_material(result.output, canary_key)
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"], row["cost_nusd"]) == ("open", outcome, None)
