"""Survivors of bench/mutate.py on the money and secret rules of issue 33 (docs/reliability.md
"The money and secret rules of issue 33"). Each test states the rule one survivor broke, and was
run against that mutant, applied by hand, and failed there, then passed on the code. The ledger's
tests run on both backends."""

import dataclasses
import datetime as dt
import json
import os
import pathlib
import sqlite3
import sys

import psycopg
import pytest
from click.testing import CliRunner
from llm.cli import cli

from llm_accounts import clock, ledger as ledger_module
from llm_accounts.declarations import Account
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete, Ledger, Scope, admission, core, postgres, reads
from llm_accounts.money import NANO
from llm_accounts.pricing import price_book, user_prices
from llm_accounts.pricing.prices import Quote

# The re-check's and the price files' own fixtures' values (tests/test_recheck_races.py,
# tests/test_user_prices.py).
from test_recheck_races import MODEL, OVERLOADED, RATE_LIMITED, T0, USAGE, UTC
from test_user_prices import NOVA, REVISION

BENCH = pathlib.Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))  # bench/mutate.py, for the test of its own targets


def quote(ceiling):
    return Quote(MODEL, ceiling, "2026-11-01", "ab" * 32)


def conv(name):
    return Scope("conversation", name)


def with_output_rate(rate):
    data = json.loads(json.dumps(REVISION))
    data["models"][0]["rates"]["output"] = rate
    return json.dumps(data)


# The bench itself ---------------------------------------------------------------------------


def test_every_mutation_target_names_a_module_functions_and_tests_that_exist():
    """A module moved (pricing.py to pricing/prices.py) or a function renamed must stop
    bench/mutate.py, not leave its rules unmutated (docs/reliability.md "Mutation score")."""
    import mutate

    mutate.check_targets(mutate.TARGETS)  # raises SystemExit naming what is missing


# ledger/recheck.py ---------------------------------------------------------------------------


def test_a_recovered_health_row_read_whole_adds_no_probe_check_to_the_recheck(ledger_location, monkeypatch):
    """Only a failing row has a probe slot (docs/reliability.md: recheck.py, a health row that is
    not failing treated as failing). Admission reads a health row only when it gates, so the
    re-check is handed here the row as a whole read gives it (``read_facts``, as status reads it):
    a row that failed once and recovered must not turn an attempt in flight into a probe that
    refuses the next write."""
    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_S", 0.5)  # a refused write is read again until then
    work = Account("work", "WORK_KEY", NANO)
    later = T0 + dt.timedelta(minutes=10)
    with Ledger(ledger_location) as ledger:
        ledger.reserve(conv("c0"), "a0", quote(1), [work], now=T0)
        ledger.settle("a0", OVERLOADED, now=T0)
        ledger.reserve(conv("c1"), "a1", quote(1), [work], now=later)
        ledger.settle("a1", Complete(1, USAGE, MODEL), now=later)
        ledger.reserve(conv("c2"), "a2", quote(1), [work], now=later)  # in flight since the failure
        whole = core.in_transaction(
            ledger, reads.read_facts, ("anthropic", clock.credit_month(later), later, ledger.host), False
        )["work"]
        assert (whole.record.state, whole.record.last_failure_at) == ("ok", T0)
        writes, original = [], admission._write

        def write_with_the_whole_row(ledger, plan):
            plan.verdict.facts = dataclasses.replace(plan.verdict.facts, record=whole.record)
            writes.append(original(ledger, plan))
            return writes[-1]

        monkeypatch.setattr(admission, "_write", write_with_the_whole_row)
        assert ledger.reserve(conv("c3"), "a3", quote(1), [work], now=later).account == "work"
        assert writes == [True]  # admitted by its first write, not read again


def test_a_probe_reconciled_by_hand_frees_the_probe_slot_in_the_recheck_too(ledger_location, monkeypatch):
    """The re-check counts as the probe in flight only an open attempt, as the read does
    (docs/reliability.md: recheck.py, ``p.state = 'open'`` dropped from the probe check). A probe
    reconciled by hand is settled with no outcome recorded: the read lets the next prompt through
    as the probe, and the write must agree, lest every prompt end as ``ledger_busy``."""
    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_S", 0.5)  # a refused write is read again until then
    work = Account("work", "WORK_KEY", NANO)
    with Ledger(ledger_location) as ledger:
        ledger.reserve(conv("c0"), "f1", quote(1), [work], now=T0)
        ledger.settle("f1", RATE_LIMITED, now=T0)
        assert ledger.reserve(conv("c1"), "p1", quote(1), [work], now=T0 + dt.timedelta(minutes=5)).probe
        assert ledger.reconcile("r1", "p1", 1, "invoice 1", now=T0 + dt.timedelta(minutes=6)) == "reconciled"
        probe = ledger.reserve(conv("c2"), "p2", quote(1), [work], now=T0 + dt.timedelta(minutes=7))
        assert (probe.account, probe.probe) == ("work", True)


# The re-check keeps to the attempt's provider, as the read does: the ledger keys accounts,
# periods, bindings and attempts by provider, so an account name or a conversation id under
# another provider is another one (the plugin writes only "anthropic"; the Ledger API takes any).


def elsewhere(name):
    return Scope("conversation", name, provider="other")


def test_a_conversation_bound_under_another_provider_binds_anew_here(ledger_location, monkeypatch):
    """docs/reliability.md: recheck.py, the binding check without ``b.provider = m.provider``."""
    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_S", 0.5)  # a refused write is read again until then
    work = Account("work", "WORK_KEY", NANO)
    with Ledger(ledger_location) as ledger:
        ledger.reserve(elsewhere("c1"), "o1", quote(1), [work], now=T0)
        reservation = ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
        assert (reservation.account, reservation.new_binding) == ("work", True)


def test_another_providers_next_credit_period_does_not_end_this_ones(ledger_location, monkeypatch):
    """docs/reliability.md: recheck.py, the newer-period check without ``n.provider = m.provider``."""
    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_S", 0.5)  # a refused write is read again until then
    work = Account("work", "WORK_KEY", NANO)
    with Ledger(ledger_location) as ledger:
        ledger.reserve(conv("c0"), "a0", quote(1), [work], now=T0)
        ledger.reserve(elsewhere("o1"), "o1", quote(1), [work], now=dt.datetime(2026, 12, 1, 12, 0, tzinfo=UTC))
        assert ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0).month_utc == "2026-11"


def test_an_attempt_in_flight_under_another_provider_is_not_this_accounts_probe(ledger_location, monkeypatch):
    """docs/reliability.md: recheck.py, the probe check without ``p.provider = m.provider``."""
    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_S", 0.5)  # a refused write is read again until then
    work = Account("work", "WORK_KEY", NANO)
    with Ledger(ledger_location) as ledger:
        ledger.reserve(conv("c0"), "f1", quote(1), [work], now=T0)
        ledger.settle("f1", RATE_LIMITED, now=T0)
        ledger.reserve(elsewhere("o1"), "o1", quote(1), [work], now=T0 + dt.timedelta(minutes=5))  # in flight
        probe = ledger.reserve(conv("c1"), "p1", quote(1), [work], now=T0 + dt.timedelta(minutes=5))
        assert (probe.account, probe.probe) == ("work", True)


# ledger/admission.py -------------------------------------------------------------------------


def hold_the_whole_ledger(location):
    """Another process's write lock on the whole ledger: a SQLite writer's ``BEGIN IMMEDIATE``;
    on PostgreSQL the ledger's lock taken alone, as opening (creating, migrating) takes it."""
    if isinstance(location, str):
        holder = psycopg.connect(location, autocommit=True)
        holder.execute("BEGIN")
        schema_name = holder.execute("SELECT current_schema()").fetchone()[0]
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (postgres.lock_key(schema_name),))
    else:
        holder = sqlite3.connect(location, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
    return holder


def test_a_waiters_place_is_a_write_that_waits_for_a_writer_holding_the_ledger(ledger_location, monkeypatch):
    """A refusal's queueing is written in a write transaction (docs/reliability.md: admission.py,
    a refusal's queueing write run in a read transaction): on PostgreSQL it shares the ledger's
    lock, so it never lands while another writer holds the ledger alone (a schema migration, an
    older build's write). While one does, the prompt is told ``ledger_busy`` and no place is
    written; afterwards it queues."""
    monkeypatch.setattr(ledger_module, "BUSY_TIMEOUT_S", 0.3)  # read at open
    work = Account("work", "WORK_KEY", NANO)
    with Ledger(ledger_location) as ledger:
        ledger.reserve(conv("c1"), "a1", quote(NANO), [work], now=T0)  # the month full in flight
        holder = hold_the_whole_ledger(ledger_location)
        try:
            with pytest.raises(AccountsError) as caught:
                ledger.reserve(conv("c2"), "a2", quote(NANO), [work], waiter="w1", now=T0)
            assert caught.value.code == "ledger_busy"
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert [tuple(row) for row in ledger._conn.execute("SELECT id FROM waiter")] == []
        with pytest.raises(AccountsError) as caught:
            ledger.reserve(conv("c2"), "a2", quote(NANO), [work], waiter="w1", now=T0)
        assert caught.value.held
        assert [tuple(row) for row in ledger._conn.execute("SELECT id FROM waiter")] == [("w1",)]


# pricing/user_prices.py ----------------------------------------------------------------------


def test_a_price_file_replaced_by_another_of_the_same_size_and_time_is_read_again(user_path):
    """The read cache knows a file by its inode too (docs/reliability.md: user_prices.py, the
    inode left out of the read cache's key): a price file replaced by rename with one of the same
    size and modification time (an editor's save, a copy keeping times) prices by what it now
    says."""
    directory = user_prices.prices_dir()
    directory.mkdir(parents=True)
    target = directory / "2026-12-05-mine.json"
    target.write_text(with_output_rate(10000))
    assert [r.model(NOVA).rates.output for r in user_prices.load_user_revisions()[0]] == [10000]
    before = target.stat()
    fresh = directory / ".2026-12-05-mine.json"  # written beside it, so another inode
    fresh.write_text(with_output_rate(15000))
    os.utime(fresh, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(fresh, target)
    after = target.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert after.st_ino != before.st_ino
    assert [r.model(NOVA).rates.output for r in user_prices.load_user_revisions()[0]] == [15000]
    assert price_book.current().model(NOVA).rates.output == 15000


def test_a_price_file_removed_while_prices_add_checks_it_for_keys_is_refused_in_one_line(accounts, tmp_path, monkeypatch):
    """A file gone between its validation and the check of its strings for declared keys is
    refused as changed, never a traceback (docs/reliability.md: user_prices.py, ``OSError`` left
    out of ``_file_strings``' catch)."""
    source = tmp_path / "mine.json"
    source.write_text(json.dumps(REVISION))
    validate = user_prices._read_file

    def validate_then_remove(path, *args, **kwargs):
        found = validate(path, *args, **kwargs)
        if os.fspath(path) == os.fspath(source):
            source.unlink()
        return found

    monkeypatch.setattr(user_prices, "_read_file", validate_then_remove)
    result = CliRunner().invoke(cli, ["accounts", "prices", "add", str(source)], catch_exceptions=False)
    assert result.exit_code == 1
    assert result.output.strip() == "Error: declaration_invalid: FILE: it changed while it was read; nothing was added"
    assert not user_prices.prices_dir().exists() or not any(user_prices.prices_dir().iterdir())
