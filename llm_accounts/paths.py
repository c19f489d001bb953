"""Where the plugin's files live (docs/architecture.md "Environment")."""

import os
import pathlib

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
