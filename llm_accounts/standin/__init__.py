"""A loopback stand-in of the Anthropic Messages API, for tests, the demo and benchmarks (issue 2).

Real HTTP/1.1 on 127.0.0.1 (standard library only) with the JSON and SSE bytes of reference
anthropic-api.md sections 2-7: ``POST /v1/messages`` (non-streamed and ``stream: true``),
``POST /v1/messages/count_tokens``, ``GET /v1/models`` and ``GET /v1/models/{id}``; with an admin
key, the Admin API's usage, cost and API key reports (``reports``) and the Usage and Cost Analytics
API, ``GET /v1/organizations/analytics/usage`` and ``/analytics/cost`` (``analytics``).

Config (``load_config(path)`` / ``validate_config(dict)``)::

    {"keys": [{"label": "a", "key": "...", "organization": "org-a", "behaviour": "ok",
               "script": ["rate_limited", "ok"], "delay": 0.0, "min_cache_tokens": 1024,
               "retry_after": 1, "shapes": ["gzip"], "inference_geo": "global",
               "inference_geo_default": "us"}],
     "min_cache_tokens": 1024,
     "admin_keys": [{"key": "...", "organization": "org-a"}],
     "report_delay": 120, "report_bucketing": "arrival",
     "organizations": {"org-a": {"inference_geo_default": "us", "analytics": true}},
     "models": [{"id": "claude-nova-6", "context_window": 400000, "max_output": 32000}]}

Only ``label`` and ``key`` are required. ``organization`` defaults to ``org-<label>``; keys that
share one share its prompt cache. ``script`` is consumed one behaviour per ``POST /v1/messages``
before falling back to ``behaviour``. ``min_cache_tokens`` (per key, else top level, else the
model's documented minimum) is the minimum cacheable prefix. ``models`` adds models it lists and
answers besides its own table: one no shipped price knows, for a user's price revision.

Reports: an admin key reads its organization's. A billed request is visible ``report_delay``
seconds after it completed (its last event sent, or its client gone), in the bucket of its arrival
or, with ``report_bucketing: "completion"``, of its completion. ``inference_geo_default`` (a key's
workspace, else its organization's: ``global`` or ``us``) is where a Claude 4.6+ request runs when
its body names no ``inference_geo``; a body's ``inference_geo`` is refused (400) on older models.
Usage served in ``us`` is billed 1.1x on every token kind. ``organizations.<name>.analytics:
false`` (or ``StandIn.set_analytics``) makes the Analytics API answer that organization 404.
``StandIn.add_usage`` adds another tool's usage (another client on a key, the Console with no key,
the Batch API at half price, Priority Tier, which the cost reports leave out) to the reports.

Behaviours (``BEHAVIOURS``): ok; rate_limited (429, retry-after, x-should-retry, rate-limit
headers); spend_limit (429, ``enforced_spend_limit_reached``, no retry-after); overloaded (529);
overloaded_final (529 with ``x-should-retry: false``); api_error (500); api_error_final (500 with
``x-should-retry: false``); bad_gateway (502); unavailable (503, retry-after); gateway_timeout (504,
``timeout_error``); unauthorized (401); forbidden (403); credit_balance_too_low (400);
usage_limit_reached (400, regain date: the 1st of next month); prompt_too_long (400);
max_tokens_too_large (400); stream_error (streamed: some deltas then an ``error`` event, no
message_stop; otherwise 529); stream_rate_limit_error, stream_authentication_error,
stream_permission_error, stream_billing_error and stream_credit_balance_too_low (streamed: the
same, with an ``error`` event of that type, or an ``invalid_request_error`` saying the credit
balance is too low; otherwise their HTTP twin: rate_limited, unauthorized, forbidden,
credit_balance_too_low); slow (``delay`` seconds before the headers and between events);
drop (streamed: some deltas then the connection closes mid-body; otherwise it closes with no
response); echo_key (the reply text quotes the request's key, split across text deltas);
refusal (200 with no content, ``stop_reason: refusal`` and ``stop_details``, as a safety
classifier declines).
GET /v1/models under a standing echo_key lists the key itself, and an id quoting it, on its first
page.
GET /v1/models and count_tokens follow the key's standing behaviour when it is unauthorized,
forbidden, rate_limited, overloaded, api_error, slow or drop; scripts never apply to them.
count_tokens refuses the fields only a message takes (max_tokens, stream, sampling, stop
sequences, metadata) as extra inputs, as the API does.

A key's ``shapes`` (``config.SHAPES``) add what real answers carry, whatever its behaviour: gzip,
stop_details_null, caller, parallel_tools, text_before_thinking, retry_after_200, set_cookie; its
``inference_geo`` (not_available, global or us) is what its usage reports. Both may be set in the
config and by ``set_behaviour``.

``StandIn.requests`` logs every request, oldest first, as a dict: method, path, label (None when no
key matched), auth ("x-api-key" | "bearer" | None), model, stream, status (0: closed without a
response), body (parsed JSON or None), headers (lower-case names; x-api-key, authorization and
proxy-authorization dropped), behaviour, organization, request_id, usage (a 200 message's usage),
dropped, arrived_at, and for a billed request at (when it was billed), api_key_id, model_id,
service_tier, inference_geo, speed, context_window and completed_at (None while it is answered).
An entry is logged before the response's first byte, so it is there when a client sees it.

Usage comes from a fake tokenizer (``tokens``) and a per-organization prompt cache (``cache``);
replies are deterministic (``replies``); the model table is the stand-in's own (``models``).

The modules: ``server`` (sockets, HTTP/1.1, routing), ``validation`` (the request checks),
``config`` (keys and behaviours) and ``demo`` (the built-in config), ``replies`` and
``server_tools`` (what an answer holds, from the content ``blocks`` both build), ``wire`` (the
bytes of errors, messages and SSE events), ``tokens``, ``cache``, ``models``, and the Admin API's
``reports`` and ``analytics``.
"""

from .config import BEHAVIOURS, ConfigError, load_config, validate_config
from .demo import demo_config, store_demo_keys
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
    "demo_config",
    "find_model",
    "is_loopback",
    "load_config",
    "serve",
    "store_demo_keys",
    "text_tokens",
    "validate_config",
]
