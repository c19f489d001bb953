"""``llm accounts status``: each account's month, day, health and warnings, and ``--check``
(docs/architecture.md "Ledger", "Budget warnings" and "Pace forecast").
"""

import click

from .common import _declared_accounts, _ledger, _small_limits, _table, _warn_small_limits, echo_json, fail


@click.command()
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
    from ..errors import AccountsError
    from ..paths import ledger_path
    from ..money import usd, usd_fine

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
    from .. import catalog, clock

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
    from ..forecast import sentence

    for line in lines:
        if line.forecast is not None and not line.removed_at:
            left = f"{usd_fine(line.forecast.per_day_left_nusd)} a day left to last the period"
            click.echo(f"Pace: {sentence(line.name, line.forecast)}; {left}")
    # The usage-report pass that runs after prompts says nothing in a prompt; its failure is said here.
    if any(account.admin_key_env for account in declared):
        from ..provider import settle as provider_pass

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
    from .. import keys
    from ..declarations import load_declaration

    if not declared:
        return {}
    declaration = load_declaration()
    return {account.name: keys.key_state(account.key_env, declaration) for account in declared}


def _check_problems(lines, declared):
    """``status --check``'s problems: an account past a warning threshold, blocked or failing
    (docs/architecture.md "Budget warnings")."""
    from .. import thresholds

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

    from .. import catalog, ladder, selection
    from ..ledger import Ledger
    from ..pricing import fits, price_book

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
    from ..money import usd_fine

    figures = _warm_json(warmth)
    return (
        f"New conversations this period with a one-hour prompt prefix: {figures['bound_warm']} bound warm, "
        f"{figures['bound_cold']} cold; the cache saved {usd_fine(figures['cache_saved_nusd'])} "
        "(cache reads at base input price minus what they cost)"
    )


COMMANDS = (status,)
