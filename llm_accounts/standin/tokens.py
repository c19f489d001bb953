"""The stand-in's fake tokenizer and the request's prompt as an ordered list of blocks.

The rules are simple so that tests can compute expected usage by hand:

- text (a string, a ``text`` block, a thinking/output text): ``ceil(utf-8 bytes / 4)`` tokens;
- an ``image`` block: 1,600 tokens; a ``document`` block: 3,000 tokens;
- a tool definition, a ``tool_use`` block, or any other block: its compact JSON (keys sorted,
  ``cache_control`` left out) counted as text;
- a ``tool_result``: its content (a string or blocks) counted by these rules;
- ``thinking``/``redacted_thinking`` blocks of earlier turns: 0 (the API strips them);
- when ``tools`` are given, the tool-use system prompt adds 346 tokens (tool_choice auto/none) or
  313 (any/tool), as the real API does for Claude 4.x (reference section 1.4).

The prompt is ordered ``tools`` -> ``system`` -> ``messages`` (the cache prefix order, section 5).
"""

import hashlib
import json
from dataclasses import dataclass

IMAGE_TOKENS = 1600
DOCUMENT_TOKENS = 3000
TOOL_PROMPT_TOKENS = {"auto": 346, "none": 346, "any": 313, "tool": 313}


def text_tokens(text):
    return -(-len(text.encode("utf-8")) // 4)


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def json_tokens(value):
    return text_tokens(canonical(value))


def _without_cache_control(block):
    return {name: value for name, value in block.items() if name != "cache_control"}


def block_tokens(block):
    if isinstance(block, str):
        return text_tokens(block)
    if not isinstance(block, dict):
        return json_tokens(block)
    kind = block.get("type")
    if kind == "text":
        return text_tokens(str(block.get("text", "")))
    if kind == "image":
        return IMAGE_TOKENS
    if kind == "document":
        return DOCUMENT_TOKENS
    if kind in ("thinking", "redacted_thinking"):
        return 0
    if kind == "tool_use":
        return json_tokens({"name": block.get("name"), "input": block.get("input")})
    if kind == "tool_result":
        content = block.get("content", "")
        if isinstance(content, list):
            return sum(block_tokens(part) for part in content)
        return text_tokens(str(content))
    return json_tokens(_without_cache_control(block))


@dataclass(frozen=True)
class Unit:
    """One block of the prompt, in prefix order."""

    where: str  # field path, for error messages: "tools.0", "system.1", "messages.2.content.0"
    tokens: int
    identity: str  # what the cache key hashes: the block without its cache_control
    cache_control: object = None
    # Whether the block can take the automatic breakpoint (thinking and empty text cannot).
    cacheable: bool = True


def prompt_units(body):
    """The request's prompt as Units (tools, then system, then messages)."""
    units = []
    tools = body.get("tools") or []
    if tools:
        choice = (body.get("tool_choice") or {}).get("type", "auto")
        units.append(Unit("tools", TOOL_PROMPT_TOKENS.get(choice, 346), f"tool-prompt:{choice}", cacheable=False))
    for index, tool in enumerate(tools):
        units.append(
            Unit(f"tools.{index}", json_tokens(_without_cache_control(tool)), canonical(_without_cache_control(tool)),
                 tool.get("cache_control"))
        )
    system = body.get("system")
    if isinstance(system, str) and system:
        units.append(Unit("system", text_tokens(system), canonical(["system", system])))
    elif isinstance(system, list):
        for index, block in enumerate(system):
            units.append(_block_unit(f"system.{index}", "system", block))
    for index, message in enumerate(body.get("messages") or []):
        role = message.get("role")
        content = message.get("content")
        if isinstance(content, str):
            units.append(Unit(f"messages.{index}.content", text_tokens(content), canonical([role, content]),
                              cacheable=bool(content)))
        else:
            for position, block in enumerate(content or []):
                units.append(_block_unit(f"messages.{index}.content.{position}", role, block))
    return units


def _block_unit(where, role, block):
    if not isinstance(block, dict):
        return Unit(where, block_tokens(block), canonical([role, block]))
    kind = block.get("type")
    cacheable = kind not in ("thinking", "redacted_thinking") and not (kind == "text" and not block.get("text"))
    return Unit(where, block_tokens(block), canonical([role, _without_cache_control(block)]),
                block.get("cache_control"), cacheable)


def count_tokens(body):
    return sum(unit.tokens for unit in prompt_units(body))


def prefix_digests(model_id, units):
    """Cumulative hash of the prompt through each unit: the cache key of each possible prefix."""
    running = hashlib.sha256(model_id.encode("utf-8"))
    digests = []
    for unit in units:
        running.update(b"\x00" + unit.identity.encode("utf-8"))
        digests.append(running.copy().hexdigest())
    return digests
