"""Two machines with one host name (issue 33 point 3; docs/architecture.md "A process that is
gone", "Failure classes and health").

Cloned VMs of a PostgreSQL fleet keep one ``gethostname()``. An attempt recorded only the name,
so each machine took the other's live attempts for its own, found their boot id not its own, and
recorded them ``cancelled`` while they ran. A machine is now named by its host name and a short
id of the machine (``/etc/machine-id``, else an id generated once in the llm user directory), and
a process of an earlier boot is gone only when this machine (this llm user directory) ran in that
boot: a clone that shares the machine id and the disk never judges the other's attempts.

Each machine here is a real process with its own llm user directory, its own boot id and its own
machine id file (set in the process before the ledger is opened); both run on one real host, so
they share its host name. Each test runs on both ledger backends.
"""

import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)
BOOT_X = "11111111-1111-4111-8111-111111111111"
BOOT_X_AGAIN = "33333333-3333-4333-8333-333333333333"
BOOT_Y = "22222222-2222-4222-8222-222222222222"

MACHINE = """
import datetime as dt, json, sys, time
from llm_accounts import liveness
user_dir, machine_id_file, boot, location, action, attempt_id = sys.argv[1:]
liveness._boot_id = lambda: boot  # this simulated machine's boot
liveness.MACHINE_ID_FILES = (machine_id_file,)
from llm_accounts.declarations import Account
from llm_accounts.ledger import Ledger, Scope
from llm_accounts.pricing.prices import Quote
ledger = Ledger(location)
if action == "reserve":
    ledger.reserve(Scope("conversation", attempt_id), attempt_id, Quote("claude-haiku-4-5", 10**9, "r", "ab" * 32),
                   [Account("alpha", "ALPHA_KEY", 10 * 10**9)], now=dt.datetime.fromisoformat(%r))
    print(json.dumps({"reserved": attempt_id, "host": ledger.host}), flush=True)
    time.sleep(300)
else:
    print(json.dumps({"abandoned": [list(row) for row in ledger.abandoned(now=dt.datetime.fromisoformat(%r))],
                      "host": ledger.host}), flush=True)
""" % (NOW.isoformat(), NOW.isoformat())


class Machine:
    """A simulated machine: its llm user directory, its machine id file and its boot id."""

    def __init__(self, root, name, machine_id, boot):
        self.user_dir = root / f"{name}-llm-user"
        self.user_dir.mkdir(exist_ok=True)
        self.machine_id_file = root / f"{name}-machine-id"
        if machine_id is None:
            self.machine_id_file = root / "no-such-machine-id"  # an id is generated in the user dir
        else:
            self.machine_id_file.write_text(machine_id + "\n")
        self.boot = boot

    def rebooted(self, boot):
        again = Machine.__new__(Machine)
        again.__dict__.update(self.__dict__, boot=boot)
        return again

    def _argv(self, location, action, attempt_id=""):
        argv = [sys.executable, "-c", MACHINE, str(self.user_dir), str(self.machine_id_file), self.boot, str(location),
                action, attempt_id]
        env = {**os.environ, "LLM_USER_PATH": str(self.user_dir)}
        return argv, env

    def reserve_and_stay(self, location, attempt_id):
        """A live process of this machine that reserved ``attempt_id`` and runs on."""
        argv, env = self._argv(location, "reserve", attempt_id)
        child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = child.stdout.readline()  # waits for the event, not for a time
        if not line:
            child.wait(30)
            raise AssertionError(child.stderr.read())
        child.host = json.loads(line)["host"]
        return child

    def abandoned(self, location):
        """What a process of this machine records as cancelled (``Ledger.abandoned``)."""
        argv, env = self._argv(location, "abandoned")
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def stop(child):
    child.send_signal(signal.SIGKILL)
    child.wait(30)


def outcome(location, attempt_id):
    from llm_accounts.ledger import Ledger

    with Ledger(location) as ledger:
        [row] = [r for r in ledger.attempts() if r["id"] == attempt_id]
        return row["state"], row["outcome"]


@pytest.mark.parametrize("same_machine_id", [False, True], ids=["own-machine-id", "cloned-machine-id"])
def test_two_machines_with_one_host_name_never_cancel_each_others_live_attempts(ledger_location, tmp_path, same_machine_id):
    x = Machine(tmp_path, "x", "a" * 32, BOOT_X)
    y = Machine(tmp_path, "y", ("a" if same_machine_id else "b") * 32, BOOT_Y)
    theirs = y.reserve_and_stay(ledger_location, "theirs")
    mine = x.reserve_and_stay(ledger_location, "mine")
    try:
        assert x.abandoned(ledger_location)["abandoned"] == []
        assert y.abandoned(ledger_location)["abandoned"] == []
        assert outcome(ledger_location, "theirs") == ("open", None)
        assert outcome(ledger_location, "mine") == ("open", None)
    finally:
        stop(theirs)
        stop(mine)


def test_a_machine_names_itself_by_host_name_and_a_short_id_of_the_machine(ledger_location, tmp_path):
    x = Machine(tmp_path, "x", "a" * 32, BOOT_X)
    y = Machine(tmp_path, "y", "b" * 32, BOOT_Y)
    hosts = [m.abandoned(ledger_location)["host"] for m in (x, y, x)]
    name = socket.gethostname()
    assert hosts[0] == hosts[2] != hosts[1]
    for host in hosts:
        prefix, short = host.rsplit(":", 1)
        assert prefix == name and len(short) == 12 and all(c in "0123456789abcdef" for c in short)
    # The machine id itself is never recorded, only a digest of it.
    assert "a" * 12 not in hosts[0]


def test_without_a_readable_machine_id_an_id_is_generated_once_in_the_user_dir(ledger_location, tmp_path):
    x = Machine(tmp_path, "x", None, BOOT_X)
    first = x.abandoned(ledger_location)["host"]
    assert x.abandoned(ledger_location)["host"] == first
    generated = x.user_dir / "accounts-machine-id"
    assert generated.stat().st_mode & 0o777 == 0o600
    # Another machine (another user directory) generates its own.
    assert Machine(tmp_path, "y", None, BOOT_Y).abandoned(ledger_location)["host"] != first


def test_after_a_restart_a_machine_still_cancels_its_own_attempts_of_the_earlier_boot(ledger_location, tmp_path):
    x = Machine(tmp_path, "x", "a" * 32, BOOT_X)
    before = x.reserve_and_stay(ledger_location, "before-restart")
    stop(before)  # the machine went down with it
    [(attempt_id, account, _)] = x.rebooted(BOOT_X_AGAIN).abandoned(ledger_location)["abandoned"]
    assert (attempt_id, account) == ("before-restart", "alpha")
    assert outcome(ledger_location, "before-restart") == ("open", "cancelled")


def test_a_clone_never_cancels_attempts_of_a_boot_only_the_other_clone_ran(ledger_location, tmp_path):
    # The clones share the disk up to the clone (machine id and user directory); each then boots
    # on its own. y's process is gone, but only y may say so.
    x = Machine(tmp_path, "x", "a" * 32, BOOT_X)
    y = Machine(tmp_path, "y", "a" * 32, BOOT_Y)
    gone = y.reserve_and_stay(ledger_location, "clone-y")
    stop(gone)
    assert x.abandoned(ledger_location)["abandoned"] == []
    assert outcome(ledger_location, "clone-y") == ("open", None)
    assert [row[0] for row in y.rebooted(BOOT_X_AGAIN).abandoned(ledger_location)["abandoned"]] == ["clone-y"]


def test_an_attempt_recorded_under_the_bare_host_name_is_another_machines(ledger_location, tmp_path):
    # A ledger written before machines had ids: its attempts name the host alone. Nothing says
    # which machine that was, so none is judged.
    from routed_helpers import killed_after_reserving

    killed_after_reserving(NOW, ledger_location, "old-style", 10**9, 10 * 10**9, host=socket.gethostname())
    x = Machine(tmp_path, "x", "a" * 32, BOOT_X)
    assert x.abandoned(ledger_location)["abandoned"] == []
    assert outcome(ledger_location, "old-style") == ("open", None)


def test_the_list_of_boots_keeps_only_the_newest(monkeypatch, user_path):
    from llm_accounts import liveness

    monkeypatch.setattr(liveness, "BOOTS_KEPT", 3)
    boots = [f"{n:08x}-0000-4000-8000-000000000000" for n in range(5)]
    for boot in boots:
        monkeypatch.setattr(liveness, "_boot_id", lambda boot=boot: boot)
        liveness.record_boot()
    listed = (user_path / "accounts-boots").read_text().split()
    assert listed == boots[-3:]
    assert (user_path / "accounts-boots").stat().st_mode & 0o777 == 0o600
    assert liveness.ran_in(boots[-1]) and not liveness.ran_in(boots[0])


def test_a_fifo_in_place_of_the_list_of_boots_neither_hangs_nor_is_replaced(monkeypatch, user_path):
    from llm_accounts import liveness

    os.mkfifo(user_path / "accounts-boots")
    monkeypatch.setattr(liveness, "_boot_id", lambda: "44444444-4444-4444-8444-444444444444")
    liveness.record_boot()  # returns at once: nothing reads the FIFO
    assert not liveness.ran_in("44444444-4444-4444-8444-444444444444")
    import stat

    assert stat.S_ISFIFO((user_path / "accounts-boots").lstat().st_mode)
