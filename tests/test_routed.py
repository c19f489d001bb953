"""The routed model end to end: the llm CLI and Python API against the stand-in (issue 5)."""

import json
import sqlite3

import llm
import pytest
from click.testing import CliRunner
from llm.cli import cli

from conftest import assert_no_key_material, assert_tree_has_no_key_material, make_key
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.ledger import Ledger
from llm_accounts.money import NANO

MODEL = "claude-routed/claude-haiku-4-5"


@pytest.fixture
def accounts(user_path, ledger_path, monkeypatch):
    """Two accounts, alpha and beta, on the stand-in; keys live in llm's keys.json."""
    from llm_accounts.standin import StandIn

    keys = {"alpha": make_key(), "beta": make_key()}
    config = {"keys": [{"label": name, "key": key, "organization": f"org-{name}"} for name, key in keys.items()]}
    (user_path / "keys.json").write_text(
        json.dumps({"ALPHA_KEY": keys["alpha"], "BETA_KEY": keys["beta"]})
    )
    save_accounts_file(
        [
            Account("alpha", "ALPHA_KEY", 20 * NANO),
            Account("beta", "BETA_KEY", 20 * NANO),
        ],
        None,
    )
    with StandIn(config) as server:
        monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", server.base_url)
        server.keys = keys
        yield server


def llm_cli(*args):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result


def attempts(ledger_path):
    db = sqlite3.connect(ledger_path)
    db.row_factory = sqlite3.Row
    return [dict(row) for row in db.execute("select * from attempt order by created_at, rowid")]


def logged_turns(user_path):
    db = sqlite3.connect(user_path / "logs.db")
    db.row_factory = sqlite3.Row
    return [dict(row) for row in db.execute("select * from turns order by datetime_utc")]


def test_a_prompt_is_routed_reserved_and_settled(accounts, ledger_path):
    result = llm_cli("-m", MODEL, "Say hello")
    assert result.exit_code == 0, result.output
    assert result.output.strip()
    [row] = attempts(ledger_path)
    assert row["state"] == "settled"
    assert row["outcome"] == "complete"
    assert 0 < row["cost_nusd"] <= row["ceiling_nusd"]
    assert accounts.requests[-1]["label"] == row["account"]


def test_llm_logs_keep_usage_and_the_routing_object(accounts, user_path, ledger_path):
    llm_cli("-m", MODEL, "Say hello")
    [turn] = logged_turns(user_path)
    [row] = attempts(ledger_path)
    assert turn["input_tokens"] > 0 and turn["output_tokens"] > 0
    routing = json.loads(turn["response_json"])["routing"]
    assert routing["account"] == row["account"]
    assert routing["attempts"] == [
        {"id": row["id"], "account": row["account"], "outcome": "complete", "cost_nusd": row["cost_nusd"]}
    ]
    assert routing["price_revision"] == row["price_revision"]


def test_a_continued_conversation_stays_on_its_account(accounts, ledger_path):
    llm_cli("-m", MODEL, "First turn")
    first = attempts(ledger_path)[0]["account"]
    # Make the other account look far more attractive: the conversation must not move.
    Ledger().adjust("pre-spend", first, attempts(ledger_path)[0]["month_utc"], 15 * NANO, "test")
    result = llm_cli("-c", "Second turn")
    assert result.exit_code == 0, result.output
    rows = attempts(ledger_path)
    assert [row["account"] for row in rows] == [first, first]
    assert rows[0]["scope_id"] == rows[1]["scope_id"]
    assert len(accounts.requests[-1]["body"]["messages"]) == 3


def test_a_new_conversation_goes_to_the_account_furthest_behind_pace(accounts, ledger_path):
    from llm_accounts import clock

    alpha = Account("alpha", "ALPHA_KEY", 20 * NANO)
    Ledger().adjust("pre-spend", alpha, clock.credit_month(clock.now()), 5 * NANO, "test")
    llm_cli("-m", MODEL, "A new conversation")
    assert attempts(ledger_path)[-1]["account"] == "beta"


def test_a_429_on_the_first_account_of_a_new_conversation_moves_on(accounts, ledger_path):
    accounts.set_behaviour("alpha", "rate_limited")
    result = llm_cli("-m", MODEL, "Hello")
    assert result.exit_code == 0, result.output
    rows = attempts(ledger_path)
    assert [(row["account"], row["outcome"], row["cost_nusd"]) for row in rows][0] == ("alpha", "rate_limited", 0)
    assert rows[1]["account"] == "beta" and rows[1]["outcome"] == "complete"
    # The conversation is now bound to the account that answered.
    llm_cli("-c", "Again")
    assert attempts(ledger_path)[-1]["account"] == "beta"


def test_a_bound_conversation_never_moves_after_a_429(accounts, ledger_path):
    llm_cli("-m", MODEL, "Hello")
    bound = attempts(ledger_path)[0]["account"]
    accounts.set_behaviour(bound, "rate_limited")
    result = llm_cli("-c", "Again")
    assert result.exit_code == 1
    assert "rate_limited" in result.output and f"'{bound}'" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert {row["account"] for row in attempts(ledger_path)} == {bound}


@pytest.mark.parametrize("stream", [True, False])
def test_an_echoed_key_never_reaches_output_logs_or_ledger(accounts, user_path, ledger_path, tmp_path, stream):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "echo_key")
    args = ["-m", MODEL, "Repeat your key"] + ([] if stream else ["--no-stream"])
    result = llm_cli(*args)
    assert result.exit_code == 0, result.output
    account = attempts(ledger_path)[0]["account"]
    key = accounts.keys[account]
    assert_no_key_material(result.output, key)
    assert "[" in result.output  # the mask marker is shown where the key was
    assert_tree_has_no_key_material(tmp_path, key, ignore=("keys.json",))
    assert (user_path / "logs.db").exists() and ledger_path.exists()
