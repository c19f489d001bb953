"""Which waiting prompts hold room back, and for how long (issue 33, point 9; docs/architecture.md
"Waiting for room"). Behaviour only: what a later prompt is told, never how a waiter waits. On
both ledger backends.
"""

import datetime as dt

import pytest

from llm_accounts.declarations import Account
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete, NotSent
from llm_accounts.money import NANO

from test_ledger import MODEL, T0, conv, ledger, quote  # noqa: F401 (ledger: a fixture)

HAIKU = "claude-haiku-4-5-20251001"
USAGE = {"input_tokens": 100, "output_tokens": 20}


def refusal(call):
    with pytest.raises(AccountsError) as caught:
        call()
    return caught.value


def waiting_for_any_account(ledger, work, home, ceiling=NANO):
    """Waiter ``w1``: a new conversation that neither account has room for now, both full in flight."""
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    ledger.reserve(conv("c2"), "a2", quote(NANO), [home], now=T0)
    error = refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(ceiling), [work, home], waiter="w1", now=T0))
    assert error.held  # it waits


def test_a_waiting_prompt_whose_daily_budget_is_spent_is_refused_at_once(ledger):
    # The month is only held in flight, the day is spent: nothing will free it before midnight,
    # so the refusal carries no room to wait for, and the prompt is refused on its first try.
    capped = Account("capped", "CAPPED_KEY", NANO, daily_budget_nusd=NANO // 2)
    ledger.reserve(conv("c1"), "a1", quote(NANO // 2), [capped], now=T0)
    ledger.settle("a1", Complete(NANO // 2, USAGE, MODEL), now=T0)
    ledger.reserve(conv("c2"), "a2", quote(NANO // 4), [Account("capped", "CAPPED_KEY", NANO)], now=T0)
    error = refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(1), [capped], waiter="w1", now=T0))
    assert (error.code, error.held) == ("budget_exhausted", ())


def test_a_waiter_keeps_no_one_out_of_an_account_that_does_not_serve_its_model(ledger, work, home):
    waiting_for_any_account(ledger, work, home)
    haiku_only = Account("haiku", "HAIKU_KEY", NANO, models=(HAIKU,))
    assert ledger.reserve(conv("c4"), "a4", quote(NANO, model=HAIKU), [haiku_only], now=T0).account == "haiku"


def test_a_waiter_keeps_out_a_later_prompt_on_an_account_that_serves_its_model(ledger, work, home):
    # The counterpart of the test above: the same account serving every model is held for w1.
    waiting_for_any_account(ledger, work, home)
    every_model = Account("haiku", "HAIKU_KEY", NANO)
    error = refusal(lambda: ledger.reserve(conv("c4"), "a4", quote(NANO, model=HAIKU), [every_model], now=T0))
    assert error.held[0].queued == 1


def test_a_waiter_keeps_no_one_out_of_an_account_whose_day_cannot_hold_it(ledger, work, home):
    daily = Account("daily", "DAILY_KEY", 10 * NANO, daily_budget_nusd=NANO // 2)
    ledger.reserve(conv("d0"), "d0", quote(NANO // 4), [daily], now=T0)
    ledger.settle("d0", Complete(NANO // 4, USAGE, MODEL), now=T0)  # w1's half would pass the day
    waiting_for_any_account(ledger, work, home, ceiling=NANO // 2)
    assert ledger.reserve(conv("c4"), "a4", quote(NANO // 4), [daily], now=T0).account == "daily"


def test_a_dead_waiters_place_lapses_ten_seconds_after_it_was_last_renewed(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(NANO), [work], waiter="w1", now=T0))
    ledger.settle("a1", NotSent(), now=T0)  # the room is free; w1 never polls again
    just_before = T0 + dt.timedelta(seconds=9, microseconds=999_000)
    error = refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(NANO), [work], now=just_before))
    assert error.held[0].queued == 1
    assert ledger.reserve(conv("c3"), "a4", quote(NANO), [work], now=T0 + dt.timedelta(seconds=10)).account == "work"
