"""bench/load.py in reduced size (docs/reliability.md "Load"): real client processes with
scripted faults on one ledger, and checks that catch what they claim to catch.

Marked ``load``: ``-m "not load"`` leaves it out of a quick local run; ``.ci/run`` runs it.
"""

import json
import pathlib
import shutil
import sqlite3
import subprocess
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))
import load  # noqa: E402  (bench/load.py)

pytestmark = pytest.mark.load


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One reduced run: 4 processes, 8 prompts each, every fault of each key's mix injected."""
    workdir = tmp_path_factory.mktemp("load")
    result = subprocess.run(
        [sys.executable, str(BENCH / "load.py"), "--processes", "4", "--requests", "8", "--json", "--dir", str(workdir / "run")],
        capture_output=True, text=True, timeout=300,
    )
    figures = json.loads(result.stdout)
    return result.returncode, figures, workdir / "run"


def recheck(workdir, tmp_path, tamper_sql=None, accounts=None, drop_request=False):
    """The checks again on a copy of the run's ledger, after a tampering."""
    ledger = tmp_path / "ledger.db"
    shutil.copy(workdir / "ledger" / "accounts-ledger.db", ledger)
    if tamper_sql:
        conn = sqlite3.connect(ledger)
        conn.executescript(tamper_sql)
        conn.close()
    requests_log, fleet = load.load_log(workdir)
    if drop_request:
        requests_log = requests_log[1:]
    _, failures = load.check(ledger, requests_log, accounts or load.declared_accounts(), list(load.MIXES), fleet)
    return failures


def test_the_reduced_load_run_passes_every_check(run):
    returncode, figures, _ = run
    assert figures["failures"] == []
    assert returncode == 0
    assert (figures["over_admissions"], figures["lost_rows"], figures["bill_difference_nusd"]) == (0, 0, 0)


def test_the_reduced_load_run_meets_faults_and_open_attempts(run):
    _, figures, _ = run
    assert figures["prompts"] == 32
    assert figures["requests_received"] >= 8
    assert figures["admissions_replayed"] == figures["attempts"]
    assert set(figures["faults_injected"]) & {"rate_limited", "api_error", "stream_error", "drop"}
    assert any(key.startswith("open:") for key in figures["outcomes"])
    assert figures["reconciled"] >= 1
    assert figures["adjustments"] >= 1


def test_the_checks_catch_a_settled_cost_one_nanodollar_off(run, tmp_path):
    failures = recheck(run[2], tmp_path, tamper_sql="""
        UPDATE attempt SET cost_nusd = cost_nusd + 1
        WHERE rowid = (SELECT MIN(rowid) FROM attempt WHERE outcome = 'complete')""")
    assert any("the stand-in billed" in failure for failure in failures)


def test_the_checks_catch_a_request_with_no_attempt(run, tmp_path):
    failures = recheck(run[2], tmp_path, drop_request=True)
    assert any("requests with one digest" in failure for failure in failures)


def test_the_checks_catch_an_admission_over_a_smaller_budget(run, tmp_path):
    import dataclasses

    smaller = [dataclasses.replace(account, budget_nusd=1) for account in load.declared_accounts()]
    failures = recheck(run[2], tmp_path, accounts=smaller)
    assert any(failure.startswith("over-admission") for failure in failures)


def test_the_checks_catch_a_lost_attempt_row(run, tmp_path):
    failures = recheck(run[2], tmp_path, tamper_sql="DELETE FROM attempt WHERE rowid = (SELECT MAX(rowid) FROM attempt)")
    assert any("attempt row deleted" in failure for failure in failures)
