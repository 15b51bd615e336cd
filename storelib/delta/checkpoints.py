"""Checkpoints of the tables on an object store, written beside their commits rather than inside them.

delta-rs writes a table's checkpoint inside the commit that reaches its ``delta.checkpointInterval``, before
that commit returns. On an object store the checkpoint loads the table's state again and writes all of it
(every file and tombstone; tombstones stay a week there): under the online suite a commit of the commitlog
that took 135-200 ms took 315-922 ms when it wrote one, more as the run went on, and those commits set the
sends' ack p99 (``docs/object_storage.md``, figures). So a table on an object store commits without it, and
:data:`CHECKPOINTS` writes it on a thread of its own, then deletes the log entries that checkpoint made
expired (the commit's own clean-up did that before). Local tables keep delta-rs's checkpoint in the commit:
there it costs milliseconds.

A checkpoint only shortens what a reader loads. One never written (its process killed first) leaves the
next loads a few more entries to read, until the next interval's. The process's exit waits for those due,
and takes no more (:meth:`Checkpoints.close`, at exit): a thread still inside delta-rs when the interpreter
tears down crashes the process (``SIGSEGV``: 8 of 180 producer processes on S3 before it, 0 of 150 after).

>>> import os
>>> import pyarrow as pa
>>> from storelib.delta.spec import TableSpec
>>> from storelib.delta.table import Table
>>> t = Table(tmp + "/checkpointed", TableSpec("checkpointed", pa.schema([("id", pa.int64())]))).ensure()
>>> before = CHECKPOINTS.written
>>> CHECKPOINTS.due(t.path, t.snapshot, t.commit(t.snapshot(), []))    # version 1's
>>> CHECKPOINTS.wait(30), CHECKPOINTS.written - before, os.path.exists(t.path + "/_delta_log/_last_checkpoint")
(True, 1, True)
"""

from __future__ import annotations

import atexit
import logging
import threading
from typing import Callable

from deltalake import DeltaTable

__all__ = ["Checkpoints", "CHECKPOINTS", "checkpoint_interval"]

log = logging.getLogger(__name__)

#: Delta's default ``delta.checkpointInterval``, for a table that names none.
DEFAULT_INTERVAL = 100


def checkpoint_interval(dt: DeltaTable) -> int:
    """The table's ``delta.checkpointInterval``: a checkpoint is due at each version it divides.

    >>> checkpoint_interval(store.context.tables.commitlog.snapshot())
    20
    """
    return int(dt.metadata().configuration.get("delta.checkpointInterval", DEFAULT_INTERVAL))


class Checkpoints:
    """Checkpoints due, written one after another on a thread that lives while any is due.

    A table's newer checkpoint replaces its older one not yet begun. :attr:`written` and :attr:`failed`
    count them; a failure is logged, and the table's next interval tries again.

    >>> Checkpoints().wait(0)          # nothing due
    True
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._due: dict[str, tuple[Callable[[int], DeltaTable], int]] = {}
        self._worker: threading.Thread | None = None
        self._closed = False
        self.written = 0
        self.failed = 0

    def due(self, path: str, load: Callable[[int], DeltaTable], version: int) -> None:
        """Write the checkpoint of version ``version`` of the table at ``path``, loaded with ``load(version)``."""
        with self._lock:
            if self._closed:
                return
            have = self._due.get(path)
            if have is None or have[1] < version:
                self._due[path] = (load, version)
            if self._worker is None:  # not a daemon: the process's exit waits for the checkpoints due
                self._worker = threading.Thread(target=self._write_due, name="storelib-checkpoints")
                self._worker.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every checkpoint due is written (or has failed); whether they were within ``timeout``."""
        with self._lock:
            return self._done.wait_for(lambda: self._worker is None, timeout)

    def close(self, timeout: float | None = 60.0) -> bool:
        """Take no more checkpoints, and wait for those due (at most ``timeout``); whether they were written.

        >>> Checkpoints().close()
        True
        """
        with self._lock:
            self._closed = True
        return self.wait(timeout)

    def _write_due(self) -> None:
        while True:
            with self._lock:
                if not self._due:
                    self._worker = None
                    self._done.notify_all()
                    return
                path = next(iter(self._due))  # the oldest due first
                load, version = self._due.pop(path)
            try:
                dt = load(version)
                dt.create_checkpoint()
                dt.cleanup_metadata()  # the entries before it, past the log's retention
                self.written += 1
            except Exception as e:  # noqa: BLE001  (a checkpoint only shortens loads: the next interval's tries again)
                self.failed += 1
                log.warning("%s: the checkpoint of version %d was not written: %s", path, version, e)


#: The process's checkpoints of object-store tables, closed at exit (before pyarrow's and delta-rs's own
#: handlers: ``atexit`` runs the latest registered first).
CHECKPOINTS = Checkpoints()
atexit.register(CHECKPOINTS.close)
