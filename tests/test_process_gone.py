"""An attempt whose process is gone (docs/architecture.md "A process that is gone").

An attempt records the process that reserved it. Killed before it recorded an outcome, that
process leaves the attempt looking in flight for ever: prompts waited for it up to their bound,
and the provider's report never matched it. Another process on the same host now records it as
``cancelled``: it stays open with its whole ceiling (unknown is never zero), it is no longer
waited for, and evidence may settle it. The processes here are real, and killed with SIGKILL.
"""

import datetime as dt
import os
import subprocess
import sys

import pytest

from llm_accounts import liveness
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.ledger import Complete, Ledger, Scope
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote
from routed_helpers import attempts, killed_after_reserving, llm_cli, recorded_waits
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)  # mid credit period 2026-11
MODEL = "claude-haiku-4-5"

def row(ledger, attempt_id):
    return dict(ledger._conn.execute("SELECT * FROM attempt WHERE id = ?", (attempt_id,)).fetchone())


# Whether a process is running


def test_this_process_is_running():
    pid, token = liveness.this_process()
    assert pid == os.getpid() and token
    assert not liveness.gone(pid, token)


def test_a_process_that_exited_is_gone():
    child = subprocess.run(
        [sys.executable, "-c", "from llm_accounts import liveness; print(*liveness.this_process())"],
        capture_output=True, text=True, check=True,
    )
    pid, token = child.stdout.split()
    assert liveness.gone(int(pid), token)


def test_a_pid_running_another_process_than_the_one_recorded_is_gone():
    pid, token = liveness.this_process()
    boot, namespace, started = token.split(":")
    assert liveness.gone(pid, f"{boot}:{namespace}:{int(started) + 1}")


def test_a_process_of_an_earlier_boot_of_this_machine_is_gone(monkeypatch):
    pid, token = liveness.this_process()
    boot, namespace, started = token.split(":")
    earlier = "00000000-0000-0000-0000-000000000000"
    monkeypatch.setattr(liveness, "_boot_id", lambda: earlier)
    liveness.record_boot()  # this machine ran in that boot
    monkeypatch.setattr(liveness, "_boot_id", lambda: boot)
    assert liveness.gone(pid, f"{earlier}:{namespace}:{started}")


def test_a_process_of_a_boot_this_machine_never_ran_in_is_not_gone():
    # A clone sharing this machine's id and name: only it can tell (tests/test_same_host_name.py).
    pid, token = liveness.this_process()
    _, namespace, started = token.split(":")
    assert not liveness.gone(pid, f"00000000-0000-0000-0000-000000000000:{namespace}:{started}")


def test_a_process_of_another_pid_namespace_is_never_said_to_be_gone():
    # A container sharing the host's name: its pid means another process, or none, here.
    _, token = liveness.this_process()
    boot, namespace, started = token.split(":")
    no_such_pid = 4_194_305  # past PID_MAX_LIMIT (2 ** 22), the most pids any Linux allows
    assert liveness.gone(no_such_pid, f"{boot}:{namespace}:{started}")
    assert not liveness.gone(no_such_pid, f"{boot}:pid[1]:{started}")


@pytest.mark.parametrize("pid, token", [(None, None), (1, None), (1, ""), (1, "no-colon"), (1, "a:1"), (0, "a:b:1"),
                                        (-1, "a:b:1")])
def test_without_a_usable_record_a_process_is_never_said_to_be_gone(pid, token):
    assert not liveness.gone(pid, token)


# The ledger records, on both backends


def test_an_attempt_records_the_process_that_reserved_it(ledger_location):
    with Ledger(ledger_location) as ledger:
        ledger.reserve(Scope("conversation", "c1"), "a1", Quote(MODEL, NANO, "r", "ab" * 32),
                       [Account("alpha", "ALPHA_KEY", 10 * NANO)], now=NOW)
        recorded = row(ledger, "a1")
    assert (recorded["pid"], recorded["pid_started"]) == liveness.this_process()


def test_a_killed_process_attempt_is_recorded_cancelled_and_keeps_its_ceiling(ledger_location):
    killed_after_reserving(NOW, ledger_location, "lost-1", NANO, 10 * NANO)
    with Ledger(ledger_location) as ledger:
        assert ledger.abandoned(now=NOW) == [("lost-1", "alpha", NANO)]
        lost = row(ledger, "lost-1")
        assert (lost["state"], lost["outcome"], lost["cost_nusd"]) == ("open", "cancelled", None)
        [line] = ledger.status(now=NOW)
        assert line.open_ceiling_nusd == NANO
        assert ledger.abandoned(now=NOW) == []  # recorded once


def test_an_attempt_of_a_running_process_stays_in_flight(ledger_location):
    with Ledger(ledger_location) as ledger:
        ledger.reserve(Scope("conversation", "c1"), "mine", Quote(MODEL, NANO, "r", "ab" * 32),
                       [Account("alpha", "ALPHA_KEY", 10 * NANO)], now=NOW)
        assert ledger.abandoned(now=NOW) == []
        assert row(ledger, "mine")["outcome"] is None


def test_an_attempt_of_another_host_is_left_to_that_host(ledger_location):
    killed_after_reserving(NOW, ledger_location, "theirs", NANO, 10 * NANO, host="other-machine")
    with Ledger(ledger_location) as ledger:
        assert ledger.abandoned(now=NOW) == []
        assert row(ledger, "theirs")["outcome"] is None


def test_a_settled_attempt_of_a_gone_process_is_left_as_it_is(ledger_location):
    killed_after_reserving(NOW, ledger_location, "done", NANO, 10 * NANO)
    with Ledger(ledger_location) as ledger:
        ledger.settle("done", Complete(1_000, {"input_tokens": 1, "output_tokens": 1}, MODEL), now=NOW)
        assert ledger.abandoned(now=NOW) == []
        assert row(ledger, "done")["outcome"] == "complete"


# A prompt no longer waits for it


@pytest.fixture
def waits(monkeypatch):
    return recorded_waits(monkeypatch, NOW)


def test_a_prompt_does_not_wait_for_the_ceiling_of_a_killed_process(accounts, ledger_path, waits):
    from llm_accounts.ladder import quote_for

    ceiling = quote_for(MODEL).ceiling_nusd
    budget = ceiling + ceiling // 2  # room for one ceiling
    save_accounts_file([Account("alpha", "ALPHA_KEY", budget)], None)
    killed_after_reserving(NOW, ledger_path, "lost-1", ceiling, budget)
    result = llm_cli("-m", f"claude-routed/{MODEL}", "-o", "wait", "30", "hello")
    assert result.exit_code == 1
    assert waits == []  # before: polls until the 30 s bound, then "held by 1 attempt in flight"
    assert "attempt lost-1 keeps" in result.output and "the process that sent it is gone" in result.output
    [error] = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert error.startswith("Error: budget_exhausted") and "held by 1 attempt left open (unknown outcome)" in error
    assert [(row["id"], row["outcome"], row["state"]) for row in attempts(ledger_path)] == [("lost-1", "cancelled", "open")]


def row_outcome(ledger_path, attempt_id):
    [found] = [row["outcome"] for row in attempts(ledger_path) if row["id"] == attempt_id]
    return found


def test_a_ceiling_whose_process_runs_is_still_in_flight(accounts, ledger_path, waits):
    from llm_accounts.ladder import quote_for

    ceiling = quote_for(MODEL).ceiling_nusd
    budget = ceiling + ceiling // 2
    save_accounts_file([Account("alpha", "ALPHA_KEY", budget)], None)
    with Ledger(ledger_path) as ledger:  # this process: running
        ledger.reserve(Scope("conversation", "c0"), "mine", Quote(MODEL, ceiling, "r", "ab" * 32),
                       [Account("alpha", "ALPHA_KEY", budget)], now=NOW)
    result = llm_cli("-m", f"claude-routed/{MODEL}", "-o", "wait", "0", "hello")
    assert result.exit_code == 1
    assert row_outcome(ledger_path, "mine") is None
    [error] = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert "held by 1 attempt in flight" in error


# Whether a process is running: the cases a token moved by one does not show (issue 33, point 10)

_REPORT_THEN_WAIT = "from llm_accounts import liveness; import sys; print(*liveness.this_process(), flush=True); sys.stdin.read()"


def _running_child():
    """A real child process that reports its ``(pid, token)`` and runs until its stdin closes."""
    child = subprocess.Popen([sys.executable, "-c", _REPORT_THEN_WAIT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid, token = child.stdout.readline().split()
    return child, int(pid), token


def test_a_zombie_is_gone():
    child, pid, token = _running_child()
    try:
        assert not liveness.gone(pid, token)
        child.stdin.close()
        # Wait for its exit without reaping it: it stays a zombie, its /proc entry and start time
        # unchanged, until child.wait() below.
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        assert liveness._started(pid)[1] == "Z"
        assert liveness.gone(pid, token)
    finally:
        child.wait()


def test_a_pid_now_held_by_another_real_process_is_gone():
    # Two processes running at once: the first's token under the second's pid is what a pid reused
    # after the first exited looks like.
    first, first_pid, first_token = _running_child()
    second, second_pid, second_token = _running_child()
    try:
        assert liveness._started(first_pid)[0] != liveness._started(second_pid)[0]
        assert not liveness.gone(second_pid, second_token)
        assert liveness.gone(second_pid, first_token)
    finally:
        for child in (first, second):
            child.stdin.close()
            child.wait()


def test_another_users_process_hidden_by_hidepid_is_not_gone(monkeypatch):
    # With /proc mounted hidepid=2 (proc(5)), another user's /proc/<pid> cannot be read, as if
    # absent, and kill(pid, 0) answers EPERM: the process runs. Simulated here, since the test
    # cannot run as another user.
    pid, token = liveness.this_process()

    def not_permitted(target, signal):
        assert (target, signal) == (pid, 0)
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(liveness, "_started", lambda target: None)
    monkeypatch.setattr(liveness.os, "kill", not_permitted)
    assert not liveness.gone(pid, token)


def test_a_pid_without_a_proc_entry_that_the_kernel_does_not_know_is_gone(monkeypatch):
    # The counterpart: no /proc entry and kill(pid, 0) answers ESRCH.
    pid, token = liveness.this_process()

    def no_such_process(target, signal):
        raise ProcessLookupError(3, "No such process")

    monkeypatch.setattr(liveness, "_started", lambda target: None)
    monkeypatch.setattr(liveness.os, "kill", no_such_process)
    assert liveness.gone(pid, token)


def test_a_process_the_kernel_knows_without_a_readable_proc_entry_is_not_gone(monkeypatch):
    pid, token = liveness.this_process()
    monkeypatch.setattr(liveness, "_started", lambda target: None)
    assert not liveness.gone(pid, token)  # kill(pid, 0) succeeds: it runs


@pytest.mark.parametrize("pid", [0, -1, -99_999_999])
def test_a_pid_that_is_not_positive_is_never_said_to_be_gone(pid):
    # kill() with such a pid signals a process group or every process, and a group that does not
    # exist answers ESRCH: nothing about the attempt's process can be learnt from it.
    _, token = liveness.this_process()
    assert not liveness.gone(pid, token)
