"""Retries on the same account, and short cooldowns waited out (docs/architecture.md "Retries").

Pure bookkeeping: how long to wait before the next try, or ``None`` when the call should give
up, and what the provider's headers say about trying again. What may be retried at all is decided
by ``routing``: a refusal that proves nothing was billed (a documented 429 or 529, a connection
that never sent the request) and, as the SDK does, a 500, 502, 503 or 504 before any output;
never an answer the provider marked ``x-should-retry: false``, and never once output has started.
"""

import dataclasses
import random

DEFAULT_RETRIES = 2
MAX_RETRIES = 10
#: The most one prompt waits in all, across its retries and cooldowns.
WAIT_BOUND_S = 60.0
#: Exponential backoff without a retry-after: 0.5 s, 1 s, 2 s ... at most 8 s, plus up to a
#: quarter more as jitter, so processes that failed together do not retry together.
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 8.0
JITTER = 0.25
#: Past a cooldown's end, so the probe is due when the next reservation reads the clock.
MARGIN_S = 0.05
#: Cooldowns waited out per prompt (each wait also spends the wait bound).
MAX_COOLDOWN_WAITS = 4


@dataclasses.dataclass
class Retries:
    """What is left of one prompt's retries and wait."""

    left: int = DEFAULT_RETRIES
    wait_left_s: float = WAIT_BOUND_S
    used: int = 0
    waits: int = 0

    def backoff(self, retry_after_s=None, rand=random.random):
        """Seconds before the next retry (the provider's retry-after when it gave one), or None
        when no retry is left or the wait would pass the bound."""
        if self.left <= 0:
            return None
        if retry_after_s is not None:
            delay = float(retry_after_s)
        else:
            delay = min(BACKOFF_CAP_S, BACKOFF_BASE_S * 2**self.used) * (1 + JITTER * rand())
        if delay > self.wait_left_s:
            return None
        self.left, self.used, self.wait_left_s = self.left - 1, self.used + 1, self.wait_left_s - delay
        return delay

    def spent(self):
        """What an error adds once retries were spent ("after 2 retries (-o retries)"), or ""."""
        if not self.used:
            return ""
        return f"after {self.used} {'retry' if self.used == 1 else 'retries'} (-o retries)"

    def cooldown(self, until, now):
        """Seconds to wait for a cooldown ending at ``until``, or None when retries are off or it
        ends past the bound. Only a prompt that may retry waits (``-o retries 0`` refuses)."""
        if self.left <= 0 and self.used == 0 or self.waits >= MAX_COOLDOWN_WAITS:
            return None
        delay = max(0.0, (until - now).total_seconds()) + MARGIN_S
        if delay > self.wait_left_s:
            return None
        self.waits, self.wait_left_s = self.waits + 1, self.wait_left_s - delay
        return delay


def parse_retry_after(value):
    """A retry-after header as whole seconds (0-600), or None. Provider text, so only a short run
    of digits is read; an HTTP date or anything else is ignored."""
    if isinstance(value, str) and 0 < len(value) <= 4 and value.isascii() and value.isdigit():
        seconds = int(value)
        return seconds if seconds <= 600 else None
    return None


def parse_should_retry(value):
    """The ``x-should-retry`` header: True or False where the provider said so, else None.
    Provider text, so only the two words are read."""
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("true", "false"):
            return word == "true"
    return None


#: What Anthropic's SDK tries again without an ``x-should-retry`` header (docs/architecture.md
#: "Retries", the unrouted path): request timeout, conflict, rate limit, and every 5xx.
SDK_RETRIED_STATUSES = (408, 409, 429)


def sdk_retries(status, should_retry):
    """Whether the SDK would send this answer's request again: the provider's header first."""
    if should_retry is not None:
        return should_retry
    return status in SDK_RETRIED_STATUSES or status >= 500
