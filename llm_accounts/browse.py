"""``llm accounts browse``: Datasette on the ledger, in a child process that holds no key.

The ledger is served as an ordinary (mutable) file, never with ``-i``: SQLite's immutable mode
assumes the file never changes, and the ledger is written while you browse it. Datasette opens
it read-only for queries, and the plugin's queries never write.
"""

import importlib.util
import os
import signal
import socket
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


def child_environment(environ, key_envs, secrets=()):
    """A copy of ``environ`` without any variable that holds, or may hold, a key.

    Drops every declared ``key_env``, ``ANTHROPIC_API_KEY`` and any ``*_KEY``/``*API_KEY*``
    name; then, judged by value whatever the name, anything key-shaped (``sk-ant`` in any case)
    or holding an 8-character run of one of ``secrets`` (the declared keys, see
    ``declared_keys``). A key is never put in a child's environment.
    """
    from .keys import child_environment as without_keys

    named = {name: value for name, value in environ.items() if not looks_like_key_variable(name)}
    return without_keys(named, set(key_envs) | set(ALWAYS_DROPPED), secrets)


def declared_keys(declaration, environ):
    """The declared accounts' keys, resolved as a routed call would resolve them, only so the
    child's environment can be checked against them. A key that does not resolve is not compared.

    The secret lookup command is not run: browsing must never wake a password manager, and a key
    only that command knows reaches this environment only as a copy, which the ``sk-ant`` rule
    drops anyway."""
    import dataclasses

    from .keys import resolve_key

    declaration = dataclasses.replace(declaration, lookup=None)
    found = []
    for account in declaration.accounts:
        # An organization's Admin API key is a key like any other (docs/security.md "Child processes").
        for name in filter(None, (account.key_env, account.admin_key_env)):
            try:
                found.append(resolve_key(name, declaration, environ=environ))
            except AccountsError:
                continue
    return found


# Said where Datasette is needed and missing: the commands that work from a checkout or a wheel
# (llm-accounts itself is not on PyPI: docs/getting-started.md "Installation").
NOT_INSTALLED = (
    "Datasette is not installed in llm's environment: run 'llm install datasette' "
    "(or, in the llm-accounts checkout, llm install -e '.[datasette]')"
)


def datasette_installed():
    return importlib.util.find_spec("datasette") is not None


def datasette_command(ledger, *, port=DEFAULT_PORT):
    """The argv that serves ``ledger`` on loopback with this interpreter's Datasette (and so
    the plugin)."""
    return [sys.executable, "-m", "datasette", "serve", str(ledger), "--host", HOST, "--port", str(port)]


def check_port_free(port):
    """Refuse a port another program listens on, rather than print a URL that shows its pages."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.bind((HOST, port))
    except OSError:
        raise AccountsError(
            "declaration_invalid",
            f"--port: {HOST}:{port} is already in use by another program; choose a free one, for example --port {port + 1}",
        ) from None
    finally:
        probe.close()


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
    """Run Datasette on ``ledger`` until it exits; returns its exit status. A PostgreSQL ledger
    (``paths.DatabaseURL``) is served as a fresh SQLite export of it, in a temporary directory
    removed when Datasette exits (docs/architecture.md "Ledger on PostgreSQL")."""
    if hasattr(ledger, "url"):
        import shutil
        import tempfile

        from .ledger import Ledger

        directory = tempfile.mkdtemp(prefix="llm-accounts-browse-")
        try:
            with Ledger(ledger) as source:
                copy = source.export(os.path.join(directory, "accounts-ledger.db"))
            echo(f"Serving a copy of {ledger} taken now; run llm accounts browse again for newer rows")
            return browse(copy, port=port, open_browser=open_browser, environ=environ, echo=echo)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
    if not ledger.exists():
        raise AccountsError(
            "ledger_unavailable",
            f"no ledger at {ledger} yet: it is created by the first routed call "
            "(llm -m claude-routed ...), or set LLM_ACCOUNTS_LEDGER to an existing ledger",
        )
    from .declarations import load_declaration
    from .ledger import Ledger

    Ledger(ledger).close()  # a ledger it cannot open is refused here, in one line, not by Datasette
    environ = os.environ if environ is None else environ
    declaration = load_declaration()  # an invalid declaration refuses rather than guess key names
    env = child_environment(
        environ,
        {name for account in declaration.accounts for name in (account.key_env, account.admin_key_env) if name},
        declared_keys(declaration, environ),
    )
    check_port_free(port)
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
