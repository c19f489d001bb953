"""The provider's ``x-should-retry`` header, and the unrouted path's retries
(docs/architecture.md "Retries").

A routed prompt never sends again to an account whose answer said ``x-should-retry: false``; an
unrouted prompt (no accounts declared, no ledger) is retried where llm-anthropic's SDK would
retry it. Every wait is recorded instead of slept, on a clock the test controls.
"""

import datetime as dt

import pytest

from llm_accounts import retries
from routed_helpers import attempts, llm_cli, prompt_text, recorded_waits
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

MODEL = "claude-routed/claude-haiku-4-5"
NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)  # mid credit period 2026-11


@pytest.fixture
def waits(monkeypatch):
    """Each wait the sync loop makes, in seconds, moving the clock on instead of sleeping."""
    return recorded_waits(monkeypatch, NOW)


@pytest.fixture
def unrouted(standin, canary_key, user_path, ledger_path, monkeypatch):
    """No accounts declared: llm's one Anthropic key, the stand-in's key "a"."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", canary_key)
    return standin


def error_line(result):
    [line] = [line for line in result.output.splitlines() if line.startswith("Error:")]
    return line


# The header, read


@pytest.mark.parametrize(
    "header, said",
    [("false", False), ("true", True), (" FALSE ", False), ("True", True), (None, None), ("", None),
     ("no", None), ("0", None), ("false; really", None)],
)
def test_only_the_words_true_and_false_are_read_from_x_should_retry(header, said):
    assert retries.parse_should_retry(header) is said


# Routed


def test_a_5xx_marked_x_should_retry_false_is_not_retried_and_its_attempt_stays_open(accounts, ledger_path, waits):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "ok", script=["api_error_final"])
    result = llm_cli("-m", MODEL, "hello")
    assert result.exit_code == 1
    assert "answered HTTP 500 api_error" in error_line(result)
    assert [(row["outcome"], row["state"]) for row in attempts(ledger_path)] == [("provider_error", "open")]
    assert [request["status"] for request in accounts.requests] == [500]
    assert waits == []


def test_the_same_5xx_without_the_header_is_retried(accounts, ledger_path, waits):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "ok", script=["api_error"])
    assert llm_cli("-m", MODEL, "hello").exit_code == 0
    assert [request["status"] for request in accounts.requests] == [500, 200]


@pytest.mark.parametrize("behaviour, outcome", [("api_error_final", "provider_error"), ("overloaded_final", "overloaded")],
                         ids=["500", "529"])
def test_a_bound_conversation_does_not_retry_an_answer_marked_x_should_retry_false(
    accounts, ledger_path, waits, behaviour, outcome
):
    assert llm_cli("-m", MODEL, "first turn").exit_code == 0
    [first] = attempts(ledger_path)
    accounts.set_behaviour(first["account"], "ok", script=[behaviour])
    assert llm_cli("-c", "second turn").exit_code == 1
    assert [(row["account"], row["outcome"]) for row in attempts(ledger_path)[1:]] == [(first["account"], outcome)]
    assert waits == []


def test_a_new_conversation_still_moves_on_from_a_529_marked_x_should_retry_false_but_never_goes_back(
    accounts, ledger_path, waits
):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "ok", script=["overloaded_final"])
    assert llm_cli("-m", MODEL, "hello").exit_code == 1
    tried = [row["account"] for row in attempts(ledger_path)]
    assert sorted(tried) == ["alpha", "beta"]  # moved on once; without the header it retries where it last failed
    assert [request["status"] for request in accounts.requests] == [529, 529] and waits == []


# Unrouted: as llm-anthropic's SDK retries


@pytest.mark.parametrize("behaviour", ["api_error", "bad_gateway", "unavailable", "gateway_timeout", "overloaded", "rate_limited"])
def test_an_unrouted_prompt_retries_what_the_sdk_retries(unrouted, ledger_path, waits, behaviour):
    unrouted.set_behaviour("a", "ok", script=[behaviour], retry_after=1)
    result = llm_cli("-m", MODEL, "hello")
    assert result.exit_code == 0, result.output
    assert [request["status"] for request in unrouted.requests][-1] == 200
    assert len(unrouted.requests) == 2 and len(waits) == 1
    assert not ledger_path.exists()


def test_an_unrouted_prompt_does_not_retry_an_answer_marked_x_should_retry_false(unrouted, waits):
    unrouted.set_behaviour("a", "ok", script=["api_error_final"])
    result = llm_cli("-m", MODEL, "hello")
    assert result.exit_code == 1
    assert error_line(result) == "Error: provider_error: Anthropic answered HTTP 500 api_error (unrouted: no accounts declared)"
    assert len(unrouted.requests) == 1 and waits == []


def test_an_unrouted_prompt_does_not_retry_a_rejected_request(unrouted, waits):
    unrouted.set_behaviour("a", "ok", script=["credit_balance_too_low"])
    assert llm_cli("-m", MODEL, "hello").exit_code == 1
    assert len(unrouted.requests) == 1 and waits == []


def test_an_unrouted_prompts_retries_run_out_with_one_line_saying_how_many(unrouted, waits):
    unrouted.set_behaviour("a", "ok", script=["api_error"] * 3)
    result = llm_cli("-m", MODEL, "-o", "retries", "2", "hello")
    assert result.exit_code == 1
    assert error_line(result).endswith("HTTP 500 api_error (unrouted: no accounts declared); after 2 retries (-o retries)")
    assert len(unrouted.requests) == 3 and len(waits) == 2


def test_an_unrouted_prompt_with_retries_off_is_sent_once(unrouted, waits):
    unrouted.set_behaviour("a", "ok", script=["api_error"])
    assert llm_cli("-m", MODEL, "-o", "retries", "0", "hello").exit_code == 1
    assert len(unrouted.requests) == 1 and waits == []


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_sync_and_async_unrouted_prompts_retry_a_5xx(unrouted, kind, stream):
    unrouted.set_behaviour("a", "ok", script=["api_error"], retry_after=0)
    assert prompt_text(MODEL, kind, stream)
    assert [request["status"] for request in unrouted.requests] == [500, 200]


def test_an_unrouted_prompt_retries_a_connection_that_failed(unrouted, waits):
    unrouted.set_behaviour("a", "ok", script=["drop"])
    result = llm_cli("-m", MODEL, "--no-stream", "hello")
    assert result.exit_code == 0, result.output
    assert len(unrouted.requests) == 2 and len(waits) == 1
