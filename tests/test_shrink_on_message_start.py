"""Once ``message_start`` has counted a request's input, only its output is still unknown, and
max_tokens bounds it: the hold shrinks to the exact input cost plus max_tokens at the output rate,
in one ledger write; a final usage that counts otherwise settles at the truth and blocks the
account (docs/pricing.md "Shrinking a hold on message_start").

The rule itself (``pricing.counted_hold``) first, then the ledger's write on both backends.
"""

import datetime as dt
import json
import os
import signal
import subprocess
import sys

import pytest
from hypothesis import given, strategies as st

from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.ledger import Complete, Ledger, Scope, Unknown
from llm_accounts.pricing import prices
from llm_accounts.money import NANO, usd_fine
from routed_helpers import attempts, llm_cli
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

HAIKU = "claude-haiku-4-5-20251001"
SONNET_46 = "claude-sonnet-4-6"
NOW = dt.datetime(2028, 2, 29, 23, 59, tzinfo=dt.timezone.utc)  # a leap day, the period's last minute
WORK = Account("work", "WORK_KEY", 20 * NANO)


def body(model=HAIKU, max_tokens=1000, **extra):
    return json.dumps({"model": model, "max_tokens": max_tokens,
                       "messages": [{"role": "user", "content": "hi"}], **extra}).encode()


def start_usage(fresh, written=0, read=0, **extra):
    return {"input_tokens": fresh, "cache_creation_input_tokens": written, "cache_read_input_tokens": read,
            "cache_creation": {"ephemeral_5m_input_tokens": written, "ephemeral_1h_input_tokens": 0},
            "output_tokens": 1, "service_tier": "standard", **extra}


def hold_of(usage, request=None, model=HAIKU):
    request = request or body()
    quote = prices.quote(request)
    return prices.counted_hold(usage, model, request, None, quote.max_output, quote.ceiling_nusd)


# The rule -----------------------------------------------------------------------------------


def test_the_hold_is_the_counted_input_at_its_rates_plus_max_tokens_of_output():
    # Haiku 4.5: $1 a million input tokens, $1.25 to write 5 m, $0.10 to read, $5 output.
    hold = hold_of(start_usage(3, written=2000, read=10_000))
    assert hold.hold_nusd == 3 * 1000 + 2000 * 1250 + 10_000 * 100 + 1000 * 5000
    assert hold.hold_tokens == 3 + 2000 + 10_000 + 1000
    assert hold.counts == {"input_tokens": 3, "cache_creation_input_tokens": 2000, "cache_read_input_tokens": 10_000,
                           "cache_creation": {"ephemeral_5m_input_tokens": 2000, "ephemeral_1h_input_tokens": 0}}


def test_a_three_token_prompt_on_the_default_model_holds_cents_not_dollars():
    request = body(SONNET_46, 8192)
    quote = prices.quote(request)
    hold = prices.counted_hold(start_usage(3), SONNET_46, request, None, quote.max_output, quote.ceiling_nusd)
    # Sonnet 4.6 at $3 in, $15 out, times the 1.1 a "us" workspace may be billed at.
    assert hold.hold_nusd == (3 * 3000 + 8192 * 15_000) * 11 // 10
    assert hold.hold_nusd * 25 < quote.ceiling_nusd


def test_a_request_pinned_to_the_global_geo_holds_without_the_us_multiplier():
    request = body(SONNET_46, 100, inference_geo="global")
    quote = prices.quote(request)
    hold = prices.counted_hold(start_usage(10), SONNET_46, request, None, quote.max_output, quote.ceiling_nusd)
    assert hold.hold_nusd == 10 * 3000 + 100 * 15_000


def test_input_past_the_long_context_threshold_holds_at_the_long_context_rates():
    model = "claude-haiku-5-5"
    request = body(model, 100, inference_geo="global")
    quote = prices.quote(request)
    price = prices.current_revision().model(model)
    threshold, rates = price.long_context
    hold = prices.counted_hold(start_usage(threshold + 1), model, request, None, quote.max_output, quote.ceiling_nusd)
    assert hold.hold_nusd == (threshold + 1) * rates.input + 100 * rates.output


def test_a_request_with_a_server_tool_keeps_its_ceiling():
    tools = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 1}]
    assert hold_of(start_usage(3), body(tools=tools)) is None


def test_a_client_tool_does_not_keep_the_ceiling():
    tools = [{"name": "lookup", "input_schema": {"type": "object"}}]
    assert hold_of(start_usage(3), body(tools=tools)) is not None


@pytest.mark.parametrize("usage", [
    {"cache_read_input_tokens": 5},  # no input_tokens
    start_usage(3, service_tier="priority"),
    start_usage(3, speed="fast"),
    start_usage(3, inference_geo="mars"),
    start_usage(3, cache_creation_input_tokens=7),  # its TTL breakdown no longer adds up
    start_usage(3, server_tool_use={"web_search_requests": 1}),
    start_usage(3, surprise_tokens=9),
    "not an object",
])
def test_counts_that_are_not_an_exact_bound_keep_the_ceiling(usage):
    assert hold_of(usage) is None


def test_a_served_model_the_revision_does_not_price_keeps_the_ceiling():
    assert hold_of(start_usage(3), model="claude-unknown-9") is None


def test_a_hold_that_would_not_be_below_the_ceiling_keeps_the_ceiling():
    window = prices.current_revision().model(HAIKU).context_window
    # A request with a one-hour mark whose whole window is written for an hour: the dearest input
    # rate on every token, as the ceiling.
    marked = body(cache_control={"type": "ephemeral", "ttl": "1h"})
    usage = {**start_usage(0), "cache_creation_input_tokens": window,
             "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": window}}
    assert hold_of(usage, marked) is None
    assert hold_of({**usage, "cache_creation_input_tokens": window - 1,
                    "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": window - 1}}, marked)
    # Without a mark the ceiling prices the window fresh: all of it fresh is the ceiling again.
    assert hold_of(start_usage(window)) is None
    assert hold_of(start_usage(window - 1))


@given(
    fresh=st.integers(0, 150_000), written=st.integers(0, 40_000), read=st.integers(0, 40_000),
    max_tokens=st.integers(1, 64_000), output=st.integers(0, 64_000),
)
def test_no_final_usage_with_the_counted_input_and_output_within_max_tokens_costs_more_than_the_hold(
    fresh, written, read, max_tokens, output
):
    output = min(output, max_tokens)
    request = body(HAIKU, max_tokens)
    quote = prices.quote(request)
    usage = start_usage(fresh, written, read)
    hold = prices.counted_hold(usage, HAIKU, request, None, quote.max_output, quote.ceiling_nusd)
    final = {**usage, "output_tokens": output}
    cost = prices.settlement_cost(final, HAIKU, request, None)
    assert cost <= hold.hold_nusd < quote.ceiling_nusd
    assert not prices.contradicts(hold.counts, final)
    if output == max_tokens:
        assert cost == hold.hold_nusd


@pytest.mark.parametrize("field", prices.COUNTED_INPUT_FIELDS)
def test_a_final_usage_counting_any_input_field_otherwise_contradicts_the_counts(field):
    counts = {"input_tokens": 3, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    assert not prices.contradicts(counts, {"input_tokens": 3, "output_tokens": 50})
    assert prices.contradicts(counts, {**counts, field: counts[field] + 1, "output_tokens": 50})


# The ledger's write, on both backends -------------------------------------------------------


@pytest.fixture
def ledger(ledger_location):
    with Ledger(ledger_location) as opened:
        yield opened


def reserve(ledger, attempt_id="a1"):
    quote = prices.quote(body())
    ledger.reserve(Scope("conversation", attempt_id), attempt_id, quote, [WORK], now=NOW)
    return quote


def row_of(ledger, attempt_id="a1"):
    [row] = [r for r in ledger.attempts() if r["id"] == attempt_id]
    return row


def held(ledger):
    [status] = ledger.status([WORK], now=NOW)
    return status.open_ceiling_nusd


def test_a_shrink_lowers_the_hold_and_the_months_open_total_in_one_write(ledger):
    quote = reserve(ledger)
    hold = hold_of(start_usage(3))
    assert ledger.shrink("a1", hold.hold_nusd, hold.hold_tokens, hold.counts, now=NOW) == "shrunk"
    row = row_of(ledger)
    assert (row["state"], row["ceiling_nusd"], row["reserved_nusd"]) == ("open", hold.hold_nusd, quote.ceiling_nusd)
    assert row["ceiling_tokens"] == hold.hold_tokens
    assert json.loads(row["counted_json"]) == hold.counts
    assert held(ledger) == hold.hold_nusd
    assert ledger.audit() == []


def test_an_interrupted_stream_keeps_only_the_shrunk_hold(ledger):
    reserve(ledger)
    hold = hold_of(start_usage(3))
    ledger.shrink("a1", hold.hold_nusd, hold.hold_tokens, hold.counts, now=NOW)
    assert ledger.settle("a1", Unknown("cancelled"), now=NOW) == "still_open"
    assert (row_of(ledger)["ceiling_nusd"], held(ledger)) == (hold.hold_nusd, hold.hold_nusd)
    assert ledger.audit() == []


def test_a_hold_shrinks_once(ledger):
    reserve(ledger)
    hold = hold_of(start_usage(3))
    ledger.shrink("a1", hold.hold_nusd, hold.hold_tokens, hold.counts, now=NOW)
    assert ledger.shrink("a1", hold.hold_nusd - 1, hold.hold_tokens, hold.counts, now=NOW) == "unchanged"
    assert row_of(ledger)["ceiling_nusd"] == hold.hold_nusd


def test_a_shrink_never_raises_a_hold(ledger):
    quote = reserve(ledger)
    hold = hold_of(start_usage(3))
    assert ledger.shrink("a1", quote.ceiling_nusd + 1, hold.hold_tokens, hold.counts, now=NOW) == "unchanged"
    assert row_of(ledger)["ceiling_nusd"] == quote.ceiling_nusd


def test_a_settled_attempt_is_not_shrunk(ledger):
    reserve(ledger)
    usage = {**start_usage(3), "output_tokens": 10}
    ledger.settle("a1", Complete(prices.settlement_cost(usage, HAIKU, body(), None), usage, HAIKU), now=NOW)
    hold = hold_of(start_usage(3))
    assert ledger.shrink("a1", hold.hold_nusd, hold.hold_tokens, hold.counts, now=NOW) == "unchanged"
    assert ledger.audit() == []


def test_a_complete_answer_that_agrees_with_the_counts_settles_without_a_block(ledger):
    reserve(ledger)
    hold = hold_of(start_usage(3))
    ledger.shrink("a1", hold.hold_nusd, hold.hold_tokens, hold.counts, now=NOW)
    usage = {**start_usage(3), "output_tokens": 1000}
    cost = prices.settlement_cost(usage, HAIKU, body(), None)
    assert ledger.settle("a1", Complete(cost, usage, HAIKU), now=NOW) == "settled"
    [status] = ledger.status([WORK], now=NOW)
    assert (status.blocked_reason, status.open_ceiling_nusd, status.settled_nusd) == (None, 0, cost)
    assert ledger.audit() == []


def test_final_input_counts_that_differ_settle_at_the_truth_and_block_the_account(ledger):
    reserve(ledger)
    hold = hold_of(start_usage(3))
    ledger.shrink("a1", hold.hold_nusd, hold.hold_tokens, hold.counts, now=NOW)
    usage = {**start_usage(1003), "output_tokens": 10}  # cheaper than the hold, but counted otherwise
    cost = prices.settlement_cost(usage, HAIKU, body(), None)
    assert cost < hold.hold_nusd
    assert ledger.settle("a1", Complete(cost, usage, HAIKU), now=NOW) == "settled"
    [status] = ledger.status([WORK], now=NOW)
    assert (status.blocked_reason, status.settled_nusd) == ("settlement_conflict", cost)


def test_a_cost_above_the_shrunk_hold_settles_at_the_truth_and_blocks_the_account(ledger):
    reserve(ledger)
    hold = hold_of(start_usage(3))
    ledger.shrink("a1", hold.hold_nusd, hold.hold_tokens, hold.counts, now=NOW)
    usage = {**start_usage(3), "output_tokens": 5000}  # past max_tokens: no bound holds
    cost = prices.settlement_cost(usage, HAIKU, body(), None)
    assert cost > hold.hold_nusd
    ledger.settle("a1", Complete(cost, usage, HAIKU), now=NOW)
    [status] = ledger.status([WORK], now=NOW)
    assert (status.blocked_reason, status.settled_nusd) == ("ceiling_exceeded", cost)


def test_the_room_a_shrink_frees_admits_the_next_prompt(ledger):
    quote = prices.quote(body())
    tight = Account("work", "WORK_KEY", quote.ceiling_nusd + quote.ceiling_nusd // 2)
    ledger.reserve(Scope("conversation", "a1"), "a1", quote, [tight], now=NOW)
    with pytest.raises(Exception) as refused:
        ledger.reserve(Scope("conversation", "a2"), "a2", quote, [tight], now=NOW)
    assert refused.value.code == "budget_exhausted"
    hold = hold_of(start_usage(3))
    ledger.shrink("a1", hold.hold_nusd, hold.hold_tokens, hold.counts, now=NOW)
    assert ledger.reserve(Scope("conversation", "a2"), "a2", quote, [tight], now=NOW).account == "work"
    assert ledger.audit() == []


# Through llm, on the stand-in's real SSE bytes ------------------------------------------------

ROUTED = "claude-routed/claude-haiku-4-5"
LONG_PROMPT = "Tell me everything about " + " ".join(f"topic{n}" for n in range(40))


def llm_process(*args, **popen):
    return subprocess.Popen([sys.executable, "-m", "llm", *args], env=dict(os.environ), **popen)


def interrupted_after_output(*args):
    """A real ``llm`` process sent SIGINT once its answer has started; its stderr."""
    child = llm_process(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout.read(1)  # output has started: message_start was read before it
        child.send_signal(signal.SIGINT)
        return child.communicate(timeout=60)[1].decode()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_ctrl_c_mid_stream_keeps_only_the_counted_input_and_max_tokens_of_output(accounts, ledger_path):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "slow", delay=0.5)
    stderr = interrupted_after_output("-m", ROUTED, LONG_PROMPT, "-o", "max_tokens", "300")
    [row] = attempts(ledger_path)
    counts = json.loads(row["counted_json"])
    assert row["state"] == "open" and row["outcome"] in ("cancelled", "stream_closed")
    assert row["ceiling_nusd"] == counts["input_tokens"] * 1000 + 300 * 5000
    assert row["reserved_nusd"] == prices.quote(body(HAIKU, 300)).ceiling_nusd  # what was reserved before sending
    assert usd_fine(row["ceiling_nusd"]) in stderr  # the held-open line names what is still held


def test_a_whole_prompt_that_is_not_streamed_keeps_its_ceiling_until_its_answer(accounts, ledger_path):
    result = llm_cli("-m", ROUTED, "hello", "--no-stream")
    assert result.exit_code == 0, result.output
    [row] = attempts(ledger_path)
    assert (row["state"], row["counted_json"], row["reserved_nusd"]) == ("settled", None, None)


def test_a_streamed_answer_that_agrees_with_its_counts_settles_at_its_cost(accounts, ledger_path):
    result = llm_cli("-m", ROUTED, "hello")
    assert result.exit_code == 0, result.output
    [row] = attempts(ledger_path)
    assert row["state"] == "settled" and row["counted_json"] is not None
    assert json.loads(row["counted_json"])["input_tokens"] == json.loads(row["usage_json"])["input_tokens"]
    assert row["cost_nusd"] <= row["ceiling_nusd"] < row["reserved_nusd"]
    with Ledger(ledger_path) as ledger:
        assert {s.blocked_reason for s in ledger.status()} == {None}


def test_final_counts_above_message_starts_block_the_account_and_say_so(accounts, ledger_path):
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "counts_grow")
    result = llm_cli("-m", ROUTED, "hello")
    [row] = attempts(ledger_path)
    usage = json.loads(row["usage_json"])
    assert usage["input_tokens"] == json.loads(row["counted_json"])["input_tokens"] + 1000
    assert row["state"] == "settled"
    assert row["cost_nusd"] == prices.settlement_cost(usage, HAIKU, None, None)
    with Ledger(ledger_path) as ledger:
        blocked = {s.name: s.blocked_reason for s in ledger.status()}
    assert blocked[row["account"]] == "settlement_conflict"
    assert f"account '{row['account']}' is blocked (settlement_conflict)" in result.stderr


def test_room_freed_by_a_shrink_admits_a_prompt_while_the_first_still_streams(accounts, ledger_path, user_path):
    ceiling = prices.quote(body(HAIKU, 300)).ceiling_nusd
    save_accounts_file([Account("alpha", "ALPHA_KEY", ceiling + ceiling // 2)], None)
    accounts.set_behaviour("alpha", "slow", delay=0.5)
    first = llm_process("-m", ROUTED, LONG_PROMPT, "-o", "max_tokens", "300", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert first.stdout.read(1)  # streaming: its hold has shrunk
        accounts.set_behaviour("alpha", "ok")
        second = llm_cli("-m", ROUTED, "hello", "-o", "max_tokens", "300", "-o", "wait", "0")
        assert second.exit_code == 0, second.output
        assert first.poll() is None  # the first prompt is still answering
    finally:
        first.kill()
        first.wait()


def test_a_cancelled_async_stream_keeps_only_the_shrunk_hold(accounts, ledger_path):
    import asyncio

    import llm

    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "slow", delay=0.5)

    async def run():
        started = asyncio.Event()

        async def consume():
            async for _ in llm.get_async_model(ROUTED).prompt(LONG_PROMPT, max_tokens=300):
                started.set()

        task = asyncio.ensure_future(consume())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    [row] = attempts(ledger_path)
    assert (row["state"], row["outcome"]) == ("open", "cancelled")
    assert row["ceiling_nusd"] == json.loads(row["counted_json"])["input_tokens"] * 1000 + 300 * 5000


def test_ctrl_c_mid_stream_keeps_only_the_shrunk_hold_on_a_postgresql_ledger(accounts, pg_url, monkeypatch):
    monkeypatch.setenv("LLM_ACCOUNTS_LEDGER", pg_url)
    for name in ("alpha", "beta"):
        accounts.set_behaviour(name, "slow", delay=0.5)
    interrupted_after_output("-m", ROUTED, LONG_PROMPT, "-o", "max_tokens", "300")
    with Ledger(pg_url) as ledger:
        [row] = ledger.attempts()
        assert ledger.audit() == []
    assert row["state"] == "open"
    assert row["ceiling_nusd"] == json.loads(row["counted_json"])["input_tokens"] * 1000 + 300 * 5000


def test_a_prompts_cost_holds_the_shrunk_hold_and_its_record_keeps_what_was_reserved():
    from llm_accounts.pricing.cost import cost_from_routing

    routing = {"account": "alpha", "attempts": [
        {"id": "a1", "account": "alpha", "outcome": "cancelled", "cost_nusd": None, "ceiling_nusd": 720_000_000,
         "held_nusd": 1_503_000},
        {"id": "a2", "account": "alpha", "outcome": "stream_closed", "cost_nusd": None, "ceiling_nusd": 720_000_000},
    ]}
    assert cost_from_routing(routing).held_nusd == 1_503_000 + 720_000_000
