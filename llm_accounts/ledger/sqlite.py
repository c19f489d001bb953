"""The SQLite backend of the ledger: connecting, locking, dialect and schema creation.

The rules (admission, settlement, selection, health, warm prefixes) are in the rule modules of
``llm_accounts.ledger`` (docs/architecture.md "The write path") and are the same on every
backend; this module only opens the file and runs its transactions (docs/architecture.md "Ledger").

Every write is one ``BEGIN IMMEDIATE`` transaction on a stdlib ``sqlite3`` connection (write-ahead
log, ``synchronous=FULL``, foreign keys on): SQLite's file lock serializes writers across
processes. In WAL a reader (``status``, Datasette, a notebook) reads its snapshot without a lock a
writer's commit waits for, so readers never delay admission, and each commit appends to one file
(docs/performance.md "Fleet": 8 processes, WAL against the rollback journal). A lock held past the
busy timeout is ``ledger_busy``; an unreadable or newer file is ``ledger_unavailable`` and is never
reset, replaced or deleted. Schema version in ``user_version``.
"""

import collections
import os
import pathlib
import re
import sqlite3
import threading
import uuid
import weakref

from .. import schema
from ..errors import AccountsError

SQLITE_MAGIC = b"SQLite format 3\x00"
# The journal every open puts the file in (docs/architecture.md "Ledger"): a file in a rollback
# journal is switched on open, keeping every row. bench/fleet.py sets "delete" to measure that one.
# The -wal and -shm files take the ledger file's mode (SQLite copies it), so they are 0600 too.
JOURNAL_MODE = "wal"

# Ledger files this process has SQLite connections to, by (device, inode). Closing any descriptor
# of a file drops every POSIX lock this process holds on it, SQLite's included (sqlite.org
# "How To Corrupt An SQLite Database File", 2.2): in WAL another process then takes itself for
# the last connection, checkpoints and removes the -wal and -shm still in use here, and commits
# made here are lost. So the header is read with a descriptor of our own only while no
# connection of this process holds the file (docs/architecture.md "Ledger").
_HELD = collections.Counter()
# Reentrant: a collected connection's finalizer may run in this thread while it holds the lock.
_HELD_LOCK = threading.RLock()


def _let_go(key):
    with _HELD_LOCK:
        _HELD[key] -= 1
        if _HELD[key] <= 0:
            del _HELD[key]


class _Connection(sqlite3.Connection):
    """A connection that counts in ``_HELD`` until it is closed or collected."""

    _held = None

    def hold(self, key):
        with _HELD_LOCK:
            _HELD[key] += 1
        self._held = weakref.finalize(self, _let_go, key)

    def close(self):
        super().close()
        if self._held is not None:
            self._held()


# Indexes and the triggers that keep the day and month_outcome totals: an open missing one migrates.
_INDEX_NAMES = frozenset(re.findall(r"CREATE (?:INDEX|TRIGGER) IF NOT EXISTS (\w+)", schema.TABLES + schema.INDEXES))


class SqliteBackend:
    """One ledger file. ``busy`` makes the ``ledger_busy`` error (``core.busy`` words it)."""

    kind = "sqlite"
    # Admission order: the rowid (the clock is read under the write lock, so it follows created_at).
    order_column = "rowid"
    errors = (sqlite3.Error, UnicodeDecodeError)
    left_as_is = "the file was left as it is (nothing is ever reset or deleted)"

    def __init__(self, path, busy):
        self.path = pathlib.Path(path)
        self.location = str(self.path)
        self._busy = busy

    def unavailable(self, why):
        return AccountsError("ledger_unavailable", f"{self.location}: {why}; {self.left_as_is}")

    def map(self, error):
        """``ledger_busy`` for a lock, else ``ledger_unavailable`` naming SQLite's error code.
        SQLite's text is never repeated: it can quote the file's schema, any bytes on any number
        of lines."""
        text = str(error)  # tested, never shown
        if isinstance(error, UnicodeDecodeError) or text.startswith("Could not decode to UTF-8"):
            return self.unavailable("SQLite could not read it: it holds text that is not UTF-8")
        if not hasattr(error, "sqlite_errorname"):  # before Python 3.11 only the text tells
            if isinstance(error, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
                return self._busy()
            return self.unavailable("SQLite refused it")
        name = error.sqlite_errorname or ""
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
            return self._busy()
        if name.startswith("SQLITE_CORRUPT"):
            return self.unavailable("SQLite reports it is corrupt (SQLITE_CORRUPT)")
        if name == "SQLITE_NOTADB":
            return self.unavailable("not an SQLite database (SQLITE_NOTADB)")
        return self.unavailable(f"SQLite refused it ({name})" if re.fullmatch(r"SQLITE_[A-Z_]+", name) else "SQLite refused it")

    # -- transactions --------------------------------------------------------------------------

    # An admission's read runs in a deferred transaction: one snapshot, and no round trip to save.
    rechecked_reads_in_transaction = True

    def begin(self, conn, write):
        conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")

    def bulk(self, conn):
        """A transaction that reads every row: SQLite bounds only lock waits, nothing to raise."""

    def commit(self, conn):
        conn.execute("COMMIT")

    # -- per-account locks: SQLite has one writer, so ``BEGIN IMMEDIATE`` holds every account --------

    def lock_account(self, conn, provider, name):
        pass

    def lock_attempt_account(self, conn, attempt_id):
        pass

    def lock_waiters(self, conn):
        pass

    def begin_admission(self, conn, provider, name, key_env=None):
        conn.execute("BEGIN IMMEDIATE")

    @staticmethod
    def rowcount(cursor):
        return cursor.rowcount

    @staticmethod
    def is_conflict(error):
        return getattr(error, "sqlite_errorname", None) in ("SQLITE_CONSTRAINT_PRIMARYKEY", "SQLITE_CONSTRAINT_UNIQUE")

    def rollback(self, conn):
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    # -- opening and migrating -----------------------------------------------------------------

    def connect(self, timeout):
        """Open (creating a missing ledger whole) and return the connection."""
        try:
            return self._open_file(timeout)
        except OSError as error:
            raise self.unavailable(f"it cannot be opened ({error.strerror or type(error).__name__})") from None
        except (sqlite3.Error, UnicodeDecodeError) as error:
            raise self.map(error) from None

    def _open_file(self, timeout):
        path = self.path
        if path.exists() and not path.is_file():
            raise self.unavailable("not a file")
        if not path.parent.exists():
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(path.parent, 0o700)
        created_empty = False
        if not path.exists():
            created_empty = self._create(path, timeout)
        with _HELD_LOCK:
            status = os.stat(path)
            key = (status.st_dev, status.st_ino)
            if key not in _HELD:
                # A connection of this process that holds the file checked it when it opened.
                with open(path, "rb") as f:
                    header = f.read(len(SQLITE_MAGIC))
                if not header and not created_empty:
                    # Only a missing ledger is created: an empty file may be a ledger that lost its contents.
                    raise self.unavailable(
                        "it is an empty file, which may be a truncated ledger; remove it, or set "
                        "LLM_ACCOUNTS_LEDGER to another file, to start a new ledger"
                    )
                if header and header != SQLITE_MAGIC:
                    raise self.unavailable("not an SQLite database")
            conn = sqlite3.connect(
                str(path), timeout=timeout, isolation_level=None, check_same_thread=False, factory=_Connection
            )
            conn.hold(key)
        conn.row_factory = sqlite3.Row
        try:
            self._prepare(conn, timeout)
        except AccountsError:
            conn.close()
            raise
        except (sqlite3.Error, UnicodeDecodeError) as error:
            conn.close()
            raise self.map(error) from None
        return conn

    def _create(self, path, timeout):
        """Create the missing ledger ``path`` whole: built under a temporary name beside it, then
        hard-linked into place, so no process ever finds it empty. If another process's ledger got
        there first, that one is used. Where the file system has no hard links, an empty file is
        created in place instead and True returned, for this open to fill (a process opening it
        meanwhile finds it empty and refuses)."""
        temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.new")
        os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        try:
            conn = sqlite3.connect(str(temporary), timeout=timeout, isolation_level=None)
            try:
                self._prepare(conn, timeout)
            finally:
                conn.close()
            try:
                os.link(temporary, path)
            except FileExistsError:
                pass
            except OSError:
                try:
                    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                    return True
                except FileExistsError:
                    pass
        finally:
            os.unlink(temporary)
        return False

    def _prepare(self, conn, timeout):
        conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA synchronous = FULL")
        if not _schema_text_is_utf8(conn):
            raise self.unavailable("its schema holds text that is not UTF-8, so it is damaged or not a ledger")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version not in (*schema.MIGRATES_FROM, schema.VERSION):
            raise self.unavailable(
                f"schema version {version} is not one this llm-accounts understands (it reads versions up to {schema.VERSION}); upgrade llm-accounts"
            )
        if version != schema.VERSION or not _schema_complete(conn):
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._migrate(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        # Only a file known to be a ledger changes journal (a foreign database is left as it is).
        # Where it cannot change (a read-only file or directory) it keeps the journal it has: the
        # mode is the file's, so every process uses the same one, and reads still work.
        if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != JOURNAL_MODE:
            conn.execute(f"PRAGMA journal_mode = {JOURNAL_MODE}")

    def _migrate(self, conn):
        """Create a fresh ledger, or bring an older one (version 1, or version 2 missing a later
        column) up to date, under the lock, keeping every row."""
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version == schema.VERSION and _schema_complete(conn):
            return  # another process finished it while this one waited for the lock
        tables = _table_names(conn)
        if version == 0 and tables - set(schema.TABLE_NAMES):
            raise self.unavailable("it holds tables that are not an llm-accounts ledger's")
        if version != 0 and not set(schema.BASE_TABLES) <= tables:
            raise self.unavailable(f"a version-{version} ledger with a base table missing")
        for statement in schema.statements():
            conn.execute(statement)
        added = set()
        for table, column, declaration in schema.COLUMNS:
            if column not in _column_names(conn, table):
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
                added.add(table)
        for statement in schema.statements(schema.INDEXES):
            conn.execute(statement)
        added |= _table_names(conn) - tables  # created by this open: filled from the rows below
        for table in added & set(schema.BACKFILL):
            for statement in schema.statements(schema.BACKFILL[table]):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {schema.VERSION}")

    # -- copies ------------------------------------------------------------------------------------

    def export(self, conn, target):
        """Copy the ledger to the new SQLite file ``target`` with SQLite's backup API: one
        consistent snapshot (the backup holds a read lock for each step it copies)."""
        copy = sqlite3.connect(str(target), isolation_level=None)
        try:
            conn.backup(copy)
        finally:
            copy.close()

    def connect_new(self, timeout):
        """A connection to the new, empty file ``path``, made an empty ledger (an export's copy)."""
        conn = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None)
        try:
            self._prepare(conn, timeout)
        except BaseException:
            conn.close()
            raise
        return conn

    def sqlite_utils_connection(self, ledger, timeout):
        return sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=timeout)


def _table_names(conn):
    return {
        row[0]
        for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
    }


def _column_names(conn, table):
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _schema_text_is_utf8(conn):
    """Whether every name and statement in sqlite_master is UTF-8 (read as bytes, so a bad one is
    found here rather than as a decoding error quoting it)."""
    conn.text_factory = bytes
    try:
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    finally:
        conn.text_factory = str
    try:
        for row in rows:
            for value in row:
                if isinstance(value, bytes):
                    value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _schema_complete(conn):
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index', 'trigger')")}
    if not (set(schema.TABLE_NAMES) | _INDEX_NAMES) <= names:
        return False
    return all(column in _column_names(conn, table) for table, column, _ in schema.COLUMNS)
