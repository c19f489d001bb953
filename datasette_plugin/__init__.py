"""Datasette plugin for the llm-accounts ledger (docs/architecture.md "Datasette").

Adds read-only canned queries to every database holding the ledger's tables, a spend
dashboard at ``/-/llm-accounts`` and the same figures as JSON at ``/-/llm-accounts.json``. Datasette 0.65 asks for canned queries through the
``canned_queries`` hook; the 1.0 alphas dropped that hook for ``datasette.add_query()``, called
from ``startup()``. Both are implemented so the plugin works on either.
"""

import json

from datasette import hookimpl
from datasette.utils.asgi import Forbidden, Response

from llm_accounts import clock

from . import dashboard
from .queries import GAINED_TABLES, LEDGER_TABLES, QUERIES, canned_queries as ledger_queries

DASHBOARD_PATH = "/-/llm-accounts"
SOURCE = "llm-accounts"


async def is_ledger(db):
    """A database is a ledger when it holds the ledger's core tables."""
    return set(LEDGER_TABLES) <= set(await db.table_names())


async def has_totals(db):
    """Whether the ledger holds the totals and per-machine health the queries and dashboard read
    (a ledger written by an older llm-accounts gains them the next time an ``llm accounts``
    command opens it)."""
    return set(LEDGER_TABLES + GAINED_TABLES) <= set(await db.table_names())


def route_name(datasette, query, tables):
    """The name to link ``query`` by.

    Datasette 0.65 serves a canned query before a table of the same name; the 1.0 alphas serve
    the table, so there a query named like a table (``health``) is registered and linked by its
    alias alone (``startup``), and listed once.
    """
    if hasattr(datasette, "add_query"):
        return query.unshadowed_name
    return query.name


@hookimpl
def canned_queries(datasette, database, actor):
    # Datasette 0.65; the 1.0 alphas never call this hook.
    async def inner():
        if await has_totals(datasette.get_database(database)):
            return ledger_queries()
        return {}

    return inner


@hookimpl
def startup(datasette):
    if not hasattr(datasette, "add_query"):
        return

    # Datasette 1.0 alphas: stored queries are added at start-up. Trusted, like canned
    # queries on 0.65: they run without the execute-sql permission, and none writes.
    async def inner():
        for db in list(datasette.databases.values()):
            if not await has_totals(db):
                continue
            for query in QUERIES:
                await datasette.add_query(
                    db.name,
                    query.unshadowed_name,
                    query.sql,
                    title=query.title,
                    description=query.description,
                    hide_sql=True,
                    parameters=list(query.params),
                    is_trusted=True,
                    source=SOURCE,
                )

    return inner


@hookimpl
def register_routes():
    return [(r"^/-/llm-accounts$", dashboard_view), (r"^/-/llm-accounts\.json$", dashboard_json)]


@hookimpl
def menu_links(datasette):
    """The dashboard link, only where a ledger is attached: on other Datasettes it would lead
    to an empty page."""

    async def inner():
        for db in list(datasette.databases.values()):
            if await is_ledger(db):
                return [{"href": datasette.urls.path(DASHBOARD_PATH), "label": "LLM accounts dashboard"}]
        return []

    return inner


async def _allowed(datasette, actor, action, database=None):
    """Permission check across Datasette 0.65 and the 1.0 alphas' resource-based API."""
    if hasattr(datasette, "allowed"):
        resource = None
        if database is not None:
            from datasette.resources import DatabaseResource

            resource = DatabaseResource(database)
        return await datasette.allowed(action=action, resource=resource, actor=actor)
    return await datasette.permission_allowed(actor, action, resource=database, default=True)


async def _ledgers(datasette, request, now):
    """``dashboard.load()`` of every ledger database the actor may view, with query links; a
    ledger without the totals yet is listed with ``outdated`` set and nothing loaded."""
    if not await _allowed(datasette, request.actor, "view-instance"):
        raise Forbidden("You do not have permission to view this instance")
    ledgers = []
    for db in list(datasette.databases.values()):
        if not await is_ledger(db):
            continue
        if not await _allowed(datasette, request.actor, "view-database", db.name):
            continue
        if not await has_totals(db):
            ledgers.append({"name": db.name, "outdated": True, "url": datasette.urls.database(db.name)})
            continue
        ledger = await dashboard.load(db, now)
        tables = set(await db.table_names())
        ledger["queries"] = [
            {
                "name": query.name,
                "title": query.title,
                "description": query.description,
                "url": datasette.urls.query(db.name, route_name(datasette, query, tables)),
            }
            for query in QUERIES
        ]
        ledger["url"] = datasette.urls.database(db.name)
        ledgers.append(ledger)
    return ledgers


async def dashboard_view(datasette, request):
    now = clock.now()
    ledgers = await _ledgers(datasette, request, now)
    html = await datasette.render_template(
        "llm_accounts_dashboard.html",
        {
            "ledgers": ledgers,
            "now": now.strftime("%Y-%m-%d %H:%M UTC"),
            "css_url": datasette.urls.static_plugins(SOURCE, "llm-accounts.css"),
            "json_url": datasette.urls.path(DASHBOARD_PATH + ".json"),
        },
        request=request,
    )
    return Response.html(html)


async def dashboard_json(datasette, request):
    """The dashboard's figures for scripts (docs/datasette.md): per ledger, each account's
    budget, spend, open ceilings, remaining, today, health and pace, and the credit period's days.

    ``_shape`` follows Datasette's JSON conventions, the accounts being the rows: none gives the
    whole document; ``objects`` the accounts as objects under ``rows``; ``array`` a bare array of
    them (``_nl=1``: one per line); ``arrays`` ``columns`` and ``rows`` of values."""
    shape = request.args.get("_shape")
    if shape not in dashboard.SHAPES:
        return Response.json(
            {"ok": False, "error": f"Invalid _shape: use one of {', '.join(dashboard.SHAPES[1:])}", "status": 400},
            status=400,
        )
    now = clock.now()
    ledgers = await _ledgers(datasette, request, now)
    document = {
        "now": clock.isoformat(now),
        "ledgers": [
            {"database": ledger["name"], "outdated": True} if ledger.get("outdated") else dashboard.as_json(ledger)
            for ledger in ledgers
        ],
    }
    shaped = dashboard.shaped(document, shape)
    if shape == "array" and request.args.get("_nl"):
        return Response.text("\n".join(json.dumps(row) for row in shaped))
    return Response.json(shaped)
