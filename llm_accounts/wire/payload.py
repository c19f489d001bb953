"""Build a Messages API request body from an ``llm`` prompt.

The body is built once and frozen to bytes (``freeze``) before it is quoted: the quote, the
ledger's request digest and the wire request are the same bytes (docs/pricing.md "Quote").
"""

import json

from llm.models import ServerSideTool
from llm.parts import AttachmentPart, ReasoningPart, TextPart, ToolCallPart, ToolResultPart

from . import structured
from ..capabilities import for_model, routed_max_tokens
from ..errors import AccountsError

ANTHROPIC_VERSION = "2023-06-01"
DEFAULT_THINKING_BUDGET = 1024
CACHE_TTLS = ("none", "5m", "1h")
# -o inference_geo: the geos a request may pin (docs/pricing.md "Inference geo (data residency)").
INFERENCE_GEOS = ("us", "global")
# --schema is sent as this forced tool; its input comes back to llm as the JSON text answer.
SCHEMA_TOOL = "output_structured_data"


def freeze(body):
    """The exact bytes sent: compact JSON, keys in insertion order, UTF-8."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def build_body(prompt, model_id, *, stream, capabilities=None, hide_reasoning=False):
    """The request body for ``prompt`` on ``model_id``, as llm-anthropic builds it for the same
    model (``capabilities``); raises ``declaration_invalid`` for bad combinations."""
    caps = capabilities or for_model(model_id)
    options = prompt.options
    if prompt.schema and prompt.tools:
        raise AccountsError("declaration_invalid", "--schema and tools cannot be used in the same prompt")
    body = {"model": model_id, "max_tokens": options.max_tokens or routed_max_tokens(caps, options.thinking_budget)}
    if options.user_id:
        body["metadata"] = {"user_id": options.user_id}

    system = _system_text(prompt)
    cache = options.cache or "none"
    native_schema = bool(prompt.schema) and caps.structured_outputs

    tools = []
    if prompt.schema and not native_schema:
        # A forced tool is the portable way to get schema-shaped JSON from the other models.
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
            # Its definition as the provider takes it; whether it can be priced is quote's
            # decision (docs/pricing.md "Server tools").
            tools.append(_server_tool_spec(tool))
            continue
        tools.append(
            {"name": tool.name, "description": tool.description or "", "input_schema": tool.input_schema}
        )

    messages = build_messages(prompt, caps, model_id)
    if cache != "none":
        _mark_cache(body, tools, messages, system, cache)
        system = None if isinstance(body.get("system"), list) else system
    if options.prefill:
        if caps.adaptive:
            raise AccountsError(
                "declaration_invalid",
                f"option prefill: {model_id} does not accept a prefilled answer; use --schema or instructions in the system prompt",
            )
        messages.append({"role": "assistant", "content": [{"type": "text", "text": options.prefill}]})
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
    thinking = _thinking(options, caps, model_id, body["max_tokens"], hide_reasoning)
    if thinking is not None:
        body["thinking"] = thinking
    effort = getattr(options, "thinking_effort", None) if caps.effort else None
    if effort:
        body["output_config"] = {"effort": getattr(effort, "value", effort)}
    if native_schema:
        try:
            body.setdefault("output_config", {})["format"] = structured.output_format(prompt.schema)
        except (ValueError, TypeError, AttributeError):
            raise AccountsError(
                "declaration_invalid", "--schema: each schema needs a type, anyOf, oneOf, allOf, const or enum"
            ) from None
    geo = getattr(options, "inference_geo", None)
    if geo:
        # Only with the option: without it the body is byte for byte what it was, and the
        # workspace's default geo applies (the ceiling covers it).
        body["inference_geo"] = geo
    if stream:
        body["stream"] = True
    return body


def beta_headers(body, capabilities):
    """The ``anthropic-beta`` values a body needs on its model (effort before adaptive thinking)."""
    betas = []
    if capabilities.effort_beta and "effort" in (body.get("output_config") or {}):
        betas.append(capabilities.effort_beta)
    return betas


def _server_tool_spec(tool):
    try:
        spec = tool.tool_spec(None)
    except (TypeError, ValueError, AttributeError):
        spec = None
    if not isinstance(spec, dict):
        raise AccountsError("declaration_invalid", f"server tool {tool.name}: its definition is not a JSON object")
    return dict(spec)


def _thinking(options, caps, model_id, max_tokens, hide_reasoning):
    """The ``thinking`` field, as llm-anthropic decides it; ``thinking_budget`` (ours) asks for
    the budgeted mode on any model."""
    effort = caps.effort and getattr(options, "thinking_effort", None)
    if options.thinking is False:
        if caps.always_thinks:
            raise AccountsError("declaration_invalid", f"option thinking: {model_id} always thinks; thinking cannot be turned off")
        if options.thinking_budget:
            raise AccountsError("declaration_invalid", "options thinking and thinking_budget: a budget needs thinking on")
        return {"type": "disabled"}
    if options.thinking_budget:
        thinking = {"type": "enabled", "budget_tokens": options.thinking_budget}
    elif options.thinking or effort:
        adaptive = caps.adaptive or effort
        thinking = {"type": "adaptive"} if adaptive else {"type": "enabled", "budget_tokens": DEFAULT_THINKING_BUDGET}
    elif caps.thinks_by_default:
        thinking = {"type": "adaptive"}
    else:
        return None
    if thinking["type"] == "enabled" and max_tokens <= thinking["budget_tokens"]:
        raise AccountsError(
            "declaration_invalid", "options max_tokens and thinking_budget: max_tokens must be greater than thinking_budget"
        )
    if thinking["type"] == "adaptive":
        # -R asks for no trace at all; otherwise the summarized trace, which newer models omit
        # unless asked, so llm can show and log it.
        thinking["display"] = "omitted" if hide_reasoning else "summarized"
    elif hide_reasoning:
        thinking["display"] = "omitted"
    return thinking


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


def build_messages(prompt, capabilities=None, model_id=None):
    """``prompt.messages`` already holds the whole conversation (llm >= 0.32).

    The first message's system role is the top-level system prompt; a later one is sent inline
    on models that accept it, moved after the user turn it precedes (the API wants a system
    entry right after a user turn), as llm-anthropic does.
    """
    out = []
    for index, message in enumerate(prompt.messages):
        if message.role == "system":
            if index == 0:
                continue
            if capabilities is None or not capabilities.system_messages:
                raise AccountsError(
                    "declaration_invalid",
                    f"{model_id or 'this model'} takes a system message only as the first message; "
                    "use a model that accepts later ones (claude-opus-4-8 and the Claude 5 family)",
                )
            texts = [{"type": "text", "text": part.text} for part in message.parts if isinstance(part, TextPart) and part.text]
            if not texts:
                continue
            if out and out[-1]["role"] == "system":
                out[-1]["content"].extend(texts)
            else:
                out.append({"role": "system", "content": texts})
            continue
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
    for i in range(len(out) - 1):
        if out[i]["role"] == "system" and out[i + 1]["role"] == "user":
            out[i], out[i + 1] = out[i + 1], out[i]
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
        kind = "server_tool_use" if part.server_executed else "tool_use"
        return {"type": kind, "id": part.tool_call_id, "name": part.name, "input": part.arguments}
    if isinstance(part, ToolResultPart) and part.server_executed:
        # A server tool's result goes back as the block it came in (web_search_tool_result, ...),
        # as llm-anthropic sends it: the API refuses a plain tool_result in an assistant turn.
        block = {"type": f"{part.name}_tool_result", "tool_use_id": part.tool_call_id}
        try:
            content = json.loads(part.output) if part.output else None
        except ValueError:
            content = part.output
        if content is not None:
            block["content"] = content
        return block
    if isinstance(part, ToolResultPart):
        return {"type": "tool_result", "tool_use_id": part.tool_call_id, "content": part.output}
    if isinstance(part, AttachmentPart) and part.attachment is not None:
        return attachment_block(part.attachment)
    return None


def attachment_block(attachment):
    """An attachment given by URL is sent as its URL, as llm-anthropic sends it (the provider
    fetches it; its tokens are input like any other); a file or content goes inline as base64."""
    media_type = attachment.resolve_type()
    if attachment.url:
        source = {"type": "url", "url": attachment.url}
    else:
        source = {"type": "base64", "media_type": media_type, "data": attachment.base64_content()}
    return {"type": "document" if media_type == "application/pdf" else "image", "source": source}
