"""A status the code does not expect (a 2xx other than 200, a 1xx or 3xx that httpx hands back,
or one past 599) is one coded ``provider_error`` line, and its attempt stays open: the request
may have been processed, so its cost is unknown (docs/architecture.md "Attempt outcomes",
docs/errors.md "From an answer to a code"). The error is raised fresh, outside every frame that
held the key."""

import asyncio

import llm
import pytest

from conftest import assert_no_key_material
from hostile import MODEL, Reply, hostile_account, message  # noqa: F401  (fixture)
from routed_helpers import attempts, llm_cli
from test_secrets_reach import assert_nothing_reachable
from llm_accounts.errors import AccountsError
from llm_accounts.wire import classify
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

# A body that would be a whole answer on a 200: an unexpected status is not read as one.
ANSWER = b'{"type":"message","role":"assistant","content":[],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}'
STATUSES = [201, 204, 206, 299, 301, 302, 307, 600]


def unexpected(status):
    return lambda request: Reply(status, {"content-type": "application/json", "location": "http://127.0.0.1:9/"}, ANSWER)


@pytest.mark.parametrize("status", [100, 101, 103, 201, 204, 206, 299, 300, 301, 304, 308, 600, 999])
def test_an_unexpected_status_is_a_provider_error_outcome(status):
    assert classify.outcome_for_status(status) == "provider_error"
    assert classify.error_code_for(classify.outcome_for_status(status)) == "provider_error"


@pytest.mark.parametrize("status", [201, 302, 600])
def test_an_unexpected_status_cools_the_account_as_a_provider_outage(status):
    assert classify.failure_class(status, classify.UNREADABLE) == "provider_outage"


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("status", STATUSES)
def test_an_unexpected_status_is_one_coded_line_and_the_attempt_stays_open(hostile_account, canary_key, ledger_path, status, stream):
    hostile_account.answer = unexpected(status)
    result = llm_cli("-m", MODEL, "Hello", *([] if stream else ["--no-stream"]))
    assert result.exit_code == 1
    assert "Traceback" not in result.output
    error = result.output[result.output.index("Error: "):]
    assert len(error.strip().splitlines()) == 1, error
    assert error.startswith(f"Error: provider_error: account 'alpha' answered HTTP {status}"), error
    assert_no_key_material(result.output, canary_key)
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"], row["cost_nusd"], row["http_status"]) == ("open", "provider_error", None, status)


def routed_error(stream, use_async):
    if use_async:
        model = llm.get_async_model(MODEL)

        async def run():
            return await model.prompt("hello", stream=stream, retries=0).text()

        with pytest.raises(AccountsError) as caught:
            asyncio.run(run())
    else:
        with pytest.raises(AccountsError) as caught:
            llm.get_model(MODEL).prompt("hello", stream=stream, retries=0).text()
    return caught.value


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("status", [201, 206, 301])
def test_an_unexpected_status_leaves_nothing_reachable(hostile_account, canary_key, ledger_path, status, stream, use_async):
    hostile_account.answer = unexpected(status)
    error = routed_error(stream, use_async)
    assert (error.code, error.http_status) == ("provider_error", status)
    assert error.__context__ is None and error.__cause__ is None
    assert_nothing_reachable(error, canary_key)
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"]) == ("open", "provider_error")
