"""A throwaway PostgreSQL server for the tests and bench/ledger.py (docs/architecture.md "Testing").

Debian's ``postgresql`` package puts ``initdb`` and ``pg_ctl`` in /usr/lib/postgresql/<N>/bin.
``initdb`` refuses to run as root, so as root the server runs as the unprivileged system user
``llmaccounts-pg`` (created if missing); otherwise as the current user. Its data directory and
unix socket are in a new temporary directory owned by that user; it listens on a free loopback
port with ``trust`` authentication, and ``stop()`` removes everything.
"""

import glob
import os
import pathlib
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid

USER = "llmaccounts-pg"


def binaries():
    """The directory holding ``initdb`` and ``pg_ctl``, newest major version first, or None."""
    found = shutil.which("initdb")
    candidates = [os.path.dirname(found)] if found else []
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]) if d.split("/")[-2].isdigit() else 0, reverse=True)
    for directory in candidates:
        if os.access(os.path.join(directory, "initdb"), os.X_OK) and os.access(os.path.join(directory, "pg_ctl"), os.X_OK):
            return directory
    return None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _clean_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "FAKETIME")) and k != "LD_PRELOAD"}
    env["LC_ALL"] = "C"
    return env


class Server:
    def __init__(self, *, durable=False, listen=("127.0.0.1",), hba=(), settings=()):
        """``durable``: fsync and synchronous_commit on (bench/ledger.py); the tests run without.
        ``listen``: the addresses it listens on (loopback only by default); ``hba``: extra pg_hba.conf lines;
        ``settings``: extra ``-c`` settings (bench/fleet.py listens on a veth, trusts its peer)."""
        self.listen, self.hba, self.extra_settings = tuple(listen), tuple(hba), tuple(settings)
        self.bin = binaries()
        if self.bin is None:
            raise RuntimeError("no PostgreSQL binaries (Debian: apt-get install postgresql)")
        self.durable = durable
        self.prefix = []
        if os.geteuid() == 0:
            try:
                pwd.getpwnam(USER)
            except KeyError:
                subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
                               check=True, capture_output=True)
            self.prefix = ["runuser", "-u", USER, "--"]
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="llm-accounts-pg-", dir="/tmp"))
        if self.prefix:
            entry = pwd.getpwnam(USER)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        os.chmod(self.dir, 0o700)
        self.data = self.dir / "data"
        self.port = None

    def _run(self, *argv):
        return subprocess.run([*self.prefix, *argv], check=True, capture_output=True, text=True, env=_clean_env(),
                              timeout=120)

    def start(self):
        self._run(os.path.join(self.bin, "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres",
                  "-E", "UTF8", "--locale=C", "--no-sync")
        if self.hba:
            with open(self.data / "pg_hba.conf", "a") as hba:
                hba.write("".join(f"{line}\n" for line in self.hba))
        settings = [f"-c unix_socket_directories={self.dir}", f"-c listen_addresses={','.join(self.listen)}",
                    "-c max_connections=100", "-c shared_buffers=32MB", *(f"-c {s}" for s in self.extra_settings)]
        if not self.durable:
            settings += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        for _ in range(3):
            self.port = _free_port()
            try:
                self._run(os.path.join(self.bin, "pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "log"), "-w",
                          "-t", "60", "-o", " ".join([f"-p {self.port}", *settings]), "start")
                return self
            except subprocess.CalledProcessError:
                continue
        raise RuntimeError("PostgreSQL did not start: " + (self.dir / "log").read_text(errors="replace")[-2000:])

    @property
    def url(self):
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def new_schema_url(self):
        """A URL on a new, empty schema: a fresh ledger per test, without a new database."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE SCHEMA {name}")
        return f"{self.url}?options=-csearch_path%3D{name}", name

    def stop(self):
        try:
            if self.port is not None:
                self._run(os.path.join(self.bin, "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def pgbouncer_binary():
    """PgBouncer's binary (Debian's ``pgbouncer`` puts it in /usr/sbin), or None."""
    found = shutil.which("pgbouncer")
    if found is None and os.access("/usr/sbin/pgbouncer", os.X_OK):
        found = "/usr/sbin/pgbouncer"
    return found


class Bouncer:
    """PgBouncer in transaction mode in front of ``server``, for its database ``dbname``, with
    ``pool_size`` server sessions: the pooler a fleet of ``llm`` processes connects through
    (docs/postgresql.md), handing each transaction a server session that earlier processes used.
    ``start()`` returns None where ``pgbouncer`` is not installed; ``pid`` is the pooler's."""

    def __init__(self, server, dbname, pool_size=2):
        self.server, self.dbname, self.pool_size = server, dbname, pool_size
        self.process = self.port = self.pid = None

    def start(self):
        import time

        binary = pgbouncer_binary()
        if binary is None:
            return None
        self.port = _free_port()
        ini, users = self.server.dir / "pgbouncer.ini", self.server.dir / "pgbouncer-users.txt"
        users.write_text('"postgres" ""\n')
        ini.write_text(
            f"[databases]\n{self.dbname} = host=127.0.0.1 port={self.server.port} dbname={self.dbname} user=postgres\n"
            f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\nauth_type = trust\n"
            f"auth_file = {users}\npool_mode = transaction\ndefault_pool_size = {self.pool_size}\n"
            f"ignore_startup_parameters = extra_float_digits\npidfile = {self.server.dir}/pgbouncer.pid\n"
            f"logfile = {self.server.dir}/pgbouncer.log\n"
        )
        if self.server.prefix:  # it refuses to run as root: as the server's user
            entry = pwd.getpwnam(USER)
            for path in (ini, users):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self.process = subprocess.Popen([*self.server.prefix, binary, str(ini)], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, env=_clean_env())
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                self.pid = int((self.server.dir / "pgbouncer.pid").read_text())
                return self
            except (OSError, ValueError):
                if time.monotonic() > deadline or self.process.poll() is not None:
                    self.stop()
                    log = self.server.dir / "pgbouncer.log"
                    raise RuntimeError("pgbouncer did not start: " + (log.read_text()[-500:] if log.exists() else ""))
                time.sleep(0.05)

    @property
    def url(self):
        return f"postgresql://postgres@127.0.0.1:{self.port}/{self.dbname}"

    def stop(self):
        if self.process is not None:
            self.process.terminate()
            self.process.wait()
            self.process = None
