"""``llm accounts attempts``: the ledger's attempt rows, filtered, as a table, JSON or CSV
(docs/architecture.md "Attempt outcomes").
"""

import json

import click

from .common import _echo_csv, _instant, _ledger, _table, echo_json, fail


def _model_id(name):
    """The model id attempts record for ``name``: an alias (``claude-sonnet-4-5``) is resolved
    through the prices in force to the dated id it stands for; any other name is kept as given."""
    if name is None:
        return None
    from ..pricing import price_book

    price = price_book.current().model(name)
    return price.id if price is not None else name


_ATTEMPT_CSV = ("id", "created_at", "account", "state", "outcome", "requested_model", "served_model", "client",
                "scope_kind", "scope_id", "ceiling_nusd", "cost_nusd", "ceiling_usd", "cost_usd")


@click.command()
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
    from ..errors import AccountsError
    from ..money import usd_exact, usd_fine

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


COMMANDS = (attempts,)
