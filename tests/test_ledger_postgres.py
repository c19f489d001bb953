"""The PostgreSQL ledger's own contract (docs/architecture.md "Ledger on PostgreSQL"): what differs
from a file is connecting, locking, the recorded schema version and the SQLite export. The rules
themselves run on both backends in test_ledger.py and test_ledger_health.py (``ledger_location``).
"""

import datetime as dt
import json
import sqlite3
import subprocess
import sys
import threading

import psycopg
import pytest
from click.testing import CliRunner

from llm_accounts import clock, ledger as ledger_module
from llm_accounts.declarations import Account
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import postgres
from llm_accounts.ledger import Complete, Ledger, NotSent, Refused, Scope, Unknown
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
MODEL = "claude-sonnet-4-5-20250929"
USAGE = {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 0}


def quote(ceiling):
    return Quote(MODEL, ceiling, "2026-11-01", "ab" * 32)


def conv(name):
    return Scope("conversation", name)


def raw(url):
    return psycopg.connect(url, autocommit=True)


def history(ledger):
    """The same accounting on any backend: settled, open, refused, client-capped, adjusted,
    reconciled, over two UTC days."""
    work = Account("work", "WORK_KEY", NANO, clients=(("ci", NANO // 2),))
    home = Account("home", "HOME_KEY", 2 * NANO, daily_budget_nusd=NANO)
    for i in range(6):
        at = T0 + dt.timedelta(hours=7 * i)
        ledger.reserve(conv(f"c{i}"), f"a{i}", quote(10_000 + i), [work, home], client="ci" if i % 2 else None, now=at)
    ledger.settle("a0", Complete(5_000, USAGE, MODEL, "req_0"), now=T0)
    ledger.settle("a1", Refused("rate_limited", 429, "rate_limit_error", "other", "rate_limited"), now=T0)
    ledger.settle("a2", NotSent(), now=T0)
    ledger.settle("a3", Unknown("stream_truncated"), now=T0)
    ledger.reconcile("r1", "a3", 7_000, "invoice-1", now=T0)
    ledger.adjust("j1", "home", "2026-11", 123, "invoice-2", now=T0)
    return work, home


def totals(ledger):
    tables = ("month", "day", "month_outcome", "month_client", "month_model", "month_conversation", "warm_month", "binding", "adjustment")
    out = {}
    for table in tables:
        rows = ledger._conn.execute(f"SELECT * FROM {table}").fetchall()
        out[table] = sorted(
            tuple((k, row[k]) for k in row.keys() if k not in ("id", "created_at")) for row in rows
        )
    return out


# The SQLite path never imports the driver


def test_the_sqlite_ledger_imports_nothing_of_psycopg(tmp_path):
    script = f"""
import sys
class Blocked:
    def find_spec(self, name, path=None, target=None):
        if name == "psycopg" or name.startswith(("psycopg.", "psycopg_")):
            raise ImportError("psycopg is blocked")
sys.meta_path.insert(0, Blocked())
import llm_accounts, llm_accounts.cli, llm_accounts.models
from llm_accounts.declarations import Account
from llm_accounts.ledger import Ledger, Scope
from llm_accounts.pricing.prices import Quote
with Ledger({str(tmp_path / 'ledger.db')!r}) as ledger:
    ledger.reserve(Scope("conversation", "c1"), "a1", Quote("{MODEL}", 1, "2026-11-01", "ab" * 32), [Account("work", "WORK_KEY", 10**9)])
    ledger.export({str(tmp_path / 'copy.db')!r})
print(sorted(name for name in sys.modules if "psycopg" in name))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# Connecting: a URL is never shown with its password


def test_a_url_is_shown_with_its_password_masked():
    assert postgres.mask("postgresql://app:s3cr3t-pw@db.example:5432/ledger?sslmode=require&password=other") == (
        "postgresql://app:***@db.example:5432/ledger?sslmode=require"  # libpq keeps the last password
    )


def test_an_unreachable_server_is_ledger_unavailable_without_the_password(unused_tcp_port):
    with pytest.raises(AccountsError) as caught:
        Ledger(f"postgresql://app:s3cr3t-pw@127.0.0.1:{unused_tcp_port}/ledger")
    assert caught.value.code == "ledger_unavailable"
    assert "s3cr3t" not in str(caught.value) and "\n" not in str(caught.value)
    assert "postgresql://app:***@127.0.0.1" in str(caught.value)


def test_llm_accounts_path_prints_the_url_masked(monkeypatch):
    from llm_accounts.cli import accounts

    monkeypatch.setenv("LLM_ACCOUNTS_LEDGER", "postgresql://app:s3cr3t-pw@db.example/ledger")
    result = CliRunner().invoke(accounts, ["path"])
    assert result.exit_code == 0
    assert result.output.strip() == "postgresql://app:***@db.example/ledger"


def test_the_password_may_come_from_pgpassword(pg_server, monkeypatch):
    with raw(pg_server.url) as conn:
        conn.execute("DROP ROLE IF EXISTS ledger_user")
        conn.execute("CREATE ROLE ledger_user LOGIN PASSWORD 'pw-from-env'")
        conn.execute("CREATE SCHEMA IF NOT EXISTS ledger_user AUTHORIZATION ledger_user")
    hba = pg_server.data / "pg_hba.conf"
    original = hba.read_text()
    try:
        hba.write_text("host all ledger_user 127.0.0.1/32 scram-sha-256\n" + original)
        with raw(pg_server.url) as conn:
            conn.execute("SELECT pg_reload_conf()")
        url = f"postgresql://ledger_user@127.0.0.1:{pg_server.port}/postgres"
        monkeypatch.setenv("PGPASSWORD", "wrong")
        with pytest.raises(AccountsError) as caught:
            Ledger(url)
        assert caught.value.code == "ledger_unavailable" and "refused the login" in str(caught.value)
        assert "wrong" not in str(caught.value)
        monkeypatch.setenv("PGPASSWORD", "pw-from-env")
        with Ledger(url) as ledger:
            assert ledger.backend == "postgres" and ledger.status([]) == []
    finally:
        hba.write_text(original)
        with raw(pg_server.url) as conn:
            conn.execute("SELECT pg_reload_conf()")
            conn.execute("DROP SCHEMA ledger_user CASCADE")


# The schema: recorded version, refused when foreign or unknown, never reset


def test_a_new_ledger_records_its_schema_version_and_bigint_money(pg_url):
    Ledger(pg_url).close()
    with raw(pg_url) as conn:
        assert conn.execute("SELECT version FROM ledger_meta").fetchall() == [(3,)]
        types = dict(conn.execute(
            """SELECT column_name, data_type FROM information_schema.columns
               WHERE table_schema = current_schema() AND table_name = 'attempt'"""
        ).fetchall())
    assert (types["ceiling_nusd"], types["cost_nusd"], types["id"]) == ("bigint", "bigint", "text")


def test_the_same_tables_and_columns_as_the_sqlite_ledger(pg_url, tmp_path):
    Ledger(pg_url).close()
    lite = sqlite3.connect(Ledger(tmp_path / "l.db").path)
    expected = {
        table: {row[1] for row in lite.execute(f"PRAGMA table_info({table})")}
        for (table,) in lite.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    with raw(pg_url) as conn:
        found = {}
        for table, column in conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = current_schema()"
        ):
            found.setdefault(table, set()).add(column)
    assert found.pop("ledger_meta")
    assert found.pop("attempt") - expected.pop("attempt") == {"seq"}  # admission order, SQLite's rowid
    assert found == expected


def test_a_version_2_ledger_gains_the_waiter_table_as_version_3_and_keeps_its_rows(
    pg_url, work=Account("work", "WORK_KEY", NANO)
):
    with Ledger(pg_url) as ledger:
        ledger.reserve(conv("c1"), "a1", quote(100), [work], now=T0)
    with raw(pg_url) as conn:
        conn.execute("DROP TABLE waiter")
        conn.execute("UPDATE ledger_meta SET version = 2")
        conn.execute("COMMENT ON TABLE ledger_meta IS NULL")  # a version-2 build stamps nothing
    with Ledger(pg_url) as ledger:
        ledger.reserve(conv("c2"), "a2", quote(100), [work], now=T0)
    with raw(pg_url) as conn:
        assert conn.execute("SELECT version FROM ledger_meta").fetchone() == (3,)
        assert conn.execute("SELECT id FROM attempt ORDER BY seq").fetchall() == [("a1",), ("a2",)]
        assert conn.execute("SELECT COUNT(*) FROM waiter").fetchone() == (0,)


def test_an_unknown_schema_version_is_refused_and_left_as_it_is(pg_url, work=Account("work", "WORK_KEY", NANO)):
    with Ledger(pg_url) as ledger:
        ledger.reserve(conv("c1"), "a1", quote(100), [work], now=T0)
    with raw(pg_url) as conn:
        conn.execute("UPDATE ledger_meta SET version = 99")
        conn.execute("COMMENT ON TABLE ledger_meta IS 'a newer build'")  # its own stamp
    with pytest.raises(AccountsError) as caught:
        Ledger(pg_url)
    assert caught.value.code == "ledger_unavailable" and "schema version 99" in str(caught.value)
    with raw(pg_url) as conn:
        assert conn.execute("SELECT version FROM ledger_meta").fetchone() == (99,)
        assert conn.execute("SELECT id FROM attempt").fetchall() == [("a1",)]


def test_a_schema_holding_other_tables_is_refused_and_untouched(pg_url):
    with raw(pg_url) as conn:
        conn.execute("CREATE TABLE invoices (n int)")
    with pytest.raises(AccountsError) as caught:
        Ledger(pg_url)
    assert caught.value.code == "ledger_unavailable" and "not an llm-accounts ledger's" in str(caught.value)
    with raw(pg_url) as conn:
        tables = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()").fetchall()
    assert tables == [("invoices",)]


def test_ledger_tables_without_a_version_row_are_refused(pg_url):
    Ledger(pg_url).close()
    with raw(pg_url) as conn:
        conn.execute("DROP TABLE ledger_meta")
    with pytest.raises(AccountsError) as caught:
        Ledger(pg_url)
    assert caught.value.code == "ledger_unavailable" and "no ledger_meta" in str(caught.value)


# Locking: one advisory lock per ledger, five-second bound


def test_a_write_lock_held_past_the_bound_is_ledger_busy_and_nothing_is_admitted(pg_url, monkeypatch):
    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_S", 0.3)
    work = Account("work", "WORK_KEY", NANO)
    ledger = Ledger(pg_url)
    schema_name = pg_url.rsplit("%3D", 1)[1]
    with raw(pg_url) as holder:
        holder.execute("BEGIN")
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (postgres.lock_key(schema_name),))
        with pytest.raises(AccountsError) as caught:
            ledger.reserve(conv("c1"), "a1", quote(100), [work], now=T0)
        assert caught.value.code == "ledger_busy" and "nothing was sent" in str(caught.value)
        assert ledger.status([work], now=T0)[0].open_attempts == 0  # reads take no lock
        holder.execute("COMMIT")
    assert ledger.reserve(conv("c1"), "a1", quote(100), [work], now=T0).account == "work"
    ledger.close()


def test_admissions_from_threads_with_their_own_connections_never_pass_the_budget(pg_url):
    work = Account("work", "WORK_KEY", 10 * 1000)
    Ledger(pg_url).close()
    admitted, errors = [], []

    def run(index):
        with Ledger(pg_url) as ledger:
            for n in range(8):
                try:
                    ledger.reserve(conv(f"t{index}-{n}"), f"t{index}-{n}", quote(1000), [work], now=T0)
                    admitted.append(1)
                except AccountsError as error:
                    errors.append(error.code)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(admitted) == 10 and set(errors) == {"budget_exhausted"}


# Totals and the SQLite export


def test_the_running_totals_are_the_same_on_both_backends(pg_url, tmp_path):
    with Ledger(pg_url) as pg, Ledger(tmp_path / "ledger.db") as lite:
        history(pg)
        history(lite)
        assert totals(pg) == totals(lite)
        assert pg.audit() == [] == lite.audit()


def test_an_export_has_the_sqlite_ledgers_schema_and_every_row(pg_url, tmp_path):
    with Ledger(pg_url) as pg:
        work, home = history(pg)
        copy = pg.export(tmp_path / "copy.db")
        expected_status = pg.status([work, home], now=T0)
        expected_attempts = [{k: v for k, v in a.items() if k != "seq"} for a in pg.attempts()]
    fresh = sqlite3.connect(Ledger(tmp_path / "fresh.db").path)
    exported = sqlite3.connect(copy)
    schema_of = "SELECT type, name, sql FROM sqlite_master ORDER BY type, name"
    assert exported.execute(schema_of).fetchall() == fresh.execute(schema_of).fetchall()
    assert exported.execute("PRAGMA user_version").fetchone() == (3,)
    with Ledger(copy) as lite:
        assert lite.status([work, home], now=T0) == expected_status
        assert lite.attempts() == expected_attempts  # newest first: rowid keeps PostgreSQL's order
        assert lite.audit() == []


def test_an_export_never_overwrites_a_file(pg_url, tmp_path):
    target = tmp_path / "there.db"
    target.write_bytes(b"precious")
    with Ledger(pg_url) as pg:
        with pytest.raises(AccountsError) as caught:
            pg.export(target)
    assert caught.value.code == "declaration_invalid" and "PATH" in str(caught.value)
    assert target.read_bytes() == b"precious"


def test_llm_accounts_export_then_datasette_shows_the_spend_status_shows(pg_url, tmp_path, monkeypatch):
    import asyncio

    from datasette.app import Datasette

    from llm_accounts.cli import accounts

    monkeypatch.setenv("LLM_ACCOUNTS_LEDGER", pg_url)
    work, home = Account("work", "WORK_KEY", NANO), Account("home", "HOME_KEY", 2 * NANO)
    monkeypatch.setenv("ANTHROPIC_ACCOUNTS", json.dumps([
        {"name": "work", "key_env": "WORK_KEY", "budget_usd": "1"}, {"name": "home", "key_env": "HOME_KEY", "budget_usd": "2"}
    ]))
    now = clock.now()
    with Ledger(pg_url) as ledger:
        for i in range(4):
            ledger.reserve(conv(f"c{i}"), f"a{i}", quote(10_000_000), [work, home], now=now)
        ledger.settle("a0", Complete(1_234_567, USAGE, MODEL, "req_0"), now=now)
        ledger.settle("a1", Complete(7, USAGE, MODEL, "req_1"), now=now)
    status = json.loads(CliRunner().invoke(accounts, ["status", "--json"]).output)
    target = tmp_path / "accounts-ledger.db"
    result = CliRunner().invoke(accounts, ["export", str(target)])
    assert result.exit_code == 0, result.output
    assert "***" not in result.output or "@" in result.output

    async def spend():
        ds = Datasette([str(target)])
        response = await ds.client.get("/accounts-ledger/spend_by_month.json?_shape=array")
        assert response.status_code == 200, response.text
        return response.json()

    shown = {row["account"]: row for row in asyncio.run(spend())}
    for line in status["accounts"]:
        row = shown[line["name"]]
        assert int(row["settled_usd"].replace(".", "")) == line["settled_nusd"]
        assert int(row["open_ceilings_usd"].replace(".", "")) == line["open_ceiling_nusd"]
