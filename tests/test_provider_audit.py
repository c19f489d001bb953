"""``llm accounts audit --from-provider``: the ledger's settled spend per account and UTC day beside
the organization's usage report, and its cost report beside the usage at the shipped prices
(docs/architecture.md "Auditing against the bill"), on the loopback stand-in."""

import dataclasses
import datetime as dt
import json
from fractions import Fraction

import httpx

from llm_accounts.provider import audit as provider_audit, rules as provider_usage
from llm_accounts.pricing import Revision, current_revision
from llm_accounts.standin.config import default_api_key_id
from routed_helpers import llm_cli
from test_provider_pass import HAIKU, MODEL, fake_clock, org, rows  # noqa: F401 (fixtures)
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)


def audit(*extra):
    result = llm_cli("accounts", "audit", "--from-provider", "--days", "2", "--json", *extra)
    return result, (json.loads(result.output) if result.exit_code == 0 else None)


def today(report, account):
    return [row for row in report["accounts"] if row["account"] == account][-1]


def test_spend_that_went_through_the_ledger_agrees_with_the_report_and_the_bill(org, ledger_path, fake_clock):
    assert llm_cli("-m", MODEL, "Hello").exit_code == 0
    assert llm_cli("-m", MODEL, "--no-stream", "Hello again").exit_code == 0
    fake_clock.advance(minutes=5)
    result, report = audit()
    assert result.exit_code == 0, result.output
    alpha = today(report, "alpha")
    assert alpha["day"] == "2026-12-31" and alpha["settled_attempts"] == 2
    assert alpha["ledger_nusd"] == sum(row["cost_nusd"] for row in rows(ledger_path))
    assert alpha["outside_nusd"] == 0
    org_alpha = [row for row in report["organizations"] if row["accounts"] == ["alpha"]][-1]
    assert org_alpha["drift_nusd"] == 0 and org_alpha["undeclared_nusd"] == 0
    assert org_alpha["billed_nusd"] > 0


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
    assert abs(today(report, "alpha")["outside_nusd"] - outside) <= 3


def test_days_where_the_shipped_prices_disagree_with_the_bill_are_shown(org, ledger_path, fake_clock):
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
    drift = [r for r in report["organizations"] if r["accounts"] == ["alpha"]][-1]["drift_nusd"]
    assert abs(drift - output * haiku.rates.output * 99) <= 3


def test_the_table_names_each_account_and_day(org, ledger_path, fake_clock):
    assert llm_cli("-m", MODEL, "Hello").exit_code == 0
    fake_clock.advance(minutes=5)
    result = llm_cli("accounts", "audit", "--from-provider", "--days", "1")
    assert result.exit_code == 0, result.output
    assert "outside ledger" in result.output and "price drift" in result.output
    assert "alpha    2026-12-31" in result.output


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
    assert result.output.splitlines()[-1] == "Error: credential_missing: could not read the reports of beta"


def test_audit_without_from_provider_checks_the_running_totals(org, ledger_path, fake_clock):
    assert llm_cli("-m", MODEL, "Hello").exit_code == 0
    result = llm_cli("accounts", "audit")
    assert result.exit_code == 0 and "running totals match" in result.output


# The comparison rules.


def test_a_cost_amount_in_another_shape_makes_the_day_unknown():
    bucket = {"starting_at": "2026-12-31T00:00:00Z", "ending_at": "2027-01-01T00:00:00Z", "results": [{"amount": "1e5", "currency": "USD"}]}
    assert provider_audit.billed_by_day([bucket]) == {"2026-12-31": (None, 0)}
    bucket["results"] = [{"amount": "123.45", "currency": "USD"}]
    assert provider_audit.billed_by_day([bucket]) == {"2026-12-31": (1_234_500_000, 1)}


def test_rounding_alone_is_not_outside_the_ledger():
    usage = {("2026-12-31", "apikey_01a"): (1000, 1)}
    [day] = provider_audit.compare_account("work", ["2026-12-31"], {"2026-12-31": (1001, 1, 0)}, usage, "apikey_01a")
    assert day.outside_nusd == 0
    [day] = provider_audit.compare_account("work", ["2026-12-31"], {"2026-12-31": (900, 1, 0)}, usage, "apikey_01a")
    assert day.outside_nusd == 100


def test_a_days_web_searches_are_priced_at_the_revision_fee():
    assert provider_audit.price_day(provider_usage.Usage(input=5, web_search=2), HAIKU, current_revision()) == 5 * 1_000 + 2 * 10_000_000


def test_web_searches_leave_a_day_unpriced_under_a_revision_without_their_fee():
    revision = dataclasses.replace(current_revision(), server_tool_fees={})
    assert provider_audit.price_day(provider_usage.Usage(input=5, web_search=1), HAIKU, revision) is None
