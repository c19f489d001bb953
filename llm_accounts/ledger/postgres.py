"""The PostgreSQL backend of the ledger: connecting, locking, dialect and schema creation.

For machines sharing accounts (docs/architecture.md "Ledger on PostgreSQL"): every machine sets
``LLM_ACCOUNTS_LEDGER`` to the same ``postgresql://`` URL. The rules are in the rule modules of
this package (docs/architecture.md "The write path"), the same on both backends; this module only

- connects with psycopg 3 (the ``postgres`` extra; nothing imports it for a SQLite ledger), with
  libpq's URL forms, so a password may come from ``PGPASSWORD``, ``~/.pgpass`` or a service file
  and need not be in the URL; a URL is only ever shown masked (``mask``);
- locks per account: each write transaction shares the ledger's advisory lock (``lock_key``) and
  takes ``pg_advisory_xact_lock`` on each account it changes (``lock_account``), so writes on
  different accounts never wait for each other. A write's statements are held and sent with its
  next read or its commit as one message (``Connection``), so an admission (read unlocked in one
  statement, then the locks and the re-checked insert in one message: ``begin_admission``) and a
  settlement (``replay.py``) hold their account's lock for server time and the commit only. Every
  limit is per account, so the re-check under that lock keeps every guarantee
  (docs/architecture.md "Ledger on PostgreSQL"). Opening the schema takes the ledger's lock alone,
  as an older build's writes do. The locks go with the commit or rollback, so a process killed
  mid-transaction holds nothing (its session ends). READ COMMITTED is enough: a statement run after
  a lock is granted sees every earlier holder's commit. Reads (``status``, ``ladder``) take a
  REPEATABLE READ READ ONLY snapshot and no lock, as SQLite's deferred ``BEGIN`` does;
- bounds every wait: the connection's session sets ``lock_timeout`` and ``statement_timeout`` to
  the busy timeout (five seconds) before its first read, so every statement, reads and the schema
  check on open included, gives up rather than hangs behind a lock held by maintenance
  (``VACUUM FULL``, ``REINDEX`` or a queued ``ALTER TABLE`` on any ledger table); an export, an
  audit and a schema migration, which read or rewrite every row, get ``BULK_TIMEOUT_S`` per
  statement instead, under the same lock bound. Connecting is bounded by libpq's
  ``connect_timeout``. SQLSTATE 55P03 (lock_not_available), 57014 (query_canceled), 40P01 and
  40001 are ``ledger_busy`` (docs/architecture.md "Ledger on PostgreSQL");
- prepares a statement at its second use in a session, under a name made from its text, its
  parameter types and the schema, so that through a pooler (PgBouncer in transaction mode) a
  process runs by name what earlier processes prepared on the server session it is handed
  (docs/postgresql.md "Many short processes: a pooler");
- speaks the dialect: the rules' SQLite-style ``?``, ``?N`` and ``:name`` parameters are rewritten
  to psycopg's, rows answer by name and by position like ``sqlite3.Row``, ``SUM`` of ``bigint``
  (``numeric``) comes back as ``int``, and the admission order SQLite keeps in ``rowid`` is the
  ``seq`` identity column;
- creates the schema: ``schema.TABLES`` and ``schema.COLUMNS`` with ``bigint`` for every integer
  (nanodollars) and ``text COLLATE "C"`` (byte order, as SQLite compares), the totals triggers as
  PL/pgSQL functions that do what ``schema.py``'s SQLite triggers do, and the version in the one-row
  table ``ledger_meta``. Only an empty schema is created into; a schema with other tables, ledger
  tables without ``ledger_meta``, or an unknown version is ``ledger_unavailable`` and is never
  changed.
"""

import decimal
import hashlib
import re

import psycopg
from psycopg.adapt import Loader, PyFormat, Transformer
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from .. import schema
from ..paths import is_database_url, mask_url
from ..errors import AccountsError

META_TABLE = "ledger_meta"
TABLE_NAMES = (*schema.TABLE_NAMES, META_TABLE)
BUSY_SQLSTATES = frozenset(("55P03", "57014", "40P01", "40001"))
# Versions an open brings up to ``schema.VERSION`` (the PostgreSQL ledger shipped at version 2).
MIGRATES_FROM = (2,)
# Per-statement bound for the commands that read or rewrite every row (export, migration on open):
# a large ledger takes longer than the busy timeout to copy, but a lock wait is still the busy one.
BULK_TIMEOUT_S = 600


is_url = is_database_url
mask = mask_url


def lock_key(schema_name):
    """The fixed signed 64-bit advisory-lock key of the ledger in ``schema_name``: derived from
    "llm-accounts" and the schema, so two ledgers in one database never wait for each other."""
    digest = hashlib.sha256(f"llm-accounts\0ledger\0{schema_name}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def lock_space(schema_name):
    """The signed 32-bit key space of the ledger's per-account locks (the two-key advisory locks,
    apart from ``lock_key``'s): one per schema, so two ledgers never wait for each other."""
    digest = hashlib.sha256(f"llm-accounts\0accounts\0{schema_name}".encode()).digest()
    return int.from_bytes(digest[:4], "big", signed=True)


ACCOUNT_LOCK = "SELECT pg_advisory_xact_lock(:space, hashtext('account:' || :provider || ':' || :name))"


# ---------------------------------------------------------------------------------------------
# Dialect


class _IntegralNumeric(Loader):
    """``numeric`` as ``int`` when integral: ``SUM`` over ``bigint`` is ``numeric`` in PostgreSQL,
    and money stays integer nanodollars."""

    def load(self, data):
        text = bytes(data).decode("ascii")
        if re.fullmatch(r"-?\d+", text):
            return int(text)
        return decimal.Decimal(text)


class Row(tuple):
    """A result row by position and by column name, like ``sqlite3.Row`` (``dict(row)`` works)."""

    __slots__ = ()
    _names = ()
    _index = {}

    def __getitem__(self, key):
        if isinstance(key, str):
            return tuple.__getitem__(self, self._index[key])
        return tuple.__getitem__(self, key)

    def keys(self):
        return list(self._names)


_row_classes = {}


def _row_factory(cursor):
    # One class per column list, made once: a statement's rows share it (building a class per
    # execute was a fifth of the client's time per admission, docs/performance.md "Fleet").
    result = cursor.pgresult
    raw = () if result is None else tuple(map(result.fname, range(result.nfields)))
    cls = _row_classes.get(raw)
    if cls is None:
        names = tuple(name.decode() for name in raw)
        cls = type("Row", (Row,), {"__slots__": (), "_names": names, "_index": {n: i for i, n in enumerate(names)}})
        if len(_row_classes) < 1024:
            _row_classes[raw] = cls
    return cls


_PARAM = re.compile(r"""('(?:[^']|'')*'|"(?:[^"]|"")*"|--[^\n]*|\?\d*|(?<!:):[A-Za-z_]\w*|%)""")
_translated = {}


def translate(sql, params):
    """SQLite-style ``sql`` and ``params`` as psycopg's: ``?`` → ``%s``, ``?N`` → ``%(pN)s``,
    ``:name`` → ``%(name)s``, ``%`` → ``%%``; quoted text and comments are left as they are."""
    if not params:
        return sql, None
    numbered = isinstance(params, (tuple, list)) and "?" in sql and re.search(r"\?\d", sql) is not None
    key = (sql, numbered)
    query = _translated.get(key)
    if query is None:

        def replace(match):
            token = match.group(0)
            if token[0] in "'\"-":
                return token.replace("%", "%%")
            if token == "%":
                return "%%"
            if token == "?":
                return "%s"
            if token[0] == "?":
                return f"%(p{token[1:]})s"
            return f"%({token[1:]})s"

        query = _PARAM.sub(replace, sql)
        _translated[key] = query
    if isinstance(params, dict):
        return query, {k: int(v) if isinstance(v, bool) else v for k, v in params.items()}
    values = [int(v) if isinstance(v, bool) else v for v in params]
    if numbered:
        return query, {f"p{i}": value for i, value in enumerate(values, 1)}
    return query, values


def rollback(raw):
    """ROLLBACK past psycopg's own prepared-statement cache: psycopg answers a ROLLBACK it sees
    with DEALLOCATE ALL, which would drop this session's statements too (``Connection.send``
    would take them for lost to a pooler and stop preparing)."""
    result = raw.pgconn.exec_(b"ROLLBACK")
    if result.status != psycopg.pq.ExecStatus.COMMAND_OK:
        raise psycopg.OperationalError("ROLLBACK failed")


_WRITE = re.compile(r"\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
_PREPARABLE = re.compile(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH|VALUES)\b", re.IGNORECASE)  # what PREPARE takes


class Connection:
    """The psycopg connection, answering ``execute`` in the rules' SQLite dialect.

    Inside a transaction (``hold_from``) statements whose answer the rule does not read (BEGIN,
    the locks, writes) are held, and sent with the next statement the rule reads from, or with
    the COMMIT, as one message of the simple query protocol with its values bound on the client
    (psycopg's ``ClientCursor``): a transaction costs a round trip per read it makes plus one,
    and never holds a lock while the server waits for its next statement (docs/architecture.md
    "Ledger on PostgreSQL")."""

    def __init__(self, raw, backend=None):
        self.raw = raw
        self.backend = backend  # its locks (``writes.lock_account``)
        self._held = None  # statements not sent yet, as ``Held``; None outside a held transaction
        self._sent = False  # whether this transaction has sent anything yet
        self._writing = False
        self._prepare = True  # False once the server lost this session's statements (``send``)
        self._shared = None  # the ledger's shared lock, held back to go with the first lock taken
        self._statements = {}  # (query, parameter types) -> the name it runs as on the server
        self._names = {}  # (query, parameter types) -> its name (``_name``), worked out once
        self._given = set()  # every name this session sent a PREPARE for (``PREPARED_LIMIT``)
        self._seen = set()  # statement keys sent once, unprepared (``_prepared``)
        self._unsure = {}  # name -> key, prepared in a message that failed (``_resolve``)
        # Set on open (``opened``): the schema, in every name; whether the server session served
        # a ledger session before this one (a pooler's), and the statements it has.
        self._schema, self._reused, self._on_server = "", False, frozenset()
        self._transformer = Transformer(raw)

    def opened(self, schema_name, reused, names):
        """What the open learnt of the server session (``PostgresBackend._prepare``). A session a
        pooler hands from process to process (``reused``) keeps the statements earlier processes
        prepared: this one runs them by name, its reads too, and prepares a statement at its
        first use, so the next process finds it (docs/performance.md "Fleet")."""
        self._schema, self._reused, self._on_server = schema_name, reused, frozenset(names)
        if reused:
            self.raw.prepare_threshold = None  # its reads go by name (``execute``), not psycopg's

    def execute(self, sql, params=()):
        if self._held is None:
            query, values = translate(sql, params)
            if self._reused and self._prepare and values and self.raw.info.transaction_status == TransactionStatus.IDLE:
                return self._send_prepared([Held(self, query, values)])
            try:
                return self.raw.execute(query, values)
            except psycopg.Error as error:
                # One statement in autocommit, refused whole: psycopg's own prepared statement
                # (a read it runs often) is gone as the session's are (``send``).
                if getattr(error, "sqlstate", None) not in LOST or self.raw.prepare_threshold is None:
                    raise
            self._stop_preparing()
            return self.raw.execute(query, values)
        held = self.hold(sql, params)
        if _WRITE.match(sql) and "RETURNING" not in sql.upper():
            return held
        return self.send()

    def hold_from(self, *statements, shared=None, write=False):
        """Start holding statements, beginning with ``statements`` (each ``(sql, params)``).
        ``shared`` is the ledger's shared lock, as named parameters: it goes into the first
        account lock's statement (``hold_lock``), or ahead of any other statement. ``write``: a
        write transaction, whose first message prepares its statements (``send``)."""
        self._held, self._sent, self._shared, self._writing = [], False, None, write
        for sql, params in statements:
            self.hold(sql, params)
        self._shared = shared

    def hold(self, sql, params=()):
        """Queue one statement (a single one: each gives one result) to go with the next send."""
        if self._shared is not None:
            self.hold_lock("SELECT 1", {})
        return self.hold_translated(*translate(sql, params))

    def hold_lock(self, sql, params):
        """Queue ``SELECT <lock>`` (named parameters, no FROM), taking the ledger's shared lock
        first in the same statement if the transaction has not taken it yet: one statement, not
        two (the select list is evaluated in order)."""
        if self._shared is not None:
            sql = f"SELECT pg_advisory_xact_lock_shared(:ledger_key), {sql.removeprefix('SELECT ')}"
            params = {**params, "ledger_key": self._shared}
            self._shared = None
        return self.hold_translated(*translate(sql, params))

    def hold_translated(self, query, values):
        """``hold`` for a statement already in psycopg's dialect (``translate``)."""
        held = Held(self, query, values)
        self._held.append(held)
        return held

    def send(self):
        """Send every held statement as one message; returns the cursor on the last one's result.
        An error in any of them raises here, and the transaction is left for ``rollback``.

        In the first message of a write transaction (``hold_from(write=True)``), a statement with
        parameters that this session sent before runs as ``EXECUTE`` of a statement it prepared
        (``PREPARE`` goes ahead of its second use), so the server parses it once per session as
        psycopg's own prepared statements do, rather than the whole text each time, while a
        process that sends it once (one admission) never pays for preparing it; its parameters
        get the types psycopg would send (``_prepared``). On a server session a pooler handed
        over, statements an earlier process prepared run by name and the others are prepared at
        their first use (``opened``). Where the server no longer has them (a pooler such as
        PgBouncer in transaction mode handed this transaction another server session), the
        message failed whole, so it is sent again inline, and this session prepares nothing more."""
        held, self._held = self._held, []
        first, self._sent = not self._sent, True
        ordered = first and self._writing
        if not (ordered and self._prepare):
            return self._send(held, False, ordered)
        return self._send_prepared(held, ordered)

    def _send_prepared(self, held, ordered=False):
        """``_send`` with its statements prepared or run by name, sent again inline where the
        server no longer has them; the server session is idle before it (nothing of the
        transaction was sent yet)."""
        if self._unsure:
            self._resolve()
        try:
            return self._send(held, True, ordered)
        except psycopg.Error as error:
            if getattr(error, "sqlstate", None) not in LOST:
                raise
        self._stop_preparing()
        if self.raw.info.transaction_status != TransactionStatus.IDLE:
            rollback(self.raw)  # the message began the transaction: nothing was written
        return self._send(held, False, ordered)

    def _resolve(self):
        """Ask which statements prepared in a message that failed the server kept (PREPARE is not
        undone with its transaction): those run by name, the others are prepared again."""
        names, self._unsure = self._unsure, {}
        kept = {row[0] for row in self.raw.execute(
            "SELECT name FROM pg_prepared_statements WHERE name = ANY(%s)", (list(names),))}
        self._statements.update((key, name) for name, key in names.items() if name in kept)

    def _stop_preparing(self):
        """The server lost this session's prepared statements (a pooler): neither this
        connection nor psycopg prepares any more."""
        self._prepare = False
        self.raw.prepare_threshold = None

    def _send(self, held, prepare, ordered=False):
        """Send ``held`` as one message. ``ordered``: the first message of a write transaction,
        whose statements the server plans in it (sent inline or prepared; the totals trigger's the
        first time a session runs it) are planned with their joins in the order written
        (``ORDER_AS_WRITTEN``)."""
        cursor = psycopg.ClientCursor(self.raw)
        parts, results, preparing = [], [], []
        planned = False
        for h in held:
            name, text = self._prepared(h, dict(preparing)) if prepare else (None, None)
            if name is None:
                parts.append(cursor.mogrify(h.query, h.values))
                planned = planned or bool(h.values)
            else:
                if text is not None:
                    parts.append(text)
                    results.append(None)
                    preparing.append((h.key, name))
                    planned = True
                literal = self._transformer.as_literal
                parts.append(f"EXECUTE {name} ({', '.join(literal(v).decode() for v in h.taken)})")
            results.append(h)
        if ordered and planned:
            at = 1 if held and held[0].query == "BEGIN" else 0  # SET LOCAL: inside the transaction
            parts[at:at] = ORDER_AS_WRITTEN
            results[at:at] = [None] * len(ORDER_AS_WRITTEN)
        try:
            cursor.execute(";\n".join(parts))
        except psycopg.Error:
            # A PREPARE ahead of the failing statement may have run: asked before the next one.
            self._unsure.update((name, key) for key, name in preparing)
            raise
        self._statements.update(preparing)  # known once the message succeeded
        for i, h in enumerate(results):
            if i:
                cursor.nextset()
            if h is not None:
                h.rowcount = cursor.rowcount
        return cursor

    def _prepared(self, held, preparing):
        """``(name, PREPARE text or None)`` for a held statement, or ``(None, None)`` to send it
        inline (no parameters, or one psycopg would not type). Sets ``held.taken``, the values
        its ``EXECUTE`` passes."""
        if not held.values or not _PREPARABLE.match(held.query):
            return None, None
        text, taken = _numbered(held.query, held.values)
        if not taken:
            return None, None
        types = []
        for value in taken:
            oid = 0 if value is None else self._transformer.get_dumper(value, PyFormat.TEXT).oid
            if oid not in _OID_TYPES:
                return None, None
            types.append(_OID_TYPES[oid])
        key = held.key = (held.query, tuple(types))
        held.taken = taken
        name = self._statements.get(key) or preparing.get(key)
        if name is not None:
            return name, None
        name = self._names.get(key)
        if name is None:
            name = self._names[key] = _name(self._schema, text, types)
        if name in self._on_server:
            self._statements[key] = name  # an earlier process prepared it on this server session
            return name, None
        if not self._reused and key not in self._seen and len(self._seen) < SEEN_LIMIT:
            # Prepared the second time this session sends it: a process that makes one admission
            # (an ``llm`` prompt) on a connection of its own sends its statements once, and
            # preparing them would cost the server more than it saves (docs/performance.md "Fleet").
            self._seen.add(key)
            return None, None
        if name not in self._given and len(self._given) + len(self._on_server) >= PREPARED_LIMIT:
            return None, None  # what a server session a pooler keeps holds is bounded too
        self._given.add(name)
        return name, f"PREPARE {name} ({', '.join(types)}) AS {text}"

    def commit(self):
        """Send what is held with the commit. A transaction that sent nothing before is one
        message: its statements run as the implicit transaction PostgreSQL gives a message of
        several statements (committed together, or none of them if one fails), so its BEGIN
        and COMMIT are left out."""
        if self._sent:
            self.hold("COMMIT")
        else:
            del self._held[0]  # the BEGIN ``hold_from`` started with
        try:
            if self._held:
                self.send()
        finally:
            self.end_hold()

    def end_hold(self):
        """Stop holding; statements never sent are dropped (a rollback follows)."""
        self._held, self._shared = None, None

    def close(self):
        self.raw.close()


# A session prepares at most this many statements, counting those it found on a server session
# a pooler handed it; past it, new ones are sent inline. The write path has a few dozen shapes; a
# notebook's own queries, or a pooled server session's many processes, should not grow the
# server's memory.
PREPARED_LIMIT = 256
PREFIX = "llm_accounts_"  # every statement the ledger prepares is named so (``_name``)
# Where a write transaction's statements are planned (a process's first admission, a statement's
# preparing), the planner takes their joins in the order written rather than searching for one:
# each joins rows found by key, starting from the row the statement is about, so no other order is
# better, and the search was a tenth of a new server session's CPU for its first admission
# (docs/performance.md "Fleet"). Local to the transaction: reports plan as before.
ORDER_AS_WRITTEN = ["SET LOCAL join_collapse_limit = 1", "SET LOCAL from_collapse_limit = 1"]
SEEN_LIMIT = 4096  # statements remembered as sent once; past it, the next new one is prepared at once
# invalid_sql_statement_name, duplicate_prepared_statement: the server lost, or never had, what
# the session prepared (a pooler handing it another server connection); feature_not_supported:
# "cached plan must not change result type", a statement over ``SELECT *`` prepared before
# another build added a column on open. Either way the statement did not run.
LOST = ("26000", "42P05", "0A000")
# The types psycopg gives the values it sends (int by magnitude, str as unknown so the server
# infers it, as it does for NULL): a prepared statement declares the same, so it means the same.
_OID_TYPES = {0: "unknown", 21: "smallint", 23: "integer", 20: "bigint", 1700: "numeric"}
PLACEHOLDER = re.compile(r"%%|%s|%\((\w+)\)s")


def _name(schema_name, text, types):
    """A prepared statement's name: the same for the same statement over the same schema in every
    process, so a server session a pooler hands from one process to the next (PgBouncer in
    transaction mode) serves each the statements an earlier one prepared. Another statement gets
    another name, and so does another schema's: PostgreSQL parses a prepared statement again
    whenever the search_path changed since its last use, so one name shared by two schemas on a
    server session would be parsed and planned anew at each turn."""
    digest = hashlib.blake2b(f"{schema_name}\0{', '.join(types)}\0{text}".encode(), digest_size=12).hexdigest()
    return f"{PREFIX}{digest}"


_numbering = {}


def _numbered(query, values):
    """psycopg's ``%s`` / ``%(name)s`` placeholders as ``$1``...: the text and the values it
    takes, in order (a named value the text does not use is left out: the server could not type
    it). The text and the order are worked out once per query."""
    named = isinstance(values, dict)
    key = (query, tuple(values) if named else len(values))
    found = _numbering.get(key)
    if found is None:
        order = []  # names, or positions, in the order of $1, $2...

        def number(match):
            if match.group(0) == "%%":
                return "%"
            name = match.group(1) if match.group(1) is not None else len(order)
            if name not in order or not named:
                order.append(name)
            return f"${order.index(name) + 1 if named else len(order)}"

        found = (PLACEHOLDER.sub(number, query), tuple(order))
        if len(_numbering) < 4096:
            _numbering[key] = found
    text, order = found
    return text, [values[name] for name in order]


class Held:
    """A statement held for the next send; its ``rowcount`` sends it if asked before."""

    def __init__(self, conn, query, values):
        self._conn, self.query, self.values, self._rowcount = conn, query, values, None
        self.key = self.taken = None

    @property
    def rowcount(self):
        if self._rowcount is None:
            self._conn.send()
        return self._rowcount

    @rowcount.setter
    def rowcount(self, value):
        self._rowcount = value


# ---------------------------------------------------------------------------------------------
# Schema


def _pg_type(declaration):
    declaration = re.sub(r"\bINTEGER\b", "bigint", declaration)
    return re.sub(r"\bTEXT\b", 'text COLLATE "C"', declaration)


def _table_statements():
    for statement in schema.statements():
        body = re.sub(r"--[^\n]*", "", statement).strip()
        if not body or body.startswith("CREATE TRIGGER"):
            continue
        body = body.replace(") WITHOUT ROWID", ")")
        if body.startswith("CREATE TABLE IF NOT EXISTS attempt ("):
            # SQLite's rowid order, explicit: admission order for ``attempts()``.
            body = body.replace("attempt (", "attempt (\n    seq bigint GENERATED ALWAYS AS IDENTITY,", 1)
        yield _pg_type(body)


TOTALS_TRIGGERS = """
CREATE OR REPLACE FUNCTION llm_accounts_attempt_totals() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    old_cost bigint; new_cost bigint; old_open bigint; new_open bigint;
    old_tokens bigint; new_tokens bigint; old_open_tokens bigint; new_open_tokens bigint;
BEGIN
    -- What schema.py's attempt_totals_*, attempt_client_*, attempt_model_* and
    -- attempt_conversation_* triggers do, in one function so a changed attempt calls one. An
    -- attempt's provider, account, month, day, client, model and scope never change, so an update
    -- writes each totals row it is counted in once, and only where its figures moved; a
    -- month_outcome row is keyed by state and outcome too, so a settlement moves the attempt from
    -- one such row to another (docs/performance.md "Fleet").
    IF TG_OP = 'DELETE' THEN
        old_cost := COALESCE(OLD.cost_nusd, 0);
        old_open := CASE WHEN OLD.state = 'open' THEN OLD.ceiling_nusd ELSE 0 END;
        UPDATE day SET attempts = day.attempts - 1, settled_nusd = day.settled_nusd - old_cost,
            open_nusd = day.open_nusd - old_open
        WHERE day.day_utc = OLD.day_utc AND day.provider = OLD.provider AND day.account = OLD.account;
        UPDATE month_outcome SET attempts = month_outcome.attempts - 1, cost_nusd = month_outcome.cost_nusd - old_cost,
            open_nusd = month_outcome.open_nusd - old_open
        WHERE month_outcome.month_utc = OLD.month_utc AND month_outcome.provider = OLD.provider
            AND month_outcome.account = OLD.account AND month_outcome.state = OLD.state
            AND month_outcome.outcome = COALESCE(OLD.outcome, '')
            AND month_outcome.provider_error_type = COALESCE(OLD.provider_error_type, '')
            AND month_outcome.rejection_class = COALESCE(OLD.rejection_class, '')
            AND month_outcome.http_status = COALESCE(OLD.http_status, 0);
        IF OLD.client IS NOT NULL THEN
            UPDATE month_client SET attempts = month_client.attempts - 1,
                settled_nusd = month_client.settled_nusd - old_cost, open_nusd = month_client.open_nusd - old_open,
                tokens = month_client.tokens - CASE WHEN OLD.state = 'settled' THEN COALESCE(OLD.tokens, 0) ELSE 0 END,
                open_tokens = month_client.open_tokens
                    - CASE WHEN OLD.state = 'open' THEN COALESCE(OLD.ceiling_tokens, 0) ELSE 0 END
            WHERE month_client.month_utc = OLD.month_utc AND month_client.provider = OLD.provider
                AND month_client.account = OLD.account AND month_client.client = OLD.client;
        END IF;
        UPDATE month_model SET attempts = month_model.attempts - 1, settled_nusd = month_model.settled_nusd - old_cost,
            open_nusd = month_model.open_nusd - old_open
        WHERE month_model.month_utc = OLD.month_utc AND month_model.provider = OLD.provider
            AND month_model.account = OLD.account AND month_model.model = OLD.requested_model;
        IF OLD.scope_kind = 'conversation' THEN
            UPDATE month_conversation SET attempts = month_conversation.attempts - 1,
                settled_nusd = month_conversation.settled_nusd - old_cost,
                open_nusd = month_conversation.open_nusd - old_open
            WHERE month_conversation.month_utc = OLD.month_utc AND month_conversation.provider = OLD.provider
                AND month_conversation.account = OLD.account AND month_conversation.conversation = OLD.scope_id;
        END IF;
        RETURN OLD;
    END IF;
    new_cost := COALESCE(NEW.cost_nusd, 0);
    new_open := CASE WHEN NEW.state = 'open' THEN NEW.ceiling_nusd ELSE 0 END;
    new_tokens := CASE WHEN NEW.state = 'settled' THEN COALESCE(NEW.tokens, 0) ELSE 0 END;
    new_open_tokens := CASE WHEN NEW.state = 'open' THEN COALESCE(NEW.ceiling_tokens, 0) ELSE 0 END;
    IF TG_OP = 'INSERT' THEN
        INSERT INTO day (day_utc, provider, account, attempts, settled_nusd, open_nusd)
        VALUES (NEW.day_utc, NEW.provider, NEW.account, 1, new_cost, new_open)
        ON CONFLICT (day_utc, provider, account) DO UPDATE SET attempts = day.attempts + 1,
            settled_nusd = day.settled_nusd + excluded.settled_nusd, open_nusd = day.open_nusd + excluded.open_nusd;
        INSERT INTO month_outcome (month_utc, provider, account, state, outcome, provider_error_type, rejection_class,
            http_status, attempts, cost_nusd, open_nusd, last_at)
        VALUES (NEW.month_utc, NEW.provider, NEW.account, NEW.state, COALESCE(NEW.outcome, ''),
                COALESCE(NEW.provider_error_type, ''), COALESCE(NEW.rejection_class, ''), COALESCE(NEW.http_status, 0),
                1, new_cost, new_open, COALESCE(NEW.settled_at, NEW.created_at))
        ON CONFLICT (month_utc, provider, account, state, outcome, provider_error_type, rejection_class, http_status)
        DO UPDATE SET attempts = month_outcome.attempts + 1, cost_nusd = month_outcome.cost_nusd + excluded.cost_nusd,
            open_nusd = month_outcome.open_nusd + excluded.open_nusd,
            last_at = GREATEST(month_outcome.last_at, excluded.last_at);
        IF NEW.client IS NOT NULL THEN
            INSERT INTO month_client (month_utc, provider, account, client, attempts, settled_nusd, open_nusd, tokens,
                open_tokens)
            VALUES (NEW.month_utc, NEW.provider, NEW.account, NEW.client, 1, new_cost, new_open, new_tokens,
                    new_open_tokens)
            ON CONFLICT (month_utc, provider, account, client) DO UPDATE SET attempts = month_client.attempts + 1,
                settled_nusd = month_client.settled_nusd + excluded.settled_nusd,
                open_nusd = month_client.open_nusd + excluded.open_nusd, tokens = month_client.tokens + excluded.tokens,
                open_tokens = month_client.open_tokens + excluded.open_tokens;
        END IF;
        INSERT INTO month_model (month_utc, provider, account, model, attempts, settled_nusd, open_nusd)
        VALUES (NEW.month_utc, NEW.provider, NEW.account, NEW.requested_model, 1, new_cost, new_open)
        ON CONFLICT (month_utc, provider, account, model) DO UPDATE SET attempts = month_model.attempts + 1,
            settled_nusd = month_model.settled_nusd + excluded.settled_nusd,
            open_nusd = month_model.open_nusd + excluded.open_nusd;
        IF NEW.scope_kind = 'conversation' THEN
            INSERT INTO month_conversation (month_utc, provider, account, conversation, attempts, settled_nusd, open_nusd)
            VALUES (NEW.month_utc, NEW.provider, NEW.account, NEW.scope_id, 1, new_cost, new_open)
            ON CONFLICT (month_utc, provider, account, conversation) DO UPDATE SET
                attempts = month_conversation.attempts + 1,
                settled_nusd = month_conversation.settled_nusd + excluded.settled_nusd,
                open_nusd = month_conversation.open_nusd + excluded.open_nusd;
        END IF;
        RETURN NEW;
    END IF;
    -- An update: the same rows, each changed once by the difference.
    old_cost := COALESCE(OLD.cost_nusd, 0);
    old_open := CASE WHEN OLD.state = 'open' THEN OLD.ceiling_nusd ELSE 0 END;
    old_tokens := CASE WHEN OLD.state = 'settled' THEN COALESCE(OLD.tokens, 0) ELSE 0 END;
    old_open_tokens := CASE WHEN OLD.state = 'open' THEN COALESCE(OLD.ceiling_tokens, 0) ELSE 0 END;
    IF (OLD.state, COALESCE(OLD.outcome, ''), COALESCE(OLD.provider_error_type, ''), COALESCE(OLD.rejection_class, ''),
        COALESCE(OLD.http_status, 0)) = (NEW.state, COALESCE(NEW.outcome, ''), COALESCE(NEW.provider_error_type, ''),
        COALESCE(NEW.rejection_class, ''), COALESCE(NEW.http_status, 0)) THEN
        UPDATE month_outcome SET cost_nusd = month_outcome.cost_nusd - old_cost + new_cost,
            open_nusd = month_outcome.open_nusd - old_open + new_open,
            last_at = GREATEST(month_outcome.last_at, COALESCE(NEW.settled_at, NEW.created_at))
        WHERE month_outcome.month_utc = NEW.month_utc AND month_outcome.provider = NEW.provider
            AND month_outcome.account = NEW.account AND month_outcome.state = NEW.state
            AND month_outcome.outcome = COALESCE(NEW.outcome, '')
            AND month_outcome.provider_error_type = COALESCE(NEW.provider_error_type, '')
            AND month_outcome.rejection_class = COALESCE(NEW.rejection_class, '')
            AND month_outcome.http_status = COALESCE(NEW.http_status, 0);
    ELSE
        UPDATE month_outcome SET attempts = month_outcome.attempts - 1, cost_nusd = month_outcome.cost_nusd - old_cost,
            open_nusd = month_outcome.open_nusd - old_open
        WHERE month_outcome.month_utc = OLD.month_utc AND month_outcome.provider = OLD.provider
            AND month_outcome.account = OLD.account AND month_outcome.state = OLD.state
            AND month_outcome.outcome = COALESCE(OLD.outcome, '')
            AND month_outcome.provider_error_type = COALESCE(OLD.provider_error_type, '')
            AND month_outcome.rejection_class = COALESCE(OLD.rejection_class, '')
            AND month_outcome.http_status = COALESCE(OLD.http_status, 0);
        INSERT INTO month_outcome (month_utc, provider, account, state, outcome, provider_error_type, rejection_class,
            http_status, attempts, cost_nusd, open_nusd, last_at)
        VALUES (NEW.month_utc, NEW.provider, NEW.account, NEW.state, COALESCE(NEW.outcome, ''),
                COALESCE(NEW.provider_error_type, ''), COALESCE(NEW.rejection_class, ''), COALESCE(NEW.http_status, 0),
                1, new_cost, new_open, COALESCE(NEW.settled_at, NEW.created_at))
        ON CONFLICT (month_utc, provider, account, state, outcome, provider_error_type, rejection_class, http_status)
        DO UPDATE SET attempts = month_outcome.attempts + 1, cost_nusd = month_outcome.cost_nusd + excluded.cost_nusd,
            open_nusd = month_outcome.open_nusd + excluded.open_nusd,
            last_at = GREATEST(month_outcome.last_at, excluded.last_at);
    END IF;
    IF (old_cost, old_open) = (new_cost, new_open) THEN
        -- No money moved (an outcome recorded on an attempt left open): nor did the other totals,
        -- unless its tokens did.
        IF NEW.client IS NOT NULL AND (old_tokens, old_open_tokens) <> (new_tokens, new_open_tokens) THEN
            UPDATE month_client SET tokens = month_client.tokens - old_tokens + new_tokens,
                open_tokens = month_client.open_tokens - old_open_tokens + new_open_tokens
            WHERE month_client.month_utc = NEW.month_utc AND month_client.provider = NEW.provider
                AND month_client.account = NEW.account AND month_client.client = NEW.client;
        END IF;
        RETURN NEW;
    END IF;
    UPDATE day SET settled_nusd = day.settled_nusd - old_cost + new_cost, open_nusd = day.open_nusd - old_open + new_open
    WHERE day.day_utc = NEW.day_utc AND day.provider = NEW.provider AND day.account = NEW.account;
    IF NEW.client IS NOT NULL THEN
        UPDATE month_client SET settled_nusd = month_client.settled_nusd - old_cost + new_cost,
            open_nusd = month_client.open_nusd - old_open + new_open,
            tokens = month_client.tokens - old_tokens + new_tokens,
            open_tokens = month_client.open_tokens - old_open_tokens + new_open_tokens
        WHERE month_client.month_utc = NEW.month_utc AND month_client.provider = NEW.provider
            AND month_client.account = NEW.account AND month_client.client = NEW.client;
    END IF;
    UPDATE month_model SET settled_nusd = month_model.settled_nusd - old_cost + new_cost,
        open_nusd = month_model.open_nusd - old_open + new_open
    WHERE month_model.month_utc = NEW.month_utc AND month_model.provider = NEW.provider
        AND month_model.account = NEW.account AND month_model.model = NEW.requested_model;
    IF NEW.scope_kind = 'conversation' THEN
        UPDATE month_conversation SET settled_nusd = month_conversation.settled_nusd - old_cost + new_cost,
            open_nusd = month_conversation.open_nusd - old_open + new_open
        WHERE month_conversation.month_utc = NEW.month_utc AND month_conversation.provider = NEW.provider
            AND month_conversation.account = NEW.account AND month_conversation.conversation = NEW.scope_id;
    END IF;
    RETURN NEW;
END $$;

CREATE OR REPLACE FUNCTION llm_accounts_month_conversation_total() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- What schema.py's month_conversation_total_* triggers do: a conversation row's change, added
    -- to its account's period total (an upsert fires the insert trigger or the update one).
    IF TG_OP = 'INSERT' THEN
        INSERT INTO month_conversation_total (month_utc, provider, account, conversations, attempts, settled_nusd,
            open_nusd)
        VALUES (NEW.month_utc, NEW.provider, NEW.account, CASE WHEN NEW.attempts > 0 THEN 1 ELSE 0 END, NEW.attempts,
                NEW.settled_nusd, NEW.open_nusd)
        ON CONFLICT (month_utc, provider, account) DO UPDATE SET
            conversations = month_conversation_total.conversations + excluded.conversations,
            attempts = month_conversation_total.attempts + excluded.attempts,
            settled_nusd = month_conversation_total.settled_nusd + excluded.settled_nusd,
            open_nusd = month_conversation_total.open_nusd + excluded.open_nusd;
        RETURN NEW;
    END IF;
    UPDATE month_conversation_total t SET
        conversations = t.conversations - CASE WHEN OLD.attempts > 0 THEN 1 ELSE 0 END
            + CASE WHEN TG_OP = 'UPDATE' AND NEW.attempts > 0 THEN 1 ELSE 0 END,
        attempts = t.attempts - OLD.attempts + CASE WHEN TG_OP = 'UPDATE' THEN NEW.attempts ELSE 0 END,
        settled_nusd = t.settled_nusd - OLD.settled_nusd + CASE WHEN TG_OP = 'UPDATE' THEN NEW.settled_nusd ELSE 0 END,
        open_nusd = t.open_nusd - OLD.open_nusd + CASE WHEN TG_OP = 'UPDATE' THEN NEW.open_nusd ELSE 0 END
    WHERE t.month_utc = OLD.month_utc AND t.provider = OLD.provider AND t.account = OLD.account;
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS attempt_totals ON attempt;
CREATE TRIGGER attempt_totals AFTER INSERT OR DELETE OR UPDATE OF state, outcome, provider_error_type,
    rejection_class, http_status, cost_nusd, ceiling_nusd, tokens, ceiling_tokens ON attempt
    FOR EACH ROW EXECUTE FUNCTION llm_accounts_attempt_totals();
-- An earlier build's separate triggers, now in llm_accounts_attempt_totals.
DROP TRIGGER IF EXISTS attempt_client ON attempt;
DROP TRIGGER IF EXISTS attempt_model ON attempt;
DROP TRIGGER IF EXISTS attempt_conversation ON attempt;
DROP TRIGGER IF EXISTS month_conversation_total ON month_conversation;
CREATE TRIGGER month_conversation_total AFTER INSERT OR UPDATE OR DELETE ON month_conversation
    FOR EACH ROW EXECUTE FUNCTION llm_accounts_month_conversation_total();
"""

EXTRA = f"""
-- SQLite's rowid order, indexed: attempts() lists the newest first.
CREATE INDEX IF NOT EXISTS attempt_seq ON attempt (seq);
CREATE TABLE IF NOT EXISTS {META_TABLE} (
    one         boolean PRIMARY KEY DEFAULT true CHECK (one),
    version     integer NOT NULL,
    created_at  text NOT NULL DEFAULT (to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"+00:00"'))
);
"""


_stamp = []


def schema_stamp():
    """The stamp of this build's schema: its version and a digest of every statement that creates
    it, kept as the comment of ``ledger_meta`` once an open made the schema this. A build that
    changes a table, column, index or trigger has another stamp, so its first open checks and
    migrates the ledger as before."""
    if not _stamp:
        digest = hashlib.sha256("\n".join(create_statements()).encode()).hexdigest()[:32]
        _stamp.append(f"llm-accounts ledger schema {schema.VERSION} {digest}")
    return _stamp[0]


def create_statements():
    """The whole PostgreSQL schema, in order (every statement idempotent)."""
    yield from _table_statements()
    for table, column, declaration in schema.COLUMNS:
        yield f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {_pg_type(declaration)}"
    yield from schema.statements(re.sub(r"--[^\n]*", "", schema.INDEXES))
    yield EXTRA
    yield TOTALS_TRIGGERS


# ---------------------------------------------------------------------------------------------


class PostgresBackend:
    kind = "postgres"
    order_column = "seq"
    errors = (psycopg.Error,)
    left_as_is = "the database was left as it is (nothing is ever reset or deleted)"

    def __init__(self, url, busy):
        self.url = url
        self.location = mask(url)
        self._busy = busy
        self._timeout = 5.0

    def unavailable(self, why):
        return AccountsError("ledger_unavailable", f"{self.location}: {why}; {self.left_as_is}")

    def map(self, error):
        """``ledger_busy`` for a lock wait past the bound, else ``ledger_unavailable`` naming the
        SQLSTATE only: PostgreSQL's text can quote a row or the URL."""
        state = getattr(error, "sqlstate", None)
        if state in BUSY_SQLSTATES:
            return self._busy()
        if isinstance(error, psycopg.OperationalError) and (state is None or state.startswith("08")):
            text = str(error)  # tested, never shown
            if "authentication failed" in text or "no password supplied" in text:
                return self.unavailable(
                    "PostgreSQL refused the login; check the user and the password (PGPASSWORD, ~/.pgpass or a service file)"
                )
            # A pooler's refusals come with no SQLSTATE (docs/postgresql.md "Many short processes").
            if "unsupported startup parameter" in text:
                return self.unavailable(
                    "the pooler refused a parameter of the URL (PgBouncer passes no options=); give the ledger a "
                    "database of its own, or set the schema on the role: ALTER ROLE ... SET search_path"
                )
            if "no such database" in text:
                return self.unavailable("the pooler has no such database; name one its [databases] section lists")
            if re.search(r'database ".*" does not exist', text):
                return self.unavailable("the URL names a database that does not exist; create it first (createdb)")
            return self.unavailable("PostgreSQL could not be reached (connection failed or lost)")
        if state and re.fullmatch(r"[0-9A-Z]{5}", state):
            if state.startswith("28"):
                return self.unavailable(f"PostgreSQL refused the login (SQLSTATE {state}); check the user and password")
            return self.unavailable(f"PostgreSQL refused it (SQLSTATE {state})")
        return self.unavailable("PostgreSQL refused it")

    # -- transactions --------------------------------------------------------------------------

    # An admission's read is one statement in autocommit (``core.RECHECKED``): a transaction
    # around it would cost two round trips, and the write re-checks what it read.
    rechecked_reads_in_transaction = False

    def begin(self, conn, write):
        # Nothing is sent yet: BEGIN goes with the transaction's first read, or its COMMIT.
        # A write shares the ledger's lock (``lock_key``); every statement's lock waits are
        # bounded by the session's lock_timeout (``_prepare``).
        if write:
            conn.hold_from(("BEGIN", None), shared=self._ledger_key, write=True)
        else:
            conn.hold_from(("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY", None))

    def bulk(self, conn):
        """Inside a transaction that reads every row (``audit``): ``BULK_TIMEOUT_S`` per statement
        until it ends; lock waits keep the busy timeout."""
        conn.hold(f"SET LOCAL statement_timeout = '{BULK_TIMEOUT_S * 1000}ms'")

    def commit(self, conn):
        conn.commit()

    # -- per-account locks (docs/architecture.md "Ledger on PostgreSQL") ------------------------

    def lock_account(self, conn, provider, name):
        """Hold ``name``'s lock to the end of this write transaction: every write that changes an
        account's totals, health or block takes it, so an admission's re-check under it is sound."""
        conn.hold_lock(ACCOUNT_LOCK, {"space": self._space, "provider": provider, "name": name})

    def lock_attempt_account(self, conn, attempt_id):
        """The lock of the account an attempt belongs to, in the statement that finds it."""
        conn.hold(
            "SELECT pg_advisory_xact_lock(:space, hashtext('account:' || provider || ':' || account)) "
            "FROM attempt WHERE id = :id",
            {"space": self._space, "id": attempt_id},
        )

    def lock_waiters(self, conn):
        """The queue of waiters: one writer at a time numbers a new place (``waiter.seq``)."""
        conn.hold_lock("SELECT pg_advisory_xact_lock(:space, hashtext('waiter'))", {"space": self._space})

    def begin_admission(self, conn, provider, name, key_env=None):
        """An admission's transaction: the shared ledger lock, the account's, and the key's when it
        starts the account's period (a key holds one budget a period). Held, like the write and
        the COMMIT after them: the admission is one message."""
        self.begin(conn, True)
        self.lock_account(conn, provider, name)
        if key_env is not None:
            conn.hold_lock("SELECT pg_advisory_xact_lock(:space, hashtext('key_env:' || :key_env))",
                           {"space": self._space, "key_env": key_env})

    @staticmethod
    def rowcount(cursor):
        return cursor.rowcount

    @staticmethod
    def is_conflict(error):
        """A unique key another writer took first (a conversation's first binding, an attempt id)."""
        return getattr(error, "sqlstate", None) == "23505"

    def rollback(self, conn):
        conn.end_hold()
        raw = conn.raw
        if raw.closed:
            return
        if raw.info.transaction_status == TransactionStatus.IDLE:
            return
        try:
            rollback(raw)
        except psycopg.Error:
            pass

    # -- opening -------------------------------------------------------------------------------

    def connect(self, timeout):
        self._timeout = timeout
        try:
            raw = psycopg.connect(
                self.url, autocommit=True, connect_timeout=max(2, int(timeout + 0.999)), row_factory=_row_factory,
                application_name="llm-accounts",
            )
        except psycopg.Error as error:
            raise self.map(error) from None
        except ValueError:  # a URL libpq cannot parse (psycopg's text may quote it)
            raise self.unavailable("the URL is not one libpq can read (postgresql://USER@HOST:PORT/DATABASE)") from None
        raw.adapters.register_loader("numeric", _IntegralNumeric)
        conn = Connection(raw, self)
        try:
            self._prepare(conn, timeout)
        except AccountsError:
            raw.close()
            raise
        except psycopg.Error as error:
            raw.close()
            raise self.map(error) from None
        return conn

    def _prepare(self, conn, timeout):
        raw = conn.raw
        # One exchange: the schema's name and its ledger's stamp (no lock to wait for; psycopg keeps
        # the first result) and whether a ledger session ran on this server session before (a
        # pooler's); the session's bounds for every statement after it, and the mark the next
        # ledger session on it will find.
        schema_name, stamp, served = raw.execute(
            f"SELECT current_schema(), obj_description(to_regclass(quote_ident(current_schema()) || '.{META_TABLE}'), "
            f"'pg_class'), current_setting('{SERVED}', true); "
            f"{_bounds(timeout, timeout)}; {GENERIC_PLANS}; SET {SERVED} = 'on'"
        ).fetchone()
        if schema_name is None:
            raise self.unavailable("its search_path names no schema that exists, so there is nowhere to find the ledger")
        self.schema_name = schema_name
        if served == "on":  # only then: a new server session would pay for planning the view
            names = [row[0] for row in raw.execute(
                f"SELECT name FROM pg_prepared_statements WHERE starts_with(name, '{PREFIX}')")]
            conn.opened(schema_name, True, names)
        else:
            conn.opened(schema_name, False, ())
        lock_timeout = f"SET LOCAL lock_timeout = '{max(1, int(timeout * 1000))}ms'"
        self._ledger_key = lock_key(schema_name)
        self._space = lock_space(schema_name)
        # A ledger this build's schema made or brought up to date says so in one stamp, so opening
        # it reads nothing else (docs/performance.md "Fleet": a process that makes one admission
        # pays for its open too). Any other is checked table by table.
        if stamp == schema_stamp():
            return
        # Writers share the ledger's lock and serialize per account (``lock_account``); opening
        # (creating or migrating the schema) takes it alone, so no write runs meanwhile, and nor
        # does a write of an older build, which takes it alone too (docs/architecture.md "Ledger
        # on PostgreSQL").
        if self._check(raw):
            self._stamp(raw)
            return
        raw.execute(f"BEGIN; {lock_timeout}; SELECT pg_advisory_xact_lock({self._ledger_key})")
        try:
            raw.execute(_bounds(timeout, BULK_TIMEOUT_S, local=True))
            if not self._check(raw, creating=True):
                present = {row[0] for row in raw.execute(
                    "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
                )}
                for statement in create_statements():
                    raw.execute(statement)
                # Totals added after PostgreSQL support are filled from the rows, under the lock
                # and with their triggers, as the SQLite open does (schema.BACKFILL).
                for table in set(BACKFILLED) - present if present else ():
                    for statement in schema.statements(schema.BACKFILL[table]):
                        raw.execute(statement)
                # A version-2 ledger gains what version 3 adds (``waiter``) and says version 3.
                raw.execute(
                    f"INSERT INTO {META_TABLE} (version) VALUES (%s) ON CONFLICT (one) DO UPDATE SET version = excluded.version",
                    (schema.VERSION,),
                )
                raw.execute(f"COMMENT ON TABLE {META_TABLE} IS '{schema_stamp()}'")
            raw.execute("COMMIT")
        except BaseException:
            self.rollback(conn)
            raise

    def _stamp(self, raw):
        """Stamp a ledger found complete (made by an earlier build with the same schema), so the
        next open reads the stamp alone; a role that may not comment on the table opens it as
        before, checked table by table."""
        try:
            raw.execute(f"COMMENT ON TABLE {META_TABLE} IS '{schema_stamp()}'")
        except psycopg.Error as error:
            if getattr(error, "sqlstate", None) not in ("42501", *BUSY_SQLSTATES):
                raise

    def _check(self, raw, creating=False):
        """True when the schema holds a complete ledger of this version; raises for anything that
        is not a ledger; False for an empty schema (or a ledger missing a later table or column)."""
        columns = {}
        for table, column in raw.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        ):
            columns.setdefault(table, set()).add(column)
        if META_TABLE in columns:
            rows = raw.execute(f"SELECT version FROM {META_TABLE}").fetchall()
            version = rows[0][0] if len(rows) == 1 else None
            if version != schema.VERSION and version not in MIGRATES_FROM:
                raise self.unavailable(
                    f"schema version {version} is not one this llm-accounts understands (it reads version {schema.VERSION}); upgrade llm-accounts"
                )
            if not set(schema.BASE_TABLES) <= set(columns):
                raise self.unavailable(f"a version-{version} ledger with a base table missing")
            indexes = {row[0] for row in raw.execute("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")}
            return version == schema.VERSION and set(TABLE_NAMES) <= set(columns) and INDEX_NAMES <= indexes and all(
                column in columns.get(table, ()) for table, column, _ in schema.COLUMNS
            )
        if set(columns) - set(TABLE_NAMES):
            raise self.unavailable(
                "its schema holds tables that are not an llm-accounts ledger's; point LLM_ACCOUNTS_LEDGER at an empty "
                "database or schema (for example ?options=-csearch_path%3Dllm_accounts after creating that schema)"
            )
        if columns:
            raise self.unavailable("it holds ledger tables but no ledger_meta version row, so it is damaged or not a ledger")
        return False

    # -- copies ------------------------------------------------------------------------------------

    def export(self, conn, target):
        """Fill the new SQLite file ``target`` with the ledger's rows from one REPEATABLE READ READ
        ONLY snapshot, in the SQLite schema (``llm_accounts.ledger.sqlite`` creates it). Attempts go
        in ``seq`` order, so the copy's rowids keep admission order; the totals tables are copied as
        PostgreSQL holds them (the copy's triggers would recompute them: their rows are replaced)."""
        import sqlite3

        from .sqlite import SqliteBackend

        copy = SqliteBackend(target, self._busy).connect_new(self._timeout)
        raw = conn.raw
        try:
            copy.execute("BEGIN IMMEDIATE")
            raw.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; "
                        + _bounds(self._timeout, BULK_TIMEOUT_S, local=True))
            try:
                for table in EXPORT_ORDER:
                    names = [row[1] for row in copy.execute(f"PRAGMA table_info({table})")]
                    order = "seq" if table == "attempt" else "1"
                    if table in TOTALS_TABLES:
                        copy.execute(f"DELETE FROM {table}")
                    cursor = raw.cursor(row_factory=tuple_row)
                    cursor.execute(f"SELECT {', '.join(names)} FROM {table} ORDER BY {order}")
                    insert = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
                    while True:
                        rows = cursor.fetchmany(2000)
                        if not rows:
                            break
                        copy.executemany(insert, rows)
            finally:
                raw.execute("COMMIT")
            copy.execute("COMMIT")
        except sqlite3.Error:
            raise self.unavailable("the SQLite copy could not be written") from None
        finally:
            copy.close()

    def sqlite_utils_connection(self, ledger, timeout):
        """A read-only connection to a fresh export (a temporary file, removed at exit)."""
        import atexit
        import os
        import shutil
        import sqlite3
        import tempfile

        directory = tempfile.mkdtemp(prefix="llm-accounts-export-")
        atexit.register(shutil.rmtree, directory, True)
        path = os.path.join(directory, "accounts-ledger.db")
        ledger.export(path)
        return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=timeout)


# The session plans a prepared statement (the write path's, from its second use; psycopg's reads;
# the totals trigger's) once, with its parameters as parameters: every one of them finds rows by
# key, where a plan made for the values at hand is no better, and planning again for each of the
# first five executions was half of an admission's server CPU in a new session (docs/performance.md
# "Fleet"). A statement sent inline (a report, a process's first admission) is planned as before.
GENERIC_PLANS = "SET plan_cache_mode = force_generic_plan"
# A mark each ledger session leaves on its server session: a later session that finds it was
# handed a server session by a pooler, with the statements earlier ones prepared (``opened``).
SERVED = "llm_accounts.served"


def _bounds(lock_s, statement_s, local=False):
    """``SET`` statements bounding lock waits and statement time (docs/architecture.md "Ledger on
    PostgreSQL"): past either, PostgreSQL cancels the statement (55P03, 57014: ``ledger_busy``)."""
    scope = "LOCAL " if local else ""
    return (f"SET {scope}lock_timeout = '{max(1, int(lock_s * 1000))}ms'; "
            f"SET {scope}statement_timeout = '{max(1, int(statement_s * 1000))}ms'")


TOTALS_TABLES = ("day", "month_outcome", "month_client", "month_model", "month_conversation", "month_conversation_total")
BACKFILLED = ("month_model", "month_conversation", "month_conversation_total")  # issue 23: standard SQL, run as is
# An open checks tables, columns and indexes: a ledger missing an index an older build did not
# make is migrated (CREATE INDEX IF NOT EXISTS, keeping every row).
INDEX_NAMES = frozenset(re.findall(r"CREATE INDEX IF NOT EXISTS (\w+)", schema.TABLES + schema.INDEXES))
# Parents before children (foreign keys), attempts before the totals their copy's triggers touch.
EXPORT_ORDER = ("account", "month", "binding", "attempt", "adjustment", "warm_prefix", "health", "model_health",
                *TOTALS_TABLES, "warm_month", "host_health", "budget_warning", "waiter",
                "provider_poll")
assert set(EXPORT_ORDER) == set(schema.TABLE_NAMES), "a table added to schema.TABLE_NAMES must be exported"
