"""A loopback stand-in of the Anthropic Messages API, for tests and the demo (issue 2).

Real HTTP/1.1 on 127.0.0.1 with the JSON and SSE bytes of reference anthropic-api.md sections 2-7:
``POST /v1/messages`` (non-streamed and streamed), ``POST /v1/messages/count_tokens``,
``GET /v1/models`` and ``GET /v1/models/{id}``; per-key behaviours and scripts (``config.BEHAVIOURS``);
usage from a fake tokenizer (``tokens``); a per-organization prompt cache honouring cache_control
TTLs (``cache``). Start it with ``StandIn(config).start()`` or ``llm accounts standin``.
"""

from .config import BEHAVIOURS, ConfigError, load_config, validate_config
from .models import MODELS, RETIRED, find_model
from .server import StandIn, is_loopback, serve
from .tokens import count_tokens, text_tokens

__all__ = [
    "BEHAVIOURS",
    "MODELS",
    "RETIRED",
    "ConfigError",
    "StandIn",
    "count_tokens",
    "find_model",
    "is_loopback",
    "load_config",
    "serve",
    "text_tokens",
    "validate_config",
]
