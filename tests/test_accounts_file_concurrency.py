"""Concurrent edits of accounts.json never lose a declaration: eight real `llm accounts add`
processes at once, then as many `remove`, against one llm user directory."""

import json
import os
import subprocess
import sys

ACCOUNTS = [f"acct{i}" for i in range(8)]


def run_at_once(user_path, argvs):
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_ACCOUNTS"}
    env["LLM_USER_PATH"] = str(user_path)
    # Every process imports llm, says it is ready, then blocks on its stdin until all are ready,
    # so their read-modify-writes overlap. Waiting is on pipes, never a polling loop: eight
    # spinning processes are what made this test time out on a loaded machine.
    starter = (
        "import sys\n"
        "from llm.cli import cli\n"
        "sys.stderr.write('ready\\n'); sys.stderr.flush()\n"
        "sys.stdin.read(1)\n"
        "sys.argv = ['llm'] + sys.argv[1:]\n"
        "cli()\n"
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", starter, *argv], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        for argv in argvs
    ]
    assert [process.stderr.readline() for process in processes] == [b"ready\n"] * len(argvs)
    for process in processes:
        process.stdin.write(b"g")
        process.stdin.flush()
    outputs = [b"".join(process.communicate(timeout=300)).decode() for process in processes]
    assert [process.returncode for process in processes] == [0] * len(argvs), outputs


def declared(user_path):
    return sorted(a["name"] for a in json.loads((user_path / "accounts.json").read_text()).get("accounts", []))


def test_eight_concurrent_adds_are_all_kept(user_path):
    run_at_once(
        user_path,
        [["accounts", "add", name, "--key-env", f"{name.upper()}_KEY", "--budget", "5"] for name in ACCOUNTS],
    )
    assert declared(user_path) == ACCOUNTS


def test_eight_concurrent_removes_all_take_effect(user_path):
    from llm_accounts.declarations import Account, save_accounts_file
    from llm_accounts.money import NANO

    save_accounts_file([Account(name, f"{name.upper()}_KEY", 5 * NANO) for name in ACCOUNTS + ["kept"]], None)
    run_at_once(user_path, [["accounts", "remove", name] for name in ACCOUNTS])
    assert declared(user_path) == ["kept"]
