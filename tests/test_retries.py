"""Retries on the same account, and short cooldowns waited out (docs/architecture.md "Retries").

Prompts go through llm's CLI to the stand-in, whose per-key script answers each request in turn.
Each retry is its own reserved and settled attempt, listed in ``llm logs``' routing object.
"""

import datetime as dt
import json
import sqlite3

import pytest

from llm_accounts import retries
from llm_accounts.declarations import Account
from llm_accounts.ledger import Ledger, Refused, Scope
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote
from routed_helpers import attempts, llm_cli
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

MODEL = "claude-routed/claude-haiku-4-5"


def last_routing(user_path):
    db = sqlite3.connect(user_path / "logs.db")
    (raw,) = db.execute("select response_json from turns order by datetime_utc desc limit 1").fetchone()
    return json.loads(raw)["routing"]


@pytest.fixture
def bound(accounts, user_path, ledger_path):
    """A conversation already bound to one of the two accounts: (account name, stand-in)."""
    assert llm_cli("-m", MODEL, "first turn").exit_code == 0
    [row] = attempts(ledger_path)
    return row["account"], accounts


@pytest.mark.parametrize("behaviour", ["overloaded", "rate_limited"], ids=["529", "429"])
def test_a_bound_conversation_retries_a_refusal_that_billed_nothing_and_succeeds(bound, user_path, ledger_path, behaviour):
    account, standin = bound
    standin.set_behaviour(account, "ok", script=[behaviour])
    result = llm_cli("-c", "second turn")
    assert result.exit_code == 0, result.output
    turn = attempts(ledger_path)[1:]
    assert [(row["account"], row["outcome"], row["state"]) for row in turn] == [
        (account, "overloaded" if behaviour == "overloaded" else "rate_limited", "settled"),
        (account, "complete", "settled"),
    ]
    routing = last_routing(user_path)
    assert [a["id"] for a in routing["attempts"]] == [row["id"] for row in turn]
    assert routing["account"] == account


def test_two_overloaded_answers_then_success_is_one_answer_with_three_attempts(bound, ledger_path):
    account, standin = bound
    standin.set_behaviour(account, "ok", script=["overloaded", "overloaded"])
    assert llm_cli("-c", "second turn").exit_code == 0
    assert [row["outcome"] for row in attempts(ledger_path)[1:]] == ["overloaded", "overloaded", "complete"]


def test_retries_off_refuses_after_the_first_refusal(bound, ledger_path):
    account, standin = bound
    standin.set_behaviour(account, "ok", script=["overloaded"])
    result = llm_cli("-c", "-o", "retries", "0", "second turn")
    assert result.exit_code == 1
    assert "Error: provider_error: account" in result.output and "answered HTTP 529" in result.output
    assert [row["outcome"] for row in attempts(ledger_path)[1:]] == ["overloaded"]


def test_the_retries_run_out_with_one_line_saying_how_many(bound, ledger_path):
    account, standin = bound
    standin.set_behaviour(account, "ok", script=["overloaded"] * 3)
    result = llm_cli("-c", "-o", "retries", "1", "second turn")
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith("; after 1 retry (-o retries)")
    assert len(attempts(ledger_path)) == 3


def test_a_retry_after_past_the_wait_bound_is_not_waited_for(bound, ledger_path):
    account, standin = bound
    standin.set_behaviour(account, "ok", script=["rate_limited"], retry_after=int(retries.WAIT_BOUND_S) + 1)
    result = llm_cli("-c", "second turn")
    assert result.exit_code == 1
    assert "Error: rate_limited:" in result.output
    assert [row["outcome"] for row in attempts(ledger_path)[1:]] == ["rate_limited"]


# A 5xx before any output is the one unknown outcome that is retried (tests/test_retries_5xx.py).
@pytest.mark.parametrize("behaviour, outcome", [("stream_error", "stream_error"), ("drop", "stream_truncated")])
def test_an_answer_whose_outcome_is_unknown_after_output_started_is_never_retried(bound, ledger_path, behaviour, outcome):
    account, standin = bound
    standin.set_behaviour(account, "ok", script=[behaviour])
    assert llm_cli("-c", "second turn").exit_code == 1
    assert [(row["outcome"], row["state"]) for row in attempts(ledger_path)[1:]] == [(outcome, "open")]


def test_a_spending_cap_429_is_not_retried_on_the_same_account(bound, ledger_path):
    account, standin = bound
    standin.set_behaviour(account, "ok", script=["spend_limit"])
    assert llm_cli("-c", "second turn").exit_code == 1
    assert len(attempts(ledger_path)) == 2


def test_a_new_conversation_moves_on_before_it_retries(accounts, ledger_path):
    accounts.set_behaviour("alpha", "ok", script=["overloaded"])
    accounts.set_behaviour("beta", "ok", script=["overloaded"])
    assert llm_cli("-m", MODEL, "hello").exit_code == 0
    rows = attempts(ledger_path)
    first, second = rows[0]["account"], rows[1]["account"]
    assert first != second  # moved on first
    assert rows[2]["account"] == second and rows[2]["outcome"] == "complete"  # then retried there


def rate_limit_elsewhere(account, retry_after_s):
    """Another conversation's attempt on ``account`` is refused with a 429 asking for a wait."""
    work = Account(account, f"{account.upper()}_KEY", 20 * NANO)
    quote = Quote("claude-haiku-4-5", NANO // 100, "2026-11-29", "ab" * 32)
    with Ledger() as ledger:
        ledger.reserve(Scope("conversation", "elsewhere"), "other", quote, [work], pinned=account)
        ledger.settle("other", Refused("rate_limited", 429, "rate_limit_error", "other", "rate_limited", retry_after_s))


def test_a_bound_conversation_waits_out_a_short_cooldown_instead_of_refusing(bound, ledger_path, accounts):
    account, standin = bound
    rate_limit_elsewhere(account, retry_after_s=1)  # another process's attempt, just now
    result = llm_cli("-c", "second turn")
    assert result.exit_code == 0, result.output
    assert attempts(ledger_path)[-1]["outcome"] == "complete"


def test_with_retries_off_a_cooling_bound_conversation_refuses(bound, ledger_path):
    account, _ = bound
    rate_limit_elsewhere(account, retry_after_s=30)
    result = llm_cli("-c", "-o", "retries", "0", "second turn")
    assert result.exit_code == 1
    assert f"account '{account}' is failing (rate_limited); cooling until" in result.output


def test_an_out_of_range_retries_option_is_one_line(accounts):
    result = llm_cli("-m", MODEL, "-o", "retries", "11", "hello")
    assert result.output.strip() == (
        "Error: declaration_invalid: option retries: must be an integer from 0 to 10 (see llm models --options)"
    )


# --- The bookkeeping, pure -------------------------------------------------------------------------


def test_backoff_doubles_from_half_a_second_with_bounded_jitter():
    budget = retries.Retries(left=4)
    delays = [budget.backoff(rand=lambda: 1.0) for _ in range(4)]
    assert delays == [0.625, 1.25, 2.5, 5.0]
    assert budget.backoff() is None


def test_a_retry_after_is_honoured_as_given():
    assert retries.Retries().backoff(retry_after_s=3) == 3.0


def test_no_retry_waits_past_the_bound():
    budget = retries.Retries(left=5)
    assert budget.backoff(retry_after_s=retries.WAIT_BOUND_S + 1) is None
    assert budget.backoff(retry_after_s=retries.WAIT_BOUND_S) == retries.WAIT_BOUND_S
    assert budget.backoff(retry_after_s=1) is None


def test_a_cooldown_is_waited_only_while_retries_are_on():
    now = dt.datetime(2027, 3, 1, tzinfo=dt.timezone.utc)
    assert retries.Retries(left=0).cooldown(now + dt.timedelta(seconds=2), now) is None
    assert retries.Retries(left=2).cooldown(now + dt.timedelta(seconds=2), now) == pytest.approx(2.05)
    assert retries.Retries(left=2).cooldown(now + dt.timedelta(seconds=600), now) is None


@pytest.mark.parametrize(
    "header, seconds",
    [("1", 1), ("30", 30), ("600", 600), ("601", None), ("Wed, 21 Oct 2026 07:28:00 GMT", None), ("", None),
     ("-1", None), ("1.5", None), (None, None), ("١", None)],
)
def test_a_retry_after_header_is_read_as_whole_seconds_only(header, seconds):
    assert retries.parse_retry_after(header) == seconds
