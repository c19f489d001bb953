"""scripts/demo (llm accounts demo) shows each thing the product is for, as a user would type it."""

import re

import pytest
from click.testing import CliRunner
from llm.cli import cli


@pytest.fixture(scope="module")
def demo_output(tmp_path_factory):
    result = CliRunner().invoke(cli, ["accounts", "demo"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def commands(output):
    return [line[2:] for line in output.splitlines() if line.startswith("$ ")]


def test_commands_are_shown_as_a_user_types_them(demo_output):
    assert commands(demo_output) and all(command.startswith("llm ") for command in commands(demo_output))
    assert not any("/" in command.split()[0] for command in commands(demo_output))


def test_two_conversations_land_on_two_accounts_and_a_continued_one_stays(demo_output):
    accounts = re.findall(r"^# -> account (\w+):", demo_output, re.M)
    assert accounts[0] == accounts[1]  # llm -c stays on its account
    assert accounts[2] != accounts[0]  # the next new conversation goes to the other one


def test_a_429_moves_a_new_conversation_and_llm_logs_shows_both_attempts(demo_output):
    routing = demo_output.split("$ llm logs -n 1 --json")[1]
    assert re.search(r'"outcome": "rate_limited".*"outcome": "complete"', routing, re.S)


def test_a_budget_refusal_is_one_line_and_a_lower_max_tokens_fits(demo_output):
    [line] = [l for l in demo_output.splitlines() if l.startswith("Error: budget_exhausted: account 'tiny'")]
    assert "cannot take this attempt (up to $0.72)" in line
    assert "-> account tiny: reserved $0.405" in demo_output


def test_the_ceiling_against_the_cost_is_explained_once(demo_output):
    assert demo_output.count("The reservation is the worst case") == 1


def test_it_ends_with_status_and_what_to_try_next(demo_output):
    assert "$ llm accounts status" in demo_output
    assert "llm accounts browse --open" in demo_output.split("# What to try next:")[1]
