"""Settling and checking against evidence: ``llm accounts reconcile`` (by hand, ``--open``, or
``--from-provider``) and ``llm accounts audit`` (docs/architecture.md "Settling from the provider"
and "Auditing against the bill").
"""

import click

from .common import _instant, _known_account, _ledger, _table, _usd_option, echo_json, fail


@click.command()
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
    from ..errors import AccountsError

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

    from ..money import usd

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

    from ..errors import AccountsError
    from ..money import usd, usd_fine

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
    from .. import liveness

    return {
        row["id"] for row in ledger.open_attempts()
        if row["outcome"] is None and row["host"] == ledger.host and row["pid"] is not None
        and liveness.gone(row["pid"], row["pid_started"])
    }


def _with_admin_keys(account, section):
    """``(declaration, names)`` for a ``--from-provider`` command: the accounts it reads (all when
    ``account`` is None), refused in one line unless one declares an Admin API key."""
    from ..declarations import load_declaration
    from ..errors import AccountsError

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
    from ..errors import AccountsError
    from ..money import usd_fine
    from ..provider import settle as provider_pass

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


@click.command()
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
    from ..errors import AccountsError

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
    from ..errors import AccountsError
    from ..money import usd_fine
    from ..provider import audit as provider_audit

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


COMMANDS = (reconcile, audit)
