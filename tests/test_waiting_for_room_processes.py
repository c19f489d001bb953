"""Waiting for room with real ``llm`` processes (docs/architecture.md "Waiting for room"; issue 21
point 1): a prompt that only ceilings in flight keep out waits, holding nothing, and completes
once they settle; past its bound it says the money is held, not spent. The child processes run
under faketime from ``NOW``, so they reserve in the credit period the test holds room in,
whatever the real date.
"""

import datetime as dt
import os
import queue
import subprocess
import sys
import threading

import pytest

from conftest import needs_faketime, under_faketime
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.ledger import Ledger, NotSent, Scope
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote
from routed_helpers import llm_cli

# llm's logs.db migrations race between processes starting together on a new directory: every
# test starts from an already-migrated logs.db, as a user's existing one is.
from llm_logs import existing_logs_db  # noqa: F401  (autouse)

NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)
ROUTED = "claude-routed"  # its default ceiling is $3.828 (docs/pricing.md)
LLM = os.path.join(os.path.dirname(sys.executable), "llm")


def hold(location, account, nusd, now=NOW):
    """An attempt in flight holding ``nusd`` on ``account`` (as another prompt's would)."""
    with Ledger(location) as ledger:
        ledger.reserve(
            Scope("conversation", "holder"), "held-1", Quote("claude-sonnet-4-5-20250929", nusd, "2026-11-01", "ab" * 32),
            [account], now=now,
        )


def release(location, now=NOW):
    with Ledger(location) as ledger:
        ledger.settle("held-1", NotSent(), now=now)


def start(*args, extra_env=None):
    env = dict(os.environ, **(extra_env or {}))
    argv, env = under_faketime([LLM, "-m", ROUTED, *args], NOW, env)
    return subprocess.Popen(
        argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def stderr_lines(process):
    """A queue that receives each stderr line as the process writes it."""
    lines = queue.Queue()

    def pump():
        for line in process.stderr:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return lines


@pytest.fixture
def alpha_only(accounts):
    alpha = Account("alpha", "ALPHA_KEY", 10 * NANO)
    save_accounts_file([alpha], None)
    return alpha


@needs_faketime
def test_a_prompt_kept_out_by_an_attempt_in_flight_waits_says_so_once_and_completes_when_it_settles(
    alpha_only, accounts, user_path, ledger_path
):
    hold(ledger_path, alpha_only, 7 * NANO)  # $7.00 + $3.828 > $10.00: no room until it settles
    process = start("Hello")
    lines = stderr_lines(process)
    first = lines.get(timeout=120)
    assert first.startswith("llm-accounts: waiting for $7.00 held by 1 attempt in flight on alpha (up to 600 s")
    assert accounts.requests == []  # nothing was sent while it waited
    release(ledger_path)
    out, _ = process.communicate(timeout=120)
    rest = []
    while (line := lines.get(timeout=10)) is not None:
        rest.append(line)
    assert process.returncode == 0, rest
    assert out.strip()
    assert rest == []  # said once
    assert len([r for r in accounts.requests if r["path"] == "/v1/messages"]) == 1


@needs_faketime
def test_past_its_bound_a_prompt_says_the_money_is_held_not_spent_and_how_to_free_it(
    alpha_only, accounts, user_path, ledger_path
):
    hold(ledger_path, alpha_only, 7 * NANO)
    process = start("-o", "wait", "0.5", "Hello")
    _, err = process.communicate(timeout=120)
    (line,) = err.strip().splitlines()
    assert process.returncode == 1
    assert line.startswith("Error: budget_exhausted: no room for this attempt after waiting ")
    assert "$7.00 held by 1 attempt in flight on alpha, not spent ($0.00 spent)" in line
    assert line.endswith("; -o wait SECONDS (or LLM_ACCOUNTS_WAIT) waits longer")
    assert accounts.requests == []


def test_wait_0_refuses_at_once_saying_the_money_is_held(alpha_only, accounts, ledger_path, monkeypatch):
    hold(ledger_path, alpha_only, 7 * NANO, now=None)
    monkeypatch.setenv("LLM_ACCOUNTS_WAIT", "0")
    result = llm_cli("-m", ROUTED, "Hello")
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: budget_exhausted: no room for this attempt without waiting")
    assert "$7.00 held by 1 attempt in flight on alpha, not spent" in line


def test_the_option_overrides_the_environment(alpha_only, accounts, ledger_path, monkeypatch):
    hold(ledger_path, alpha_only, 7 * NANO, now=None)
    monkeypatch.setenv("LLM_ACCOUNTS_WAIT", "600")
    result = llm_cli("-m", ROUTED, "-o", "wait", "0", "Hello")
    assert "no room for this attempt without waiting" in result.output


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf", "3601"])
def test_a_bad_LLM_ACCOUNTS_WAIT_is_one_coded_line_that_never_repeats_it(value, accounts, ledger_path, monkeypatch):
    monkeypatch.setenv("LLM_ACCOUNTS_WAIT", value)
    result = llm_cli("-m", ROUTED, "Hello")
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: declaration_invalid: LLM_ACCOUNTS_WAIT: must be a number of seconds from 0 to 3600 (0 refuses at once)"
    )
    assert accounts.requests == []


@pytest.mark.parametrize("value", ["soon", "-1", "3601"])
def test_a_bad_wait_option_is_one_coded_line(value, accounts, ledger_path):
    result = llm_cli("-m", ROUTED, "-o", "wait", value, "Hello")
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: declaration_invalid: option wait: ")
    assert value not in line
    assert accounts.requests == []


def six_parallel_prompts(accounts, user_path, extra_env=None):
    """Six ``llm -m claude-routed`` processes at once on two $20 accounts: five $3.828 ceilings fit
    an account at a time, so all six are admitted together."""
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "slow", delay=0.5)
    # --no-log: llm's own logs.db can stay locked past its timeout with six writers on a loaded
    # machine; the ledger is what is under test.
    processes = [start("--no-log", f"Prompt {i}", extra_env=extra_env) for i in range(6)]
    return [(p.wait(timeout=300), p.stdout.read(), p.stderr.read()) for p in processes]


@needs_faketime
def test_six_parallel_prompts_on_two_20_dollar_accounts_all_complete(accounts, user_path, ledger_path):
    results = six_parallel_prompts(accounts, user_path)
    assert [code for code, _, _ in results] == [0] * 6, [err[-400:] for _, _, err in results]
    with Ledger(ledger_path) as ledger:
        rows = ledger.attempts()
    assert len(rows) == 6 and all(row["outcome"] == "complete" for row in rows)


@needs_faketime
def test_six_parallel_prompts_all_complete_on_a_postgresql_ledger(accounts, user_path, pg_url):
    results = six_parallel_prompts(accounts, user_path, {"LLM_ACCOUNTS_LEDGER": pg_url})
    assert [code for code, _, _ in results] == [0] * 6, [err[-400:] for _, _, err in results]
    with Ledger(pg_url) as ledger:
        rows = ledger.attempts()
    assert len(rows) == 6 and all(row["outcome"] == "complete" for row in rows)


def test_an_async_prompt_waits_for_room_without_blocking_the_loop_and_completes(alpha_only, accounts, ledger_path):
    import asyncio
    import sqlite3

    import llm

    hold(ledger_path, alpha_only, 7 * NANO, now=None)

    def queued():
        with sqlite3.connect(ledger_path) as db:
            return db.execute("SELECT COUNT(*) FROM waiter").fetchone()[0]

    async def main():
        task = asyncio.ensure_future(llm.get_async_model(ROUTED).prompt("Hello").text())
        while not queued():
            assert not task.done(), "the prompt did not wait for room"
            await asyncio.sleep(0.02)  # the loop keeps running while the prompt waits
        assert accounts.requests == []
        release(ledger_path, now=None)
        return await asyncio.wait_for(task, 120)

    assert asyncio.run(main())
    assert queued() == 0  # admitted, its place given up
    assert len(accounts.requests) == 1
