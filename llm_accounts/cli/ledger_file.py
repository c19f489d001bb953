"""``llm accounts path`` and ``llm accounts export``: where the ledger is, and a SQLite copy of it
(docs/architecture.md "Ledger on PostgreSQL").
"""

import click

from .common import _ledger, fail


@click.command()
def path():
    """Print the path of the ledger database.

    \b
    Example:
        llm accounts path
        sqlite-utils tables "$(llm accounts path)" --counts
    """
    from ..paths import ledger_path

    click.echo(str(ledger_path()))


@click.command(name="export")
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
    from ..errors import AccountsError

    ledger = _ledger()
    try:
        written = ledger.export(target)
    except AccountsError as error:
        fail(error)
    finally:
        ledger.close()
    click.echo(f"Wrote a copy of {ledger.location} to {written}")


COMMANDS = (path, export_)
