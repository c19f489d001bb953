"""What the command modules share: usage errors that never repeat what was typed (``_Group``),
``fail`` and ``echo_json``, opening the ledger and reading the declaration, account names as the
ledger takes them, dollar options, instants, tables and CSV, and the checks said when accounts are
declared (docs/errors.md "One line").
"""

import json

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


def fail(error):
    """Print an AccountsError (or any one-line message) as a click error and exit 1."""
    raise click.ClickException(str(error))


def echo_json(data):
    click.echo(json.dumps(data, indent=2))


def _ledger():
    from ..errors import AccountsError
    from ..ledger import Ledger

    try:
        return Ledger()
    except AccountsError as error:
        fail(error)


def _declared_accounts(strict=False):
    """The declared accounts, or () when the declaration cannot be read and ``strict`` is off
    (block, unblock and friends work by name from the ledger alone)."""
    from ..declarations import load_declaration
    from ..errors import AccountsError

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
    from ..errors import AccountsError

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

    from ..errors import AccountsError
    from ..money import parse_usd

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


def _instant(text, option, *, end=False):
    """The ledger time string for an ``--since``/``--until`` value: an ISO date (its 00:00 UTC;
    for ``end``, the next day's, so the day is included) or an ISO instant (UTC if it names no
    offset). The value is never repeated in the error: it is free text from the command line."""
    import datetime as dt

    from .. import clock
    from ..records import invalid

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


def _declared_key_runs():
    """A test for a run of any declared key (``scrub.run_detector``), each key resolved once for
    this check and dropped; None with no accounts declared. A key that cannot be resolved is
    skipped: its account refuses its own prompts anyway."""
    from .. import keys
    from ..declarations import load_declaration
    from ..errors import AccountsError
    from ..wire import scrub

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


def _small_limits(declared):
    """A limit below the default model's ceiling never admits a plain claude-routed prompt: said,
    not refused (docs/pricing.md "Small budgets")."""
    from ..pricing import price_book
    from ..pricing.fits import warnings

    book = price_book.current()
    return [line for account in declared for line in warnings(account, book)]


def _warn_small_limits(declared):
    for line in _small_limits(declared):
        click.echo(line, err=True)
