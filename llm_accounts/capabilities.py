"""What each priced model accepts, as llm-anthropic 0.30 registers it (docs/architecture.md "Model ids").

``claude-routed/<id>`` builds the same request llm-anthropic would build for ``<id>``: the same
default ``max_tokens``, thinking modes, effort, native structured output and mid-conversation
system messages. A model llm-anthropic has no entry for gets its newest-model defaults with the
64,000 ``max_tokens`` it gives a model whose limit it does not know.

One difference is deliberate: a prompt that does not set ``max_tokens`` asks for at most
``ROUTED_MAX_TOKENS`` (``routed_max_tokens``), not llm-anthropic's default for the model, since
``max_tokens`` is the output term of the price ceiling and of every hold once an answer has started
(docs/prompting.md "max_tokens").
"""

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class Capabilities:
    default_max_tokens: int
    thinking: bool = True  # extended thinking (``thinking`` / ``thinking_budget``)
    effort: bool = False  # ``thinking_effort`` -> output_config.effort
    adaptive: bool = False  # thinking {"type": "adaptive"}; no assistant prefill
    thinks_by_default: bool = False  # adaptive thinking unless ``-o thinking false``
    always_thinks: bool = False  # thinking cannot be turned off
    structured_outputs: bool = False  # --schema as output_config.format, not a forced tool
    system_messages: bool = False  # system-role messages after the first
    # Effort on a model that predates adaptive thinking needs this beta header.
    effort_beta: str | None = None


_GEN_4_6 = Capabilities(128_000, effort=True, adaptive=True, structured_outputs=True)
_GEN_4_8 = Capabilities(128_000, effort=True, adaptive=True, structured_outputs=True, system_messages=True)
_GEN_5 = Capabilities(
    128_000, effort=True, adaptive=True, thinks_by_default=True, structured_outputs=True, system_messages=True
)
_ALWAYS_THINKS = Capabilities(
    128_000,
    effort=True,
    adaptive=True,
    thinks_by_default=True,
    always_thinks=True,
    structured_outputs=True,
    system_messages=True,
)
# llm-anthropic's defaults for a model it has no entry for (its newest generation, 64,000 tokens).
UNLISTED = dataclasses.replace(_ALWAYS_THINKS, default_max_tokens=64_000)

BY_MODEL = {
    "claude-haiku-4-5-20251001": Capabilities(64_000, structured_outputs=True),
    "claude-sonnet-4-5-20250929": Capabilities(64_000, structured_outputs=True),
    "claude-opus-4-5-20251101": Capabilities(64_000, effort=True, effort_beta="effort-2025-11-24"),
    "claude-opus-4-6": _GEN_4_6,
    "claude-sonnet-4-6": _GEN_4_6,
    "claude-opus-4-7": _GEN_4_6,
    "claude-opus-4-8": _GEN_4_8,
    "claude-sonnet-5": _GEN_5,
    "claude-opus-5": _GEN_5,
    "claude-fable-5": _ALWAYS_THINKS,
    "claude-fable-5-1": _ALWAYS_THINKS,
    "claude-opus-5-5": _ALWAYS_THINKS,
    "claude-sonnet-5-5": _ALWAYS_THINKS,
}


# What a prompt that does not set max_tokens asks for, at most (docs/prompting.md "max_tokens"):
# about 24,000 words of answer. llm-anthropic's 128,000 on the newest models would make every
# answer in flight hold $2.11 on Sonnet 4.6 until it ends, since nothing before the end bounds
# its output below max_tokens; at 32,000 it holds $0.53, so two $20 accounts carry a batch of a
# hundred prompts at llm-anthropic's pace and four interrupted prompts hold about $2.
ROUTED_MAX_TOKENS = 32_000


def routed_max_tokens(capabilities, thinking_budget=None):
    """The ``max_tokens`` a prompt that sets none sends: ``ROUTED_MAX_TOKENS`` plus any thinking
    budget it asks for, never above llm-anthropic's default for the model."""
    return min(capabilities.default_max_tokens, ROUTED_MAX_TOKENS + (thinking_budget or 0))


def for_model(model_id):
    """The capabilities of a canonical model id of the price revision."""
    return BY_MODEL.get(model_id, UNLISTED)


def for_price(price):
    """``for_model`` for a model of a price revision, its default ``max_tokens`` no larger than
    the model's maximum output: a model llm-anthropic has no entry for (one only a user's price
    revision lists, say) still takes a plain prompt (docs/pricing.md "Your own price revisions")."""
    capabilities = for_model(price.id)
    if capabilities.default_max_tokens > price.max_output:
        return dataclasses.replace(capabilities, default_max_tokens=price.max_output)
    return capabilities
