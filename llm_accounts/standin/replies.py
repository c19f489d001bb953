"""Deterministic replies: content blocks, their stream deltas, the stop reason and output tokens.

The same request always gets the same reply (ids aside). Output is counted with the fake tokenizer
(``tokens.text_tokens``); ``max_tokens`` truncates it (stop_reason ``max_tokens``, output_tokens ==
max_tokens) and the earliest ``stop_sequences`` match ends the text (stop_reason ``stop_sequence``).

- plain prompt: one text block ``Stand-in reply to: <the last user text, first 200 characters>``;
- ``tools`` given and the last user turn holds no ``tool_result``: a ``tool_use`` block for the tool
  ``tool_choice`` names (or the first tool), its input built from the input_schema; with
  tool_choice ``auto`` a short text block comes first, with ``any``/``tool`` the tool_use is alone;
- a ``tool_result`` last: text ``The tool returned: <its text>``;
- ``thinking`` enabled (or adaptive): a thinking block (thinking_delta..., signature_delta) first;
- echo_key: the text quotes the request's key (a test of stream key scrubbing);
- a web search or web fetch tool (and no client tool called): one use of it before the text
  (``standin/server_tools.py``).

A key's ``shapes`` (config.SHAPES) add what real answers carry: ``caller`` puts
``"caller": {"type": "direct"}`` on tool_use blocks; ``parallel_tools`` answers with a tool_use
block per tool (the one tool twice when there is only one); ``text_before_thinking`` puts a short
text block before the thinking block.
"""

import base64
import hashlib
import json
from dataclasses import dataclass

from .blocks import Block, pieces
from .server_tools import cite, plan_uses
from .tokens import json_tokens, text_tokens

QUOTE_CHARS = 200


@dataclass
class Reply:
    blocks: list
    stop_reason: str
    stop_sequence: object
    output_tokens: int
    stop_details: object = None
    server_tool_use: object = None  # usage's server_tool_use counts, when a server tool ran
    extra_input_tokens: int = 0  # what a server tool's result added to the input


def _text_block(text):
    return Block(
        {"type": "text", "text": text},
        {"type": "text", "text": ""},
        [{"type": "text_delta", "text": part} for part in pieces(text)],
    )


def fit(text, tokens):
    """The longest prefix of ``text`` that counts as at most ``tokens`` tokens."""
    return text.encode("utf-8")[: max(tokens, 0) * 4].decode("utf-8", errors="ignore")


def _blocks(content):
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [block for block in content or [] if isinstance(block, dict)]


def _text_of(blocks):
    return " ".join(str(block.get("text", "")) for block in blocks if block.get("type") == "text").strip()


def _last_user_text(messages):
    for message in reversed(messages):
        if message.get("role") == "user":
            text = _text_of(_blocks(message.get("content")))
            if text:
                return text
    return ""


def _tool_results(messages):
    last = messages[-1]
    if last.get("role") != "user":
        return []
    return [block for block in _blocks(last.get("content")) if block.get("type") == "tool_result"]


def _result_text(result):
    content = result.get("content", "")
    text = _text_of(_blocks(content)) if isinstance(content, list) else str(content)
    return f"an error: {text}" if result.get("is_error") else text


def example_value(schema, depth=0):
    """A value satisfying a simple JSON schema: const, enum, default, then a per-type example."""
    if not isinstance(schema, dict) or depth > 8:
        return None
    for name in ("const", "default"):
        if name in schema:
            return schema[name]
    if schema.get("enum"):
        return schema["enum"][0]
    for name in ("anyOf", "oneOf", "allOf"):
        if schema.get(name):
            return example_value(schema[name][0], depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((each for each in kind if each != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        return {name: example_value(sub, depth + 1) for name, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [example_value(schema["items"], depth + 1)] if isinstance(schema.get("items"), dict) else []
    if kind == "integer":
        return schema.get("minimum", 1)
    if kind == "number":
        return schema.get("minimum", 1.5)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    return "example"


def _signature(thought):
    digest = hashlib.sha256(thought.encode("utf-8")).digest()
    return "Eq" + base64.b64encode(digest * 3).decode("ascii")


def _earliest_stop(text, stop_sequences):
    found = None
    for sequence in stop_sequences or []:
        if isinstance(sequence, str) and sequence:
            at = text.find(sequence)
            if at >= 0 and (found is None or at < found[0]):
                found = (at, sequence)
    return found


REFUSAL_DETAILS = {
    "type": "refusal",
    "category": "cyber",
    "explanation": "The stand-in's refusal behaviour declined this request.",
}


LEAD_IN = "Let me think about this."


def plan_reply(body, new_id, echo=None, refuse=False, shapes=(), extra_uses=0):
    """Plan the reply to a validated Messages request. ``echo`` is the key, for echo_key only;
    ``refuse`` answers as a safety classifier that declines: no content, ``stop_reason: refusal``;
    ``shapes`` are the key's answer shapes (module docstring); ``extra_uses`` reports that many
    server-tool uses more than ran."""
    if refuse:
        return Reply([], "refusal", None, 1, dict(REFUSAL_DETAILS))
    messages = body["messages"]
    budget = body["max_tokens"]
    user_text = _last_user_text(messages)
    results = _tool_results(messages)
    tools = [tool for tool in body.get("tools") or [] if isinstance(tool, dict) and "input_schema" in tool]
    choice = body.get("tool_choice") or {"type": "auto"}
    thinking = body.get("thinking") or {}

    tool = None
    if echo is None and not results and tools and choice.get("type") != "none":
        named = [each for each in tools if each.get("name") == choice.get("name")]
        tool = named[0] if choice.get("type") == "tool" and named else tools[0]
    if echo is not None:
        text = f"Echoing the key you sent: {echo} (a stand-in test of key scrubbing)."
    elif results:
        text = "The tool returned: " + " ".join(_result_text(result) for result in results)[:QUOTE_CHARS]
    elif tool is not None:
        text = None if choice.get("type") in ("any", "tool") else f"I'll use the {tool['name']} tool."
    elif isinstance((body.get("output_config") or {}).get("format"), dict):
        # Native structured output: the answer is JSON text matching the schema.
        text = json.dumps(example_value(body["output_config"]["format"].get("schema") or {}), ensure_ascii=False)
    else:
        text = f"Stand-in reply to: {user_text[:QUOTE_CHARS] or '(no text)'}"

    blocks, used = [], 0
    stop_reason, stop_sequence = "end_turn", None

    if thinking.get("type") in ("enabled", "adaptive") and budget > 0 and "text_before_thinking" in shapes:
        if text_tokens(LEAD_IN) <= budget:
            used += text_tokens(LEAD_IN)
            blocks.append(_text_block(LEAD_IN))

    if thinking.get("type") in ("enabled", "adaptive") and budget > 0:
        thought = f"The request asks about: {user_text[:80] or '(no text)'}. A short, direct answer fits."
        if text_tokens(thought) > budget:
            thought, stop_reason = fit(thought, budget), "max_tokens"
        used += text_tokens(thought)
        signature = _signature(thought)
        omitted = thinking.get("display") == "omitted"
        deltas = [] if omitted else [{"type": "thinking_delta", "thinking": part} for part in pieces(thought)]
        deltas.append({"type": "signature_delta", "signature": signature})
        blocks.append(
            Block(
                {"type": "thinking", "thinking": "" if omitted else thought, "signature": signature},
                {"type": "thinking", "thinking": "", "signature": ""},
                deltas,
            )
        )

    uses = None
    if tool is None and not results and budget > 0 and stop_reason == "end_turn":
        uses = plan_uses(body, user_text[:QUOTE_CHARS] or "(no text)", new_id, echo, extra_uses)
    citation = None
    if uses is not None:
        server_blocks, citation, _, _ = uses
        blocks.extend(server_blocks)
        used += json_tokens(server_blocks[0].final["input"])

    if text is not None and stop_reason == "end_turn" and budget > 0:
        stop = _earliest_stop(text, body.get("stop_sequences"))
        if stop is not None:
            text = text[: stop[0]]
        if text_tokens(text) > budget - used:
            text, stop_reason = fit(text, budget - used), "max_tokens"
        elif stop is not None:
            stop_reason, stop_sequence = "stop_sequence", stop[1]
        used += text_tokens(text)
        blocks.append(cite(_text_block(text), citation))

    called = [tool] if tool is not None else []
    if tool is not None and "parallel_tools" in shapes and choice.get("type") != "tool":
        called = tools if len(tools) > 1 else [tool, tool]
    for each in called:
        if stop_reason not in ("end_turn", "tool_use"):
            break
        arguments = example_value(each.get("input_schema") or {})
        if not isinstance(arguments, dict):
            arguments = {}
        cost = json_tokens({"name": each["name"], "input": arguments})
        if cost > budget - used:
            stop_reason = "max_tokens"
        else:
            used += cost
            stop_reason = "tool_use"
            ident = new_id("toolu")
            encoded = json.dumps(arguments, ensure_ascii=False)
            caller = {"caller": {"type": "direct"}} if "caller" in shapes else {}
            blocks.append(
                Block(
                    {"type": "tool_use", "id": ident, "name": each["name"], **caller, "input": arguments},
                    {"type": "tool_use", "id": ident, "name": each["name"], **caller, "input": {}},
                    [{"type": "input_json_delta", "partial_json": part} for part in ["", *pieces(encoded)]],
                )
            )

    if budget == 0:
        stop_reason = "max_tokens"
    output_tokens = budget if stop_reason == "max_tokens" else max(used, 1)
    if uses is None:
        return Reply(blocks, stop_reason, stop_sequence, output_tokens)
    return Reply(blocks, stop_reason, stop_sequence, output_tokens, server_tool_use=uses[2], extra_input_tokens=uses[3])
