"""A rejection keeps its diagnosis (docs/errors.md "Rejection classes"): what the user is shown
of a refused attempt (the provider error type, the rejection class, the HTTP status) is what the
ledger stores, documented body or not, and a caller who stops while the body is read does not
lose it.
"""

import asyncio
import json
import os
import signal
import threading
import time

import llm
import pytest

from hostile import Reply, hostile_account  # noqa: F401  (fixture)
from routed_helpers import attempts
from stalling import LIVENESS_S, Stalling, head
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.money import NANO

MODEL = "claude-routed/claude-haiku-4-5"
SETTLE_S = 0.3  # once the server stalls, time for the client to read what was sent before it


def error_body(error_type="invalid_request_error", message="prompt is too long: 250000 tokens > 200000 maximum", top="error"):
    error = {"type": error_type, "message": message}
    return json.dumps({"type": top, "error": {k: v for k, v in error.items() if v is not None}}).encode()


def ask():
    try:
        return llm.get_model(MODEL).prompt("hello", stream=False, retries=0).text()
    except llm.ModelError as error:
        return error


# (body, the error type shown): every undocumented body shows rejection class other.
UNDOCUMENTED = {
    "no-message": (error_body(message=None), "invalid_request_error"),
    "unknown-type-saying-prompt-too-long": (error_body(error_type="context_error"), "other"),
    "missing-type-saying-prompt-too-long": (error_body(error_type=None), "other"),
    "top-level-not-error": (error_body(top="message"), "invalid_request_error"),
    "invalid-json": (b'{"type": "error", "error": {"type": "invalid_request_error", "mess', "other"),
    "html": (b"<html><body>prompt is too long</body></html>", "other"),
    "over-64-kib": (error_body()[:-1] + b" " * (64 * 1024) + b"}", "other"),
}


@pytest.mark.parametrize("status", [400, 429])
@pytest.mark.parametrize("case", sorted(UNDOCUMENTED))
def test_an_undocumented_4xx_body_is_stored_as_it_was_shown(hostile_account, ledger_path, case, status):
    raw, shown_type = UNDOCUMENTED[case]
    hostile_account.answer = lambda request: Reply(status, {"content-type": "application/json"}, raw)
    error = ask()
    assert isinstance(error, llm.ModelError)
    assert f"answered HTTP {status} {shown_type};" in str(error)
    [row] = attempts(ledger_path)
    assert row["state"] == "open"  # no documented body, no proof nothing was billed
    assert (row["provider_error_type"], row["rejection_class"], row["http_status"]) == (shown_type, "other", status)


def test_a_documented_5xx_body_stays_open_with_its_diagnosis_stored(hostile_account, ledger_path):
    raw = error_body("api_error", "Internal server error")
    hostile_account.answer = lambda request: Reply(500, {"content-type": "application/json"}, raw)
    error = ask()
    assert "answered HTTP 500 api_error;" in str(error)
    [row] = attempts(ledger_path)
    assert (row["state"], row["provider_error_type"], row["rejection_class"], row["http_status"]) == (
        "open", "api_error", "other", 500)


def test_a_documented_4xx_body_is_stored_as_it_was_shown(hostile_account, ledger_path):
    hostile_account.answer = lambda request: Reply(400, {"content-type": "application/json"}, error_body())
    error = ask()
    assert "answered HTTP 400 invalid_request_error (prompt_too_long);" in str(error)
    [row] = attempts(ledger_path)
    assert (row["state"], row["cost_nusd"], row["provider_error_type"], row["rejection_class"], row["http_status"]) == (
        "settled", 0, "invalid_request_error", "prompt_too_long", 400)


# --- A caller who stops while the body is read --------------------------------------------------


@pytest.fixture
def stalling(canary_key, user_path, ledger_path, monkeypatch):
    (user_path / "keys.json").write_text(json.dumps({"ALPHA_KEY": canary_key}))
    save_accounts_file([Account("alpha", "ALPHA_KEY", 20 * NANO)], None)
    with Stalling() as server:
        monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", server.base_url)
        yield server


def stalled_refusal(server):
    """A documented 400 whose body stalls after ten bytes."""
    raw = error_body()
    server.pieces = [head(400, "Bad Request", "application/json", len(raw)), raw[:10], Stalling.STALL, raw[10:]]


def test_ctrl_c_while_a_refusal_body_is_read_keeps_its_diagnosis_then_interrupts(stalling, ledger_path):
    """The body is read to its end (within its five-second bound) and settled, then the
    KeyboardInterrupt is delivered."""
    stalled_refusal(stalling)

    def press_then_release():
        if stalling.stalled.wait(LIVENESS_S):
            time.sleep(SETTLE_S)
            os.kill(os.getpid(), signal.SIGINT)  # a real SIGINT, as a terminal's Ctrl-C sends
            time.sleep(SETTLE_S)
            stalling.release.set()

    threading.Thread(target=press_then_release, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        llm.get_model(MODEL).prompt("hello", stream=False).text()
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"], row["cost_nusd"]) == ("settled", "request_rejected", 0)
    assert (row["provider_error_type"], row["rejection_class"]) == ("invalid_request_error", "prompt_too_long")


def test_an_async_cancel_while_a_refusal_body_is_read_keeps_its_diagnosis_then_cancels(stalling, ledger_path):
    stalled_refusal(stalling)

    async def main():
        task = asyncio.ensure_future(llm.get_async_model(MODEL).prompt("hello", stream=False).text())
        while not stalling.stalled.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(SETTLE_S)
        task.cancel()
        asyncio.get_running_loop().call_later(SETTLE_S, stalling.release.set)
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"], row["cost_nusd"]) == ("settled", "request_rejected", 0)
    assert (row["provider_error_type"], row["rejection_class"]) == ("invalid_request_error", "prompt_too_long")


# --- The ledger's side ----------------------------------------------------------------------------


@pytest.fixture
def ledger(ledger_location):
    from llm_accounts.ledger import Ledger

    with Ledger(ledger_location) as ledger:
        yield ledger


def reserved(ledger, account):
    import datetime as dt

    from llm_accounts.ledger import Scope
    from llm_accounts.pricing.prices import Quote

    t0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)
    ledger.reserve(Scope("conversation", "c1"), "a1", Quote("claude-sonnet-4-5-20250929", 10_000, "2026-11-01", "ab" * 32),
                   [account], now=t0)
    return t0


def test_an_open_refusal_keeps_its_error_type_rejection_class_and_status(ledger, work):
    from llm_accounts.ledger import Unknown

    t0 = reserved(ledger, work)
    assert ledger.settle("a1", Unknown("request_rejected", "semantic", 400, "other", "other"), now=t0) == "still_open"
    row = ledger._conn.execute(
        "SELECT state, outcome, http_status, provider_error_type, rejection_class FROM attempt").fetchone()
    assert tuple(row) == ("open", "request_rejected", 400, "other", "other")
    assert ledger.audit() == []


@pytest.mark.parametrize("field", ["provider_error_type", "rejection_class"])
def test_the_ledger_refuses_an_open_refusal_whose_diagnosis_is_outside_the_closed_set(ledger, work, field):
    """Provider text never reaches the ledger, not even as an error type."""
    from llm_accounts.errors import AccountsError
    from llm_accounts.ledger import Unknown

    t0 = reserved(ledger, work)
    diagnosis = {"provider_error_type": "other", "rejection_class": "other", field: "made up by the provider"}
    with pytest.raises(AccountsError) as caught:
        ledger.settle("a1", Unknown("request_rejected", "semantic", 400, **diagnosis), now=t0)
    assert caught.value.code == "declaration_invalid" and field in caught.value.message
    assert "made up" not in caught.value.message
