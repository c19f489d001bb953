"""Health and warm prefixes as the ledger records them (architecture.md "Failure classes and health";
ADR-0126 Amendment 5, Decisions 3-5)."""

import datetime as dt

import pytest

from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete, Ledger, NotSent, Refused, Scope, Unknown
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
MODEL = "claude-sonnet-4-5-20250929"
CERT = "c" * 64
RATE_LIMITED = Refused("rate_limited", 429, "rate_limit_error", "other", "rate_limited")


def later(seconds):
    return T0 + dt.timedelta(seconds=seconds)


def quote(ceiling=NANO // 100, cert=None):
    return Quote(MODEL, ceiling, "2026-11-01", "ab" * 32, cert=cert)


def conv(name):
    return Scope("conversation", name)


def usage(read=0, write_1h=0, write_5m=0):
    return {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write_1h + write_5m,
        "cache_creation": {"ephemeral_5m_input_tokens": write_5m, "ephemeral_1h_input_tokens": write_1h},
    }


@pytest.fixture
def ledger(ledger_location):
    """The same rules on both backends (docs/architecture.md "Ledger on PostgreSQL")."""
    with Ledger(ledger_location) as ledger:
        yield ledger


def health_row(ledger, account="work"):
    return ledger._conn.execute("SELECT * FROM health WHERE account = ?", (account,)).fetchone()


def warm_rows(ledger):
    return {
        (r["account"], r["cert"]): (r["stable_tokens"], r["expires_at"])
        for r in ledger._conn.execute("SELECT * FROM warm_prefix")
    }


def fail_with_rate_limit(ledger, accounts, attempt_id="f1", scope="c1", at=T0):
    ledger.reserve(conv(scope), attempt_id, quote(), accounts, now=at)
    ledger.settle(attempt_id, RATE_LIMITED, now=at)


# Health


def test_a_rate_limited_bound_conversation_is_refused_while_its_account_cools(ledger, work):
    fail_with_rate_limit(ledger, [work])
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a2", quote(), [work], now=later(1))
    assert (caught.value.code, caught.value.account) == ("rate_limited", "work")
    assert "cooling until 12:00:02 UTC" in caught.value.message
    assert caught.value.retry_at == later(2)


def test_a_cooling_account_is_not_a_candidate_for_a_new_conversation(ledger, work, home):
    fail_with_rate_limit(ledger, [work])
    assert ledger.reserve(conv("c2"), "a2", quote(), [work, home], now=later(1)).account == "home"
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c3"), "a3", quote(), [work], now=later(1))
    assert caught.value.code == "no_account_available"


def test_after_the_cooldown_exactly_one_attempt_is_the_probe(ledger, work):
    fail_with_rate_limit(ledger, [work])
    probe = ledger.reserve(conv("c1"), "p1", quote(), [work], now=later(60))
    assert probe.probe
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a3", quote(), [work], now=later(61))
    assert "probe attempt is in flight" in caught.value.message


def test_admitting_the_probe_leaves_the_health_row_as_it_was(ledger, work):
    fail_with_rate_limit(ledger, [work])
    before = tuple(health_row(ledger))
    assert ledger.reserve(conv("c1"), "p1", quote(), [work], now=later(60)).probe
    assert tuple(health_row(ledger)) == before


def test_a_probe_cycle_writes_the_health_row_once_with_the_probes_outcome(ledger, work):
    fail_with_rate_limit(ledger, [work])
    ledger.reserve(conv("c1"), "p1", quote(), [work], now=later(60))
    ledger.settle("p1", RATE_LIMITED, now=later(61))
    row = health_row(ledger)
    assert (row["state"], row["cooldown_until"], row["probe_attempt_id"]) == ("failing", later(121).isoformat(), "p1")


def test_a_probe_that_ends_without_a_verdict_leaves_the_health_row_as_it_was(ledger, work):
    fail_with_rate_limit(ledger, [work])
    before = tuple(health_row(ledger))
    ledger.reserve(conv("c1"), "p1", quote(), [work], now=later(60))
    ledger.settle("p1", Unknown("cancelled"), now=later(61))
    assert tuple(health_row(ledger)) == before
    assert ledger.reserve(conv("c1"), "p2", quote(), [work], now=later(62)).probe


def test_the_probes_success_clears_the_failure(ledger, work):
    fail_with_rate_limit(ledger, [work])
    ledger.reserve(conv("c1"), "p1", quote(), [work], now=later(60))
    ledger.settle("p1", Complete(5, usage(), MODEL), now=later(61))
    row = health_row(ledger)
    assert (row["state"], row["cooldown_until"], row["probe_attempt_id"]) == ("ok", None, "p1")
    assert not ledger.reserve(conv("c1"), "a3", quote(), [work], now=later(62)).probe


def test_the_probes_failure_starts_a_new_dwell(ledger, work):
    fail_with_rate_limit(ledger, [work])
    ledger.reserve(conv("c1"), "p1", quote(), [work], now=later(60))
    ledger.settle("p1", RATE_LIMITED, now=later(61))
    assert health_row(ledger)["cooldown_until"] == later(121).isoformat()
    with pytest.raises(AccountsError):
        ledger.reserve(conv("c1"), "a3", quote(), [work], now=later(120))


def test_a_probe_cancelled_by_its_caller_frees_the_slot_for_another(ledger, work):
    fail_with_rate_limit(ledger, [work])
    ledger.reserve(conv("c1"), "p1", quote(), [work], now=later(60))
    ledger.settle("p1", NotSent(caller_cancelled=True), now=later(61))
    assert ledger.reserve(conv("c1"), "p2", quote(), [work], now=later(62)).probe


def test_a_probe_whose_process_died_is_given_up_after_its_lease(ledger, work):
    fail_with_rate_limit(ledger, [work])
    ledger.reserve(conv("c1"), "p1", quote(), [work], now=later(60))  # never settled
    assert ledger.reserve(conv("c1"), "p2", quote(), [work], now=later(60 + 601)).probe


def test_a_failure_of_the_same_class_while_cooling_does_not_rewrite_the_row(ledger, work, home):
    ledger.reserve(conv("c1"), "a1", quote(), [work], now=T0)
    ledger.reserve(conv("c2"), "a2", quote(), [work], pinned="work", now=T0)
    ledger.settle("a1", RATE_LIMITED, now=T0)
    before = tuple(health_row(ledger))
    ledger.settle("a2", RATE_LIMITED, now=later(1))
    assert tuple(health_row(ledger)) == before


def test_a_complete_settlement_supersedes_a_failure_recorded_as_its_attempt_was_admitted(ledger, work):
    ledger.reserve(conv("c2"), "f1", quote(), [work], now=T0)
    ledger.reserve(conv("c1"), "inflight", quote(), [work], now=later(1))
    ledger.settle("f1", RATE_LIMITED, now=later(1))
    ledger.settle("inflight", Complete(5, usage(), MODEL), now=later(2))
    assert health_row(ledger)["state"] == "ok"


def test_semantic_failures_leave_health_alone(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(), [work], now=T0)
    ledger.settle("a1", Refused("request_rejected", 400, "invalid_request_error", "prompt_too_long", "semantic"), now=T0)
    assert health_row(ledger) is None


def host_row(ledger, account="work"):
    return ledger._conn.execute(
        "SELECT * FROM host_health WHERE account = ? AND host = ?", (account, ledger.host)
    ).fetchone()


def transport_failures(ledger, accounts, count, scope="c1", at=T0, prefix="t"):
    for n in range(count):
        ledger.reserve(conv(scope), f"{prefix}{n}", quote(), accounts, now=at + dt.timedelta(seconds=n))
        ledger.settle(f"{prefix}{n}", Unknown("transport_error", "transport"), now=at + dt.timedelta(seconds=n))


def test_three_transport_failures_in_a_row_start_a_dwell_for_the_machine_that_saw_them(ledger, work):
    for n in range(3):
        ledger.reserve(conv("c1"), f"t{n}", quote(), [work], now=later(n))
        ledger.settle(f"t{n}", Unknown("transport_error", "transport"), now=later(n))
        if n < 2:
            assert host_row(ledger)["state"] == "ok"
    assert (host_row(ledger)["state"], host_row(ledger)["cooldown_until"]) == ("failing", later(32).isoformat())
    assert health_row(ledger) is None  # nothing about the account itself
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a4", quote(), [work], now=later(5))
    assert caught.value.code == "transport_error"
    assert "from this machine" in caught.value.message


@pytest.fixture
def machines(ledger_location):
    """Two machines sharing one ledger (docs/architecture.md "Failure classes and health")."""
    with Ledger(ledger_location, host="m1") as m1, Ledger(ledger_location, host="m2") as m2:
        yield m1, m2


def test_transport_failures_on_one_machine_leave_the_account_open_to_the_others(machines, work):
    m1, m2 = machines
    transport_failures(m1, [work], 3)
    with pytest.raises(AccountsError):
        m1.reserve(conv("c2"), "m1-next", quote(), [work], now=later(5))
    reservation = m2.reserve(conv("c3"), "m2-next", quote(), [work], now=later(5))
    assert (reservation.account, reservation.probe) == ("work", False)


def test_a_new_conversation_on_the_machine_that_saw_transport_failures_goes_elsewhere(machines, work, home):
    m1, _ = machines
    transport_failures(m1, [work], 3)
    assert m1.reserve(conv("c2"), "m1-next", quote(), [work, home], now=later(5)).account == "home"


def test_account_failures_seen_from_one_machine_hold_for_every_machine(machines, work):
    m1, m2 = machines
    fail_with_rate_limit(m1, [work])
    with pytest.raises(AccountsError) as caught:
        m2.reserve(conv("c2"), "m2-next", quote(), [work], pinned="work", now=later(1))
    assert caught.value.code == "rate_limited"


def test_a_success_from_the_machine_clears_its_transport_failures(machines, work):
    m1, _ = machines
    transport_failures(m1, [work], 3)
    probe = m1.reserve(conv("c1"), "p1", quote(), [work], now=later(40))
    assert probe.probe
    m1.settle("p1", Complete(5, usage(), MODEL), now=later(41))
    assert host_row(m1)["state"] == "ok"
    assert not m1.reserve(conv("c1"), "a5", quote(), [work], now=later(42)).probe


def test_another_machines_probe_does_not_hold_this_machines_slot(machines, work):
    m1, m2 = machines
    transport_failures(m1, [work], 3)
    transport_failures(m2, [work], 3, scope="c9", prefix="u")
    assert m1.reserve(conv("c1"), "p1", quote(), [work], now=later(40)).probe
    assert m2.reserve(conv("c9"), "p2", quote(), [work], now=later(40)).probe


def test_unblock_clears_every_machines_transport_cooldown(machines, work):
    m1, _ = machines
    transport_failures(m1, [work], 3)
    assert m1.clear_block("u1", "work", "the network is fixed", now=later(5)) == "health_cleared"
    assert not m1.reserve(conv("c1"), "a4", quote(), [work], now=later(6)).probe


def test_a_provider_outage_refuses_with_provider_error(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(), [work], now=T0)
    ledger.settle("a1", Unknown("provider_error", "provider_outage", 529), now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a2", quote(), [work], now=later(1))
    assert caught.value.code == "provider_error"
    assert ledger.reserve(conv("c1"), "a3", quote(), [work], now=later(2)).probe


def test_an_auth_failure_blocks_the_account_until_unblocked(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(), [work], now=T0)
    ledger.settle("a1", Refused("auth_required", 401, "authentication_error", "other", "auth"), now=T0)
    assert ledger._conn.execute("SELECT block_reason FROM account").fetchone()[0] == "auth_failed"
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a2", quote(), [work], now=later(86400))
    assert caught.value.code == "account_blocked"
    ledger.clear_block("u1", "work", "rotated the key", now=later(86400))
    assert health_row(ledger)["state"] == "ok"
    assert not ledger.reserve(conv("c1"), "a3", quote(), [work], now=later(86401)).probe


def test_status_shows_health_and_cooldown(ledger, work):
    fail_with_rate_limit(ledger, [work])
    (line,) = ledger.status([work], now=later(1))
    assert (line.health, line.failure_class, line.http_status, line.cooldown_until) == (
        "cooling", "rate_limited", 429, later(2).isoformat()
    )


# Warm prefixes


def warm_up(ledger, account, accounts, scope="w0", attempt_id="w0", read=0, write_1h=2000, at=T0, **settle):
    ledger.reserve(conv(scope), attempt_id, quote(cert=CERT), accounts, pinned=account, now=at)
    ledger.settle(attempt_id, Complete(5, usage(read, write_1h), MODEL), cert=CERT, now=at, **settle)


def test_a_one_hour_write_records_the_stable_prefix_on_its_account(ledger, work):
    warm_up(ledger, "work", [work], read=500, write_1h=2000)
    assert warm_rows(ledger) == {("work", CERT): (2500, later(3600).isoformat())}


def test_a_write_with_a_one_hour_mark_after_the_key_stores_no_length(ledger, work):
    warm_up(ledger, "work", [work], hour_after_key=True)
    assert warm_rows(ledger)[("work", CERT)][0] is None


def test_a_new_conversation_goes_where_its_prefix_is_warm(ledger, work, home):
    warm_up(ledger, "work", [work, home])
    ledger.reserve(conv("busy"), "b1", quote(NANO // 4), [work], now=T0)  # work is now further ahead of pace
    assert ledger.reserve(conv("c1"), "a1", quote(cert=CERT), [work, home], now=later(10)).account == "work"
    assert ledger.reserve(conv("c2"), "a2", quote(), [work, home], now=later(10)).account == "home"


def test_an_expired_warm_row_is_ignored(ledger, work, home):
    warm_up(ledger, "work", [work, home])
    ledger.reserve(conv("busy"), "b1", quote(NANO // 4), [work], now=T0)
    assert ledger.reserve(conv("c1"), "a1", quote(cert=CERT), [work, home], now=later(3600)).account == "home"


def test_a_warm_account_past_ninety_percent_is_not_preferred(ledger, work, home):
    warm_up(ledger, "work", [work, home])
    # spent 5 (the warm-up) + open + this attempt's NANO // 100 is one nanodollar past 90%
    ledger.reserve(conv("busy"), "b1", quote(9 * NANO // 10 - 5 - NANO // 100 + 1), [work], now=T0)
    assert ledger.reserve(conv("c1"), "a1", quote(cert=CERT), [work, home], now=later(1)).account == "home"


def test_a_warm_account_at_exactly_ninety_percent_is_preferred(ledger, work, home):
    warm_up(ledger, "work", [work, home])
    # spent 5 (the warm-up) + open + this attempt's NANO // 100 is exactly 90% of the budget
    ledger.reserve(conv("busy"), "b1", quote(9 * NANO // 10 - 5 - NANO // 100), [work], now=T0)
    assert ledger.reserve(conv("c1"), "a1", quote(cert=CERT), [work, home], now=later(1)).account == "work"


def test_a_stable_length_read_extends_the_row(ledger, work):
    warm_up(ledger, "work", [work], read=500, write_1h=2000)
    ledger.reserve(conv("c1"), "r1", quote(cert=CERT), [work], now=later(1800))
    ledger.settle("r1", Complete(5, usage(read=2500), MODEL), cert=CERT, now=later(1801))
    assert warm_rows(ledger)[("work", CERT)][1] == later(1800 + 3600).isoformat()


def test_a_read_of_any_other_length_extends_nothing(ledger, work):
    warm_up(ledger, "work", [work], read=500, write_1h=2000)
    for n, read in enumerate((2499, 2501)):
        ledger.reserve(conv("c1"), f"r{n}", quote(cert=CERT), [work], now=later(1800))
        ledger.settle(f"r{n}", Complete(5, usage(read=read), MODEL), cert=CERT, now=later(1801))
    assert warm_rows(ledger)[("work", CERT)][1] == later(3600).isoformat()


def test_a_read_never_creates_a_row(ledger, work):
    ledger.reserve(conv("c1"), "r1", quote(cert=CERT), [work], now=T0)
    ledger.settle("r1", Complete(5, usage(read=2500), MODEL), cert=CERT, now=T0)
    assert warm_rows(ledger) == {}


@pytest.mark.parametrize(
    "evidence",
    [
        RATE_LIMITED,
        Unknown("provider_error", "provider_outage", 500),
        Unknown("stream_error"),
        NotSent(),
        Refused("request_rejected", 400, "invalid_request_error", "prompt_too_long", "semantic"),
    ],
)
def test_a_failure_on_the_account_clears_its_warm_rows(ledger, work, evidence):
    warm_up(ledger, "work", [work])
    ledger.reserve(conv("c1"), "x1", quote(), [work], now=later(1))
    ledger.settle("x1", evidence, now=later(1))
    assert warm_rows(ledger) == {}


@pytest.mark.parametrize("evidence", [Unknown("cancelled"), Unknown("stream_closed"), NotSent(caller_cancelled=True)])
def test_the_callers_own_cancellation_keeps_warm_rows(ledger, work, evidence):
    warm_up(ledger, "work", [work])
    ledger.reserve(conv("c1"), "x1", quote(), [work], now=later(1))
    ledger.settle("x1", evidence, now=later(1))
    assert set(warm_rows(ledger)) == {("work", CERT)}


def test_a_block_clears_warm_rows(ledger, work):
    warm_up(ledger, "work", [work])
    ledger.block("work", now=later(1))
    assert warm_rows(ledger) == {}


def test_unblocking_a_blocked_account_clears_rows_an_older_process_left(ledger, work):
    warm_up(ledger, "work", [work])
    ledger._conn.execute("UPDATE account SET block_reason = 'manual'")  # blocked without clearing
    ledger.clear_block("u1", "work", "checked", now=later(1))
    assert warm_rows(ledger) == {}


def test_unblocking_an_account_that_is_not_blocked_keeps_its_rows(ledger, work):
    warm_up(ledger, "work", [work])
    ledger.clear_block("u1", "work", "checked", now=later(1))
    assert set(warm_rows(ledger)) == {("work", CERT)}


def test_a_blocked_account_writes_no_warm_row(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(cert=CERT), [work], now=T0)
    ledger.block("work", now=T0)
    ledger.settle("a1", Complete(5, usage(write_1h=2000), MODEL), cert=CERT, now=T0)
    assert warm_rows(ledger) == {}


def test_a_write_purges_the_providers_rows_that_expired_over_a_day_ago(ledger, work, home):
    warm_up(ledger, "work", [work, home], scope="old", attempt_id="old", at=T0 - dt.timedelta(hours=27))
    warm_up(ledger, "home", [work, home], scope="new", attempt_id="new", at=T0)
    assert set(warm_rows(ledger)) == {("home", CERT)}


def test_a_warm_row_with_an_unreadable_expiry_counts_as_absent(ledger, work, home):
    warm_up(ledger, "work", [work, home])
    ledger._conn.execute("UPDATE warm_prefix SET expires_at = '2026-11-10T13:00:00'")  # no offset
    ledger.reserve(conv("busy"), "b1", quote(NANO // 4), [work], now=T0)
    assert ledger.reserve(conv("c1"), "a1", quote(cert=CERT), [work, home], now=later(1)).account == "home"


# Out of credit at the provider: one story, never our ledger's budget (architecture.md "Quota exhaustion")

OUT_OF_CREDIT = Refused("request_rejected", 400, "invalid_request_error", "credit_balance_too_low", "quota_exhausted")


def test_an_account_out_of_credit_refuses_later_prompts_saying_so_not_budget_exhausted(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(), [work], now=T0)
    ledger.settle("a1", OUT_OF_CREDIT, now=T0)
    with pytest.raises(AccountsError) as caught:
        ledger.reserve(conv("c1"), "a2", quote(), [work], now=later(60))
    assert caught.value.code == "request_rejected"
    message = caught.value.message
    assert "out of credit at the provider (quota_exhausted)" in message
    assert "until 13:00 UTC" in message
    assert "llm accounts unblock work" in message


# The half-open probe goes out only when no healthy account can take the prompt (architecture.md
# "Failure classes and health")

OUTAGE = Unknown("provider_error", "provider_outage", 500)


def test_a_new_conversation_prefers_a_healthy_account_to_one_whose_cooldown_ended(ledger, work, home):
    ledger.reserve(conv("busy"), "b1", quote(NANO // 2), [home], now=T0)  # home is further ahead of pace
    ledger.reserve(conv("c1"), "f1", quote(), [work], pinned="work", now=T0)
    ledger.settle("f1", OUTAGE, now=T0)
    reservation = ledger.reserve(conv("c2"), "a2", quote(), [work, home], now=later(60))
    assert (reservation.account, reservation.probe) == ("home", False)


def test_the_probe_goes_to_a_new_conversation_when_no_healthy_account_can_take_it(ledger, work, home):
    ledger.reserve(conv("busy"), "b1", quote(NANO - NANO // 200), [home], now=T0)  # home has no room left
    ledger.reserve(conv("c1"), "f1", quote(), [work], pinned="work", now=T0)
    ledger.settle("f1", OUTAGE, now=T0)
    reservation = ledger.reserve(conv("c2"), "a2", quote(), [work, home], now=later(60))
    assert (reservation.account, reservation.probe) == ("work", True)


def test_a_bound_conversation_still_sends_the_probe_to_its_own_account(ledger, work, home):
    ledger.reserve(conv("c1"), "f1", quote(), [work, home], pinned="work", now=T0)
    ledger.settle("f1", OUTAGE, now=T0)
    reservation = ledger.reserve(conv("c1"), "a2", quote(), [work, home], now=later(60))
    assert (reservation.account, reservation.probe) == ("work", True)


# Removed accounts (architecture.md "Ledger")


def test_mark_removed_sets_removed_at_once_and_the_next_admission_clears_it(ledger, work):
    ledger.reserve(conv("c1"), "a1", quote(), [work], now=T0)
    assert ledger.mark_removed("work", now=later(1)) is True
    assert ledger.mark_removed("work", now=later(2)) is False
    row = ledger._conn.execute("SELECT removed_at FROM account WHERE name = 'work'").fetchone()
    assert row[0] == later(1).isoformat()
    ledger.reserve(conv("c2"), "a2", quote(), [work], now=later(3))
    assert ledger._conn.execute("SELECT removed_at FROM account WHERE name = 'work'").fetchone()[0] is None


def test_this_host_is_the_host_name_or_a_digest_of_an_unusual_one(monkeypatch):
    # Then ":" and a short id of the machine (tests/test_same_host_name.py).
    import socket

    from llm_accounts import liveness
    from llm_accounts.ledger import this_host

    machine = liveness.machine_id()
    monkeypatch.setattr(socket, "gethostname", lambda: "build-7.example")
    assert this_host() == f"build-7.example:{machine}"
    for odd in ("my laptop", "sk-ant-api03-looks-like-a-key", "x" * 100, ""):
        monkeypatch.setattr(socket, "gethostname", lambda: odd)
        named, short = this_host().split(":")
        assert short == machine
        assert named.startswith("host-") and len(named) == 21 and (not odd or odd not in named)
