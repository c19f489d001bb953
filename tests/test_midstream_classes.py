"""An ``error`` event inside a stream gets the failure class an HTTP error of the same kind gets
(docs/errors.md "From an answer to a code"), on the routed path, sync and async: its documented
type and rejection class are stored on the attempt, its text never is, and health follows."""

import asyncio

import llm
import pytest

from routed_helpers import attempts, llm_cli
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

MODEL = "claude-routed/claude-haiku-4-5"

# behaviour -> (provider_error_type, rejection_class, failure_class, routed error code)
CASES = {
    "stream_error": ("overloaded_error", "other", "provider_outage", "provider_error"),
    "stream_rate_limit_error": ("rate_limit_error", "other", "rate_limited", "rate_limited"),
    "stream_authentication_error": ("authentication_error", "other", "auth", "auth_failed"),
    "stream_permission_error": ("permission_error", "other", "auth", "auth_failed"),
    "stream_billing_error": ("billing_error", "other", "quota_exhausted", "request_rejected"),
    "stream_credit_balance_too_low": ("invalid_request_error", "credit_balance_too_low", "quota_exhausted", "request_rejected"),
}
PROVIDER_TEXT = ("credit balance", "x-api-key", "permission to use", "billing reasons", "per-minute rate limit", "Overloaded")


def prompt_sync():
    result = llm_cli("-m", MODEL, "Hello")
    assert result.exit_code == 1
    return result.output


def prompt_async():
    async def run():
        model = llm.get_async_model(MODEL)
        try:
            async for _ in model.prompt("Hello"):
                pass
        except llm.ModelError as error:
            return f"Error: {error}"
        raise AssertionError("the stream error was not raised")

    return asyncio.run(run())


PATHS = {"sync": prompt_sync, "async": prompt_async}


def health_row(ledger_path, account):
    import sqlite3

    db = sqlite3.connect(ledger_path)
    db.row_factory = sqlite3.Row
    try:
        return db.execute("SELECT * FROM health WHERE account = ?", (account,)).fetchone()
    finally:
        db.close()


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("behaviour", CASES)
def test_a_mid_stream_error_is_stored_with_its_type_rejection_class_and_failure_class(accounts, ledger_path, behaviour, path):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, behaviour)
    PATHS[path]()
    [row] = attempts(ledger_path)
    error_type, rejection_class, failure_class, _ = CASES[behaviour]
    assert (row["state"], row["outcome"]) == ("open", "stream_error")
    assert (row["provider_error_type"], row["rejection_class"], row["failure_class"]) == (
        error_type, rejection_class, failure_class
    )


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("behaviour", CASES)
def test_a_mid_stream_error_sets_the_accounts_health_by_its_class(accounts, ledger_path, behaviour, path):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, behaviour)
    PATHS[path]()
    [row] = attempts(ledger_path)
    health = health_row(ledger_path, row["account"])
    assert (health["state"], health["failure_class"]) == ("failing", CASES[behaviour][2])


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("behaviour", CASES)
def test_a_mid_stream_error_raises_its_classes_code_and_never_the_providers_text(accounts, ledger_path, behaviour, path):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, behaviour)
    output = PATHS[path]()
    errors = [line for line in output.splitlines() if "Error: " in line]
    assert len(errors) == 1 and f"Error: {CASES[behaviour][3]}:" in errors[0]
    for text in PROVIDER_TEXT:
        assert text not in output
        assert text.encode() not in ledger_path.read_bytes()


def test_a_mid_stream_authentication_error_blocks_the_account(accounts, ledger_path):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "stream_authentication_error")
    prompt_sync()
    [row] = attempts(ledger_path)
    result = llm_cli("-m", MODEL, "-o", "account", row["account"], "Hello again")
    assert "Error: auth_failed:" in result.output or "Error: account_blocked:" in result.output
    assert len(attempts(ledger_path)) == 1  # nothing more was sent to it


# Out of credit at the provider: one story per condition (docs/architecture.md "Quota exhaustion")


@pytest.mark.parametrize("behaviour", ["credit_balance_too_low", "spend_limit", "stream_credit_balance_too_low"])
def test_the_attempt_that_finds_an_account_out_of_credit_says_so_plainly(accounts, ledger_path, behaviour):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, behaviour)
    result = llm_cli("-m", MODEL, "-o", "account", "alpha", "Hello")
    assert "Error: request_rejected: " in result.output
    assert "account 'alpha' is out of credit at the provider (quota_exhausted)" in result.output
    assert "llm accounts unblock alpha" in result.output


@pytest.mark.parametrize("behaviour", ["credit_balance_too_low", "spend_limit", "stream_credit_balance_too_low"])
def test_a_later_prompt_tells_the_same_out_of_credit_story(accounts, ledger_path, behaviour):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, behaviour)
    llm_cli("-m", MODEL, "-o", "account", "alpha", "Hello")
    result = llm_cli("-m", MODEL, "-o", "account", "alpha", "Hello again")
    assert "Error: request_rejected: " in result.output
    assert "account 'alpha' is out of credit at the provider (quota_exhausted)" in result.output
    assert "budget" not in result.output
    assert len(attempts(ledger_path)) == 1
