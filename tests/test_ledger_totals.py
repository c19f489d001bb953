"""The per-day and per-outcome totals the spend views read (llm_accounts/schema.py ``day`` and
``month_outcome``; docs/performance.md "Spend views at any length of history").

Every instant is fixed (``T0`` and days around it), so these hold whatever the real clock says.
"""

import datetime as dt
import sqlite3

import pytest

from llm_accounts import schema
from llm_accounts.declarations import Account
from llm_accounts.ledger import Complete, Ledger, NotSent, Refused, Scope, Unknown
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
DAY = dt.timedelta(days=1)
MODEL = "claude-sonnet-4-5-20250929"
USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 0}

DAY_FROM_ROWS = """
SELECT day_utc, provider, account, COUNT(*), COALESCE(SUM(cost_nusd), 0),
       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0)
FROM attempt GROUP BY day_utc, provider, account ORDER BY 1, 2, 3
"""
OUTCOMES_FROM_ROWS = """
SELECT month_utc, provider, account, state, COALESCE(outcome, ''), COALESCE(provider_error_type, ''),
       COALESCE(rejection_class, ''), COALESCE(http_status, 0), COUNT(*), COALESCE(SUM(cost_nusd), 0),
       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0)
FROM attempt GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 ORDER BY 1, 2, 3, 4, 5, 6, 7, 8
"""
DAY_KEPT = "SELECT day_utc, provider, account, attempts, settled_nusd, open_nusd FROM day WHERE attempts > 0 ORDER BY 1, 2, 3"
OUTCOMES_KEPT = """
SELECT month_utc, provider, account, state, outcome, provider_error_type, rejection_class, http_status,
       attempts, cost_nusd, open_nusd
FROM month_outcome WHERE attempts > 0 ORDER BY 1, 2, 3, 4, 5, 6, 7, 8
"""


def quote(ceiling):
    return Quote(MODEL, ceiling, "2026-11-01", "ab" * 32)


@pytest.fixture
def ledger(tmp_path):
    with Ledger(tmp_path / "ledger.db") as ledger:
        yield ledger


@pytest.fixture
def work():
    return Account("work", "WORK_KEY", 100 * NANO)


def rows(ledger, sql):
    return [tuple(row) for row in ledger._conn.execute(sql)]


def assert_totals_match_rows(ledger):
    assert rows(ledger, DAY_KEPT) == rows(ledger, DAY_FROM_ROWS)
    assert rows(ledger, OUTCOMES_KEPT) == rows(ledger, OUTCOMES_FROM_ROWS)


def some_history(ledger, work):
    """Attempts over three UTC days: complete, refused, never sent, unknown, reconciled, in flight."""
    ledger.reserve(Scope("conversation", "c1"), "a1", quote(NANO), [work], now=T0 - 2 * DAY)
    ledger.settle("a1", Complete(300_000_000, USAGE, MODEL), now=T0 - 2 * DAY)
    ledger.reserve(Scope("conversation", "c2"), "a2", quote(NANO), [work], now=T0 - DAY)
    ledger.settle("a2", Refused("request_rejected", 400, "invalid_request_error", "prompt_too_long", "semantic"), now=T0 - DAY)
    ledger.reserve(Scope("conversation", "c3"), "a3", quote(2 * NANO), [work], now=T0)
    ledger.settle("a3", NotSent(), now=T0)
    ledger.reserve(Scope("conversation", "c4"), "a4", quote(NANO // 2), [work], now=T0)
    ledger.settle("a4", Unknown("provider_error", None, 500), now=T0)
    ledger.reserve(Scope("conversation", "c5"), "a5", quote(NANO // 4), [work], now=T0)
    ledger.settle("a5", Unknown("stream_truncated"), now=T0)
    ledger.reconcile("adj-1", "a5", 123_456_789, "console usage page", now=T0)
    ledger.reserve(Scope("conversation", "c6"), "a6", quote(7), [work], now=T0)  # in flight


def test_day_and_outcome_totals_follow_every_attempt_change(ledger, work):
    some_history(ledger, work)
    assert_totals_match_rows(ledger)
    today = rows(ledger, "SELECT attempts, settled_nusd, open_nusd FROM day WHERE day_utc = '2026-11-10'")
    assert today == [(4, 123_456_789, NANO // 2 + 7)]


def test_outcome_totals_keep_the_refusal_class_and_status(ledger, work):
    some_history(ledger, work)
    assert rows(
        ledger,
        """SELECT state, outcome, provider_error_type, rejection_class, http_status, attempts FROM month_outcome
           WHERE outcome = 'request_rejected'""",
    ) == [("settled", "request_rejected", "invalid_request_error", "prompt_too_long", 400, 1)]


def test_totals_change_in_the_same_transaction_as_the_attempt(ledger, work):
    some_history(ledger, work)
    conn = ledger._conn
    before = rows(ledger, DAY_KEPT), rows(ledger, OUTCOMES_KEPT)
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("UPDATE attempt SET state = 'settled', cost_nusd = 5, outcome = 'complete' WHERE id = 'a6'")
    assert rows(ledger, DAY_KEPT) != before[0]  # already changed inside the transaction
    assert_totals_match_rows(ledger)
    conn.execute("ROLLBACK")
    assert (rows(ledger, DAY_KEPT), rows(ledger, OUTCOMES_KEPT)) == before


def test_an_older_ledger_gains_the_totals_filled_from_its_rows(tmp_path, work):
    path = tmp_path / "old.db"
    with Ledger(path) as ledger:
        some_history(ledger, work)
        expected = rows(ledger, DAY_FROM_ROWS), rows(ledger, OUTCOMES_FROM_ROWS)
    # What a build before these totals left: no day or month_outcome table, no triggers.
    conn = sqlite3.connect(path)
    for name in ("attempt_totals_insert", "attempt_totals_update", "attempt_totals_delete"):
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("DROP TABLE day")
    conn.execute("DROP TABLE month_outcome")
    conn.commit()
    conn.close()
    with Ledger(path) as ledger:
        assert ledger.status([work])  # any open brings the file up to date
        assert (rows(ledger, DAY_KEPT), rows(ledger, OUTCOMES_KEPT)) == expected
        ledger.reserve(Scope("conversation", "c7"), "a7", quote(11), [work], now=T0)
        assert_totals_match_rows(ledger)  # and the triggers are back


def test_the_backfill_recomputes_totals_that_drifted(ledger, work):
    some_history(ledger, work)
    ledger._conn.execute("UPDATE day SET settled_nusd = settled_nusd + 1")
    for table in ("day", "month_outcome"):
        for statement in schema.statements(schema.BACKFILL[table]):
            ledger._conn.execute(statement)
    assert_totals_match_rows(ledger)


@pytest.mark.parametrize(
    "filters",
    [{}, {"account": "work"}, {"state": "open"}, {"account": "work", "state": "settled"}, {"outcome": "not_sent"},
     {"month_utc": "2026-11"}, {"client": "ci"}],
    ids=lambda filters: ",".join(filters) or "none",
)
def test_attempt_counts_equal_the_rows(ledger, work, filters):
    some_history(ledger, work)
    ledger.reserve(Scope("conversation", "c8"), "a8", quote(3), [work], client="ci", now=T0)
    where = " AND ".join(f"{column} = ?" for column in filters) or "1"
    (expected,) = ledger._conn.execute(f"SELECT COUNT(*) FROM attempt WHERE {where}", list(filters.values())).fetchone()
    assert ledger.attempt_count(**filters) == expected


def test_status_counts_open_attempts_from_the_totals(ledger, work):
    some_history(ledger, work)
    (line,) = ledger.status([work], now=T0)
    assert line.open_attempts == 2  # a4 (unknown outcome) and a6 (in flight)


def test_attempts_are_listed_in_admission_order(ledger, work):
    some_history(ledger, work)
    assert [a["id"] for a in ledger.attempts(limit=3)] == ["a6", "a5", "a4"]
    assert [a["id"] for a in ledger.open_attempts()] == ["a4", "a6"]


def test_listing_the_newest_attempts_reads_no_more_than_its_page(ledger):
    plan = " ".join(
        row[3] for row in ledger._conn.execute("EXPLAIN QUERY PLAN SELECT * FROM attempt WHERE 1 ORDER BY rowid DESC LIMIT 20")
    )
    assert "TEMP B-TREE" not in plan
    plan = " ".join(
        row[3]
        for row in ledger._conn.execute(
            "EXPLAIN QUERY PLAN SELECT * FROM attempt WHERE state = ? ORDER BY rowid ASC", ("open",)
        )
    )
    assert "attempt_open" in plan and "TEMP B-TREE" not in plan


CLIENTS_FROM_ROWS = """
SELECT month_utc, provider, account, client, COUNT(*), COALESCE(SUM(cost_nusd), 0),
       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0),
       COALESCE(SUM(CASE WHEN state = 'settled' THEN tokens END), 0),
       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_tokens END), 0)
FROM attempt WHERE client IS NOT NULL GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
"""
CLIENTS_KEPT = """
SELECT month_utc, provider, account, client, attempts, settled_nusd, open_nusd, tokens, open_tokens
FROM month_client WHERE attempts > 0 ORDER BY 1, 2, 3, 4
"""


def test_client_totals_follow_every_attempt_with_a_client(ledger, work):
    for index, client in enumerate(("ci", "web", "ci")):
        ledger.reserve(Scope("conversation", f"k{index}"), f"k{index}", quote(NANO), [work], client=client, now=T0)
    ledger.settle("k0", Complete(200_000_000, USAGE, MODEL), now=T0)
    ledger.settle("k1", NotSent(), now=T0)
    kept = rows(ledger, CLIENTS_KEPT)
    assert kept == rows(ledger, CLIENTS_FROM_ROWS)
    assert [row[3:6] for row in kept] == [("ci", 2, 200_000_000), ("web", 1, 0)]
