"""The rules that settle open attempts from the provider's usage report, and every case they keep
open (docs/architecture.md "Settling from the provider"): proof, not fit. Pure functions: clocks
and reports are given, nothing is read."""

import dataclasses
import datetime as dt

import pytest

from llm_accounts.pricing.prices import current_revision, settlement_cost
from llm_accounts.provider import report as rp, rules as pu
from llm_accounts.provider.client import Read

UTC = dt.timezone.utc
HAIKU = "claude-haiku-4-5-20251001"
SONNET = "claude-sonnet-4-5-20250929"
KEY = "apikey_01test"
T0 = dt.datetime(2028, 2, 29, 23, 41, 20, tzinfo=UTC)  # a leap day
LATER = T0 + dt.timedelta(hours=1)
CEILING = 10**9  # $1
SECONDS = dt.timedelta(seconds=1)


def attempt(id, at=T0, state="open", usage=None, outcome="", cost=None, ceiling=CEILING, model=HAIKU, ended=20,
            max_output=4096, searches=0, account="work", month="2028-03"):
    """An attempt; an open one defaults to a recorded unknown outcome (stream_closed) ``ended``
    seconds after it was reserved, a settled one to complete. ``outcome=None`` is an open attempt
    with none recorded: in flight, or killed."""
    if outcome == "":
        outcome = "complete" if state == "settled" else "stream_closed"
    if state == "settled" and cost is None and usage is not None:
        cost = price(usage.as_message_usage(), model, None)
    done = at + ended * SECONDS
    return pu.Attempt(
        id, account, at, model, state, outcome, cost, ceiling, usage, current_revision().id,
        outcome_at=None if outcome is None else done, settled_at=done if state == "settled" else None,
        month_utc=month, max_output=max_output, max_web_searches=searches,
    )


def price(usage, model, revision):
    return settlement_cost(usage, model, None, current_revision())


def minute(at):
    return pu.minute_of(at)


def row(at, usage, requests=1, model=HAIKU, key=KEY, tier="standard", geo="global", speed="standard"):
    return rp.Row(minute(at), key, model, tier, geo, speed, usage, requests)


def analytics(*rows, refreshed=LATER, around=T0):
    covered = frozenset(minute(around) + pu.MINUTE * i for i in range(-10, 11))
    return rp.Report("analytics", tuple(rows), covered, frozenset(), refreshed)


def legacy(*rows, around=T0):
    covered = frozenset(minute(around) + pu.MINUTE * i for i in range(-10, 11))
    return rp.Report("messages", tuple(dataclasses.replace(r, requests=None, speed=None) for r in rows), covered, frozenset(), None)


def decide(attempts, report, now=LATER, dedicated=False, price=price):
    return pu.decide(attempts, report, key_id=KEY, dedicated=dedicated, now=now, price=price)


def one(verdicts):
    [verdict] = verdicts
    return verdict


U1 = pu.Usage(input=1200, output=300)
U2 = pu.Usage(input=40, cache_read=2000, write_5m=100, output=7)


# The Analytics API: request counts prove whose usage a minute holds.


def test_the_one_attempt_of_its_span_settles_when_the_rows_count_exactly_one_request():
    verdict = one(decide([attempt("a")], analytics(row(T0, U1))))
    assert isinstance(verdict, pu.Settle)
    assert verdict.cost_nusd == price(U1.as_message_usage(), HAIKU, None)
    # Its span runs from its reservation to a minute past its outcome (LATE_END).
    assert verdict.source_ref == f"usage_report:analytics:2028-02-29T23:41Z..2028-02-29T23:42Z:{KEY}:{HAIKU}"


def test_another_tools_request_in_the_same_minute_keeps_the_attempt_open():
    # The late-data case: the attempt's own usage has not arrived; another request's has.
    verdict = one(decide([attempt("a")], analytics(row(T0, pu.Usage(input=100, output=10)), row(T0, U1))))
    assert verdict.reason == "requests_differ"
    assert "2 request(s)" in verdict.message and "the ledger has 1" in verdict.message


def test_the_attempts_usage_still_missing_beside_another_request_is_not_settled_at_the_others_cost():
    # Only one row arrived, but it is not provably ours: the count matches, the minute lies in
    # the span... and this is why spans cover the attempt's whole life, and data_refreshed_at must pass it.
    stream = attempt("a", ended=150)  # a stream longer than its minute
    late = row(T0 + dt.timedelta(minutes=2), pu.Usage(input=5, output=1))
    report = analytics(late, refreshed=minute(T0) + dt.timedelta(minutes=2))
    assert one(decide([stream], report)).reason == "not_final"


def test_a_row_without_a_request_count_proves_nothing():
    item = {"starting_at": "2028-02-29T23:41:00Z", "ending_at": "2028-02-29T23:42:00Z",
            "group": {"api_key_id": KEY, "model": HAIKU, "service_tier": "standard", "inference_geo": "global", "speed": "standard"},
            "usage": {"uncached_input_tokens": 5, "cache_read_input_tokens": 0, "output_tokens": 2,
                      "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
                      "server_tool_use": {"web_search_requests": 0}}}
    report = rp.analytics(Read("analytics", [item], minute(T0) - dt.timedelta(minutes=10), minute(T0) + dt.timedelta(minutes=10), LATER))
    assert minute(T0) in report.unreadable
    assert one(decide([attempt("a")], report)).reason == "unreadable"


@pytest.mark.parametrize("field", ["uncached_input_tokens", "output_tokens", "cache_read_input_tokens"])
def test_a_missing_usage_field_is_never_read_as_zero(field):
    usage = {"uncached_input_tokens": 5, "cache_read_input_tokens": 0, "output_tokens": 2, "requests": 1,
             "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
             "server_tool_use": {"web_search_requests": 0}}
    del usage[field]
    item = {"starting_at": "2028-02-29T23:41:00Z", "ending_at": "2028-02-29T23:42:00Z",
            "group": {"api_key_id": KEY, "model": HAIKU, "service_tier": "standard", "inference_geo": "global", "speed": "standard"},
            "usage": usage}
    report = rp.analytics(Read("analytics", [item], minute(T0), minute(T0) + pu.MINUTE, LATER))
    assert report.rows == () and report.unreadable == {minute(T0)}


def test_a_report_without_data_refreshed_at_does_not_vouch_for_any_minute():
    assert one(decide([attempt("a")], analytics(row(T0, U1), refreshed=None))).reason == "not_final"


def test_the_report_vouches_only_for_minutes_before_its_refresh():
    span_end = minute(T0 + 20 * SECONDS + pu.LATE_END) + pu.MINUTE
    assert one(decide([attempt("a")], analytics(row(T0, U1), refreshed=span_end - SECONDS))).reason == "not_final"
    assert isinstance(one(decide([attempt("a")], analytics(row(T0, U1), refreshed=span_end))), pu.Settle)


@pytest.mark.parametrize("tier", ["batch", "priority", "flex"])
def test_a_row_of_a_tier_the_revision_does_not_price_never_settles(tier):
    # Even where the request count happens to match (the attempt's own row still missing).
    verdict = one(decide([attempt("a")], analytics(row(T0, U1, tier=tier))))
    assert verdict.reason == "unpriced_modifier"


def test_a_fast_mode_row_never_settles():
    assert one(decide([attempt("a")], analytics(row(T0, U1, speed="fast")))).reason == "unpriced_modifier"


def test_web_searches_above_the_requests_max_uses_never_settle():
    usage = pu.Usage(input=10, output=5, web_search=2)
    assert one(decide([attempt("a", searches=1)], analytics(row(T0, usage)))).reason == "beyond_quote"
    assert isinstance(one(decide([attempt("a", searches=2)], analytics(row(T0, usage)))), pu.Settle)


def test_web_searches_on_a_request_without_a_search_tool_never_settle():
    usage = pu.Usage(input=10, output=5, web_search=1)
    assert one(decide([attempt("a", searches=0)], analytics(row(T0, usage)))).reason == "beyond_quote"


def test_output_above_max_tokens_never_settles():
    assert one(decide([attempt("a", max_output=299)], analytics(row(T0, U1)))).reason == "beyond_quote"
    assert isinstance(one(decide([attempt("a", max_output=300)], analytics(row(T0, U1)))), pu.Settle)


def test_web_searches_within_max_uses_are_priced_at_the_revision_fee():
    verdict = one(decide([attempt("a", searches=1)], analytics(row(T0, pu.Usage(input=10, output=5, web_search=1)))))
    assert verdict.cost_nusd == 10 * 1_000 + 5 * 5_000 + 10_000_000  # Haiku 4.5 tokens and one search


def test_a_revision_without_server_tool_fees_keeps_a_search_open():
    def without_fees(usage, model, revision):
        return settlement_cost(usage, model, None, dataclasses.replace(current_revision(), server_tool_fees={}))

    verdict = one(decide([attempt("a", searches=1)], analytics(row(T0, pu.Usage(input=10, output=5, web_search=1))), price=without_fees))
    assert verdict.reason == "unpriced"


def test_what_the_ledger_settled_in_the_span_is_taken_away_and_counted():
    done = attempt("done", T0 + 5 * SECONDS, "settled", usage=U2)
    verdict = one(decide([attempt("a"), done], analytics(row(T0, U1 + U2, requests=2))))
    assert verdict.attempt_id == "a" and verdict.usage == U1
    assert one(decide([attempt("a"), done], analytics(row(T0, U1 + U2, requests=1)))).reason == "requests_differ"


def test_a_settled_attempt_of_another_model_is_never_taken_away():
    other = attempt("other", T0, "settled", usage=U2, model=SONNET)
    verdict = one(decide([attempt("a"), other], analytics(row(T0, U1), row(T0, U2, model=SONNET))))
    assert verdict.usage == U1


def test_a_refused_attempt_in_the_span_keeps_it_open_on_the_analytics_api():
    refused = attempt("r", T0, "settled", outcome="rate_limited", cost=0)
    assert one(decide([attempt("a"), refused], analytics(row(T0, U1)))).reason == "refusals_in_span"


def test_an_attempt_never_sent_is_not_in_any_span():
    never = attempt("n", T0, "settled", outcome="not_sent", cost=0)
    assert isinstance(one(decide([attempt("a"), never], analytics(row(T0, U1)))), pu.Settle)


def test_every_minute_of_a_span_counts_not_only_its_first():
    stream = attempt("a", ended=150)
    report = analytics(row(T0, U1), row(T0 + dt.timedelta(minutes=2), pu.Usage(input=3, output=1)))
    assert one(decide([stream], report)).reason == "requests_differ"


def test_a_minute_the_read_did_not_cover_keeps_the_span_open():
    report = dataclasses.replace(analytics(row(T0, U1)), covered=frozenset({minute(T0)}))
    assert one(decide([attempt("a")], report)).reason == "not_covered"


# Settled as a group.


def test_open_attempts_sharing_a_span_alone_settle_as_a_group_at_the_exact_total():
    a, b = attempt("a", ceiling=3 * 10**8), attempt("b", T0 + 3 * SECONDS, ceiling=10**8)
    verdict = one(decide([a, b], analytics(row(T0, U1 + U2, requests=2))))
    assert isinstance(verdict, pu.SettleGroup)
    total = price((U1 + U2).as_message_usage(), HAIKU, None)
    assert verdict.total_nusd == total == sum(share for _, share in verdict.members)
    assert verdict.source_ref.endswith(":joint:2")
    # In proportion to the ceilings (3:1).
    assert dict(verdict.members)["a"] == pytest.approx(3 * total / 4, abs=1)


def test_a_group_never_spans_two_credit_periods():
    a, b = attempt("a", month="2028-02"), attempt("b", T0 + 3 * SECONDS, month="2028-03")
    assert {v.reason for v in decide([a, b], analytics(row(T0, U1 + U2, requests=2)))} == {"mixed_periods"}


def test_a_group_whose_input_could_reach_a_long_context_tier_stays_open():
    big = pu.Usage(input=150_000, output=10)
    a, b = attempt("a", model=SONNET), attempt("b", T0 + 3 * SECONDS, model=SONNET)
    report = analytics(row(T0, big + big, requests=2, model=SONNET))
    assert {v.reason for v in decide([a, b], report)} == {"context_window"}


def test_a_group_with_one_more_request_than_attempts_stays_open():
    a, b = attempt("a"), attempt("b", T0 + 3 * SECONDS)
    assert {v.reason for v in decide([a, b], analytics(row(T0, U1 + U2, requests=3)))} == {"requests_differ"}


@pytest.mark.parametrize("total", [0, 1, 7, 999_999, 10**9 + 1])
def test_a_split_is_exact_and_no_share_passes_its_ceiling(total):
    ceilings = [10**9, 3, 5 * 10**8, 1]
    if total > sum(ceilings):
        return
    shares = pu.split(total, ceilings)
    assert sum(shares) == total and all(0 <= s <= c for s, c in zip(shares, ceilings))


# The legacy report: no request counts, so only a dedicated key.


def test_the_legacy_report_settles_nothing_for_a_key_not_declared_dedicated():
    assert one(decide([attempt("a")], legacy(row(T0, U1)))).reason == "not_dedicated"


def test_the_legacy_report_settles_a_dedicated_keys_attempt_ten_minutes_after_its_outcome():
    recorded = T0 + 20 * SECONDS
    early = recorded + pu.LEGACY_FINAL_AFTER - SECONDS
    assert one(decide([attempt("a")], legacy(row(T0, U1)), now=early, dedicated=True)).reason == "not_final"
    verdict = one(decide([attempt("a")], legacy(row(T0, U1)), now=LATER, dedicated=True))
    assert isinstance(verdict, pu.Settle) and verdict.source_ref.startswith("usage_report:messages:")


def test_finality_counts_from_the_outcome_not_the_reservation():
    slow = attempt("a", ended=30 * 60)  # its outcome was recorded half an hour after it was reserved
    now = T0 + dt.timedelta(minutes=35)
    assert one(decide([slow], legacy(row(T0, U1), around=T0 + dt.timedelta(minutes=20)), now=now, dedicated=True)).reason == "not_final"


# Every other case that stays open.


def test_an_open_attempt_with_no_outcome_recorded_is_kept_as_in_flight_however_old():
    verdict = one(decide([attempt("a", outcome=None)], analytics(row(T0, U1)), now=T0 + dt.timedelta(minutes=12)))
    assert isinstance(verdict, pu.Keep) and verdict.reason == "in_flight"


def test_an_attempt_sharing_its_minutes_with_one_in_flight_stays_open():
    verdicts = decide([attempt("a"), attempt("b", T0 + 3 * SECONDS, outcome=None)], analytics(row(T0, U1)))
    assert {v.reason for v in verdicts} == {"in_flight"} and len(verdicts) == 2


def test_an_attempt_recorded_before_its_outcome_time_was_kept_stays_open():
    old = dataclasses.replace(attempt("a"), outcome_at=None)
    assert one(decide([old], analytics(row(T0, U1)))).reason == "no_outcome_time"


def test_an_attempt_recorded_before_its_quote_bounds_were_kept_stays_open():
    old = dataclasses.replace(attempt("a"), max_output=None)
    assert one(decide([old], analytics(row(T0, U1)))).reason == "no_quote"


def test_settled_usage_above_the_report_stays_open():
    done = attempt("done", T0, "settled", usage=U2)
    assert one(decide([attempt("a"), done], analytics(row(T0, U1, requests=2)))).reason == "over_accounted"


def test_an_attempt_settled_without_a_token_count_in_the_span_keeps_it_open():
    by_hand = attempt("h", T0, "settled", outcome="provider_error", cost=5000)
    assert one(decide([attempt("a"), by_hand], analytics(row(T0, U1, requests=2)))).reason == "settled_without_usage"


def test_no_usage_left_is_never_settled_at_zero():
    done = attempt("done", T0, "settled", usage=U1)
    assert one(decide([attempt("a"), done], analytics(row(T0, U1, requests=2)))).reason == "no_usage"


def test_a_remainder_priced_above_the_ceiling_stays_open_and_says_so():
    verdict = one(decide([attempt("a", ceiling=1000)], analytics(row(T0, U1))))
    assert verdict.reason == "above_ceiling"
    assert "above its ceiling of $0.000001" in verdict.message


def test_rows_of_two_geos_in_one_span_stay_open():
    report = analytics(row(T0, U1), row(T0, U2, geo="us"))
    a, b = attempt("a"), attempt("b", T0 + 3 * SECONDS)
    assert {v.reason for v in decide([a, b], report)} == {"mixed_modifiers"}


def test_console_usage_with_no_key_id_is_not_the_keys():
    verdict = one(decide([attempt("a")], analytics(row(T0, U1), row(T0, U2, key=None))))
    assert verdict.usage == U1


def test_settled_attempts_alone_give_no_verdict():
    assert decide([attempt("done", state="settled", usage=U1)], analytics(row(T0, U1))) == []


def test_ledger_usage_without_the_cache_write_split_cannot_be_taken_away():
    assert pu.usage_from_ledger('{"input_tokens": 5, "output_tokens": 1, "cache_creation_input_tokens": 9}') is None
    assert pu.usage_from_ledger(
        '{"input_tokens": 5, "output_tokens": 1, "cache_creation_input_tokens": 9, "cache_creation": {"ephemeral_5m_input_tokens": 9}}'
    ) == pu.Usage(input=5, write_5m=9, output=1)


def test_counts_a_report_proved_are_taken_away_by_a_later_span():
    proven = pu.proven_usage_json(U2)
    row_ = {"id": "p", "account": "work", "created_at": T0.isoformat(), "requested_model": HAIKU, "state": "settled",
            "outcome": "stream_closed", "cost_nusd": 5, "ceiling_nusd": CEILING, "usage_json": proven,
            "outcome_at": (T0 + 20 * SECONDS).isoformat(), "settled_at": LATER.isoformat()}
    assert pu.Attempt.from_row(row_).usage == U2
    assert pu.Attempt.from_row({**row_, "usage_json": '{"input_tokens": 1, "output_tokens": 1}'}).usage is None


def test_open_attempts_an_hour_apart_are_read_as_separate_windows_with_a_margin():
    from llm_accounts.provider.settle import MARGIN, windows

    at = [T0, T0 + dt.timedelta(minutes=50), T0 + dt.timedelta(minutes=200)]
    got = windows([{"created_at": t.isoformat()} for t in at])
    assert got == [
        (minute(T0 - MARGIN), minute(at[1] + MARGIN) + pu.MINUTE),
        (minute(at[2] - MARGIN), minute(at[2] + MARGIN) + pu.MINUTE),
    ]


def test_an_attempt_quoted_under_a_revision_this_version_does_not_ship_stays_open_unpriced():
    mine = dataclasses.replace(attempt("a"), price_revision="anthropic-1999-01-01")
    verdict = one(decide([mine], analytics(row(T0, U1)), price=pu.price_with_revision))
    assert verdict.reason == "unpriced"


def test_on_the_legacy_report_a_complete_answer_sharing_the_span_keeps_the_attempt_open():
    # Before: the complete answer's row, still late, was taken away from a total that did not hold
    # it, settling the attempt low by the answer's bill (found by bench/daily_provider.py).
    done = attempt("done", T0 + 5 * SECONDS, "settled", usage=pu.Usage(input=10, output=2))
    verdict = one(decide([attempt("a"), done], legacy(row(T0, U1)), dedicated=True))
    assert verdict.reason == "legacy_group"
    assert isinstance(one(decide([attempt("a")], legacy(row(T0, U1)), dedicated=True)), pu.Settle)
