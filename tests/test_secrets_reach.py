"""Nothing a caller can reach from a routed error holds a key, an httpx object or provider text,
and DEBUG logging of every logger shows no key material (docs/security.md).

"Reach" is what a Python caller, a debugger or an error reporter can walk from the exception:
its ``__cause__``/``__context__`` chain, its args and attributes, and the locals of the
package's own frames in its traceback.
"""

import asyncio
import logging
import socket
import traceback

import httpx
import llm
import pytest

from conftest import assert_no_key_material, runs_of
from hostile import Reply, hostile_account, text_reply  # noqa: F401  (fixture)
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.errors import AccountsError
from llm_accounts.money import NANO
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

MODEL = "claude-routed/claude-haiku-4-5"
# A request or a response carries headers that held or quoted the key. (The client itself holds
# only default headers; what it holds is walked like everything else.)
HTTPX_TYPES = (httpx.Request, httpx.Response, httpx.HTTPError)
PROVIDER_TEXT = "provider text that must never be kept"


def _values(value, depth=0, seen=None):
    """``value`` and what it holds: attributes of objects, items of containers, three levels."""
    seen = set() if seen is None else seen
    if id(value) in seen or depth > 3:
        return
    seen.add(id(value))
    yield value
    if isinstance(value, (str, bytes, bytearray, int, float, bool, type(None))):
        return
    if isinstance(value, dict):
        children = list(value.keys()) + list(value.values())
    elif isinstance(value, (list, tuple, set, frozenset)):
        children = list(value)
    else:
        children = list(getattr(value, "__dict__", {}).values())
        for name in getattr(type(value), "__slots__", ()):
            if hasattr(value, name):
                children.append(getattr(value, name))
    for child in children:
        yield from _values(child, depth + 1, seen)


def reachable(error):
    """Everything a caller can walk from ``error``: (where, value) pairs."""
    chain, current = [], error
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    for exc in chain:
        yield "exception", exc
        for arg in exc.args:
            yield "args", arg
        for name, value in vars(exc).items():
            yield f"attribute {name}", value
        for frame, _ in traceback.walk_tb(exc.__traceback__):
            if "llm_accounts" in frame.f_code.co_filename:
                for name, value in frame.f_locals.items():
                    yield f"{frame.f_code.co_name}: local {name}", value


def assert_nothing_reachable(error, key):
    runs = runs_of(key)
    for where, top in reachable(error):
        for value in _values(top):
            assert not isinstance(value, HTTPX_TYPES), f"{where} holds an httpx {type(value).__name__}"
            if isinstance(value, BaseException):
                assert isinstance(value, AccountsError), f"{where} chains a {type(value).__name__}"
            if isinstance(value, (bytes, bytearray)):
                value = bytes(value).decode("latin-1")
            if isinstance(value, str):
                assert not any(run in value for run in runs), f"{where} holds a run of the key"
                assert PROVIDER_TEXT not in value, f"{where} holds provider text"
            else:
                text = repr(value)
                assert not any(run in text for run in runs), f"{where}'s repr shows a run of the key"


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def error_body(error_type, status):
    return Reply(
        status,
        {"content-type": "application/json"},
        (
            '{"type":"error","error":{"type":"%s","message":"%s"},"request_id":"req_1"}' % (error_type, PROVIDER_TEXT)
        ).encode(),
    )


def routed_error(stream, use_async=False):
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


def mid_stream_error(request):
    from hostile import raw_reply, sse, text_stream

    events = text_stream()[:4] + [{"type": "error", "error": {"type": "overloaded_error", "message": PROVIDER_TEXT}}]
    return raw_reply(sse(events)) if request.stream else error_body("overloaded_error", 529)


FAILURES = {
    "unauthorized": lambda request: error_body("authentication_error", 401),
    "rate-limited": lambda request: error_body("rate_limit_error", 429),
    "outage": lambda request: error_body("api_error", 500),
    "undocumented": lambda request: Reply(502, {"content-type": "text/html"}, f"<p>{PROVIDER_TEXT}</p>".encode()),
    "mid-stream": mid_stream_error,
}


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_refused_attempt_leaves_nothing_reachable(hostile_account, canary_key, failure, stream, use_async):
    hostile_account.answer = FAILURES[failure]
    error = routed_error(stream, use_async)
    assert_nothing_reachable(error, canary_key)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_connection_that_fails_leaves_nothing_reachable(hostile_account, canary_key, monkeypatch, stream, use_async):
    monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", f"http://127.0.0.1:{closed_port()}")
    error = routed_error(stream, use_async)
    assert error.code == "transport_error"
    assert error.__context__ is None and error.__cause__ is None
    assert_nothing_reachable(error, canary_key)


def test_a_move_on_that_runs_out_leaves_nothing_reachable(accounts, monkeypatch):
    accounts.set_behaviour("alpha", "rate_limited")
    accounts.set_behaviour("beta", "rate_limited")
    error = routed_error(stream=True)
    assert error.code == "rate_limited"
    for key in accounts.keys.values():
        assert_nothing_reachable(error, key)


def test_a_missing_key_leaves_nothing_reachable(user_path, ledger_path, canary_key, monkeypatch):
    save_accounts_file([Account("alpha", "NOT_SET_ANYWHERE", 20 * NANO)], None)
    error = routed_error(stream=False)
    assert error.code == "credential_missing"
    assert_nothing_reachable(error, canary_key)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_debug_logging_of_every_logger_shows_no_key_material(hostile_account, canary_key, caplog, stream):
    # A hostile provider quotes the key back in response headers, which httpcore's DEBUG trace
    # would print whole.
    hostile_account.answer = lambda request: text_reply(
        request.stream, headers={"x-echo": canary_key, "request-id": canary_key}
    )
    caplog.set_level(logging.DEBUG)
    for name in ("httpx", "httpcore", "llm_accounts", "llm"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    try:
        llm.get_model(MODEL).prompt("hello", stream=stream).text()
    finally:
        for name in ("httpx", "httpcore", "llm_accounts", "llm"):
            logging.getLogger(name).setLevel(logging.NOTSET)
    assert any(record.name.startswith("httpcore") for record in caplog.records), "httpcore did not log"
    assert any("receive_response_headers" in record.getMessage() for record in caplog.records)
    assert_no_key_material(caplog.text, canary_key)
    for record in caplog.records:
        assert_no_key_material(repr(record.args), canary_key)


def test_a_status_line_quoting_the_key_is_not_logged(canary_key, user_path, ledger_path, caplog, monkeypatch):
    # The reason phrase of the status line is the server's to choose; httpx logs it at INFO.
    import json as json_module

    from hostile import message
    from stalling import Stalling

    (user_path / "keys.json").write_text(json_module.dumps({"ALPHA_KEY": canary_key}))
    save_accounts_file([Account("alpha", "ALPHA_KEY", 20 * NANO)], None)
    data = json_module.dumps(message([{"type": "text", "text": "Hello."}])).encode()
    status = f"HTTP/1.1 200 {canary_key}\r\ncontent-type: application/json\r\ncontent-length: {len(data)}\r\n\r\n"
    with Stalling() as server:
        server.pieces = [status.encode(), data]
        monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", server.base_url)
        caplog.set_level(logging.DEBUG)
        llm.get_model(MODEL).prompt("hello", stream=False).text()
    assert any(record.name == "httpx" for record in caplog.records), "httpx did not log"
    assert_no_key_material(caplog.text, canary_key)


COUNT_FAILURES = {
    "unauthorized": FAILURES["unauthorized"],
    "malformed": lambda request: Reply(200, {"content-type": "application/json"}, ('{"input_tokens": "%s"}' % PROVIDER_TEXT).encode()),
}


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("failure", sorted(COUNT_FAILURES))
def test_a_failed_token_count_leaves_nothing_reachable(hostile_account, canary_key, failure, use_async):
    hostile_account.answer = COUNT_FAILURES[failure]
    if use_async:
        model = llm.get_async_model(MODEL)
        with pytest.raises(AccountsError) as caught:
            asyncio.run(model.count_tokens("hello"))
    else:
        with pytest.raises(AccountsError) as caught:
            llm.get_model(MODEL).count_tokens("hello")
    assert_nothing_reachable(caught.value, canary_key)
