"""llm-accounts: route Claude calls across several Anthropic accounts through a budget ledger.

This is the ``llm`` plugin entry module. It stays thin: ``llm`` imports every plugin at start-up,
so the hooks below import their modules only when they run.
"""

import llm


@llm.hookimpl
def register_commands(cli):
    from .cli import accounts

    cli.add_command(accounts)
