"""A 5xx before any output is retried on the same account, as llm-anthropic's SDK does
(docs/architecture.md "Retries").

The failed attempt's outcome is unknown: it stays open with its ceiling (never settled at zero)
and the retry is an attempt of its own, reserved and settled. Nothing moves to another account,
not even a new conversation, and nothing is retried once output has started.
"""

import asyncio
import datetime as dt

import llm
import pytest

from llm_accounts.ledger import Ledger
from routed_helpers import attempts, llm_cli, prompt_text, recorded_waits
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

MODEL = "claude-routed/claude-haiku-4-5"
NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)  # mid credit period 2026-11
FIVE_XX = {"api_error": 500, "bad_gateway": 502, "unavailable": 503, "gateway_timeout": 504}


@pytest.fixture
def waits(monkeypatch):
    """The ledger's clock, moved on by each wait the sync loop makes instead of sleeping; the
    waits are recorded, in seconds."""
    return recorded_waits(monkeypatch, NOW)


def fail_first_on_both(standin, *script):
    """Whichever account a new conversation takes answers ``script`` first, then ok."""
    for name in ("alpha", "beta"):
        standin.set_behaviour(name, "ok", script=list(script))


@pytest.mark.parametrize("behaviour", FIVE_XX, ids=[str(status) for status in FIVE_XX.values()])
def test_a_5xx_is_retried_on_the_same_account_and_the_failed_attempt_stays_open(accounts, ledger_path, waits, behaviour):
    fail_first_on_both(accounts, behaviour)
    result = llm_cli("-m", MODEL, "hello")
    assert result.exit_code == 0, result.output
    failed, retried = attempts(ledger_path)
    assert failed["account"] == retried["account"]
    assert (failed["outcome"], failed["state"], failed["cost_nusd"]) == ("provider_error", "open", None)
    assert (retried["outcome"], retried["state"]) == ("complete", "settled")
    assert [request["status"] for request in accounts.requests] == [FIVE_XX[behaviour], 200]


def test_the_failed_attempt_keeps_its_whole_ceiling_counted(accounts, ledger_path, waits):
    fail_first_on_both(accounts, "api_error")
    assert llm_cli("-m", MODEL, "hello").exit_code == 0
    failed, _ = attempts(ledger_path)
    with Ledger() as ledger:
        (line,) = [line for line in ledger.status(now=NOW) if line.name == failed["account"]]
    assert line.open_ceiling_nusd == failed["ceiling_nusd"] > 0


def test_a_new_conversation_never_moves_on_a_5xx(accounts, ledger_path, waits):
    fail_first_on_both(accounts, "api_error", "api_error", "api_error")
    result = llm_cli("-m", MODEL, "hello")
    assert result.exit_code == 1
    rows = attempts(ledger_path)
    assert len(rows) == 3 and len({row["account"] for row in rows}) == 1
    assert {(row["outcome"], row["state"]) for row in rows} == {("provider_error", "open")}


def test_a_bound_conversation_retries_a_5xx_on_its_account(accounts, ledger_path, waits):
    assert llm_cli("-m", MODEL, "first turn").exit_code == 0
    [first] = attempts(ledger_path)
    accounts.set_behaviour(first["account"], "ok", script=["bad_gateway"])
    assert llm_cli("-c", "second turn").exit_code == 0
    assert [(row["account"], row["outcome"]) for row in attempts(ledger_path)[1:]] == [
        (first["account"], "provider_error"),
        (first["account"], "complete"),
    ]


def test_the_5xx_retries_run_out_with_one_line_saying_how_many(accounts, ledger_path, waits):
    fail_first_on_both(accounts, *["api_error"] * 3)
    result = llm_cli("-m", MODEL, "-o", "retries", "2", "hello")
    assert result.exit_code == 1
    [error] = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert error.startswith("Error: provider_error: account")
    assert "answered HTTP 500 api_error" in error and error.endswith("; after 2 retries (-o retries)")
    assert len(attempts(ledger_path)) == 3


def test_with_retries_off_a_5xx_is_sent_once(accounts, ledger_path, waits):
    fail_first_on_both(accounts, "api_error")
    assert llm_cli("-m", MODEL, "-o", "retries", "0", "hello").exit_code == 1
    assert [row["outcome"] for row in attempts(ledger_path)] == ["provider_error"]
    assert waits == []


def test_a_503_retry_after_is_waited_before_the_retry(accounts, ledger_path, waits):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "ok", script=["unavailable"], retry_after=7)
    assert llm_cli("-m", MODEL, "hello").exit_code == 0
    assert waits[0] == 7
    assert len(attempts(ledger_path)) == 2


def test_a_retry_after_past_the_wait_bound_is_not_waited_for(accounts, ledger_path, waits):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "ok", script=["unavailable"], retry_after=120)
    assert llm_cli("-m", MODEL, "hello").exit_code == 1
    assert waits == [] and len(attempts(ledger_path)) == 1


def test_a_retry_the_budget_cannot_hold_refuses_with_the_5xx(accounts, ledger_path, waits):
    from llm_accounts.declarations import Account, save_accounts_file
    from llm_accounts.ladder import quote_for

    ceiling = quote_for("claude-haiku-4-5").ceiling_nusd
    save_accounts_file([Account("alpha", "ALPHA_KEY", ceiling + ceiling // 2)], None)  # room for one ceiling
    accounts.set_behaviour("alpha", "ok", script=["api_error"])
    result = llm_cli("-m", MODEL, "hello")
    assert result.exit_code == 1
    [error] = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert error.startswith("Error: provider_error: account 'alpha' answered HTTP 500")
    assert "the retry was refused: budget_exhausted" in error
    assert [(row["outcome"], row["state"]) for row in attempts(ledger_path)] == [("provider_error", "open")]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_sync_and_async_streamed_and_whole_prompts_retry_a_5xx(accounts, ledger_path, kind, stream):
    fail_first_on_both(accounts, "api_error")
    assert prompt_text(MODEL, kind, stream)
    assert [(row["outcome"], row["state"]) for row in attempts(ledger_path)] == [
        ("provider_error", "open"),
        ("complete", "settled"),
    ]


@pytest.mark.parametrize("behaviour", ["stream_error", "drop"])
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_nothing_is_retried_once_output_has_started(accounts, ledger_path, kind, behaviour):
    fail_first_on_both(accounts, behaviour)
    chunks = []

    async def consume():
        async for chunk in llm.get_async_model(MODEL).prompt("hello"):
            chunks.append(chunk)

    with pytest.raises(llm.ModelError):
        if kind == "sync":
            for chunk in llm.get_model(MODEL).prompt("hello"):
                chunks.append(chunk)
        else:
            asyncio.run(consume())
    assert chunks  # output had started
    [row] = attempts(ledger_path)
    assert row["state"] == "open"
