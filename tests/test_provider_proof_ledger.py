"""The proof rule through a real ledger, on both backends: attempts reserved and recorded as the
product records them, random report histories matched against them, the settlements written by
the pass's own code (``provider.settle._apply``). Every attempt ends settled at exactly what the
provider billed for it (alone, or its group's exact total) or still open
(docs/architecture.md "Settling from the provider")."""

import datetime as dt
import itertools
import json

from hypothesis import HealthCheck, given, settings, strategies as st

from llm_accounts.declarations import Account
from llm_accounts.ledger import Complete, Ledger, Unknown
from llm_accounts.pricing import prices
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import current_revision, settlement_cost
from llm_accounts.provider import report as rp, rules as pu, settle
from llm_accounts.records import Scope

UTC = dt.timezone.utc
HAIKU = "claude-haiku-4-5-20251001"
KEY = "apikey_01mine"
T0 = dt.datetime(2028, 2, 29, 23, 50, tzinfo=UTC)  # a leap day, near a credit period's end
SECOND = dt.timedelta(seconds=1)
_names = itertools.count()

usages = st.builds(pu.Usage, st.integers(0, 20_000), st.integers(0, 20_000), st.integers(0, 2_000),
                   st.integers(0, 2_000), st.integers(1, 4_000), st.just(0))


def body(max_tokens):
    return json.dumps({"model": HAIKU, "max_tokens": max_tokens, "messages": [{"role": "user", "content": "hi"}]}).encode()


@st.composite
def plans(draw):
    attempts = []
    for _ in range(draw(st.integers(1, 4))):
        attempts.append((
            draw(st.integers(0, 300)),  # reserved, seconds after T0
            draw(st.integers(1, 150)),  # its outcome, seconds later
            draw(st.sampled_from(["open", "open", "complete"])),
            draw(usages),
            draw(st.booleans()),  # its row is late, where the report's refresh allows (below)
        ))
    foreign = draw(st.lists(st.tuples(st.integers(-30, 500), usages, st.sampled_from(["standard", "batch"])), max_size=2))
    refreshed = T0 + draw(st.integers(0, 15)) * dt.timedelta(minutes=1)
    return attempts, foreign, refreshed


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plan=plans())
def test_the_pass_settles_attempts_in_a_ledger_at_exactly_their_bills_or_leaves_them_open(ledger_location, plan):
    attempts, foreign, refreshed = plan
    n = next(_names)
    account = Account(f"w{n}", f"W{n}_KEY", 1000 * NANO)
    location = ledger_location if isinstance(ledger_location, str) else ledger_location.with_name(f"ledger-{n}.db")
    quote = prices.quote(body(4096))
    bills, rows = {}, []
    with Ledger(location) as ledger:
        for i, (offset, length, kind, usage, late) in enumerate(attempts):
            attempt_id = f"p{n}-{i}"
            at = T0 + offset * SECOND
            ledger.reserve(Scope("conversation", attempt_id, "anthropic"), attempt_id, quote, [account], now=at)
            bill = settlement_cost(usage.as_message_usage(), HAIKU, None, current_revision())
            done = at + length * SECOND
            if kind == "complete":
                ledger.settle(attempt_id, Complete(bill, usage.as_message_usage(), HAIKU), now=done)
            else:
                ledger.settle(attempt_id, Unknown("stream_closed"), now=done)
                bills[attempt_id] = bill
            # The provider's freshness is honest: a row is missing only past data_refreshed_at.
            if not (late and pu.minute_of(at) + pu.MINUTE > refreshed) or kind == "complete":
                rows.append(rp.Row(pu.minute_of(at), KEY, HAIKU, "standard", "global", "standard", usage, 1))
        for offset, usage, tier in foreign:
            rows.append(rp.Row(pu.minute_of(T0 + offset * SECOND), KEY, HAIKU, tier, "global", "standard", usage, 1))
        now = T0 + dt.timedelta(hours=1)
        covered = frozenset(pu.minute_of(T0) + pu.MINUTE * i for i in range(-5, 30))
        report = rp.Report("analytics", tuple(rows), covered, frozenset(), refreshed)
        found = [pu.Attempt.from_row(row) for row in ledger.attempts_between(account.name, T0 - dt.timedelta(hours=1), now)]
        verdicts = pu.decide(found, report, key_id=KEY, now=now, price=pu.price_with_revision)
        result = settle.AccountResult(account.name)
        settle._apply(ledger, result, verdicts, now)
        after = {row["id"]: row for row in ledger.attempts_between(account.name, T0 - dt.timedelta(hours=1), now)}
        groups = {}
        for settled in result.settled:
            groups.setdefault(settled.source_ref, []).append(settled.attempt_id)
        for source, ids in groups.items():
            assert all(after[i]["state"] == "settled" for i in ids)
            assert sum(after[i]["cost_nusd"] for i in ids) == sum(bills[i] for i in ids)
            assert all(after[i]["cost_nusd"] <= after[i]["ceiling_nusd"] for i in ids)
        settled_ids = {i for ids in groups.values() for i in ids}
        for attempt_id in bills:
            if attempt_id not in settled_ids:
                assert after[attempt_id]["state"] == "open"
