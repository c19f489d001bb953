"""``llm accounts browse``: the Datasette child's environment holds no key, judged by value as
well as by name."""

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import assert_no_key_material, make_key
from llm_accounts import browse
from llm_accounts.ledger import Ledger

DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
PROC = pathlib.Path("/proc/self/task").exists()


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for(url, process, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"browse exited with {process.returncode}")
        try:
            with DIRECT.open(url, timeout=2) as response:
                return response.read().decode()
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"{url} did not answer")


def descendants(pid):
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        try:
            children = pathlib.Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        found += [int(child) for child in children]
        queue += [int(child) for child in children]
    return found


def declare(environ, *accounts):
    environ["ANTHROPIC_ACCOUNTS"] = json.dumps(
        [{"name": name, "key_env": key_env, "budget_usd": "50"} for name, key_env in accounts]
    )


@pytest.mark.skipif(not PROC, reason="needs /proc to read the child's environment")
def test_browse_child_holds_no_run_of_a_declared_key_under_any_name(ledger_path, canary_key):
    Ledger(ledger_path).close()
    env = dict(os.environ)
    declare(env, ("alpha", "ALPHA_ANTHROPIC"))
    env["ALPHA_ANTHROPIC"] = canary_key  # the declared key_env
    env["NOTES"] = f"pasted {canary_key} here"  # the whole key, innocently named
    env["SNIPPET"] = f"x{canary_key[20:60]}x"  # a stretch of it without its sk-ant prefix
    env["KEPT_SETTING"] = "plain value"
    port = free_port()
    llm = pathlib.Path(sys.executable).parent / "llm"
    process = subprocess.Popen(
        [str(llm), "accounts", "browse", "--port", str(port)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        # Once Datasette answers it has long been exec'd, so /proc shows its own environment.
        wait_for(f"http://127.0.0.1:{port}/-/llm-accounts", process)
        children = descendants(process.pid)
        assert children
        environs = [pathlib.Path(f"/proc/{child}/environ").read_bytes().decode(errors="replace") for child in children]
    finally:
        process.terminate()  # browse passes it on to Datasette
        try:
            output = process.communicate(timeout=15)[0].decode(errors="replace")
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    for text in environs:
        names = {entry.partition("=")[0] for entry in text.split("\0")}
        assert "KEPT_SETTING" in names  # the environment was read, and ordinary values stay
        assert not {"ALPHA_ANTHROPIC", "NOTES", "SNIPPET"} & names
        assert_no_key_material(text, canary_key)
    assert_no_key_material(output, canary_key)


def captured_child_environment(monkeypatch, ledger_path, environ):
    """Run browse() on the real path up to subprocess.Popen and return the env it was given."""
    Ledger(ledger_path).close()
    seen = {}

    class Child:
        def __init__(self, command, env):
            seen.update(env)

        def wait(self):
            return 0

    monkeypatch.setattr(browse.subprocess, "Popen", Child)
    assert browse.browse(ledger_path, environ=environ, echo=lambda text: None) == 0
    return seen


def test_browse_child_drops_key_shaped_values_in_any_case(monkeypatch, ledger_path):
    environ = {"PATH": "/usr/bin"}
    declare(environ)
    monkeypatch.setenv("ANTHROPIC_ACCOUNTS", environ["ANTHROPIC_ACCOUNTS"])
    environ["LOWER"] = "token sk-ant-" + "q" * 30
    environ["UPPER"] = "SK-ANT-" + "Q" * 30
    environ["MIXED"] = "prefix Sk-AnT-zz"
    env = captured_child_environment(monkeypatch, ledger_path, environ)
    assert env == {"PATH": "/usr/bin", "ANTHROPIC_ACCOUNTS": environ["ANTHROPIC_ACCOUNTS"]}


def test_browse_compares_only_keys_that_resolve(monkeypatch, ledger_path):
    alpha_key = make_key()
    environ = {"PATH": "/usr/bin", "ALPHA_ANTHROPIC": alpha_key, "COPY": "z" + alpha_key[30:50]}
    declare(environ, ("alpha", "ALPHA_ANTHROPIC"), ("beta", "BETA_ANTHROPIC"))  # beta's key is nowhere
    monkeypatch.setenv("ANTHROPIC_ACCOUNTS", environ["ANTHROPIC_ACCOUNTS"])
    env = captured_child_environment(monkeypatch, ledger_path, environ)
    assert sorted(env) == ["ANTHROPIC_ACCOUNTS", "PATH"]
    assert_no_key_material("\n".join(env.values()), alpha_key)


def test_browse_on_a_busy_port_says_the_port_is_taken_and_starts_nothing(ledger_path, monkeypatch):
    from click.testing import CliRunner

    from llm_accounts.cli import accounts

    Ledger(ledger_path).close()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        started = []
        monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: started.append(a))
        result = CliRunner().invoke(accounts, ["browse", "--port", str(port)])
    assert result.exit_code == 1
    assert result.output == (
        f"Error: declaration_invalid: --port: 127.0.0.1:{port} is already in use by another program; "
        f"choose a free one, for example --port {port + 1}\n"
    )
    assert started == []


def test_browse_child_holds_no_admin_key_variable_nor_a_run_of_its_value(monkeypatch, ledger_path):
    admin = "zz" + "Q9r" * 12  # not shaped like an API key, so only its declaration says it is one
    monkeypatch.setenv("ANTHROPIC_ACCOUNTS", json.dumps(
        [{"name": "alpha", "key_env": "ALPHA_ANTHROPIC", "budget_usd": "50", "admin_key_env": "ORG_ADMIN"}]
    ))
    environ = {
        "PATH": os.environ.get("PATH", ""),
        "ORG_ADMIN": admin,
        "COPIED": f"x{admin[3:20]}x",
        "KEPT_SETTING": "plain value",
    }
    seen = captured_child_environment(monkeypatch, ledger_path, environ)
    assert "KEPT_SETTING" in seen
    assert not {"ORG_ADMIN", "COPIED"} & set(seen)
