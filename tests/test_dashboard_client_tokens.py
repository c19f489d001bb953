"""The dashboard's token use per client and account (docs/architecture.md "Client caps", "Datasette")."""

import datetime as dt
import re
import sqlite3

import pytest
from datasette.app import Datasette

from datasette_plugin import dashboard

from llm_accounts import clock
from llm_accounts.declarations import Account
from llm_accounts.ledger import Complete, Ledger, Scope
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote

T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)
MODEL = "claude-sonnet-4-5-20250929"


def quote(tokens):
    return Quote(MODEL, 1, "2026-11-01", "ab" * 32, ceiling_tokens=tokens)


def text_of(html, css):
    match = re.search(rf'<table class="{css}">(.*?)</table>', html, re.S)
    assert match, f"no table {css}"
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", match.group(1))).strip()


@pytest.mark.asyncio
async def test_the_dashboard_shows_each_clients_tokens_used_and_open(ledger_path, monkeypatch):
    monkeypatch.setattr(clock, "now", lambda: T0)
    work = Account("work", "WORK_KEY", NANO, client_tokens=(("ci-bot", 10**6),))
    with Ledger() as ledger:
        ledger.reserve(Scope("conversation", "c1"), "a1", quote(50_000), [work], client="ci-bot")
        ledger.settle("a1", Complete(1, {"input_tokens": 1_200, "cache_read_input_tokens": 34, "output_tokens": 5}, MODEL))
        ledger.reserve(Scope("conversation", "c2"), "a2", quote(70_000), [work], client="ci-bot")
        ledger.reserve(Scope("conversation", "c3"), "a3", quote(90_000), [work])  # no client: not listed
    response = await Datasette([str(ledger_path)]).client.get("/-/llm-accounts")
    assert response.status_code == 200
    assert text_of(response.text, "llma-client-tokens") == (
        "Account Client Tokens used Open token ceilings work ci-bot 1,239 70,000"
    )


@pytest.mark.asyncio
async def test_a_ledger_without_token_columns_shows_no_token_table(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE attempt (id TEXT PRIMARY KEY, client TEXT, month_utc TEXT, state TEXT)")
    db.close()

    class Db:  # what dashboard.load() is given: a database with an async execute()
        async def execute(self, sql, params=None):
            class Result:
                rows = sqlite3.connect(path).execute(sql, params or {}).fetchall()

            return Result()

    assert await dashboard.client_tokens(Db(), {"month": clock.credit_month(T0)}) == []
