"""The line on standard error that says an attempt was left open (docs/errors.md "Held open").

An interrupted prompt (Ctrl-C, a pipe closed early, a cancelled task) and every outcome the
provider did not prove keep the attempt's whole ceiling reserved until evidence settles it
(docs/architecture.md "Attempt outcomes"). That money is unavailable to the next prompt, so the
user is told at once: which attempt, how much, on which account, and what will settle it.
"""

import os
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


# Whether streamed answer text was printed without a newline at its end: a line said now would
# be glued to the answer's last line on a terminal (docs/errors.md "Warnings").
_open_line = False


def streamed(chunk):
    """Note a chunk of a streamed answer that llm prints as it arrives."""
    global _open_line
    if not isinstance(chunk, str):  # an llm StreamEvent: only its text is printed as it comes
        chunk = getattr(chunk, "chunk", None) if getattr(chunk, "type", None) == "text" else None
    if isinstance(chunk, str) and chunk:
        _open_line = not chunk.endswith("\n")


def new_answer():
    global _open_line
    _open_line = False


def _same_stream():
    """Whether standard output and standard error reach the same place (a terminal, or one file
    or pipe as with ``2>&1``); where it cannot be told, they are taken to."""
    try:
        out, err = os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError, TypeError):
        return True
    return (out.st_dev, out.st_ino) == (err.st_dev, err.st_ino) or (sys.stdout.isatty() and sys.stderr.isatty())


def say(line):
    """Print ``line`` on standard error, on a line of its own; a closed stderr loses the line, never
    the prompt's outcome (``llm accounts attempts --open`` lists the attempt all the same)."""
    global _open_line
    if _open_line:
        _open_line = False
        try:
            sys.stdout.flush()
        except (AttributeError, OSError, ValueError):
            pass
        if _same_stream():
            line = "\n" + line
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
