"""Settlement: what happened to an attempt, written once (docs/architecture.md "Ceilings and
settlement", "Attempt outcomes", "Failure classes and health", "Warm prefixes").

``settle`` runs inside one write transaction. Final evidence (a complete answer, a refusal, a
request never sent) closes the attempt at its real cost and moves its ceiling out of the month's
open total; an unknown outcome leaves it open with its ceiling (unknown is never zero). What the
outcome changes is decided by the pure rules (``health.record_success``,
``health.record_failure``, ``health.record_model_failure``) and stored here: the health rows, a
block, the warm-prefix index, the cache savings.
"""

import datetime as dt
import json
import logging

from .. import clock, health, selection
from ..errors import AccountsError
from ..pricing import cache_savings, prices
from ..money import INT64_MAX
from ..records import CALLER_OUTCOMES, Complete, NotSent, Unknown, billed_tokens, clean_usage, tokens
from . import core, reads, writes

log = logging.getLogger("llm_accounts.ledger")

WARM_TTL = dt.timedelta(hours=1)  # created_at + 3,600 s (docs/architecture.md "Warm prefixes")
WARM_PURGE_MARGIN = dt.timedelta(hours=25)


def settle(conn, host, attempt_id, evidence, fields, cert, hour_after_key, server_tools, now, beyond_bounds=False):
    """``Ledger.settle`` inside its write transaction: ``"settled"``, ``"already_settled"``,
    ``"still_open"``, or a ``core.Deferred`` refusal whose block commits first."""
    writes.lock_attempt_account(conn, attempt_id)  # before reading what it changes
    now = now or clock.now()  # the account's lock is held
    ts = clock.isoformat(now)
    row = conn.execute(
        reads.ATTEMPT_SQL,
        (attempt_id, host),
    ).fetchone()
    if row is None:
        raise core.Unavailable("it has no attempt with this id (was it reserved on another ledger?)")
    provider, name = row["provider"], row["account"]
    h = reads.health_from(row)
    hh = reads.health_from(row, "hh_")
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
        manual = conn.execute(
            "SELECT source_ref FROM adjustment WHERE attempt_id = ? AND kind = 'reconciliation'", (attempt_id,)
        ).fetchone()
        if manual is not None and not manual[0].startswith("usage_report:"):
            # The user's own guess came first: every prompt the block refuses says so, and how
            # to clear it (docs/errors.md "A guess that conflicts").
            writes.block(conn, provider, name, row["block_reason"], "settlement_conflict",
                         f"{selection.MANUAL_CONFLICT}{attempt_id}", ts)
            return core.Deferred(
                AccountsError(
                    "settlement_conflict",
                    f"the answer cost differs from the manual reconcile of this attempt "
                    f"({selection.money(row['cost_nusd'])}); account '{name}' is blocked until checked "
                    f"(llm accounts adjust corrects it, then llm accounts unblock {name})",
                    account=name,
                    attempt_id=attempt_id,
                )
            )
        writes.block(conn, provider, name, row["block_reason"], "settlement_conflict", f"attempt:{attempt_id}", ts)
        return core.Deferred(
            AccountsError(
                "settlement_conflict",
                f"attempt was already settled ({row['outcome']}) with different evidence; account '{name}' is blocked "
                f"until checked (llm accounts reconcile/adjust, then llm accounts unblock {name})",
                account=name,
                attempt_id=attempt_id,
            )
        )
    if isinstance(evidence, Unknown):
        return _record_unknown(conn, row, evidence, h, hh, ts, now)
    cost, ceiling = fields["cost_nusd"], row["ceiling_nusd"]
    month_total = row["m_settled"] + row["m_open"] + row["m_adjusted"] - ceiling + cost
    if month_total > INT64_MAX:
        writes.block(conn, provider, name, row["block_reason"], "ceiling_exceeded", f"attempt:{attempt_id}", ts)
        return core.Deferred(
            AccountsError(
                "ceiling_exceeded",
                "this cost would take the month's total past signed 64-bit nanodollars; the attempt stays open and "
                f"account '{name}' is blocked",
                account=name,
                attempt_id=attempt_id,
            )
        )
    conn.execute(
        """UPDATE attempt SET state = 'settled', settled_at = :ts, outcome_at = COALESCE(outcome_at, :ts),
             outcome = :outcome, cost_nusd = :cost_nusd,
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
    writes.move_to_settled(conn, row, cost)
    if isinstance(evidence, Complete):
        _settle_complete(conn, row, evidence, h, hh, cert, hour_after_key, server_tools, ts, now, beyond_bounds)
    elif isinstance(evidence, NotSent):
        if not evidence.caller_cancelled:
            writes.clear_warm(conn, provider, name)
    else:
        writes.clear_warm(conn, provider, name)
        _record_failure(
            conn, row, h, hh, evidence.failure_class, evidence.http_status, ts, now, evidence.retry_after_s
        )
    return "settled"


def shrink(conn, host, attempt_id, hold_nusd, hold_tokens, counted_json, now):
    """``Ledger.shrink`` inside its write transaction: ``"shrunk"``, or ``"unchanged"`` when the
    attempt is settled, already shrunk, or would not hold less (docs/pricing.md "Shrinking a hold
    on message_start"). Only ever lowers a hold, so it can only free room."""
    writes.lock_attempt_account(conn, attempt_id)
    row = conn.execute(reads.ATTEMPT_SQL, (attempt_id, host)).fetchone()
    if row is None:
        raise core.Unavailable("it has no attempt with this id (was it reserved on another ledger?)")
    if row["state"] != "open" or row["counted_json"] is not None or hold_nusd >= row["ceiling_nusd"]:
        return "unchanged"
    ts = clock.isoformat(now or clock.now())
    tokens = row["ceiling_tokens"]
    conn.execute(
        """UPDATE attempt SET ceiling_nusd = ?, ceiling_tokens = ?, reserved_nusd = ceiling_nusd,
             counted_json = ?, counted_at = ? WHERE id = ? AND state = 'open'""",
        (hold_nusd, tokens if tokens is None or hold_tokens >= tokens else hold_tokens, counted_json, ts, attempt_id),
    )
    writes.lower_open(conn, row, hold_nusd)
    return "shrunk"


def _contradicts_count(row, evidence):
    """A complete answer whose input counts differ from the ones its hold was shrunk on."""
    if row["counted_json"] is None:
        return False
    try:
        counts = json.loads(row["counted_json"])
    except ValueError:
        return True
    return prices.contradicts(counts, evidence.usage)


def _settle_complete(conn, row, evidence, h, hh, cert, hour_after_key, server_tools, ts, now, beyond_bounds=False):
    """A complete answer: health recovers, cache savings are counted, a cost past its ceiling
    blocks the account, and the request's stable prefix is recorded warm."""
    provider, name, attempt_id = row["provider"], row["account"], row["id"]
    admitted = selection.parse_time(row["created_at"])
    writes.write_health(conn, provider, name, health.record_success(h, now, admitted, attempt_id))
    if hh is not None:
        # The path from this attempt's machine works: its host row is cleared the same way.
        writes.write_health(conn, provider, name, health.record_success(hh, now, admitted, attempt_id), row["attempt_host"])
    saved = cache_savings.saved_nusd(evidence.usage, evidence.served_model, row["price_revision"])
    if saved:
        conn.execute(
            """INSERT INTO warm_month (month_utc, provider, account, cache_saved_nusd) VALUES (?, ?, ?, ?)
               ON CONFLICT (month_utc, provider, account) DO UPDATE SET cache_saved_nusd = warm_month.cache_saved_nusd + excluded.cache_saved_nusd""",
            (row["month_utc"], provider, name, saved),
        )
    if health.model_success_clears(reads.model_health_from(row, row["requested_model"]), admitted):
        conn.execute(
            "DELETE FROM model_health WHERE provider = ? AND account = ? AND model = ?",
            (provider, name, row["requested_model"]),
        )
    if _contradicts_count(row, evidence):
        # The hold rested on message_start's input counts; a final usage that counts otherwise
        # breaks that evidence: the true cost stands and the account is blocked
        # (docs/pricing.md "Shrinking a hold on message_start").
        log.warning("final input counts differ from message_start's; account %s blocked (settlement_conflict)", name)
        writes.block(conn, provider, name, row["block_reason"], "settlement_conflict", f"attempt:{attempt_id}", ts)
    elif evidence.cost_nusd > row["ceiling_nusd"] or beyond_bounds:
        # Record the true cost, never clamp it, and block the account (docs/architecture.md
        # "Ceilings and settlement"); server-tool uses past the request's bound break the
        # ceiling's premise even when the cost fits (docs/pricing.md "Server tools").
        log.warning("attempt cost exceeded its ceiling; account %s blocked (ceiling_exceeded)", name)
        writes.block(conn, provider, name, row["block_reason"], "ceiling_exceeded", f"attempt:{attempt_id}", ts)
    elif cert is not None and row["block_reason"] is None:
        _write_warm(conn, row, clean_usage(evidence.usage), cert, hour_after_key, server_tools)


def _record_unknown(conn, row, evidence, h, hh, ts, now):
    """The attempt stays open; its first recorded reason stands (docs/architecture.md "Attempt outcomes")."""
    provider, name = row["provider"], row["account"]
    if row["outcome"] is None or (row["failure_class"] is None and evidence.failure_class is not None):
        # What the user was shown of a refusal is kept with it (docs/errors.md "Rejection classes").
        conn.execute(
            """UPDATE attempt SET outcome = COALESCE(outcome, ?), failure_class = COALESCE(failure_class, ?),
               http_status = COALESCE(http_status, ?), provider_error_type = COALESCE(provider_error_type, ?),
               rejection_class = COALESCE(rejection_class, ?), outcome_at = COALESCE(outcome_at, ?) WHERE id = ?""",
            (evidence.outcome, evidence.failure_class, evidence.http_status, evidence.provider_error_type,
             evidence.rejection_class, ts, row["id"]),
        )
    if evidence.outcome not in CALLER_OUTCOMES:
        writes.clear_warm(conn, provider, name)
    _record_failure(conn, row, h, hh, evidence.failure_class, evidence.http_status, ts, now)
    return "still_open"


def _record_failure(conn, row, h, hh, failure_class, http_status, ts, now, retry_after_s=None):
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
        changed = health.record_model_failure(reads.model_health_from(row, model), model, now)
        if changed is not None:
            conn.execute(
                """INSERT INTO model_health (provider, account, model, since, last_failure_at, cooldown_until)
                   VALUES (?, ?, ?, ?, ?, ?)
                   ON CONFLICT (provider, account, model) DO UPDATE SET since = excluded.since,
                     last_failure_at = excluded.last_failure_at, cooldown_until = excluded.cooldown_until""",
                (provider, name, model, reads.iso(changed.since), reads.iso(changed.last_failure_at), reads.iso(changed.cooldown_until)),
            )
    elif failure_class in health.HOST_CLASSES:
        changed = health.record_failure(hh, failure_class, http_status, now, attempt_id, retry_after, admitted)
        writes.write_health(conn, provider, name, changed, row["attempt_host"])
    elif failure_class in health.HEALTH_CLASSES:
        changed = health.record_failure(h, failure_class, http_status, now, attempt_id, retry_after, admitted)
        writes.write_health(conn, provider, name, changed)
        if failure_class == "auth":
            writes.block(conn, provider, name, row["block_reason"], "auth_failed", f"attempt:{attempt_id}", ts)


def _same_settlement(row, fields):
    """Identical repeated evidence is a no-op (docs/architecture.md "Ceilings and settlement").
    ``NotSent.caller_cancelled`` is not stored, so two not-sent settlements always match."""
    return all(row[key] == value for key, value in fields.items())


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
