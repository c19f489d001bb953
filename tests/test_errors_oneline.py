"""Every error a user can meet is the true one, on one line, with its code (docs/errors.md).

Prompts run through llm's own CLI against the stand-in (or a closed port); each test reads the
one line the user sees and what the ledger recorded.
"""

import json
import re
import socket
import sqlite3

import pytest
from click.testing import CliRunner
from llm.cli import cli

from hostile import hostile_account, text_reply  # noqa: F401  (fixture)
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)
from llm_accounts import ledger as ledger_module
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.money import NANO
from routed_helpers import attempts, llm_cli

MODEL = "claude-routed/claude-haiku-4-5"
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


def one_line(result):
    """The single line a failed command printed; fails when it printed more or exited 0."""
    assert result.exit_code == 1, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    return lines[0]


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def only_alpha(user_path):
    save_accounts_file([Account("alpha", "ALPHA_KEY", 20 * NANO)], None)


# --- Move-on that runs out ---------------------------------------------------------------------


def test_a_move_on_that_runs_out_shows_the_last_real_failure_and_the_accounts_tried(accounts, ledger_path):
    accounts.set_behaviour("alpha", "rate_limited")
    accounts.set_behaviour("beta", "rate_limited")
    line = one_line(llm_cli("-m", MODEL, "-o", "retries", "0", "hello"))
    first, last = [row["account"] for row in attempts(ledger_path)]
    assert re.fullmatch(
        rf"Error: rate_limited: account '{last}' answered HTTP 429 rate_limit_error; nothing was billed "
        rf"\(attempt {UUID}\); also tried {first} \(HTTP 429\); no other account could take it",
        line,
    ), line
    assert "no_account_available" not in line


def test_one_account_answering_429_shows_rate_limited_not_no_account_available(accounts, user_path, ledger_path):
    only_alpha(user_path)
    accounts.set_behaviour("alpha", "rate_limited")
    line = one_line(llm_cli("-m", MODEL, "-o", "retries", "0", "hello"))
    [row] = attempts(ledger_path)
    assert line == (
        f"Error: rate_limited: account 'alpha' answered HTTP 429 rate_limit_error; nothing was billed "
        f"(attempt {row['id']}); no other account could take it"
    )


def test_nothing_listening_is_a_transport_error_naming_the_account_and_failure_class(
    accounts, user_path, ledger_path, monkeypatch
):
    only_alpha(user_path)
    url = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", url)
    line = one_line(llm_cli("-m", MODEL, "-o", "retries", "0", "hello"))
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"]) == ("settled", "not_sent")
    assert line == (
        f"Error: transport_error: account 'alpha' could not be reached at {url} (set by LLM_ACCOUNTS_BASE_URL) "
        "(connection refused, failure class transport); "
        f"nothing was sent (attempt {row['id']}); no other account could take it"
    )


def test_a_pinned_account_that_cannot_be_reached_names_itself_without_move_on(accounts, ledger_path, monkeypatch):
    url = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", url)
    line = one_line(llm_cli("-m", MODEL, "-o", "retries", "0", "-o", "account", "beta", "hello"))
    [row] = attempts(ledger_path)
    assert line == (
        f"Error: transport_error: account 'beta' could not be reached at {url} (set by LLM_ACCOUNTS_BASE_URL) "
        "(connection refused, failure class transport); "
        f"nothing was sent (attempt {row['id']})"
    )


# --- ledger_busy ---------------------------------------------------------------------------------


@pytest.fixture
def short_lock_wait(monkeypatch):
    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_S", 0.3)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_ledger_busy_after_the_answer_delivers_it_and_says_the_attempt_stays_open(
    hostile_account, ledger_path, user_path, short_lock_wait, stream
):
    holder = {}

    def answer(request):
        # Another process takes the ledger's write lock while the provider answers.
        holder["db"] = sqlite3.connect(ledger_path, isolation_level=None, check_same_thread=False)
        holder["db"].execute("BEGIN IMMEDIATE")
        return text_reply(request.stream, text="The answer, delivered.")

    hostile_account.answer = answer
    args = ["-m", MODEL, "hello"] + ([] if stream else ["--no-stream"])
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    holder["db"].execute("ROLLBACK")
    holder["db"].close()
    # The provider answered in full and billed it: the answer is not thrown away.
    assert result.exit_code == 0, result.output
    assert "The answer, delivered." in result.output
    [row] = attempts(ledger_path)
    [warning] = [line for line in result.output.splitlines() if "ledger_busy" in line]
    assert warning.endswith(
        f"Warning: ledger_busy: the ledger {ledger_path} stayed locked by another process for 0.3 s; the attempt's outcome was not "
        f"written (the answer was delivered, but attempt {row['id']} on account 'alpha' could not be settled: it stays "
        f"open with its ceiling until 'llm accounts reconcile {row['id']}'; do not retry the prompt, it was already answered)"
    )
    assert "nothing was sent" not in result.output
    assert (row["state"], row["outcome"]) == ("open", None)
    assert row["ceiling_nusd"] > 0
    logged = sqlite3.connect(user_path / "logs.db").execute("select response_json from turns").fetchall()
    assert len(logged) == 1


def test_ledger_busy_before_sending_says_nothing_was_sent(accounts, ledger_path, short_lock_wait):
    llm_cli("-m", MODEL, "create the ledger")
    db = sqlite3.connect(ledger_path, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    sent = len(accounts.requests)
    try:
        line = one_line(llm_cli("-m", MODEL, "hello"))
    finally:
        db.execute("ROLLBACK")
        db.close()
    assert line == f"Error: ledger_busy: the ledger {ledger_path} stayed locked by another process for 0.3 s; nothing was sent, try again"
    assert len(accounts.requests) == sent


# --- Bad input, refused before anything is reserved -----------------------------------------------


@pytest.mark.parametrize(
    "options, expected",
    [
        (["-o", "max_tokens", "-5"], "option max_tokens: must be a positive integer"),
        (["-o", "max_tokens", "many"], "option max_tokens: input should be a valid integer"),
        (["-o", "cache", "2h"], "option cache: must be one of: none, 5m, 1h"),
        (["-o", "temperature", "3"], "option temperature: must be between 0.0 and 1.0"),
        (["-o", "thinking_budget", "10"], "option thinking_budget: must be an integer of at least 1024"),
        (["-o", "no_such_option", "1"], "option no_such_option: claude-routed has no such option"),
        (["-o", "temperature", "0.5", "-o", "top_p", "0.5"], "options temperature and top_p: set one of them, not both"),
    ],
    ids=["negative", "not-a-number", "cache", "range", "thinking-budget", "unknown", "exclusive"],
)
def test_an_option_mistake_is_one_line_naming_the_option_and_rule(accounts, ledger_path, options, expected):
    line = one_line(llm_cli("-m", MODEL, *options, "hello"))
    assert line.startswith(f"Error: declaration_invalid: {expected}"), line
    assert attempts(ledger_path) == []
    assert accounts.requests == []


def test_an_option_mistake_never_repeats_the_value(accounts, canary_key):
    line = one_line(llm_cli("-m", MODEL, "-o", "max_tokens", canary_key, "hello"))
    assert canary_key[8:16] not in line and "sk-ant" not in line


@pytest.mark.parametrize("prompt", ["", "   \n\t"], ids=["empty", "blank"])
def test_an_empty_prompt_is_refused_before_anything_is_reserved(accounts, ledger_path, prompt):
    line = one_line(llm_cli("-m", MODEL, prompt))
    assert line == "Error: declaration_invalid: the prompt is empty: give some text, an attachment or a tool result to send"
    assert attempts(ledger_path) == []
    assert accounts.requests == []


@pytest.mark.parametrize("where", ["prompt", "system prompt"])
def test_text_that_is_not_utf8_is_refused_in_one_line(accounts, ledger_path, where):
    # How Python hands a program an argument holding the bytes ff fe: as lone surrogates.
    text = "caf\udcff\udcfe"
    args = ["-m", MODEL, text] if where == "prompt" else ["-m", MODEL, "-s", text, "hello"]
    line = one_line(llm_cli(*args))
    assert line == (
        f"Error: declaration_invalid: the {where} holds bytes that are not UTF-8 text: "
        "re-encode it as UTF-8 (for example with iconv)"
    )
    assert attempts(ledger_path) == []


def test_thinking_budget_above_max_tokens_names_both_options(accounts, ledger_path):
    line = one_line(llm_cli("-m", MODEL, "-o", "thinking_budget", "2048", "-o", "max_tokens", "1024", "hello"))
    assert line == (
        "Error: declaration_invalid: options max_tokens and thinking_budget: max_tokens must be greater than thinking_budget"
    )


# --- Messages read right -------------------------------------------------------------------------


def test_a_ceiling_over_every_budget_never_suggests_the_model_in_use(accounts, user_path, ledger_path):
    save_accounts_file([Account("alpha", "ALPHA_KEY", NANO // 100)], None)
    line = one_line(llm_cli("-m", MODEL, "hello"))
    assert line.startswith("Error: budget_exhausted: ")
    assert "claude-routed/claude-haiku-4-5" not in line
    assert line.endswith("lower -o max_tokens or raise the budget")


def test_a_ceiling_over_every_budget_on_a_large_window_suggests_a_smaller_one(accounts, user_path):
    save_accounts_file([Account("alpha", "ALPHA_KEY", NANO)], None)
    line = one_line(llm_cli("-m", "claude-routed/claude-sonnet-4-6", "hello"))
    assert "try claude-routed/claude-haiku-4-5 (a smaller window) or raise the budget" in line


def test_a_ceiling_that_fits_a_budget_whose_room_is_held_never_advises_a_smaller_model(
    accounts, user_path, ledger_path, monkeypatch
):
    # Before: the ceiling ($8.712) was compared with the smallest budget of any account (beta's
    # $1.00), so $18 merely held on alpha's $20 budget got "choose a model with a smaller window".
    import datetime as dt

    from llm_accounts import clock
    from llm_accounts.ledger import Ledger, Scope, Unknown
    from llm_accounts.pricing.prices import Quote

    now = dt.datetime(2027, 1, 10, 12, tzinfo=dt.timezone.utc)
    monkeypatch.setattr(clock, "now", lambda: now)
    alpha = Account("alpha", "ALPHA_KEY", 20 * NANO)
    save_accounts_file([alpha, Account("beta", "BETA_KEY", NANO)], None)
    with Ledger(ledger_path) as ledger:
        ledger.reserve(Scope("conversation", "held"), "held-1", Quote("claude-sonnet-4-6", 18 * NANO, "2026-11-29", "ab" * 32),
                       [alpha], now=now)
        ledger.settle("held-1", Unknown("cancelled"), now=now)
    line = one_line(llm_cli("-m", "claude-routed/claude-sonnet-4-6", "hello"))
    assert line == (
        "Error: budget_exhausted: no account can take a new conversation: alpha: budget held by attempts left open "
        "(llm accounts reconcile --open); beta: ceiling over its budget; llm accounts status shows why"
    )


def test_a_ceiling_over_the_budget_of_every_account_that_could_take_it_advises_a_smaller_model(accounts, user_path):
    save_accounts_file([Account("alpha", "ALPHA_KEY", 3 * NANO), Account("beta", "BETA_KEY", NANO)], None)
    line = one_line(llm_cli("-m", "claude-routed/claude-sonnet-4-6", "hello"))
    assert line == (
        "Error: budget_exhausted: no account can take this prompt: its ceiling (up to $3.828) prices the model's "
        "1,000,000-token window plus max_tokens, over every budget; try claude-routed/claude-haiku-4-5 (a smaller window) "
        "or raise the budget"
    )
    assert len(line.split(": ", 2)[2]) <= 215


@pytest.mark.parametrize("delta", ["abc", "0", "-"])
def test_adjust_names_its_signed_rule(delta, monkeypatch, ledger_path):
    from llm_accounts.cli import accounts as accounts_cli

    monkeypatch.setenv("ANTHROPIC_ACCOUNTS", json.dumps([{"name": "work", "key_env": "WORK_KEY", "budget_usd": "5"}]))
    # The --delta rule is checked before the month is read or compared with any clock, so the
    # month given is only well formed: the refusal is the same whatever today is.
    result = CliRunner().invoke(accounts_cli, ["adjust", "work", "--month", "2027-01", "--delta", delta, "--source", "x"])
    line = one_line(result)
    assert line == (
        "Error: declaration_invalid: --delta: must be a non-zero signed decimal number of US dollars with at most "
        "9 fractional digits, such as 1.25 or -0.40"
    )
    assert "positive" not in line


def test_a_cooling_account_with_its_probe_in_flight_says_so_once(ledger_path):
    import datetime as dt

    from llm_accounts.errors import AccountsError
    from llm_accounts.ledger import Ledger, Scope, Unknown
    from llm_accounts.pricing.prices import Quote

    work = Account("work", "WORK_KEY", 10 * NANO)
    t0 = dt.datetime(2027, 1, 10, 12, tzinfo=dt.timezone.utc)
    quote = Quote("claude-haiku-4-5", NANO // 10, "2026-11-29", "ab" * 32)
    ledger = Ledger()
    ledger.reserve(Scope("conversation", "c1"), "a1", quote, [work], now=t0)
    ledger.settle("a1", Unknown("provider_error", "provider_outage", 500), now=t0)
    ledger.reserve(Scope("conversation", "c1"), "p1", quote, [work], now=t0 + dt.timedelta(hours=2))
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(Scope("conversation", "c1"), "a3", quote, [work], now=t0 + dt.timedelta(hours=2, seconds=1))
    assert caught.value.message.startswith(
        "account 'work' is failing (provider_outage); its probe attempt is in flight; wait for it"
    )
    assert caught.value.message.count("probe") == 1


def test_a_move_on_stopped_at_four_accounts_names_the_accounts_tried(user_path, ledger_path, monkeypatch):
    from conftest import make_key
    from llm_accounts.standin import StandIn

    names = ["a1", "a2", "a3", "a4", "a5"]
    keys = {name: make_key() for name in names}
    (user_path / "keys.json").write_text(json.dumps({f"{name.upper()}_KEY": keys[name] for name in names}))
    save_accounts_file([Account(name, f"{name.upper()}_KEY", 20 * NANO) for name in names], None)
    config = {"keys": [{"label": name, "key": keys[name], "organization": f"org-{name}", "behaviour": "rate_limited"}
                       for name in names]}
    with StandIn(config) as server:
        monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", server.base_url)
        line = one_line(llm_cli("-m", MODEL, "-o", "retries", "0", "hello"))
    tried = [row["account"] for row in attempts(ledger_path)]
    assert len(tried) == 4
    assert line.startswith(f"Error: rate_limited: account '{tried[-1]}' answered HTTP 429 rate_limit_error")
    assert line.endswith("; also tried " + ", ".join(f"{name} (HTTP 429)" for name in tried[:-1]))
