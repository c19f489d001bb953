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
    # Every process waits for a go file, so their read-modify-writes overlap.
    go = user_path / "go"
    starter = (
        "import os, sys, time\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.001)\n"
        "from llm.cli import cli\n"
        "sys.argv = ['llm'] + sys.argv[1:]\n"
        "cli()\n"
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", starter, *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for argv in argvs
    ]
    go.write_text("")
    outputs = [process.communicate(timeout=120)[0].decode() for process in processes]
    go.unlink()
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
