"""Per-client token caps on an account (docs/architecture.md "Client caps").

A client's cap on an account may be in billed tokens as well as dollars. Admission checks it in
the reservation transaction with the attempt's worst case in tokens (the input window the dollar
ceiling prices plus max_tokens), settlement records the tokens the usage billed (input, cache
writes, cache reads, output), and an unknown outcome keeps its token ceiling.
"""

import dataclasses
import datetime as dt
import json
import os
import sqlite3
import subprocess
import sys

import pytest
from click.testing import CliRunner
from conftest import assert_no_key_material
from llm.cli import cli

from llm_accounts import clock, ladder
from llm_accounts.declarations import Account, load_declaration, parse_accounts, save_accounts_file
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete, Ledger, NotSent, Refused, Scope, Unknown
from llm_accounts.pricing import prices
from llm_accounts.money import NANO
from llm_accounts.pricing.prices import Quote
from routed_helpers import attempts, llm_cli
from llm_logs import existing_logs_db  # noqa: F401  (autouse: llm's logs.db already migrated)

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
MODEL = "claude-sonnet-4-5-20250929"
TOKEN_CAP = 1_000_000


def quote(tokens, ceiling=1):
    return Quote(MODEL, ceiling, "2026-11-01", "ab" * 32, ceiling_tokens=tokens)


def conv(name):
    return Scope("conversation", name)


def usage(input_=0, written=0, read=0, output=0):
    return {
        "input_tokens": input_,
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "output_tokens": output,
    }


def complete(**tokens):
    return Complete(1, usage(**tokens), MODEL)


@pytest.fixture
def ledger(tmp_path):
    with Ledger(tmp_path / "ledger.db") as ledger:
        yield ledger


def token_capped(name="work", cap=TOKEN_CAP, client="ci", dollars=()):
    return Account(
        name, f"{name.upper()}_KEY", 100 * NANO, clients=tuple(dollars), client_tokens=((client, cap),)
    )


def refusal(call):
    with pytest.raises(AccountsError) as info:
        call()
    return info.value


def use_and_hold(ledger, work):
    """ci: 300,000 tokens billed and 200,000 in open token ceilings on work: 500,000 left."""
    ledger.reserve(conv("c1"), "a1", quote(400_000), [work], client="ci", now=T0)
    ledger.settle("a1", complete(input_=100_000, written=50_000, read=100_000, output=50_000), now=T0)
    ledger.reserve(conv("c2"), "a2", quote(200_000), [work], client="ci", now=T0)


# Admission


def test_a_client_is_admitted_when_its_tokens_used_open_and_ceiling_equal_its_token_cap(ledger):
    work = token_capped()
    use_and_hold(ledger, work)
    assert ledger.reserve(conv("c3"), "a3", quote(500_000), [work], client="ci", now=T0).account == "work"


def test_one_token_over_a_clients_token_cap_is_refused_naming_use_open_cap_and_reset(ledger):
    work = token_capped()
    use_and_hold(ledger, work)
    error = refusal(lambda: ledger.reserve(conv("c3"), "a3", quote(500_001), [work], client="ci", now=T0))
    assert error.code == "budget_exhausted"
    assert str(error) == (
        "budget_exhausted: no account can take a new conversation: client 'ci' on account 'work' cannot take this "
        "attempt (up to 500,001 tokens) now: 200,000 tokens of its 1,000,000-token cap is held by 1 attempt in flight "
        "(300,000 tokens used); -o wait SECONDS waits for room"
    )


def test_every_billed_token_counts_input_cache_writes_cache_reads_and_output(ledger):
    work = token_capped()
    ledger.reserve(conv("c1"), "a1", quote(10_000), [work], client="ci", now=T0)
    ledger.settle("a1", complete(input_=1, written=20, read=300, output=4_000), now=T0)
    (line,) = ledger.status([work], now=T0)
    (cap,) = line.client_caps
    assert (cap.tokens_used, cap.tokens_open, cap.token_cap, cap.tokens_remaining) == (4_321, 0, TOKEN_CAP, TOKEN_CAP - 4_321)


def test_an_unknown_outcome_keeps_its_token_ceiling(ledger):
    work = token_capped()
    ledger.reserve(conv("c1"), "a1", quote(600_000), [work], client="ci", now=T0)
    assert ledger.settle("a1", Unknown("stream_truncated"), now=T0) == "still_open"
    error = refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(400_001), [work], client="ci", now=T0))
    assert "600,000 tokens of its 1,000,000-token cap is held by 1 attempt left open (unknown outcome); settle it" in str(error)


def test_a_refused_or_unsent_attempt_bills_no_tokens(ledger):
    work = token_capped()
    ledger.reserve(conv("c1"), "a1", quote(TOKEN_CAP), [work], client="ci", now=T0)
    ledger.settle("a1", Refused("request_rejected", 400, "invalid_request_error", "other", "semantic"), now=T0)
    ledger.reserve(conv("c2"), "a2", quote(TOKEN_CAP), [work], client="ci", now=T0)
    ledger.settle("a2", NotSent(), now=T0)
    assert ledger.reserve(conv("c3"), "a3", quote(TOKEN_CAP), [work], client="ci", now=T0).account == "work"


def test_a_reconciled_attempt_keeps_its_token_ceiling_counted(ledger):
    work = token_capped()
    ledger.reserve(conv("c1"), "a1", quote(700_000), [work], client="ci", now=T0)
    ledger.settle("a1", Unknown("stream_truncated"), now=T0)
    ledger.reconcile("r1", "a1", 5, "invoice 42", now=T0)
    (cap,) = ledger.status([work], now=T0)[0].client_caps
    assert (cap.tokens_used, cap.tokens_open) == (700_000, 0)


def test_dollar_and_token_caps_on_one_client_are_both_checked(ledger):
    work = token_capped(dollars=(("ci", 10),))
    error = refusal(lambda: ledger.reserve(conv("c1"), "a1", quote(1, ceiling=11), [work], client="ci", now=T0))
    assert "client 'ci' on account 'work' cannot take this attempt (up to $0.000000011): its ceiling alone is more than its $0.00000001 cap" in str(error)
    error = refusal(lambda: ledger.reserve(conv("c1"), "a1", quote(TOKEN_CAP + 1, ceiling=10), [work], client="ci", now=T0))
    assert "(up to 1,000,001 tokens): its ceiling alone is more than its 1,000,000-token cap" in str(error)


def test_a_token_cap_limits_only_its_client_on_its_account(ledger):
    work, home = token_capped(cap=1), Account("home", "HOME_KEY", NANO)
    assert ledger.reserve(conv("c1"), "a1", quote(TOKEN_CAP), [work], client="alice", now=T0).account == "work"
    assert ledger.reserve(conv("c2"), "a2", quote(TOKEN_CAP), [work], now=T0).account == "work"
    assert ledger.reserve(conv("c3"), "a3", quote(TOKEN_CAP), [home], client="ci", now=T0).account == "home"


def test_a_quote_without_a_token_ceiling_cannot_pass_a_token_cap(ledger):
    work, home = token_capped(), Account("home", "HOME_KEY", NANO)
    bare = Quote(MODEL, 1, "2026-11-01", "ab" * 32)
    assert ledger.reserve(conv("c1"), "a1", bare, [work, home], client="ci", now=T0).account == "home"
    error = refusal(lambda: ledger.reserve(conv("c2"), "a2", bare, [work], client="ci", now=T0))
    assert "carries no token ceiling" in str(error)


def test_the_attempt_row_keeps_its_token_ceiling_and_billed_tokens(ledger):
    work = token_capped()
    ledger.reserve(conv("c1"), "a1", quote(9_000), [work], client="ci", now=T0)
    ledger.settle("a1", complete(input_=10, output=5), now=T0)
    row = ledger._conn.execute("SELECT ceiling_tokens, tokens FROM attempt WHERE id = 'a1'").fetchone()
    assert tuple(row) == (9_000, 15)


def test_the_quote_token_ceiling_is_the_priced_input_window_plus_max_tokens():
    revision = prices.current_revision()
    body = json.dumps({"model": "claude-haiku-4-5", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]})
    q = prices.quote(body.encode(), revision)
    assert q.ceiling_tokens == revision.model("claude-haiku-4-5").context_window + 100


# Selection


def test_a_token_capped_account_is_passed_over_for_a_new_conversation(ledger):
    work, home = token_capped(cap=100), Account("home", "HOME_KEY", NANO)
    ledger.reserve(conv("busy"), "a0", quote(1, ceiling=NANO // 2), [home], now=T0)  # home is further along its budget
    assert ledger.reserve(conv("c1"), "a1", quote(101), [work, home], client="ci", now=T0).account == "home"
    assert ledger.reserve(conv("c2"), "a2", quote(100), [work, home], client="ci", now=T0).account == "work"


def test_a_bound_conversation_over_its_token_cap_is_refused_with_the_exact_message(ledger):
    work, home = token_capped(), Account("home", "HOME_KEY", NANO)
    ledger.reserve(conv("c1"), "a1", quote(600_000), [work], client="ci", now=T0)
    ledger.settle("a1", complete(input_=250_000, output=50_000), now=T0)
    error = refusal(lambda: ledger.reserve(conv("c1"), "a2", quote(700_001), [work, home], client="ci", now=T0))
    assert (error.code, error.account) == ("budget_exhausted", "work")
    assert str(error) == (
        "budget_exhausted: client 'ci' on account 'work' cannot take this attempt (up to 700,001 tokens) within its "
        "1,000,000-token cap for credit period 2026-11: 300,000 tokens used; the reset at 2026-11-30 00:00 UTC frees it, "
        "or raise it: llm accounts set work --client-cap ci=Ntokens; a conversation never moves by itself (llm accounts rebind)"
    )


def test_the_ladder_says_a_token_cap_excludes_the_account(ledger):
    work, home = token_capped(cap=100), Account("home", "HOME_KEY", NANO)
    lines, verdicts = ledger.ladder([work, home], quote(101), client="ci", now=T0)
    rungs = {rung.name: rung for rung in ladder.build(lines, verdicts)}
    assert rungs["home"].available
    assert (rungs["work"].available, rungs["work"].code) == (False, "budget_exhausted")
    assert rungs["work"].reason == "client ci's token cap cannot hold this model's token ceiling (needs up to 101 tokens, 100 left)"


def test_a_clients_only_account_serves_a_client_it_caps_only_in_tokens(ledger):
    work = dataclasses.replace(token_capped(), clients_only=True)
    assert ledger.reserve(conv("c1"), "a1", quote(1), [work], client="ci", now=T0).account == "work"
    error = refusal(lambda: ledger.reserve(conv("c2"), "a2", quote(1), [work], client="alice", now=T0))
    assert "account 'work' serves only its listed clients, not client 'alice'" in str(error)


# Many processes on one ledger

WORKER = r"""
import datetime, os, random, sys, time, uuid
from llm_accounts.declarations import Account
from llm_accounts.errors import AccountsError
from llm_accounts.ledger import Complete, Ledger, NotSent, Scope, Unknown
from llm_accounts.pricing.prices import Quote

path, go, index, cap, now = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
NOW = datetime.datetime.fromisoformat(now)
MODEL = "claude-sonnet-4-5-20250929"
account = Account("work", "WORK_KEY", 10**15, client_tokens=(("ci", cap),))
ledger, rng = Ledger(path), random.Random(index)
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.001)
refusals = 0
while refusals < 20:
    attempt_id = uuid.uuid4().hex
    ceiling = rng.randint(20_000, 60_000)
    try:
        ledger.reserve(Scope("conversation", attempt_id), attempt_id, Quote(MODEL, 1, "2026-11-01", "ab" * 32,
                       ceiling_tokens=ceiling), [account], client="ci", now=NOW)
    except AccountsError as error:
        assert error.code == "budget_exhausted", error.code
        refusals += 1
        continue
    refusals = 0
    print("admitted", ceiling, flush=True)
    roll = rng.random()
    if roll < 0.7:
        billed = rng.randint(0, ceiling)
        ledger.settle(attempt_id, Complete(0, {"input_tokens": billed // 2, "output_tokens": billed - billed // 2}, MODEL), now=NOW)
    elif roll < 0.85:
        ledger.settle(attempt_id, Unknown("stream_truncated"), now=NOW)
    else:
        ledger.settle(attempt_id, NotSent(), now=NOW)
print("done", flush=True)
"""

READER = r"""
import os, sqlite3, sys, time
path, go, stop, cap = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
conn = sqlite3.connect(path, timeout=5, isolation_level=None)
samples = over = 0
while not os.path.exists(go):
    time.sleep(0.001)
while not os.path.exists(stop):
    conn.execute("BEGIN")
    used, held = conn.execute(
        "SELECT COALESCE(SUM(CASE WHEN state = 'settled' THEN tokens END), 0), "
        "COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_tokens END), 0) FROM attempt WHERE client = 'ci'"
    ).fetchone()
    conn.execute("COMMIT")
    samples += 1
    over += used + held > cap
print(samples, over, flush=True)
"""


def test_processes_on_one_ledger_never_admit_past_a_token_cap(tmp_path):
    path, go, stop, cap = tmp_path / "ledger.db", tmp_path / "go", tmp_path / "stop", 600_000
    Ledger(path).close()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    workers = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(path), str(go), str(i), str(cap), T0.isoformat()],
                         stdout=subprocess.PIPE, text=True, env=env)
        for i in range(6)
    ]
    for worker in workers:
        assert worker.stdout.readline().strip() == "ready"
    reader = subprocess.Popen([sys.executable, "-c", READER, str(path), str(go), str(stop), str(cap)],
                              stdout=subprocess.PIPE, text=True, env=env)
    go.touch()
    outputs = [worker.communicate(timeout=60)[0] for worker in workers]
    stop.touch()
    samples, over = map(int, reader.communicate(timeout=30)[0].split())
    assert all(worker.returncode == 0 for worker in workers), outputs
    admitted = sum(line.startswith("admitted") for output in outputs for line in output.splitlines())
    ceilings = sum(int(line.split()[1]) for output in outputs for line in output.splitlines() if line.startswith("admitted"))
    db = sqlite3.connect(path)
    used, held, rows = db.execute(
        "SELECT COALESCE(SUM(CASE WHEN state = 'settled' THEN tokens END), 0), "
        "COALESCE(SUM(CASE WHEN state = 'open' THEN ceiling_tokens END), 0), COUNT(*) FROM attempt"
    ).fetchone()
    assert rows == admitted
    assert ceilings > cap  # the cap was contended: more was admitted over time than it holds at once
    assert used + held <= cap
    assert (samples > 0, over) == (True, 0)


# Declarations


def declare(**clients):
    return [{"name": "work", "key_env": "WORK_KEY", "budget_usd": "10", "clients": clients}]


def test_a_declaration_caps_a_client_in_tokens_dollars_or_both():
    (account,) = parse_accounts(
        declare(**{"ci-bot": {"budget_usd": "5.00", "tokens": 2_000_000}, "alice": {"tokens": 1}, "bob": {"budget_usd": "1"}}),
        "environment",
    )
    assert account.clients == (("bob", NANO), ("ci-bot", 5 * NANO))
    assert account.client_tokens == (("alice", 1), ("ci-bot", 2_000_000))


@pytest.mark.parametrize("value", [True, "2000000", 2_000_000.0, 0, -5, 2**63])
def test_a_token_cap_must_be_a_positive_json_integer(value):
    with pytest.raises(AccountsError) as info:
        parse_accounts(declare(ci={"tokens": value}), "environment")
    message = str(info.value)
    assert message == (
        "declaration_invalid: ANTHROPIC_ACCOUNTS[0].clients.<entry 1>.tokens: must be a whole number of tokens "
        "from 1 to 2**63-1 written as a JSON integer, such as 2000000"
    )
    assert "\n" not in message


def test_a_token_cap_error_never_repeats_the_value(canary_key):
    with pytest.raises(AccountsError) as info:
        parse_accounts(declare(ci={"tokens": canary_key}), "environment")
    assert_no_key_material(str(info.value), canary_key)


def test_an_empty_client_cap_needs_dollars_or_tokens():
    with pytest.raises(AccountsError) as info:
        parse_accounts(declare(ci={}), "environment")
    assert "clients.<entry 1>.budget_usd: is required unless tokens is given" in str(info.value)


def test_accounts_json_round_trips_token_caps(user_path):
    account = Account("work", "WORK_KEY", NANO, clients=(("ci", 5),), client_tokens=(("ci", 7), ("team/a", 2)), clients_only=True)
    save_accounts_file([account], None)
    (stored,) = json.loads((user_path / "accounts.json").read_text())["accounts"]
    assert stored["clients"] == {"ci": {"budget_usd": "0.000000005", "tokens": 7}, "team/a": {"tokens": 2}}
    assert load_declaration(environ={}).accounts == (account,)


# llm accounts commands


def accounts_cli(*args):
    return CliRunner().invoke(cli, ["accounts", *args], catch_exceptions=False)


def test_add_takes_a_token_cap_beside_a_dollar_cap(user_path):
    result = accounts_cli(
        "add", "shared", "--key-env", "SHARED_KEY", "--budget", "20",
        "--client-cap", "ci-bot=5.00", "--client-cap", "ci-bot=2000000tokens", "--client-cap", "alice=300tokens",
    )
    assert result.exit_code == 0, result.output
    assert "3 client caps" in result.output
    (stored,) = json.loads((user_path / "accounts.json").read_text())["accounts"]
    assert stored["clients"] == {"alice": {"tokens": 300}, "ci-bot": {"budget_usd": "5.00", "tokens": 2_000_000}}
    listed = accounts_cli("list").output
    assert "alice 300 tokens" in listed and "ci-bot 2,000,000 tokens" in listed
    (shared,) = json.loads(accounts_cli("list", "--json").output)["accounts"]
    assert shared["clients"]["ci-bot"] == {"budget_usd": "5.00", "budget_nusd": 5 * NANO, "tokens": 2_000_000}


@pytest.mark.parametrize(
    "args, complaint",
    [
        (["--client-cap", "ci=2.5tokens"], "--client-cap <entry 1>: a token cap must be LABEL=<N>tokens"),
        (["--client-cap", "ci=tokens"], "--client-cap <entry 1>: a token cap must be LABEL=<N>tokens"),
        (["--client-cap", "ci=0tokens"], "--client-cap <entry 1>: must be a whole number of tokens"),
        (["--client-cap", "ci=5tokens", "--client-cap", "ci=6tokens"], "--client-cap <entry 2>: repeats an earlier client's token cap"),
    ],
)
def test_add_refuses_bad_token_caps_in_one_line(args, complaint, user_path):
    result = accounts_cli("add", "shared", "--key-env", "SHARED_KEY", "--budget", "20", *args)
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"Error: declaration_invalid: {complaint}")


def test_status_json_and_table_show_token_use_per_client(monkeypatch, ledger_path):
    declaration = [{"name": "work", "key_env": "WORK_KEY", "budget_usd": "10.00", "clients": {"ci": {"tokens": 500_000}}}]
    monkeypatch.setenv("ANTHROPIC_ACCOUNTS", json.dumps(declaration))
    monkeypatch.setattr(clock, "now", lambda: T0)
    with Ledger() as ledger:
        ledger.reserve(conv("c1"), "a1", quote(200_000), load_declaration().accounts, client="ci")
        ledger.settle("a1", complete(input_=1_000, output=234))
        ledger.reserve(conv("c2"), "a2", quote(100_000), load_declaration().accounts, client="ci")
    (line,) = json.loads(accounts_cli("status", "--json").output)["accounts"]
    (cap,) = line["client_caps"]
    assert (cap["client"], cap["token_cap"], cap["tokens_used"], cap["tokens_open"], cap["tokens_remaining"]) == (
        "ci", 500_000, 1_234, 100_000, 398_766,
    )
    assert cap["cap_nusd"] is None
    assert "ci 101,234 of 500,000 tokens" in accounts_cli("status").output


# End to end through llm and the stand-in (alpha and beta)

ROUTED = "claude-routed/claude-haiku-4-5"
HAIKU_WINDOW = 200_000
PROMPT_CEILING = HAIKU_WINDOW + 100  # with -o max_tokens 100


def declare_token_caps(alpha_cap=None, beta_cap=None):
    def caps(cap):
        return (("ci-bot", cap),) if cap is not None else ()

    save_accounts_file(
        [
            Account("alpha", "ALPHA_KEY", 20 * NANO, client_tokens=caps(alpha_cap)),
            Account("beta", "BETA_KEY", 20 * NANO, client_tokens=caps(beta_cap)),
        ],
        None,
    )


def prompt(*args):
    return llm_cli(*args, "-o", "max_tokens", "100", "-o", "client", "ci-bot")


def test_llm_sends_a_client_past_an_account_its_token_cap_cannot_admit(accounts, ledger_path):
    assert prices.current_revision().model("claude-haiku-4-5").context_window == HAIKU_WINDOW
    declare_token_caps(alpha_cap=PROMPT_CEILING - 1)
    for _ in range(2):
        result = prompt("-m", ROUTED, "Hello")
        assert result.exit_code == 0, result.output
    rows = attempts(ledger_path)
    assert [row["account"] for row in rows] == ["beta", "beta"]
    # Reserved at PROMPT_CEILING tokens; once message_start counted the input, the token hold is
    # that input plus max_tokens (docs/pricing.md "Shrinking a hold on message_start").
    max_tokens = PROMPT_CEILING - HAIKU_WINDOW
    for row in rows:
        counted = json.loads(row["counted_json"])
        assert row["ceiling_tokens"] == sum(counted[k] for k in prices.COUNTED_INPUT_FIELDS) + max_tokens < PROMPT_CEILING
    assert [request["label"] for request in accounts.requests] == ["beta", "beta"]


def test_llm_c_over_the_token_cap_is_refused_with_the_exact_message(accounts, ledger_path, monkeypatch):
    declare_token_caps(alpha_cap=PROMPT_CEILING, beta_cap=1)
    assert prompt("-m", ROUTED, "Hello").exit_code == 0
    (first,) = attempts(ledger_path)
    assert first["account"] == "alpha" and first["tokens"] > 0
    used = json.loads(first["usage_json"])
    assert first["tokens"] == used["input_tokens"] + used.get("cache_creation_input_tokens", 0) + used.get(
        "cache_read_input_tokens", 0) + used["output_tokens"]
    result = prompt("-c", "Again")
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line == (
        f"Error: budget_exhausted: client 'ci-bot' on account 'alpha' cannot take this attempt (up to {PROMPT_CEILING:,} "
        f"tokens) within its {PROMPT_CEILING:,}-token cap for credit period {first['month_utc']}: {first['tokens']:,} "
        f"tokens used; the reset at {clock.credit_period(first['month_utc'])[1]:%Y-%m-%d %H:%M} UTC frees it, or raise "
        "it: llm accounts set alpha --client-cap ci-bot=Ntokens; a conversation never moves by itself (llm accounts rebind)"
    )
    assert len(accounts.requests) == 1


def test_a_ledger_gaining_the_token_columns_fills_settled_tokens_from_stored_usage(tmp_path):
    path = tmp_path / "ledger.db"
    work = token_capped()
    with Ledger(path) as ledger:
        ledger.reserve(conv("c1"), "a1", quote(10_000), [work], client="ci", now=T0)
        ledger.settle("a1", complete(input_=7, written=3, read=20, output=70), now=T0)
        ledger.reserve(conv("c2"), "a2", quote(10_000), [work], client="ci", now=T0)
        ledger.settle("a2", NotSent(), now=T0)
    db = sqlite3.connect(path)
    for trigger in ("attempt_client_insert", "attempt_client_update", "attempt_client_delete"):
        db.execute(f"DROP TRIGGER {trigger}")  # which read the token columns: a ledger that old had neither
    db.execute("DROP TABLE month_client")
    db.execute("DROP INDEX attempt_open_period")  # it covers ceiling_tokens, which that ledger lacked
    db.execute("ALTER TABLE attempt DROP COLUMN tokens")
    db.execute("ALTER TABLE attempt DROP COLUMN ceiling_tokens")
    db.commit()
    db.close()
    with Ledger(path) as ledger:
        rows = dict(ledger._conn.execute("SELECT id, tokens FROM attempt").fetchall())
        (cap,) = ledger.status([work], now=T0)[0].client_caps
    assert rows == {"a1": 100, "a2": 0}
    assert cap.tokens_used == 100
