"""The stand-in's Admin API reports, built from the requests it really served.

``GET /v1/organizations/usage_report/messages``, ``GET /v1/organizations/cost_report`` and
``GET /v1/organizations/api_keys``, in the documented shapes (docs/architecture.md "Settling from
the provider" cites the pages). A request counts once the stand-in planned its reply: that is when
it bills the whole usage, whether or not the client stayed for the end of the stream (a client
that goes away mid-stream is billed like one that read every event). It appears in the reports
``report_delay`` seconds after it arrived, in the bucket of the minute it arrived in.

Pure functions of the request log, the query and the clock; the server authenticates and sends.
"""

import base64
import datetime as dt
from fractions import Fraction

from .validation import bad

UTC = dt.timezone.utc
WIDTHS = {"1m": dt.timedelta(minutes=1), "1h": dt.timedelta(hours=1), "1d": dt.timedelta(days=1)}
# (default, maximum) buckets a page, by width (the usage report's documented limits).
LIMITS = {"1d": (7, 31), "1h": (24, 168), "1m": (60, 1440)}
USAGE_GROUPS = ("api_key_id", "model", "workspace_id", "service_tier", "context_window")
COST_GROUPS = ("workspace_id", "description")
TOKEN_TYPES = (
    "uncached_input_tokens",
    "cache_read_input_tokens",
    "cache_creation.ephemeral_5m_input_tokens",
    "cache_creation.ephemeral_1h_input_tokens",
    "output_tokens",
)


def billed(entries, organization, now, delay):
    """The billed requests of ``organization`` visible at ``now``: (arrived, api_key_id, model, usage)."""
    out = []
    for entry in entries:
        at = entry.get("at")
        if entry.get("organization") != organization or entry.get("usage") is None or at is None:
            continue
        if at + delay > now:
            continue
        out.append((dt.datetime.fromtimestamp(at, UTC), entry["api_key_id"], entry["model_id"], entry["usage"]))
    return out


def usage_report(query, requests, now):
    """One page of the Messages usage report."""
    width, start, end, limit = _window(query, "1d", LIMITS)
    groups = _groups(query, USAGE_GROUPS)
    key_ids, models = set(query.get("api_key_ids[]", [])), set(query.get("models[]", []))
    data = []
    for bucket_start, bucket_end in _buckets(start, end, width, limit):
        sums = {}
        for arrived, key_id, model, usage in requests:
            if not bucket_start <= arrived < bucket_end:
                continue
            if (key_ids and key_id not in key_ids) or (models and model not in models):
                continue
            group = (
                key_id if "api_key_id" in groups else None,
                model if "model" in groups else None,
            )
            total = sums.setdefault(group, dict.fromkeys(("input", "read", "w5", "w1h", "output", "web"), 0))
            creation = usage.get("cache_creation") or {}
            total["input"] += usage.get("input_tokens", 0)
            total["read"] += usage.get("cache_read_input_tokens", 0)
            total["w5"] += creation.get("ephemeral_5m_input_tokens", 0)
            total["w1h"] += creation.get("ephemeral_1h_input_tokens", 0)
            total["output"] += usage.get("output_tokens", 0)
            total["web"] += (usage.get("server_tool_use") or {}).get("web_search_requests", 0)
        results = [
            {
                "uncached_input_tokens": total["input"],
                "cache_creation": {"ephemeral_1h_input_tokens": total["w1h"], "ephemeral_5m_input_tokens": total["w5"]},
                "cache_read_input_tokens": total["read"],
                "output_tokens": total["output"],
                "server_tool_use": {"web_search_requests": total["web"]},
                "api_key_id": key_id,
                "workspace_id": None,
                "model": model,
                "service_tier": "standard" if "service_tier" in groups else None,
                "context_window": None,
            }
            for (key_id, model), total in sorted(sums.items(), key=lambda item: tuple(x or "" for x in item[0]))
        ]
        data.append({"starting_at": _iso(bucket_start), "ending_at": _iso(bucket_end), "results": results})
    return _page(data, start, end, width, limit)


def cost_report(query, requests, now, revision):
    """One page of the cost report: daily buckets, amounts in cents as decimal strings, priced at
    ``revision`` (the stand-in bills at the shipped prices unless a test gives it others)."""
    width, start, end, limit = _window(query, "1d", {"1d": (7, 31)})
    groups = _groups(query, COST_GROUPS)
    data = []
    for bucket_start, bucket_end in _buckets(start, end, width, limit):
        sums = {}
        for arrived, _key_id, model, usage in requests:
            if not bucket_start <= arrived < bucket_end:
                continue
            for token_type, amount in _costs(usage, model, revision):
                group = (model, token_type) if "description" in groups else (None, None)
                sums[group] = sums.get(group, Fraction(0)) + amount
        results = [
            {
                "currency": "USD",
                "amount": _cents(total),
                "workspace_id": None,
                "description": f"{model} {token_type}" if model else None,
                "cost_type": ("web_search" if token_type == "web_search" else "tokens") if model else None,
                "context_window": None,
                "model": model,
                "service_tier": "standard" if model else None,
                "token_type": None if token_type == "web_search" else token_type,
            }
            for (model, token_type), total in sorted(sums.items(), key=lambda item: tuple(x or "" for x in item[0]))
        ]
        data.append({"starting_at": _iso(bucket_start), "ending_at": _iso(bucket_end), "results": results})
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


def _costs(usage, model, revision):
    """Each token type's exact cost in nanodollars at the tier of the request's total input."""
    price = revision.model(model)
    if price is None:
        return []
    creation = usage.get("cache_creation") or {}
    counts = (
        usage.get("input_tokens", 0),
        usage.get("cache_read_input_tokens", 0),
        creation.get("ephemeral_5m_input_tokens", 0),
        creation.get("ephemeral_1h_input_tokens", 0),
        usage.get("output_tokens", 0),
    )
    rates = price.rates_for(counts[0] + counts[1] + counts[2] + counts[3])
    per = (rates.input, rates.cache_read, rates.write_5m, rates.write_1h, rates.output)
    costs = [(name, Fraction(count) * Fraction(rate)) for name, count, rate in zip(TOKEN_TYPES, counts, per) if count]
    # Web searches are billed per search on top of tokens, as their own row.
    searches = (usage.get("server_tool_use") or {}).get("web_search_requests", 0)
    if searches:
        costs.append(("web_search", Fraction(searches * revision.server_tool_fees.get("web_search_requests", 0))))
    return costs


def _cents(nusd):
    """Nanodollars as cents in a decimal string (1 cent = 10,000,000 nanodollars), exact when the
    fraction ends, else to twelve places."""
    cents = Fraction(nusd) / 10_000_000
    whole, rest = divmod(cents.numerator, cents.denominator)
    digits = ""
    for _ in range(12):
        if not rest:
            break
        rest *= 10
        digit, rest = divmod(rest, cents.denominator)
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
    start = _snap(_parse(starting, "starting_at"), width)
    if page is not None:
        start = _snap(_parse(_unpage(page), "page"), width)
    try:
        limit = int(query.get("limit", [str(default_limit)])[0])
    except ValueError:
        limit = 0
    if not 1 <= limit <= most:
        raise bad(f"limit: Input should be between 1 and {most}")
    ending = query.get("ending_at", [None])[0]
    end = _parse(ending, "ending_at") if ending is not None else start + WIDTHS[width] * limit
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


def _snap(at, width):
    if width == "1m":
        return at.replace(second=0, microsecond=0)
    if width == "1h":
        return at.replace(minute=0, second=0, microsecond=0)
    return at.replace(hour=0, minute=0, second=0, microsecond=0)


def _parse(text, field):
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise bad(f"{field}: must be an RFC 3339 timestamp") from None
    if value.tzinfo is None:
        raise bad(f"{field}: must carry a time zone")
    return value.astimezone(UTC)


def _iso(at):
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _token(at):
    return "page_" + base64.urlsafe_b64encode(_iso(at).encode()).decode()


def _unpage(token):
    try:
        return base64.urlsafe_b64decode(token.removeprefix("page_").encode()).decode()
    except (ValueError, UnicodeDecodeError):
        raise bad("page: not a page token from this report") from None
