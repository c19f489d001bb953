"""Rules that a mutation of the code once broke with the whole suite still passing
(bench/mutate.py; docs/reliability.md "Mutation score"). Each test states one rule.
"""

import json

import llm
import pytest

from hostile import Reply, hostile_account  # noqa: F401  (fixture)
from routed_helpers import attempts

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
