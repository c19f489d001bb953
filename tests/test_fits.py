"""A limit below the default model's ceiling is said early (docs/pricing.md "Small budgets").

``llm accounts add`` and ``llm accounts status`` warn, never refuse, when a budget, daily budget or
client cap can never admit a plain ``claude-routed`` prompt, and name what fits: a lower
``-o max_tokens``, or a model. ``llm accounts prices`` shows every model's ceiling at its default
``max_tokens``.
"""

import pytest
from click.testing import CliRunner

from llm_accounts.capabilities import for_model, routed_max_tokens
from llm_accounts.cli import accounts
from llm_accounts.declarations import load_declaration
from llm_accounts.ladder import quote_for
from llm_accounts.pricing import fits, prices
from llm_accounts.money import usd_fine

DEFAULT = "claude-sonnet-4-6"  # the shipped default of plain claude-routed


def run(*args):
    return CliRunner().invoke(accounts, list(args), catch_exceptions=False)


@pytest.fixture(autouse=True)
def shipped_default(monkeypatch):
    monkeypatch.delenv("LLM_ACCOUNTS_MODEL", raising=False)


def warned(result):
    return [line for line in result.stderr.splitlines() if line.startswith("Warning: account")]


def test_add_warns_when_the_budget_is_below_the_default_models_ceiling_and_names_a_model_that_fits():
    # $3.00 is below even the window's input ($3.30 with the US-only 1.1x), so no max_tokens fits.
    result = run("add", "small", "--key-env", "SMALL_KEY", "--budget", "3.00")
    assert result.exit_code == 0
    assert [account.name for account in load_declaration().accounts] == ["small"]  # added all the same
    assert warned(result) == [
        "Warning: account 'small': its budget of $3.00 is below the $3.828 ceiling a plain claude-routed prompt "
        "reserves (claude-sonnet-4-6 at its default max_tokens 32,000), so such a prompt is never admitted here; "
        "claude-routed/claude-sonnet-5-5 fits ($2.552 ceiling at its default max_tokens), or raise the budget"
    ]


def test_add_names_the_max_tokens_that_fits_when_the_window_alone_fits():
    result = run("add", "work", "--key-env", "WORK_KEY", "--budget", "50.00", "--daily-budget", "3.50")
    assert result.exit_code == 0
    [line] = warned(result)
    # The ceiling covers US-only inference at 1.1x (docs/pricing.md "Inference geo (data residency)").
    assert "its daily budget of $3.50 is below the $3.828 ceiling" in line
    assert line.endswith("; -o max_tokens 12121 or lower fits, or raise the daily budget")
    assert quote_for(DEFAULT, max_tokens=12121).ceiling_nusd <= 3_500_000_000 < quote_for(DEFAULT, max_tokens=12122).ceiling_nusd


def test_add_warns_for_a_client_dollar_cap_and_a_client_token_cap():
    result = run(
        "add", "shared", "--key-env", "SHARED_KEY", "--budget", "50.00",
        "--client-cap", "ci-bot=2.00", "--client-cap", "ci-bot=1000000tokens",
    )
    assert result.exit_code == 0
    dollars, tokens = warned(result)
    assert "its client 'ci-bot' cap of $2.00 is below the $3.828 ceiling" in dollars
    assert "its client 'ci-bot' cap of 1,000,000 tokens is below the 1,032,000-token ceiling" in tokens
    assert "claude-routed/claude-haiku-4-5-20251001 fits (232,000-token ceiling" in tokens


def test_add_says_nothing_when_every_limit_fits():
    result = run("add", "work", "--key-env", "WORK_KEY", "--budget", "50.00", "--daily-budget", "9.00")
    assert result.exit_code == 0
    assert warned(result) == []


def test_the_default_model_is_the_one_plain_claude_routed_sends_to(monkeypatch):
    monkeypatch.setenv("LLM_ACCOUNTS_MODEL", "claude-haiku-4-5")
    result = run("add", "small", "--key-env", "SMALL_KEY", "--budget", "5.00")
    assert warned(result) == []


def test_an_account_that_does_not_serve_the_default_model_is_not_warned_about_it():
    result = run("add", "small", "--key-env", "SMALL_KEY", "--budget", "5.00", "--model", "claude-haiku-4-5-20251001")
    assert result.exit_code == 0
    assert warned(result) == []


def test_status_says_nothing_of_a_declaration_warning_without_verbose():
    # Before: every run printed it, so a cron job running status was mailed it every time.
    run("add", "small", "--key-env", "SMALL_KEY", "--budget", "5.00")
    result = run("status")
    assert result.exit_code == 0
    assert warned(result) == []


def test_status_verbose_warns_about_each_declared_account_and_still_shows_the_table():
    run("add", "small", "--key-env", "SMALL_KEY", "--budget", "3.00")
    run("add", "work", "--key-env", "WORK_KEY", "--budget", "50.00")
    result = run("status", "--verbose")
    assert result.exit_code == 0
    assert [line.split("'")[1] for line in warned(result)] == ["small"]
    assert any(line.startswith("small ") for line in result.stdout.splitlines())


def test_status_json_carries_the_warnings():
    import json

    run("add", "small", "--key-env", "SMALL_KEY", "--budget", "3.00")
    result = run("status", "--json")
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert data["accounts"][0]["name"] == "small"
    [line] = data["warnings"]
    assert line.startswith("Warning: account 'small': its budget of $3.00 is below the $3.828 ceiling")


def test_the_largest_max_tokens_that_fits_is_exact_in_tokens_too():
    revision = prices.current_revision()
    window = revision.model(DEFAULT).context_window
    assert fits.largest_max_tokens(DEFAULT, revision, "tokens", window + 1234) == 1234
    assert fits.largest_max_tokens(DEFAULT, revision, "tokens", window) is None


def test_prices_shows_every_active_models_ceiling_at_its_default_max_tokens():
    result = run("prices")
    rows = {line.split()[0]: line.split() for line in result.output.splitlines() if line.startswith("claude-")}
    revision = prices.current_revision()
    for model in revision.models.values():
        row = rows[model.id]
        if model.status == "retired":
            assert row[4:6] == ["-", "-"]
        else:
            assert row[4:6] == [f"{routed_max_tokens(for_model(model.id)):,}", usd_fine(quote_for(model.id).ceiling_nusd)]


def nova_book(context_window, max_output):
    """The price book with the user's own revision of claude-nova-6, a model nothing ships."""
    from llm_accounts.pricing import price_book

    nova = {
        "id": "claude-nova-6", "display_name": "Claude Nova 6", "context_window": context_window,
        "max_output": max_output, "status": "active",
        "rates": {"input": 2500, "write_5m": 3000, "write_1h": 4000, "cache_read": 200, "output": 10000},
    }
    data = {"revision": "2026-12-05-mine", "applies_from": "2026-12-05", "sources": ["https://example.com/pricing"], "models": [nova]}
    return price_book.build(prices.current_revision(), [prices.revision_from_dict(data, prices.USER)])


def small_account(budget_nusd):
    from llm_accounts.declarations import Account

    return Account(name="small", key_env="SMALL_KEY", budget_nusd=budget_nusd)


def test_a_shipped_model_that_fits_is_named_before_one_only_the_users_price_file_knows():
    book = nova_book(1_000_000, 32_000)
    # Nova's ceiling fits the budget and is larger than the shipped model's that also fits.
    assert quote_for("claude-sonnet-5-5", book).ceiling_nusd < quote_for("claude-nova-6", book).ceiling_nusd < 3 * 10**9
    [line] = fits.warnings(small_account(3 * 10**9), book)
    assert line.endswith("; claude-routed/claude-sonnet-5-5 fits ($2.552 ceiling at its default max_tokens), or raise the budget")


def test_a_model_only_the_users_price_file_knows_is_named_when_no_shipped_model_fits():
    book = nova_book(10_000, 1_000)
    nova = quote_for("claude-nova-6", book).ceiling_nusd
    shipped = prices.current_revision()
    assert all(quote_for(model.id).ceiling_nusd > nova for model in shipped.models.values() if model.status != "retired")
    [line] = fits.warnings(small_account(nova), book)
    assert f"; claude-routed/claude-nova-6 fits ({usd_fine(nova)} ceiling at its default max_tokens)" in line


def test_a_budget_no_model_fits_at_its_default_names_a_model_whose_window_fits_with_a_lower_max_tokens():
    # $0.30: below every model's ceiling at its default max_tokens (Haiku 4.5's is $0.36), above
    # Haiku 4.5's 200,000-token window at $1 a million ($0.20), so 20,000 output tokens at $5 fit.
    result = run("add", "tiny", "--key-env", "TINY_KEY", "--budget", "0.30")
    [line] = warned(result)
    assert line.endswith("; claude-routed/claude-haiku-4-5-20251001 with -o max_tokens 20000 or lower fits, or raise the budget")
    haiku = "claude-haiku-4-5-20251001"
    assert quote_for(haiku, max_tokens=20_000).ceiling_nusd <= 300_000_000 < quote_for(haiku, max_tokens=20_001).ceiling_nusd


def test_a_budget_below_every_models_window_says_none_fits():
    result = run("add", "micro", "--key-env", "MICRO_KEY", "--budget", "0.01")
    [line] = warned(result)
    assert line.endswith("; no model's window fits it (llm accounts prices), or raise the budget")
