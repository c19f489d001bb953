"""Integer money and credit periods: the two units every other module counts in."""

import datetime as dt

import pytest

from llm_accounts import clock
from llm_accounts.errors import AccountsError
from llm_accounts.money import INT64_MAX, NANO, parse_usd, usd, usd_exact, usd_fine

UTC = dt.timezone.utc


@pytest.mark.parametrize(
    "text,nusd",
    [("1", NANO), ("12.50", 12_500_000_000), ("0.000000001", 1), ("9223372036.854775807", INT64_MAX)],
)
def test_parse_usd_reads_decimal_strings_exactly(text, nusd):
    assert parse_usd(text, "budget_usd") == nusd


@pytest.mark.parametrize("value", ["0", "0.0000000001", "9223372036.854775808", "1e3", "-1", " 1", 12.5, True, None])
def test_parse_usd_refuses_without_repeating_the_value(value):
    with pytest.raises(AccountsError) as info:
        parse_usd(value, "budget_usd")
    assert info.value.code == "declaration_invalid"
    assert str(info.value).startswith("declaration_invalid: budget_usd:")
    if isinstance(value, str) and value.strip("0. "):
        assert value.strip() not in str(info.value).split(":", 2)[2]


def test_usd_rounds_half_up_to_cents():
    assert usd(12_345_000_000) == "$12.35"
    assert usd(-5_000_000) == "-$0.01"
    assert usd(None) == "-"


def test_usd_exact_keeps_every_nanodollar():
    assert usd_exact(1) == "0.000000001"
    assert usd_exact(-1_500_000_000) == "-1.500000000"


def test_usd_fine_shows_small_spend_instead_of_zero():
    assert usd_fine(12_345) == "$0.000012"
    assert usd_fine(420_480_000) == "$0.42048"
    assert usd_fine(49_600_000_000) == "$49.60"
    assert usd_fine(0) == "$0.00"


@pytest.mark.parametrize(
    "instant,month",
    [
        (dt.datetime(2026, 10, 30, 23, 59, 59, tzinfo=UTC), "2026-10"),
        (dt.datetime(2026, 10, 31, 0, 0, tzinfo=UTC), "2026-11"),
        (dt.datetime(2026, 12, 31, 0, 0, tzinfo=UTC), "2027-01"),
        (dt.datetime(2026, 2, 28, 0, 0, tzinfo=UTC), "2026-03"),
    ],
)
def test_an_instant_belongs_to_the_credit_period_of_the_next_day(instant, month):
    assert clock.credit_month(instant) == month


def test_credit_periods_run_from_last_day_to_last_day():
    assert clock.credit_period("2026-11") == (
        dt.datetime(2026, 10, 31, tzinfo=UTC),
        dt.datetime(2026, 11, 30, tzinfo=UTC),
    )
    assert clock.credit_period("2026-01")[0] == dt.datetime(2025, 12, 31, tzinfo=UTC)


def test_every_instant_of_a_period_maps_back_to_it():
    start, end = clock.credit_period("2026-03")
    assert clock.credit_month(start) == "2026-03"
    assert clock.credit_month(end - dt.timedelta(microseconds=1)) == "2026-03"
    assert clock.credit_month(end) == "2026-04"


def test_naive_datetimes_are_refused():
    with pytest.raises(ValueError):
        clock.credit_month(dt.datetime(2026, 1, 1))


def test_days_are_utc_calendar_days():
    instant = dt.datetime(2026, 11, 29, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    assert clock.utc_day(instant) == "2026-11-30"
