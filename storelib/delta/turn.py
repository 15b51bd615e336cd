"""A table's turn to commit among the threads and processes of one machine.

Writers on one machine queue for the next version instead of racing for it and retrying (RocketMQ's
broker serializes its commitlog appends the same way). The turn is an ``flock`` on the table's hidden
:data:`COMMIT_LOCK` file, released by the kernel if its process dies; on an object store only this
process's threads queue, and the exactly-next-version commit refuses whoever did not take it.

>>> t = store.context.tables.topic_config
>>> with t.commit_turn(snapshot=False), t.commit_turn() as snapshot:
...     snapshot.version() == t.snapshot().version()
True
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Callable, Iterator

from deltalake import DeltaTable

from storelib.delta.location import is_local

try:
    import fcntl
except ImportError:  # not POSIX: only this process's threads take turns
    fcntl = None  # type: ignore[assignment]

__all__ = ["CommitTurn", "CommitConflict", "COMMIT_LOCK", "KEPT_S"]

#: The hidden file whose ``flock`` is a table's commit turn on this machine.
COMMIT_LOCK = "_storelib_commit.lock"

#: Seconds after a turn's look at the log, or a commit here that kept its snapshot (:meth:`CommitTurn.kept`),
#: during which the turns on an object store take that snapshot without looking again. Past it, other writers (a
#: follower's merges, another machine's producers) have likely committed, and a refused commit costs more than
#: the look.
KEPT_S = 1.0


class CommitConflict(Exception):
    """Another writer committed the version we meant to write; re-read and try again (raised by
    :meth:`~storelib.delta.commit.Committing.commit`; a turn keeps its snapshot through it)."""


class CommitTurn:
    """One table's turn (:meth:`hold`), and the snapshot its holders commit on, kept warm between turns.

    >>> turn = CommitTurn(store.context.tables.topic_config.path, store.context.tables.topic_config.snapshot)
    >>> with turn.hold() as snapshot:
    ...     snapshot.version() >= 0
    True
    """

    def __init__(self, path: str, load: Callable[[], DeltaTable]):
        self.path, self._load = path, load
        self._lock = threading.RLock()
        self._depth = 0
        self._committer: DeltaTable | None = None
        self._fresh = False  # the outermost hold brought the snapshot forward, and no commit was tried since
        self._kept: float | None = None  # when the warm snapshot was last the newest this process knew of

    def forget(self) -> None:
        """Drop the warm snapshot (the next turn loads the table again)."""
        with self._lock:
            self._committer, self._kept = None, None

    def spent(self) -> None:
        """Say a commit to the table was tried: a hold taken inside another brings the snapshot forward again,
        rather than taking the one the outer hold brought (:meth:`hold`)."""
        self._fresh = False
        self._kept = None

    def kept(self, snapshot: DeltaTable) -> None:
        """Say a commit here left ``snapshot`` (the warm one) at the version it made: on an object store it is then
        taken as it is by the holds of the next :data:`KEPT_S`, as after a look (:meth:`hold`)."""
        if snapshot is self._committer and not is_local(self.path):
            self._kept = time.monotonic()

    def _is_kept(self) -> bool:
        return self._kept is not None and time.monotonic() - self._kept < KEPT_S

    @contextlib.contextmanager
    def hold(self, snapshot: bool = True) -> Iterator[DeltaTable | None]:
        """Hold the turn and yield the table's newest snapshot (only the log entries since the last turn are
        read), or None with ``snapshot=False``. A thread holding the turn may take it again (a group commit
        holds it while it gathers its group and appends). A hold inside one that brought the snapshot forward
        gets that snapshot as it is, unless a commit was tried since (:meth:`spent`): on an object store the
        look would be a round trip more, and another machine's commit meanwhile is refused at the conditional
        put, as any other would be. On an object store, for the same reason, the holds of the :data:`KEPT_S`
        after a look, or after a commit here that kept its snapshot (:meth:`kept`), take it as it is; a commit
        refused meanwhile (:class:`CommitConflict`) has the next hold look.

        >>> turn = CommitTurn(store.context.tables.topic_config.path, store.context.tables.topic_config.snapshot)
        >>> with turn.hold() as outer, turn.hold() as inner:
        ...     inner is outer
        True
        """
        with self._lock:
            fd = None
            self._depth += 1
            try:
                if self._depth == 1 and is_local(self.path) and fcntl is not None:
                    fd = self._lock_file()
                    fcntl.flock(fd, fcntl.LOCK_EX)
                if not snapshot:
                    yield None
                elif self._fresh and self._committer is not None:  # brought forward by the hold this one is in
                    self._fresh = False
                    yield self._committer
                elif self._depth == 1 and self._committer is not None and self._is_kept():
                    self._fresh = True  # looked at or moved by a commit here just now: taken as it is
                    yield self._committer
                else:
                    held = self.snapshot()
                    self._fresh = self._depth == 1
                    if self._fresh and not is_local(self.path):
                        self._kept = time.monotonic()
                    yield held
            except CommitConflict:  # the snapshot is behind, not broken: the next turn reads the entries since
                raise
            except BaseException:
                self._committer = None  # whatever else failed, the next turn starts from a fresh load
                raise
            finally:
                self._depth -= 1
                if not self._depth:
                    self._fresh = False
                if fd is not None:
                    os.close(fd)

    @contextlib.contextmanager
    def try_hold(self) -> Iterator[bool]:
        """Hold the turn if nobody holds it now, without waiting: yields whether it is held (on an object store,
        where no machine-wide turn exists, it never is).

        >>> turn = CommitTurn(store.context.tables.topic_config.path, store.context.tables.topic_config.snapshot)
        >>> with turn.try_hold() as held:
        ...     held
        True
        """
        if not is_local(self.path) or fcntl is None or not self._lock.acquire(blocking=False):
            yield False
            return
        fd = None
        try:
            if self._depth:  # this thread holds it already
                yield True
                return
            try:
                fd = self._lock_file()
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:  # held by another process, or a folder this process may not write: not held
                yield False
                return
            self._depth += 1
            try:
                yield True
            finally:
                self._depth -= 1
        finally:
            if fd is not None:
                os.close(fd)
            self._lock.release()

    def _lock_file(self) -> int:
        """A descriptor of the table's :data:`COMMIT_LOCK` file (made when missing), for ``flock``."""
        return os.open(os.path.join(self.path.removeprefix("file://"), COMMIT_LOCK), os.O_RDWR | os.O_CREAT, 0o644)

    def snapshot(self) -> DeltaTable:
        """The warm snapshot brought to the table's newest version: for a holder of the turn (one taken with
        ``snapshot=False`` gets it here, e.g. several tables' at once).

        >>> turn = CommitTurn(store.context.tables.topic_config.path, store.context.tables.topic_config.snapshot)
        >>> with turn.hold(snapshot=False):
        ...     turn.snapshot().version() >= 0
        True
        """
        if self._committer is None:
            self._committer = self._load()
        else:
            self._committer.update_incremental()
        return self._committer
