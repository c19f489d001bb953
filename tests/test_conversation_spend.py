"""Spend by conversation at any number of conversations (issue 23; docs/performance.md "Spend views
at any length of history"): ``Ledger.spend_by_conversation`` and ``llm accounts spend --by
conversation`` read the costliest conversations from an index up to a limit, and the period's
total and "N more" from ``month_conversation_total``, on SQLite and PostgreSQL.

The history is written through ``Ledger`` at fixed instants (``seeded``), so every total is the
one the triggers keep; each expectation is a plain GROUP BY over the attempt rows.
"""

import json
import shutil
import sqlite3

import pytest
from click.testing import CliRunner

from llm_accounts import clock
from llm_accounts.cli import accounts as accounts_cli
from llm_accounts.declarations import Account
from llm_accounts.ledger import Complete, Ledger, Scope, Unknown
from llm_accounts.money import NANO

from test_spend import DAY, SONNET, T0, quote

# The credit periods of the seeded history, from its fixed instants (a period ends at 00:00 UTC on
# a month's last day: docs/architecture.md "Months and days").
MONTH = clock.credit_month(T0)
PREVIOUS = clock.credit_month(T0 - 20 * DAY)
EMPTY = clock.credit_month(T0 - 50 * DAY)  # a period without conversations

WORK = Account("work", "WORK_KEY", 1000 * NANO)
HOME = Account("home", "HOME_KEY", 1000 * NANO)

FROM_ROWS = """
SELECT month_utc, account, scope_id, COUNT(*), COALESCE(SUM(cost_nusd), 0),
       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0)
FROM attempt WHERE scope_kind = 'conversation' GROUP BY 1, 2, 3
"""


def seeded(ledger):
    """Eleven conversations on two accounts over two credit periods: settled, held (an unknown
    outcome and one in flight), equal totals (ordered by account, then id), one conversation
    rebound to the other account mid-period, and a one-off prompt (no conversation)."""
    n = 0
    for day, conversation, account, cost in [
        (-20, "old-1", WORK, 900), (-20, "old-2", HOME, 50),  # the previous period
        (0, "c-a", WORK, 300), (0, "c-b", WORK, 305), (0, "c-c", HOME, 305),  # equal totals (c-a: 300 + 5)
        (0, "c-d", WORK, 10), (0, "c-e", HOME, 700), (0, "c-f", WORK, None),  # c-f: unknown, held
        (1, "c-a", WORK, 5), (1, "c-g", HOME, 0), (1, "c-h", WORK, 120), (1, "c-i", HOME, "flight"),
    ]:
        n += 1
        scope, now = Scope("conversation", conversation), T0 + day * DAY
        ledger.reserve(scope, f"a{n}", quote(SONNET, NANO), [account], now=now)
        if cost == "flight":
            continue
        ledger.settle(f"a{n}", Unknown("stream_truncated") if cost is None else Complete(cost * 1_000_000, {}, SONNET), now=now)
    ledger.rebind(Scope("conversation", "c-d"), HOME, now=T0 + DAY)  # c-d moves to home
    ledger.reserve(Scope("conversation", "c-d"), "a-moved", quote(SONNET, NANO), [HOME], now=T0 + DAY)
    ledger.settle("a-moved", Complete(40_000_000, {}, SONNET), now=T0 + DAY)
    ledger.reserve(Scope("prompt", "p1"), "a-prompt", quote(SONNET, NANO), [WORK], now=T0 + DAY)
    ledger.settle("a-prompt", Complete(999_000_000, {}, SONNET), now=T0 + DAY)


def grouped(ledger, month, account=None):
    """The expected rows, costliest first, from the attempt rows."""
    rows = [
        {"key": key, "account": acc, "attempts": attempts, "settled_nusd": settled, "open_nusd": held}
        for month_utc, acc, key, attempts, settled, held in ledger._conn.execute(FROM_ROWS)
        if month_utc == month and account in (None, acc)
    ]
    return sorted(rows, key=lambda row: (-(row["settled_nusd"] + row["open_nusd"]), row["account"], row["key"]))


@pytest.fixture
def history(ledger_location):
    with Ledger(ledger_location) as ledger:
        seeded(ledger)
    return ledger_location


@pytest.fixture(scope="module")
def seeded_file(tmp_path_factory):
    """One SQLite ledger with the history, written once (each reservation is an fsync'd commit);
    tests that read it take a copy."""
    path = tmp_path_factory.mktemp("seeded") / "ledger.db"
    with Ledger(path) as ledger:
        seeded(ledger)
    return path


@pytest.fixture
def copied(seeded_file, tmp_path):
    path = tmp_path / "ledger.db"
    shutil.copyfile(seeded_file, path)
    return path


def test_the_costliest_conversations_equal_a_group_by_over_the_attempts(history):
    with Ledger(history) as ledger:
        for month in (MONTH, PREVIOUS, EMPTY):
            for account in (None, "work", "home"):
                expected = grouped(ledger, month, account)
                for limit in (None, 3):
                    found = ledger.spend_by_conversation(month, account=account, limit=limit)
                    assert found["rows"] == expected[:limit]
                    assert found["more"] == len(expected) - len(expected[:limit])
                    assert found["total"] == {
                        "conversations": len(expected),
                        **{name: sum(row[name] for row in expected) for name in ("attempts", "settled_nusd", "open_nusd")},
                    }


WITHOUT_FROM_ROWS = """
SELECT month_utc, account, COUNT(*), COALESCE(SUM(cost_nusd), 0),
       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0)
FROM attempt WHERE scope_kind <> 'conversation' GROUP BY 1, 2
"""


def test_prompts_without_a_conversation_are_their_own_rows_per_account_equal_to_a_group_by(history):
    with Ledger(history) as ledger:
        # In flight too: its ceiling is held, not spent.
        ledger.reserve(Scope("prompt", "p2"), "a-prompt-flight", quote(SONNET, NANO), [HOME], now=T0 + DAY)
        for month in (MONTH, PREVIOUS, EMPTY):
            for account in (None, "work", "home"):
                expected = [
                    {"account": acc, "attempts": attempts, "settled_nusd": settled, "open_nusd": held}
                    for month_utc, acc, attempts, settled, held in sorted(tuple(row) for row in ledger._conn.execute(WITHOUT_FROM_ROWS))
                    if month_utc == month and account in (None, acc)
                ]
                found = ledger.spend_by_conversation(month, account=account, limit=2)
                assert found["without_conversation"] == expected
        assert [row["account"] for row in ledger.spend_by_conversation(MONTH)["without_conversation"]] == ["home", "work"]


def test_equal_totals_are_ordered_by_account_then_conversation_and_a_moved_conversation_has_a_row_per_account(copied):
    with Ledger(copied) as ledger:
        rows = ledger.spend_by_conversation(MONTH)["rows"]
    keys = [(row["account"], row["key"]) for row in rows]
    assert keys[keys.index(("home", "c-c")):][:3] == [("home", "c-c"), ("work", "c-a"), ("work", "c-b")]
    assert {account for account, key in keys if key == "c-d"} == {"work", "home"}


def older_build(ledger):
    """What a ledger an older build made lacks on PostgreSQL too: the stamp of this build's schema,
    without which an open checks every table and index (docs/performance.md "Fleet")."""
    if ledger._backend.kind == "postgres":
        ledger._conn.execute("COMMENT ON TABLE ledger_meta IS NULL")


def test_a_ledger_without_the_conversation_totals_gains_them_and_the_indexes_on_open(history):
    with Ledger(history) as ledger:
        expected = ledger.spend_by_conversation(MONTH, limit=4)
        for statement in ("DROP TABLE month_conversation_total", "DROP INDEX month_conversation_top",
                          "DROP INDEX month_conversation_account_top"):
            ledger._conn.execute(statement)
        older_build(ledger)
    with Ledger(history) as ledger:
        assert ledger.spend_by_conversation(MONTH, limit=4) == expected
        indexes = {"sqlite": "SELECT name FROM sqlite_master WHERE type = 'index'",
                   "postgres": "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"}
        names = {row[0] for row in ledger._conn.execute(indexes[ledger._backend.kind])}
    assert {"month_conversation_top", "month_conversation_account_top"} <= names


def test_the_sqlite_views_walk_an_index_in_order_instead_of_sorting_the_period(copied):
    from datasette_plugin.queries import SPEND_BY_CONVERSATION
    from llm_accounts import conversation_spend

    db = sqlite3.connect(copied)
    plans = {}
    for account in (None, "work"):
        sql = conversation_spend.TOP.format(account="AND account = :account" if account else "",
                                            order="" if account else "account, ", limit="LIMIT 3")
        plans[account] = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql, {"month": MONTH, "provider": "anthropic", "account": account})]
    query = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + SPEND_BY_CONVERSATION.sql,
                                          {"account": "", "month": "", "limit": "", "offset": ""})]
    assert plans[None] == ["SEARCH month_conversation USING COVERING INDEX month_conversation_top (month_utc=?)"]
    assert plans["work"] == ["SEARCH month_conversation USING COVERING INDEX month_conversation_account_top (account=? AND month_utc=?)"]
    # The only sort is the outer one, over the rows the limit let through.
    assert [step for step in query if "TEMP B-TREE" in step] == ["USE TEMP B-TREE FOR ORDER BY"]
    assert sum("COVERING INDEX month_conversation_" in step for step in query) == 2


# --- llm accounts spend --by conversation ---------------------------------------------------------


@pytest.fixture
def cli(seeded_file, ledger_path, monkeypatch):
    ledger_path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(seeded_file, ledger_path)
    monkeypatch.setattr(clock, "now", lambda: T0 + DAY)
    return ledger_path


def run(*args):
    return CliRunner().invoke(accounts_cli, ["spend", "--by", "conversation", *args], catch_exceptions=False)


def test_spend_by_conversation_shows_the_limit_then_how_many_more_with_a_total_of_all(cli):
    lines = run("--limit", "2").output.splitlines()
    assert lines[0] == f"Credit period {MONTH}"
    # Held ceilings count towards the order (settled plus held), never as spent.
    assert [line.split() for line in lines[2:4]] == [["c-i", "home", "1", "$0.00", "$1.00"], ["c-f", "work", "1", "$0.00", "$1.00"]]
    assert lines[5].split() == ["total", "12", "$2.784", "$2.00"]  # the conversations and the one-off prompt
    assert lines[6] == "and 8 more conversations; show them with --limit 10"
    assert "more" not in run("--limit", "10").output


def test_spend_by_conversation_shows_prompts_without_a_conversation_in_a_labelled_row_of_their_own(cli):
    lines = run("--limit", "2").output.splitlines()
    assert lines[4].split("  ")[0] == "(prompts without a conversation)"
    assert lines[4].split()[-4:] == ["work", "1", "$0.999", "$0.00"]


def test_spend_by_conversation_json_says_how_many_more(cli):
    data = json.loads(run("--limit", "1", "--json").output)
    assert data["rows"] == [{"conversation": "c-i", "account": "home", "attempts": 1, "settled_nusd": 0, "open_nusd": NANO}]
    assert data["without_conversation"] == [{"account": "work", "attempts": 1, "settled_nusd": 999_000_000, "open_nusd": 0}]
    assert data["more"] == 9 and data["total"]["attempts"] == 12


def test_spend_by_conversation_csv_keeps_its_rows_and_says_how_many_more_on_stderr(cli):
    result = CliRunner().invoke(accounts_cli, ["spend", "--by", "conversation", "--limit", "2", "--csv"])
    assert [line.split(",")[:2] for line in result.stdout.splitlines()] == [
        ["conversation", "account"], ["c-i", "home"], ["c-f", "work"], ["(prompts without a conversation)", "work"],
    ]
    assert result.stderr == "and 8 more conversations; show them with --limit 10\n"


def test_spend_limit_with_another_dimension_is_one_line_declaration_invalid(cli):
    result = CliRunner().invoke(accounts_cli, ["spend", "--by", "model", "--limit", "3"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "Error: declaration_invalid: --limit: only with --by conversation (the other views are a few rows)"
    ]


def test_a_ledger_without_the_open_attempts_index_gains_it_on_open(history):
    """The per-account index of open attempts (docs/performance.md "Spend views at any length of history") is
    gained on open by a ledger an older build made, on both backends, keeping every row."""
    with Ledger(history) as ledger:
        before = ledger.attempt_count()
        ledger._conn.execute("DROP INDEX attempt_open_account")
        older_build(ledger)
    with Ledger(history) as ledger:
        indexes = {"sqlite": "SELECT name FROM sqlite_master WHERE type = 'index'",
                   "postgres": "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"}
        names = {row[0] for row in ledger._conn.execute(indexes[ledger._backend.kind])}
        assert ledger.attempt_count() == before
    assert "attempt_open_account" in names


def test_one_accounts_open_attempts_are_read_from_their_own_index(copied):
    """The half-open probe's lookup (in the facts every admission reads) reads one account's open
    attempts, and a refusal's open counts only this credit period's, from an index that holds
    what they count: not every open attempt of the ledger, nor those left open in earlier periods."""
    from llm_accounts.ledger import admission, reads

    db = sqlite3.connect(copied)
    db.execute("ANALYZE")  # planned as a ledger of any size would be: a full scan wins only on a tiny one
    facts = {"month": MONTH, "host": "h", "model": SONNET, "provider": "anthropic"}
    plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + reads._FACTS_SQL, facts)]
    probes = [step for step in plan if step.startswith(("SEARCH p ", "SCAN p"))]
    assert probes and all("USING INDEX attempt_open_account (provider=? AND account=?" in step for step in probes)
    sql = admission.OPEN_COUNTS_SQL.format(names="?, ?")
    plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql, ("d", "c", "anthropic", MONTH, "work", "play"))]
    assert plan[0] == "SEARCH attempt USING COVERING INDEX attempt_open_period (provider=? AND month_utc=? AND account=?)"


def test_with_a_client_filter_prompts_without_a_conversation_are_only_that_clients(history):
    with Ledger(history) as ledger:
        ledger.reserve(Scope("prompt", "p3"), "a-prompt-nightly", quote(SONNET, NANO), [HOME], client="nightly", now=T0 + DAY)
        ledger.settle("a-prompt-nightly", Complete(7_000_000, {}, SONNET), now=T0 + DAY)
        found = ledger.spend_by_conversation(MONTH, client="nightly")
    assert found["without_conversation"] == [{"account": "home", "attempts": 1, "settled_nusd": 7_000_000, "open_nusd": 0}]
