"""The wait bound and polling of a prompt waiting for room (``llm_accounts.room``;
docs/architecture.md "Waiting for room"). Times are numbers the test passes, never a clock."""

import pytest

from llm_accounts import room
from llm_accounts.errors import AccountsError


def test_without_option_or_environment_the_bound_is_the_default():
    assert room.bound(None, {}) == room.DEFAULT_WAIT_S


def test_the_environment_sets_the_bound():
    assert room.bound(None, {"LLM_ACCOUNTS_WAIT": "42.5"}) == 42.5


def test_the_option_wins_over_the_environment():
    assert room.bound(0.0, {"LLM_ACCOUNTS_WAIT": "600"}) == 0.0


def test_an_empty_environment_value_is_the_default():
    assert room.bound(None, {"LLM_ACCOUNTS_WAIT": ""}) == room.DEFAULT_WAIT_S


@pytest.mark.parametrize("text", ["soon", "-0.1", "3600.5", "nan", "inf", "1e9"])
def test_a_bad_environment_value_is_declaration_invalid_without_the_value(text):
    with pytest.raises(AccountsError) as caught:
        room.bound(None, {"LLM_ACCOUNTS_WAIT": text})
    assert caught.value.code == "declaration_invalid"
    assert caught.value.message.startswith("LLM_ACCOUNTS_WAIT: must be a number of seconds from 0 to 3600")
    assert text not in caught.value.message


def test_polls_start_fast_and_back_off_to_the_cap():
    wait = room.Wait(60.0)
    delays = [wait.next_delay(0.0, rand=lambda: 0.0) for _ in range(6)]
    assert delays == [0.025, 0.05, 0.1, 0.2, 0.25, 0.25]


def test_jitter_adds_at_most_a_quarter():
    wait = room.Wait(60.0)
    for _ in range(8):
        delay = wait.next_delay(0.0, rand=lambda: 1.0)
    assert delay == pytest.approx(room.POLL_CAP_S * 1.25)


def test_a_wait_of_the_longest_bound_polls_at_the_cap_to_its_end():
    # Over a thousand polls at the cap: the backoff's exponent once grew past what a float holds,
    # and a prompt waiting longer than about four minutes failed ("int too large to convert to float").
    wait, now, delays = room.Wait(room.MAX_WAIT_S), 0.0, []
    while (delay := wait.next_delay(now, rand=lambda: 0.0)) is not None:
        delays.append(delay)
        now += delay
    assert len(delays) > 1024
    assert max(delays) == room.POLL_CAP_S and now == pytest.approx(room.MAX_WAIT_S)


def test_a_poll_never_sleeps_past_the_bound():
    wait = room.Wait(1.0)
    wait.next_delay(100.0)
    assert wait.next_delay(100.99, rand=lambda: 1.0) == pytest.approx(0.01)


def test_past_the_bound_there_is_no_next_poll():
    wait = room.Wait(1.0)
    wait.next_delay(100.0)
    assert wait.next_delay(101.0) is None


def test_a_bound_of_zero_never_waits():
    assert room.Wait(0.0).next_delay(5.0) is None


def test_the_notice_is_due_once_after_a_second():
    wait = room.Wait(60.0)
    wait.next_delay(10.0)
    assert [wait.notice_due(t) for t in (10.5, 11.0, 12.0, 30.0)] == [False, True, False, False]
