"""The ``llm accounts`` command group. Each command is thin: it parses, calls a module, prints."""

import json
import sys

import click


@click.group()
def accounts():
    """Route Claude calls across several Anthropic accounts with budgets.

    Declare accounts with 'llm accounts add', then prompt with 'llm -m claude-routed'.
    See 'llm accounts COMMAND --help' for each command.
    """


def fail(error):
    """Print an AccountsError (or any one-line message) as a click error and exit 1."""
    raise click.ClickException(str(error))


def echo_json(data):
    click.echo(json.dumps(data, indent=2))


@accounts.command()
def path():
    """Print the path of the ledger database.

    \b
    Example:
        llm accounts path
        sqlite-utils tables "$(llm accounts path)" --counts
    """
    from .paths import ledger_path

    click.echo(str(ledger_path()))
