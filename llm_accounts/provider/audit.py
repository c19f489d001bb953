"""Auditing the ledger against the bill, naming causes (docs/architecture.md "Auditing against the
bill").

For each account and UTC day: what the ledger settled, beside the usage the organization's report
shows on the account's API key, priced at the shipped list prices with the row's inference geo;
usage on the key in a tier the ledger never sends (batch, priority) is shown by tier. For each
organization and day: the bill split by cost type, token type, service tier and inference geo,
its discounts (``list_amount - amount``) and its ``us`` surcharge, beside all the organization's
usage at list prices; Priority Tier usage, which the cost endpoint leaves out, and usage on keys no
account declares are shown apart, and only what no named cause explains is ``unexplained_nusd``.

The Usage and Cost Analytics API is read first; the legacy usage and cost reports where it is not
offered (404/403) or by ``LLM_ACCOUNTS_PROVIDER_REPORT=legacy`` (docs/architecture.md "Settling
from the provider"). Every row is parsed strictly: a row missing a documented field makes its day
unknown (``None``, shown ``?``), never 0. Money is exact (``Fraction`` nanodollars) until each
figure shown is rounded up once.

Pure parsing and comparison here; ``audit_from_provider`` reads the reports and the ledger.
"""

import dataclasses
import datetime as dt
import math
import re
from fractions import Fraction

from .. import clock, keys
from ..errors import AccountsError
from ..pricing import prices
from ..wire import transport
from . import client as admin_api, report
from .settle import key_id_for, report_api

UTC = dt.timezone.utc
DAY = dt.timedelta(days=1)
CENT = 10_000_000  # nanodollars in a cent, the reports' unit
# Rounding allowances. The ledger rounds each attempt up to a whole nanodollar, and each figure here
# is rounded up once, so the two may differ by one nanodollar per attempt and per report row. The
# reports' amounts are decimal cents; a hundredth of a cent per cost row is allowed.
COST_ROW_TOLERANCE = 100_000
_AMOUNT = re.compile(r"-?[0-9]{1,15}(\.[0-9]{1,15})?")

# The documented values of each dimension a cause is named by (docs/architecture.md "Auditing
# against the bill"). A null dimension is shown as UNSPECIFIED, any other value as OTHER: the
# provider's text is never echoed.
COST_TYPES = ("tokens", "web_search", "code_execution", "session_usage")
TOKEN_TYPES = (
    "uncached_input_tokens",
    "cache_read_input_tokens",
    "cache_creation.ephemeral_5m_input_tokens",
    "cache_creation.ephemeral_1h_input_tokens",
    "output_tokens",
)
SERVICE_TIERS = ("standard", "batch", "flex", "flex_discount", "priority", "priority_on_demand")
INFERENCE_GEOS = ("global", "us", "not_available")
OTHER, UNSPECIFIED = "other", "unspecified"
# Tiers the cost endpoint leaves out ("Priority Tier costs are not available in the cost endpoint").
NOT_IN_COST = ("priority", "priority_on_demand")
# Cost types a usage row prices (the others, code execution and session usage, are only billed).
PRICED_COST_TYPES = ("tokens", "web_search")
COST_GROUPS = ("cost_type", "token_type", "model", "service_tier", "inference_geo")
LEGACY_COST_GROUPS = ("description",)  # its results then name cost type, token type, model, tier, geo


# Parsed report rows -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class UsageRow:
    """One day's usage of one key (None: no key, the Console), model, tier, geo and speed."""

    day: str
    key_id: str | None
    model: str
    service_tier: str
    inference_geo: str | None
    speed: str | None
    usage: report.Usage


@dataclasses.dataclass(frozen=True)
class CostRow:
    """One day's cost of one cost type, token type, model, tier and geo, in exact nanodollars:
    ``amount`` as billed (after discounts), ``list_amount`` before them (None on the legacy report,
    which does not say)."""

    day: str
    cost_type: str
    token_type: str | None
    model: str | None
    service_tier: str
    inference_geo: str | None
    amount: Fraction
    list_amount: Fraction | None


@dataclasses.dataclass(frozen=True)
class Reports:
    """One organization's usage and cost rows over the days audited, and the days each could not
    read (a row missing a documented field; on the legacy report, a day without its bucket)."""

    api: str  # "analytics" or "legacy"
    usage: tuple
    costs: tuple
    usage_unknown: frozenset
    cost_unknown: frozenset


def _closed(value, allowed):
    if value is None:
        return UNSPECIFIED
    return value if value in allowed else OTHER


def _count(value):
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def nusd_of_cents(text):
    """An amount in cents as a decimal string (the reports' shape) as exact nanodollars, or None
    for any other shape."""
    if not isinstance(text, str) or not _AMOUNT.fullmatch(text):
        return None
    return Fraction(text) * CENT


def _day(item):
    """The UTC day a daily bucket is, or None unless it is exactly one aligned day."""
    start, end = admin_api.parse_time(item.get("starting_at")), admin_api.parse_time(item.get("ending_at"))
    if start is None or end is None or end - start != DAY or start.time() != dt.time():
        return None
    return start.date().isoformat()


def _dimensions(fields, names):
    """The values of ``names`` in ``fields``, each present and a string or null, else None."""
    if not isinstance(fields, dict) or any(name not in fields for name in names):
        return None
    values = [fields[name] for name in names]
    return None if any(v is not None and not isinstance(v, str) for v in values) else values


def analytics_usage(items, days):
    """``(rows, unknown days)`` from daily Analytics usage rows grouped by ``client.USAGE_GROUPS``:
    each needs its group's five dimensions, a model, every usage count and ``requests``."""
    rows, unknown = [], set()
    for item in items:
        day = _day(item)
        if day is None:
            return (), frozenset(days)  # a row no day holds: none of the read can be trusted
        values = _dimensions(item.get("group"), admin_api.USAGE_GROUPS)
        usage = item.get("usage")
        counts = report.usage_of(usage)
        if values is None or counts is None or _count(usage.get("requests")) is None or not isinstance(values[1], str):
            unknown.add(day)
            continue
        key_id, model, tier, geo, speed = values
        rows.append(UsageRow(day, key_id, model, _closed(tier, SERVICE_TIERS), geo, speed, counts))
    return tuple(r for r in rows if r.day not in unknown), frozenset(unknown)


def _legacy_days(buckets, days, row_of):
    """``(rows, unknown days)`` from the legacy reports' daily buckets: ``row_of(day, result)``
    makes each result's row, or None when a field is missing. A day without its bucket, or with
    such a result, is unknown (never zero)."""
    rows, unknown, seen = [], set(), set()
    for bucket in buckets:
        day, results = _day(bucket), bucket.get("results")
        if day is None or not isinstance(results, list):
            continue
        seen.add(day)
        for result in results:
            row = row_of(day, result)
            if row is None:
                unknown.add(day)
            else:
                rows.append(row)
    unknown |= set(days) - seen
    return tuple(r for r in rows if r.day not in unknown), frozenset(unknown)


def legacy_usage(buckets, days):
    """``(rows, unknown days)`` from the legacy report's daily buckets grouped by key, model, tier
    and geo."""

    def row_of(day, result):
        values, counts = _dimensions(result, admin_api.LEGACY_GROUPS), report.usage_of(result)
        if values is None or counts is None or not isinstance(values[1], str):
            return None
        key_id, model, tier, geo = values
        return UsageRow(day, key_id, model, _closed(tier, SERVICE_TIERS), geo, None, counts)

    return _legacy_days(buckets, days, row_of)


def analytics_costs(items, days):
    """``(rows, unknown days)`` from daily Analytics cost rows grouped by ``COST_GROUPS``: each
    needs its five dimensions and ``cost{amount, list_amount, currency: "USD", requests}``."""
    rows, unknown = [], set()
    for item in items:
        day = _day(item)
        if day is None:
            return (), frozenset(days)
        values = _dimensions(item.get("group"), COST_GROUPS)
        cost = item.get("cost") if isinstance(item.get("cost"), dict) else {}
        amount, listed = nusd_of_cents(cost.get("amount")), nusd_of_cents(cost.get("list_amount"))
        if values is None or amount is None or listed is None or cost.get("currency") != "USD" or _count(cost.get("requests")) is None:
            unknown.add(day)
            continue
        cost_type, token_type, model, tier, geo = values
        rows.append(CostRow(day, _closed(cost_type, COST_TYPES), token_type, model, _closed(tier, SERVICE_TIERS), geo, amount, listed))
    return tuple(r for r in rows if r.day not in unknown), frozenset(unknown)


def legacy_costs(buckets, days):
    """``(rows, unknown days)`` from the legacy cost report's daily buckets grouped by
    ``description`` (each result then names its cost type, token type, model, tier and geo; it
    gives no list amount)."""

    def row_of(day, result):
        values = _dimensions(result, COST_GROUPS)
        amount = nusd_of_cents(result.get("amount")) if isinstance(result, dict) else None
        if values is None or amount is None or result.get("currency") != "USD":
            return None
        cost_type, token_type, model, tier, geo = values
        return CostRow(day, _closed(cost_type, COST_TYPES), token_type, model, _closed(tier, SERVICE_TIERS), geo, amount, None)

    return _legacy_days(buckets, days, row_of)


# Pricing usage --------------------------------------------------------------------------------


def price_usage(row, revision):
    """``(at list, geo surcharge)`` of a day's usage row, exact nanodollars: its tokens at the
    revision's base rates times the row's inference-geo multiplier (``pricing.geo_multiplier``:
    1.1 for ``us`` on the models that list it), plus web searches at the revision's fee, and what
    the multiplier adds. Tier discounts are not applied: list price is what the cost endpoint's
    ``list_amount`` states. None when the revision does not price it (an unknown model, a geo the
    model does not list, fast mode, web searches without a fee).

    ``pricing.settlement_cost`` is not used: it picks a long-context tier from the usage's total
    input, which for a day's sum of many requests says nothing about any one request (docs/pricing.md
    "Settlement cost")."""
    price = revision.model(row.model)
    fee = revision.server_tool_fees.get("web_search_requests")
    if price is None or row.speed not in prices.STANDARD_SPEEDS or (row.usage.web_search and fee is None):
        return None
    geo = prices.geo_multiplier(price, row.inference_geo)
    if geo is None:
        return None
    rates, usage = price.rates, row.usage
    tokens = (
        Fraction(usage.input) * Fraction(rates.input)
        + Fraction(usage.cache_read) * Fraction(rates.cache_read)
        + Fraction(usage.write_5m) * Fraction(rates.write_5m)
        + Fraction(usage.write_1h) * Fraction(rates.write_1h)
        + Fraction(usage.output) * Fraction(rates.output)
    )
    return tokens * geo + usage.web_search * (fee or 0), tokens * (geo - 1)


def price_day(usage, model, revision):
    """A day's usage of one model at the revision's base rates (standard geo), rounded up once, plus
    its web searches at the revision's fee; None when not priceable."""
    priced = price_usage(UsageRow("", None, model, "standard", None, None, usage), revision)
    return None if priced is None else math.ceil(priced[0])


def _add(total, value):
    return None if total is None or value is None else total + value


def _up(value):
    return None if value is None else math.ceil(value)


@dataclasses.dataclass
class KeyDay:
    """One key's priced usage on one day: by tier at list price, what geo multipliers add, rows."""

    by_tier: dict = dataclasses.field(default_factory=dict)
    surcharge: Fraction | None = Fraction(0)
    rows: int = 0

    def total(self, tiers=None):
        out = Fraction(0)
        for tier, value in self.by_tier.items():
            if tiers is None or tier in tiers:
                out = _add(out, value)
        return out


def usage_by_day_and_key(rows, revision):
    """``{(day, key id or None): KeyDay}`` of parsed usage rows."""
    out = {}
    for row in rows:
        entry = out.setdefault((row.day, row.key_id), KeyDay())
        priced = price_usage(row, revision)
        entry.by_tier[row.service_tier] = _add(entry.by_tier.get(row.service_tier, Fraction(0)), None if priced is None else priced[0])
        entry.surcharge = _add(entry.surcharge, None if priced is None else priced[1])
        entry.rows += 1
    return out


# The comparisons ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class AccountDay:
    account: str
    day: str
    ledger_nusd: int  # settled in the ledger (attempts created that day)
    settled_attempts: int
    open_attempts: int
    usage_nusd: int | None  # the key's usage that day at list prices, every tier; None: unknown
    by_service_tier: dict | None  # usage_nusd by tier (standard, batch, priority, ...)
    us_surcharge_nusd: int | None  # what inference-geo multipliers add within usage_nusd
    outside_nusd: int | None  # usage_nusd - ledger_nusd when beyond rounding, else 0
    outside_standard_nusd: int | None  # the standard tier's part of it (another tool, open attempts)

    def as_dict(self):
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class OrganizationDay:
    accounts: tuple[str, ...]  # the declared accounts that share this Admin API key
    day: str
    report: str  # "analytics" or "legacy": which API the figures come from
    billed_nusd: int | None  # the cost rows' amounts (after discounts); None: unknown
    list_nusd: int | None  # their list amounts (None on the legacy report)
    discount_nusd: int | None  # list - billed (legacy: batch usage at list - batch rows billed)
    by_cost_type: dict | None  # billed, by cost type
    by_token_type: dict | None  # the tokens cost type's billed, by token type
    by_service_tier: dict | None  # billed, by service tier
    by_inference_geo: dict | None  # billed, by inference geo
    us_surcharge_nusd: int | None  # billed in a geo above 1.0x less the same at 1.0x
    usage_nusd: int | None  # every key's usage in the tiers the cost endpoint bills, at list prices
    priority_nusd: int | None  # Priority Tier usage at list prices: not in the cost endpoint
    undeclared_nusd: int | None  # usage on keys no declared account holds (every tier), at list prices
    unexplained_nusd: int | None  # what no named cause explains, when beyond rounding, else 0

    def as_dict(self):
        return {**dataclasses.asdict(self), "accounts": list(self.accounts)}


def _by(names, rows, pick, value=lambda row: row.amount):
    """``{name: exact sum}`` with every name of ``names`` present (0 when absent) and any other
    value found (OTHER, UNSPECIFIED) added."""
    out = {name: Fraction(0) for name in names}
    for row in rows:
        name = pick(row)
        out[name] = out.get(name, Fraction(0)) + value(row)
    return out


def _rounded(sums):
    return {name: math.ceil(value) for name, value in sums.items()}


def _beyond(difference, allowance):
    """``difference`` when it passes the rounding ``allowance``, else 0; None stays None."""
    if difference is None:
        return None
    return difference if abs(difference) > allowance else 0


def compare_account(account, days, ledger_days, usage, key_id, unknown=frozenset()):
    """One ``AccountDay`` per day: the ledger's settled spend beside the key's priced usage."""
    out = []
    for day in days:
        settled, settled_n, open_n = ledger_days.get(day, (0, 0, 0))
        if day in unknown:
            out.append(AccountDay(account, day, settled, settled_n, open_n, None, None, None, None, None))
            continue
        entry = usage.get((day, key_id), KeyDay())
        tiers = {"standard": Fraction(0), "batch": Fraction(0), "priority": Fraction(0), **entry.by_tier}
        total = _up(entry.total())
        allowance = settled_n + entry.rows + 1
        standard = _up(tiers["standard"])
        out.append(AccountDay(
            account, day, settled, settled_n, open_n, total,
            None if total is None else {tier: _up(value) for tier, value in tiers.items()},
            _up(entry.surcharge),
            _beyond(None if total is None else total - settled, allowance),
            _beyond(None if standard is None else standard - settled, allowance),
        ))
    return out


def _us_surcharge(rows, revision):
    """What geo multipliers add to the billed token rows: each row's amount less the same at
    1.0x (``pricing.geo_multiplier`` of its model); None when a row's model or geo is not priced."""
    out = Fraction(0)
    for row in rows:
        if row.cost_type != "tokens" or row.inference_geo in prices.STANDARD_INFERENCE_GEOS:
            continue
        price = revision.model(row.model)
        multiplier = None if price is None else prices.geo_multiplier(price, row.inference_geo)
        if multiplier is None:
            return None
        out += row.amount - row.amount / multiplier
    return out


def compare_organization(accounts, days, reports, usage, declared_ids, revision):
    """One ``OrganizationDay`` per day: the bill split by cause beside all the organization's usage.

    The usage side: every key's usage at list prices, Priority Tier apart. The bill side: on the
    Analytics API the token and web-search rows' list amounts are what that usage should come to,
    discounts are ``list_amount - amount``, and code execution and session usage are billed only;
    on the legacy report (no list amounts) the non-batch rows are compared and the discount is
    what the batch usage at list exceeds the batch rows' amount."""
    legacy = reports.api == "legacy"
    out = []
    for day in days:
        usage_side = None if day in reports.usage_unknown else [(key, e) for (d, key), e in usage.items() if d == day]
        if usage_side is None:
            at_list = priority = undeclared = batch = None
            usage_rows = 0
        else:
            at_list = priority = undeclared = batch = Fraction(0)
            usage_rows = sum(entry.rows for _, entry in usage_side)
            for key, entry in usage_side:
                for tier, value in entry.by_tier.items():
                    if tier in NOT_IN_COST:
                        priority = _add(priority, value)
                    else:
                        at_list = _add(at_list, value)
                    if tier == "batch":
                        batch = _add(batch, value)
                if key not in declared_ids:
                    undeclared = _add(undeclared, entry.total())
        if day in reports.cost_unknown:
            out.append(OrganizationDay(
                tuple(accounts), day, reports.api, None, None, None, None, None, None, None, None,
                _up(at_list), _up(priority), _up(undeclared), None,
            ))
            continue
        rows = [row for row in reports.costs if row.day == day]
        billed = sum((row.amount for row in rows), Fraction(0))
        priced_rows = [row for row in rows if row.cost_type in PRICED_COST_TYPES]
        if legacy:
            listed = None
            batch_billed = sum((row.amount for row in priced_rows if row.service_tier == "batch"), Fraction(0))
            discount = None if batch is None else batch - batch_billed
            compared = sum((row.amount for row in priced_rows if row.service_tier != "batch"), Fraction(0))
            expected = None if at_list is None or batch is None else at_list - batch
        else:
            listed = sum((row.list_amount for row in rows), Fraction(0))
            discount = listed - billed
            compared = sum((row.list_amount for row in priced_rows), Fraction(0))
            expected = at_list
        unexplained = _beyond(
            None if expected is None else math.ceil(compared) - math.ceil(expected),
            usage_rows + COST_ROW_TOLERANCE * max(len(rows), 1),
        )
        out.append(OrganizationDay(
            tuple(accounts), day, reports.api,
            math.ceil(billed), _up(listed), _up(discount),
            _rounded(_by(COST_TYPES, rows, lambda row: row.cost_type)),
            _rounded(_by(TOKEN_TYPES, [r for r in rows if r.cost_type == "tokens"], lambda row: _closed(row.token_type, TOKEN_TYPES))),
            _rounded(_by(("standard", "batch"), rows, lambda row: row.service_tier)),
            _rounded(_by(("global", "us"), rows, lambda row: _closed(row.inference_geo, INFERENCE_GEOS))),
            _up(_us_surcharge(rows, revision)),
            _up(at_list), _up(priority), _up(undeclared), unexplained,
        ))
    return out


# Reading ---------------------------------------------------------------------------------------


def read_reports(http, base, secret, start, end, days, api):
    """An organization's daily usage and cost rows: the Analytics API unless told otherwise, the
    legacy reports where it is not offered (404/403)."""
    if api == "analytics":
        try:
            usage_items = admin_api.analytics_usage_days(http, base, secret, start, end)
            cost_items = admin_api.analytics_cost_days(http, base, secret, start, end, COST_GROUPS)
            return Reports("analytics", *_pair(analytics_usage(usage_items, days), analytics_costs(cost_items, days)))
        except AccountsError as error:
            if not admin_api.refused_as_unoffered(error):
                raise
    usage_items = admin_api.usage_days(http, base, secret, start, end, group_by=admin_api.LEGACY_GROUPS)
    cost_items = admin_api.cost_days(http, base, secret, start, end, group_by=LEGACY_COST_GROUPS)
    return Reports("legacy", *_pair(legacy_usage(usage_items, days), legacy_costs(cost_items, days)))


def _pair(usage, costs):
    return usage[0], costs[0], usage[1], costs[1]


def audit_from_provider(declaration, ledger, names=None, *, days=7, now=None, base=None, cwd=None):
    """``(account days, organization days, errors, inferred)`` for the last ``days`` UTC days up to
    today; ``errors``: ``[(account names, AccountsError)]``; ``inferred``: ``{account: key id}``
    compared with but not declared (the organization's only active API key, a guess the audit
    labels as such and nothing is settled from). Each account stands alone: one whose key id
    cannot be used is an error of its own, and its organization's other accounts are audited."""
    now = now or clock.now()
    base = base or transport.base_url()
    api = report_api()
    revision = prices.current_revision()
    last = now.astimezone(UTC).date()
    day_list = [(last - dt.timedelta(days=n)).isoformat() for n in range(days - 1, -1, -1)]
    start = dt.datetime.combine(last - dt.timedelta(days=days - 1), dt.time(), UTC)
    end = dt.datetime.combine(last, dt.time(), UTC) + DAY
    organizations = {}
    for account in declaration.accounts:
        if account.admin_key_env and (names is None or account.name in names):
            organizations.setdefault(account.admin_key_env, []).append(account)
    account_days, organization_days, errors, inferred = [], [], [], {}
    with transport.client() as http:
        for admin_key_env, members in organizations.items():
            secret = None
            try:
                secret = keys.resolve_key(admin_key_env, declaration, cwd=cwd)
                reports = read_reports(http, base, secret, start, end, day_list, api)
                ids = {}
                for account in members:
                    # Each account alone: one without a key id the audit can use affects only itself.
                    try:
                        ids[account.name], guessed = key_id_for(account, http, base, secret)
                    except AccountsError as error:
                        errors.append(([account.name], error))
                        continue
                    if guessed:
                        inferred[account.name] = ids[account.name]
            except AccountsError as error:
                errors.append(([a.name for a in members], error))
                continue
            except Exception as error:
                errors.append(([a.name for a in members], AccountsError("transport_error", f"the Admin API could not be read ({type(error).__name__})")))
                continue
            finally:
                secret = None
            usage = usage_by_day_and_key(reports.usage, revision)
            # Every declared account's key id counts as declared, whichever organization it is in.
            declared_ids = set(ids.values()) | {a.api_key_id for a in declaration.accounts if a.api_key_id}
            for account in members:
                if account.name not in ids:
                    continue
                ledger_days = ledger.daily_spend(account.name, day_list[0], day_list[-1])
                account_days.extend(compare_account(account.name, day_list, ledger_days, usage, ids[account.name], reports.usage_unknown))
            organization_days.extend(compare_organization([a.name for a in members], day_list, reports, usage, declared_ids, revision))
    return account_days, organization_days, errors, inferred
