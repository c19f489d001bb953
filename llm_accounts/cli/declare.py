"""Declaring accounts: ``llm accounts add``, ``set``, ``remove`` and ``list`` (docs/architecture.md
"Environment", "An account declaration" and "Key resolution").
"""

import click

from .common import _warn_small_limits, echo_json, fail


def _warn_if_overridden():
    """accounts.json is the lowest source: say so when a higher one replaces it here."""
    from ..declarations import overriding_source
    from ..errors import AccountsError

    try:
        source = overriding_source()
    except AccountsError as error:
        click.echo(f"Warning: {error}", err=True)
        return
    if source == "environment":
        where = "ANTHROPIC_ACCOUNTS in the environment"
    elif source:
        where = f"ANTHROPIC_ACCOUNTS in {source} in this directory"
    else:
        return
    click.echo(
        f"Warning: {where} overrides accounts.json, so this change has no effect where it is set",
        err=True,
    )


@click.command()
@click.argument("name")
@click.option("--key-env", required=True, metavar="VAR", help="Name of the variable (or 'llm keys' entry) holding this account's key")
@click.option("--budget", required=True, metavar="USD", help="Monthly budget in US dollars, such as 25.00")
@click.option("--daily-budget", metavar="USD", help="Daily (UTC) budget in US dollars")
@click.option("--rank", metavar="N", help="Preference tier, 0 or more; lower is tried first (default 0)")
@click.option("--weight", metavar="N", help="Share among accounts of the same rank, 1 or more (default 1)")
@click.option("models", "--model", multiple=True, metavar="ID", help="A model this account may serve (repeatable; default all priced models)")
@click.option(
    "client_caps",
    "--client-cap",
    multiple=True,
    metavar="LABEL=USD|LABEL=<N>tokens",
    help="Monthly cap on this account for one client label, in dollars (ci-bot=5.00) or billed tokens "
    "(ci-bot=2000000tokens); repeatable, and one of each gives a client both caps",
)
@click.option("--clients-only", is_flag=True, help="Only the clients given with --client-cap may use this account")
@click.option("--admin-key-env", metavar="VAR", help="Variable (or 'llm keys' entry) holding the organization's Admin API key, to settle unknown outcomes from its usage report")
@click.option("--api-key-id", metavar="ID", help="This key's id in the usage report (apikey_...; an id, not a secret)")
@click.option(
    "--dedicated-key",
    is_flag=True,
    help="Promise that this key is used only through this ledger, so the legacy usage report may settle its "
    "open attempts (needs --admin-key-env and --api-key-id)",
)
@click.option("--warn-at", metavar="PCTS", help="Warn on stderr when spend passes these percents of the budget, such as 80,95 (the default), or off")
@click.option("--replace", is_flag=True, help="Declare an existing account of this name anew (settings not given return to their defaults)")
def add(name, key_env, budget, daily_budget, rank, weight, models, client_caps, clients_only, admin_key_env, api_key_id, dedicated_key, warn_at, replace):
    """Declare an account in accounts.json in the llm user directory.

    The key itself is never written: KEY_ENV names where to find it at call time
    (environment, .env, 'llm keys set KEY_ENV', or the lookup command).

    A client label comes from '-o client NAME' or LLM_ACCOUNTS_CLIENT; --client-cap limits
    what that client may spend on this account each credit period, in dollars (LABEL=USD) or
    in billed tokens (LABEL=<N>tokens: input, cache writes, cache reads and output), or both.

    --replace declares an existing account anew: a setting it is not given returns to its
    default, and it says which ones changed. To change some settings and keep the rest, use
    'llm accounts set'.

    The first attempt of a credit period fixes the account's monthly budget and key_env until
    the period ends, so --replace with another --budget is refused while this period holds a
    budget for the account; the daily budget, rank, weight, models, client caps and
    --dedicated-key may change at any time.

    A budget, daily budget or client cap below the ceiling of a plain claude-routed prompt
    (see 'llm accounts prices') can never admit one: the account is added with a warning that
    names a -o max_tokens or a model that fits.

    \b
    Example:
        llm accounts add work --key-env WORK_ANTHROPIC_KEY --budget 50.00
        llm keys set WORK_ANTHROPIC_KEY
        llm accounts add shared --key-env SHARED_KEY --budget 20.00 \\
          --client-cap ci-bot=5.00 --client-cap ci-bot=2000000tokens \\
          --client-cap alice=10.00 --clients-only
        llm accounts add work --key-env WORK_ANTHROPIC_KEY --budget 50.00 \\
          --admin-key-env WORK_ADMIN_KEY --api-key-id apikey_01Rj2N8SVvo6BePZj99NhmiT
    """
    from ..declarations import account_from_options, add_account, usd_text
    from ..errors import AccountsError

    try:
        account = account_from_options(
            name, key_env, budget, daily_budget, rank, weight, models, client_caps, clients_only,
            admin_key_env=admin_key_env, api_key_id=api_key_id, warn_at=warn_at, dedicated_key=dedicated_key,
        )
        _check_against_ledger(account)
        path, replaced = add_account(account, replace=replace)
    except AccountsError as error:
        fail(error)
    daily = f", ${usd_text(account.daily_budget_nusd)} a day" if account.daily_budget_nusd else ""
    caps = ""
    count = len(account.clients) + len(account.client_tokens)
    if count:
        caps = f", {count} client cap{'s' if count != 1 else ''}"
        caps += " (listed clients only)" if account.clients_only else ""
    click.echo(
        f"{'Replaced' if replaced else 'Added'} account {account.name}: key from {account.key_env}, "
        f"budget ${usd_text(account.budget_nusd)} a month{daily}{caps} ({path})"
    )
    if replaced is not None:
        _echo_changes(replaced, account)
        click.echo("  (--replace returns every setting not given to its default; 'llm accounts set' changes only the ones given)")
    _warn_small_limits([account])
    _warn_if_overridden()


def _echo_changes(old, new):
    from ..declarations import describe_changes

    for field, before, after in describe_changes(old, new):
        click.echo(f"  {field}: {before} -> {after}")


@click.command(name="set")
@click.argument("name")
@click.option("--budget", metavar="USD", help="Monthly budget in US dollars (fixed for a credit period once it is spent from)")
@click.option("--daily-budget", metavar="USD", help="Daily (UTC) budget in US dollars")
@click.option("--rank", metavar="N", help="Preference tier, 0 or more; lower is tried first")
@click.option("--weight", metavar="N", help="Share among accounts of the same rank, 1 or more")
@click.option("models", "--model", multiple=True, metavar="ID", help="A model this account may serve (repeatable; replaces the list)")
@click.option(
    "client_caps",
    "--client-cap",
    multiple=True,
    metavar="LABEL=USD|LABEL=<N>tokens",
    help="Set one client's dollar or token cap, keeping its other cap and other clients' (repeatable)",
)
@click.option("remove_clients", "--remove-client", multiple=True, metavar="LABEL", help="Remove a client's caps (repeatable)")
@click.option(
    "--clients-only/--all-clients",
    default=None,
    help="Serve only the clients with a cap, or every client",
)
@click.option("--admin-key-env", metavar="VAR", help="Variable (or 'llm keys' entry) holding the organization's Admin API key")
@click.option("--api-key-id", metavar="ID", help="This key's id in the usage report (apikey_...)")
@click.option(
    "--dedicated-key/--no-dedicated-key",
    default=None,
    help="Promise that this key is used only through this ledger (the legacy usage report may then settle its "
    "open attempts), or withdraw the promise",
)
@click.option("--warn-at", metavar="PCTS", help="Warn on stderr when spend passes these percents of the budget, such as 80,95 (the default), or off")
@click.option(
    "clear",
    "--clear",
    multiple=True,
    type=click.Choice(["daily-budget", "rank", "weight", "models", "client-caps", "admin-key", "warn-at"]),
    help="Return a setting to its default: no daily budget, rank 0, weight 1, every priced model, no client caps, "
    "no admin key or key id, warnings at 80,95 (repeatable)",
)
def set_(name, budget, daily_budget, rank, weight, models, client_caps, remove_clients, clients_only, admin_key_env, api_key_id, dedicated_key, warn_at, clear):
    """Change some settings of a declared account in accounts.json and keep the others.

    Prints each setting it changed, old -> new. The key_env stays: an account keeps its key
    (declare a new account for another key). The monthly budget is fixed once a credit period
    has spent from it, so another --budget is refused until the period ends; the daily budget,
    rank, weight, models, client caps and --dedicated-key may change at any time.

    --dedicated-key promises that the account's key is used only through this ledger (no other
    tool, script, Console workbench or batch job sends with it), so every request the usage
    report shows for its api_key_id is one of the ledger's attempts: only then may the legacy
    usage report settle its open attempts.

    \b
    Example:
        llm accounts set work --daily-budget 5.00 --rank 1
        llm accounts set shared --client-cap ci-bot=2000000tokens --remove-client alice
        llm accounts set work --clear daily-budget --clear models
        llm accounts set work --admin-key-env WORK_ADMIN_KEY
        llm accounts set work --dedicated-key
        llm accounts set work --warn-at 50,90
    """
    from ..declarations import changed_settings, set_account
    from ..errors import AccountsError

    given = (budget, daily_budget, rank, weight, clients_only, admin_key_env, api_key_id, dedicated_key, warn_at)
    if all(value is None for value in given) and not (models or client_caps or remove_clients or clear):
        fail(AccountsError(
            "declaration_invalid", "give at least one setting to change; 'llm accounts set --help' lists them"
        ))

    def change(account):
        return changed_settings(
            account, budget=budget, daily_budget=daily_budget, rank=rank, weight=weight, models=models,
            client_caps=client_caps, remove_clients=remove_clients, clients_only=clients_only,
            admin_key_env=admin_key_env, api_key_id=api_key_id, warn_at=warn_at, dedicated_key=dedicated_key,
            clear=clear,
        )

    try:
        path, old, new = set_account(name, change, check=_check_against_ledger)
    except AccountsError as error:
        fail(error)
    if new == old:
        click.echo(f"Account {new.name} is unchanged: its settings already are these ({path})")
    else:
        click.echo(f"Changed account {new.name} in {path}:")
        _echo_changes(old, new)
        _warn_small_limits([new])
    _warn_if_overridden()


def _check_against_ledger(account):
    """Refuse a declaration the current credit period cannot admit (another monthly budget or
    key_env than the period fixed, or a key whose budget another name holds), before it is written.
    A missing ledger holds no period, so it is not created for this."""
    from ..ledger import Ledger
    from ..paths import ledger_path

    if not ledger_path().exists():
        return
    with Ledger() as ledger:
        ledger.check_declaration(account)


@click.command()
@click.argument("name")
def remove(name):
    """Remove an account from accounts.json.

    Its ledger history is kept, and the ledger marks it removed (the dashboard shows it so) until
    it is declared and used again.

    \b
    Example:
        llm accounts remove work
    """
    from ..declarations import remove_account
    from ..errors import AccountsError

    try:
        path = remove_account(name)
    except AccountsError as error:
        fail(error)
    click.echo(f"Removed account {name} ({path})")
    _mark_removed(name)
    _warn_if_overridden()


def _mark_removed(name):
    """Set the ledger's ``account.removed_at`` (docs/architecture.md "Ledger"); a missing ledger
    is not created for this, and a ledger that cannot be written leaves a warning, not a failure:
    the declaration is already gone."""
    from ..errors import AccountsError
    from ..ledger import Ledger
    from ..paths import ledger_path

    if not ledger_path().exists():
        return
    try:
        with Ledger() as ledger:
            ledger.mark_removed(name)
    except AccountsError as error:
        click.echo(f"Warning: {error} (the ledger does not mark account {name} removed)", err=True)


def _source_text(declaration):
    import os

    from ..declarations import accounts_file_path

    if declaration.source == "environment":
        return "ANTHROPIC_ACCOUNTS in the environment"
    if declaration.source == "accounts.json":
        return str(accounts_file_path())
    if declaration.source:
        return f"ANTHROPIC_ACCOUNTS in {os.path.join(os.getcwd(), declaration.source)}"
    return None


def _clients_json(account):
    """``llm accounts list --json``'s caps of one account: per client, its dollar and token caps."""
    from ..declarations import usd_text

    clients = {}
    for label, cap in account.clients:
        clients.setdefault(label, {}).update(budget_usd=usd_text(cap), budget_nusd=cap)
    for label, cap in account.client_tokens:
        clients.setdefault(label, {})["tokens"] = cap
    return dict(sorted(clients.items()))


@click.command(name="list")
@click.option("json_", "--json", is_flag=True, help="Output JSON")
def list_(json_):
    """List the declared accounts and where the declaration came from.

    Shows names, key_env names, budgets, ranks, weights, models, client caps and whether a key
    is declared dedicated; never a key. --json also shows admin_key_env and api_key_id.

    \b
    Example:
        llm accounts list
        llm accounts list --json
    """
    from ..declarations import load_declaration, usd_text
    from ..errors import AccountsError

    try:
        declaration = load_declaration()
    except AccountsError as error:
        fail(error)
    source = _source_text(declaration)
    if json_:
        echo_json(
            {
                "routed": declaration.routed,
                "source": declaration.source,
                "source_path": source,
                "accounts": [
                    {
                        "name": a.name,
                        "key_env": a.key_env,
                        "budget_usd": usd_text(a.budget_nusd),
                        "budget_nusd": a.budget_nusd,
                        "daily_budget_usd": usd_text(a.daily_budget_nusd) if a.daily_budget_nusd else None,
                        "daily_budget_nusd": a.daily_budget_nusd,
                        "rank": a.rank,
                        "weight": a.weight,
                        "models": list(a.models) if a.models is not None else None,
                        "clients": _clients_json(a),
                        "clients_only": a.clients_only,
                        "admin_key_env": a.admin_key_env,
                        "api_key_id": a.api_key_id,
                        "dedicated_key": a.dedicated_key,
                    }
                    for a in declaration.accounts
                ],
                "lookup": list(declaration.lookup) if declaration.lookup else None,
            }
        )
        return
    if not declaration.routed:
        click.echo("No accounts declared: claude-routed sends unrouted with your 'anthropic' key")
        if source:
            click.echo(f"([] is declared by {source})")
        return
    # The client caps column (docs/architecture.md "Client caps") appears once any account declares caps.
    capped = any(a.clients or a.client_tokens for a in declaration.accounts)
    # So does the dedicated key column (docs/architecture.md "Settling from the provider") once any
    # account declares dedicated_key.
    dedicated = any(a.dedicated_key for a in declaration.accounts)
    rows = [
        ("name", "key_env", "budget", "daily", "rank", "weight", "models")
        + (("client caps",) if capped else ())
        + (("dedicated key",) if dedicated else ())
    ]
    for a in declaration.accounts:
        caps = ", ".join(
            [f"{label} ${usd_text(cap)}" for label, cap in a.clients]
            + [f"{label} {cap:,} tokens" for label, cap in a.client_tokens]
        ) or "-"
        if a.clients_only:
            caps += " (only these)"
        rows.append(
            (
                a.name,
                a.key_env,
                f"${usd_text(a.budget_nusd)}",
                f"${usd_text(a.daily_budget_nusd)}" if a.daily_budget_nusd else "-",
                str(a.rank),
                str(a.weight),
                ", ".join(a.models) if a.models is not None else "all priced",
            )
            + ((caps,) if capped else ())
            + (("yes" if a.dedicated_key else "-",) if dedicated else ())
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    click.echo(f"Declared by {source}")


COMMANDS = (add, set_, remove, list_)
