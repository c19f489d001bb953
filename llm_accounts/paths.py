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
    """``$LLM_ACCOUNTS_LEDGER``, else ``accounts-ledger.db`` in the llm user directory: a
    ``pathlib.Path``, or a ``DatabaseURL`` for a PostgreSQL ledger."""
    configured = os.environ.get(LEDGER_ENV)
    if configured:
        if is_database_url(configured):
            return DatabaseURL(configured)
        return pathlib.Path(configured).expanduser()
    return user_dir() / "accounts-ledger.db"


def is_database_url(text):
    """A PostgreSQL ledger's location (docs/architecture.md "Ledger on PostgreSQL")."""
    return isinstance(text, str) and text.startswith(("postgresql://", "postgres://"))


def mask_url(url):
    """``url`` with any password (in the authority or a ``password`` parameter) replaced by
    ``***``: a URL is never printed with its password."""
    import urllib.parse

    try:
        parts = urllib.parse.urlsplit(url)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, _, hosts = netloc.rpartition("@")
            if ":" in userinfo:
                userinfo = userinfo.split(":", 1)[0] + ":***"
            netloc = f"{userinfo}@{hosts}"
        items = []
        for item in filter(None, parts.query.split("&")):
            key, equals, value = item.partition("=")
            items.append(f"{key}=***" if urllib.parse.unquote(key).lower() == "password" else item)
        query = "&".join(items)
        return f"{parts.scheme}://{netloc}{parts.path}" + (f"?{query}" if query else "")
    except ValueError:
        return "postgresql://(a URL that could not be read)"


class DatabaseURL:
    """``LLM_ACCOUNTS_LEDGER`` naming a PostgreSQL ledger. ``str()`` is the masked URL, so it can
    be printed; ``url`` is the URL itself, for connecting only."""

    def __init__(self, url):
        self.url = url

    def __str__(self):
        return mask_url(self.url)

    __repr__ = __str__

    def exists(self):
        """The server holds it (connecting tells whether it can be reached)."""
        return True


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
