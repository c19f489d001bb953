"""Waking the prompts that wait for room when a write frees some (docs/architecture.md "Waiting
for room").

A prompt refused only by ceilings in flight waits, holding no lock, transaction or connection to
the ledger, and reserves again when woken: by ``signal(ledger)``, which every write that may free
room calls once it has committed (a settlement, a reconciliation, an adjustment, an unblock, a
waiter giving up its place, a lowered ceiling), or else after ``room.FALLBACK_S`` (the safety net for
what no write signals: a dead waiter's place expiring).

- **SQLite** (one machine): each process that has prompts waiting binds one Unix datagram socket
  in a private directory beside the ledger file (``<ledger>-waiters``, mode 0700, owned by this
  user; anything else there is not used), and ``signal`` sends one byte to every socket in it,
  never blocking: a full queue has been woken already, and a socket nobody has bound any more
  (its process died) refuses the byte and is removed.
- **PostgreSQL** (any machine): ``signal`` is ``pg_notify`` on the ledger's channel, sent only
  while a ``waiter`` row exists; each process with prompts waiting holds one idle connection
  that ``LISTEN``s on it, the one exception to "waiting holds no connection".

Within a process one ``Hub`` per ledger serves every waiting prompt, sync or async: one socket or
listening connection and one thread that sleeps on it and wakes the prompt that has waited
longest, which passes the wake-up on once it stops waiting (a flag cleared before each of its
reservations, so a signal between that reservation and the wait is never lost). Where no wake-up can be had (a ledger path too long for a socket, a
directory that is not private, no listening connection), ``subscribe`` returns None and the
prompt polls as it did before (``room.Wait``).
"""

import asyncio
import errno
import hashlib
import os
import secrets
import select
import socket
import stat
import threading

from .. import ledger as package
SUFFIX = "-waiters"
SOCKET_SUFFIX = ".sock"
# sockaddr_un's path is 108 bytes on Linux; a longer one is reached through /proc/self/fd.
_MAX_PATH = 100

#: How many waiting prompts of a process a wake-up that finds no room for them reaches, one after another.
RELAY_HOPS = 3

NOTIFY_SQL = "SELECT pg_notify(:channel, '') WHERE EXISTS (SELECT 1 FROM waiter)"


def directory(path):
    """The waiters' directory of the SQLite ledger file ``path``."""
    return f"{os.fspath(path)}{SUFFIX}"


def channel(schema_name):
    """The PostgreSQL channel of the ledger in ``schema_name`` (two ledgers never wake each other)."""
    return "llm_accounts_room_" + hashlib.sha256(f"llm-accounts\0room\0{schema_name}".encode()).hexdigest()[:16]


def signal(ledger):
    """Wake every prompt waiting for room on ``ledger``, in every process (on PostgreSQL, on every
    machine). Call it after a write that may free room has committed; it never raises and never
    blocks on a waiter. Called by ``Ledger``'s writes (and ``Ledger.shrink``)."""
    try:
        if ledger.backend == "postgres":
            _notify(ledger)
        elif ledger.path is not None:
            send_all(directory(ledger.path))
    except Exception:  # a wake-up lost is a wait until room.FALLBACK_S, never a failed write
        pass


def _notify(ledger):
    from . import core

    backend = ledger._backend
    with ledger._lock:
        if ledger._conn is None:
            return
        with core.mapped(backend):
            ledger._conn.execute(NOTIFY_SQL, {"channel": channel(backend.schema_name)})


def hold_notify(conn, backend):
    """On PostgreSQL, queue the notification in a write's own message (``replay``): it goes out
    with the commit, at no extra round trip."""
    conn.hold(NOTIFY_SQL, {"channel": channel(backend.schema_name)})


def send_all(folder):
    """One byte to each socket in ``folder``, without blocking; a socket whose process is gone is
    removed. Returns how many were sent."""
    try:
        names = [name for name in os.listdir(folder) if name.endswith(SOCKET_SUFFIX)]
    except OSError:
        return 0  # no one has waited on this ledger (or the directory is not ours to read)
    if not names:
        return 0
    sent = 0
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
            sender.setblocking(False)
            for name in names:
                try:
                    sender.sendto(b"\0", _address(folder, fd, name))
                    sent += 1
                except BlockingIOError:
                    pass  # its queue is full: it has been woken already
                except ConnectionRefusedError:
                    _remove(fd, name)  # nobody has it bound: its process is gone
                except OSError as error:
                    if error.errno not in (errno.ENOENT, errno.EAGAIN, errno.ENOBUFS):
                        raise
    finally:
        os.close(fd)
    return sent


def _address(folder, fd, name):
    path = os.path.join(folder, name)
    if len(os.fsencode(path)) <= _MAX_PATH:
        return path
    return f"/proc/self/fd/{fd}/{name}"


def _remove(fd, name):
    try:
        os.unlink(name, dir_fd=fd)
    except OSError:
        pass


def _private_directory(folder):
    """``folder``, made 0700 if missing; None unless it is a real directory of this user that no
    one else may enter."""
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        info = os.lstat(folder)
    except OSError:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        return None
    return folder


class _SocketSource:
    """This process's socket in a SQLite ledger's waiters' directory."""

    def __init__(self, folder):
        self.folder = folder
        self.name = f"{os.getpid()}-{secrets.token_hex(8)}{SOCKET_SUFFIX}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self.sock.bind(_address(folder, fd, self.name))
        except OSError:
            self.sock.close()
            raise
        finally:
            os.close(fd)
        self.sock.setblocking(False)

    def fileno(self):
        return self.sock.fileno()

    def drain(self):
        while True:
            try:
                self.sock.recv(64)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return

    def close(self):
        try:
            os.unlink(os.path.join(self.folder, self.name))
        except OSError:
            pass
        self.sock.close()


class _ListenSource:
    """An idle connection that ``LISTEN``s on a PostgreSQL ledger's channel."""

    def __init__(self, url, name):
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True, connect_timeout=max(2, int(package.BUSY_TIMEOUT_S + 0.999)),
                                    application_name="llm-accounts waiting")
        try:
            self.conn.execute(f'LISTEN "{name}"')
        except BaseException:
            self.conn.close()
            raise

    def fileno(self):
        return self.conn.pgconn.socket

    def drain(self):
        pgconn = self.conn.pgconn
        pgconn.consume_input()
        while pgconn.notifies() is not None:
            pass
        if pgconn.status != 0:  # CONNECTION_OK: a lost connection wakes no one again
            raise OSError("the listening connection was lost")

    def close(self):
        self.conn.close()


class Hub:
    """One process's wake-ups for one ledger: a source (socket or listening connection), a
    thread that sleeps on it, and the process's waiting prompts in the order they began to wait.

    A wake-up goes to the prompt that has waited longest only; the baton passes on when that
    prompt stops waiting (admitted, or giving up), since room may be left for the next. A prompt
    refused again passes it on at most ``RELAY_HOPS`` times: room goes to waiters in the ledger's
    arrival order (``selection.ahead``), which this process's order follows but for prompts that
    began to wait together, so a later one on the same accounts would mostly be refused too; the
    others reserve again at their fallback (``room.FALLBACK_S``). Waking every prompt at each settlement made a batch of a hundred async
    prompts spend twice the CPU that polling did (bench/daily.py)."""

    def __init__(self, key, source):
        self.key = key
        self.source = source
        self.users = 0
        self.condition = threading.Condition()
        self.queue = []  # subscriptions, oldest first
        self._stop_r, self._stop_w = os.pipe()
        self.thread = threading.Thread(target=self._run, name="llm-accounts wake-ups", daemon=True)
        self.thread.start()

    def _run(self):
        try:
            while True:
                ready, _, _ = select.select([self.source.fileno(), self._stop_r], [], [])
                if self._stop_r in ready:
                    return
                self.source.drain()
                self.wake()
        except Exception:
            # The source failed: waiters fall back to room.FALLBACK_S; the hub is replaced on next use.
            with _hubs_lock:
                if _hubs.get(self.key) is self:
                    del _hubs[self.key]
        finally:
            self.source.close()
            os.close(self._stop_r)

    def wake(self, after=None, hops=RELAY_HOPS):
        """Wake the prompt that has waited longest (after ``after``, when it passes the wake-up on)."""
        with self.condition:
            start = self.queue.index(after) + 1 if after in self.queue else 0
            head = self.queue[start] if start < len(self.queue) else None
        if head is not None:
            head.poke(hops)

    def stop(self):
        try:
            os.write(self._stop_w, b"x")
        except OSError:
            pass  # the thread has ended already
        os.close(self._stop_w)
        if threading.current_thread() is not self.thread:
            self.thread.join(5)  # its socket is gone when the last prompt stops waiting


def _resolve(future):
    if not future.done():
        future.set_result(None)


_hubs = {}
_hubs_lock = threading.Lock()


class Subscription:
    """One waiting prompt's wake-ups: ``mark()`` before each reservation, then ``wait`` or
    ``wait_async``, which return at the first wake-up since the mark, or after ``timeout``."""

    def __init__(self, hub):
        self.hub = hub
        self.woken = False
        self.closed = False
        self.future = None  # (loop, future) while an async prompt waits
        self.hops = None  # how far a wake-up this prompt holds may still go when it is refused

    def mark(self):
        with self.hub.condition:
            self.woken = False

    def refused(self):
        """A reservation after a wake-up found no room: pass the wake-up on, while it may go."""
        hops, self.hops = self.hops, None
        if hops:
            self.hub.wake(after=self, hops=hops - 1)

    def poke(self, hops=0):
        with self.hub.condition:
            self.hops = hops
            self.woken = True
            self.hub.condition.notify_all()
            entry, self.future = self.future, None
        if entry is not None:
            loop, future = entry
            try:
                loop.call_soon_threadsafe(_resolve, future)
            except RuntimeError:
                pass  # its loop has closed

    def wait(self, timeout):
        with self.hub.condition:
            return self.hub.condition.wait_for(lambda: self.woken, timeout)

    async def wait_async(self, timeout):
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self.hub.condition:
            if self.woken:
                return True
            self.future = (loop, future)
        try:
            await asyncio.wait_for(future, timeout)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            with self.hub.condition:
                if self.future is not None and self.future[1] is future:
                    self.future = None

    def close(self):
        """Stop waiting: the baton passes to the prompt that has waited longest after this one."""
        if self.closed:
            return
        self.closed = True
        hub = self.hub
        with hub.condition:
            if self in hub.queue:
                hub.queue.remove(self)
        hub.wake()
        with _hubs_lock:
            hub.users -= 1
            last = hub.users == 0
            if last and _hubs.get(hub.key) is hub:
                del _hubs[hub.key]
        if last:
            hub.stop()


def subscribe(ledger):
    """A ``Subscription`` to ``ledger``'s wake-ups, or None where none can be had (the prompt
    then polls)."""
    try:
        if ledger.backend == "postgres":
            key = ("postgres", ledger._backend.url, ledger._backend.schema_name)
        elif ledger.path is not None:
            key = ("sqlite", os.path.realpath(ledger.path))
        else:
            return None
        with _hubs_lock:
            hub = _hubs.get(key)
            if hub is None:
                hub = _hubs[key] = Hub(key, _source(ledger, key))
            hub.users += 1
            subscription = Subscription(hub)
            with hub.condition:
                hub.queue.append(subscription)
            return subscription
    except Exception:
        return None


def _source(ledger, key):
    if key[0] == "postgres":
        return _ListenSource(ledger._backend.url, channel(ledger._backend.schema_name))
    folder = _private_directory(directory(ledger.path))
    if folder is None:
        raise OSError("the waiters' directory is not private")
    return _SocketSource(folder)
