"""Where the plugin's files live (docs/architecture.md "Environment")."""

import json
import os
import pathlib
import stat
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


# Reading (docs/security.md "Files read")

MAX_READ_BYTES = 1024 * 1024  # declarations, dotenv files, llm's keys.json, price files


class FileProblem(Exception):
    """A file that is there but may not be read: ``reason`` says what is wrong with it (never
    what it holds), for the caller's coded line."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


def read_limited(path, limit=MAX_READ_BYTES):
    """The bytes of ``path``, a regular file of at most ``limit`` bytes.

    Opened without blocking, so a FIFO nobody writes to cannot hang the caller, then judged by
    ``fstat`` on what was opened (a link is followed: a link to /dev/zero is a device); at most
    ``limit`` + 1 bytes are read, so a file growing meanwhile is still refused. A missing file
    raises ``FileNotFoundError``; anything else wrong raises ``FileProblem``."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError:
        raise FileProblem("could not be read") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileProblem("is not a regular file (a FIFO, device or directory)")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError:
        raise FileProblem("could not be read") from None
    finally:
        os.close(fd)
    if size > limit:
        raise FileProblem(f"is larger than {_size(limit)}")
    return b"".join(chunks)


def _size(limit):
    return f"{limit // (1024 * 1024)} MiB" if limit % (1024 * 1024) == 0 else f"{limit:,} bytes"
