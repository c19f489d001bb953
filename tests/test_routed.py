"""The routed model end to end: the llm CLI and Python API against the stand-in (issue 5)."""

import datetime as dt
import json
import sqlite3

import llm
import pytest
from click.testing import CliRunner
from llm.cli import cli

from conftest import assert_no_key_material, assert_tree_has_no_key_material, needs_faketime, under_faketime
from llm_accounts import clock
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.ledger import Ledger
from llm_accounts.money import NANO

MODEL = "claude-routed/claude-haiku-4-5"
NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)  # mid credit period 2026-11


@pytest.fixture
def at_now(monkeypatch):
    """The ledger's clock fixed at ``NOW``: a test's turns and its spends share one credit period."""
    monkeypatch.setattr(clock, "now", lambda: NOW)


def llm_cli(*args):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result


def attempts(ledger_path):
    if not ledger_path.exists():
        return []
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
        # ceiling_nusd what was reserved; held_nusd the hold message_start's counts left
        # (docs/pricing.md "Shrinking a hold on message_start").
        {"id": row["id"], "account": row["account"], "outcome": "complete", "cost_nusd": row["cost_nusd"],
         "ceiling_nusd": row["reserved_nusd"], "held_nusd": row["ceiling_nusd"]}
    ]
    assert routing["price_revision"] == row["price_revision"]


def test_a_continued_conversation_stays_on_its_account(accounts, ledger_path, at_now):
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


def test_a_new_conversation_goes_to_the_account_furthest_behind_pace(accounts, ledger_path, at_now):
    alpha = Account("alpha", "ALPHA_KEY", 20 * NANO)
    Ledger().adjust("pre-spend", alpha, clock.credit_month(NOW), 5 * NANO, "test")
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


def test_a_bound_account_out_of_budget_refuses_with_spend_budget_and_reset(accounts, ledger_path, at_now):
    llm_cli("-m", MODEL, "Hello")
    row = attempts(ledger_path)[0]
    Ledger().adjust("spent-it", Account(row["account"], row["account"].upper() + "_KEY", 20 * NANO), row["month_utc"], 19 * NANO + 900_000_000, "test")
    result = llm_cli("-c", "Again")
    assert result.exit_code == 1
    line = result.output.strip()
    assert len(line.splitlines()) == 1
    assert "budget_exhausted" in line and f"'{row['account']}'" in line
    assert "$20.00" in line  # the budget
    assert "UTC" in line  # when the credit period resets


def test_no_declaration_sends_unrouted_with_the_anthropic_key(standin, canary_key, user_path, ledger_path, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", canary_key)
    result = llm_cli("-m", MODEL, "Hello")
    assert result.exit_code == 0, result.output
    assert standin.requests[-1]["label"] == "a"
    assert not ledger_path.exists()
    assert "routing" not in json.loads(logged_turns(user_path)[0]["response_json"])


def test_an_explicit_key_is_refused_while_accounts_are_declared(accounts, ledger_path):
    result = llm_cli("-m", MODEL, "Hello", "--key", "sk-ant-something-long-enough")
    assert result.exit_code == 1
    assert "credential_conflict" in result.output
    assert "something" not in result.output
    assert accounts.requests == []


def test_missing_keys_refuse_before_sending_and_settle_not_sent(accounts, user_path, ledger_path):
    # A new conversation moves past a missing key (tests/test_missing_key.py); with none anywhere
    # it fails on the last account tried, each attempt settled as never sent.
    (user_path / "keys.json").write_text("{}")
    result = llm_cli("-m", MODEL, "Hello")
    assert result.exit_code == 1
    assert "credential_missing" in result.output
    rows = attempts(ledger_path)
    assert sorted(row["account"] for row in rows) == ["alpha", "beta"]
    assert {(row["state"], row["outcome"], row["cost_nusd"]) for row in rows} == {("settled", "not_sent", 0)}
    assert accounts.requests == []


def test_a_dropped_stream_keeps_its_ceiling_open(accounts, ledger_path):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "drop")
    result = llm_cli("-m", MODEL, "Hello")
    assert result.exit_code == 1
    assert "transport_error" in result.output
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"], row["cost_nusd"]) == ("open", "stream_truncated", None)


def test_a_mid_stream_error_keeps_its_ceiling_open_and_is_not_retried(accounts, ledger_path):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "stream_error")
    result = llm_cli("-m", MODEL, "Hello")
    assert result.exit_code == 1
    assert "provider_error" in result.output
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"]) == ("open", "stream_error")
    assert len(accounts.requests) == 1


def test_a_documented_rejection_records_type_and_class_never_text(accounts, ledger_path):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "credit_balance_too_low")
    result = llm_cli("-m", MODEL, "Hello")
    assert result.exit_code == 1
    assert "request_rejected" in result.output
    assert "credit balance" not in result.output
    [row] = attempts(ledger_path)
    assert (row["outcome"], row["provider_error_type"], row["rejection_class"], row["cost_nusd"]) == (
        "request_rejected",
        "invalid_request_error",
        "credit_balance_too_low",
        0,
    )


def test_python_api_conversation_stays_on_one_account(accounts, ledger_path):
    conversation = llm.get_model(MODEL).conversation()
    conversation.prompt("One").text()
    conversation.prompt("Two").text()
    rows = attempts(ledger_path)
    assert {(row["scope_kind"], row["scope_id"]) for row in rows} == {("conversation", conversation.id)}
    assert len({row["account"] for row in rows}) == 1


def test_async_model_streams_and_settles(accounts, ledger_path):
    import asyncio

    async def run():
        model = llm.get_async_model(MODEL)
        chunks = [chunk async for chunk in model.prompt("Hello async")]
        return "".join(chunks)

    assert asyncio.run(run())
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"]) == ("settled", "complete")


def test_async_echoed_key_is_scrubbed(accounts, ledger_path):
    import asyncio

    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "echo_key")

    async def run():
        model = llm.get_async_model(MODEL)
        response = model.prompt("Repeat your key")
        text = "".join([chunk async for chunk in response])
        return text, json.dumps(await response.json())

    text, response_json = asyncio.run(run())
    key = accounts.keys[attempts(ledger_path)[0]["account"]]
    assert_no_key_material(text, key)
    assert_no_key_material(response_json, key)


def test_tools_run_through_a_chain(accounts, ledger_path):
    def lookup_weather(city: str) -> str:
        "Look up the weather for a city"
        return f"Sunny in {city}"

    model = llm.get_model(MODEL)
    chain = model.chain("What is the weather in Paris?", tools=[lookup_weather])
    text = chain.text()
    assert "Sunny" in text
    rows = attempts(ledger_path)
    assert len(rows) == 2 and len({row["account"] for row in rows}) == 1
    last_body = accounts.requests[-1]["body"]
    assert last_body["tools"][0]["name"] == "lookup_weather"
    assert any(block.get("type") == "tool_result" for block in last_body["messages"][-1]["content"])


def test_schema_prompts_return_json(accounts):
    result = llm_cli("-m", MODEL, "Invent a dog", "--schema", "name, age int")
    assert result.exit_code == 0, result.output
    assert isinstance(json.loads(result.output), dict)


def test_image_attachments_are_sent_inline(accounts, tmp_path):
    import base64

    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    )
    path = tmp_path / "dot.png"
    path.write_bytes(png)
    result = llm_cli("-m", MODEL, "Describe", "-a", str(path))
    assert result.exit_code == 0, result.output
    [block] = [b for b in accounts.requests[-1]["body"]["messages"][0]["content"] if b["type"] != "text"]
    assert block["type"] == "image" and block["source"]["type"] == "base64"


def test_system_prompt_stop_sequences_and_options_are_sent(accounts):
    result = llm_cli(
        "-m", MODEL, "Hello", "-s", "Be brief", "-o", "stop_sequences", '["END"]', "-o", "max_tokens", "50", "-o", "temperature", "0.5"
    )
    assert result.exit_code == 0, result.output
    body = accounts.requests[-1]["body"]
    assert (body["system"], body["stop_sequences"], body["max_tokens"], body["temperature"]) == ("Be brief", ["END"], 50, 0.5)


def test_thinking_is_requested_and_shown_as_reasoning(accounts):
    model = llm.get_model(MODEL)
    response = model.prompt("Think", thinking=True, max_tokens=3000)
    assert response.text()
    assert accounts.requests[-1]["body"]["thinking"] == {"type": "enabled", "budget_tokens": 1024}


@pytest.mark.parametrize(
    "option,value",
    [("temperature", "1.5"), ("cache", "2h"), ("thinking_budget", "10"), ("account", "Not A Name")],
)
def test_invalid_options_are_refused_before_anything_is_sent(accounts, ledger_path, option, value):
    result = llm_cli("-m", MODEL, "Hello", "-o", option, value)
    assert result.exit_code != 0
    assert option in result.output
    assert accounts.requests == [] and not attempts(ledger_path)


def test_pinning_an_account_for_a_new_conversation(accounts, ledger_path):
    result = llm_cli("-m", MODEL, "Hello", "-o", "account", "beta")
    assert result.exit_code == 0, result.output
    assert attempts(ledger_path)[0]["account"] == "beta"


def test_server_side_tools_are_refused_as_unpriced(accounts, ledger_path):
    from llm.models import ServerSideTool

    model = llm.get_model(MODEL)
    with pytest.raises(Exception) as info:
        model.prompt("Search", tools=[ServerSideTool({"type": "web_search_20250305", "name": "web_search"})]).text()
    assert "unsupported_pricing" in str(info.value) or "does not support server-side tool" in str(info.value)
    assert accounts.requests == []


def test_a_stream_closed_by_the_caller_settles_as_stream_closed(accounts, ledger_path):
    response = llm.get_model(MODEL).prompt("Tell me a long story", max_tokens=200)
    iterator = iter(response)
    next(iterator)
    iterator.close()
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"]) == ("open", "stream_closed")


def test_a_new_conversation_goes_where_its_system_prompt_is_warm(accounts, ledger_path, at_now):
    system = "You are a careful assistant. " * 800  # well past the minimum cacheable length
    llm_cli("-m", MODEL, "First", "-s", system, "-o", "cache", "1h")
    [first] = attempts(ledger_path)
    usage = json.loads(first["usage_json"])
    assert usage["cache_creation"]["ephemeral_1h_input_tokens"] > 0
    # Spend a little on the warm account: by pace alone the other account would now be chosen.
    warm = Account(first["account"], first["account"].upper() + "_KEY", 20 * NANO)
    Ledger().adjust("pre-spend", warm, clock.credit_month(NOW), 1 * NANO, "test")
    llm_cli("-m", MODEL, "Second", "-s", system, "-o", "cache", "1h")
    second = attempts(ledger_path)[-1]
    assert second["account"] == first["account"]
    assert second["scope_id"] != first["scope_id"]
    assert json.loads(second["usage_json"])["cache_read_input_tokens"] > 0
    # Without the warm prefix the same state sends a new conversation to the other account.
    llm_cli("-m", MODEL, "Third", "-s", "A different system prompt")
    assert attempts(ledger_path)[-1]["account"] != first["account"]


@needs_faketime
def test_eight_llm_processes_on_a_small_budget_never_admit_past_it(accounts, user_path, ledger_path):
    """Real ``llm`` processes on one ledger: every committed state stays within each budget.

    The processes run under faketime from ``NOW``, so all of them reserve in one credit period
    (the audit sums each account's whole ledger) whatever the real date."""
    import os
    import subprocess
    import sys
    import threading
    import time

    # Room for exactly two open haiku ceilings per account at a time.
    save_accounts_file(
        [Account("alpha", "ALPHA_KEY", 1 * NANO), Account("beta", "BETA_KEY", 1 * NANO)], None
    )
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "slow", delay=1.5)
    # llm's own logs.db is not safe for eight concurrent processes (its migrations and writes race
    # and time out): migrate it first and run with --no-log. The ledger is what is under test.
    import sqlite_utils
    from llm.migrations import migrate

    migrate(sqlite_utils.Database(user_path / "logs.db"))
    llm_bin = os.path.join(os.path.dirname(sys.executable), "llm")
    # A short wait for room (docs/architecture.md "Waiting for room"): some prompts wait while
    # others hold the room, the rest are refused past the bound, and no state passes a budget.
    env = dict(os.environ, LLM_ACCOUNTS_WAIT="3")
    violations, samples = [], []
    done = threading.Event()

    def audit():
        while not done.is_set():
            try:
                db = sqlite3.connect(f"file:{ledger_path}?mode=ro", uri=True, timeout=5)
                rows = db.execute(
                    "select account, sum(coalesce(cost_nusd, ceiling_nusd)) from attempt group by account"
                ).fetchall()
                db.close()
            except sqlite3.OperationalError:
                rows = None  # not created yet
            if rows is not None:
                samples.append(rows)
                violations.extend(row for row in rows if row[1] > NANO)
            time.sleep(0.02)

    auditor = threading.Thread(target=audit)
    auditor.start()
    commands = [under_faketime([llm_bin, "--no-log", "-m", MODEL, f"Prompt {i}"], NOW, env) for i in range(8)]
    processes = [
        subprocess.Popen(argv, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for argv, child_env in commands
    ]
    results = [(p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for p in processes]
    done.set()
    auditor.join()

    assert samples and not violations
    rows = attempts(ledger_path)
    succeeded = [r for r in results if r[0] == 0]
    refused = [r for r in results if r[0] != 0]
    assert all("budget_exhausted" in stderr for _, _, stderr in refused), "\n".join(r[2][-600:] for r in refused if "budget_exhausted" not in r[2])
    assert len(succeeded) + len(refused) == 8 and succeeded
    # Every admitted attempt is in the ledger, settled, and matches a request the stand-in saw.
    assert len(rows) == len(accounts.requests) == len(succeeded)
    assert all(row["state"] == "settled" and row["outcome"] == "complete" for row in rows)


def test_a_ceiling_larger_than_every_budget_says_what_helps(accounts, ledger_path):
    save_accounts_file([Account("alpha", "ALPHA_KEY", 3 * NANO)], None)
    result = llm_cli("-m", "claude-routed/claude-sonnet-4-6", "Hello")
    assert result.exit_code == 1
    assert "budget_exhausted" in result.output
    assert "1,000,000-token window" in result.output
    assert "claude-routed/claude-haiku-4-5" in result.output
    assert accounts.requests == []


def test_rebind_moves_a_conversation_and_llm_c_follows(accounts, ledger_path):
    llm_cli("-m", MODEL, "Hello")
    [first] = attempts(ledger_path)
    other = "beta" if first["account"] == "alpha" else "alpha"
    result = llm_cli("accounts", "rebind", first["scope_id"], other)
    assert result.exit_code == 0, result.output
    llm_cli("-c", "Again")
    assert attempts(ledger_path)[-1]["account"] == other


def test_an_auth_failure_blocks_the_account_until_unblocked(accounts, ledger_path):
    accounts.set_behaviour("alpha", "unauthorized")
    result = llm_cli("-m", MODEL, "Hello", "-o", "account", "alpha")
    assert "auth_failed" in result.output and "'alpha'" in result.output
    accounts.set_behaviour("alpha", "ok")
    blocked = llm_cli("-m", MODEL, "Hello again", "-o", "account", "alpha")
    assert blocked.exit_code == 1 and "account_blocked" in blocked.output
    assert len(accounts.requests) == 1  # refused before sending
    assert llm_cli("accounts", "unblock", "alpha").exit_code == 0
    assert llm_cli("-m", MODEL, "Hello once more", "-o", "account", "alpha").exit_code == 0


def test_an_async_stream_cancelled_by_the_caller_stays_open_as_cancelled(accounts, ledger_path):
    import asyncio

    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "slow", delay=0.3)

    async def run():
        model = llm.get_async_model(MODEL)
        started = asyncio.Event()

        async def consume():
            async for _ in model.prompt("Tell me a story"):
                started.set()

        task = asyncio.create_task(consume())
        await asyncio.wait_for(started.wait(), timeout=30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"]) == ("open", "cancelled")
