"""llm accounts refresh-models: which models each account serves (ADR-0055)."""

import json

from click.testing import CliRunner
from llm.cli import cli

from conftest import assert_no_key_material
from llm_accounts import catalog, pricing
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.money import NANO


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
    revision = pricing.current_revision()
    accounts = (Account("alpha", "A_KEY", NANO), Account("beta", "B_KEY", NANO, models=("claude-haiku-4-5",)))
    served = {"alpha": {"models": ["claude-sonnet-4-6"]}, "beta": {"models": ["claude-haiku-4-5-20251001", "claude-opus-4-6"]}}
    alpha, beta = catalog.effective_accounts(accounts, revision, served)
    assert alpha.models == ("claude-sonnet-4-6",)
    assert beta.models == ("claude-haiku-4-5-20251001",)  # the alias resolved to the model id


def test_an_account_never_refreshed_serves_every_priced_model():
    revision = pricing.current_revision()
    [alpha] = catalog.effective_accounts((Account("alpha", "A_KEY", NANO),), revision, {})
    assert alpha.models is None
