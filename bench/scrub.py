"""CPU cost of scrubbing a stream (architecture.md "Performance targets": <= 5% more than unscrubbed).

Usage: python bench/scrub.py [--deltas 2000] [--rounds 15]

One run measures, with time.process_time, the same stream handled twice, alternately:

- scrubbing only: the text deltas as a consumer gets them (append to a list, join at the end),
  plain vs through StreamScrubber;
- whole handling: the stream's SSE bytes split into lines, parsed into events with json.loads,
  dispatched by type, text deltas handed to the consumer; plain vs scrubbed (every text delta
  fed, every other event a pause, flush at the end).

Each ratio is scrubbed / plain, measured back to back in each round; the median over rounds is
printed with its min and max, and the median CPU time of each figure.
"""

import argparse
import json
import random
import secrets
import statistics
import string
import time

from llm_accounts.wire.scrub import StreamScrubber

WORDS = (
    "the of and to a in that is was for it with as on be at by this had not are but from or have an "
    "they which one you were all we her she there would their will when who him been has more if no out "
    "so said what up its about than into them can only other new some could time these two may first "
    "then do any like my now over such our man me even most made after also did many before must "
    "through back years where much your way well down should because each just those people how too "
    "little state good very make world still own see men work long get here between both life being "
    "under never day same another know while last might us great old year off come since against go "
    "came right used take three function return value request response account budget ledger "
    "conversation streaming implementation configuration"
).split()
USAGE = {"input_tokens": 472, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
CODE = ["`x = [1, 2, 3]`", "```python\n", "def f(a, b):\n    return a + b\n", "```\n", "**bold**", "- item\n"]


def make_key():
    """A key-shaped string made at run time (never a literal, never printed)."""
    alphabet = string.ascii_letters + string.digits + "-_"
    return "sk-ant-api03-" + "".join(secrets.choice(alphabet) for _ in range(93)) + "AA"


def workload(rng, key, deltas):
    """``deltas`` text pieces of 1-40 characters: prose and code, with the key echoed a few times."""
    parts = []
    size = 0
    while size < deltas * 22:
        if rng.random() < 0.0005:
            part = rng.choice([key, key[20:60], "the key is " + key + "."])
        elif rng.random() < 0.05:
            part = rng.choice(CODE)
        else:
            part = rng.choice(WORDS) + rng.choice(["", "", "", ",", ".", ".\n\n"]) + " "
        parts.append(part)
        size += len(part)
    text = "".join(parts)
    pieces, at = [], 0
    while len(pieces) < deltas and at < len(text):
        step = rng.randint(1, 40)
        pieces.append(text[at : at + step])
        at += step
    return pieces


def sse(pieces):
    """The stream's bytes, shaped like the Messages API's (reference/anthropic-api.md section 3)."""

    def event(data):
        return "event: %s\ndata: %s\n\n" % (data["type"], json.dumps(data, separators=(",", ":")))

    out = [
        event(
            {
                "type": "message_start",
                "message": {
                    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "claude-sonnet-4-5",
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": dict(USAGE, output_tokens=2),
                },
            }
        ),
        event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ]
    for i, piece in enumerate(pieces):
        if i % 200 == 100:
            out.append(event({"type": "ping"}))
        delta = {"type": "text_delta", "text": piece}
        out.append(event({"type": "content_block_delta", "index": 0, "delta": delta}))
    out.append(event({"type": "content_block_stop", "index": 0}))
    out.append(
        event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": dict(USAGE, output_tokens=9012),
            }
        )
    )
    out.append(event({"type": "message_stop"}))
    return "".join(out).encode("utf-8")


def consume_plain(pieces):
    out = []
    for text in pieces:
        out.append(text)
    return "".join(out)


def consume_scrubbed(pieces, key):
    scrubber = StreamScrubber(key)
    out = []
    for text in pieces:
        for _, safe in scrubber.feed("text", text):
            out.append(safe)
    for _, safe in scrubber.flush():
        out.append(safe)
    return "".join(out)


def handle(data, key=None):
    """Whole handling: SSE lines -> events -> text, optionally scrubbed."""
    scrubber = StreamScrubber(key) if key is not None else None
    out = []
    name, lines = None, []
    for line in data.decode("utf-8").split("\n"):
        if line.startswith("data:"):
            lines.append(line[5:].lstrip())
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif not line and lines:
            event = json.loads("\n".join(lines))
            lines = []
            kind = event["type"]
            if kind == "content_block_delta" and event["delta"]["type"] == "text_delta":
                text = event["delta"]["text"]
                if scrubber is None:
                    out.append(text)
                else:
                    for _, safe in scrubber.feed("text", text):
                        out.append(safe)
            elif scrubber is not None:
                for _, safe in scrubber.pause():
                    out.append(safe)
            name = None
    if scrubber is not None:
        for _, safe in scrubber.flush():
            out.append(safe)
    return name, "".join(out)


class PassThrough:
    """The routed path's scrubber slot with scrubbing taken out: the same stream unscrubbed."""

    def feed(self, channel, text):
        return [(channel, text)]

    def pause(self, channel=None):
        return []

    def flush(self):
        return []

    def other(self, value):
        return value


def routed(data, key=None):
    """The routed model's own stream path (events.StreamReader: SSE, message assembly, usage
    merge, StreamEvents), scrubbed with ``key`` or with scrubbing taken out."""
    from llm_accounts.wire.events import StreamReader

    reader = StreamReader(key or "unused-key-material")
    if key is None:
        reader.projector.scrubber = PassThrough()
    events = []
    for line in data.decode("utf-8").split("\n"):
        events.extend(reader.feed(line))
    events.extend(reader.finish())
    return "".join(event.chunk for event in events if event.type == "text")


def cpu(fn, *args, repeat=10):
    start = time.process_time()
    for _ in range(repeat):
        fn(*args)
    return (time.process_time() - start) / repeat


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    key = make_key()
    pieces = workload(random.Random(1), key, args.deltas)
    data = sse(pieces)
    # The scrubbed output must hold no run of the key, or the timing means nothing.
    shown = consume_scrubbed(pieces, key)
    assert not any(key[i : i + 8] in shown for i in range(len(key) - 7)), "a run of the key got through"
    assert handle(data, key)[1] == shown
    assert routed(data, key) == shown

    # The four figures of a round are measured back to back, so each ratio compares work done
    # under the same machine load; the medians over rounds are reported.
    rounds = []
    for _ in range(args.rounds):
        rounds.append(
            {
                "plain": cpu(consume_plain, pieces),
                "scrubbed": cpu(consume_scrubbed, pieces, key),
                "whole plain": cpu(handle, data),
                "whole scrubbed": cpu(handle, data, key),
                "routed plain": cpu(routed, data),
                "routed scrubbed": cpu(routed, data, key),
            }
        )
    median = {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}
    only = [r["scrubbed"] / r["plain"] for r in rounds]
    whole = [r["whole scrubbed"] / r["whole plain"] for r in rounds]
    path = [r["routed scrubbed"] / r["routed plain"] for r in rounds]

    def spread(ratios):
        return f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})"

    chars = sum(map(len, pieces))
    print(f"stream: {len(pieces)} text deltas, {chars} characters, {len(data)} SSE bytes")
    print(f"{args.rounds} rounds, CPU time from time.process_time")
    for name, value in median.items():
        print(f"  {name:15} {value * 1e3:8.3f} ms CPU  ({value / len(pieces) * 1e6:.2f} us per delta)")
    print(f"scrubbing only:  ratio {spread(only)}")
    verdict = "meets" if statistics.median(whole) <= 1.05 else "misses"
    print(f"whole handling:  ratio {spread(whole)} ({verdict} the <= 1.05 goal)")
    verdict = "meets" if statistics.median(path) <= 1.05 else "misses"
    print(f"routed path:     ratio {spread(path)} ({verdict} the <= 1.05 goal; events.StreamReader with and without scrubbing)")

if __name__ == "__main__":
    main()
