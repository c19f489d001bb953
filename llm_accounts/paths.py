"""Where the plugin's files live (docs/architecture.md "Environment")."""

import json
import os
import pathlib
import tempfile

LEDGER_ENV = "LLM_ACCOUNTS_LEDGER"


def user_dir():
    """``llm.user_dir()``, which honours ``LLM_USER_PATH``."""
    import llm

    return pathlib.Path(llm.user_dir())


def ledger_path():
    """``$LLM_ACCOUNTS_LEDGER``, else ``accounts-ledger.db`` in the llm user directory."""
    configured = os.environ.get(LEDGER_ENV)
    if configured:
        return pathlib.Path(configured).expanduser()
    return user_dir() / "accounts-ledger.db"


def accounts_json_path():
    """The user-wide declaration file that ``llm accounts add`` writes."""
    return user_dir() / "accounts.json"


def write_private_json(path, data, **dump_options):
    """Write ``data`` as JSON to ``path`` whole or not at all: a user-only (0600) temporary file
    in the same directory, synced, then renamed over it. The files holding declarations, model
    lists and llm keys are all written this way."""
    path = pathlib.Path(path)
    text = json.dumps(data, indent=2, **dump_options) + "\n"
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        try:
            os.unlink(temp)
        except FileNotFoundError:
            pass
        raise
    return path
