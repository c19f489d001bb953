"""``llm accounts lookup``: show, set or clear the secret lookup command (docs/architecture.md "Key
resolution").
"""

import click

from .common import _Group, echo_json, fail


@click.group(cls=_Group, invoke_without_command=True)
@click.pass_context
def lookup(ctx):
    """Show, set or clear the secret lookup command.

    When an account's key is not in the environment, .env.local, .env or 'llm keys', the lookup
    command is run with {name} replaced by the account's key_env and must print the key. It is
    kept in accounts.json in the llm user directory, never in a project directory.

    \b
    Example:
        llm accounts lookup set -- op read "op://Private/{name}/credential"
        llm accounts lookup
        llm accounts lookup clear
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(lookup_show)


@lookup.command(name="show")
@click.option("json_", "--json", is_flag=True, help="Output JSON")
def lookup_show(json_=False):
    """Show the secret lookup command.

    \b
    Example:
        llm accounts lookup show --json
    """
    import shlex

    from ..declarations import read_accounts_file
    from ..errors import AccountsError

    try:
        _, argv = read_accounts_file()
    except AccountsError as error:
        fail(error)
    if json_:
        echo_json({"lookup": list(argv) if argv else None})
    elif argv:
        click.echo(shlex.join(argv))
    else:
        click.echo("No lookup command set: keys come from the environment, .env.local, .env and 'llm keys'")


@lookup.command(
    name="set", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def lookup_set(command):
    """Set the secret lookup command: a program and its arguments, run without a shell.

    {name} in any argument is replaced by the key_env being looked up. The command must print
    the key (one trailing newline is removed) and exit 0 within 15 seconds.

    \b
    Example:
        llm accounts lookup set -- op read "op://Private/{name}/credential"
        llm accounts lookup set -- security find-generic-password -s {name} -w
    """
    from ..declarations import set_lookup
    from ..errors import AccountsError

    try:
        path = set_lookup(command)
    except AccountsError as error:
        fail(error)
    click.echo(f"Lookup command set ({path})")


@lookup.command(name="clear")
def lookup_clear():
    """Remove the secret lookup command.

    \b
    Example:
        llm accounts lookup clear
    """
    from ..declarations import set_lookup
    from ..errors import AccountsError

    try:
        path = set_lookup(None)
    except AccountsError as error:
        fail(error)
    click.echo(f"Lookup command cleared ({path})")


COMMANDS = (lookup,)
