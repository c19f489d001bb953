"""An attempt left open is said at once, on one line of standard error (docs/errors.md "Held open").

Ctrl-C in a real ``llm`` process, a real ``llm ... | head -c 1`` closing the stream, a cancelled
asyncio task and every other unknown outcome keep the attempt's ceiling (docs/architecture.md
"Attempt outcomes"); the user is told which attempt keeps how much open on which account, and what
will settle it.
"""

import asyncio
import os
import signal
import subprocess
import sys
import types

import llm
import pytest

from llm_accounts import notices
from llm_accounts.money import usd_fine
from routed_helpers import attempts, llm_cli
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

MODEL = "claude-routed/claude-haiku-4-5"
LONG_PROMPT = "Tell me everything about " + " ".join(f"topic{n}" for n in range(40))


def held_lines(text):
    return [line for line in text.splitlines() if " keeps " in line and " open on account " in line]


def expected_line(row):
    return (
        f"Warning: attempt {row['id']} keeps {usd_fine(row['ceiling_nusd'])} open on account '{row['account']}' "
        f"({row['outcome']}); settle it with 'llm accounts reconcile {row['id']} --cost USD --source REF' "
        "once the provider's usage shows what it cost"
    )


def slow_stream(standin, delay=0.5):
    for name in ("alpha", "beta"):
        standin.set_behaviour(name, "slow", delay=delay)


def llm_process(*args, **popen):
    return subprocess.Popen([sys.executable, "-m", "llm", *args], env=dict(os.environ), **popen)


def test_ctrl_c_in_a_real_llm_mid_stream_says_what_is_held_open(accounts, ledger_path):
    slow_stream(accounts)
    child = llm_process("-m", MODEL, LONG_PROMPT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout.read(1)  # output has started
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    [row] = attempts(ledger_path)
    assert row["state"] == "open" and row["outcome"] in ("cancelled", "stream_closed")
    assert held_lines(stderr.decode()) == [expected_line(row)]


def test_a_real_pipe_into_head_closing_the_stream_says_what_is_held_open(accounts, ledger_path):
    slow_stream(accounts, delay=0.2)
    child = llm_process("-m", MODEL, LONG_PROMPT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    head = subprocess.Popen(["head", "-c", "1"], stdin=child.stdout, stdout=subprocess.PIPE)
    child.stdout.close()  # head alone reads llm's output now
    try:
        assert len(head.communicate(timeout=30)[0]) == 1
        _, stderr = child.communicate(timeout=30)
    finally:
        for process in (child, head):
            if process.poll() is None:
                process.kill()
                process.wait()
    [row] = attempts(ledger_path)
    assert row["state"] == "open"
    assert held_lines(stderr.decode()) == [expected_line(row)]


def test_a_cancelled_asyncio_task_says_what_is_held_open(accounts, ledger_path, capsys):
    slow_stream(accounts)

    async def run():
        started = asyncio.Event()

        async def consume():
            async for _ in llm.get_async_model(MODEL).prompt(LONG_PROMPT):
                started.set()

        task = asyncio.ensure_future(consume())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"]) == ("open", "cancelled")
    assert held_lines(capsys.readouterr().err) == [expected_line(row)]


@pytest.mark.parametrize("behaviour", ["api_error", "stream_error", "drop"])
def test_every_unknown_outcome_says_what_is_held_open(accounts, ledger_path, capsys, behaviour):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, behaviour)
    result = llm_cli("-m", MODEL, "-o", "retries", "0", "hello")
    assert result.exit_code == 1
    [row] = attempts(ledger_path)
    assert held_lines(result.stderr) == [expected_line(row)]


def test_an_answer_settled_in_full_says_nothing(accounts, ledger_path):
    result = llm_cli("-m", MODEL, "hello")
    assert result.exit_code == 0
    assert held_lines(result.stderr) == []


def test_each_retried_5xx_says_what_it_holds_open(accounts, ledger_path):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "ok", script=["api_error"])
    result = llm_cli("-m", MODEL, "hello")
    assert result.exit_code == 0
    failed, _ = attempts(ledger_path)
    assert held_lines(result.stderr) == [expected_line(failed)]


def test_an_account_with_an_admin_key_is_settled_from_the_usage_report():
    account = types.SimpleNamespace(name="work", admin_key_env="WORK_ADMIN_KEY", api_key_id="apikey_01a")
    line = notices.held_open("a1", "work", 7_920_000_000, "cancelled", automatic=notices.settles_automatically(account))
    assert line == (
        "Warning: attempt a1 keeps $7.92 open on account 'work' (cancelled); "
        "the provider's usage report settles it automatically once it proves what it cost (minutes after the "
        "report refreshes); else 'llm accounts reconcile a1 --cost USD --source REF'"
    )


@pytest.mark.parametrize("account", [
    types.SimpleNamespace(name="work"),
    types.SimpleNamespace(name="work", admin_key_env=None),
    None,
    # The report never settles from an inferred key id (docs/architecture.md "Settling from the provider").
    types.SimpleNamespace(name="work", admin_key_env="WORK_ADMIN_KEY", api_key_id=None),
])
def test_an_account_without_an_admin_key_and_its_key_id_is_settled_by_reconcile(account):
    line = notices.held_open("a1", "work", 12_345_000, "stream_closed", automatic=notices.settles_automatically(account))
    assert line == (
        "Warning: attempt a1 keeps $0.012345 open on account 'work' (stream_closed); "
        "settle it with 'llm accounts reconcile a1 --cost USD --source REF' once the provider's usage shows what it cost"
    )
