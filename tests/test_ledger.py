"""The ledger's admission and settlement rules, in one process (ADR-0126 D3-D5, design.md "Ledger").

Multi-process behaviour is in test_ledger_processes.py, the file itself in test_ledger_file.py,
health and warm prefixes in test_ledger_health.py.
"""

import datetime as dt
import json
import sqlite3

import pytest

from llm_accounts import clock
from llm_accounts.declarations import Account
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete, Ledger, NotSent, Refused, Scope, Unknown
from llm_accounts.money import INT64_MAX, NANO
from llm_accounts.pricing.prices import Quote

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
MODEL = "claude-sonnet-4-5-20250929"
USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 0}


def quote(ceiling, model=MODEL, cert=None):
    return Quote(model, ceiling, "2026-11-01", "ab" * 32, cert=cert)


def conv(name):
    return Scope("conversation", name)


@pytest.fixture
def ledger(ledger_location):
    """The same rules on both backends (docs/architecture.md "Ledger on PostgreSQL")."""
    with Ledger(ledger_location) as ledger:
        yield ledger


@pytest.fixture
def work():
    return Account("work", "WORK_KEY", NANO)


@pytest.fixture
def home():
    return Account("home", "HOME_KEY", 2 * NANO)


def row(ledger, sql, *params):
    return ledger._conn.execute(sql, params).fetchone()


def sqlite_file(ledger, tmp_path):
    """The ledger's SQLite file: itself, or a PostgreSQL ledger's export."""
    if ledger.path is not None:
        return ledger.path
    (tmp_path / "export").mkdir()
    return ledger.export(tmp_path / "export" / "ledger.db")


def committed(ledger, account, month=None):
    """Settled costs + adjustments + open ceilings, summed from the rows (not the running totals);
    by default in T0's credit period, the instant these tests admit at."""
    (spend,) = [s for s in ledger.spend(account, month or clock.credit_month(T0))]
    return spend["spent_nusd"] + spend["open_ceiling_nusd"]


# Binding and selection


def test_a_new_conversation_is_bound_in_the_same_transaction_as_its_first_attempt(ledger, work):
    reservation = ledger.reserve(conv("c1"), "a1", quote(100), [work], now=T0)
    assert (reservation.account, reservation.new_binding, reservation.month_utc, reservation.day_utc) == (
        "work", True, "2026-11", "2026-11-10"
    )
    assert row(ledger, "SELECT account FROM binding WHERE scope_id = 'c1'")[0] == "work"
    assert row(ledger, "SELECT state, ceiling_nusd FROM attempt WHERE id = 'a1'")[:] == ("open", 100)


def test_a_new_conversation_goes_to_the_account_furthest_behind_its_budget(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(NANO // 2), [work], now=T0)  # work: 50% committed
    ledger.reserve(conv("c2"), "a2", quote(NANO // 2), [home], now=T0)  # home: 25% committed
    assert ledger.reserve(conv("c3"), "a3", quote(1), [work, home], now=T0).account == "home"


def test_equally_used_accounts_go_to_the_one_with_fewer_conversations_in_flight(ledger):
    alpha, beta = Account("alpha", "ALPHA_KEY", NANO), Account("beta", "BETA_KEY", NANO)
    ledger.reserve(conv("c1"), "a1", quote(100), [alpha], now=T0)
    ledger.reserve(conv("c2"), "a2", quote(100), [alpha], now=T0)
    ledger.reserve(conv("c3"), "a3", quote(200), [beta], now=T0)
    assert ledger.reserve(conv("c4"), "a4", quote(1), [alpha, beta], now=T0).account == "beta"


def test_a_bound_conversation_keeps_its_account_when_another_is_less_used(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(NANO // 2), [work], now=T0)
    second = ledger.reserve(conv("c1"), "a2", quote(1), [work, home], now=T0)
    assert (second.account, second.new_binding) == ("work", False)


def test_pinning_restricts_a_new_conversation_to_one_account(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(NANO // 2), [work], now=T0)
    assert ledger.reserve(conv("c2"), "a2", quote(1), [work, home], pinned="work", now=T0).account == "work"


def test_pinning_another_account_than_the_bound_one_refuses(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a2", quote(1), [work, home], pinned="home", now=T0)
    assert caught.value.code == "no_account_available"
    assert "llm accounts rebind" in caught.value.message


def test_an_account_that_does_not_serve_the_model_is_not_a_candidate(ledger, work, home):
    haiku_only = Account("home", "HOME_KEY", 2 * NANO, models=("claude-haiku-4-5",))
    assert ledger.reserve(conv("c1"), "a1", quote(1), [haiku_only, work], now=T0).account == "work"
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c2"), "a2", quote(1), [haiku_only], now=T0)
    assert caught.value.code == "no_account_available"


def test_a_bound_account_that_is_no_longer_declared_refuses(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a2", quote(1), [home], now=T0)
    assert (caught.value.code, caught.value.account) == ("account_blocked", "work")


def test_rebind_moves_a_conversation_and_records_the_move(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
    assert ledger.rebind(conv("c1"), home, "user asked", now=T0) == "work"
    assert ledger.reserve(conv("c1"), "a2", quote(1), [work, home], now=T0).account == "home"
    assert row(ledger, "SELECT kind, detail, source_ref FROM adjustment WHERE kind = 'rebind'")[:] == (
        "rebind", "conversation:c1", "user asked"
    )


def test_rebind_names_a_conversation_by_the_llm_response_id_of_one_of_its_prompts(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(1), [work], llm_response_id="r1", now=T0)
    assert ledger.rebind(conv("r1"), home, "user asked", now=T0) == "work"
    assert ledger.reserve(conv("c1"), "a2", quote(1), [work, home], now=T0).account == "home"
    assert row(ledger, "SELECT detail FROM adjustment WHERE kind = 'rebind'")[0] == "conversation:c1"


def test_rebind_names_a_prompt_without_a_conversation_by_its_response_id(ledger, work, home):
    ledger.reserve(Scope("prompt", "r1"), "a1", quote(1), [work], llm_response_id="r1", now=T0)
    assert ledger.rebind(conv("r1"), home, "user asked", now=T0) == "work"
    assert row(ledger, "SELECT account FROM binding WHERE scope_kind = 'prompt' AND scope_id = 'r1'")[0] == "home"


def test_a_new_conversation_refused_unbilled_moves_to_the_next_account(ledger, work, home):
    first = ledger.reserve(conv("c1"), "a1", quote(1), [work, home], now=T0)
    ledger.settle("a1", Refused("rate_limited", 429, "rate_limit_error", "other", "rate_limited"), now=T0)
    second = ledger.reserve(conv("c1"), "a2", quote(1), [work, home], exclude=[first.account], now=T0)
    assert second.account != first.account
    assert row(ledger, "SELECT account FROM binding WHERE scope_id = 'c1'")[0] == second.account


def test_a_conversation_that_was_served_never_moves_on(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
    ledger.settle("a1", Complete(1, USAGE, MODEL), now=T0)
    ledger.reserve(conv("c1"), "a2", quote(1), [work, home], now=T0)
    ledger.settle("a2", Refused("rate_limited", 429, "rate_limit_error", "other", "rate_limited"), now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a3", quote(1), [work, home], exclude=["work"], now=T0)
    assert (caught.value.code, caught.value.account) == ("rate_limited", "work")


# Admission: S + R + C <= B


def test_an_attempt_that_exactly_fills_the_budget_is_admitted(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO - 10), [work], now=T0)
    ledger.reserve(conv("c1"), "a2", quote(10), [work], now=T0)
    assert committed(ledger, "work") == NANO


def test_one_nanodollar_over_the_budget_is_refused_without_binding(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO - 10), [work], now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c2"), "a2", quote(11), [work], now=T0)
    assert caught.value.code == "budget_exhausted"
    assert row(ledger, "SELECT COUNT(*) FROM binding WHERE scope_id = 'c2'")[0] == 0
    assert row(ledger, "SELECT COUNT(*) FROM attempt WHERE id = 'a2'")[0] == 0


def test_budget_exhausted_names_the_account_spend_budget_and_what_holds_it(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO // 2), [work], now=T0)
    ledger.settle("a1", Complete(NANO // 4, USAGE, MODEL), now=T0)
    ledger.reserve(conv("c1"), "a2", quote(NANO // 2), [work], now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a3", quote(NANO // 2), [work], now=T0)
    message = caught.value.message
    assert caught.value.code == "budget_exhausted"
    for part in ("'work'", "in flight ($0.25 spent)", "$0.50 of its $1.00 budget is held by 1 attempt in flight"):
        assert part in message


def test_settled_cost_replaces_the_ceiling_and_frees_the_difference(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    ledger.settle("a1", Complete(NANO // 10, USAGE, MODEL), now=T0)
    ledger.reserve(conv("c1"), "a2", quote(NANO - NANO // 10), [work], now=T0)
    assert committed(ledger, "work") == NANO


def test_adjustments_count_as_spend(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
    ledger.adjust("adj1", "work", "2026-11", NANO - 1, "console: spend outside llm", now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a2", quote(1), [work], now=T0)
    assert caught.value.code == "budget_exhausted"


def test_no_account_with_room_refuses_a_new_conversation(ledger, work, home):
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a1", quote(3 * NANO), [work, home], now=T0)
    assert caught.value.code == "budget_exhausted"
    assert "work: ceiling over its budget; home: ceiling over its budget" in caught.value.message


def test_a_quote_without_an_integer_ceiling_is_refused_before_anything_is_written(ledger, work):
    for ceiling in (None, 1.5, -1, True, INT64_MAX + 1):
        with pytest.raises(AccountsError) as caught:
            ledger.reserve(conv("c1"), "a1", quote(ceiling), [work], now=T0)
        assert caught.value.code == "unsupported_pricing"
    assert row(ledger, "SELECT COUNT(*) FROM attempt")[0] == 0


def test_sums_past_signed_64_bits_are_refused_not_wrapped(ledger):
    huge = Account("huge", "HUGE_KEY", INT64_MAX)
    ledger.reserve(conv("c1"), "a1", quote(INT64_MAX), [huge], now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a2", quote(1), [huge], now=T0)
    assert caught.value.code == "budget_exhausted"
    with pytest.raises(AccountsError) as caught:
        ledger.adjust("adj1", "huge", "2026-11", 1, "invoice", now=T0)
    assert caught.value.code == "declaration_invalid"
    assert committed(ledger, "huge") == INT64_MAX


# Daily budgets


@pytest.fixture
def capped():
    return Account("capped", "CAPPED_KEY", 10 * NANO, daily_budget_nusd=NANO)


def test_a_daily_budget_admits_up_to_equality_and_refuses_past_it(ledger, capped):
    ledger.reserve(conv("c1"), "a1", quote(NANO // 2), [capped], now=T0)
    ledger.settle("a1", Complete(NANO // 2, USAGE, MODEL), now=T0)
    ledger.reserve(conv("c1"), "a2", quote(NANO // 2), [capped], now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a3", quote(1), [capped], now=T0)
    assert caught.value.code == "budget_exhausted"
    assert "$0.50 of its $1.00 daily budget is held by 1 attempt in flight ($0.50 spent)" in caught.value.message


def test_a_daily_budget_resets_at_the_next_utc_day(ledger, capped):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [capped], now=T0)
    tomorrow = dt.datetime(2026, 11, 11, 0, 0, tzinfo=UTC)
    assert ledger.reserve(conv("c1"), "a2", quote(NANO), [capped], now=tomorrow).day_utc == "2026-11-11"


def test_yesterdays_open_ceiling_still_counts_against_the_month(ledger):
    account = Account("capped", "CAPPED_KEY", NANO, daily_budget_nusd=NANO)
    ledger.reserve(conv("c1"), "a1", quote(NANO), [account], now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a2", quote(1), [account], now=T0 + dt.timedelta(days=1))
    assert "$1.00 of its $1.00 budget is held" in caught.value.message


# Credit months


def test_the_last_minute_of_october_30_is_in_credit_period_2026_10(ledger, work):
    before = dt.datetime(2026, 10, 30, 23, 59, tzinfo=UTC)
    assert ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=before).month_utc == "2026-10"


def test_october_31_starts_credit_period_2026_11_with_a_fresh_budget(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=dt.datetime(2026, 10, 30, 23, 59, tzinfo=UTC))
    with pytest.raises(AccountsError):
        ledger.reserve(conv("c1"), "a2", quote(1), [work], now=dt.datetime(2026, 10, 30, 23, 59, 59, tzinfo=UTC))
    after = ledger.reserve(conv("c1"), "a3", quote(NANO), [work], now=dt.datetime(2026, 10, 31, 0, 0, tzinfo=UTC))
    assert (after.month_utc, after.day_utc) == ("2026-11", "2026-10-31")


def test_a_settlement_after_the_rollover_stays_in_its_attempts_month(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=dt.datetime(2026, 10, 30, 23, 59, tzinfo=UTC))
    ledger.settle("a1", Complete(NANO // 2, USAGE, MODEL), now=dt.datetime(2026, 10, 31, 0, 1, tzinfo=UTC))
    assert [(s["month_utc"], s["spent_nusd"]) for s in ledger.spend("work")] == [("2026-10", NANO // 2)]


def test_the_first_attempt_of_a_month_fixes_its_budget(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
    raised = Account("work", "WORK_KEY", 5 * NANO)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a2", quote(1), [raised], now=T0)
    assert caught.value.code == "account_config_conflict"
    # The fixed figure, and the command that declares it again.
    assert caught.value.message.endswith("budget is fixed at $1.00 until 2026-11-30 00:00 UTC: llm accounts set work --budget 1.00")


def test_a_changed_key_env_in_the_same_month_is_a_config_conflict(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c2"), "a2", quote(1), [Account("work", "OTHER_KEY", NANO)], now=T0)
    assert caught.value.code == "account_config_conflict"


def test_a_new_month_may_have_a_new_budget(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    raised = Account("work", "WORK_KEY", 5 * NANO)
    december = dt.datetime(2026, 12, 5, tzinfo=UTC)
    ledger.reserve(conv("c1"), "a2", quote(5 * NANO), [raised], now=december)
    budgets = {s["month_utc"]: s["budget_nusd"] for s in ledger.spend("work")}
    assert budgets == {"2026-11": NANO, "2026-12": 5 * NANO}


def test_a_clock_that_went_back_across_a_recorded_month_refuses(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a2", quote(1), [work], now=dt.datetime(2026, 10, 20, tzinfo=UTC))
    assert caught.value.code == "ledger_unavailable"
    assert "clock" in caught.value.message
    assert row(ledger, "SELECT COUNT(*) FROM attempt")[0] == 1


# Attempt ids and settlement


def test_a_duplicate_attempt_id_is_refused(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c2"), "a1", quote(1), [work], now=T0)
    assert caught.value.code == "duplicate_attempt"
    assert row(ledger, "SELECT COUNT(*) FROM binding WHERE scope_id = 'c2'")[0] == 0


def test_repeating_identical_settlement_is_a_no_op(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    evidence = Complete(12345, USAGE, MODEL, "req_011CS")
    assert ledger.settle("a1", evidence, now=T0) == "settled"
    assert ledger.settle("a1", evidence, now=T0 + dt.timedelta(minutes=1)) == "already_settled"
    assert committed(ledger, "work") == 12345
    assert row(ledger, "SELECT settled_at FROM attempt WHERE id = 'a1'")[0] == T0.isoformat()


def test_differing_evidence_is_a_settlement_conflict_that_blocks_and_keeps_the_original(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    ledger.settle("a1", Complete(12345, USAGE, MODEL), now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.settle("a1", Complete(99999, USAGE, MODEL), now=T0)
    assert caught.value.code == "settlement_conflict"
    assert row(ledger, "SELECT cost_nusd FROM attempt WHERE id = 'a1'")[0] == 12345
    assert row(ledger, "SELECT block_reason FROM account WHERE name = 'work'")[0] == "settlement_conflict"
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a2", quote(1), [work], now=T0)
    assert caught.value.code == "account_blocked"


def test_a_cost_above_the_ceiling_is_recorded_and_blocks_the_account(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(100), [work], now=T0)
    assert ledger.settle("a1", Complete(150, USAGE, MODEL), now=T0) == "settled"
    assert row(ledger, "SELECT cost_nusd FROM attempt WHERE id = 'a1'")[0] == 150
    assert row(ledger, "SELECT block_reason FROM account WHERE name = 'work'")[0] == "ceiling_exceeded"


def test_not_sent_settles_at_zero(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    assert ledger.settle("a1", NotSent(), now=T0) == "settled"
    assert row(ledger, "SELECT state, outcome, cost_nusd FROM attempt WHERE id = 'a1'")[:] == ("settled", "not_sent", 0)
    assert ledger.settle("a1", NotSent(caller_cancelled=True), now=T0) == "already_settled"


def test_a_documented_refusal_settles_at_zero_with_its_classes(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    refusal = Refused("request_rejected", 400, "invalid_request_error", "prompt_too_long", "semantic")
    ledger.settle("a1", refusal, now=T0)
    stored = row(
        ledger,
        "SELECT outcome, cost_nusd, http_status, provider_error_type, rejection_class, failure_class FROM attempt",
    )
    assert stored[:] == ("request_rejected", 0, 400, "invalid_request_error", "prompt_too_long", "semantic")
    assert committed(ledger, "work") == 0


def test_an_unknown_outcome_keeps_the_attempt_open_with_its_ceiling(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    assert ledger.settle("a1", Unknown("usage_incomplete"), now=T0) == "still_open"
    assert row(ledger, "SELECT state, outcome, cost_nusd FROM attempt")[:] == ("open", "usage_incomplete", None)
    assert committed(ledger, "work") == NANO
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a2", quote(1), [work], now=T0)
    assert caught.value.code == "budget_exhausted"


def test_the_first_unknown_reason_on_an_open_attempt_stands(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
    ledger.settle("a1", Unknown("stream_truncated"), now=T0)
    ledger.settle("a1", Unknown("cancelled"), now=T0)
    assert row(ledger, "SELECT outcome FROM attempt")[0] == "stream_truncated"


def test_complete_usage_after_an_unknown_reason_settles_the_attempt(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    ledger.settle("a1", Unknown("cancelled"), now=T0)
    assert ledger.settle("a1", Complete(7, USAGE, MODEL), now=T0) == "settled"
    assert row(ledger, "SELECT state, outcome, cost_nusd FROM attempt")[:] == ("settled", "complete", 7)


def test_an_unknown_outcome_on_a_settled_attempt_changes_nothing(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    ledger.settle("a1", Complete(7, USAGE, MODEL), now=T0)
    assert ledger.settle("a1", Unknown("transport_error", "transport"), now=T0) == "already_settled"
    assert row(ledger, "SELECT outcome FROM attempt")[0] == "complete"


def test_only_numeric_usage_is_stored(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    usage = {
        "input_tokens": 10,
        "output_tokens": 2,
        "service_tier": "standard",
        "cache_creation": {"ephemeral_5m_input_tokens": 3, "note": "text"},
        "flag": True,
    }
    ledger.settle("a1", Complete(7, usage, MODEL, "req 1 with spaces"), now=T0)
    stored = row(ledger, "SELECT usage_json, request_id FROM attempt")
    assert json.loads(stored[0]) == {"input_tokens": 10, "output_tokens": 2, "cache_creation": {"ephemeral_5m_input_tokens": 3}}
    assert stored[1] is None


def test_settling_an_attempt_the_ledger_does_not_hold_is_refused(ledger):
    with pytest.raises(AccountsError) as caught:
        ledger.settle("nope", Complete(1, USAGE, MODEL), now=T0)
    assert caught.value.code == "ledger_unavailable"


# Reconciliation, corrections, blocks


def test_reconcile_closes_an_open_attempt_at_a_sourced_cost(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    ledger.settle("a1", Unknown("provider_error", "provider_outage", 500), now=T0)
    assert ledger.reconcile("r1", "a1", 4242, "console usage 2026-11-10", now=T0) == "reconciled"
    assert row(ledger, "SELECT state, cost_nusd, outcome FROM attempt")[:] == ("settled", 4242, "provider_error")
    assert row(ledger, "SELECT kind, delta_nusd, attempt_id, month_utc FROM adjustment WHERE id = 'r1'")[:] == (
        "reconciliation", 0, "a1", "2026-11"
    )
    assert committed(ledger, "work") == 4242


def test_repeating_a_reconciliation_with_the_same_id_and_inputs_is_a_no_op(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    ledger.reconcile("r1", "a1", 4242, "console", now=T0)
    assert ledger.reconcile("r1", "a1", 4242, "console", now=T0) == "already_recorded"
    with pytest.raises(AccountsError) as caught:
        ledger.reconcile("r1", "a1", 1, "console", now=T0)
    assert caught.value.code == "declaration_invalid"


def test_reconciliation_never_rewrites_a_settled_cost(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    ledger.settle("a1", Complete(7, USAGE, MODEL), now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reconcile("r1", "a1", 9, "console", now=T0)
    assert caught.value.code == "settlement_conflict"
    assert row(ledger, "SELECT cost_nusd FROM attempt")[0] == 7


def test_an_adjustment_may_not_make_spend_negative(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)
    ledger.settle("a1", Complete(100, USAGE, MODEL), now=T0)
    assert ledger.adjust("j1", "work", "2026-11", -100, "invoice credit", now=T0) == "adjusted"
    with pytest.raises(AccountsError) as caught:
        ledger.adjust("j2", "work", "2026-11", -1, "invoice credit", now=T0)
    assert caught.value.code == "declaration_invalid"


def test_a_manual_block_refuses_until_unblocked_and_both_are_recorded(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
    assert ledger.block("work", now=T0) == "blocked"
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a2", quote(1), [work, home], now=T0)
    assert caught.value.code == "account_blocked"
    assert ledger.reserve(conv("c2"), "a3", quote(1), [work, home], now=T0).account == "home"
    assert ledger.clear_block("u1", "work", "checked the console", now=T0) == "unblocked"
    assert ledger.reserve(conv("c1"), "a4", quote(1), [work], now=T0).account == "work"
    kinds = [r[0] for r in ledger._conn.execute("SELECT kind FROM adjustment WHERE account = 'work' ORDER BY created_at, kind")]
    assert sorted(kinds) == ["block", "unblock"]


def test_unblocking_an_account_that_is_not_blocked_is_recorded_and_changes_nothing(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
    assert ledger.clear_block("u1", "work", "just in case", now=T0) == "not_blocked"
    assert ledger.clear_block("u1", "work", "just in case", now=T0) == "already_recorded"


def test_blocking_an_account_the_ledger_has_never_seen_needs_its_declaration(ledger, work):
    with pytest.raises(AccountsError) as caught:
        ledger.block("work", now=T0)
    assert caught.value.code == "declaration_invalid"
    assert ledger.block(work, now=T0) == "blocked"


# Reading


def test_status_shows_budget_spend_open_remaining_and_today(ledger, home):
    capped = Account("work", "WORK_KEY", NANO, daily_budget_nusd=NANO // 2)
    ledger.reserve(conv("c1"), "a1", quote(NANO // 4), [capped], now=T0)
    ledger.settle("a1", Complete(NANO // 10, USAGE, MODEL), now=T0)
    ledger.reserve(conv("c1"), "a2", quote(NANO // 5), [capped], now=T0)
    ledger.adjust("j1", "work", "2026-11", NANO // 20, "console", now=T0)
    (work_line, home_line) = ledger.status([capped, home], now=T0)
    assert (work_line.budget_nusd, work_line.spent_nusd, work_line.open_ceiling_nusd, work_line.remaining_nusd) == (
        NANO, NANO // 10 + NANO // 20, NANO // 5, NANO - NANO // 10 - NANO // 20 - NANO // 5
    )
    assert (work_line.today_settled_nusd, work_line.today_open_nusd, work_line.today_remaining_nusd) == (
        NANO // 10, NANO // 5, NANO // 2 - NANO // 10 - NANO // 5
    )
    assert (work_line.resets_at, work_line.day_resets_at) == ("2026-11-30T00:00:00+00:00", "2026-11-11T00:00:00+00:00")
    assert work_line.last_success_at == T0.isoformat()
    assert (home_line.declared, home_line.budget_nusd, home_line.spent_nusd, home_line.health) == (True, 2 * NANO, 0, "ok")


def test_status_lists_ledger_accounts_that_are_no_longer_declared(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
    lines = ledger.status([home], now=T0)
    assert [(line.name, line.declared) for line in lines] == [("home", True), ("work", False)]


def test_status_flags_a_declaration_that_differs_from_the_months_budget(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
    (line,) = ledger.status([Account("work", "WORK_KEY", 3 * NANO)], now=T0)
    assert (line.config_conflict, line.budget_nusd) == (True, NANO)


def test_open_attempts_lists_what_still_holds_a_ceiling_oldest_first(ledger, work):
    for n, ceiling in enumerate((5, 6, 7)):
        ledger.reserve(conv("c1"), f"a{n}", quote(ceiling), [work], now=T0 + dt.timedelta(seconds=n))
    ledger.settle("a0", Complete(1, USAGE, MODEL), now=T0)
    assert [(a["id"], a["ceiling_nusd"]) for a in ledger.open_attempts()] == [("a1", 6), ("a2", 7)]
    assert [a["id"] for a in ledger.attempts(account="work")] == ["a2", "a1", "a0"]


def test_unknown_attempt_filters_are_refused(ledger):
    with pytest.raises(AccountsError):
        ledger.attempts(prompt="x")


def test_running_totals_always_match_the_rows(ledger, work, capped):
    ledger.reserve(conv("c1"), "a1", quote(NANO // 4), [work, capped], now=T0)
    ledger.reserve(conv("c2"), "a2", quote(NANO // 4), [work, capped], now=T0)
    ledger.settle("a1", Complete(NANO // 8, USAGE, MODEL), now=T0)
    ledger.settle("a2", Unknown("cancelled"), now=T0)
    ledger.reserve(conv("c1"), "a3", quote(7), [work, capped], now=T0 + dt.timedelta(days=1))
    ledger.reconcile("r1", "a2", 3, "console", now=T0 + dt.timedelta(days=1))
    ledger.settle("a3", NotSent(), now=T0 + dt.timedelta(days=1))
    assert ledger.audit() == []


# No secrets


def test_key_shaped_text_is_refused_in_every_free_text_field_and_never_echoed(ledger, work, canary_key, tmp_path):
    from conftest import assert_no_key_material, assert_tree_has_no_key_material

    attempts = [
        lambda: ledger.reserve(conv("c1"), canary_key, quote(1), [work], now=T0),
        lambda: ledger.reserve(Scope("conversation", canary_key), "a1", quote(1), [work], now=T0),
        lambda: ledger.reserve(conv("c1"), "a1", quote(1), [work], client=canary_key, now=T0),
        lambda: ledger.adjust("j1", work, "2026-11", 1, canary_key, now=T0),
        lambda: ledger.clear_block(canary_key, work, "x", now=T0),
    ]
    for attempt in attempts:
        with pytest.raises(AccountsError) as caught:
            attempt()
        assert_no_key_material(str(caught.value), canary_key)
    ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
    ledger.settle("a1", Complete(1, {"input_tokens": 1, canary_key: 5}, MODEL, canary_key), now=T0)
    files = sqlite_file(ledger, tmp_path).parent  # a PostgreSQL ledger's every row, in its SQLite copy
    ledger.close()
    assert_tree_has_no_key_material(str(files), canary_key)


def test_the_attempt_table_has_no_column_for_prompts_bodies_headers_or_keys(ledger):
    columns = {d[0] for d in ledger._conn.execute("SELECT * FROM attempt WHERE 1 = 0").description}
    assert {"id", "ceiling_nusd", "cost_nusd", "request_digest"} <= columns
    assert not {c for c in columns if any(w in c for w in ("prompt", "body", "header", "key", "fingerprint"))}


def test_the_ledger_file_is_readable_with_plain_sqlite(ledger, work, tmp_path):
    """A SQLite ledger is its file; a PostgreSQL ledger's export is one (llm accounts export)."""
    ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
    conn = sqlite3.connect(sqlite_file(ledger, tmp_path))
    assert conn.execute("SELECT account FROM attempt").fetchone() == ("work",)
