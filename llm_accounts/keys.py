"""Strict key resolution for one account's ``key_env`` (docs/architecture.md "Key resolution").

The name is used unchanged at every step, in this order, and the first step that has it decides:

1. the process environment (present wins, even if empty or invalid);
2. ``.env.local`` then ``.env`` in the working directory (present but empty is invalid, not a miss);
3. the ``llm keys`` entry of exactly that name (keys.json, read directly: ``llm.get_key(input=...)``
   would take an unknown name as a literal key);
4. the secret lookup command configured in accounts.json, run for that name only.

Nothing found is ``credential_missing``. There is no fallback to another name, to
``ANTHROPIC_API_KEY`` or to another account. A key never enters ``os.environ``, a child's
environment, a log, an exception or a repr; errors name the variable and the step, never a value,
a length or a fingerprint.
"""

import json
import os
import pathlib
import selectors
import signal
import subprocess
import time

from .declarations import DOTENV_FILES, KEY_ENV_RULE, llm_user_dir, looks_like_key, read_dotenv
from .errors import AccountsError
from .paths import FileProblem, read_limited

LOOKUP_TIMEOUT = 15.0  # seconds (docs/security.md "Child processes")
LOOKUP_OUTPUT_LIMIT = 1025  # bytes: the longest key plus one newline
MIN_KEY, MAX_KEY = 8, 1024


class Secret:
    """A key held for one attempt. ``repr``/``str`` never show it and it refuses to be pickled;
    ``reveal()`` returns it, for building one request header and nothing else."""

    __slots__ = ("_value",)

    def __init__(self, value):
        self._value = value

    def reveal(self):
        return self._value

    def __repr__(self):
        return "Secret('**********')"

    __str__ = __repr__

    def __reduce__(self):
        raise TypeError("a Secret cannot be serialized")


def _error(code, message, account):
    return AccountsError(code, message, account=account)


def _accept(value, key_env, where, account):
    """8-1,024 printable ASCII characters without spaces, not the name itself (docs/architecture.md "Key
    resolution")."""
    if value == "":
        raise _error(
            "credential_invalid",
            f"{key_env} is set but empty in {where}; put the account's API key there or remove the empty entry",
            account,
        )
    if value == key_env:
        raise _error(
            "credential_invalid",
            f"{key_env} in {where} holds its own name instead of a key; put the account's API key there",
            account,
        )
    if not MIN_KEY <= len(value) <= MAX_KEY or not all("\x21" <= char <= "\x7e" for char in value):
        raise _error(
            "credential_invalid",
            f"{key_env} in {where} is not a valid API key (a key is 8 to 1,024 printable ASCII characters, no spaces or newlines)",
            account,
        )
    return Secret(value)


def _keys_json(key_env, account):
    """The ``llm keys`` entry of exactly ``key_env``, or None. The file holds every stored key, so
    its parser's errors (which quote the document) are never raised or chained."""
    path = llm_user_dir() / "keys.json"
    problem = None
    try:
        text = read_limited(path).decode("utf-8")
    except FileNotFoundError:
        return None
    except UnicodeDecodeError:
        problem = "could not be read"
    except FileProblem as error:
        problem = error.reason
    if problem is None:
        try:
            stored = json.loads(text)
        except (ValueError, RecursionError):
            problem = "is not valid JSON"
    if problem:
        raise _error(
            "credential_lookup_failed",
            f"llm's keys.json {problem}; check it with 'llm keys path'",
            account,
        )
    if not isinstance(stored, dict) or key_env not in stored:
        return None
    value = stored[key_env]
    if not isinstance(value, str):
        raise _error(
            "credential_invalid", f"the 'llm keys' entry {key_env} is not a string", account
        )
    return value


KEY_RUN = 8  # characters: a value holding this long a stretch of a key holds the key


def holds_key_material(value, secrets=()):
    """Whether ``value`` looks like an Anthropic key (``sk-ant`` in any case) or holds a run of
    ``KEY_RUN`` characters of one of ``secrets`` (``Secret`` objects)."""
    if looks_like_key(value):
        return True
    for secret in secrets:
        key = secret.reveal()
        if any(key[i : i + KEY_RUN] in value for i in range(len(key) - KEY_RUN + 1)):
            return True
    return False


def child_environment(environ, withheld=(), secrets=()):
    """A copy of ``environ`` for a child process: without the ``withheld`` names, without any
    variable, whatever its name, whose value holds key material (``holds_key_material``), and
    without the ledger's credentials (``ledger_withheld``)."""
    withheld = set(withheld) | ledger_withheld(environ)
    return {
        name: value
        for name, value in environ.items()
        if name not in withheld and not holds_key_material(value, secrets)
    }


def ledger_withheld(environ):
    """Names a child never needs that may carry a PostgreSQL ledger's credentials
    (docs/security.md "Child processes"): every ``PG*`` variable libpq reads, a
    ``LLM_ACCOUNTS_LEDGER`` that is a URL, and any variable whose value holds that URL's
    password or ``sslpassword`` or ``PGPASSWORD``'s value. A SQLite ledger's path is no credential
    and stays."""
    from .paths import LEDGER_ENV, is_database_url, ledger_credentials

    names = {name for name in environ if name.upper().startswith("PG")}
    secrets = [environ.get("PGPASSWORD") or ""]
    ledger = environ.get(LEDGER_ENV)
    if is_database_url(ledger):
        names.add(LEDGER_ENV)
        secrets += ledger_credentials(ledger)
    secrets = [secret for secret in secrets if len(secret) >= 4]
    names |= {name for name, value in environ.items() if any(secret in value for secret in secrets)}
    return names


def lookup_environment(declaration, environ):
    """The lookup child's environment: no declared account's key_env, no ``ANTHROPIC_API_KEY``,
    and (defence in depth) nothing whose value looks like an Anthropic key. No key is resolved
    to compare with: resolving is what the lookup is for."""
    withheld = {account.key_env for account in declaration.accounts} | {"ANTHROPIC_API_KEY"}
    # An organization's Admin API key is a key like any other (docs/security.md "Child processes").
    withheld |= {account.admin_key_env for account in declaration.accounts if account.admin_key_env}
    return child_environment(environ, withheld)


def run_lookup(template, key_env, declaration, environ, timeout, account=None):
    """Run the lookup command for one name; returns its output with one trailing newline removed.

    No shell; ``{name}`` in each argument is replaced by ``key_env``; stdin is empty, stderr is
    discarded, stdout is read up to ``LOOKUP_OUTPUT_LIMIT`` bytes, the whole run is bounded by
    ``timeout``. Failures name the step, never argv, output or the OS error (which can quote them).
    """
    argv = [part.replace("{name}", key_env) for part in template]

    def failed(why):
        return _error(
            "credential_lookup_failed", f"the secret lookup command for {key_env} {why}", account
        )

    problem = None
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=lookup_environment(declaration, environ),
            close_fds=True,
            start_new_session=True,  # so a timeout can end the command's own children too
        )
    except FileNotFoundError:
        problem = "could not be started: program not found (set it with 'llm accounts lookup set')"
    except OSError:
        problem = "could not be started"
    if problem:
        raise failed(problem)

    deadline = time.monotonic() + timeout
    output, outcome = _read_bounded(process, deadline)
    if outcome is None:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            outcome = "timeout"
    if outcome is not None:
        _kill(process)
        if outcome == "timeout":
            raise failed(f"did not finish within {timeout:g} seconds")
        raise failed(f"printed too much (more than {LOOKUP_OUTPUT_LIMIT:,} bytes)")
    if process.returncode != 0:
        raise failed(f"failed (exit status {process.returncode})")
    if output.endswith(b"\r\n"):
        output = output[:-2]
    elif output.endswith(b"\n"):
        output = output[:-1]
    return output


def _read_bounded(process, deadline):
    """Read stdout to EOF; ``(bytes, None)``, or ``(None, "timeout" | "too_much")``."""
    chunks = []
    size = 0
    stream = process.stdout
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                return None, "timeout"
            chunk = os.read(stream.fileno(), LOOKUP_OUTPUT_LIMIT + 1 - size)
            if not chunk:
                stream.close()
                return b"".join(chunks), None
            chunks.append(chunk)
            size += len(chunk)
            if size > LOOKUP_OUTPUT_LIMIT:
                chunks.clear()
                return None, "too_much"


def _kill(process):
    """End the command and anything it started (its own session), then reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.wait()
    if process.stdout and not process.stdout.closed:
        process.stdout.close()


def key_state(key_env, declaration, *, environ=None, cwd=None):
    """Whether a step of resolution holds the *name* ``key_env``, for ``llm accounts status``
    and ``ladder`` (docs/architecture.md "Key resolution"): ``"found"`` (the environment, a
    dotenv file or ``llm keys`` has it; whether its value is valid is for the attempt to say),
    ``"missing"`` (none has it and no lookup command is configured: an attempt would be
    ``credential_missing``) or ``"unchecked"`` (only the secret lookup command, which is never run
    off the request path, or an unreadable file could tell). No value is kept or compared."""
    environ = os.environ if environ is None else environ
    if key_env in environ:
        return "found"
    cwd = pathlib.Path.cwd() if cwd is None else pathlib.Path(cwd)
    try:
        if any(key_env in read_dotenv(cwd / filename) for filename in DOTENV_FILES):
            return "found"
        if _keys_json(key_env, None) is not None:
            return "found"
    except AccountsError as error:
        return "found" if error.code == "credential_invalid" else "unchecked"
    return "unchecked" if declaration.lookup else "missing"


def resolve_key(key_env, declaration, *, environ=None, cwd=None, lookup_timeout=LOOKUP_TIMEOUT):
    """Resolve ``key_env`` to a ``Secret``, strictly, for one attempt (docs/security.md "Reading a
    key")."""
    if (
        not isinstance(key_env, str)
        or not KEY_ENV_RULE.fullmatch(key_env)
        or looks_like_key(key_env)
    ):
        raise AccountsError("declaration_invalid", "key_env: not a valid variable name")
    # An account's admin_key_env resolves by the same steps, for the Admin API only.
    account = next((a.name for a in declaration.accounts if key_env in (a.key_env, a.admin_key_env)), None)
    environ = os.environ if environ is None else environ
    if key_env in environ:
        return _accept(environ[key_env], key_env, "the environment", account)
    cwd = pathlib.Path.cwd() if cwd is None else pathlib.Path(cwd)
    for filename in DOTENV_FILES:
        values = read_dotenv(cwd / filename)
        if key_env in values:
            return _accept(values[key_env], key_env, filename, account)
    stored = _keys_json(key_env, account)
    if stored is not None:
        return _accept(stored, key_env, "'llm keys'", account)
    if declaration.lookup:
        output = run_lookup(
            declaration.lookup, key_env, declaration, environ, lookup_timeout, account
        )
        # latin-1 maps every byte to one character, so _accept's ASCII rule judges the bytes.
        return _accept(
            output.decode("latin-1"), key_env, "the secret lookup command's output", account
        )
    raise _error(
        "credential_missing",
        f"no key for {key_env}: looked in the environment, .env.local, .env, 'llm keys'"
        + (" and the secret lookup command" if declaration.lookup else "")
        + f"; set {key_env} in the environment or .env, or run 'llm keys set {key_env}'",
        account,
    )
