"""The warm-prefix index's remaining rules, each pinned by one test (docs/architecture.md "Warm
prefixes" and "Selection"): the certificate read's index, the purge's margin, indexes gained by an
older table, a credit-period rollover, accounts the order skips, where the index is never read,
the write arm's unknown lengths and the read arm's refreshes. docs/performance.md "Warm-prefix
affinity" lists the code mutation each test turns red on."""

import datetime as dt
import sqlite3

import pytest

from llm_accounts.declarations import Account
from llm_accounts.ledger import Complete, Ledger, Scope
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
MODEL = "claude-sonnet-4-5-20250929"
CERT = "c" * 64
STABLE = 2500  # read 500 + one-hour write 2000 in warm_up


def later(seconds, start=T0):
    return start + dt.timedelta(seconds=seconds)


def quote(ceiling=NANO // 100, cert=None):
    return Quote(MODEL, ceiling, "2026-11-01", "ab" * 32, cert=cert)


def conv(name):
    return Scope("conversation", name)


def usage(read=0, write_1h=0):
    return {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write_1h,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": write_1h},
    }


@pytest.fixture
def ledger(tmp_path):
    with Ledger(tmp_path / "ledger.db") as ledger:
        yield ledger


def warm_rows(ledger):
    return {
        (r["provider"], r["account"], r["cert"]): (r["stable_tokens"], r["expires_at"])
        for r in ledger._conn.execute("SELECT * FROM warm_prefix")
    }


def stable_of(ledger, account="work"):
    return warm_rows(ledger)[("anthropic", account, CERT)][0]


def expiry_of(ledger, account="work"):
    return warm_rows(ledger)[("anthropic", account, CERT)][1]


def settle_complete(ledger, attempt_id, read=0, write_1h=0, at=T0, **flags):
    ledger.settle(attempt_id, Complete(5, usage(read, write_1h), MODEL), cert=CERT, now=at, **flags)


def warm_up(ledger, account, accounts, scope="w0", read=500, write_1h=2000, at=T0, **flags):
    """A complete settlement on ``account`` that wrote the prefix for an hour."""
    ledger.reserve(conv(scope), scope, quote(cert=CERT), accounts, pinned=account, now=at)
    settle_complete(ledger, scope, read, write_1h, at, **flags)


def commit(ledger, account, accounts, ceiling, scope="busy", at=T0):
    """Hold ``ceiling`` open on ``account``: it moves ahead of pace (and towards the bound)."""
    ledger.reserve(conv(scope), scope, quote(ceiling), accounts, pinned=account, now=at)


def traced(ledger):
    statements = []
    ledger._conn.set_trace_callback(statements.append)
    return statements


# The certificate read and its index


def test_the_certificate_read_uses_the_warm_prefix_cert_index(ledger, work, home):
    warm_up(ledger, "work", [work, home])
    statements = traced(ledger)
    ledger.reserve(conv("c1"), "a1", quote(cert=CERT), [work, home], now=later(1))
    ledger._conn.set_trace_callback(None)
    (read,) = [s for s in statements if "FROM warm_prefix" in s and s.lstrip().upper().startswith("SELECT")]
    plan = " ".join(row[-1] for row in ledger._conn.execute("EXPLAIN QUERY PLAN " + read))
    assert "warm_prefix_cert" in plan


def test_a_table_that_predates_its_indexes_gains_them_on_open(tmp_path):
    path = tmp_path / "ledger.db"
    Ledger(path).close()
    conn = sqlite3.connect(path)
    conn.execute("DROP INDEX warm_prefix_cert")
    conn.execute("DROP INDEX warm_prefix_expiry")
    conn.commit()
    conn.close()
    with Ledger(path) as ledger:
        indexes = {r[0] for r in ledger._conn.execute("SELECT name FROM sqlite_master WHERE tbl_name = 'warm_prefix' AND type = 'index'")}
    assert {"warm_prefix_cert", "warm_prefix_expiry"} <= indexes


# The purge a write makes


def test_a_write_purges_a_row_that_expired_26_hours_before_the_attempt(ledger, work, home):
    warm_up(ledger, "home", [work, home], scope="old", at=later(-27 * 3600))  # expired 26 h before T0
    warm_up(ledger, "work", [work, home], scope="new")
    assert ("anthropic", "home", CERT) not in warm_rows(ledger)


def test_a_write_keeps_a_row_that_expired_24_hours_before_the_attempt(ledger, work, home):
    warm_up(ledger, "home", [work, home], scope="old", at=later(-25 * 3600))  # expired 24 h before T0
    warm_up(ledger, "work", [work, home], scope="new")
    assert ("anthropic", "home", CERT) in warm_rows(ledger)


def test_a_write_keeps_another_providers_old_row(ledger, work):
    ledger._conn.execute(
        "INSERT INTO account (provider, name, key_env, created_at) VALUES ('other', 'work', 'WORK_KEY', ?)", (T0.isoformat(),)
    )
    ledger._conn.execute(
        "INSERT INTO warm_prefix VALUES ('other', 'work', ?, 2500, ?)", (CERT, later(-30 * 3600).isoformat())
    )
    warm_up(ledger, "work", [work])
    assert ("other", "work", CERT) in warm_rows(ledger)


def test_a_write_keeps_an_unexpired_row_whose_minus_ten_hour_offset_sorts_before_the_attempt(ledger, work, home):
    warm_up(ledger, "home", [work, home], scope="old")
    # 02:30-10:00 is 12:30 UTC, half an hour after T0, but its text sorts 9.5 hours before T0's.
    offset = "2026-11-10T02:30:00-10:00"
    ledger._conn.execute("UPDATE warm_prefix SET expires_at = ? WHERE account = 'home'", (offset,))
    warm_up(ledger, "work", [work, home], scope="new")
    assert expiry_of(ledger, "home") == offset


# A credit-period rollover

END = dt.datetime(2026, 11, 30, tzinfo=UTC)  # credit period 2026-11 ends, 2026-12 begins


def test_a_row_written_before_a_rollover_stays_warm_with_the_bound_on_the_new_periods_spend(ledger, work, home):
    warm_up(ledger, "work", [work, home], at=later(-1800, END))
    # In the old period work is past 90% of its budget: that spend must not count against it now.
    commit(ledger, "work", [work, home], 92 * NANO // 100, scope="old-busy", at=later(-1700, END))
    commit(ledger, "work", [work, home], NANO // 10, at=later(60, END))  # work is ahead of home in the new period too
    chosen = ledger.reserve(conv("c1"), "a1", quote(cert=CERT), [work, home], now=later(120, END))
    assert chosen.account == "work"


# Accounts the order skips


def test_a_blocked_warm_account_is_skipped_and_the_order_decides_among_the_rest(ledger, work, home, spare):
    warm_up(ledger, "work", [work, home, spare])
    ledger._conn.execute("UPDATE account SET block_reason = 'manual' WHERE name = 'work'")  # its rows kept
    commit(ledger, "home", [work, home, spare], NANO // 4)
    assert ledger.reserve(conv("c1"), "a1", quote(cert=CERT), [work, home, spare], now=later(1)).account == "spare"


def test_a_warm_account_without_room_today_is_skipped_and_the_order_decides_among_the_rest(ledger, home, spare):
    # Out of daily room while far inside the month's 90% bound: only the room check can skip it.
    daily = Account("work", "WORK_KEY", NANO, daily_budget_nusd=NANO // 10)
    warm_up(ledger, "work", [daily, home, spare])
    commit(ledger, "work", [daily, home, spare], NANO // 10 - 5 - NANO // 100 + 1)  # one nanodollar short today
    commit(ledger, "home", [daily, home, spare], NANO // 4, scope="busy-home")
    assert ledger.reserve(conv("c1"), "a1", quote(cert=CERT), [daily, home, spare], now=later(1)).account == "spare"


def test_a_warm_account_above_the_bound_still_wins_when_the_order_puts_it_first(ledger, home):
    heavy = Account("work", "WORK_KEY", NANO, weight=10)  # fills as if a tenth as used
    warm_up(ledger, "work", [heavy, home])
    commit(ledger, "work", [heavy, home], 95 * NANO // 100)  # past 90%: not preferred as warm
    commit(ledger, "home", [heavy, home], NANO // 5, scope="busy-home")  # 20% used beats work's 9.5%
    assert ledger.reserve(conv("c1"), "a1", quote(cert=CERT), [heavy, home], now=later(1)).account == "work"


# Reservations that never read the index


def test_a_bound_conversations_reservation_issues_no_warm_prefix_statement(ledger, work, home):
    warm_up(ledger, "work", [work, home])
    ledger.reserve(conv("c1"), "a1", quote(cert=CERT), [work, home], now=later(1))
    statements = traced(ledger)
    ledger.reserve(conv("c1"), "a2", quote(cert=CERT), [work, home], now=later(2))
    assert statements and not [s for s in statements if "warm_prefix" in s]


def test_a_reservation_without_a_certificate_issues_no_warm_prefix_statement(ledger, work, home):
    warm_up(ledger, "work", [work, home])
    statements = traced(ledger)
    ledger.reserve(conv("c1"), "a1", quote(), [work, home], now=later(1))
    assert statements and not [s for s in statements if "warm_prefix" in s]


# Write arm: lengths that are not known


def test_a_write_with_an_unknown_length_keeps_the_stored_length(ledger, work):
    warm_up(ledger, "work", [work], scope="w0")
    warm_up(ledger, "work", [work], scope="w1", at=later(60), hour_after_key=True)
    assert stable_of(ledger) == STABLE


def test_a_write_with_a_known_length_replaces_a_stored_unknown_one(ledger, work):
    warm_up(ledger, "work", [work], scope="w0", hour_after_key=True)
    warm_up(ledger, "work", [work], scope="w1", at=later(60))
    assert stable_of(ledger) == STABLE


def test_a_write_by_a_request_with_server_tools_stores_no_length(ledger, work):
    warm_up(ledger, "work", [work], server_tools=True)
    assert stable_of(ledger) is None


def test_a_write_over_a_row_that_counts_as_absent_replaces_it_whole(ledger, work):
    warm_up(ledger, "work", [work], scope="w0")
    ledger._conn.execute("UPDATE warm_prefix SET expires_at = 'not a time'")
    warm_up(ledger, "work", [work], scope="w1", at=later(60), hour_after_key=True)
    assert (stable_of(ledger), expiry_of(ledger)) == (None, later(60 + 3600).isoformat())


# Read arm: what a stable-length read refreshes


def test_a_stable_read_in_a_bound_conversation_extends_the_row(ledger, work):
    warm_up(ledger, "work", [work])
    ledger.reserve(conv("c1"), "a1", quote(cert=CERT), [work], now=later(60))
    settle_complete(ledger, "a1", read=STABLE, at=later(61))
    ledger.reserve(conv("c1"), "a2", quote(cert=CERT), [work], now=later(1800))  # bound to work
    settle_complete(ledger, "a2", read=STABLE, at=later(1801))
    assert expiry_of(ledger) == later(1800 + 3600).isoformat()


def test_a_stable_read_extends_a_row_that_has_lapsed(ledger, work):
    warm_up(ledger, "work", [work])
    ledger.reserve(conv("c1"), "a1", quote(cert=CERT), [work], now=later(3700))  # the row lapsed at 3600
    settle_complete(ledger, "a1", read=STABLE, at=later(3701))
    assert expiry_of(ledger) == later(3700 + 3600).isoformat()
