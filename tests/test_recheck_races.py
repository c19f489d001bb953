"""What lands between an admission's unlocked read and its write (issue 33, point 8;
docs/architecture.md "Ledger on PostgreSQL").

Admission reads and chooses without a lock, then writes under the chosen account's lock,
re-checking there (``ledger/recheck.py``). Each test lets another ledger connection write between
the two (a block, a health change, the next credit period's first attempt) and checks the write
refuses and the admission reads again; and two histories whose re-check must still pass, lest
every prompt read, refuse its own write and end as ``ledger_busy``. On both backends.
"""

import datetime as dt

import pytest

from llm_accounts import clock
from llm_accounts.declarations import Account
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete, Ledger, Refused, Scope, admission
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
MODEL = "claude-sonnet-4-5-20250929"
USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 0}
RATE_LIMITED = Refused("rate_limited", 429, "rate_limit_error", "other", "rate_limited")
OVERLOADED = Refused("overloaded", 529, "overloaded_error", "other", "provider_outage")


def quote(ceiling):
    return Quote(MODEL, ceiling, "2026-11-01", "ab" * 32)


@pytest.fixture
def ledger(ledger_location):
    with Ledger(ledger_location) as ledger:
        yield ledger


@pytest.fixture
def other(ledger_location):
    """A second connection to the same ledger: another process's writes."""
    with Ledger(ledger_location) as other:
        yield other


@pytest.fixture
def between(monkeypatch):
    """``between(write)``: run ``write`` once, after the next admission's read and before its write."""
    pending = []
    original = admission._write

    def write_after(ledger, plan):
        while pending:
            pending.pop()(plan)
        return original(ledger, plan)

    monkeypatch.setattr(admission, "_write", write_after)
    return pending.append


def attempt_ids(ledger):
    return [row["id"] for row in ledger.attempts(oldest_first=True)]


def test_a_block_landing_between_the_read_and_the_write_refuses(ledger, other, between, work):
    ledger.reserve(Scope("conversation", "c0"), "a0", quote(1), [work], now=T0)
    between(lambda plan: other.block("work", now=T0))
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(Scope("conversation", "c1"), "a1", quote(1), [work], now=T0)
    assert caught.value.code != "ledger_busy"
    assert attempt_ids(ledger) == ["a0"]


def test_a_health_change_landing_between_the_read_and_the_write_refuses(ledger, other, between, work):
    ledger.reserve(Scope("conversation", "c0"), "a0", quote(1), [work], now=T0)
    between(lambda plan: other.settle("a0", RATE_LIMITED, now=T0))
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(Scope("conversation", "c1"), "a1", quote(1), [work], now=T0)
    assert caught.value.code != "ledger_busy"
    assert attempt_ids(ledger) == ["a0"]


def test_a_period_rollover_landing_between_the_read_and_the_write_moves_the_admission_to_the_new_period(
    ledger, other, between, work, home, monkeypatch
):
    # The read is in the last second of credit period 2026-11; before the write another process
    # admits the first attempt of 2026-12, and the clock has moved on with it.
    instants = [dt.datetime(2026, 11, 29, 23, 59, 59, tzinfo=UTC)]
    monkeypatch.setattr(clock, "now", lambda: instants[-1])

    def next_period_starts(plan):
        instants.append(dt.datetime(2026, 11, 30, 0, 0, 1, tzinfo=UTC))
        other.reserve(Scope("conversation", "h1"), "h1", quote(1), [home], pinned="home")

    between(next_period_starts)
    reservation = ledger.reserve(Scope("conversation", "w1"), "w1", quote(1), [work], pinned="work")
    assert reservation.month_utc == "2026-12"
    assert {row["id"]: row["month_utc"] for row in ledger.attempts()} == {"h1": "2026-12", "w1": "2026-12"}


def test_a_correction_recorded_last_period_does_not_stand_in_the_way_of_this_periods_prompts(ledger, work):
    october = dt.datetime(2026, 10, 20, 12, 0, tzinfo=UTC)
    ledger.reserve(Scope("conversation", "c0"), "a0", quote(1), [work], now=october)
    ledger.settle("a0", Complete(1, USAGE, MODEL), now=october)
    ledger.adjust("j1", "work", "2026-10", NANO - 1, "console: spend outside llm", now=october)
    reservation = ledger.reserve(Scope("conversation", "c1"), "a1", quote(NANO), [work], now=T0)
    assert (reservation.month_utc, reservation.account) == ("2026-11", "work")


def test_an_account_renamed_in_a_new_period_is_admitted(ledger, work):
    october = dt.datetime(2026, 10, 20, 12, 0, tzinfo=UTC)
    ledger.reserve(Scope("conversation", "c0"), "a0", quote(1), [work], now=october)
    renamed = Account("job", work.key_env, NANO)
    reservation = ledger.reserve(Scope("conversation", "c1"), "a1", quote(1), [renamed], now=T0)
    assert (reservation.month_utc, reservation.account) == ("2026-11", "job")


def test_a_recovered_health_row_does_not_hold_attempts_in_flight_against_a_new_one(ledger, work):
    # Only a failing row has a probe slot to re-check: a row that failed once and recovered must
    # not turn an attempt in flight into a probe that keeps every other prompt out (ledger_busy).
    ledger.reserve(Scope("conversation", "c0"), "a0", quote(1), [work], now=T0)
    ledger.settle("a0", OVERLOADED, now=T0)
    later = T0 + dt.timedelta(minutes=10)
    ledger.reserve(Scope("conversation", "c1"), "a1", quote(1), [work], now=later)
    ledger.settle("a1", Complete(1, USAGE, MODEL), now=later)
    assert [tuple(row) for row in ledger._conn.execute("SELECT state, last_failure_at IS NOT NULL FROM health")] == [("ok", True)]
    ledger.reserve(Scope("conversation", "c2"), "a2", quote(1), [work], now=later)  # in flight
    assert ledger.reserve(Scope("conversation", "c3"), "a3", quote(1), [work], now=later).account == "work"
