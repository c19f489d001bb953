"""Settling unknown outcomes from the provider's own usage report: the matching rules
(docs/architecture.md "Settling from the provider").

An attempt left open by an unknown outcome (a 5xx, a broken or abandoned stream, a killed
process) keeps its whole ceiling until positive evidence settles it. The organization's Messages
usage report, in one-minute buckets grouped by API key id and model, is such evidence when it
leaves no doubt about which attempt the tokens belong to. These functions decide that, and
nothing else: no I/O, no clock, no ledger. ``provider_pass`` reads the report and the ledger and
writes the settlements.

The rule, for one account's key id and one model:

1. Each attempt reached the provider in the minute it was reserved, or up to ``SEND_WINDOW``
   later (the transport's connect bound). Its *minutes* are those the window touches.
2. Attempts whose minutes touch are matched together, as one *span* of consecutive minutes, so an
   attempt near a minute's edge is never matched against only half of what it may have used.
3. A span settles an open attempt only if every one of these holds; otherwise the attempt stays
   open and the verdict says why:
   - every open attempt of the span has its unknown outcome recorded (``in_flight``): one with
     none may still be streaming, its usage still growing past what the report shows (or its
     process was killed before recording; ``llm accounts reconcile`` settles that one by hand);
   - every minute of the span is final: it ended ``FINAL_AFTER`` ago or more (``not_final``);
   - the report covered every minute of the span (``not_covered``);
   - exactly one attempt of the span is open (``ambiguous``);
   - every settled attempt of the span has a token count to take away: settled complete with
     its usage, or settled at zero as refused before processing (``settled_without_usage``);
   - what the settled attempts used does not exceed the report in any token kind
     (``over_accounted``);
   - something is left, since no tokens in the report is not proof that nothing was billed:
     the request may have reached a later minute (``no_usage``);
   - the price revision of the attempt prices what is left (``unpriced``: server tools, say);
   - the priced remainder is at most the attempt's ceiling, which is the provable worst case, so
     more than it means the minutes hold usage the ledger never saw (``above_ceiling``).

A settlement names its source: ``usage_report:messages:<first minute>[..<last minute>]:<key id>:<model>``.
"""

import dataclasses
import datetime as dt
import json

from .. import pricing
from ..money import usd_fine

UTC = dt.timezone.utc
MINUTE = dt.timedelta(minutes=1)
# How long after its reservation an attempt may reach the provider: transport.TIMEOUT's 10 s
# connect bound. An attempt's usage is looked for in every minute this window touches.
SEND_WINDOW = dt.timedelta(seconds=10)
# When a minute's bucket is taken as final. The usage report fills in minutes after the fact;
# Anthropic documents no bound, so this waits well past the few minutes it usually takes. It says
# nothing of a stream still running (transport.TIMEOUT bounds each read, not the stream): only an
# attempt whose unknown outcome was recorded is matched at all (``in_flight``).
FINAL_AFTER = dt.timedelta(minutes=10)

# Outcomes an attempt settles at zero with, proven unbilled (docs/architecture.md "Attempt outcomes").
UNBILLED = frozenset({"not_sent", "rate_limited", "overloaded", "auth_required", "request_rejected"})

REASONS = {
    "in_flight": "no outcome is recorded: it may still be running (or its process, on another machine, was killed: settle it with llm accounts reconcile)",
    "not_final": "its minutes ended less than {final} ago; the report may still change",
    "not_covered": "the report read does not cover all of its minutes",
    "ambiguous": "{open} open attempts share its minutes on this key and model",
    "settled_without_usage": "an attempt settled in its minutes has no token count to take away",
    "over_accounted": "attempts settled in its minutes account for more than the report shows",
    "no_usage": "the report shows nothing left for it; no usage is not proof of no cost",
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

    def as_message_usage(self):
        """The same counts as a Messages ``usage`` object, for ``pricing.settlement_cost``."""
        return {
            "input_tokens": self.input,
            "output_tokens": self.output,
            "cache_read_input_tokens": self.cache_read,
            "cache_creation_input_tokens": self.write_5m + self.write_1h,
            "cache_creation": {"ephemeral_5m_input_tokens": self.write_5m, "ephemeral_1h_input_tokens": self.write_1h},
            "server_tool_use": {"web_search_requests": self.web_search},
        }


def usage_from_report(row):
    """A usage report result's counts, or None if it is not in the documented shape."""
    creation = row.get("cache_creation") or {}
    tools = row.get("server_tool_use") or {}
    values = (
        row.get("uncached_input_tokens", 0),
        row.get("cache_read_input_tokens", 0),
        creation.get("ephemeral_5m_input_tokens", 0) if isinstance(creation, dict) else None,
        creation.get("ephemeral_1h_input_tokens", 0) if isinstance(creation, dict) else None,
        row.get("output_tokens", 0),
        tools.get("web_search_requests", 0) if isinstance(tools, dict) else None,
    )
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
        return None
    return Usage(*values)


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
    return Usage(usage.get("input_tokens", 0), usage.get("cache_read_input_tokens", 0), w5, w1h, usage.get("output_tokens", 0), web)


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

    @classmethod
    def from_row(cls, row, revision=None):
        model = row.get("served_model") or row["requested_model"]
        priced = (revision or pricing.current_revision()).model(model)
        return cls(
            id=row["id"],
            account=row["account"],
            created_at=dt.datetime.fromisoformat(row["created_at"]).astimezone(UTC),
            model=priced.id if priced is not None else model,
            state=row["state"],
            outcome=row.get("outcome"),
            cost_nusd=row.get("cost_nusd"),
            ceiling_nusd=row["ceiling_nusd"],
            usage=usage_from_ledger(row.get("usage_json")) if row["state"] == "settled" else None,
            price_revision=row.get("price_revision"),
        )

    def minutes(self):
        """(first, last) minute starts the attempt's send window touches."""
        return minute_of(self.created_at), minute_of(self.created_at + SEND_WINDOW)


@dataclasses.dataclass(frozen=True)
class Settle:
    attempt_id: str
    account: str
    cost_nusd: int
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


def spans(attempts):
    """Group attempts (one key id, one model) into spans of consecutive minutes: attempts whose
    minutes touch share a span. Returns ``[(first minute, last minute, [attempts])]`` in time order."""
    out = []
    for attempt in sorted(attempts, key=lambda a: (a.created_at, a.id)):
        first, last = attempt.minutes()
        if out and first <= out[-1][1]:
            out[-1][1] = max(out[-1][1], last)
            out[-1][2].append(attempt)
        else:
            out.append([first, last, [attempt]])
    return [(first, last, members) for first, last, members in out]


def decide(attempts, report, covered, *, key_id, now, price):
    """Verdicts for the open attempts among ``attempts`` (one account's, one key id).

    ``report``: ``{(minute start, model): Usage}`` for this key id, summed over its rows;
    ``covered``: the set of minute starts the report was read for; ``price(usage_dict, model,
    revision id)``: nanodollars or None. Returns ``[Settle | Keep]``, one per open attempt."""
    verdicts = []
    by_model = {}
    for attempt in attempts:
        by_model.setdefault(attempt.model, []).append(attempt)
    for model, members in sorted(by_model.items()):
        for first, last, span in spans(members):
            verdicts.extend(_decide_span(first, last, span, model, report, covered, key_id, now, price))
    return verdicts


def _decide_span(first, last, span, model, report, covered, key_id, now, price):
    open_ = [a for a in span if a.state == "open"]
    if not open_:
        return []
    minutes = [first + MINUTE * i for i in range(int((last - first) / MINUTE) + 1)]

    def keep(reason, **values):
        message = REASONS[reason].format(open=len(open_), final=_duration(FINAL_AFTER), **values)
        return [Keep(a.id, a.account, reason, message) for a in open_]

    if any(a.outcome is None for a in open_):
        # Its usage may still grow; and no other open attempt of the span can be told apart from it.
        return [
            Keep(a.id, a.account, "in_flight", REASONS["in_flight"]) if a.outcome is None
            else Keep(a.id, a.account, "ambiguous", REASONS["ambiguous"].format(open=len(open_)))
            for a in open_
        ]
    if last + MINUTE + FINAL_AFTER > now:
        return keep("not_final")
    if any(minute not in covered for minute in minutes):
        return keep("not_covered")
    if len(open_) > 1:
        return keep("ambiguous")
    settled = Usage()
    for attempt in span:
        if attempt.state == "open":
            continue
        if attempt.usage is not None and attempt.outcome == "complete":
            settled += attempt.usage
        elif attempt.cost_nusd == 0 and attempt.outcome in UNBILLED:
            continue
        else:
            return keep("settled_without_usage")
    shown = Usage()
    for minute in minutes:
        shown += report.get((minute, model), Usage())
    left = shown - settled
    if left.negative():
        return keep("over_accounted")
    if left.empty():
        return keep("no_usage")
    [attempt] = open_
    cost = price(left.as_message_usage(), model, attempt.price_revision)
    if cost is None:
        return keep("unpriced")
    if cost > attempt.ceiling_nusd:
        return keep("above_ceiling", cost=usd_fine(cost), ceiling=usd_fine(attempt.ceiling_nusd))
    where = minute_text(first) if first == last else f"{minute_text(first)}..{minute_text(last)}"
    return [Settle(attempt.id, attempt.account, cost, f"usage_report:messages:{where}:{key_id}:{model}", left)]


def price_with_revision(usage, model, revision_id):
    """``pricing.settlement_cost`` at the attempt's own price revision (None if it is unknown)."""
    revision = _revision(revision_id)
    return None if revision is None else pricing.settlement_cost(usage, model, None, revision)


def _revision(revision_id):
    # Not cached here: pricing caches a shipped revision, user_prices a user's until its file changes.
    try:
        return pricing.load_revision(revision_id) if revision_id else pricing.current_revision()
    except Exception:  # a revision this version does not ship: the attempt stays open (unpriced)
        return None


def report_minutes(page_data, key_id, revision=None):
    """``({(minute start, canonical model): Usage}, {minute starts covered})`` from usage report
    buckets (one-minute width) for ``key_id``. A result in an unknown shape makes its minute
    uncovered, so nothing in it is settled."""
    revision = revision or pricing.current_revision()
    report, covered, broken = {}, set(), set()
    for bucket in page_data:
        try:
            start = dt.datetime.fromisoformat(bucket["starting_at"].replace("Z", "+00:00")).astimezone(UTC)
            end = dt.datetime.fromisoformat(bucket["ending_at"].replace("Z", "+00:00")).astimezone(UTC)
            results = bucket["results"]
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
        if end - start != MINUTE or start != minute_of(start) or not isinstance(results, list):
            continue
        covered.add(start)
        for row in results:
            if not isinstance(row, dict) or row.get("api_key_id") != key_id:
                continue
            usage, model = usage_from_report(row), row.get("model")
            if usage is None or not isinstance(model, str):
                broken.add(start)
                continue
            priced = revision.model(model)
            model = priced.id if priced is not None else model
            report[(start, model)] = report.get((start, model), Usage()) + usage
    return report, covered - broken


def _duration(delta):
    return f"{int(delta.total_seconds() // 60)} minutes"
