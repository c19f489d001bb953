"""The ledger's two reads for the provider pass and audit, on SQLite and PostgreSQL: one account's
attempts created in a time range, and its settled spend per UTC day
(docs/architecture.md "Settling from the provider", "Auditing against the bill")."""

import datetime as dt

import pytest

from llm_accounts.ledger import Complete, Ledger, Scope, Unknown
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote

MODEL = "claude-sonnet-4-5-20250929"
UTC = dt.timezone.utc
T0 = dt.datetime(2027, 12, 31, 23, 59, 0, tzinfo=UTC)  # a year end: two UTC days, two credit periods
USAGE = {"input_tokens": 10, "output_tokens": 5}


@pytest.fixture
def ledger(ledger_location):
    with Ledger(ledger_location) as ledger:
        yield ledger


def reserve(ledger, account, attempt_id, at):
    ledger.reserve(Scope("conversation", attempt_id), attempt_id, Quote(MODEL, NANO // 100, "2026-11-29", "ab" * 32), [account], now=at)


def test_attempts_between_is_one_accounts_attempts_in_the_half_open_range_oldest_first(ledger, work, home):
    for n, seconds in enumerate((0, 30, 59.999999, 60, 90)):
        reserve(ledger, work, f"w{n}", T0 + dt.timedelta(seconds=seconds))
    reserve(ledger, home, "h0", T0 + dt.timedelta(seconds=10))
    found = ledger.attempts_between("work", T0, T0 + dt.timedelta(minutes=1))
    assert [row["id"] for row in found] == ["w0", "w1", "w2"]


def test_daily_spend_sums_settled_costs_and_counts_open_attempts_per_utc_day(ledger, work):
    reserve(ledger, work, "a", T0)
    ledger.settle("a", Complete(700, USAGE, MODEL), now=T0)
    reserve(ledger, work, "b", T0 + dt.timedelta(seconds=30))
    ledger.settle("b", Unknown("stream_closed"), now=T0)
    reserve(ledger, work, "c", T0 + dt.timedelta(minutes=2))
    ledger.settle("c", Complete(300, USAGE, MODEL), now=T0 + dt.timedelta(minutes=2))
    assert ledger.daily_spend("work", "2027-12-31", "2028-01-01") == {"2027-12-31": (700, 1, 1), "2028-01-01": (300, 1, 0)}


def test_a_usage_report_never_settles_an_attempt_with_no_outcome_recorded(ledger, work):
    # No outcome: it may still be streaming, the report holding only part of its usage
    # (docs/architecture.md "Settling from the provider", in_flight).
    reserve(ledger, work, "a", T0)
    with pytest.raises(Exception) as info:
        ledger.reconcile("r", "a", 700, "usage_report:messages:2027-12-31T23:59Z:apikey_01a:" + MODEL, now=T0)
    assert getattr(info.value, "code", None) == "settlement_conflict"
    assert ledger.settle("a", Complete(900, USAGE, MODEL), now=T0) == "settled"


def test_an_answer_that_arrives_after_its_reconciliation_at_the_same_cost_changes_nothing(ledger, work):
    # A process held mid-stream (Ctrl-Z) while its attempt was reconciled by hand, then resumed:
    # it settles the same cost from the answer.
    reserve(ledger, work, "a", T0)
    ledger.reconcile("r", "a", 700, "console usage", now=T0)
    assert ledger.settle("a", Complete(700, USAGE, MODEL), now=T0) == "already_settled"
    [status] = [s for s in ledger.status([work]) if s.name == "work"]
    assert status.blocked_reason is None


def test_an_answer_that_arrives_after_its_reconciliation_at_another_cost_is_a_conflict(ledger, work):
    reserve(ledger, work, "a", T0)
    ledger.reconcile("r", "a", 700, "console usage", now=T0)
    with pytest.raises(Exception) as info:
        ledger.settle("a", Complete(900, USAGE, MODEL), now=T0)
    assert getattr(info.value, "code", None) == "settlement_conflict"
