"""What warm prefixes did this credit period, as the ledger counts it and ``llm accounts status``
shows it (docs/architecture.md "Warm prefixes"): new conversations with a one-hour prefix that
bound warm or cold, and what cache reads saved against base input."""

import datetime as dt
import json

import pytest
from click.testing import CliRunner

from llm_accounts import clock
from llm_accounts.cli import accounts
from llm_accounts.declarations import Account, load_declaration
from llm_accounts.ledger import Complete, Ledger, Refused, Scope
from llm_accounts.pricing import prices
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
MODEL = "claude-sonnet-4-5-20250929"
CERT = "c" * 64
REVISION = prices.current_revision()
RATES = REVISION.model(MODEL).rates
LONG_THRESHOLD, LONG_RATES = REVISION.model(MODEL).long_context


def quote(cert=None, ceiling=NANO // 100):
    return Quote(MODEL, ceiling, REVISION.id, "ab" * 32, cert=cert)


def conv(name):
    return Scope("conversation", name)


def usage(read=0, write_1h=0, fresh=10):
    return {
        "input_tokens": fresh,
        "output_tokens": 5,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write_1h,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": write_1h},
    }


@pytest.fixture
def ledger(tmp_path):
    with Ledger(tmp_path / "ledger.db") as ledger:
        yield ledger


WORK, HOME = Account("work", "WORK_KEY", NANO), Account("home", "HOME_KEY", NANO)


def warm_up(ledger, at=T0):
    ledger.reserve(conv("w0"), "w0", quote(CERT), [WORK, HOME], pinned="work", now=at)
    ledger.settle("w0", Complete(5, usage(write_1h=2000), MODEL), cert=CERT, now=at)


def binding_warm(ledger, scope):
    return ledger._conn.execute("SELECT warm FROM binding WHERE scope_id = ?", (scope,)).fetchone()[0]


def test_a_new_conversation_that_binds_where_its_prefix_is_warm_counts_warm(ledger):
    warm_up(ledger)
    ledger.reserve(conv("busy"), "b1", quote(ceiling=NANO // 4), [WORK], now=T0)  # work is behind on pace
    ledger.reserve(conv("c1"), "a1", quote(CERT), [WORK, HOME], now=T0)
    assert binding_warm(ledger, "c1") == 1
    assert ledger.warm_summary(now=T0)["work"][:2] == (1, 0)


def test_a_new_conversation_with_a_one_hour_prefix_and_no_warm_account_counts_cold(ledger):
    ledger.reserve(conv("c1"), "a1", quote(CERT), [WORK, HOME], now=T0)
    assert binding_warm(ledger, "c1") == 0
    assert ledger.warm_summary(now=T0)["home"][:2] == (0, 1)


def test_a_conversation_without_a_one_hour_prefix_or_pinned_counts_neither(ledger):
    ledger.reserve(conv("c1"), "a1", quote(), [WORK, HOME], now=T0)
    ledger.reserve(conv("c2"), "a2", quote(CERT), [WORK, HOME], pinned="work", now=T0)
    assert (binding_warm(ledger, "c1"), binding_warm(ledger, "c2")) == (None, None)
    assert ledger.warm_summary(now=T0) == {}


def test_a_bound_conversations_later_turn_counts_nothing_more(ledger):
    ledger.reserve(conv("c1"), "a1", quote(CERT), [WORK, HOME], now=T0)
    ledger.reserve(conv("c1"), "a2", quote(CERT), [WORK, HOME], now=T0)
    assert sum(w + c for w, c, _ in ledger.warm_summary(now=T0).values()) == 1


def test_the_counts_are_the_current_credit_periods(ledger):
    ledger.reserve(conv("c1"), "a1", quote(CERT), [WORK, HOME], now=T0)
    assert ledger.warm_summary(now=dt.datetime(2026, 11, 30, 0, 0, tzinfo=UTC)) == {}  # period 2026-12


def test_cache_reads_save_base_input_minus_their_price(ledger):
    ledger.reserve(conv("c1"), "a1", quote(CERT), [WORK], now=T0)
    ledger.settle("a1", Complete(5, usage(read=2500), MODEL), cert=CERT, now=T0)
    assert ledger.warm_summary(now=T0)["work"][2] == 2500 * (RATES.input - RATES.cache_read)


def test_cache_reads_in_a_long_context_request_save_at_its_tier(ledger):
    ledger.reserve(conv("c1"), "a1", quote(CERT), [WORK], now=T0)
    ledger.settle("a1", Complete(5, usage(read=LONG_THRESHOLD, fresh=1), MODEL), cert=CERT, now=T0)
    assert ledger.warm_summary(now=T0)["work"][2] == LONG_THRESHOLD * (LONG_RATES.input - LONG_RATES.cache_read)


def test_an_attempt_without_cache_reads_saves_nothing(ledger):
    ledger.reserve(conv("c1"), "a1", quote(CERT), [WORK], now=T0)
    ledger.settle("a1", Complete(5, usage(write_1h=2000), MODEL), cert=CERT, now=T0)
    assert ledger.warm_summary(now=T0)["work"][2] == 0


DECLARATION = json.dumps(
    [{"name": "work", "key_env": "WORK_KEY", "budget_usd": "1.00"}, {"name": "home", "key_env": "HOME_KEY", "budget_usd": "1.00"}]
)


@pytest.fixture
def declared(monkeypatch, ledger_path):
    monkeypatch.setenv("ANTHROPIC_ACCOUNTS", DECLARATION)
    monkeypatch.setattr(clock, "now", lambda: T0)
    return load_declaration().accounts


def two_conversations(declared):
    """One cold (the first with the prefix), one warm (where the first wrote it), the warm one
    reading 100,000 tokens: $0.30 at base input, $0.03 as reads, so the cache saved $0.27."""
    with Ledger() as ledger:
        ledger.reserve(conv("c1"), "a1", quote(CERT), declared, now=T0)
        ledger.settle("a1", Complete(5, usage(write_1h=2000), MODEL), cert=CERT, now=T0)
        ledger.reserve(conv("c2"), "a2", quote(CERT), declared, now=T0)
        ledger.settle("a2", Complete(5, usage(read=100_000, fresh=0), MODEL), cert=CERT, now=T0)


def test_status_says_how_many_new_conversations_bound_warm_and_cold_and_what_the_cache_saved(declared):
    two_conversations(declared)
    saved = 100_000 * (RATES.input - RATES.cache_read)
    result = CliRunner().invoke(accounts, ["status"], catch_exceptions=False)
    assert "1 bound warm, 1 cold; the cache saved $0.27" in result.output
    data = json.loads(CliRunner().invoke(accounts, ["status", "--json"], catch_exceptions=False).output)
    assert (data["warm_prefix"]["bound_warm"], data["warm_prefix"]["bound_cold"], data["warm_prefix"]["cache_saved_nusd"]) == (
        1, 1, saved
    )


def test_a_new_conversation_that_moved_on_counts_once_on_the_account_it_now_binds(ledger):
    first = ledger.reserve(conv("c1"), "a1", quote(CERT), [WORK, HOME], now=T0)
    ledger.settle("a1", Refused("rate_limited", 429, "rate_limit_error", "other", "rate_limited"), now=T0)
    moved = ledger.reserve(conv("c1"), "a2", quote(CERT), [WORK, HOME], exclude=(first.account,), now=T0)
    summary = ledger.warm_summary(now=T0)
    assert (summary[first.account][:2], summary[moved.account][:2]) == ((0, 0), (0, 1))


@pytest.mark.asyncio
async def test_the_dashboard_shows_the_warm_and_cold_counts_and_what_the_cache_saved(declared, ledger_path):
    from datasette.app import Datasette

    two_conversations(declared)
    ds = Datasette([str(ledger_path)])
    (ledger,) = (await ds.client.get("/-/llm-accounts.json")).json()["ledgers"]
    saved = 100_000 * (RATES.input - RATES.cache_read)
    by_account = {row["account"]: row for row in ledger["warm_prefix"]}
    assert sum(row["bound_warm"] for row in by_account.values()) == 1
    assert sum(row["bound_cold"] for row in by_account.values()) == 1
    assert sum(row["cache_saved"]["nusd"] for row in by_account.values()) == saved
    html = (await ds.client.get("/-/llm-accounts")).text
    assert "Warm prefixes, credit period 2026-11" in html and "$0.27" in html
