"""The Messages API's streamed wire format: SSE decoding and message assembly.

Pure logic, shared by the sync and async models. Usage in a stream is merged by replacement:
``message_delta`` usage counts are cumulative, so a later value replaces an earlier one and an
omitted optional field keeps the ``message_start`` value (design.md, ADR-0126 D6).
"""

import copy
import json

USAGE_REPLACED_WHEN_PRESENT = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "cache_creation",
    "server_tool_use",
    "output_tokens_details",
)


class SSEDecoder:
    """Turn lines of a ``text/event-stream`` body into ``(event, data)`` pairs."""

    def __init__(self):
        self._event = None
        self._data = []

    def feed(self, line):
        """Feed one line (without its newline); returns a complete event or None."""
        if line == "":
            if not self._data and self._event is None:
                return None
            event, data = self._event, "\n".join(self._data)
            self._event, self._data = None, []
            return event, data
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        return None


class MessageAssembler:
    """Build the final Message from stream events, as the non-streamed response would be."""

    def __init__(self):
        self.message = None
        self.usage = {}
        self.complete = False  # message_stop seen
        self.error_type = None  # a mid-stream `error` event's documented type
        self._json_parts = {}

    @property
    def started_output(self):
        return bool(self.message and self.message["content"])

    def apply(self, event):
        kind = event.get("type")
        if kind == "message_start":
            self.message = copy.deepcopy(event["message"])
            self.message["content"] = []
            self.usage = dict(self.message.pop("usage", None) or {})
        elif kind == "content_block_start":
            block = copy.deepcopy(event["content_block"])
            if block.get("type") in ("tool_use", "server_tool_use"):
                self._json_parts[event["index"]] = []
            self._content().insert(event["index"], block)
        elif kind == "content_block_delta":
            self._apply_delta(event["index"], event["delta"])
        elif kind == "content_block_stop":
            parts = self._json_parts.pop(event["index"], None)
            if parts is not None:
                text = "".join(parts)
                self._content()[event["index"]]["input"] = json.loads(text) if text else {}
        elif kind == "message_delta":
            for name, value in (event.get("delta") or {}).items():
                self.message[name] = value
            self.merge_usage(event.get("usage") or {})
        elif kind == "message_stop":
            self.complete = True
        elif kind == "error":
            error = event.get("error") if isinstance(event.get("error"), dict) else {}
            self.error_type = error.get("type") if isinstance(error.get("type"), str) else "other"

    def merge_usage(self, usage):
        # Cumulative counts: replace, never add (peers double-count here; see reference/peers.md).
        if "output_tokens" in usage:
            self.usage["output_tokens"] = usage["output_tokens"]
        for name in USAGE_REPLACED_WHEN_PRESENT:
            if usage.get(name) is not None:
                self.usage[name] = usage[name]
        for name, value in usage.items():
            if name not in self.usage and value is not None:
                self.usage[name] = value

    def _content(self):
        if self.message is None:
            raise ValueError("content before message_start")
        return self.message["content"]

    def _apply_delta(self, index, delta):
        block = self._content()[index]
        kind = delta.get("type")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + delta["text"]
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta["thinking"]
        elif kind == "signature_delta":
            block["signature"] = delta["signature"]
        elif kind == "input_json_delta":
            self._json_parts[index].append(delta["partial_json"])
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta["citation"])

    def final_message(self):
        """The assembled message with its merged usage (call once the stream ended)."""
        message = dict(self.message or {})
        message["usage"] = dict(self.usage)
        return message
