"""Model ids as llm-anthropic users type them, and the served model in ``llm logs``."""

import sqlite3

import llm
import pytest

from llm_accounts.models import dotted_alias
from routed_helpers import attempts, llm_cli
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)


@pytest.mark.parametrize(
    "model_id, alias",
    [
        ("claude-sonnet-4-6", "claude-sonnet-4.6"),
        ("claude-opus-4-5-20251101", "claude-opus-4.5"),
        ("claude-haiku-4-5", "claude-haiku-4.5"),
        ("claude-opus-5", None),
        ("claude-3-haiku-20240307", None),
    ],
)
def test_a_versioned_model_gets_the_dotted_alias_llm_anthropic_registers(model_id, alias):
    assert dotted_alias(model_id) == alias


def test_a_dotted_alias_reaches_the_same_routed_model():
    assert llm.get_model("claude-routed/claude-sonnet-4.6").model_id == "claude-routed/claude-sonnet-4-6"
    assert llm.get_model("claude-routed/claude-haiku-4.5").model_id == "claude-routed/claude-haiku-4-5-20251001"


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_llm_logs_record_the_model_that_served_the_prompt(accounts, user_path, ledger_path, stream):
    result = llm_cli("-m", "claude-routed/claude-haiku-4.5", "hello", *([] if stream else ["--no-stream"]))
    assert result.exit_code == 0, result.output
    [row] = attempts(ledger_path)
    (resolved,) = sqlite3.connect(user_path / "logs.db").execute("select resolved_model from turns").fetchone()
    assert resolved == row["served_model"] and resolved.startswith("claude-haiku-4-5")
