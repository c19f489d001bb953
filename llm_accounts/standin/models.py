"""The fake provider's own model table (reference anthropic-api.md tables 1.2 and 1.6, section 5).

This is the stand-in's truth about context windows, output limits and cache minimums; it is
deliberately independent of the project's price data, so a disagreement between the two shows up
in tests instead of being hidden by a shared table.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Model:
    id: str
    display_name: str
    # created_at orders GET /v1/models (newest first). Dated snapshots use their date; the others
    # are the stand-in's own approximations.
    created_at: str
    max_input_tokens: int  # the context window
    max_tokens: int  # maximum output
    min_cache_tokens: int  # minimum cacheable prompt length (section 5)
    aliases: tuple = ()
    # The 1M-context beta (`anthropic-beta: context-1m-2025-08-07`) widens the window (table 1.2).
    long_context_beta: bool = False
    # Claude 4.6 and newer take a request's ``inference_geo`` and report where they ran; older
    # models refuse the field (400) and report ``not_available``. The stand-in's own table, not
    # the project's prices: it plays the provider.
    geo_routing: bool = False

    def context_window(self, betas=()):
        if self.long_context_beta and LONG_CONTEXT_BETA in betas:
            return 1_000_000
        return self.max_input_tokens

    def as_json(self):
        return {
            "type": "model",
            "id": self.id,
            "display_name": self.display_name,
            "created_at": self.created_at,
            "max_input_tokens": self.max_input_tokens,
            "max_tokens": self.max_tokens,
        }


LONG_CONTEXT_BETA = "context-1m-2025-08-07"
M = 1_000_000
K200 = 200_000

MODELS = (
    # Table 1.2 (served models).
    Model("claude-opus-4-6", "Claude Opus 4.6", "2026-02-05T00:00:00Z", M, 128_000, 4096, geo_routing=True),
    Model("claude-sonnet-4-6", "Claude Sonnet 4.6", "2026-02-17T00:00:00Z", M, 128_000, 2048, geo_routing=True),
    Model(
        "claude-opus-4-5-20251101", "Claude Opus 4.5", "2025-11-01T00:00:00Z", K200, 64_000, 4096,
        ("claude-opus-4-5",),
    ),
    Model(
        "claude-opus-4-1-20250805", "Claude Opus 4.1", "2025-08-05T00:00:00Z", K200, 32_000, 1024,
        ("claude-opus-4-1",),
    ),
    Model(
        "claude-sonnet-4-5-20250929", "Claude Sonnet 4.5", "2025-09-29T00:00:00Z", K200, 64_000, 1024,
        ("claude-sonnet-4-5",), long_context_beta=True,
    ),
    Model(
        "claude-haiku-4-5-20251001", "Claude Haiku 4.5", "2025-10-01T00:00:00Z", K200, 64_000, 4096,
        ("claude-haiku-4-5",),
    ),
    # Table 1.6 (newer lineup, lower confidence). Cache minimums not in section 5 follow the family.
    Model("claude-opus-4-7", "Claude Opus 4.7", "2026-04-16T00:00:00Z", M, 128_000, 4096, geo_routing=True),
    Model("claude-opus-4-8", "Claude Opus 4.8", "2026-06-01T00:00:00Z", M, 128_000, 4096, geo_routing=True),
    Model("claude-opus-5", "Claude Opus 5", "2026-08-01T00:00:00Z", M, 128_000, 4096, geo_routing=True),
    Model("claude-opus-5-5", "Claude Opus 5.5", "2026-10-01T00:00:00Z", M, 128_000, 4096, geo_routing=True),
    Model("claude-sonnet-5", "Claude Sonnet 5", "2026-08-01T00:00:00Z", M, 128_000, 2048, geo_routing=True),
    Model("claude-sonnet-5-5", "Claude Sonnet 5.5", "2026-10-01T00:00:00Z", M, 128_000, 2048, geo_routing=True),
    Model("claude-haiku-5-5", "Claude Haiku 5.5", "2026-10-01T00:00:00Z", M, 128_000, 4096, geo_routing=True),
)

# Retired on the first-party API (section 7 item 3): requests get 404 `model: <id>`.
RETIRED = frozenset(
    {
        "claude-3-5-haiku-20241022",
        "claude-3-7-sonnet-20250219",
        "claude-sonnet-4-20250514",
        "claude-opus-4-20250514",
    }
)

_BY_NAME = {name: model for model in MODELS for name in (model.id, *model.aliases)}


def find_model(name, extra=()):
    """The served model for an id or alias; None for unknown and retired ids (both 404).
    ``extra`` are models a stand-in's config adds (``configured_model``)."""
    if not isinstance(name, str) or name in RETIRED:
        return None
    return next((model for model in extra if model.id == name), None) or _BY_NAME.get(name)


def listed_models(extra=()):
    """Models in GET /v1/models order: newest first, ties by id."""
    return sorted((*extra, *MODELS), key=lambda model: (model.created_at, model.id), reverse=True)


def configured_model(entry):
    """A model the config adds (``{"id", "context_window", "max_output"}``): one no shipped
    price lists, such as a release newer than the plugin, priced by a user's price revision
    (docs/pricing.md "Your own price revisions"). Listed newest; its cache minimum 1,024; newer
    than 4.6, so it takes ``inference_geo``."""
    return Model(
        entry["id"], entry["id"], "2099-01-01T00:00:00Z", entry["context_window"], entry["max_output"], 1024,
        geo_routing=True,
    )
