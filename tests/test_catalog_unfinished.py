"""An automatic model-list refresh that cannot finish before its process exits is recorded as not
finished, and retried with a backoff rather than by every prompt (docs/architecture.md "Model
lists"). Tested with real ``llm`` processes that exit while the stand-in stalls GET /v1/models."""

import datetime as dt
import json
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner
from llm.cli import cli

from llm_accounts import catalog, clock
from llm_accounts.declarations import load_declaration
from llm_accounts.standin import server as standin_server
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

LIVENESS_S = 60  # a guard against hanging forever, not a timing assertion
HAIKU = "claude-haiku-4-5-20251001"
LONG_AGO = "2000-01-01T00:00:00+00:00"  # stale on any date this test runs
T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)


class StalledLists:
    """In the stand-in (this process): GET /v1/models of key ``beta`` is noted and held until
    released; a prompt is answered only once beta's list was asked for, so the ``llm`` process
    exits while that request is in flight."""

    def __init__(self, monkeypatch):
        self.arrivals, self.asked, self.release = [], threading.Event(), threading.Event()
        list_models, messages = standin_server._Exchange._list_models, standin_server._Exchange._messages

        def listing(exchange, raw):
            self.arrivals.append(exchange.key.label)
            if exchange.key.label == "beta":
                self.asked.set()
                self.release.wait(LIVENESS_S)
            return list_models(exchange, raw)

        def prompt(exchange, raw):
            assert self.asked.wait(LIVENESS_S)
            return messages(exchange, raw)

        monkeypatch.setattr(standin_server._Exchange, "_list_models", listing)
        monkeypatch.setattr(standin_server._Exchange, "_messages", prompt)


def llm_process(*args):
    return subprocess.run(
        [sys.executable, "-m", "llm", *args], capture_output=True, text=True, timeout=LIVENESS_S
    )


@pytest.fixture
def stalled(accounts, ledger_path, monkeypatch):
    lists = {"models": [HAIKU], "refreshed_at": LONG_AGO}
    catalog.cache_path().write_text(json.dumps({"alpha": lists, "beta": lists}))
    held = StalledLists(monkeypatch)
    yield held
    held.release.set()


def test_a_refresh_cut_off_by_the_process_exiting_is_recorded_as_not_finished(stalled):
    result = llm_process("-m", "claude-routed/claude-haiku-4-5", "Hello", "-o", "account", "alpha")
    assert result.returncode == 0, result.stderr
    assert stalled.arrivals == ["alpha", "beta"]  # beta's list was asked for and never answered
    stored = json.loads(catalog.cache_path().read_text())  # whole: never a half-written list
    assert HAIKU in stored["alpha"]["models"] and stored["alpha"]["refreshed_at"] != LONG_AGO
    beta = stored["beta"]
    assert (beta["models"], beta["refreshed_at"], beta["tries"]) == ([HAIKU], LONG_AGO, 1)
    assert clock.isoformat(clock.now()) >= beta["started_at"] > LONG_AGO
    assert "failed_at" not in beta


def test_the_next_prompt_does_not_ask_again_for_a_list_still_being_refreshed(stalled):
    assert llm_process("-m", "claude-routed/claude-haiku-4-5", "Hello", "-o", "account", "alpha").returncode == 0
    again = llm_process("-m", "claude-routed/claude-haiku-4-5", "Again", "-o", "account", "alpha")
    assert again.returncode == 0, again.stderr
    assert stalled.arrivals == ["alpha", "beta"]


def test_status_says_an_automatic_refresh_did_not_finish(stalled):
    assert llm_process("-m", "claude-routed/claude-haiku-4-5", "Hello", "-o", "account", "alpha").returncode == 0
    table = CliRunner().invoke(cli, ["accounts", "status"]).output
    assert "model list automatic refresh did not finish (started " in table
    [_, beta] = json.loads(CliRunner().invoke(cli, ["accounts", "status", "--json"]).output)["accounts"]
    assert beta["model_list"]["started_at"] is not None


# The backoff (rules only: the instants are the test's)


def entry(**fields):
    return {"models": [HAIKU], "refreshed_at": clock.isoformat(T0 - dt.timedelta(days=3)), **fields}


@pytest.mark.parametrize("tries,wait", [(1, dt.timedelta(hours=1)), (2, dt.timedelta(hours=2)), (3, dt.timedelta(hours=4)), (9, catalog.STALE_AFTER)])
def test_an_unfinished_refresh_is_retried_after_a_backoff_that_grows_with_each_try(accounts, tries, wait):
    served = {"alpha": entry(started_at=clock.isoformat(T0), tries=tries)}
    declaration = load_declaration()
    assert catalog.stale_accounts(declaration, served, T0 + wait - dt.timedelta(seconds=1)) == []
    assert catalog.stale_accounts(declaration, served, T0 + wait) == ["alpha"]


def test_a_refresh_that_finished_after_it_started_clears_the_marker(accounts):
    served = {"alpha": {"models": [HAIKU], "refreshed_at": clock.isoformat(T0)}}
    assert catalog.stale_accounts(load_declaration(), served, T0 + catalog.STALE_AFTER) == ["alpha"]
