"""A new conversation's client CPU against the number of declared accounts, measured in one run
(docs/performance.md "Goals and their latest figures").

    .venv/bin/python bench/accounts.py [--accounts 50] [--pairs 100] [--rounds 5] [--dir DIR]

Two SQLite ledgers, one declaring a single account and one declaring ``--accounts``, each account
already holding this credit period's month row (one admission pinned to it), as a ledger in
service has. Per round, each ledger takes ``--pairs`` new conversations (a reserve over every
declared account and its settle, on one connection, as a long-running client would), the two
ledgers taking turns; the figure is the client's CPU per pair (``time.process_time``: the fsync of
each commit is not counted, the work SQLite does for the statements is). Printed per round, then the
median of the per-round ratios (many accounts over one) with their min and max. Goal: <= 1.5.

The accounts differ in budget, rank (0 to 2) and weight (1 or 2), so a new conversation's choice
rarely ends in a tie of utilization; a tie reads the open conversations per account once more.
"""

import argparse
import pathlib
import statistics
import sys
import tempfile
import time
import uuid

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from llm_accounts.declarations import Account  # noqa: E402
from llm_accounts.ledger import Complete, Ledger, Scope  # noqa: E402
from llm_accounts.pricing.prices import Quote  # noqa: E402

NANO = 10**9
MODEL = "claude-sonnet-4-5-20250929"
QUOTE = Quote(MODEL, 50_000_000, "bench", "ab" * 32, ceiling_tokens=200_000)


def accounts(n):
    """``n`` accounts, budgets $1,000 up in steps of $10, ranks 0-2, weights 1-2."""
    return tuple(
        Account(f"acct{i:02d}", f"ACCT{i:02d}_KEY", (1_000 + 10 * i) * NANO, rank=i % 3, weight=1 + i % 2)
        for i in range(n)
    )


def prepared(path, declared):
    """A ledger where every declared account has taken one settled attempt this period."""
    ledger = Ledger(path)
    for account in declared:
        attempt_id = uuid.uuid4().hex
        ledger.reserve(Scope("conversation", attempt_id), attempt_id, QUOTE, declared, pinned=account.name)
        ledger.settle(attempt_id, Complete(1_000_000 + len(account.name), {"input_tokens": 10, "output_tokens": 10}, MODEL))
    return ledger


def pairs(ledger, declared, count):
    """Client CPU seconds per new conversation's reserve and settle, over ``count`` of them."""
    start = time.process_time()
    for _ in range(count):
        attempt_id = uuid.uuid4().hex
        ledger.reserve(Scope("conversation", uuid.uuid4().hex), attempt_id, QUOTE, declared)
        ledger.settle(attempt_id, Complete(4_500_000, {"input_tokens": 1200, "output_tokens": 300}, MODEL))
    return (time.process_time() - start) / count


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--accounts", type=int, default=50)
    parser.add_argument("--pairs", type=int, default=100, help="reserve+settle pairs per ledger per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        one, many = accounts(1), accounts(args.accounts)
        ledgers = [(one, prepared(pathlib.Path(tmp) / "one.db", one)), (many, prepared(pathlib.Path(tmp) / "many.db", many))]
        for declared, ledger in ledgers:
            pairs(ledger, declared, 20)  # untimed: warms the connection and its statements
        ratios = []
        for r in range(args.rounds):
            # The two ledgers take turns, first one then the other, so the machine's load touches both alike.
            order = ledgers if r % 2 == 0 else ledgers[::-1]
            figures = {len(declared): pairs(ledger, declared, args.pairs) for declared, ledger in order}
            ratio = figures[args.accounts] / figures[1]
            ratios.append(ratio)
            print(
                f"round {r + 1}: 1 account {figures[1] * 1e3:.3f} ms, {args.accounts} accounts "
                f"{figures[args.accounts] * 1e3:.3f} ms, ratio {ratio:.2f}"
            )
        for _, ledger in ledgers:
            ledger.close()
    print(
        f"client CPU of a new conversation, {args.accounts} accounts / 1: median {statistics.median(ratios):.2f} "
        f"(min {min(ratios):.2f}, max {max(ratios):.2f}; {args.rounds} rounds of {args.pairs}) goal <= 1.5"
    )


if __name__ == "__main__":
    main()
