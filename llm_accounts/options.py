"""The options of ``claude-routed`` and the checks a prompt passes before anything is reserved.

A mistake in an option is not raised while llm parses ``-o``: llm would print pydantic's
two-line form with no code. It is kept as an ``Invalid`` value and refused by ``check_prompt``
as one ``declaration_invalid`` line naming the option and the rule, never the value given
(which could be a key pasted in the wrong place). See docs/errors.md.
"""

import difflib
import enum
import json
import re
from typing import Optional, Union

import llm
import pydantic
from llm.parts import TextPart
from pydantic import Field, field_validator

from . import room
from .errors import AccountsError
from .records import CLIENT_RE
from .retries import MAX_RETRIES
from .wire import payload


# The shape of an option name that an error may repeat (docs/errors.md "Option mistakes"): what
# llm's options look like, never a key's mixed case, digits or dashes.
OPTION_NAME = re.compile(r"[a-z][a-z_]{0,39}")

# What pydantic reads as a boolean, so ``-o cache true`` means what it means for llm-anthropic.
BOOLEAN_WORDS = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}


class Invalid:
    """An option value that broke ``rule``; the value itself is not kept."""

    __slots__ = ("rule",)

    def __init__(self, rule):
        self.rule = rule

    def __repr__(self):
        return "Invalid()"


def _rule(error):
    message = error.get("msg") or "invalid value"
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            message = message[len(prefix):]
    return message[:1].lower() + message[1:]


class RoutedOptions(llm.Options):
    # Unknown names are kept, then refused by check_prompt in one line.
    model_config = pydantic.ConfigDict(extra="allow")

    max_tokens: Optional[int] = Field(
        description="The maximum number of tokens to generate (also sets the price ceiling)",
        default=None,
    )
    temperature: Optional[float] = Field(description="Sampling temperature, 0.0 to 1.0", default=None)
    top_p: Optional[float] = Field(description="Nucleus sampling, 0.0 to 1.0", default=None)
    top_k: Optional[int] = Field(description="Sample from the top K options only", default=None)
    stop_sequences: Optional[Union[list, str]] = Field(
        description="Custom text sequences that stop generation (a string or a JSON list)",
        default=None,
    )
    user_id: Optional[str] = Field(
        description="An opaque id for the end user of the request, sent as metadata.user_id",
        default=None,
    )
    prefill: Optional[str] = Field(description="Text the answer starts with (an assistant prefill)", default=None)
    hide_prefill: Optional[bool] = Field(
        description="Do not repeat the prefill at the start of the answer", default=None
    )
    cache: Optional[Union[bool, str]] = Field(
        description="Prompt caching: none, 5m or 1h (1h marks the system prompt for warm-prefix routing); "
        "true means 5m and false none, as in llm-anthropic",
        default=None,
    )
    thinking: Optional[bool] = Field(
        description="Thinking on or off (adaptive on models that support it; the Claude 5 models think unless this is false)",
        default=None,
    )
    thinking_budget: Optional[int] = Field(
        description="Extended thinking with this token budget (at least 1024; the budgeted mode on any model)",
        default=None,
    )
    inference_geo: Optional[str] = Field(
        description="Where inference runs: us (US-only, billed 1.1x) or global (standard rates, and a 1.0x ceiling); "
        "sent as inference_geo, on Claude Opus 4.6, Sonnet 4.6 and later models",
        default=None,
    )
    retries: Optional[int] = Field(
        description="Retries on the same account after a 429 or 529 or a connection that never sent the request, "
        "waiting at most 60 s in all (default 2; 0 turns retries and cooldown waits off)",
        default=None,
    )
    wait: Optional[float] = Field(
        description="Seconds to wait for room when only attempts in flight hold the budget "
        f"(default: $LLM_ACCOUNTS_WAIT, else {room.DEFAULT_WAIT_S:g}; 0 refuses at once)",
        default=None,
    )
    account: Optional[str] = Field(
        description="Pin a new conversation to this account (a bound conversation keeps its own)",
        default=None,
    )
    client: Optional[str] = Field(
        description="Client label recorded on each attempt and checked against client caps (default: $LLM_ACCOUNTS_CLIENT)",
        default=None,
    )

    @field_validator("stop_sequences")
    @classmethod
    def validate_stop_sequences(cls, value):
        if isinstance(value, str):
            try:
                parsed = json.loads(value)
            except ValueError:
                return [value]
            value = parsed if isinstance(parsed, list) else [value]
        if value is not None and not all(isinstance(item, str) and item for item in value):
            raise ValueError("must be a string or a JSON list of non-empty strings")
        return value

    @field_validator("temperature", "top_p")
    @classmethod
    def validate_unit_interval(cls, value):
        if value is not None and not 0.0 <= value <= 1.0:
            raise ValueError("must be between 0.0 and 1.0")
        return value

    @field_validator("top_k", "max_tokens")
    @classmethod
    def validate_positive(cls, value):
        if value is not None and value <= 0:
            raise ValueError("must be a positive integer")
        return value

    @field_validator("retries")
    @classmethod
    def validate_retries(cls, value):
        if value is not None and not 0 <= value <= MAX_RETRIES:
            raise ValueError(f"must be an integer from 0 to {MAX_RETRIES}")
        return value

    @field_validator("wait")
    @classmethod
    def validate_wait(cls, value):
        if value is not None and not 0 <= value <= room.MAX_WAIT_S:
            raise ValueError(f"must be a number of seconds from 0 to {room.MAX_WAIT_S:g}")
        return value

    @field_validator("thinking_budget")
    @classmethod
    def validate_thinking_budget(cls, value):
        if value is not None and value < 1024:
            raise ValueError("must be an integer of at least 1024")
        return value

    @field_validator("cache")
    @classmethod
    def validate_cache(cls, value):
        """llm-anthropic's boolean (``-o cache 1``) is a five-minute mark; off is ``none``."""
        if isinstance(value, bool):
            return "5m" if value else "none"
        if isinstance(value, str) and value.lower() in BOOLEAN_WORDS:
            return "5m" if BOOLEAN_WORDS[value.lower()] else "none"
        if value is not None and value not in payload.CACHE_TTLS:
            raise ValueError("must be one of: none, 5m, 1h (or true/false)")
        return value

    @field_validator("inference_geo")
    @classmethod
    def validate_inference_geo(cls, value):
        # The geos a request may pin (docs/pricing.md "Inference geo (data residency)").
        if value is not None and value not in payload.INFERENCE_GEOS:
            raise ValueError(f"must be one of: {', '.join(payload.INFERENCE_GEOS)}")
        return value

    @field_validator("user_id")
    @classmethod
    def validate_user_id(cls, value):
        # The provider's limit; and a key pasted here would be sent to the provider.
        if value is not None and not (0 < len(value) <= 256 and value.isprintable() and "sk-ant" not in value.lower()):
            raise ValueError("must be 1-256 printable characters, an opaque id such as a UUID or a hash")
        return value

    @field_validator("prefill")
    @classmethod
    def validate_prefill(cls, value):
        if value is not None and not value.strip():
            raise ValueError("must hold some text (the API refuses an answer prefilled with whitespace only)")
        return value

    @field_validator("account")
    @classmethod
    def validate_label(cls, value):
        if value is not None and not re.fullmatch(r"[a-z][a-z0-9_-]{0,31}", value):
            raise ValueError("must match [a-z][a-z0-9_-]{0,31}")
        return value

    @field_validator("client")
    @classmethod
    def validate_client(cls, value):
        # The ledger's client rule, so every label a declaration may cap can be given here.
        if value is not None and (not CLIENT_RE.fullmatch(value) or "sk-ant" in value.lower()):
            raise ValueError("must be 1-64 letters, digits, '_', '.', ':', '@', '/' or '-'")
        return value

    @field_validator("*", mode="wrap")
    @classmethod
    def defer_mistakes(cls, value, handler, info):
        """A mistake is kept as an ``Invalid`` value and refused by ``check_prompt`` in one line
        with its code; llm would print pydantic's two-line form (docs/errors.md)."""
        if isinstance(value, Invalid):
            return value
        try:
            return handler(value)
        except pydantic.ValidationError as error:
            return Invalid(_rule(error.errors()[0]))


class ThinkingEffort(str, enum.Enum):
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    XHIGH = "xhigh"
    MAX = "max"


class RoutedOptionsWithEffort(RoutedOptions):
    """The options of a model that takes ``output_config.effort`` (as llm-anthropic offers it)."""

    thinking_effort: Optional[ThinkingEffort] = Field(
        description="Thinking effort: low, medium, high, xhigh or max (sent as output_config.effort, with adaptive thinking)",
        default=None,
    )


# Each option's counterpart in llm-anthropic 0.30, for the table in docs/prompting.md "Model options" (docs/architecture.md
# "Model ids"): the same name does the same thing unless said otherwise.
LLM_ANTHROPIC = {
    "max_tokens": "`max_tokens`, same default per model",
    "temperature": "`temperature`",
    "top_p": "`top_p`",
    "top_k": "`top_k`",
    "stop_sequences": "`stop_sequences`",
    "user_id": "`user_id`",
    "prefill": "`prefill`",
    "hide_prefill": "`hide_prefill`",
    "cache": "`cache` (its boolean; 5m and 1h are ours)",
    "thinking": "`thinking`",
    "thinking_budget": "none (llm-anthropic budgets 1,024 tokens on older models)",
    "thinking_effort": "`thinking_effort`",
    "inference_geo": "none (data residency)",
    "retries": "none (its SDK retries twice)",
    "wait": "none (routing)",
    "account": "none (routing)",
    "client": "none (routing)",
}


def options_for(capabilities):
    return RoutedOptionsWithEffort if capabilities.effort else RoutedOptions


# Options other models have, so a prompt that uses one on a model without it is told why.
# llm-anthropic's -o fast is not offered: fast-mode rates are a separate table per model, which
# the price revision does not hold (docs/pricing.md "Refused before sending").
FAST_REFUSED = (
    "option fast: fast mode is not offered, its rates are not in the price revision, so no ceiling "
    "could bound it; leave it off (docs/pricing.md \"Refused before sending\")"
)
OTHER_MODELS_OPTIONS = {"thinking_effort": "this model does not take a thinking effort (models that do: llm models --options)"}


def check_prompt(prompt):
    """Refuse, before anything is reserved, what no account should be charged for: an invalid
    option, options that exclude each other, an empty turn, text that is not UTF-8."""
    options = prompt.options
    for name in type(options).model_fields:
        value = getattr(options, name, None)
        if isinstance(value, Invalid):
            raise AccountsError("declaration_invalid", f"option {name}: {value.rule} (see llm models --options)")
    for name in options.model_extra or {}:
        if name == "fast":
            raise AccountsError("unsupported_pricing", FAST_REFUSED)
        if name in OTHER_MODELS_OPTIONS:
            raise AccountsError("declaration_invalid", f"option {name}: {OTHER_MODELS_OPTIONS[name]}")
        close = difflib.get_close_matches(name.lower(), type(options).model_fields, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        if OPTION_NAME.fullmatch(name):
            raise AccountsError("declaration_invalid", f"option {name}: claude-routed has no such option{hint} (see llm models --options)")
        # Any other text may be a key pasted in the wrong place: it is not repeated.
        raise AccountsError(
            "declaration_invalid",
            f"an unknown option (its name is not repeated: it is not shaped like an option name such as max_tokens){hint} "
            "(see llm models --options)",
        )
    if options.temperature is not None and options.top_p is not None:
        raise AccountsError("declaration_invalid", "options temperature and top_p: set one of them, not both")
    for what, text in (("prompt", prompt.prompt), ("system prompt", prompt.system)):
        if isinstance(text, str) and not is_utf8(text):
            raise not_utf8(what)
    if not _has_turn(prompt.messages):
        raise AccountsError("declaration_invalid", "the prompt is empty: give some text, an attachment or a tool result to send")


def not_utf8(what):
    return AccountsError(
        "declaration_invalid", f"the {what} holds bytes that are not UTF-8 text: re-encode it as UTF-8 (for example with iconv)"
    )


def is_utf8(text):
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _has_turn(messages):
    """The last message is the caller's and holds something to answer."""
    if not messages or messages[-1].role in ("system", "assistant"):
        return False
    return any(not isinstance(part, TextPart) or part.text.strip() for part in messages[-1].parts)
