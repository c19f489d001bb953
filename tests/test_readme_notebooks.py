"""The Python snippets of the manual (docs/python.md "Notebooks and other tools") and of the
README's "Python" screen, run as written on a ledger filled through the routed model: their
figures are the ones llm accounts status gives, and an attempt joins its llm logs row."""

import contextlib
import datetime as dt
import io
import json
import pathlib
import re
import shutil

import pytest

from llm_accounts import catalog, clock
from routed_helpers import attempts, llm_cli

ROOT = pathlib.Path(__file__).resolve().parent.parent
SECTION = (ROOT / "docs" / "python.md").read_text().split("\n## Notebooks and other tools\n")[1].split("\n## ")[0]
SNIPPETS = re.findall(r"```python\n(.*?)```", SECTION, re.S)
FRONT_PAGE = (ROOT / "README.md").read_text().split("\n## Python\n")[1].split("\n## ")[0]
[FRONT_PAGE_SNIPPET] = re.findall(r"```python\n(.*?)```", FRONT_PAGE, re.S)
NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)  # one credit period, 2026-11
MODEL = "claude-routed/claude-haiku-4-5"


def run_snippet(code):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "snippet", "exec"), {})
    return out.getvalue()


@pytest.fixture(scope="module")
def made_once(tmp_path_factory):
    """Where the first test's history is kept, so the others start from a copy of the same files."""
    return tmp_path_factory.mktemp("history") / "made"


@pytest.fixture
def history(accounts, ledger_path, user_path, monkeypatch, made_once):
    """Three prompts and a correction, at a fixed instant; returns status --json's accounts.

    Made through the routed model once per module; each later test gets a copy of the ledger
    and llm's logs.db as they were written (a test may change its copy)."""
    monkeypatch.setattr(clock, "now", lambda: NOW)
    if made_once.exists():
        shutil.copytree(made_once / "ledger", ledger_path.parent, dirs_exist_ok=True)
        shutil.copy(made_once / "logs.db", user_path / "logs.db")
    else:
        for prompt in ("One", "Two", "Three"):
            assert llm_cli("-m", MODEL, prompt).exit_code == 0
        result = llm_cli("accounts", "adjust", "alpha", "--month", "2026-11", "--delta", "1.25", "--source", "console")
        assert result.exit_code == 0, result.output
        catalog.wait_for_background(30)  # nothing still writing while the files are copied
        shutil.copytree(ledger_path.parent, made_once / "ledger")
        shutil.copy(user_path / "logs.db", made_once / "logs.db")
    return json.loads(llm_cli("accounts", "status", "--json").output)["accounts"]


def test_the_manual_has_the_three_notebook_snippets():
    assert len(SNIPPETS) == 3


def test_the_sqlite_utils_snippet_agrees_with_status(history):
    from llm_accounts.money import usd_fine

    printed = run_snippet(SNIPPETS[0]).splitlines()
    for line in history:
        remaining = line["budget_nusd"] - line["spent_nusd"] - line["open_ceiling_nusd"]
        expected = (
            f"2026-11 {line['name']} {usd_fine(line['spent_nusd'])} spent, {usd_fine(line['open_ceiling_nusd'])} open, "
            f"{usd_fine(remaining)} remaining"
        )
        assert expected in printed
    assert any(line["adjustments_nusd"] == 1_250_000_000 for line in history)


def test_an_attempt_joins_the_llm_logs_row_it_served(history, ledger_path):
    printed = run_snippet(SNIPPETS[0] + SNIPPETS[1])
    rows = [row for row in attempts(ledger_path) if row["llm_response_id"]]
    assert len(rows) == 3
    for row in rows:
        assert f"'id': '{row['llm_response_id']}'" in printed
        assert f"'account': '{row['account']}'" in printed


def test_open_ledger_status_tells_declared_accounts_from_others(history):
    printed = run_snippet(SNIPPETS[2])
    names = {line.split()[0]: line.split()[1] for line in printed.splitlines() if line.split()[0] in ("alpha", "beta")}
    assert names == {"alpha": "True", "beta": "True"}


def test_open_ledger_lists_an_account_no_declaration_holds_as_undeclared(history):
    from llm_accounts.declarations import Account, save_accounts_file
    from llm_accounts.ledger import open_ledger
    from llm_accounts.money import NANO

    save_accounts_file([Account("beta", "BETA_KEY", 20 * NANO)], None)
    with open_ledger() as ledger:
        declared = {status.name: status.declared for status in ledger.status()}
    assert declared == {"alpha": False, "beta": True}


def test_the_readme_python_screen_prompts_and_prints_what_status_gives(history):
    printed = run_snippet(FRONT_PAGE_SNIPPET).splitlines()
    [cost] = [line for line in printed if line.startswith("Cost(")]
    assert "held_nusd=0" in cost  # the answer settled: nothing of it is held
    after = json.loads(llm_cli("accounts", "status", "--json").output)["accounts"]
    for line in after:
        assert f"{line['name']} {line['spent_nusd']} {line['remaining_nusd']}" in printed
