"""Corrections: what a person (or the provider's own report) changes after the fact, each on the
record as an ``adjustment`` row with its source (docs/architecture.md "Ceilings and settlement",
"Settling from the provider", "Scope").

``reconcile`` closes an open attempt at a sourced cost; ``adjust`` records a signed correction to
a month's spend without rewriting any attempt; ``rebind`` moves a conversation explicitly; blocks
are set, cleared (with every health dwell) and accounts marked removed. Each runs inside one
write transaction; a repeated adjustment id is a no-op only for identical inputs.
"""

import uuid

from .. import clock, health, selection
from ..errors import AccountsError
from ..money import INT64_MAX
from ..records import Scope, invalid
from . import reads, writes


def block_account(conn, provider, name, declared, reason, source_ref, now):
    """Block an account; the first reason stands (``writes.block``)."""
    writes.lock_account(conn, provider, name)
    at = now or clock.now()
    current = writes.account_row(conn, provider, name, declared, at)
    writes.block(conn, provider, name, current["block_reason"], reason, source_ref, clock.isoformat(at))
    return "already_blocked" if current["block_reason"] else "blocked"


def mark_removed(conn, provider, name, now):
    """Mark ``name`` removed by ``llm accounts remove``; whether a row was marked."""
    writes.lock_account(conn, provider, name)
    ts = clock.isoformat(now or clock.now())
    cursor = conn.execute(
        "UPDATE account SET removed_at = ? WHERE provider = ? AND name = ? AND removed_at IS NULL",
        (ts, provider, name),
    )
    return cursor.rowcount == 1


def clear_block(conn, provider, name, declared, adjustment_id, source_ref, now):
    """End a block and every health dwell with it, on the record (``Ledger.clear_block``)."""
    writes.lock_account(conn, provider, name)
    if _repeat(conn, adjustment_id, "unblock", None, provider, name, None, 0, source_ref):
        return "already_recorded"
    at = now or clock.now()
    current = writes.account_row(conn, provider, name, declared, at)
    ts = clock.isoformat(at)
    record = reads.read_health(conn, provider, name)
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
    writes.write_health(conn, provider, name, cleared)
    if models:
        conn.execute("DELETE FROM model_health WHERE provider = ? AND account = ?", (provider, name))
    if hosts:
        conn.execute("DELETE FROM host_health WHERE provider = ? AND account = ?", (provider, name))
    if current["block_reason"] is None:
        return "health_cleared" if cleared is not None or models or hosts else "not_blocked"
    conn.execute(
        "UPDATE account SET block_reason = NULL, blocked_at = NULL WHERE provider = ? AND name = ?", (provider, name)
    )
    writes.clear_warm(conn, provider, name)
    return "unblocked"


def reconcile_group(conn, host, members, source_ref, now):
    """Close several open attempts of one account and credit period at their shares of one
    sourced total, all or none (``Ledger.reconcile_group``; docs/architecture.md "Settling from
    the provider", "Settled as a group"). ``members``: ``[(adjustment id, attempt id, cost, usage json)]``."""
    results = [reconcile(conn, host, *member[:3], source_ref, now, usage_json=member[3]) for member in members]
    if "already_recorded" in results and set(results) != {"already_recorded"}:
        raise invalid("adjustment_id", "part of this group is already recorded and part is not; use new ids")
    return results[0] if results else "reconciled"


def reconcile(conn, host, adjustment_id, attempt_id, cost_nusd, source_ref, now, usage_json=None):
    """Close an open attempt at a sourced cost (``Ledger.reconcile``). ``usage_json``: the counts
    a usage report proved were this attempt's, kept so a later span can take them away."""
    writes.lock_attempt_account(conn, attempt_id)
    row = conn.execute(
        reads.ATTEMPT_SQL,
        (attempt_id, host),
    ).fetchone()
    if row is None:
        raise AccountsError("not_found", "attempt_id: no attempt with this id is in the ledger (see llm accounts attempts --open)")
    if _repeat(conn, adjustment_id, "reconciliation", attempt_id, row["provider"], row["account"],
                    row["month_utc"], 0, source_ref, str(cost_nusd)):
        return "already_recorded"
    if row["state"] == "settled":
        raise AccountsError(
            "settlement_conflict",
            f"attempt is already settled at {selection.money(row['cost_nusd'])}; a settled cost is never rewritten: "
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
        """UPDATE attempt SET state = 'settled', cost_nusd = ?, settled_at = ?, tokens = ceiling_tokens,
           outcome_at = COALESCE(outcome_at, ?), usage_json = COALESCE(?, usage_json) WHERE id = ?""",
        (cost_nusd, ts, ts, usage_json, attempt_id),
    )
    writes.move_to_settled(conn, row, cost_nusd)
    conn.execute(
        """INSERT INTO adjustment (id, kind, attempt_id, provider, account, month_utc, delta_nusd, source_ref, detail, created_at)
           VALUES (?, 'reconciliation', ?, ?, ?, ?, 0, ?, ?, ?)""",
        (adjustment_id, attempt_id, row["provider"], row["account"], row["month_utc"], source_ref, str(cost_nusd), ts),
    )
    return "reconciled"


def adjust(conn, provider, name, declared, adjustment_id, month_utc, delta_nusd, source_ref, attempt_id, now):
    """Record a signed, sourced correction to a month's spend (``Ledger.adjust``)."""
    writes.lock_account(conn, provider, name)
    if _repeat(conn, adjustment_id, "correction", attempt_id, provider, name, month_utc, delta_nusd, source_ref):
        return "already_recorded"
    at = now or clock.now()
    writes.account_row(conn, provider, name, declared, at)
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
        raise invalid("delta", f"would make the spend of {month_utc} negative (it is {selection.money(settled + adjusted)})")
    if committed + adjusted + delta_nusd > INT64_MAX:
        raise invalid("delta", "would take the month's total past signed 64-bit nanodollars")
    conn.execute(
        """INSERT INTO adjustment (id, kind, attempt_id, provider, account, month_utc, delta_nusd, source_ref, created_at)
           VALUES (?, 'correction', ?, ?, ?, ?, ?, ?, ?)""",
        (adjustment_id, attempt_id, provider, name, month_utc, delta_nusd, source_ref, clock.isoformat(at)),
    )
    return "adjusted"


def rebind(conn, scope, name, declared, source_ref, now):
    """Move a bound conversation to account ``name``; returns the account it was bound to."""
    writes.lock_account(conn, scope.provider, name)
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
    target = writes.account_row(conn, scope.provider, name, declared, at)
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


def _repeat(conn, adjustment_id, kind, attempt_id, provider, account, month, delta, source_ref, detail=None):
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
