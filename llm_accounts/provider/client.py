"""Reading an organization's Admin API (docs/architecture.md "Settling from the provider" cites the
documented shapes): the Usage and Cost Analytics API (``/v1/organizations/analytics/usage`` and
``/cost``, rows with request counts, paged by rows), the legacy Messages usage report and cost
report (buckets, paged by buckets), and the list of API key ids. One reader per shape; the paging
rules of each live here.

Every call signs with the organization's Admin API key, resolved per call by ``keys.resolve_key``
like any key, held as a ``Secret`` and never stored. What comes back is untrusted: buckets are
parsed into numbers and times; the only strings kept are API key ids, which must have the id shape
and hold no run of the admin key (``scrub.run_detector``) before they are stored or shown. Page
tokens (``next_page``, ``last_id``) go back in the next URL, which httpx logs: each must be a short
printable ASCII string holding no run of the admin key, or the read stops (docs/security.md
"Provider strings").
"""

import dataclasses
import datetime as dt
import json
import re

from ..errors import AccountsError
from ..wire import scrub, transport

ANALYTICS_USAGE_PATH = "/v1/organizations/analytics/usage"
ANALYTICS_COST_PATH = "/v1/organizations/analytics/cost"
ANALYTICS_BETA = "analytics-usage-cost-2026-08-24"
# The Analytics API pages by rows (1..1000) and takes at most 24 hours of one-minute buckets a
# request, and at most five group_by dimensions.
ANALYTICS_ROWS = 1000
ANALYTICS_MINUTE_RANGE = dt.timedelta(hours=24)
ANALYTICS_DAY_RANGE = dt.timedelta(days=31)
USAGE_GROUPS = ("api_key_id", "model", "service_tier", "inference_geo", "speed")
# The legacy report has no request counts; speed needs a beta there, so it is not grouped (only a
# key the ledger alone uses is settled from it, and the ledger never sends fast mode).
LEGACY_GROUPS = ("api_key_id", "model", "service_tier", "inference_geo")
USAGE_PATH = "/v1/organizations/usage_report/messages"
COST_PATH = "/v1/organizations/cost_report"
KEYS_PATH = "/v1/organizations/api_keys"
MINUTE_PAGE = 1440  # the usage report's largest page of one-minute buckets
DAY_PAGE = 31  # the cost report's (and the daily usage report's) largest page
MAX_PAGES = 50
_PAGE_TOKEN = re.compile(r"[\x21-\x7e]{1,200}")


def headers(secret, beta=None):
    """The Admin API's headers: the admin key in ``x-api-key`` and the API version (and the
    Analytics API's beta)."""
    out = {"x-api-key": secret.reveal(), "anthropic-version": transport.ANTHROPIC_VERSION, "accept": "application/json"}
    if beta:
        out["anthropic-beta"] = beta
    return out


def _get(http, base, path, params, secret, beta=None):
    body = transport.get_bounded(http, base + path, params, headers(secret, beta), f"GET {path}", "a report")
    try:
        page = json.loads(body)
    except ValueError:
        raise AccountsError("provider_error", f"GET {path} answered with a body that is not JSON") from None
    if not isinstance(page, dict):
        raise AccountsError("provider_error", f"GET {path} answered with a body that is not a JSON object")
    return page


def _page_token(token, path, holds):
    """``token`` if it may go back in a URL: a short printable ASCII string with no run of the
    admin key (``holds``); else the read stops, naming the rule, never the value."""
    if not isinstance(token, str) or not _PAGE_TOKEN.fullmatch(token) or holds(token):
        raise AccountsError(
            "provider_error",
            f"GET {path} answered with a page token that is not a short printable ASCII string free of the admin key; "
            "it is not sent back (docs/security.md \"Provider strings\")",
        )
    return token


def _paged(http, base, path, params, secret, beta=None, pages=None):
    """Every item of a report, following ``has_more``/``next_page``. A page token seen before
    would read the same pages again: the read stops there, in one line. ``pages`` (a list), if
    given, receives each page as read (the Analytics API's ``data_refreshed_at`` is per page)."""
    data, params, holds, seen = [], dict(params), scrub.run_detector(secret.reveal()), set()
    for _ in range(MAX_PAGES):
        page = _get(http, base, path, params, secret, beta)
        if pages is not None:
            pages.append(page)
        if not isinstance(page.get("data"), list):
            raise AccountsError("provider_error", f"GET {path} answered a page without its data list")
        data.extend(item for item in page["data"] if isinstance(item, dict))
        token = page.get("next_page")
        if not page.get("has_more"):
            return data
        if token is None or token == "":
            raise AccountsError("provider_error", f"GET {path} said it has more but gave no page token; the read stops")
        token = _page_token(token, path, holds)
        if token in seen:
            raise AccountsError("provider_error", f"GET {path} gave a page token it had given before; the read stops")
        seen.add(token)
        params["page"] = token
    raise AccountsError("provider_error", f"GET {path} did not end within {MAX_PAGES} pages")


@dataclasses.dataclass(frozen=True)
class Read:
    """What one read of a usage report returned: its items (untrusted dicts, parsed by
    ``provider.report``), the range read, and the Analytics API's ``data_refreshed_at`` (the
    earliest of its pages; None when a page did not say, or on the legacy report)."""

    api: str  # "analytics" or "messages" (legacy)
    items: list
    start: dt.datetime
    end: dt.datetime
    refreshed_at: dt.datetime | None = None


def _ranges(start, end, most):
    """``[start, end)`` cut into ranges of at most ``most``: the Analytics API's bound on one request."""
    out, at = [], start
    while at < end:
        out.append((at, min(end, at + most)))
        at = out[-1][1]
    return out


def _analytics(http, base, secret, path, start, end, width, group_by, key_ids=None, pages=None):
    """Every row of one Analytics endpoint from ``start`` to ``end``: one request per range the
    API allows for ``width`` (24 hours of one-minute buckets, else 31 days), each paged by rows."""
    items = []
    for at, until in _ranges(start, end, ANALYTICS_MINUTE_RANGE if width == "1m" else ANALYTICS_DAY_RANGE):
        params = {
            "starting_at": _iso(at),
            "ending_at": _iso(until),
            "time_bucket_width": width,
            "group_by[]": list(group_by),
            **({} if key_ids is None else {"api_key_ids[]": list(key_ids)}),
            "limit": ANALYTICS_ROWS,
        }
        items.extend(_paged(http, base, path, params, secret, ANALYTICS_BETA, pages))
    return items


def analytics_usage(http, base, secret, start, end, key_ids):
    """One-minute usage rows of ``key_ids`` from ``start`` to ``end`` on the Analytics API, grouped
    by key, model, service tier, inference geo and speed, with the earliest ``data_refreshed_at``
    of the pages read (None when a page did not say)."""
    pages = []
    items = _analytics(http, base, secret, ANALYTICS_USAGE_PATH, start, end, "1m", USAGE_GROUPS, key_ids, pages)
    refreshed = [parse_time(page.get("data_refreshed_at")) for page in pages]
    fresh = None if not refreshed or None in refreshed else min(refreshed)
    return Read("analytics", items, start, end, fresh)


def analytics_cost_days(http, base, secret, start, end, group_by=("cost_type", "token_type", "model", "service_tier", "inference_geo")):
    """Daily cost rows on the Analytics API, for the audit: amounts post-discount (``amount``)
    and at list price (``list_amount``), in cents as decimal strings."""
    return _analytics(http, base, secret, ANALYTICS_COST_PATH, start, end, "1d", group_by)


def analytics_usage_days(http, base, secret, start, end, group_by=USAGE_GROUPS):
    """Daily usage rows of the whole organization on the Analytics API (every key, and usage no
    key authenticated: no ``api_key_ids[]`` filter), for the audit."""
    return _analytics(http, base, secret, ANALYTICS_USAGE_PATH, start, end, "1d", group_by)


def refused_as_unoffered(error):
    """Whether an Analytics API error means this organization has no Analytics API (404 or 403),
    so the legacy report is read instead."""
    return isinstance(error, AccountsError) and error.http_status in (403, 404)


def usage_minutes(http, base, secret, start, end, key_ids):
    """One-minute buckets of the legacy usage report from ``start`` to ``end`` for ``key_ids``,
    grouped by key, model, service tier and inference geo (paged by buckets)."""
    if isinstance(key_ids, str):
        key_ids = [key_ids]
    params = {
        "starting_at": _iso(start),
        "ending_at": _iso(end),
        "bucket_width": "1m",
        "group_by[]": list(LEGACY_GROUPS),
        "api_key_ids[]": list(key_ids),
        "limit": MINUTE_PAGE,
    }
    return Read("messages", _paged(http, base, USAGE_PATH, params, secret), start, end)


def usage_days(http, base, secret, start, end, group_by=("api_key_id", "model")):
    """Daily usage buckets, grouped by ``group_by`` (key and model unless told), for the whole
    organization."""
    params = {
        "starting_at": _iso(start),
        "ending_at": _iso(end),
        "bucket_width": "1d",
        "group_by[]": list(group_by),
        "limit": DAY_PAGE,
    }
    return _paged(http, base, USAGE_PATH, params, secret)


def cost_days(http, base, secret, start, end, group_by=()):
    """Daily cost buckets for the whole organization (amounts in cents, decimal strings); grouped
    by ``description``, each result also names its cost type, token type, model, tier and geo."""
    params = {"starting_at": _iso(start), "ending_at": _iso(end), "bucket_width": "1d", "limit": DAY_PAGE}
    if group_by:
        params["group_by[]"] = list(group_by)
    return _paged(http, base, COST_PATH, params, secret)


def active_key_ids(http, base, secret, check):
    """The ids of the organization's active API keys. ``check(text)`` is the admin key's run
    detector: an id holding a run of it, or not shaped like an id, is refused, never kept."""
    from ..declarations import API_KEY_ID_RULE

    ids, after = [], None
    for _ in range(MAX_PAGES):
        params = {"status": "active", "limit": 1000}
        if after:
            params["after_id"] = after
        page = _get(http, base, KEYS_PATH, params, secret)
        for item in page.get("data") or []:
            key_id = item.get("id") if isinstance(item, dict) else None
            if not isinstance(key_id, str) or not API_KEY_ID_RULE.fullmatch(key_id) or check(key_id):
                raise AccountsError("provider_error", f"GET {KEYS_PATH} listed a key id that is not in the documented shape")
            if item.get("status", "active") == "active":
                ids.append(key_id)
        after = page.get("last_id")
        if not page.get("has_more") or after is None or after == "":
            return ids
        after = _page_token(after, KEYS_PATH, check)
    raise AccountsError("provider_error", f"GET {KEYS_PATH} did not end within {MAX_PAGES} pages")


def parse_time(text):
    """An RFC 3339 time from the provider, or None."""
    if not isinstance(text, str):
        return None
    try:
        value = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value.astimezone(dt.timezone.utc) if value.tzinfo is not None else None


def _iso(at):
    return at.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
