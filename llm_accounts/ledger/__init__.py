"""The ledger: atomic admission, price ceilings, settlement, credit months.

The rules are in docs/architecture.md "Ledger", "Ceilings and settlement" and "Attempt outcomes";
"The write path" there draws how a reservation goes from ``Ledger.reserve`` to the commit. They
live in this package once, one module per concern, each small enough to read in a sitting:

- ``api``: ``Ledger``, the public face: each method checks its arguments and runs one transaction
  of a rule module;
- ``admission``: reserve, verdicts, selection, waiting for room, bindings; ``recheck``: the
  admission's write, re-checking the chosen account's limits under its lock;
- ``settlement``: what an outcome writes (cost, health, warm prefixes, cache savings);
  ``replay``: the same on PostgreSQL, holding the account's lock for server time only;
- ``wakeup``: waking the prompts that wait for room when a write frees some;
- ``corrections``: reconcile, adjust, rebind, block, unblock, removed accounts;
- ``reports``: status, the ladder, spend, attempts, audit, budget warnings (no write lock, but
  claiming a warning);
- ``reads`` / ``writes``: the statements those share (the facts admission reads; health rows,
  blocks, the month totals' moves);
- ``core``: the connection and transaction core (``ledger_busy``, ``ledger_unavailable``,
  ``run_async``, ``settle_async``, export);
- ``sqlite`` and ``postgres``: the backends, which only connect, lock, speak their dialect and
  create the schema (docs/architecture.md "Ledger on PostgreSQL").

The pure rules stay outside the package, shared with everything else: ``selection`` (verdicts,
order), ``health`` (failure classes, dwells, probes), ``thresholds``, ``forecast``.

Every write is one transaction holding the lock of each account it changes (SQLite's
``BEGIN IMMEDIATE`` holds them all; PostgreSQL has an advisory lock per account). An admission
reads and chooses without a lock, then ``recheck.admit`` inserts the attempt under the chosen
account's lock only if ``S + R + C <= B`` and the account's other limits still hold, re-checked in
the inserting statement; otherwise it reads again (docs/architecture.md "Ledger"). A lock held
past five seconds raises ``ledger_busy``; an unreadable or newer ledger raises
``ledger_unavailable`` and is never reset, replaced or deleted.

Money is integer nanodollars. Each ``month`` row keeps running totals of its attempts (settled
costs, open ceilings, and the same for its newest UTC day), changed in the transaction that
changes an attempt, so admission reads one row per account instead of summing the month;
``audit()`` recomputes them from the attempt rows. Adjustments are summed from ``adjustment``.
A client's cap on an account (docs/architecture.md "Client caps"), in dollars or tokens, is checked in
the same transaction against that client's ``month_client`` totals, kept by the attempt triggers.

Attempt rows hold ids, numbers, closed-set codes and the request digest: never a prompt, body,
header, key, key length or fingerprint.
"""

# Tunables, read from here at call time so a test (or a bench) can set them on the package.
BUSY_TIMEOUT_S = 5.0  # the backend's lock wait, then ledger_busy (docs/architecture.md "Ledger")
ADMISSION_TIMEOUT_S = 5.0  # async callers' wait for a worker thread, then ledger_busy
# Whether a new conversation's selection reads the warm-prefix index. Always on; only
# bench/warm_prefix.py turns it off, to measure what affinity is worth (docs/performance.md
# "Warm-prefix affinity"). Rows are written and cleared either way.
WARM_AFFINITY = True

from ..records import (  # noqa: E402 F401 (the records are part of the ledger's API)
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
)
from .admission import WAITER_TTL  # noqa: E402 F401
from .api import Ledger, open_ledger  # noqa: E402 F401
from .core import HOST_RE, run_async, settle_async, this_host  # noqa: E402 F401
from .settlement import WARM_PURGE_MARGIN, WARM_TTL  # noqa: E402 F401
from .sqlite import SQLITE_MAGIC, SqliteBackend  # noqa: E402 F401

__all__ = [
    "AccountStatus", "Complete", "Ledger", "NotSent", "Refused", "Reservation", "Scope", "Unknown",
    "open_ledger", "run_async", "settle_async",
]
