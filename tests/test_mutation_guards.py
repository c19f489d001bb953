"""Rules that outside mutation passes broke with the whole suite still passing, one test each
(bench/mutate.py tries these mutation kinds; docs/reliability.md "Mutation score"): where a key
may be sent, what a timeout proves, which refusals settle at zero, and what a binding is keyed by.
"""

import asyncio
import datetime as dt
import errno
import http.server
import json
import socket
import sqlite3
import threading

import httpx
import llm
import pytest

from hostile import Reply, hostile_account  # noqa: F401  (fixture)
from routed_helpers import attempts
from stalling import Stalling
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Ledger, Refused, Scope
from llm_accounts.pricing.prices import Quote
from llm_accounts.wire import transport

MODEL = "claude-routed/claude-haiku-4-5"
T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)


def documented_error(error_type):
    return json.dumps({"type": "error", "error": {"type": error_type, "message": "Refused"}}).encode()


def ask(use_async=False):
    """One routed prompt, no retries; the routed error it ended with, or its text."""
    try:
        if use_async:
            return asyncio.run(llm.get_async_model(MODEL).prompt("hello", stream=False, retries=0).text())
        return llm.get_model(MODEL).prompt("hello", stream=False, retries=0).text()
    except llm.ModelError as error:
        return error


# --- Where a key may go (docs/security.md "Sending a key") ----------------------------------------


@pytest.mark.parametrize("url", [
    "http://example.com", "http://api.anthropic.com", "http://10.0.0.1:8080", "http://[2001:db8::1]",
    "http://localhost.example.com", "http://127.0.0.1.example.com",
])
def test_a_plain_http_base_url_off_loopback_is_refused(url):
    """The key would cross the network in clear text."""
    with pytest.raises(AccountsError) as caught:
        transport.base_url({transport.BASE_URL_ENV: url})
    assert caught.value.code == "declaration_invalid"
    assert url not in str(caught.value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080", "http://localhost:9", "http://[::1]:80", "http://127.3.4.5"])
def test_a_plain_http_base_url_on_loopback_is_allowed(url):
    assert transport.base_url({transport.BASE_URL_ENV: url}) == url


@pytest.mark.parametrize("environ", [{}, {transport.BASE_URL_ENV: ""}], ids=["unset", "empty"])
def test_an_unset_or_empty_base_url_is_the_anthropic_api(environ):
    assert transport.base_url(environ) == "https://api.anthropic.com"


@pytest.mark.parametrize("url", ["ftp://127.0.0.1", "ws://localhost:80", "file:///tmp", "127.0.0.1:8080"])
def test_a_base_url_of_another_scheme_is_refused_even_on_loopback(url):
    with pytest.raises(AccountsError) as caught:
        transport.base_url({transport.BASE_URL_ENV: url})
    assert caught.value.code == "declaration_invalid"


@pytest.mark.parametrize("url", [
    "https://api.example.com?zq=zv", "https://api.example.com/#zf", "https://zu:zp@api.example.com",
    "https://zu@api.example.com", "https://:zp@api.example.com", "http://127.0.0.1:9/?zq=zv", "http://127.0.0.1:9#zf",
])
def test_a_base_url_carrying_credentials_a_query_or_a_fragment_is_refused_without_repeating_it(url):
    with pytest.raises(AccountsError) as caught:
        transport.base_url({transport.BASE_URL_ENV: url})
    assert caught.value.code == "declaration_invalid"
    assert not any(part in str(caught.value) for part in ("zq", "zv", "zf", "zu", "zp"))


class _Recorder:
    """A loopback origin that records the header names of every request it receives."""

    def __init__(self):
        self.requests = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                outer.requests.append({name.lower(): value for name, value in self.headers.items()})
                self.send_response(200)
                self.send_header("content-length", "0")
                self.send_header("connection", "close")
                self.end_headers()

            do_GET = do_POST = do_PUT = _any

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._server.shutdown()
        self._server.server_close()


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("status", [307, 308])
def test_a_redirect_to_another_origin_is_not_followed_and_the_key_never_reaches_it(
    hostile_account, ledger_path, canary_key, status, use_async
):
    """The key header goes only to the validated base URL: a redirect is an answer, an unknown
    failure with a code, never a second request (an outside probe saw the key arrive)."""
    with _Recorder() as elsewhere:
        target = elsewhere.base_url + "/v1/messages"
        hostile_account.answer = lambda request: Reply(status, {"location": target}, b"")
        error = ask(use_async)
        assert elsewhere.requests == [], "the redirect was followed"
    assert isinstance(error, llm.ModelError) and error.code == "provider_error"
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"], row["http_status"]) == ("open", "provider_error", status)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("variable", ["HTTP_PROXY", "ALL_PROXY", "http_proxy"])
def test_a_proxy_named_in_the_environment_is_not_used(hostile_account, monkeypatch, variable, use_async):
    """No proxy from the environment sees the key header: the client trusts nothing there."""
    with _Recorder() as proxy:
        monkeypatch.setenv(variable, proxy.base_url)
        monkeypatch.setattr(transport, "_shared", {})  # a pool made while the variable is set
        hostile_account.answer = lambda request: Reply(429, {}, documented_error("rate_limit_error"))
        try:
            error = ask(use_async)  # an async pool is made for each event loop
        finally:
            transport._close_shared()
        assert proxy.requests == []
    assert len(hostile_account.requests) == 1
    assert isinstance(error, llm.ModelError) and error.code == "rate_limited"


# --- What a timeout proves (docs/architecture.md "Failover") --------------------------------------


def test_a_read_timeout_after_the_request_was_sent_stays_open_never_settled_at_zero(
    canary_key, user_path, ledger_path, monkeypatch
):
    """The request arrived; only the answer is late. Unknown is never zero."""
    from llm_accounts.declarations import Account, save_accounts_file
    from llm_accounts.money import NANO

    (user_path / "keys.json").write_text(json.dumps({"ALPHA_KEY": canary_key}))
    save_accounts_file([Account("alpha", "ALPHA_KEY", 20 * NANO)], None)
    monkeypatch.setattr(transport, "TIMEOUT", httpx.Timeout(0.5, connect=10.0))
    monkeypatch.setattr(transport, "_shared", {})  # a pool made with the short read timeout
    with Stalling() as server:
        server.pieces = [Stalling.STALL]  # reads the request, then answers nothing
        monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", server.base_url)
        try:
            error = ask()
        finally:
            transport._close_shared()
        assert server.requests == 1
    assert isinstance(error, llm.ModelError) and error.code == "transport_error"
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"], row["cost_nusd"]) == ("open", "transport_error", None)
    assert row["ceiling_nusd"] > 0


@pytest.mark.parametrize("error", [
    httpx.ReadTimeout("late"), httpx.WriteTimeout("late"), httpx.ReadError("broke"), httpx.WriteError("broke"),
    httpx.RemoteProtocolError("broke"),
], ids=lambda error: type(error).__name__)
def test_a_failure_after_the_connection_was_made_is_not_proof_of_never_sent(error):
    assert transport.describe_failure(error).never_sent is False


@pytest.mark.parametrize("error", [httpx.ConnectError("no"), httpx.ConnectTimeout("no")],
                         ids=lambda error: type(error).__name__)
def test_a_connection_never_made_proves_never_sent(error):
    assert transport.describe_failure(error).never_sent is True


def _raised_from(error, cause):
    try:
        raise error from cause
    except httpx.HTTPError as raised:
        return raised


@pytest.mark.parametrize("cause, kind", [
    (ConnectionRefusedError(errno.ECONNREFUSED, "refused"), "connection refused"),
    (socket.gaierror(socket.EAI_NONAME, "unknown"), "host name not resolved"),
    (OSError(errno.ENETUNREACH, "unreachable"), "network unreachable"),
], ids=["refused", "not-resolved", "unreachable"])
def test_a_failed_connection_is_described_by_its_cause(cause, kind):
    """The words a person reads come from the errno under httpx's exception, not its type alone."""
    assert transport.describe_failure(_raised_from(httpx.ConnectError("failed"), cause)).kind == kind


# --- Which refusals settle at zero (docs/architecture.md "Attempt outcomes") -----------------------


@pytest.mark.parametrize("status, error_type", [(401, "authentication_error"), (403, "permission_error")])
def test_a_documented_401_or_403_settles_at_zero_and_blocks(hostile_account, ledger_path, status, error_type):
    hostile_account.answer = lambda request: Reply(status, {"content-type": "application/json"},
                                                   documented_error(error_type))
    error = ask()
    assert isinstance(error, llm.ModelError) and error.code == "auth_failed"
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"], row["cost_nusd"], row["http_status"]) == ("settled", "auth_required", 0, status)
    db = sqlite3.connect(ledger_path)
    assert db.execute("SELECT block_reason FROM account WHERE name = 'alpha'").fetchone() == ("auth_failed",)
    db.close()


@pytest.fixture
def ledger(ledger_location):
    with Ledger(ledger_location) as ledger:
        yield ledger


def quote():
    return Quote("claude-sonnet-4-5-20250929", 10_000, "2026-11-01", "ab" * 32)


@pytest.mark.parametrize("status", [500, 502, 503, 528, 530, 599, 399, 302])
def test_the_ledger_refuses_a_zero_cost_refusal_outside_4xx_and_529(ledger, work, status):
    """A second line of defence behind the routing rule: only a 4xx or 529 proves nothing was
    processed, so the ledger itself refuses to settle anything else at zero."""
    ledger.reserve(Scope("conversation", "c1"), "a1", quote(), [work], now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.settle("a1", Refused("overloaded", status, "api_error", "other", "provider_outage"), now=T0)
    assert caught.value.code == "declaration_invalid" and "http_status" in caught.value.message
    [(state, cost)] = ledger._conn.execute("SELECT state, cost_nusd FROM attempt").fetchall()
    assert (state, cost) == ("open", None)


@pytest.mark.parametrize("status, outcome", [(400, "request_rejected"), (499, "request_rejected"), (529, "overloaded")])
def test_the_ledger_settles_a_documented_4xx_or_529_refusal_at_zero(ledger, work, status, outcome):
    ledger.reserve(Scope("conversation", "c1"), "a1", quote(), [work], now=T0)
    assert ledger.settle("a1", Refused(outcome, status, "api_error", "other", "semantic"), now=T0) == "settled"
    [(state, cost)] = ledger._conn.execute("SELECT state, cost_nusd FROM attempt").fetchall()
    assert (state, cost) == ("settled", 0)


# --- What a binding is keyed by (docs/architecture.md "Scope") ------------------------------------


def test_a_binding_is_keyed_by_scope_kind_as_well_as_id(ledger, work, home):
    """A prompt with no conversation has a private instance scope; one whose id happens to equal
    a conversation's id is a different scope and is not bound to that conversation's account."""
    first = ledger.reserve(Scope("conversation", "same-id"), "a1", quote(), [work, home], now=T0)
    assert first.new_binding
    second = ledger.reserve(Scope("instance", "same-id"), "a2", quote(), [work, home], now=T0)
    assert second.new_binding
    kinds = ledger._conn.execute("SELECT scope_kind FROM binding WHERE scope_id = 'same-id' ORDER BY scope_kind").fetchall()
    assert [kind for (kind,) in kinds] == ["conversation", "instance"]


@pytest.mark.parametrize("outcome", ["complete", "not_sent", "made_up"])
def test_the_ledger_refuses_an_unknown_outcome_that_is_not_one(ledger, work, outcome):
    """complete and not_sent are proofs, not unknowns: they settle only with their evidence."""
    from llm_accounts.ledger import Unknown

    ledger.reserve(Scope("conversation", "c1"), "a1", quote(), [work], now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.settle("a1", Unknown(outcome), now=T0)
    assert caught.value.code == "declaration_invalid" and "outcome" in caught.value.message


@pytest.mark.parametrize("status", [True, "500", 99, 1000, 500.0])
def test_the_ledger_refuses_an_unknown_outcome_whose_status_is_not_an_http_status(ledger, work, status):
    from llm_accounts.ledger import Unknown

    ledger.reserve(Scope("conversation", "c1"), "a1", quote(), [work], now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.settle("a1", Unknown("provider_error", "provider_outage", status), now=T0)
    assert caught.value.code == "declaration_invalid" and "http_status" in caught.value.message
