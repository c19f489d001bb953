"""An account whose key is missing (docs/architecture.md "Key resolution", "Failover").

A declared account whose ``key_env`` resolves to nothing used to stop every new conversation on
it with ``credential_missing`` while ``status`` and ``ladder`` showed it ``ok`` and available. A
new conversation now moves past it, within the move-on bound, its attempt settled as
``not_sent``; a bound conversation and a pinned account still refuse naming the account; and
``status`` and ``ladder`` say the key is missing. Both ledger backends.
"""

import json

import pytest
from click.testing import CliRunner

from llm_accounts.cli import accounts as accounts_cli
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.ledger import Ledger
from llm_accounts.money import NANO
from routed_helpers import llm_cli

MODEL = "claude-routed/claude-haiku-4-5"


@pytest.fixture
def ledger_at(accounts, ledger_location, monkeypatch):
    """The routed prompts' ledger, once per backend (after ``accounts`` set the SQLite default)."""
    monkeypatch.setenv("LLM_ACCOUNTS_LEDGER", str(ledger_location))
    return ledger_location


@pytest.fixture
def alpha_without_key(accounts, ledger_at, user_path):
    """alpha (rank 0, tried first) has no key anywhere; beta (rank 1) has one."""
    (user_path / "keys.json").write_text(json.dumps({"BETA_KEY": accounts.keys["beta"]}))
    save_accounts_file(
        [Account("alpha", "ALPHA_KEY", 20 * NANO, rank=0), Account("beta", "BETA_KEY", 20 * NANO, rank=1)], None
    )
    return accounts


def rows(location):
    with Ledger(location) as ledger:
        return [(r["account"], r["state"], r["outcome"], r["cost_nusd"]) for r in ledger.attempts(oldest_first=True)]


def test_a_new_conversation_moves_past_an_account_whose_key_is_missing(alpha_without_key, ledger_at):
    result = llm_cli("-m", MODEL, "Hello")
    assert result.exit_code == 0, result.output
    assert rows(ledger_at) == [("alpha", "settled", "not_sent", 0), ("beta", "settled", "complete", rows(ledger_at)[1][3])]
    assert [r["label"] for r in alpha_without_key.requests] == ["beta"]
    # The conversation is bound to the account that answered.
    assert llm_cli("-c", "Again").exit_code == 0
    assert rows(ledger_at)[-1][0] == "beta"


def test_a_bound_conversation_whose_key_went_missing_refuses_naming_its_account(alpha_without_key, ledger_at, user_path):
    (user_path / "keys.json").write_text(json.dumps({"ALPHA_KEY": alpha_without_key.keys["alpha"],
                                                     "BETA_KEY": alpha_without_key.keys["beta"]}))
    assert llm_cli("-m", MODEL, "Hello").exit_code == 0
    (user_path / "keys.json").write_text(json.dumps({"BETA_KEY": alpha_without_key.keys["beta"]}))
    result = llm_cli("-c", "Again")
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()
    assert "credential_missing" in line and "account 'alpha'" in line and "ALPHA_KEY" in line
    assert [r[0] for r in rows(ledger_at)] == ["alpha", "alpha"]
    assert rows(ledger_at)[-1][2] == "not_sent"


def test_a_pinned_account_whose_key_is_missing_refuses_naming_it(alpha_without_key, ledger_at):
    result = llm_cli("-m", MODEL, "-o", "account", "alpha", "Hello")
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()
    assert "credential_missing" in line and "account 'alpha'" in line
    assert rows(ledger_at) == [("alpha", "settled", "not_sent", 0)]
    assert alpha_without_key.requests == []


def test_moving_past_missing_keys_stops_at_four_accounts(accounts, ledger_at, user_path):
    # Four accounts without a key come first; the fifth, with one, is past the move-on bound.
    (user_path / "keys.json").write_text(json.dumps({"BETA_KEY": accounts.keys["beta"]}))
    names = ["k1", "k2", "k3", "k4"]
    save_accounts_file(
        [Account(name, f"{name.upper()}_KEY", 20 * NANO, rank=rank) for rank, name in enumerate(names)]
        + [Account("beta", "BETA_KEY", 20 * NANO, rank=9)],
        None,
    )
    result = llm_cli("-m", MODEL, "Hello")
    assert result.exit_code == 1
    [line] = result.output.strip().splitlines()
    assert "credential_missing" in line and "account 'k4'" in line and "also tried k1" in line
    assert rows(ledger_at) == [(name, "settled", "not_sent", 0) for name in names]
    assert accounts.requests == []


def test_status_says_which_account_lacks_its_key(alpha_without_key, ledger_at):
    assert llm_cli("-m", MODEL, "Hello").exit_code == 0
    table = CliRunner().invoke(accounts_cli, ["status"])
    assert table.exit_code == 0, table.output
    line = {row.split()[0]: row for row in table.output.splitlines() if row.split()[:1] in (["alpha"], ["beta"])}
    assert "NO KEY (ALPHA_KEY)" in line["alpha"] and "NO KEY" not in line["beta"]
    data = json.loads(CliRunner().invoke(accounts_cli, ["status", "--json"]).output)
    assert {a["name"]: a["key"] for a in data["accounts"]} == {"alpha": "missing", "beta": "found"}


def test_ladder_lists_an_account_without_its_key_as_unavailable(alpha_without_key, ledger_at):
    data = json.loads(CliRunner().invoke(accounts_cli, ["ladder", "--json"]).output)
    by_name = {rung["account"]: rung for rung in data}
    assert (by_name["beta"]["position"], by_name["beta"]["available"]) == (1, True)
    assert (by_name["alpha"]["position"], by_name["alpha"]["available"], by_name["alpha"]["code"]) == (
        None, False, "credential_missing"
    )
    assert "ALPHA_KEY" in by_name["alpha"]["reason"]
    table = CliRunner().invoke(accounts_cli, ["ladder"]).output
    [alpha_line] = [line for line in table.splitlines() if " alpha " in line]
    assert "credential_missing" in alpha_line and "ALPHA_KEY" in alpha_line
