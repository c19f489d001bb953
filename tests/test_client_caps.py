"""Per-client caps and client lists on accounts (docs/architecture.md "Client caps", "Environment").

An account may cap what one client label spends on it in a credit period (``clients``), and may
serve only its listed clients (``clients_only``). Admission checks both in the reservation
transaction, for the request's client label (``-o client`` or ``LLM_ACCOUNTS_CLIENT``).
"""

import dataclasses
import datetime as dt
import json
import sqlite3

import pytest
from click.testing import CliRunner
from conftest import assert_no_key_material
from llm.cli import cli

from llm_accounts import clock, schema
from llm_accounts.declarations import Account, load_declaration, save_accounts_file
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete, Ledger, Scope
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
MODEL = "claude-sonnet-4-5-20250929"
CAP = 1_000_000  # nanodollars: $0.001


def quote(ceiling):
    return Quote(MODEL, ceiling, "2026-11-01", "ab" * 32)


def conv(name):
    return Scope("conversation", name)


def complete(cost):
    return Complete(cost, {"input_tokens": 1, "output_tokens": 1}, MODEL)


@pytest.fixture
def ledger(tmp_path):
    with Ledger(tmp_path / "ledger.db") as ledger:
        yield ledger


def capped(name="work", caps=(("ci", CAP),), only=False, budget=NANO):
    return Account(name, f"{name.upper()}_KEY", budget, clients=tuple(sorted(caps)), clients_only=only)


def refusal(call):
    with pytest.raises(AccountsError) as info:
        call()
    return info.value


def attempt_count(ledger):
    return ledger._conn.execute("SELECT COUNT(*) FROM attempt").fetchone()[0]


# Admission against a client's cap


def spend_and_hold(ledger, work):
    """ci: $0.0003 settled and $0.0002 in open ceilings on work, so $0.0005 of its cap is left."""
    ledger.reserve(conv("c1"), "a1", quote(500_000), [work], client="ci", now=T0)
    ledger.settle("a1", complete(300_000), now=T0)
    ledger.reserve(conv("c2"), "a2", quote(200_000), [work], client="ci", now=T0)


def test_a_client_is_admitted_when_its_spend_open_ceilings_and_ceiling_equal_its_cap(ledger):
    work = capped()
    spend_and_hold(ledger, work)
    assert ledger.reserve(conv("c3"), "a3", quote(500_000), [work], client="ci", now=T0).account == "work"


def test_one_nanodollar_over_a_clients_cap_is_refused_with_client_spend_cap_and_reset(ledger):
    work = capped()
    spend_and_hold(ledger, work)
    error = refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(500_001), [work], client="ci", now=T0))
    assert error.code == "budget_exhausted"
    assert str(error).endswith(
        "client 'ci' on account 'work' cannot take this attempt (up to $0.000500001) now: $0.0002 of its $0.001 cap "
        "is held by 1 attempt in flight ($0.0003 spent); -o wait SECONDS waits for room"
    )
    assert attempt_count(ledger) == 2


def test_the_refusal_shows_the_clients_settled_and_open_amounts(ledger):
    work = capped(caps=(("ci", 3 * NANO),), budget=100 * NANO)
    ledger.reserve(conv("c1"), "a1", quote(2 * NANO), [work], client="ci", now=T0)
    ledger.settle("a1", complete(NANO + NANO // 4), now=T0)
    ledger.reserve(conv("c2"), "a2", quote(NANO // 2), [work], client="ci", now=T0)
    error = refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(2 * NANO), [work], client="ci", now=T0))
    assert str(error).endswith(
        "client 'ci' on account 'work' cannot take this attempt (up to $2.00) within its $3.00 cap for credit period "
        "2026-11: $1.25 spent; the reset at 2026-11-30 00:00 UTC frees it, or raise it: llm accounts set work --client-cap ci=USD"
    )


def test_a_client_without_a_cap_is_not_limited_by_other_clients_caps(ledger):
    work = capped(caps=(("ci", 1),))
    assert ledger.reserve(conv("c1"), "a1", quote(500_000), [work], client="alice", now=T0).account == "work"
    assert ledger.reserve(conv("c2"), "a2", quote(500_000), [work], now=T0).account == "work"


def test_only_the_clients_own_attempts_on_that_account_count_toward_its_cap(ledger):
    work = capped()
    home = Account("home", "HOME_KEY", NANO)
    ledger.reserve(conv("c1"), "a1", quote(CAP), [home], client="ci", now=T0)  # ci on another account
    ledger.reserve(conv("c2"), "a2", quote(10 * CAP), [work], client="alice", now=T0)  # another client
    ledger.reserve(conv("c3"), "a3", quote(10 * CAP), [work], now=T0)  # no client
    assert ledger.reserve(conv("c4"), "a4", quote(CAP), [work], client="ci", now=T0).account == "work"


def test_a_clients_spend_in_an_earlier_credit_period_does_not_count(ledger):
    work = capped()
    ledger.reserve(conv("c1"), "a1", quote(CAP), [work], client="ci", now=T0)
    next_period = dt.datetime(2026, 12, 5, tzinfo=UTC)
    assert ledger.reserve(conv("c2"), "a2", quote(CAP), [work], client="ci", now=next_period).account == "work"


def test_adjustments_are_account_wide_and_do_not_count_toward_a_clients_cap(ledger):
    work = capped()
    ledger.adjust("j1", work, "2026-11", 10 * CAP, "console: spend outside llm", now=T0)
    assert ledger.reserve(conv("c1"), "a1", quote(CAP), [work], client="ci", now=T0).account == "work"


def test_a_capped_client_moves_a_new_conversation_to_another_account(ledger):
    work = capped(caps=(("ci", CAP),))
    home = Account("home", "HOME_KEY", NANO)
    ledger.reserve(conv("busy"), "a0", quote(NANO // 2), [home], now=T0)  # home is further along its budget
    ledger.reserve(conv("c1"), "a1", quote(CAP), [work, home], client="ci", now=T0)
    assert ledger.reserve(conv("c2"), "a2", quote(1), [work, home], client="ci", now=T0).account == "home"
    assert ledger.reserve(conv("c3"), "a3", quote(1), [work, home], client="alice", now=T0).account == "work"


def test_a_new_conversation_refused_everywhere_names_the_clients_cap(ledger):
    work = capped(caps=(("ci", CAP),))
    error = refusal(lambda: ledger.reserve(conv("c1"), "a1", quote(CAP + 1), [work], client="ci", now=T0))
    assert error.code == "budget_exhausted"
    assert str(error).startswith("budget_exhausted: no account can take a new conversation: client 'ci'")


def test_a_bound_conversation_over_its_clients_cap_is_refused_not_moved(ledger):
    work, home = capped(), Account("home", "HOME_KEY", NANO)
    ledger.reserve(conv("c1"), "a1", quote(CAP), [work], client="ci", now=T0)
    error = refusal(lambda: ledger.reserve(conv("c1"), "a2", quote(1), [work, home], client="ci", now=T0))
    assert error.code == "budget_exhausted"
    assert error.account == "work"
    message = str(error)
    assert "client 'ci' on account 'work' cannot take this attempt (up to $0.000000001) now" in message
    assert "$0.001 of its $0.001 cap is held by 1 attempt in flight, not spent" in message
    assert "a conversation never moves by itself" in message
    assert attempt_count(ledger) == 1


def test_a_cap_may_change_within_a_credit_period(ledger):
    ledger.reserve(conv("c1"), "a1", quote(CAP), [capped()], client="ci", now=T0)
    raised = capped(caps=(("ci", 2 * CAP),))
    assert ledger.reserve(conv("c1"), "a2", quote(CAP), [raised], client="ci", now=T0).account == "work"
    lowered = capped(caps=(("ci", CAP),))
    assert refusal(lambda: ledger.reserve(conv("c1"), "a3", quote(1), [lowered], client="ci", now=T0)).code == (
        "budget_exhausted"
    )


# clients_only: a client's allowed account list


@pytest.mark.parametrize("client", [None, "alice"])
def test_a_clients_only_account_is_not_a_candidate_for_other_clients(ledger, client):
    work = capped(caps=(("ci", NANO),), only=True)
    home = Account("home", "HOME_KEY", NANO)
    ledger.reserve(conv("busy"), "a0", quote(NANO // 2), [home], now=T0)  # home would otherwise come second
    assert ledger.reserve(conv("c1"), "a1", quote(1), [work, home], client=client, now=T0).account == "home"
    assert ledger.reserve(conv("c2"), "a2", quote(1), [work, home], client="ci", now=T0).account == "work"


def test_a_clients_only_account_alone_refuses_an_unlisted_client(ledger):
    work = capped(caps=(("ci", NANO),), only=True)
    error = refusal(lambda: ledger.reserve(conv("c1"), "a1", quote(1), [work], client="alice", now=T0))
    assert error.code == "no_account_available"
    assert "account 'work' serves only its listed clients, not client 'alice'" in str(error)


def test_pinning_a_clients_only_account_without_a_client_is_refused(ledger):
    work = capped(caps=(("ci", NANO),), only=True)
    error = refusal(lambda: ledger.reserve(conv("c1"), "a1", quote(1), [work], pinned="work", now=T0))
    assert error.code == "account_blocked"
    assert "-o client NAME or LLM_ACCOUNTS_CLIENT" in str(error)


def test_a_bound_conversation_on_a_clients_only_account_is_refused_for_an_unlisted_client(ledger):
    work, home = capped(caps=(("ci", NANO),), only=True), Account("home", "HOME_KEY", NANO)
    ledger.reserve(conv("c1"), "a1", quote(1), [work], client="ci", now=T0)
    error = refusal(lambda: ledger.reserve(conv("c1"), "a2", quote(1), [work, home], now=T0))
    assert error.code == "account_blocked"
    assert error.account == "work"
    message = str(error)
    assert "account 'work' serves only its listed clients and no client is set" in message
    assert "set the client with -o client NAME or LLM_ACCOUNTS_CLIENT" in message
    assert "a conversation never moves by itself" in message
    assert attempt_count(ledger) == 1


# Status


def test_status_reports_each_client_cap_with_the_clients_committed_spend(ledger):
    work = capped(caps=(("alice", 5 * NANO), ("ci", 3 * NANO)), only=True, budget=10 * NANO)
    ledger.reserve(conv("c1"), "a1", quote(NANO), [work], client="ci", now=T0)
    ledger.settle("a1", complete(NANO // 4), now=T0)
    ledger.reserve(conv("c2"), "a2", quote(NANO // 2), [work], client="ci", now=T0)
    (line,) = ledger.status([work], now=T0)
    assert line.clients_only is True
    assert [dataclasses.astuple(cap)[:6] for cap in line.client_caps] == [
        ("alice", 5 * NANO, 0, 0, 0, 5 * NANO),
        ("ci", 3 * NANO, NANO // 4, NANO // 2, 3 * NANO // 4, 3 * NANO - 3 * NANO // 4),
    ]
    data = json.loads(json.dumps(line.as_dict()))
    assert data["client_caps"][1]["committed_nusd"] == 3 * NANO // 4


def test_status_of_an_account_without_caps_lists_none(ledger):
    (line,) = ledger.status([Account("home", "HOME_KEY", NANO)], now=T0)
    assert (line.client_caps, line.clients_only) == ((), False)


# The ledger file


def test_admission_reads_client_totals_that_match_the_clients_attempt_rows(ledger):
    work = capped(caps=(("ci", NANO),))
    ledger.reserve(conv("c1"), "a1", quote(400_000), [work], client="ci", now=T0)
    ledger.settle("a1", complete(123_000), now=T0)
    ledger.reserve(conv("c2"), "a2", quote(200_000), [work], client="ci", now=T0)
    ledger.reserve(conv("c3"), "a3", quote(300_000), [work], client="ci", now=T0)
    ledger.reconcile("r1", "a3", 7, "invoice 1", now=T0)
    ledger.reserve(conv("c4"), "a4", quote(50_000), [work], now=T0)  # no client: not counted
    summed = ledger._conn.execute(
        """SELECT COALESCE(SUM(cost_nusd), 0), COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_nusd END), 0)
           FROM attempt WHERE client = 'ci'"""
    ).fetchone()
    (cap,) = ledger.status([work], now=T0)[0].client_caps
    assert (cap.settled_nusd, cap.open_ceiling_nusd) == tuple(summed) == (123_007, 200_000)


def test_attempts_without_a_client_add_no_client_index_entries(ledger):
    work = capped()
    ledger.reserve(conv("c1"), "a1", quote(1), [work], now=T0)
    ledger.reserve(conv("c2"), "a2", quote(1), [work], client="ci", now=T0)
    (entries,) = ledger._conn.execute(
        "SELECT COUNT(*) FROM attempt INDEXED BY attempt_client WHERE client IS NOT NULL"
    ).fetchone()
    assert entries == 1


def test_an_existing_ledger_gains_the_client_index_on_open(tmp_path):
    path = tmp_path / "ledger.db"
    Ledger(path).close()
    conn = sqlite3.connect(path)
    conn.execute("DROP INDEX attempt_client")
    conn.commit()
    conn.close()
    with Ledger(path) as ledger:
        names = {row[0] for row in ledger._conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    assert "attempt_client" in names
    assert "attempt_client" in schema.TABLES


def test_a_month_row_does_not_fix_client_caps(ledger):
    ledger.reserve(conv("c1"), "a1", quote(1), [capped()], client="ci", now=T0)
    changed = capped(caps=(("ci", 5 * CAP), ("alice", CAP)), only=True)
    (line,) = ledger.status([changed], now=T0)
    assert line.config_conflict is False
    assert ledger.reserve(conv("c2"), "a2", quote(1), [changed], client="alice", now=T0).account == "work"


# accounts.json and the llm accounts commands


def accounts_cli(*args, env=None):
    return CliRunner().invoke(cli, ["accounts", *args], env=env, catch_exceptions=False)


def test_add_writes_client_caps_and_clients_only(user_path):
    result = accounts_cli(
        "add", "shared", "--key-env", "SHARED_KEY", "--budget", "20",
        "--client-cap", "ci-bot=5", "--client-cap", "alice@example.com=10.50", "--clients-only",
    )
    assert result.exit_code == 0, result.output
    assert "2 client caps (listed clients only)" in result.output
    (stored,) = json.loads((user_path / "accounts.json").read_text())["accounts"]
    assert stored["clients"] == {"alice@example.com": {"budget_usd": "10.50"}, "ci-bot": {"budget_usd": "5.00"}}
    assert stored["clients_only"] is True
    (account,) = load_declaration(environ={}).accounts
    assert account.clients == (("alice@example.com", 10_500_000_000), ("ci-bot", 5 * NANO))


def test_accounts_json_round_trips_client_caps(user_path):
    account = capped(caps=(("ci", 1), ("team/a", 2 * NANO + 1)), only=True)
    save_accounts_file([account, Account("home", "HOME_KEY", NANO)], None)
    assert load_declaration(environ={}).accounts == (account, Account("home", "HOME_KEY", NANO))
    assert hash(account) == hash(load_declaration(environ={}).accounts[0])


def test_list_shows_client_caps(user_path):
    accounts_cli("add", "shared", "--key-env", "SHARED_KEY", "--budget", "20", "--client-cap", "ci=5", "--clients-only")
    accounts_cli("add", "home", "--key-env", "HOME_KEY", "--budget", "5")
    lines = accounts_cli("list").output.splitlines()
    assert lines[0].split()[-2:] == ["client", "caps"]
    assert lines[1].split()[-4:] == ["ci", "$5.00", "(only", "these)"]
    assert lines[2].split()[-1] == "-"
    (shared, home) = json.loads(accounts_cli("list", "--json").output)["accounts"]
    assert shared["clients"] == {"ci": {"budget_usd": "5.00", "budget_nusd": 5 * NANO}}
    assert (shared["clients_only"], home["clients"], home["clients_only"]) == (True, {}, False)


@pytest.mark.parametrize(
    "args, complaint",
    [
        (["--client-cap", "ci"], "--client-cap <entry 1>: must be LABEL=USD"),
        (["--client-cap", "ci=1", "--client-cap", "ci=2"], "--client-cap <entry 2>: repeats an earlier client"),
        (["--client-cap", "ci=1,50"], "--client-cap <entry 1>: use a dot for cents"),
        (["--client-cap", "=1"], "--client-cap <entry 1>: the client label must be"),
        (["--clients-only"], "--clients-only: needs at least one --client-cap"),
    ],
)
def test_add_refuses_bad_client_caps_in_one_line(args, complaint, user_path):
    result = accounts_cli("add", "shared", "--key-env", "SHARED_KEY", "--budget", "20", *args)
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"Error: declaration_invalid: {complaint}")
    assert not (user_path / "accounts.json").exists()


@pytest.mark.parametrize("paste", ["{key}=5.00", "ci={key}", "{tail}=5.00"])
def test_a_key_pasted_into_a_client_cap_is_never_echoed(paste, canary_key, user_path):
    text = paste.format(key=canary_key, tail=canary_key.replace("sk-ant", "xx"))
    result = accounts_cli("add", "shared", "--key-env", "SHARED_KEY", "--budget", "20", "--client-cap", text)
    assert result.exit_code == 1
    assert "--client-cap <entry 1>" in result.output
    assert_no_key_material(result.output, canary_key)


def test_status_json_and_table_report_client_caps(monkeypatch, ledger_path):
    declaration = [
        {"name": "work", "key_env": "WORK_KEY", "budget_usd": "10.00",
         "clients": {"ci": {"budget_usd": "1.00"}, "alice": {"budget_usd": "2.00"}}},
    ]
    monkeypatch.setenv("ANTHROPIC_ACCOUNTS", json.dumps(declaration))
    monkeypatch.setattr(clock, "now", lambda: T0)  # the reservation and the status in one period
    with Ledger() as ledger:
        ledger.reserve(conv("c1"), "a1", quote(NANO), load_declaration().accounts, client="ci")
    (line,) = json.loads(accounts_cli("status", "--json").output)["accounts"]
    assert [(cap["client"], cap["cap_nusd"], cap["committed_nusd"]) for cap in line["client_caps"]] == [
        ("alice", 2 * NANO, 0),
        ("ci", NANO, NANO),
    ]
    assert "2 client caps (1 reached)" in accounts_cli("status").output


# End to end through the llm CLI (the stand-in's alpha and beta accounts)

ROUTED = "claude-routed/claude-haiku-4-5"


def llm_cli(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def declare_caps(alpha_caps=(), beta_caps=(), alpha_only=False):
    save_accounts_file(
        [
            Account("alpha", "ALPHA_KEY", 20 * NANO, clients=tuple(sorted(alpha_caps)), clients_only=alpha_only),
            Account("beta", "BETA_KEY", 20 * NANO, clients=tuple(sorted(beta_caps))),
        ],
        None,
    )


def attempts(ledger_path):
    db = sqlite3.connect(ledger_path)
    db.row_factory = sqlite3.Row
    return [dict(row) for row in db.execute("SELECT * FROM attempt ORDER BY created_at, rowid")]


def test_llm_o_client_routes_by_the_clients_caps_and_records_the_client(accounts, ledger_path):
    # ci-bot may not spend on beta (a one-nanodollar cap), and only listed clients use alpha.
    declare_caps(alpha_caps=[("ci-bot", 20 * NANO)], beta_caps=[("ci-bot", 1)], alpha_only=True)
    result = llm_cli("-m", ROUTED, "Hello", "-o", "client", "ci-bot")
    assert result.exit_code == 0, result.output
    unlabelled = llm_cli("-m", ROUTED, "Hello")
    assert unlabelled.exit_code == 0, unlabelled.output
    assert [(row["account"], row["client"]) for row in attempts(ledger_path)] == [("alpha", "ci-bot"), ("beta", None)]
    assert [request["label"] for request in accounts.requests] == ["alpha", "beta"]


def test_llm_accounts_client_sets_the_client_and_o_client_overrides_it(accounts, ledger_path, monkeypatch):
    declare_caps(alpha_caps=[("ci-bot", 20 * NANO)], beta_caps=[("ci-bot", 1)], alpha_only=True)
    monkeypatch.setenv("LLM_ACCOUNTS_CLIENT", "ci-bot")
    assert llm_cli("-m", ROUTED, "Hello").exit_code == 0
    assert llm_cli("-m", ROUTED, "Hello", "-o", "client", "team.b@example.com").exit_code == 0
    assert [(row["account"], row["client"]) for row in attempts(ledger_path)] == [
        ("alpha", "ci-bot"),
        ("beta", "team.b@example.com"),
    ]


def test_llm_refuses_a_client_over_its_cap_everywhere_in_one_line(accounts, ledger_path, monkeypatch):
    declare_caps(alpha_caps=[("ci-bot", 1)], beta_caps=[("ci-bot", 1)])
    monkeypatch.setenv("LLM_ACCOUNTS_CLIENT", "ci-bot")
    result = llm_cli("-m", ROUTED, "Hello")
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line == (
        "Error: budget_exhausted: no account can take a new conversation: alpha: ceiling over its client cap; "
        "beta: ceiling over its client cap; llm accounts status shows why"
    )
    assert accounts.requests == []


def test_llm_c_on_a_clients_only_account_without_the_client_is_refused(accounts, ledger_path):
    declare_caps(alpha_caps=[("ci-bot", 20 * NANO)], beta_caps=[("ci-bot", 1)], alpha_only=True)
    assert llm_cli("-m", ROUTED, "Hello", "-o", "client", "ci-bot").exit_code == 0
    result = llm_cli("-c", "Again")
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: account_blocked: account 'alpha' serves only its listed clients")
    assert "-o client NAME or LLM_ACCOUNTS_CLIENT" in line
    assert len(accounts.requests) == 1
