"""A new conversation over many declared accounts asks a verdict only of the accounts that can
come first (docs/performance.md "Declared accounts"), and binds what the order of every account's
verdict puts first (docs/architecture.md "Selection"), on both backends."""

import datetime as dt

import pytest
from hypothesis import given, settings, strategies as st

from llm_accounts import clock, selection
from llm_accounts.declarations import Account
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete, Ledger, Refused, Scope, admission, reads
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote
from llm_accounts.selection import Candidate

T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)
MODEL = "claude-sonnet-4-5-20250929"
QUOTE = Quote(MODEL, NANO // 100, "2026-11-01", "ab" * 32)
RATE_LIMITED = Refused("rate_limited", 429, "rate_limit_error", "other", "rate_limited")


# The order, sorted on a float first


committed = st.one_of(st.integers(-NANO, 10 * NANO), st.sampled_from([0, 2**60, 2**60 + 1]))
budget = st.one_of(st.integers(1, 10 * NANO), st.sampled_from([2**62, 2**62 - 4]))
candidates = st.lists(
    st.tuples(committed, budget, st.integers(0, 2), st.integers(1, 3), st.booleans(), st.booleans(), st.integers(0, 2)),
    max_size=12,
).map(lambda rows: [
    Candidate(f"a{i:02d}", budget_nusd=b, committed_nusd=c, rank=r, weight=w, warm=warm, probe=probe, open_scopes=s)
    for i, (c, b, r, w, warm, probe, s) in enumerate(rows)
])


@settings(max_examples=300, deadline=None, database=None)
@given(candidates)
def test_ordered_gives_the_order_compare_gives(found):
    assert [c.name for c in selection.ordered(found)] == [c.name for c in selection.order(found)]


def test_ordered_breaks_a_float_tie_of_utilization_exactly():
    zed = Candidate("zed", budget_nusd=2**62, committed_nusd=2**60 + 1)
    abe = Candidate("abe", budget_nusd=2**62 - 4, committed_nusd=2**60)
    assert selection.rough_key(zed) == selection.rough_key(abe)
    assert [c.name for c in selection.ordered([abe, zed])] == ["zed", "abe"]


# Admission over many accounts


def accounts(n=12):
    """Budgets, ranks and weights that differ, so no two accounts tie on utilization."""
    return [
        Account(f"acct{i:02d}", f"ACCT{i:02d}_KEY", (100 + 7 * i) * NANO, rank=i % 3, weight=1 + i % 2)
        for i in range(n)
    ]


@pytest.fixture
def ledger(ledger_location):
    with Ledger(ledger_location) as ledger:
        yield ledger


def rate_limit(ledger, declared, name, at):
    ledger.reserve(Scope("conversation", f"fail-{name}"), f"fail-{name}", QUOTE, declared, pinned=name, now=at)
    ledger.settle(f"fail-{name}", RATE_LIMITED, now=at)


def first_of_every_verdict(ledger, declared, now):
    """The account ``selection.order`` puts first among every declared account's verdict."""
    conn = ledger._conn
    facts = reads.read_facts(conn, "anthropic", clock.credit_month(now), now, ledger.host, full=False, model=MODEL)
    found = admission.verdicts(conn, "anthropic", declared, facts, QUOTE, clock.utc_day(now), now)
    ledger._backend.rollback(conn)
    return selection.order(selection.candidate(v) for v in found if not v.code)[0].name


def test_a_new_conversation_binds_what_the_order_of_every_verdict_puts_first(ledger):
    declared = accounts()
    for i, account in enumerate(declared):  # spend that differs by account
        attempt_id = f"spend-{i}"
        ledger.reserve(Scope("conversation", attempt_id), attempt_id, QUOTE, declared, pinned=account.name, now=T0)
        ledger.settle(attempt_id, Complete((i * 37 % 11) * NANO // 1000, {}, MODEL), now=T0)
    # acct00 (rank 0) is due its probe: by its facts alone it would come first. acct03 cools.
    rate_limit(ledger, declared, "acct00", T0)
    rate_limit(ledger, declared, "acct03", T0 + dt.timedelta(seconds=9))
    now = T0 + dt.timedelta(seconds=10)
    for n in range(8):
        expected = first_of_every_verdict(ledger, declared, now)
        got = ledger.reserve(Scope("conversation", f"new-{n}"), f"new-{n}", QUOTE, declared, now=now)
        assert got.account == expected and expected not in ("acct00", "acct03")
        ledger.settle(f"new-{n}", Complete(3 * NANO // 1000, {}, MODEL), now=now)


def test_with_only_probes_left_a_new_conversation_binds_the_first_of_them(ledger):
    declared = accounts(3)
    for account in declared:
        rate_limit(ledger, declared, account.name, T0)
    got = ledger.reserve(Scope("conversation", "new"), "new", QUOTE, declared, now=T0 + dt.timedelta(seconds=10))
    assert (got.account, got.probe) == ("acct00", True)


def test_a_new_conversation_no_account_may_take_names_every_account(ledger):
    declared = accounts(6)
    declared[1] = Account("acct01", "ACCT01_KEY", QUOTE.ceiling_nusd - 1)  # too small for this ceiling
    declared[2] = Account("acct02", "ACCT02_KEY", 100 * NANO, models=("claude-haiku-4-5-20251001",))
    for account in declared:
        if account.name not in ("acct01", "acct02"):
            rate_limit(ledger, declared, account.name, T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(Scope("conversation", "new"), "new", QUOTE, declared, now=T0 + dt.timedelta(seconds=1))
    assert caught.value.code == "budget_exhausted"
    for account in declared:  # each with its cause in a few words (docs/errors.md "One line")
        assert f"{account.name}: " in caught.value.message


def test_a_new_conversation_over_many_accounts_passes_one_whose_key_another_name_holds(ledger):
    # acct12 reads as least used (no spend this period) but its key holds acct00's budget, so its
    # verdict reads every account's facts (selection.period_conflict) and refuses it.
    declared = accounts()
    for account in declared:
        ledger.reserve(Scope("conversation", f"spend-{account.name}"), f"spend-{account.name}", QUOTE, declared,
                       pinned=account.name, now=T0)
        ledger.settle(f"spend-{account.name}", Complete(NANO // 100, {}, MODEL), now=T0)
    declared.append(Account("acct12", "ACCT00_KEY", 1000 * NANO))
    expected = first_of_every_verdict(ledger, declared, T0)
    got = ledger.reserve(Scope("conversation", "new"), "new", QUOTE, declared, now=T0)
    assert got.account == expected != "acct12"


def test_a_conversation_bound_among_many_accounts_stays_when_another_comes_first(ledger):
    declared = accounts()
    first = ledger.reserve(Scope("conversation", "c"), "c-1", QUOTE, declared, now=T0)
    ledger.settle("c-1", Complete(QUOTE.ceiling_nusd, {}, MODEL), now=T0)  # the only one with spend
    assert first_of_every_verdict(ledger, declared, T0) != first.account
    again = ledger.reserve(Scope("conversation", "c"), "c-2", QUOTE, declared, now=T0)
    assert (again.account, again.new_binding) == (first.account, False)
