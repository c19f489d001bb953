"""Credit periods and UTC days (docs/architecture.md "Months and days").

The provider's monthly credit refreshes at 00:00 UTC on the last day of each calendar month, so
an instant ``t`` belongs to the credit period keyed by the calendar month of ``t + 1 day``.
"""

import datetime as dt

UTC = dt.timezone.utc


def now():
    return dt.datetime.now(UTC)


def _aware(t):
    if t.tzinfo is None:
        raise ValueError("naive datetime: ledger times are aware UTC datetimes")
    return t.astimezone(UTC)


def credit_month(t):
    """Month key ``YYYY-MM`` of the credit period holding instant ``t``."""
    shifted = _aware(t) + dt.timedelta(days=1)
    return f"{shifted.year:04d}-{shifted.month:02d}"


def utc_day(t):
    """UTC calendar day ``YYYY-MM-DD`` of instant ``t`` (daily budgets)."""
    return _aware(t).date().isoformat()


def _last_day(year, month):
    first_next = dt.date(year + (month == 12), month % 12 + 1, 1)
    return first_next - dt.timedelta(days=1)


def credit_period(month_key):
    """``(start, end)`` aware UTC datetimes of the credit period ``YYYY-MM``; end is exclusive.

    Period 2026-11 runs from 2026-10-31T00:00Z to 2026-11-30T00:00Z.
    """
    year, month = (int(part) for part in month_key.split("-"))
    end = _last_day(year, month)
    prev_year, prev_month = (year - 1, 12) if month == 1 else (year, month - 1)
    start = _last_day(prev_year, prev_month)
    return (
        dt.datetime(start.year, start.month, start.day, tzinfo=UTC),
        dt.datetime(end.year, end.month, end.day, tzinfo=UTC),
    )


def next_day_start(t):
    """Start of the UTC day after ``t`` (when a daily budget resets)."""
    day = _aware(t).date() + dt.timedelta(days=1)
    return dt.datetime(day.year, day.month, day.day, tzinfo=UTC)


def isoformat(t):
    """The ledger's one time format: ``isoformat()`` of an aware UTC datetime."""
    return _aware(t).isoformat()


def parse_aware(value):
    """An aware datetime from an ``isoformat()`` text kept in a file or ledger row of ours, or None
    for anything else (a missing, naive or malformed value reads as never)."""
    if not isinstance(value, str):
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None and parsed.utcoffset() is not None else None
