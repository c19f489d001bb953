"""A PostgreSQL ledger behind a pooler (docs/postgresql.md "Many short processes: a pooler"):
PgBouncer in transaction mode hands each transaction a server session that earlier processes
used. Each statement the ledger prepares is named for its text, its parameter types and its
schema, so a process finds the statements earlier ones prepared on that server session and runs
them by name, instead of planning each anew (docs/performance.md "Fleet"); a name never stands for
another schema's statement, and a server session that lost its statements costs a resend, never
an admission.

The pooler keeps one server session, so every connection here lands on the same one.
"""

import datetime as dt
import uuid

import psycopg
import pytest

from llm_accounts.declarations import Account
from llm_accounts.ledger import Complete, Ledger, Scope
from llm_accounts.ledger import postgres
from llm_accounts.pricing.prices import Quote

MODEL = "claude-sonnet-4-5-20250929"
NOW = dt.datetime(2026, 11, 10, 12, 0, tzinfo=dt.timezone.utc)
WORK = Account("work", "WORK_KEY", 10**9)
QUOTE = Quote(MODEL, 1_000_000, "2026-11-01", "ab" * 32)
USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 0}
COST = 12_345


@pytest.fixture
def pooled(pg_pooled_url):
    return pg_pooled_url


@pytest.fixture
def messages(pg_messages):
    return pg_messages


def admit(url, n):
    """One process's work: open, reserve and settle a new conversation, close."""
    with Ledger(url) as ledger:
        ledger.reserve(Scope("conversation", f"c{n}"), f"a{n}", QUOTE, [WORK], now=NOW)
        assert ledger.settle(f"a{n}", Complete(COST, USAGE, MODEL), now=NOW) == "settled"


def month(url):
    with Ledger(url) as ledger:
        row = ledger._conn.execute("SELECT settled_nusd, open_nusd FROM month WHERE name = 'work'").fetchone()
        return tuple(row)


def test_a_process_through_a_pooler_runs_by_name_what_earlier_processes_prepared(pooled, messages):
    admit(pooled, 1)  # the server session's first ledger session: sends its statements inline
    admit(pooled, 2)  # finds the session served before: prepares each statement at its first use
    del messages[:]
    admit(pooled, 3)
    opening, asking, work = messages[0], messages[1], messages[2:]
    assert "PREPARE" not in opening and "pg_prepared_statements" in asking  # asked on a served session only
    assert work and all("EXECUTE llm_accounts_" in m and "PREPARE" not in m for m in work)
    assert month(pooled) == (3 * COST, 0)


def test_a_pooled_process_prepares_nothing_an_earlier_one_left_on_the_server_session(pooled, pg_server):
    admit(pooled, 1)
    admit(pooled, 2)
    with psycopg.connect(pooled, autocommit=True) as conn:
        before = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0]
    admit(pooled, 3)
    with psycopg.connect(pooled, autocommit=True) as conn:
        after = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0]
    assert before > 0 and after == before


def test_a_pooled_process_whose_server_session_lost_the_statements_sends_them_inline(pooled):
    admit(pooled, 1)
    admit(pooled, 2)
    with Ledger(pooled) as ledger:  # opened while the server session had them
        with psycopg.connect(pooled, autocommit=True) as other:
            other.execute("DEALLOCATE ALL")  # as another server session would be handed over
        ledger.reserve(Scope("conversation", "c3"), "a3", QUOTE, [WORK], now=NOW)
        assert ledger.settle("a3", Complete(COST, USAGE, MODEL), now=NOW) == "settled"
        assert not ledger._conn._prepare  # it prepares nothing more
    assert month(pooled) == (3 * COST, 0)


def test_a_server_session_handed_to_another_schema_runs_that_schema_s_own_statements(pg_server):
    # A server session serving a ledger in one schema, then (through a pooler) a ledger in
    # another: the second prepares its own statements under names of its own and writes to its
    # own tables. (PostgreSQL would parse the first one's again for the new search_path, each
    # time the search_path changed; names by schema spare that.)
    schemas = [f"s_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    with psycopg.connect(pg_server.url, autocommit=True) as admin:
        for name in schemas:
            admin.execute(f"CREATE SCHEMA {name}")
    first_url = f"{pg_server.url}?options=-csearch_path%3D{schemas[0]}"
    with Ledger(f"{pg_server.url}?options=-csearch_path%3D{schemas[1]}") as second:
        second.reserve(Scope("conversation", "made"), "made", QUOTE, [WORK], now=NOW)  # its tables exist
    with Ledger(first_url) as first:
        for n in range(3):  # prepared from the second use
            first.reserve(Scope("conversation", f"c{n}"), f"a{n}", QUOTE, [WORK], now=NOW)
        raw = first._conn.raw
        assert raw.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()[0] > 0
        raw.execute(f"SET search_path = {schemas[1]}")  # the same server session, handed on
        handed = postgres.Connection(raw)
        backend = postgres.PostgresBackend(first_url, first._backend._busy)
        backend._prepare(handed, 5.0)
        assert handed._reused and handed._on_server
        first._conn, first._backend = handed, backend
        first.reserve(Scope("conversation", "c9"), "a9", QUOTE, [WORK], now=NOW)
        assert handed._statements and not set(handed._statements.values()) & handed._on_server
        counts = [raw.execute(f"SELECT count(*) FROM {name}.attempt").fetchone()[0] for name in schemas]
    assert counts == [3, 2]


@pytest.mark.parametrize(
    "change, says",
    [("?options=-csearch_path%3Dledger", "the pooler refused a parameter of the URL (PgBouncer passes no options=)"),
     ("database", "the pooler has no such database; name one its [databases] section lists")],
    ids=["options", "database"],
)
def test_a_url_the_pooler_refuses_is_one_line_naming_what_to_change(pooled, change, says):
    from llm_accounts.errors import AccountsError

    url = pooled + change if change.startswith("?") else pooled.rsplit("/", 1)[0] + "/nosuchdb"
    with pytest.raises(AccountsError) as caught:
        Ledger(url)
    message = str(caught.value)
    assert caught.value.code == "ledger_unavailable" and says in message and "\n" not in message


def test_a_direct_url_naming_a_database_that_does_not_exist_says_so(pg_server):
    from llm_accounts.errors import AccountsError

    with pytest.raises(AccountsError) as caught:
        Ledger(pg_server.url.rsplit("/", 1)[0] + "/nosuchdb")
    assert "the URL names a database that does not exist; create it first (createdb)" in str(caught.value)
