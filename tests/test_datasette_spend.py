"""Spend by model, client and conversation in Datasette (issue 23 point 2; docs/architecture.md
"Spend"): the canned queries and the dashboard's model and client panels, in process.

The ledger is written through ``Ledger`` (tests/test_spend.py's history, at fixed instants), so
the totals tables are the ones the attempt triggers keep; the dashboard's clock is fixed.
"""

import re

import pytest
from datasette.app import Datasette

import datasette_plugin
from datasette_plugin.queries import QUERIES
from llm_accounts import clock, schema
from llm_accounts.ledger import Ledger

from test_spend import HAIKU, SONNET, T0, DAY, history

MONTH = clock.credit_month(T0)  # the history's credit period, and the one before it
PREVIOUS = clock.credit_month(T0 - 20 * DAY)


@pytest.fixture
def ds(ledger_path, monkeypatch):
    ledger_path.parent.mkdir(parents=True, exist_ok=True)
    with Ledger(ledger_path) as ledger:
        history(ledger)
    monkeypatch.setattr(clock, "now", lambda: T0 + DAY)
    return Datasette([str(ledger_path)])


async def rows(ds, name, **params):
    (query,) = [query for query in QUERIES if query.name == name]
    route = datasette_plugin.route_name(ds, query, schema.TABLE_NAMES)
    query_string = "&".join(f"{key}={value}" for key, value in params.items())
    response = await ds.client.get(f"/accounts-ledger/{route}.json?_shape=array&{query_string}")
    assert response.status_code == 200, response.text
    return [tuple(row.values()) for row in response.json()]


@pytest.mark.asyncio
async def test_spend_by_model_shows_settled_and_open_ceilings_per_period_and_model(ds):
    assert await rows(ds, "spend_by_model", month=MONTH) == [
        (MONTH, SONNET, 3, "0.400000000", "2.000000000"),
        (MONTH, HAIKU, 2, "0.020000000", "0.000000007"),
    ]


@pytest.mark.asyncio
async def test_spend_by_model_without_a_period_lists_every_period_newest_first(ds):
    assert [row[:3] for row in await rows(ds, "spend_by_model", account="work")] == [
        (MONTH, SONNET, 2), (MONTH, HAIKU, 1), (PREVIOUS, SONNET, 1)
    ]


@pytest.mark.asyncio
async def test_spend_by_client_lists_labelled_attempts(ds):
    assert await rows(ds, "spend_by_client", month=MONTH) == [(MONTH, "nightly", 2, "0.320000000", "0.000000000")]
    assert await rows(ds, "spend_by_client", account="home") == []


@pytest.mark.asyncio
async def test_spend_by_conversation_lists_the_costliest_first(ds):
    assert await rows(ds, "spend_by_conversation", month=MONTH) == [
        (MONTH, "home", "c2", 1, "0.000000000", "2.000000000"),
        (MONTH, "work", "c1", 2, "0.320000000", "0.000000000"),
        (MONTH, "work", "c3", 1, "0.100000000", "0.000000000"),
    ]


@pytest.fixture(scope="module")
def many_file(tmp_path_factory):
    """tests/test_conversation_spend.py's history (equal totals, held ceilings, a moved
    conversation), written once: the queries only read it."""
    from test_conversation_spend import seeded

    path = tmp_path_factory.mktemp("many") / "accounts-ledger.db"
    with Ledger(path) as ledger:
        seeded(ledger)
    return path


@pytest.fixture
def many(many_file, monkeypatch):
    with Ledger(many_file) as ledger:
        expected = [tuple(row) for row in ledger._conn.execute(GROUPED)]
    monkeypatch.setattr(clock, "now", lambda: T0 + DAY)
    return Datasette([str(many_file)]), expected


# The canned query's rows from a plain GROUP BY over the attempts, in its documented order.
GROUPED = """
SELECT month_utc, account, scope_id, COUNT(*),
       printf('%d.%09d', COALESCE(SUM(cost_nusd), 0) / 1000000000, COALESCE(SUM(cost_nusd), 0) % 1000000000),
       printf('%d.%09d', COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0) / 1000000000,
              COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0) % 1000000000)
FROM attempt WHERE scope_kind = 'conversation' GROUP BY 1, 2, 3
ORDER BY 1 DESC, COALESCE(SUM(cost_nusd), 0) + COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0) DESC, 2, 3
"""


@pytest.mark.asyncio
@pytest.mark.parametrize("account, month", [("", ""), ("", MONTH), ("work", ""), ("home", MONTH)])
async def test_spend_by_conversation_equals_a_group_by_over_the_attempts(many, account, month):
    ds, expected = many
    expected = [row for row in expected if account in ("", row[1]) and month in ("", row[0])]
    assert len(expected) > 2
    assert await rows(ds, "spend_by_conversation", account=account, month=month) == expected


@pytest.mark.asyncio
async def test_spend_by_conversation_pages_with_limit_and_offset(many):
    ds, expected = many
    pages = [await rows(ds, "spend_by_conversation", limit=5, offset=offset) for offset in (0, 5, 10, 15)]
    assert [len(page) for page in pages] == [5, 5, 2, 0]
    assert sum(pages, []) == expected


def panel(html, name):
    match = re.search(rf'<table class="llma-{name}-spend">(.*?)</table>', html, re.S)
    assert match, f"no {name} panel"
    return [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row)).strip() for row in re.findall(r"<tr data-.*?</tr>", match.group(1), re.S)]


@pytest.mark.asyncio
async def test_dashboard_shows_dollars_per_model_and_per_client(ds):
    response = await ds.client.get("/-/llm-accounts")
    assert response.status_code == 200
    assert panel(response.text, "model") == [f"{SONNET} 3 $0.40 $2.00", f"{HAIKU} 2 $0.02 $0.00000001"]
    assert panel(response.text, "client") == ["nightly 2 $0.32 $0.00"]


@pytest.mark.asyncio
async def test_dashboard_json_carries_model_and_client_spend_in_nanodollars(ds):
    data = (await ds.client.get("/-/llm-accounts.json")).json()
    (ledger,) = data if isinstance(data, list) else data.get("ledgers", [data])
    assert ledger["model_spend"][1] == {
        "model": HAIKU, "attempts": 2, "settled": {"nusd": 20_000_000, "usd": "0.020000000"},
        "open_ceilings": {"nusd": 7, "usd": "0.000000007"},
    }
    assert [row["client"] for row in ledger["client_spend"]] == ["nightly"]
