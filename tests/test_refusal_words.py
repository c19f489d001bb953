"""Every refusal is one short line naming its cause and the one command that helps
(docs/errors.md "One line"): at most 200 characters after ``Error: CODE: `` even with a long
account name, a dated model id and the new-conversation prefix; the detail is in
``llm accounts status --verbose`` and docs/errors.md."""

import datetime as dt

import pytest

from llm_accounts import health, selection
from llm_accounts.declarations import Account
from llm_accounts.selection import Facts

NOW = dt.datetime(2026, 12, 30, 23, 59, 30, tzinfo=dt.timezone.utc)  # the last minute of a credit period
LATER = NOW + dt.timedelta(minutes=7, seconds=13)
NAME = "research-team-eu"  # a long name: the words must fit with it
MODEL = "claude-sonnet-4-5-20250929"
USD = 10**9
PREFIX = "no account can take a new conversation: "  # what a new conversation puts first


def account(**fields):
    return Account(**{"name": NAME, "key_env": "RESEARCH_TEAM_EU_KEY", "budget_nusd": 20 * USD, **fields})


def facts(**fields):
    return Facts(**{"name": NAME, "month_row": True, "budget_nusd": 20 * USD,
                    "month_key_env": "RESEARCH_TEAM_EU_KEY", "in_ledger": True, **fields})


def cooling(failure_class, **fields):
    return health.Health(state="cooling", failure_class=failure_class, since=NOW, last_failure_at=NOW,
                         cooldown_until=LATER, **fields)


def refused(acct=None, f=None, client=None, others=()):
    verdict = selection.verdict(acct or account(), f or facts(), USD, MODEL, NOW, client=client, others=others)
    assert verdict.code is not None
    return verdict


STATES = {
    "does not serve the model": lambda: refused(account(models=("claude-haiku-4-5-20251001",))),
    "serves only listed clients": lambda: refused(account(clients=(("ci-bot", USD),), clients_only=True), client="someone-else"),
    "blocked": lambda: refused(f=facts(block_reason="ceiling_exceeded")),
    "blocked by a manual reconcile's conflict": lambda: refused(
        f=facts(block_reason="settlement_conflict", block_source="reconcile:3c4e598b-3b64-46b1-9def-3d3a9f1775d0")),
    "budget fixed for the period": lambda: refused(account(budget_nusd=25 * USD)),
    "key_env fixed for the period": lambda: refused(account(key_env="ANOTHER_KEY_VARIABLE")),
    "key held by another name": lambda: refused(
        f=facts(month_row=False),
        others=[facts(name="research-team-us", month_key_env="RESEARCH_TEAM_EU_KEY")]),
    "auth failed": lambda: refused(f=facts(record=health.Health(state="failing", failure_class="auth", since=NOW))),
    "cooling": lambda: refused(f=facts(record=cooling("rate_limited"))),
    "cooling from this machine": lambda: refused(f=facts(host_record=cooling("transport"))),
    "cooling, probe in flight": lambda: refused(f=facts(record=cooling("provider_outage"), probe_taken=True)),
    "out of credit": lambda: refused(f=facts(record=cooling("quota_exhausted"))),
    "out of credit, probe in flight": lambda: refused(f=facts(record=cooling("quota_exhausted"), probe_taken=True)),
    "model unavailable here": lambda: refused(
        f=facts(model_record=health.ModelHealth(model=MODEL, since=NOW, last_failure_at=NOW, cooldown_until=LATER))),
}


@pytest.mark.parametrize("state", sorted(STATES))
def test_a_refusal_fits_one_short_line_with_a_long_name(state):
    verdict = STATES[state]()
    line = PREFIX + verdict.message
    assert "\n" not in line
    assert len(line) <= 200, f"{len(line)}: {line}"


@pytest.mark.parametrize("state", sorted(set(STATES) - {"does not serve the model", "key held by another name"}))
def test_a_refusal_names_the_one_command_that_helps(state):
    message = STATES[state]().message
    helps = ("llm accounts unblock", "llm accounts set", "-o client", "wait for it", "let through",
             "declare that key_env")
    assert any(words in message for words in helps), message


def test_a_budget_fixed_for_the_period_names_the_exact_budget_to_declare_again():
    message = refused(account(budget_nusd=25 * USD), facts(budget_nusd=20 * USD + 123_456_789)).message
    assert message.endswith(f"llm accounts set {NAME} --budget 20.123456789")
    assert "$20.12 " not in message  # the figure is exact, never rounded


def test_the_key_held_by_another_name_names_both_accounts_and_never_a_key():
    message = STATES["key held by another name"]().message
    assert "'research-team-us'" in message and f"'{NAME}'" in message
    assert "RESEARCH_TEAM_EU_KEY" in message  # the variable's name, which is not secret


def test_out_of_credit_says_when_it_is_tried_again_and_how_to_clear_it():
    message = STATES["out of credit"]().message
    assert message == (
        f"account '{NAME}' is out of credit at the provider (quota_exhausted) until 00:06:43 UTC; "
        f"after adding credit: llm accounts unblock {NAME}"
    )
