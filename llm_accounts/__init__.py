"""llm-accounts: route Claude calls across several Anthropic accounts through a budget ledger.

This is the ``llm`` plugin entry module. It stays thin: ``llm`` imports every plugin at start-up,
so the hooks below import their modules only when they run.
"""

import os

import pluggy

# The same marker as ``llm.hookimpl``; using pluggy directly means importing the ledger from a
# notebook or a worker process does not import all of llm.
hookimpl = pluggy.HookimplMarker("llm")

DEFAULT_MODEL_ENV = "LLM_ACCOUNTS_MODEL"


@hookimpl
def register_models(register):
    from .models import DEFAULT_MODEL, model_pairs
    from .pricing import price_book

    # The shipped models and those of the user's own price revisions (docs/pricing.md).
    book = price_book.current()
    default_model = os.environ.get(DEFAULT_MODEL_ENV) or DEFAULT_MODEL
    for sync_model, async_model, aliases in model_pairs(book, default_model):
        register(sync_model, async_model, aliases=aliases)


@hookimpl
def register_commands(cli):
    from .cli import accounts

    cli.add_command(accounts)


def cost_of(response):
    """What a routed response cost and which account paid: a ``cost.Cost`` in integer
    nanodollars (``spent_nusd``, ``held_nusd``, ``account``), or None for an unrouted one."""
    from .pricing.cost import cost_of as _cost_of

    return _cost_of(response)
