"""The owner's ladder as a document (ADR-0029 section 2): the order new conversations try accounts.

Built from ``Ledger.status`` and the same ordering the reservation uses (``selection.order``), so
what it shows is what the ledger does: ranks first, then committed utilization over
budget x weight, then name. A request's warm prefix and the conversations in flight can still
reorder accounts within a rank; unavailable accounts are listed last with the reason.
"""

import dataclasses

from . import selection
from .clock import now as utc_now
from .selection import Candidate, parse_time


@dataclasses.dataclass(frozen=True)
class Rung:
    position: int | None  # None: not a candidate now
    name: str
    rank: int | None
    weight: int | None
    committed_nusd: int
    budget_nusd: int | None
    available: bool
    reason: str  # "available", or why not


def _unavailable_reason(status, now):
    if not status.declared:
        return "not declared"
    if status.blocked_reason:
        return f"blocked ({status.blocked_reason})"
    if status.health == "auth_failed":
        return "blocked (auth_failed)"
    cooldown = parse_time(status.cooldown_until)
    if status.health == "cooling" and cooldown is not None and cooldown > now:
        return f"cooling down after {status.failure_class} until {cooldown:%H:%M} UTC"
    if status.health == "probing":
        return "a probe attempt is in flight"
    if status.budget_nusd is not None and status.remaining_nusd is not None and status.remaining_nusd <= 0:
        return "budget reached"
    if status.daily_budget_nusd is not None and status.today_remaining_nusd is not None and status.today_remaining_nusd <= 0:
        return "daily budget reached"
    return None


def build(statuses, now=None):
    now = now or utc_now()
    available, unavailable = [], []
    for status in statuses:
        reason = _unavailable_reason(status, now)
        committed = status.spent_nusd + status.open_ceiling_nusd
        if reason is None:
            available.append((status, Candidate(status.name, status.budget_nusd, committed, status.rank or 0, status.weight or 1)))
        else:
            unavailable.append(Rung(None, status.name, status.rank, status.weight, committed, status.budget_nusd, False, reason))
    rungs = [
        Rung(position, c.name, c.rank, c.weight, c.committed_nusd, c.budget_nusd, True, "available")
        for position, c in enumerate(selection.order([c for _, c in available]), start=1)
    ]
    unavailable.sort(key=lambda rung: (rung.rank if rung.rank is not None else 1 << 62, rung.name))
    return rungs + unavailable
