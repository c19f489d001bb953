"""``llm accounts audit --from-provider``: the ledger's settled spend per account and UTC day beside
the organization's usage report, and its bill split by cause beside the usage at list prices, so
that batch discounts, Priority Tier usage, the us surcharge and costs only billed are named and only
what nothing explains is unexplained (docs/architecture.md "Auditing against the bill"), on the
loopback stand-in."""

import dataclasses
import datetime as dt
import json
from fractions import Fraction

import httpx
import pytest

from conftest import assert_no_key_material, make_key
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Revision, current_revision, settlement_cost
from llm_accounts.provider import audit as provider_audit, rules as provider_usage
from llm_accounts.standin import StandIn
from llm_accounts.standin.config import default_api_key_id
from routed_helpers import llm_cli
from test_provider_pass import HAIKU, MODEL, fake_clock, org, rows  # noqa: F401 (fixtures)
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)


HAIKU_55 = "claude-haiku-5-5"
ALPHA_ID = default_api_key_id("alpha")
# A usage object another tool's requests add up to (StandIn.add_usage).
FOREIGN = {"input_tokens": 2_000, "output_tokens": 500, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}


def audit(*extra):
    result = llm_cli("accounts", "audit", "--from-provider", "--days", "2", "--json", *extra)
    return result, (json.loads(result.output) if result.exit_code == 0 else None)


def today(report, account):
    return [row for row in report["accounts"] if row["account"] == account][-1]


def organization_today(report, account="alpha"):
    return [row for row in report["organizations"] if account in row["accounts"]][-1]


def list_price(usage, model=HAIKU, geo=None):
    """What ``usage`` comes to at the shipped list prices (the stand-in's ``list_amount``)."""
    return settlement_cost({**usage, **({"inference_geo": geo} if geo else {})}, model, None, current_revision())


def test_spend_that_went_through_the_ledger_agrees_with_the_report_and_the_bill(org, ledger_path, fake_clock):
    assert llm_cli("-m", MODEL, "Hello").exit_code == 0
    assert llm_cli("-m", MODEL, "--no-stream", "Hello again").exit_code == 0
    fake_clock.advance(minutes=5)
    result, report = audit()
    assert result.exit_code == 0, result.output
    alpha = today(report, "alpha")
    assert alpha["day"] == "2026-12-31" and alpha["settled_attempts"] == 2
    assert alpha["ledger_nusd"] == sum(row["cost_nusd"] for row in rows(ledger_path))
    assert alpha["outside_nusd"] == 0 and alpha["by_service_tier"]["batch"] == 0
    bill = organization_today(report)
    assert bill["report"] == "analytics" and bill["billed_nusd"] > 0
    assert bill["unexplained_nusd"] == 0 and bill["undeclared_nusd"] == 0
    assert bill["discount_nusd"] == 0 and bill["priority_nusd"] == 0 and bill["us_surcharge_nusd"] == 0
    assert bill["by_cost_type"]["tokens"] == bill["billed_nusd"] == bill["by_service_tier"]["standard"]
    assert abs(sum(bill["by_token_type"].values()) - bill["billed_nusd"]) <= len(bill["by_token_type"])


def test_spend_on_the_same_key_outside_the_ledger_is_shown(org, ledger_path, fake_clock):
    assert llm_cli("-m", MODEL, "Hello").exit_code == 0
    # Another tool using alpha's key directly, not through the ledger.
    answer = httpx.post(
        org.base_url + "/v1/messages",
        headers={"x-api-key": org.keys["ALPHA_KEY"], "anthropic-version": "2023-06-01"},
        json={"model": HAIKU, "max_tokens": 50, "messages": [{"role": "user", "content": "elsewhere"}]},
    ).json()
    fake_clock.advance(minutes=5)
    result, report = audit()
    assert result.exit_code == 0, result.output
    rates = current_revision().model(HAIKU).rates
    outside = answer["usage"]["input_tokens"] * Fraction(rates.input) + answer["usage"]["output_tokens"] * Fraction(rates.output)
    alpha = today(report, "alpha")
    assert abs(alpha["outside_nusd"] - outside) <= 3
    assert alpha["outside_standard_nusd"] == alpha["outside_nusd"]


def test_days_where_the_shipped_prices_disagree_with_the_bill_are_unexplained(org, ledger_path, fake_clock):
    revision = current_revision()
    haiku = revision.model(HAIKU)
    dearer = dataclasses.replace(haiku, rates=dataclasses.replace(haiku.rates, output=haiku.rates.output * 100))
    org.revision = Revision(revision.id, revision.read_on, revision.sources, {**revision.models, haiku.id: dearer})
    assert llm_cli("-m", MODEL, "Hello").exit_code == 0
    fake_clock.advance(minutes=5)
    result, report = audit()
    assert result.exit_code == 0, result.output
    [row] = rows(ledger_path)
    output = json.loads(row["usage_json"])["output_tokens"]
    unexplained = organization_today(report)["unexplained_nusd"]
    assert abs(unexplained - output * haiku.rates.output * 99) <= 3


def test_another_tools_batch_usage_on_the_key_is_shown_as_batch_and_discount_not_unexplained(org, ledger_path, fake_clock):
    assert llm_cli("-m", MODEL, "Hello").exit_code == 0
    org.add_usage("org-alpha", ALPHA_ID, HAIKU, FOREIGN, at=fake_clock() + 10, service_tier="batch")
    fake_clock.advance(minutes=5)
    result, report = audit()
    assert result.exit_code == 0, result.output
    batch = list_price(FOREIGN)
    alpha = today(report, "alpha")
    assert alpha["by_service_tier"]["batch"] == batch
    assert alpha["outside_nusd"] == batch and alpha["outside_standard_nusd"] == 0
    bill = organization_today(report)
    assert bill["discount_nusd"] == batch // 2 and bill["by_service_tier"]["batch"] == batch // 2
    assert bill["list_nusd"] - bill["billed_nusd"] == bill["discount_nusd"]
    assert bill["unexplained_nusd"] == 0


def test_a_us_workspace_names_its_us_surcharge_and_leaves_nothing_unexplained(org, ledger_path, fake_clock):
    org._organizations["org-alpha"] = {"inference_geo_default": "us", "analytics": True}  # the workspace default
    assert llm_cli("-m", f"claude-routed/{HAIKU_55}", "Hello").exit_code == 0
    fake_clock.advance(minutes=5)
    result, report = audit()
    assert result.exit_code == 0, result.output
    [entry] = [r for r in org.requests if r["path"] == "/v1/messages"]
    at_us = list_price(entry["usage"], entry["model_id"], "us")
    at_one = list_price(entry["usage"], entry["model_id"], "global")
    alpha = today(report, "alpha")
    assert alpha["usage_nusd"] == at_us and alpha["outside_nusd"] == 0
    assert abs(alpha["us_surcharge_nusd"] - (at_us - at_one)) <= 1
    bill = organization_today(report)
    assert bill["by_inference_geo"]["us"] == bill["billed_nusd"] > 0
    assert abs(bill["us_surcharge_nusd"] - (at_us - at_one)) <= len(bill["by_token_type"])
    assert bill["unexplained_nusd"] == 0


def test_priority_usage_is_named_as_priority_not_billed_by_the_cost_endpoint(org, ledger_path, fake_clock):
    assert llm_cli("-m", MODEL, "Hello").exit_code == 0
    org.add_usage("org-alpha", ALPHA_ID, HAIKU, FOREIGN, at=fake_clock() + 10, service_tier="priority", requests=3)
    fake_clock.advance(minutes=5)
    result, report = audit()
    assert result.exit_code == 0, result.output
    priority = list_price(FOREIGN)
    alpha = today(report, "alpha")
    assert alpha["by_service_tier"]["priority"] == priority and alpha["outside_nusd"] == priority
    bill = organization_today(report)
    assert bill["priority_nusd"] == priority and bill["unexplained_nusd"] == 0
    assert abs(bill["billed_nusd"] - alpha["ledger_nusd"]) <= 1 and "priority" not in bill["by_service_tier"]
    table = llm_cli("accounts", "audit", "--from-provider", "--days", "1")
    assert "Priority Tier usage at list prices: the cost endpoint does not bill it" in table.output
    assert "priority " + money(priority) in table.output


def test_without_the_analytics_api_the_legacy_reports_still_audit(org, ledger_path, fake_clock):
    org.set_analytics("org-alpha", False)
    assert llm_cli("-m", MODEL, "Hello").exit_code == 0
    org.add_usage("org-alpha", ALPHA_ID, HAIKU, FOREIGN, at=fake_clock() + 10, service_tier="batch")
    fake_clock.advance(minutes=5)
    result, report = audit()
    assert result.exit_code == 0, result.output
    [settled] = rows(ledger_path)
    alpha = today(report, "alpha")
    assert alpha["ledger_nusd"] == settled["cost_nusd"] and alpha["outside_nusd"] == list_price(FOREIGN)
    bill = organization_today(report)
    assert bill["report"] == "legacy" and bill["list_nusd"] is None
    assert bill["discount_nusd"] == list_price(FOREIGN) // 2 and bill["unexplained_nusd"] == 0
    assert abs(bill["billed_nusd"] - settled["cost_nusd"] - list_price(FOREIGN) // 2) <= 2
    assert {"/v1/organizations/usage_report/messages", "/v1/organizations/cost_report"} <= {r["path"] for r in org.requests}


def test_the_table_names_each_account_and_day_and_the_causes(org, ledger_path, fake_clock):
    assert llm_cli("-m", MODEL, "Hello").exit_code == 0
    org.add_usage("org-alpha", ALPHA_ID, HAIKU, FOREIGN, at=fake_clock() + 10, service_tier="batch")
    fake_clock.advance(minutes=5)
    result = llm_cli("accounts", "audit", "--from-provider", "--days", "1")
    assert result.exit_code == 0, result.output
    assert "outside ledger" in result.output and "unexplained" in result.output and "price drift" not in result.output
    assert "alpha    2026-12-31" in result.output
    assert f"batch {money(list_price(FOREIGN))}" in result.output
    assert "alpha 2026-12-31 billed by cause (Analytics API):" in result.output
    assert "  service tier:   standard " in result.output and ", batch " in result.output


def test_a_key_id_not_declared_is_compared_with_and_labelled_inferred(org, ledger_path, fake_clock):
    found = default_api_key_id("beta")
    result = llm_cli("accounts", "audit", "--from-provider", "--days", "1")
    assert result.exit_code == 0, result.output
    assert (
        f"beta: compared with {found}, inferred as its organization's only active API key; "
        f"confirm it with llm accounts set beta --api-key-id {found}"
    ) in result.output
    assert "alpha: compared with" not in result.output
    assert audit()[1]["inferred_key_ids"] == {"beta": found}


def test_unreadable_reports_exit_non_zero_naming_the_accounts(org, ledger_path, fake_clock, user_path):
    stored = json.loads((user_path / "keys.json").read_text())
    del stored["BETA_ADMIN"]
    (user_path / "keys.json").write_text(json.dumps(stored))
    result = llm_cli("accounts", "audit", "--from-provider", "--days", "1")
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == "Error: credential_missing: could not audit beta (see above)"


@pytest.fixture
def shared(user_path, ledger_path, monkeypatch, fake_clock):
    """One organization with two API keys and one Admin API key that two accounts share: alpha
    declares its key id, gamma does not (and with two keys it cannot be inferred)."""
    keys = {"ALPHA_KEY": make_key(), "GAMMA_KEY": make_key(), "ALPHA_ADMIN": make_key()}
    config = {
        "keys": [
            {"label": "alpha", "key": keys["ALPHA_KEY"], "organization": "org-alpha"},
            {"label": "gamma", "key": keys["GAMMA_KEY"], "organization": "org-alpha"},
        ],
        "admin_keys": [{"key": keys["ALPHA_ADMIN"], "organization": "org-alpha"}],
        "report_delay": 120,
    }
    (user_path / "keys.json").write_text(json.dumps(keys))
    save_accounts_file(
        [
            Account("alpha", "ALPHA_KEY", 50 * NANO, admin_key_env="ALPHA_ADMIN", api_key_id=ALPHA_ID),
            Account("gamma", "GAMMA_KEY", 50 * NANO, rank=1, admin_key_env="ALPHA_ADMIN"),
        ],
        None,
    )
    with StandIn(config, clock=fake_clock) as server:
        monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", server.base_url)
        server.keys = keys
        yield server


def test_an_account_without_a_usable_key_id_leaves_the_others_sharing_its_admin_key_audited(shared, ledger_path, fake_clock):
    assert llm_cli("-m", MODEL, "Hello").exit_code == 0
    fake_clock.advance(minutes=5)
    result = llm_cli("accounts", "audit", "--from-provider", "--days", "1", "--json")
    assert result.exit_code == 1
    report = json.loads(result.output[: result.output.rindex("}") + 1])
    assert [row["account"] for row in report["accounts"]] == ["alpha"]
    assert today(report, "alpha")["outside_nusd"] == 0
    assert organization_today(report)["accounts"] == ["alpha", "gamma"]
    assert [(e["accounts"], e["code"]) for e in report["errors"]] == [(["gamma"], "declaration_invalid")]
    assert result.output.splitlines()[-1] == "Error: declaration_invalid: could not audit gamma (see above)"
    table = llm_cli("accounts", "audit", "--from-provider", "--days", "1")
    assert "alpha    2026-12-31" in table.output and "gamma: not audited: declaration_invalid: api_key_id" in table.output


def test_the_admin_key_appears_in_no_output(org, ledger_path, fake_clock, user_path):
    assert llm_cli("-m", MODEL, "Hello").exit_code == 0
    org.add_usage("org-alpha", ALPHA_ID, HAIKU, FOREIGN, at=fake_clock() + 10, service_tier="batch")
    org.add_usage("org-alpha", None, HAIKU, FOREIGN, at=fake_clock() + 10, service_tier="priority")
    fake_clock.advance(minutes=5)
    outputs = [audit()[0].output, llm_cli("accounts", "audit", "--from-provider", "--days", "2").output]
    org.set_analytics("org-alpha", False)
    outputs.append(llm_cli("accounts", "audit", "--from-provider", "--days", "2").output)
    stored = json.loads((user_path / "keys.json").read_text())
    del stored["BETA_ADMIN"]
    (user_path / "keys.json").write_text(json.dumps(stored))
    outputs.append(llm_cli("accounts", "audit", "--from-provider", "--days", "2", "--json").output)
    for text in outputs:
        for secret in (org.keys["ALPHA_ADMIN"], org.keys["BETA_ADMIN"]):
            assert_no_key_material(text, secret)


def test_audit_without_from_provider_checks_the_running_totals(org, ledger_path, fake_clock):
    assert llm_cli("-m", MODEL, "Hello").exit_code == 0
    result = llm_cli("accounts", "audit")
    assert result.exit_code == 0 and "running totals match" in result.output


def money(nusd):
    from llm_accounts.money import usd_fine

    return usd_fine(nusd)


# The parsing and comparison rules.

DAY = "2026-12-31"
BUCKET = {"starting_at": "2026-12-31T00:00:00Z", "ending_at": "2027-01-01T00:00:00Z"}


def cost_row(**cost):
    group = {"cost_type": "tokens", "token_type": "output_tokens", "model": HAIKU, "service_tier": "standard", "inference_geo": "global"}
    return {**BUCKET, "group": group, "cost": {"amount": "12.5", "list_amount": "12.5", "currency": "USD", "requests": 1, **cost}}


def test_a_cost_amount_in_another_shape_is_not_read():
    assert provider_audit.nusd_of_cents("1e5") is None
    assert provider_audit.nusd_of_cents("123.45") == 1_234_500_000


@pytest.mark.parametrize("missing", ["amount", "list_amount", "currency", "requests"])
def test_a_cost_row_missing_a_field_makes_its_day_unknown_never_zero(missing):
    row = cost_row()
    del row["cost"][missing]
    assert provider_audit.analytics_costs([cost_row(), row], [DAY]) == ((), frozenset({DAY}))
    reports = provider_audit.Reports("analytics", (), (), frozenset(), frozenset({DAY}))
    [day] = provider_audit.compare_organization(["alpha"], [DAY], reports, {}, set(), current_revision())
    assert day.billed_nusd is None and day.unexplained_nusd is None and day.by_cost_type is None


def test_a_cost_row_missing_a_dimension_makes_its_day_unknown():
    row = cost_row()
    del row["group"]["service_tier"]
    assert provider_audit.analytics_costs([row], [DAY]) == ((), frozenset({DAY}))


def test_a_usage_row_without_its_request_count_makes_its_day_unknown():
    usage = {"uncached_input_tokens": 5, "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
             "cache_read_input_tokens": 0, "output_tokens": 1, "server_tool_use": {"web_search_requests": 0}}
    group = {"api_key_id": "apikey_01a", "model": HAIKU, "service_tier": "standard", "inference_geo": "global", "speed": "standard"}
    [row] = provider_audit.analytics_usage([{**BUCKET, "group": group, "usage": {**usage, "requests": 1}}], [DAY])[0]
    assert row.usage == provider_usage.Usage(input=5, output=1)
    assert provider_audit.analytics_usage([{**BUCKET, "group": group, "usage": usage}], [DAY]) == ((), frozenset({DAY}))


def test_code_execution_and_session_usage_are_named_as_billed_only_not_unexplained():
    rows = provider_audit.analytics_costs(
        [cost_row(), {**cost_row(amount="3", list_amount="3"), "group": {**cost_row()["group"], "cost_type": "code_execution", "token_type": None}}],
        [DAY],
    )[0]
    reports = provider_audit.Reports("analytics", (), rows, frozenset(), frozenset())
    usage = {(DAY, "apikey_01a"): provider_audit.KeyDay({"standard": Fraction(125_000_000)}, Fraction(0), 1)}
    [day] = provider_audit.compare_organization(["alpha"], [DAY], reports, usage, {"apikey_01a"}, current_revision())
    assert day.by_cost_type == {"tokens": 125_000_000, "web_search": 0, "code_execution": 30_000_000, "session_usage": 0}
    assert day.billed_nusd == 155_000_000 and day.unexplained_nusd == 0


def test_a_value_outside_the_documented_set_is_shown_as_other_never_echoed():
    row = cost_row()
    row["group"]["service_tier"] = "sk-ant-admin01-lookslikeakey"
    [parsed] = provider_audit.analytics_costs([row], [DAY])[0]
    assert parsed.service_tier == "other"


def test_rounding_alone_is_not_outside_the_ledger():
    usage = {("2026-12-31", "apikey_01a"): provider_audit.KeyDay({"standard": Fraction(1000)}, Fraction(0), 1)}
    [day] = provider_audit.compare_account("work", ["2026-12-31"], {"2026-12-31": (1001, 1, 0)}, usage, "apikey_01a")
    assert day.outside_nusd == 0
    [day] = provider_audit.compare_account("work", ["2026-12-31"], {"2026-12-31": (900, 1, 0)}, usage, "apikey_01a")
    assert day.outside_nusd == 100 and day.outside_standard_nusd == 100


def test_a_days_web_searches_are_priced_at_the_revision_fee():
    assert provider_audit.price_day(provider_usage.Usage(input=5, web_search=2), HAIKU, current_revision()) == 5 * 1_000 + 2 * 10_000_000


def test_web_searches_leave_a_day_unpriced_under_a_revision_without_their_fee():
    revision = dataclasses.replace(current_revision(), server_tool_fees={})
    assert provider_audit.price_day(provider_usage.Usage(input=5, web_search=1), HAIKU, revision) is None
