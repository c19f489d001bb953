"""A usage report read into rows the matching rules can trust (docs/architecture.md "Settling
from the provider"): one parser per documented shape.

- The Usage and Cost Analytics API answers flat rows ``{starting_at, ending_at, group, usage}``,
  only for minutes with usage, each with its ``requests`` count. Every minute of the range read is
  covered; a row missing a documented field (``requests`` included: the SDK types it optional, and
  a row without it proves nothing) makes its minute unreadable.
- The legacy usage report answers buckets ``{starting_at, ending_at, results}``, empty ones
  included, without request counts. A minute is covered when its bucket came back in the
  documented shape; a result missing a field makes it unreadable.

A missing field is never read as 0. Everything here is untrusted provider text: only numbers,
instants and the closed-set values the rules compare (tier, geo, speed) are kept, and key ids
only to compare with the declared ones.
"""

import dataclasses
import datetime as dt

from ..pricing import prices
from .client import parse_time
from .rules import MINUTE, UTC, Usage, minute_of

_DIMENSIONS = ("api_key_id", "model", "service_tier", "inference_geo", "speed")


@dataclasses.dataclass(frozen=True)
class Row:
    """One minute's usage of one key, model, tier, geo and speed. ``requests`` is None on the
    legacy report; ``model`` is the revision's canonical id where it prices the model."""

    minute: dt.datetime
    key_id: str | None
    model: str
    service_tier: str | None
    inference_geo: str | None
    speed: str | None
    usage: Usage
    requests: int | None


@dataclasses.dataclass(frozen=True)
class Report:
    """Rows of one read, the minutes it covers, the minutes it could not read, and how fresh the
    provider says it is (Analytics ``data_refreshed_at``; None on the legacy report)."""

    api: str
    rows: tuple
    covered: frozenset
    unreadable: frozenset
    refreshed_at: dt.datetime | None


def _count(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _usage(fields, tokens_key="uncached_input_tokens"):
    """Counts from a usage object with every documented field present, else None."""
    creation, tools = fields.get("cache_creation"), fields.get("server_tool_use")
    if not isinstance(creation, dict) or not isinstance(tools, dict):
        return None
    values = (
        _count(fields.get(tokens_key)),
        _count(fields.get("cache_read_input_tokens")),
        _count(creation.get("ephemeral_5m_input_tokens")),
        _count(creation.get("ephemeral_1h_input_tokens")),
        _count(fields.get("output_tokens")),
        _count(tools.get("web_search_requests")),
    )
    return None if None in values else Usage(*values)


def usage_of(fields):
    """A usage object's counts (legacy result or Analytics ``usage``), or None unless every
    documented field is present and a count."""
    return _usage(fields) if isinstance(fields, dict) else None


def _minute(item):
    """The minute an item's bucket is, or None unless it is exactly one aligned minute."""
    start, end = parse_time(item.get("starting_at")), parse_time(item.get("ending_at"))
    if start is None or end is None or end - start != MINUTE or start != minute_of(start):
        return None
    return start


def _text(value):
    return value if value is None or isinstance(value, str) else False


def _canonical(model, revision):
    priced = revision.model(model)
    return priced.id if priced is not None else model


def _minutes(start, end):
    at, out = minute_of(start), set()
    if at < start:
        at += MINUTE
    while at + MINUTE <= end:
        out.add(at)
        at += MINUTE
    return out


def analytics(read, revision=None):
    """A ``Report`` from a ``client.Read`` of the Analytics API."""
    revision = revision or prices.current_revision()
    rows, unreadable = [], set()
    covered = _minutes(read.start, read.end)
    for item in read.items:
        minute = _minute(item)
        if minute is None:
            return Report("analytics", (), frozenset(), frozenset(covered), read.refreshed_at)
        group, usage = item.get("group"), item.get("usage")
        if not isinstance(group, dict) or not isinstance(usage, dict):
            unreadable.add(minute)
            continue
        counts, requests = _usage(usage), _count(usage.get("requests"))
        values = [_text(group.get(name)) for name in _DIMENSIONS]
        if counts is None or requests is None or any(name not in group for name in _DIMENSIONS) or False in values:
            unreadable.add(minute)
            continue
        key_id, model, tier, geo, speed = values
        if not isinstance(model, str):
            unreadable.add(minute)
            continue
        rows.append(Row(minute, key_id, _canonical(model, revision), tier, geo, speed, counts, requests))
    return Report("analytics", tuple(rows), frozenset(covered), frozenset(unreadable), read.refreshed_at)


def legacy(read, revision=None):
    """A ``Report`` from a ``client.Read`` of the legacy usage report (no request counts)."""
    revision = revision or prices.current_revision()
    rows, covered, unreadable = [], set(), set()
    for bucket in read.items:
        minute, results = _minute(bucket), bucket.get("results")
        if minute is None or not isinstance(results, list):
            continue
        covered.add(minute)
        for result in results:
            if not isinstance(result, dict):
                unreadable.add(minute)
                continue
            counts = _usage(result)
            values = [_text(result.get(name)) for name in ("api_key_id", "model", "service_tier", "inference_geo")]
            if counts is None or False in values or not isinstance(values[1], str):
                unreadable.add(minute)
                continue
            key_id, model, tier, geo = values
            rows.append(Row(minute, key_id, _canonical(model, revision), tier, geo, None, counts, None))
    return Report("messages", tuple(rows), frozenset(covered), frozenset(unreadable), None)


def parse(read, revision=None):
    """The ``Report`` of a read, by the shape its API answers."""
    return analytics(read, revision) if read.api == "analytics" else legacy(read, revision)
