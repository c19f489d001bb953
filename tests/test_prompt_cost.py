"""The cost of a prompt where llm users look: llm -u, llm logs -u / --json, the Python API (issue 23)."""

import json

import llm

import llm_accounts
from llm_accounts.pricing.cost import Cost, cost_from_routing, usage_details
from routed_helpers import attempts, llm_cli
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

MODEL = "claude-routed/claude-haiku-4-5"


def test_llm_u_shows_the_cost_and_the_account_that_paid(accounts, ledger_path):
    result = llm_cli("-m", MODEL, "Say hello", "-u")
    [row] = attempts(ledger_path)
    usage = json.loads(result.output.split("Token usage: ")[1].split(", ", 2)[2])
    assert usage["paid_by"] == row["account"]
    assert usage["cost"] == llm_accounts.money.usd_fine(row["cost_nusd"])


def test_llm_logs_u_shows_the_cost_in_its_usage_section(accounts, ledger_path):
    llm_cli("-m", MODEL, "Say hello")
    [row] = attempts(ledger_path)
    result = llm_cli("logs", "-u", "-n", "1")
    [usage] = [line for line in result.output.splitlines() if "input" in line and "output" in line]
    assert f'"paid_by": "{row["account"]}"' in usage


def test_llm_logs_json_keeps_its_shape_and_carries_the_cost_in_token_details(accounts, ledger_path):
    llm_cli("-m", MODEL, "Say hello")
    [row] = attempts(ledger_path)
    [logged] = json.loads(llm_cli("logs", "--json", "-n", "1").output)
    assert json.loads(logged["token_details"])["paid_by"] == row["account"]
    assert logged["response_json"]["routing"]["attempts"][0]["cost_nusd"] == row["cost_nusd"]


def test_cost_of_gives_the_python_api_integer_nanodollars(accounts, ledger_path):
    response = llm.get_model(MODEL).prompt("Say hello")
    response.text()
    [row] = attempts(ledger_path)
    assert llm_accounts.cost_of(response) == Cost(row["account"], row["cost_nusd"], 0)


def test_cost_of_a_response_not_yet_run_runs_it_as_the_readme_shows(accounts, ledger_path):
    # README "The cost of a prompt": ``model.prompt()`` is lazy, and the example asks at once.
    response = llm.get_model("claude-routed").prompt("Say hello")
    cost = llm_accounts.cost_of(response)
    [row] = attempts(ledger_path)
    assert cost == Cost(row["account"], row["cost_nusd"], 0)
    assert cost.spent_nusd > 0


def test_an_open_attempt_is_held_at_its_ceiling_never_spent():
    routing = {
        "account": "beta",
        "attempts": [
            {"account": "alpha", "outcome": "server_error", "cost_nusd": None, "ceiling_nusd": 40_000_000},
            {"account": "beta", "outcome": "complete", "cost_nusd": 21_000, "ceiling_nusd": 30_000_000},
        ],
    }
    cost = cost_from_routing(routing)
    assert (cost.spent_nusd, cost.held_nusd) == (21_000, 40_000_000)
    assert usage_details(cost) == {"cost": "$0.000021", "paid_by": "beta", "held": "$0.04"}


def test_an_unrouted_response_has_no_cost():
    assert cost_from_routing(None) is None
    assert usage_details(None) == {}
