"""The Messages API's streamed wire format: SSE decoding, message assembly, and what a
well-formed answer is.

Pure logic, shared by the sync and async models. Usage in a stream is merged by replacement:
``message_delta`` usage counts are cumulative, so a later value replaces an earlier one and an
omitted optional field keeps the ``message_start`` value.

A provider's answer is untrusted input. The assembler refuses a stream that is not a Messages
stream (``Malformed``), and ``message_problem`` / ``usage_problem`` say what is wrong with a
whole message; their texts name the rule broken, never the provider's text.
"""

import codecs
import copy
import json
import re

from ..money import INT64_MAX
from . import classify

USAGE_REPLACED_WHEN_PRESENT = (
    "input_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "cache_creation",
    "server_tool_use",
    "output_tokens_details",
)
# Nesting deeper than this is refused: a Messages answer is shallow, and the copies, scrubbing
# and logging that follow it recurse once per level.
MAX_DEPTH = 100
TOOL_BLOCKS = ("tool_use", "server_tool_use")
# A server tool's result block (web_search_tool_result, web_fetch_tool_result): whole at its start.
SERVER_RESULT_SUFFIX = "_tool_result"
# The string fields each content block type must carry (a tool block's ``input`` is an object).
_BLOCK_STRINGS = {
    "text": ("text",),
    "thinking": ("thinking",),
    "redacted_thinking": ("data",),
    "tool_use": ("id", "name"),
    "server_tool_use": ("id", "name"),
}
_USAGE_OBJECTS = ("cache_creation", "server_tool_use", "output_tokens_details")
# The block type each delta type may extend.
_DELTA_BLOCK = {
    "text_delta": ("text",),
    "citations_delta": ("text",),
    "thinking_delta": ("thinking",),
    "signature_delta": ("thinking",),
    "input_json_delta": TOOL_BLOCKS,
}
_DELTA_FIELD = {
    "text_delta": ("text", str),
    "citations_delta": ("citation", dict),
    "thinking_delta": ("thinking", str),
    "signature_delta": ("signature", str),
    "input_json_delta": ("partial_json", str),
}


_LINE_END = re.compile(r"\r\n|\r|\n")


def _split_lines(buffer, final):
    """Complete lines of ``buffer`` and what is left; a CR at its end waits for a possible LF."""
    lines, start = [], 0
    for end in _LINE_END.finditer(buffer):
        if not final and end.group() == "\r" and end.end() == len(buffer):
            break
        lines.append(buffer[start : end.start()])
        start = end.end()
    return lines, buffer[start:]


class LineTooLong(Exception):
    """A line of a stream passed ``LINE_LIMIT``: the stream ends there (docs/errors.md "Answers
    past their bound")."""


# One line's bound, in characters of the decoded body: no line is longer than a whole answer
# (transport.ANSWER_LIMIT, docs/architecture.md "Answers past their bound").
LINE_LIMIT = 64 * 1024 * 1024


class _Lines:
    """SSE lines from decoded text. The current line is kept in pieces and joined only once a
    piece holds a line end, so a long line costs linear time, and past ``LINE_LIMIT`` it ends
    the stream (``LineTooLong``)."""

    def __init__(self):
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.rest, self.size = [], 0

    def feed(self, chunk, final=False):
        text = self.decoder.decode(chunk, final)
        if not final and self.rest and not self.rest[-1].endswith("\r") and not _LINE_END.search(text):
            self.rest.append(text)
            self.size += len(text)
            lines = []
        else:
            lines, rest = _split_lines("".join(self.rest) + text, final)
            if final and rest:
                lines, rest = [*lines, rest], ""
            self.rest, self.size = [rest], len(rest)
        if self.size > LINE_LIMIT:
            raise LineTooLong("a line of the stream passed its bound")
        return lines


def sse_lines(chunks):
    """The lines of an SSE body from its byte ``chunks``, ended as the SSE rules end them: at
    CRLF, LF or CR only. (httpx's ``iter_lines`` also ends a line at U+2028, U+2029 and U+0085,
    which JSON need not escape, so a text delta holding one would break its data line.)"""
    lines = _Lines()
    for chunk in chunks:
        yield from lines.feed(chunk)
    yield from lines.feed(b"", final=True)


async def asse_lines(chunks):
    """``sse_lines`` for an async iterator of byte chunks."""
    lines = _Lines()
    async for chunk in chunks:
        for line in lines.feed(chunk):
            yield line
    for line in lines.feed(b"", final=True):
        yield line


class Malformed(ValueError):
    """The stream is not a Messages API stream. The text names the rule, never the provider's text."""


class SSEDecoder:
    """Turn lines of a ``text/event-stream`` body into ``(event, data)`` pairs."""

    def __init__(self):
        self._event = None
        self._data = []

    def feed(self, line):
        """Feed one line (without its newline); returns a complete event or None.

        Raises ``Malformed`` for a line that is neither a comment nor an SSE field the Messages
        API could send (event, data, id, retry).
        """
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
        elif field not in ("id", "retry"):
            # Not an SSE line (a JSON body, say): whatever this is, it is not a Messages stream.
            raise Malformed("a line of the stream is not an SSE field")
        return None


def too_deep(value, limit=MAX_DEPTH):
    """Whether lists and objects in ``value`` nest deeper than ``limit`` (walked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _is_index(value):
    return type(value) is int  # not a bool, not a float


def block_problem(block):
    """What is wrong with one content block, or None."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        return "a content block is not an object with a type"
    kind = block["type"]
    for name in _BLOCK_STRINGS.get(kind, ()):
        if not isinstance(block.get(name), str):
            return f"a {kind} block's {name} is not a string"
    if kind in TOOL_BLOCKS and not isinstance(block.get("input"), dict):
        return f"a {kind} block's input is not an object"
    if kind == "thinking" and not isinstance(block.get("signature", ""), str):
        return "a thinking block's signature is not a string"
    if "citations" in block and not isinstance(block["citations"], (list, type(None))):
        return "a block's citations are not a list"
    return None


def message_problem(message):
    """What makes ``message`` not a Messages API message (its usage aside), or None."""
    if not isinstance(message, dict):
        return "the answer is not a JSON object"
    if too_deep(message):
        return f"the answer nests deeper than {MAX_DEPTH} levels"
    content = message.get("content")
    if not isinstance(content, list):
        return "the answer's content is not a list"
    for block in content:
        problem = block_problem(block)
        if problem is not None:
            return problem
    if not isinstance(message.get("model", ""), str):
        return "the answer's model is not a string"
    return None


def _count_name(name):
    return isinstance(name, str) and (name.endswith("_tokens") or name.endswith("_requests"))


def _count(value):
    return value is None or (type(value) is int and 0 <= value <= INT64_MAX)


def usage_problem(usage):
    """What makes ``usage`` not a usage object, or None.

    Every token or request count (a field named ``*_tokens`` or ``*_requests``, at the top or in
    one of the nested objects) must be an integer from 0 to 2**63-1. An absent count is not a
    problem here: that usage is incomplete, which settlement handles (the ceiling stays open).
    """
    if usage is None:
        return None
    if not isinstance(usage, dict):
        return "usage is not an object"
    for name, value in usage.items():
        if name in _USAGE_OBJECTS and value is not None:
            if not isinstance(value, dict):
                return "usage holds a breakdown that is not an object"
            if not all(_count(inner) for inner_name, inner in value.items() if _count_name(inner_name)):
                return "usage holds a token count that is not an integer from 0 to 2**63-1"
        elif _count_name(name) and not _count(value):
            return "usage holds a token count that is not an integer from 0 to 2**63-1"
    return None


class MessageAssembler:
    """Build the final Message from stream events, as the non-streamed response would be.

    ``apply`` raises ``Malformed`` for an event that breaks the stream's shape: blocks start in
    order at the next index and deltas and stops name the open block, each delta extends a block
    of its kind with a value of the right type, and nothing nests deeper than ``MAX_DEPTH``.
    Unknown event and delta types are ignored, as the API asks.
    """

    def __init__(self):
        self.message = None
        self.usage = {}
        self.complete = False  # message_stop seen
        self.error_type = None  # a mid-stream `error` event's documented type
        self.error = None  # its classify.ErrorInfo
        self._json_parts = {}
        self._open = None  # the index of the block started and not yet stopped

    @property
    def started_output(self):
        return bool(self.message and self.message["content"])

    def apply(self, event):
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta")
            if not isinstance(delta, dict):
                raise Malformed("a content_block_delta's delta is not an object")
            self._apply_delta(self._index(event), delta)
        elif kind == "message_start":
            message = event.get("message")
            if self.message is not None:
                raise Malformed("a second message_start")
            if not isinstance(message, dict) or too_deep(message):
                raise Malformed("message_start's message is not a shallow object")
            if not isinstance(message.get("usage") or {}, dict):
                raise Malformed("message_start's usage is not an object")
            self.message = copy.deepcopy(message)
            self.message["content"] = []
            self.usage = dict(self.message.pop("usage", None) or {})
        elif kind == "content_block_start":
            content = self._content()
            index = event.get("index")
            if self._open is not None or not _is_index(index) or index != len(content):
                raise Malformed("a content_block_start's index is not the next block's")
            block = event.get("content_block")
            if isinstance(block, dict) and block.get("type") in TOOL_BLOCKS:
                block = {**block, "input": block.get("input", {})}
            problem = block_problem(block) or (too_deep(block) and "a content block nests too deep")
            if problem:
                raise Malformed(problem)
            block = copy.deepcopy(block)
            if block["type"] in TOOL_BLOCKS:
                self._json_parts[index] = []
            content.append(block)
            self._open = index
        elif kind == "content_block_stop":
            index = self._index(event)
            self._open = None
            parts = self._json_parts.pop(index, None)
            if parts is not None:
                self.message["content"][index]["input"] = _tool_input("".join(parts))
        elif kind == "message_delta":
            self._content()
            delta, usage = event.get("delta") or {}, event.get("usage") or {}
            if not isinstance(delta, dict) or not isinstance(usage, dict):
                raise Malformed("a message_delta's delta or usage is not an object")
            for name, value in delta.items():
                if name not in ("content", "usage"):
                    self.message[name] = value
            self.merge_usage(usage)
        elif kind == "message_stop":
            if self.message is None or self._open is not None:
                raise Malformed("message_stop before the message or its last block ended")
            self.complete = True
        elif kind == "error":
            # Classified and dropped at once: only closed-set values are kept (classify).
            self.error = classify.stream_error_info(event)
            self.error_type = self.error.provider_error_type

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

    def block(self, index):
        return self.message["content"][index]

    def replace_block(self, index, block):
        self.message["content"][index] = block

    def _content(self):
        if self.message is None:
            raise Malformed("content before message_start")
        return self.message["content"]

    def _index(self, event):
        index = event.get("index")
        if self._open is None or not _is_index(index) or index != self._open:
            raise Malformed(f"a {event.get('type')}'s index is not the open block's")
        return index

    def _apply_delta(self, index, delta):
        kind = delta.get("type")
        field = _DELTA_FIELD.get(kind)
        if field is None:
            return  # a delta type this version does not know
        block = self.message["content"][index]
        name, cls = field
        value = delta.get(name)
        if block["type"] not in _DELTA_BLOCK[kind] or not isinstance(value, cls):
            raise Malformed(f"a {kind} does not fit its block")
        if kind == "text_delta":
            block["text"] = block.get("text", "") + value
        elif kind == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + value
        elif kind == "signature_delta":
            block["signature"] = value
        elif kind == "input_json_delta":
            self._json_parts[index].append(value)
        else:
            block["citations"] = (block.get("citations") or []) + [value]

    def final_message(self):
        """The assembled message with its merged usage (call once the stream ended)."""
        message = dict(self.message or {})
        message["usage"] = dict(self.usage)
        return message


def _tool_input(text):
    """A tool block's accumulated ``partial_json``, parsed: an object, or ``Malformed``."""
    try:
        value = json.loads(text) if text else {}
    except (ValueError, RecursionError):
        raise Malformed("a tool block's input is not JSON") from None
    if not isinstance(value, dict) or too_deep(value):
        raise Malformed("a tool block's input is not a shallow object")
    return value
