"""Under ``--async``, once the provider has answered, the answer is delivered and its settlement
carried out however long the settlement waits for a worker thread: the bound on that wait
(``ADMISSION_TIMEOUT_S``) applies only before anything is sent (docs/architecture.md "Ledger",
docs/errors.md "After delivery").

The reproduction: many async prompts in one process while another connection holds the SQLite
write lock, so every worker thread waits for it and the later settlements wait for a worker."""

import asyncio
import concurrent.futures
import sqlite3
import threading

import llm
import pytest

from hostile import MODEL, hostile_account, text_reply  # noqa: F401  (fixture)
from routed_helpers import attempts
from llm_accounts import ledger as ledger_module
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

PROMPTS = 6
WORKERS = 2  # fewer worker threads than prompts: later settlements queue for one
ADMISSION_S = 0.2
HOLD_S = 5 * ADMISSION_S  # how long the lock holder keeps the write lock (a wait, not an assertion)
LIVENESS_S = 60


class LockHolder:
    """Another connection that takes the ledger's write lock when told and releases it after
    ``HOLD_S``: longer than a worker's admission bound, shorter than SQLite's busy timeout."""

    def __init__(self, path):
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.held = threading.Event()

    def take(self):
        self.db.execute("BEGIN IMMEDIATE")
        self.held.set()
        threading.Timer(HOLD_S, self.release).start()

    def release(self):
        self.db.execute("COMMIT")
        self.db.close()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_answered_async_prompt_is_delivered_and_settled_while_workers_are_busy(
    hostile_account, ledger_path, monkeypatch, stream
):
    hostile_account.answer = lambda request: text_reply(request.stream)
    llm.get_model(MODEL).prompt("create the ledger", stream=False).text()
    holder = LockHolder(ledger_path)

    def sent():
        # Every prompt has reserved and reached the provider (the bound on waiting for a worker
        # is shortened only now); all are answered at once and their settlements queue behind
        # the lock, then behind the two workers waiting for it.
        monkeypatch.setattr(ledger_module, "ADMISSION_TIMEOUT_S", ADMISSION_S)
        holder.take()

    arrived = threading.Barrier(PROMPTS, action=sent, timeout=LIVENESS_S)

    def answer(request):
        arrived.wait()
        return text_reply(request.stream, text="Paid for.")

    hostile_account.answer = answer
    model = llm.get_async_model(MODEL)

    async def main():
        asyncio.get_running_loop().set_default_executor(concurrent.futures.ThreadPoolExecutor(WORKERS))

        async def one(i):
            return await model.prompt(f"prompt {i}", stream=stream, retries=0).text()

        return await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(PROMPTS)), return_exceptions=True), LIVENESS_S)

    results = asyncio.run(main())
    assert holder.held.is_set()
    assert results == ["Paid for."] * PROMPTS, [str(r) for r in results]
    rows = attempts(ledger_path)[1:]
    assert len(rows) == PROMPTS
    assert {(row["state"], row["outcome"]) for row in rows} == {("settled", "complete")}


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_an_async_settlement_past_the_lock_bound_delivers_the_answer_with_one_warning(
    hostile_account, ledger_path, monkeypatch, stream
):
    from click.testing import CliRunner
    from llm.cli import cli

    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_S", 0.3)
    monkeypatch.setattr(ledger_module, "ADMISSION_TIMEOUT_S", 0.3)
    holder = {}

    def answer(request):
        # Another process takes the ledger's write lock while the provider answers, and keeps it.
        holder["db"] = sqlite3.connect(ledger_path, isolation_level=None, check_same_thread=False)
        holder["db"].execute("BEGIN IMMEDIATE")
        return text_reply(request.stream, text="The answer, delivered.")

    hostile_account.answer = answer
    args = ["-m", MODEL, "hello", "--async"] + ([] if stream else ["--no-stream"])
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    holder["db"].execute("ROLLBACK")
    holder["db"].close()
    assert result.exit_code == 0, result.output
    assert "The answer, delivered." in result.output
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"]) == ("open", None)
    [warning] = [line for line in result.output.splitlines() if "ledger_busy" in line]
    assert warning.endswith(
        f"Warning: ledger_busy: the ledger {ledger_path} stayed locked by another process for 0.3 s; the attempt's outcome was not "
        f"written (the answer was delivered, but attempt {row['id']} on account 'alpha' could not be settled: it stays "
        f"open with its ceiling until 'llm accounts reconcile {row['id']}'; do not retry the prompt, it was already answered)"
    )
