"""Every attempt ends with its outcome recorded, on every path (docs/architecture.md "Attempt outcomes").

A loopback server sends a scripted answer in pieces and can stall between them, so a test can
stop or cancel the caller at each point: before the request is sent, while a non-200 body is
read, while a 200 body is read, between the last byte and settlement, mid-stream.
"""

import asyncio
import json
import os
import signal
import sqlite3
import threading
import time

import llm
import pytest

from hostile import message, sse, text_stream, usage
from stalling import LIVENESS_S, Stalling, head
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.ledger import Ledger
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import settlement_cost
from llm_accounts.wire import transport
from routed_helpers import attempts

MODEL = "claude-routed/claude-haiku-4-5"
SETTLE_S = 0.3  # once the server stalls, time for the client to read what was sent before it


def error_json(error_type):
    return json.dumps({"type": "error", "error": {"type": error_type, "message": "refused"}}).encode()


@pytest.fixture
def stalling(canary_key, user_path, ledger_path, monkeypatch):
    (user_path / "keys.json").write_text(json.dumps({"ALPHA_KEY": canary_key}))
    save_accounts_file([Account("alpha", "ALPHA_KEY", 20 * NANO)], None)
    with Stalling() as server:
        monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", server.base_url)
        yield server


def health(ledger_path):
    db = sqlite3.connect(ledger_path)
    db.row_factory = sqlite3.Row
    return [dict(row) for row in db.execute("select * from health")]


def cancel_when_stalled(server, stream, *, prompt="hello"):
    """Run an async prompt, cancel it once the server stalls, then let the server go on."""

    async def main():
        model = llm.get_async_model(MODEL)
        task = asyncio.ensure_future(model.prompt(prompt, stream=stream).text())
        while not server.stalled.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(SETTLE_S)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    server.release.set()


# --- Cancellation at each point -------------------------------------------------------------------


def test_an_async_429_cancelled_while_its_body_is_read_records_rate_limited(stalling, ledger_path, monkeypatch):
    monkeypatch.setattr(transport, "ERROR_BODY_SECONDS", 1.0)  # the body is read on after the cancel, to its bound
    body = error_json("rate_limit_error")
    stalling.pieces = [head(429, "Too Many Requests", "application/json", len(body)), Stalling.STALL, body]
    cancel_when_stalled(stalling, stream=True)
    [row] = attempts(ledger_path)
    assert row["outcome"] == "rate_limited"
    assert row["http_status"] == 429


def test_an_async_prompt_cancelled_before_its_request_is_sent_settles_as_not_sent(stalling, ledger_path, monkeypatch):
    llm.get_model(MODEL)  # the ledger exists once a first prompt has been reserved
    data = json.dumps(message([{"type": "text", "text": "Hello."}])).encode()
    stalling.pieces = [head(200, "OK", "application/json", len(data)), data]
    asyncio.run(llm.get_async_model(MODEL).prompt("first", stream=False).text())
    held = sqlite3.connect(ledger_path, isolation_level=None, check_same_thread=False)
    held.execute("BEGIN IMMEDIATE")  # the next reservation waits for this lock
    reserving = threading.Event()
    reserve = Ledger.reserve

    def noting_reserve(self, *args, **kw):
        reserving.set()
        return reserve(self, *args, **kw)

    monkeypatch.setattr(Ledger, "reserve", noting_reserve)

    async def main():
        task = asyncio.ensure_future(llm.get_async_model(MODEL).prompt("second", stream=False).text())
        while not reserving.is_set():
            await asyncio.sleep(0.01)
        await asyncio.sleep(SETTLE_S)  # into the lock wait
        task.cancel()
        loop = asyncio.get_running_loop()
        loop.call_later(0.2, lambda: held.execute("ROLLBACK"))
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    held.close()
    rows = attempts(ledger_path)
    assert stalling.requests == 1
    assert [(r["state"], r["outcome"]) for r in rows] == [("settled", "complete"), ("settled", "not_sent")]


def interrupt_when_stalled(server, stream):
    """Run a sync prompt and press Ctrl-C (KeyboardInterrupt in the main thread) once the
    server stalls."""
    def press():
        if server.stalled.wait(LIVENESS_S):
            time.sleep(SETTLE_S)
            # A real SIGINT: it interrupts the blocked read, as a terminal's Ctrl-C does.
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        llm.get_model(MODEL).prompt("hello", stream=stream).text()
    server.release.set()


# The caller gives up while a body is read: an async task cancelled, or Ctrl-C in a sync call.
STOPS = {"async-cancel": cancel_when_stalled, "sync-ctrl-c": interrupt_when_stalled}


def stalled_200(stream):
    """An answer that stalls partway through its body."""
    if stream:
        data = sse(text_stream())
        return [head(200, "OK", "text/event-stream"), data[:200], Stalling.STALL, data[200:]]
    data = json.dumps(message([{"type": "text", "text": "Hello."}])).encode()
    return [head(200, "OK", "application/json", len(data)), data[:20], Stalling.STALL, data[20:]]


@pytest.mark.parametrize("stop", sorted(STOPS))
def test_a_401_stopped_while_its_body_is_read_still_blocks(stalling, ledger_path, stop, monkeypatch):
    monkeypatch.setattr(transport, "ERROR_BODY_SECONDS", 1.0)  # the body is read on after the stop, to its bound
    body = error_json("authentication_error")
    stalling.pieces = [head(401, "Unauthorized", "application/json", len(body)), body[:10], Stalling.STALL, body[10:]]
    STOPS[stop](stalling, stream=False)
    [row] = attempts(ledger_path)
    assert row["outcome"] == "auth_required"
    [h] = health(ledger_path)
    assert (h["state"], h["failure_class"]) == ("failing", "auth")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("stop", sorted(STOPS))
def test_a_200_stopped_while_its_body_is_read_stays_open_as_cancelled(stalling, ledger_path, stop, stream):
    stalling.pieces = stalled_200(stream)
    STOPS[stop](stalling, stream=stream)
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"]) == ("open", "cancelled")
    assert row["ceiling_nusd"] > 0


def test_a_sync_whole_answer_whose_consumer_stops_after_one_chunk_is_settled(stalling, ledger_path):
    data = json.dumps(message([{"type": "text", "text": "One."}, {"type": "text", "text": "Two."}])).encode()
    stalling.pieces = [head(200, "OK", "application/json", len(data)), data]
    response = llm.get_model(MODEL).prompt("hello", stream=False)
    chunks = iter(response)
    assert next(chunks) == "One."
    chunks.close()
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"]) == ("settled", "complete")


def test_a_stream_closed_after_its_error_event_records_stream_error(stalling, ledger_path, canary_key):
    # A short piece of the key is held by the scrubber until the error event pauses the text, so
    # the consumer's first chunk arrives while the error event is being read.
    events = text_stream()[:3] + [
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": canary_key[30:35]}},
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    ]
    stalling.pieces = [head(200, "OK", "text/event-stream"), sse(events)]
    response = llm.get_model(MODEL).prompt("hello", stream=True)
    chunks = iter(response)
    next(chunks)
    chunks.close()
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"]) == ("open", "stream_error")
    [h] = health(ledger_path)
    assert h["failure_class"] == "provider_outage"


# --- Bounded error bodies -------------------------------------------------------------------------


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
def test_an_error_body_that_never_arrives_is_classified_other_at_the_bound(stalling, ledger_path, monkeypatch, use_async):
    monkeypatch.setattr(transport, "ERROR_BODY_SECONDS", 0.5)
    body = error_json("rate_limit_error")
    stalling.pieces = [head(429, "Too Many Requests", "application/json", len(body)), body[:15], Stalling.STALL, body[15:]]
    outcome = {}

    def run():
        try:
            if use_async:
                asyncio.run(llm.get_async_model(MODEL).prompt("hello", stream=False).text())
            else:
                llm.get_model(MODEL).prompt("hello", stream=False).text()
        except Exception as error:  # noqa: BLE001 - the routed error is what the test reads
            outcome["error"] = error

    caller = threading.Thread(target=run, daemon=True)
    caller.start()
    caller.join(LIVENESS_S)
    assert not caller.is_alive(), "the caller waited on a stalled error body"
    stalling.release.set()
    assert outcome["error"].code == "rate_limited"
    assert "answered HTTP 429 other;" in outcome["error"].message
    [row] = attempts(ledger_path)
    # An unread body is no proof that nothing was billed: the ceiling stays open.
    assert (row["state"], row["outcome"]) == ("open", "rate_limited")


# --- Unknown billing ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extra",
    [{"audio_input_tokens": 40}, {"cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0,
                                                      "ephemeral_24h_input_tokens": 9}}],
    ids=["new-top-level-field", "unknown-cache-creation-key"],
)
def test_a_usage_with_a_billing_dimension_the_revision_does_not_know_has_no_cost(extra):
    body = json.dumps({"model": "claude-haiku-4-5", "max_tokens": 10, "messages": []}).encode()
    assert settlement_cost(usage(**extra), "claude-haiku-4-5", body, None) is None
    assert settlement_cost(usage(output_tokens_details={"thinking_tokens": 3}), "claude-haiku-4-5", body, None) > 0


def test_an_answer_with_an_unknown_billing_dimension_keeps_its_ceiling(stalling, ledger_path):
    data = json.dumps(message([{"type": "text", "text": "Hello."}], usage=usage(audio_input_tokens=40))).encode()
    stalling.pieces = [head(200, "OK", "application/json", len(data)), data]
    llm.get_model(MODEL).prompt("hello", stream=False).text()
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"]) == ("open", "usage_incomplete")
    assert row["ceiling_nusd"] > 0


def test_a_server_tool_block_mid_stream_is_read_to_the_end_and_settled_from_usage(stalling, ledger_path):
    # It used to stop the reader and hold the whole ceiling open (docs/pricing.md "Server tools").
    events = text_stream()
    events[6:6] = [  # after the text block stops
        {"type": "content_block_start", "index": 1,
         "content_block": {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}},
        {"type": "content_block_stop", "index": 1},
    ]
    stalling.pieces = [head(200, "OK", "text/event-stream"), sse(events)]
    assert llm.get_model(MODEL).prompt("hello", stream=True).text()
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"]) == ("settled", "complete")
