"""The pace forecast: when an account's budget runs out at its recent rate of spend, against when
its credit period resets, and how much a day is left to last the period (docs/architecture.md
"Pace forecast").

Pure: the caller passes the period's figures and the settled spend of each UTC day; ``status`` and
the Datasette dashboard both use ``forecast()``. Money is integer nanodollars; the rate is
nanodollars a day, rounded down (docs/pricing.md "Money").
"""

import dataclasses
import datetime as dt

from . import clock

WINDOW_DAYS = 7
"""The rate is the settled spend of the last seven UTC days of the period (today included), or of
the period so far when it is younger."""

MIN_ELAPSED = dt.timedelta(hours=1)
"""A window younger than an hour (the first minutes of a period) counts as an hour, so a first
prompt does not read as a day's pace of thousands of prompts, and nothing divides by zero."""

DAY = dt.timedelta(days=1)


@dataclasses.dataclass(frozen=True)
class Forecast:
    """``state`` is one of:

    - ``runs_out``: at this pace the budget is used up on ``runs_out_on``, before the reset;
    - ``lasts``: at this pace the budget lasts until the period resets;
    - ``idle``: no settled spend in the window, so there is no pace to forecast from;
    - ``spent``: nothing is left (spend and open ceilings reach the budget).
    """

    state: str
    window_start: str  # first UTC day of the window, YYYY-MM-DD
    window_nusd: int  # settled spend in the window
    rate_nusd_per_day: int
    runs_out_on: str | None  # UTC day, YYYY-MM-DD, when state is runs_out
    resets_on: str  # UTC day the period resets (its exclusive end), YYYY-MM-DD
    days_left: int  # UTC days until the reset, today counted whole
    per_day_left_nusd: int  # what is left, spread over days_left (rounded down)


def window_start(now):
    """The first UTC day of the rate's window at ``now``."""
    start, _ = clock.credit_period(clock.credit_month(now))
    first = max(start.date(), clock._aware(now).date() - dt.timedelta(days=WINDOW_DAYS - 1))
    return first.isoformat()


def forecast(budget_nusd, spent_nusd, open_nusd, daily_settled, now):
    """The forecast for one account at ``now``, or None without a budget.

    ``spent_nusd`` is the period's settled spend plus adjustments, ``open_nusd`` its open ceilings;
    ``daily_settled`` maps UTC days (``YYYY-MM-DD``) to settled spend (days outside the window
    are ignored). The open ceilings count as spent for what is left (they may yet be), but not in
    the rate: a ceiling is a worst case, not a pace.
    """
    if budget_nusd is None:
        return None
    now = clock._aware(now)
    _, end = clock.credit_period(clock.credit_month(now))
    first = window_start(now)
    today = clock.utc_day(now)
    window_nusd = sum(v for day, v in daily_settled.items() if first <= day <= today)
    elapsed = max(now - dt.datetime.fromisoformat(first).replace(tzinfo=clock.UTC), MIN_ELAPSED)
    elapsed_s = int(elapsed.total_seconds())
    left = budget_nusd - spent_nusd - open_nusd
    days_left = -(-(end - now) // DAY)  # ceiling: the rest of today counts as a day
    common = dict(
        window_start=first,
        window_nusd=window_nusd,
        rate_nusd_per_day=window_nusd * 86400 // elapsed_s,
        resets_on=end.date().isoformat(),
        days_left=days_left,
        per_day_left_nusd=max(left, 0) // days_left,
    )
    if left <= 0:
        return Forecast(state="spent", runs_out_on=None, **common)
    if window_nusd <= 0:
        return Forecast(state="idle", runs_out_on=None, **common)
    # Compared in whole seconds first: a pace of a few nanodollars lasts beyond any datetime.
    seconds = left * elapsed_s // window_nusd
    if seconds >= (end - now).total_seconds():
        return Forecast(state="lasts", runs_out_on=None, **common)
    runs_out = now + dt.timedelta(seconds=seconds)
    return Forecast(state="runs_out", runs_out_on=runs_out.date().isoformat(), **common)


def sentence(name, f):
    """One line for people, e.g. "at this pace alpha runs out about 2026-12-18; the period resets
    2026-12-31"."""
    resets = f"the period resets {f.resets_on}"
    if f.state == "runs_out":
        return f"at this pace {name} runs out about {f.runs_out_on}; {resets}"
    if f.state == "lasts":
        return f"at this pace {name} lasts until {resets}"
    if f.state == "idle":
        return f"{name} has no settled spend since {f.window_start}, so no pace to forecast; {resets}"
    return f"{name} has nothing left of its budget; {resets}"
