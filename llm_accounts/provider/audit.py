"""Auditing the ledger against the bill (docs/architecture.md "Auditing against the bill").

For each account and UTC day: what the ledger settled, beside what the organization's usage report
shows on the account's API key, priced at the shipped prices. More on the key than in the ledger is
spend that never went through it (another tool using the same key, an attempt still open). For each
organization and day: its cost report (what was billed) beside its whole usage report priced at the
shipped prices; a difference means the shipped prices disagree with the bill, and usage on keys no
account declares (the console, other tools) is shown apart.

Pure comparison rules here; ``audit_from_provider`` reads the reports and the ledger.
"""

import dataclasses
import datetime as dt
import math
import re
from fractions import Fraction

from .. import clock, keys, pricing, transport
from . import client as admin_api, report
from .settle import key_id_for
from ..errors import AccountsError

UTC = dt.timezone.utc
DAY = dt.timedelta(days=1)
# Rounding allowances. The ledger rounds each attempt up to a whole nanodollar, and a day's usage is
# priced here once per model, so the two may differ by one nanodollar per attempt and per model.
# The cost report's amounts are decimal cents; a hundredth of a cent per result row is allowed.
COST_ROW_TOLERANCE = 100_000
_AMOUNT = re.compile(r"-?[0-9]{1,15}(\.[0-9]{1,15})?")


@dataclasses.dataclass(frozen=True)
class AccountDay:
    account: str
    day: str
    ledger_nusd: int  # settled in the ledger (attempts created that day)
    settled_attempts: int
    open_attempts: int
    usage_nusd: int | None  # the key's usage that day at the shipped prices; None: not priceable
    outside_nusd: int | None  # usage_nusd - ledger_nusd when beyond rounding, else 0

    def as_dict(self):
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class OrganizationDay:
    accounts: tuple[str, ...]  # the declared accounts that share this Admin API key
    day: str
    billed_nusd: int | None  # the cost report (None: the report had no bucket for the day)
    usage_nusd: int | None  # every key's usage at the shipped prices
    undeclared_nusd: int  # usage on keys no declared account holds, at the shipped prices
    drift_nusd: int | None  # billed - usage when beyond rounding, else 0

    def as_dict(self):
        return {**dataclasses.asdict(self), "accounts": list(self.accounts)}


def price_day(usage, model, revision):
    """A day's usage of one model at the revision's base rates, exactly, rounded up once, plus its
    web searches at the revision's fee; None when the model is not priced or the revision has no
    web search fee. (A day's totals cannot say which requests passed the long-context threshold.)"""
    price = revision.model(model)
    fee = revision.server_tool_fees.get("web_search_requests")
    if price is None or (usage.web_search and fee is None):
        return None
    rates = price.rates
    exact = (
        Fraction(usage.input) * Fraction(rates.input)
        + Fraction(usage.cache_read) * Fraction(rates.cache_read)
        + Fraction(usage.write_5m) * Fraction(rates.write_5m)
        + Fraction(usage.write_1h) * Fraction(rates.write_1h)
        + Fraction(usage.output) * Fraction(rates.output)
    )
    return math.ceil(exact) + usage.web_search * (fee or 0)


def usage_by_day_and_key(buckets, revision):
    """``{(day, key id or None): (nanodollars or None, priced rows)}`` from daily usage buckets."""
    out = {}
    for bucket in buckets:
        start = admin_api.parse_time(bucket.get("starting_at"))
        if start is None or not isinstance(bucket.get("results"), list):
            continue
        day = start.date().isoformat()
        for row in bucket["results"]:
            if not isinstance(row, dict):
                continue
            usage = report.usage_of(row)
            model = row.get("model")
            key_id = row.get("api_key_id") if isinstance(row.get("api_key_id"), str) else None
            cost = price_day(usage, model, revision) if usage is not None and isinstance(model, str) else None
            total, rows = out.get((day, key_id), (0, 0))
            out[(day, key_id)] = (None if total is None or cost is None else total + cost, rows + 1)
    return out


def billed_by_day(buckets):
    """``{day: (nanodollars, result rows)}`` from cost report buckets (amounts in cents, decimal
    strings, USD). An amount in another shape or currency makes the day unknown (None)."""
    out = {}
    for bucket in buckets:
        start = admin_api.parse_time(bucket.get("starting_at"))
        if start is None or not isinstance(bucket.get("results"), list):
            continue
        day = start.date().isoformat()
        total, rows = out.get(day, (0, 0))
        for row in bucket["results"]:
            amount = row.get("amount") if isinstance(row, dict) else None
            if total is None or not isinstance(amount, str) or not _AMOUNT.fullmatch(amount) or row.get("currency", "USD") != "USD":
                total = None
                continue
            total += Fraction(amount) * 10_000_000  # one cent is 10^7 nanodollars
            rows += 1
        out[day] = (total, rows)
    return {day: (None if total is None else math.ceil(total), rows) for day, (total, rows) in out.items()}


def compare_account(account, days, ledger_days, usage, key_id):
    """One ``AccountDay`` per day: the ledger's settled spend beside the key's priced usage."""
    out = []
    for day in days:
        settled, settled_n, open_n = ledger_days.get(day, (0, 0, 0))
        priced, rows = usage.get((day, key_id), (0, 0))
        outside = None
        if priced is not None:
            outside = priced - settled if abs(priced - settled) > settled_n + rows + 1 else 0
        out.append(AccountDay(account, day, settled, settled_n, open_n, priced, outside))
    return out


def compare_organization(accounts, days, usage, billed, declared_ids):
    """One ``OrganizationDay`` per day: the cost report beside all the organization's usage."""
    out = []
    for day in days:
        total, rows, undeclared = 0, 0, 0
        for (usage_day, key_id), (priced, count) in usage.items():
            if usage_day != day:
                continue
            rows += count
            total = None if total is None or priced is None else total + priced
            if key_id not in declared_ids and priced is not None:
                undeclared += priced
        bill, bill_rows = billed.get(day, (None, 0))
        drift = None
        if bill is not None and total is not None:
            drift = bill - total if abs(bill - total) > rows + COST_ROW_TOLERANCE * max(bill_rows, 1) else 0
        out.append(OrganizationDay(tuple(accounts), day, bill, total, undeclared, drift))
    return out


def audit_from_provider(declaration, ledger, names=None, *, days=7, now=None, base=None, cwd=None):
    """``(account days, organization days, errors, inferred)`` for the last ``days`` UTC days up to
    today; ``inferred``: ``{account: key id}`` compared with but not declared (the organization's
    only active API key, a guess the audit labels as such and nothing is settled from)."""
    now = now or clock.now()
    base = base or transport.base_url()
    revision = pricing.current_revision()
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
                usage = usage_by_day_and_key(admin_api.usage_days(http, base, secret, start, end), revision)
                billed = billed_by_day(admin_api.cost_days(http, base, secret, start, end))
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
            # Every declared account's key id counts as declared, whichever organization it is in.
            declared_ids = set(ids.values()) | {a.api_key_id for a in declaration.accounts if a.api_key_id}
            for account in members:
                if account.name not in ids:
                    continue
                ledger_days = ledger.daily_spend(account.name, day_list[0], day_list[-1])
                account_days.extend(compare_account(account.name, day_list, ledger_days, usage, ids[account.name]))
            organization_days.extend(compare_organization([a.name for a in members], day_list, usage, billed, declared_ids))
    return account_days, organization_days, errors, inferred
