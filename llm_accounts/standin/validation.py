"""Request validation for the stand-in: pure checks that raise ``Refusal`` with the API's answer.

Messages follow the API's pydantic-style wording ("max_tokens: Field required"); texts the reference
quotes (section 4.3) are exact, the rest are the stand-in's own.
"""

from . import wire
from .cache import CacheRuleError, breakpoints
from .config import GEO_CHOICES
from .models import find_model
from .tokens import prompt_units

# Removed in anthropic-version 2026-10-21 (reference section 6); the 400's text is UNVERIFIED.
REMOVED_IN_2026_10_21 = ("temperature", "top_p", "top_k")
EFFORTS = ("low", "medium", "high", "xhigh", "max")


class Refusal(Exception):
    """An error response: status, error.type, message, optional error.details and headers."""

    def __init__(self, status, error_type, message, details=None, headers=None):
        super().__init__(error_type)
        self.status, self.error_type, self.message = status, error_type, message
        self.details, self.headers = details, headers or {}


def bad(message):
    return Refusal(400, "invalid_request_error", message)


def validate(body, *, messages, version, extra_models=()):
    """Check a Messages (or count_tokens) body the way the API does; returns the served Model."""
    required = ("model", "messages", "max_tokens") if messages else ("model", "messages")
    for name in required:
        if name not in body:
            raise bad(f"{name}: Field required")
    if not isinstance(body["model"], str):
        raise bad("model: Input should be a valid string")
    if messages:
        max_tokens = body["max_tokens"]
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int):
            raise bad("max_tokens: Input should be a valid integer")
        if max_tokens < 0:
            raise bad("max_tokens: Input should be greater than or equal to 0")
        if max_tokens == 0 and body.get("stream") is True:
            raise bad("max_tokens: must be at least 1 when streaming")
    history = body["messages"]
    if not isinstance(history, list):
        raise bad("messages: Input should be a valid list")
    if not history:
        raise bad("messages: at least one message is required")
    for index, message in enumerate(history):
        if isinstance(message, dict) and message.get("role") == "system":
            # Mid-conversation system messages: only right after a user turn (reference section 1).
            if index == 0 or not isinstance(history[index - 1], dict) or history[index - 1].get("role") != "user":
                raise bad(f"messages.{index}.role: a system message must follow a user message")
            continue
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise bad(f"messages.{index}.role: Input should be 'user' or 'assistant'")
        if not isinstance(message.get("content"), (str, list)):
            raise bad(f"messages.{index}.content: Input should be a valid string or list")
    if "system" in body and not isinstance(body["system"], (str, list)):
        raise bad("system: Input should be a valid string or list")
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not all(isinstance(tool, dict) and tool.get("name") for tool in tools):
            raise bad("tools: Input should be a list of tools, each with a name")
    choice = body.get("tool_choice")
    if choice is not None:
        if not isinstance(choice, dict) or choice.get("type") not in ("auto", "any", "tool", "none"):
            raise bad("tool_choice.type: Input should be 'auto', 'any', 'tool' or 'none'")
        names = {tool["name"] for tool in tools or []}
        if choice["type"] == "tool" and choice.get("name") not in names:
            raise bad("tool_choice.name: must name one of the tools")
    stops = body.get("stop_sequences")
    if stops is not None and not (isinstance(stops, list) and all(isinstance(each, str) for each in stops)):
        raise bad("stop_sequences: Input should be a list of strings")
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1024:
            raise bad("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024")
        if messages and body["max_tokens"] <= budget:
            raise bad(
                "`max_tokens` must be greater than `thinking.budget_tokens`. Please consult our documentation "
                "at https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
                "#max-tokens-and-context-window-size"
            )
    config = body.get("output_config")
    if config is not None:
        if not isinstance(config, dict):
            raise bad("output_config: Input should be a valid dictionary")
        if "effort" in config and config["effort"] not in EFFORTS:
            raise bad(f"output_config.effort: Input should be {', '.join(repr(each) for each in EFFORTS)}")
        fmt = config.get("format")
        if fmt is not None and not (isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict)):
            raise bad("output_config.format: Input should be a json_schema format with a schema object")
    if isinstance(thinking, dict) and thinking.get("type") not in ("enabled", "adaptive", "disabled"):
        raise bad("thinking.type: Input should be 'enabled', 'adaptive' or 'disabled'")
    if isinstance(thinking, dict) and thinking.get("display") not in (None, "summarized", "omitted"):
        raise bad("thinking.display: Input should be 'summarized' or 'omitted'")
    metadata = body.get("metadata")
    if metadata is not None and not (isinstance(metadata, dict) and isinstance(metadata.get("user_id", ""), str)):
        raise bad("metadata.user_id: Input should be a valid string")
    if version == "2026-10-21":
        for name in REMOVED_IN_2026_10_21:
            if name in body:
                raise bad(f"{name}: Extra inputs are not permitted")
    model = find_model(body["model"], extra_models)
    if model is None:
        raise Refusal(404, "not_found_error", f"model: {body['model']}")
    return model


def check_prompt(body, model, betas=(), force=None):
    """Limits and cache rules of a validated Messages body; returns ``(units, breakpoints, total)``.

    ``force`` is a behaviour (max_tokens_too_large, prompt_too_long) that answers as if its limit
    were exceeded.
    """
    if body["max_tokens"] > model.max_tokens or force == "max_tokens_too_large":
        requested = max(body["max_tokens"], model.max_tokens + 1)
        raise bad(wire.max_tokens_too_large(requested, model.max_tokens, model.id))
    units = prompt_units(body)
    total = sum(unit.tokens for unit in units)
    window = model.context_window(betas)
    if total > window or force == "prompt_too_long":
        raise bad(wire.prompt_too_long(max(total, window + 1), window))
    try:
        points = breakpoints(units, body.get("cache_control"))
    except CacheRuleError as error:
        raise bad(str(error)) from None
    return units, points, total


def served_geo(body, model, default=None, reported="not_available"):
    """The ``inference_geo`` a Messages request's usage reports and is billed in.

    A request may ask for ``global`` or ``us`` (``inference_geo`` in its body), and a workspace
    may default to one (config ``inference_geo_default``). Models from Claude 4.6 on run there and
    say so; older ones refuse the field (400) and ignore the default. Without either, the key's
    configured ``inference_geo`` is reported, as before these were modelled (``reported``)."""
    asked = body.get("inference_geo")
    if asked is not None:
        if asked not in GEO_CHOICES:
            raise bad(f"inference_geo: Input should be {' or '.join(repr(each) for each in GEO_CHOICES)}")
        if not model.geo_routing:
            raise bad(f"inference_geo: is not supported on {model.id}")
        return asked
    if default is not None and model.geo_routing:
        return default
    return reported
