"""Messages API responses as llm StreamEvents, scrubbed of the attempt's key before anyone sees them.

``StreamReader`` turns the lines of an SSE body into StreamEvents while assembling the final
message (usage merged by replacement, see ``sse``); ``message_events`` does the same for a whole
non-streamed message. Both mask the key first (docs/security.md "Scrubbing").
"""

import json

from llm.parts import StreamEvent

from . import classify, payload, scrub, sse
from .sse import Malformed, MessageAssembler, SSEDecoder


class Projector:
    """Turn Messages stream events into llm StreamEvents, scrubbed of the attempt's key.

    Every event that carries no text into a join is a pause for the scrubber (docs/security.md
    "Scrubbing"), so held text is released inside the block it belongs to.

    A tool_use block's input is held until its ``content_block_stop``, then parsed and scrubbed
    on its decoded value (a key written with JSON escapes has no run in the raw text), and only
    then emitted: as ``tool_call_args``, or as text for the ``--schema`` tool, whose input is the
    answer. Tool input is not shown as it streams, and a schema answer is one small object, so
    holding it costs little. The block's id and name are matched like every other string, and
    the assembled block is replaced by its scrubbed copy, so the final message carries the same
    values the events did.

    A server tool's call (``server_tool_use``) is shown as llm-anthropic shows it, a tool call
    marked ``server_executed`` (llm does not run it). Its result block (``web_search_tool_result``
    and the like) arrives whole in its ``content_block_start``: every string in it (titles, URLs,
    ``encrypted_content``) is matched on its decoded value, the block replaced by that copy, and it
    is shown as one ``tool_result`` event holding its JSON content. Citations on text
    (``citations_delta``) are kept in the assembled message, which is scrubbed whole before it is
    stored or logged (``scrub.scrub_json`` joins their ``cited_text``); they are not text events.
    A block type this version does not know is read past the same way, shown as nothing.
    """

    CHANNEL_TYPES = {"text": "text", "reasoning": "reasoning"}

    def __init__(self, secret_text):
        self.key = secret_text
        self.scrubber = scrub.StreamScrubber(secret_text)
        self.index = None
        self.tool_call_id = None
        self.tool = None  # the open tool_use block's scrubbed id and name, until it stops
        self.server_executed = False  # the open tool block is a server_tool_use
        self.schema_answer = False

    def events(self, event, assembler):
        """The StreamEvents for one event ``assembler`` has already applied."""
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "text_delta":
                return self._release(self.scrubber.feed("text", delta.get("text", "")))
            if dtype == "thinking_delta":
                return self._release(self.scrubber.feed("reasoning", delta.get("thinking", "")))
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
            self.server_executed = btype == "server_tool_use"
            if btype in sse.TOOL_BLOCKS:
                self.tool = (self.scrubber.other(block.get("id", "")), self.scrubber.other(block.get("name", "")))
                if not self.schema_answer:
                    self.tool_call_id = self.tool[0]
                    out.append(self._event("tool_call_name", self.tool[1], server_executed=self.server_executed))
            elif isinstance(btype, str) and btype.endswith(sse.SERVER_RESULT_SUFFIX):
                clean = scrub.scrub_value(assembler.block(event["index"]), self.key)
                assembler.replace_block(event["index"], clean)
                out.append(tool_result_event(clean, self.index))
            elif btype == "redacted_thinking":
                data = self.scrubber.other(block.get("data", ""))
                out.append(
                    self._event("reasoning", "", provider_metadata={"anthropic": {"type": "redacted_thinking", "data": data}})
                )
            # Any other block type is read past and shown as nothing: the usage prices the answer
            # (an unknown billing dimension shows there and keeps the attempt open), and the final
            # message is scrubbed whole before it is stored.
        elif kind == "content_block_stop" and self.tool is not None:
            out.append(self._tool_finished(assembler, event["index"]))
        return out

    def _tool_finished(self, assembler, index):
        """Scrub the stopped tool block's parsed input; put the clean block back; one event for it."""
        tool_id, name = self.tool
        self.tool = None
        block = assembler.block(index)
        clean = {**block, "id": tool_id, "name": name, "input": scrub.scrub_value(block["input"], self.key)}
        assembler.replace_block(index, clean)
        if self.schema_answer:
            return self._event("text", json.dumps(clean["input"]))
        return self._event("tool_call_args", json.dumps(clean["input"]), server_executed=self.server_executed)

    def finish(self):
        return self._release(self.scrubber.flush())

    def _event(self, type_, chunk, **extra):
        return StreamEvent(
            type=type_, chunk=chunk, part_index=self.index, tool_call_id=self.tool_call_id, **extra
        )

    def _release(self, pieces):
        return [self._event(self.CHANNEL_TYPES[channel], text) for channel, text in pieces if text]


def tool_result_event(block, part_index):
    """A server tool's (scrubbed) result block as llm-anthropic shows it: a ``tool_result`` event
    holding its content as JSON, named for its tool (``web_search_tool_result`` -> ``web_search``)."""
    content = block.get("content")
    chunk = "" if content in (None, []) else json.dumps(content)
    tool_use_id = block.get("tool_use_id")
    return StreamEvent(
        type="tool_result",
        chunk=chunk,
        part_index=part_index,
        tool_call_id=tool_use_id if isinstance(tool_use_id, str) else None,
        server_executed=True,
        tool_name=block["type"][: -len(sse.SERVER_RESULT_SUFFIX)],
    )


def message_events(message, secret_text):
    """StreamEvents for a whole (non-streamed) message, from its scrubbed JSON.

    A message that is not well formed yields none (``sse.message_problem``; the caller settles
    and reports it).
    """
    if sse.message_problem(message) is not None:
        return []
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
        elif btype in sse.TOOL_BLOCKS:
            server = btype == "server_tool_use"
            events.append(
                StreamEvent(
                    type="tool_call_name", chunk=block.get("name", ""), part_index=index, tool_call_id=block.get("id"), server_executed=server
                )
            )
            events.append(
                StreamEvent(
                    type="tool_call_args",
                    chunk=json.dumps(block.get("input") or {}),
                    part_index=index,
                    tool_call_id=block.get("id"),
                    server_executed=server,
                )
            )
        elif isinstance(btype, str) and btype.endswith(sse.SERVER_RESULT_SUFFIX):
            events.append(tool_result_event(block, index))
    return events


class StreamReader:
    """One streamed attempt: SSE lines in, scrubbed StreamEvents out, the final message kept."""

    def __init__(self, secret_text):
        self.decoder = SSEDecoder()
        self.assembler = MessageAssembler()
        self.projector = Projector(secret_text)
        self.malformed = None  # what made the stream not a Messages stream (our text, not theirs)
        self._start = None  # (model, usage) of message_start until taken

    @property
    def done(self):
        """message_stop, a mid-stream error or a malformed event: nothing after it is read."""
        return self.assembler.complete or self.assembler.error_type is not None or self.malformed is not None

    @property
    def complete(self):
        return self.assembler.complete and self.malformed is None

    def feed(self, line):
        if self.malformed is not None:
            return []
        try:
            item = self.decoder.feed(line)
            if item is None or not item[1]:
                return []  # an event without data is not dispatched
            try:
                event = json.loads(item[1])
            except (ValueError, RecursionError):
                event = None
            if not isinstance(event, dict):
                raise Malformed("an event's data is not a JSON object")
            self.assembler.apply(event)
            if event.get("type") == "message_start":
                self._start = (self.assembler.message.get("model"), dict(self.assembler.usage))
            return self.projector.events(event, self.assembler)
        except Malformed as error:
            self.malformed = str(error)
            return []

    def finish(self):
        return self.projector.finish()

    def take_start(self):
        """The served model and usage of message_start, once, when it has just been read: what
        the provider counted before any output (docs/pricing.md "Shrinking a hold on message_start")."""
        start, self._start = self._start, None
        return start

    def final_message(self):
        return self.assembler.final_message()

    def closed(self):
        """Outcome, failure class and error info of a stream its consumer closed before it ended:
        an error event already read is what it is (with its health effect), not a close."""
        if self.assembler.error is not None:
            return self.failure()
        return "stream_closed", None, None

    def failure(self):
        """Outcome, failure class and ``classify.ErrorInfo`` (or None) of a stream that ended
        without message_stop.

        A mid-stream ``error`` event is classified by the table HTTP errors use, from its type and
        message (docs/errors.md "From an answer to a code"): a rate limit, an authentication or
        permission error, a billing error or a credit balance too low mid-stream says the same
        about the account as it does before the stream. A malformed stream is a ``stream_error``
        too (the provider's answer broke off midway), with no failure class: it is no documented
        evidence about the account's health.
        """
        if self.malformed is not None:
            return "stream_error", None, None
        info = self.assembler.error
        if info is not None:
            return "stream_error", classify.failure_class(None, info), info
        return "stream_truncated", "transport", None
