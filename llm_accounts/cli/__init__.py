"""The ``llm accounts`` command group (docs/commands.md). Each command is thin: it parses, calls a
module, prints. One module per group of commands, each adding its ``COMMANDS`` here:

- ``declare``: ``add``, ``set``, ``remove``, ``list`` (declaring accounts);
- ``lookup``: ``lookup`` and its ``show``, ``set``, ``clear`` (the secret lookup command);
- ``prices``: ``prices`` and its ``add``, ``remove`` (the price table, the user's revisions);
- ``status``: ``status`` (and ``--check``);
- ``attempts``: ``attempts``;
- ``spend``: ``spend``;
- ``corrections``: ``block``, ``unblock``, ``adjust``, ``rebind``;
- ``reconcile``: ``reconcile``, ``audit`` (settling and checking against evidence);
- ``refresh_models``: ``refresh-models``;
- ``ladder``: ``ladder``;
- ``count``: ``count``;
- ``ledger_file``: ``path``, ``export``;
- ``tools``: ``standin``, ``browse``, ``demo``;
- ``common``: what they share (usage errors that never repeat what was typed, ``fail``,
  ``echo_json``, the ledger, the declaration, dollar options, tables and CSV).

``llm`` imports this package at every start-up (bench/overhead.py measures it), so these modules
import only click at the top; each command imports what it needs when it runs.
"""

import click

from . import attempts, corrections, count, declare, ladder, ledger_file, lookup, prices, reconcile, refresh_models, spend, status, tools
from .common import _Group


@click.group(cls=_Group)
def accounts():
    """Route Claude calls across several Anthropic accounts with budgets.

    Declare accounts with 'llm accounts add', then prompt with 'llm -m claude-routed'.
    See 'llm accounts COMMAND --help' for each command.
    """


for module in (declare, lookup, prices, status, attempts, spend, corrections, reconcile, refresh_models, ladder, count, ledger_file, tools):
    for command in module.COMMANDS:
        accounts.add_command(command)
