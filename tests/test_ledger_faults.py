"""A routed prompt on a ledger it cannot use refuses before sending, in one line, and leaves
the file as it was (docs/architecture.md "Ledger"; docs/reliability.md "Ledger faults").

tests/test_ledger_corrupt.py covers random bytes, bytes after the header, a zero-byte file and
schema text that is not UTF-8 for prompts and every command; tests/test_ledger_file.py covers an
unknown version and a held lock at the ledger's API. Here, for a prompt: a truncated ledger, a
bad header, corrupted pages behind an intact schema page, an unknown ``user_version``, a held
lock, a read-only file and directory, and a full disk (a file-size limit, and a small tmpfs where
this machine lets a private mount namespace mount one).
"""

import datetime as dt
import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner
from llm.cli import cli

from llm_accounts import ledger as ledger_module
from llm_accounts.declarations import Account
from llm_accounts.ledger import Complete, Ledger, Scope
from llm_accounts.pricing.prices import Quote
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)
PAGE = 4096


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """A ledger holding a few hundred settled attempts, so it spans many pages; built once."""
    path = tmp_path_factory.mktemp("template") / "accounts-ledger.db"
    alpha = Account("alpha", "ALPHA_KEY", 20 * 10**9)
    with Ledger(path) as ledger:
        for n in range(300):
            quote = Quote("claude-haiku-4-5", 1000, "anthropic-2026-11-29", hashlib.sha256(b"%d" % n).hexdigest())
            ledger.reserve(Scope("conversation", f"c{n}"), f"a{n}", quote, [alpha], now=NOW)
            ledger.settle(f"a{n}", Complete(10, {"input_tokens": 1, "output_tokens": 1}, "claude-haiku-4-5"), now=NOW)
    assert path.stat().st_size > 20 * PAGE
    return path


@pytest.fixture
def filled(accounts, ledger_path, user_path, template, existing_logs_db):
    """The ``accounts`` ledger, a copy of ``template``. llm's own logs.db is already migrated
    (tests/llm_logs.py), so a child's file-system faults meet only the ledger."""
    ledger_path.parent.mkdir(mode=0o700)
    shutil.copy(template, ledger_path)
    return ledger_path


def digests(directory):
    """Every file beside the ledger and its bytes' digest: what "left as it was" compares. SQLite's
    shared-memory index (``-shm``) and an empty write-ahead log (``-wal``) hold no row: a process
    that opened the ledger may leave them (docs/reliability.md "Ledger faults")."""
    found = {}
    for name in sorted(os.listdir(directory)):
        data = (directory / name).read_bytes()
        if not (name.endswith("-shm") or (name.endswith("-wal") and not data)):
            found[name] = hashlib.sha256(data).hexdigest()
    return found


def prompt():
    return CliRunner().invoke(cli, ["--no-log", "-m", "claude-routed/claude-haiku-4-5", "hi"])


def assert_refused_in_one_line(result, code, accounts, before, ledger_path):
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert len(result.output.splitlines()) == 1, result.output
    assert result.output.startswith(f"Error: {code}: ")
    assert accounts.requests == []  # refused before sending
    assert digests(ledger_path.parent) == before


def truncated(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def bad_magic(path):
    data = bytearray(path.read_bytes())
    data[0:16] = b"SQLite format 4\x00"
    path.write_bytes(bytes(data))


def bad_page_size(path):
    data = bytearray(path.read_bytes())
    data[16:18] = (1000).to_bytes(2, "big")  # not a power of two: no SQLite page size
    path.write_bytes(bytes(data))


def corrupted_pages(path):
    # Page 1 (header and schema) intact; every later page overwritten.
    data = bytearray(path.read_bytes())
    data[PAGE:] = bytes((n * 131 + 7) % 256 for n in range(len(data) - PAGE))
    path.write_bytes(bytes(data))


def unknown_version(path):
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()


@pytest.mark.parametrize("damage", [truncated, bad_magic, bad_page_size, corrupted_pages, unknown_version])
def test_a_damaged_ledger_refuses_the_prompt_before_sending_and_is_left_as_it_was(accounts, filled, damage):
    damage(filled)
    before = digests(filled.parent)
    assert_refused_in_one_line(prompt(), "ledger_unavailable", accounts, before, filled)


def test_a_lock_held_past_the_bound_refuses_the_prompt_before_sending(accounts, filled, monkeypatch):
    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_S", 0.2)
    before = digests(filled.parent)
    holder = sqlite3.connect(filled, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        result = prompt()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert_refused_in_one_line(result, "ledger_busy", accounts, before, filled)


# Read-only and full: in a child process, since the file system's refusal must be real.

CHILD = r"""
import resource, signal, sys
from click.testing import CliRunner
from llm.cli import cli
limit = int(sys.argv[1])
if limit:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
result = CliRunner().invoke(cli, ["--no-log", "-m", "claude-routed/claude-haiku-4-5", "hi"])
sys.stdout.write(result.output)
if result.exception is not None and not isinstance(result.exception, SystemExit):
    sys.stderr.write("child: " + type(result.exception).__name__ + "\n")
sys.exit(result.exit_code)
"""


def child_prompt(*, limit=0, wrap=()):
    process = subprocess.run(
        [*wrap, sys.executable, "-c", CHILD, str(limit)], capture_output=True, text=True, timeout=60, env=dict(os.environ)
    )
    return process


def in_private_mounts(script):
    """argv prefix running ``script`` (sh) first, in a private mount namespace, then the child."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script + ' && exec "$@"', "sh"]


def can_mount():
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--mount", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
                           capture_output=True)
    return probe.returncode == 0


def assert_child_refused(process, accounts, before, ledger_path):
    assert process.returncode == 1, process.stdout + process.stderr
    assert len(process.stdout.splitlines()) == 1, process.stdout
    assert process.stdout.startswith("Error: ledger_unavailable: ")
    assert "Traceback" not in process.stdout + process.stderr
    assert accounts.requests == []
    assert digests(ledger_path.parent) == before


@pytest.mark.parametrize("what", ["file", "directory"])
def test_a_read_only_ledger_refuses_the_prompt_before_sending(accounts, filled, what):
    target = filled if what == "file" else filled.parent
    before = digests(filled.parent)
    if os.geteuid() != 0:
        mode = target.stat().st_mode
        target.chmod(0o400 if what == "file" else 0o500)
        try:
            process = child_prompt()
        finally:
            target.chmod(mode)
    elif can_mount():  # root ignores modes: a read-only bind mount in a private namespace
        process = child_prompt(wrap=in_private_mounts(f"mount --bind '{target}' '{target}' && mount -o remount,bind,ro '{target}'"))
    else:
        pytest.skip("running as root without a private mount namespace: no way to make a file read-only")
    assert_child_refused(process, accounts, before, filled)


def test_a_full_disk_by_file_size_limit_refuses_the_prompt_before_sending(accounts, filled):
    before = digests(filled.parent)
    process = child_prompt(limit=1024)  # not even the write-ahead log's first frame fits
    assert_child_refused(process, accounts, before, filled)


def test_a_full_tmpfs_refuses_the_prompt_before_sending(accounts, filled, tmp_path):
    if not can_mount():
        pytest.skip("no private mount namespace to mount a small tmpfs in")
    directory = filled.parent
    saved = tmp_path / "saved.db"
    shutil.copy(filled, saved)
    before = digests(directory)
    # A tmpfs over the ledger's directory holding a copy of the ledger, then filled to the brim;
    # the child prints the ledger's digest before and after its prompt, from inside the namespace.
    script = textwrap.dedent(f"""\
        mount -t tmpfs -o size={filled.stat().st_size + 64 * 1024} tmpfs '{directory}'
        cp '{saved}' '{filled}'
        dd if=/dev/zero of='{directory}/filler' bs=4096 2>/dev/null || true
        sha256sum '{filled}' >&2
        "$@"; status=$?
        sha256sum '{filled}' >&2
        exit $status""")
    process = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", sys.executable, "-c", CHILD, "0"],
        capture_output=True, text=True, timeout=60, env=dict(os.environ),
    )
    sums = [line.split()[0] for line in process.stderr.splitlines() if line.endswith(str(filled))]
    assert len(sums) == 2 and sums[0] == sums[1] == before["accounts-ledger.db"]
    assert process.returncode == 1, process.stdout + process.stderr
    assert len(process.stdout.splitlines()) == 1 and process.stdout.startswith("Error: ledger_unavailable: ")
    assert accounts.requests == []
    assert digests(directory) == before  # the real directory, outside the namespace, untouched
