"""Failure classification: provider error types, rejection classes, failure classes, outcomes.

Two vocabularies, both closed sets (docs/errors.md "Rejection classes" and docs/architecture.md
"Failure classes and health"):

- ``provider_error_type`` and ``rejection_class`` describe a rejected request for diagnosis
  only. Nothing branches on them except health, which treats the two out-of-credit classes as
  ``quota_exhausted`` (docs/architecture.md "Quota exhaustion").
- the failure class, one of seven, drives per-account health and cooldowns.

The drop rule (docs/errors.md "Provider text is dropped"): an error body, its decoded object and
its message exist only inside ``parse_error_body``. The message is matched against the class
table and discarded; it is never stored, logged, raised or returned. Only closed-set values leave
this module.
"""

import json
from dataclasses import dataclass

OTHER = "other"
MAX_ERROR_BODY = 64 * 1024  # at most 64 KiB of an error body is decoded

# The documented error.type values (https://platform.claude.com/docs/en/api/errors).
PROVIDER_ERROR_TYPES = (
    "invalid_request_error",
    "authentication_error",
    "billing_error",
    "permission_error",
    "not_found_error",
    "conflict_error",
    "request_too_large",
    "rate_limit_error",
    "api_error",
    "timeout_error",
    "overloaded_error",
)

# docs/errors.md "Rejection classes": the first row whose case-sensitive substring occurs in
# error.message wins.
_REJECTION_TABLE = (
    ("credit_balance_too_low", "credit balance is too low"),
    ("usage_limit_reached", "reached your specified API usage limits"),
    ("prompt_too_long", "prompt is too long"),
    ("max_tokens_too_large", "maximum allowed number of output tokens"),
    ("tool_use_without_result", "`tool_use` ids were found without `tool_result`"),
    ("tool_result_without_use", "unexpected `tool_use_id`"),
    ("thinking_budget_invalid", "budget_tokens"),
    ("image_too_large", "image exceeds"),
)
REJECTION_CLASSES = tuple(name for name, _ in _REJECTION_TABLE)

# How the provider's 404 about a model reads ("model: <id>", or "<model> is not available. ..."
# for a model the organization may not use); a 404 for a path ("Not Found") reads otherwise.
_MODEL_NOT_FOUND_PREFIX = "model: "
_MODEL_NOT_AVAILABLE = " is not available"

# Documented error.details.error_code values (the Anthropic SDK 2.14 error map), read like the
# rejection class and never stored (docs/errors.md "Rejection classes").
ERROR_CODES = (
    "enforced_spend_limit_reached",
    "contract_spend_limit_reached",
    "ramp_limit_exceeded",
    "organization_on_hold",
    "linked_organization_spend_limit_reached",
    "linked_organization_billing_unavailable",
    "request_body_too_large_after_decoding",
    "image_dimensions_too_large",
    "request_body_encoding_invalid",
    "request_body_encoding_unsupported",
    "cmek_key_unreachable",
)

# The failure classes, a closed set; body text outranks status (docs/errors.md "From an answer
# to a code").
FAILURE_CLASSES = (
    "quota_exhausted",
    "rate_limited",
    "auth",
    "provider_outage",
    "model_unavailable",
    "transport",
    "semantic",
)

_OUT_OF_CREDIT_CLASSES = ("credit_balance_too_low", "usage_limit_reached")
_SPEND_LIMIT_CODES = ("enforced_spend_limit_reached", "contract_spend_limit_reached")
# A documented body type that names the failure when no HTTP status does (a mid-stream
# ``event: error`` arrives on a 200 response).
_CLASS_FOR_STREAM_TYPE = {
    "overloaded_error": "provider_outage",
    "api_error": "provider_outage",
    "timeout_error": "provider_outage",
    "rate_limit_error": "rate_limited",
    "authentication_error": "auth",
    "permission_error": "auth",
    "billing_error": "quota_exhausted",
}

# The closed set of attempt outcomes (docs/architecture.md "Attempt outcomes").
OUTCOMES = (
    "complete",
    "not_sent",
    "rate_limited",
    "overloaded",
    "auth_required",
    "request_rejected",
    "provider_error",
    "transport_error",
    "usage_incomplete",
    "stream_error",
    "stream_truncated",
    "cancelled",
    "stream_closed",
)

# The AccountsError code an attempt's outcome, or failing that its failure class, is raised with
# (docs/errors.md "From an answer to a code").
_ERROR_CODE_FOR = {
    # outcomes
    "rate_limited": "rate_limited",
    "overloaded": "provider_error",
    "auth_required": "auth_failed",
    "request_rejected": "request_rejected",
    "provider_error": "provider_error",
    "transport_error": "transport_error",
    "usage_incomplete": "provider_error",
    "stream_error": "provider_error",
    "stream_truncated": "transport_error",
    # failure classes
    "quota_exhausted": "request_rejected",
    "auth": "auth_failed",
    "provider_outage": "provider_error",
    "model_unavailable": "request_rejected",
    "transport": "transport_error",
    "semantic": "request_rejected",
}


@dataclass(frozen=True)
class ErrorInfo:
    """What may be kept of a provider error body: closed-set values only, never its text."""

    provider_error_type: str
    rejection_class: str
    error_code: str | None = None
    documented: bool = False
    # A documented not_found_error whose message is about the model ("model: <id>", "... is not
    # available"), not a path: only that 404 cools a model (docs/errors.md "From an answer to a code").
    names_model: bool = False


UNREADABLE = ErrorInfo(OTHER, OTHER, None, False)


def rejection_class_for(message):
    """The first class whose substring occurs in ``message``, else ``other``."""
    if not isinstance(message, str):
        return OTHER
    for name, needle in _REJECTION_TABLE:
        if needle in message:
            return name
    return OTHER


def parse_error_body(raw):
    """Classify an error body into an ``ErrorInfo``; the body itself is dropped.

    A body over 64 KiB, one that is not JSON, or not an error object gives ``other`` for both
    fields and ``documented=False``. ``documented`` is true only for the documented shape
    ``{"type": "error", "error": {"type": <documented type>, "message": <string>}}``: the
    evidence that the provider refused the request before processing it (docs/architecture.md
    "Attempt outcomes"). Never raises and never logs.
    """
    try:
        info = _classify(raw)
    except Exception:  # the drop rule: nothing from the body may escape, not even in an error
        info = None
    return UNREADABLE if info is None else info


def stream_error_info(event):
    """Classify a mid-stream ``error`` event (already decoded by the SSE reader) like an error
    body: the same closed-set values, the same drop rule (docs/errors.md "Provider text is
    dropped"). An event that is not an error object gives ``other`` for both fields."""
    try:
        info = _info(event)
    except Exception:  # the drop rule: nothing from the event may escape, not even in an error
        info = None
    return UNREADABLE if info is None else info


def _classify(raw):
    if not isinstance(raw, (bytes, bytearray, memoryview)) or len(raw) > MAX_ERROR_BODY:
        return None
    try:
        body = json.loads(bytes(raw))
    except (ValueError, RecursionError):
        return None
    return _info(body)


def _info(body):
    if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
        return None
    error = body["error"]
    error_type = error.get("type")
    error_type = error_type if error_type in PROVIDER_ERROR_TYPES else OTHER
    message = error.get("message")
    details = error.get("details")
    code = details.get("error_code") if isinstance(details, dict) else None
    documented = body.get("type") == "error" and error_type != OTHER and isinstance(message, str)
    return ErrorInfo(
        provider_error_type=error_type,
        # The message of an undocumented body names no class: it is shown and stored as
        # "other" (docs/errors.md "Rejection classes").
        rejection_class=rejection_class_for(message) if documented else OTHER,
        error_code=code if code in ERROR_CODES else None,
        documented=documented,
        names_model=(
            documented and error_type == "not_found_error"
            and (message.startswith(_MODEL_NOT_FOUND_PREFIX) or _MODEL_NOT_AVAILABLE in message)
        ),
    )


def failure_class(http_status, info, *, transport=False):
    """The failure class of a failed attempt (docs/architecture.md "Failure classes and health").

    Body evidence outranks status: providers return a monthly cap as a 429 or a 400, and only
    the body says the account is out of credit (docs/architecture.md "Quota exhaustion").
    ``http_status`` is None (or 200) for an error that arrived inside a stream.
    """
    if transport:
        return "transport"
    info = info or UNREADABLE
    if (
        info.rejection_class in _OUT_OF_CREDIT_CLASSES
        or info.error_code in _SPEND_LIMIT_CODES
        or info.provider_error_type == "billing_error"
        or http_status == 402
    ):
        return "quota_exhausted"
    if info.error_code == "organization_on_hold":
        return "auth"  # the organization is disabled: the key cannot work until someone acts
    if http_status is not None and _unexpected(http_status):
        # The answer came from the base URL but is no answer the API documents: the account's
        # path is failing, as with a 5xx (docs/errors.md "An unexpected status").
        return "provider_outage"
    if http_status is None or 200 <= http_status < 300:
        return _CLASS_FOR_STREAM_TYPE.get(info.provider_error_type, "semantic")
    if http_status == 429:
        return "rate_limited"
    if http_status in (401, 403):
        return "auth"
    if http_status == 404 and info.names_model:
        return "model_unavailable"
    if 500 <= http_status < 600:
        return "provider_outage"
    return "semantic"


def _unexpected(http_status):
    """A status other than 200, 4xx and 5xx: a 1xx or 3xx httpx hands back, a 2xx other than 200,
    or one past 599."""
    return http_status != 200 and not 400 <= http_status < 600


def stream_error_code(failure_class):
    """The AccountsError code for a stream that ended with an ``error`` event of ``failure_class``:
    the class's own code when it names the account's state (blocked, rate limited, out of
    credit), else ``provider_error`` (docs/errors.md "From an answer to a code")."""
    if failure_class in ("auth", "rate_limited", "quota_exhausted"):
        return _ERROR_CODE_FOR[failure_class]
    return "provider_error"


def outcome_for_status(http_status):
    """The attempt outcome for any HTTP status but 200 (docs/architecture.md "Attempt outcomes").

    A status the API does not document (``_unexpected``) is ``provider_error``: the request may
    have been processed, so its attempt stays open with its ceiling (docs/errors.md "An
    unexpected status"). 200 and a non-integer are refused; no caller passes either."""
    if isinstance(http_status, bool) or not isinstance(http_status, int):
        raise ValueError("http_status must be an integer")
    if http_status == 200:
        raise ValueError("200 is not a failure")
    if http_status == 429:
        return "rate_limited"
    if http_status == 529:
        return "overloaded"
    if http_status in (401, 403):
        return "auth_required"
    if 400 <= http_status < 500:
        return "request_rejected"
    return "provider_error"


def error_code_for(outcome_or_class):
    """The AccountsError code to raise for an attempt outcome or, failing that, a failure class."""
    try:
        return _ERROR_CODE_FOR[outcome_or_class]
    except (KeyError, TypeError):
        raise ValueError("not a failed outcome or a failure class") from None
