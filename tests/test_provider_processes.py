"""Settling from the provider with real processes: a real ``llm`` prompt stopped by SIGINT mid-stream
leaves its attempt open; a later real ``llm accounts reconcile --from-provider`` settles it at what
the stand-in billed (docs/architecture.md "Settling from the provider").

Each child runs llm's own command line with the product's clock started at an instant the test
chooses and ticking from there (the ``CHILD`` script); the stand-in's clock ticks from the same
instant, so its minute buckets and the ledger's times agree.
"""

import datetime as dt
import json
import signal
import subprocess
import sys
import time

from conftest import make_key
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import current_revision, settlement_cost
from llm_accounts.standin import StandIn
from llm_accounts.standin.config import default_api_key_id
from routed_helpers import attempts
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

START = dt.datetime(2028, 2, 29, 23, 58, 30, tzinfo=dt.timezone.utc)  # a leap day, near a credit period's end
MODEL = "claude-routed/claude-haiku-4-5"

CHILD = r"""
import datetime as dt, sys, time
t0, base = float(sys.argv[1]), sys.argv[2]
from llm_accounts import clock
start = dt.datetime.fromisoformat(base)
clock.now = lambda: start + dt.timedelta(seconds=time.time() - t0)
from llm.cli import cli
cli(sys.argv[3:], prog_name="llm")
"""


def child(t0, at, *args, **kwargs):
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, str(t0), at.isoformat(), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True, **kwargs,
    )


def test_a_prompt_stopped_by_sigint_is_settled_by_a_later_reconcile_from_the_provider(user_path, ledger_path, monkeypatch):
    keys = {"ALPHA_KEY": make_key(), "ALPHA_ADMIN": make_key()}
    (user_path / "keys.json").write_text(json.dumps(keys))
    save_accounts_file([Account("alpha", "ALPHA_KEY", 50 * NANO, admin_key_env="ALPHA_ADMIN", api_key_id=default_api_key_id("alpha"))], None)
    t0 = time.time()
    config = {
        "keys": [{"label": "alpha", "key": keys["ALPHA_KEY"], "organization": "org-alpha", "behaviour": "slow", "delay": 0.5}],
        "admin_keys": [{"key": keys["ALPHA_ADMIN"], "organization": "org-alpha"}],
    }
    skipped = [0.0]  # seconds the test moves both clocks on by (the report's refresh follows the stand-in's)
    with StandIn(config, clock=lambda: START.timestamp() + skipped[0] + time.time() - t0) as server:
        monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", server.base_url)
        prompt = child(t0, START, "-m", MODEL, "-o", "max_tokens", "300", "Tell me a long story")
        try:
            deadline = time.time() + 30
            while not server.requests and time.time() < deadline:
                time.sleep(0.05)
            time.sleep(1.2)  # a few events into the stream
            prompt.send_signal(signal.SIGINT)
            prompt.wait(timeout=30)
        finally:
            if prompt.poll() is None:
                prompt.kill()
                prompt.wait()
        [row] = attempts(ledger_path)
        assert row["state"] == "open" and row["outcome"] in ("cancelled", "stream_closed")
        [entry] = [r for r in server.requests if r["path"] == "/v1/messages"]
        later = START + dt.timedelta(minutes=15)
        # The stand-in notices the client went away at its next event (every 0.5 s), and only then
        # is the request complete: the clocks move on after that.
        deadline = time.time() + 10
        while server.requests[-1].get("completed_at") is None and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(1)
        skipped[0] = (later - START).total_seconds()
        reconcile = child(t0, later, "accounts", "reconcile", "--from-provider")
        out, err = reconcile.communicate(timeout=60)
    assert reconcile.returncode == 0, out + err
    assert "alpha: 1 settled" in out
    [row] = attempts(ledger_path)
    assert (row["state"], row["cost_nusd"]) == ("settled", settlement_cost(entry["usage"], entry["model_id"], None, current_revision()))
