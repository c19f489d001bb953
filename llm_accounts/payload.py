"""Build a Messages API request body from an ``llm`` prompt.

The body is built once and frozen to bytes (``freeze``) before it is quoted: the quote, the
ledger's request digest and the wire request are the same bytes (docs/pricing.md "Quote").
"""

import json

from llm.models import ServerSideTool
from llm.parts import AttachmentPart, ReasoningPart, TextPart, ToolCallPart, ToolResultPart

from .errors import AccountsError

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
DEFAULT_THINKING_BUDGET = 1024
CACHE_TTLS = ("none", "5m", "1h")
# --schema is sent as this forced tool; its input comes back to llm as the JSON text answer.
SCHEMA_TOOL = "output_structured_data"


def freeze(body):
    """The exact bytes sent: compact JSON, keys in insertion order, UTF-8."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def build_body(prompt, model_id, *, stream):
    """The request body for ``prompt`` on ``model_id``; raises ``declaration_invalid`` for bad combinations."""
    options = prompt.options
    if prompt.schema and prompt.tools:
        raise AccountsError("declaration_invalid", "--schema and tools cannot be used in the same prompt")
    body = {"model": model_id, "max_tokens": options.max_tokens or DEFAULT_MAX_TOKENS}

    system = _system_text(prompt)
    cache = getattr(options, "cache", None) or "none"

    tools = []
    if prompt.schema:
        # A forced tool is the portable way to get schema-shaped JSON from every priced model.
        tools.append(
            {
                "name": SCHEMA_TOOL,
                "description": "Return the answer as JSON matching this schema",
                "input_schema": prompt.schema,
            }
        )
        body["tool_choice"] = {"type": "tool", "name": SCHEMA_TOOL}
    for tool in prompt.tools or []:
        if isinstance(tool, ServerSideTool):
            # Server tools are billed per use, which the price revision does not cover
            # (docs/pricing.md "Refused before sending").
            raise AccountsError(
                "unsupported_pricing",
                "server-side tools are not priced by the shipped price revision; use client tools",
            )
        tools.append(
            {"name": tool.name, "description": tool.description or "", "input_schema": tool.input_schema}
        )

    messages = build_messages(prompt)
    if cache != "none":
        _mark_cache(body, tools, messages, system, cache)
        system = None if isinstance(body.get("system"), list) else system
    if system:
        body["system"] = system
    if tools:
        body["tools"] = tools
    body["messages"] = messages

    if options.temperature is not None:
        body["temperature"] = options.temperature
    if options.top_p is not None:
        body["top_p"] = options.top_p
    if options.top_k is not None:
        body["top_k"] = options.top_k
    if options.stop_sequences:
        body["stop_sequences"] = options.stop_sequences
    if options.thinking or options.thinking_budget:
        budget = options.thinking_budget or DEFAULT_THINKING_BUDGET
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        if body["max_tokens"] <= budget:
            raise AccountsError(
                "declaration_invalid", "options max_tokens and thinking_budget: max_tokens must be greater than thinking_budget"
            )
    if stream:
        body["stream"] = True
    return body


def _system_text(prompt):
    if prompt.system:
        return prompt.system
    if prompt.messages and prompt.messages[0].role == "system":
        texts = [part.text for part in prompt.messages[0].parts if isinstance(part, TextPart)]
        return "\n\n".join(texts) or None
    return None


def _mark_cache(body, tools, messages, system, ttl):
    """Mark the stable prefix (system, else the last tool) and the newest turn for caching.

    With ``1h`` the stable prefix gets the one-hour mark that warm-prefix routing keys on
    (docs/architecture.md "Warm prefixes"); the newest turn always gets a five-minute mark, since one-hour
    entries must precede five-minute ones.
    """
    stable = {"type": "ephemeral", "ttl": ttl} if ttl == "1h" else {"type": "ephemeral"}
    if system:
        body["system"] = [{"type": "text", "text": system, "cache_control": stable}]
    elif tools:
        tools[-1]["cache_control"] = stable
    if messages and messages[-1]["content"]:
        messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}


def build_messages(prompt):
    """``prompt.messages`` already holds the whole conversation (llm >= 0.32)."""
    out = []
    for index, message in enumerate(prompt.messages):
        if message.role == "system":
            if index == 0:
                continue  # sent as the top-level system prompt
            raise AccountsError("declaration_invalid", "only the first message may have the system role")
        blocks = [block for block in map(_block, message.parts) if block is not None]
        if message.role == "assistant":
            blocks = _drop_spacer_after_tool_use(blocks)
        if not blocks:
            continue
        role = "assistant" if message.role == "assistant" else "user"
        if out and out[-1]["role"] == role == "user":
            # A tool result and the next user text share one user turn, which the API requires.
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def _drop_spacer_after_tool_use(blocks):
    # The model yields a display-only " " after tool calls; the API refuses text after tool_use.
    kept, seen_tool_use = [], False
    for block in blocks:
        if seen_tool_use and block["type"] == "text" and block["text"].strip() == "":
            continue
        kept.append(block)
        seen_tool_use = seen_tool_use or block["type"] == "tool_use"
    return kept


def _anthropic_metadata(part):
    metadata = getattr(part, "provider_metadata", None) or {}
    value = metadata.get("anthropic") if isinstance(metadata, dict) else None
    return value if isinstance(value, dict) else {}


def _block(part):
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text} if part.text else None
    if isinstance(part, ReasoningPart):
        metadata = _anthropic_metadata(part)
        if metadata.get("type") == "redacted_thinking" and metadata.get("data"):
            return {"type": "redacted_thinking", "data": metadata["data"]}
        block = {"type": "thinking", "thinking": part.text}
        if metadata.get("signature"):
            block["signature"] = metadata["signature"]
        return block
    if isinstance(part, ToolCallPart):
        return {"type": "tool_use", "id": part.tool_call_id, "name": part.name, "input": part.arguments}
    if isinstance(part, ToolResultPart):
        return {"type": "tool_result", "tool_use_id": part.tool_call_id, "content": part.output}
    if isinstance(part, AttachmentPart) and part.attachment is not None:
        return attachment_block(part.attachment)
    return None


def attachment_block(attachment):
    """Attachments go inline as base64: URL and file sources are not priced (docs/pricing.md
    "Refused before sending")."""
    media_type = attachment.resolve_type()
    return {
        "type": "document" if media_type == "application/pdf" else "image",
        "source": {"type": "base64", "media_type": media_type, "data": attachment.base64_content()},
    }
