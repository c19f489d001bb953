import datetime
import json
import os
import pathlib
import secrets
import shutil
import signal
import string

import pytest

# A run started in the background by a shell without job control inherits SIGINT ignored, and
# Python then leaves it ignored, in this process and in every child it starts: the tests that
# press Ctrl-C (in process, or in a real llm process) need it delivered as KeyboardInterrupt.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ISOLATED_ENV = (
    "ANTHROPIC_ACCOUNTS",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "LLM_ACCOUNTS_BASE_URL",
    "LLM_ACCOUNTS_CLIENT",
    "LLM_ACCOUNTS_LEDGER",
    "LLM_ACCOUNTS_WAIT",
)


FAKETIME = shutil.which("faketime")
CLOCKS = pathlib.Path(__file__).resolve().parent / "clocks"
needs_faketime = pytest.mark.skipif(
    FAKETIME is None, reason="no faketime on PATH (Debian: apt-get install faketime) to fix a child process's clock"
)


def without_faketime(env):
    """A copy of ``env`` without an outer faketime's settings (``scripts/test-clocks``): for a
    process that must not run under libfaketime, or that starts its own faketime (a wrapper
    preloaded with libfaketime but without the outer clock's shared memory fails to start)."""
    env = {name: value for name, value in env.items() if name not in ("FAKETIME", "FAKETIME_SHARED")}
    preload = [lib for lib in env.pop("LD_PRELOAD", "").replace(":", " ").split() if "faketime" not in lib]
    if preload:
        env["LD_PRELOAD"] = " ".join(preload)
    return env


def under_faketime(argv, instant, env):
    """``(argv, env)`` that run ``argv`` under Debian's ``faketime`` with its clock started at
    ``instant`` (an aware datetime) and ticking from there. The monotonic clock stays real, and
    ``clocks/sitecustomize.py`` keeps Python children working under libfaketime."""
    env = without_faketime(env)
    path = os.pathsep.join(filter(None, (str(CLOCKS), env.get("PYTHONPATH"))))
    # faketime reads the instant in the local time zone, hence TZ=UTC.
    env.update(TZ="UTC", FAKETIME_DONT_FAKE_MONOTONIC="1", PYTHONPATH=path)
    start = instant.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return [FAKETIME, "-m", "-f", f"@{start}", *argv], env


@pytest.fixture(autouse=True)
def user_path(tmp_path, monkeypatch):
    """Every test gets its own llm user directory, ledger and working directory."""
    path = tmp_path / "llm-user"
    path.mkdir()
    for name in ISOLATED_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LLM_USER_PATH", str(path))
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    return path


@pytest.fixture
def ledger_path(tmp_path, monkeypatch):
    path = tmp_path / "ledger" / "accounts-ledger.db"
    monkeypatch.setenv("LLM_ACCOUNTS_LEDGER", str(path))
    return path


def make_key():
    """A key-shaped canary, made at run time so no key-like literal is committed."""
    alphabet = string.ascii_letters + string.digits + "-_"
    return "sk-ant-api03-" + "".join(secrets.choice(alphabet) for _ in range(93)) + "AA"


@pytest.fixture
def canary_key():
    return make_key()


@pytest.fixture
def standin(canary_key, monkeypatch):
    """The Messages API stand-in on a free loopback port: one key, label "a" (organization
    "org-a"), whose key is ``canary_key``; ``LLM_ACCOUNTS_BASE_URL`` points at it. Change its
    behaviour with ``standin.set_behaviour("a", ...)``; read ``standin.requests``."""
    from llm_accounts.standin import StandIn

    with StandIn({"keys": [{"label": "a", "key": canary_key, "organization": "org-a"}]}) as server:
        monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", server.base_url)
        yield server


def runs_of(secret, length=8):
    """Every run of ``length`` characters of ``secret``: what must never appear anywhere."""
    return {secret[i : i + length] for i in range(len(secret) - length + 1)}


def assert_no_key_material(text, secret):
    """Fail if ``text`` holds any 8-character run of ``secret`` (architecture.md "Testing")."""
    found = [run for run in runs_of(secret) if run in text]
    assert not found, f"{len(found)} runs of the key found"


def assert_tree_has_no_key_material(root, secret, ignore=()):
    """Search every file under ``root`` (bytes, including SQLite files) for runs of the key.

    ``ignore`` names files the test itself put the key in, such as llm's ``keys.json``.
    """
    runs = [run.encode() for run in runs_of(secret)]
    for dirpath, _, filenames in os.walk(root):
        for filename in filenames:
            if filename in ignore:
                continue
            data = open(os.path.join(dirpath, filename), "rb").read()
            for run in runs:
                assert run not in data, f"a run of the key found in {filename}"


@pytest.fixture
def accounts(user_path, ledger_path, monkeypatch):
    """Two accounts, alpha and beta, on the stand-in; keys live in llm's keys.json."""
    from llm_accounts.declarations import Account, save_accounts_file
    from llm_accounts.money import NANO
    from llm_accounts.standin import StandIn

    keys = {"alpha": make_key(), "beta": make_key()}
    config = {"keys": [{"label": name, "key": key, "organization": f"org-{name}"} for name, key in keys.items()]}
    (user_path / "keys.json").write_text(
        json.dumps({"ALPHA_KEY": keys["alpha"], "BETA_KEY": keys["beta"]})
    )
    save_accounts_file(
        [
            Account("alpha", "ALPHA_KEY", 20 * NANO),
            Account("beta", "BETA_KEY", 20 * NANO),
        ],
        None,
    )
    with StandIn(config) as server:
        monkeypatch.setenv("LLM_ACCOUNTS_BASE_URL", server.base_url)
        server.keys = keys
        yield server


# Hypothesis profiles (tests/test_properties.py; docs/reliability.md "Inputs tried"): a few
# examples per property in CI, 10,000 with HYPOTHESIS_PROFILE=bench. No example database: a run
# leaves nothing behind in the tree.
try:
    from hypothesis import HealthCheck, settings as _hypothesis_settings
except ImportError:  # the test extra brings it; only tests/test_properties.py needs it
    pass
else:
    _hypothesis_settings.register_profile(
        "ci", max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
    )
    _hypothesis_settings.register_profile(
        "bench", max_examples=10_000, deadline=None, database=None, suppress_health_check=list(HealthCheck)
    )
    _hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# The PostgreSQL ledger (docs/architecture.md "Ledger on PostgreSQL"): one throwaway server per
# session (tests/pgserver.py), a new empty schema per test. Skipped, saying why, only where no
# PostgreSQL is installed and not in CI (CI=true makes a missing server a failure), and in the
# moved-clock runs (scripts/test-clocks): the backend's tests run once, in the normal suite.
def _no_postgres(reason, package="postgresql"):
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI: {reason}; .ci/run installs Debian's {package}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_server():
    if os.environ.get("FAKETIME"):
        pytest.skip("the PostgreSQL backend's tests run in the normal suite, not with the clock moved")
    import pgserver

    if pgserver.binaries() is None:
        _no_postgres("no PostgreSQL binaries (initdb, pg_ctl; Debian: apt-get install postgresql)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _no_postgres("psycopg is not installed (pip install -e '.[postgres]')")
    server = pgserver.Server().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server):
    """A ``postgresql://`` URL on a new, empty schema of the session's server."""
    import psycopg

    url, name = pg_server.new_schema_url()
    yield url
    with psycopg.connect(pg_server.url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {name} CASCADE")


@pytest.fixture
def pg_messages(monkeypatch):
    """The text of every message psycopg sends from now on, in order: each ``execute`` on a
    psycopg cursor sends one message and waits for its answer."""
    import psycopg

    sent, execute = [], psycopg.Cursor.execute

    def recording(cursor, query, *args, **kwargs):
        sent.append(str(query))
        return execute(cursor, query, *args, **kwargs)

    monkeypatch.setattr(psycopg.Cursor, "execute", recording)
    return sent


@pytest.fixture
def pg_pooled_url(pg_server):
    """A ``postgresql://`` URL of a new database's ledger through PgBouncer in transaction mode
    with one server session (tests/pgserver.py ``Bouncer``), as a fleet of short processes is
    served (docs/postgresql.md). Skipped where PgBouncer is not installed, but in CI."""
    import uuid

    import pgserver
    import psycopg

    if pgserver.pgbouncer_binary() is None:
        _no_postgres("no pgbouncer binary (Debian: apt-get install pgbouncer)", "pgbouncer")
    dbname = f"pooled_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_server.url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {dbname}")
    bouncer = pgserver.Bouncer(pg_server, dbname, pool_size=1).start()
    try:
        yield bouncer.url
    finally:
        bouncer.stop()
        with psycopg.connect(pg_server.url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {dbname} WITH (FORCE)")


@pytest.fixture(params=["sqlite", "postgres"])
def ledger_location(request, tmp_path):
    """Where a ledger test's ledger lives, once per backend: a new SQLite file, or a new schema
    on the session's PostgreSQL server."""
    if request.param == "sqlite":
        return tmp_path / "ledger.db"
    return request.getfixturevalue("pg_url")


# Declared accounts of $1.00 a month, for ledger tests that need one, two or three (a test file
# with other budgets defines its own).


@pytest.fixture
def work():
    from llm_accounts.declarations import Account
    from llm_accounts.money import NANO

    return Account("work", "WORK_KEY", NANO)


@pytest.fixture
def home():
    from llm_accounts.declarations import Account
    from llm_accounts.money import NANO

    return Account("home", "HOME_KEY", NANO)


@pytest.fixture
def spare():
    from llm_accounts.declarations import Account
    from llm_accounts.money import NANO

    return Account("spare", "SPARE_KEY", NANO)
