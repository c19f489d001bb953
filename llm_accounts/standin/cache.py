"""The stand-in's prompt cache (reference anthropic-api.md section 5).

One cache per organization: an entry is keyed by (organization, model, hash of the prefix through a
breakpoint). Breakpoints are the blocks carrying ``cache_control`` (at most 4), plus the one the
top-level automatic ``cache_control`` puts on the last cacheable block. For a request:

- the highest live entry found at a breakpoint, or up to 20 blocks before it, is read
  (``cache_read_input_tokens``) and refreshed;
- the prefix after it is written up to each later breakpoint: up to the last 1h breakpoint as
  ``ephemeral_1h_input_tokens``, then up to the last breakpoint as ``ephemeral_5m_input_tokens``;
- a breakpoint whose prefix is shorter than the minimum cacheable length is not cached;
- ``input_tokens`` counts only the tokens after the last cached breakpoint.

Writes become readable when the response begins (``commit``), so parallel identical requests all
pay the write price, as documented.
"""

import threading
from dataclasses import dataclass, field

from .tokens import prefix_digests

TTL_SECONDS = {"5m": 300, "1h": 3600}
MAX_BREAKPOINTS = 4
LOOKBACK = 20
_ORDER = "Note that blocks are processed in the following order: `tools`, `system`, `messages`."


class CacheRuleError(ValueError):
    """A cache_control rule is broken; the message is the 400 invalid_request_error text."""


def _ttl(cache_control, path):
    if not isinstance(cache_control, dict) or cache_control.get("type") != "ephemeral":
        raise CacheRuleError(f"{path}.type: Input should be 'ephemeral'")
    ttl = cache_control.get("ttl", "5m")
    if ttl not in TTL_SECONDS:
        raise CacheRuleError(f"{path}.ttl: Input should be '5m' or '1h'")
    return ttl


def _too_many(found):
    return f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {found}."


def breakpoints(units, automatic=None):
    """``[(unit index, ttl)]`` in prefix order, validating the documented limits."""
    points = [
        (index, _ttl(unit.cache_control, f"{unit.where}.cache_control"))
        for index, unit in enumerate(units)
        if unit.cache_control
    ]
    if automatic is not None:
        ttl = _ttl(automatic, "cache_control")
        last = max((index for index, unit in enumerate(units) if unit.cacheable), default=None)
        marked = dict(points)
        if last is not None and last in marked:
            if marked[last] != ttl:
                raise CacheRuleError(
                    "cache_control: the automatic cache_control's ttl differs from the ttl already set on the "
                    "last cacheable block"
                )
        elif last is not None:
            if len(points) >= MAX_BREAKPOINTS:
                raise CacheRuleError(_too_many(len(points) + 1))
            points = sorted(points + [(last, ttl)])
    if len(points) > MAX_BREAKPOINTS:
        raise CacheRuleError(_too_many(len(points)))
    seen_5m = False
    for index, ttl in points:
        if ttl == "1h" and seen_5m:
            raise CacheRuleError(
                f"{units[index].where}.cache_control.ttl: a ttl='1h' cache_control block must not come after a "
                f"ttl='5m' cache_control block. {_ORDER}"
            )
        seen_5m = seen_5m or ttl == "5m"
    return points


@dataclass
class CachePlan:
    """Usage of one request's prompt, and what to store when its response begins."""

    input_tokens: int
    cache_read_input_tokens: int = 0
    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0
    writes: list = field(default_factory=list)  # [(digest, ttl)]
    hit: object = None  # digest read, refreshed on commit

    @property
    def cache_creation_input_tokens(self):
        return self.ephemeral_5m_input_tokens + self.ephemeral_1h_input_tokens


class PromptCache:
    def __init__(self, clock):
        self.clock = clock
        self._entries = {}  # (organization, model, digest) -> (expires_at, ttl)
        self._lock = threading.Lock()

    def clear(self):
        with self._lock:
            self._entries.clear()

    def _live(self, key, now):
        entry = self._entries.get(key)
        if entry is None:
            return False
        if now >= entry[0]:
            del self._entries[key]
            return False
        return True

    def plan(self, organization, model_id, units, points, minimum):
        """Work out read, 5m/1h writes and uncached input for a prompt, without changing the cache."""
        total, cumulative = 0, []
        for unit in units:
            total += unit.tokens
            cumulative.append(total)
        digests = prefix_digests(model_id, units)
        now = self.clock()
        hit = -1
        with self._lock:
            for index, _ in points:
                for position in range(index, max(-1, index - LOOKBACK), -1):
                    if self._live((organization, model_id, digests[position]), now):
                        hit = max(hit, position)
                        break
        plan = CachePlan(input_tokens=total)
        done, last = 0, -1
        if hit >= 0:
            plan.cache_read_input_tokens = done = cumulative[hit]
            plan.hit = digests[hit]
            last = hit
        for index, ttl in points:
            if index <= hit or cumulative[index] < minimum:
                continue
            written = cumulative[index] - done
            if ttl == "1h":
                plan.ephemeral_1h_input_tokens += written
            else:
                plan.ephemeral_5m_input_tokens += written
            plan.writes.append((digests[index], ttl))
            done, last = cumulative[index], index
        plan.input_tokens = total - (cumulative[last] if last >= 0 else 0)
        return plan

    def commit(self, organization, model_id, plan):
        """Store the plan's writes and refresh its hit: the response has begun."""
        now = self.clock()
        with self._lock:
            if plan.hit is not None:
                key = (organization, model_id, plan.hit)
                entry = self._entries.get(key)
                if entry is not None:
                    self._entries[key] = (max(entry[0], now + TTL_SECONDS[entry[1]]), entry[1])
            for digest, ttl in plan.writes:
                key = (organization, model_id, digest)
                previous = self._entries.get(key)
                expires = now + TTL_SECONDS[ttl]
                if previous is not None and previous[0] > expires:
                    expires, ttl = previous
                self._entries[key] = (expires, ttl)
