"""The stand-in's Usage and Cost Analytics API (beta): ``GET /v1/organizations/analytics/usage``
and ``GET /v1/organizations/analytics/cost``, from the same billed requests as the legacy reports.

The provider now calls the usage and cost reports docs/architecture.md "Settling from the
provider" reads "legacy" and points new integrations here. What differs, and what a reader must
cope with:

- ``anthropic-beta: analytics-usage-cost-2026-08-24`` is required (the server answers 400 without
  it, and 404 to an organization without the beta);
- ``time_bucket_width`` (``1d``, ``1h``, ``1m``) replaces ``bucket_width``; ``ending_at`` is
  exclusive and required with it; a range spans at most 31 days, and at most 24 hours in minutes;
- rows, not buckets: one per bucket and group with usage (no empty buckets), ``limit`` of them a
  page (1..1000, default 20), in a stable order (bucket, then group values, null first), and
  ``page`` the previous ``next_page``. A page token pins the instant the first page was read at,
  so the later pages show the same data, every row once;
- ``group`` holds each grouped dimension only; ``usage`` adds ``requests`` and ``total_tokens``;
  cost rows give ``amount`` (after the Batch discount) and ``list_amount`` (before it) in cents as
  decimal strings, and ``requests``;
- ``api_key_ids[]=`` (an empty entry) also matches usage no API key authenticated (null
  ``api_key_id``: the Console, the Workbench);
- ``data_refreshed_at``: every request completed up to that instant is in the answer (the clock
  less ``report_delay``, to the second); one completed later is not, whichever bucket it is in.

Pure functions of the request log, the query and the clock, like ``reports``; the server
authenticates, checks the beta header and sends.
"""

import base64
import datetime as dt
import hashlib
import math
from dataclasses import dataclass
from fractions import Fraction

from . import reports
from .reports import UTC, WIDTHS, Tokens, cents, iso, order, parse_instant, snap
from .validation import bad

BETA = "analytics-usage-cost-2026-08-24"
USAGE_DIMENSIONS = ("api_key_id", "model", "service_tier", "inference_geo", "speed", "context_window", "workspace_id")
COST_ONLY = ("cost_type", "token_type", "description")
COST_DIMENSIONS = USAGE_DIMENSIONS + COST_ONLY
MAX_GROUPS = 5
FILTERS = reports.USAGE_FILTERS
# Filters whose values the provider enumerates: any other value is refused.
ENUMS = {
    "service_tiers[]": ("batch", "flex", "flex_discount", "priority", "priority_on_demand", "standard"),
    "context_window[]": ("0-200k", "200k-1M"),
    "inference_geos[]": ("global", "us", "not_available"),
}
EARLIEST = dt.datetime(2026, 1, 1, tzinfo=UTC)
LOOKBACK = dt.timedelta(days=365)
LONGEST = dt.timedelta(days=31)
LONGEST_IN_MINUTES = dt.timedelta(hours=24)
DEFAULT_LIMIT, MOST_ROWS = 20, 1000


@dataclass(frozen=True)
class Query:
    start: dt.datetime
    end: dt.datetime  # exclusive
    width: object  # a timedelta, or None: one bucket over the whole range
    groups: tuple  # grouped dimensions, in the order of USAGE_DIMENSIONS / COST_DIMENSIONS
    filters: dict  # dimension -> allowed values ("" also matches null)
    limit: int
    offset: int  # rows before this page
    refreshed: dt.datetime  # data_refreshed_at: requests completed by then are in the answer


def refreshed_at(now, delay):
    """``data_refreshed_at``: the clock less ``report_delay``, floored to the second."""
    return dt.datetime.fromtimestamp(math.floor(now - delay), UTC)


def usage(query, entries, organization, now, delay, bucketing="arrival"):
    """One page of ``GET /v1/organizations/analytics/usage``."""
    q = parse(query, now, delay, USAGE_DIMENSIONS, "usage")
    sums = {}
    for record in _records(entries, organization, q, bucketing):
        key = (_bucket(record.at, q), tuple(record.value(name) for name in q.groups))
        tokens, requests = sums.get(key, (Tokens(), 0))
        sums[key] = (tokens + record.tokens, requests + record.requests)
    rows = [
        {**_row_head(bucket, q, values), "usage": _usage(*sums[(bucket, values)])}
        for bucket, values in sorted(sums, key=_row_order)
    ]
    return _page(rows, q, "usage", query)


def cost(query, entries, organization, now, delay, revision, bucketing="arrival"):
    """One page of ``GET /v1/organizations/analytics/cost``, priced at ``revision`` (reports.cost_lines:
    batch at half price in ``amount``, the us geo at 1.1x, Priority Tier left out)."""
    q = parse(query, now, delay, COST_DIMENSIONS, "cost")
    sums = {}
    for record in _records(entries, organization, q, bucketing):
        bucket = _bucket(record.at, q)
        touched = {}
        for line in reports.cost_lines(record, revision):
            key = (bucket, tuple(_cost_value(record, line, name) for name in q.groups))
            listed, amount = touched.get(key, (Fraction(0), Fraction(0)))
            touched[key] = (listed + line[2], amount + line[3])
        # A request counts once in each row it adds to, whatever number of its costs are there.
        for key, (listed, amount) in touched.items():
            total_list, total_amount, requests = sums.get(key, (Fraction(0), Fraction(0), 0))
            sums[key] = (total_list + listed, total_amount + amount, requests + record.requests)
    rows = []
    for bucket, values in sorted(sums, key=_row_order):
        listed, amount, requests = sums[(bucket, values)]
        rows.append({
            **_row_head(bucket, q, values),
            "cost": {"amount": cents(amount), "list_amount": cents(listed), "currency": "USD", "requests": requests},
        })
    return _page(rows, q, "cost", query)


def parse(query, now, delay, dimensions, kind):
    """The checked query; a 400 names the parameter and the rule, never the value given."""
    width_name = _one(query, "time_bucket_width")
    if width_name is not None and width_name not in WIDTHS:
        raise bad(f"time_bucket_width: must be one of {', '.join(WIDTHS)}")
    starting = _one(query, "starting_at")
    if starting is None:
        raise bad("starting_at: Field required")
    start = parse_instant(starting, "starting_at")
    if start < EARLIEST:
        raise bad(f"starting_at: must be on or after {iso(EARLIEST)}")
    if start < dt.datetime.fromtimestamp(now, UTC) - LOOKBACK:
        raise bad("starting_at: must be within the last 365 days")
    page = _one(query, "page")
    refreshed, offset = _unpage(page, query, kind) if page is not None else (refreshed_at(now, delay), 0)
    ending = _one(query, "ending_at")
    if ending is None and width_name is not None:
        raise bad("ending_at: Field required with time_bucket_width")
    # Without a bucket width, one bucket up to the refresh instant (inclusive).
    end = parse_instant(ending, "ending_at") if ending is not None else refreshed + dt.timedelta(seconds=1)
    if end <= start:
        raise bad("ending_at: must be after starting_at")
    if end - start > LONGEST:
        raise bad("ending_at: the range may span at most 31 days")
    if width_name == "1m" and end - start > LONGEST_IN_MINUTES:
        raise bad("ending_at: with time_bucket_width 1m the range may span at most 24 hours")
    width = WIDTHS.get(width_name)
    if width is not None:
        start, end = snap(start, width_name), _snap_up(end, width_name)
    return Query(start, end, width, _groups(query, dimensions), _filters(query), _limit(query), offset, refreshed)


def _one(query, name):
    values = query.get(name)
    return values[0] if values else None


def _snap_up(at, width_name):
    down = snap(at, width_name)
    return down if down == at else down + WIDTHS[width_name]


def _groups(query, dimensions):
    asked = list(dict.fromkeys(query.get("group_by[]", []) + query.get("group_by", [])))
    for name in asked:
        if name not in dimensions:
            raise bad(f"group_by: must be among {', '.join(dimensions)}")
    if len(asked) > MAX_GROUPS:
        raise bad(f"group_by: at most {MAX_GROUPS} dimensions")
    return tuple(name for name in dimensions if name in asked)


def _filters(query):
    filters = {}
    for name, dimension in FILTERS.items():
        values = query.get(name)
        if not values:
            continue
        allowed = ENUMS.get(name)
        if allowed is not None and any(value and value not in allowed for value in values):
            raise bad(f"{name}: each must be one of {', '.join(allowed)}")
        filters[dimension] = set(values)
    return filters


def _limit(query):
    try:
        limit = int(_one(query, "limit") or DEFAULT_LIMIT)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MOST_ROWS:
        raise bad(f"limit: Input should be between 1 and {MOST_ROWS}")
    return limit


def _records(entries, organization, q, bucketing):
    """The billed records visible at the query's refresh instant, in its range, through its filters."""
    return [
        record
        for record in reports.billed(entries, organization, q.refreshed.timestamp(), bucketing)
        if q.start <= record.at < q.end and reports.matches(record, q.filters, null_entry=True)
    ]


def _bucket(at, q):
    """The start of the bucket ``at`` is in (the range's start without a width)."""
    if q.width is None:
        return q.start
    return q.start + q.width * ((at - q.start) // q.width)


def _row_order(key):
    bucket, values = key
    return bucket, order(values)


def _row_head(bucket, q, values):
    ending = q.end if q.width is None else bucket + q.width
    return {"starting_at": iso(bucket), "ending_at": iso(ending), "group": dict(zip(q.groups, values))}


def _usage(tokens, requests):
    return {
        "uncached_input_tokens": tokens.uncached,
        "cache_creation": {"ephemeral_5m_input_tokens": tokens.write_5m, "ephemeral_1h_input_tokens": tokens.write_1h},
        "cache_read_input_tokens": tokens.cache_read,
        "output_tokens": tokens.output,
        "server_tool_use": {"web_search_requests": tokens.web_search},
        "requests": requests,
        "total_tokens": tokens.total,
    }


def _cost_value(record, line, name):
    """A cost row's value of dimension ``name``: the record's, or the cost line's own kind."""
    cost_type, token_type = line[0], line[1]
    if name == "cost_type":
        return cost_type
    if name == "token_type":
        return token_type
    if name == "description":
        return reports.describe(
            record.model, cost_type, token_type, record.service_tier, record.context_window, record.inference_geo
        )
    return record.value(name)


def _page(rows, q, kind, query):
    following = q.offset + q.limit
    more = following < len(rows)
    return {
        "data": rows[q.offset:following],
        "has_more": more,
        "next_page": _token(q.refreshed, following, kind, query) if more else None,
        "data_refreshed_at": iso(q.refreshed),
    }


def _fingerprint(kind, query):
    """What a page token is bound to: the endpoint and every parameter but ``page`` and ``limit``."""
    shown = sorted((name, tuple(values)) for name, values in query.items() if name not in ("page", "limit"))
    return hashlib.sha256(repr((kind, shown)).encode()).hexdigest()[:12]


def _token(refreshed, offset, kind, query):
    """An opaque, short, printable token: the pinned refresh instant, the rows already given, and
    the query it belongs to (never anything of a key)."""
    text = f"{int(refreshed.timestamp())}:{offset}:{_fingerprint(kind, query)}"
    return "page_" + base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def _unpage(token, query, kind):
    """``(refreshed, offset)`` of a page token of this very query; anything else is a 400."""
    try:
        text = token.removeprefix("page_")
        seconds, offset, fingerprint = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode().split(":")
        refreshed, offset = dt.datetime.fromtimestamp(int(seconds), UTC), int(offset)
    except (ValueError, UnicodeDecodeError, OverflowError, OSError):
        raise bad("page: not a page token from this report") from None
    if fingerprint != _fingerprint(kind, query) or offset < 0:
        raise bad("page: not a page token of this query")
    return refreshed, offset
