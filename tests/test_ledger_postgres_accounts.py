"""On PostgreSQL, writes serialize per account (docs/architecture.md "Ledger on PostgreSQL"): an
admission or any other write on one account never waits for a write on another, and every write
that changes an account's totals, health or block waits for that account's lock, the lock an
admission re-checks its limits under.

A second ledger connection holds one account's lock in an open write transaction, as an admission
or a settlement of that account does while it writes; the ledger under test, with its wait cut to
a fraction of a second, shows what waits for it and what does not.
"""

import datetime as dt

import pytest

from llm_accounts import ledger as ledger_module
from llm_accounts.declarations import Account
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete, Ledger, Scope
from llm_accounts.pricing.prices import Quote

MODEL = "claude-sonnet-4-5-20250929"
NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)
WORK, HOME = Account("work", "WORK_KEY", 10**9), Account("home", "HOME_KEY", 10**9)
QUOTE = Quote(MODEL, 1_000, "2026-11-01", "ab" * 32)


@pytest.fixture
def ledger(pg_url, monkeypatch):
    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_S", 0.3)  # read at open: this ledger waits 0.3 s
    with Ledger(pg_url) as opened:
        opened.reserve(Scope("conversation", "w0"), "w0", QUOTE, [WORK], pinned="work", now=NOW)
        opened.reserve(Scope("conversation", "h0"), "h0", QUOTE, [HOME], pinned="home", now=NOW)
        yield opened


@pytest.fixture
def hold(pg_url):
    """``hold(name)``: another connection takes account ``name``'s lock in an open write
    transaction, held until the test ends."""
    other = Ledger(pg_url)

    def take(name):
        other._backend.begin(other._conn, True)
        other._backend.lock_account(other._conn, "anthropic", name)
        other._conn.send()  # a transaction's statements are held until it reads or commits

    yield take
    other._backend.rollback(other._conn)
    other.close()


def busy(call):
    with pytest.raises(AccountsError) as caught:
        call()
    return caught.value.code == "ledger_busy"


def test_an_admission_on_one_account_commits_while_another_accounts_lock_is_held(ledger, hold):
    hold("work")
    admitted = ledger.reserve(Scope("conversation", "h1"), "h1", QUOTE, [WORK, HOME], pinned="home", now=NOW)
    assert admitted.account == "home"
    assert busy(lambda: ledger.reserve(Scope("conversation", "w1"), "w1", QUOTE, [WORK, HOME], pinned="work", now=NOW))
    assert [row["id"] for row in ledger.attempts(oldest_first=True)] == ["w0", "h0", "h1"]


def test_a_settlement_on_one_account_commits_while_another_accounts_lock_is_held(ledger, hold):
    hold("work")
    assert ledger.settle("h0", Complete(10, {"input_tokens": 1}, MODEL), now=NOW) == "settled"
    assert busy(lambda: ledger.settle("w0", Complete(10, {"input_tokens": 1}, MODEL), now=NOW))


@pytest.mark.parametrize(
    "write",
    [
        lambda ledger, name: ledger.settle(f"{name[0]}0", Complete(10, {"input_tokens": 1}, MODEL), now=NOW),
        lambda ledger, name: ledger.reconcile(f"r-{name}", f"{name[0]}0", 10, "manual:test", now=NOW),
        lambda ledger, name: ledger.adjust(f"j-{name}", name, "2026-11", 5, "manual:test", now=NOW),
        lambda ledger, name: ledger.block(name, now=NOW),
        lambda ledger, name: ledger.clear_block(f"u-{name}", name, "manual:test", now=NOW),
        lambda ledger, name: ledger.mark_removed(name, now=NOW),
        lambda ledger, name: ledger.rebind(Scope("conversation", "h0" if name == "work" else "w0"),
                                           WORK if name == "work" else HOME, now=NOW),
    ],
    ids=["settle", "reconcile", "adjust", "block", "clear_block", "mark_removed", "rebind"],
)
def test_every_write_waits_for_the_lock_of_the_account_it_changes_and_only_for_it(ledger, hold, write):
    hold("work")
    assert busy(lambda: write(ledger, "work"))
    write(ledger, "home")  # commits at once
