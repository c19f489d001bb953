"""Statements several rules of the write path share: the health rows, a settled attempt's move
between the month totals, an account's block and its warm prefixes, and the account row itself.

Each runs inside the caller's transaction (docs/architecture.md "Ledger"); what to write is
decided by the rule modules (``health``, ``selection``, and ``admission``, ``settlement``,
``corrections`` here), these only store it.
"""

import uuid

from .. import clock
from ..errors import AccountsError
from . import reads


def write_health(conn, provider, name, h, host=None):
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
        (provider, name, *key, h.state, h.failure_class, h.http_status, reads.iso(h.since), reads.iso(h.last_failure_at),
         reads.iso(h.last_success_at), reads.iso(h.cooldown_until), h.probe_attempt_id, h.transport_failures),
    )


def move_to_settled(conn, row, cost):
    """The attempt's ceiling leaves its month's (and day's) open total; its cost joins settled."""
    conn.execute(
        """UPDATE month SET open_nusd = open_nusd - :ceiling, settled_nusd = settled_nusd + :cost,
             day_open_nusd = CASE WHEN day_utc = :day THEN day_open_nusd - :ceiling ELSE day_open_nusd END,
             day_settled_nusd = CASE WHEN day_utc = :day THEN day_settled_nusd + :cost ELSE day_settled_nusd END
           WHERE provider = :provider AND name = :account AND month_utc = :month""",
        {"ceiling": row["ceiling_nusd"], "cost": cost, "day": row["day_utc"], "provider": row["provider"],
         "account": row["account"], "month": row["month_utc"]},
    )


def lower_open(conn, row, hold):
    """An open attempt's ceiling becomes ``hold`` (smaller): the difference leaves its month's
    (and day's) open total (docs/pricing.md "Shrinking a hold on message_start")."""
    conn.execute(
        """UPDATE month SET open_nusd = open_nusd - :freed,
             day_open_nusd = CASE WHEN day_utc = :day THEN day_open_nusd - :freed ELSE day_open_nusd END
           WHERE provider = :provider AND name = :account AND month_utc = :month""",
        {"freed": row["ceiling_nusd"] - hold, "day": row["day_utc"], "provider": row["provider"],
         "account": row["account"], "month": row["month_utc"]},
    )


def block(conn, provider, name, current_reason, reason, source_ref, ts):
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
    clear_warm(conn, provider, name)


def clear_warm(conn, provider, name):
    conn.execute("DELETE FROM warm_prefix WHERE provider = ? AND account = ?", (provider, name))


def ensure_account(conn, provider, account, f, ts):
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


def account_row(conn, provider, name, declared, now):
    row = conn.execute(
        "SELECT * FROM account WHERE provider = ? AND name = ?", (provider, name)
    ).fetchone()
    if row is None and declared is not None:
        ensure_account(conn, provider, declared, None, clock.isoformat(now))
        row = conn.execute("SELECT * FROM account WHERE provider = ? AND name = ?", (provider, name)).fetchone()
    if row is None:
        raise AccountsError(
            "declaration_invalid",
            f"account '{name}' is neither declared nor in the ledger (see llm accounts list)",
            account=name,
        )
    return row


def lock_account(conn, provider, name):
    """Hold account ``name``'s lock to the end of this write transaction, before reading anything
    the write changes: every write that changes an account's totals, health, block or binding
    takes it, so an admission's re-check under it is sound (docs/architecture.md "Ledger on
    PostgreSQL"). SQLite's ``BEGIN IMMEDIATE`` already holds every account."""
    backend = getattr(conn, "backend", None)
    if backend is not None:
        backend.lock_account(conn, provider, name)


def lock_attempt_account(conn, attempt_id):
    """``lock_account`` for the account attempt ``attempt_id`` belongs to."""
    backend = getattr(conn, "backend", None)
    if backend is not None:
        backend.lock_attempt_account(conn, attempt_id)


def lock_waiters(conn):
    """The waiters' lock: one writer at a time numbers a new place (``waiter.seq``)."""
    backend = getattr(conn, "backend", None)
    if backend is not None:
        backend.lock_waiters(conn)
