"""Reading an organization's Admin API: the Messages usage report, the cost report and the list of
API key ids (docs/architecture.md "Settling from the provider" cites the documented shapes).

Every call signs with the organization's Admin API key, resolved per call by ``keys.resolve_key``
like any key, held as a ``Secret`` and never stored. What comes back is untrusted: buckets are
parsed into numbers and times; the only strings kept are API key ids, which must have the id shape
and hold no run of the admin key (``scrub.run_detector``) before they are stored or shown. Page
tokens (``next_page``, ``last_id``) go back in the next URL, which httpx logs: each must be a short
printable ASCII string holding no run of the admin key, or the read stops (docs/security.md
"Provider strings").
"""

import datetime as dt
import json
import re

from .. import scrub, transport
from ..errors import AccountsError

USAGE_PATH = "/v1/organizations/usage_report/messages"
COST_PATH = "/v1/organizations/cost_report"
KEYS_PATH = "/v1/organizations/api_keys"
MINUTE_PAGE = 1440  # the usage report's largest page of one-minute buckets
DAY_PAGE = 31  # the cost report's (and the daily usage report's) largest page
MAX_PAGES = 50
_PAGE_TOKEN = re.compile(r"[\x21-\x7e]{1,200}")


def headers(secret):
    """The Admin API's headers: the admin key in ``x-api-key`` and the API version."""
    return {"x-api-key": secret.reveal(), "anthropic-version": transport.ANTHROPIC_VERSION, "accept": "application/json"}


def _get(http, base, path, params, secret):
    with http.stream("GET", base + path, params=params, headers=headers(secret)) as response:
        status = response.status_code
        body = transport.read_bounded(response, transport.ANSWER_LIMIT if status == 200 else transport.ERROR_BODY_LIMIT)
    if status != 200:
        from .. import classify

        info = classify.parse_error_body(body)
        raise AccountsError(
            classify.error_code_for(classify.outcome_for_status(status)),
            f"GET {path} answered HTTP {status} {info.provider_error_type}",
            http_status=status,
        )
    if len(body) > transport.ANSWER_LIMIT:
        # Nothing of it is kept (docs/errors.md "Answers past their bound").
        raise AccountsError("provider_error", f"GET {path} answered with a report that passed its bound and was not read")
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


def _paged(http, base, path, params, secret):
    """Every bucket of a report, following ``has_more``/``next_page``."""
    data, params, holds = [], dict(params), scrub.run_detector(secret.reveal())
    for _ in range(MAX_PAGES):
        page = _get(http, base, path, params, secret)
        if isinstance(page.get("data"), list):
            data.extend(bucket for bucket in page["data"] if isinstance(bucket, dict))
        token = page.get("next_page")
        if not page.get("has_more") or token is None or token == "":
            return data
        params["page"] = _page_token(token, path, holds)
    raise AccountsError("provider_error", f"GET {path} did not end within {MAX_PAGES} pages")


def usage_minutes(http, base, secret, start, end, key_id):
    """One-minute usage buckets from ``start`` to ``end`` for ``key_id``, grouped by key and model."""
    params = {
        "starting_at": _iso(start),
        "ending_at": _iso(end),
        "bucket_width": "1m",
        "group_by[]": ["api_key_id", "model"],
        "api_key_ids[]": [key_id],
        "limit": MINUTE_PAGE,
    }
    return _paged(http, base, USAGE_PATH, params, secret)


def usage_days(http, base, secret, start, end):
    """Daily usage buckets, grouped by key and model, for the whole organization."""
    params = {
        "starting_at": _iso(start),
        "ending_at": _iso(end),
        "bucket_width": "1d",
        "group_by[]": ["api_key_id", "model"],
        "limit": DAY_PAGE,
    }
    return _paged(http, base, USAGE_PATH, params, secret)


def cost_days(http, base, secret, start, end):
    """Daily cost buckets for the whole organization (amounts in cents, decimal strings)."""
    params = {"starting_at": _iso(start), "ending_at": _iso(end), "bucket_width": "1d", "limit": DAY_PAGE}
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
