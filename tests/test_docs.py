"""The README is the manual: its generated parts must match the code."""

import pathlib
import subprocess
import sys

import pytest
from click.testing import CliRunner
from llm.cli import cli

from llm_accounts.cli import accounts

ROOT = pathlib.Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()


def all_commands():
    for name, command in sorted(accounts.commands.items()):
        yield [name]
        for sub in sorted(getattr(command, "commands", {})):
            yield [name, sub]


def test_readme_cog_output_is_current():
    result = subprocess.run(
        [sys.executable, "-m", "cogapp", "--check", "README.md"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, "README.md is out of date: run cog -r README.md"


@pytest.mark.parametrize("args", list(all_commands()), ids=" ".join)
def test_every_command_has_help_with_an_example(args):
    result = CliRunner().invoke(cli, ["accounts", *args, "--help"])
    assert result.exit_code == 0
    assert "Example" in result.output


@pytest.mark.parametrize("args", list(all_commands()), ids=" ".join)
def test_every_command_is_in_the_readme(args):
    assert f"$ llm accounts {' '.join(args)} --help" in README


def test_quick_start_has_the_two_commands():
    quick_start = README.split("## Quick start")[1].split("\n## ")[0]
    commands = [line for line in quick_start.splitlines() if line.startswith("scripts/")]
    assert commands == ["scripts/demo", "scripts/test"]
    for command in commands:
        assert (ROOT / command).exists()
