"""``Ledger``, the ledger's public face: one method per operation, each checking its arguments
and running one transaction of a rule module (docs/architecture.md "Ledger", "The write path").

Where each rule lives: ``admission`` (reserve, verdicts, selection, waiters, bindings),
``settlement`` (outcomes, health and warm-prefix writes), ``corrections`` (reconcile, adjust,
rebind, blocks), ``reports`` (status, ladder, spend, attempts, audit), over ``reads`` and
``writes`` (the statements they share); ``core`` runs the transactions and ``sqlite`` /
``postgres`` speak to the database. Bad input is refused here, before any transaction.
"""

import json
import re
import threading

from .. import clock, liveness
from .. import ledger as package  # the tunables tests set (package.BUSY_TIMEOUT_S)
from ..errors import AccountsError
from ..money import INT64_MAX
from ..records import (
    BLOCK_REASONS,
    CLIENT_RE,
    NAME_RE,
    Unknown,
    account_ref,
    check_evidence,
    check_id,
    check_int,
    check_month,
    check_pattern,
    check_quote,
    check_scope,
    check_source,
    clean_usage,
    declared_accounts,
    invalid,
)
from . import admission, core, corrections, reports, settlement, wakeup

# An attempt id or a prefix of one, as typed (``resolve_attempt_id``).
_ID_PREFIX = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


class Ledger:
    """The ledger. One connection per instance, serialized by a lock so worker threads can share
    it; processes (and machines, on PostgreSQL) coordinate through the backend's write lock.

    ``path`` is a file (the SQLite ledger) or a ``postgresql://`` URL (``llm_accounts.ledger.postgres``);
    default ``LLM_ACCOUNTS_LEDGER``, else ``accounts-ledger.db`` in the llm user directory. The two
    backends differ only in connecting, locking, dialect and schema creation: every rule is the
    same on both (docs/architecture.md "Ledger on PostgreSQL")."""

    def __init__(self, path=None, *, host=None):
        # The machine this ledger object admits from: host-class failures (transport) are kept
        # per host (docs/architecture.md "Failure classes and health"). Tests name hosts.
        self.host = core.this_host() if host is None else check_id(host, "host")
        # This boot is one this machine ran in: a later boot may judge its attempts, a clone may
        # not (docs/architecture.md "A process that is gone").
        liveness.record_boot()
        if path is None:
            from .. import paths  # imports llm; only needed for the default path

            path = paths.ledger_path()
        self._backend = core.backend_for(path)
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

    # -- plumbing (core.py) --------------------------------------------------------------------

    def close(self):
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _run(self, op, fn, *args, write=True, transaction=True):
        """Run ``fn(conn, *args)`` in one transaction (``core.run``)."""
        return core.run(self, op, fn, *args, write=write, transaction=transaction)

    def _open(self):
        # BUSY_TIMEOUT_S is read here, at open, so a test can shorten it.
        self._conn = self._backend.connect(package.BUSY_TIMEOUT_S)

    def export(self, target):
        """Write a SQLite copy of the ledger to the new file ``target`` (``core.export``): one
        consistent snapshot, the same schema, never over an existing file. Returns the path."""
        return core.export(self, target)

    # -- admission (admission.py) ---------------------------------------------------------------

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

        ``now`` is for tests; without it the clock is read with the candidates' facts, and an
        admission whose credit period ended before its write is read again, so it lands in the
        new period.

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
            "reserve", admission.reserve, self, self.host, scope, attempt_id, quote, declared, pinned, client,
            llm_response_id, exclude, now, waiter, transaction=False,
        )

    def leave(self, waiter):
        """A waiter that stops waiting gives up its place (docs/architecture.md "Waiting for room")."""
        check_id(waiter, "waiter")
        self._run("leave", admission.leave, waiter)
        wakeup.signal(self)  # the room it was owed is free for the waiters behind it

    # -- settlement (settlement.py) -------------------------------------------------------------

    def settle(
        self, attempt_id, evidence, *, cert=None, hour_after_key=False, server_tools=False, beyond_bounds=False, now=None
    ):
        """Record what happened to an attempt: ``"settled"``, ``"already_settled"`` or ``"still_open"``.

        ``cert``, ``hour_after_key`` and ``server_tools`` describe the request's stable prefix for
        the warm-prefix index (docs/architecture.md "Warm prefixes"); only a complete settlement uses them.
        ``beyond_bounds``: the usage reports more server-tool uses than the request allowed, so the
        ceiling's premise broke and the complete settlement blocks the account (``ceiling_exceeded``)
        in the same transaction (docs/pricing.md "Server tools").
        Without ``now`` the clock is read inside the transaction, once the write lock is held (on
        PostgreSQL before it, with the rows the lock's guard re-checks: ``replay``).
        """
        check_id(attempt_id, "attempt_id")
        fields = check_evidence(evidence)
        if cert is not None:
            check_id(cert, "cert")
        args = (self.host, attempt_id, evidence, fields, cert, bool(hour_after_key), bool(server_tools), now,
                bool(beyond_bounds))
        if self._backend.kind == "postgres":  # no lock across a round trip (replay.py)
            from . import replay  # imports psycopg, which a SQLite ledger never needs

            # The wake-up goes in the settlement's own message (replay._write).
            return self._run("settle", replay.settle, self, *args, transaction=False)
        result = self._run("settle", settlement.settle, *args)
        if result != "already_settled":
            wakeup.signal(self)  # room freed, or a ceiling no longer in flight (no longer waited for)
        return result

    def shrink(self, attempt_id, hold_nusd, hold_tokens, counts, *, now=None):
        """Lower an open attempt's hold once the provider counted its input: ``"shrunk"`` or
        ``"unchanged"`` (docs/pricing.md "Shrinking a hold on message_start"). ``counts`` are the
        input counts the hold rests on (``pricing.CountedHold.counts``); a final usage that counts
        otherwise blocks the account when it settles. One transaction; it only ever frees room."""
        check_id(attempt_id, "attempt_id")
        check_int(hold_nusd, "hold_nusd")
        check_int(hold_tokens, "hold_tokens")
        counted_json = json.dumps(clean_usage(counts), sort_keys=True, separators=(",", ":"))
        result = self._run("shrink", settlement.shrink, self.host, attempt_id, hold_nusd, hold_tokens, counted_json, now)
        if result == "shrunk":
            wakeup.signal(self)  # the room it freed is there for the prompts waiting at once
        return result

    def abandoned(self, *, provider="anthropic", now=None):
        """Record as ``cancelled`` every attempt in flight on this host whose process is gone
        (docs/architecture.md "A process that is gone"): nothing will ever record its outcome, so
        it is no longer waited for, and the provider pass may settle it. Each stays open with its
        ceiling, as an interrupted prompt's does. Returns ``[(attempt id, account, ceiling)]``."""
        sql = ("SELECT id, account, ceiling_nusd, pid, pid_started FROM attempt WHERE state = 'open' "
               "AND outcome IS NULL AND provider = ? AND host = ? AND pid IS NOT NULL")
        recorded = []
        for row in self._run("abandoned", reports.rows, sql, (provider, self.host), write=False):
            if liveness.gone(row["pid"], row["pid_started"]):
                if self.settle(row["id"], Unknown("cancelled"), now=now) == "still_open":
                    recorded.append((row["id"], row["account"], row["ceiling_nusd"]))
        return recorded

    # -- corrections (corrections.py) -----------------------------------------------------------

    def block(self, account, reason="manual", *, source_ref="llm accounts block", provider="anthropic", now=None):
        """Block an account (``manual`` from ``llm accounts block``); it stays blocked until unblocked."""
        name, declared = account_ref(account)
        if reason not in BLOCK_REASONS:
            raise invalid("reason", "must be auth_failed, settlement_conflict, ceiling_exceeded or manual")
        check_source(source_ref)
        return self._run("block", corrections.block_account, provider, name, declared, reason, source_ref, now)

    def mark_removed(self, account, *, provider="anthropic", now=None):
        """Record that ``llm accounts remove`` removed ``account`` (``account.removed_at``): its
        history stays, and the next admission of a declaration of that name clears the mark.
        Returns whether a row was marked (False: not in the ledger, or already marked).

        Only the command sets it: a declaration comes from the environment, dotenv files or
        accounts.json as each process sees them, so one process not declaring an account says
        nothing about the others (docs/architecture.md "Ledger")."""
        name, _ = account_ref(account)
        return self._run("mark_removed", corrections.mark_removed, provider, name, now)

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
        result = self._run("clear_block", corrections.clear_block, provider, name, declared, adjustment_id, source_ref, now)
        wakeup.signal(self)
        return result

    def reconcile(self, adjustment_id, attempt_id, cost_nusd, source_ref, *, now=None):
        """Close an open attempt at a sourced cost: the cost enters spend once, through the attempt,
        and a zero-delta ``reconciliation`` row records who said so
        (docs/architecture.md "Ceilings and settlement")."""
        check_id(adjustment_id, "adjustment_id")
        check_id(attempt_id, "attempt_id")
        check_int(cost_nusd, "cost")
        check_source(source_ref)
        result = self._run("reconcile", corrections.reconcile, self.host, adjustment_id, attempt_id, cost_nusd, source_ref, now)
        wakeup.signal(self)
        return result

    def reconcile_group(self, members, source_ref, *, now=None):
        """Close open attempts of one account and credit period at shares of one sourced total,
        in one transaction, all or none (docs/architecture.md "Settling from the provider").
        ``members``: ``[(adjustment id, attempt id, cost_nusd, usage_json or None)]``."""
        members = list(members)
        if not members:
            raise invalid("members", "must name at least one attempt")
        for adjustment_id, attempt_id, cost_nusd, _usage in members:
            check_id(adjustment_id, "adjustment_id")
            check_id(attempt_id, "attempt_id")
            check_int(cost_nusd, "cost")
        check_source(source_ref)
        rows = self._run("reconcile_group", reports.rows,
                         "SELECT DISTINCT provider, account, month_utc FROM attempt WHERE id IN (%s)"
                         % ", ".join("?" * len(members)), tuple(m[1] for m in members), write=False)
        if len(rows) != 1:
            raise invalid("members", "a group settles attempts of one account in one credit period")
        result = self._run("reconcile_group", corrections.reconcile_group, self.host, members, source_ref, now)
        wakeup.signal(self)
        return result

    def claim_poll(self, organization, every, *, provider="anthropic", now=None):
        """Whether this process may read ``organization``'s usage report now: at most one poll per
        ``every`` (a timedelta) across every process and machine on the ledger
        (docs/architecture.md "Settling from the provider"). The claim is one transaction."""
        check_id(organization, "organization")
        at = now or clock.now()
        return self._run("claim_poll", reports.claim_poll, provider, organization, at, every)

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
        result = self._run(
            "adjust", corrections.adjust, provider, name, declared, adjustment_id, month_utc, delta_nusd, source_ref,
            attempt_id, now,
        )
        if delta_nusd < 0:
            wakeup.signal(self)
        return result

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
        return self._run("rebind", corrections.rebind, scope, name, declared, source_ref, now)

    # -- reports (reports.py) -------------------------------------------------------------------

    def status(self, accounts=None, *, provider="anthropic", now=None):
        """Per account, this credit period: budget, spend, open ceilings, remaining, today, health, block.

        ``accounts`` are the declared accounts (default: ``default_accounts``); an account the
        ledger holds but they do not is listed with ``declared`` false."""
        declared = declared_accounts(accounts if accounts is not None else self.default_accounts)
        return self._run(
            "status", lambda conn: reports.status_lines(conn, self.host, declared, provider, now or clock.now()), write=False
        )

    def ladder(self, accounts, quote, *, client=None, provider="anthropic", now=None):
        """``(status lines, {declared name: selection.Verdict})`` for an attempt priced by ``quote``,
        read in one transaction: the verdicts come from the function admission uses, so each says
        what ``reserve`` would do with that attempt on that account now."""
        declared = declared_accounts(accounts)
        check_quote(quote)
        if client is not None:
            check_pattern(client, CLIENT_RE, "client", "must be 1-64 letters, digits, '_', '.', ':', '@', '/' or '-'")
        return self._run("ladder", reports.ladder, self.host, declared, quote, client, provider, now, write=False)

    def check_declaration(self, account, *, provider="anthropic", now=None):
        """Refuse, with ``account_config_conflict``, a declaration this credit period cannot admit:
        another monthly budget or key_env than the period's first attempt fixed, or a key_env whose
        budget another name holds this period (``selection.period_conflict``)."""
        name, declared = account_ref(account)
        if declared is None:
            raise invalid("account", "must be an account declaration")
        return self._run(
            "check_declaration", lambda conn: admission.check_declaration(conn, self.host, provider, name, declared, now or clock.now()),
            write=False,
        )

    def warm_summary(self, *, provider="anthropic", now=None):
        """This credit period's ``{account: (bound warm, bound cold, cache saved nusd)}``: new
        conversations with a one-hour prefix by where they bound, and what cache reads saved
        (docs/architecture.md "Warm prefixes"). One row per account, never a sum over attempts."""
        return self._run("warm_summary", reports.warm_summary, provider, now, write=False)

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
        new, spent, budget = self._run(
            "budget_warnings", reports.unwarned_thresholds, provider, account, month, warn_at, write=False
        )
        if not new:
            return (), spent, budget, resets_at
        claimed = self._run("budget_warnings", reports.claim_thresholds, provider, account, month, new, spent, at)
        return claimed, spent, budget, resets_at

    def spend(self, account=None, month_utc=None, *, provider="anthropic"):
        """Spend per account and credit period, summed from the attempt and adjustment rows."""
        if account is not None:
            check_pattern(account, NAME_RE, "account", "must match [a-z][a-z0-9_-]{0,31}")
        if month_utc is not None:
            check_month(month_utc)
        return self._run("spend", reports.spend, provider, account, month_utc, write=False)

    SPEND_DIMENSIONS = reports.SPEND_DIMENSIONS

    def spend_by(self, by, month_utc, *, account=None, client=None, provider="anthropic"):
        """Spend of one credit period grouped by ``by`` (one of ``SPEND_DIMENSIONS``): rows of
        ``key``, ``attempts``, ``settled_nusd`` (costs of settled attempts) and ``open_nusd``
        (ceilings still held), never summed into one figure (docs/architecture.md "Spend").

        Without ``client``, every dimension reads a totals table the attempt triggers keep
        (``month_model``, ``month_client``, ``month_conversation``, ``day``): a few rows per
        period however long the history. A client filter sums the period's attempt rows.
        ``client`` lists attempts without a label under the key ``None``; ``conversation``
        covers conversations' attempts (a one-off prompt has none), a row per conversation and
        account, every one of the period: ``spend_by_conversation`` stops at a limit."""
        if by not in self.SPEND_DIMENSIONS:
            raise invalid("by", f"must be one of {', '.join(self.SPEND_DIMENSIONS)}")
        check_month(month_utc)
        if by == "conversation":
            return self.spend_by_conversation(month_utc, account=account, client=client, provider=provider)["rows"]
        if account is not None:
            check_pattern(account, NAME_RE, "account", "must match [a-z][a-z0-9_-]{0,31}")
        return self._run("spend_by", reports.spend_by, by, month_utc, account, client, provider, write=False)

    def spend_by_conversation(self, month_utc, *, account=None, client=None, limit=None, provider="anthropic"):
        """The period's costliest conversations, their total and how many ``limit`` left out
        (``llm_accounts.conversation_spend``: an index walk and one totals row per account)."""
        from .. import conversation_spend

        check_month(month_utc)
        if account is not None:
            check_pattern(account, NAME_RE, "account", "must match [a-z][a-z0-9_-]{0,31}")
        return self._run("spend_by", conversation_spend.spend_by_conversation, provider, month_utc, account, client,
                         limit, write=False)

    def attempts(self, *, limit=None, oldest_first=False, **filters):
        """Attempt rows, newest first, filtered by equality on any of ``_FILTERS`` and by
        ``_RANGE_FILTERS``."""
        sql = reports.attempts_sql(filters, self._backend.order_column, limit, oldest_first)
        return self._run("attempts", reports.rows, sql, filters, write=False)

    def resolve_attempt_id(self, prefix):
        """The one attempt id that starts with ``prefix`` (at least 4 characters), read on the
        primary key's order; ``not_found`` for none, ``declaration_invalid`` for several. The
        prefix is never repeated: it is free text from the command line."""
        if not isinstance(prefix, str) or not _ID_PREFIX.fullmatch(prefix):
            raise invalid("ATTEMPT_ID", "must be an attempt id or a unique prefix of one (at least 4 of its characters)")
        return reports.one_attempt_id(prefix, self._run("resolve_attempt_id", reports.ids_starting, prefix, write=False))

    def attempt_count(self, **filters):
        """How many attempt rows match ``filters`` (the same filters as ``attempts``)."""
        return self._run("attempt_count", reports.count, reports.count_sql(filters), filters, write=False)

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
        return self._run("attempts_between", reports.rows, sql, args, write=False)

    def daily_spend(self, account, first_day, last_day, *, provider="anthropic"):
        """``{day_utc: (settled cost, settled attempts, open attempts)}`` of one account's attempts
        from ``first_day`` to ``last_day`` (YYYY-MM-DD, inclusive), for the audit against the
        provider's reports (docs/architecture.md "Auditing against the bill")."""
        check_pattern(account, NAME_RE, "account", "must match [a-z][a-z0-9_-]{0,31}")
        return self._run("daily_spend", reports.daily_spend, provider, account, first_day, last_day, write=False)

    def audit(self, *, provider="anthropic"):
        """Recompute every month's running totals from its attempt rows; list any that differ."""

        def run(conn):
            self._backend.bulk(conn)  # it sums every attempt: the export's statement bound
            return reports.audit(conn, provider)

        return self._run("audit", run, write=False)

    @property
    def db(self):
        """A read-only ``sqlite_utils.Database`` on the ledger, for notebooks (on a PostgreSQL
        ledger: on a fresh SQLite export of it, see ``export``)."""
        import sqlite_utils

        return sqlite_utils.Database(self._backend.sqlite_utils_connection(self, package.BUSY_TIMEOUT_S))


def open_ledger(path=None, accounts=None):
    """Open the ledger for reading and accounting (the notebook entry point).

    ``status()`` then tells declared accounts from undeclared ones: ``accounts``, else the
    current declaration (``ANTHROPIC_ACCOUNTS``, ``.env``, ``accounts.json``), the same as
    ``llm accounts status``.

    >>> ledger = open_ledger()
    >>> ledger.spend(month_utc="2026-11")
    """
    if accounts is None:
        from ..declarations import load_declaration

        accounts = load_declaration().accounts  # a broken declaration says so (accounts=() skips it)
    ledger = Ledger(path)
    ledger.default_accounts = tuple(accounts)
    return ledger
