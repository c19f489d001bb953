"""Where requests go, and what a wrong place looks like (docs/security.md "Sending a key",
docs/errors.md "From an answer to a code").

A base URL is the API's root: `/v1/messages` is added to it. One that already ends in `/v1` would
send every prompt to `/v1/v1/messages`, whose 404 is not a model's, so it is refused before
anything is reserved; and no 404 but the provider's own answer about a model cools a model.
"""

import socket

import pytest
from llm_accounts.errors import AccountsError
from llm_accounts.wire import transport
from llm_accounts.wire.classify import failure_class, parse_error_body
from routed_helpers import attempts, llm_cli
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

MODEL = "claude-routed/claude-haiku-4-5"


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("suffix", ["/v1", "/v1/", "/v1/messages", "/proxy/v1"])
def test_a_base_url_ending_in_the_api_version_is_refused_saying_what_to_give(suffix):
    with pytest.raises(AccountsError) as refused:
        transport.base_url({"LLM_ACCOUNTS_BASE_URL": "http://127.0.0.1:8000" + suffix})
    assert refused.value.code == "declaration_invalid"
    assert str(refused.value) == (
        "declaration_invalid: LLM_ACCOUNTS_BASE_URL: give the API's root without /v1 (such as "
        "http://127.0.0.1:8765 or https://api.anthropic.com); /v1/messages is added to it"
    )


@pytest.mark.parametrize("url", ["https://api.anthropic.com", "http://127.0.0.1:8765/", "https://gateway.example/anthropic"])
def test_a_root_or_a_path_prefix_is_taken(url):
    assert transport.base_url({"LLM_ACCOUNTS_BASE_URL": url}) == url.rstrip("/")


def test_a_prompt_with_a_v1_base_url_is_refused_before_anything_is_reserved(accounts, ledger_path, monkeypatch):
    monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", accounts.base_url + "/v1")
    result = llm_cli("-m", MODEL, "hello")
    assert result.exit_code == 1
    assert result.output.startswith("Error: declaration_invalid: LLM_ACCOUNTS_BASE_URL: give the API's root without /v1")
    assert attempts(ledger_path) == []
    assert accounts.requests == []


# Which 404 cools a model


def body(message, error_type="not_found_error"):
    return ('{"type": "error", "error": {"type": "%s", "message": "%s"}}' % (error_type, message)).encode()


@pytest.mark.parametrize(
    "message",
    ["model: claude-nope", "Claude Fable 5 is not available. Please use Opus 4.8. Learn more: https://example"],
)
def test_the_providers_404_about_a_model_cools_the_model(message):
    assert failure_class(404, parse_error_body(body(message))) == "model_unavailable"


@pytest.mark.parametrize(
    "raw",
    [
        body("Not Found"),
        body("The requested resource could not be found."),
        b"<html>404 Not Found</html>",
        b"",
    ],
    ids=["path not found", "resource not found", "html", "empty"],
)
def test_a_404_that_does_not_name_a_model_never_cools_one(raw):
    assert failure_class(404, parse_error_body(raw)) == "semantic"


def model_health(ledger_path):
    import sqlite3

    db = sqlite3.connect(ledger_path)
    try:
        return db.execute("SELECT * FROM model_health").fetchall()
    finally:
        db.close()


def test_a_wrong_path_under_the_base_url_is_a_rejection_that_cools_nothing(accounts, ledger_path, monkeypatch):
    monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", accounts.base_url + "/gateway")
    result = llm_cli("-m", MODEL, "-o", "account", "alpha", "hello")
    assert result.exit_code == 1
    assert "HTTP 404 not_found_error" in result.output
    [row] = attempts(ledger_path)
    assert row["failure_class"] == "semantic"
    assert model_health(ledger_path) == []
    # The next prompt with the right URL goes through at once.
    monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", accounts.base_url)
    assert llm_cli("-m", MODEL, "-o", "account", "alpha", "hello").exit_code == 0


# A server that is not there


def test_a_stopped_server_is_named_by_its_url_and_the_variable_that_set_it(accounts, user_path, ledger_path, monkeypatch):
    url = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", url)
    result = llm_cli("-m", MODEL, "-o", "retries", "0", "-o", "account", "alpha", "hello")
    assert result.exit_code == 1
    assert f"account 'alpha' could not be reached at {url} (set by LLM_ACCOUNTS_BASE_URL) (connection refused" in result.output


def test_the_default_base_url_is_named_as_the_default():
    assert transport.where({}) == "at https://api.anthropic.com (the default; LLM_ACCOUNTS_BASE_URL sets another)"


@pytest.mark.parametrize("url", ["https://gateway.example/sk-ant-api03-abcdefgh", "https://gateway.example/x/SK-ANT-token"])
def test_a_base_url_holding_a_key_is_refused_without_repeating_it(url):
    with pytest.raises(AccountsError) as refused:
        transport.base_url({"LLM_ACCOUNTS_BASE_URL": url})
    assert refused.value.code == "declaration_invalid"
    assert "gateway" not in str(refused.value) and "abcdefgh" not in str(refused.value)


def test_an_unreachable_server_is_named_by_its_origin_never_its_path():
    where = transport.where({"LLM_ACCOUNTS_BASE_URL": "https://gateway.example/tenant-7f3a9c/anthropic"})
    assert where == "at https://gateway.example (set by LLM_ACCOUNTS_BASE_URL)"


# ANTHROPIC_BASE_URL (issue 33, point 4): said to be ignored, once, never followed. It is the SDK's
# variable, often set for another tool, and following it would send every declared key there.


@pytest.fixture
def unsaid(monkeypatch):
    monkeypatch.setattr(transport, "_sdk_base_url_said", [])


def test_anthropic_base_url_alone_is_said_to_be_ignored_once_without_its_value(unsaid, capsys):
    environ = {"ANTHROPIC_BASE_URL": "https://gateway.example.com/secret-path"}
    assert transport.base_url(environ) == "https://api.anthropic.com"
    assert transport.base_url(environ) == "https://api.anthropic.com"
    err = capsys.readouterr().err
    assert err == (
        "llm-accounts: ANTHROPIC_BASE_URL is set and not used: routed prompts go to https://api.anthropic.com; "
        "set LLM_ACCOUNTS_BASE_URL to send them elsewhere (https://, or http:// on loopback)\n"
    )
    assert "gateway" not in err


def test_anthropic_base_url_beside_llm_accounts_base_url_is_not_mentioned(unsaid, capsys):
    environ = {"ANTHROPIC_BASE_URL": "https://gateway.example.com", "LLM_ACCOUNTS_BASE_URL": "http://127.0.0.1:8765"}
    assert transport.base_url(environ) == "http://127.0.0.1:8765"
    assert capsys.readouterr().err == ""
