"""``llm accounts browse``: Datasette on the ledger, in a child process that holds no key.

The ledger is served as an ordinary (mutable) file, never with ``-i``: SQLite's immutable mode
assumes the file never changes, and the ledger is written while you browse it. Datasette opens
it read-only for queries, and the plugin's queries never write.
"""

import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import webbrowser

from .errors import AccountsError

ALWAYS_DROPPED = ("ANTHROPIC_API_KEY",)
HOST = "127.0.0.1"
DEFAULT_PORT = 8001  # Datasette's default
DASHBOARD_PATH = "/-/llm-accounts"


def looks_like_key_variable(name):
    """Names that conventionally hold an API key, dropped even when nothing declares them."""
    upper = name.upper()
    return upper.endswith("_KEY") or "API_KEY" in upper


def child_environment(environ, key_envs):
    """A copy of ``environ`` without any variable that holds, or may hold, a key.

    Drops every declared ``key_env``, ``ANTHROPIC_API_KEY`` and any ``*_KEY``/``*API_KEY*``
    name (design.md: a key is never put in a child's environment).
    """
    dropped = set(key_envs) | set(ALWAYS_DROPPED)
    return {
        name: value
        for name, value in environ.items()
        if name not in dropped and not looks_like_key_variable(name)
    }


def declared_key_envs():
    """Every ``key_env`` the declaration in force names; an invalid declaration refuses."""
    from .declarations import load_declaration

    return {account.key_env for account in load_declaration().accounts}


def datasette_installed():
    return importlib.util.find_spec("datasette") is not None


def datasette_command(ledger, *, port=DEFAULT_PORT):
    """The argv that serves ``ledger`` on loopback with this interpreter's Datasette (and so
    the plugin)."""
    return [sys.executable, "-m", "datasette", "serve", str(ledger), "--host", HOST, "--port", str(port)]


def dashboard_url(port=DEFAULT_PORT):
    return f"http://{HOST}:{port}{DASHBOARD_PATH}"


def open_when_ready(url, *, timeout=30):
    """Open ``url`` in a web browser once it answers (Datasette's own --open shows its index)."""

    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy

    def run():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with direct.open(url, timeout=2):
                    pass
            except OSError:
                time.sleep(0.2)
                continue
            webbrowser.open(url)
            return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def browse(ledger, *, port=DEFAULT_PORT, open_browser=False, environ=None, echo=print):
    """Run Datasette on ``ledger`` until it exits; returns its exit status."""
    if not ledger.exists():
        raise AccountsError(
            "ledger_unavailable",
            f"no ledger at {ledger} yet: it is created by the first routed call "
            "(llm -m claude-routed ...), or set LLM_ACCOUNTS_LEDGER to an existing ledger",
        )
    environ = os.environ if environ is None else environ
    env = child_environment(environ, declared_key_envs())
    command = datasette_command(ledger, port=port)
    process = subprocess.Popen(command, env=env)
    echo(f"Dashboard: {dashboard_url(port)}")
    if open_browser:
        open_when_ready(dashboard_url(port))
    # A terminal's Ctrl-C reaches Datasette too; a SIGTERM sent to us alone is passed on, so
    # Datasette never outlives the command.
    try:
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: process.terminate())
    except ValueError:  # not the main thread
        previous = None
    try:
        while True:
            try:
                return process.wait()
            except KeyboardInterrupt:
                continue
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
