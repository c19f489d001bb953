"""Corrections to the ledger by hand: ``llm accounts block``, ``unblock``, ``adjust`` and ``rebind``
(docs/architecture.md "Ledger").
"""

import click

from .common import _declared_accounts, _known_account, _ledger, _usd_option, fail


@click.command()
@click.argument("name")
def block(name):
    """Stop new attempts on an account until 'llm accounts unblock NAME'.

    Conversations bound to it are refused rather than moved (move one with 'llm accounts rebind').

    \b
    Example:
        llm accounts block work
    """
    from ..errors import AccountsError

    try:
        ledger = _ledger()
        result = ledger.block(_known_account(ledger, name), "manual")
    except AccountsError as error:
        fail(error)
    click.echo(f"Account {name} {'was already blocked' if result == 'already_blocked' else 'blocked'}; unblock it with: llm accounts unblock {name}")


@click.command()
@click.argument("name")
@click.option("--source", default="llm accounts unblock", show_default=True, metavar="REF", help="Why it is safe to unblock (recorded)")
@click.option("adjustment_id", "--id", metavar="ID", help="Adjustment id (default: a new one; repeat an id to make the command idempotent)")
def unblock(name, source, adjustment_id):
    """Clear an account's block or cooldown so it takes attempts again.

    Ends a block (auth failure, settlement conflict, ceiling exceeded or manual) and any health
    dwell with it: cooling after rate limits, outages or transport failures, quota_exhausted
    after the credit ran out, a probe in flight, and every model cooling on the account after a
    model_unavailable answer. The account takes attempts again at once. The unblock is recorded
    in the ledger's adjustment table with its source.

    \b
    Example:
        llm accounts unblock work --source "rotated key 2026-11-03"
        llm accounts unblock work --source "added credit in the console"
    """
    import uuid

    from ..errors import AccountsError

    try:
        ledger = _ledger()
        result = ledger.clear_block(adjustment_id or uuid.uuid4().hex, _known_account(ledger, name), source)
    except AccountsError as error:
        fail(error)
    click.echo(
        {
            "not_blocked": f"Account {name} was not blocked or cooling",
            "health_cleared": f"Account {name} is no longer cooling",
            "already_recorded": f"This unblock of account {name} was already recorded",
        }.get(result, f"Account {name} unblocked")
    )


@click.command()
@click.argument("name")
@click.option("--month", required=True, metavar="YYYY-MM", help="Credit period to correct")
@click.option("--delta", required=True, metavar="USD", help="Signed change to that period's spend, such as 1.25 or -0.40")
@click.option("--source", required=True, metavar="REF", help="Where the correction comes from")
@click.option("attempt_id", "--attempt", metavar="ID", help="The attempt this corrects, if any (its id or a unique prefix)")
@click.option("adjustment_id", "--id", metavar="ID", help="Adjustment id (default: a new one)")
def adjust(name, month, delta, source, attempt_id, adjustment_id):
    """Correct an account's spend for a credit period by a signed amount, with its source.

    Use it when the provider's figures differ from the ledger's (spend made outside this
    ledger, a credit, a correction to a settled attempt). Attempts are never rewritten.

    \b
    Example:
        llm accounts adjust work --month 2026-11 --delta 3.20 --source "console: spend outside llm"
        llm accounts adjust work --month 2026-11 --delta -0.50 --source "invoice credit"
    """
    import uuid

    from ..errors import AccountsError
    from ..money import usd

    nusd = _usd_option(delta, "--delta", signed=True)
    try:
        ledger = _ledger()
        if attempt_id is not None:
            attempt_id = ledger.resolve_attempt_id(attempt_id)
        result = ledger.adjust(
            adjustment_id or uuid.uuid4().hex, _known_account(ledger, name), month, nusd, source, attempt_id=attempt_id
        )
    except AccountsError as error:
        fail(error)
    if result == "already_recorded":
        click.echo("This adjustment was already recorded")
    else:
        click.echo(f"Recorded {'+' if nusd > 0 else '-'}{usd(abs(nusd), 4)} for {name} in {month}")


@click.command()
@click.argument("conversation_id")
@click.argument("name")
@click.option("--source", default="llm accounts rebind", show_default=True, metavar="REF", help="Why it moves (recorded)")
def rebind(conversation_id, name, source):
    """Move a conversation to another account.

    A conversation never moves by itself (its prompt cache lives in one account); this moves
    it explicitly and records the move. The next 'llm -c' uses NAME. CONVERSATION_ID is a
    conversation id or a response id from 'llm logs' (a Python prompt made without a
    conversation is named by its response id) that the ledger holds (prompted through
    claude-routed), and NAME a declared account that is not blocked.

    \b
    Example:
        llm logs list -n 1 --json | jq -r '.[0].conversation_id'
        llm accounts rebind 01jd7k2m4q8r3t5v6w7x8y9z0a home
    """
    from ..errors import AccountsError
    from ..ledger import Scope

    declared = next((a for a in _declared_accounts(strict=True) if a.name == name), None)
    if declared is None:
        # The name is not repeated: a key pasted as NAME must not be echoed.
        fail(AccountsError(
            "not_found", "NAME: a conversation moves only to a declared account, and none has this name (see llm accounts list)"
        ))
    try:
        old = _ledger().rebind(Scope("conversation", conversation_id), declared, source)
    except AccountsError as error:
        fail(error)
    # The id is not repeated: only the ledger's refusal of an unknown id could tell it apart.
    click.echo(f"The conversation now uses account {name}" + (f" (was {old})" if old != name else ""))


COMMANDS = (block, unblock, adjust, rebind)
