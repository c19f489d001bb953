"""What a client's cap costs admission, measured in one run (docs/architecture.md "Client caps").

    .venv/bin/python bench/client_caps.py [--history 20000] [--attempts 400] [--dir DIR]

A client's dollar and token caps are checked, inside the admission transaction, against the
client's ``month_client`` totals (kept by the attempt triggers). This prints the time of one reserve+settle, sequentially, with no client, with a client capped
in dollars and tokens, after ``--history`` earlier settled attempts of that client on the
account, and their ratio: what a capped client costs once its history in one period is long.
"""

import argparse
import datetime as dt
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from llm_accounts.declarations import Account  # noqa: E402
from llm_accounts.ledger import Complete, Ledger, Scope  # noqa: E402
from llm_accounts.pricing.prices import Quote  # noqa: E402

NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)
MODEL = "claude-sonnet-4-5-20250929"
QUOTE = Quote(MODEL, 1_000, "2026-11-01", "ab" * 32, ceiling_tokens=1_000)
DONE = Complete(10, {"input_tokens": 5, "output_tokens": 5}, MODEL)


def run(ledger, account, client, prefix, count):
    start = time.perf_counter()
    for i in range(count):
        attempt_id = f"{prefix}-{i}"
        ledger.reserve(Scope("conversation", attempt_id), attempt_id, QUOTE, [account], client=client, now=NOW)
        ledger.settle(attempt_id, DONE, now=NOW)
    return (time.perf_counter() - start) / count


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--history", type=int, default=20_000)
    parser.add_argument("--attempts", type=int, default=400)
    parser.add_argument("--dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        capped = Account("work", "WORK_KEY", 10**15, clients=(("ci", 10**15),), client_tokens=(("ci", 10**15),))
        with Ledger(pathlib.Path(tmp) / "ledger.db") as ledger:
            run(ledger, capped, "ci", "history", args.history)
            plain = [run(ledger, capped, None, f"plain{r}", args.attempts) for r in range(2)]
            with_cap = [run(ledger, capped, "ci", f"capped{r}", args.attempts) for r in range(2)]
    plain_s, capped_s = min(plain), min(with_cap)
    print(f"reserve+settle without a client:        {plain_s * 1e3:.3f} ms")
    print(f"reserve+settle, capped client, {args.history} earlier attempts: {capped_s * 1e3:.3f} ms")
    print(f"ratio capped / plain: {capped_s / plain_s:.2f}")


if __name__ == "__main__":
    main()
