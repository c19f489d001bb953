"""The health state machine (architecture.md "Failure classes and health", ADR-0029 sections 3-5)."""

import datetime as dt

import pytest

from llm_accounts import health
from llm_accounts.health import Health

T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)


def seconds(n):
    return dt.timedelta(seconds=n)


def failing(failure_class="rate_limited", at=T0):
    return health.record_failure(None, failure_class, 429, at, "a1")


@pytest.mark.parametrize(
    "failure_class, dwell",
    [
        ("quota_exhausted", dt.timedelta(hours=1)),
        ("rate_limited", health.FIRST_DWELL),
        ("provider_outage", health.FIRST_DWELL),
        ("model_unavailable", dt.timedelta(minutes=10)),
    ],
)
def test_a_first_failure_starts_its_classes_dwell(failure_class, dwell):
    h = health.record_failure(Health(), failure_class, 400, T0, "a1")
    assert (h.state, h.failure_class, h.since, h.cooldown_until) == ("failing", failure_class, T0, T0 + dwell)


def test_semantic_failures_never_touch_health():
    assert health.record_failure(Health(), "semantic", 400, T0, "a1") is None
    assert health.record_failure(failing(), "semantic", 400, T0, "a2") is None


def test_a_failure_without_a_class_changes_nothing():
    assert health.record_failure(Health(), None, None, T0, "a1") is None


def test_transport_needs_three_consecutive_failures_before_cooling():
    h = health.record_failure(None, "transport", None, T0, "a1")
    assert (h.state, h.transport_failures) == ("ok", 1)
    h = health.record_failure(h, "transport", None, T0 + seconds(1), "a2")
    assert (h.state, h.transport_failures) == ("ok", 2)
    assert health.gate(h, T0 + seconds(1)) == "open"
    h = health.record_failure(h, "transport", None, T0 + seconds(2), "a3")
    assert (h.state, h.cooldown_until) == ("failing", T0 + seconds(32))


def test_a_success_ends_a_run_of_transport_failures():
    h = health.record_failure(None, "transport", None, T0, "a1")
    h = health.record_failure(h, "transport", None, T0, "a2")
    h = health.record_success(h, T0 + seconds(1))
    assert h.transport_failures == 0
    h = health.record_failure(h, "transport", None, T0 + seconds(2), "a3")
    assert h.state == "ok"


def test_the_same_class_while_cooling_writes_nothing():
    assert health.record_failure(failing(), "rate_limited", 429, T0 + seconds(1), "a2") is None


@pytest.mark.parametrize("failure_class, bound", [("rate_limited", 60), ("provider_outage", 30)])
def test_a_lasting_outage_waits_longer_each_time_up_to_its_classes_dwell(failure_class, bound):
    h, at, dwells = None, T0, []
    for _ in range(8):
        h = health.record_failure(h, failure_class, 529, at, "probe")
        dwells.append((h.cooldown_until - at).total_seconds())
        at = h.cooldown_until
    assert dwells == sorted(dwells)
    assert dwells[0] == health.FIRST_DWELL.total_seconds() and dwells[-1] == bound


def test_a_retry_after_sets_the_dwell_within_its_bounds():
    def dwell(after):
        h = health.record_failure(None, "rate_limited", 429, T0, "a1", retry_after=seconds(after))
        return (h.cooldown_until - T0).total_seconds()

    assert (dwell(5), dwell(0), dwell(3600)) == (5, 1, 60)


def test_a_class_change_while_cooling_is_written_and_never_shortens_the_dwell():
    h = failing("quota_exhausted")
    changed = health.record_failure(h, "rate_limited", 429, T0 + seconds(5), "a2")
    assert changed.failure_class == "rate_limited"
    assert changed.cooldown_until == T0 + dt.timedelta(hours=1)
    assert changed.since == T0


def test_transport_noise_never_overrides_a_stronger_class_while_cooling():
    assert health.record_failure(failing("quota_exhausted"), "transport", None, T0 + seconds(5), "a2") is None


def test_a_cooling_account_is_not_admitted_before_its_cooldown_ends():
    assert health.gate(failing(), T0 + seconds(1)) == "cooling"


def test_after_the_cooldown_one_attempt_is_the_probe():
    h = failing()
    assert health.gate(h, T0 + seconds(60)) == "probe"
    assert health.gate(h, T0 + seconds(61), probe_taken=True) == "cooling"


def test_an_attempt_admitted_at_or_after_the_dwells_end_is_the_probe():
    h = failing()  # cools until T0 + 2 s
    assert not health.was_probe(h, T0 + seconds(1))
    assert health.was_probe(h, T0 + seconds(2))
    assert not health.was_probe(health.record_success(h, T0 + seconds(3)), T0 + seconds(4))


def test_the_probes_failure_starts_a_new_dwell_and_names_the_probe():
    again = health.record_failure(failing(), "rate_limited", 429, T0 + seconds(70), "p1", admitted_at=T0 + seconds(60))
    assert again.cooldown_until == T0 + seconds(130)
    assert again.probe_attempt_id == "p1"
    assert again.since == T0


def test_the_probes_success_clears_the_failure_and_keeps_it_as_history():
    ok = health.record_success(failing(), T0 + seconds(70), admitted_at=T0 + seconds(60), attempt_id="p1")
    assert (ok.state, ok.cooldown_until, ok.probe_attempt_id) == ("ok", None, "p1")
    assert (ok.failure_class, ok.last_failure_at, ok.last_success_at) == ("rate_limited", T0, T0 + seconds(70))
    assert health.gate(ok, T0 + seconds(70)) == "open"


def test_any_success_supersedes_an_older_failure():
    ok = health.record_success(failing("quota_exhausted"), T0 + seconds(5))
    assert ok.state == "ok"


def test_a_probe_is_given_up_after_its_lease():
    h = failing()
    started = T0 + seconds(60)
    assert health.probe_outstanding(h, started, started + health.PROBE_LEASE - seconds(1))
    assert not health.probe_outstanding(h, started, started + health.PROBE_LEASE)
    assert not health.probe_outstanding(h, None, started + seconds(1))
    assert not health.probe_outstanding(health.record_success(h, started), started, started + seconds(1))


def test_an_attempt_is_gated_by_the_worse_of_its_accounts_row_and_its_machines():
    cooling, open_ = ("cooling", failing(), False), ("open", None, False)
    blocked = ("blocked", health.record_failure(None, "auth", 401, T0, "a1"), False)
    assert health.worse(open_, cooling) is cooling
    assert health.worse(cooling, blocked) is blocked
    assert health.worse(open_, ("probe", failing(), False))[0] == "probe"


def test_only_transport_is_kept_per_machine():
    assert health.HOST_CLASSES == ("transport",)


def test_auth_blocks_without_a_dwell_until_unblocked():
    h = health.record_failure(Health(), "auth", 401, T0, "a1")
    assert (h.state, h.cooldown_until) == ("failing", None)
    assert health.gate(h, T0 + dt.timedelta(days=30)) == "blocked"
    assert health.record_failure(h, "rate_limited", 429, T0 + seconds(1), "a2") is None
    cleared = health.clear_auth(h, T0 + seconds(9))
    assert health.gate(cleared, T0 + seconds(9)) == "open"


def test_clear_auth_leaves_other_failures_alone():
    assert health.clear_auth(failing(), T0) is None


def test_a_healthy_accounts_success_is_written_at_most_every_ten_minutes():
    first = health.record_success(None, T0)
    assert first.last_success_at == T0
    assert health.record_success(first, T0 + dt.timedelta(minutes=9, seconds=59)) is None
    assert health.record_success(first, T0 + dt.timedelta(minutes=10)).last_success_at == T0 + dt.timedelta(minutes=10)


def test_status_names_the_state():
    h = failing()
    assert health.view(None, T0) == "ok"
    assert health.view(h, T0 + seconds(1)) == "cooling"
    assert health.view(h, T0 + seconds(60)) == "probe_due"
    assert health.view(h, T0 + seconds(61), probe_taken=True) == "probing"
    assert health.view(health.record_failure(None, "auth", 401, T0, "a1"), T0) == "auth_failed"


def test_every_cooling_class_refuses_with_a_routed_error_code():
    from llm_accounts.errors import CODES

    assert set(health.COOLING_CODES) == set(health.HEALTH_CLASSES)
    assert set(health.COOLING_CODES.values()) <= CODES


def test_a_transport_dwell_on_the_shared_row_is_ignored():
    # An older build wrote transport to the account's row; it belongs to one machine's row now.
    older = Health(state="failing", failure_class="transport", since=T0, last_failure_at=T0, cooldown_until=T0 + seconds(30))
    assert health.shared(older) is None
    assert health.shared(failing()) == failing()
