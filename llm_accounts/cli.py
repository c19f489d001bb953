"""The ``llm accounts`` command group. Each command is thin: it parses, calls a module, prints."""

import json
import pathlib
import sys

import click


def _rule(param):
    """What a parameter takes, from its declaration alone."""
    kind = getattr(param, "type", None)
    if isinstance(kind, click.IntRange) and kind.min is not None:
        if kind.max is not None:
            return f"must be a whole number from {kind.min} to {kind.max}"
        return f"must be a whole number, {kind.min} or more"
    if isinstance(kind, click.Choice):
        return "must be one of " + ", ".join(str(choice) for choice in kind.choices)
    return "not a value it takes (see --help)"


def _without_values(error):
    """``error`` (a click usage error) reworded to name the parameter and the rule, never the
    text that was typed: a key pasted in the wrong place must not be echoed back."""
    if getattr(error, "reworded", False) or isinstance(
        error, (click.MissingParameter, click.BadOptionUsage, click.BadArgumentUsage)
    ):
        return error  # these name only parameters this plugin declares
    ctx = error.ctx
    where = f"'{ctx.command_path} --help'" if ctx is not None else "--help"
    if isinstance(error, click.BadParameter):
        quiet = click.BadParameter(_rule(error.param), ctx=ctx, param=error.param, param_hint=error.param_hint)
    elif isinstance(error, click.NoSuchOption):
        quiet = click.UsageError(f"No such option; {where} lists the options", ctx)
    elif error.message.startswith("No such command"):
        quiet = click.UsageError(f"No such command; {where} lists the commands", ctx)
    elif error.message.startswith("Missing command"):
        return error
    elif "extra argument" in error.message:
        quiet = click.UsageError(f"Got more arguments than this command takes; see {where}", ctx)
    else:
        quiet = click.UsageError(f"The command line is not one this command takes; see {where}", ctx)
    quiet.reworded = True
    return quiet


class _Group(click.Group):
    """A command group whose usage errors never repeat what was typed (see ``_without_values``)."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as error:
            raise _without_values(error) from None

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.UsageError as error:
            raise _without_values(error) from None


@click.group(cls=_Group)
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


@accounts.command(name="export")
@click.argument("target", metavar="PATH", type=click.Path(dir_okay=False))
def export_(target):
    """Write a SQLite copy of the ledger to PATH, a new file.

    The copy has the ledger's schema and is taken from one consistent snapshot, so Datasette
    (with this plugin's queries and dashboard), metadata.yml and sqlite-utils read it as they
    read a SQLite ledger. Meant for a PostgreSQL ledger (LLM_ACCOUNTS_LEDGER=postgresql://...);
    on a SQLite ledger it is a backup. An existing file is never overwritten.

    \b
    Example:
        llm accounts export ledger.db
        datasette ledger.db -m metadata.yml
    """
    from .errors import AccountsError

    ledger = _ledger()
    try:
        written = ledger.export(target)
    except AccountsError as error:
        fail(error)
    finally:
        ledger.close()
    click.echo(f"Wrote a copy of {ledger.location} to {written}")


@accounts.command()
@click.option("--port", type=click.IntRange(0, 65535), default=0, help="Port to listen on (0: any free port)")
@click.option(
    "config_path",
    "--config",
    type=click.Path(dir_okay=False),
    help="JSON file of keys and behaviours (default: the built-in demo configuration)",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Loopback address to listen on")
def standin(port, config_path, host):
    """Serve a local stand-in of the Anthropic Messages API for tests and demos.

    Real HTTP on loopback with the API's JSON and SSE bytes, usage with prompt-cache fields, and
    per-key behaviours (ok, rate_limited, overloaded, drop, echo_key, refusal, ...). Prints the
    base URL, then serves until Ctrl-C. A config names each key's label, organization and
    behaviour: {"keys": [{"label": "a", "key": "sk-ant-...", "behaviour": "ok"}]}

    Without --config it serves the built-in demo configuration: two keys, labels alpha and beta,
    behaviour ok, each a fresh random sk-ant- key that it stores in llm's key store as
    STANDIN_ALPHA_KEY and STANDIN_BETA_KEY (never printed) once it listens, ready for 'llm
    accounts add alpha --key-env STANDIN_ALPHA_KEY --budget 10.00' (a budget above the default
    model's $8.712 ceiling). A stand-in that cannot listen leaves the stored keys alone.

    Give keys the sk-ant- prefix of real keys: the scrubbing rule masks the first character of a
    key without it wherever it appears in a reply, which garbles text when the key begins with
    a common letter.

    \b
    Example:
        llm accounts standin --port 8765
        llm accounts add alpha --key-env STANDIN_ALPHA_KEY --budget 10.00
        LLM_ACCOUNTS_BASE_URL=http://127.0.0.1:8765 llm -m claude-routed "hi"
        llm accounts standin --port 8765 --config standin.json
    """
    import errno

    from .errors import AccountsError
    from .standin import ConfigError, StandIn, is_loopback, load_config, serve

    if not is_loopback(host):
        fail("--host: must be a loopback address (127.0.0.0/8, localhost or ::1)")
    demo = config_path is None
    if demo:
        from .standin import demo_config

        config = demo_config()
    else:
        try:
            config = load_config(config_path)
        except ConfigError as error:
            fail(error)

    try:
        server = StandIn(config, host, port)
    except OSError as error:
        where = f"--port: {host}:{port}"
        if error.errno == errno.EADDRINUSE:
            kept = "; the stored demo keys were left as they are" if demo else ""
            fail(AccountsError(
                "declaration_invalid",
                f"{where} is already in use (another stand-in may be serving there: use its URL, or choose another "
                f"--port; 0 picks a free one){kept}",
            ))
        fail(AccountsError("declaration_invalid", f"{where}: cannot listen there ({error.strerror or 'address unavailable'})"))
    if demo:
        from .standin.demo import description, store_demo_keys

        try:
            store_demo_keys(config)  # only now that the port is ours: a taken one changes nothing
        except ConfigError as error:
            server.stop()
            fail(error)
    click.echo(server.base_url)
    if demo:
        click.echo(description(server.base_url), err=True)
    click.echo("Messages API stand-in running; Ctrl-C to stop", err=True)
    serve(server)


@accounts.command()
@click.option("--port", type=click.IntRange(1, 65535), default=8001, show_default=True, help="Port to serve on, on 127.0.0.1")
@click.option("open_browser", "--open", is_flag=True, help="Open the dashboard in a web browser")
def browse(port, open_browser):
    """Browse the ledger in Datasette: spend dashboard and read-only queries.

    Starts 'datasette' on the ledger with this plugin's canned queries and the dashboard at
    /-/llm-accounts. No key reaches Datasette: its environment drops every declared key_env,
    ANTHROPIC_API_KEY, any variable named like a key, and any variable whose value looks like
    a key or holds part of a declared account's key.

    \b
    Example:
        llm accounts browse --open
        llm accounts browse --port 8002
    """
    from . import browse as browsing
    from .errors import AccountsError
    from .paths import ledger_path

    if not browsing.datasette_installed():
        fail(browsing.NOT_INSTALLED)
    try:
        status = browsing.browse(ledger_path(), port=port, open_browser=open_browser, echo=click.echo)
    except AccountsError as error:
        fail(error)
    sys.exit(status)


@accounts.group(invoke_without_command=True)
@click.option("json_", "--json", is_flag=True, help="Output JSON")
@click.option("model_id", "--model", metavar="ID", help="Show one model (exact id or alias)")
@click.pass_context
def prices(ctx, json_, model_id):
    """Show the prices every ceiling and settlement uses, and where each came from.

    Each model is priced by the shipped price revision or by a price revision of your own
    (llm accounts prices add FILE). Rates are US dollars per million tokens: input, 5-minute
    cache write, 1-hour cache write, cache read and output. A long-context tier applies to the
    whole request when its input (fresh + cache writes + cache reads) exceeds the tier's
    threshold. Retired models are kept only to settle old attempts. "ceiling" is what one
    attempt reserves at the model's default max_tokens (llm-anthropic's): its whole context
    window at the dearest input rate plus max_tokens at the output rate; -o max_tokens lowers
    it. "from" is the revision whose price is in force.

    \b
    Example:
        llm accounts prices
        llm accounts prices --model claude-sonnet-4-5 --json
    """
    if ctx.invoked_subcommand is not None:
        return
    from .errors import AccountsError
    from .pricing import price_book
    from .pricing.prices import RATE_NAMES, multiplier_text, per_mtok

    book = price_book.current()
    revision = book.shipped
    models = list(book.models.values())
    if model_id is not None:
        price = book.model(model_id)
        if price is None:
            fail(AccountsError(
                "unsupported_pricing",
                "--model: not priced by the shipped revision or one of yours; run 'llm accounts prices' for the list",
            ))
        models = [price]

    def usd_rates(rates):
        return {name: per_mtok(getattr(rates, name)) for name in RATE_NAMES}

    from .capabilities import for_price
    from .ladder import quote_for
    from .pricing.user_prices import prices_dir

    def ceiling(p):
        """One attempt's reservation at the default max_tokens; None for a retired model."""
        return None if p.status == "retired" else quote_for(p.id, book).ceiling_nusd

    def source(r):
        """Where a revision's prices came from (docs/pricing.md "Which price wins")."""
        if r.is_user:
            name = r.id[len("user:"):]
            return {"revision": r.id, "kind": "user", "applies_from": r.applies_from,
                    "overrides_shipped": r.overrides_shipped, "file": str(prices_dir() / f"{name}.json")}
        return {"revision": r.id, "kind": "shipped", "applies_from": r.applies_from, "overrides_shipped": False, "file": None}

    revisions = [revision] + sorted(
        {e.revision.id: e.revision for e in book.entries if e.revision.is_user}.values(), key=lambda r: (r.applies_from, r.id)
    )
    unused = [e for e in book.entries if not e.in_force and e.revision.is_user]
    if json_:
        echo_json(
            {
                "revision": revision.id,
                "read_on": revision.read_on,
                "sources": list(revision.sources),
                "unit": "USD per million tokens",
                "revisions": [source(r) for r in revisions],
                "models": [
                    {
                        "id": p.id,
                        "aliases": list(p.aliases),
                        "display_name": p.display_name,
                        "status": p.status,
                        "context_window": p.context_window,
                        "max_output": p.max_output,
                        "default_max_tokens": None if p.status == "retired" else for_price(p).default_max_tokens,
                        "ceiling_nusd": ceiling(p),
                        "rates": usd_rates(p.rates),
                        "long_context": (
                            {"above_input_tokens": p.long_context[0], "rates": usd_rates(p.long_context[1])}
                            if p.long_context
                            else None
                        ),
                        "inference_geo": {geo: multiplier_text(m) for geo, m in p.inference_geo} or None,
                        "price_revision": book.revision_of(p.id).id,
                    }
                    for p in models
                ],
                "not_in_force": [
                    {"id": e.price.id, "price_revision": e.revision.id, "why": e.note} for e in unused
                ],
                "problems": [str(problem) for problem in book.problems],
            }
        )
        return
    click.echo(f"Price revision {revision.id}, read {revision.read_on} (shipped)")
    for source_url in revision.sources:
        click.echo(f"  {source_url}")
    for r in revisions[1:]:
        where = source(r)
        overrides = ", overrides shipped prices" if r.overrides_shipped else ""
        click.echo(f"Price revision {r.id} (yours: {where['file']}), applies from {r.applies_from}{overrides}")
    for e in unused:
        click.echo(f"  not in force: {e.price.id} of {e.revision.id} ({e.note})")
    for problem in book.problems:
        click.echo(f"  not used: {problem}")
    click.echo("Rates in USD per million tokens\n")
    from .pricing.money import usd_fine

    rows = [
        ("model", "status", "context", "max out", "default", "ceiling", "from",
         "input", "5m write", "1h write", "cache read", "output")
    ]
    for p in models:
        reserve = ceiling(p)
        rows.append(
            (p.id, p.status, f"{p.context_window:,}", f"{p.max_output:,}",
             "-" if reserve is None else f"{for_price(p).default_max_tokens:,}",
             "-" if reserve is None else usd_fine(reserve), book.revision_of(p.id).id)
            + tuple(per_mtok(getattr(p.rates, name)) for name in RATE_NAMES)
        )
        if p.long_context:
            rows.append(
                (f"  > {p.long_context[0]:,} input", "", "", "", "", "", "")
                + tuple(per_mtok(getattr(p.long_context[1], name)) for name in RATE_NAMES)
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        cells = [cell.ljust(w) if i in (0, 1, 6) else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths))]
        click.echo("  ".join(cells).rstrip())
    click.echo(
        "\ndefault: max_tokens without -o max_tokens; ceiling: what one attempt reserves at that default"
        " until it settles (docs/pricing.md \"Ceiling\"); from: the price revision in force"
        " (docs/pricing.md \"Which price wins\")"
    )
    aliases = [(p.id, p.aliases) for p in models if p.aliases]
    if aliases:
        click.echo("\nAliases (exact names only):")
        for model, names in aliases:
            click.echo(f"  {', '.join(names)} -> {model}")
    geos = {}
    for p in models:
        if p.inference_geo:
            geos.setdefault(", ".join(f"{geo} {multiplier_text(m)}x" for geo, m in p.inference_geo), []).append(p.id)
    if geos:
        click.echo(
            "\nInference geo multipliers (every token category; a ceiling covers the largest unless"
            " -o inference_geo global; docs/pricing.md \"Inference geo (data residency)\"):"
        )
        for multipliers, ids in geos.items():
            click.echo(f"  {multipliers}: {', '.join(ids)}")


@prices.command(name="add")
@click.argument("file", type=click.Path(dir_okay=False, path_type=pathlib.Path))
@click.option("--replace", is_flag=True, help="Replace your revision of the same id")
def prices_add(file, replace):
    """Add a price revision of your own, for models the shipped prices lack.

    FILE is a price revision (docs/pricing.md "Your own price revisions"): its id, the date it
    applies from, and per model its id, context window, maximum output, status and five rates
    in integer nanodollars per token ($3 per million tokens is 3000). It is checked as strictly
    as the shipped revision, and against the runs of every declared key, then copied into the
    llm user directory; a file that breaks a rule is refused in one line naming the field and
    the rule, and nothing is added. Its models become claude-routed/<id>. A shipped price still
    wins for a model the shipped revision knows, unless your revision sets
    "overrides_shipped": true and applies from a later date; a replaced shipped price is said on
    stderr, old -> new rates. A shipped model may not get a smaller context window or maximum
    output than the shipped one, a shipped name may not be spelt in another case (names are
    matched ignoring case), and a rate may be 0 only in a model that says "free": true.

    \b
    Example:
        llm accounts prices add my-prices.json
        llm accounts prices add my-prices.json --replace
    """
    from .errors import AccountsError
    from .pricing import user_prices

    try:
        revision = user_prices.read_candidate(file, _declared_key_runs())
        destination = user_prices.add(file, revision, replace=replace)
    except AccountsError as error:
        fail(error)
    from .pricing import price_book

    click.echo(f"Added price revision {revision.id} ({destination}), applying from {revision.applies_from}")
    # Replacing a shipped price changes what every later attempt on it settles at: said, old -> new.
    for line in user_prices.shipped_replacements(revision, price_book.current().shipped):
        click.echo(f"llm-accounts: {line}", err=True)
    routable = []
    for entry in price_book.current().entries:
        if entry.revision.id != revision.id:
            continue
        if not entry.in_force:
            click.echo(f"  not in force: {entry.price.id} ({entry.note})")
        elif entry.price.status != "retired":
            routable.append(f"claude-routed/{entry.price.id}")
    if routable:
        click.echo(f"  routable: {', '.join(routable)}")


@prices.command(name="remove")
@click.argument("revision_id", metavar="ID")
def prices_remove(revision_id):
    """Remove a price revision of your own (ID as 'llm accounts prices' shows it).

    Its models stop being routable. An attempt it priced that is still open can then only be
    settled with 'llm accounts reconcile'.

    \b
    Example:
        llm accounts prices remove user:2026-12-05-mine
    """
    from .errors import AccountsError
    from .pricing import user_prices

    try:
        path = user_prices.remove(revision_id)
    except AccountsError as error:
        fail(error)
    click.echo(f"Removed {path}")


def _model_id(name):
    """The model id attempts record for ``name``: an alias (``claude-sonnet-4-5``) is resolved
    through the prices in force to the dated id it stands for; any other name is kept as given."""
    if name is None:
        return None
    from .pricing import price_book

    price = price_book.current().model(name)
    return price.id if price is not None else name


def _declared_key_runs():
    """A test for a run of any declared key (``scrub.run_detector``), each key resolved once for
    this check and dropped; None with no accounts declared. A key that cannot be resolved is
    skipped: its account refuses its own prompts anyway."""
    from . import keys
    from .declarations import load_declaration
    from .errors import AccountsError
    from .wire import scrub

    declaration = load_declaration()
    if not declaration.routed:
        return None
    detectors = []
    for env in dict.fromkeys(v for a in declaration.accounts for v in (a.key_env, a.admin_key_env) if v):
        try:
            secret = keys.resolve_key(env, declaration)
        except AccountsError:
            continue
        detectors.append(scrub.run_detector(secret.reveal()))
        secret = None
    return lambda text: any(holds(text) for holds in detectors)


# Declaring accounts: add, remove, list, lookup
# (docs/architecture.md "Environment", "An account declaration" and "Key resolution").


def _warn_if_overridden():
    """accounts.json is the lowest source: say so when a higher one replaces it here."""
    from .declarations import overriding_source
    from .errors import AccountsError

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


@accounts.command()
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
    from .declarations import account_from_options, add_account, usd_text
    from .errors import AccountsError

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
    from .declarations import describe_changes

    for field, before, after in describe_changes(old, new):
        click.echo(f"  {field}: {before} -> {after}")


@accounts.command(name="set")
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
    from .declarations import changed_settings, set_account
    from .errors import AccountsError

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


def _small_limits(declared):
    """A limit below the default model's ceiling never admits a plain claude-routed prompt: said,
    not refused (docs/pricing.md "Small budgets")."""
    from .pricing import price_book
    from .pricing.fits import warnings

    book = price_book.current()
    return [line for account in declared for line in warnings(account, book)]


def _warn_small_limits(declared):
    for line in _small_limits(declared):
        click.echo(line, err=True)


def _check_against_ledger(account):
    """Refuse a declaration the current credit period cannot admit (another monthly budget or
    key_env than the period fixed, or a key whose budget another name holds), before it is written.
    A missing ledger holds no period, so it is not created for this."""
    from .ledger import Ledger
    from .paths import ledger_path

    if not ledger_path().exists():
        return
    with Ledger() as ledger:
        ledger.check_declaration(account)


@accounts.command()
@click.argument("name")
def remove(name):
    """Remove an account from accounts.json.

    Its ledger history is kept, and the ledger marks it removed (the dashboard shows it so) until
    it is declared and used again.

    \b
    Example:
        llm accounts remove work
    """
    from .declarations import remove_account
    from .errors import AccountsError

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
    from .errors import AccountsError
    from .ledger import Ledger
    from .paths import ledger_path

    if not ledger_path().exists():
        return
    try:
        with Ledger() as ledger:
            ledger.mark_removed(name)
    except AccountsError as error:
        click.echo(f"Warning: {error} (the ledger does not mark account {name} removed)", err=True)


def _source_text(declaration):
    import os

    from .declarations import accounts_file_path

    if declaration.source == "environment":
        return "ANTHROPIC_ACCOUNTS in the environment"
    if declaration.source == "accounts.json":
        return str(accounts_file_path())
    if declaration.source:
        return f"ANTHROPIC_ACCOUNTS in {os.path.join(os.getcwd(), declaration.source)}"
    return None


def _clients_json(account):
    """``llm accounts list --json``'s caps of one account: per client, its dollar and token caps."""
    from .declarations import usd_text

    clients = {}
    for label, cap in account.clients:
        clients.setdefault(label, {}).update(budget_usd=usd_text(cap), budget_nusd=cap)
    for label, cap in account.client_tokens:
        clients.setdefault(label, {})["tokens"] = cap
    return dict(sorted(clients.items()))


@accounts.command(name="list")
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
    from .declarations import load_declaration, usd_text
    from .errors import AccountsError

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


@accounts.group(cls=_Group, invoke_without_command=True)
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

    from .declarations import read_accounts_file
    from .errors import AccountsError

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
    from .declarations import set_lookup
    from .errors import AccountsError

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
    from .declarations import set_lookup
    from .errors import AccountsError

    try:
        path = set_lookup(None)
    except AccountsError as error:
        fail(error)
    click.echo(f"Lookup command cleared ({path})")


@accounts.command()
@click.option("--keep", is_flag=True, help="Keep the demo's llm user directory and ledger, and say how to explore them")
@click.option("--browse", is_flag=True, help="End by opening the demo ledger's dashboard in Datasette")
def demo(keep, browse):
    """Show what llm-accounts does, on three demo accounts and the local stand-in.

    Needs no network and no real key: the demo starts the Messages API stand-in on loopback,
    declares three accounts in a throwaway llm user directory and runs real llm commands:
    two conversations on two accounts, a continued conversation staying put, a 429 moving a
    new conversation, a budget refusal, the routing record in llm logs, and the status table.

    \b
    Example:
        llm accounts demo
        llm accounts demo --keep --browse
    """
    from .demo import run_demo

    run_demo(keep=keep, browse=browse)


# The ledger: status, attempts, blocks, reconciliation, corrections and rebinding
# (docs/architecture.md "Ledger").


def _ledger():
    from .errors import AccountsError
    from .ledger import Ledger

    try:
        return Ledger()
    except AccountsError as error:
        fail(error)


def _declared_accounts(strict=False):
    """The declared accounts, or () when the declaration cannot be read and ``strict`` is off
    (block, unblock and friends work by name from the ledger alone)."""
    from .declarations import load_declaration
    from .errors import AccountsError

    try:
        return load_declaration().accounts
    except AccountsError as error:
        if strict:
            fail(error)
        return ()


def _known_account(ledger, name):
    """NAME as the ledger takes it: the declared account, else a name the ledger already holds.

    Any other name is refused without repeating it (a key pasted as NAME must not be echoed);
    a name that matched a declaration or the ledger exactly is safe to show.
    """
    from .errors import AccountsError

    declared = next((a for a in _declared_accounts() if a.name == name), None)
    if declared is not None:
        return declared
    try:
        held = {line.name for line in ledger.status(())}
    except AccountsError as error:
        fail(error)
    if name not in held:
        fail(AccountsError(
            "not_found",
            "NAME: no declared account and no account in the ledger has this name (see llm accounts list)",
        ))
    return name


def _usd_option(text, field, *, signed=False, allow_zero=False):
    """A dollar amount from the command line as nanodollars; only ``--delta`` takes a sign."""
    import re

    from .errors import AccountsError
    from .pricing.money import parse_usd

    sign = 1
    if signed and text[:1] in ("-", "+"):
        sign, text = (-1 if text[0] == "-" else 1), text[1:]
    if allow_zero and re.fullmatch(r"0+(\.0{1,9})?", text):
        return 0
    try:
        return sign * parse_usd(text, field)
    except AccountsError as error:
        if signed:
            error = AccountsError(
                error.code,
                f"{field}: must be a non-zero signed decimal number of US dollars with at most 9 fractional digits, such as 1.25 or -0.40",
            )
        elif allow_zero:
            error = AccountsError(
                error.code,
                f"{field}: must be a decimal number of US dollars, zero or more, with at most 9 fractional digits, such as 0 or 1.25",
            )
        fail(error)


def _table(rows):
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())


@accounts.command()
@click.option("json_", "--json", is_flag=True, help="Output JSON")
@click.option("--check", is_flag=True, help="Exit 1 when no account can take a default prompt, or one is past a warning threshold, blocked or failing (one line each on stderr)")
@click.option("-v", "--verbose", is_flag=True, help="Also print the declaration warnings (limits too small for the default model)")
def status(json_, check, verbose):
    """Budget, spend, open ceilings, remaining, today's spend and health per account.

    Figures are for the current credit period (it starts 00:00 UTC on the last day of the
    previous month). "open" is the worst-case ceiling of attempts not yet settled; "today" is the
    day's spend and what is left of a daily budget. Notes say since when a failing account fails,
    which accounts 'llm accounts remove' removed and which have NO KEY (their key_env is in none of
    the places keys are read from; new conversations move past them). Under the table, each account's pace: when
    its budget runs out at the rate of its last 7 days' settled spend, against the period's reset,
    and how much a day is left to last the period. A limit below the ceiling of a plain
    claude-routed prompt is warned about when the account is added or set, and here with
    --verbose (in --json, always under "warnings"), so a cron job is not mailed it every run.

    \b
    Example:
        llm accounts status
        llm accounts status --json
        llm accounts status --check || notify-me   # for cron and CI

    --check prints the status as usual, then one line per problem on stderr and exits 1 if
    there is any (0 when all is well, 2 on a usage error). When no declared account can take a
    plain claude-routed prompt now (its ceiling does not fit what is left of a budget after
    spend and held ceilings, a daily budget, or the account is blocked or cooling), each
    account gets a line saying why.
    """
    from .errors import AccountsError
    from .paths import ledger_path
    from .pricing.money import usd, usd_fine

    declared = _declared_accounts(strict=True)
    if not declared and not ledger_path().exists():
        if json_:
            echo_json({"routed": False, "accounts": []})
        else:
            click.echo("No accounts declared: claude-routed sends unrouted with your 'anthropic' key, without the ledger")
        return
    ledger = _ledger()
    try:
        lines = ledger.status(declared)
        warmth = ledger.warm_summary()
    except AccountsError as error:
        fail(error)
    # Each account's model list: when it was fetched, and a refresh that failed (llm_accounts.catalog).
    from . import catalog, clock

    try:
        served, at = catalog.load(), clock.now()
    except AccountsError as error:
        fail(error)
    model_lists = {line.name: catalog.list_status(line.name, served, at) for line in lines}
    key_states = _key_states(declared)
    problems = _check_problems(lines, declared) if check else []
    if check and declared:
        try:
            problems = _no_default_room(declared) + problems
        except AccountsError as error:
            fail(error)
    if json_:
        echo_json(
            {
                "routed": bool(declared),
                "accounts": [
                    {**line.as_dict(), "model_list": model_lists[line.name].as_dict(), "key": key_states.get(line.name)}
                    for line in lines
                ],
                "warm_prefix": _warm_json(warmth),
                "warnings": _small_limits(declared),
            }
        )
        _exit_on_problems(problems)
        return
    if verbose:
        _warn_small_limits(declared)
    if not declared:
        click.echo("No accounts declared: claude-routed sends unrouted. Ledger history:")
    if not lines:
        click.echo("No accounts in the ledger yet")
        return
    rows = [("account", "budget", "spent", "open", "remaining", "today", "health", "last success", "notes")]
    for line in lines:
        today = "-"
        if line.daily_budget_nusd is not None:
            today = (
                f"{usd_fine(line.today_settled_nusd + line.today_open_nusd)} of {usd(line.daily_budget_nusd)}"
                f", {usd_fine(max(line.today_remaining_nusd, 0))} left"
            )
        health = line.health
        if health in ("cooling", "probing") and line.failure_class:
            health = f"{health} ({line.failure_class})"
            if line.cooldown_until and health.startswith("cooling"):
                health += f" until {line.cooldown_until[11:16]} UTC"
        notes = []
        if line.removed_at:
            notes.append(f"REMOVED {line.removed_at[:16].replace('T', ' ')} UTC (llm accounts remove)")
        if line.blocked_reason:
            notes.append(f"BLOCKED ({line.blocked_reason})")
        if line.failing_since:
            notes.append(f"failing since {line.failing_since[:16].replace('T', ' ')} UTC")
        if key_states.get(line.name) == "missing":
            notes.append(f"NO KEY ({next(a.key_env for a in declared if a.name == line.name)})")
        if line.config_conflict:
            notes.append("declaration differs from this period's budget")
        if not line.declared and not line.removed_at:
            notes.append("not declared")
        if line.open_attempts:
            notes.append(f"{line.open_attempts} open")
        if line.client_caps:
            full = sum(
                1 for cap in line.client_caps
                if (cap.remaining_nusd is not None and cap.remaining_nusd <= 0)
                or (cap.tokens_remaining is not None and cap.tokens_remaining <= 0)
            )
            notes.append(
                f"{len(line.client_caps)} client cap{'s' if len(line.client_caps) != 1 else ''}"
                + (f" ({full} reached)" if full else "")
            )
        for cap in line.client_caps:
            if cap.token_cap is not None:
                notes.append(f"{cap.client} {cap.tokens_committed:,} of {cap.token_cap:,} tokens")
        if line.clients_only:
            notes.append("listed clients only")
        for model, until in line.model_cooldowns:
            notes.append(f"{model} unavailable until {until[11:16]} UTC")
        if model_lists[line.name].note():
            notes.append(model_lists[line.name].note())
        rows.append(
            (
                line.name,
                usd(line.budget_nusd),
                usd_fine(line.spent_nusd),
                usd_fine(line.open_ceiling_nusd),
                usd_fine(line.remaining_nusd),
                today,
                health,
                line.last_success_at[:16].replace("T", " ") if line.last_success_at else "-",
                "; ".join(notes),
            )
        )
    _table(rows)
    if warmth:
        click.echo("\n" + _warm_line(warmth))
    first = lines[0]
    click.echo(f"\nCredit period {first.month_utc} resets {first.resets_at[:16].replace('T', ' ')} UTC")
    # The pace forecast of each account still in use (docs/architecture.md "Pace forecast").
    from .forecast import sentence

    for line in lines:
        if line.forecast is not None and not line.removed_at:
            left = f"{usd_fine(line.forecast.per_day_left_nusd)} a day left to last the period"
            click.echo(f"Pace: {sentence(line.name, line.forecast)}; {left}")
    # The usage-report pass that runs after prompts says nothing in a prompt; its failure is said here.
    if any(account.admin_key_env for account in declared):
        from .provider import settle as provider_pass

        try:
            note = provider_pass.status_note(provider_pass.load_state())
        except AccountsError as error:
            fail(error)
        if note:
            click.echo(note)
    _exit_on_problems(problems)


def _key_states(declared):
    """Per declared account, whether its key_env is found by name (``keys.key_state``): an
    account whose key is missing looks healthy to the ledger, but new conversations move past it
    and a conversation bound to it fails (docs/architecture.md "Key resolution")."""
    from . import keys
    from .declarations import load_declaration

    if not declared:
        return {}
    declaration = load_declaration()
    return {account.name: keys.key_state(account.key_env, declaration) for account in declared}


def _check_problems(lines, declared):
    """``status --check``'s problems: an account past a warning threshold, blocked or failing
    (docs/architecture.md "Budget warnings")."""
    from . import thresholds

    by_name = {account.name: account for account in declared}
    problems = []
    for line in lines:
        account = by_name.get(line.name)
        warn_at = account.warn_thresholds if account is not None else thresholds.DEFAULT_WARN_AT
        problems.extend(thresholds.check_problems(line, warn_at))
    return problems


def _no_default_room(declared):
    """``status --check``: when no declared account can take a plain claude-routed prompt now,
    one line per account naming why, from the verdict admission itself gives (``Ledger.ladder``);
    none when one can."""
    import os

    from . import catalog, ladder, selection
    from .ledger import Ledger
    from .pricing import fits, price_book

    book = price_book.current()
    quote = ladder.quote_for(fits.default_model(), book)
    accounts_ = catalog.effective_accounts(declared, book, catalog.load())
    with Ledger() as ledger:
        _, verdicts = ledger.ladder(accounts_, quote, client=os.environ.get("LLM_ACCOUNTS_CLIENT") or None)
    if not verdicts or any(v.code is None for v in verdicts.values()):
        return []
    return [
        f"account '{name}' cannot take a default prompt (up to {selection.money(quote.ceiling_nusd)}): {selection.cause(v)}"
        for name, v in verdicts.items()
    ]


def _exit_on_problems(problems):
    for problem in problems:
        click.echo(f"llm-accounts: check: {problem}", err=True)
    if problems:
        raise SystemExit(1)


def _warm_json(warmth):
    """``status --json``'s warm-prefix figures for this credit period (docs/architecture.md "Warm prefixes")."""
    totals = [sum(v[i] for v in warmth.values()) for i in range(3)]
    return {
        "bound_warm": totals[0],
        "bound_cold": totals[1],
        "cache_saved_nusd": totals[2],
        "by_account": {
            name: {"bound_warm": w, "bound_cold": c, "cache_saved_nusd": saved} for name, (w, c, saved) in sorted(warmth.items())
        },
    }


def _warm_line(warmth):
    """New conversations with a one-hour prefix this period, by where they bound, and what the cache saved."""
    from .pricing.money import usd_fine

    figures = _warm_json(warmth)
    return (
        f"New conversations this period with a one-hour prompt prefix: {figures['bound_warm']} bound warm, "
        f"{figures['bound_cold']} cold; the cache saved {usd_fine(figures['cache_saved_nusd'])} "
        "(cache reads at base input price minus what they cost)"
    )


def _instant(text, option, *, end=False):
    """The ledger time string for an ``--since``/``--until`` value: an ISO date (its 00:00 UTC;
    for ``end``, the next day's, so the day is included) or an ISO instant (UTC if it names no
    offset). The value is never repeated in the error: it is free text from the command line."""
    import datetime as dt

    from . import clock
    from .records import invalid

    try:
        if len(text) == 10:
            day = dt.date.fromisoformat(text) + dt.timedelta(days=1 if end else 0)
            return clock.isoformat(dt.datetime(day.year, day.month, day.day, tzinfo=clock.UTC))
        instant = dt.datetime.fromisoformat(text)
    except ValueError:
        raise invalid(option, "must be an ISO date (2026-12-01) or instant (2026-12-01T09:30:00Z)") from None
    return clock.isoformat(instant if instant.tzinfo else instant.replace(tzinfo=clock.UTC))


def _echo_csv(header, rows):
    import csv
    import io

    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    click.echo(out.getvalue(), nl=False)


_ATTEMPT_CSV = ("id", "created_at", "account", "state", "outcome", "requested_model", "served_model", "client",
                "scope_kind", "scope_id", "ceiling_nusd", "cost_nusd", "ceiling_usd", "cost_usd")


@accounts.command()
@click.argument("attempt_id", required=False)
@click.option("open_", "--open", is_flag=True, help="Only attempts still holding their ceiling")
@click.option("--account", metavar="NAME", help="Only this account's attempts")
@click.option("--model", metavar="MODEL", help="Only attempts that requested or were served this model")
@click.option("--client", metavar="LABEL", help="Only attempts with this client label")
@click.option("--conversation", metavar="ID", help="Only this llm conversation's attempts")
@click.option("--since", metavar="WHEN", help="Only attempts created at or after this ISO date or instant (UTC)")
@click.option("--until", metavar="WHEN", help="Only attempts created before this instant, or up to the end of this ISO date (UTC)")
@click.option("--limit", type=click.IntRange(1), metavar="N", help="Newest N attempts (default 20; with --open, every open attempt)")
@click.option("json_", "--json", is_flag=True, help="Output JSON")
@click.option("csv_", "--csv", is_flag=True, help="Output CSV (money as nanodollars and exact dollars)")
def attempts(attempt_id, open_, account, model, client, conversation, since, until, limit, json_, csv_):
    """List attempts, newest first: id, account, state, outcome, ceiling and cost.

    An open attempt keeps its ceiling counted against the budget until it is settled or
    reconciled ('llm accounts reconcile ATTEMPT_ID --cost USD --source REF'). With --open every
    open attempt is listed unless --limit is given; when a limit leaves attempts out, a line
    after the table says how many. Give ATTEMPT_ID (or a unique prefix of it, at least 4
    characters) to show just that attempt.

    \b
    Example:
        llm accounts attempts --open
        llm accounts attempts --account work --limit 5 --json
        llm accounts attempts --model claude-sonnet-4-5 --since 2026-12-01 --csv
        llm accounts attempts --client nightly --until 2026-12-01T12:00:00Z
        llm accounts attempts 0f6c3a52 --json
    """
    from .errors import AccountsError
    from .pricing.money import usd_exact, usd_fine

    filters = {"state": "open"} if open_ else {}
    if limit is None and not open_:
        limit = 20
    try:
        if json_ and csv_:
            raise AccountsError("declaration_invalid", "--json, --csv: give one output format, not both")
        for key, value in (("account", account), ("model", _model_id(model)), ("client", client), ("scope_id", conversation)):
            if value is not None:
                filters[key] = value
        if conversation is not None:
            filters["scope_kind"] = "conversation"
        if since is not None:
            filters["since"] = _instant(since, "--since")
        if until is not None:
            filters["until"] = _instant(until, "--until", end=True)
        ledger = _ledger()
        if attempt_id is not None:
            filters = {**filters, "id": ledger.resolve_attempt_id(attempt_id)}
        # A filter the totals tables do not carry (model, client, conversation, a time range)
        # would make the "N more" count read every attempt; one row past the limit says whether
        # there are more instead (docs/performance.md "Spend views at any length of history").
        counted = not set(filters) & {"model", "client", "scope_id", "since", "until"}
        rows = ledger.attempts(limit=limit if counted or limit is None else limit + 1, **filters)
        if not counted and limit is not None and len(rows) > limit:
            rows, total = rows[:limit], None
        else:
            total = ledger.attempt_count(**filters) if limit is not None and len(rows) == limit else len(rows)
    except AccountsError as error:
        fail(error)
    if json_:
        for row in rows:
            row["usage"] = json.loads(row.pop("usage_json")) if row.get("usage_json") else None
        echo_json(rows)
        return
    if csv_:
        _echo_csv(_ATTEMPT_CSV, (
            [row[name] for name in _ATTEMPT_CSV[:-2]] + [usd_exact(row["ceiling_nusd"]), usd_exact(row["cost_nusd"])]
            for row in rows
        ))
        return
    if not rows:
        click.echo("No open attempts" if open_ else "No attempts")
        return
    table = [("id", "created (UTC)", "account", "state", "outcome", "ceiling", "cost", "model")]
    for row in rows:
        table.append(
            (
                row["id"],
                row["created_at"][:19].replace("T", " "),
                row["account"],
                row["state"],
                row["outcome"] or "-",
                usd_fine(row["ceiling_nusd"]),
                usd_fine(row["cost_nusd"]),
                row["served_model"] or row["requested_model"],
            )
        )
    _table(table)
    if total is None:
        click.echo(f"More attempts match; show more with --limit {limit * 2}")
        return
    more = total - len(rows)
    if more > 0:
        kind = "open attempt" if open_ else "attempt"
        click.echo(f"{more} more {kind}{'s' if more != 1 else ''}; show them with --limit {total}")


@accounts.command()
@click.option("--by", "by", type=click.Choice(["account", "model", "client", "conversation", "day"]), default="account",
              show_default=True, help="Group the spend by this")
@click.option("--period", metavar="YYYY-MM", help="Credit period (default: the current one)")
@click.option("--account", metavar="NAME", help="Only this account's spend")
@click.option("--client", metavar="LABEL", help="Only attempts with this client label")
@click.option("--limit", type=click.IntRange(1), metavar="N",
              help="With --by conversation: the N costliest (default 20)")
@click.option("json_", "--json", is_flag=True, help="Output JSON (money in nanodollars)")
@click.option("csv_", "--csv", is_flag=True, help="Output CSV (money as nanodollars and exact dollars)")
def spend(by, period, account, client, limit, json_, csv_):
    """Spend of one credit period by account, model, client label, conversation or UTC day.

    Settled is what settled attempts cost; held is the ceilings of open attempts, still counted
    against the budget until they settle or are reconciled: held is never shown as spent. Models
    are the requested ones. With --by client, attempts without a label are listed as "(none)".

    With --by conversation, the costliest conversations come first (settled plus held), with the
    account each spent on, 20 unless --limit says; a line after the table (on stderr with --csv;
    "more" in --json) says how many more the period holds, and the total covers them all. A conversation moved to another account
    ('llm accounts rebind') has a row per account. Prompts made without a conversation (from
    Python, model.prompt()) follow in a row per account labelled "(prompts without a
    conversation)" ("without_conversation" in --json), and the total includes them.

    \b
    Example:
        llm accounts spend
        llm accounts spend --by model --period 2026-11
        llm accounts spend --by day --account work --csv
        llm accounts spend --by conversation --limit 5
        llm accounts spend --by conversation --client nightly --json
    """
    import re

    from . import clock
    from .errors import AccountsError
    from .pricing.money import usd_exact, usd_fine

    try:
        if json_ and csv_:
            raise AccountsError("declaration_invalid", "--json, --csv: give one output format, not both")
        if period is None:
            period = clock.credit_month(clock.now())
        elif not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", period):
            raise AccountsError("declaration_invalid", "--period: must be a credit period YYYY-MM, such as 2026-11")
        if limit is not None and by != "conversation":
            raise AccountsError("declaration_invalid", "--limit: only with --by conversation (the other views are a few rows)")
        if by == "conversation":
            # The costliest first, from an index, however many the period holds (docs/performance.md).
            found = _ledger().spend_by_conversation(period, account=account, client=client, limit=limit or 20)
            rows, more, without = found["rows"], found["more"], found["without_conversation"]
            # The total is the period's, prompts without a conversation included, as 'spend' shows it.
            total = {name: found["total"][name] + sum(row[name] for row in without)
                     for name in ("attempts", "settled_nusd", "open_nusd")}
        else:
            rows, more, without = _ledger().spend_by(by, period, account=account, client=client), 0, []
            total = {name: sum(row[name] for row in rows) for name in ("attempts", "settled_nusd", "open_nusd")}
    except AccountsError as error:
        fail(error)
    extra = ("account",) if by == "conversation" else ()
    if json_:
        listed = [{by: row["key"], **{k: row[k] for k in extra + tuple(total)}} for row in rows]
        more_fields = {"without_conversation": without, "more": more} if extra else {}
        echo_json({"period": period, "by": by, "rows": listed, **more_fields, "total": total})
        return
    # Prompts without a conversation (Python's model.prompt()) follow the conversations, one row
    # per account, under a label no conversation id can be (docs/architecture.md "Spend").
    labelled = [dict(row, key=WITHOUT_CONVERSATION) for row in without]
    if csv_:
        _echo_csv((by, *extra, "attempts", "settled_nusd", "open_nusd", "settled_usd", "open_usd"), (
            (row["key"], *(row[k] for k in extra), row["attempts"], row["settled_nusd"], row["open_nusd"],
             usd_exact(row["settled_nusd"]), usd_exact(row["open_nusd"])) for row in rows + labelled
        ))
        if more > 0:  # on stderr, so the CSV stays rows only
            click.echo(_more_conversations(more, len(rows)), err=True)
        return
    if not rows and not labelled:
        click.echo(f"No attempts in credit period {period}")
        return
    table = [(by, *extra, "attempts", "settled", "held (open)")]
    for row in rows + labelled + [dict(total, key="total", account="")]:
        key = "(none)" if row["key"] is None else row["key"]
        table.append((key, *(row[k] for k in extra), row["attempts"], usd_fine(row["settled_nusd"]),
                      usd_fine(row["open_nusd"])))
    click.echo(f"Credit period {period}")
    _table(table)
    if more > 0:
        click.echo(_more_conversations(more, len(rows)))


# The --by conversation row of prompts without a conversation: llm conversation ids never hold "(".
WITHOUT_CONVERSATION = "(prompts without a conversation)"


def _more_conversations(more, shown):
    return f"and {more:,} more conversation{'s' if more != 1 else ''}; show them with --limit {shown + more}"


@accounts.command()
@click.argument("name")
def block(name):
    """Stop new attempts on an account until 'llm accounts unblock NAME'.

    Conversations bound to it are refused rather than moved (move one with 'llm accounts rebind').

    \b
    Example:
        llm accounts block work
    """
    from .errors import AccountsError

    try:
        ledger = _ledger()
        result = ledger.block(_known_account(ledger, name), "manual")
    except AccountsError as error:
        fail(error)
    click.echo(f"Account {name} {'was already blocked' if result == 'already_blocked' else 'blocked'}; unblock it with: llm accounts unblock {name}")


@accounts.command()
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

    from .errors import AccountsError

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


@accounts.command()
@click.argument("args", nargs=-1, metavar="[ATTEMPT_ID | USD...]")
@click.option("--cost", metavar="USD", help="What the attempt really cost, in US dollars (0 allowed); with --open, each open attempt's cost")
@click.option("--source", metavar="REF", help="Where the figure comes from (console usage page, invoice line)")
@click.option("adjustment_id", "--id", metavar="ID", help="Adjustment id (default: a new one)")
@click.option("open_", "--open", is_flag=True, help="Settle every open attempt of --account, oldest first: one USD each, or --cost for all")
@click.option("--account", metavar="NAME", help="The account whose open attempts --open or --from-provider settles")
@click.option("--from-provider", is_flag=True, help="Settle open attempts from the organization's usage report (needs admin_key_env)")
@click.option("--model", metavar="MODEL", help="With --open: only attempts that requested or were served this model")
@click.option("--since", metavar="WHEN", help="With --open: only attempts created at or after this ISO date or instant (UTC)")
@click.option("--until", metavar="WHEN", help="With --open: only attempts created before this instant, or up to the end of this ISO date (UTC)")
@click.option("--dry-run", is_flag=True, help="With --open: list what would be settled and the total; write nothing")
@click.option("json_", "--json", is_flag=True, help="With --from-provider: what was settled and what was kept open, as JSON")
def reconcile(args, cost, source, adjustment_id, open_, account, from_provider, model, since, until, dry_run, json_):
    """Settle open attempts at a known cost, each recorded with its source.

    Use it for attempts left open by an unknown outcome (5xx, a broken stream, a killed
    process): until then their ceiling counts against the budget. A settled cost is never
    rewritten; use 'llm accounts adjust' for corrections. ATTEMPT_ID may be a unique prefix
    of the id (at least 4 characters).

    --open --account NAME settles every open attempt of NAME at once, oldest first (the
    order of 'llm accounts attempts --open --account NAME', read from the bottom): one USD
    amount each, or --cost for all of them. Each is its own sourced reconciliation. --model,
    --since and --until narrow them; --dry-run lists them and the total and writes nothing. An
    attempt with no outcome recorded may still be running (here or on another machine) and is
    left alone; one whose process on this machine is gone is recorded cancelled and settled.

    --from-provider reads the usage report of each account that declares admin_key_env and
    settles an open attempt only where the report leaves no doubt; it says which attempts
    stay open and why (docs/architecture.md "Settling from the provider"). The same pass
    also runs by itself after routed prompts.

    \b
    Example:
        llm accounts attempts --open
        llm accounts reconcile 0f6c3a52 --cost 0.0412 --source "console usage 2026-11-03"
        llm accounts reconcile --open --account work 0.0412 0 --source "console usage 2026-11-03"
        llm accounts reconcile --open --account work --cost 0 --source "console: nothing billed 2026-11-03"
        llm accounts reconcile --open --account work --since 2026-11-03 --cost 0 --dry-run
        llm accounts reconcile --from-provider --account work
    """
    from .errors import AccountsError

    if not open_ and (model or since or until or dry_run):
        fail(AccountsError("declaration_invalid", "--model, --since, --until and --dry-run: go with --open"))
    if from_provider:
        if args or cost is not None or source is not None or open_ or adjustment_id is not None:
            fail(AccountsError("declaration_invalid", "--from-provider: takes no ATTEMPT_ID, USD, --cost, --source, --open or --id; the report is the source"))
        _reconcile_from_provider(account, json_)
        return
    if json_:
        fail(AccountsError("declaration_invalid", "--json: goes with --from-provider"))
    if source is None and not (open_ and dry_run):
        fail(AccountsError("declaration_invalid", "--source: is required: name where the figure comes from, such as \"console usage 2026-11-03\""))
    if open_:
        _reconcile_open(account, args, cost, source, adjustment_id, model, since, until, dry_run)
        return
    if account is not None:
        fail(AccountsError("declaration_invalid", "--account: goes with --open or --from-provider"))
    if len(args) != 1:
        fail(AccountsError("declaration_invalid", "ATTEMPT_ID: give exactly one attempt id, or --open --account NAME for several"))
    if cost is None:
        fail(AccountsError("declaration_invalid", "--cost: is required: what the attempt really cost in US dollars, such as 0.0412 or 0"))
    import uuid

    from .pricing.money import usd

    nusd = _usd_option(cost, "--cost", allow_zero=True)
    try:
        ledger = _ledger()
        attempt_id = ledger.resolve_attempt_id(args[0])
        result = ledger.reconcile(adjustment_id or uuid.uuid4().hex, attempt_id, nusd, source)
    except AccountsError as error:
        fail(error)
    if result == "already_recorded":
        click.echo(f"Attempt {attempt_id} was already reconciled with this id")
    else:
        click.echo(f"Attempt {attempt_id} settled at {usd(nusd, 4)}")


def _reconcile_open(account, amounts, cost, source, adjustment_id, model=None, since=None, until=None, dry_run=False):
    """``reconcile --open --account NAME``: every open attempt of NAME (narrowed by ``model``,
    ``since``, ``until``), oldest first, each its own sourced reconciliation. The amounts are all
    checked before anything is written; ``dry_run`` lists them and writes nothing."""
    import uuid

    from .errors import AccountsError
    from .pricing.money import usd, usd_fine

    if account is None:
        fail(AccountsError("declaration_invalid", "--open: needs --account NAME (the account whose open attempts to settle)"))
    if adjustment_id is not None:
        fail(AccountsError("declaration_invalid", "--id: names one reconciliation; --open records one per attempt with ids of its own"))
    if (cost is not None and amounts) or (cost is None and not amounts and not dry_run):
        fail(AccountsError("declaration_invalid", "USD: give one amount per open attempt, oldest first, or --cost for all of them (not both)"))
    filters = {}
    try:
        if model:
            filters["model"] = model
        if since:
            filters["since"] = _instant(since, "--since")
        if until:
            filters["until"] = _instant(until, "--until", end=True)
    except AccountsError as error:
        fail(error)
    ledger = _ledger()
    try:
        name = _known_account(ledger, account)
        name = getattr(name, "name", name)
        # A gone process's attempt gets its outcome first (docs/architecture.md "A process that is
        # gone"); one still without an outcome may be streaming in another process or on another
        # machine, and a guessed cost would conflict with its answer and block the account. A dry
        # run writes nothing: it only asks which of them are gone.
        if dry_run:
            gone = _gone_here(ledger)
        else:
            ledger.abandoned()
            gone = set()
        rows = ledger.open_attempts(account=name, **filters)
    except AccountsError as error:
        fail(error)
    running = [row for row in rows if row["outcome"] is None and row["id"] not in gone]
    rows = [row for row in rows if row["outcome"] is not None or row["id"] in gone]
    if running:
        click.echo(
            f"{len(running)} open attempt{'s' if len(running) != 1 else ''} of {name} with no outcome recorded "
            "(still running, here or on another machine) left alone",
            err=True,
        )
    if not rows:
        click.echo(f"Account {name} has no open attempts with an outcome recorded")
        return
    if amounts and len(amounts) != len(rows):
        shown = ", ".join(row["id"][:8] for row in rows[:10]) + (", ..." if len(rows) > 10 else "")
        fail(AccountsError(
            "declaration_invalid",
            f"USD: account {name} has {len(rows)} open attempt{'s' if len(rows) != 1 else ''} ({shown}, oldest first) "
            f"and {len(amounts)} amount{'s were' if len(amounts) != 1 else ' was'} given; give one each or --cost for all "
            f"(see llm accounts attempts --open --account {name})",
        ))
    costs = [_usd_option(text, f"USD <entry {n}>", allow_zero=True) for n, text in enumerate(amounts, start=1)]
    if not amounts:
        costs = [None if cost is None else _usd_option(cost, "--cost", allow_zero=True)] * len(rows)
    if dry_run:
        for row, nusd in zip(rows, costs):
            at = "" if nusd is None else f" at {usd(nusd, 4)}"
            click.echo(
                f"Would settle attempt {row['id']} ({row['outcome'] or 'cancelled: its process is gone'}, "
                f"{row['requested_model']}, {row['created_at'][:19].replace('T', ' ')} UTC, holding {usd_fine(row['ceiling_nusd'])}){at}"
            )
        held = sum(row["ceiling_nusd"] for row in rows)
        total = "" if None in costs else f" at {usd_fine(sum(costs))} in all"
        click.echo(f"{len(rows)} open attempt{'s' if len(rows) != 1 else ''} of {name} holding {usd_fine(held)} would be settled{total}; nothing was written")
        return
    failed = 0
    for row, nusd in zip(rows, costs):
        try:
            ledger.reconcile(uuid.uuid4().hex, row["id"], nusd, source)
        except AccountsError as error:
            failed += 1
            click.echo(f"Attempt {row['id']} not settled: {error}", err=True)
            continue
        click.echo(f"Attempt {row['id']} settled at {usd(nusd, 4)}")
    if failed:
        fail(AccountsError("settlement_conflict", f"{failed} of {len(rows)} open attempts of {name} were not settled (see above); the others were"))


def _gone_here(ledger):
    """Ids of the attempts in flight on this machine whose process is gone (what
    ``Ledger.abandoned`` would record cancelled), read without writing: for ``--dry-run``."""
    from . import liveness

    return {
        row["id"] for row in ledger.open_attempts()
        if row["outcome"] is None and row["host"] == ledger.host and row["pid"] is not None
        and liveness.gone(row["pid"], row["pid_started"])
    }


def _with_admin_keys(account, section):
    """``(declaration, names)`` for a ``--from-provider`` command: the accounts it reads (all when
    ``account`` is None), refused in one line unless one declares an Admin API key."""
    from .declarations import load_declaration
    from .errors import AccountsError

    try:
        declaration = load_declaration()
    except AccountsError as error:
        fail(error)
    names = None
    if account is not None:
        if account not in {a.name for a in declaration.accounts}:
            fail(AccountsError("not_found", "--account: names no declared account (see llm accounts list)"))
        names = {account}
    if not any(a.admin_key_env for a in declaration.accounts if names is None or a.name in names):
        fail(AccountsError(
            "declaration_invalid",
            "--from-provider: no account declares admin_key_env, so no report from the provider can be read; "
            f"add it with llm accounts set NAME --admin-key-env VAR (docs/architecture.md \"{section}\")",
        ))
    return declaration, names


def _reconcile_from_provider(account, json_):
    from .errors import AccountsError
    from .pricing.money import usd_fine
    from .provider import settle as provider_pass

    declaration, names = _with_admin_keys(account, "Settling from the provider")
    ledger = _ledger()
    try:
        results = provider_pass.settle_from_provider(declaration, ledger, names)
    except AccountsError as error:
        fail(error)
    if json_:
        echo_json([result.as_dict() for result in results])
    else:
        for result in results:
            if result.skipped:
                click.echo(f"{result.account}: not read ({result.skipped})")
                continue
            if result.error is not None:
                click.echo(f"{result.account}: usage report not read: {result.error}")
                continue
            total = sum(s.cost_nusd for s in result.settled)
            click.echo(
                f"{result.account}: {len(result.settled)} settled ({usd_fine(total)}) from the usage report, "
                f"{len(result.kept)} kept open"
            )
            for settled in result.settled:
                click.echo(f"  {settled.attempt_id} settled at {usd_fine(settled.cost_nusd)} ({settled.source_ref})")
            for kept in result.kept:
                click.echo(f"  {kept.attempt_id} kept open ({kept.reason}): {kept.message}")
    errors = [r for r in results if r.error is not None]
    if errors:
        first = errors[0].error
        fail(AccountsError(first.code, f"could not read the usage report of {', '.join(r.account for r in errors)}; their open attempts stay open"))


@accounts.command()
@click.option("--from-provider", is_flag=True, help="Compare with the organization's usage and cost reports (needs admin_key_env)")
@click.option("--account", metavar="NAME", help="Only this account (with --from-provider)")
@click.option("--days", default=7, show_default=True, type=click.IntRange(1, 31), help="UTC days to compare, up to today")
@click.option("json_", "--json", is_flag=True, help="Output as JSON")
def audit(from_provider, account, days, json_):
    """Check the ledger: its running totals against its rows, or (--from-provider) its spend
    against the provider's own reports.

    With --from-provider, for each account and UTC day: the ledger's settled spend beside the
    usage the organization's report shows on the account's key at the shipped list prices
    ('outside' is spend that never went through the ledger, by cause: batch or priority usage,
    or standard usage of another tool on the same key or of attempts still open). For each
    organization and day: the bill split by cost type, token type, service tier and inference
    geo, beside all its usage at list prices, with its discounts, the us surcharge, costs only
    billed (code execution, sessions), Priority Tier usage the cost endpoint leaves out and usage
    on keys no account declares named; 'unexplained' is what none of them explains. Reads the
    Usage and Cost Analytics API, or the legacy reports where it is not offered.
    See docs/architecture.md "Auditing against the bill".

    \b
    Example:
        llm accounts audit
        llm accounts audit --from-provider --days 3
        llm accounts audit --from-provider --account work --json
    """
    from .errors import AccountsError

    if not from_provider:
        if account is not None:
            fail(AccountsError("declaration_invalid", "--account: goes with --from-provider"))
        ledger = _ledger()
        try:
            problems = ledger.audit()
        except AccountsError as error:
            fail(error)
        if json_:
            echo_json({"problems": problems})
        elif problems:
            for line in problems:
                click.echo(line)
        else:
            click.echo("The ledger's running totals match its attempt rows")
        if problems:
            fail(AccountsError("ledger_unavailable", f"{len(problems)} running totals differ from the attempt rows (see above)"))
        return
    _audit_from_provider(account, days, json_)


def _audit_from_provider(account, days, json_):
    from .errors import AccountsError
    from .pricing.money import usd_fine
    from .provider import audit as provider_audit

    declaration, names = _with_admin_keys(account, "Auditing against the bill")
    ledger = _ledger()
    try:
        account_days, organization_days, errors, inferred = provider_audit.audit_from_provider(declaration, ledger, names, days=days)
    except AccountsError as error:
        fail(error)

    def money(value):
        return "?" if value is None else usd_fine(value)

    def difference(value):
        return "?" if value is None else (usd_fine(value) if value else "")

    def parts(sums, label=lambda name: name.replace("_", " ")):
        return ", ".join(f"{label(name)} {usd_fine(value)}" for name, value in sums.items() if value)

    if json_:
        echo_json({
            "accounts": [row.as_dict() for row in account_days],
            "organizations": [row.as_dict() for row in organization_days],
            "errors": [{"accounts": who, "code": error.code, "message": error.message} for who, error in errors],
            "inferred_key_ids": inferred,
        })
    else:
        if account_days:
            table = [("account", "day (UTC)", "ledger", "usage report", "outside ledger", "causes", "us surcharge", "open")]
            for row in account_days:
                causes = ""
                if row.outside_nusd and row.by_service_tier is not None:
                    named = {tier: value for tier, value in row.by_service_tier.items() if tier != "standard"}
                    named["standard"] = row.outside_standard_nusd
                    causes = parts(named)
                table.append((row.account, row.day, money(row.ledger_nusd), money(row.usage_nusd),
                              difference(row.outside_nusd), causes, difference(row.us_surcharge_nusd),
                              str(row.open_attempts or "")))
            _table(table)
            click.echo()
        if organization_days:
            table = [("organization of", "day (UTC)", "billed", "usage at list", "discount", "code execution, sessions",
                      "priority*", "undeclared keys", "unexplained")]
            for row in organization_days:
                others = None
                if row.by_cost_type is not None:
                    others = sum(value for name, value in row.by_cost_type.items() if name not in ("tokens", "web_search"))
                table.append((",".join(row.accounts), row.day, money(row.billed_nusd), money(row.usage_nusd),
                              difference(row.discount_nusd), difference(others), difference(row.priority_nusd),
                              difference(row.undeclared_nusd), difference(row.unexplained_nusd)))
            _table(table)
            if any(row.priority_nusd for row in organization_days):
                click.echo("* Priority Tier usage at list prices: the cost endpoint does not bill it")
            for row in organization_days:
                if not row.billed_nusd:
                    continue
                geo = parts(row.by_inference_geo, str)
                if row.us_surcharge_nusd:
                    geo += f" (us surcharge {usd_fine(row.us_surcharge_nusd)})"
                api = "Analytics API" if row.report == "analytics" else "legacy cost report; discount inferred from batch usage"
                click.echo(f"\n{','.join(row.accounts)} {row.day} billed by cause ({api}):")
                _table([
                    ("  cost type:", parts(row.by_cost_type)),
                    ("  token type:", parts(row.by_token_type, str) or "-"),
                    ("  service tier:", parts(row.by_service_tier)),
                    ("  inference geo:", geo),
                ])
            if inferred or errors:
                click.echo()
        for name, key_id in inferred.items():
            click.echo(
                f"{name}: compared with {key_id}, inferred as its organization's only active API key; "
                f"confirm it with llm accounts set {name} --api-key-id {key_id}"
            )
        for names_, error in errors:
            click.echo(f"{', '.join(names_)}: not audited: {error}")
    if errors:
        first = errors[0][1]
        fail(AccountsError(first.code, f"could not audit {', '.join(n for names_, _ in errors for n in names_)} (see above)"))


@accounts.command()
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

    from .errors import AccountsError
    from .pricing.money import usd

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


@accounts.command()
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
    from .errors import AccountsError
    from .ledger import Scope

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


@accounts.command(name="refresh-models")
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
    from . import catalog
    from .declarations import load_declaration
    from .errors import AccountsError

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
    from .pricing import price_book

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


@accounts.command()
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

    from . import DEFAULT_MODEL_ENV, catalog
    from . import ladder as ladder_module
    from .declarations import load_declaration
    from .errors import AccountsError
    from .ledger import Ledger
    from .pricing.money import usd, usd_fine
    from .pricing.price_book import current as current_book

    try:
        declaration = load_declaration()
        if not declaration.routed:
            click.echo("No accounts declared: claude-routed sends unrouted with your 'anthropic' key")
            return
        revision = current_book()
        if model_id is None:
            from .models import DEFAULT_MODEL

            model_id = os.environ.get(DEFAULT_MODEL_ENV) or DEFAULT_MODEL
        quote = ladder_module.quote_for(model_id, revision)
        served = catalog.load()
        accounts_ = catalog.effective_accounts(declaration.accounts, revision, served)
        client = client or os.environ.get("LLM_ACCOUNTS_CLIENT") or None
        with Ledger() as ledger:
            lines, verdicts = ledger.ladder(accounts_, quote, client=client)
        # An account whose key is missing is moved past, not sent on (docs/architecture.md "Failover").
        from . import keys

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


@accounts.command()
@click.argument("prompt", required=False)
@click.option("model_id", "-m", "--model", metavar="MODEL", help="A claude-routed model (default: claude-routed)")
@click.option("-s", "--system", help="System prompt")
@click.option(
    "attachments", "-a", "--attachment", multiple=True, metavar="ATTACHMENT",
    help="An attachment: a path, a URL or - for standard input (repeatable)",
)
@click.option("fragments", "-f", "--fragment", multiple=True, metavar="FRAGMENT", help="A fragment (alias, hash, file or URL) added to the prompt (repeatable)")
@click.option("system_fragments", "--sf", "--system-fragment", multiple=True, metavar="FRAGMENT", help="A fragment added to the system prompt (repeatable)")
@click.option("options", "-o", "--option", type=(str, str), multiple=True, metavar="NAME VALUE", help="A model option, as for llm prompt")
@click.option(
    "tools", "-T", "--tool", multiple=True, metavar="NAME",
    help="A registered tool or a server-side tool such as 'WebSearch(max_uses=3)' the request carries (repeatable)",
)
@click.option("python_tools", "--functions", multiple=True, metavar="CODE", help="Python code or a .py file defining tool functions")
@click.option("schema_input", "--schema", metavar="SCHEMA", help="A JSON schema, its concise form or a file, as for llm prompt")
@click.option("-c", "--continue", "continue_", is_flag=True, help="Count the next prompt of the most recent conversation")
@click.option("cid", "--cid", "--conversation", metavar="ID", help="Count the next prompt of this conversation")
@click.option("--account", metavar="NAME", help="Count on this account (the same as -o account NAME)")
@click.option("--client", metavar="LABEL", help="The client label of the caller (default: $LLM_ACCOUNTS_CLIENT)")
@click.option("json_", "--json", is_flag=True, help="Output JSON: the count and the account that made it")
def count(
    prompt, model_id, system, attachments, fragments, system_fragments, options, tools, python_tools, schema_input,
    continue_, cid, account, client, json_,
):
    """Count the input tokens a prompt would send, without sending it.

    Uses the provider's token counting endpoint (POST /v1/messages/count_tokens), which bills
    nothing: nothing is reserved and no attempt is recorded in the ledger. The request is the
    Messages request the prompt would make (system prompt, attachments, fragments, tools, schema,
    options),
    on one account you may use: the one --account names, else the first the ladder orders among
    accounts that are declared for the model, unblocked and healthy (budgets do not matter). Its
    key is resolved as for a prompt. A failed count changes no account's health.

    \b
    Example:
        llm accounts count -m claude-routed/claude-haiku-4-5 "Fun facts about pelicans"
        llm accounts count -s "Be brief" -a photo.jpg "Describe this" --json
        llm accounts count -f notes.md "Summarize these notes"
        llm accounts count -T 'WebSearch(max_uses=3)' "Latest pelican news"
        llm accounts count -c "And in French?"
    """
    from . import counting
    from .errors import AccountsError

    try:
        model, conversation = _count_model(model_id, continue_, cid)
        if not sys.stdin.isatty() and "-" not in attachments and "-" not in fragments:
            # Piped text comes first, then the argument, as llm prompt joins them.
            piped = sys.stdin.read()
            if piped:
                prompt = " ".join(filter(None, (piped, prompt)))
        extra = dict(options)
        if account:
            extra["account"] = account
        if client:
            extra["client"] = client
        resolved = [_attachment(value) for value in attachments]
        kwargs = {"system": system}
        if fragments or system_fragments:
            texts, loaded = _fragments(fragments)
            kwargs["fragments"], kwargs["system_fragments"] = texts, _fragments(system_fragments)[0]
            resolved += loaded
        kwargs["attachments"] = resolved or None
        if tools or python_tools:
            from llm.cli import _gather_tools

            # With the model, -T also finds its server-side tools (WebSearch, WebFetch), as llm prompt does.
            kwargs["tools"] = _gather_tools(list(tools), list(python_tools), model=model)
        if schema_input:
            kwargs["schema"] = _schema(schema_input)
        built = (conversation or model).prompt(prompt, **kwargs, **extra)
        counted = counting.count_sync(model, built.prompt)
    except AccountsError as error:
        fail(error)
    if json_:
        echo_json({"input_tokens": counted.tokens, "model": model.model_id, "account": counted.account})
    else:
        click.echo(counted.tokens)


def _count_model(model_id, continue_, cid):
    """The routed model ``count`` uses, and the conversation whose next prompt it counts."""
    import llm

    from .errors import AccountsError
    from .models import ROUTED_ID, RoutedClaude

    conversation = None
    if continue_ or cid:
        from llm.cli import load_conversation

        conversation = load_conversation(cid)
        if conversation is None:
            raise AccountsError("not_found", "no conversation to continue: run a prompt first, or give --cid ID")
        model_id = model_id or conversation.model.model_id
    try:
        model = llm.get_model(model_id or ROUTED_ID)
    except llm.UnknownModelError:
        model = None
    if not isinstance(model, RoutedClaude):
        # The id is not repeated: it is free text from the command line.
        raise AccountsError(
            "declaration_invalid",
            "--model: not a claude-routed model (see llm models); other models count with their own plugin, such as llm anthropic count",
        )
    if conversation is not None:
        conversation.model = model
    return model, conversation


def _attachment(value):
    from llm.cli import resolve_attachment

    from .errors import AccountsError

    try:
        return resolve_attachment(value)
    except Exception:
        pass
    # The value is not repeated: it is free text from the command line.
    raise AccountsError("declaration_invalid", "-a: must be a file that exists, a URL or - (standard input), of a type llm recognizes")


def _fragments(values):
    """``(fragments, attachments)`` as llm prompt resolves ``-f`` (llm.cli.resolve_fragments)."""
    import sqlite_utils
    import llm
    from llm.cli import FragmentNotFound, logs_db_path, resolve_fragments

    from .errors import AccountsError

    from llm.migrations import migrate

    db = sqlite_utils.Database(logs_db_path())
    migrate(db)  # aliases live in llm's logs database, as for llm prompt
    try:
        resolved = resolve_fragments(db, values, allow_attachments=True)
    except FragmentNotFound:
        resolved = None
    if resolved is None:
        # The fragment is not repeated: it is free text from the command line.
        raise AccountsError("declaration_invalid", "-f: a fragment was not found (give an alias, a hash, a file or a URL)")
    return (
        [item for item in resolved if not isinstance(item, llm.Attachment)],
        [item for item in resolved if isinstance(item, llm.Attachment)],
    )


def _schema(value):
    import sqlite_utils
    from llm.cli import load_template, logs_db_path
    from llm.utils import resolve_schema_input

    return resolve_schema_input(sqlite_utils.Database(logs_db_path()), value, load_template)
