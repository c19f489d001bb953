"""Runs of a declared key, or of an admin key, found where they would be copied or printed
(issue 33, point 7; docs/security.md "Price files" and "Settling from the provider").

Each test fails on one mutant: the admin keys left out of ``prices add``'s check, field names
left out of it, or an inferred key id taken without matching it against the admin key's runs.
"""

import json
import secrets
import string

import httpx
import pytest
from click.testing import CliRunner
from llm.cli import cli

from conftest import assert_no_key_material
from llm_accounts import keys
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.errors import AccountsError
from llm_accounts.pricing import user_prices
from llm_accounts.money import NANO
from llm_accounts.provider import settle

LOWER = string.ascii_lowercase


def key_with_lowercase_stretch(prefix):
    """A key-shaped canary whose middle is 40 lower-case letters, so a run of it fits a field name
    the price format accepts (``server_tool_fees``' ``*_requests`` names are lower-case)."""
    alnum = string.ascii_letters + string.digits
    return (prefix + "".join(secrets.choice(alnum) for _ in range(20)) + "".join(secrets.choice(LOWER) for _ in range(40))
            + "".join(secrets.choice(alnum) for _ in range(33)) + "AA")


@pytest.fixture
def declared(user_path):
    """Two accounts: alpha's key and its organization's admin key, and beta's key."""
    keys = {
        "ALPHA_KEY": key_with_lowercase_stretch("sk-ant-api03-"),
        "ALPHA_ADMIN": key_with_lowercase_stretch("sk-ant-admin01-"),
        "BETA_KEY": key_with_lowercase_stretch("sk-ant-api03-"),
    }
    (user_path / "keys.json").write_text(json.dumps(keys))
    save_accounts_file(
        [Account("alpha", "ALPHA_KEY", 20 * NANO, admin_key_env="ALPHA_ADMIN"), Account("beta", "BETA_KEY", 20 * NANO, rank=1)],
        None,
    )
    return keys


def price_file(tmp_path, **changes):
    data = {
        "revision": "2026-12-05-mine",
        "applies_from": "2026-12-05",
        "models": [{"id": "claude-nova-6", "context_window": 400000, "max_output": 32000, "status": "active",
                    "rates": {"input": 2000, "write_5m": 2500, "write_1h": 4000, "cache_read": 200, "output": 10000}}],
        **changes,
    }
    path = tmp_path / "pasted.json"
    path.write_text(json.dumps(data))
    return path


def refused(path, key):
    result = CliRunner().invoke(cli, ["accounts", "prices", "add", str(path)], catch_exceptions=False)
    assert result.exit_code == 1
    assert "must not hold an API key (it holds a run of a declared key); nothing was added" in result.output
    assert_no_key_material(result.output, key)
    assert not user_prices.prices_dir().exists() or not any(user_prices.prices_dir().iterdir())
    return result.output


@pytest.mark.parametrize("env", ["ALPHA_KEY", "ALPHA_ADMIN", "BETA_KEY"])
def test_prices_add_refuses_a_run_of_every_declared_key_and_admin_key_in_a_value(declared, tmp_path, env):
    run = declared[env][40:60]  # from the lower-case middle: no key prefix, only the run shows it
    output = refused(price_file(tmp_path, notes=["copied from " + run]), declared[env])
    assert "FILE: notes[0]: must not hold" in output


@pytest.mark.parametrize("env", ["ALPHA_KEY", "ALPHA_ADMIN", "BETA_KEY"])
def test_prices_add_refuses_a_run_of_every_declared_key_and_admin_key_in_a_field_name(declared, tmp_path, env):
    count = declared[env][40:60] + "_requests"
    output = refused(price_file(tmp_path, server_tool_fees={count: 0}), declared[env])
    assert "FILE: server_tool_fees: must not hold" in output


def test_a_file_holding_no_run_of_any_declared_key_is_added(declared, tmp_path):
    result = CliRunner().invoke(cli, ["accounts", "prices", "add", str(price_file(tmp_path, notes=["mine"]))])
    assert result.exit_code == 0, result.output


def test_an_inferred_key_id_holding_a_run_of_the_admin_key_is_refused_never_printed():
    admin_key = key_with_lowercase_stretch("sk-ant-admin01-")
    leaked = "apikey_" + admin_key[40:60]

    def answer(request):
        page = {"data": [{"id": leaked, "status": "active"}], "has_more": False, "last_id": leaked}
        return httpx.Response(200, content=iter([json.dumps(page).encode()]))  # streamed, as on the wire

    account = Account("alpha", "ALPHA_KEY", 20 * NANO, admin_key_env="ALPHA_ADMIN")
    with httpx.Client(transport=httpx.MockTransport(answer)) as http:
        with pytest.raises(AccountsError) as caught:
            settle.key_id_for(account, http, "http://127.0.0.1:9", keys.Secret(admin_key))
    assert caught.value.code == "provider_error"
    assert str(caught.value).endswith("listed a key id that is not in the documented shape")
    assert_no_key_material(str(caught.value), admin_key)
