"""``llm accounts ladder``: the order new conversations try accounts, and why not
(docs/architecture.md "Selection").
"""

import click

from .common import echo_json, fail


@click.command()
@click.option("model_id", "--model", metavar="ID", help="The model a new conversation asks for (default: the one claude-routed uses)")
@click.option("--client", metavar="LABEL", help="The client label of the caller (default: $LLM_ACCOUNTS_CLIENT)")
@click.option("--json", "json_", is_flag=True, help="Output JSON")
def ladder(model_id, client, json_):
    """Show the order in which new conversations try the accounts now.

    Each account gets the verdict admission would give a prompt on --model without
    -o max_tokens: the same function decides both, so an account listed as available takes
    that attempt and any other is listed last with the reason and the refusal's code (a budget
    that cannot hold the model's ceiling, a block, a cooldown, a model it does not serve, a key
    found nowhere: credential_missing).
    Available accounts are ordered by rank (lower is preferred), then committed utilization
    relative to budget x weight, then the name. A request's warm system prompt and the
    conversations in flight can still reorder accounts within a rank. Bound conversations never
    move.

    \b
    Example:
        llm accounts ladder
        llm accounts ladder --model claude-opus-4-6 --json
    """
    import dataclasses
    import os

    from .. import DEFAULT_MODEL_ENV, catalog
    from .. import ladder as ladder_module
    from ..declarations import load_declaration
    from ..errors import AccountsError
    from ..ledger import Ledger
    from ..money import usd, usd_fine
    from ..pricing.price_book import current as current_book

    try:
        declaration = load_declaration()
        if not declaration.routed:
            click.echo("No accounts declared: claude-routed sends unrouted with your 'anthropic' key")
            return
        revision = current_book()
        if model_id is None:
            from ..models import DEFAULT_MODEL

            model_id = os.environ.get(DEFAULT_MODEL_ENV) or DEFAULT_MODEL
        quote = ladder_module.quote_for(model_id, revision)
        served = catalog.load()
        accounts_ = catalog.effective_accounts(declaration.accounts, revision, served)
        client = client or os.environ.get("LLM_ACCOUNTS_CLIENT") or None
        with Ledger() as ledger:
            lines, verdicts = ledger.ladder(accounts_, quote, client=client)
        # An account whose key is missing is moved past, not sent on (docs/architecture.md "Failover").
        from .. import keys

        keyless = {
            a.name: a.key_env for a in accounts_ if keys.key_state(a.key_env, declaration) == "missing"
        }
        rungs = ladder_module.build(lines, verdicts, keyless)
        # A model the account does not serve: say whether its declaration or its fetched list lacks it.
        declared_by_name = {a.name: a for a in declaration.accounts}
        rungs = [
            dataclasses.replace(
                r, reason=catalog.why_not_served(declared_by_name[r.name], quote.requested_model, revision, served)
            )
            if r.reason.startswith("does not serve") and r.name in declared_by_name
            else r
            for r in rungs
        ]
    except AccountsError as error:
        fail(error)
    if json_:
        echo_json(
            [
                {
                    "position": r.position,
                    "account": r.name,
                    "rank": r.rank,
                    "weight": r.weight,
                    # Money in JSON output is integer nanodollars, as in status --json (docs/commands.md "JSON output").
                    "committed_nusd": r.committed_nusd,
                    "budget_nusd": r.budget_nusd,
                    "available": r.available,
                    "code": r.code,
                    "reason": r.reason,
                }
                for r in rungs
            ]
        )
        return
    click.echo(f"New conversations on {quote.requested_model} (ceiling up to {usd_fine(quote.ceiling_nusd)} each):")
    rows = [("#", "account", "rank", "weight", "committed", "budget", "state")]
    for r in rungs:
        rows.append(
            (
                str(r.position) if r.position else "-",
                r.name,
                "-" if r.rank is None else str(r.rank),
                "-" if r.weight is None else str(r.weight),
                usd_fine(r.committed_nusd),
                usd(r.budget_nusd),
                r.reason if r.code is None else f"{r.reason} ({r.code})",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


COMMANDS = (ladder,)
