"""``llm accounts refresh-models``: which models each account serves, from ``GET /v1/models``
(docs/architecture.md "Model lists").
"""

import click

from .common import echo_json, fail


@click.command(name="refresh-models")
@click.argument("names", nargs=-1)
@click.option("--json", "json_", is_flag=True, help="Output JSON")
def refresh_models(names, json_):
    """Ask each account which models it serves (GET /v1/models) and remember the answer.

    New conversations then go only to accounts that serve the requested model. Each account's
    key is resolved only for its own request. With NAMES, refresh only those accounts. Each
    list records when it was fetched; a prompt refreshes a list older than a day in the
    background (the next prompt uses it).

    An account that could not be refreshed keeps its previous list, 'llm accounts status'
    says so, and the command exits with status 1 naming those accounts.

    \b
    Example:
        llm accounts refresh-models
        llm accounts refresh-models work --json
    """
    from .. import catalog
    from ..declarations import load_declaration
    from ..errors import AccountsError

    try:
        declaration = load_declaration()
        if set(names) - {a.name for a in declaration.accounts}:
            # The unknown name is not repeated: a key pasted as NAMES must not be echoed.
            raise AccountsError(
                "not_found", "NAMES: each must be a declared account's name (see llm accounts list)"
            )
        if not declaration.routed:
            raise AccountsError("declaration_invalid", "no accounts declared: add one with 'llm accounts add'")
        results = catalog.refresh(declaration, set(names) or None)
    except AccountsError as error:
        fail(error)
    failed = [name for name, value in results.items() if not isinstance(value, list)]
    from ..pricing import price_book

    # Models an account serves that no price revision prices cannot be routed until a price
    # revision names them (docs/pricing.md "Your own price revisions").
    book = price_book.current()
    unpriced = {name: book.unpriced(value) for name, value in results.items() if isinstance(value, list)}
    if json_:
        echo_json(
            {
                name: ({**_listed_json(value), "unpriced": unpriced[name]} if isinstance(value, list) else {"error": value.code})
                for name, value in results.items()
            }
        )
    else:
        for name, value in results.items():
            if isinstance(value, list):
                dropped = getattr(value, "dropped", 0)
                note = f" ({dropped} id{'s' if dropped > 1 else ''} dropped: they held a run of the account's key or were not ids)" if dropped else ""
                click.echo(f"{name}: {len(value)} models{note}")
            else:
                click.echo(f"{name}: not refreshed: {value}", err=True)
        missing = book.unpriced(model_id for ids in unpriced.values() for model_id in ids)
        if missing:
            click.echo(
                f"Served but not priced by any price revision, so not routable: {', '.join(missing)} "
                "(add a price revision for them: llm accounts prices add FILE, see docs/pricing.md \"Your own price revisions\")"
            )
    if failed:
        fail(AccountsError(
            results[failed[0]].code,
            f"could not refresh the model list of account{'s' if len(failed) > 1 else ''} {', '.join(failed)}; "
            "each keeps its previous list (see llm accounts status)",
        ))


def _listed_json(ids):
    """A refreshed list as JSON: its ids, and how many were dropped (catalog.kept_ids) if any."""
    dropped = getattr(ids, "dropped", 0)
    return {"models": list(ids), **({"dropped": dropped} if dropped else {})}


COMMANDS = (refresh_models,)
