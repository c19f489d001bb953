"""Spend by any dimension (issue 23 point 2; docs/architecture.md "Spend"): ``llm accounts spend``,
the ``attempts`` filters and the ``month_model`` totals behind them.

Every instant is fixed (``T0`` and days around it) and the CLI's clock is patched, so these hold
whatever the real clock says. Settled spend and held ceilings are always separate figures.
"""

import csv
import datetime as dt
import io
import json
import sqlite3

import pytest
from click.testing import CliRunner

from llm_accounts import clock, schema
from llm_accounts.cli import accounts as accounts_cli
from llm_accounts.declarations import Account
from llm_accounts.ledger import Complete, Ledger, Scope, Unknown
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 12, 10, 12, 0, tzinfo=UTC)  # credit period 2026-12: 2026-11-30 .. 2026-12-30
DAY = dt.timedelta(days=1)
SONNET = "claude-sonnet-4-5-20250929"
HAIKU = "claude-haiku-4-5-20251001"
USAGE = {"input_tokens": 100, "output_tokens": 20}

CONVERSATION_FROM_ROWS = """
SELECT month_utc, provider, account, scope_id, COUNT(*), COALESCE(SUM(cost_nusd), 0),
       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0)
FROM attempt WHERE scope_kind = 'conversation' GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
"""
CONVERSATION_KEPT = """
SELECT month_utc, provider, account, conversation, attempts, settled_nusd, open_nusd
FROM month_conversation WHERE attempts > 0 ORDER BY 1, 2, 3, 4
"""
MODEL_FROM_ROWS = """
SELECT month_utc, provider, account, requested_model, COUNT(*), COALESCE(SUM(cost_nusd), 0),
       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0)
FROM attempt GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
"""
MODEL_KEPT = """
SELECT month_utc, provider, account, model, attempts, settled_nusd, open_nusd
FROM month_model WHERE attempts > 0 ORDER BY 1, 2, 3, 4
"""


def quote(model, ceiling):
    return Quote(model, ceiling, "2026-11-01", "ab" * 32)


def history(ledger):
    """Work and home over two credit periods: settled, unknown (held), reconciled, in flight."""
    work, home = Account("work", "WORK_KEY", 100 * NANO), Account("home", "HOME_KEY", 100 * NANO)
    ledger.reserve(Scope("conversation", "c9"), "a6", quote(SONNET, NANO), [work], now=T0 - 20 * DAY)  # 2026-11
    ledger.settle("a6", Complete(500_000_000, USAGE, SONNET), now=T0 - 20 * DAY)
    ledger.reserve(Scope("conversation", "c1"), "a1", quote(SONNET, NANO), [work], client="nightly", now=T0 - 10 * DAY)
    ledger.settle("a1", Complete(300_000_000, USAGE, SONNET), now=T0 - 10 * DAY)  # 2026-11-30: period 2026-12
    ledger.reserve(Scope("conversation", "c1"), "a2", quote(HAIKU, NANO), [work], client="nightly", now=T0)
    ledger.settle("a2", Complete(20_000_000, USAGE, HAIKU), now=T0)
    ledger.reserve(Scope("conversation", "c2"), "a3", quote(SONNET, 2 * NANO), [home], now=T0)
    ledger.settle("a3", Unknown("stream_truncated"), now=T0)  # held: its ceiling stays counted
    ledger.reserve(Scope("conversation", "c3"), "a4", quote(SONNET, NANO // 2), [work], now=T0 + DAY)
    ledger.settle("a4", Unknown("provider_error", None, 500), now=T0 + DAY)
    ledger.reconcile("adj-1", "a4", 100_000_000, "console usage page", now=T0 + DAY)
    ledger.reserve(Scope("prompt", "p1"), "a5", quote(HAIKU, 7), [home], now=T0 + DAY)  # in flight


@pytest.fixture
def filled(ledger_path, monkeypatch):
    ledger_path.parent.mkdir(parents=True, exist_ok=True)
    with Ledger(ledger_path) as ledger:
        history(ledger)
    monkeypatch.setattr(clock, "now", lambda: T0 + DAY)
    return ledger_path


def run(*args):
    return CliRunner().invoke(accounts_cli, list(args), catch_exceptions=False)


def spend_json(*args):
    result = run("spend", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


# --- the month_model totals ---------------------------------------------------------------------


def kept_and_summed(ledger):
    def rows(sql):
        return [tuple(r) for r in ledger._conn.execute(sql)]

    return (rows(MODEL_KEPT), rows(CONVERSATION_KEPT)), (rows(MODEL_FROM_ROWS), rows(CONVERSATION_FROM_ROWS))


def test_model_and_conversation_totals_match_the_attempt_rows_through_settle_reconcile_and_flight(tmp_path):
    with Ledger(tmp_path / "ledger.db") as ledger:
        history(ledger)
        kept, summed = kept_and_summed(ledger)
        assert kept == summed and kept[0] and kept[1]


def test_a_ledger_without_the_model_and_conversation_totals_gains_them_filled_from_its_rows_on_open(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger(path) as ledger:
        history(ledger)
    db = sqlite3.connect(path)
    db.execute("DROP TABLE month_model")
    db.execute("DROP TABLE month_conversation")
    db.commit()
    db.close()
    with Ledger(path) as ledger:
        kept, summed = kept_and_summed(ledger)
        assert kept == summed and kept[0] and kept[1]


@pytest.mark.parametrize(
    "by, column",
    [("account", "account"), ("model", "requested_model"), ("client", "client"), ("day", "day_utc"),
     ("conversation", "case when scope_kind = 'conversation' then scope_id end")],
)
def test_spend_by_from_the_totals_tables_equals_a_sum_over_the_period_rows(tmp_path, by, column):
    with Ledger(tmp_path / "ledger.db") as ledger:
        history(ledger)
        summed = ledger._conn.execute(
            f"""SELECT {column}, COUNT(*), COALESCE(SUM(cost_nusd), 0),
                       COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0)
                FROM attempt WHERE month_utc = '2026-12' GROUP BY 1"""
        ).fetchall()
        if by == "conversation":  # a one-off prompt has no conversation
            summed = [row for row in summed if row[0] is not None]
        kept = ledger.spend_by(by, "2026-12")
    assert sorted((r["key"] or "", r["attempts"], r["settled_nusd"], r["open_nusd"]) for r in kept) == sorted(
        (key or "", *figures) for key, *figures in summed
    )


# --- llm accounts spend -------------------------------------------------------------------------


def test_spend_defaults_to_the_current_credit_period_by_account(filled):
    data = spend_json()
    assert data["period"] == "2026-12" and data["by"] == "account"
    assert {row["account"]: (row["settled_nusd"], row["open_nusd"]) for row in data["rows"]} == {
        "work": (420_000_000, 0),
        "home": (0, 2 * NANO + 7),
    }


def test_spend_by_model_keeps_held_ceilings_apart_from_settled_spend(filled):
    data = spend_json("--by", "model")
    by_model = {row["model"]: row for row in data["rows"]}
    assert by_model[SONNET]["settled_nusd"] == 400_000_000
    assert by_model[SONNET]["open_nusd"] == 2 * NANO
    assert by_model[HAIKU]["settled_nusd"] == 20_000_000 and by_model[HAIKU]["open_nusd"] == 7
    assert data["total"] == {"attempts": 5, "settled_nusd": 420_000_000, "open_nusd": 2 * NANO + 7}


def test_spend_table_prints_settled_and_held_columns_in_dollars(filled):
    result = run("spend", "--by", "model")
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0] == "Credit period 2026-12"
    assert lines[1].split() == ["model", "attempts", "settled", "held", "(open)"]
    assert any(line.split() == [SONNET, "3", "$0.40", "$2.00"] for line in lines)
    assert lines[-1].split() == ["total", "5", "$0.42", "$2.00"]


def test_spend_by_client_lists_unlabelled_attempts_as_none(filled):
    rows = {row["client"]: row for row in spend_json("--by", "client")["rows"]}
    assert rows["nightly"]["settled_nusd"] == 320_000_000 and rows["nightly"]["attempts"] == 2
    assert rows[None]["attempts"] == 3 and rows[None]["settled_nusd"] == 100_000_000
    assert "(none)" in run("spend", "--by", "client").output


def test_spend_by_day_counts_the_periods_first_day_in_the_last_calendar_month(filled):
    days = [row["day"] for row in spend_json("--by", "day")["rows"]]
    assert days == ["2026-11-30", "2026-12-10", "2026-12-11"]


def test_spend_by_conversation_with_a_client_filter(filled):
    rows = spend_json("--by", "conversation", "--client", "nightly")["rows"]
    assert rows == [{"conversation": "c1", "account": "work", "attempts": 2, "settled_nusd": 320_000_000, "open_nusd": 0}]


def test_spend_of_an_earlier_period_for_one_account(filled):
    rows = spend_json("--period", "2026-11", "--account", "work", "--by", "model")["rows"]
    assert rows == [{"model": SONNET, "attempts": 1, "settled_nusd": 500_000_000, "open_nusd": 0}]


def test_spend_csv_has_nanodollars_and_exact_dollars(filled):
    result = run("spend", "--by", "account", "--csv")
    table = list(csv.DictReader(io.StringIO(result.output)))
    home = next(row for row in table if row["account"] == "home")
    assert home["open_nusd"] == str(2 * NANO + 7) and home["open_usd"] == "2.000000007"
    assert home["settled_usd"] == "0.000000000"


@pytest.mark.parametrize("command", [
    *(("spend", "--by", by) for by in ("account", "model", "client", "conversation", "day")),
    ("attempts",),
])
def test_each_nanodollar_csv_column_has_its_dollar_twin_of_the_same_stem(filled, command):
    header = run(*command, "--csv").output.splitlines()[0].split(",")
    nusd = {name[: -len("_nusd")] for name in header if name.endswith("_nusd")}
    usd = {name[: -len("_usd")] for name in header if name.endswith("_usd")}
    assert nusd and nusd == usd


@pytest.mark.parametrize("args", [("--period", "2026-13"), ("--period", "Dec"), ("--json", "--csv")])
def test_spend_bad_input_is_one_line_declaration_invalid(filled, args):
    result = CliRunner().invoke(accounts_cli, ["spend", *args])
    assert result.exit_code != 0
    message = result.output.strip()
    assert "declaration_invalid" in message and len(message.splitlines()) == 1


# --- llm accounts attempts filters --------------------------------------------------------------


def attempt_ids(*args):
    result = run("attempts", *args, "--json")
    assert result.exit_code == 0, result.output
    return sorted(row["id"] for row in json.loads(result.output))


def test_attempts_filter_by_model_client_and_conversation(filled):
    assert attempt_ids("--model", HAIKU) == ["a2", "a5"]
    assert attempt_ids("--client", "nightly") == ["a1", "a2"]
    assert attempt_ids("--conversation", "c1") == ["a1", "a2"]
    assert attempt_ids("--conversation", "c1", "--model", SONNET) == ["a1"]


def test_attempts_since_and_until_take_dates_and_instants(filled):
    assert attempt_ids("--since", "2026-12-10") == ["a2", "a3", "a4", "a5"]
    assert attempt_ids("--until", "2026-11-30") == ["a1", "a6"]  # a date includes its whole day
    assert attempt_ids("--since", "2026-12-10T12:00:00Z", "--until", "2026-12-11T12:00:00+00:00") == ["a2", "a3"]
    assert attempt_ids("--since", "2026-12-11T00:00:00") == ["a4", "a5"]  # no offset: UTC


@pytest.mark.parametrize("option", ["--since", "--until"])
def test_attempts_bad_instant_is_one_line_declaration_invalid_without_the_value(filled, option):
    result = CliRunner().invoke(accounts_cli, ["attempts", option, "yesterday-ish"])
    assert result.exit_code == 1
    message = result.output.strip()
    assert "declaration_invalid" in message and option in message and "yesterday-ish" not in message
    assert len(message.splitlines()) == 1


def test_attempts_csv_lists_money_as_nanodollars_and_exact_dollars(filled):
    result = run("attempts", "--client", "nightly", "--csv")
    table = list(csv.DictReader(io.StringIO(result.output)))
    assert [row["id"] for row in table] == ["a2", "a1"]
    assert table[1]["cost_nusd"] == "300000000" and table[1]["cost_usd"] == "0.300000000"
    assert table[1]["requested_model"] == SONNET and table[1]["scope_id"] == "c1"


def test_spend_by_gives_the_same_rows_on_sqlite_and_postgresql(ledger_location):
    with Ledger(ledger_location) as ledger:
        history(ledger)
        got = {by: ledger.spend_by(by, "2026-12") for by in ledger.SPEND_DIMENSIONS}
        got["client_filter"] = ledger.spend_by("model", "2026-12", client="nightly", account="work")
    assert [row["key"] for row in got["day"]] == ["2026-11-30", "2026-12-10", "2026-12-11"]
    assert {row["key"]: row["open_nusd"] for row in got["account"]} == {"work": 0, "home": 2 * NANO + 7}
    assert {row["key"]: row["settled_nusd"] for row in got["client"]} == {"nightly": 320_000_000, None: 100_000_000}
    assert [(row["key"], row["settled_nusd"]) for row in got["conversation"]] == [("c2", 0), ("c1", 320_000_000), ("c3", 100_000_000)]
    assert [(row["key"], row["attempts"]) for row in got["client_filter"]] == [(SONNET, 1), (HAIKU, 1)]


def test_attempts_with_a_filter_beyond_the_totals_says_more_match_without_counting_them(filled):
    result = run("attempts", "--model", SONNET, "--limit", "2")
    lines = result.output.splitlines()
    assert len(lines) == 1 + 2 + 1
    assert lines[-1] == "More attempts match; show more with --limit 4"
    assert "More attempts" not in run("attempts", "--model", SONNET, "--limit", "4").output


@pytest.mark.parametrize("name", ["claude-sonnet-4-5", SONNET])
def test_attempts_model_matches_an_alias_as_its_own_help_example_gives_it(filled, name):
    # Issue 33, point 4: `--model claude-sonnet-4-5` (the --help example) found nothing, since
    # attempts record the dated id.
    table = list(csv.DictReader(io.StringIO(run("attempts", "--model", name, "--csv").output)))
    assert table and {row["requested_model"] for row in table} == {SONNET}


def test_a_postgresql_ledger_without_the_model_and_conversation_totals_gains_them_filled(ledger_location):
    if not isinstance(ledger_location, str):
        pytest.skip("the SQLite open is covered above")
    with Ledger(ledger_location) as ledger:
        history(ledger)
        ledger._conn.execute("DROP TABLE month_model")
        ledger._conn.execute("DROP TABLE month_conversation")
        ledger._conn.execute("COMMENT ON TABLE ledger_meta IS NULL")  # an older build stamps nothing
    with Ledger(ledger_location) as ledger:
        model = ledger.spend_by("model", "2026-12")
        conversation = ledger.spend_by("conversation", "2026-12")
    assert {row["key"]: row["settled_nusd"] for row in model} == {SONNET: 400_000_000, HAIKU: 20_000_000}
    assert [row["key"] for row in conversation] == ["c2", "c1", "c3"]
