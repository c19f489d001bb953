"""Bytes on the wire: error bodies, usage and message JSON, SSE events, response headers.

Shapes and strings follow reference anthropic-api.md sections 2-4 (key order as in the recorded
responses). Texts marked UNVERIFIED there are the stand-in's best guess.
"""

import datetime as dt
import json

RATE_LIMIT_DOCS = "https://docs.claude.com/en/api/rate-limits"
CREDIT_BALANCE_TOO_LOW = (
    "Your credit balance is too low to access the Anthropic API. "
    "Please go to Plans & Billing to upgrade or purchase credits."
)

# (status, error.type) per behaviour that answers with an error before any content.
ERROR_STATUS = {
    "rate_limited": (429, "rate_limit_error"),
    "spend_limit": (429, "rate_limit_error"),
    "overloaded": (529, "overloaded_error"),
    "overloaded_final": (529, "overloaded_error"),
    "api_error": (500, "api_error"),
    "api_error_final": (500, "api_error"),
    "bad_gateway": (502, "api_error"),
    "unavailable": (503, "api_error"),
    "gateway_timeout": (504, "timeout_error"),
    "unauthorized": (401, "authentication_error"),
    "forbidden": (403, "permission_error"),
    "credit_balance_too_low": (400, "invalid_request_error"),
    "usage_limit_reached": (400, "invalid_request_error"),
}

# Pad counts for data lines, cycled: the real API pads JSON with spaces before the final "}"
# (section 3.4); clients must parse JSON, not match bytes.
PADS = (3, 15, 0, 3, 13, 8, 11, 11, 15, 7)


def dumps(value):
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def error_body(error_type, message, request_id=None, details=None):
    error = {"type": error_type, "message": message}
    if details is not None:
        error["details"] = details
    body = {"type": "error", "error": error}
    if request_id is not None:
        body["request_id"] = request_id
    return body


def rfc3339(seconds):
    return dt.datetime.fromtimestamp(int(seconds), dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def next_month_start(seconds):
    day = dt.datetime.fromtimestamp(seconds, dt.timezone.utc).date()
    return dt.date(day.year + (day.month == 12), day.month % 12 + 1, 1)


def behaviour_error(behaviour, *, organization, now):
    """``(status, error.type, message, details)`` for an error behaviour."""
    status, error_type = ERROR_STATUS[behaviour]
    details = None
    if behaviour == "rate_limited":
        message = (
            f"This request would exceed your organization's rate limit of 50 requests per minute "
            f"(org: {organization}). For details, refer to: {RATE_LIMIT_DOCS}. You can see the response headers "
            "for current usage. Please reduce the prompt length or the maximum tokens requested, or try again "
            "later. You may also contact sales at https://www.anthropic.com/contact-sales to discuss your options "
            "for a rate limit increase."
        )
    elif behaviour == "spend_limit":
        message = "The organization has crossed the monthly API usage threshold of its API tier."
        details = {"error_code": "enforced_spend_limit_reached"}
    elif behaviour in ("overloaded", "overloaded_final"):
        message = "Overloaded"
    elif behaviour in ("api_error", "api_error_final"):
        message = "Internal server error"
    elif behaviour == "bad_gateway":
        message = "Bad gateway"
    elif behaviour == "unavailable":
        message = "Service unavailable"
    elif behaviour == "gateway_timeout":
        message = "Request timed out"
    elif behaviour == "unauthorized":
        message = "invalid x-api-key"
    elif behaviour == "forbidden":
        message = "Your API key does not have permission to use the specified resource."
    elif behaviour == "credit_balance_too_low":
        message = CREDIT_BALANCE_TOO_LOW
    else:
        message = (
            "You have reached your specified API usage limits. "
            f"You will regain access on {next_month_start(now).isoformat()} at 00:00 UTC."
        )
    return status, error_type, message, details


def prompt_too_long(tokens, maximum):
    return f"prompt is too long: {tokens} tokens > {maximum} maximum"


def max_tokens_too_large(requested, maximum, model_id):
    return (
        f"max_tokens: {requested} > {maximum}, which is the maximum allowed number of output tokens for {model_id}"
    )


def ratelimit_headers(now, *, limited=False, retry_after=1, input_tokens=0):
    """The anthropic-ratelimit-* family (section 4.4): RFC 3339 resets, remaining rounded to thousands."""
    # A limited key resets after retry-after; an unlimited one is fully replenished within a minute.
    reset = rfc3339(now + (max(retry_after, 1) if limited else 60))
    requests_remaining = 0 if limited else 49
    input_remaining = 0 if limited else max(0, (30_000 - input_tokens) // 1000 * 1000)
    output_remaining = 0 if limited else 8_000
    return {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": str(requests_remaining),
        "anthropic-ratelimit-requests-reset": reset,
        "anthropic-ratelimit-input-tokens-limit": "30000",
        "anthropic-ratelimit-input-tokens-remaining": str(input_remaining),
        "anthropic-ratelimit-input-tokens-reset": reset,
        "anthropic-ratelimit-output-tokens-limit": "8000",
        "anthropic-ratelimit-output-tokens-remaining": str(output_remaining),
        "anthropic-ratelimit-output-tokens-reset": reset,
        "anthropic-ratelimit-tokens-limit": "38000",
        "anthropic-ratelimit-tokens-remaining": str(input_remaining + output_remaining),
        "anthropic-ratelimit-tokens-reset": reset,
    }


def usage(plan, output_tokens, inference_geo="not_available", reply=None):
    """A message's full usage object (section 2.1), in the recorded key order. ``inference_geo``
    is what the key reports (``global`` on the Claude 4.6+ models; ``not_available`` before); a
    reply that ran a server tool adds its result's input tokens and its ``server_tool_use`` counts."""
    out = {
        "input_tokens": plan.input_tokens + _extra_input(reply),
        "cache_creation_input_tokens": plan.cache_creation_input_tokens,
        "cache_read_input_tokens": plan.cache_read_input_tokens,
        "cache_creation": {
            "ephemeral_5m_input_tokens": plan.ephemeral_5m_input_tokens,
            "ephemeral_1h_input_tokens": plan.ephemeral_1h_input_tokens,
        },
        "output_tokens": output_tokens,
        "service_tier": "standard",
        "inference_geo": inference_geo,
    }
    return _with_tool_uses(out, reply)


def delta_usage(plan, output_tokens, reply=None):
    """message_delta usage: cumulative, input and cache counts repeated, no TTL breakdown (section 3.3)."""
    return _with_tool_uses(
        {
            "input_tokens": plan.input_tokens + _extra_input(reply),
            "cache_creation_input_tokens": plan.cache_creation_input_tokens,
            "cache_read_input_tokens": plan.cache_read_input_tokens,
            "output_tokens": output_tokens,
        },
        reply,
    )


def _extra_input(reply):
    return getattr(reply, "extra_input_tokens", 0)


def _with_tool_uses(out, reply):
    counts = getattr(reply, "server_tool_use", None)
    if not counts:
        return out
    ordered = {}
    for name, value in out.items():
        ordered[name] = value
        if name == "output_tokens":
            ordered["server_tool_use"] = {"web_search_requests": 0, "web_fetch_requests": 0, **counts}
    return ordered


def message(model_id, message_id, content, stop_reason, stop_sequence, usage_object, stop_details=None, null_details=False):
    """A Messages answer; ``null_details`` sends ``stop_details: null`` when there are none, as
    2026 answers do (section 2.1)."""
    out = {
        "model": model_id,
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage_object,
    }
    if stop_details is not None or null_details:
        out["stop_details"] = stop_details
    return out


def sse(name, payload, pad=0):
    """One SSE event: ``event:`` line, ``data:`` line (padded before the final brace), blank line."""
    data = payload if isinstance(payload, str) else dumps(payload)
    if pad:
        data = data[:-1] + " " * pad + "}"
    return f"event: {name}\ndata: {data}\n\n".encode("utf-8")


PING = '{"type": "ping"}'
# Mid-stream ``error`` events per behaviour: (error.type, message, the behaviour a request that is not
# streamed gets instead). An error can arrive after a 200 and some deltas, of any documented type.
STREAM_ERRORS = {
    "stream_error": ("overloaded_error", "Overloaded", "overloaded"),
    "stream_rate_limit_error": ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit", "rate_limited"),
    "stream_authentication_error": ("authentication_error", "invalid x-api-key", "unauthorized"),
    "stream_permission_error": (
        "permission_error", "Your API key does not have permission to use the specified resource.", "forbidden"
    ),
    "stream_billing_error": ("billing_error", "This organization has been disabled for billing reasons.", "credit_balance_too_low"),
    "stream_credit_balance_too_low": ("invalid_request_error", CREDIT_BALANCE_TOO_LOW, "credit_balance_too_low"),
}


def stream_error_event(behaviour):
    """The ``error`` event a ``stream_*`` behaviour ends its stream with."""
    error_type, message, _ = STREAM_ERRORS[behaviour]
    return sse("error", error_body(error_type, message))


def stream_events(model_id, message_id, reply, plan, *, stop_after=None, null_details=False, inference_geo="not_available"):
    """The SSE event sequence of a reply as ``(name, data)`` pairs.

    message_start -> per block: content_block_start, (ping after the first), deltas, content_block_stop
    -> message_delta -> message_stop. ``stop_after`` cuts the sequence after that many deltas (the
    stream_error and drop behaviours).
    """
    events = [
        ("message_start", {"type": "message_start", "message": message(
            model_id, message_id, [], None, None, usage(plan, 1, inference_geo), null_details=null_details)}),
    ]
    sent = 0
    for index, block in enumerate(reply.blocks):
        events.append(("content_block_start", {"type": "content_block_start", "index": index,
                                               "content_block": block.start}))
        if index == 0:
            events.append(("ping", PING))
        for delta in block.deltas:
            if stop_after is not None and sent >= stop_after:
                return events
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
            sent += 1
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    if stop_after is not None:
        return events
    events.append(("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": reply.stop_reason, "stop_sequence": reply.stop_sequence,
                  **({"stop_details": reply.stop_details} if reply.stop_details is not None or null_details else {})},
        "usage": delta_usage(plan, reply.output_tokens, reply),
    }))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def encode_events(events):
    return [sse(name, data, 0 if isinstance(data, str) else PADS[position % len(PADS)])
            for position, (name, data) in enumerate(events)]
