"""The ledger's connection and transaction core: one connection per ``Ledger``, every call one
transaction, and the errors a backend's own failures become (docs/architecture.md "Ledger",
"Ledger on PostgreSQL"; docs/security.md "Logging").

``run`` serializes a ``Ledger``'s threads on its lock, opens the transaction (``backend.begin``:
SQLite's ``BEGIN IMMEDIATE``, PostgreSQL's shared ledger lock, the rule then locking the accounts
it changes; a lock held past ``BUSY_TIMEOUT_S`` is ``ledger_busy``), runs one rule function
``fn(conn, ...)``, and commits, or rolls back on any error. An admission runs its own two
transactions (``admission.reserve``). A rule says why the ledger cannot serve (``Unavailable``) and the backend words where; a
rule whose refusal must commit a write first (a block, a waiter's place) returns ``Deferred``.
``run_async`` and ``settle_async`` run a call in a worker thread for async callers.
"""

import asyncio
import contextlib
import logging
import os
import pathlib
import re
import threading
import time
import uuid

from .. import ledger as package  # the tunables tests set (package.BUSY_TIMEOUT_S, ...)
from ..errors import AccountsError
from ..records import invalid
from .sqlite import SqliteBackend

log = logging.getLogger("llm_accounts.ledger")

# When an async caller asked for the call now running in this thread (``_in_worker``), for the log.
requested_at = threading.local()


class Unavailable(Exception):
    """Raised by a rule inside a transaction: ``ledger_unavailable`` for ``why``, worded by the
    backend (it names the ledger, its password masked)."""

    def __init__(self, why):
        super().__init__(why)
        self.why = why


def busy(op="reserve", location=None):
    """``ledger_busy``, naming the ledger (``location``: a file, or a URL with its password masked);
    only a refused reservation proves that nothing was sent."""
    fate = {
        "reserve": "nothing was sent, try again",
        "settle": "the attempt's outcome was not written",
    }.get(op, "nothing was written, try again")
    return AccountsError(
        "ledger_busy",
        f"the ledger{f' {location}' if location else ''} stayed locked by another process for "
        f"{package.BUSY_TIMEOUT_S:g} s; {fate}",
    )


class Deferred:
    """Commit the transaction's writes (a block), then raise ``error``."""

    def __init__(self, error):
        self.error = error


def backend_for(location):
    """The backend for ``location``: a ``postgresql://`` or ``postgres://`` URL (given as text or
    as ``paths.DatabaseURL``) is PostgreSQL, anything else a SQLite file. psycopg is imported only
    for a URL."""
    url = getattr(location, "url", location)
    if isinstance(url, str) and url.startswith(("postgresql://", "postgres://")):
        try:
            from .postgres import PostgresBackend
        except ImportError:
            raise AccountsError(
                "ledger_unavailable",
                "LLM_ACCOUNTS_LEDGER is a PostgreSQL URL, and psycopg 3 is not installed in llm's environment: run "
                "llm install 'psycopg[binary]>=3.1' (or, in the llm-accounts checkout, llm install -e '.[postgres]')",
            ) from None

        return PostgresBackend(url, busy)
    return SqliteBackend(location, busy)


def this_host():
    """This machine as the ledger records it on attempts and ``host_health``: its host name (a
    digest of it when that is not a plain identifier), then ``:`` and a short id of the machine
    (``liveness.machine_id``), since cloned machines share a host name and must never judge each
    other's processes (docs/architecture.md "A process that is gone", "Failure classes and
    health")."""
    import hashlib
    import socket

    from .. import liveness

    name = socket.gethostname()
    if not HOST_RE.fullmatch(name) or "sk-ant" in name.lower():
        name = "host-" + hashlib.sha256(name.encode("utf-8", "replace")).hexdigest()[:16]
    machine = liveness.machine_id()
    return name if machine is None else f"{name}:{machine}"


HOST_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def run(ledger, op, fn, *args, write=True, transaction=True):
    """Run ``fn(conn, *args)`` in one transaction; log one DEBUG event (docs/security.md "Logging")."""
    first_line = time.perf_counter()
    requested = getattr(requested_at, "at", None)
    requested_at.at = None
    outcome = "committed"
    try:
        with ledger._lock:
            return in_transaction(ledger, fn, args, write) if transaction else fn(*args)
    except AccountsError as error:
        outcome = error.code
        if error.code == "ledger_busy":
            raise busy(op, ledger.location) from None
        raise
    except BaseException as error:
        outcome = type(error).__name__
        raise
    finally:
        if log.isEnabledFor(logging.DEBUG):
            log_event(op, outcome, first_line - (requested or first_line), time.perf_counter() - first_line)


# ``in_transaction``'s ``write`` for reads whose every figure a later write re-checks under the
# account's lock (an admission's choice, docs/architecture.md "Ledger"): they need no snapshot
# beyond each statement's own, so a backend whose transaction costs round trips runs them bare.
RECHECKED = "rechecked"


def in_transaction(ledger, fn, args, write):
    """Begin (taking the backend's write lock for a write), run ``fn(conn, *args)``, commit; roll
    back on any error. A backend's own error becomes ``ledger_busy`` or ``ledger_unavailable``
    naming its code, never its text (it can quote the schema or a row)."""
    conn, backend = ledger._conn, ledger._backend
    if conn is None:
        raise backend.unavailable("the ledger is closed")
    if write is RECHECKED and not backend.rechecked_reads_in_transaction:
        return _bare(backend, conn, fn, args)
    try:
        backend.begin(conn, bool(write) and write is not RECHECKED)
    except backend.errors as error:
        raise backend.map(error) from None
    try:
        result = fn(conn, *args)
        backend.commit(conn)
    except BaseException as error:
        backend.rollback(conn)
        if isinstance(error, backend.errors):
            raise backend.map(error) from None
        if isinstance(error, Unavailable):
            raise backend.unavailable(error.why) from None
        raise
    if isinstance(result, Deferred):
        raise result.error
    return result


@contextlib.contextmanager
def mapped(backend):
    """Outside a transaction: a backend's own error as ``ledger_busy`` or ``ledger_unavailable``
    naming its code, a rule's ``Unavailable`` as ``ledger_unavailable``."""
    try:
        yield
    except backend.errors as error:
        raise backend.map(error) from None
    except Unavailable as error:
        raise backend.unavailable(error.why) from None


def _bare(backend, conn, fn, args):
    """``fn(conn, *args)`` with no transaction around it: each statement is its own snapshot."""
    with mapped(backend):
        result = fn(conn, *args)
    if isinstance(result, Deferred):
        raise result.error
    return result


def export(ledger, target):
    """Write a SQLite copy of the ledger to the new file ``target``, with the same schema, from
    one consistent snapshot: Datasette, the canned queries, the dashboard and sqlite-utils
    read it as they read a SQLite ledger (docs/architecture.md "Ledger on PostgreSQL"). An
    existing file is never overwritten. Returns the path."""
    target = pathlib.Path(target)
    if target.exists() or target.is_symlink():
        raise invalid("PATH", "a file already exists there; an export never overwrites a file, choose a new path")
    if not target.parent.is_dir():
        raise invalid("PATH", "its directory does not exist")
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}.export")
    os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    try:
        run(ledger, "export", lambda: _export_to(ledger, temporary), transaction=False)
        os.link(temporary, target)  # never replaces a file that appeared meanwhile
    except FileExistsError:
        raise invalid("PATH", "a file already exists there; an export never overwrites a file, choose a new path") from None
    finally:
        os.unlink(temporary)
    return target


def _export_to(ledger, temporary):
    if ledger._conn is None:
        raise ledger._backend.unavailable("the ledger is closed")
    try:
        ledger._backend.export(ledger._conn, temporary)
    except ledger._backend.errors as error:
        raise ledger._backend.map(error) from None


def log_event(op, outcome, admission_wait_s, sqlite_wait_s=None):
    """The timing record: one DEBUG event per ledger call (docs/security.md "Logging")."""
    extra = {"ledger_op": op, "outcome": outcome, "admission_wait_s": admission_wait_s}
    if sqlite_wait_s is None:
        log.debug("ledger %s %s admission_wait_s=%.6f", op, outcome, admission_wait_s, extra=extra)
    else:
        extra["sqlite_wait_s"] = sqlite_wait_s
        log.debug(
            "ledger %s %s admission_wait_s=%.6f sqlite_wait_s=%.6f", op, outcome, admission_wait_s, sqlite_wait_s, extra=extra
        )


async def run_async(fn, *args, **kw):
    """Run a ledger call in a worker thread, waiting at most ``ADMISSION_TIMEOUT_S`` for the worker
    to start (docs/architecture.md "Ledger"); ``ledger_busy`` otherwise. Once the worker has started the
    bound no longer applies: the call runs to its own SQLite bound and reports its real outcome, so
    a caller is never told a committed write failed."""
    return await _in_worker(fn, args, kw, package.ADMISSION_TIMEOUT_S)


async def settle_async(fn, *args, **kw):
    """Run a settlement in a worker thread, waiting for the worker however long it takes: once a
    request may have been sent the provider may have answered and billed, and giving up before
    the settlement runs would drop a paid answer (docs/architecture.md "Ledger"). The call itself
    keeps its SQLite bound; a ``ledger_busy`` from it leaves the attempt open with its ceiling,
    and a delivered answer says so in one warning (docs/errors.md "After delivery")."""
    return await _in_worker(fn, args, kw, None)


async def _in_worker(fn, args, kw, bound):
    loop = asyncio.get_running_loop()
    requested = time.perf_counter()
    phase = {"value": "waiting"}
    gate = threading.Lock()
    started = loop.create_future()

    def mark_started():
        if not started.done():
            started.set_result(None)

    def work():
        with gate:
            if phase["value"] == "abandoned":
                return None
            phase["value"] = "started"
        loop.call_soon_threadsafe(mark_started)
        requested_at.at = requested
        try:
            return fn(*args, **kw)
        finally:
            requested_at.at = None

    done = loop.run_in_executor(None, work)
    try:
        await asyncio.wait_for(asyncio.shield(started), bound)
    except BaseException as error:
        with gate:
            abandon = phase["value"] == "waiting"
            if abandon:
                phase["value"] = "abandoned"
        if abandon:
            op = getattr(fn, "__name__", "call")
            if isinstance(error, asyncio.TimeoutError):
                log_event(op, "ledger_busy", time.perf_counter() - requested)
                raise AccountsError(
                    "ledger_busy",
                    f"no worker thread was free for the ledger within {bound:g} s; the ledger call did not run, try again",
                ) from None
            log_event(op, type(error).__name__, time.perf_counter() - requested)
            raise
        if not isinstance(error, asyncio.TimeoutError):
            raise
    return await done
