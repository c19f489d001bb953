"""A prompt that sets no max_tokens asks for at most 32,000 output tokens, plus any thinking budget
it asks for, never more than llm-anthropic's default for the model (docs/prompting.md
"max_tokens"): max_tokens is the output term of every ceiling and of every hold once an answer has
started, and nothing before the end of an answer bounds its output below it."""

import pytest

from llm_accounts import capabilities, ladder
from routed_helpers import attempts, llm_ok, sent
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

SONNET_46 = "claude-routed/claude-sonnet-4-6"
HAIKU_45 = "claude-routed/claude-haiku-4-5"


@pytest.mark.parametrize("model", ["claude-routed", SONNET_46, HAIKU_45, "claude-routed/claude-sonnet-5"])
def test_a_prompt_without_max_tokens_asks_for_32000(accounts, model):
    llm_ok("-m", model, "Hello")
    assert sent(accounts)["max_tokens"] == capabilities.ROUTED_MAX_TOKENS == 32_000


def test_a_thinking_budget_comes_on_top_of_the_32000(accounts):
    llm_ok("-m", SONNET_46, "Hello", "-o", "thinking_budget", "10000")
    assert sent(accounts)["max_tokens"] == 42_000
    assert sent(accounts)["thinking"]["budget_tokens"] == 10_000


def test_a_thinking_budget_never_takes_the_default_past_llm_anthropics(accounts):
    llm_ok("-m", HAIKU_45, "Hello", "-o", "thinking_budget", "40000")
    assert sent(accounts)["max_tokens"] == 64_000  # llm-anthropic's default for Haiku 4.5


def test_max_tokens_given_is_sent_as_given_up_to_the_models_maximum(accounts):
    llm_ok("-m", SONNET_46, "Hello", "-o", "max_tokens", "128000")
    assert sent(accounts)["max_tokens"] == 128_000


def test_the_ceiling_reserved_is_the_one_at_32000(accounts, ledger_path):
    llm_ok("-m", "claude-routed", "Hello")
    [row] = attempts(ledger_path)
    assert row["reserved_nusd"] == ladder.quote_for("claude-sonnet-4-6", max_tokens=32_000).ceiling_nusd
    # 1,000,000 input tokens at $3 and 32,000 output at $15 a million, times 1.1 (US-only inference).
    assert row["reserved_nusd"] == (1_000_000 * 3000 + 32_000 * 15_000) * 11 // 10 == 3_828_000_000


def test_an_answer_cut_at_the_default_says_how_to_let_it_run_longer(accounts, monkeypatch):
    # The stand-in's reply is a few tokens long: a default of 3 cuts it.
    monkeypatch.setattr(capabilities, "ROUTED_MAX_TOKENS", 3)
    result = llm_ok("-m", SONNET_46, "Hello")
    assert sent(accounts)["max_tokens"] == 3
    assert result.stderr.splitlines()[-1] == (
        "Note: the answer stopped at claude-routed's default max_tokens of 3; -o max_tokens 128000 lets it run longer"
    )


def test_an_answer_cut_at_a_max_tokens_the_user_chose_says_nothing(accounts):
    result = llm_ok("-m", SONNET_46, "Hello", "-o", "max_tokens", "3")
    assert "Note:" not in result.stderr


def test_an_answer_that_ends_by_itself_says_nothing(accounts):
    result = llm_ok("-m", SONNET_46, "Hello")
    assert "Note:" not in result.stderr
