"""What a budget refusal says: spend, ceilings held in flight and what the reset changes, each on
its own (docs/errors.md "budget_exhausted"; issues 21 point 3 and 25 point 15).

A reset frees spent budget; it never frees a ceiling held by an attempt in flight: only that
attempt's settlement does (or ``llm accounts reconcile`` for one left open).
"""

import pytest

from llm_accounts.declarations import Account
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete
from llm_accounts.money import NANO

# The ledger tests' instants, quotes and fixture (one account rule on both backends).
from llm_accounts.ledger import Unknown
from test_ledger import MODEL, T0, conv, ledger, quote  # noqa: F401 (ledger: a fixture)

USAGE = {"input_tokens": 100, "output_tokens": 20}


def refusal(call):
    with pytest.raises(AccountsError) as caught:
        call()
    return caught.value


def test_a_refusal_by_ceilings_in_flight_names_them_and_how_many_attempts_hold_them(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO // 2), [work], now=T0)
    ledger.reserve(conv("c2"), "a2", quote(NANO // 4), [work], now=T0)
    error = refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(NANO // 2), [work], now=T0))
    assert error.code == "budget_exhausted"
    assert "$0.75 of its $1.00 budget is held by 2 attempts in flight, not spent" in error.message


def test_a_refusal_by_ceilings_in_flight_never_says_the_budget_is_reached(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    error = refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(1), [work], now=T0))
    assert "reached" not in error.message


def test_a_refusal_by_ceilings_in_flight_names_no_reset_and_says_waiting_frees_them(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    error = refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(1), [work], now=T0))
    assert "reset" not in error.message
    assert error.message.endswith("not spent; -o wait SECONDS waits for room")


def test_a_refusal_by_ceilings_left_open_names_them_and_the_command_that_settles_them(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO // 2), [work], now=T0)
    ledger.settle("a1", Unknown("cancelled"), now=T0)
    error = refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(NANO), [work], now=T0))
    assert "$0.50 of its $1.00 budget is held by 1 attempt left open (unknown outcome)" in error.message
    assert error.message.endswith("settle it: llm accounts reconcile --open --account work --cost USD --source REF")


@pytest.mark.parametrize("spent, held", [(0, NANO), (NANO - 5, 0), (NANO // 2, NANO // 2)])
def test_every_budget_refusal_is_one_short_line(ledger, work, spent, held):
    if spent:
        ledger.reserve(conv("c0"), "s1", quote(spent), [work], now=T0)
        ledger.settle("s1", Complete(spent, USAGE, MODEL), now=T0)
    if held:
        ledger.reserve(conv("c1"), "a1", quote(held), [work], now=T0)
    error = refusal(lambda: ledger.reserve(conv("c1"), "a2", quote(NANO // 4), [work], now=T0))
    assert "\n" not in error.message and len(error.message) <= 230, error.message


def test_a_refusal_by_spend_says_what_the_reset_frees(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    ledger.settle("a1", Complete(NANO - 5, USAGE, MODEL), now=T0)
    error = refusal(lambda: ledger.reserve(conv("c1"), "a2", quote(10), [work], now=T0))
    assert "$0.999999995 spent" in error.message
    assert "held" not in error.message
    assert "the reset at 2026-11-30 00:00 UTC frees it" in error.message
    assert "reconcile" not in error.message


def test_a_budget_fully_spent_says_it_is_reached(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    ledger.settle("a1", Complete(NANO, USAGE, MODEL), now=T0)
    error = refusal(lambda: ledger.reserve(conv("c1"), "a2", quote(1), [work], now=T0))
    assert "account 'work' has reached its $1.00 budget for credit period 2026-11" in error.message


def test_a_daily_budget_refusal_with_nothing_spent_does_not_say_budget_reached(ledger):
    capped = Account("capped", "CAPPED_KEY", 10 * NANO, daily_budget_nusd=NANO)
    ledger.reserve(conv("c1"), "a1", quote(NANO), [capped], now=T0)
    error = refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(1), [capped], now=T0))
    assert error.code == "budget_exhausted"
    assert "reached" not in error.message
    assert "$1.00 of its $1.00 daily budget is held by 1 attempt in flight, not spent" in error.message
    assert "reset" not in error.message


def test_a_daily_budget_fully_spent_says_it_is_reached_and_when_it_resets(ledger):
    capped = Account("capped", "CAPPED_KEY", 10 * NANO, daily_budget_nusd=NANO)
    ledger.reserve(conv("c1"), "a1", quote(NANO), [capped], now=T0)
    ledger.settle("a1", Complete(NANO, USAGE, MODEL), now=T0)
    error = refusal(lambda: ledger.reserve(conv("c1"), "a2", quote(1), [capped], now=T0))
    assert "has reached its $1.00 daily budget for 2026-11-10 UTC ($1.00 spent)" in error.message
    assert "the reset at 2026-11-11 00:00 UTC frees it, or raise it: llm accounts set capped --daily-budget USD" in error.message


def test_a_client_cap_refusal_names_its_held_ceilings_apart_from_spend(ledger):
    work = Account("work", "WORK_KEY", 10 * NANO, clients=(("ci", NANO),))
    ledger.reserve(conv("c1"), "a1", quote(NANO // 2), [work], client="ci", now=T0)
    ledger.settle("a1", Complete(NANO // 4, USAGE, MODEL), now=T0)
    ledger.reserve(conv("c2"), "a2", quote(NANO // 2), [work], client="ci", now=T0)
    error = refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(NANO // 2), [work], client="ci", now=T0))
    assert "client 'ci' on account 'work'" in error.message
    assert "$0.50 of its $1.00 cap is held by 1 attempt in flight ($0.25 spent)" in error.message
