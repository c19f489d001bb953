"""Budget held by unknown outcomes, before and after the automatic provider pass, measured in one
run (docs/architecture.md "Settling from the provider").

    .venv/bin/python bench/daily_provider.py [--interrupted 20] [--spacing 90] [--dense 20] 2>/dev/null

(Each interrupted prompt prints its held-open line on standard error, as it would for a user.)

On the loopback stand-in, with a clock this script moves: ``--interrupted`` routed prompts whose
consumer stops after the first chunk (each leaves its attempt open at its whole ceiling), one every
``--spacing`` seconds, each followed 20 s later by a prompt that completes (so the minutes also
hold usage the ledger settled). Then the clock moves past the report's finality delay and one more
routed prompt starts the automatic pass, as any prompt does. Printed: the ceilings held by open
attempts before and after, how many settled, and how many settlements differ from what the
stand-in billed for the same request (priced at the shipped prices), to the nanodollar.

``--dense`` runs the same with two interrupted prompts in each minute, where the report cannot
tell them apart: they must stay open (the count kept open, and why, is printed).
"""

import argparse
import datetime as dt
import json
import os
import pathlib
import secrets
import string
import sys
import tempfile

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

START = dt.datetime(2026, 12, 2, 9, 0, 5, tzinfo=dt.timezone.utc)
MODEL = "claude-routed/claude-haiku-4-5"


class Clock:
    def __init__(self, at):
        self.at = at

    def __call__(self):
        return self.at.timestamp()

    def now(self):
        return self.at

    def advance(self, seconds):
        self.at += dt.timedelta(seconds=seconds)


def key(kind="api03"):
    alphabet = string.ascii_letters + string.digits
    return f"sk-ant-{kind}-bench" + "".join(secrets.choice(alphabet) for _ in range(80)) + "AA"


def scenario(interrupted, spacing, pairs):
    """One run in a fresh llm user directory; returns the figures."""
    import llm

    from llm_accounts import clock
    from llm_accounts.provider import rules as provider_usage, settle as provider_pass
    from llm_accounts.declarations import Account, save_accounts_file
    from llm_accounts.ledger import Ledger
    from llm_accounts.money import NANO
    from llm_accounts.pricing import current_revision, settlement_cost
    from llm_accounts.standin import StandIn
    from llm_accounts.standin.config import default_api_key_id

    fake = Clock(START)
    clock.now = fake.now
    keys = {"ALPHA_KEY": key(), "ALPHA_ADMIN": key("admin01")}
    user = pathlib.Path(os.environ["LLM_USER_PATH"])
    (user / "keys.json").write_text(json.dumps(keys))
    save_accounts_file([Account("alpha", "ALPHA_KEY", 500 * NANO, admin_key_env="ALPHA_ADMIN", api_key_id=default_api_key_id("alpha"))], None)
    config = {
        "keys": [{"label": "alpha", "key": keys["ALPHA_KEY"], "organization": "org-alpha"}],
        "admin_keys": [{"key": keys["ALPHA_ADMIN"], "organization": "org-alpha"}],
        "report_delay": 120,
    }

    def interrupt():
        response = llm.get_model(MODEL).prompt("Tell me a long story", max_tokens=400)
        iterator = iter(response)
        next(iterator)
        iterator.close()

    # The automatic pass is held off while the prompts run, so "before" is every interrupted
    # prompt's ceiling; then one routed prompt starts it, as any prompt does.
    every = provider_pass.RUN_EVERY
    provider_pass.RUN_EVERY = dt.timedelta(days=365)
    with StandIn(config, clock=fake) as server:
        os.environ["LLM_ACCOUNTS_BASE_URL"] = server.base_url
        for n in range(interrupted):
            interrupt()
            if pairs:
                fake.advance(5)
                interrupt()
            fake.advance(20)
            llm.get_model(MODEL).prompt("A short complete answer", max_tokens=50).text()
            fake.advance(max(spacing - 25 if pairs else spacing - 20, 1))
            provider_pass.wait_for_background(60)
        with Ledger() as ledger:
            before = ledger.open_attempts()
        last_sent = max(dt.datetime.fromisoformat(row["created_at"]) for row in before)
        fake.at = provider_usage.minute_of(last_sent) + provider_usage.MINUTE * 2 + provider_usage.FINAL_AFTER
        provider_pass.RUN_EVERY = every
        llm.get_model(MODEL).prompt("The next prompt of the day", max_tokens=50).text()
        provider_pass.wait_for_background(120)
        with Ledger() as ledger:
            after = ledger.open_attempts()
            every_attempt = ledger.attempts(oldest_first=True)
        # One request per attempt, in the same order: what the stand-in billed for each.
        served = [entry for entry in server.requests if entry["path"] == "/v1/messages"]
        billed = {
            row["id"]: settlement_cost(entry["usage"], entry["model_id"], None, current_revision())
            for row, entry in zip(every_attempt, served)
        }
    still_open = {row["id"] for row in after}
    settled = [row for row in every_attempt if row["id"] in {b["id"] for b in before} and row["id"] not in still_open]
    unmatched = len(every_attempt) != len(served)
    wrong = sum(1 for row in settled if billed.get(row["id"]) != row["cost_nusd"])
    state = provider_pass.load_state()
    return {
        "open_before": len(before),
        "held_before_nusd": sum(row["ceiling_nusd"] for row in before),
        "open_after": len(after),
        "held_after_nusd": sum(row["ceiling_nusd"] for row in after),
        "settled": len(settled),
        "settled_differing_from_billed": wrong,
        "settled_without_a_request_to_compare": unmatched,
        "minutes_after_last_send": (fake.at - last_sent).total_seconds() / 60,
        "pass_error": state.get("error"),
    }


def run_in_fresh_directory(interrupted, spacing, pairs):
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["LLM_USER_PATH"] = str(pathlib.Path(tmp) / "llm-user")
        os.environ["LLM_ACCOUNTS_LEDGER"] = str(pathlib.Path(tmp) / "ledger.db")
        os.environ.pop("ANTHROPIC_ACCOUNTS", None)
        pathlib.Path(os.environ["LLM_USER_PATH"]).mkdir()
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            return scenario(interrupted, spacing, pairs)
        finally:
            os.chdir(cwd)


def show(title, figures):
    from llm_accounts.money import usd_fine

    print(title)
    print(f"  held by unknown outcomes before the pass: {usd_fine(figures['held_before_nusd'])} in {figures['open_before']} open attempts")
    print(f"  held after the automatic pass:            {usd_fine(figures['held_after_nusd'])} in {figures['open_after']} open attempts")
    print(f"  settled from the usage report: {figures['settled']} of {figures['open_before']}"
          f" ({figures['minutes_after_last_send']:.0f} min after the last interrupted prompt was sent)")
    print(f"  settlements differing from what the stand-in billed: {figures['settled_differing_from_billed']}"
          + (" (attempts and requests did not pair up)" if figures["settled_without_a_request_to_compare"] else ""))
    if figures["held_before_nusd"]:
        print(f"  ratio held after / before: {figures['held_after_nusd'] / figures['held_before_nusd']:.3f}")
    if figures["pass_error"]:
        print(f"  the pass failed: {figures['pass_error']}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--interrupted", type=int, default=20, help="interrupted prompts, one every --spacing seconds")
    parser.add_argument("--spacing", type=int, default=90, help="seconds between interrupted prompts")
    parser.add_argument("--dense", type=int, default=20, help="interrupted prompts two a minute (0: skip)")
    args = parser.parse_args()
    show(f"{args.interrupted} interrupted prompts, one every {args.spacing} s:", run_in_fresh_directory(args.interrupted, args.spacing, False))
    if args.dense:
        show(f"{args.dense} interrupted prompts, two in each minute (ambiguous by design):",
             run_in_fresh_directory(args.dense // 2, 60, True))


if __name__ == "__main__":
    main()
