"""Imported at start-up by every Python process that ``scripts/test-clocks`` or the tests'
``conftest.under_faketime`` run under Debian's ``faketime``: they put this folder on
``PYTHONPATH``. Not a test module, and it does nothing outside libfaketime. It works around two
bugs of libfaketime 0.9.10 (Debian bookworm's) so that the moved-clock runs test the project,
not libfaketime:

1. ``time.sleep``. The runs keep the monotonic clock real (``FAKETIME_DONT_FAKE_MONOTONIC=1``),
   since faking it hangs Python's timed lock and event waits. libfaketime then fails Python
   3.11's ``time.sleep`` (it sleeps until an absolute monotonic time with ``clock_nanosleep``)
   with ``OSError: [Errno 22] Invalid argument`` (libfaketime issue 426). Only when
   ``time.sleep`` fails that way, it becomes a sleep on ``select``'s relative timeout, timed by
   the real monotonic clock.

2. ``os.environ``. libfaketime calls ``getenv`` inside ``pthread_cond_timedwait``, which a
   Python thread calls while it waits for the GIL, and glibc's ``setenv`` frees the environment
   array it grows while such a ``getenv`` reads it: a threaded process that adds variables
   (every ``monkeypatch.setenv`` in the tests, with servers on threads) dies with a
   segmentation fault now and then. So ``os.putenv`` and ``os.unsetenv`` keep the environment
   in an array of fixed size that is never freed, changed with single pointer stores.
"""

import ctypes
import errno
import os
import select
import time

_real_sleep = time.sleep


def _monotonic_sleep(seconds):
    seconds = float(seconds)
    if seconds != seconds or seconds < 0:
        raise ValueError("sleep length must be a non-negative number")
    deadline = time.monotonic() + seconds
    while (remaining := deadline - time.monotonic()) > 0:
        select.select([], [], [], remaining)


class _Environment:
    """The C environment in an array of ``SIZE`` slots (entries, then only NULLs) that
    ``os.putenv`` and ``os.unsetenv`` change with single pointer stores. ``names`` mirrors the
    entries' names in order; a C library that changes the environment itself is noticed
    (``environ`` moved, or the mirror no longer matches) and the array is adopted again."""

    SIZE = 16384

    def __init__(self):
        self.environ = ctypes.c_void_p.in_dll(ctypes.CDLL(None), "environ")
        self.slots, self.names = None, []
        self.kept = []  # every entry ever stored: a getenv may still be reading a replaced one

    def _check(self):
        count = len(self.names)
        if (
            self.slots is None
            or self.environ.value != ctypes.addressof(self.slots)
            or self.slots[count] is not None
            or (count and not self.slots[count - 1].startswith(self.names[count - 1] + b"="))
        ):
            self._adopt()

    def _adopt(self):
        """Copy the current C environment into a new array and make it ``environ``."""
        current = ctypes.cast(self.environ.value, ctypes.POINTER(ctypes.c_char_p)) if self.environ.value else None
        slots, names = (ctypes.c_char_p * self.SIZE)(), []
        while current is not None and current[len(names)] is not None:
            entry = current[len(names)]
            self.kept.append(entry)
            slots[len(names)] = entry
            names.append(entry.partition(b"=")[0])
        self.slots, self.names = slots, names
        self.environ.value = ctypes.addressof(slots)

    def putenv(self, name, value):
        key, entry = os.fsencode(name), os.fsencode(value)
        if not key or b"=" in key or b"\0" in key or b"\0" in entry or len(self.names) >= self.SIZE - 2:
            return _real_putenv(name, value)  # Python's own errors, or a full array
        self._check()
        entry = key + b"=" + entry
        self.kept.append(entry)
        try:
            self.slots[self.names.index(key)] = entry
        except ValueError:
            self.slots[len(self.names)] = entry  # the slot after it is NULL already
            self.names.append(key)

    def unsetenv(self, name):
        key = os.fsencode(name)
        if not key or b"=" in key or b"\0" in key:
            return _real_unsetenv(name)
        self._check()
        while key in self.names:
            index = self.names.index(key)
            for slot in range(index, len(self.names)):  # down one, as glibc's unsetenv moves them
                self.slots[slot] = self.slots[slot + 1]
            del self.names[index]


_real_putenv, _real_unsetenv = os.putenv, os.unsetenv

if "faketime" in os.environ.get("LD_PRELOAD", ""):
    try:
        _real_sleep(0)
    except OSError as error:
        if error.errno != errno.EINVAL:
            raise
        time.sleep = _monotonic_sleep
    _environment = _Environment()
    os.putenv, os.unsetenv = _environment.putenv, _environment.unsetenv
