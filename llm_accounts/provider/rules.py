"""Settling unknown outcomes from the provider's own usage report: the matching rules
(docs/architecture.md "Settling from the provider").

An attempt left open by an unknown outcome (a 5xx, a broken or abandoned stream, a killed
process) keeps its whole ceiling until positive evidence settles it. A usage report row is
evidence about an attempt only when nothing else could have produced it: *proof, not fit*. These
functions decide that, and nothing else: no I/O, no clock, no ledger (``provider.settle`` reads
and writes; ``provider.report`` parses what the provider answered).

For one key id and one model:

1. An attempt reached the provider after it was reserved and, for an answer that ended, was done
   when its outcome was recorded; a provider may notice that a client went away a little after the
   client did (``LATE_END``). So its usage lies in the minutes from its reservation to its outcome
   (plus ``LATE_END`` while open), whichever instant (arrival or completion) the report buckets it
   by: the docs do not say which.
2. Attempts whose minutes touch form one *span*: their usage cannot be told apart by minute.
3. A span settles its open attempts only if every one of these holds; otherwise each stays open
   and the verdict says why, in one line:
   - every open attempt has its outcome recorded, at a recorded instant, with its quote's bounds
     (``in_flight``, ``no_outcome_time``, ``no_quote``);
   - the report vouches for every minute: on the Analytics API its ``data_refreshed_at`` is past
     the span; on the legacy report ``LEGACY_FINAL_AFTER`` has passed since the last outcome was
     recorded (``not_final``);
   - every minute was read, in the documented shape (``not_covered``, ``unreadable``);
   - **nothing else could have produced the rows**: on the Analytics API the rows' ``requests``
     add up to exactly the ledger's attempts in the span that can have been billed, and no
     attempt in it was refused with a status whose request count the docs do not give
     (``requests_differ``, ``refusals_in_span``); on the legacy report, which counts no requests,
     only a key its account declares dedicated to the ledger (``dedicated_key``) is settled
     (``not_dedicated``), and only an attempt alone in its span (``legacy_group``);
   - every row's tier, geo and speed is one the attempts' price revision prices, and one geo
     only (``unpriced_modifier``, ``mixed_modifiers``);
   - every settled attempt of the span has a token count to take away, and they account for no
     more than the rows show (``settled_without_usage``, ``over_accounted``); something is left
     (``no_usage``);
   - what is left fits the quotes: no more output than their ``max_tokens`` allow, no more web
     searches than their ``max_uses`` (``beyond_quote``), priced at no more than the ceilings
     (``unpriced``, ``above_ceiling``).
4. One open attempt settles at the priced remainder. Several settle **as a group** when they are
   one account's in one credit period at one price revision, and the remainder's input cannot
   reach a dearer tier: the group takes the exact total, split in proportion to the ceilings
   (``split``), each share within its own ceiling (``context_window``, ``mixed_periods`` otherwise).

A settlement names its source:
``usage_report:<analytics|messages>:<first minute>[..<last minute>]:<key id>:<model>[:joint:<n>]``.
"""

import dataclasses
import datetime as dt
import json

from ..pricing import price_book, prices
from ..money import usd_fine

UTC = dt.timezone.utc
MINUTE = dt.timedelta(minutes=1)
# How long after a client recorded an unknown outcome the provider may still finish the request
# (it notices a closed connection at its next write). Usage is looked for this far past the outcome.
LATE_END = dt.timedelta(minutes=1)
# The legacy report has no freshness stamp: "typically within 5 minutes of request completion".
# It is taken as final this long after the span's last outcome was recorded.
LEGACY_FINAL_AFTER = dt.timedelta(minutes=10)

# Outcomes an attempt settles at zero with, proven unbilled (docs/architecture.md "Attempt outcomes").
UNBILLED = frozenset({"not_sent", "rate_limited", "overloaded", "auth_required", "request_rejected"})
# Tiers, geos and speeds of the standard rates; a geo beyond these is priced only where the
# revision gives the model a multiplier for it.
STANDARD_TIERS = frozenset({"standard"})
STANDARD_SPEEDS = frozenset({None, "standard"})
STANDARD_GEOS = frozenset({None, "global", "not_available"})

REASONS = {
    "in_flight": "no outcome is recorded: it may still be running (or its process, on another machine, was killed: settle it with llm accounts reconcile)",
    "no_outcome_time": "it was recorded before this version kept the instant of its outcome; settle it with llm accounts reconcile",
    "no_quote": "it was reserved before this version kept its quote's bounds; settle it with llm accounts reconcile",
    "not_final": "the report does not yet vouch for all of its minutes",
    "not_covered": "the report read does not cover all of its minutes",
    "unreadable": "a row in its minutes lacks a documented field, so nothing there is proof",
    "not_dedicated": "the legacy usage report counts no requests, so only a key declared dedicated to the ledger (dedicated_key) is settled from it",
    "legacy_group": "other attempts share its minutes and the legacy report counts no requests, so a late row cannot be told from one that cost nothing",
    "requests_differ": "the report counts {requests} request(s) in its minutes where the ledger has {attempts}: other usage of the key (another tool, the Console) or data still arriving",
    "refusals_in_span": "a refused attempt shares its minutes, and the report's request count for refusals is not documented",
    "unpriced_modifier": "a row in its minutes has a service tier, inference geo or speed its price revision does not price",
    "mixed_modifiers": "rows in its minutes differ in inference geo, so their usage cannot be split",
    "settled_without_usage": "an attempt settled in its minutes has no token count to take away",
    "over_accounted": "attempts settled in its minutes account for more than the report shows",
    "no_usage": "the report shows nothing left for it; no usage is not proof of no cost",
    "beyond_quote": "what is left holds more output or web searches than its request allowed",
    "context_window": "{open} open attempts share its minutes and their input may be billed at a long-context tier",
    "mixed_periods": "{open} open attempts share its minutes across accounts, credit periods or price revisions",
    "unpriced": "what is left holds usage its price revision cannot price",
    "above_ceiling": "what is left prices at {cost}, above its ceiling of {ceiling}",
}

@dataclasses.dataclass(frozen=True)
class Usage:
    """Token counts as the usage report gives them."""

    input: int = 0
    cache_read: int = 0
    write_5m: int = 0
    write_1h: int = 0
    output: int = 0
    web_search: int = 0

    def __add__(self, other):
        return Usage(*(a + b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))

    def __sub__(self, other):
        return Usage(*(a - b for a, b in zip(dataclasses.astuple(self), dataclasses.astuple(other))))

    def negative(self):
        return any(value < 0 for value in dataclasses.astuple(self))

    def empty(self):
        return not any(dataclasses.astuple(self))

    def input_total(self):
        """Every input-side token: what a request's price tier is chosen by."""
        return self.input + self.cache_read + self.write_5m + self.write_1h

    def as_message_usage(self, inference_geo=None):
        """The same counts as a Messages ``usage`` object, for ``pricing.settlement_cost``
        (with the report row's inference geo, which the price may depend on)."""
        geo = {} if inference_geo is None else {"inference_geo": inference_geo}
        return {
            **geo,
            "input_tokens": self.input,
            "output_tokens": self.output,
            "cache_read_input_tokens": self.cache_read,
            "cache_creation_input_tokens": self.write_5m + self.write_1h,
            "cache_creation": {"ephemeral_5m_input_tokens": self.write_5m, "ephemeral_1h_input_tokens": self.write_1h},
            "server_tool_use": {"web_search_requests": self.web_search},
        }


def usage_from_ledger(usage_json):
    """A settled attempt's stored usage as report counts, or None when it cannot be split the way
    the report splits it (cache writes without their 5m/1h breakdown)."""
    try:
        usage = json.loads(usage_json) if usage_json else None
    except ValueError:
        return None
    if not isinstance(usage, dict):
        return None
    created = usage.get("cache_creation_input_tokens", 0)
    breakdown = usage.get("cache_creation")
    if isinstance(breakdown, dict):
        w5, w1h = breakdown.get("ephemeral_5m_input_tokens", 0), breakdown.get("ephemeral_1h_input_tokens", 0)
        if w5 + w1h != created:
            return None
    elif created:
        return None
    else:
        w5 = w1h = 0
    tools = usage.get("server_tool_use")
    web = tools.get("web_search_requests", 0) if isinstance(tools, dict) else 0
    counts = (usage.get("input_tokens", 0), usage.get("cache_read_input_tokens", 0), w5, w1h, usage.get("output_tokens", 0), web)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in counts):
        return None
    return Usage(*counts)


@dataclasses.dataclass(frozen=True)
class Attempt:
    """What the rules need of one attempt row (``from_row``)."""

    id: str
    account: str
    created_at: dt.datetime
    model: str  # canonical model id
    state: str
    outcome: str | None = None
    cost_nusd: int | None = None
    ceiling_nusd: int = 0
    usage: Usage | None = None
    price_revision: str | None = None
    outcome_at: dt.datetime | None = None
    settled_at: dt.datetime | None = None
    month_utc: str | None = None
    max_output: int | None = None
    max_web_searches: int | None = None

    @classmethod
    def from_row(cls, row, revision=None):
        model = row.get("served_model") or row["requested_model"]
        priced = (revision or prices.current_revision()).model(model)
        usage = None
        if row["state"] == "settled" and (row.get("outcome") == "complete" or _from_report(row.get("usage_json"))):
            usage = usage_from_ledger(row.get("usage_json"))
        return cls(
            id=row["id"],
            account=row["account"],
            created_at=_time(row["created_at"]),
            model=priced.id if priced is not None else model,
            state=row["state"],
            outcome=row.get("outcome"),
            cost_nusd=row.get("cost_nusd"),
            ceiling_nusd=row["ceiling_nusd"],
            usage=usage,
            price_revision=row.get("price_revision"),
            outcome_at=_time(row.get("outcome_at")),
            settled_at=_time(row.get("settled_at")),
            month_utc=row.get("month_utc"),
            max_output=row.get("max_output"),
            max_web_searches=row.get("max_web_searches"),
        )

    def end(self, now):
        """The last instant the provider may have bucketed this attempt's usage in."""
        if self.state == "settled" and self.outcome == "complete" and self.settled_at is not None:
            return self.settled_at  # the answer had ended when it was read
        if self.outcome is None:
            return max(now, self.created_at)
        if self.outcome_at is not None:
            return self.outcome_at + LATE_END
        return self.settled_at or self.created_at

    def minutes(self, now):
        """(first, last) minute starts the attempt's usage may lie in."""
        return minute_of(self.created_at), minute_of(self.end(now))


def _time(text):
    return None if not text else dt.datetime.fromisoformat(text).astimezone(UTC)


# Marks the counts a usage report proved were an attempt's (``Ledger.reconcile``'s usage), so a
# later span can take them away like a complete answer's.
FROM_REPORT = "from_usage_report"


def _from_report(usage_json):
    try:
        return bool(json.loads(usage_json).get(FROM_REPORT)) if usage_json else False
    except (ValueError, AttributeError):
        return False


def proven_usage_json(usage):
    """The counts a report proved were one attempt's, as stored on it (numbers only)."""
    message = usage.as_message_usage()
    message[FROM_REPORT] = 1
    return json.dumps(message, sort_keys=True)


@dataclasses.dataclass(frozen=True)
class Settle:
    attempt_id: str
    account: str
    cost_nusd: int
    source_ref: str
    usage: Usage


@dataclasses.dataclass(frozen=True)
class SettleGroup:
    """Open attempts of one account and credit period settled at shares of one exact total."""

    account: str
    members: tuple  # ((attempt id, share nusd), ...)
    total_nusd: int
    source_ref: str
    usage: Usage


@dataclasses.dataclass(frozen=True)
class Keep:
    attempt_id: str
    account: str
    reason: str
    message: str


def minute_of(at):
    return at.astimezone(UTC).replace(second=0, microsecond=0)


def minute_text(at):
    return at.strftime("%Y-%m-%dT%H:%MZ")


def spans(attempts, now):
    """Group attempts (one key id, one model) into spans of consecutive minutes: attempts whose
    minutes touch share a span. Returns ``[(first minute, last minute, [attempts])]`` in time order."""
    out = []
    for attempt in sorted(attempts, key=lambda a: (a.created_at, a.id)):
        first, last = attempt.minutes(now)
        if out and first <= out[-1][1]:
            out[-1][1] = max(out[-1][1], last)
            out[-1][2].append(attempt)
        else:
            out.append([first, last, [attempt]])
    return [(first, last, members) for first, last, members in out]


def split(total, ceilings):
    """``total`` split in proportion to ``ceilings``, exactly (largest remainders, ties to the
    earlier attempt). With ``total <= sum(ceilings)`` no share passes its own ceiling."""
    whole = sum(ceilings)
    if whole == 0:
        return [0] * len(ceilings)
    shares = [total * c // whole for c in ceilings]
    rests = sorted(range(len(ceilings)), key=lambda i: (-(total * ceilings[i] % whole), i))
    for i in rests[: total - sum(shares)]:
        shares[i] += 1
    return shares


def decide(attempts, report, *, key_id, dedicated=False, now, price, one_tier=None):
    """Verdicts for the open attempts among ``attempts`` (one account's key id).

    ``report``: a ``provider.report.Report``; ``dedicated``: the account declares the key used
    through the ledger alone; ``price(usage_dict, model, revision id)``: nanodollars or None;
    ``one_tier(model, revision id, input tokens)``: whether every request of that much input or
    less is billed at one tier (default: ``pricing``'s tiers). Returns ``[Settle | SettleGroup | Keep]``,
    covering every open attempt once."""
    one_tier = one_tier or single_tier
    verdicts = []
    by_model = {}
    for attempt in attempts:
        if attempt.outcome == "not_sent":
            continue  # it never reached the provider: nothing of it is in any report
        by_model.setdefault(attempt.model, []).append(attempt)
    for model, members in sorted(by_model.items()):
        for first, last, span in spans(members, now):
            verdicts.extend(_decide_span(first, last, span, model, report, key_id, dedicated, now, price, one_tier))
    return verdicts


def _decide_span(first, last, span, model, report, key_id, dedicated, now, price, one_tier):
    open_ = [a for a in span if a.state == "open"]
    if not open_:
        return []
    minutes = [first + MINUTE * i for i in range(int((last - first) / MINUTE) + 1)]

    def keep(reason, **values):
        message = REASONS[reason].format(open=len(open_), **values)
        return [Keep(a.id, a.account, reason, message) for a in open_]

    if any(a.outcome is None for a in open_):
        # Its usage may still grow; and no other open attempt of the span can be told apart from it.
        return [
            Keep(a.id, a.account, "in_flight", REASONS["in_flight"]) if a.outcome is None
            else Keep(a.id, a.account, "in_flight", "an attempt sharing its minutes has no outcome recorded yet")
            for a in open_
        ]
    if any(a.outcome_at is None for a in open_):
        return keep("no_outcome_time")
    if any(a.max_output is None or a.max_web_searches is None for a in open_):
        return keep("no_quote")
    if report.api == "analytics":
        if report.refreshed_at is None or report.refreshed_at < last + MINUTE:
            return keep("not_final")
    elif now < max(a.outcome_at for a in open_) + LEGACY_FINAL_AFTER or now < last + MINUTE + LEGACY_FINAL_AFTER:
        return keep("not_final")
    if any(minute not in report.covered for minute in minutes):
        return keep("not_covered")
    if any(minute in report.unreadable for minute in minutes):
        return keep("unreadable")
    if report.api != "analytics" and not dedicated:
        return keep("not_dedicated")
    if report.api != "analytics" and any(a.state == "open" or a.outcome not in UNBILLED for a in span if a is not open_[0]):
        # Without request counts a row that is late cannot be told from one that cost nothing:
        # the span must hold this one billable attempt alone.
        return keep("legacy_group")
    window = set(minutes)
    rows = [r for r in report.rows if r.key_id == key_id and r.model == model and r.minute in window]
    settled = [a for a in span if a.state == "settled"]
    if report.api == "analytics":
        if any(a.outcome in UNBILLED for a in settled):
            return keep("refusals_in_span")
        requests = sum(r.requests for r in rows)
        if requests != len(span):
            return keep("requests_differ", requests=requests, attempts=len(span))
    geos = {r.inference_geo for r in rows}
    if any(r.service_tier not in STANDARD_TIERS or r.speed not in STANDARD_SPEEDS for r in rows):
        return keep("unpriced_modifier")
    priced_geos = geos - STANDARD_GEOS
    if len(priced_geos) > 1 or (priced_geos and geos & STANDARD_GEOS):
        return keep("mixed_modifiers")
    geo = next(iter(priced_geos), None)
    taken = Usage()
    for attempt in settled:
        if attempt.usage is not None:
            taken += attempt.usage
        elif attempt.cost_nusd == 0 and attempt.outcome in UNBILLED:
            continue
        else:
            return keep("settled_without_usage")
    shown = Usage()
    for row in rows:
        shown += row.usage
    left = shown - taken
    if left.negative():
        return keep("over_accounted")
    if left.empty():
        return keep("no_usage")
    if left.output > sum(a.max_output for a in open_) or left.web_search > sum(a.max_web_searches for a in open_):
        return keep("beyond_quote")
    where = minute_text(first) if first == last else f"{minute_text(first)}..{minute_text(last)}"
    source = f"usage_report:{report.api}:{where}:{key_id}:{model}"
    ceilings = sum(a.ceiling_nusd for a in open_)
    if len(open_) > 1:
        if len({(a.account, a.month_utc, a.price_revision) for a in open_}) != 1:
            return keep("mixed_periods")
        if not one_tier(model, open_[0].price_revision, left.input_total()):
            return keep("context_window")
    cost = price(left.as_message_usage(geo), model, open_[0].price_revision)
    if cost is None:
        return keep("unpriced")
    if cost > ceilings:
        return keep("above_ceiling", cost=usd_fine(cost), ceiling=usd_fine(ceilings))
    if len(open_) == 1:
        [attempt] = open_
        return [Settle(attempt.id, attempt.account, cost, source, left)]
    shares = split(cost, [a.ceiling_nusd for a in open_])
    members = tuple((a.id, share) for a, share in zip(open_, shares))
    return [SettleGroup(open_[0].account, members, cost, f"{source}:joint:{len(open_)}", left)]


def price_with_revision(usage, model, revision_id):
    """``pricing.settlement_cost`` at the attempt's own price revision (None if it is unknown)."""
    revision = _revision(revision_id)
    return None if revision is None else prices.settlement_cost(usage, model, None, revision)


def single_tier(model, revision_id, input_tokens):
    """Whether any request of at most ``input_tokens`` input is billed at the model's first tier
    (docs/pricing.md "The price revision", its long-context tier): then a group's total prices like its members' sum."""
    revision = _revision(revision_id)
    price = None if revision is None else revision.model(model)
    return price is not None and price.rates_for(input_tokens) == price.rates_for(0)


def _revision(revision_id):
    # Not cached here: pricing caches a shipped revision, user_prices a user's until its file changes.
    try:
        return price_book.load_revision(revision_id) if revision_id else prices.current_revision()
    except Exception:  # a revision this version does not ship: the attempt stays open (unpriced)
        return None
