"""The ledger: atomic admission, price ceilings, settlement, credit months.

The rules are in docs/architecture.md "Ledger", "Ceilings and settlement" and "Attempt outcomes".
They live here once; a backend only connects, locks, speaks its dialect and creates the schema:
``llm_accounts.ledger_sqlite`` (the default, one file) and ``llm_accounts.ledger_pg`` (a
``postgresql://`` URL, for machines sharing accounts: docs/architecture.md "Ledger on PostgreSQL").

Every operation is one transaction. A write takes the backend's write lock first (SQLite's
``BEGIN IMMEDIATE``, PostgreSQL's transaction-scoped advisory lock), so "read the totals, check
``S + R + C <= B``, insert the attempt" can never interleave with another process's admission: no
read-check-write spans two transactions. A lock held past five seconds raises ``ledger_busy``; an
unreadable or newer ledger raises ``ledger_unavailable`` and is never reset, replaced or deleted.

Money is integer nanodollars. Each ``month`` row keeps running totals of its attempts (settled
costs, open ceilings, and the same for its newest UTC day), changed in the transaction that
changes an attempt, so admission reads one row per account instead of summing the month;
``audit()`` recomputes them from the attempt rows. Adjustments are summed from ``adjustment``.
A client's cap on an account (docs/architecture.md "Client caps"), in dollars or tokens, is checked in
the same transaction against that client's ``month_client`` totals, kept by the attempt triggers.

Attempt rows hold ids, numbers, closed-set codes and the request digest: never a prompt, body,
header, key, key length or fingerprint.
"""

import asyncio
import dataclasses
import datetime as dt
import logging
import os
import pathlib
import re
import threading
import time
import uuid

from . import cache_savings, clock, forecast, health, selection, thresholds
from .ledger_sqlite import SQLITE_MAGIC, SqliteBackend  # noqa: F401 (SQLITE_MAGIC: part of the API)
from .errors import AccountsError
from .money import INT64_MAX
from .records import (  # the records are part of the ledger's API
    AccountStatus,
    BLOCK_REASONS,
    CALLER_OUTCOMES,
    CLIENT_RE,
    ClientCapStatus,
    Complete,
    NAME_RE,
    NotSent,
    Refused,
    Reservation,
    Scope,
    Unknown,
    account_ref,
    check_pattern,
    check_evidence,
    check_id,
    check_int,
    check_month,
    check_quote,
    check_scope,
    check_source,
    clean_usage,
    billed_tokens,
    capped_clients,
    client_cap,
    client_token_cap,
    clients_only,
    declared_accounts,
    invalid,
    tokens,
)

__all__ = [
    "AccountStatus", "Complete", "Ledger", "NotSent", "Refused", "Reservation", "Scope", "Unknown",
    "open_ledger", "run_async", "settle_async",
]

log = logging.getLogger("llm_accounts.ledger")

BUSY_TIMEOUT_S = 5.0  # SQLite lock wait, then ledger_busy (docs/architecture.md "Ledger")
ADMISSION_TIMEOUT_S = 5.0  # async callers' wait for a worker thread, then ledger_busy


WARM_TTL = dt.timedelta(hours=1)  # created_at + 3,600 s (docs/architecture.md "Warm prefixes")
WARM_PURGE_MARGIN = dt.timedelta(hours=25)
# Whether a new conversation's selection reads the warm-prefix index. Always on; only
# bench/warm_prefix.py turns it off, to measure what affinity is worth (docs/performance.md
# "Warm-prefix affinity"). Rows are written and cleared either way.
WARM_AFFINITY = True


# ---------------------------------------------------------------------------------------------
# Messages


_money = selection.money
_when = selection.when


def _busy(op="reserve", location=None):
    """``ledger_busy``, naming the ledger (``location``: a file, or a URL with its password masked);
    only a refused reservation proves that nothing was sent."""
    fate = {
        "reserve": "nothing was sent, try again",
        "settle": "the attempt's outcome was not written",
    }.get(op, "nothing was written, try again")
    return AccountsError(
        "ledger_busy",
        f"the ledger{f' {location}' if location else ''} stayed locked by another process for {BUSY_TIMEOUT_S:g} s; {fate}",
    )


# ---------------------------------------------------------------------------------------------
# What the ledger knows about one account in one month, read in one statement.


def _health_columns(alias):
    """A health row's columns (``health`` or ``host_health``), named ``<alias>_...`` for ``_health_from``."""
    return ", ".join(
        f"{alias}.{column} AS {alias}_{name}"
        for column, name in (
            ("state", "state"), ("failure_class", "class"), ("http_status", "status"), ("since", "since"),
            ("last_failure_at", "last_failure_at"), ("last_success_at", "last_success_at"),
            ("cooldown_until", "cooldown_until"), ("probe_attempt_id", "probe"), ("transport_failures", "transport"),
        )
    )


def _probe_sql(alias, account, host=None):
    """When the half-open probe of health row ``alias`` was admitted, or NULL: the newest attempt
    on the account (from ``host``, for a host's row) admitted at or after the row's dwell ended and
    not yet given an outcome (``health.probe_outstanding``). Nothing is written to admit a probe,
    so a probe cycle writes its row once (docs/architecture.md "Failure classes and health").
    Read only for a failing row."""
    from_host = "" if host is None else f" AND p.host = {host}"
    return f"""CASE WHEN {alias}.state = 'failing' THEN (SELECT MAX(p.created_at) FROM attempt p
         WHERE p.state = 'open' AND p.outcome IS NULL AND p.provider = {account}.provider
         AND p.account = {account}.name{from_host}
         AND p.created_at >= COALESCE({alias}.cooldown_until, {alias}.last_failure_at)) END"""


# One attempt with its account's block, month totals, adjustments, health and its host's health,
# for settle and reconcile. Parameters: the attempt id, then this machine's host (for an attempt
# admitted before attempts recorded theirs).
_ATTEMPT_SQL = f"""
SELECT t.*, a.block_reason, m.settled_nusd AS m_settled, m.open_nusd AS m_open,
       (SELECT COALESCE(SUM(j.delta_nusd), 0) FROM adjustment j WHERE j.provider = t.provider
         AND j.account = t.account AND j.month_utc = t.month_utc) AS m_adjusted,
       {_health_columns("h")}, {_health_columns("hh")}, COALESCE(t.host, ?2) AS attempt_host,
       mh.since AS mh_since, mh.last_failure_at AS mh_last_failure_at, mh.cooldown_until AS mh_cooldown_until
FROM attempt t
JOIN account a ON a.provider = t.provider AND a.name = t.account
LEFT JOIN month m ON m.provider = t.provider AND m.name = t.account AND m.month_utc = t.month_utc
LEFT JOIN health h ON h.provider = t.provider AND h.account = t.account
LEFT JOIN host_health hh ON hh.provider = t.provider AND hh.account = t.account AND hh.host = COALESCE(t.host, ?2)
LEFT JOIN model_health mh ON mh.provider = t.provider AND mh.account = t.account AND mh.model = t.requested_model
WHERE t.id = ?1
"""

_FACTS_SQL = f"""
SELECT a.name, a.key_env, a.rank, a.weight, a.block_reason, a.blocked_at, a.removed_at,
       m.budget_nusd, m.daily_budget_nusd, m.key_env AS month_key_env,
       m.settled_nusd, m.open_nusd, m.day_utc, m.day_settled_nusd, m.day_open_nusd,
       (SELECT COALESCE(SUM(j.delta_nusd), 0) FROM adjustment j
         WHERE j.provider = a.provider AND j.account = a.name AND j.month_utc = :month) AS adjusted_nusd,
       {_health_columns("h")}, {_probe_sql("h", "a")} AS h_probe_created_at,
       {_health_columns("hh")}, {_probe_sql("hh", "a", ":host")} AS hh_probe_created_at,
       mh.since AS mh_since, mh.last_failure_at AS mh_last_failure_at, mh.cooldown_until AS mh_cooldown_until
FROM account a
LEFT JOIN month m ON m.provider = a.provider AND m.name = a.name AND m.month_utc = :month
LEFT JOIN health h ON h.provider = a.provider AND h.account = a.name
LEFT JOIN host_health hh ON hh.provider = a.provider AND hh.account = a.name AND hh.host = :host
LEFT JOIN model_health mh ON mh.provider = a.provider AND mh.account = a.name AND mh.model = :model
WHERE a.provider = :provider
"""


def this_host():
    """This machine's name as the ledger records it on attempts and ``host_health``: its host
    name when that is a plain identifier, else a digest of it (docs/architecture.md "Failure
    classes and health")."""
    import hashlib
    import socket

    name = socket.gethostname()
    if HOST_RE.fullmatch(name) and "sk-ant" not in name.lower():
        return name
    return "host-" + hashlib.sha256(name.encode("utf-8", "replace")).hexdigest()[:16]


HOST_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def _backend_for(location):
    """The backend for ``location``: a ``postgresql://`` or ``postgres://`` URL (given as text or
    as ``paths.DatabaseURL``) is PostgreSQL, anything else a SQLite file. psycopg is imported only
    for a URL."""
    url = getattr(location, "url", location)
    if isinstance(url, str) and url.startswith(("postgresql://", "postgres://")):
        try:
            from .ledger_pg import PostgresBackend
        except ImportError:
            raise AccountsError(
                "ledger_unavailable",
                "LLM_ACCOUNTS_LEDGER is a PostgreSQL URL, and psycopg 3 is not installed in llm's environment: run "
                "llm install 'psycopg[binary]>=3.1' (or, in the llm-accounts checkout, llm install -e '.[postgres]')",
            ) from None

        return PostgresBackend(url, _busy)
    return SqliteBackend(location, _busy)


def _health_from(row, prefix="h_"):
    if row[f"{prefix}state"] is None:
        return None
    return health.Health(
        state=row[f"{prefix}state"],
        failure_class=row[f"{prefix}class"],
        http_status=row[f"{prefix}status"],
        since=selection.parse_time(row[f"{prefix}since"]),
        last_failure_at=selection.parse_time(row[f"{prefix}last_failure_at"]),
        last_success_at=selection.parse_time(row[f"{prefix}last_success_at"]),
        cooldown_until=selection.parse_time(row[f"{prefix}cooldown_until"]),
        probe_attempt_id=row[f"{prefix}probe"],
        transport_failures=row[f"{prefix}transport"] or 0,
    )


def _iso(t):
    return None if t is None else clock.isoformat(t)


def _model_health_from(row, model):
    """The ``model_health`` columns of ``row`` (prefix ``mh_``) as a record, or ``None``."""
    until = selection.parse_time(row["mh_cooldown_until"])
    if until is None:
        return None
    return health.ModelHealth(
        model=model,
        since=selection.parse_time(row["mh_since"]),
        last_failure_at=selection.parse_time(row["mh_last_failure_at"]),
        cooldown_until=until,
    )


def _facts_from_row(row, now, full=True, model=None):
    """One ``_FACTS_SQL`` row as ``selection.Facts``. ``full=False`` (admission) skips parsing a
    healthy row: only a failing one gates."""
    h = _health_from(row) if full or row["h_state"] == "failing" else None
    hh = _health_from(row, "hh_") if full or row["hh_state"] == "failing" else None
    return selection.Facts(
        name=row["name"],
        key_env=row["key_env"],
        rank=row["rank"],
        weight=row["weight"],
        block_reason=row["block_reason"],
        blocked_at=row["blocked_at"],
        month_row=row["budget_nusd"] is not None,
        budget_nusd=row["budget_nusd"],
        daily_budget_nusd=row["daily_budget_nusd"],
        month_key_env=row["month_key_env"],
        settled_nusd=row["settled_nusd"] or 0,
        open_nusd=row["open_nusd"] or 0,
        day_utc=row["day_utc"],
        day_settled_nusd=row["day_settled_nusd"] or 0,
        day_open_nusd=row["day_open_nusd"] or 0,
        adjusted_nusd=row["adjusted_nusd"],
        removed_at=row["removed_at"],
        record=h,
        probe_taken=health.probe_outstanding(h, selection.parse_time(row["h_probe_created_at"]), now),
        host_record=hh,
        host_probe_taken=health.probe_outstanding(hh, selection.parse_time(row["hh_probe_created_at"]), now),
        in_ledger=True,
        model_record=None if model is None else _model_health_from(row, model),
    )


def _read_facts(conn, provider, month, now, host, full=True, model=None):
    return {
        row["name"]: _facts_from_row(row, now, full, model)
        for row in conn.execute(_FACTS_SQL, {"provider": provider, "month": month, "model": model, "host": host})
    }


class _Deferred:
    """Commit the transaction's writes (a block), then raise ``error``."""

    def __init__(self, error):
        self.error = error


_requested = threading.local()
# An attempt id or a prefix of one, as typed (``resolve_attempt_id``).
_ID_PREFIX = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


# ---------------------------------------------------------------------------------------------


class Ledger:
    """The ledger. One connection per instance, serialized by a lock so worker threads can share
    it; processes (and machines, on PostgreSQL) coordinate through the backend's write lock.

    ``path`` is a file (the SQLite ledger) or a ``postgresql://`` URL (``llm_accounts.ledger_pg``);
    default ``LLM_ACCOUNTS_LEDGER``, else ``accounts-ledger.db`` in the llm user directory. The two
    backends differ only in connecting, locking, dialect and schema creation: every rule below is
    the same on both (docs/architecture.md "Ledger on PostgreSQL")."""

    def __init__(self, path=None, *, host=None):
        # The machine this ledger object admits from: host-class failures (transport) are kept
        # per host (docs/architecture.md "Failure classes and health"). Tests name hosts.
        self.host = this_host() if host is None else check_id(host, "host")
        if path is None:
            from . import paths  # imports llm; only needed for the default path

            path = paths.ledger_path()
        self._backend = _backend_for(path)
        # The file of a SQLite ledger; None on PostgreSQL (``location`` names either, masked).
        self.path = getattr(self._backend, "path", None)
        self.location = self._backend.location
        # What ``status()`` compares the ledger's accounts with when called without any
        # (``open_ledger`` sets the current declaration, so a notebook sees which are declared).
        self.default_accounts = None
        self._lock = threading.Lock()
        self._conn = None
        self._run("open", self._open, transaction=False)

    @property
    def backend(self):
        """``"sqlite"`` or ``"postgres"``."""
        return self._backend.kind

    # -- plumbing ------------------------------------------------------------------------------

    def close(self):
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _unavailable(self, why):
        return self._backend.unavailable(why)

    def _map(self, error):
        """``ledger_busy`` for a lock, else ``ledger_unavailable`` naming the backend's error code,
        never its text (it can quote the schema or a row)."""
        return self._backend.map(error)

    def _run(self, op, fn, *args, write=True, transaction=True):
        """Run ``fn(conn, *args)`` in one transaction; log one DEBUG event (docs/security.md "Logging")."""
        first_line = time.perf_counter()
        requested = getattr(_requested, "at", None)
        _requested.at = None
        outcome = "committed"
        try:
            with self._lock:
                return self._transaction(fn, args, write) if transaction else fn(*args)
        except AccountsError as error:
            outcome = error.code
            if error.code == "ledger_busy":
                raise _busy(op, self.location) from None
            raise
        except BaseException as error:
            outcome = type(error).__name__
            raise
        finally:
            if log.isEnabledFor(logging.DEBUG):
                _log_event(op, outcome, first_line - (requested or first_line), time.perf_counter() - first_line)

    def _transaction(self, fn, args, write):
        conn, backend = self._conn, self._backend
        if conn is None:
            raise self._unavailable("the ledger is closed")
        try:
            backend.begin(conn, write)
        except backend.errors as error:
            raise self._map(error) from None
        try:
            result = fn(conn, *args)
            backend.commit(conn)
        except BaseException as error:
            backend.rollback(conn)
            if isinstance(error, backend.errors):
                raise self._map(error) from None
            raise
        if isinstance(result, _Deferred):
            raise result.error
        return result

    def _open(self):
        # BUSY_TIMEOUT_S is read here, at open, so a test can shorten it.
        self._conn = self._backend.connect(BUSY_TIMEOUT_S)

    def export(self, target):
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
            self._run("export", lambda: self._export_to(temporary), transaction=False)
            os.link(temporary, target)  # never replaces a file that appeared meanwhile
        except FileExistsError:
            raise invalid("PATH", "a file already exists there; an export never overwrites a file, choose a new path") from None
        finally:
            os.unlink(temporary)
        return target

    def _export_to(self, temporary):
        if self._conn is None:
            raise self._unavailable("the ledger is closed")
        try:
            self._backend.export(self._conn, temporary)
        except self._backend.errors as error:
            raise self._map(error) from None

    # -- reserve -------------------------------------------------------------------------------

    def reserve(
        self, scope, attempt_id, quote, accounts, *, pinned=None, client=None, llm_response_id=None, exclude=(), now=None,
        waiter=None,
    ):
        """Admit one physical attempt, or refuse with an ``AccountsError``.

        A bound scope uses its binding; a new scope selects among ``accounts`` (the current
        declaration) and is bound in the same transaction. ``pinned`` restricts it to one account.

        ``exclude`` is the bounded move-on of a new conversation (docs/architecture.md "Failover"):
        accounts already tried are not selected, and a scope whose every attempt was refused
        unbilled (429, 529 or never sent) still counts as new while its bound account is excluded,
        so it is bound to the next candidate.

        ``now`` is for tests; without it the clock is read inside the transaction, once the write
        lock is held, so instants follow commit order and an admission that waited for the lock
        across a credit-period boundary lands in the new period.

        ``waiter`` is the id of a caller that waits for room (docs/architecture.md "Waiting for
        room"). Every admission counts the ceilings of live waiters that arrived before it as held
        on the accounts they may use; a refusal that only ceilings in flight stand in the way of
        carries them in ``error.held``, and with a ``waiter`` it also queues (or renews) the
        caller's ``waiter`` row in the same transaction, keeping its place. Admission deletes it.
        """
        check_scope(scope)
        check_id(attempt_id, "attempt_id")
        check_quote(quote)
        declared = declared_accounts(accounts)
        if pinned is not None:
            check_pattern(pinned, NAME_RE, "account", "must match [a-z][a-z0-9_-]{0,31}")
        if client is not None:
            check_pattern(client, CLIENT_RE, "client", "must be 1-64 letters, digits, '_', '.', ':', '@', '/' or '-'")
        if llm_response_id is not None:
            check_id(llm_response_id, "llm_response_id")
        exclude = frozenset(exclude or ())
        if waiter is not None:
            check_id(waiter, "waiter")
        return self._run(
            "reserve", self._reserve, scope, attempt_id, quote, declared, pinned, client, llm_response_id, exclude, now,
            waiter,
        )

    def _reserve(self, conn, scope, attempt_id, quote, declared, pinned, client, llm_response_id, exclude, now, waiter=None):
        now = now or clock.now()  # after BEGIN IMMEDIATE: the lock is held
        provider = scope.provider
        month, day = clock.credit_month(now), clock.utc_day(now)
        duplicate, newest, bound, waiting = conn.execute(
            """SELECT (SELECT 1 FROM attempt WHERE id = ?1), (SELECT MAX(month_utc) FROM month WHERE provider = ?2),
                 (SELECT account FROM binding WHERE scope_kind = ?3 AND scope_id = ?4 AND provider = ?2),
                 (SELECT 1 FROM waiter LIMIT 1)""",
            (attempt_id, provider, scope.kind, scope.id),
        ).fetchone()
        if duplicate:
            raise AccountsError(
                "duplicate_attempt", "this attempt id is already in the ledger; an attempt id authorizes one send", attempt_id=attempt_id
            )
        if newest is not None and month < newest:
            raise self._unavailable(
                f"the clock says credit period {month}, but the ledger already holds {newest}; correct the system clock (UTC)"
            )
        facts = _read_facts(conn, provider, month, now, self.host, full=False, model=quote.requested_model)
        moving = bound is not None and bound in exclude and _unbilled(conn, scope)
        if moving:
            bound = None
        older, own = _waiters(conn, provider, waiter, now) if waiting else ((), None)
        try:
            if bound is not None:
                verdict = self._bound_verdict(conn, scope, bound, pinned, declared, facts, quote, day, now, client, older)
            elif pinned is not None:
                if pinned not in declared:
                    raise AccountsError("no_account_available", f"account '{pinned}' is not declared", account=pinned)
                verdict = self._verdict(conn, provider, declared[pinned], facts, quote, day, now, client, older)
            else:
                pool = {name: account for name, account in declared.items() if name not in exclude}
                verdict = self._select(conn, provider, pool, facts, quote, day, now, client, older)
            if verdict.code:
                raise AccountsError(
                    verdict.code, verdict.message, account=verdict.account.name, retry_at=verdict.retry_at,
                    held=[_held(verdict)] if verdict.held else (),
                )
        except AccountsError as error:
            if error.held and waiter is not None:
                # Queue (or keep) this caller's place, committed with nothing else (docs/architecture.md
                # "Waiting for room").
                _queue(conn, provider, waiter, own, bound or pinned, quote, now)
                return _Deferred(error)
            if own is not None:  # nothing to wait for any more: its place goes
                conn.execute("DELETE FROM waiter WHERE id = ?", (waiter,))
                return _Deferred(error)
            raise
        if own is not None:
            conn.execute("DELETE FROM waiter WHERE id = ?", (waiter,))
        self._admit(conn, scope, attempt_id, quote, verdict, month, day, now, not moving and bound is None, client, llm_response_id)
        if moving:
            _move_bound(conn, scope, month, verdict)
            conn.execute(
                "UPDATE binding SET account = ?, warm = ? WHERE scope_kind = ? AND scope_id = ? AND provider = ?",
                (verdict.account.name, verdict.warm, scope.kind, scope.id, provider),
            )
        return Reservation(
            attempt_id=attempt_id,
            scope=scope,
            account=verdict.account.name,
            month_utc=month,
            day_utc=day,
            ceiling_nusd=quote.ceiling_nusd,
            new_binding=bound is None,
            probe=verdict.probe,
        )

    def _bound_verdict(self, conn, scope, name, pinned, declared, facts, quote, day, now, client, older=()):
        """A bound scope never moves by itself; ``llm accounts rebind`` moves it (docs/architecture.md "Scope")."""
        conversation = scope.id if scope.kind in ("conversation", "prompt") else "CONVERSATION_ID"
        if pinned is not None and pinned != name:
            raise AccountsError(
                "no_account_available",
                f"this conversation is bound to account '{name}', not '{pinned}'; to move it run: llm accounts rebind {conversation} {pinned}",
                account=name,
            )
        if name not in declared:
            raise AccountsError(
                "account_blocked",
                f"account '{name}', bound to this conversation, is no longer declared; declare it again or run: llm accounts rebind {conversation} NAME",
                account=name,
            )
        verdict = self._verdict(conn, scope.provider, declared[name], facts, quote, day, now, client, older)
        if verdict.code and verdict.code != "account_config_conflict":
            verdict.message += "; a conversation never moves by itself (llm accounts rebind moves it)"
        return verdict

    def _verdict(self, conn, provider, account, facts, quote, day, now, client=None, older=()):
        """Read what ``selection.verdict`` needs beyond ``facts`` (today's totals with a daily
        budget, the client's totals with a cap, what ``older`` waiters are owed here) and ask it.
        Admission and ``ladder`` both come here."""
        f = facts.get(account.name) or selection.Facts(name=account.name)
        day_totals = (0, 0)
        if getattr(account, "daily_budget_nusd", None) is not None:
            day_totals = self._day_totals(conn, provider, f, day)
        totals = (0, 0, 0, 0)
        if client_cap(account, client) is not None or client_token_cap(account, client) is not None:
            totals = tuple(_client_totals(conn, provider, account.name, clock.credit_month(now), client))
        budget = f.budget_nusd or account.budget_nusd

        def ask(f, counts=None):
            return selection.verdict(
                account, f, quote.ceiling_nusd, quote.requested_model, now, client=client,
                others=facts.values(), day_totals=day_totals, client_totals=totals[:2],
                ceiling_tokens=getattr(quote, "ceiling_tokens", None), client_token_totals=totals[2:],
                ahead=selection.ahead(older, account, f, budget, day_totals) if older else (0, 0),
                open_counts=counts,
            )

        verdict = ask(f)
        if verdict.limit is not None and verdict.limit.open:
            # A budget refusal names how many attempts hold the open ceilings and which of them are
            # left open with an unknown outcome (no longer in flight, so not waited for): counted
            # here, on the refusal's path only, so an admission reads no attempt rows.
            verdict = ask(f, _open_counts(conn, provider, account.name, clock.credit_month(now), day, client))
        return verdict

    def _day_totals(self, conn, provider, f, day):
        if f.day_utc == day:
            return f.day_settled_nusd, f.day_open_nusd
        if f.day_utc is None or f.day_utc < day:
            return 0, 0
        # The clock went back within a month: that day's totals from the day table.
        row = conn.execute(
            "SELECT settled_nusd, open_nusd FROM day WHERE day_utc = ? AND provider = ? AND account = ?",
            (day, provider, f.name),
        ).fetchone()
        return (row[0], row[1]) if row else (0, 0)

    def _select(self, conn, provider, declared, facts, quote, day, now, client=None, older=()):
        """Order the candidates (docs/architecture.md "Selection") and bind the first. With none,
        the refusal carries the room held in flight on every account that would hold the attempt
        once its attempts in flight settled: a new conversation waits only when no account has room
        (docs/architecture.md "Waiting for room")."""
        verdicts = [
            self._verdict(conn, provider, account, facts, quote, day, now, client, older) for account in declared.values()
        ]
        fit = [v for v in verdicts if not v.code]
        if not fit:
            codes = {v.code for v in verdicts}
            reasons = "; ".join(v.message for v in verdicts) or "no untried account is declared"
            code = next(
                (c for c in ("budget_exhausted", "account_config_conflict") if c in codes), "no_account_available"
            )
            held = [_held(v) for v in verdicts if v.held]
            raise AccountsError(
                "budget_exhausted" if held else code, f"no account can take a new conversation: {reasons}", held=held
            )
        warm = set()
        cert = getattr(quote, "cert", None)
        if cert is not None and WARM_AFFINITY:
            for row in conn.execute(
                "SELECT account, expires_at FROM warm_prefix WHERE provider = ? AND cert = ?", (provider, cert)
            ):
                expires = selection.parse_time(row["expires_at"])
                if expires is not None and expires > now:
                    warm.add(row["account"])
        by_name = {v.account.name: v for v in fit}
        candidates = selection.order(
            selection.candidate(
                v,
                warm=v.account.name in warm
                and selection.within_warm_bound(v.facts.spent_nusd, v.facts.open_nusd, quote.ceiling_nusd, v.budget_nusd),
            )
            for v in fit
        )
        if len(candidates) > 1 and selection.tied_before_scopes(candidates[0], candidates[1]):
            # Only a tie needs the count of conversations in flight, so only a tie reads it.
            scopes = dict(
                conn.execute(
                    """SELECT account, COUNT(DISTINCT scope_kind || ':' || scope_id) FROM attempt
                       WHERE state = 'open' AND provider = ? GROUP BY account""",
                    (provider,),
                ).fetchall()
            )
            candidates = selection.order(
                dataclasses.replace(c, open_scopes=scopes.get(c.name, 0)) for c in candidates
            )
        chosen = by_name[candidates[0].name]
        if cert is not None and WARM_AFFINITY:
            chosen.warm = candidates[0].warm  # recorded on the binding (docs/architecture.md "Warm prefixes")
        return chosen

    def _admit(self, conn, scope, attempt_id, quote, v, month, day, now, new_binding, client, llm_response_id):
        account, f, ceiling, ts = v.account, v.facts, quote.ceiling_nusd, clock.isoformat(now)
        provider, name = scope.provider, account.name
        self._ensure_account(conn, provider, account, f, ts)
        daily = getattr(account, "daily_budget_nusd", None)
        if f.month_row and f.daily_budget_nusd != daily:
            # The daily budget is policy: the month row shows the one in force at the latest admission.
            conn.execute(
                "UPDATE month SET daily_budget_nusd = ? WHERE provider = ? AND name = ? AND month_utc = ?",
                (daily, provider, name, month),
            )
        if not f.month_row:
            conn.execute(
                """INSERT INTO month (provider, name, month_utc, budget_nusd, daily_budget_nusd, key_env, created_at,
                   settled_nusd, open_nusd, day_utc, day_settled_nusd, day_open_nusd)
                   VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?, 0, ?)""",
                (provider, name, month, account.budget_nusd, daily, account.key_env, ts, ceiling, day, ceiling),
            )
        elif f.day_utc == day:
            conn.execute(
                """UPDATE month SET open_nusd = open_nusd + ?1, day_open_nusd = day_open_nusd + ?1
                   WHERE provider = ?2 AND name = ?3 AND month_utc = ?4""",
                (ceiling, provider, name, month),
            )
        elif f.day_utc is None or f.day_utc < day:
            conn.execute(
                """UPDATE month SET open_nusd = open_nusd + ?1, day_utc = ?2, day_settled_nusd = 0, day_open_nusd = ?1
                   WHERE provider = ?3 AND name = ?4 AND month_utc = ?5""",
                (ceiling, day, provider, name, month),
            )
        else:
            conn.execute(
                "UPDATE month SET open_nusd = open_nusd + ? WHERE provider = ? AND name = ? AND month_utc = ?",
                (ceiling, provider, name, month),
            )
        conn.execute(
            """INSERT INTO attempt (id, scope_kind, scope_id, provider, account, month_utc, day_utc, ceiling_nusd,
               price_revision, requested_model, request_digest, client, llm_response_id, state, created_at,
               ceiling_tokens, host)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'open', ?, ?, ?)""",
            (attempt_id, scope.kind, scope.id, provider, name, month, day, ceiling, quote.price_revision,
             quote.requested_model, quote.request_digest, client, llm_response_id, ts,
             getattr(quote, "ceiling_tokens", None), self.host),
        )
        if new_binding:
            conn.execute(
                "INSERT INTO binding (scope_kind, scope_id, provider, account, created_at, warm) VALUES (?, ?, ?, ?, ?, ?)",
                (scope.kind, scope.id, provider, name, ts, v.warm),
            )
            _count_bound(conn, month, provider, name, v.warm)
        # A probe is admitted without a write: the attempt row itself holds the half-open slot
        # (``_probe_sql``).

    def leave(self, waiter):
        """A waiter that stops waiting gives up its place (docs/architecture.md "Waiting for room")."""
        check_id(waiter, "waiter")
        self._run("leave", lambda conn: conn.execute("DELETE FROM waiter WHERE id = ?", (waiter,)))

    def _ensure_account(self, conn, provider, account, f, ts):
        settings = (account.key_env, account.rank, account.weight)
        if f is None or not f.in_ledger:
            conn.execute(
                """INSERT INTO account (provider, name, key_env, rank, weight, created_at) VALUES (?, ?, ?, ?, ?, ?)
                   ON CONFLICT (provider, name) DO UPDATE SET key_env = excluded.key_env, rank = excluded.rank,
                   weight = excluded.weight, removed_at = NULL""",
                (provider, account.name, *settings, ts),
            )
        elif (f.key_env, f.rank, f.weight) != settings or f.removed_at is not None:
            conn.execute(
                "UPDATE account SET key_env = ?, rank = ?, weight = ?, removed_at = NULL WHERE provider = ? AND name = ?",
                (*settings, provider, account.name),
            )

    # -- settle --------------------------------------------------------------------------------

    def settle(self, attempt_id, evidence, *, cert=None, hour_after_key=False, server_tools=False, now=None):
        """Record what happened to an attempt: ``"settled"``, ``"already_settled"`` or ``"still_open"``.

        ``cert``, ``hour_after_key`` and ``server_tools`` describe the request's stable prefix for
        the warm-prefix index (docs/architecture.md "Warm prefixes"); only a complete settlement uses them.
        Without ``now`` the clock is read inside the transaction, once the write lock is held.
        """
        check_id(attempt_id, "attempt_id")
        fields = check_evidence(evidence)
        if cert is not None:
            check_id(cert, "cert")
        return self._run(
            "settle", self._settle, attempt_id, evidence, fields, cert, bool(hour_after_key), bool(server_tools), now
        )

    def _settle(self, conn, attempt_id, evidence, fields, cert, hour_after_key, server_tools, now):
        now = now or clock.now()  # after BEGIN IMMEDIATE: the lock is held
        ts = clock.isoformat(now)
        row = conn.execute(
            _ATTEMPT_SQL,
            (attempt_id, self.host),
        ).fetchone()
        if row is None:
            raise self._unavailable("it has no attempt with this id (was it reserved on another ledger?)")
        provider, name = row["provider"], row["account"]
        h = _health_from(row)
        hh = _health_from(row, "hh_")
        if row["state"] == "settled":
            if fields is None or _same_settlement(row, fields):
                return "already_settled"
            if isinstance(evidence, Complete) and fields["cost_nusd"] == row["cost_nusd"] and conn.execute(
                "SELECT 1 FROM adjustment WHERE attempt_id = ? AND kind = 'reconciliation'", (attempt_id,)
            ).fetchone():
                # A reconciliation (from the usage report, say) came first and the answer agrees
                # with it: the same cost twice is no conflict (docs/architecture.md "Settling from
                # the provider").
                return "already_settled"
            # Differing final evidence blocks the account; the original row stays
            # (docs/architecture.md "Ceilings and settlement").
            self._block(conn, provider, name, row["block_reason"], "settlement_conflict", f"attempt:{attempt_id}", ts)
            return _Deferred(
                AccountsError(
                    "settlement_conflict",
                    f"attempt was already settled ({row['outcome']}) with different evidence; account '{name}' is blocked "
                    f"until checked (llm accounts reconcile/adjust, then llm accounts unblock {name})",
                    account=name,
                    attempt_id=attempt_id,
                )
            )
        if isinstance(evidence, Unknown):
            return self._record_unknown(conn, row, evidence, h, hh, ts, now)
        cost, ceiling = fields["cost_nusd"], row["ceiling_nusd"]
        month_total = row["m_settled"] + row["m_open"] + row["m_adjusted"] - ceiling + cost
        if month_total > INT64_MAX:
            self._block(conn, provider, name, row["block_reason"], "ceiling_exceeded", f"attempt:{attempt_id}", ts)
            return _Deferred(
                AccountsError(
                    "ceiling_exceeded",
                    "this cost would take the month's total past signed 64-bit nanodollars; the attempt stays open and "
                    f"account '{name}' is blocked",
                    account=name,
                    attempt_id=attempt_id,
                )
            )
        conn.execute(
            """UPDATE attempt SET state = 'settled', settled_at = :ts, outcome = :outcome, cost_nusd = :cost_nusd,
                 served_model = :served_model, usage_json = :usage_json, request_id = :request_id,
                 http_status = :http_status, provider_error_type = :provider_error_type,
                 rejection_class = :rejection_class, failure_class = :failure_class, tokens = :tokens
               WHERE id = :id""",
            {
                "served_model": None, "usage_json": None, "request_id": None, "http_status": None,
                "provider_error_type": None, "rejection_class": None, "failure_class": None,
                **fields, "ts": ts, "id": attempt_id,
                # Billed tokens for client token caps; a refusal or a never-sent attempt billed none.
                "tokens": billed_tokens(clean_usage(evidence.usage)) if isinstance(evidence, Complete) else 0,
            },
        )
        _move_to_settled(conn, row, cost)
        if isinstance(evidence, Complete):
            self._settle_complete(conn, row, evidence, h, hh, cert, hour_after_key, server_tools, ts, now)
        elif isinstance(evidence, NotSent):
            if not evidence.caller_cancelled:
                _clear_warm(conn, provider, name)
        else:
            _clear_warm(conn, provider, name)
            self._record_failure(
                conn, row, h, hh, evidence.failure_class, evidence.http_status, ts, now, evidence.retry_after_s
            )
        return "settled"

    def _settle_complete(self, conn, row, evidence, h, hh, cert, hour_after_key, server_tools, ts, now):
        provider, name, attempt_id = row["provider"], row["account"], row["id"]
        admitted = selection.parse_time(row["created_at"])
        _write_health(conn, provider, name, health.record_success(h, now, admitted, attempt_id))
        if hh is not None:
            # The path from this attempt's machine works: its host row is cleared the same way.
            _write_health(conn, provider, name, health.record_success(hh, now, admitted, attempt_id), row["attempt_host"])
        saved = cache_savings.saved_nusd(evidence.usage, evidence.served_model, row["price_revision"])
        if saved:
            conn.execute(
                """INSERT INTO warm_month (month_utc, provider, account, cache_saved_nusd) VALUES (?, ?, ?, ?)
                   ON CONFLICT (month_utc, provider, account) DO UPDATE SET cache_saved_nusd = warm_month.cache_saved_nusd + excluded.cache_saved_nusd""",
                (row["month_utc"], provider, name, saved),
            )
        if health.model_success_clears(_model_health_from(row, row["requested_model"]), admitted):
            conn.execute(
                "DELETE FROM model_health WHERE provider = ? AND account = ? AND model = ?",
                (provider, name, row["requested_model"]),
            )
        if evidence.cost_nusd > row["ceiling_nusd"]:
            # Record the true cost, never clamp it, and block the account
            # (docs/architecture.md "Ceilings and settlement").
            log.warning("attempt cost exceeded its ceiling; account %s blocked (ceiling_exceeded)", name)
            self._block(conn, provider, name, row["block_reason"], "ceiling_exceeded", f"attempt:{attempt_id}", ts)
        elif cert is not None and row["block_reason"] is None:
            _write_warm(conn, row, clean_usage(evidence.usage), cert, hour_after_key, server_tools)

    def _record_unknown(self, conn, row, evidence, h, hh, ts, now):
        """The attempt stays open; its first recorded reason stands (docs/architecture.md "Attempt outcomes")."""
        provider, name = row["provider"], row["account"]
        if row["outcome"] is None or (row["failure_class"] is None and evidence.failure_class is not None):
            # What the user was shown of a refusal is kept with it (docs/errors.md "Rejection classes").
            conn.execute(
                """UPDATE attempt SET outcome = COALESCE(outcome, ?), failure_class = COALESCE(failure_class, ?),
                   http_status = COALESCE(http_status, ?), provider_error_type = COALESCE(provider_error_type, ?),
                   rejection_class = COALESCE(rejection_class, ?) WHERE id = ?""",
                (evidence.outcome, evidence.failure_class, evidence.http_status, evidence.provider_error_type,
                 evidence.rejection_class, row["id"]),
            )
        if evidence.outcome not in CALLER_OUTCOMES:
            _clear_warm(conn, provider, name)
        self._record_failure(conn, row, h, hh, evidence.failure_class, evidence.http_status, ts, now)
        return "still_open"

    def _record_failure(self, conn, row, h, hh, failure_class, http_status, ts, now, retry_after_s=None):
        """Write what a failure of ``failure_class`` changes: a model's row, the attempt's host's
        row (``health.HOST_CLASSES``) or the account's (docs/architecture.md "Failure classes and
        health"). A failure with no verdict writes nothing: its attempt, now given an outcome, no
        longer holds a probe slot."""
        provider, name, attempt_id = row["provider"], row["account"], row["id"]
        retry_after = None if retry_after_s is None else dt.timedelta(seconds=retry_after_s)
        admitted = selection.parse_time(row["created_at"])
        if failure_class in health.MODEL_CLASSES:
            # The model cools on this account; the account itself stays as it is.
            model = row["requested_model"]
            changed = health.record_model_failure(_model_health_from(row, model), model, now)
            if changed is not None:
                conn.execute(
                    """INSERT INTO model_health (provider, account, model, since, last_failure_at, cooldown_until)
                       VALUES (?, ?, ?, ?, ?, ?)
                       ON CONFLICT (provider, account, model) DO UPDATE SET since = excluded.since,
                         last_failure_at = excluded.last_failure_at, cooldown_until = excluded.cooldown_until""",
                    (provider, name, model, _iso(changed.since), _iso(changed.last_failure_at), _iso(changed.cooldown_until)),
                )
        elif failure_class in health.HOST_CLASSES:
            changed = health.record_failure(hh, failure_class, http_status, now, attempt_id, retry_after, admitted)
            _write_health(conn, provider, name, changed, row["attempt_host"])
        elif failure_class in health.HEALTH_CLASSES:
            changed = health.record_failure(h, failure_class, http_status, now, attempt_id, retry_after, admitted)
            _write_health(conn, provider, name, changed)
            if failure_class == "auth":
                self._block(conn, provider, name, row["block_reason"], "auth_failed", f"attempt:{attempt_id}", ts)

    # -- blocks, reconciliation, adjustments, rebinding ----------------------------------------

    def _block(self, conn, provider, name, current_reason, reason, source_ref, ts):
        """Mark the account; the first reason stands. Every block clears its warm prefixes."""
        if current_reason is None:
            conn.execute(
                "UPDATE account SET block_reason = ?, blocked_at = ? WHERE provider = ? AND name = ?",
                (reason, ts, provider, name),
            )
            conn.execute(
                """INSERT INTO adjustment (id, kind, provider, account, delta_nusd, source_ref, detail, created_at)
                   VALUES (?, 'block', ?, ?, 0, ?, ?, ?)""",
                (uuid.uuid4().hex, provider, name, source_ref, reason, ts),
            )
        _clear_warm(conn, provider, name)

    def block(self, account, reason="manual", *, source_ref="llm accounts block", provider="anthropic", now=None):
        """Block an account (``manual`` from ``llm accounts block``); it stays blocked until unblocked."""
        name, declared = account_ref(account)
        if reason not in BLOCK_REASONS:
            raise invalid("reason", "must be auth_failed, settlement_conflict, ceiling_exceeded or manual")
        check_source(source_ref)

        def run(conn):
            at = now or clock.now()
            current = self._account_row(conn, provider, name, declared, at)
            self._block(conn, provider, name, current["block_reason"], reason, source_ref, clock.isoformat(at))
            return "already_blocked" if current["block_reason"] else "blocked"

        return self._run("block", run)

    def mark_removed(self, account, *, provider="anthropic", now=None):
        """Record that ``llm accounts remove`` removed ``account`` (``account.removed_at``): its
        history stays, and the next admission of a declaration of that name clears the mark.
        Returns whether a row was marked (False: not in the ledger, or already marked).

        Only the command sets it: a declaration comes from the environment, dotenv files or
        accounts.json as each process sees them, so one process not declaring an account says
        nothing about the others (docs/architecture.md "Ledger")."""
        name, _ = account_ref(account)

        def run(conn):
            ts = clock.isoformat(now or clock.now())
            cursor = conn.execute(
                "UPDATE account SET removed_at = ? WHERE provider = ? AND name = ? AND removed_at IS NULL",
                (ts, provider, name),
            )
            return cursor.rowcount == 1

        return self._run("mark_removed", run)

    def clear_block(self, adjustment_id, account, source_ref, *, provider="anthropic", now=None):
        """Unblock: a zero-delta ``unblock`` row with no month, recorded with its source.

        It ends the account's block and any health dwell with it (an authentication failure, a
        cooldown such as exhausted credit, a probe in flight, every model cooling there, and every
        machine's transport cooldown on it).
        Returns ``"unblocked"`` (a block ended), ``"health_cleared"`` (no block, but a dwell or a
        model cooldown ended), ``"not_blocked"`` (nothing to clear) or ``"already_recorded"``.
        """
        check_id(adjustment_id, "adjustment_id")
        name, declared = account_ref(account)
        check_source(source_ref)

        def run(conn):
            if self._repeat(conn, adjustment_id, "unblock", None, provider, name, None, 0, source_ref):
                return "already_recorded"
            at = now or clock.now()
            current = self._account_row(conn, provider, name, declared, at)
            ts = clock.isoformat(at)
            record = self._health(conn, provider, name)
            cleared = health.clear(record, at)
            models = conn.execute(
                "SELECT COUNT(*) FROM model_health WHERE provider = ? AND account = ?", (provider, name)
            ).fetchone()[0]
            hosts = conn.execute(
                """SELECT COUNT(*) FROM host_health WHERE provider = ? AND account = ?
                   AND (state = 'failing' OR transport_failures > 0)""",
                (provider, name),
            ).fetchone()[0]
            detail = current["block_reason"]
            if detail is None and cleared is not None and record.state == "failing":
                detail = record.failure_class
            if detail is None and models:
                detail = "model_unavailable"
            if detail is None and hosts:
                detail = "transport"
            conn.execute(
                """INSERT INTO adjustment (id, kind, provider, account, delta_nusd, source_ref, detail, created_at)
                   VALUES (?, 'unblock', ?, ?, 0, ?, ?, ?)""",
                (adjustment_id, provider, name, source_ref, detail, ts),
            )
            _write_health(conn, provider, name, cleared)
            if models:
                conn.execute("DELETE FROM model_health WHERE provider = ? AND account = ?", (provider, name))
            if hosts:
                conn.execute("DELETE FROM host_health WHERE provider = ? AND account = ?", (provider, name))
            if current["block_reason"] is None:
                return "health_cleared" if cleared is not None or models or hosts else "not_blocked"
            conn.execute(
                "UPDATE account SET block_reason = NULL, blocked_at = NULL WHERE provider = ? AND name = ?", (provider, name)
            )
            _clear_warm(conn, provider, name)
            return "unblocked"

        return self._run("clear_block", run)

    def reconcile(self, adjustment_id, attempt_id, cost_nusd, source_ref, *, now=None):
        """Close an open attempt at a sourced cost: the cost enters spend once, through the attempt,
        and a zero-delta ``reconciliation`` row records who said so
        (docs/architecture.md "Ceilings and settlement")."""
        check_id(adjustment_id, "adjustment_id")
        check_id(attempt_id, "attempt_id")
        check_int(cost_nusd, "cost")
        check_source(source_ref)

        def run(conn):
            row = conn.execute(
                _ATTEMPT_SQL,
                (attempt_id, self.host),
            ).fetchone()
            if row is None:
                raise AccountsError("not_found", "attempt_id: no attempt with this id is in the ledger (see llm accounts attempts --open)")
            if self._repeat(conn, adjustment_id, "reconciliation", attempt_id, row["provider"], row["account"],
                            row["month_utc"], 0, source_ref, str(cost_nusd)):
                return "already_recorded"
            if row["state"] == "settled":
                raise AccountsError(
                    "settlement_conflict",
                    f"attempt is already settled at {_money(row['cost_nusd'])}; a settled cost is never rewritten: "
                    "record a correction with llm accounts adjust",
                    account=row["account"],
                    attempt_id=attempt_id,
                )
            if source_ref.startswith("usage_report:") and row["outcome"] is None:  # docs/architecture.md "Settling from the provider"
                raise AccountsError("settlement_conflict", "attempt has no outcome recorded (it may still be running): a usage report does not settle it; settle it by hand with llm accounts reconcile", account=row["account"], attempt_id=attempt_id)
            if row["m_settled"] + row["m_open"] + row["m_adjusted"] - row["ceiling_nusd"] + cost_nusd > INT64_MAX:
                raise invalid("cost", "would take the month's total past signed 64-bit nanodollars")
            ts = clock.isoformat(now or clock.now())
            conn.execute(
                # A sourced cost says nothing of tokens: the token ceiling stays counted (unknown is never zero).
                "UPDATE attempt SET state = 'settled', cost_nusd = ?, settled_at = ?, tokens = ceiling_tokens WHERE id = ?",
                (cost_nusd, ts, attempt_id),
            )
            _move_to_settled(conn, row, cost_nusd)
            conn.execute(
                """INSERT INTO adjustment (id, kind, attempt_id, provider, account, month_utc, delta_nusd, source_ref, detail, created_at)
                   VALUES (?, 'reconciliation', ?, ?, ?, ?, 0, ?, ?, ?)""",
                (adjustment_id, attempt_id, row["provider"], row["account"], row["month_utc"], source_ref, str(cost_nusd), ts),
            )
            return "reconciled"

        return self._run("reconcile", run)

    def adjust(self, adjustment_id, account, month_utc, delta_nusd, source_ref, *, attempt_id=None, provider="anthropic", now=None):
        """A signed, sourced correction to a month's spend; never rewrites an attempt
        (docs/architecture.md "Ceilings and settlement")."""
        check_id(adjustment_id, "adjustment_id")
        name, declared = account_ref(account)
        check_month(month_utc)
        if isinstance(delta_nusd, bool) or not isinstance(delta_nusd, int) or delta_nusd == 0 or abs(delta_nusd) > INT64_MAX:
            raise invalid("delta", "must be a non-zero integer number of nanodollars within signed 64 bits")
        check_source(source_ref)
        if attempt_id is not None:
            check_id(attempt_id, "attempt_id")

        def run(conn):
            if self._repeat(conn, adjustment_id, "correction", attempt_id, provider, name, month_utc, delta_nusd, source_ref):
                return "already_recorded"
            at = now or clock.now()
            self._account_row(conn, provider, name, declared, at)
            if attempt_id is not None:
                owner = conn.execute("SELECT account FROM attempt WHERE id = ?", (attempt_id,)).fetchone()
                if owner is None or owner[0] != name:
                    raise invalid("attempt_id", "must name an attempt of this account")
            totals = conn.execute(
                """SELECT COALESCE((SELECT settled_nusd + open_nusd FROM month WHERE provider = ?1 AND name = ?2 AND month_utc = ?3), 0),
                          COALESCE((SELECT settled_nusd FROM month WHERE provider = ?1 AND name = ?2 AND month_utc = ?3), 0),
                          (SELECT COALESCE(SUM(delta_nusd), 0) FROM adjustment WHERE provider = ?1 AND account = ?2 AND month_utc = ?3)""",
                (provider, name, month_utc),
            ).fetchone()
            committed, settled, adjusted = totals
            if settled + adjusted + delta_nusd < 0:
                raise invalid("delta", f"would make the spend of {month_utc} negative (it is {_money(settled + adjusted)})")
            if committed + adjusted + delta_nusd > INT64_MAX:
                raise invalid("delta", "would take the month's total past signed 64-bit nanodollars")
            conn.execute(
                """INSERT INTO adjustment (id, kind, attempt_id, provider, account, month_utc, delta_nusd, source_ref, created_at)
                   VALUES (?, 'correction', ?, ?, ?, ?, ?, ?, ?)""",
                (adjustment_id, attempt_id, provider, name, month_utc, delta_nusd, source_ref, clock.isoformat(at)),
            )
            return "adjusted"

        return self._run("adjust", run)

    def rebind(self, scope, account, source_ref="llm accounts rebind", *, now=None):
        """Move a conversation to another account, explicitly and on the record.

        ``account`` is the declared account (an Account-like); a bare name is refused, since a
        conversation moves only to an account the declaration still holds. A conversation scope
        may be named by the llm response id of one of its prompts (``_named_scope``). Refused too: a scope
        the ledger holds no binding for (``declaration_invalid``, without repeating its id) and a
        blocked account (``account_blocked``)."""
        check_scope(scope)
        name, declared = account_ref(account)
        check_source(source_ref)
        if declared is None:
            raise AccountsError(
                "not_found",
                f"account '{name}' is not declared; a conversation moves only to a declared account (see llm accounts list)",
                account=name,
            )

        def run(conn):
            bound = _named_scope(conn, scope)
            old = None if bound is None else conn.execute(
                "SELECT account FROM binding WHERE scope_kind = ? AND scope_id = ? AND provider = ?",
                (bound.kind, bound.id, bound.provider),
            ).fetchone()
            if old is None:
                # The id is not repeated: the ledger holds nothing to match it with.
                raise AccountsError(
                    "not_found",
                    "CONVERSATION_ID: the ledger holds no conversation with this id, so there is nothing to move; "
                    "a conversation is recorded by its first routed prompt (see llm logs list for ids)",
                )
            at = now or clock.now()
            target = self._account_row(conn, scope.provider, name, declared, at)
            if target["block_reason"] is not None:
                raise AccountsError(
                    "account_blocked",
                    f"account '{name}' is blocked ({target['block_reason']}); unblock it first (llm accounts unblock {name}) "
                    "or move the conversation to another account",
                    account=name,
                )
            ts = clock.isoformat(at)
            conn.execute(
                "UPDATE binding SET account = ? WHERE scope_kind = ? AND scope_id = ? AND provider = ?",
                (name, bound.kind, bound.id, bound.provider),
            )
            conn.execute(
                """INSERT INTO adjustment (id, kind, provider, account, delta_nusd, source_ref, detail, created_at)
                   VALUES (?, 'rebind', ?, ?, 0, ?, ?, ?)""",
                (uuid.uuid4().hex, scope.provider, name, source_ref, f"{bound.kind}:{bound.id}", ts),
            )
            return old[0]

        return self._run("rebind", run)

    def _account_row(self, conn, provider, name, declared, now):
        row = conn.execute(
            "SELECT * FROM account WHERE provider = ? AND name = ?", (provider, name)
        ).fetchone()
        if row is None and declared is not None:
            self._ensure_account(conn, provider, declared, None, clock.isoformat(now))
            row = conn.execute("SELECT * FROM account WHERE provider = ? AND name = ?", (provider, name)).fetchone()
        if row is None:
            raise AccountsError(
                "declaration_invalid",
                f"account '{name}' is neither declared nor in the ledger (see llm accounts list)",
                account=name,
            )
        return row

    def _repeat(self, conn, adjustment_id, kind, attempt_id, provider, account, month, delta, source_ref, detail=None):
        """Duplicate adjustment ids are no-ops only for identical inputs."""
        row = conn.execute("SELECT * FROM adjustment WHERE id = ?", (adjustment_id,)).fetchone()
        if row is None:
            return False
        same = (row["kind"], row["attempt_id"], row["provider"], row["account"], row["month_utc"], row["delta_nusd"], row["source_ref"]) == (
            kind, attempt_id, provider, account, month, delta, source_ref
        ) and (detail is None or row["detail"] == detail)
        if not same:
            raise invalid("adjustment_id", "already records different inputs; use a new id")
        return True

    def _health(self, conn, provider, name):
        row = conn.execute(
            """SELECT state AS h_state, failure_class AS h_class, http_status AS h_status, since AS h_since,
                 last_failure_at AS h_last_failure_at, last_success_at AS h_last_success_at,
                 cooldown_until AS h_cooldown_until, probe_attempt_id AS h_probe, transport_failures AS h_transport
               FROM health WHERE provider = ? AND account = ?""",
            (provider, name),
        ).fetchone()
        return None if row is None else _health_from(row)

    # -- reading -------------------------------------------------------------------------------

    def status(self, accounts=None, *, provider="anthropic", now=None):
        """Per account, this credit period: budget, spend, open ceilings, remaining, today, health, block.

        ``accounts`` are the declared accounts (default: ``default_accounts``); an account the
        ledger holds but they do not is listed with ``declared`` false."""
        declared = declared_accounts(accounts if accounts is not None else self.default_accounts)
        return self._run("status", lambda conn: self._status_lines(conn, declared, provider, now or clock.now()), write=False)

    def ladder(self, accounts, quote, *, client=None, provider="anthropic", now=None):
        """``(status lines, {declared name: selection.Verdict})`` for an attempt priced by ``quote``,
        read in one transaction: the verdicts come from the function admission uses, so each says
        what ``reserve`` would do with that attempt on that account now."""
        declared = declared_accounts(accounts)
        check_quote(quote)
        if client is not None:
            check_pattern(client, CLIENT_RE, "client", "must be 1-64 letters, digits, '_', '.', ':', '@', '/' or '-'")

        def run(conn):
            at = now or clock.now()
            month, day = clock.credit_month(at), clock.utc_day(at)
            facts = _read_facts(conn, provider, month, at, self.host, full=False, model=quote.requested_model)
            verdicts = {
                name: self._verdict(conn, provider, account, facts, quote, day, at, client)
                for name, account in declared.items()
            }
            return self._status_lines(conn, declared, provider, at), verdicts

        return self._run("ladder", run, write=False)

    def check_declaration(self, account, *, provider="anthropic", now=None):
        """Refuse, with ``account_config_conflict``, a declaration this credit period cannot admit:
        another monthly budget or key_env than the period's first attempt fixed, or a key_env whose
        budget another name holds this period (``selection.period_conflict``)."""
        name, declared = account_ref(account)
        if declared is None:
            raise invalid("account", "must be an account declaration")

        def run(conn):
            at = now or clock.now()
            facts = _read_facts(conn, provider, clock.credit_month(at), at, self.host)
            problem = selection.period_conflict(
                declared, facts.get(name) or selection.Facts(name=name), facts.values(), at
            )
            if problem is not None:
                raise AccountsError("account_config_conflict", problem, account=name)

        return self._run("check_declaration", run, write=False)

    def _status_lines(self, conn, declared, provider, now):
        month, day = clock.credit_month(now), clock.utc_day(now)
        start, end = clock.credit_period(month)
        facts = _read_facts(conn, provider, month, now, self.host)
        cooling_models = {}
        for row in conn.execute(
            "SELECT account, model, cooldown_until FROM model_health WHERE provider = ? ORDER BY account, model", (provider,)
        ):
            until = selection.parse_time(row["cooldown_until"])
            if until is not None and until > now:
                cooling_models.setdefault(row["account"], []).append((row["model"], _iso(until)))
        open_counts = dict(
            conn.execute(
                """SELECT account, SUM(attempts) FROM month_outcome WHERE month_utc = ? AND provider = ? AND state = 'open'
                   GROUP BY account""",
                (month, provider),
            ).fetchall()
        )
        names = list(declared) + sorted(set(facts) - set(declared))
        # "Last success" is the newest complete settlement the ledger counted, read from the
        # month_outcome totals (a few rows per account), not the health row's throttled
        # last_success_at (llm_accounts.health.SUCCESS_REFRESH).
        last_success = dict(
            conn.execute(
                """SELECT account, MAX(last_at) FROM month_outcome
                   WHERE provider = ? AND state = 'settled' AND outcome = 'complete' AND attempts > 0
                   GROUP BY account""",
                (provider,),
            ).fetchall()
        )
        # The pace forecast's window, from the day totals (docs/architecture.md "Pace forecast").
        window = {}
        for row in conn.execute(
            "SELECT account, day_utc, settled_nusd FROM day WHERE day_utc >= ? AND day_utc <= ? AND provider = ?",
            (forecast.window_start(now), day, provider),
        ):
            window.setdefault(row[0], {})[row[1]] = row[2]
        by_client = {}
        if any(capped_clients(account) for account in declared.values()):
            for row in conn.execute(
                """SELECT account, client, settled_nusd, open_nusd, tokens, open_tokens
                   FROM month_client WHERE provider = ? AND month_utc = ?""",
                (provider, month),
            ):
                by_client[row[0], row[1]] = tuple(row[2:])
        lines = []
        for name in names:
            account, f = declared.get(name), facts.get(name) or selection.Facts(name=name)
            budget = f.budget_nusd if f.month_row else getattr(account, "budget_nusd", None)
            # The daily budget is policy: the declared one is in force; the month row keeps the
            # one in force at the account's latest admission.
            daily = getattr(account, "daily_budget_nusd", None) if account is not None else f.daily_budget_nusd
            day_settled, day_open = self._day_totals(conn, provider, f, day)
            # The row that restricts the account most, its own or this machine's (transport).
            _, h, probe_taken = selection.gated(f, now)
            conflict = bool(
                account is not None and f.month_row
                and (f.budget_nusd, f.month_key_env) != (account.budget_nusd, account.key_env)
            )
            lines.append(
                AccountStatus(
                    name=name,
                    declared=account is not None,
                    key_env=account.key_env if account is not None else f.key_env,
                    rank=account.rank if account is not None else f.rank,
                    weight=account.weight if account is not None else f.weight,
                    month_utc=month,
                    period_start=clock.isoformat(start),
                    resets_at=clock.isoformat(end),
                    budget_nusd=budget,
                    settled_nusd=f.settled_nusd,
                    adjustments_nusd=f.adjusted_nusd,
                    open_ceiling_nusd=f.open_nusd,
                    open_attempts=open_counts.get(name, 0),
                    remaining_nusd=None if budget is None else budget - f.spent_nusd - f.open_nusd,
                    daily_budget_nusd=daily,
                    today_settled_nusd=day_settled,
                    today_open_nusd=day_open,
                    today_remaining_nusd=None if daily is None else daily - day_settled - day_open,
                    day_resets_at=clock.isoformat(clock.next_day_start(now)),
                    health=health.view(h, now, probe_taken),
                    failure_class=None if h is None else h.failure_class,
                    http_status=None if h is None else h.http_status,
                    cooldown_until=None if h is None else _iso(h.cooldown_until),
                    last_success_at=last_success.get(name) or (None if h is None else _iso(h.last_success_at)),
                    last_failure_at=None if h is None else _iso(h.last_failure_at),
                    blocked_reason=f.block_reason,
                    blocked_at=f.blocked_at,
                    config_conflict=conflict,
                    client_caps=tuple(
                        _client_cap_status(
                            label, client_cap(account, label), client_token_cap(account, label),
                            *by_client.get((name, label), (0, 0, 0, 0)),
                        )
                        for label in capped_clients(account)
                    ),
                    clients_only=bool(clients_only(account)),
                    model_cooldowns=tuple(cooling_models.get(name, ())),
                    failing_since=_iso(h.since) if h is not None and h.state == "failing" else None,
                    removed_at=f.removed_at,
                    forecast=forecast.forecast(budget, f.spent_nusd, f.open_nusd, window.get(name, {}), now),
                )
            )
        return lines

    def warm_summary(self, *, provider="anthropic", now=None):
        """This credit period's ``{account: (bound warm, bound cold, cache saved nusd)}``: new
        conversations with a one-hour prefix by where they bound, and what cache reads saved
        (docs/architecture.md "Warm prefixes"). One row per account, never a sum over attempts."""

        def run(conn):
            month = clock.credit_month(now or clock.now())
            return {
                row["account"]: (row["bound_warm"], row["bound_cold"], row["cache_saved_nusd"])
                for row in conn.execute(
                    "SELECT account, bound_warm, bound_cold, cache_saved_nusd FROM warm_month WHERE month_utc = ? AND provider = ?",
                    (month, provider),
                )
            }

        return self._run("warm_summary", run, write=False)

    def claim_budget_warnings(self, account, warn_at, *, provider="anthropic", now=None):
        """The thresholds of ``warn_at`` this period's spend has newly reached, recorded so no
        process warns of them again (docs/architecture.md "Budget warnings").

        Returns ``(thresholds, spent_nusd, budget_nusd, resets_at)``; ``thresholds`` is empty when
        there is nothing new to say. A read decides first, so a prompt below every threshold takes
        no write lock; the write is one transaction, and a row another process inserted first
        wins (its threshold is not returned here).
        """
        at = now or clock.now()
        month = clock.credit_month(at)
        resets_at = clock.isoformat(clock.credit_period(month)[1])

        def read(conn):
            row = conn.execute(
                """SELECT m.budget_nusd,
                     (SELECT COALESCE(SUM(o.cost_nusd), 0) FROM month_outcome o WHERE o.month_utc = m.month_utc
                       AND o.provider = m.provider AND o.account = m.name)
                     + (SELECT COALESCE(SUM(j.delta_nusd), 0) FROM adjustment j WHERE j.provider = m.provider
                       AND j.account = m.name AND j.month_utc = m.month_utc) AS spent_nusd
                   FROM month m WHERE m.provider = ? AND m.name = ? AND m.month_utc = ?""",
                (provider, account, month),
            ).fetchone()
            if row is None:
                return (), 0, None
            warned = {
                r[0]
                for r in conn.execute(
                    "SELECT threshold FROM budget_warning WHERE provider = ? AND account = ? AND month_utc = ?",
                    (provider, account, month),
                )
            }
            passed = thresholds.reached(row["spent_nusd"], row["budget_nusd"], warn_at)
            return tuple(t for t in passed if t not in warned), row["spent_nusd"], row["budget_nusd"]

        new, spent, budget = self._run("budget_warnings", read, write=False)
        if not new:
            return (), spent, budget, resets_at

        def record(conn):
            ts = clock.isoformat(at)
            claimed = []
            for threshold in new:
                cursor = conn.execute(
                    """INSERT INTO budget_warning (provider, account, month_utc, threshold, spent_nusd, warned_at)
                       VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING""",
                    (provider, account, month, threshold, spent, ts),
                )
                if cursor.rowcount == 1:
                    claimed.append(threshold)
            return tuple(claimed)

        return self._run("budget_warnings", record), spent, budget, resets_at

    def spend(self, account=None, month_utc=None, *, provider="anthropic"):
        """Spend per account and credit period, summed from the attempt and adjustment rows."""
        if account is not None:
            check_pattern(account, NAME_RE, "account", "must match [a-z][a-z0-9_-]{0,31}")
        if month_utc is not None:
            check_month(month_utc)

        def run(conn):
            rows = conn.execute(
                """SELECT m.name AS account, m.month_utc, m.budget_nusd, m.daily_budget_nusd,
                     COALESCE(SUM(t.cost_nusd), 0) AS settled_nusd,
                     COALESCE(SUM(CASE WHEN t.state = 'open' THEN t.ceiling_nusd END), 0) AS open_ceiling_nusd,
                     COUNT(t.id) AS attempts,
                     COALESCE(SUM(CASE WHEN t.state = 'open' THEN 1 ELSE 0 END), 0) AS open_attempts,
                     (SELECT COALESCE(SUM(j.delta_nusd), 0) FROM adjustment j WHERE j.provider = m.provider
                       AND j.account = m.name AND j.month_utc = m.month_utc) AS adjustments_nusd
                   FROM month m
                   LEFT JOIN attempt t ON t.provider = m.provider AND t.account = m.name AND t.month_utc = m.month_utc
                   WHERE m.provider = ?1 AND m.name = COALESCE(?2, m.name) AND m.month_utc = COALESCE(?3, m.month_utc)
                   GROUP BY m.provider, m.name, m.month_utc
                   ORDER BY m.month_utc, m.name""",
                (provider, account, month_utc),
            ).fetchall()
            result = []
            for row in rows:
                item = dict(row)
                item["spent_nusd"] = item["settled_nusd"] + item["adjustments_nusd"]
                item["remaining_nusd"] = item["budget_nusd"] - item["spent_nusd"] - item["open_ceiling_nusd"]
                result.append(item)
            return result

        return self._run("spend", run, write=False)

    SPEND_DIMENSIONS = ("account", "model", "client", "conversation", "day")

    def spend_by(self, by, month_utc, *, account=None, client=None, provider="anthropic"):
        """Spend of one credit period grouped by ``by`` (one of ``SPEND_DIMENSIONS``): rows of
        ``key``, ``attempts``, ``settled_nusd`` (costs of settled attempts) and ``open_nusd``
        (ceilings still held), never summed into one figure (docs/architecture.md "Spend").

        Without ``client``, every dimension reads a totals table the attempt triggers keep
        (``month_model``, ``month_client``, ``month_conversation``, ``day``): a few rows per
        period however long the history. A client filter sums the period's attempt rows.
        ``client`` lists attempts without a label under the key ``None``; ``conversation``
        covers conversations' attempts (a one-off prompt has none)."""
        if by not in self.SPEND_DIMENSIONS:
            raise invalid("by", f"must be one of {', '.join(self.SPEND_DIMENSIONS)}")
        check_month(month_utc)
        if account is not None:
            check_pattern(account, NAME_RE, "account", "must match [a-z][a-z0-9_-]{0,31}")
        start, end = clock.credit_period(month_utc)
        params = {"provider": provider, "month": month_utc, "account": account, "client": client,
                  "first_day": start.date().isoformat(), "end_day": end.date().isoformat()}
        sums = "SUM(attempts) AS attempts, SUM(settled_nusd) AS settled_nusd, SUM(open_nusd) AS open_nusd"
        in_scope = "provider = :provider AND account = COALESCE(:account, account)"
        if client is None and by in ("account", "model"):
            sql = f"SELECT {by} AS key, {sums} FROM month_model WHERE {in_scope} AND month_utc = :month GROUP BY 1"
        elif client is None and by == "conversation":
            sql = f"SELECT conversation AS key, {sums} FROM month_conversation WHERE {in_scope} AND month_utc = :month GROUP BY 1"
        elif client is None and by == "day":
            sql = (f"SELECT day_utc AS key, {sums} FROM day WHERE {in_scope} "
                   "AND day_utc >= :first_day AND day_utc < :end_day GROUP BY 1")
        elif client is None and by == "client":
            # Labelled attempts from month_client; the unlabelled rest is the period's month_model
            # total minus them (every attempt is in month_model).
            sql = f"""SELECT client AS key, {sums} FROM month_client WHERE {in_scope} AND month_utc = :month GROUP BY 1
                UNION ALL
                SELECT NULL, t.attempts - COALESCE(c.attempts, 0), t.settled_nusd - COALESCE(c.settled_nusd, 0),
                       t.open_nusd - COALESCE(c.open_nusd, 0)
                FROM (SELECT {sums} FROM month_model WHERE {in_scope} AND month_utc = :month) t,
                     (SELECT {sums} FROM month_client WHERE {in_scope} AND month_utc = :month) c"""
        else:
            column = {"account": "account", "model": "requested_model", "client": "client",
                      "conversation": "scope_id", "day": "day_utc"}[by]
            sql = f"""SELECT {column} AS key, COUNT(*) AS attempts, COALESCE(SUM(cost_nusd), 0) AS settled_nusd,
                       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0) AS open_nusd
                FROM attempt WHERE {in_scope} AND month_utc = :month
                  {"AND client = :client" if client is not None else ""}
                  {"AND scope_kind = 'conversation'" if by == "conversation" else ""}
                GROUP BY 1"""

        def run(conn):
            rows = [
                {"key": row[0], "attempts": int(row[1] or 0), "settled_nusd": int(row[2] or 0), "open_nusd": int(row[3] or 0)}
                for row in conn.execute(sql, params)
            ]
            rows = [row for row in rows if row["attempts"] > 0]
            if by == "day":
                return sorted(rows, key=lambda row: row["key"])
            return sorted(rows, key=lambda row: (-(row["settled_nusd"] + row["open_nusd"]), row["key"] is None, row["key"] or ""))

        return self._run("spend_by", run, write=False)

    _FILTERS = ("id", "account", "state", "outcome", "month_utc", "day_utc", "scope_kind", "scope_id", "client", "provider")

    # Beyond equality: ``model`` matches the requested or the served model; ``since`` and
    # ``until`` bound created_at (ledger time strings, since inclusive, until exclusive).
    _RANGE_FILTERS = ("model", "since", "until")

    def _attempt_where(self, filters):
        unknown = set(filters) - set(self._FILTERS) - set(self._RANGE_FILTERS)
        if unknown:
            raise invalid("filter", f"must be among {', '.join(self._FILTERS + self._RANGE_FILTERS)}")
        special = {
            "model": "(requested_model = :model OR served_model = :model)",
            "since": "created_at >= :since",
            "until": "created_at < :until",
        }
        return " AND ".join(special.get(column, f"{column} = :{column}") for column in filters) or "1 = 1"

    def attempts(self, *, limit=None, oldest_first=False, **filters):
        """Attempt rows, newest first, filtered by equality on any of ``_FILTERS`` and by
        ``_RANGE_FILTERS``."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise invalid("limit", "must be a positive integer")
        where = self._attempt_where(filters)
        direction = "ASC" if oldest_first else "DESC"
        # Admission order, SQLite's rowid (PostgreSQL's seq): the clock is read under the write
        # lock, so it follows created_at, and on SQLite it needs no index (a list of the newest
        # reads only its page; --open walks the partial attempt_open index, in rowid order).
        sql = f"SELECT * FROM attempt WHERE {where} ORDER BY {self._backend.order_column} {direction}"
        if limit is not None:
            sql += f" LIMIT {limit}"
        return self._run("attempts", lambda conn: [dict(row) for row in conn.execute(sql, filters)], write=False)

    def resolve_attempt_id(self, prefix):
        """The one attempt id that starts with ``prefix`` (at least 4 characters), read on the
        primary key's order; ``not_found`` for none, ``declaration_invalid`` for several. The
        prefix is never repeated: it is free text from the command line."""
        if not isinstance(prefix, str) or not _ID_PREFIX.fullmatch(prefix):
            raise invalid("ATTEMPT_ID", "must be an attempt id or a unique prefix of one (at least 4 of its characters)")
        upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)

        def run(conn):
            if conn.execute("SELECT 1 FROM attempt WHERE id = ?", (prefix,)).fetchone():
                return [prefix]
            if len(prefix) < 4:
                return []
            return [row[0] for row in conn.execute("SELECT id FROM attempt WHERE id >= ? AND id < ? ORDER BY id LIMIT 2", (prefix, upper))]

        found = self._run("resolve_attempt_id", run, write=False)
        if prefix in found:
            return prefix
        if not found:
            raise AccountsError("not_found", "ATTEMPT_ID: no attempt in the ledger has this id or starts with it (see llm accounts attempts)")
        if len(found) > 1:
            raise invalid("ATTEMPT_ID", "more than one attempt starts with this prefix; give more of the id")
        return found[0]

    def attempt_count(self, **filters):
        """How many attempt rows match ``filters`` (the same filters as ``attempts``)."""
        sql = f"SELECT COUNT(*) FROM attempt WHERE {self._attempt_where(filters)}"
        if set(filters) <= self._TOTAL_FILTERS:
            # Filters the month_outcome totals carry: a sum over a few of their rows, however
            # long the history (schema.py); otherwise the rows are counted.
            where = " AND ".join(
                f"{column} = COALESCE(:{column}, '')" if column == "outcome" else f"{column} = :{column}" for column in filters
            ) or "1 = 1"
            sql = f"SELECT COALESCE(SUM(attempts), 0) FROM month_outcome WHERE {where}"
        return self._run("attempt_count", lambda conn: conn.execute(sql, filters).fetchone()[0], write=False)

    _TOTAL_FILTERS = frozenset(("account", "state", "outcome", "month_utc", "provider"))

    def open_attempts(self, **filters):
        """Attempts still holding their ceiling, oldest first: unknown outcomes awaiting
        ``reconcile``, or in flight."""
        return self.attempts(state="open", oldest_first=True, **filters)

    def attempts_between(self, account, start, end, *, provider="anthropic"):
        """One account's attempts created in ``[start, end)`` (aware datetimes), oldest first: the
        rows a usage report's minutes are matched against (docs/architecture.md "Settling from the
        provider"). Off the request path, so it reads without an index on ``created_at``."""
        check_pattern(account, NAME_RE, "account", "must match [a-z][a-z0-9_-]{0,31}")
        sql = (
            "SELECT * FROM attempt WHERE provider = ? AND account = ? AND created_at >= ? AND created_at < ? "
            f"ORDER BY {self._backend.order_column}"
        )
        args = (provider, account, clock.isoformat(start), clock.isoformat(end))
        return self._run("attempts_between", lambda conn: [dict(row) for row in conn.execute(sql, args)], write=False)

    def daily_spend(self, account, first_day, last_day, *, provider="anthropic"):
        """``{day_utc: (settled cost, settled attempts, open attempts)}`` of one account's attempts
        from ``first_day`` to ``last_day`` (YYYY-MM-DD, inclusive), for the audit against the
        provider's reports (docs/architecture.md "Auditing against the bill")."""
        check_pattern(account, NAME_RE, "account", "must match [a-z][a-z0-9_-]{0,31}")
        sql = """SELECT day_utc, COALESCE(SUM(cost_nusd), 0),
                   SUM(CASE WHEN state = 'settled' THEN 1 ELSE 0 END), SUM(CASE WHEN state = 'open' THEN 1 ELSE 0 END)
                 FROM attempt WHERE provider = ? AND account = ? AND day_utc >= ? AND day_utc <= ? GROUP BY day_utc"""
        args = (provider, account, first_day, last_day)
        return self._run(
            "daily_spend", lambda conn: {row[0]: (int(row[1]), int(row[2]), int(row[3])) for row in conn.execute(sql, args)}, write=False
        )

    def audit(self, *, provider="anthropic"):
        """Recompute every month's running totals from its attempt rows; list any that differ."""

        def run(conn):
            self._backend.bulk(conn)  # it sums every attempt: the export's statement bound
            problems = []
            for row in conn.execute(
                """SELECT m.name, m.month_utc, m.settled_nusd, m.open_nusd, m.day_utc, m.day_settled_nusd, m.day_open_nusd,
                     (SELECT COALESCE(SUM(cost_nusd), 0) FROM attempt a WHERE a.provider = m.provider AND a.account = m.name
                       AND a.month_utc = m.month_utc) AS settled,
                     (SELECT COALESCE(SUM(ceiling_nusd), 0) FROM attempt a WHERE a.provider = m.provider AND a.account = m.name
                       AND a.month_utc = m.month_utc AND a.state = 'open') AS open,
                     (SELECT COALESCE(SUM(cost_nusd), 0) FROM attempt a WHERE a.provider = m.provider AND a.account = m.name
                       AND a.day_utc = m.day_utc) AS day_settled,
                     (SELECT COALESCE(SUM(ceiling_nusd), 0) FROM attempt a WHERE a.provider = m.provider AND a.account = m.name
                       AND a.day_utc = m.day_utc AND a.state = 'open') AS day_open
                   FROM month m WHERE m.provider = ?""",
                (provider,),
            ):
                for kept, actual in (("settled_nusd", "settled"), ("open_nusd", "open"),
                                     ("day_settled_nusd", "day_settled"), ("day_open_nusd", "day_open")):
                    if row[kept] != row[actual]:
                        problems.append(f"{row['name']} {row['month_utc']}: {kept} is {row[kept]}, rows say {row[actual]}")
            return problems

        return self._run("audit", run, write=False)

    @property
    def db(self):
        """A read-only ``sqlite_utils.Database`` on the ledger, for notebooks (on a PostgreSQL
        ledger: on a fresh SQLite export of it, see ``export``)."""
        import sqlite_utils

        return sqlite_utils.Database(self._backend.sqlite_utils_connection(self, BUSY_TIMEOUT_S))


# ---------------------------------------------------------------------------------------------
# Statement helpers used inside transactions


def _write_health(conn, provider, name, h, host=None):
    """Write the account's health row, or with ``host`` that host's row; ``None`` writes nothing."""
    if h is None:
        return
    table, key, keys = ("health", (), "provider, account") if host is None else (
        "host_health", (host,), "provider, account, host"
    )
    conn.execute(
        f"""INSERT INTO {table} ({keys}, state, failure_class, http_status, since, last_failure_at,
             last_success_at, cooldown_until, probe_attempt_id, transport_failures)
           VALUES ({", ".join("?" * (len(key) + 11))})
           ON CONFLICT ({keys}) DO UPDATE SET state = excluded.state, failure_class = excluded.failure_class,
             http_status = excluded.http_status, since = excluded.since, last_failure_at = excluded.last_failure_at,
             last_success_at = excluded.last_success_at, cooldown_until = excluded.cooldown_until,
             probe_attempt_id = excluded.probe_attempt_id, transport_failures = excluded.transport_failures""",
        (provider, name, *key, h.state, h.failure_class, h.http_status, _iso(h.since), _iso(h.last_failure_at),
         _iso(h.last_success_at), _iso(h.cooldown_until), h.probe_attempt_id, h.transport_failures),
    )


def _move_to_settled(conn, row, cost):
    """The attempt's ceiling leaves its month's (and day's) open total; its cost joins settled."""
    conn.execute(
        """UPDATE month SET open_nusd = open_nusd - :ceiling, settled_nusd = settled_nusd + :cost,
             day_open_nusd = CASE WHEN day_utc = :day THEN day_open_nusd - :ceiling ELSE day_open_nusd END,
             day_settled_nusd = CASE WHEN day_utc = :day THEN day_settled_nusd + :cost ELSE day_settled_nusd END
           WHERE provider = :provider AND name = :account AND month_utc = :month""",
        {"ceiling": row["ceiling_nusd"], "cost": cost, "day": row["day_utc"], "provider": row["provider"],
         "account": row["account"], "month": row["month_utc"]},
    )


# Waiting for room (docs/architecture.md "Waiting for room")

#: How long a waiter's place lasts without a renewal: a waiter renews it at least every half of
#: this while it polls, so one killed while waiting stops holding others back within this.
WAITER_TTL = dt.timedelta(seconds=10)


def _waiters(conn, provider, waiter, now):
    """The live waiters that arrived before ``waiter`` (all live ones for a caller not waiting
    yet), as ``selection.Waiter`` in arrival order, and ``waiter``'s own row (or None)."""
    rows = conn.execute(
        "SELECT id, seq, account, model, ceiling_nusd, expires_at FROM waiter WHERE provider = ? ORDER BY seq",
        (provider,),
    ).fetchall()
    live, own = [], None
    for row in rows:
        expires = selection.parse_time(row["expires_at"])
        if expires is None or expires <= now:
            continue
        if row["id"] == waiter:
            own = row
            break  # the rest arrived later
        live.append(selection.Waiter(row["seq"], row["account"], row["model"], row["ceiling_nusd"]))
    return live, own


def _queue(conn, provider, waiter, own, account, quote, now):
    """Queue ``waiter`` behind every live waiter (expired places are dropped first), or renew its
    place once half its time is gone; a place kept is never moved back."""
    expires = now + WAITER_TTL
    if own is not None:
        if selection.parse_time(own["expires_at"]) - now >= WAITER_TTL / 2:
            return
        conn.execute("UPDATE waiter SET expires_at = ? WHERE id = ?", (clock.isoformat(expires), waiter))
        return
    conn.execute("DELETE FROM waiter WHERE expires_at <= ? OR id = ?", (clock.isoformat(now), waiter))
    conn.execute(
        """INSERT INTO waiter (id, seq, provider, account, model, ceiling_nusd, created_at, expires_at)
           VALUES (?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM waiter), ?, ?, ?, ?, ?, ?)""",
        (waiter, provider, account, quote.requested_model, quote.ceiling_nusd, clock.isoformat(now),
         clock.isoformat(expires)),
    )


def _open_counts(conn, provider, name, month, day, client):
    """``selection.OpenCount`` per limit of account ``name``: its open attempts this period, today,
    and ``client``'s, with those left open with an unknown outcome (a recorded outcome: no longer
    in flight) and their ceilings (docs/architecture.md "Waiting for room")."""
    counts = {"budget": [0, 0, 0], "daily budget": [0, 0, 0], "cap": [0, 0, 0], "token cap": [0, 0, 0]}
    for row in conn.execute(
        """SELECT day_utc = ? AS today, client = ? AS mine, outcome IS NOT NULL AS unknown, COUNT(*),
                  COALESCE(SUM(ceiling_nusd), 0), COALESCE(SUM(ceiling_tokens), 0)
           FROM attempt WHERE state = 'open' AND provider = ? AND account = ? AND month_utc = ?
           GROUP BY 1, 2, 3""",
        (day, client, provider, name, month),
    ):
        today, mine, unknown, n, nusd, tokens = row[0], row[1], row[2], row[3], row[4], row[5]
        for noun, applies, amount in (
            ("budget", True, nusd), ("daily budget", today, nusd), ("cap", mine, nusd), ("token cap", mine, tokens),
        ):
            if applies:
                counts[noun][0] += n
                if unknown:
                    counts[noun][1] += n
                    counts[noun][2] += amount
    return {noun: selection.OpenCount(*values) for noun, values in counts.items()}


def _held(verdict):
    lim = verdict.limit
    in_flight = lim.counted.attempts - lim.counted.unknown_attempts
    return selection.Held(verdict.account.name, lim.held, in_flight, lim.spent, lim.ahead, lim.queued)


def _named_scope(conn, scope):
    """The bound scope ``llm accounts rebind`` names (docs/architecture.md "Scope"): a
    conversation by its id, else the scope of the prompt whose llm response id it is (a
    prompt without a conversation is its own scope; one in a conversation names it). None when
    the ledger holds neither."""
    if conn.execute(
        "SELECT 1 FROM binding WHERE scope_kind = ? AND scope_id = ? AND provider = ?",
        (scope.kind, scope.id, scope.provider),
    ).fetchone() is not None or scope.kind != "conversation":
        return scope
    row = conn.execute(
        "SELECT scope_kind, scope_id FROM attempt WHERE llm_response_id = ? AND provider = ? LIMIT 1",
        (scope.id, scope.provider),
    ).fetchone()
    return None if row is None else Scope(row[0], row[1], scope.provider)


def _unbilled(conn, scope):
    """Every attempt of the scope settled at zero as refused before processing (429/529) or never sent."""
    row = conn.execute(
        """SELECT COUNT(*) FROM attempt WHERE scope_kind = ? AND scope_id = ? AND provider = ?
           AND NOT (state = 'settled' AND outcome IN ('rate_limited', 'overloaded', 'not_sent'))""",
        (scope.kind, scope.id, scope.provider),
    ).fetchone()
    return row[0] == 0


def _client_cap_status(client, cap, token_cap, settled, open_, tokens_used, tokens_open):
    return ClientCapStatus(
        client=client,
        cap_nusd=cap,
        settled_nusd=settled,
        open_ceiling_nusd=open_,
        committed_nusd=settled + open_,
        remaining_nusd=None if cap is None else cap - settled - open_,
        token_cap=token_cap,
        tokens_used=tokens_used,
        tokens_open=tokens_open,
        tokens_committed=tokens_used + tokens_open,
        tokens_remaining=None if token_cap is None else token_cap - tokens_used - tokens_open,
    )


def _client_totals(conn, provider, account, month, client):
    """Per-client caps (docs/architecture.md "Client caps"): ``(settled costs, open ceilings, settled
    tokens, open token ceilings)`` of ``client``'s attempts on ``account`` in credit period
    ``month``, read from its ``month_client`` row: the attempt triggers keep it in the statement
    that writes an attempt, hence in that attempt's transaction, so admission reads one row
    however long the client's history (summing the attempts grew with it: bench/client_caps.py).
    Adjustments are account-wide and in dollars, so none count here."""
    row = conn.execute(
        """SELECT settled_nusd, open_nusd, tokens, open_tokens FROM month_client
           WHERE month_utc = ? AND provider = ? AND account = ? AND client = ?""",
        (month, provider, account, client),
    ).fetchone()
    return tuple(row) if row is not None else (0, 0, 0, 0)


def _same_settlement(row, fields):
    """Identical repeated evidence is a no-op (docs/architecture.md "Ceilings and settlement").
    ``NotSent.caller_cancelled`` is not stored, so two not-sent settlements always match."""
    return all(row[key] == value for key, value in fields.items())


def _count_bound(conn, month, provider, name, warm, delta=1):
    """Count a new conversation that bound warm or cold in ``warm_month`` (none without a one-hour prefix)."""
    if warm is None:
        return
    column = "bound_warm" if warm else "bound_cold"
    conn.execute(
        f"""INSERT INTO warm_month (month_utc, provider, account, {column}) VALUES (?, ?, ?, ?)
            ON CONFLICT (month_utc, provider, account) DO UPDATE SET {column} = warm_month.{column} + excluded.{column}""",
        (month, provider, name, delta),
    )


def _move_bound(conn, scope, month, verdict):
    """A new conversation that moved on counts once: on the account it now binds."""
    old = conn.execute(
        "SELECT account, warm, created_at FROM binding WHERE scope_kind = ? AND scope_id = ? AND provider = ?",
        (scope.kind, scope.id, scope.provider),
    ).fetchone()
    created = selection.parse_time(old["created_at"])
    if old["warm"] is not None and created is not None:
        _count_bound(conn, clock.credit_month(created), scope.provider, old["account"], old["warm"], -1)
    _count_bound(conn, month, scope.provider, verdict.account.name, verdict.warm)


def _clear_warm(conn, provider, name):
    conn.execute("DELETE FROM warm_prefix WHERE provider = ? AND account = ?", (provider, name))


def _write_warm(conn, row, usage, cert, hour_after_key, server_tools):
    """A one-hour write creates or extends the row (write arm); a read of exactly the stored stable
    length extends it (read arm) (docs/architecture.md "Warm prefixes"). Times compare as parsed
    datetimes."""
    created = selection.parse_time(row["created_at"])
    if created is None:
        return
    provider, name = row["provider"], row["account"]
    expires = created + WARM_TTL
    written = tokens(usage, "cache_creation", "ephemeral_1h_input_tokens")
    read = tokens(usage, "cache_read_input_tokens")
    stored = conn.execute(
        "SELECT stable_tokens, expires_at FROM warm_prefix WHERE provider = ? AND account = ? AND cert = ?",
        (provider, name, cert),
    ).fetchone()
    stored_expiry = None if stored is None else selection.parse_time(stored["expires_at"])
    if written > 0:
        conn.execute(
            "DELETE FROM warm_prefix WHERE provider = ? AND expires_at < ?",
            (provider, clock.isoformat(created - WARM_PURGE_MARGIN)),
        )
        stable = None if hour_after_key or server_tools else read + written
        if stored_expiry is not None:
            expires = max(expires, stored_expiry)
            if stable is None:
                stable = stored["stable_tokens"]
        conn.execute(
            """INSERT INTO warm_prefix (provider, account, cert, stable_tokens, expires_at) VALUES (?, ?, ?, ?, ?)
               ON CONFLICT (provider, account, cert) DO UPDATE SET stable_tokens = excluded.stable_tokens,
               expires_at = excluded.expires_at""",
            (provider, name, cert, stable, clock.isoformat(expires)),
        )
    elif (
        stored_expiry is not None
        and not server_tools
        and isinstance(stored["stable_tokens"], int)
        and read == stored["stable_tokens"]
        and expires > stored_expiry
    ):
        conn.execute(
            "UPDATE warm_prefix SET expires_at = ? WHERE provider = ? AND account = ? AND cert = ?",
            (clock.isoformat(expires), provider, name, cert),
        )


def _log_event(op, outcome, admission_wait_s, sqlite_wait_s=None):
    """The timing record: one DEBUG event per ledger call (docs/security.md "Logging")."""
    extra = {"ledger_op": op, "outcome": outcome, "admission_wait_s": admission_wait_s}
    if sqlite_wait_s is None:
        log.debug("ledger %s %s admission_wait_s=%.6f", op, outcome, admission_wait_s, extra=extra)
    else:
        extra["sqlite_wait_s"] = sqlite_wait_s
        log.debug(
            "ledger %s %s admission_wait_s=%.6f sqlite_wait_s=%.6f", op, outcome, admission_wait_s, sqlite_wait_s, extra=extra
        )


# ---------------------------------------------------------------------------------------------
# Async callers


async def run_async(fn, *args, **kw):
    """Run a ledger call in a worker thread, waiting at most ``ADMISSION_TIMEOUT_S`` for the worker
    to start (docs/architecture.md "Ledger"); ``ledger_busy`` otherwise. Once the worker has started the
    bound no longer applies: the call runs to its own SQLite bound and reports its real outcome, so
    a caller is never told a committed write failed."""
    return await _in_worker(fn, args, kw, ADMISSION_TIMEOUT_S)


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
        _requested.at = requested
        try:
            return fn(*args, **kw)
        finally:
            _requested.at = None

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
                _log_event(op, "ledger_busy", time.perf_counter() - requested)
                raise AccountsError(
                    "ledger_busy",
                    f"no worker thread was free for the ledger within {bound:g} s; the ledger call did not run, try again",
                ) from None
            _log_event(op, type(error).__name__, time.perf_counter() - requested)
            raise
        if not isinstance(error, asyncio.TimeoutError):
            raise
    return await done


def open_ledger(path=None, accounts=None):
    """Open the ledger for reading and accounting (the notebook entry point).

    ``status()`` then tells declared accounts from undeclared ones: ``accounts``, else the
    current declaration (``ANTHROPIC_ACCOUNTS``, ``.env``, ``accounts.json``), the same as
    ``llm accounts status``.

    >>> ledger = open_ledger()
    >>> ledger.spend(month_utc="2026-11")
    """
    if accounts is None:
        from .declarations import load_declaration

        accounts = load_declaration().accounts  # a broken declaration says so (accounts=() skips it)
    ledger = Ledger(path)
    ledger.default_accounts = tuple(accounts)
    return ledger
