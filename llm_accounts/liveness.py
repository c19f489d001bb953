"""Whether the process that sent an attempt is still running (docs/architecture.md "Waiting for
room", "A process that is gone").

An attempt records the process that reserved it: its pid and a token of that process's start (the
machine's boot id, its pid namespace, and the process's start time in clock ticks, from
``/proc``), so a pid the system has since given to another process is not mistaken for it, and a
process in another pid namespace (a container sharing the host's name) is never judged by a pid
that means another process here. An attempt with no outcome is in flight while that process
runs; once the process is gone (killed, crashed, its machine restarted) nothing will ever record
the outcome, and another process on the same machine records it as ``cancelled``: unknown, its
ceiling still held, no longer waited for.

Only Linux's ``/proc`` is read. Where it is missing the token is None, and a process is never
said to be gone: the attempt stays in flight, as attempts did before processes were recorded.

"This machine" is not its host name: cloned VMs of a fleet keep one. ``machine_id`` names it by a
digest of ``/etc/machine-id`` (else of an id generated once in the llm user directory), which
``attempt.host`` carries after the host name. Clones that were not given a machine id of their own
share that too, and differ only by their boot: so a process of an earlier boot is judged gone
only when this machine is known to have run in that boot (``record_boot`` lists each boot a
process of this llm user directory ran in), never when another clone did
(docs/architecture.md "A process that is gone").
"""

import hashlib
import os
import re
import stat
import uuid

PROC = "/proc"
BOOT_ID_FILE = f"{PROC}/sys/kernel/random/boot_id"
MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
GENERATED_ID = "accounts-machine-id"  # in the llm user directory, where no machine id is readable
BOOTS = "accounts-boots"  # in the llm user directory: the boots this machine's processes ran in
BOOTS_LIMIT = 64 * 1024  # bytes read at most from either file
BOOTS_KEPT = 512  # boots listed at most (about 19 KB); the oldest go first
SHORT_ID_CHARS = 12
_HEX_ID = re.compile(r"[0-9a-f]{32}")
_BOOT = re.compile(r"[0-9a-f-]{1,64}")


def _boot_id():
    try:
        with open(BOOT_ID_FILE) as f:
            return f.read().strip()
    except OSError:
        return None


def _read_small(path):
    """A small regular file's text, or None (missing, unreadable, not a regular file, too big)."""
    from .paths import FileProblem, read_limited

    try:
        return read_limited(path, BOOTS_LIMIT).decode("ascii")
    except (FileNotFoundError, FileProblem, UnicodeDecodeError):
        return None


def _generated_id(path):
    """The id generated once for this llm user directory (0600), made now if there is none; None
    where it can be neither read nor made. Made whole under a temporary name, then linked into
    place, so two processes starting at once agree on one."""
    if path is None:
        return None
    for _ in range(2):
        text = _read_small(path)
        if text is not None:
            text = text.strip()
            return text if _HEX_ID.fullmatch(text) else None
        temp = f"{path}.{uuid.uuid4().hex}.tmp"
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.fchmod(fd, 0o600)
                os.write(fd, (uuid.uuid4().hex + "\n").encode())
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(temp, path)
            except FileExistsError:
                pass  # another process made it first: its id is the one
        except OSError:
            return None
        finally:
            try:
                os.unlink(temp)
            except OSError:
                pass
    return None


def _in_user_dir(name):
    """The path of ``name`` in the llm user directory, or None where that cannot be had (a
    read-only home, say): then nothing is generated or recorded there."""
    from .paths import user_dir

    try:
        return os.path.join(str(user_dir()), name)
    except OSError:
        return None


_machines = {}


def machine_id():
    """A short id of this machine for ``attempt.host`` and ``host_health``: a digest of
    ``/etc/machine-id`` (never the id itself, which systemd asks applications not to expose),
    else of the id generated once in the llm user directory, else of the boot id (unique to this
    run of the machine); None where none of them can be read. Read once per process (and llm
    user directory): a ledger is opened for every prompt."""
    key = (MACHINE_ID_FILES, _in_user_dir(GENERATED_ID), _boot_id())
    if key not in _machines:
        _machines[key] = _machine_id(key[1])
    return _machines[key]


def _machine_id(generated_path):
    source = None
    for path in MACHINE_ID_FILES:
        text = _read_small(path)
        if text is not None and _HEX_ID.fullmatch(text.strip()):
            source = "machine-id:" + text.strip()
            break
    if source is None:
        generated = _generated_id(generated_path)
        if generated is not None:
            source = "generated:" + generated
    if source is None:
        boot = _boot_id()
        if boot:
            source = "boot:" + boot
    if source is None:
        return None
    return hashlib.sha256(("llm-accounts host\0" + source).encode()).hexdigest()[:SHORT_ID_CHARS]


_recorded = set()


def record_boot():
    """List this boot among those this machine's processes ran in (``BOOTS`` in the llm user
    directory), once per process: a later boot of this machine may then judge this boot's
    attempts, and a clone, which never ran in it, may not. A list that cannot be written leaves
    this boot's attempts unjudged from later boots: the safe side."""
    boot = _boot_id()
    if not boot or not _BOOT.fullmatch(boot):
        return
    path = _in_user_dir(BOOTS)
    if path is None or (path, boot) in _recorded:
        return
    known = _boots(path)
    try:
        if known is None:
            # There but not readable as a list: a regular file (too long, say) is made anew;
            # anything else (a FIFO, a device) is left alone and this boot goes unlisted.
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return
            known = []
        if boot in known:
            _recorded.add((path, boot))
            return
        if len(known) >= BOOTS_KEPT or not known and os.path.exists(path):
            # Full, or unreadable: rewritten whole, the newest boots kept.
            from .paths import write_private_bytes

            write_private_bytes(path, "".join(f"{b}\n" for b in [*known[1 - BOOTS_KEPT:], boot]).encode())
        else:
            # O_NONBLOCK: a FIFO put in its place refuses at once instead of hanging the prompt.
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK, 0o600)
            try:
                if stat.S_ISREG(os.fstat(fd).st_mode):
                    os.write(fd, f"{boot}\n".encode())
            finally:
                os.close(fd)
    except OSError:
        return
    _recorded.add((path, boot))


def _boots(path):
    """The boots listed in ``path``, oldest first; ``[]`` when there is no list, None when there
    is one that cannot be read."""
    from .paths import FileProblem, read_limited

    try:
        text = read_limited(path, BOOTS_LIMIT).decode("ascii")
    except FileNotFoundError:
        return []
    except (FileProblem, UnicodeDecodeError):
        return None
    return [line for line in text.split() if _BOOT.fullmatch(line)]


def ran_in(boot):
    """Whether a process of this machine (of this llm user directory) ran in ``boot``."""
    path = _in_user_dir(BOOTS)
    return path is not None and boot in (_boots(path) or ())


def _started(pid):
    """``(start time in clock ticks, state)`` of ``pid`` from ``/proc/<pid>/stat``, or None when
    there is no such process. The command name may hold spaces and parentheses: fields are read
    after its last ``)``."""
    try:
        with open(f"{PROC}/{pid}/stat") as f:
            line = f.read()
    except OSError:
        return None
    fields = line.rsplit(")", 1)[1].split()
    return fields[19], fields[0]


def _pid_namespace():
    try:
        return os.readlink(f"{PROC}/self/ns/pid").replace(":", "")
    except OSError:
        return None


_this = {}


def this_process():
    """``(pid, token)`` of this process; the token is None where ``/proc`` cannot be read."""
    pid = os.getpid()
    if pid not in _this:  # a forked child is another process
        boot, namespace, started = _boot_id(), _pid_namespace(), _started(pid)
        _this.clear()
        _this[pid] = f"{boot}:{namespace}:{started[0]}" if boot and namespace and started else None
    return pid, _this[pid]


def gone(pid, token):
    """True only when the process ``(pid, token)`` recorded is certainly not running: it ran in an
    earlier boot of this machine (``ran_in``), or, in this pid namespace, no process has that pid,
    or the one that has it started at another time, or it has exited and waits to be reaped. False
    when it runs, or when that cannot be known (another pid namespace, no ``/proc``, a boot this
    machine never ran in: a clone's). The caller only asks about attempts of this machine
    (``attempt.host``)."""
    parts = token.split(":") if isinstance(token, str) else ()
    if not isinstance(pid, int) or pid <= 0 or len(parts) != 3:
        return False
    boot, namespace, started = parts
    current_boot = _boot_id()
    if current_boot is None:
        return False
    if boot != current_boot:
        return ran_in(boot)
    if namespace != _pid_namespace():
        return False
    now = _started(pid)
    if now is None:
        # No /proc entry to read: gone only if the kernel says there is no such process (another
        # user's process may be hidden from this one's /proc, and it runs).
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False
    return now[0] != started or now[1] in ("Z", "X")
