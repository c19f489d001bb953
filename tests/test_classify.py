"""Error types, rejection classes, failure classes and outcomes (design.md; ADR-0126 Amendment 7)."""

import dataclasses
import json

import pytest

from llm_accounts.errors import CODES
from llm_accounts.wire.classify import (
    FAILURE_CLASSES,
    PROVIDER_ERROR_TYPES,
    REJECTION_CLASSES,
    ErrorInfo,
    error_code_for,
    failure_class,
    outcome_for_status,
    parse_error_body,
)

SENTINEL = "sentinel-5b1e0d-provider-text"


def body(message=None, error_type="invalid_request_error", error_code=None, **extra):
    error = {"type": error_type}
    if message is not None:
        error["message"] = message
    if error_code is not None:
        error["details"] = {"error_code": error_code}
    return json.dumps({"type": "error", "error": error, "request_id": "req_011", **extra}).encode()


def info_for(status, message=None, error_type=None, error_code=None):
    default_type = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
                    403: "permission_error", 404: "not_found_error", 429: "rate_limit_error",
                    500: "api_error", 504: "timeout_error", 529: "overloaded_error"}
    return parse_error_body(body(message, error_type or default_type.get(status, "api_error"), error_code))


# The vocabularies ------------------------------------------------------------------------------


def test_provider_error_types_are_the_documented_list():
    assert PROVIDER_ERROR_TYPES == (
        "invalid_request_error", "authentication_error", "billing_error", "permission_error",
        "not_found_error", "conflict_error", "request_too_large", "rate_limit_error", "api_error",
        "timeout_error", "overloaded_error",
    )


def test_rejection_classes_follow_the_design_table_in_order():
    assert REJECTION_CLASSES == (
        "credit_balance_too_low", "usage_limit_reached", "prompt_too_long", "max_tokens_too_large",
        "tool_use_without_result", "tool_result_without_use", "thinking_budget_invalid", "image_too_large",
    )


def test_failure_classes_are_adr_0029s_closed_set():
    assert FAILURE_CLASSES == (
        "quota_exhausted", "rate_limited", "auth", "provider_outage", "model_unavailable", "transport", "semantic",
    )


# Rejection classes -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "message, expected",
    [
        ("Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.", "credit_balance_too_low"),
        ("You have reached your specified API usage limits. You will regain access on 2026-04-01 at 00:00 UTC.", "usage_limit_reached"),
        ("prompt is too long: 200251 tokens > 200000 maximum", "prompt_too_long"),
        ("max_tokens: 200000 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4-5-20250929", "max_tokens_too_large"),
        ("messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_01", "tool_use_without_result"),
        ("messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_01", "tool_result_without_use"),
        ("`max_tokens` must be greater than `thinking.budget_tokens`.", "thinking_budget_invalid"),
        ("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024", "thinking_budget_invalid"),
        ("messages.0.content.2.image.source.base64: image exceeds 5 MB maximum: 15908784 bytes > 5242880 bytes", "image_too_large"),
    ],
)
def test_each_documented_message_names_its_class(message, expected):
    info = parse_error_body(body(message))
    assert (info.provider_error_type, info.rejection_class, info.documented) == ("invalid_request_error", expected, True)


def test_the_earlier_row_wins_when_a_message_matches_two():
    info = parse_error_body(body("prompt is too long; also budget_tokens and image exceeds"))
    assert info.rejection_class == "prompt_too_long"
    info = parse_error_body(body("image exceeds ... credit balance is too low"))
    assert info.rejection_class == "credit_balance_too_low"


def test_matching_is_case_sensitive():
    assert parse_error_body(body("Prompt Is Too Long")).rejection_class == "other"


def test_an_unknown_message_is_class_other_but_still_documented():
    info = parse_error_body(body("messages: roles must alternate"))
    assert (info.rejection_class, info.documented) == ("other", True)


def test_a_body_without_a_message_string_is_class_other_and_undocumented():
    info = parse_error_body(body(None))
    assert (info.provider_error_type, info.rejection_class, info.documented) == ("invalid_request_error", "other", False)
    info = parse_error_body(json.dumps({"type": "error", "error": {"type": "api_error", "message": 5}}).encode())
    assert (info.rejection_class, info.documented) == ("other", False)


@pytest.mark.parametrize("error_type", PROVIDER_ERROR_TYPES)
def test_every_documented_type_is_kept(error_type):
    assert parse_error_body(body("x", error_type)).provider_error_type == error_type


@pytest.mark.parametrize("error_type", ["memory_path_conflict_error", "Invalid_Request_Error", 400, None])
def test_an_undocumented_type_is_other_and_undocumented(error_type):
    """Its message names no rejection class either: an undocumented body is shown and stored as
    ``other`` (docs/errors.md "Rejection classes")."""
    info = parse_error_body(body("prompt is too long", error_type))
    assert (info.provider_error_type, info.rejection_class, info.documented) == ("other", "other", False)


def test_a_body_whose_top_level_type_is_not_error_is_undocumented():
    raw = json.dumps({"type": "message", "error": {"type": "api_error", "message": "x"}}).encode()
    assert parse_error_body(raw).documented is False


def test_a_documented_error_code_is_kept():
    info = parse_error_body(body("x", "rate_limit_error", "enforced_spend_limit_reached"))
    assert info.error_code == "enforced_spend_limit_reached"


@pytest.mark.parametrize("details", [{"error_code": "made_up_code"}, {"error_code": 7}, None, "enforced_spend_limit_reached"])
def test_an_unknown_or_malformed_error_code_is_none(details):
    raw = json.dumps({"type": "error", "error": {"type": "rate_limit_error", "message": "x", "details": details}}).encode()
    assert parse_error_body(raw).error_code is None


# Bounded, unreadable bodies --------------------------------------------------------------------


def padded(size):
    raw = body("prompt is too long")
    return raw[:-1] + b" " * (size - len(raw)) + b"}"


def test_a_body_of_exactly_64_kib_is_read():
    raw = padded(64 * 1024)
    assert len(raw) == 65536
    assert parse_error_body(raw).rejection_class == "prompt_too_long"


def test_a_body_over_64_kib_is_other_and_undocumented():
    raw = padded(64 * 1024 + 1)
    assert parse_error_body(raw) == ErrorInfo("other", "other", None, False)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"<html>502 Bad Gateway</html>",
        b'{"type": "error", "error": ',
        b"\xff\xfe\x00garbage",
        b"[1, 2, 3]",
        b'{"type": "error", "error": "prompt is too long"}',
        b"[" * 30_000,
        json.dumps({"type": "error", "error": {"type": "api_error", "message": "x"}}),  # str, not bytes
        None,
    ],
)
def test_an_unreadable_body_is_other_and_undocumented(raw):
    assert parse_error_body(raw) == ErrorInfo("other", "other", None, False)


def test_deeply_nested_json_within_the_bound_is_other():
    raw = b"[" * 60_000 + b"]" * 5_000
    assert parse_error_body(raw[:65536]) == ErrorInfo("other", "other", None, False)


# The drop rule ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        body(f"prompt is too long {SENTINEL}"),
        body(SENTINEL),
        body(f"{SENTINEL} credit balance is too low", "billing_error", "enforced_spend_limit_reached"),
        body(SENTINEL, SENTINEL, SENTINEL),
        (b'{"type":"error","error":{"type":"api_error","message":"' + SENTINEL.encode() + b'"'),
        padded(70_000).replace(b"prompt is too long", SENTINEL.encode()),
    ],
)
def test_the_message_is_absent_from_everything_returned(raw):
    assert SENTINEL in raw.decode("utf-8", "replace")
    info = parse_error_body(raw)
    kept = [repr(info), str(info), json.dumps(dataclasses.asdict(info))]
    kept += [failure_class(status, info) for status in (None, 400, 402, 404, 429, 500)]
    assert not any(SENTINEL in text for text in kept)


# Failure classes -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status, info, expected",
    [
        (400, info_for(400, "Your credit balance is too low to access the Anthropic API."), "quota_exhausted"),
        (400, info_for(400, "You have reached your specified API usage limits."), "quota_exhausted"),
        (402, info_for(402, "There's an issue with your billing or payment information."), "quota_exhausted"),
        (402, None, "quota_exhausted"),
        (429, info_for(429, "crossed the monthly API usage threshold", error_code="enforced_spend_limit_reached"), "quota_exhausted"),
        (429, info_for(429, "reached the spend limit of its contract", error_code="contract_spend_limit_reached"), "quota_exhausted"),
        (429, info_for(429, "Your credit balance is too low"), "quota_exhausted"),
        (429, info_for(429, "This request would exceed your organization's rate limit"), "rate_limited"),
        (429, info_for(429, "ramp limit", error_code="ramp_limit_exceeded"), "rate_limited"),
        (429, None, "rate_limited"),
        (401, info_for(401, "invalid x-api-key"), "auth"),
        (401, None, "auth"),
        (403, info_for(403, "not allowed"), "auth"),
        (400, info_for(400, "disabled", error_code="organization_on_hold"), "auth"),
        (500, info_for(500, "Internal server error"), "provider_outage"),
        (504, info_for(504, "timed out"), "provider_outage"),
        (529, info_for(529, "Overloaded"), "provider_outage"),
        (503, None, "provider_outage"),
        (None, info_for(None, "Overloaded", "overloaded_error"), "provider_outage"),
        (200, info_for(200, "Overloaded", "overloaded_error"), "provider_outage"),
        (404, info_for(404, "model: claude-nope"), "model_unavailable"),
        (404, None, "semantic"),
        (400, info_for(400, "prompt is too long: 200251 tokens > 200000 maximum"), "semantic"),
        (400, info_for(400, "messages: roles must alternate"), "semantic"),
        (413, info_for(413, "too large", "request_too_large"), "semantic"),
        (409, info_for(409, "conflict", "conflict_error"), "semantic"),
        (400, None, "semantic"),
        (None, None, "semantic"),
    ],
)
def test_failure_class(status, info, expected):
    assert failure_class(status, info) == expected


def test_a_transport_failure_is_class_transport():
    assert failure_class(None, None, transport=True) == "transport"


def test_body_text_outranks_a_rate_limit_status():
    assert failure_class(429, info_for(429, "Your credit balance is too low")) == "quota_exhausted"
    assert failure_class(429, info_for(429, "slow down")) == "rate_limited"


# Outcomes and error codes ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "status, outcome",
    [
        (429, "rate_limited"),
        (529, "overloaded"),
        (401, "auth_required"),
        (403, "auth_required"),
        (400, "request_rejected"),
        (402, "request_rejected"),
        (404, "request_rejected"),
        (413, "request_rejected"),
        (500, "provider_error"),
        (503, "provider_error"),
        (504, "provider_error"),
    ],
)
def test_outcome_for_status(status, outcome):
    assert outcome_for_status(status) == outcome


@pytest.mark.parametrize("status", [200, True, "429", None])
def test_outcome_for_status_refuses_200_or_a_non_integer(status):
    with pytest.raises(ValueError):
        outcome_for_status(status)


@pytest.mark.parametrize(
    "value, code",
    [
        ("rate_limited", "rate_limited"),
        ("overloaded", "provider_error"),
        ("auth_required", "auth_failed"),
        ("request_rejected", "request_rejected"),
        ("provider_error", "provider_error"),
        ("transport_error", "transport_error"),
        ("auth", "auth_failed"),
        ("provider_outage", "provider_error"),
        ("transport", "transport_error"),
        ("semantic", "request_rejected"),
        ("model_unavailable", "request_rejected"),
        ("quota_exhausted", "request_rejected"),
    ],
)
def test_error_code_for_an_outcome_or_class(value, code):
    assert error_code_for(value) == code
    assert code in CODES


@pytest.mark.parametrize("value", FAILURE_CLASSES)
def test_every_failure_class_has_an_error_code(value):
    assert error_code_for(value) in CODES


@pytest.mark.parametrize("value", ["complete", "not_sent", "nonsense", None])
def test_error_code_for_refuses_a_non_failure(value):
    with pytest.raises(ValueError):
        error_code_for(value)
