"""Waiting for room: how long a prompt waits when only ceilings in flight stand in its way
(docs/architecture.md "Waiting for room").

Pure bookkeeping, like ``retries``: the bound (``-o wait SECONDS``, else ``LLM_ACCOUNTS_WAIT``,
else ``DEFAULT_WAIT_S``), the delays between reservations (``FALLBACK_S`` where writes that free
room wake the prompt, ``ledger/wakeup.py``; polling where nothing can wake it), and when to say on
stderr that prompts wait (``NoticeBoard``: once per prompt, at most once a second per process).
What may wait at all is the ledger's verdict (``selection.verdict``'s ``held``); the waiting itself
happens in ``models.py``'s loops between two reservations, holding no ledger lock, no transaction
and no HTTP connection.
"""

import dataclasses
import math
import random
import threading
import time

from .errors import AccountsError

#: The bound when neither ``-o wait`` nor ``LLM_ACCOUNTS_WAIT`` sets one. Chosen from
#: bench/daily.py (docs/performance.md "Waiting for room"): the longest wait it measured, six
#: parallel prompts on two $20 accounts and a batch of 100 on two $50 accounts, with room for
#: answers that take as long as a long real one.
DEFAULT_WAIT_S = 600.0
MAX_WAIT_S = 3600.0
ENV = "LLM_ACCOUNTS_WAIT"
#: With wake-ups (``ledger/wakeup.py``) a waiting prompt reserves again when a write frees room,
#: else after this plus jitter: the safety net for what no write signals (a dead waiter's place
#: expiring after ``WAITER_TTL``, 10 s). Below half of that, so a waiter renews its own place.
FALLBACK_S = 2.0
#: Without them, polls start fast and back off, so a waiter neither hammers the ledger's write lock nor idles
#: long once room frees: 25 ms, 50 ms, ... at most 250 ms, plus up to a quarter more as jitter.
POLL_BASE_S = 0.025
POLL_CAP_S = 0.25
JITTER = 0.25
#: A wait this long is said once on stderr.
NOTICE_AFTER_S = 1.0
#: At most one "waiting for" line this often per process, however many prompts wait.
NOTICE_EVERY_S = 1.0


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

    def next_delay(self, now, rand=random.random, woken=False):
        """Seconds before the next reservation, or None once the bound has passed. ``woken``: a
        write that frees room ends the wait sooner, so only the fallback is timed."""
        if self.started is None:
            self.started = now
        left = self.bound_s - self.waited(now)
        if left <= 0:
            return None
        if woken:
            self.polls += 1
            return min(FALLBACK_S * (1 + JITTER * rand()), left)
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


class NoticeBoard:
    """The "waiting for ..." lines of one process: one per prompt that waits, and at most one every
    ``NOTICE_EVERY_S`` for the whole process, so a batch of a hundred async prompts prints a few
    lines, not a hundred. A line covers every prompt waiting when it is printed and says how many
    wait; a prompt that starts waiting after it gets a later line (docs/architecture.md "Waiting
    for room"). ``clock`` is monotonic seconds (tests pass their own)."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self._waiting = set()
        self._told = set()
        self._last = None

    def start(self, key):
        with self._lock:
            self._waiting.add(key)

    def stop(self, key):
        with self._lock:
            self._waiting.discard(key)
            self._told.discard(key)

    def line(self, key, what):
        """What to print for ``key``, whose wait ``what`` describes: the line, ``""`` when a line
        already covered it (nothing more to say), or None when another line was printed less
        than ``NOTICE_EVERY_S`` ago (ask again later)."""
        with self._lock:
            if key in self._told:
                return ""
            now = self.clock()
            if self._last is not None and now - self._last < NOTICE_EVERY_S:
                return None
            self._waiting.add(key)
            count = len(self._waiting)
            self._told |= self._waiting
            self._last = now
        return what if count == 1 else f"{what}; {count} prompts of this process are waiting"


#: The process's board (``routing.RoutedCall`` uses it unless given another).
BOARD = NoticeBoard()
