"""A process's exit while Arrow's and delta-rs's native threads still work: waited out, not raced.

A scan through deltalake (``DeltaTable.to_pyarrow_table()``, its threads reading through delta-rs's file
system) returns while some of its native threads are still finishing. A process that exits at once tears
Arrow's thread pools down under them, and about one run in eight aborts (``terminate called without an
active exception``, exit 134) after its work is done (delta-rs #2184, apache/arrow #34314; measured: 7 of 60
runs of a script that only reads a table so, 0 of 60 with this). Importing storelib registers
:func:`settle_native_threads` to run at exit, while those libraries are still alive. A long-running
command ends on SIGTERM through :func:`set_from_signal_handler`.

>>> settle_native_threads(0.5)
True
"""

from __future__ import annotations

import atexit
import os
import threading
import time

__all__ = ["settle_native_threads", "stat_fields", "set_from_signal_handler"]

_TASKS = "/proc/self/task"


def settle_native_threads(timeout_s: float = 1.0, quiet_looks: int = 3) -> bool:
    """Wait, at most ``timeout_s``, until every other thread of this process has been asleep (not running,
    not in disk I/O) for ``quiet_looks`` looks 2 ms apart; whether they settled (True where threads cannot be
    seen: not Linux)."""
    if not os.path.isdir(_TASKS):
        return True
    me, deadline, quiet = threading.get_native_id(), time.monotonic() + timeout_s, 0
    while time.monotonic() < deadline:
        quiet = 0 if _busy(me) else quiet + 1
        if quiet >= quiet_looks:
            return True
        time.sleep(0.002)
    return False


def stat_fields(path: str) -> list[str]:
    """The fields of a Linux ``stat`` file (``/proc/PID/stat``, ``/proc/self/task/TID/stat``) after the
    command's name: state first, then the parent's id, ...; ``[]`` once the process or thread has ended.

    >>> stat_fields("/proc/self/stat")[0] in ("R", "S"), stat_fields("/proc/0/stat")
    (True, [])
    """
    try:
        with open(path) as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def _busy(me: int) -> bool:
    for task in os.listdir(_TASKS):
        if int(task) == me:
            continue
        state = stat_fields(f"{_TASKS}/{task}/stat")[:1]  # [] when it ended meanwhile
        if state in (["R"], ["D"]):
            return True
    return False


atexit.register(settle_native_threads)


def set_from_signal_handler(event: threading.Event) -> None:
    """Set ``event`` from a signal handler without deadlocking: on a thread of its own. A handler runs in the
    main thread between two of its steps, and when those are inside ``event.wait()`` with the event's lock held,
    ``event.set()`` there waits for that lock for ever (a follower killed with its endpoint hung so in about one
    run in twelve).

    >>> stop = threading.Event()
    >>> set_from_signal_handler(stop); stop.wait(5)
    True
    """
    threading.Thread(target=event.set, name="storelib-signal", daemon=True).start()
