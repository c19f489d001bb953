"""llm accounts refresh-models: which models each account serves, when each list was
fetched, and lists that keep themselves fresh (docs/architecture.md "Model lists")."""

import datetime as dt
import json
import os
import threading

import pytest
from click.testing import CliRunner
from llm.cli import cli

from conftest import assert_no_key_material, runs_of
from llm_accounts import catalog, clock
from llm_accounts.declarations import Account, load_declaration, save_accounts_file
from llm_accounts.pricing import prices
from llm_accounts.money import NANO
from routed_helpers import attempts, llm_cli
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)


def declare(user_path, key, monkeypatch):
    (user_path / "keys.json").write_text(json.dumps({"A_KEY": key}))
    save_accounts_file([Account("alpha", "A_KEY", 5 * NANO)], None)


def test_refresh_models_stores_the_ids_each_account_lists(standin, canary_key, user_path, monkeypatch):
    declare(user_path, canary_key, monkeypatch)
    result = CliRunner().invoke(cli, ["accounts", "refresh-models"])
    assert result.exit_code == 0, result.output
    stored = json.loads(catalog.cache_path().read_text())
    assert "claude-haiku-4-5-20251001" in stored["alpha"]["models"]
    assert standin.requests[-1]["path"].startswith("/v1/models")
    assert_no_key_material(catalog.cache_path().read_text() + result.output, canary_key)
    assert oct(catalog.cache_path().stat().st_mode & 0o777) == "0o600"


def test_refresh_models_reports_an_account_whose_key_is_refused(standin, canary_key, user_path, monkeypatch):
    declare(user_path, canary_key, monkeypatch)
    standin.set_behaviour("a", "unauthorized")
    result = CliRunner().invoke(cli, ["accounts", "refresh-models"])
    assert "alpha: not refreshed: auth_failed" in result.output
    assert not catalog.load()


def test_refresh_models_refuses_an_undeclared_name(user_path):
    save_accounts_file([Account("alpha", "A_KEY", 5 * NANO)], None)
    result = CliRunner().invoke(cli, ["accounts", "refresh-models", "nobody"])
    assert result.exit_code == 1
    assert "NAMES: each must be a declared account's name" in result.output


def test_effective_accounts_narrow_declared_models_to_served_ones():
    revision = prices.current_revision()
    accounts = (Account("alpha", "A_KEY", NANO), Account("beta", "B_KEY", NANO, models=("claude-haiku-4-5",)))
    served = {"alpha": {"models": ["claude-sonnet-4-6"]}, "beta": {"models": ["claude-haiku-4-5-20251001", "claude-opus-4-6"]}}
    alpha, beta = catalog.effective_accounts(accounts, revision, served)
    assert alpha.models == ("claude-sonnet-4-6",)
    assert beta.models == ("claude-haiku-4-5-20251001",)  # the alias resolved to the model id


def test_an_account_never_refreshed_serves_every_priced_model():
    revision = prices.current_revision()
    [alpha] = catalog.effective_accounts((Account("alpha", "A_KEY", NANO),), revision, {})
    assert alpha.models is None


# Failures, fetch times and lists that keep themselves fresh (docs/architecture.md "Model lists")

T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)
HAIKU = "claude-haiku-4-5-20251001"


def accounts_cli(*args):
    return CliRunner().invoke(cli, ["accounts", *args], catch_exceptions=False)


def write_lists(**entries):
    catalog.cache_path().write_text(json.dumps(entries))


def listed(models, at, **extra):
    return {"models": models, "refreshed_at": clock.isoformat(at), **extra}


@pytest.fixture
def fixed_now(monkeypatch):
    monkeypatch.setattr(clock, "now", lambda: T0)
    return T0


def test_refresh_models_exits_non_zero_naming_each_account_it_could_not_refresh(accounts, fixed_now):
    accounts.set_behaviour("beta", "unauthorized")
    result = accounts_cli("refresh-models")
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (
        "Error: auth_failed: could not refresh the model list of account beta; "
        "each keeps its previous list (see llm accounts status)"
    )
    assert "alpha: 13 models" in result.output
    assert set(catalog.load()) == {"alpha"}


def test_refresh_models_json_still_exits_non_zero_when_an_account_failed(accounts, fixed_now):
    accounts.set_behaviour("alpha", "unauthorized")
    accounts.set_behaviour("beta", "unauthorized")
    result = CliRunner().invoke(cli, ["accounts", "refresh-models", "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout) == {"alpha": {"error": "auth_failed"}, "beta": {"error": "auth_failed"}}
    assert "could not refresh the model list of accounts alpha, beta" in result.stderr


def test_each_list_records_when_it_was_fetched(accounts, fixed_now):
    assert accounts_cli("refresh-models").exit_code == 0
    stored = catalog.load()
    assert stored["alpha"]["refreshed_at"] == stored["beta"]["refreshed_at"] == "2026-11-10T12:00:00+00:00"


def test_a_failed_refresh_keeps_the_old_list_and_status_says_so(accounts, fixed_now):
    old = listed(["claude-opus-4-6"], T0 - dt.timedelta(days=3))
    write_lists(alpha=old)
    accounts.set_behaviour("alpha", "unauthorized")
    assert accounts_cli("refresh-models", "alpha").exit_code == 1
    entry = catalog.load()["alpha"]
    assert (entry["models"], entry["refreshed_at"]) == (old["models"], old["refreshed_at"])
    assert (entry["error"], entry["failed_at"], entry["automatic"]) == ("auth_failed", "2026-11-10T12:00:00+00:00", False)
    table = accounts_cli("status").output
    assert "model list refresh failed (auth_failed) 2026-11-10 12:00 UTC; keeping the list from 2026-11-07 12:00 UTC" in table
    (alpha, beta) = json.loads(accounts_cli("status", "--json").output)["accounts"]
    assert alpha["model_list"] == {
        "models": 1, "refreshed_at": old["refreshed_at"], "stale": True,
        "failed_at": "2026-11-10T12:00:00+00:00", "error": "auth_failed", "automatic": False, "started_at": None,
    }
    assert beta["model_list"]["models"] is None  # never refreshed: serves every priced model


class Gate:
    """Holds every GET /v1/models of the background refresh until opened (it still reaches the
    stand-in afterwards), so a test can see what the prompt did while the refresh was in flight."""

    def __init__(self, monkeypatch):
        self.opened, self.waiting = threading.Event(), threading.Event()
        real = catalog.fetch_model_ids

        def held(*args, **kwargs):
            self.waiting.set()
            assert self.opened.wait(30)
            return real(*args, **kwargs)

        monkeypatch.setattr(catalog, "fetch_model_ids", held)


def test_a_stale_list_is_refreshed_in_the_background_and_the_next_prompt_uses_it(accounts, ledger_path, fixed_now, monkeypatch):
    # alpha's list is two days old and lacks haiku; beta's is fresh and has it.
    write_lists(alpha=listed(["claude-opus-4-6"], T0 - dt.timedelta(days=2)), beta=listed([HAIKU], T0))
    gate = Gate(monkeypatch)
    first = llm_cli("-m", "claude-routed/claude-haiku-4-5", "Hello")
    assert first.exit_code == 0, first.output
    # The prompt finished while the refresh was still held: it did not wait for it.
    assert gate.waiting.wait(10) and not gate.opened.is_set()
    assert catalog.load()["alpha"]["models"] == ["claude-opus-4-6"]
    assert [r["path"].split("?")[0] for r in accounts.requests] == ["/v1/messages"]
    gate.opened.set()
    assert catalog.wait_for_background(30)
    assert HAIKU in catalog.load()["alpha"]["models"]
    assert [(r["label"], r["path"].split("?")[0]) for r in accounts.requests][1:] == [("alpha", "/v1/models")]
    second = llm_cli("-m", "claude-routed/claude-haiku-4-5", "Hello")
    assert second.exit_code == 0, second.output
    assert [row["account"] for row in attempts(ledger_path)] == ["beta", "alpha"]


def test_a_fresh_or_never_fetched_list_is_not_refreshed_by_a_prompt(accounts, ledger_path, fixed_now):
    write_lists(alpha=listed([HAIKU], T0 - dt.timedelta(hours=23)))
    assert llm_cli("-m", "claude-routed/claude-haiku-4-5", "Hello").exit_code == 0
    assert catalog.wait_for_background(30)
    assert all(not r["path"].startswith("/v1/models") for r in accounts.requests)


def test_a_failed_automatic_refresh_keeps_the_old_list_says_so_and_waits_before_trying_again(
    accounts, ledger_path, fixed_now, monkeypatch
):
    old = listed([HAIKU], T0 - dt.timedelta(days=2))
    write_lists(alpha=old, beta=listed([HAIKU], T0))

    def broken(*args, **kwargs):
        raise RuntimeError("connection reset")

    monkeypatch.setattr(catalog, "fetch_model_ids", broken)
    result = llm_cli("-m", "claude-routed/claude-haiku-4-5", "Hello")
    assert result.exit_code == 0, result.output
    assert catalog.wait_for_background(30)
    entry = catalog.load()["alpha"]
    assert (entry["models"], entry["error"], entry["automatic"]) == ([HAIKU], "transport_error", True)
    assert "model list automatic refresh failed (transport_error)" in accounts_cli("status").output
    assert catalog.refresh_stale_in_background(load_declaration()) is None  # within the hour: not again
    later = T0 + catalog.RETRY_AFTER
    assert catalog.stale_accounts(load_declaration(), catalog.load(), later) == ["alpha"]


def test_the_background_refresh_never_runs_the_secret_lookup_command(accounts, ledger_path, fixed_now, user_path, tmp_path):
    # alpha's key is only behind the lookup command, which leaves a mark when it runs; alpha's
    # stale list lacks haiku, so the prompt itself goes to beta and never needs alpha's key.
    import sys

    marker = tmp_path / "lookup-ran"
    script = tmp_path / "lookup.py"
    script.write_text(f"import pathlib, sys\npathlib.Path({str(marker)!r}).touch()\nprint('unused')\n")
    stored = json.loads((user_path / "keys.json").read_text())
    del stored["ALPHA_KEY"]
    (user_path / "keys.json").write_text(json.dumps(stored))
    save_accounts_file(load_declaration().accounts, (sys.executable, str(script), "{name}"))
    write_lists(alpha=listed(["claude-opus-4-6"], T0 - dt.timedelta(days=2)), beta=listed([HAIKU], T0))
    assert llm_cli("-m", "claude-routed/claude-haiku-4-5", "Hello").exit_code == 0
    assert catalog.wait_for_background(30)
    assert not marker.exists()  # a password manager is never woken off the request path
    entry = catalog.load()["alpha"]
    assert (entry["models"], entry["error"], entry["automatic"]) == (["claude-opus-4-6"], "credential_missing", True)


def test_the_background_refresh_puts_no_key_in_the_environment(accounts, ledger_path, fixed_now):
    write_lists(alpha=listed([HAIKU], T0 - dt.timedelta(days=2)), beta=listed([HAIKU], T0 - dt.timedelta(days=2)))
    assert llm_cli("-m", "claude-routed/claude-haiku-4-5", "Hello").exit_code == 0
    assert catalog.wait_for_background(30)
    assert catalog.load()["alpha"]["refreshed_at"] == "2026-11-10T12:00:00+00:00"
    environment = "\n".join(f"{name}={value}" for name, value in os.environ.items())
    for key in accounts.keys.values():
        assert not any(run in environment for run in runs_of(key))
        assert_no_key_material(catalog.cache_path().read_text(), key)


def test_the_ladder_says_an_accounts_list_lacks_the_model(accounts, ledger_path, fixed_now):
    write_lists(alpha=listed(["claude-opus-4-6"], T0))
    rungs = {r["account"]: r for r in json.loads(accounts_cli("ladder", "--model", "claude-haiku-4-5", "--json").output)}
    assert rungs["beta"]["available"]
    assert (rungs["alpha"]["available"], rungs["alpha"]["code"]) == (False, "no_account_available")
    assert rungs["alpha"]["reason"] == (
        f"does not serve {HAIKU}: its model list from 2026-11-10 12:00 UTC lacks it (llm accounts refresh-models fetches it again)"
    )


def test_the_ladder_says_a_declaration_leaves_the_model_out(user_path, ledger_path, fixed_now):
    save_accounts_file([Account("alpha", "A_KEY", 5 * NANO, models=("claude-opus-4-6",))], None)
    (rung,) = json.loads(accounts_cli("ladder", "--model", "claude-haiku-4-5", "--json").output)
    assert rung["reason"] == f"does not serve {HAIKU}: not in its declared models"


# A key listed as a model id (docs/security.md "Provider strings")


def test_refresh_models_never_stores_or_prints_a_key_listed_as_a_model_id(standin, canary_key, user_path, monkeypatch):
    declare(user_path, canary_key, monkeypatch)
    standin.set_behaviour("a", "echo_key")
    plain = CliRunner().invoke(cli, ["accounts", "refresh-models"])
    assert plain.exit_code == 0, plain.output
    assert "alpha: 13 models (2 ids dropped: they held a run of the account's key or were not ids)" in plain.output
    as_json = CliRunner().invoke(cli, ["accounts", "refresh-models", "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout)["alpha"]["dropped"] == 2
    stored = catalog.cache_path().read_text()
    assert "claude-haiku-4-5-20251001" in json.loads(stored)["alpha"]["models"]
    assert_no_key_material(plain.output + as_json.output + stored, canary_key)


def test_the_background_refresh_never_stores_a_key_listed_as_a_model_id(accounts, ledger_path, fixed_now, user_path):
    write_lists(alpha=listed([HAIKU], T0 - dt.timedelta(days=2)), beta=listed([HAIKU], T0))
    accounts.set_behaviour("alpha", "echo_key")
    accounts.set_behaviour("beta", "echo_key")
    assert llm_cli("-m", "claude-routed/claude-haiku-4-5", "Hello", "-o", "account", "beta").exit_code == 0
    assert catalog.wait_for_background(30)
    assert any(r["label"] == "alpha" and r["path"].startswith("/v1/models") for r in accounts.requests)
    stored = catalog.cache_path().read_text()
    assert HAIKU in json.loads(stored)["alpha"]["models"]
    for key in accounts.keys.values():
        assert_no_key_material(stored, key)


def test_a_next_page_after_an_id_holding_the_key_is_never_asked_for(canary_key, user_path, monkeypatch):
    # has_more with the key as last_id: it would go back in the URL, which httpx logs.
    import httpx

    from llm_accounts import keys

    seen = []

    def answer(request):
        seen.append(str(request.url))
        page = {"data": [{"id": HAIKU}, "not an object", {"id": canary_key}], "has_more": True, "last_id": canary_key}
        return httpx.Response(200, content=iter([json.dumps(page).encode()]))  # streamed, as on the wire

    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        ids = catalog.fetch_model_ids(keys.Secret(canary_key), http, "http://127.0.0.1:9")
    assert (list(ids), ids.dropped) == ([HAIKU], 2)
    assert len(seen) == 1
    assert_no_key_material(" ".join(seen), canary_key)
