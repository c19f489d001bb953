"""The ledger's ``llm accounts`` commands: status, attempts, block, unblock, reconcile, adjust, rebind."""

import datetime as dt
import json

import pytest
from click.testing import CliRunner

from llm_accounts import clock
from llm_accounts.cli import accounts
from llm_accounts.declarations import load_declaration
from llm_accounts.ledger import Complete, Ledger, Scope, Unknown
from llm_accounts.pricing.prices import Quote

MODEL = "claude-sonnet-4-5-20250929"
DECLARATION = json.dumps(
    [
        {"name": "work", "key_env": "WORK_KEY", "budget_usd": "10.00", "daily_budget_usd": "2.00"},
        {"name": "home", "key_env": "HOME_KEY", "budget_usd": "5.00"},
    ]
)
COMMANDS = ("status", "attempts", "block", "unblock", "reconcile", "adjust", "rebind")
NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)  # in credit period 2026-11


def run(*args):
    return CliRunner().invoke(accounts, list(args), catch_exceptions=False)


@pytest.fixture
def declared(monkeypatch, ledger_path):
    """The declaration above, with the ledger's clock fixed at ``NOW``: what a test reserves,
    settles and reads falls in one credit period and one UTC day, whatever the date."""
    monkeypatch.setenv("ANTHROPIC_ACCOUNTS", DECLARATION)
    monkeypatch.setattr(clock, "now", lambda: NOW)
    return load_declaration().accounts


def reserve(attempt_id, conversation="c1", ceiling=250_000_000, **kw):
    with Ledger() as ledger:
        return ledger.reserve(
            Scope("conversation", conversation), attempt_id, Quote(MODEL, ceiling, "2026-11-01", "ab" * 32),
            load_declaration().accounts, **kw
        )


def settle(attempt_id, evidence):
    with Ledger() as ledger:
        return ledger.settle(attempt_id, evidence)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_ledger_command_has_help_with_an_example(command):
    result = run(command, "--help")
    assert result.exit_code == 0
    assert "Example:" in result.output


def test_status_without_a_declaration_says_unrouted_and_creates_no_ledger(ledger_path):
    result = run("status")
    assert result.exit_code == 0
    assert "No accounts declared" in result.output
    assert not ledger_path.exists()


def test_status_shows_each_accounts_budget_spend_and_health(declared):
    reserve("a1", pinned="work")
    settle("a1", Complete(1_250_000_000, {"input_tokens": 1}, MODEL))
    result = run("status")
    assert result.exit_code == 0
    work_line = next(line for line in result.output.splitlines() if line.startswith("work"))
    for cell in ("$10.00", "$1.25", "$8.75", "$1.25 of $2.00", "ok"):
        assert cell in work_line
    assert "resets" in result.output


def test_status_json_carries_integer_nanodollars(declared):
    reserve("a1", pinned="home")
    data = json.loads(run("status", "--json").output)
    home = next(a for a in data["accounts"] if a["name"] == "home")
    assert (data["routed"], home["budget_nusd"], home["open_ceiling_nusd"], home["remaining_nusd"]) == (
        True, 5_000_000_000, 250_000_000, 4_750_000_000
    )


def test_attempts_open_lists_attempts_holding_a_ceiling(declared):
    reserve("a1")
    reserve("a2")
    settle("a1", Complete(5, {"input_tokens": 1}, MODEL))
    result = run("attempts", "--open")
    assert "a2" in result.output and "a1" not in result.output
    data = json.loads(run("attempts", "--json").output)
    assert [(a["id"], a["state"]) for a in data] == [("a2", "open"), ("a1", "settled")]
    assert data[1]["usage"] == {"input_tokens": 1}


def test_block_and_unblock(declared):
    assert "blocked" in run("block", "work").output
    with Ledger() as ledger:
        assert ledger.status(declared)[0].blocked_reason == "manual"
    result = run("unblock", "work", "--source", "checked the console")
    assert "unblocked" in result.output
    with Ledger() as ledger:
        assert ledger.status(declared)[0].blocked_reason is None


def test_reconcile_settles_an_open_attempt_at_zero_or_more(declared):
    reserve("a1")
    settle("a1", Unknown("provider_error", "provider_outage", 500))
    result = run("reconcile", "a1", "--cost", "0", "--source", "console shows no charge")
    assert result.exit_code == 0, result.output
    with Ledger() as ledger:
        (attempt,) = ledger.attempts(id="a1")
    assert (attempt["state"], attempt["cost_nusd"]) == ("settled", 0)


def test_a_malformed_cost_is_one_line_naming_the_option(declared):
    reserve("a1")
    result = run("reconcile", "a1", "--cost", "1,50", "--source", "console")
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "--cost" in result.output


def test_adjust_takes_a_signed_amount(declared):
    reserve("a1", pinned="work")
    settle("a1", Complete(2_000_000_000, {"input_tokens": 1}, MODEL))
    assert run("adjust", "work", "--month", "2026-11", "--delta", "-0.50", "--source", "invoice credit").exit_code == 0
    with Ledger() as ledger:
        work = ledger.status(declared)[0]
    assert work.spent_nusd == 1_500_000_000


def test_adjust_refuses_a_month_that_is_not_a_credit_period_key(declared):
    result = run("adjust", "work", "--month", "November", "--delta", "1", "--source", "x")
    assert result.exit_code == 1 and "YYYY-MM" in result.output


def test_rebind_moves_a_conversation(declared):
    first = reserve("a1", conversation="01jd7k2m4q")
    other = "home" if first.account == "work" else "work"
    result = run("rebind", "01jd7k2m4q", other)
    assert f"now uses account {other} (was {first.account})" in result.output
    assert reserve("a2", conversation="01jd7k2m4q").account == other


# Attempt ids: a unique prefix is enough; something that does not exist says so


def test_reconcile_takes_a_unique_prefix_of_the_attempt_id(declared):
    reserve("0f6c3a52-7d1e-4c55-9a0b-5b2f1e8d9c01")
    settle("0f6c3a52-7d1e-4c55-9a0b-5b2f1e8d9c01", Unknown("provider_error", "provider_outage", 500))
    result = run("reconcile", "0f6c3a", "--cost", "0.01", "--source", "console")
    assert result.exit_code == 0, result.output
    assert result.output == "Attempt 0f6c3a52-7d1e-4c55-9a0b-5b2f1e8d9c01 settled at $0.0100\n"


def test_attempts_shows_the_one_attempt_a_prefix_names(declared):
    reserve("0f6c3a52-7d1e-4c55-9a0b-5b2f1e8d9c01")
    reserve("9b1d2e3f-0000-4c55-9a0b-5b2f1e8d9c02", conversation="c2")
    [row] = json.loads(run("attempts", "9b1d", "--json").output)
    assert row["id"] == "9b1d2e3f-0000-4c55-9a0b-5b2f1e8d9c02"


def test_a_prefix_matching_several_attempts_asks_for_more_of_the_id(declared):
    reserve("0f6c3a52-aaaa-4c55-9a0b-5b2f1e8d9c01")
    reserve("0f6c3a52-bbbb-4c55-9a0b-5b2f1e8d9c02", conversation="c2")
    result = run("reconcile", "0f6c", "--cost", "0", "--source", "console")
    assert result.exit_code == 1
    assert result.output == (
        "Error: declaration_invalid: ATTEMPT_ID: more than one attempt starts with this prefix; give more of the id\n"
    )


def test_an_attempt_id_the_ledger_does_not_hold_is_not_found_and_not_repeated(declared):
    reserve("0f6c3a52-7d1e-4c55-9a0b-5b2f1e8d9c01")
    result = run("reconcile", "deadbeef", "--cost", "0", "--source", "console")
    assert result.exit_code == 1
    assert result.output.startswith("Error: not_found: ATTEMPT_ID: no attempt in the ledger has this id")
    assert "deadbeef" not in result.output


def test_an_account_that_does_not_exist_is_not_found(declared):
    result = run("block", "nobody")
    assert result.exit_code == 1
    assert result.output.startswith("Error: not_found: NAME: no declared account")


# reconcile --open --account NAME: several attempts at once, each its own sourced reconciliation.


def open_three():
    for n, conversation in enumerate(("c1", "c2", "c3"), start=1):
        reserve(f"a{n}", conversation, pinned="work")
        settle(f"a{n}", Unknown("stream_closed"))
    reserve("h1", "c4", pinned="home")
    settle("h1", Unknown("stream_closed"))


def reconciliations():
    with Ledger() as ledger:
        return sorted(
            (row["attempt_id"], row["detail"], row["source_ref"])
            for row in ledger.db.query("SELECT * FROM adjustment WHERE kind = 'reconciliation'")
        )


def test_reconcile_open_settles_every_open_attempt_of_the_account_oldest_first_each_sourced(declared):
    open_three()
    result = run("reconcile", "--open", "--account", "work", "0.01", "0", "0.25", "--source", "console usage 2026-11-10")
    assert result.exit_code == 0, result.output
    assert reconciliations() == [
        ("a1", "10000000", "console usage 2026-11-10"),
        ("a2", "0", "console usage 2026-11-10"),
        ("a3", "250000000", "console usage 2026-11-10"),
    ]
    with Ledger() as ledger:
        assert [row["id"] for row in ledger.open_attempts()] == ["h1"]


def test_reconcile_open_with_cost_settles_them_all_at_that_cost(declared):
    open_three()
    assert run("reconcile", "--open", "--account", "work", "--cost", "0", "--source", "console: nothing billed").exit_code == 0
    assert [detail for _, detail, _ in reconciliations()] == ["0", "0", "0"]


def test_reconcile_open_with_the_wrong_number_of_amounts_writes_nothing_and_lists_the_attempts(declared):
    open_three()
    result = run("reconcile", "--open", "--account", "work", "0.01", "0", "--source", "console")
    assert result.exit_code == 1
    assert result.output.count("\n") == 1
    assert "account work has 3 open attempts (a1, a2, a3, oldest first) and 2 amounts were given" in result.output
    assert reconciliations() == []


def test_reconcile_open_checks_every_amount_before_writing_any(declared):
    open_three()
    result = run("reconcile", "--open", "--account", "work", "0.01", "1,50", "0", "--source", "console")
    assert result.exit_code == 1 and "USD <entry 2>" in result.output
    assert reconciliations() == []


def test_reconcile_open_needs_an_account_and_a_source(declared):
    assert "--open: needs --account NAME" in run("reconcile", "--open", "--cost", "0", "--source", "x").output
    assert "--source: is required" in run("reconcile", "--open", "--account", "work", "--cost", "0").output


def test_reconcile_open_leaves_an_attempt_still_running_alone(declared):
    # Before: it settled a prompt still streaming in another process; the real answer then
    # conflicted and blocked the account for everyone.
    open_three()
    reserve("r1", "c5", pinned="work")  # in flight: no outcome recorded, its process (this one) runs
    result = run("reconcile", "--open", "--account", "work", "--cost", "0", "--source", "console")
    assert result.exit_code == 0, result.output
    assert "1 open attempt of work with no outcome recorded (still running, here or on another machine) left alone" in result.output
    assert [attempt for attempt, _, _ in reconciliations()] == ["a1", "a2", "a3"]
    with Ledger() as ledger:
        assert sorted(row["id"] for row in ledger.open_attempts()) == ["h1", "r1"]


def test_reconcile_open_settles_only_the_model_named(declared):
    reserve("s1", "c1", pinned="work")
    settle("s1", Unknown("stream_closed"))
    with Ledger() as ledger:
        ledger.reserve(Scope("conversation", "c2"), "h1", Quote("claude-haiku-4-5", 1_000_000, "2026-11-01", "ab" * 32),
                       load_declaration().accounts, pinned="work")
        ledger.settle("h1", Unknown("stream_closed"))
    result = run("reconcile", "--open", "--account", "work", "--model", "claude-haiku-4-5", "--cost", "0", "--source", "console")
    assert result.exit_code == 0, result.output
    assert [attempt for attempt, _, _ in reconciliations()] == ["h1"]


def test_reconcile_open_settles_only_attempts_between_since_and_until(declared, monkeypatch):
    for day, attempt in ((9, "d9"), (10, "d10"), (11, "d11")):
        monkeypatch.setattr(clock, "now", lambda day=day: NOW.replace(day=day))
        reserve(attempt, f"c{day}", pinned="home")
        settle(attempt, Unknown("stream_closed"))
    monkeypatch.setattr(clock, "now", lambda: NOW.replace(day=12))
    result = run("reconcile", "--open", "--account", "home", "--since", "2026-11-10", "--until", "2026-11-10",
                 "--cost", "0", "--source", "console")
    assert result.exit_code == 0, result.output
    assert [attempt for attempt, _, _ in reconciliations()] == ["d10"]


@pytest.mark.parametrize("option", ["--since", "--until"])
def test_reconcile_open_refuses_a_time_that_is_not_iso_in_one_line_without_repeating_it(declared, option):
    result = run("reconcile", "--open", "--account", "work", option, "last-tuesday", "--cost", "0", "--source", "x")
    assert result.exit_code == 1
    assert result.output == (
        f"Error: declaration_invalid: {option}: must be an ISO date (2026-12-01) or instant (2026-12-01T09:30:00Z)\n"
    )


def test_reconcile_options_that_narrow_open_attempts_go_with_open(declared):
    result = run("reconcile", "a1", "--dry-run", "--cost", "0", "--source", "x")
    assert result.output == "Error: declaration_invalid: --model, --since, --until and --dry-run: go with --open\n"


def test_reconcile_open_dry_run_lists_what_it_would_settle_and_the_total_and_writes_nothing(declared):
    open_three()
    reserve("r1", "c5", pinned="work")  # in flight: left alone, dry run or not
    result = run("reconcile", "--open", "--account", "work", "--cost", "0.01", "--dry-run")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert [line.split()[3] for line in lines if line.startswith("Would settle attempt")] == ["a1", "a2", "a3"]
    assert lines[-1] == "3 open attempts of work holding $0.75 would be settled at $0.03 in all; nothing was written"
    assert reconciliations() == []
    with Ledger() as ledger:
        assert len(ledger.open_attempts()) == 5
