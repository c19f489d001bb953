"""One scope per prompt (docs/architecture.md "Scope").

A prompt with no llm conversation gets a scope of its own, so prompts on one model object spread
across accounts and a failed account does not poison the object; a conversation keeps one scope,
and the steps of a tool chain share one. Every bound scope can be named to ``llm accounts rebind``
by an id ``llm logs`` shows.
"""

import asyncio
import json
import sqlite3

import llm

from routed_helpers import attempts, llm_cli
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

MODEL = "claude-routed/claude-haiku-4-5"


def bindings(ledger_path):
    db = sqlite3.connect(ledger_path)
    try:
        return dict(((kind, scope), account) for kind, scope, account in db.execute(
            "select scope_kind, scope_id, account from binding"
        ))
    finally:
        db.close()


def test_each_prompt_without_a_conversation_has_a_scope_of_its_own(accounts, ledger_path):
    model = llm.get_model(MODEL)
    first, second = model.prompt("One"), model.prompt("Two")
    first.text(), second.text()
    rows = attempts(ledger_path)
    assert [(row["scope_kind"], row["scope_id"]) for row in rows] == [("prompt", first.id), ("prompt", second.id)]


def test_prompts_on_one_model_object_spread_across_accounts(accounts, ledger_path):
    model = llm.get_model(MODEL)
    model.prompt("One").text()
    model.prompt("Two").text()
    assert {row["account"] for row in attempts(ledger_path)} == {"alpha", "beta"}


def test_a_blocked_account_does_not_poison_the_model_object(accounts, ledger_path):
    model = llm.get_model(MODEL)
    model.prompt("One").text()
    [first] = attempts(ledger_path)
    assert llm_cli("accounts", "block", first["account"]).exit_code == 0
    assert model.prompt("Two").text()
    assert attempts(ledger_path)[-1]["account"] != first["account"]


def test_async_prompts_on_one_model_object_have_scopes_of_their_own(accounts, ledger_path):
    async def run():
        model = llm.get_async_model(MODEL)
        return await asyncio.gather(*(model.prompt(f"Prompt {n}").text() for n in range(4)))

    asyncio.run(run())
    rows = attempts(ledger_path)
    assert {row["scope_kind"] for row in rows} == {"prompt"}
    assert len({row["scope_id"] for row in rows}) == 4


def test_a_conversation_keeps_one_scope_and_one_account(accounts, ledger_path):
    conversation = llm.get_model(MODEL).conversation()
    for text in ("One", "Two", "Three"):
        conversation.prompt(text).text()
    rows = attempts(ledger_path)
    assert {(row["scope_kind"], row["scope_id"], row["account"]) for row in rows} == {
        ("conversation", conversation.id, rows[0]["account"])
    }


def lookup_weather(city: str) -> str:
    "Look up the weather for a city"
    return f"Sunny in {city}"


def test_the_steps_of_a_python_tool_chain_share_one_scope(accounts, ledger_path):
    chain = llm.get_model(MODEL).chain("What is the weather in Paris?", tools=[lookup_weather])
    assert "Sunny" in chain.text()
    rows = attempts(ledger_path)
    assert len(rows) == 2
    assert len({(row["scope_kind"], row["scope_id"], row["account"]) for row in rows}) == 1
    assert rows[0]["scope_kind"] == "conversation"


def test_the_steps_of_an_llm_functions_chain_share_the_conversation_scope(accounts, ledger_path, user_path):
    functions = "def lookup_weather(city: str) -> str:\n    return 'Sunny in ' + city\n"
    result = llm_cli("-m", MODEL, "--functions", functions, "What is the weather in Paris?")
    assert result.exit_code == 0, result.output
    rows = attempts(ledger_path)
    assert len(rows) == 2
    db = sqlite3.connect(user_path / "logs.db")
    (thread,) = {row[0] for row in db.execute("select thread_id from turns")}
    assert {(row["scope_kind"], row["scope_id"]) for row in rows} == {("conversation", thread)}


def test_llm_c_continues_on_the_bound_account(accounts, ledger_path):
    assert llm_cli("-m", MODEL, "One").exit_code == 0
    assert llm_cli("-c", "Two").exit_code == 0
    first, second = attempts(ledger_path)
    assert (second["scope_id"], second["account"]) == (first["scope_id"], first["account"])


def test_rebind_takes_the_conversation_id_llm_logs_shows(accounts, ledger_path):
    assert llm_cli("-m", MODEL, "One").exit_code == 0
    logged = json.loads(llm_cli("logs", "list", "-n", "1", "--json").output)[0]
    [row] = attempts(ledger_path)
    other = ({"alpha", "beta"} - {row["account"]}).pop()
    result = llm_cli("accounts", "rebind", logged["conversation_id"], other)
    assert result.exit_code == 0, result.output
    assert bindings(ledger_path) == {("conversation", logged["conversation_id"]): other}


def test_rebind_takes_the_id_of_a_python_prompt_without_a_conversation(accounts, ledger_path):
    response = llm.get_model(MODEL).prompt("One")
    response.text()
    [row] = attempts(ledger_path)
    other = ({"alpha", "beta"} - {row["account"]}).pop()
    result = llm_cli("accounts", "rebind", response.id, other)
    assert result.exit_code == 0, result.output
    assert bindings(ledger_path) == {("prompt", response.id): other}


def test_rebind_takes_a_response_id_of_a_conversation(accounts, ledger_path):
    conversation = llm.get_model(MODEL).conversation()
    first = conversation.prompt("One")
    first.text()
    [row] = attempts(ledger_path)
    other = ({"alpha", "beta"} - {row["account"]}).pop()
    assert llm_cli("accounts", "rebind", first.id, other).exit_code == 0
    conversation.prompt("Two").text()
    assert attempts(ledger_path)[-1]["account"] == other


def test_rebind_of_an_id_the_ledger_does_not_hold_is_not_found(accounts, ledger_path):
    assert llm_cli("-m", MODEL, "One").exit_code == 0
    result = llm_cli("accounts", "rebind", "01jd7k2m4q8r3t5v6w7x8y9z0a", "alpha")
    assert result.exit_code == 1
    assert result.output.startswith("Error: not_found: CONVERSATION_ID: the ledger holds no conversation")


def test_cid_continues_the_named_conversation_on_its_account(accounts, ledger_path):
    assert llm_cli("-m", MODEL, "One").exit_code == 0
    assert llm_cli("-m", MODEL, "Other").exit_code == 0
    first = attempts(ledger_path)[0]
    assert llm_cli("--cid", first["scope_id"], "Two").exit_code == 0
    last = attempts(ledger_path)[-1]
    assert (last["scope_kind"], last["scope_id"], last["account"]) == ("conversation", first["scope_id"], first["account"])


def test_llm_chat_keeps_one_scope_for_the_whole_chat(accounts, ledger_path):
    from click.testing import CliRunner
    from llm.cli import cli

    result = CliRunner().invoke(cli, ["chat", "-m", MODEL], input="One\nTwo\nexit\n", catch_exceptions=False)
    assert result.exit_code == 0, result.output
    rows = attempts(ledger_path)
    assert len(rows) == 2
    assert len({(row["scope_kind"], row["scope_id"], row["account"]) for row in rows}) == 1
    assert rows[0]["scope_kind"] == "conversation"
