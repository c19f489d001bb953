"""Ordering a new conversation's candidates (ADR-0126 D3, Amendment 5 Decision 5)."""

import datetime as dt

from llm_accounts import selection
from llm_accounts.selection import Candidate

NANO = 10**9


def names(candidates):
    return [c.name for c in selection.order(candidates)]


def test_the_account_furthest_behind_its_budget_comes_first():
    busy = Candidate("busy", budget_nusd=10 * NANO, committed_nusd=5 * NANO)
    idle = Candidate("idle", budget_nusd=2 * NANO, committed_nusd=NANO // 2)
    assert names([busy, idle]) == ["idle", "busy"]


def test_utilization_is_compared_exactly_where_floats_would_tie():
    # (2**60 + 1) / 2**62 is less than 2**60 / (2**62 - 4), but the two are equal as floats, and a
    # float tie would fall through to the name and put "abe" first.
    zed = Candidate("zed", budget_nusd=2**62, committed_nusd=2**60 + 1)
    abe = Candidate("abe", budget_nusd=2**62 - 4, committed_nusd=2**60)
    assert (zed.committed_nusd / zed.budget_nusd) == (abe.committed_nusd / abe.budget_nusd)
    assert selection.compare_utilization(zed, abe) == -1
    assert names([abe, zed]) == ["zed", "abe"]


def test_weight_gives_an_account_a_larger_share():
    heavy = Candidate("heavy", budget_nusd=NANO, committed_nusd=NANO // 2, weight=3)
    light = Candidate("light", budget_nusd=NANO, committed_nusd=NANO // 4)
    assert names([light, heavy]) == ["heavy", "light"]


def test_rank_comes_before_utilization():
    spent = Candidate("spent", budget_nusd=NANO, committed_nusd=NANO - 1, rank=0)
    fresh = Candidate("fresh", budget_nusd=NANO, committed_nusd=0, rank=1)
    assert names([fresh, spent]) == ["spent", "fresh"]


def test_a_warm_account_comes_first_within_its_rank():
    warm = Candidate("warm", budget_nusd=NANO, committed_nusd=NANO // 2, warm=True)
    cold = Candidate("cold", budget_nusd=NANO, committed_nusd=0)
    cheaper = Candidate("cheaper", budget_nusd=NANO, committed_nusd=NANO // 2, rank=1, warm=True)
    assert names([cold, cheaper, warm]) == ["warm", "cold", "cheaper"]


def test_among_warm_accounts_the_usual_order_decides():
    a = Candidate("a", budget_nusd=NANO, committed_nusd=NANO // 2, warm=True)
    b = Candidate("b", budget_nusd=NANO, committed_nusd=NANO // 4, warm=True)
    assert names([a, b]) == ["b", "a"]


def test_ties_go_to_fewer_conversations_in_flight_then_to_the_name():
    a = Candidate("a", budget_nusd=NANO, committed_nusd=0, open_scopes=2)
    b = Candidate("b", budget_nusd=NANO, committed_nusd=0, open_scopes=1)
    c = Candidate("c", budget_nusd=NANO, committed_nusd=0, open_scopes=1)
    assert names([a, c, b]) == ["b", "c", "a"]


def test_admission_allows_equality_and_refuses_one_nanodollar_over():
    assert selection.fits(600, 300, 100, 1000)
    assert not selection.fits(600, 300, 101, 1000)


def test_the_warm_bound_keeps_a_tenth_of_the_budget_free_and_includes_equality():
    assert selection.within_warm_bound(500, 300, 100, 1000)
    assert not selection.within_warm_bound(500, 300, 101, 1000)


def test_an_account_serves_every_model_unless_it_lists_some():
    class Account:
        models = None

    assert selection.serves(Account(), "claude-opus-4-5")
    Account.models = ("claude-haiku-4-5",)
    assert not selection.serves(Account(), "claude-opus-4-5")
    assert selection.serves(Account(), "claude-haiku-4-5")


def test_stored_times_compare_by_instant_not_text():
    plus_one = selection.parse_time("2026-11-10T12:30:00+01:00")
    utc = selection.parse_time("2026-11-10T11:45:00+00:00")
    assert "2026-11-10T12:30:00+01:00" > "2026-11-10T11:45:00+00:00"
    assert plus_one < utc


def test_a_stored_time_that_is_not_aware_iso_text_counts_as_absent():
    assert selection.parse_time("2026-11-10T12:30:00") is None
    assert selection.parse_time("yesterday") is None
    assert selection.parse_time(1731240000) is None
    assert selection.parse_time(None) is None
    assert selection.parse_time("2026-11-10T12:30:00+00:00") == dt.datetime(2026, 11, 10, 12, 30, tzinfo=dt.timezone.utc)


def test_an_account_waiting_for_its_probe_comes_after_every_healthy_one():
    # It failed and spent nothing, so it is the least used and the best ranked: still last.
    probe = Candidate("probe", budget_nusd=NANO, committed_nusd=0, rank=0, probe=True)
    healthy = Candidate("healthy", budget_nusd=NANO, committed_nusd=NANO - 1, rank=3)
    assert names([probe, healthy]) == ["healthy", "probe"]


def test_among_accounts_waiting_for_their_probes_the_usual_order_decides():
    busy = Candidate("busy", budget_nusd=NANO, committed_nusd=NANO // 2, probe=True)
    idle = Candidate("idle", budget_nusd=NANO, committed_nusd=0, probe=True)
    assert names([busy, idle]) == ["idle", "busy"]
