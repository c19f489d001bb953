"""Install hints work from a checkout or a wheel (docs/getting-started.md "Installation"): llm-accounts is not on
PyPI, so no hint names the distribution as something to fetch from an index."""

import pathlib
import re

from click.testing import CliRunner

from llm_accounts import browse
from llm_accounts.cli import accounts

ROOT = pathlib.Path(__file__).resolve().parent.parent
# `pip install 'llm-accounts[...]'`, `llm install llm-accounts`: an index lookup of our own name.
FROM_AN_INDEX = re.compile(r"(pip|llm) install\s+['\"]?llm[-_]accounts\b")


def shipped_texts():
    for folder in ("llm_accounts", "datasette_plugin", "scripts", "docs"):
        for path in sorted((ROOT / folder).rglob("*")):
            if "_build" in path.parts:
                continue  # the manual as scripts/docs built it: its pages are read as Markdown
            if path.is_file() and path.suffix in ("", ".py", ".md", ".html", ".js"):
                yield path, path.read_text(errors="replace")
    yield ROOT / "README.md", (ROOT / "README.md").read_text()


def test_no_install_hint_fetches_llm_accounts_from_an_index():
    found = []
    for path, text in shipped_texts():
        for line in text.splitlines():
            # The warning of README and docs/getting-started.md names the command it warns against.
            if FROM_AN_INDEX.search(line) and "would install whatever someone" not in line:
                found.append(f"{path.relative_to(ROOT)}: {line.strip()}")
    assert not found, found


def test_browse_without_datasette_says_how_to_install_it_from_here(monkeypatch):
    monkeypatch.setattr(browse, "datasette_installed", lambda: False)
    result = CliRunner().invoke(accounts, ["browse"])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1
    assert "llm install datasette" in result.output
    assert not FROM_AN_INDEX.search(result.output)


def test_a_postgresql_ledger_without_psycopg_says_how_to_install_it(monkeypatch):
    import sys

    from llm_accounts.errors import AccountsError
    from llm_accounts.ledger import Ledger

    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg raises ImportError
    monkeypatch.delitem(sys.modules, "llm_accounts.ledger.postgres", raising=False)
    try:
        Ledger("postgresql://ledger@127.0.0.1:1/llm_accounts")
    except AccountsError as error:
        refusal = error
    assert refusal.code == "ledger_unavailable"
    assert "llm install" in str(refusal) and "'.[postgres]'" in str(refusal)
    assert not FROM_AN_INDEX.search(str(refusal))
