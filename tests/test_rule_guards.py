"""Rules that a mutation of the code once broke with the whole suite still passing
(bench/mutate.py; docs/reliability.md "Mutation score"). Each test states one rule.
"""

import json

import llm
import pytest

from hostile import Reply, hostile_account  # noqa: F401  (fixture)
from routed_helpers import attempts
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

MODEL = "claude-routed/claude-haiku-4-5"


def documented_error(error_type, message="Something happened"):
    return json.dumps({"type": "error", "error": {"type": error_type, "message": message}}).encode()


def ask(stream=False):
    try:
        response = llm.get_model(MODEL).prompt("hello", stream=stream, retries=0)
        return "".join(response) if stream else response.text()
    except llm.ModelError as error:
        return error


@pytest.mark.parametrize("status, error_type", [(500, "api_error"), (502, "api_error"), (503, "overloaded_error"),
                                                (504, "timeout_error")])
def test_a_5xx_answered_with_a_documented_error_body_stays_open_never_settled_at_zero(
    hostile_account, ledger_path, status, error_type
):
    """Unknown is never zero (docs/architecture.md "Attempt outcomes"): only a 4xx or a 529 with
    a documented body proves nothing was processed."""
    hostile_account.answer = lambda request: Reply(status, {"content-type": "application/json"},
                                                   documented_error(error_type))
    error = ask()
    assert isinstance(error, llm.ModelError) and error.code == "provider_error"
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"], row["cost_nusd"], row["http_status"]) == ("open", "provider_error", None, status)


@pytest.mark.parametrize("status, outcome", [(429, "rate_limited"), (529, "overloaded"), (400, "request_rejected")])
def test_a_4xx_or_529_with_a_documented_error_body_settles_at_zero(hostile_account, ledger_path, status, outcome):
    error_type = {429: "rate_limit_error", 529: "overloaded_error", 400: "invalid_request_error"}[status]
    hostile_account.answer = lambda request: Reply(status, {"content-type": "application/json"},
                                                   documented_error(error_type))
    assert isinstance(ask(), llm.ModelError)
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"], row["cost_nusd"]) == ("settled", outcome, 0)


@pytest.mark.parametrize("status", [429, 529, 400])
def test_a_4xx_or_529_without_a_documented_body_stays_open(hostile_account, ledger_path, status):
    hostile_account.answer = lambda request: Reply(status, {"content-type": "text/html"}, b"<html>busy</html>")
    assert isinstance(ask(), llm.ModelError)
    [row] = attempts(ledger_path)
    assert (row["state"], row["cost_nusd"]) == ("open", None)


def test_a_3xx_answer_is_a_failure_that_stays_unknown():
    """The client follows no redirect, so a 3xx is an answer that is not a message: an unknown
    outcome, not a success (bench/mutate.py moved the 2xx bound to 300), and an unexpected status
    whatever its body says (docs/errors.md "An unexpected status")."""
    from llm_accounts.wire import classify

    assert classify.outcome_for_status(300) == "provider_error"
    assert classify.failure_class(300, classify.UNREADABLE) == "provider_outage"
    assert classify.failure_class(300, classify.ErrorInfo("rate_limit_error", "other", None, True)) == "provider_outage"


def test_the_routing_object_records_each_attempt_at_the_cost_the_ledger_settled(accounts, user_path, ledger_path):
    """A refusal that moved a new conversation on is listed at zero, as the ledger settled it
    (bench/mutate.py recorded it at 1 nanodollar)."""
    import sqlite3

    from routed_helpers import llm_cli

    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "ok", script=["rate_limited"])
    result = llm_cli("-m", MODEL, "-o", "retries", "1", "Say hello")  # 429, moved on, 429, retried
    assert result.exit_code == 0, result.output
    db = sqlite3.connect(user_path / "logs.db")
    [(response_json,)] = db.execute("select response_json from turns").fetchall()
    routing = json.loads(response_json)["routing"]
    rows = {row["id"]: row for row in attempts(ledger_path)}
    assert [a["outcome"] for a in routing["attempts"]] == ["rate_limited", "rate_limited", "complete"]
    assert len(rows) == 3
    assert [(a["outcome"], a["cost_nusd"]) for a in routing["attempts"]] == [
        (rows[a["id"]]["outcome"], rows[a["id"]]["cost_nusd"]) for a in routing["attempts"]]
    assert routing["attempts"][0]["cost_nusd"] == 0


@pytest.mark.parametrize("month, start, end", [
    ("2027-01", "2026-12-31", "2027-01-31"),  # across a year end
    ("2027-02", "2027-01-31", "2027-02-28"),
    ("2026-03", "2026-02-28", "2026-03-31"),
    ("2028-03", "2028-02-29", "2028-03-31"),  # after a leap day
    ("2026-12", "2026-11-30", "2026-12-31"),
])
def test_a_credit_period_runs_from_the_last_day_of_the_month_before_to_its_own_last_day(month, start, end):
    import datetime as dt

    from llm_accounts import clock

    day = lambda text: dt.datetime.fromisoformat(text + "T00:00:00+00:00")  # noqa: E731
    assert clock.credit_period(month) == (day(start), day(end))


@pytest.mark.parametrize("instant, reset", [
    ("2026-12-31T23:59:59.999999", "2027-01-01"),
    ("2028-02-28T00:00:00", "2028-02-29"),
    ("2028-02-29T12:00:00", "2028-03-01"),
])
def test_a_daily_budget_resets_at_the_next_utc_midnight(instant, reset):
    import datetime as dt

    from llm_accounts import clock

    t = dt.datetime.fromisoformat(instant + "+00:00")
    assert clock.next_day_start(t) == dt.datetime.fromisoformat(reset + "T00:00:00+00:00")


def test_pace_compares_utilization_relative_to_budget_times_weight_exactly():
    """(S + R) / (B x weight), by cross-multiplication (docs/architecture.md "Selection");
    bench/mutate.py turned a product into a floor division with every weight 1 in the tests."""
    from fractions import Fraction
    from types import SimpleNamespace

    from llm_accounts import selection

    values = [(0, 7, 1), (2, 10, 3), (1, 10, 1), (5, 9, 2), (9, 9, 1), (3, 4, 5), (10**15, 10**16, 7)]
    for c1, b1, w1 in values:
        for c2, b2, w2 in values:
            a = SimpleNamespace(committed_nusd=c1, budget_nusd=b1, weight=w1)
            b = SimpleNamespace(committed_nusd=c2, budget_nusd=b2, weight=w2)
            difference = Fraction(c1, b1 * w1) - Fraction(c2, b2 * w2)
            assert selection.compare_utilization(a, b) == (difference > 0) - (difference < 0)


def test_a_refusal_says_what_is_left_after_settled_spend_and_open_ceilings():
    from llm_accounts import selection

    message = selection._no_room("month budget", 3 * 10**9, 2 * 10**9, 6 * 10**9, 10 * 10**9)
    assert message.endswith("(needs up to $6.00, $5.00 left)")
    assert selection._no_room("month budget", 3 * 10**9, 7 * 10**9, 1, 10 * 10**9) == "month budget reached"


def test_a_token_cap_with_one_token_left_is_not_reached():
    from llm_accounts import selection

    assert selection._no_token_room("ci", 10, 5, 100, 16).endswith("(needs up to 100 tokens, 1 left)")
    assert selection._no_token_room("ci", 10, 6, 100, 16) == "client ci's token cap reached"
