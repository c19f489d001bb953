"""Where the plugin's files live (docs/architecture.md "Environment")."""

import json
import os
import pathlib
import re
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


# Parameters whose value is a credential: shown as ***, never passed to a child.
SECRET_PARAMETERS = ("password", "sslpassword")
UNREADABLE_URL = "postgresql://(a URL that could not be read)"
_LOCATION = ("user", "host", "port", "dbname")
_PORTS = re.compile(r"[0-9,]*")
# What the hand-written reading shows when psycopg is absent; every other value is masked.
_PLAIN_PARAMETERS = frozenset(
    {
        "host", "hostaddr", "port", "dbname", "user", "sslmode", "connect_timeout", "application_name",
        "target_session_attrs",
    }
)


def mask_url(url):
    """``url`` as it may be printed: read by libpq's own rules (``psycopg.conninfo``), so a
    password holding ``?``, ``#`` or ``%``-escapes is found where libpq finds it, then written
    back as a URL with every credential (``SECRET_PARAMETERS``, in the authority or as a
    parameter) replaced by ``***`` (docs/architecture.md "Ledger on PostgreSQL"). Without psycopg
    (the ``postgres`` extra) a cautious reading masks more, never less."""
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return _mask_by_hand(url)
    try:
        parameters = conninfo_to_dict(url)
    except Exception:  # psycopg's message can quote the URL
        return UNREADABLE_URL
    return _as_url(parameters)


def ledger_credentials(url):
    """The secret values a ledger URL carries (libpq's reading), for keeping them out of a child's
    environment; none when psycopg cannot read it."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        parameters = conninfo_to_dict(url)
    except Exception:
        return ()
    return tuple(parameters[name] for name in SECRET_PARAMETERS if parameters.get(name))


def _as_url(parameters):
    from urllib.parse import quote

    parameters = dict(parameters)
    for name in _LOCATION[1:]:
        # libpq reads "user:pass/word@host" as host "user", port "pass", database "word@host":
        # an "@" there is the remnant of credentials, so the field is not shown.
        if "@" in parameters.get(name, ""):
            parameters[name] = "***"
    if not _PORTS.fullmatch(parameters.get("port", "")):
        parameters["port"] = "***"  # "user:password/db" reads as host "user", port "password"
    user, password = parameters.pop("user", None), parameters.pop("password", None)
    host, port, dbname = (parameters.pop(name, None) for name in _LOCATION[1:])
    if host and host.startswith("/"):  # a socket directory goes in the query, as libpq allows
        parameters = {"host": host, **parameters}
        host = None
    userinfo = (quote(user, safe="") if user else "") + (":***" if password is not None else "")
    hosts = (host or "").split(",")
    ports = (port or "").split(",")
    ports = ports * len(hosts) if len(ports) == 1 else ports
    if len(ports) != len(hosts):
        ports = ["***"] * len(hosts)  # libpq would refuse it; show nothing that could be wrong
    netloc = ",".join(
        (f"[{quote(h, safe=':*')}]" if ":" in h else quote(h, safe="*")) + (f":{p}" if p else "")
        for h, p in zip(hosts, ports)
    )
    netloc = (userinfo + "@" if userinfo else "") + netloc
    query = "&".join(
        f"{quote(name, safe='')}=" + ("***" if name in SECRET_PARAMETERS else quote(value, safe="/*"))
        for name, value in parameters.items()
    )
    return f"postgresql://{netloc}/{quote(dbname, safe='*') if dbname else ''}" + (f"?{query}" if query else "")


def _mask_by_hand(url):
    """libpq's URL rules, read cautiously: the userinfo runs to the last ``@`` before the first
    ``/`` (libpq stops at the first, so this masks at least as much), and every parameter value
    not known to be plain is masked."""
    scheme, separator, rest = url.partition("://")
    if not separator:
        return UNREADABLE_URL
    authority, slash, tail = rest.partition("/")
    if "@" in authority:
        userinfo, _, authority = authority.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        hidden = colon or "?" in user or "#" in user
        userinfo = re.split(r"[?#]", user, maxsplit=1)[0] + (":***" if hidden else "")
    else:
        userinfo = None
    if not slash:
        authority, question, tail = authority.partition("?")
        tail = question and "?" + tail
    host, colon, port = authority.rpartition(":")
    if colon and not authority.endswith("]") and not _PORTS.fullmatch(port):
        authority = f"{host}:***"
    path, question, query = tail.partition("?")
    items = []
    for item in filter(None, query.split("&")):
        name, _, value = item.partition("=")
        items.append(item if name in _PLAIN_PARAMETERS and name not in SECRET_PARAMETERS else f"{name}=***")
    netloc = (f"{userinfo}@" if userinfo is not None else "") + authority
    return f"postgresql://{netloc}/{path.split('#', 1)[0]}" + (f"?{'&'.join(items)}" if items else "")


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
    """Write ``data`` as JSON to ``path`` whole or not at all (``write_private_bytes``). The files
    holding declarations, model lists and llm keys are all written this way."""
    return write_private_bytes(path, (json.dumps(data, indent=2, **dump_options) + "\n").encode("utf-8"))


def write_private_bytes(path, raw):
    """Write ``raw`` to ``path`` whole or not at all: a user-only (0600) temporary file in the
    same directory, synced, then renamed over it (a user's price file is copied this way)."""
    path = pathlib.Path(path)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(raw)
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
