"""Token counting for routed models (issue 24, point 3): ``llm accounts count`` and
``model.count_tokens()`` against the stand-in's ``POST /v1/messages/count_tokens``.

Expected counts come from the stand-in's documented fake tokenizer (llm_accounts/standin/tokens.py):
ceil(utf-8 bytes / 4) per text, 1,600 per image, a tool's compact JSON, 346 for the tool prompt.
"""

import asyncio
import json
import sqlite3

import llm
import pytest

from conftest import assert_no_key_material
from routed_helpers import attempts, llm_cli
from llm_accounts.ledger import Ledger
from llm_accounts.standin import count_tokens as standin_count
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm migrates logs.db once per session)

MODEL = "claude-routed/claude-haiku-4-5"
HAIKU = "claude-haiku-4-5-20251001"
TINY_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


def counts(server):
    return [r for r in server.requests if r["path"] == "/v1/messages/count_tokens"]


def health_rows(ledger_path):
    if not ledger_path.exists():
        return []
    db = sqlite3.connect(ledger_path)
    try:
        return db.execute(
            "select account, state, failure_class from health union all "
            "select account, state, failure_class from host_health"
        ).fetchall()
    finally:
        db.close()


def pelicans():
    """Count pelicans in the harbour"""
    return "3"


def test_count_prints_the_providers_count_and_reserves_nothing(accounts, ledger_path):
    result = llm_cli("accounts", "count", "-m", MODEL, "Hello there")
    assert result.exit_code == 0, result.output
    [sent] = counts(accounts)
    assert result.output == f"{standin_count(sent['body'])}\n"
    assert result.output == "3\n"  # "Hello there": 11 bytes
    assert attempts(ledger_path) == []
    assert not [r for r in accounts.requests if r["path"] == "/v1/messages"]


def test_the_count_request_is_the_messages_request_without_what_only_a_message_takes(accounts):
    model = llm.get_model(MODEL)
    tokens = model.count_tokens(
        "Describe it",
        system="Be brief",
        attachments=[llm.Attachment(content=TINY_PNG)],
        tools=[llm.Tool.function(pelicans)],
        max_tokens=500,
        temperature=0.5,
        stop_sequences=["x"],
    )
    [sent] = counts(accounts)
    body = sent["body"]
    assert list(body) == ["model", "system", "messages", "tools"]
    assert body["model"] == HAIKU and body["system"] == "Be brief"
    assert [block["type"] for block in body["messages"][0]["content"]] == ["text", "image"]
    assert [tool["name"] for tool in body["tools"]] == ["pelicans"]
    tool_json = json.dumps(body["tools"][0], sort_keys=True, separators=(",", ":"))
    assert tokens == 346 + -(-len(tool_json) // 4) + 2 + 1600 + 3


def test_the_command_carries_a_system_prompt_attachments_and_functions(accounts, tmp_path):
    image = tmp_path / "pelican.png"
    image.write_bytes(TINY_PNG)
    functions = "def pelicans():\n    'Count pelicans'\n    return 3\n"
    result = llm_cli("accounts", "count", "-m", MODEL, "-s", "Be brief", "-a", str(image), "--functions", functions, "How many?")
    assert result.exit_code == 0, result.output
    body = counts(accounts)[0]["body"]
    assert body["system"] == "Be brief"
    assert [block["type"] for block in body["messages"][0]["content"]] == ["text", "image"]
    assert [tool["name"] for tool in body["tools"]] == ["pelicans"]
    assert result.output == f"{standin_count(body)}\n"


def test_the_command_adds_fragments_to_the_prompt_and_the_system_prompt(accounts, tmp_path):
    (tmp_path / "notes.md").write_text("Pelicans nest on islands.")
    (tmp_path / "style.md").write_text("Answer in one line.")
    result = llm_cli("accounts", "count", "-m", MODEL, "-f", str(tmp_path / "notes.md"),
                     "--sf", str(tmp_path / "style.md"), "Summarize")
    assert result.exit_code == 0, result.output
    body = counts(accounts)[0]["body"]
    assert "Answer in one line." in body["system"]
    assert "Pelicans nest on islands." in body["messages"][0]["content"][0]["text"]


def test_piped_text_is_counted_before_the_argument_as_llm_prompt_joins_them(accounts):
    from click.testing import CliRunner
    from llm.cli import cli

    result = CliRunner().invoke(cli, ["accounts", "count", "-m", MODEL, "Summarize"], input="Pelicans nest")
    assert result.exit_code == 0, result.output
    assert counts(accounts)[0]["body"]["messages"][0]["content"][0]["text"] == "Pelicans nest Summarize"


def test_a_missing_attachment_is_refused_without_repeating_it(accounts):
    result = llm_cli("accounts", "count", "-m", MODEL, "-a", "no-such-file-sk-ant-x.png", "Hi")
    assert result.exit_code == 1
    assert result.output == "Error: declaration_invalid: -a: must be a file that exists, a URL or - (standard input), of a type llm recognizes\n"
    assert counts(accounts) == []


def test_an_async_model_counts_too(accounts, ledger_path):
    async def count():
        return await llm.get_async_model(MODEL).count_tokens("Hello there", system="Be brief")

    assert asyncio.run(count()) == 3 + 2
    [sent] = counts(accounts)
    assert sent["body"]["system"] == "Be brief"
    assert attempts(ledger_path) == []


def test_a_schema_and_thinking_go_as_the_messages_request_sends_them(accounts):
    result = llm_cli("accounts", "count", "-m", MODEL, "--schema", "name, age int", "-o", "thinking", "1", "A dog")
    assert result.exit_code == 0, result.output
    body = counts(accounts)[0]["body"]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert body["output_config"]["format"]["type"] == "json_schema"
    assert body["output_config"]["format"]["schema"]["required"] == ["name", "age"]


def test_a_follow_up_is_counted_with_the_whole_conversation(accounts, ledger_path):
    conversation = llm.get_model(MODEL).conversation()
    conversation.prompt("First turn").text()
    tokens = llm.get_model(MODEL).count_tokens("Second turn", conversation=conversation)
    body = counts(accounts)[0]["body"]
    assert [message["role"] for message in body["messages"]] == ["user", "assistant", "user"]
    assert tokens == standin_count(body)
    assert len(attempts(ledger_path)) == 1  # the prompt's own attempt; the count added none


def test_the_command_counts_the_next_prompt_of_the_latest_conversation(accounts, user_path):
    import sqlite_utils

    response = llm.get_model(MODEL).conversation().prompt("First turn")
    response.text()
    response.log_to_db(sqlite_utils.Database(user_path / "logs.db"))
    result = llm_cli("accounts", "count", "-c", "Second turn", "--json")
    assert result.exit_code == 0, result.output
    body = counts(accounts)[0]["body"]
    assert len(body["messages"]) == 3
    counted = json.loads(result.output)
    assert (counted["input_tokens"], counted["model"]) == (standin_count(body), f"claude-routed/{HAIKU}")
    assert counted["account"] in accounts.keys


@pytest.mark.parametrize("pin", [["--account", "beta"], ["-o", "account", "beta"]])
def test_a_pinned_count_goes_to_that_account(accounts, pin):
    result = llm_cli("accounts", "count", "-m", MODEL, *pin, "Hello", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["account"] == "beta"
    assert counts(accounts)[0]["label"] == "beta"


def block_alpha():
    from llm_accounts.declarations import load_declaration

    Ledger().block(next(a for a in load_declaration().accounts if a.name == "alpha"))


def test_a_count_skips_an_account_that_is_blocked(accounts):
    block_alpha()
    assert llm_cli("accounts", "count", "-m", MODEL, "Hello").exit_code == 0
    assert [r["label"] for r in counts(accounts)] == ["beta"]


def test_a_count_skips_an_account_that_is_cooling(accounts, ledger_path):
    accounts.set_behaviour("alpha", "rate_limited")
    with pytest.raises(llm.ModelError):
        llm.get_model(MODEL).prompt("Hello", account="alpha", retries=0).text()
    assert ("alpha", "failing", "rate_limited") in health_rows(ledger_path)
    assert llm_cli("accounts", "count", "-m", MODEL, "Hello").exit_code == 0
    assert [r["label"] for r in counts(accounts)] == ["beta"]


def test_a_pinned_count_on_a_blocked_account_is_refused_with_its_code(accounts):
    block_alpha()
    result = llm_cli("accounts", "count", "-m", MODEL, "--account", "alpha", "Hello")
    assert result.exit_code == 1
    assert result.output.startswith("Error: account_blocked: account 'alpha' is blocked")
    assert counts(accounts) == []


def test_a_count_costs_nothing_so_budgets_do_not_stand_in_its_way(accounts, ledger_path):
    from llm_accounts import clock
    from llm_accounts.declarations import load_declaration

    month = clock.credit_month(clock.now())
    for account in load_declaration().accounts:
        Ledger().adjust(f"spent-{account.name}", account, month, account.budget_nusd, "test")
    with pytest.raises(llm.ModelError) as refused:
        llm.get_model(MODEL).prompt("Hello").text()
    assert refused.value.code == "budget_exhausted"
    result = llm_cli("accounts", "count", "-m", MODEL, "Hello there")
    assert (result.exit_code, result.output) == (0, "3\n")


def test_a_401_on_a_count_is_auth_failed_and_changes_no_health(accounts, ledger_path):
    accounts.set_behaviour("alpha", "unauthorized")
    result = llm_cli("accounts", "count", "-m", MODEL, "--account", "alpha", "Hello")
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1
    assert result.output.startswith("Error: auth_failed: account 'alpha' answered the token count with HTTP 401")
    assert "check its key (ALPHA_KEY)" in result.output and "nothing was billed" in result.output
    for key in accounts.keys.values():
        assert_no_key_material(result.output, key)
    assert health_rows(ledger_path) == [] and attempts(ledger_path) == []
    verdicts = llm_cli("accounts", "ladder", "--model", HAIKU, "--json")
    assert {rung["account"]: rung["available"] for rung in json.loads(verdicts.output)} == {"alpha": True, "beta": True}


def test_a_429_on_a_count_is_rate_limited_and_changes_no_health(accounts, ledger_path):
    accounts.set_behaviour("beta", "rate_limited", retry_after=7)
    result = llm_cli("accounts", "count", "-m", MODEL, "--account", "beta", "Hello")
    assert result.exit_code == 1
    assert result.output.startswith("Error: rate_limited: account 'beta' answered the token count with HTTP 429")
    assert "try again in 7 s" in result.output
    assert health_rows(ledger_path) == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_count_answer_that_is_not_a_count_is_a_provider_error(monkeypatch, accounts, mode):
    from llm_accounts import counting

    monkeypatch.setattr(counting, "ANSWER_LIMIT", 5)  # the stand-in's answer no longer fits
    model = llm.get_model(MODEL) if mode == "sync" else llm.get_async_model(MODEL)
    with pytest.raises(llm.ModelError) as raised:
        result = model.count_tokens("Hello")
        if mode == "async":
            asyncio.run(result)
    assert raised.value.code == "provider_error" and "malformed" in str(raised.value)


def test_an_unreachable_server_is_a_transport_error(accounts, monkeypatch):
    accounts.stop()
    result = llm_cli("accounts", "count", "-m", MODEL, "Hello")
    assert result.exit_code == 1
    assert result.output.startswith("Error: transport_error: account ")
    assert "a count bills nothing" in result.output


def test_a_count_reads_a_gzip_encoded_answer_and_keeps_no_cookie(accounts):
    for name in accounts.keys:
        accounts.set_behaviour(name, "ok", shapes=["gzip", "set_cookie", "retry_after_200"])
    first = llm_cli("accounts", "count", "-m", MODEL, "Hello there")
    second = llm_cli("accounts", "count", "-m", MODEL, "Hello there")
    assert (first.output, second.output) == ("3\n", "3\n")
    assert all("cookie" not in r["headers"] for r in counts(accounts))


def test_unrouted_counts_with_llms_anthropic_key(standin, canary_key, monkeypatch, ledger_path):
    monkeypatch.setenv("ANTHROPIC_API_KEY", canary_key)
    result = llm_cli("accounts", "count", "-m", MODEL, "Hello there", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["account"] is None
    assert counts(standin)[0]["label"] == "a"
    assert not ledger_path.exists()


def test_a_model_that_is_not_routed_is_refused(accounts):
    result = llm_cli("accounts", "count", "-m", "gpt-4o-mini", "Hello")
    assert result.exit_code == 1
    assert result.output.startswith("Error: declaration_invalid: --model: not a claude-routed model")


def test_a_key_given_with_accounts_declared_is_a_credential_conflict(accounts):
    with pytest.raises(llm.ModelError) as raised:
        llm.get_model(MODEL).count_tokens("Hello", key="sk-ant-whatever-value")
    assert raised.value.code == "credential_conflict"
    assert counts(accounts) == []


def test_a_count_whose_digits_hold_a_run_of_the_key_is_not_shown():
    from llm_accounts.counting import read_count
    from llm_accounts.wire.scrub import run_detector

    key = "sk-ant-api03-" + "x" * 40 + "31415926" + "y" * 40
    tokens, error = read_count(b'{"input_tokens": 31415926}', run_detector(key), "alpha")
    assert tokens is None and error.code == "provider_error"
    assert "31415926" not in str(error)
    assert read_count(b'{"input_tokens": 27}', run_detector(key)) == (27, None)


def test_a_server_side_tool_given_with_T_is_counted_with_its_definition(accounts, ledger_path):
    # As llm-anthropic's `llm anthropic count -T 'WebSearch(max_uses=3)'`: the tool's spec goes in
    # the count request's tools, and the stand-in counts its definition like any tool's.
    result = llm_cli("accounts", "count", "-m", MODEL, "-T", "WebSearch(max_uses=3)", "Hello there")
    assert result.exit_code == 0, result.output
    [sent] = counts(accounts)
    assert sent["body"]["tools"] == [{"type": "web_search_20250305", "name": "web_search", "max_uses": 3}]
    tool_json = json.dumps(sent["body"]["tools"][0], sort_keys=True, separators=(",", ":"))
    assert result.output == f"{346 + -(-len(tool_json) // 4) + 3}\n"
    assert attempts(ledger_path) == []
