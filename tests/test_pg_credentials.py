"""A PostgreSQL ledger's credentials are shown masked by libpq's own parsing rules, and no child
process is given them (docs/security.md "Child processes", docs/architecture.md "Ledger on
PostgreSQL")."""

import builtins
import json

import pytest
from click.testing import CliRunner

from llm_accounts import browse, keys, paths
from llm_accounts.declarations import load_declaration
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Ledger

SECRET = "pw-s3cr3t"
# libpq reads everything between "user:" and the first "@" before the first "/" as the password,
# "?" and "#" included; a URL parser stops at them and shows the rest as a query or a fragment.
URLS = {
    "question mark": f"postgresql://app:{SECRET}?x=1@db.example:5432/ledger",
    "hash": f"postgresql://app:{SECRET}#frag@db.example:5432/ledger",
    "both": f"postgresql://app:{SECRET}?a#b@db.example/ledger?sslmode=require",
    "encoded": "postgresql://app:pw%2Ds3cr3t@db.example/ledger",
    "sslpassword": f"postgresql://app@db.example/ledger?sslmode=verify-full&sslpassword={SECRET}",
    "password parameter": f"postgres://db.example/ledger?password={SECRET}&application_name=x",
    "socket directory": f"postgresql:///ledger?host=/var/run/postgresql&password={SECRET}",
    "slash in the password": f"postgresql://app:{SECRET}/x@db.example/ledger",
}


def without_psycopg(monkeypatch):
    real = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name == "psycopg" or name.startswith("psycopg."):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)


@pytest.mark.parametrize("psycopg", [True, False], ids=["libpq", "fallback"])
@pytest.mark.parametrize("name", sorted(URLS))
def test_a_url_is_shown_without_its_password(name, psycopg, monkeypatch):
    if not psycopg:
        without_psycopg(monkeypatch)
    shown = paths.mask_url(URLS[name])
    assert "s3cr3t" not in shown and "pw-s3" not in shown, shown
    assert shown.startswith("postgresql://") and "***" in shown, shown


def test_a_masked_url_keeps_what_locates_the_ledger():
    assert paths.mask_url(URLS["both"]) == "postgresql://app:***@db.example/ledger?sslmode=require"
    assert paths.mask_url(URLS["sslpassword"]) == "postgresql://app@db.example/ledger?sslmode=verify-full&sslpassword=***"


@pytest.mark.parametrize("name", ["question mark", "hash", "sslpassword"])
def test_llm_accounts_path_never_prints_the_password(name, monkeypatch):
    from llm_accounts.cli import accounts

    monkeypatch.setenv("LLM_ACCOUNTS_LEDGER", URLS[name])
    result = CliRunner().invoke(accounts, ["path"])
    assert result.exit_code == 0
    assert "s3cr3t" not in result.output and "***" in result.output


@pytest.mark.parametrize("name", ["question mark", "hash"])
def test_a_ledger_error_never_quotes_the_password(name, unused_tcp_port):
    url = URLS[name].replace("db.example:5432", f"127.0.0.1:{unused_tcp_port}").replace("db.example", f"127.0.0.1:{unused_tcp_port}")
    with pytest.raises(AccountsError) as caught:
        Ledger(url)
    assert caught.value.code == "ledger_unavailable"
    assert "s3cr3t" not in str(caught.value)


def test_llm_accounts_export_never_prints_the_password(monkeypatch, tmp_path, unused_tcp_port):
    from llm_accounts.cli import accounts

    monkeypatch.setenv("LLM_ACCOUNTS_LEDGER", f"postgresql://app:{SECRET}?x@127.0.0.1:{unused_tcp_port}/ledger")
    result = CliRunner().invoke(accounts, ["export", str(tmp_path / "copy.db")])
    assert result.exit_code == 1
    assert "s3cr3t" not in result.output and "***" in result.output


def ledger_environ(ledger_url):
    return {
        "PATH": "/usr/bin",
        "KEPT_SETTING": "plain value",
        "LLM_ACCOUNTS_LEDGER": ledger_url,
        "PGPASSWORD": SECRET,
        "PGUSER": "app",
        "PGSERVICEFILE": "/home/app/.pg_service.conf",
        "DATABASE_URL": f"postgresql://other:{SECRET}@db.example/other",
    }


def test_browse_gives_datasette_no_ledger_url_and_no_pg_variable(ledger_path, monkeypatch):
    # Datasette serves a SQLite file (for a PostgreSQL ledger, a copy): it needs no credential.
    Ledger(ledger_path).close()
    seen = {}

    class Child:
        def __init__(self, command, env):
            seen.update(env)

        def wait(self):
            return 0

    monkeypatch.setattr(browse.subprocess, "Popen", Child)
    monkeypatch.setattr(browse, "check_port_free", lambda port: None)
    environ = ledger_environ(URLS["question mark"])
    browse.browse(ledger_path, environ=environ, echo=lambda text: None)
    assert seen["KEPT_SETTING"] == "plain value"  # the environment was passed on, without credentials
    assert not {"LLM_ACCOUNTS_LEDGER", "PGPASSWORD", "PGUSER", "PGSERVICEFILE", "DATABASE_URL"} & set(seen)
    assert "s3cr3t" not in json.dumps(seen)


def test_the_lookup_command_gets_no_ledger_url_and_no_pg_variable(user_path):
    environ = ledger_environ(URLS["hash"])
    env = keys.lookup_environment(load_declaration(), environ)
    assert env == {"PATH": "/usr/bin", "KEPT_SETTING": "plain value"}


def test_a_sqlite_ledger_path_is_passed_on(user_path, tmp_path):
    environ = {"PATH": "/usr/bin", "LLM_ACCOUNTS_LEDGER": str(tmp_path / "ledger.db")}
    assert keys.lookup_environment(load_declaration(), environ) == environ
