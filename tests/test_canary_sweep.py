"""One canary key through every path the project has, from each place a key can come from: no
run of it in any output, log line, file, ledger row, llm logs entry or Datasette page
(docs/security.md "Tests").

The stand-in quotes the key back (``echo_key``) on one prompt, in a web search's result and
citation, and in its model list, and refuses
another prompt with a 429;
the commands, llm's logs, an export and every canned query and dashboard page are read after.
"""

import asyncio
import json
import logging
import sys

import llm
import pytest
from datasette.app import Datasette

from conftest import assert_no_key_material, assert_tree_has_no_key_material, make_key
from llm_accounts.provider import settle as provider_pass
from llm_accounts.declarations import Account, save_accounts_file
from llm_accounts.money import NANO
from llm_accounts.standin.config import default_api_key_id
from routed_helpers import llm_cli

MODEL = "claude-routed/claude-haiku-4-5"
SOURCES = ("environment", "dotenv", "llm keys", "lookup command")


@pytest.fixture
def admin_canary():
    """The organization's Admin API key: a second canary, from the same source as the first."""
    return make_key()


@pytest.fixture(params=SOURCES)
def canary_account(request, canary_key, admin_canary, user_path, ledger_path, tmp_path, monkeypatch):
    """Account ``canary`` on the stand-in, its key ``canary_key`` and its organization's Admin API
    key ``admin_canary`` coming from one source; the files the test itself put the keys in are
    returned, to leave out of the tree sweep."""
    from llm_accounts.standin import StandIn

    placed, lookup = {"keys.json"}, None
    if request.param == "environment":
        monkeypatch.setenv("CANARY_KEY", canary_key)
        monkeypatch.setenv("CANARY_ADMIN", admin_canary)
    elif request.param == "dotenv":
        (tmp_path / "work" / ".env").write_text(f"CANARY_KEY={canary_key}\nCANARY_ADMIN={admin_canary}\n")
        placed.add(".env")
    elif request.param == "llm keys":
        (user_path / "keys.json").write_text(json.dumps({"CANARY_KEY": canary_key, "CANARY_ADMIN": admin_canary}))
    else:
        secret, admin = tmp_path / "secret-store", tmp_path / "admin-store"
        secret.write_text(canary_key)
        admin.write_text(admin_canary)
        script = tmp_path / "lookup.py"
        script.write_text(
            "import sys\n"
            f"stores = {{'CANARY_KEY': {str(secret)!r}, 'CANARY_ADMIN': {str(admin)!r}}}\n"
            "print(open(stores[sys.argv[1]]).read() if sys.argv[1] in stores else '')\n"
        )
        lookup = (sys.executable, str(script), "{name}")
        placed.update({"secret-store", "admin-store"})
    save_accounts_file([Account("canary", "CANARY_KEY", 50 * NANO, admin_key_env="CANARY_ADMIN")], lookup)
    config = {"keys": [{"label": "canary", "key": canary_key}], "admin_keys": [{"key": admin_canary, "organization": "org-canary"}]}
    with StandIn(config) as server:
        monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", server.base_url)
        yield server, placed


def test_no_path_shows_stores_or_logs_a_run_of_the_key(
    canary_account, canary_key, admin_canary, user_path, ledger_path, tmp_path, caplog
):
    server, placed = canary_account
    caplog.set_level(logging.DEBUG)
    outputs = []

    def run(*args):
        result = llm_cli(*args)
        outputs.append(result.output)
        return result

    # Prompts: streamed and whole, cached, with a schema, a reply quoting the key, a 429 retried,
    # a refusal, and an async stream.
    assert run("-m", MODEL, "Hello").exit_code == 0
    assert run("-m", MODEL, "--no-stream", "-s", "Be brief", "-o", "cache", "1h", "Hello").exit_code == 0
    assert run("-m", MODEL, "--schema", "name, age int", "A dog").exit_code == 0
    server.set_behaviour("canary", "ok", script=["echo_key", "echo_key"])
    assert run("-m", MODEL, "Quote it").exit_code == 0
    assert run("-m", MODEL, "--no-stream", "Quote it").exit_code == 0
    # A web search whose result (title, URL, encrypted content) and citation quote the key.
    server.set_behaviour("canary", "ok", script=["echo_key", "echo_key"])
    assert run("-m", MODEL, "-T", "WebSearch(max_uses=2)", "Search it").exit_code == 0
    assert run("-m", MODEL, "--no-stream", "-T", "WebSearch(max_uses=2)", "Search it").exit_code == 0
    server.set_behaviour("canary", "ok", script=["rate_limited"])
    assert run("-m", MODEL, "-o", "retries", "1", "After a 429").exit_code == 0
    server.set_behaviour("canary", "ok", script=["refusal"])
    assert run("-m", MODEL, "Declined").exit_code == 1
    # A reply quoting the key in a gzip-encoded stream: scrubbed once decoded.
    server.set_behaviour("canary", "ok", script=["echo_key"], shapes=["gzip", "set_cookie"])
    assert run("-m", MODEL, "Quote it gzipped").exit_code == 0
    server.set_behaviour("canary", "ok", script=["echo_key"], shapes=[])

    async def stream():
        return "".join([chunk async for chunk in llm.get_async_model(MODEL).prompt("Quote it async")])

    outputs.append(asyncio.run(stream()))
    # Price files holding the key (docs/security.md "Price files"): 'prices add' refuses both
    # without echoing it (a run from the middle of the key is found by the key's runs, the whole
    # key by its prefix) and copies neither; one put in the price directory by hand is not used.
    prices = user_path / "llm-accounts" / "prices"
    prices.mkdir(parents=True)
    for name, notes, model_id in (
        ("pasted-key.json", [canary_key], "claude-nova-6"),
        ("pasted-run.json", [], canary_key[20:60]),
        ("by-hand.json", [f"key {admin_canary}"], "claude-nova-6"),
    ):
        folder = prices if name == "by-hand.json" else tmp_path / "work"
        (folder / name).write_text(json.dumps(_price_file(name[: -len(".json")], notes, model_id)))
        placed.add(name)
    assert run("accounts", "prices", "add", str(tmp_path / "work" / "pasted-key.json")).exit_code == 1
    assert run("accounts", "prices", "add", str(tmp_path / "work" / "pasted-run.json")).exit_code == 1
    assert set(p.name for p in prices.iterdir()) == {"by-hand.json"}
    # The model list names the key as a model id (and an id quoting it) from here on.
    server.set_behaviour("canary", "echo_key")
    # Commands, llm's logs and an export.
    for args in (
        ("accounts", "refresh-models"),
        ("accounts", "status"),
        ("accounts", "status", "--json"),
        ("accounts", "list", "--json"),
        ("accounts", "attempts", "--json"),
        ("accounts", "attempts", "--csv"),
        ("accounts", "spend", "--by", "model", "--json"),
        ("accounts", "spend", "--by", "conversation", "--csv"),
        ("accounts", "ladder", "--json"),
        ("accounts", "prices"),
        ("accounts", "prices", "--json"),
        ("models", "list"),
        ("accounts", "count", "-m", MODEL, "-s", "Be brief", "Count me", "--json"),
        ("accounts", "refresh-models", "--json"),
        ("accounts", "reconcile", "--from-provider"),
        ("accounts", "reconcile", "--from-provider", "--json"),
        ("accounts", "audit", "--from-provider"),
        ("accounts", "audit", "--from-provider", "--json"),
        # With the key id confirmed, the minute usage report itself is read too.
        ("accounts", "set", "canary", "--api-key-id", default_api_key_id("canary")),
        ("accounts", "reconcile", "--from-provider", "--json"),
        ("accounts", "audit", "--from-provider"),
        ("logs", "-n", "0", "--json"),
    ):
        assert run(*args).exit_code == 0, args
    # The Admin API was really read, with the admin key, by the commands and the automatic pass.
    assert provider_pass.wait_for_background(30)
    assert any(r["path"].startswith("/v1/organizations/") and r["auth"] == "admin" for r in server.requests)
    usage_paths = ("/v1/organizations/usage_report/messages", "/v1/organizations/analytics/usage")
    assert any(r["path"].startswith(usage_paths) for r in server.requests)
    assert run("accounts", "export", str(tmp_path / "export.db")).exit_code == 0
    outputs.append(asyncio.run(_datasette_pages(ledger_path)))
    outputs.extend(record.getMessage() for record in caplog.records)

    assert "Echoing the key you sent" in "".join(outputs)  # the reply that quoted it was shown, masked
    assert "Stand-in result quoting [key]" in "".join(outputs)  # the search result, in llm logs --json
    assert "The key was [key]" in "".join(outputs)  # the citation's cited_text
    assert "must not hold an API key" in "".join(outputs)  # the price files were read and refused
    assert "2 ids dropped" in "".join(outputs)  # the model list that named it was read
    for key in (canary_key, admin_canary):
        for text in outputs:
            assert_no_key_material(text, key)
        assert_tree_has_no_key_material(tmp_path, key, ignore=placed)


def _price_file(revision, notes, model_id):
    rates = {"input": 2000, "write_5m": 2500, "write_1h": 4000, "cache_read": 200, "output": 10000}
    return {
        "revision": revision,
        "applies_from": "2026-12-05",
        "notes": notes,
        "models": [{"id": model_id, "context_window": 400000, "max_output": 32000, "status": "active", "rates": rates}],
    }


async def _datasette_pages(ledger_path):
    """Every canned query's JSON and the dashboard, as HTML and JSON."""
    from datasette_plugin.queries import QUERIES

    ds = Datasette([str(ledger_path)])
    pages = []
    for path in ("/-/llm-accounts", "/-/llm-accounts.json", "/accounts-ledger"):
        response = await ds.client.get(path)
        assert response.status_code == 200, path
        pages.append(response.text)
    for query in QUERIES:
        response = await ds.client.get(f"/accounts-ledger/{query.name}.json?_shape=array")
        assert response.status_code == 200, query.name
        pages.append(response.text)
    return "\n".join(pages)
