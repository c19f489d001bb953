"""Key scrubbing: no run of the chosen key reaches output (docs/security.md "Scrubbing").

A masker cannot tell a few characters of the key from other text, so it matches *runs*: a
character is masked when it lies in a run of eight or more characters that occurs anywhere in the
key (the whole key, for a key shorter than eight), within one *join*. Equivalently: every window
of eight characters that is an 8-character substring of the key is masked, and so is the union of
those windows.

Joins:

- A response that is not streamed (``scrub_json``): the text, the thinking and the quoted text of
  citations in ``content`` are joined by kind and all in order; every other string, a dict name
  and a number's text alike, is matched on its own.
- A stream (``StreamScrubber``): each channel's pieces across the message, and every piece in
  order across channels. Text that could still begin a run (at most seven trailing characters of
  a join) is held back until the join continues, pauses (an event carrying no text into it) or
  ends. A held run shorter than eight is released at a pause; if the key continues after the
  pause, the rest of the run is masked.
- In a stream, every beginning of the key longer than its public ``sk-ant-`` prefix is masked
  too. For an Anthropic key that is already a run (eight characters or more); a key that does not
  start with ``sk-ant-`` has no public prefix, so its first character is masked wherever it
  appears, and so is every beginning of the key that follows it. A whole string can be read
  first, so ``scrub_text`` and ``scrub_json`` do not mask beginnings shorter than a run.

A mask is the fixed marker ``MASK``, the same whatever it covers, so it reveals no key characters
and no length; adjacent masked characters collapse into one marker. Its brackets are not in an
Anthropic key's alphabet, so no run of the key can form across a marker.
"""

from __future__ import annotations

import re

MASK = "[key]"
RUN = 8
PUBLIC_PREFIX = "sk-ant-"

# A run of the key can only lie in a stretch of characters the key is made of; these fixed
# classes let a C-level regex skip ordinary text without building a pattern from the key itself.
_CLASSES = (
    (frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"), r"[A-Za-z0-9_\-]"),
    (frozenset(chr(c) for c in range(0x21, 0x7F)), r"[!-~]"),
)


class _Key:
    """Everything the matchers need, computed once per key: its runs and what can begin one."""

    __slots__ = ("key", "n", "last", "runs", "search", "stretch", "finditer", "fail")

    def __init__(self, key):
        if not isinstance(key, str) or not key:
            raise ValueError("key: must be a non-empty string")
        self.key = key
        n = self.n = min(RUN, len(key))
        self.last = len(key) - n  # where the last run starts
        self.runs = frozenset(key[i : i + n] for i in range(self.last + 1))
        self.search = self.stretch = self.finditer = None
        chars = set(key)
        for alphabet, cls in _CLASSES:
            if chars <= alphabet:
                # search finds the first n characters of a stretch (a fixed count is the cheapest
                # probe for sre); stretch and finditer take whole stretches.
                self.search = re.compile("%s{%d}" % (cls, n)).search
                whole = re.compile("%s{%d,}" % (cls, n))
                self.stretch, self.finditer = whole.match, whole.finditer
                break
        # A key without the public sk-ant- prefix has every beginning masked in a stream. A KMP
        # failure table tracks the longest beginning of the key ending at each character, so that
        # rule needs no look-ahead and no held text.
        self.fail = None if key.startswith(PUBLIC_PREFIX) else _failure_table(key)

    def __repr__(self):
        return "<scrub key>"

    def run_starts(self, s):
        """Every index ``i`` where ``s[i:i+n]`` is a run of the key."""
        n, runs = self.n, self.runs
        spans = ((0, len(s)),) if self.search is None else (m.span() for m in self.finditer(s))
        return [i for a, b in spans for i in range(a, b - n + 1) if s[i : i + n] in runs]

    def has_run(self, s, match):
        """Whether ``s`` holds a run, given where ``search`` found a stretch long enough for one."""
        n, runs, search = self.n, self.runs, self.search
        while match is not None:
            a, b = self.stretch(s, match.start()).span()
            for i in range(a, b - n + 1):
                if s[i : i + n] in runs:
                    return True
            match = search(s, b)
        return False

    def hold(self, s):
        """How many trailing characters of ``s`` could still begin a run: the longest such suffix.

        A suffix can begin a run when it occurs in the key no later than the last run's start.
        Substrings of the key are closed under taking suffixes, so the first scan can stop early.
        """
        key, size = self.key, len(s)
        limit = min(self.n - 1, size)
        k = 0
        while k < limit and s[size - k - 1 :] in key:
            k += 1
        while k and not 0 <= key.find(s[size - k :]) <= self.last:
            k -= 1
        return k

    def step(self, state, char):
        """The KMP transition: length of the longest beginning of the key ending at ``char``."""
        key, fail = self.key, self.fail
        while state and (state == len(key) or key[state] != char):
            state = fail[state - 1]
        return state + 1 if key[state] == char else state

    def masked(self, s, beginnings=False):
        """The set of masked indexes of ``s`` matched on its own."""
        hit = set()
        for a, b in _spans(self.run_starts(s), self.n):
            hit.update(range(a, b))
        if beginnings and self.fail is not None and self.key[0] in s:
            state = 0
            for j, char in enumerate(s):
                state = self.step(state, char)
                if state:
                    hit.add(j)
        return hit


def _spans(starts, n):
    """Merge the windows ``[i, i+n)`` of sorted run starts into disjoint ``(start, end)`` spans."""
    spans = []
    for i in starts:
        if spans and i <= spans[-1][1]:
            spans[-1][1] = i + n
        else:
            spans.append([i, i + n])
    return spans


def _failure_table(key):
    fail = [0] * len(key)
    k = 0
    for i in range(1, len(key)):
        while k and key[i] != key[k]:
            k = fail[k - 1]
        if key[i] == key[k]:
            k += 1
        fail[i] = k
    return fail


def _render(s, hit):
    """``s`` with each stretch of masked indexes replaced by one ``MASK``."""
    if not hit:
        return s
    parts = []
    start = 0
    previous = -2
    for j in sorted(hit):
        if j != previous + 1:
            parts.append(s[start:j])
            parts.append(MASK)
        previous = j
        start = j + 1
    parts.append(s[start:])
    return "".join(parts)


def scrub_text(text: str, key: str) -> str:
    """Mask every run of ``key`` in one whole string (no beginnings: it can be read first)."""
    return _render(text, _Key(key).masked(text))


def scrub_value(value, key):
    """A new copy of a parsed JSON value with every string, dict name and number's text matched
    on its own (a streamed tool block's input, read whole once its block ends)."""
    return _scrub_value(_Key(key), value)


def run_detector(key):
    """A test for whole strings: ``holds(text)`` is whether ``text`` holds a run of ``key``.

    For strings that are kept or dropped whole (a request id, a served model name, a usage
    field), never masked, so there are no beginnings to mask either.
    """
    k = _Key(key)

    def holds(text):
        return bool(k.run_starts(text))

    return holds


def scrub_other(value: str, key: str) -> str:
    """Mask a stream event's other string value, matched on its own (docs/security.md "Scrubbing").

    Part of the stream path, so a key without the ``sk-ant-`` prefix also has its beginnings
    masked. A caller scrubbing many values should use ``StreamScrubber.other``, which reuses the
    key's tables.
    """
    return _render(value, _Key(key).masked(value, beginnings=True))


# --- A response that is not streamed ------------------------------------------------------------

_JOINED = {"text": "text", "thinking": "thinking"}


def scrub_json(value, key):
    """A new copy of a parsed non-streamed response with the key masked (docs/security.md
    "Scrubbing").

    ``content``'s text, thinking and citations' ``cited_text`` are matched as joins of each kind
    and all in order (a bare string item counts as text); every other string, dict name and
    number's text is matched on its own. A number holding a run comes back as its masked text.
    Two dict names that mask to the same text keep the later value.
    """
    k = _Key(key)
    if isinstance(value, dict) and isinstance(value.get("content"), (list, str)):
        pieces = []
        _collect(value["content"], pieces)
        _mask_joins(k, pieces)
        rendered = iter([_render(s, hit) for _, s, hit in pieces])
        return {
            _scrub_name(k, name): (
                _rebuild(k, item, rendered) if name == "content" else _scrub_value(k, item)
            )
            for name, item in value.items()
        }
    return _scrub_value(k, value)


def _collect(content, pieces):
    """The joined strings of ``content`` in document order, as ``[kind, string, masked]``."""
    if isinstance(content, str):
        pieces.append(["text", content, set()])
        return
    for item in content:
        if isinstance(item, str):
            pieces.append(["text", item, set()])
        elif isinstance(item, dict):
            for name, field in item.items():
                if name in _JOINED and isinstance(field, str):
                    pieces.append([_JOINED[name], field, set()])
                elif name == "citations" and isinstance(field, list):
                    for citation in field:
                        if isinstance(citation, dict) and isinstance(citation.get("cited_text"), str):
                            pieces.append(["citation", citation["cited_text"], set()])


def _rebuild(k, content, rendered):
    """``content`` again, taking joined strings from ``rendered`` in the order ``_collect`` found them."""
    if isinstance(content, str):
        return next(rendered)
    out = []
    for item in content:
        if isinstance(item, str):
            out.append(next(rendered))
        elif isinstance(item, dict):
            block = {}
            for name, field in item.items():
                if name in _JOINED and isinstance(field, str):
                    new = next(rendered)
                elif name == "citations" and isinstance(field, list):
                    new = []
                    for citation in field:
                        if isinstance(citation, dict) and isinstance(citation.get("cited_text"), str):
                            new.append(
                                {
                                    _scrub_name(k, cname): (
                                        next(rendered) if cname == "cited_text" else _scrub_value(k, cvalue)
                                    )
                                    for cname, cvalue in citation.items()
                                }
                            )
                        else:
                            new.append(_scrub_value(k, citation))
                else:
                    new = _scrub_value(k, field)
                block[_scrub_name(k, name)] = new
            out.append(block)
        else:
            out.append(_scrub_value(k, item))
    return out


def _mask_joins(k, pieces):
    """Mark each piece's masked indexes from the joins of each kind and the join of all."""
    kinds = {kind for kind, _, _ in pieces}
    for members in [[p for p in pieces if p[0] == kind] for kind in sorted(kinds)] + [pieces]:
        joined = "".join(p[1] for p in members)
        starts = k.run_starts(joined)
        if not starts:
            continue
        offsets = []
        at = 0
        for p in members:
            offsets.append(at)
            at += len(p[1])
        hit = set()
        for a, b in _spans(starts, k.n):
            hit.update(range(a, b))
        index = 0
        for j in sorted(hit):
            while index + 1 < len(members) and offsets[index + 1] <= j:
                index += 1
            members[index][2].add(j - offsets[index])


def _scrub_name(k, name):
    return _render(name, k.masked(name)) if isinstance(name, str) else name


def _scrub_value(k, value):
    if isinstance(value, str):
        return _render(value, k.masked(value))
    if isinstance(value, dict):
        return {_scrub_name(k, name): _scrub_value(k, item) for name, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub_value(k, item) for item in value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        # A number is matched as its JSON text; it only changes if that text holds a run.
        text = repr(value)
        hit = k.masked(text)
        return _render(text, hit) if hit else value
    return value


# --- A stream -------------------------------------------------------------------------------------


class _Join:
    """One join's state: the trailing text that could still begin a run, and where it came from."""

    __slots__ = ("tail", "where", "released", "state")

    def __init__(self):
        self.tail = ""  # at most n-1 characters: context for runs that continue into new text
        self.where = []  # the global index of each character of tail
        self.released = 0  # characters before this global index are not held (a pause)
        self.state = 0  # KMP state, for a key without the public prefix


class StreamScrubber:
    """Mask the key in a stream's text pieces as they arrive, by join (docs/security.md
    "Scrubbing").

    ``feed`` takes each piece with the channel (join) it belongs to, and returns the
    ``(channel, text)`` pieces now safe to emit, in input order, masked. Every piece is also part
    of the join of all pieces in order, so a key split across channels is caught. A character is
    released only once no join still holds it.

    A pause is an event that carries no text into a join. So a piece for one
    channel is a pause for every other channel's join, and ``pause()`` is for events that carry no
    text at all (a block's start or stop, a ping, a signature): without it the last few
    characters of the stream wait for the next piece or ``flush()``.

    The common case (one channel, nothing masked, nothing held elsewhere) runs a fast path that
    keeps only the held text; anything else switches to the general bookkeeping and back.
    """

    __slots__ = (
        "_k",
        "_n",
        "_search",
        "_chars",
        "_pairs",
        "_firsts",
        "_total",
        "_emitted",
        "_pending",
        "_masked",
        "_joins",
        "_all",
        "_open",
        "_fast",
        "_ctx",
        "_done",
    )

    def __init__(self, key: str):
        k = self._k = _Key(key)
        # The hot path's tables, held directly: a regex finding stretches a run could lie in, and
        # the one- and two-character pieces of the key that decide most holds at once.
        self._n = k.n
        self._search = k.search
        self._chars = frozenset(key) if k.n > 1 else frozenset()
        self._pairs = frozenset(key[i : i + 2] for i in range(len(key) - 1)) if k.n > 2 else frozenset()
        self._firsts = frozenset(key[: k.last + 1]) if k.n > 1 else frozenset()
        self._reset()

    def __repr__(self):
        return "<StreamScrubber>"

    def __reduce__(self):
        raise TypeError("a StreamScrubber holds a key and cannot be pickled")

    def _reset(self):
        self._total = 0  # characters fed
        self._emitted = 0  # characters released (as text or as part of a mask)
        self._pending = []  # [channel, text, first global index] covering emitted..total
        self._masked = set()  # global indexes, at or after emitted, known to be masked
        self._joins = {}
        self._all = _Join()
        self._open = set()  # channels whose last released character was masked
        # Fast path: when set, the join of all and this channel's join are identical, the
        # pending text is _ctx[_done:], nothing is masked and no other join holds anything.
        # _emitted is then only brought up to date when the fast path is left.
        self._fast = None
        self._ctx = ""
        self._done = 0

    def other(self, value: str) -> str:
        """Mask any other string value of an event, matched on its own (see ``scrub_other``)."""
        return _render(value, self._k.masked(value, beginnings=True))

    def feed(self, channel: str, text: str) -> list[tuple[str, str]]:
        """Take the next piece of ``channel``'s join; return what is now safe to emit, masked."""
        if channel == self._fast and text:
            s = self._ctx + text
            match = self._search(s)
            if match is None or not self._k.has_run(s, match):
                # No run in s: hold back only the longest suffix that could begin one. Pieces of
                # the key are closed under suffixes, so a last character outside it holds nothing,
                # and a last pair outside it holds at most that character.
                last = s[-1]
                if last not in self._chars:
                    hold = 0
                elif s[-2:] in self._pairs:
                    hold = self._k.hold(s)
                else:
                    hold = 1 if last in self._firsts else 0
                self._total += len(text)
                done = self._done  # characters of _ctx already released (by a pause)
                if hold:
                    cut = len(s) - hold
                    self._ctx = s[cut:]
                else:
                    cut = len(s)
                    self._ctx = ""
                if not done:
                    return [(channel, s[:cut] if hold else s)] if cut else []
                if done < cut:
                    self._done = 0
                    return [(channel, s[done:cut])]
                self._done = done - cut
                return []
        if not text:
            return []
        self._slow()
        g0 = self._total
        self._total = g0 + len(text)
        pending = self._pending
        if pending and pending[-1][0] == channel:
            pending[-1][1] += text
        else:
            pending.append([channel, text, g0])
        join = None
        for name, other in self._joins.items():
            if name == channel:
                join = other
            else:
                # This piece carries no text into another channel's join: a pause for it.
                other.released = g0
        if join is None:
            join = self._joins[channel] = _Join()
        self._scan(join, text, g0)
        self._scan(self._all, text, g0)
        out = self._release()
        self._try_fast(channel)
        return out

    def pause(self, channel: str | None = None) -> list[tuple[str, str]]:
        """An event carried no text into ``channel``'s join (any join, when None): release its hold."""
        if channel is None and self._fast is not None:
            total = self._total
            for join in self._joins.values():
                join.released = total
            self._all.released = total
            out = self._ctx[self._done :]
            self._done = len(self._ctx)
            return [(self._fast, out)] if out else []
        fast = self._fast
        self._slow()
        joins = list(self._joins.values()) + [self._all] if channel is None else [self._joins.get(channel)]
        for join in joins:
            if join is not None:
                join.released = self._total
        out = self._release()
        if fast is not None:
            self._try_fast(fast)
        return out

    def flush(self) -> list[tuple[str, str]]:
        """End of stream: release everything, masked, and forget the message's joins."""
        out = self.pause(None)
        self._reset()
        return out

    def _slow(self):
        """Leave the fast path: rebuild the general bookkeeping from the held text."""
        channel = self._fast
        if channel is None:
            return
        ctx, total = self._ctx, self._total
        emitted = self._emitted = total - len(ctx) + self._done
        where = list(range(total - len(ctx), total))
        join = self._joins[channel]
        for j in (self._all, join):
            j.tail, j.where, j.released = ctx, list(where), emitted
        self._pending = [[channel, ctx[self._done :], emitted]] if emitted < total else []
        self._fast = None

    def _scan(self, join, text, g0):
        """Mask the runs (and, without the public prefix, beginnings) that new text completes."""
        k = self._k
        tail = join.tail
        s = tail + text
        lt = len(tail)
        where = join.where
        emitted = self._emitted
        masked = self._masked
        for a, b in _spans(k.run_starts(s), k.n):
            # Text released at a pause stays released; the rest of the run is masked.
            masked.update(g for g in where[a:b] if g >= emitted)
            if b > lt:
                masked.update(range(g0 + max(a, lt) - lt, g0 + b - lt))
        if k.fail is not None:
            state = join.state
            for j, char in enumerate(text):
                state = k.step(state, char)
                if state:
                    masked.add(g0 + j)
            join.state = state
        hold = k.hold(s)
        size = len(text)
        join.tail = s[len(s) - hold :]
        if hold <= size:
            join.where = list(range(g0 + size - hold, g0 + size))
        else:
            join.where = where[lt - (hold - size) :] + list(range(g0, g0 + size))

    def _boundary(self):
        """The first global index some join still holds (or the total: nothing held)."""
        edge = self._total
        emitted = self._emitted
        for join in list(self._joins.values()) + [self._all]:
            floor = join.released if join.released > emitted else emitted
            for g in join.where:
                if g >= floor:
                    if g < edge:
                        edge = g
                    break
        return edge

    def _release(self):
        upto = self._boundary()
        out = []
        pending = self._pending
        masked = self._masked
        while pending and self._emitted < upto:
            piece = pending[0]
            channel, text, g = piece
            take = min(len(text), upto - g)
            chunk = text[:take]
            if masked and any(g <= m < g + take for m in masked):
                parts = []
                for j, char in enumerate(chunk):
                    if g + j in masked:
                        masked.discard(g + j)
                        if channel not in self._open:
                            parts.append(MASK)
                            self._open.add(channel)
                    else:
                        parts.append(char)
                        self._open.discard(channel)
                chunk = "".join(parts)
            elif chunk:
                self._open.discard(channel)
            if chunk:
                if out and out[-1][0] == channel:
                    out[-1] = (channel, out[-1][1] + chunk)
                else:
                    out.append((channel, chunk))
            if take == len(text):
                pending.pop(0)
            else:
                piece[1] = text[take:]
                piece[2] = g + take
            self._emitted = g + take
        return out

    def _try_fast(self, channel):
        """Return to the fast path when the general state has collapsed to its simple shape."""
        if self._k.fail is not None or self._k.search is None or self._masked or channel in self._open:
            return
        every, join = self._all, self._joins.get(channel)
        if join is None or every.tail != join.tail or every.where != join.where:
            return
        total, emitted = self._total, self._emitted
        if total - len(every.tail) > emitted:
            return  # pending text beyond the held tail
        if emitted < total and (every.released > emitted or join.released > emitted):
            return  # held by one of the two joins only
        for name, other in self._joins.items():
            if name != channel:
                floor = max(other.released, emitted)
                if any(g >= floor for g in other.where):
                    return
        self._fast = channel
        self._ctx = every.tail
        self._done = len(every.tail) - (total - emitted)
