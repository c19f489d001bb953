"""The line on standard error that says an attempt was left open (docs/errors.md "Held open").

An interrupted prompt (Ctrl-C, a pipe closed early, a cancelled task) and every outcome the
provider did not prove keep the attempt's whole ceiling reserved until evidence settles it
(docs/architecture.md "Attempt outcomes"). That money is unavailable to the next prompt, so the
user is told at once: which attempt, how much, on which account, and what will settle it.
"""

import sys

from .money import usd_fine


def settles_automatically(account):
    """An account that declares its organization's Admin API key (``admin_key_env``) and its key's
    id (``api_key_id``: never inferred, docs/architecture.md "Settling from the provider") is
    settled from the provider's usage report without a command (docs/errors.md "Held open");
    ``account`` may be None (no longer declared)."""
    return bool(getattr(account, "admin_key_env", None) and getattr(account, "api_key_id", None))


def held_open(attempt_id, account_name, ceiling_nusd, outcome, *, automatic=False):
    """The line for ``attempt_id`` left open with ``outcome`` on account ``account_name``."""
    if automatic:
        how = (
            "the provider's usage report settles it automatically once it proves what it cost (minutes after "
            f"the report refreshes); else 'llm accounts reconcile {attempt_id} --cost USD --source REF'"
        )
    else:
        how = (
            f"settle it with 'llm accounts reconcile {attempt_id} --cost USD --source REF' "
            "once the provider's usage shows what it cost"
        )
    return f"Warning: attempt {attempt_id} keeps {usd_fine(ceiling_nusd)} open on account '{account_name}' ({outcome}); {how}"


def say(line):
    """Print ``line`` on standard error; a closed stderr loses the line, never the prompt's outcome
    (``llm accounts attempts --open`` lists the attempt all the same)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
