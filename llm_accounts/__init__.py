"""llm-accounts: route Claude calls across several Anthropic accounts through a budget ledger.

This is the ``llm`` plugin entry module. It stays thin: ``llm`` imports every plugin at start-up,
so the hooks below import their modules only when they run.
"""

import os

import llm

DEFAULT_MODEL_ENV = "LLM_ACCOUNTS_MODEL"


@llm.hookimpl
def register_models(register):
    from .models import DEFAULT_MODEL, model_pairs
    from .pricing import current_revision

    revision = current_revision()
    default_model = os.environ.get(DEFAULT_MODEL_ENV) or DEFAULT_MODEL
    for sync_model, async_model, aliases in model_pairs(revision, default_model):
        register(sync_model, async_model, aliases=aliases)


@llm.hookimpl
def register_commands(cli):
    from .cli import accounts

    cli.add_command(accounts)
