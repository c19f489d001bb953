"""Messages API responses as llm StreamEvents, scrubbed of the attempt's key before anyone sees them.

``StreamReader`` turns the lines of an SSE body into StreamEvents while assembling the final
message (usage merged by replacement, see ``wire``); ``message_events`` does the same for a whole
non-streamed message. Both mask the key first (ADR-0126 D2, Amendment 1).
"""

import json

from llm.parts import StreamEvent

from . import payload, scrub
from .errors import AccountsError
from .wire import MessageAssembler, SSEDecoder


class Projector:
    """Turn Messages stream events into llm StreamEvents, scrubbed of the attempt's key.

    Every event that carries no text into a join is a pause for the scrubber (Amendment 1), so
    held text is released inside the block it belongs to.
    """

    CHANNEL_TYPES = {"text": "text", "reasoning": "reasoning", "tool_args": "tool_call_args"}

    def __init__(self, secret_text):
        self.key = secret_text
        self.scrubber = scrub.StreamScrubber(secret_text)
        self.index = None
        self.tool_call_id = None
        self.schema_answer = False

    def events(self, event):
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "text_delta":
                return self._release(self.scrubber.feed("text", delta.get("text", "")))
            if dtype == "thinking_delta":
                return self._release(self.scrubber.feed("reasoning", delta.get("thinking", "")))
            if dtype == "input_json_delta":
                # The --schema tool's input is the answer itself, shown as text.
                channel = "text" if self.schema_answer else "tool_args"
                return self._release(self.scrubber.feed(channel, delta.get("partial_json", "")))
            out = self._release(self.scrubber.pause())
            if dtype == "signature_delta":
                signature = self.scrubber.other(delta.get("signature", ""))
                out.append(self._event("reasoning", "", provider_metadata={"anthropic": {"signature": signature}}))
            return out
        out = self._release(self.scrubber.pause())
        if kind == "content_block_start":
            block = event.get("content_block") or {}
            self.index = event.get("index", 0) + 1
            self.tool_call_id = None
            btype = block.get("type")
            self.schema_answer = btype == "tool_use" and block.get("name") == payload.SCHEMA_TOOL
            if self.schema_answer:
                pass
            elif btype == "tool_use":
                self.tool_call_id = block.get("id")
                out.append(self._event("tool_call_name", self.scrubber.other(block.get("name", ""))))
            elif btype == "redacted_thinking":
                data = self.scrubber.other(block.get("data", ""))
                out.append(
                    self._event("reasoning", "", provider_metadata={"anthropic": {"type": "redacted_thinking", "data": data}})
                )
            elif btype not in ("text", "thinking"):
                raise AccountsError(
                    "unsupported_pricing", "the response holds a content block this plugin does not price"
                )
        return out

    def finish(self):
        return self._release(self.scrubber.flush())

    def _event(self, type_, chunk, **extra):
        return StreamEvent(
            type=type_, chunk=chunk, part_index=self.index, tool_call_id=self.tool_call_id, **extra
        )

    def _release(self, pieces):
        return [self._event(self.CHANNEL_TYPES[channel], text) for channel, text in pieces if text]


def message_events(message, secret_text):
    """StreamEvents for a whole (non-streamed) message, from its scrubbed JSON."""
    clean = scrub.scrub_json(message, secret_text) if secret_text else message
    events = []
    for index, block in enumerate(clean.get("content") or [], start=1):
        btype = block.get("type")
        if btype == "text" and block.get("text"):
            events.append(StreamEvent(type="text", chunk=block["text"], part_index=index))
        elif btype == "thinking":
            metadata = {"anthropic": {"signature": block["signature"]}} if block.get("signature") else None
            events.append(
                StreamEvent(type="reasoning", chunk=block.get("thinking", ""), part_index=index, provider_metadata=metadata)
            )
        elif btype == "redacted_thinking":
            events.append(
                StreamEvent(
                    type="reasoning",
                    chunk="",
                    part_index=index,
                    provider_metadata={"anthropic": {"type": "redacted_thinking", "data": block.get("data", "")}},
                )
            )
        elif btype == "tool_use" and block.get("name") == payload.SCHEMA_TOOL:
            events.append(StreamEvent(type="text", chunk=json.dumps(block.get("input") or {}), part_index=index))
        elif btype == "tool_use":
            events.append(StreamEvent(type="tool_call_name", chunk=block.get("name", ""), part_index=index, tool_call_id=block.get("id")))
            events.append(
                StreamEvent(type="tool_call_args", chunk=json.dumps(block.get("input") or {}), part_index=index, tool_call_id=block.get("id"))
            )
    return events


class StreamReader:
    """One streamed attempt: SSE lines in, scrubbed StreamEvents out, the final message kept."""

    def __init__(self, secret_text):
        self.decoder = SSEDecoder()
        self.assembler = MessageAssembler()
        self.projector = Projector(secret_text)

    @property
    def done(self):
        """message_stop, or a mid-stream error: nothing after it is read."""
        return self.assembler.complete or self.assembler.error_type is not None

    @property
    def complete(self):
        return self.assembler.complete

    def feed(self, line):
        item = self.decoder.feed(line)
        if item is None:
            return []
        try:
            event = json.loads(item[1])
        except ValueError:
            return []
        if not isinstance(event, dict):
            return []
        self.assembler.apply(event)
        return self.projector.events(event)

    def finish(self):
        return self.projector.finish()

    def final_message(self):
        return self.assembler.final_message()

    def closed(self):
        """Outcome and failure class of a stream its consumer closed before it ended: an error
        event already read is what it is (with its health effect), not a close."""
        if self.assembler.error_type is not None:
            return self.failure()
        return "stream_closed", None

    def failure(self):
        """Outcome and failure class of a stream that ended without message_stop."""
        if self.assembler.error_type is not None:
            outage = self.assembler.error_type in ("overloaded_error", "api_error")
            return "stream_error", ("provider_outage" if outage else None)
        return "stream_truncated", "transport"
