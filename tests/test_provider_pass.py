"""Settling open attempts from the provider's usage report, end to end on the loopback stand-in:
interrupted prompts, the report the stand-in serves from what it billed, ``llm accounts reconcile
--from-provider``, the automatic pass a routed prompt starts, and every case kept open
(docs/architecture.md "Settling from the provider"). Clocks are the test's."""

import dataclasses
import datetime as dt
import json
import sqlite3
import sys

import llm
import pytest

from conftest import assert_no_key_material, assert_tree_has_no_key_material, make_key
from llm_accounts import clock
from llm_accounts.declarations import Account, load_declaration, save_accounts_file
from llm_accounts.errors import AccountsError
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import current_revision, settlement_cost
from llm_accounts.provider import rules as provider_usage, settle as provider_pass
from llm_accounts.standin import StandIn
from llm_accounts.standin.config import default_api_key_id
from routed_helpers import killed_after_reserving, llm_cli
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

MODEL = "claude-routed/claude-haiku-4-5"
HAIKU = "claude-haiku-4-5-20251001"
START = dt.datetime(2026, 12, 31, 23, 50, 5, tzinfo=dt.timezone.utc)  # a credit period's last minutes
AFTER_FINAL = provider_usage.LEGACY_FINAL_AFTER + dt.timedelta(minutes=2)


class Clock:
    """One clock for the stand-in (seconds) and the product (``clock.now``)."""

    def __init__(self, at):
        self.at = at

    def __call__(self):
        return self.at.timestamp()

    def now(self):
        return self.at

    def advance(self, **delta):
        self.at += dt.timedelta(**delta)


@pytest.fixture
def fake_clock(monkeypatch):
    fake = Clock(START)
    monkeypatch.setattr(clock, "now", fake.now)
    return fake


@pytest.fixture
def org(user_path, ledger_path, monkeypatch, fake_clock):
    """Accounts alpha and beta, each its own organization with an Admin API key; alpha declares
    its api_key_id, beta does not (nothing is settled for it until it does)."""
    keys = {"ALPHA_KEY": make_key(), "BETA_KEY": make_key(), "ALPHA_ADMIN": make_key(), "BETA_ADMIN": make_key()}
    config = {
        "keys": [
            {"label": "alpha", "key": keys["ALPHA_KEY"], "organization": "org-alpha"},
            {"label": "beta", "key": keys["BETA_KEY"], "organization": "org-beta"},
        ],
        "admin_keys": [
            {"key": keys["ALPHA_ADMIN"], "organization": "org-alpha"},
            {"key": keys["BETA_ADMIN"], "organization": "org-beta"},
        ],
        "report_delay": 120,
    }
    (user_path / "keys.json").write_text(json.dumps(keys))
    save_accounts_file(
        [
            Account("alpha", "ALPHA_KEY", 50 * NANO, admin_key_env="ALPHA_ADMIN", api_key_id=default_api_key_id("alpha")),
            Account("beta", "BETA_KEY", 50 * NANO, rank=1, admin_key_env="BETA_ADMIN"),
        ],
        None,
    )
    with StandIn(config, clock=fake_clock) as server:
        monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", server.base_url)
        server.keys = keys
        yield server
    provider_pass.wait_for_background(30)


def interrupted(max_tokens=300):
    """A routed prompt whose consumer stops after the first chunk: open, stream_closed."""
    response = llm.get_model(MODEL).prompt("Tell me a long story", max_tokens=max_tokens)
    iterator = iter(response)
    next(iterator)
    iterator.close()


def rows(ledger_path):
    db = sqlite3.connect(ledger_path)
    db.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in db.execute("SELECT * FROM attempt ORDER BY rowid")]
    finally:
        db.close()


def sources(ledger_path):
    db = sqlite3.connect(ledger_path)
    try:
        return [r[0] for r in db.execute("SELECT source_ref FROM adjustment WHERE kind = 'reconciliation' ORDER BY created_at")]
    finally:
        db.close()


def kept_reasons(ledger_path):
    """The reasons ``reconcile --from-provider --json`` gives for alpha's attempts kept open; each
    open attempt is checked to be still open."""
    result = llm_cli("accounts", "reconcile", "--from-provider", "--json")
    assert result.exit_code == 0, result.output
    [alpha, _] = json.loads(result.output)
    assert all(row["state"] == "open" for row in rows(ledger_path) if row["id"] in {k["attempt_id"] for k in alpha["kept_open"]})
    return [k["reason"] for k in alpha["kept_open"]]


def billed(entry):
    """What the stand-in billed for a request, at the shipped prices."""
    return settlement_cost(entry["usage"], entry["model_id"], None, current_revision())


def test_an_interrupted_prompt_is_settled_from_the_report_at_what_the_stand_in_billed(org, ledger_path, fake_clock):
    interrupted()
    [row] = rows(ledger_path)
    assert (row["state"], row["outcome"]) == ("open", "stream_closed")
    fake_clock.advance(minutes=12)
    result = llm_cli("accounts", "reconcile", "--from-provider")
    assert result.exit_code == 0, result.output
    [entry] = [r for r in org.requests if r["path"] == "/v1/messages"]
    [row] = rows(ledger_path)
    assert (row["state"], row["cost_nusd"]) == ("settled", billed(entry))
    assert sources(ledger_path) == [f"usage_report:analytics:2026-12-31T23:50Z..2026-12-31T23:51Z:{default_api_key_id('alpha')}:{HAIKU}"]
    assert f"alpha: 1 settled" in result.output and "0 kept open" in result.output


def test_a_stream_still_running_is_not_settled_from_the_report_however_old(org, ledger_path, fake_clock):
    # transport.TIMEOUT bounds each read, not the stream: the report's minutes may hold part of it.
    response = llm.get_model(MODEL).prompt("Tell me a long story", max_tokens=300)
    iterator = iter(response)
    next(iterator)
    fake_clock.advance(minutes=12)
    try:
        result = llm_cli("accounts", "reconcile", "--from-provider", "--json")
        [row] = rows(ledger_path)
    finally:
        iterator.close()
    assert result.exit_code == 0, result.output
    assert (row["state"], row["outcome"]) == ("open", None)
    [alpha, beta] = json.loads(result.output)
    assert [k["reason"] for k in alpha["kept_open"]] == ["in_flight"]
    # Its outcome recorded (stream_closed), the report settles it once it is fresh past it.
    fake_clock.advance(minutes=4)
    assert llm_cli("accounts", "reconcile", "--from-provider").exit_code == 0
    assert rows(ledger_path)[0]["state"] == "settled"


def test_the_ledger_refuses_a_usage_report_settlement_of_an_attempt_with_no_outcome(org, ledger_path, fake_clock):
    from llm_accounts.ledger import Ledger

    response = llm.get_model(MODEL).prompt("Tell me a long story", max_tokens=300)
    iterator = iter(response)
    next(iterator)
    try:
        [row] = rows(ledger_path)
        with Ledger(ledger_path) as ledger, pytest.raises(AccountsError) as info:
            ledger.reconcile(provider_pass.adjustment_id(row["id"]), row["id"], 1000, f"usage_report:messages:2026-12-31T23:50Z:apikey_01x:{HAIKU}")
        assert rows(ledger_path)[0]["state"] == "open"
    finally:
        iterator.close()
    assert info.value.code == "settlement_conflict" and "no outcome recorded" in str(info.value)


def test_what_the_ledger_settled_in_the_same_minute_is_taken_away(org, ledger_path, fake_clock):
    assert llm_cli("-m", MODEL, "A short complete answer").exit_code == 0
    fake_clock.advance(seconds=20)
    interrupted()
    fake_clock.advance(minutes=12)
    assert llm_cli("accounts", "reconcile", "--from-provider").exit_code == 0
    complete, closed = rows(ledger_path)
    entry = [r for r in org.requests if r["path"] == "/v1/messages"][1]
    assert complete["outcome"] == "complete"
    assert (closed["state"], closed["cost_nusd"]) == ("settled", billed(entry))


def test_two_open_attempts_in_one_minute_settle_as_a_group_at_the_exact_total(org, ledger_path, fake_clock):
    # Before: both stayed open for ever ("ambiguous") and needed a guessed reconcile by hand.
    interrupted()
    fake_clock.advance(seconds=5)
    interrupted()
    fake_clock.advance(minutes=12)
    result = llm_cli("accounts", "reconcile", "--from-provider")
    assert result.exit_code == 0, result.output
    first, second = rows(ledger_path)
    entries = [r for r in org.requests if r["path"] == "/v1/messages"]
    assert (first["state"], second["state"]) == ("settled", "settled")
    assert first["cost_nusd"] + second["cost_nusd"] == sum(billed(e) for e in entries)
    assert all(source.endswith(":joint:2") for source in sources(ledger_path))
    assert "alpha: 2 settled" in result.output


def test_another_tools_request_on_the_key_in_the_same_minute_keeps_the_attempt_open(org, ledger_path, fake_clock):
    interrupted()
    usage = {"input_tokens": 10, "output_tokens": 2, "cache_read_input_tokens": 0,
             "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}}
    org.add_usage("org-alpha", default_api_key_id("alpha"), HAIKU, usage, at=fake_clock() + 10)
    fake_clock.advance(minutes=12)
    assert kept_reasons(ledger_path) == ["requests_differ"]


def test_a_second_reconcile_within_a_minute_does_not_poll_the_organization_again(org, ledger_path, fake_clock):
    interrupted()
    fake_clock.advance(minutes=12)
    interrupted()
    # Each routed prompt may start the automatic pass in a background thread; let it end first, so
    # a poll it makes is not counted as the second reconcile's (once seen on a loaded machine).
    assert provider_pass.wait_for_background(30)
    fake_clock.advance(seconds=30)
    assert llm_cli("accounts", "reconcile", "--from-provider").exit_code == 0
    polls = len([r for r in org.requests if "/organizations/" in r["path"]])
    assert polls >= 1
    again = llm_cli("accounts", "reconcile", "--from-provider")
    assert again.exit_code == 0
    assert "read less than a minute ago" in again.output
    assert len([r for r in org.requests if "/organizations/" in r["path"]]) == polls


def test_a_minute_not_yet_final_stays_open(org, ledger_path, fake_clock):
    interrupted()
    fake_clock.advance(minutes=2)
    result = llm_cli("accounts", "reconcile", "--from-provider", "--json")
    assert result.exit_code == 0, result.output
    [alpha, beta] = json.loads(result.output)
    assert [k["reason"] for k in alpha["kept_open"]] == ["not_final"]
    assert rows(ledger_path)[0]["state"] == "open"


def test_an_unreadable_report_keeps_every_attempt_open_and_exits_non_zero(org, ledger_path, fake_clock, user_path):
    interrupted()
    fake_clock.advance(minutes=12)
    stored = json.loads((user_path / "keys.json").read_text())
    stored["ALPHA_ADMIN"] = make_key()  # not an admin key the stand-in knows
    (user_path / "keys.json").write_text(json.dumps(stored))
    result = llm_cli("accounts", "reconcile", "--from-provider")
    assert result.exit_code == 1
    assert "alpha: usage report not read: auth_failed: GET /v1/organizations/analytics/usage answered HTTP 401" in result.output
    assert result.output.splitlines()[-1] == (
        "Error: auth_failed: could not read the usage report of alpha; their open attempts stay open"
    )
    assert rows(ledger_path)[0]["state"] == "open"


def interrupted_on(account):
    response = llm.get_model(MODEL).prompt("Tell me a long story", max_tokens=300, account=account)
    iterator = iter(response)
    next(iterator)
    iterator.close()


def test_an_undeclared_key_id_is_never_inferred_the_pass_names_the_only_active_key_and_how_to_confirm_it(
    org, ledger_path, fake_clock
):
    # beta's admin_key_env misdeclared as alpha's organization's admin key: its only active key is
    # alpha's, whose usage must never settle beta's attempts.
    accounts = load_declaration().accounts
    save_accounts_file([a if a.name != "beta" else dataclasses.replace(a, admin_key_env="ALPHA_ADMIN") for a in accounts], None)
    interrupted_on("alpha")
    interrupted_on("beta")
    fake_clock.advance(minutes=12)
    result = llm_cli("accounts", "reconcile", "--from-provider", "--account", "beta")
    assert result.exit_code == 0, result.output
    found = default_api_key_id("alpha")
    assert (
        f"beta: not read (api_key_id is not declared; the organization's only active API key is {found}: "
        f"if it is beta's, confirm it with llm accounts set beta --api-key-id {found}; its open attempts stay open)"
    ) in result.output
    assert [(r["account"], r["state"]) for r in rows(ledger_path)] == [("alpha", "open"), ("beta", "open")]
    assert "key_ids" not in provider_pass.load_state()


def test_a_key_id_confirmed_with_accounts_set_settles_the_accounts_attempts(org, ledger_path, fake_clock):
    interrupted_on("beta")
    fake_clock.advance(minutes=12)
    assert llm_cli("accounts", "set", "beta", "--api-key-id", default_api_key_id("beta")).exit_code == 0
    assert llm_cli("accounts", "reconcile", "--from-provider", "--account", "beta").exit_code == 0
    assert [(r["account"], r["state"]) for r in rows(ledger_path)] == [("beta", "settled")]


def test_an_organization_with_several_keys_needs_api_key_id_declared(org, ledger_path, fake_clock, monkeypatch):
    from llm_accounts.provider import client as admin_api

    monkeypatch.setattr(admin_api, "active_key_ids", lambda *a: ["apikey_01one", "apikey_01two"])
    response = llm.get_model(MODEL).prompt("Tell me a long story", max_tokens=300, account="beta")
    iterator = iter(response)
    next(iterator)
    iterator.close()
    fake_clock.advance(minutes=12)
    result = llm_cli("accounts", "reconcile", "--from-provider", "--account", "beta")
    assert result.exit_code == 1
    assert "declaration_invalid: api_key_id: account beta's organization lists 2 active API keys" in result.output
    assert "--api-key-id apikey_..." in result.output


def test_a_routed_prompt_settles_earlier_interrupted_ones_in_the_background(org, ledger_path, fake_clock):
    interrupted()
    fake_clock.advance(minutes=12)
    assert llm_cli("-m", MODEL, "Hello again").exit_code == 0
    assert provider_pass.wait_for_background(30)
    first, second = rows(ledger_path)
    [entry] = [r for r in org.requests if r["path"] == "/v1/messages"][:1]
    assert (first["state"], first["cost_nusd"]) == ("settled", billed(entry))
    assert second["outcome"] == "complete"
    assert provider_pass.load_state()["last_run"] == clock.isoformat(fake_clock.now())


def test_the_automatic_pass_runs_at_most_every_two_minutes(org, ledger_path, fake_clock):
    assert llm_cli("-m", MODEL, "Hello").exit_code == 0
    assert provider_pass.wait_for_background(30)
    assert provider_pass.settle_in_background(load_declaration()) is None
    fake_clock.advance(minutes=2)
    assert provider_pass.settle_in_background(load_declaration()) is not None
    assert provider_pass.wait_for_background(30)


def test_the_automatic_pass_never_runs_the_secret_lookup_command(org, ledger_path, fake_clock, user_path, tmp_path):
    marker = tmp_path / "lookup-ran"
    script = tmp_path / "lookup.py"
    script.write_text(f"import pathlib, sys\npathlib.Path({str(marker)!r}).touch()\nprint('unused')\n")
    stored = json.loads((user_path / "keys.json").read_text())
    del stored["ALPHA_ADMIN"]
    (user_path / "keys.json").write_text(json.dumps(stored))
    save_accounts_file(load_declaration().accounts, (sys.executable, str(script), "{name}"))
    interrupted()  # its own pass may already find the attempt and fail: past RETRY_AFTER below
    assert provider_pass.wait_for_background(30)
    fake_clock.advance(minutes=16)
    assert llm_cli("-m", MODEL, "Hello again").exit_code == 0
    assert provider_pass.wait_for_background(30)
    assert not marker.exists()
    state = provider_pass.load_state()
    assert (state["error"], state["failed_at"]) == ("credential_missing", clock.isoformat(fake_clock.now()))
    assert rows(ledger_path)[0]["state"] == "open"
    assert (
        "The automatic provider pass failed (credential_missing) at 2027-01-01 00:06 UTC; open attempts wait for the next one "
        "or for 'llm accounts reconcile --from-provider', which says why"
    ) in llm_cli("accounts", "status").output
    # A failed pass waits RETRY_AFTER before the next one.
    fake_clock.advance(minutes=3)
    assert provider_pass.settle_in_background(load_declaration()) is None


def test_a_second_pass_records_nothing_new(org, ledger_path, fake_clock):
    interrupted()
    fake_clock.advance(minutes=12)
    assert llm_cli("accounts", "reconcile", "--from-provider").exit_code == 0
    fake_clock.advance(minutes=1)
    again = llm_cli("accounts", "reconcile", "--from-provider")
    assert again.exit_code == 0
    assert len(sources(ledger_path)) == 1


def test_no_admin_key_anywhere_is_refused_with_how_to_add_one(user_path, ledger_path):
    save_accounts_file([Account("work", "WORK_KEY", 5 * NANO)], None)
    result = llm_cli("accounts", "reconcile", "--from-provider")
    assert result.exit_code == 1
    assert result.output.splitlines()[-1].startswith("Error: declaration_invalid: --from-provider: no account declares admin_key_env")


def test_the_admin_key_appears_in_no_output_or_file(org, ledger_path, fake_clock, tmp_path):
    interrupted()
    fake_clock.advance(minutes=12)
    outputs = [
        llm_cli("accounts", "reconcile", "--from-provider").output,
        llm_cli("accounts", "reconcile", "--from-provider", "--json").output,
        llm_cli("accounts", "audit", "--from-provider", "--json").output,
        llm_cli("accounts", "list", "--json").output,
    ]
    assert provider_pass.wait_for_background(30)
    assert provider_pass.state_path().exists()
    for name in ("ALPHA_ADMIN", "BETA_ADMIN"):
        for text in outputs:
            assert_no_key_material(text, org.keys[name])
        assert_tree_has_no_key_material(tmp_path, org.keys[name], ignore={"keys.json"})


def test_the_automatic_pass_looks_back_a_day_and_the_command_reads_every_open_attempt(org, ledger_path, fake_clock):
    interrupted()
    assert provider_pass.wait_for_background(30)
    fake_clock.advance(hours=25)
    assert llm_cli("-m", MODEL, "A day later").exit_code == 0
    assert provider_pass.wait_for_background(30)
    assert rows(ledger_path)[0]["state"] == "open"
    assert llm_cli("accounts", "reconcile", "--from-provider").exit_code == 0
    assert rows(ledger_path)[0]["state"] == "settled"


def test_an_attempt_whose_process_was_killed_is_no_longer_kept_as_in_flight(org, ledger_path, fake_clock):
    # Before: its outcome never recorded, the pass kept it in flight for ever (docs/architecture.md
    # "A process that is gone").
    killed_after_reserving(START, ledger_path, "lost-1", NANO, 50 * NANO)
    fake_clock.advance(minutes=12)
    result = llm_cli("accounts", "reconcile", "--from-provider", "--json")
    assert result.exit_code == 0, result.output
    [row] = rows(ledger_path)
    assert row["outcome"] == "cancelled"
    [alpha, _] = json.loads(result.output)
    assert "in_flight" not in [kept["reason"] for kept in alpha["kept_open"]]
    assert row["state"] == "settled" or alpha["kept_open"]


# The legacy report, where an organization has no Analytics API.


def test_without_the_analytics_api_the_legacy_report_settles_nothing_for_a_key_not_declared_dedicated(org, ledger_path, fake_clock):
    org.set_analytics("org-alpha", False)
    interrupted()
    fake_clock.advance(minutes=12)
    assert kept_reasons(ledger_path) == ["not_dedicated"]


def test_without_the_analytics_api_a_dedicated_key_is_settled_from_the_legacy_report(org, ledger_path, fake_clock):
    org.set_analytics("org-alpha", False)
    assert llm_cli("accounts", "set", "alpha", "--dedicated-key").exit_code == 0
    interrupted()
    fake_clock.advance(minutes=12)
    result = llm_cli("accounts", "reconcile", "--from-provider")
    assert result.exit_code == 0, result.output
    [entry] = [r for r in org.requests if r["path"] == "/v1/messages"]
    [row] = rows(ledger_path)
    assert (row["state"], row["cost_nusd"]) == ("settled", billed(entry))
    assert sources(ledger_path)[0].startswith("usage_report:messages:")


def test_the_legacy_report_can_be_chosen_by_setting(org, ledger_path, fake_clock, monkeypatch):
    monkeypatch.setenv("LLM_ACCOUNTS_PROVIDER_REPORT", "legacy")
    interrupted()
    fake_clock.advance(minutes=12)
    assert kept_reasons(ledger_path) == ["not_dedicated"]
    assert not [r for r in org.requests if r["path"].startswith("/v1/organizations/analytics")]


# A workspace whose default inference geo is us.


def test_an_interrupted_prompt_in_a_us_workspace_settles_at_the_us_rate(org, ledger_path, fake_clock):
    # Before: the pass priced the row at 1.0x (9.1% low) and settled it.
    org._organizations["org-alpha"] = {"inference_geo_default": "us", "analytics": True}  # the workspace default
    response = llm.get_model("claude-routed/claude-haiku-5-5").prompt("Tell me a long story", max_tokens=300)
    iterator = iter(response)
    next(iterator)
    iterator.close()
    fake_clock.advance(minutes=12)
    assert llm_cli("accounts", "reconcile", "--from-provider").exit_code == 0
    [entry] = [r for r in org.requests if r["path"] == "/v1/messages"]
    assert entry["inference_geo"] == "us"
    usage = {**entry["usage"], "inference_geo": "us"}
    [row] = rows(ledger_path)
    assert (row["state"], row["cost_nusd"]) == ("settled", settlement_cost(usage, entry["model_id"], None, current_revision()))
    plain = {name: value for name, value in entry["usage"].items() if name != "inference_geo"}
    assert row["cost_nusd"] > settlement_cost(plain, entry["model_id"], None, current_revision())


def test_an_organization_without_the_analytics_api_costs_one_request_a_window_after_the_first_refusal(org, ledger_path, fake_clock):
    # Before: every automatic pass asked the Analytics API first, and read the legacy report after its 404.
    org.set_analytics("org-alpha", False)
    assert llm_cli("accounts", "set", "alpha", "--dedicated-key").exit_code == 0
    interrupted()
    assert provider_pass.wait_for_background(30)
    fake_clock.advance(minutes=3)
    interrupted()
    assert provider_pass.wait_for_background(30)
    fake_clock.advance(minutes=3)
    assert llm_cli("-m", MODEL, "Hello again").exit_code == 0
    assert provider_pass.wait_for_background(30)
    analytics = [r for r in org.requests if r["path"].startswith("/v1/organizations/analytics")]
    legacy = [r for r in org.requests if r["path"].startswith("/v1/organizations/usage_report")]
    assert len(analytics) == 1 and len(legacy) >= 2


def test_a_report_setting_outside_analytics_and_legacy_is_refused_in_one_line_before_any_read(org, ledger_path, fake_clock, monkeypatch):
    monkeypatch.setenv("LLM_ACCOUNTS_PROVIDER_REPORT", "bogus")
    interrupted()
    fake_clock.advance(minutes=12)
    result = llm_cli("accounts", "reconcile", "--from-provider")
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == "Error: declaration_invalid: LLM_ACCOUNTS_PROVIDER_REPORT: must be analytics or legacy"
    assert not [r for r in org.requests if r["path"].startswith("/v1/organizations/")]
