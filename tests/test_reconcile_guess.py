"""A guess that conflicts (docs/errors.md "A guess that conflicts"): a reconcile at a guessed cost,
then the attempt's real answer at another cost, blocks the account (a settled cost is never
rewritten); every prompt that block refuses says it came from the manual reconcile and names the
command that clears it. Both ledger backends.
"""

import pytest

from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete
from llm_accounts.money import NANO

# The ledger tests' instants, quotes and fixture (one account rule on both backends).
from test_ledger import MODEL, T0, conv, ledger, quote  # noqa: F401 (ledger: a fixture)

USAGE = {"input_tokens": 100, "output_tokens": 20}


def refusal(call):
    with pytest.raises(AccountsError) as caught:
        call()
    return caught.value


def guessed_then_answered(ledger, work):
    ledger.reserve(conv("c1"), "guessed-1", quote(NANO // 2), [work], now=T0)
    ledger.reconcile("r1", "guessed-1", NANO // 10, "my guess", now=T0)
    return refusal(lambda: ledger.settle("guessed-1", Complete(NANO // 5, USAGE, MODEL), now=T0))


def test_the_answer_that_contradicts_a_manual_reconcile_says_so(ledger, work):
    error = guessed_then_answered(ledger, work)
    assert error.code == "settlement_conflict"
    assert error.message == (
        "the answer cost differs from the manual reconcile of this attempt ($0.10); account 'work' is blocked until "
        "checked (llm accounts adjust corrects it, then llm accounts unblock work)"
    )


def test_the_next_prompt_on_the_blocked_account_names_the_manual_reconcile_and_the_command_that_clears_it(ledger, work):
    guessed_then_answered(ledger, work)
    error = refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(1), [work], now=T0))
    assert error.code == "no_account_available"  # a new conversation: no account could take it
    assert error.message.endswith(
        "account 'work' is blocked (settlement_conflict): attempt guessed-'s answer differs from its manual reconcile; "
        "once checked (llm accounts adjust corrects it): llm accounts unblock work"
    )


def test_a_conflict_between_two_answers_keeps_the_plain_block_message(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO // 2), [work], now=T0)
    ledger.settle("a1", Complete(NANO // 10, USAGE, MODEL), now=T0)
    refusal(lambda: ledger.settle("a1", Complete(NANO // 5, USAGE, MODEL), now=T0))
    error = refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(1), [work], now=T0))
    assert "manual reconcile" not in error.message
    assert "account 'work' is blocked (settlement_conflict); after checking it, run: llm accounts unblock work" in error.message


def test_unblocking_clears_it(ledger, work):
    guessed_then_answered(ledger, work)
    assert ledger.clear_block("u1", work, "checked the console", now=T0) == "unblocked"
    assert ledger.reserve(conv("c2"), "a2", quote(1), [work], now=T0).account == "work"
