"""The rules that settle an open attempt from the provider's usage report, and every case they
keep open (docs/architecture.md "Settling from the provider"). Pure functions: clocks and reports
are given, nothing is read."""

import dataclasses
import datetime as dt

from hypothesis import given, strategies as st

from llm_accounts.provider import rules as pu
from llm_accounts.pricing import current_revision, settlement_cost

UTC = dt.timezone.utc
HAIKU = "claude-haiku-4-5-20251001"
KEY = "apikey_01test"
T0 = dt.datetime(2028, 2, 29, 23, 41, 20, tzinfo=UTC)  # a leap day
LATER = T0 + dt.timedelta(hours=1)
CEILING = 10**9  # $1


def attempt(id, at=T0, state="open", usage=None, outcome="", cost=None, ceiling=CEILING, model=HAIKU):
    """An attempt; an open one defaults to a recorded unknown outcome (stream_closed), a settled one
    to complete. ``outcome=None`` is an open attempt with none recorded: in flight, or killed."""
    if outcome == "":
        outcome = "complete" if state == "settled" else "stream_closed"
    if state == "settled" and cost is None and usage is not None:
        cost = price(usage.as_message_usage(), model, None)
    return pu.Attempt(id, "work", at, model, state, outcome, cost, ceiling, usage, current_revision().id)


def price(usage, model, revision):
    return settlement_cost(usage, model, None, current_revision())


def minute(at):
    return pu.minute_of(at)


def covered_around(at, before=5, after=5):
    return {minute(at) + pu.MINUTE * i for i in range(-before, after + 1)}


def decide(attempts, report, now=LATER, covered=None):
    return pu.decide(attempts, report, covered_around(T0) if covered is None else covered, key_id=KEY, now=now, price=price)


def one(verdicts):
    [verdict] = verdicts
    return verdict


U1 = pu.Usage(input=1200, output=300)
U2 = pu.Usage(input=40, cache_read=2000, write_5m=100, output=7)


def test_the_one_open_attempt_of_its_minute_settles_at_the_priced_usage():
    verdict = one(decide([attempt("a")], {(minute(T0), HAIKU): U1}))
    assert isinstance(verdict, pu.Settle)
    assert verdict.cost_nusd == price(U1.as_message_usage(), HAIKU, None)
    assert verdict.source_ref == f"usage_report:messages:2028-02-29T23:41Z:{KEY}:{HAIKU}"


def test_an_open_attempt_with_no_outcome_recorded_is_kept_as_in_flight_however_old():
    # No outcome: its stream may still be running (transport.TIMEOUT bounds each read, not the
    # stream), so the report's minutes may hold only part of what it will use.
    verdict = one(decide([attempt("a", outcome=None)], {(minute(T0), HAIKU): U1}, now=T0 + dt.timedelta(minutes=12)))
    assert isinstance(verdict, pu.Keep) and verdict.reason == "in_flight"


def test_an_attempt_sharing_its_minutes_with_one_in_flight_stays_open():
    verdicts = decide([attempt("a"), attempt("b", T0 + dt.timedelta(seconds=3), outcome=None)], {(minute(T0), HAIKU): U1})
    assert {(v.attempt_id, v.reason) for v in verdicts} == {("a", "ambiguous"), ("b", "in_flight")}


def test_what_the_ledger_settled_in_the_minute_is_taken_away_first():
    done = attempt("done", T0 + dt.timedelta(seconds=5), "settled", usage=U2)
    verdict = one(decide([attempt("a"), done], {(minute(T0), HAIKU): U1 + U2}))
    assert verdict.attempt_id == "a" and verdict.usage == U1
    assert verdict.cost_nusd == price(U1.as_message_usage(), HAIKU, None)


def test_attempts_settled_at_zero_as_refused_take_nothing_away():
    refused = attempt("r", T0, "settled", outcome="rate_limited", cost=0)
    assert isinstance(one(decide([attempt("a"), refused], {(minute(T0), HAIKU): U1})), pu.Settle)


def test_an_attempt_near_a_minutes_end_is_matched_against_both_minutes():
    late = T0.replace(second=55)
    verdict = one(decide([attempt("a", late)], {(minute(late), HAIKU): U1, (minute(late) + pu.MINUTE, HAIKU): U2}))
    assert verdict.usage == U1 + U2
    assert verdict.source_ref == f"usage_report:messages:2028-02-29T23:41Z..2028-02-29T23:42Z:{KEY}:{HAIKU}"


def test_other_models_in_the_minute_are_not_counted():
    sonnet = "claude-sonnet-4-5-20250929"
    verdict = one(decide([attempt("a")], {(minute(T0), HAIKU): U1, (minute(T0), sonnet): U2}))
    assert verdict.usage == U1


# Every case that stays open, and why.


def test_two_open_attempts_in_one_minute_stay_open_as_ambiguous():
    verdicts = decide([attempt("a"), attempt("b", T0 + dt.timedelta(seconds=3))], {(minute(T0), HAIKU): U1 + U2})
    assert [(v.attempt_id, v.reason) for v in verdicts] == [("a", "ambiguous"), ("b", "ambiguous")]
    assert "2 open attempts share its minutes" in verdicts[0].message


def test_open_attempts_whose_windows_touch_across_a_minute_edge_are_ambiguous_together():
    first, second = T0.replace(second=58), T0.replace(second=58) + dt.timedelta(seconds=8)
    verdicts = decide([attempt("a", first), attempt("b", second)], {(minute(first), HAIKU): U1, (minute(second), HAIKU): U2})
    assert {v.reason for v in verdicts} == {"ambiguous"}


def test_a_minute_not_yet_final_stays_open():
    now = minute(T0) + pu.MINUTE + pu.FINAL_AFTER - dt.timedelta(seconds=1)
    verdict = one(decide([attempt("a")], {(minute(T0), HAIKU): U1}, now=now))
    assert verdict.reason == "not_final"
    assert isinstance(one(decide([attempt("a")], {(minute(T0), HAIKU): U1}, now=now + dt.timedelta(seconds=1))), pu.Settle)


def test_minutes_the_report_did_not_cover_stay_open():
    assert one(decide([attempt("a")], {}, covered=set())).reason == "not_covered"


def test_settled_usage_above_the_report_stays_open():
    done = attempt("done", T0, "settled", usage=U2)
    assert one(decide([attempt("a"), done], {(minute(T0), HAIKU): U1})).reason == "over_accounted"


def test_an_attempt_settled_without_a_token_count_in_the_minute_makes_it_ambiguous():
    by_hand = attempt("h", T0, "settled", outcome="provider_error", cost=5000)
    assert one(decide([attempt("a"), by_hand], {(minute(T0), HAIKU): U1})).reason == "settled_without_usage"


def test_no_usage_left_is_never_settled_at_zero():
    done = attempt("done", T0, "settled", usage=U1)
    assert one(decide([attempt("a"), done], {(minute(T0), HAIKU): U1})).reason == "no_usage"
    assert one(decide([attempt("a")], {})).reason == "no_usage"


def test_a_remainder_priced_above_the_ceiling_stays_open_and_says_so():
    verdict = one(decide([attempt("a", ceiling=1000)], {(minute(T0), HAIKU): U1}))
    assert verdict.reason == "above_ceiling"
    assert "above its ceiling of $0.000001" in verdict.message


def test_web_searches_in_the_report_are_priced_at_the_revision_fee():
    verdict = one(decide([attempt("a")], {(minute(T0), HAIKU): pu.Usage(input=10, output=5, web_search=1)}))
    assert verdict.cost_nusd == 10 * 1_000 + 5 * 5_000 + 10_000_000  # Haiku 4.5 tokens and one search


def test_server_tool_use_the_revision_cannot_price_stays_open():
    def without_fees(usage, model, revision):
        return settlement_cost(usage, model, None, dataclasses.replace(current_revision(), server_tool_fees={}))

    report = {(minute(T0), HAIKU): pu.Usage(input=10, output=5, web_search=1)}
    verdict = one(pu.decide([attempt("a")], report, covered_around(T0), key_id=KEY, now=LATER, price=without_fees))
    assert verdict.reason == "unpriced"


def test_settled_attempts_alone_give_no_verdict():
    assert decide([attempt("done", state="settled", usage=U1)], {(minute(T0), HAIKU): U1}) == []


# Reading the report and the ledger's usage.


def test_report_minutes_sum_rows_of_the_key_and_canonicalize_the_model():
    row = {"uncached_input_tokens": 5, "cache_read_input_tokens": 0, "output_tokens": 2, "api_key_id": KEY, "model": "claude-haiku-4-5",
           "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}, "server_tool_use": {"web_search_requests": 0}}
    other = {**row, "api_key_id": "apikey_01other"}
    data = [{"starting_at": "2028-02-29T23:41:00Z", "ending_at": "2028-02-29T23:42:00Z", "results": [row, row, other]}]
    report, covered = pu.report_minutes(data, KEY)
    assert report == {(minute(T0), HAIKU): pu.Usage(input=10, output=4)}
    assert covered == {minute(T0)}


def test_a_result_in_an_unknown_shape_leaves_its_minute_uncovered():
    row = {"uncached_input_tokens": "5", "api_key_id": KEY, "model": HAIKU}
    data = [{"starting_at": "2028-02-29T23:41:00Z", "ending_at": "2028-02-29T23:42:00Z", "results": [row]}]
    assert pu.report_minutes(data, KEY) == ({}, set())


def test_ledger_usage_without_the_cache_write_split_cannot_be_taken_away():
    assert pu.usage_from_ledger('{"input_tokens": 5, "output_tokens": 1, "cache_creation_input_tokens": 9}') is None
    assert pu.usage_from_ledger(
        '{"input_tokens": 5, "output_tokens": 1, "cache_creation_input_tokens": 9, "cache_creation": {"ephemeral_5m_input_tokens": 9}}'
    ) == pu.Usage(input=5, write_5m=9, output=1)


# Properties.

counts = st.builds(pu.Usage, st.integers(0, 50_000), st.integers(0, 50_000), st.integers(0, 5000), st.integers(0, 5000), st.integers(0, 8000))
offsets = st.integers(0, 3 * 60 - 1)


@given(settled=st.lists(st.tuples(offsets, counts), max_size=6), open_at=offsets, open_usage=counts, ceiling=st.integers(0, 2 * 10**9))
def test_a_settlement_is_the_open_attempts_own_usage_priced_and_never_above_its_ceiling_or_zero(settled, open_at, open_usage, ceiling):
    start = minute(T0)
    rows = [attempt(f"s{i}", start + dt.timedelta(seconds=s), "settled", usage=u) for i, (s, u) in enumerate(settled)]
    mine = attempt("open", start + dt.timedelta(seconds=open_at), ceiling=ceiling)
    report = {}
    for row in [*rows, mine]:
        key = (minute(row.created_at), HAIKU)
        report[key] = report.get(key, pu.Usage()) + (row.usage or open_usage)
    covered = {start + pu.MINUTE * i for i in range(-1, 5)}
    verdicts = pu.decide([*rows, mine], report, covered, key_id=KEY, now=LATER, price=price)
    [verdict] = verdicts
    if isinstance(verdict, pu.Settle):
        assert 0 < verdict.cost_nusd <= ceiling
        # Settled only when the span's usage is the open attempt's own.
        assert verdict.cost_nusd == price(open_usage.as_message_usage(), HAIKU, None)
    else:
        assert verdict.reason in ("no_usage", "above_ceiling")


@given(st.lists(offsets, min_size=2, max_size=5, unique=True), counts)
def test_two_or_more_open_attempts_in_touching_minutes_never_settle(at, usage):
    start = minute(T0)
    rows = [attempt(f"o{i}", start + dt.timedelta(seconds=s)) for i, s in enumerate(at)]
    report = {(start + pu.MINUTE * i, HAIKU): usage for i in range(4)}
    verdicts = pu.decide(rows, report, {start + pu.MINUTE * i for i in range(5)}, key_id=KEY, now=LATER, price=price)
    for first, last, members in pu.spans(rows):
        ids = {a.id for a in members}
        mine = [v for v in verdicts if v.attempt_id in ids]
        assert all(isinstance(v, pu.Keep) for v in mine) or len(members) == 1


def test_open_attempts_an_hour_apart_are_read_as_separate_windows_with_a_margin():
    from llm_accounts.provider.settle import MARGIN, windows

    at = [T0, T0 + dt.timedelta(minutes=50), T0 + dt.timedelta(minutes=200)]
    got = windows([{"created_at": t.isoformat()} for t in at])
    assert got == [
        (minute(T0 - MARGIN), minute(at[1] + MARGIN) + pu.MINUTE),
        (minute(at[2] - MARGIN), minute(at[2] + MARGIN) + pu.MINUTE),
    ]


def test_an_attempt_quoted_under_a_revision_this_version_does_not_ship_stays_open_unpriced():
    mine = pu.Attempt("a", "work", T0, HAIKU, "open", "stream_closed", None, CEILING, None, "anthropic-1999-01-01")
    verdicts = pu.decide([mine], {(minute(T0), HAIKU): U1}, covered_around(T0), key_id=KEY, now=LATER, price=pu.price_with_revision)
    assert one(verdicts).reason == "unpriced"
    shipped = pu.Attempt("b", "work", T0, HAIKU, "open", "stream_closed", None, CEILING, None, current_revision().id)
    verdicts = pu.decide([shipped], {(minute(T0), HAIKU): U1}, covered_around(T0), key_id=KEY, now=LATER, price=pu.price_with_revision)
    assert one(verdicts).cost_nusd == price(U1.as_message_usage(), HAIKU, None)
