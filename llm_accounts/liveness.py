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
"""

import os

PROC = "/proc"


def _boot_id():
    try:
        with open(f"{PROC}/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return None


def _started(pid):
    """``(start time in clock ticks, state)`` of ``pid`` from ``/proc/<pid>/stat``, or None when
    there is no such process. The command name may hold spaces and parentheses: fields are read
    after its last ``)``."""
    try:
        with open(f"{PROC}/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
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
    """True only when the process ``(pid, token)`` recorded is certainly not running: the machine
    has booted since, or, in this pid namespace, no process has that pid, or the one that has it
    started at another time, or it has exited and waits to be reaped. False when it runs, or when
    that cannot be known (another pid namespace, no ``/proc``)."""
    parts = token.split(":") if isinstance(token, str) else ()
    if not isinstance(pid, int) or pid <= 0 or len(parts) != 3:
        return False
    boot, namespace, started = parts
    current_boot = _boot_id()
    if current_boot is None:
        return False
    if boot != current_boot:
        return True
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
