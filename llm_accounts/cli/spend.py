"""``llm accounts spend``: a credit period's spend by account, model, client, conversation or day
(docs/architecture.md "Spend").
"""

import click

from .common import _echo_csv, _ledger, _table, echo_json, fail


@click.command()
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

    from .. import clock
    from ..errors import AccountsError
    from ..money import usd_exact, usd_fine

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


COMMANDS = (spend,)
