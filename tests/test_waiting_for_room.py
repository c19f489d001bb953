"""Waiting for room (docs/architecture.md "Waiting for room"; issue 21 point 1).

An admission refused only because ceilings of attempts still in flight hold the room (settled
spend plus this ceiling would fit every limit) may wait; one refused by spend may not. Waiters
queue in arrival order in the ledger's ``waiter`` table, and room that frees goes to the earliest
waiter it fits, never to a later prompt first. The ledger rules run on both backends.
"""

import pytest

from llm_accounts import ledger as ledger_module
from llm_accounts.declarations import Account
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete, NotSent, Unknown
from llm_accounts.money import NANO
from llm_accounts.selection import Held, held_summary

# The ledger tests' instants, quotes and fixture (one account rule on both backends).
from test_ledger import MODEL, T0, conv, ledger, quote  # noqa: F401 (ledger: a fixture)

USAGE = {"input_tokens": 100, "output_tokens": 20}


def refusal(call):
    with pytest.raises(AccountsError) as caught:
        call()
    return caught.value


def waiters(ledger):
    return [tuple(row) for row in ledger._conn.execute("SELECT id, seq, account FROM waiter ORDER BY seq").fetchall()]


# What may wait


def test_a_refusal_only_by_ceilings_in_flight_carries_the_room_they_hold(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    error = refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(1), [work], now=T0))
    assert error.code == "budget_exhausted"
    assert error.held == (Held("work", NANO, 1, 0),)


def test_a_refusal_by_spend_carries_nothing_to_wait_for(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    ledger.settle("a1", Complete(NANO - 5, USAGE, MODEL), now=T0)
    error = refusal(lambda: ledger.reserve(conv("c1"), "a2", quote(10), [work], now=T0))
    assert (error.code, error.held) == ("budget_exhausted", ())


def test_a_daily_budget_spent_leaves_nothing_to_wait_for_though_the_month_is_only_held(ledger):
    capped = Account("capped", "CAPPED_KEY", NANO, daily_budget_nusd=NANO // 2)
    ledger.reserve(conv("c1"), "a1", quote(NANO // 2), [capped], now=T0)
    ledger.settle("a1", Complete(NANO // 2, USAGE, MODEL), now=T0)  # the day is spent
    ledger.reserve(conv("c2"), "a2", quote(0), [Account("capped", "CAPPED_KEY", NANO)], now=T0)
    error = refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(NANO // 2), [capped], now=T0))
    assert (error.code, error.held) == ("budget_exhausted", ())


def test_a_client_cap_held_in_flight_may_be_waited_for(ledger):
    work = Account("work", "WORK_KEY", 10 * NANO, clients=(("ci", NANO),))
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], client="ci", now=T0)
    error = refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(1), [work], client="ci", now=T0))
    assert error.held == (Held("work", NANO, 1, 0),)


def test_a_new_conversation_takes_an_account_with_room_rather_than_wait(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    assert ledger.reserve(conv("c2"), "a2", quote(NANO), [work, home], waiter="w2", now=T0).account == "home"
    assert waiters(ledger) == []


def test_a_new_conversation_waits_only_when_no_account_has_room_and_names_each(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    ledger.reserve(conv("c2"), "a2", quote(NANO // 2), [home], now=T0)
    error = refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(NANO), [work, home], now=T0))
    assert sorted(error.held, key=lambda h: h.account) == [Held("home", NANO // 2, 1, 0), Held("work", NANO, 1, 0)]


def test_a_bound_conversation_waits_for_its_own_account_while_another_has_room(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(NANO // 2), [work], now=T0)
    ledger.reserve(conv("c2"), "a2", quote(NANO // 2), [work], now=T0)
    error = refusal(lambda: ledger.reserve(conv("c1"), "a3", quote(NANO // 2), [work, home], waiter="w1", now=T0))
    assert (error.account, error.held) == ("work", (Held("work", NANO, 2, 0),))
    assert waiters(ledger) == [("w1", 1, "work")]


# Arrival order


def test_a_waiting_prompt_is_queued_once_and_keeps_its_place(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    for _ in range(3):
        refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(1), [work], waiter="w1", now=T0))
    refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(1), [work], waiter="w2", now=T0))
    refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(1), [work], waiter="w1", now=T0))
    assert waiters(ledger) == [("w1", 1, None), ("w2", 2, None)]


def test_a_prompt_that_does_not_wait_leaves_no_place(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(1), [work], now=T0))
    assert waiters(ledger) == []


def test_room_that_frees_goes_to_the_earliest_waiter_not_to_a_newcomer(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(NANO // 2), [work], waiter="w1", now=T0))
    ledger.settle("a1", NotSent(), now=T0)
    error = refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(3 * NANO // 4), [work], now=T0))
    assert error.held == (Held("work", 0, 0, 0, NANO // 2, 1),)
    assert "behind 1 earlier waiting prompt" in str(held_summary(error.held))
    assert ledger.reserve(conv("c2"), "a2", quote(NANO // 2), [work], waiter="w1", now=T0).account == "work"


def test_a_later_waiter_defers_to_an_earlier_one_the_room_fits(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(3 * NANO // 4), [work], waiter="w1", now=T0))
    refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(3 * NANO // 4), [work], waiter="w2", now=T0))
    ledger.settle("a1", NotSent(), now=T0)
    refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(3 * NANO // 4), [work], waiter="w2", now=T0))
    assert ledger.reserve(conv("c2"), "a2", quote(3 * NANO // 4), [work], waiter="w1", now=T0).account == "work"
    assert waiters(ledger) == [("w2", 2, None)]


def test_an_earlier_waiter_too_large_for_the_room_still_keeps_smaller_later_prompts_out(ledger, work):
    """No waiter starves behind later ones: a stream of small prompts cannot keep taking the room
    a larger earlier waiter needs."""
    ledger.reserve(conv("c1"), "a1", quote(NANO // 2), [work], now=T0)
    ledger.reserve(conv("c2"), "a2", quote(NANO // 2), [work], now=T0)
    refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(NANO), [work], waiter="w1", now=T0))
    ledger.settle("a1", NotSent(), now=T0)
    error = refusal(lambda: ledger.reserve(conv("c4"), "a4", quote(1), [work], now=T0))
    assert error.held == (Held("work", NANO // 2, 1, 0, NANO, 1),)


def test_a_waiter_its_account_cannot_hold_even_with_nothing_in_flight_keeps_no_one_out(ledger, work):
    big = Account("big", "BIG_KEY", 10 * NANO)
    ledger.reserve(conv("c1"), "a1", quote(10 * NANO), [big], now=T0)
    refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(5 * NANO), [big, work], waiter="w1", now=T0))
    assert ledger.reserve(conv("c3"), "a3", quote(NANO), [work], now=T0).account == "work"


def test_a_waiter_for_another_account_keeps_no_one_out_of_this_one(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [home], now=T0)
    refusal(lambda: ledger.reserve(conv("c1"), "a2", quote(NANO), [work, home], waiter="w1", now=T0))
    assert waiters(ledger) == [("w1", 1, "home")]
    assert ledger.reserve(conv("c2"), "a3", quote(NANO), [work], now=T0).account == "work"


def test_a_waiter_whose_place_expired_keeps_no_one_out(ledger, work):
    """A waiter killed while waiting stops renewing its place; others go ahead once it expires."""
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(NANO), [work], waiter="w1", now=T0))
    ledger.settle("a1", NotSent(), now=T0)
    later = T0 + ledger_module.WAITER_TTL
    assert ledger.reserve(conv("c3"), "a3", quote(NANO), [work], now=later).account == "work"


def test_a_waiter_polling_renews_its_place(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    ttl = ledger_module.WAITER_TTL
    for step in range(4):
        at = T0 + step * ttl * 3 / 4
        refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(NANO), [work], waiter="w1", now=at))
    ledger.settle("a1", NotSent(), now=T0)
    error = refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(NANO), [work], now=T0 + 3 * ttl * 3 / 4))
    assert error.held[0].queued == 1


def test_admission_removes_the_waiters_place(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(NANO), [work], waiter="w1", now=T0))
    ledger.settle("a1", NotSent(), now=T0)
    ledger.reserve(conv("c2"), "a2", quote(NANO), [work], waiter="w1", now=T0)
    assert waiters(ledger) == []


def test_leaving_gives_up_the_place(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(NANO), [work], waiter="w1", now=T0))
    ledger.leave("w1")
    ledger.settle("a1", NotSent(), now=T0)
    assert ledger.reserve(conv("c3"), "a3", quote(NANO), [work], now=T0).account == "work"


def test_waiting_never_admits_past_the_budget(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(NANO // 2), [work], waiter="w1", now=T0))
    ledger.settle("a1", Complete(NANO // 2 + 1, USAGE, MODEL), now=T0)
    error = refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(NANO // 2), [work], waiter="w1", now=T0))
    assert error.held == ()


# What is in flight: an attempt whose outcome is recorded unknown is no longer in flight. It keeps
# its ceiling until evidence settles it, so waiting would not free it.


def test_a_ceiling_left_open_with_an_unknown_outcome_is_not_waited_for(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO // 2), [work], now=T0)
    ledger.settle("a1", Unknown("stream_truncated"), now=T0)
    ledger.reserve(conv("c2"), "a2", quote(NANO // 4), [work], now=T0)
    error = refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(3 * NANO // 4), [work], now=T0))
    assert (error.code, error.held) == ("budget_exhausted", ())
    assert "$0.50 of its $1.00 budget is held by 1 attempt left open (unknown outcome)" in error.message
    assert error.message.endswith("settle it: llm accounts reconcile --open --account work --cost USD --source REF")


def test_room_held_in_flight_beside_a_ceiling_left_open_is_waited_for(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO // 4), [work], now=T0)
    ledger.settle("a1", Unknown("stream_truncated"), now=T0)
    ledger.reserve(conv("c2"), "a2", quote(NANO // 2), [work], now=T0)
    error = refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(NANO // 2), [work], now=T0))
    assert error.held == (Held("work", NANO // 2, 1, 0),)


def test_a_prompt_refused_by_what_it_cannot_wait_for_gives_up_its_place(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO // 2), [work], now=T0)
    refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(NANO), [work], waiter="w1", now=T0))
    assert waiters(ledger) == [("w1", 1, None)]
    ledger.settle("a1", Unknown("stream_truncated"), now=T0)
    error = refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(NANO), [work], waiter="w1", now=T0))
    assert error.held == ()
    assert waiters(ledger) == []


# A waiter its own client keeps out (docs/architecture.md "Waiting for room")


def test_a_waiter_records_its_client(ledger):
    team = Account("team", "TEAM_KEY", 15 * NANO, clients=(("ci", 10 * NANO),))
    ledger.reserve(conv("c1"), "a1", quote(8 * NANO), [team], client="ci", now=T0)
    refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(5 * NANO), [team], client="ci", waiter="w1", now=T0))
    assert [tuple(r) for r in ledger._conn.execute("SELECT id, client FROM waiter").fetchall()] == [("w1", "ci")]


def test_a_waiter_its_own_clients_cap_keeps_out_keeps_no_one_else_waiting(ledger):
    # ci's cap holds $8 in flight, so its $5 waiter waits though the budget has room for it;
    # room on the account could not go to it, so a prompt of another client is admitted now.
    team = Account("team", "TEAM_KEY", 15 * NANO, clients=(("ci", 10 * NANO),))
    ledger.reserve(conv("c1"), "a1", quote(8 * NANO), [team], client="ci", now=T0)
    error = refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(5 * NANO), [team], client="ci", waiter="w1", now=T0))
    assert error.held == (Held("team", 8 * NANO, 1, 0),)
    assert ledger.reserve(conv("c3"), "a3", quote(5 * NANO), [team], client="web", now=T0).account == "team"


def test_a_waiter_whose_client_has_room_again_is_owed_room_first(ledger):
    team = Account("team", "TEAM_KEY", 15 * NANO, clients=(("ci", 10 * NANO),))
    ledger.reserve(conv("c1"), "a1", quote(8 * NANO), [team], client="ci", now=T0)
    ledger.reserve(conv("c2"), "a2", quote(NANO), [team], client="web", now=T0)
    refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(5 * NANO), [team], client="ci", waiter="w1", now=T0))
    ledger.settle("a1", Complete(2 * NANO, USAGE, MODEL), now=T0)  # ci's cap has room for it again
    error = refusal(lambda: ledger.reserve(conv("c4"), "a4", quote(8 * NANO), [team], client="web", now=T0))
    assert error.held == (Held("team", NANO, 1, 2 * NANO, 5 * NANO, 1),)
