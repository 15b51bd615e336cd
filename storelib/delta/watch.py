"""Warm views of object-store tables kept current in the background, off the requests' path.

On an object store a look for a table's next log entry is a round trip (a request). A process that
reads a table keeps it watched: one thread of the process brings each watched table's view forward
every ``remote_look_s`` of its spec, so a pull or a look-up finds the view current and waits for no
look of its own. A table nobody has asked for in :data:`IDLE_S` is no longer watched (so an idle
process makes no requests); the next ask brings its view forward on the asker's thread, as before.
A batch read, which plans once and does not come back soon, asks :func:`unwatched`: its views are
brought forward for it, and no thread keeps looking at them afterwards.

>>> class Seen:
...     spec = type("Spec", (), {"remote_look_s": 0.05})()
...     looks = 0
...     def refresh(self):
...         self.looks += 1
>>> table = Seen()
>>> watcher = Watcher()
>>> watcher.watch(table); time.sleep(0.3); watcher.stop()
>>> table.looks >= 2, watcher.watching(table)
(True, False)
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import logging
import os
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

__all__ = ["Watcher", "WATCHER", "IDLE_S", "unwatched", "watching_asked"]

log = logging.getLogger(__name__)

#: A watched table nobody has asked for in this long is no longer looked at.
IDLE_S = 10.0

_UNWATCHED: contextvars.ContextVar[bool] = contextvars.ContextVar("storelib_unwatched", default=False)


@contextlib.contextmanager
def unwatched() -> Iterator[None]:
    """Within this block (on this thread), asking for a table's view does not start watching it: for a batch
    read, whose planner looks once. A table watched already (a consumer in the same process) stays so.

    >>> with unwatched():
    ...     watching_asked()
    False
    >>> watching_asked()
    True
    """
    token = _UNWATCHED.set(True)
    try:
        yield
    finally:
        _UNWATCHED.reset(token)


def watching_asked() -> bool:
    """Whether a view asked for now should be kept watched (false within :func:`unwatched`).

    >>> watching_asked()
    True
    """
    return not _UNWATCHED.get()


class Watcher:
    """One thread that calls ``refresh()`` on each watched table every ``table.spec.remote_look_s``, the tables
    due at once in parallel (each look is a round trip); tables are held weakly."""

    def __init__(self, idle_s: float = IDLE_S):
        self.idle_s = idle_s
        self._asked: "weakref.WeakKeyDictionary[Any, float]" = weakref.WeakKeyDictionary()
        self._looked: "weakref.WeakKeyDictionary[Any, float]" = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0
        self._pool: ThreadPoolExecutor | None = None

    def watch(self, table: Any) -> None:
        """Note that ``table`` was just asked for, and keep its view current from now on."""
        now = time.monotonic()
        with self._lock:
            if table not in self._asked:
                self._looked[table] = now  # its asker has just brought it forward
            self._asked[table] = now
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                if self._pool is None or self._pid != os.getpid():  # one pool a process (a forked child its own)
                    self._pool = ThreadPoolExecutor(8, thread_name_prefix="storelib-watch-look")
                self._pid, self._wake = os.getpid(), threading.Event()
                self._thread = threading.Thread(
                    target=self._run, args=(self._wake,), name="storelib-watch", daemon=True
                )
                self._thread.start()

    def watching(self, table: Any) -> bool:
        """Whether ``table``'s view is being kept current (it was asked for within :attr:`idle_s`)."""
        with self._lock:
            asked = self._asked.get(table)
            alive = self._thread is not None and self._pid == os.getpid() and self._thread.is_alive()
        return alive and asked is not None and time.monotonic() - asked < self.idle_s

    def forget(self, table: Any) -> None:
        """Stop looking at ``table`` (its handle was released).

        >>> class Quiet:
        ...     spec = type("Spec", (), {"remote_look_s": 60.0})()
        ...     def refresh(self): pass
        >>> watcher, table = Watcher(), Quiet()
        >>> watcher.watch(table); watcher.watching(table)
        True
        >>> watcher.forget(table); watcher.watching(table)
        False
        >>> watcher.stop()
        """
        with self._lock:
            self._asked.pop(table, None)
            self._looked.pop(table, None)

    def stop(self) -> None:
        """Stop the thread and forget every table."""
        with self._lock:
            self._asked.clear()
            self._looked.clear()
            thread, self._thread = self._thread, None
            self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)

    def _run(self, stopped: threading.Event) -> None:
        while not stopped.is_set():
            now = time.monotonic()
            with self._lock:
                for table in [t for t, asked in self._asked.items() if now - asked >= self.idle_s]:
                    del self._asked[table]
                    self._looked.pop(table, None)
                tables = list(self._asked.keys())
                due = [t for t in tables if now - self._looked.get(t, 0.0) >= t.spec.remote_look_s]
                for table in due:
                    self._looked[table] = now
                upcoming = [self._looked.get(t, now) + t.spec.remote_look_s - now for t in tables]
            if due:
                assert self._pool is not None
                try:
                    outcomes = list(self._pool.map(_look, due))
                except RuntimeError:  # its pool takes no more work: the process is exiting
                    return
                for outcome in outcomes:
                    if outcome is not None:
                        log.debug("watch: %s", outcome)
            if not tables:
                with self._lock:
                    if not self._asked:  # nothing left to watch: the thread ends (watch starts another)
                        self._thread = None
                        return
            stopped.wait(max(0.005, min(upcoming, default=0.05)) if not due else 0.005)


def _look(table: Any) -> str | None:
    """Bring ``table``'s view forward; an error is left for the next asker to meet (returned, logged)."""
    try:
        table.refresh()
        return None
    except Exception as e:  # noqa: BLE001 - a request that fails here fails again, where someone hears it
        return f"{table!r}: {e}"


#: The process's watcher, stopped before the interpreter tears down (a look in flight is native code that
#: must not outlive the libraries it runs in).
WATCHER = Watcher()
atexit.register(WATCHER.stop)
