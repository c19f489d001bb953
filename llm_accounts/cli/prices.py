"""``llm accounts prices`` and ``prices add`` / ``prices remove``: the prices every ceiling and
settlement uses, and the user's own price revisions (docs/pricing.md "Your own price revisions").
"""

import pathlib

import click

from .common import _declared_key_runs, echo_json, fail


@click.group(invoke_without_command=True)
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
    window at the input rate (a plain prompt carries no cache mark) plus max_tokens at the
    output rate; -o max_tokens lowers it. "from" is the revision whose price is in force.

    \b
    Example:
        llm accounts prices
        llm accounts prices --model claude-sonnet-4-5 --json
    """
    if ctx.invoked_subcommand is not None:
        return
    from ..errors import AccountsError
    from ..pricing import price_book
    from ..pricing.prices import RATE_NAMES, multiplier_text, per_mtok

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

    from ..capabilities import for_price, routed_max_tokens
    from ..ladder import quote_for
    from ..pricing.user_prices import prices_dir

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
                        "default_max_tokens": None if p.status == "retired" else routed_max_tokens(for_price(p)),
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
    from ..money import usd_fine

    rows = [
        ("model", "status", "context", "max out", "default", "ceiling", "from",
         "input", "5m write", "1h write", "cache read", "output")
    ]
    for p in models:
        reserve = ceiling(p)
        rows.append(
            (p.id, p.status, f"{p.context_window:,}", f"{p.max_output:,}",
             "-" if reserve is None else f"{routed_max_tokens(for_price(p)):,}",
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
    from ..errors import AccountsError
    from ..pricing import user_prices

    try:
        revision = user_prices.read_candidate(file, _declared_key_runs())
        destination = user_prices.add(file, revision, replace=replace)
    except AccountsError as error:
        fail(error)
    from ..pricing import price_book

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
    from ..errors import AccountsError
    from ..pricing import user_prices

    try:
        path = user_prices.remove(revision_id)
    except AccountsError as error:
        fail(error)
    click.echo(f"Removed {path}")


COMMANDS = (prices,)
