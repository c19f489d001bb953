import json

from llm_accounts.wire.sse import MessageAssembler, SSEDecoder

# The shape of a real 2026 stream (reference/anthropic-api.md 3.4), with its space padding.
RECORDED = """event: message_start
data: {"type":"message_start","message":{"model":"claude-sonnet-4-5-20250929","id":"msg_01","type":"message","role":"assistant","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":135,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":0},"output_tokens":1,"service_tier":"standard","inference_geo":"not_available"}}   }

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}               }

event: ping
data: {"type": "ping"}

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"["}   }

event: content_block_delta
data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"12345]"}   }

event: content_block_stop
data: {"type":"content_block_stop","index":0           }

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":135,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":10}               }

event: message_stop
data: {"type":"message_stop"       }

"""


def decode(text):
    decoder = SSEDecoder()
    events = []
    for line in text.split("\n"):
        item = decoder.feed(line)
        if item is not None:
            events.append(item)
    return events


def assemble(text):
    assembler = MessageAssembler()
    for _, data in decode(text):
        assembler.apply(json.loads(data))
    return assembler


def test_decoder_pairs_event_names_with_data():
    events = decode(RECORDED)
    assert [name for name, _ in events] == [
        "message_start",
        "content_block_start",
        "ping",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


def test_decoder_joins_multi_line_data_and_ignores_comments():
    assert decode(": comment\nevent: x\ndata: a\ndata: b\n\n") == [("x", "a\nb")]


def test_assembler_builds_the_final_message():
    message = assemble(RECORDED).final_message()
    assert message["content"] == [{"type": "text", "text": "[12345]"}]
    assert message["stop_reason"] == "end_turn"


def test_cumulative_usage_replaces_rather_than_adds():
    usage = assemble(RECORDED).final_message()["usage"]
    assert usage["input_tokens"] == 135
    assert usage["output_tokens"] == 10
    assert usage["cache_creation"] == {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}


def test_omitted_delta_fields_keep_the_message_start_value():
    assembler = MessageAssembler()
    assembler.apply(
        {"type": "message_start", "message": {"content": [], "usage": {"input_tokens": 25, "cache_read_input_tokens": 7, "output_tokens": 1}}}
    )
    assembler.apply({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 15}})
    assert assembler.final_message()["usage"] == {"input_tokens": 25, "cache_read_input_tokens": 7, "output_tokens": 15}


def test_tool_input_is_parsed_at_block_stop():
    assembler = MessageAssembler()
    assembler.apply({"type": "message_start", "message": {"content": [], "usage": {}}})
    assembler.apply({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}})
    for piece in ["", '{"locati', 'on": "Paris"}']:
        assembler.apply({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": piece}})
    assembler.apply({"type": "content_block_stop", "index": 0})
    assert assembler.final_message()["content"][0]["input"] == {"location": "Paris"}


def test_error_event_records_only_its_documented_type():
    assembler = assemble(
        RECORDED.split("event: message_delta")[0]
        + 'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}\n\n'
    )
    assert assembler.error_type == "overloaded_error"
    assert not assembler.complete


def test_stream_without_message_stop_is_not_complete():
    assert not assemble(RECORDED.split("event: message_stop")[0]).complete
    assert assemble(RECORDED).complete
