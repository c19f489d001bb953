"""Warn before the wall: budget thresholds (docs/architecture.md "Budget warnings").

Pure rules: which thresholds of an account's budget its spend has reached, the one line that says
so, and what ``llm accounts status --check`` reports. The ledger records each threshold warned of
per account and credit period (``budget_warning``), so any number of processes warn once;
``warn_after_settlement`` at the end is the one step that asks it.
"""

from . import clock, forecast
from .money import usd, usd_fine

#: Percent of the budget at which a routed prompt warns, unless the account declares ``warn_at``.
DEFAULT_WARN_AT = (80, 95)


def reached(spent_nusd, budget_nusd, warn_at):
    """The thresholds (percent) that ``spent_nusd`` of ``budget_nusd`` has reached, lowest first.

    Spend is settled cost plus adjustments: an open ceiling is held, not spent, so it warns of
    nothing (docs/pricing.md "What keeps an attempt open")."""
    if not budget_nusd or budget_nusd <= 0:
        return ()
    return tuple(t for t in sorted(warn_at) if spent_nusd * 100 >= t * budget_nusd)


def percent(spent_nusd, budget_nusd):
    """Whole percent of the budget spent, rounded down (so 79.9 % never reads as 80 %)."""
    return spent_nusd * 100 // budget_nusd


def warning_line(account, threshold, spent_nusd, budget_nusd, pace):
    """The one stderr line for the highest threshold a prompt crossed; ``pace`` is the pace
    forecast's sentence (``forecast.sentence``), the same words ``llm accounts status`` uses."""
    pace = f"; {pace}" if pace else ""
    return (
        f"budget warning: account '{account}' has spent {usd_fine(spent_nusd)} of its {usd(budget_nusd)} budget "
        f"({percent(spent_nusd, budget_nusd)} %, past its {threshold} % threshold){pace} (see: llm accounts status)"
    )


def check_problems(line, warn_at):
    """What ``llm accounts status --check`` reports for one status line: a list of short texts."""
    problems = []
    if line.blocked_reason:
        problems.append(f"account '{line.name}' is blocked ({line.blocked_reason})")
    if line.health != "ok" and not line.blocked_reason:
        problems.append(f"account '{line.name}' is {line.health}" + (f" ({line.failure_class})" if line.failure_class else ""))
    if line.budget_nusd:
        spent = line.settled_nusd + line.adjustments_nusd
        passed = reached(spent, line.budget_nusd, warn_at)
        if passed:
            problems.append(
                f"account '{line.name}' has spent {usd_fine(spent)} of its {usd(line.budget_nusd)} budget "
                f"({percent(spent, line.budget_nusd)} %, past its {passed[-1]} % threshold)"
            )
    return problems


def warn_after_settlement(ledger, account):
    """After a routed prompt settled on ``account`` (a declared ``Account``): say the highest
    threshold its spend newly passed, once across processes (the ledger records it).

    A ledger error loses only the warning, never the delivered answer: nothing was recorded, so
    the next prompt says it.
    """
    from . import notices
    from .errors import AccountsError

    if not account.warn_thresholds:
        return
    now = clock.now()
    try:
        new, spent, budget, _ = ledger.claim_budget_warnings(account.name, account.warn_thresholds, now=now)
    except AccountsError:
        return
    if not new:
        return
    # Only a prompt that claimed a warning reads the status for its forecast: rare, so cheap; the
    # warning is said without it if that read fails.
    try:
        lines = ledger.status([account], now=now)
    except AccountsError:
        lines = []
    found = [line.forecast for line in lines if line.name == account.name and line.forecast is not None]
    pace = forecast.sentence(account.name, found[0]) if found else ""
    notices.say(f"llm-accounts: {warning_line(account.name, new[-1], spent, budget, pace)}")
