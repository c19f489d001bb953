"""Edges of the ledger's rules: when time is read, which budget a key holds, what is policy and
what is credit, which success clears which failure, per-model cooldowns, the ladder's verdicts,
rebinding and the open-attempts listing.

Every instant comes from a controlled clock: ``now=`` is passed explicitly, or ``clock.now`` is
replaced for the code that reads it.
"""

import datetime as dt
import json
import sqlite3
import threading
import time

import pytest
from click.testing import CliRunner
from llm.cli import cli

from conftest import make_key
from llm_accounts import clock, health, schema
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete, Ledger, Refused, Scope
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote, quote as price
from llm_accounts.wire.payload import freeze

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
BEFORE_BOUNDARY = dt.datetime(2027, 1, 30, 23, 59, 59, 900_000, tzinfo=UTC)  # credit period 2027-01
AT_BOUNDARY = dt.datetime(2027, 1, 31, 0, 0, tzinfo=UTC)  # credit period 2027-02 starts
MODEL = "claude-sonnet-4-5-20250929"
OTHER_MODEL = "claude-haiku-4-5-20251001"
USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 0}
RATE_LIMITED = Refused("rate_limited", 429, "rate_limit_error", "other", "rate_limited")
OUT_OF_CREDIT = Refused("request_rejected", 400, "invalid_request_error", "credit_balance_too_low", "quota_exhausted")
MODEL_NOT_FOUND = Refused("request_rejected", 404, "not_found_error", "other", "model_unavailable")


def later(seconds, start=T0):
    return start + dt.timedelta(seconds=seconds)


def quote(ceiling=NANO // 100, model=MODEL):
    return Quote(model, ceiling, "2026-11-01", "ab" * 32)


def conv(name):
    return Scope("conversation", name)


def run(*args):
    return CliRunner().invoke(cli, ["accounts", *args], catch_exceptions=False)


@pytest.fixture
def ledger(tmp_path):
    with Ledger(tmp_path / "ledger.db") as ledger:
        yield ledger


@pytest.fixture
def frozen_clock(monkeypatch):
    """``clock.now()`` answers T0 for the commands under test."""
    monkeypatch.setattr(clock, "now", lambda: T0)
    return T0


def health_row(ledger, account="work"):
    return ledger._conn.execute("SELECT * FROM health WHERE account = ?", (account,)).fetchone()


def traced_clock(ledger, monkeypatch, at):
    """Record, in order, every statement the ledger's connection runs and every clock reading."""
    events = []
    ledger._conn.set_trace_callback(lambda sql: events.append(sql.strip().split()[0:2]))

    def now():
        events.append(["clock.now"])
        return at

    monkeypatch.setattr(clock, "now", now)
    return events


def first(events, wanted):
    return next(i for i, event in enumerate(events) if event == wanted)


# 1. Time: an admission reads the clock with its candidates, before its write; a settlement
# reads it inside its transaction, after the write lock is taken


def test_admission_reads_before_its_write_and_holds_the_write_lock_only_to_write(ledger, work, monkeypatch):
    events = traced_clock(ledger, monkeypatch, T0)
    ledger.reserve(conv("c1"), "a1", quote(), [work])
    begin = first(events, ["BEGIN", "IMMEDIATE"])
    assert first(events, ["clock.now"]) < begin
    held = [event for event in events[begin + 1 : begin + first(events[begin:], ["COMMIT"])] if event[0] != "--"]
    assert held and {event[0] for event in held} <= {"INSERT", "UPDATE", "DELETE"}


def test_settlement_reads_the_clock_after_begin_immediate(ledger, work, monkeypatch):
    ledger.reserve(conv("c1"), "a1", quote(), [work], now=T0)
    events = traced_clock(ledger, monkeypatch, later(1))
    ledger.settle("a1", Complete(5, USAGE, MODEL))
    assert first(events, ["BEGIN", "IMMEDIATE"]) < first(events, ["clock.now"])
    assert ledger.attempts(id="a1")[0]["settled_at"] == later(1).isoformat()


def test_an_admission_that_waited_for_the_lock_across_a_period_boundary_lands_in_the_new_period(tmp_path, work, monkeypatch):
    path = tmp_path / "ledger.db"
    reading = {"now": BEFORE_BOUNDARY}
    monkeypatch.setattr(clock, "now", lambda: reading["now"])
    outcome = {}
    with Ledger(path) as waiting:
        holder = sqlite3.connect(path, isolation_level=None, timeout=5)
        holder.execute("BEGIN IMMEDIATE")

        def admit():
            try:
                outcome["reservation"] = waiting.reserve(conv("late"), "late", quote(), [work])
            except AccountsError as error:
                outcome["error"] = error

        thread = threading.Thread(target=admit)
        thread.start()
        time.sleep(0.3)  # the admission is waiting for the lock, its clock reading (if any) taken
        # Another process admits the first attempt of credit period 2027-02 and commits.
        reading["now"] = AT_BOUNDARY
        stamp = AT_BOUNDARY.isoformat()
        holder.execute(
            "INSERT INTO account (provider, name, key_env, created_at) VALUES ('anthropic', 'early', 'EARLY_KEY', ?)", (stamp,)
        )
        holder.execute(
            """INSERT INTO month (provider, name, month_utc, budget_nusd, key_env, created_at, day_utc)
               VALUES ('anthropic', 'early', '2027-02', 1000, 'EARLY_KEY', ?, '2027-01-31')""",
            (stamp,),
        )
        holder.execute("COMMIT")
        thread.join(10)
        assert "error" not in outcome, outcome.get("error")
        assert outcome["reservation"].month_utc == "2027-02"
        assert waiting.attempts(id="late")[0]["created_at"] == stamp
        holder.close()


def test_explicit_instants_either_side_of_a_period_boundary_fall_in_their_own_periods(ledger, work):
    before = ledger.reserve(conv("c1"), "a1", quote(), [work], now=BEFORE_BOUNDARY)
    after = ledger.reserve(conv("c1"), "a2", quote(), [work], now=AT_BOUNDARY)
    assert (before.month_utc, after.month_utc) == ("2027-01", "2027-02")


# 2. One key, one budget


def test_a_pinned_admission_sees_another_name_holding_its_key_this_period(ledger):
    # A pinned (or bound) admission reads only its own account's facts, unless it is the
    # account's first attempt of the period: then every account's, for the key's other holder.
    old, new = Account("old", "SHARED_KEY", NANO), Account("new", "SHARED_KEY", NANO)
    ledger.reserve(conv("c1"), "a1", quote(), [old], now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c2"), "a2", quote(), [old, new], pinned="new", now=later(1))
    assert caught.value.code == "account_config_conflict" and "'old'" in caught.value.message


def test_a_key_env_holding_another_names_budget_this_period_refuses_a_fresh_budget(ledger):
    ledger.reserve(conv("c1"), "a1", quote(), [Account("old", "SHARED_KEY", NANO)], now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c2"), "a2", quote(), [Account("new", "SHARED_KEY", NANO)], now=later(1))
    error = caught.value
    assert error.code == "account_config_conflict"
    for part in ("SHARED_KEY", "'old'", "'new'", "2026-11", "2026-11-30 00:00 UTC"):
        assert part in error.message
    assert "\n" not in str(error)
    assert ledger.attempts(id="a2") == []


def test_a_new_conversation_skips_an_account_whose_key_holds_another_names_budget(ledger, home):
    ledger.reserve(conv("c1"), "a1", quote(), [Account("old", "SHARED_KEY", NANO)], now=T0)
    ledger.reserve(conv("busy"), "b1", quote(NANO // 2), [home], now=T0)  # home is further ahead of pace
    renamed = Account("new", "SHARED_KEY", NANO)
    assert ledger.reserve(conv("c2"), "a2", quote(), [renamed, home], now=later(1)).account == "home"


def test_the_key_may_start_a_budget_under_a_new_name_in_the_next_period(ledger):
    ledger.reserve(conv("c1"), "a1", quote(), [Account("old", "SHARED_KEY", NANO)], now=T0)
    december = dt.datetime(2026, 12, 5, tzinfo=UTC)
    assert ledger.reserve(conv("c2"), "a2", quote(), [Account("new", "SHARED_KEY", NANO)], now=december).account == "new"


# 3. The daily limit is policy; the monthly budget and key_env are credit


def test_a_raised_daily_budget_mid_period_takes_effect_for_new_admissions(ledger):
    ledger.reserve(conv("c1"), "a1", quote(NANO // 2), [Account("work", "WORK_KEY", 10 * NANO, daily_budget_nusd=NANO // 2)], now=T0)
    raised = Account("work", "WORK_KEY", 10 * NANO, daily_budget_nusd=NANO)
    assert ledger.reserve(conv("c1"), "a2", quote(NANO // 2), [raised], now=later(1)).account == "work"


def test_a_lowered_daily_budget_mid_period_refuses_what_it_no_longer_holds(ledger):
    ledger.reserve(conv("c1"), "a1", quote(NANO // 2), [Account("work", "WORK_KEY", 10 * NANO, daily_budget_nusd=NANO)], now=T0)
    lowered = Account("work", "WORK_KEY", 10 * NANO, daily_budget_nusd=NANO // 2)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a2", quote(1), [lowered], now=later(1))
    assert caught.value.code == "budget_exhausted"
    assert "daily budget" in caught.value.message


def test_removing_the_daily_budget_mid_period_lifts_the_daily_limit(ledger):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [Account("work", "WORK_KEY", 10 * NANO, daily_budget_nusd=NANO)], now=T0)
    assert ledger.reserve(conv("c1"), "a2", quote(NANO), [Account("work", "WORK_KEY", 10 * NANO)], now=later(1)).account == "work"


def test_status_shows_the_daily_budget_in_force_without_a_conflict(ledger):
    ledger.reserve(conv("c1"), "a1", quote(), [Account("work", "WORK_KEY", 10 * NANO, daily_budget_nusd=NANO)], now=T0)
    (line,) = ledger.status([Account("work", "WORK_KEY", 10 * NANO, daily_budget_nusd=2 * NANO)], now=later(1))
    assert (line.config_conflict, line.daily_budget_nusd) == (False, 2 * NANO)


def test_add_replace_with_another_monthly_budget_refuses_while_this_period_holds_a_budget(user_path, ledger_path, frozen_clock):
    assert run("add", "work", "--key-env", "WORK_KEY", "--budget", "12.50").exit_code == 0
    with Ledger() as ledger:
        ledger.reserve(conv("c1"), "a1", quote(), [Account("work", "WORK_KEY", 12_500_000_000)], now=T0)
    before = (user_path / "accounts.json").read_text()
    result = run("add", "work", "--key-env", "WORK_KEY", "--budget", "99", "--replace")
    assert result.exit_code == 1
    assert result.output.count("\n") == 1
    assert result.output.startswith("Error: account_config_conflict: ")
    for part in ("'work'", "2026-11", "2026-11-30 00:00 UTC"):
        assert part in result.output
    assert (user_path / "accounts.json").read_text() == before


def test_add_replace_with_the_same_monthly_budget_and_a_new_daily_budget_is_taken(user_path, ledger_path, frozen_clock):
    assert run("add", "work", "--key-env", "WORK_KEY", "--budget", "12.50").exit_code == 0
    with Ledger() as ledger:
        ledger.reserve(conv("c1"), "a1", quote(), [Account("work", "WORK_KEY", 12_500_000_000)], now=T0)
    result = run("add", "work", "--key-env", "WORK_KEY", "--budget", "12.50", "--daily-budget", "1.00", "--replace")
    assert result.exit_code == 0, result.output
    assert json.loads((user_path / "accounts.json").read_text())["accounts"][0]["daily_budget_usd"] == "1.00"


# 4. A success clears only a failure recorded before its attempt was admitted


def test_a_success_admitted_before_a_failure_leaves_the_failure_in_place(ledger, work, home):
    ledger.reserve(conv("slow"), "slow", quote(), [work], pinned="work", now=T0)
    ledger.reserve(conv("c2"), "broke", quote(), [work], pinned="work", now=later(1))
    ledger.settle("broke", OUT_OF_CREDIT, now=later(2))
    ledger.settle("slow", Complete(5, USAGE, MODEL), now=later(3))
    assert (health_row(ledger)["state"], health_row(ledger)["failure_class"]) == ("failing", "quota_exhausted")
    assert ledger.reserve(conv("c3"), "next", quote(), [work, home], now=later(4)).account == "home"


def test_a_success_admitted_after_a_failure_clears_it(ledger, work):
    ledger.reserve(conv("c1"), "broke", quote(), [work], now=T0)
    ledger.settle("broke", RATE_LIMITED, now=later(1))
    ledger.reserve(conv("c1"), "probe", quote(), [work], now=later(61))
    ledger.settle("probe", Complete(5, USAGE, MODEL), now=later(62))
    assert health_row(ledger)["state"] == "ok"


def test_the_rule_keeps_a_failure_recorded_after_the_successful_attempt_was_admitted():
    failing = health.record_failure(None, "quota_exhausted", 400, later(2), "broke")
    assert health.record_success(failing, later(3), admitted_at=later(1)) is None
    assert health.record_success(failing, later(3), admitted_at=later(2)).state == "ok"


# 5. A missing model cools that model on that account; unblock clears any health dwell


def test_model_unavailable_leaves_other_models_routable_on_the_account(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(), [work], now=T0)
    ledger.settle("a1", MODEL_NOT_FOUND, now=T0)
    assert ledger.reserve(conv("c2"), "a2", quote(model=OTHER_MODEL), [work], now=later(1)).account == "work"


def test_model_unavailable_refuses_that_model_on_that_account_until_its_cooldown_ends(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(), [work], now=T0)
    ledger.settle("a1", MODEL_NOT_FOUND, now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a2", quote(), [work], now=later(599))
    assert (caught.value.code, caught.value.account) == ("request_rejected", "work")
    assert MODEL in caught.value.message
    assert ledger.reserve(conv("c1"), "a3", quote(), [work], now=later(600)).account == "work"


def test_a_new_conversation_for_a_model_cooling_on_one_account_goes_to_another(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(), [work], now=T0)
    ledger.settle("a1", MODEL_NOT_FOUND, now=T0)
    ledger.reserve(conv("busy"), "b1", quote(NANO // 2), [home], now=T0)  # home is further ahead of pace
    assert ledger.reserve(conv("c2"), "a2", quote(), [work, home], now=later(1)).account == "home"


def test_a_models_success_clears_its_cooldown_on_that_account(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(), [work], now=T0)
    ledger.settle("a1", MODEL_NOT_FOUND, now=T0)
    ledger.reserve(conv("c1"), "a2", quote(), [work], now=later(600))
    ledger.settle("a2", Complete(5, USAGE, MODEL), now=later(601))
    assert ledger._conn.execute("SELECT COUNT(*) FROM model_health").fetchone()[0] == 0


def test_unblock_clears_a_quota_exhausted_dwell(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(), [work], now=T0)
    ledger.settle("a1", OUT_OF_CREDIT, now=T0)
    assert ledger.clear_block("u1", "work", "topped up the credit", now=later(5)) == "health_cleared"
    reservation = ledger.reserve(conv("c1"), "a2", quote(), [work], now=later(6))
    assert (reservation.account, reservation.probe) == ("work", False)


def test_unblock_clears_a_model_cooldown(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(), [work], now=T0)
    ledger.settle("a1", MODEL_NOT_FOUND, now=T0)
    assert ledger.clear_block("u1", "work", "the model is enabled now", now=later(5)) == "health_cleared"
    assert ledger.reserve(conv("c1"), "a2", quote(), [work], now=later(6)).account == "work"


def test_unblock_help_says_it_clears_cooldowns_with_an_example():
    result = run("unblock", "--help")
    assert "cooling" in result.output and "quota_exhausted" in result.output
    assert "Example:" in result.output


def test_a_version_1_ledger_gains_model_health_and_waiter_as_version_3_and_keeps_its_rows(tmp_path, work):
    path = tmp_path / "ledger.db"
    conn = sqlite3.connect(path)
    for statement in schema.statements():
        if "model_health" not in statement:
            conn.execute(statement)
    for table, column, declaration in schema.COLUMNS:
        if column not in {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")
    conn.execute("INSERT INTO account (provider, name, key_env, created_at) VALUES ('anthropic', 'work', 'WORK_KEY', ?)", (T0.isoformat(),))
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with Ledger(path) as ledger:
        assert ledger._conn.execute("PRAGMA user_version").fetchone()[0] == 3
        assert [tuple(r) for r in ledger._conn.execute("SELECT name FROM account")] == [("work",)]
        assert "model_health" in {r[0] for r in ledger._conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


# 6. The ladder answers with admission's verdict


def default_quote(model):
    """The quote of a prompt on ``model`` without -o max_tokens (claude-routed's default for it)."""
    from llm_accounts.capabilities import for_model, routed_max_tokens
    from llm_accounts.pricing.prices import current_revision

    max_tokens = routed_max_tokens(for_model(current_revision().model(model).id))
    body = {"model": model, "max_tokens": max_tokens, "messages": [{"role": "user", "content": "hi"}]}
    return price(freeze(body))


def test_the_ladders_verdict_per_account_is_what_admission_does_for_that_model(ledger_path, frozen_clock, user_path):
    ceiling = default_quote(MODEL).ceiling_nusd
    accounts = [
        Account("roomy", "ROOMY_KEY", 100 * ceiling),
        Account("tight", "TIGHT_KEY", ceiling + ceiling // 2),  # room left, not for this ceiling
        Account("spent", "SPENT_KEY", 10 * ceiling),
        Account("stopped", "STOPPED_KEY", 10 * ceiling),
        Account("cooling", "COOLING_KEY", 10 * ceiling),
        Account("haiku", "HAIKU_KEY", 10 * ceiling, models=(OTHER_MODEL,)),
    ]
    save_accounts_file(accounts, None)
    # Every key is stored: the ladder lists an account without one as unavailable (credential_missing).
    (user_path / "keys.json").write_text(json.dumps({account.key_env: make_key() for account in accounts}))
    month = clock.credit_month(T0)
    with Ledger() as ledger:
        ledger.adjust("j1", accounts[1], month, ceiling, "spend outside llm", now=T0)
        ledger.adjust("j2", accounts[2], month, 10 * ceiling, "spend outside llm", now=T0)
        ledger.block(accounts[3], now=T0)
        ledger.reserve(conv("rl"), "rl", default_quote(MODEL), accounts, pinned="cooling", now=T0)
        ledger.settle("rl", RATE_LIMITED, now=T0)
    result = run("ladder", "--model", MODEL, "--json")
    assert result.exit_code == 0, result.output
    shown = {rung["account"]: rung["code"] for rung in json.loads(result.output)}
    admitted = {}
    with Ledger() as ledger:
        for account in accounts:
            try:
                ledger.reserve(conv(f"try-{account.name}"), f"try-{account.name}", default_quote(MODEL), accounts,
                               pinned=account.name, now=T0)
                admitted[account.name] = None
            except AccountsError as error:
                admitted[account.name] = error.code
    assert shown == admitted
    assert admitted["roomy"] is None and admitted["tight"] == "budget_exhausted"


def test_the_ladder_says_when_a_budget_cannot_hold_the_models_ceiling(ledger_path, frozen_clock):
    ceiling = default_quote(MODEL).ceiling_nusd
    save_accounts_file([Account("tight", "TIGHT_KEY", ceiling - 1)], None)
    (rung,) = json.loads(run("ladder", "--model", MODEL, "--json").output)
    assert (rung["available"], rung["code"]) == (False, "budget_exhausted")
    assert "ceiling" in rung["reason"]


# 7. rebind moves only a conversation the ledger holds, to a declared, unblocked account


def test_rebind_refuses_a_conversation_the_ledger_never_saw_without_naming_it(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(), [work], now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.rebind(conv("never-seen-0042"), work, now=T0)
    assert caught.value.code == "not_found"
    assert "never-seen-0042" not in str(caught.value)
    assert ledger._conn.execute("SELECT COUNT(*) FROM binding WHERE scope_id = 'never-seen-0042'").fetchone()[0] == 0
    assert ledger._conn.execute("SELECT COUNT(*) FROM adjustment WHERE kind = 'rebind'").fetchone()[0] == 0


def test_rebind_refuses_a_blocked_target(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(), [work], now=T0)
    ledger.block(home, now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.rebind(conv("c1"), home, now=T0)
    assert (caught.value.code, caught.value.account) == ("account_blocked", "home")
    assert ledger._conn.execute("SELECT account FROM binding WHERE scope_id = 'c1'").fetchone()[0] == "work"


def test_rebind_refuses_a_target_that_is_only_a_name_in_the_ledger(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(), [work], now=T0)
    ledger.reserve(conv("c2"), "a2", quote(), [home], now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.rebind(conv("c1"), "home", now=T0)
    assert caught.value.code == "not_found"
    assert ledger._conn.execute("SELECT account FROM binding WHERE scope_id = 'c1'").fetchone()[0] == "work"


def test_the_rebind_command_refuses_an_undeclared_target(ledger_path, monkeypatch):
    with Ledger() as ledger:
        ledger.reserve(conv("c1"), "a1", quote(), [Account("work", "WORK_KEY", NANO)], now=T0)
        ledger.reserve(conv("c2"), "a2", quote(), [Account("home", "HOME_KEY", NANO)], now=T0)
    save_accounts_file([Account("work", "WORK_KEY", NANO)], None)
    result = run("rebind", "c1", "home")
    assert result.exit_code == 1
    assert result.output.startswith("Error: not_found: ")


# 8. attempts --open shows every open attempt, or says how many more there are


def open_attempts(count):
    with Ledger() as ledger:
        for n in range(count):
            ledger.reserve(conv(f"c{n}"), f"open-{n:02d}", quote(1), [Account("work", "WORK_KEY", NANO)], now=later(n))


def test_attempts_open_shows_every_open_attempt_by_default(ledger_path):
    open_attempts(25)
    output = run("attempts", "--open").output
    assert sum(line.startswith("open-") for line in output.splitlines()) == 25


def test_attempts_open_with_a_limit_says_how_many_more_there_are(ledger_path):
    open_attempts(25)
    lines = run("attempts", "--open", "--limit", "5").output.splitlines()
    assert sum(line.startswith("open-") for line in lines) == 5
    assert lines[-1] == "20 more open attempts; show them with --limit 25"
