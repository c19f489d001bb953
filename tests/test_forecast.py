"""The pace forecast rule (docs/architecture.md "Pace forecast"), at fixed instants."""

import datetime as dt

from llm_accounts.forecast import forecast, sentence

NANO = 10**9
UTC = dt.timezone.utc


def at(text):
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_steady_spend_runs_out_before_the_reset():
    # Period 2026-12 runs 2026-11-30 to 2026-12-31. $10 a day over the last 7 days, $50 left.
    days = {f"2026-12-{d:02d}": 10 * NANO for d in range(4, 11)}
    f = forecast(200 * NANO, 150 * NANO, 0, days, at("2026-12-11T00:00:00"))
    assert f.rate_nusd_per_day == 10 * NANO
    assert f.state == "runs_out" and f.runs_out_on == "2026-12-16"
    assert f.resets_on == "2026-12-31" and f.days_left == 20
    assert f.per_day_left_nusd == 50 * NANO // 20
    assert sentence("alpha", f) == "at this pace alpha runs out about 2026-12-16; the period resets 2026-12-31"


def test_days_before_the_window_do_not_set_the_pace():
    days = {"2026-12-01": 100 * NANO, "2026-12-09": 7 * NANO}
    f = forecast(1000 * NANO, 107 * NANO, 0, days, at("2026-12-10T00:00:00"))
    assert f.window_start == "2026-12-04" and f.window_nusd == 7 * NANO
    assert f.rate_nusd_per_day == 7 * NANO // 6  # six whole days elapsed since 2026-12-04T00:00Z


def test_slow_spend_lasts_the_period():
    f = forecast(100 * NANO, 2 * NANO, 0, {"2026-12-05": 2 * NANO}, at("2026-12-05T12:00:00"))
    assert f.state == "lasts" and f.runs_out_on is None
    assert sentence("alpha", f) == "at this pace alpha lasts until the period resets 2026-12-31"


def test_idle_account_says_so_without_dividing_by_zero():
    f = forecast(100 * NANO, 0, 0, {}, at("2026-12-15T08:00:00"))
    assert f.state == "idle" and f.rate_nusd_per_day == 0 and f.runs_out_on is None
    assert f.per_day_left_nusd == 100 * NANO // 16
    assert "no pace" in sentence("alpha", f)


def test_first_minute_of_a_period_counts_as_an_hour():
    # Period 2027-01 starts 2026-12-31T00:00Z (a year end); a dollar in its first minute.
    f = forecast(100 * NANO, NANO, 0, {"2026-12-31": NANO}, at("2026-12-31T00:01:00"))
    assert f.window_start == "2026-12-31" and f.rate_nusd_per_day == 24 * NANO
    assert f.resets_on == "2027-01-31" and f.days_left == 31
    assert f.state == "runs_out" and f.runs_out_on == "2027-01-04"


def test_first_instant_of_a_period_with_nothing_spent_is_idle():
    f = forecast(100 * NANO, 0, 0, {}, at("2026-11-30T00:00:00"))
    assert f.state == "idle" and f.days_left == 31 and f.resets_on == "2026-12-31"


def test_last_minute_of_a_period_leaves_one_day():
    days = {"2026-12-30": 5 * NANO}
    f = forecast(100 * NANO, 40 * NANO, 0, days, at("2026-12-30T23:59:00"))
    assert f.days_left == 1 and f.per_day_left_nusd == 60 * NANO
    assert f.state == "lasts"


def test_leap_day_window_and_reset():
    # 2028-02-29 is in period 2028-03 (it starts that day); the window is that one day.
    f = forecast(100 * NANO, 12 * NANO, 0, {"2028-02-29": 12 * NANO}, at("2028-02-29T12:00:00"))
    assert f.window_start == "2028-02-29" and f.rate_nusd_per_day == 24 * NANO
    assert f.resets_on == "2028-03-31" and f.runs_out_on == "2028-03-04"  # $88 at $24 a day: 3⅔ days


def test_day_before_a_leap_day_resets_on_it():
    f = forecast(100 * NANO, 0, 0, {}, at("2028-02-28T06:00:00"))
    assert f.resets_on == "2028-02-29" and f.days_left == 1


def test_open_ceilings_count_against_what_is_left():
    f = forecast(100 * NANO, 50 * NANO, 50 * NANO, {"2026-12-05": NANO}, at("2026-12-05T12:00:00"))
    assert f.state == "spent" and f.per_day_left_nusd == 0
    assert sentence("alpha", f) == "alpha has nothing left of its budget; the period resets 2026-12-31"


def test_no_budget_no_forecast():
    assert forecast(None, 0, 0, {}, at("2026-12-05T12:00:00")) is None


def test_a_pace_of_a_nanodollar_lasts_without_overflow():
    f = forecast(10**18, 1, 0, {"2026-12-05": 1}, at("2026-12-05T12:00:00"))
    assert f.state == "lasts" and f.rate_nusd_per_day == 0
