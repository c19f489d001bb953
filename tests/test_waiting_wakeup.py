"""Waiting without polling (docs/architecture.md "Waiting for room"; issue 32 point 2): a prompt
waiting for room sleeps until a write that frees room wakes it, from any process (on SQLite a
datagram to each waiter socket beside the ledger, on PostgreSQL ``LISTEN``/``NOTIFY``), and a
process says it waits at most once a second however many of its prompts wait.
"""

import os
import socket
import subprocess
import sys
import time

import pytest

from llm_accounts import room
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.ledger import Ledger, NotSent, Scope, wakeup
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote

ROUTED = "claude-routed"  # its default ceiling is $3.828 (docs/pricing.md)

# The waiting prompt: llm itself, logging each ledger call (docs/security.md "Logging"), with the
# fallback timer out of reach, so only a wake-up can end its wait.
CHILD = """
import logging, sys
from llm_accounts import room
room.FALLBACK_S = 3600.0
logging.basicConfig(level=logging.WARNING, format="%(message)s")
logging.getLogger("llm_accounts.ledger").setLevel(logging.DEBUG)
from llm.cli import cli
sys.argv = ["llm", *sys.argv[1:]]
cli()
"""


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


# The notice: one line per prompt, at most one a second per process


def test_the_first_waiting_prompt_says_so():
    board = room.NoticeBoard(Clock())
    board.start("p1")
    assert board.line("p1", "waiting for $5.00") == "waiting for $5.00"


def test_a_line_covers_every_prompt_waiting_then_and_says_how_many():
    board = room.NoticeBoard(Clock())
    for key in ("p1", "p2", "p3"):
        board.start(key)
    assert board.line("p2", "waiting for $5.00") == "waiting for $5.00; 3 prompts of this process are waiting"
    assert [board.line(key, "waiting") for key in ("p1", "p3", "p2")] == ["", "", ""]


def test_a_prompt_that_starts_waiting_within_a_second_of_a_line_is_told_later():
    clock = Clock()
    board = room.NoticeBoard(clock)
    board.start("p1")
    board.line("p1", "waiting")
    clock.now += 0.5
    board.start("p2")
    assert board.line("p2", "waiting") is None
    clock.now += 0.5
    assert board.line("p2", "waiting") == "waiting; 2 prompts of this process are waiting"


def test_a_batch_of_a_hundred_prompts_prints_at_most_a_line_a_second():
    clock = Clock()
    board = room.NoticeBoard(clock)
    printed = []
    told = set()
    for tick in range(120):  # a prompt starts waiting every 50 ms for 5 s; each asks at every tick
        if tick < 100:
            board.start(f"p{tick}")
        for key in [f"p{i}" for i in range(min(tick + 1, 100)) if f"p{i}" not in told]:
            line = board.line(key, "waiting")
            if line is not None:
                told.add(key)
                if line:
                    printed.append((clock.now, line))
        clock.now += 0.05
    assert told == {f"p{i}" for i in range(100)}
    assert len(printed) == 6  # at 0, 1, 2, 3, 4 and 5 s
    assert printed[-1][1] == "waiting; 100 prompts of this process are waiting"
    assert all(later - earlier >= room.NOTICE_EVERY_S for (earlier, _), (later, _) in zip(printed, printed[1:]))


def test_a_prompt_that_stopped_waiting_is_no_longer_counted():
    clock = Clock()
    board = room.NoticeBoard(clock)
    board.start("p1")
    board.start("p2")
    board.line("p1", "waiting")
    board.stop("p1")
    board.stop("p2")
    clock.now += 1
    board.start("p3")
    assert board.line("p3", "waiting") == "waiting"


# The SQLite wake-up's sockets


def test_a_signal_reaches_every_waiter_socket_in_the_directory(tmp_path):
    folder = tmp_path / "ledger.db-waiters"
    folder.mkdir(mode=0o700)
    receivers = []
    for name in ("a.sock", "b.sock"):
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        receiver.bind(str(folder / name))
        receivers.append(receiver)
    assert wakeup.send_all(str(folder)) == 2
    assert [r.recv(8) for r in receivers] == [b"\0", b"\0"]
    for r in receivers:
        r.close()


def test_a_socket_whose_process_is_gone_is_removed_by_the_next_signal(tmp_path):
    folder = tmp_path / "ledger.db-waiters"
    folder.mkdir(mode=0o700)
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stale.bind(str(folder / "gone.sock"))
    stale.close()  # its file stays, as a killed process's does
    assert wakeup.send_all(str(folder)) == 0
    assert os.listdir(folder) == []


def test_a_signal_never_blocks_on_a_waiter_that_does_not_read(tmp_path):
    folder = tmp_path / "ledger.db-waiters"
    folder.mkdir(mode=0o700)
    deaf = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    deaf.bind(str(folder / "deaf.sock"))
    sent = sum(wakeup.send_all(str(folder)) for _ in range(2000))  # far past its queue
    assert 0 < sent < 2000
    deaf.close()


def test_a_waiters_directory_others_may_enter_is_not_used(tmp_path):
    ledger = tmp_path / "ledger.db"
    Ledger(ledger).close()
    folder = tmp_path / "ledger.db-waiters"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    with Ledger(ledger) as opened:
        assert wakeup.subscribe(opened) is None


def test_a_subscription_is_woken_by_a_signal_after_its_mark(tmp_path):
    with Ledger(tmp_path / "ledger.db") as ledger:
        waiting = wakeup.subscribe(ledger)
        try:
            waiting.mark()
            wakeup.signal(ledger)
            assert waiting.wait(60) is True
            waiting.mark()
            assert waiting.wait(0) is False
        finally:
            waiting.close()
        assert os.listdir(tmp_path / "ledger.db-waiters") == []  # its socket went with it


# Across processes: a prompt waiting in one process is woken by a settlement in another


def hold(location, account):
    """An attempt in flight holding $7.00 of ``account``'s $10.00 (as another prompt's would)."""
    with Ledger(location) as ledger:
        quote = Quote("claude-sonnet-4-5-20250929", 7 * NANO, "2026-11-01", "ab" * 32)
        ledger.reserve(Scope("conversation", "holder"), "held-1", quote, [account])


def until(predicate, what, timeout=120):
    """Wait for an event another process causes (not for a length of time)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def waiting_prompt(location):
    env = dict(os.environ, LLM_ACCOUNTS_LEDGER=str(location))
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, "-m", ROUTED, "--no-log", "Hello"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def reservations(stderr):
    return [line.split()[2] for line in stderr.splitlines() if line.startswith("ledger reserve ")]


def woken_by_another_process(location, accounts, listening):
    alpha = Account("alpha", "ALPHA_KEY", 10 * NANO)
    save_accounts_file([alpha], None)
    hold(location, alpha)  # $7.00 + $3.828 > $10.00: no room until it settles
    prompt = waiting_prompt(location)
    try:
        until(lambda: listening() or prompt.poll() is not None, "the prompt to listen for wake-ups")
        with Ledger(location) as ledger:
            assert [row["id"] for row in ledger._conn.execute("SELECT id FROM waiter").fetchall()] != []
            assert ledger.settle("held-1", NotSent()) == "settled"
        out, err = prompt.communicate(timeout=120)
    finally:
        if prompt.poll() is None:
            prompt.kill()
            prompt.wait()
    assert prompt.returncode == 0, err[-2000:]
    assert out.strip()
    # Refused, refused once more after it began to listen, and admitted once woken: never a poll.
    seen = reservations(err)
    assert seen[-1] == "committed" and set(seen[:-1]) == {"budget_exhausted"} and len(seen) <= 3, seen
    assert "waiting for" not in err  # its wait ended before a second had passed without a wake-up
    assert len([r for r in accounts.requests if r["path"] == "/v1/messages"]) == 1


def test_a_prompt_waiting_on_a_sqlite_ledger_is_woken_by_a_settlement_in_another_process(accounts, ledger_path):
    folder = f"{ledger_path}{wakeup.SUFFIX}"

    def listening():
        return os.path.isdir(folder) and any(name.endswith(".sock") for name in os.listdir(folder))

    woken_by_another_process(ledger_path, accounts, listening)
    assert os.listdir(folder) == []  # its socket went when it stopped waiting


def test_a_prompt_waiting_on_a_postgresql_ledger_is_woken_by_a_settlement_in_another_process(accounts, pg_url):
    import psycopg

    def listening():
        with psycopg.connect(pg_url, autocommit=True) as conn:
            return conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'llm-accounts waiting' AND query LIKE 'LISTEN%'"
            ).fetchone()[0] > 0

    woken_by_another_process(pg_url, accounts, listening)



# In one process, the wake-up passes on as each waiting prompt is admitted


def test_an_admitted_prompt_stops_waiting_at_once_so_the_wake_up_passes_on(user_path, ledger_path, monkeypatch):
    """A prompt admitted after waiting leaves the process's wake-up queue when it is admitted, not
    when its answer ends: a wake-up then goes to the prompt behind it, for the room that is left
    (ledger/wakeup.py ``Hub``). Seen while the admitted prompt's answer is still streaming."""
    import asyncio
    import json as json_module

    import llm

    from llm_accounts.pricing.prices import quote
    from llm_accounts.standin import StandIn

    key = "sk-ant-api03-" + "b" * 93 + "AA"
    ceiling = quote(json_module.dumps({"model": "claude-haiku-4-5-20251001", "max_tokens": 100,
                                       "messages": [{"role": "user", "content": "x"}]}).encode()).ceiling_nusd
    (user_path / "keys.json").write_text(json_module.dumps({"ALPHA_KEY": key}))
    save_accounts_file([Account("alpha", "ALPHA_KEY", ceiling + ceiling // 2)], None)  # one ceiling at a time
    monkeypatch.setattr(room, "FALLBACK_S", 3600.0)
    with StandIn({"keys": [{"label": "alpha", "key": key, "behaviour": "slow", "delay": 0.2}]}) as server:
        monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", server.base_url)
        subscribed_while_streaming = []

        async def one(i):
            chunks = 0
            async for _ in llm.get_async_model("claude-routed/claude-haiku-4-5").prompt(f"Prompt {i}", max_tokens=100):
                chunks += 1
                if chunks == 2:
                    subscribed_while_streaming.append(sum(len(hub.queue) for hub in wakeup._hubs.values()))
            return chunks

        async def batch():
            return await asyncio.gather(one(0), one(1))

        assert all(asyncio.run(batch()))
    assert subscribed_while_streaming == [0, 0]
