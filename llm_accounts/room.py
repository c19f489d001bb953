"""Waiting for room: how long a prompt waits when only ceilings in flight stand in its way
(docs/architecture.md "Waiting for room").

Pure bookkeeping, like ``retries``: the bound (``-o wait SECONDS``, else ``LLM_ACCOUNTS_WAIT``,
else ``DEFAULT_WAIT_S``), the polling delays, and when to say once on stderr that a prompt is
waiting. What may wait at all is the ledger's verdict (``selection.verdict``'s ``held``); the
waiting itself happens in ``models.py``'s loops between two reservations, holding no ledger lock,
no transaction and no HTTP connection.
"""

import dataclasses
import math
import random

from .errors import AccountsError

#: The bound when neither ``-o wait`` nor ``LLM_ACCOUNTS_WAIT`` sets one. Chosen from
#: bench/daily.py (docs/performance.md "Waiting for room"): the longest wait it measured, six
#: parallel prompts on two $20 accounts and a batch of 100 on two $50 accounts, with room for
#: answers that take as long as a long real one.
DEFAULT_WAIT_S = 600.0
MAX_WAIT_S = 3600.0
ENV = "LLM_ACCOUNTS_WAIT"
#: Polls start fast and back off, so a waiter neither hammers the ledger's write lock nor idles
#: long once room frees: 25 ms, 50 ms, ... at most 250 ms, plus up to a quarter more as jitter.
POLL_BASE_S = 0.025
POLL_CAP_S = 0.25
JITTER = 0.25
#: A wait this long is said once on stderr.
NOTICE_AFTER_S = 1.0


def parse_wait(text, what):
    """Seconds from 0 to ``MAX_WAIT_S`` (a decimal number), or ``declaration_invalid`` naming
    ``what`` and the rule, never the value."""
    try:
        seconds = float(text)
    except (TypeError, ValueError):
        seconds = math.nan
    if not (0 <= seconds <= MAX_WAIT_S):  # also refuses nan and inf
        raise AccountsError(
            "declaration_invalid", f"{what}: must be a number of seconds from 0 to {MAX_WAIT_S:g} (0 refuses at once)"
        )
    return seconds


def bound(option, environ):
    """The wait bound of one prompt: the option, else the environment variable, else the default."""
    if option is not None:
        return float(option)
    text = environ.get(ENV)
    if text is None or text == "":
        return DEFAULT_WAIT_S
    return parse_wait(text.strip(), ENV)


@dataclasses.dataclass
class Wait:
    """One prompt's wait for room: started at the first refusal that only ceilings in flight
    caused, over once ``bound_s`` has passed (times from a monotonic clock the caller reads)."""

    bound_s: float = DEFAULT_WAIT_S
    started: float | None = None
    polls: int = 0
    noticed: bool = False

    def waited(self, now):
        return 0.0 if self.started is None else now - self.started

    def next_delay(self, now, rand=random.random):
        """Seconds before the next reservation, or None once the bound has passed."""
        if self.started is None:
            self.started = now
        left = self.bound_s - self.waited(now)
        if left <= 0:
            return None
        # The exponent stops growing once the cap is reached: 2 ** 1024 is no float, and a wait
        # of 600 s at the cap polls over two thousand times.
        delay = min(POLL_CAP_S, POLL_BASE_S * 2 ** min(self.polls, 16)) * (1 + JITTER * rand())
        self.polls += 1
        return min(delay, left)

    def notice_due(self, now):
        """True once, when the wait has lasted ``NOTICE_AFTER_S``."""
        if self.noticed or self.waited(now) < NOTICE_AFTER_S:
            return False
        self.noticed = True
        return True
