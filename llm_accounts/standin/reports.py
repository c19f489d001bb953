"""The stand-in's Admin API reports, built from the requests it really served.

``GET /v1/organizations/usage_report/messages``, ``GET /v1/organizations/cost_report`` and
``GET /v1/organizations/api_keys``, in the documented shapes (docs/architecture.md "Settling from
the provider" cites the pages). A request counts once the stand-in planned its reply: that is when
it bills the whole usage, whether or not the client stayed for the end of the stream (a client
that goes away mid-stream is billed like one that read every event). It appears in the reports
``report_delay`` seconds after it *completed* (its reply was sent, or its client went away: the
provider documents visibility after completion), in the bucket of the minute it arrived in, or
completed in under ``report_bucketing: completion`` (the provider does not say which; a reader
must cope with both). Usage another tool ran on the organization (``StandIn.add_usage``: another
client on the same key, the Console, the Batch API, Priority Tier) is in the same log.

Money is exact: nanodollars as ``Fraction``, shown in cents as decimal strings. Batch usage is
billed at half its list price; usage served in the ``us`` inference geo at 1.1 times it on every
token kind (not on server-tool fees); Priority Tier usage is in the usage report but not in the
cost report, as the provider's cost endpoint leaves it out.

Pure functions of the request log, the query and the clock; the server authenticates and sends.
"""

import base64
import datetime as dt
from dataclasses import dataclass
from fractions import Fraction

from .validation import bad

UTC = dt.timezone.utc
WIDTHS = {"1m": dt.timedelta(minutes=1), "1h": dt.timedelta(hours=1), "1d": dt.timedelta(days=1)}
# (default, maximum) buckets a page, by width (the usage report's documented limits).
LIMITS = {"1d": (7, 31), "1h": (24, 168), "1m": (60, 1440)}
USAGE_GROUPS = ("api_key_id", "model", "workspace_id", "service_tier", "context_window", "inference_geo", "speed")
COST_GROUPS = ("workspace_id", "description")
# Grouping the usage report by speed needs this beta (the provider's docs).
FAST_MODE_BETA = "fast-mode-2026-02-01"
# The usage report's filters: query parameter -> the dimension it matches.
USAGE_FILTERS = {
    "api_key_ids[]": "api_key_id",
    "models[]": "model",
    "service_tiers[]": "service_tier",
    "context_window[]": "context_window",
    "inference_geos[]": "inference_geo",
    "speeds[]": "speed",
}
TOKEN_TYPES = (
    "uncached_input_tokens",
    "cache_read_input_tokens",
    "cache_creation.ephemeral_5m_input_tokens",
    "cache_creation.ephemeral_1h_input_tokens",
    "output_tokens",
)
SERVICE_TIERS = ("standard", "batch", "priority")  # the tiers the stand-in bills (add_usage)
SPEEDS = ("standard", "fast")
LONG_CONTEXT = 200_000  # above this many input tokens a request is in the 200k-1M context window
BATCH = Fraction(1, 2)  # the Batch API's discount on token prices
US_GEO = Fraction(11, 10)  # data residency in the us geo, on every token kind


@dataclass(frozen=True)
class Tokens:
    """A usage's counts, by the report's token kinds."""

    uncached: int = 0
    cache_read: int = 0
    write_5m: int = 0
    write_1h: int = 0
    output: int = 0
    web_search: int = 0

    @classmethod
    def of(cls, usage):
        """The counts of a Messages ``usage`` object (cache writes without their 5m/1h split count
        as 5-minute writes, the default TTL)."""
        creation = usage.get("cache_creation")
        if isinstance(creation, dict):
            write_5m = creation.get("ephemeral_5m_input_tokens", 0)
            write_1h = creation.get("ephemeral_1h_input_tokens", 0)
        else:
            write_5m, write_1h = usage.get("cache_creation_input_tokens", 0), 0
        return cls(
            usage.get("input_tokens", 0),
            usage.get("cache_read_input_tokens", 0),
            write_5m,
            write_1h,
            usage.get("output_tokens", 0),
            (usage.get("server_tool_use") or {}).get("web_search_requests", 0),
        )

    def __add__(self, other):
        return Tokens(*(mine + theirs for mine, theirs in zip(self.counts(), other.counts())))

    def counts(self):
        return (self.uncached, self.cache_read, self.write_5m, self.write_1h, self.output, self.web_search)

    @property
    def input_total(self):
        """Every input token: fresh, read and written (what decides the context window)."""
        return self.uncached + self.cache_read + self.write_5m + self.write_1h

    @property
    def total(self):
        return self.input_total + self.output


@dataclass(frozen=True)
class Billed:
    """One billed request (or ``requests`` of them, as another tool's usage is added), as a report
    sees it: ``at`` is the instant that puts it in its bucket."""

    at: dt.datetime
    api_key_id: object  # None: usage no API key authenticated (the Console, the Workbench)
    model: str
    tokens: Tokens
    service_tier: str = "standard"
    inference_geo: str = "not_available"
    speed: str = "standard"
    context_window: str = "0-200k"
    requests: int = 1
    workspace_id: object = None  # the default workspace, whose id the reports give as null

    def value(self, dimension):
        return getattr(self, dimension)


def context_window(total_input):
    """The report's ``context_window`` of a request with this many input tokens."""
    return "200k-1M" if total_input > LONG_CONTEXT else "0-200k"


def billed(entries, organization, cut, bucketing="arrival"):
    """The billed requests of ``organization`` that completed by ``cut`` (seconds: the clock less
    ``report_delay``), each in the bucket of its arrival or completion (``bucketing``). A request
    still being answered is not visible yet, however long ago it arrived."""
    out = []
    for entry in entries:
        completed = entry.get("completed_at")
        if entry.get("organization") != organization or entry.get("usage") is None or entry.get("at") is None:
            continue
        if completed is None or completed > cut:
            continue
        instant = completed if bucketing == "completion" else entry["arrived_at"]
        out.append(Billed(
            dt.datetime.fromtimestamp(instant, UTC),
            entry["api_key_id"],
            entry["model_id"],
            Tokens.of(entry["usage"]),
            entry["service_tier"],
            entry["inference_geo"],
            entry["speed"],
            entry["context_window"],
            entry.get("requests", 1),  # a served request is one; added usage may stand for several
        ))
    return out


def matches(record, filters, null_entry=False):
    """Whether ``record`` passes every filter (dimension -> allowed values). With ``null_entry``
    an empty value also matches a null dimension (the Analytics API's ``api_key_ids[]=``)."""
    for dimension, allowed in filters.items():
        value = record.value(dimension)
        if value in allowed or (null_entry and value is None and "" in allowed):
            continue
        return False
    return True


def usage_report(query, requests, now, betas=()):
    """One page of the Messages usage report."""
    width, start, end, limit = _window(query, "1d", LIMITS)
    groups = _groups(query, USAGE_GROUPS)
    if "speed" in groups and FAST_MODE_BETA not in betas:
        raise bad(f"group_by: speed needs the anthropic-beta header {FAST_MODE_BETA}")
    filters = {dimension: set(query[name]) for name, dimension in USAGE_FILTERS.items() if query.get(name)}
    data = []
    for bucket_start, bucket_end in _buckets(start, end, width, limit):
        sums = {}
        for record in requests:
            if not bucket_start <= record.at < bucket_end or not matches(record, filters):
                continue
            group = tuple(record.value(name) if name in groups else None for name in USAGE_GROUPS)
            sums[group] = sums.get(group, Tokens()) + record.tokens
        results = []
        for group, total in sorted(sums.items(), key=lambda item: order(item[0])):
            values = dict(zip(USAGE_GROUPS, group))
            results.append({
                "uncached_input_tokens": total.uncached,
                "cache_creation": {"ephemeral_1h_input_tokens": total.write_1h, "ephemeral_5m_input_tokens": total.write_5m},
                "cache_read_input_tokens": total.cache_read,
                "output_tokens": total.output,
                "server_tool_use": {"web_search_requests": total.web_search},
                "api_key_id": values["api_key_id"],
                "workspace_id": values["workspace_id"],
                "model": values["model"],
                "service_tier": values["service_tier"],
                "context_window": values["context_window"],
                "inference_geo": values["inference_geo"],
                "speed": values["speed"],
            })
        data.append({"starting_at": iso(bucket_start), "ending_at": iso(bucket_end), "results": results})
    return _page(data, start, end, width, limit)


def cost_report(query, requests, now, revision):
    """One page of the cost report: daily buckets, amounts in cents as decimal strings, priced at
    ``revision`` (the stand-in bills at the shipped prices unless a test gives it others)."""
    width, start, end, limit = _window(query, "1d", {"1d": (7, 31)})
    groups = _groups(query, COST_GROUPS)
    data = []
    for bucket_start, bucket_end in _buckets(start, end, width, limit):
        sums = {}
        for record in requests:
            if not bucket_start <= record.at < bucket_end:
                continue
            for cost_type, token_type, _list, amount in cost_lines(record, revision):
                group = (None,) * 6
                if "description" in groups:
                    group = (record.model, cost_type, token_type, record.service_tier, record.context_window,
                             record.inference_geo)
                sums[group] = sums.get(group, Fraction(0)) + amount
        results = []
        for group, total in sorted(sums.items(), key=lambda item: order(item[0])):
            model, cost_type, token_type, tier, context, geo = group
            results.append({
                "currency": "USD",
                "amount": cents(total),
                "workspace_id": None,
                "description": describe(*group) if model else None,
                "cost_type": cost_type,
                "context_window": context,
                "model": model,
                "service_tier": tier,
                "token_type": token_type,
                "inference_geo": geo,
            })
        data.append({"starting_at": iso(bucket_start), "ending_at": iso(bucket_end), "results": results})
    return _page(data, start, end, width, limit)


def api_keys(query, keys, organization):
    """``GET /v1/organizations/api_keys``: ids and names, never a key (the real API gives a partial
    hint; the stand-in gives none, so nothing of a key is ever compared or shown)."""
    status = query.get("status", [None])[0]
    data = [
        {
            "type": "api_key",
            "id": key.api_key_id,
            "name": key.label,
            "status": "active",
            "workspace_id": None,
            "created_at": "2026-01-01T00:00:00Z",
            "created_by": {"id": "user_01standin", "type": "user"},
            "expires_at": None,
        }
        for key in keys
        if key.organization == organization and status in (None, "active")
    ]
    return {
        "data": data,
        "has_more": False,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }


def cost_lines(record, revision):
    """``(cost_type, token_type, list_nusd, amount_nusd)`` per cost a record bears, exact.

    Tokens at the tier of a request's total input (a record of several requests: of their mean),
    times 1.1 in the ``us`` geo, and half of that in ``amount`` for batch usage; web searches at
    their fee, the same in both. None for Priority Tier usage (the cost endpoint leaves it out) or
    a model ``revision`` does not price."""
    if record.service_tier == "priority":
        return []
    price = revision.model(record.model)
    if price is None:
        return []
    tokens = record.tokens
    rates = price.rates_for(tokens.input_total // max(record.requests, 1))
    per = (rates.input, rates.cache_read, rates.write_5m, rates.write_1h, rates.output)
    geo = US_GEO if record.inference_geo == "us" else 1
    discount = BATCH if record.service_tier == "batch" else 1
    lines = []
    for token_type, count, rate in zip(TOKEN_TYPES, tokens.counts(), per):
        if count:
            listed = Fraction(count) * Fraction(rate) * geo
            lines.append(("tokens", token_type, listed, listed * discount))
    # Web searches are billed per search on top of tokens, as their own row.
    if tokens.web_search:
        fee = Fraction(tokens.web_search * revision.server_tool_fees.get("web_search_requests", 0))
        lines.append(("web_search", None, fee, fee))
    return lines


def describe(model, cost_type, token_type, service_tier="standard", context="0-200k", geo="global"):
    """The stand-in's ``description`` of a cost: model and token type (or ``web_search``), with the
    tier, geo and context window when they are not the standard ones."""
    qualifiers = [
        service_tier if service_tier != "standard" else None,
        "us" if geo == "us" else None,
        "long context" if context == "200k-1M" else None,
    ]
    shown = [each for each in qualifiers if each]
    what = token_type if cost_type == "tokens" else cost_type
    return f"{model} {what}" + (f" ({', '.join(shown)})" if shown else "")


def order(values):
    """A stable sort key for group values that may be null (null first)."""
    return tuple((value is not None, "" if value is None else str(value)) for value in values)


def cents(nusd):
    """Nanodollars as cents in a decimal string (1 cent = 10,000,000 nanodollars), exact when the
    fraction ends, else to twelve places."""
    value = Fraction(nusd) / 10_000_000
    whole, rest = divmod(value.numerator, value.denominator)
    digits = ""
    for _ in range(12):
        if not rest:
            break
        rest *= 10
        digit, rest = divmod(rest, value.denominator)
        digits += str(digit)
    return f"{whole}.{digits}" if digits else str(whole)


def _window(query, default_width, limits):
    width = query.get("bucket_width", [default_width])[0]
    if width not in limits:
        raise bad(f"bucket_width: must be one of {', '.join(limits)}")
    default_limit, most = limits[width]
    page = query.get("page", [None])[0]
    starting = query.get("starting_at", [None])[0]
    if starting is None:
        raise bad("starting_at: Field required")
    start = snap(parse_instant(starting, "starting_at"), width)
    if page is not None:
        start = snap(parse_instant(_unpage(page), "page"), width)
    try:
        limit = int(query.get("limit", [str(default_limit)])[0])
    except ValueError:
        limit = 0
    if not 1 <= limit <= most:
        raise bad(f"limit: Input should be between 1 and {most}")
    ending = query.get("ending_at", [None])[0]
    end = parse_instant(ending, "ending_at") if ending is not None else start + WIDTHS[width] * limit
    return WIDTHS[width], start, end, limit


def _groups(query, allowed):
    groups = query.get("group_by[]", []) + query.get("group_by", [])
    for group in groups:
        if group not in allowed:
            raise bad(f"group_by: must be among {', '.join(allowed)}")
    return set(groups)


def _buckets(start, end, width, limit):
    out, at = [], start
    while at + width <= end and len(out) < limit:
        out.append((at, at + width))
        at += width
    return out


def _page(data, start, end, width, limit):
    following = start + width * len(data)
    more = len(data) == limit and following + width <= end
    return {"data": data, "has_more": more, "next_page": _token(following) if more else None}


def snap(at, width):
    if width == "1m":
        return at.replace(second=0, microsecond=0)
    if width == "1h":
        return at.replace(minute=0, second=0, microsecond=0)
    return at.replace(hour=0, minute=0, second=0, microsecond=0)


def parse_instant(text, field):
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise bad(f"{field}: must be an RFC 3339 timestamp") from None
    if value.tzinfo is None:
        raise bad(f"{field}: must carry a time zone")
    return value.astimezone(UTC)


def iso(at):
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _token(at):
    return "page_" + base64.urlsafe_b64encode(iso(at).encode()).decode()


def _unpage(token):
    try:
        return base64.urlsafe_b64decode(token.removeprefix("page_").encode()).decode()
    except (ValueError, UnicodeDecodeError):
        raise bad("page: not a page token from this report") from None
