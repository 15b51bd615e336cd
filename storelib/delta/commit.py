"""Committing to a store's table: files written elsewhere and ``txn`` markers as exactly the next version.

Each commit carries an id in its ``commitInfo`` (:data:`COMMIT_ID`), so a commit whose answer was lost
(a dropped connection, a conflict reported for a put that landed) is found in the log rather than
written twice. :func:`with_retries` runs a step until its commit lands, backing off on conflicts.

>>> from storelib.delta.spec import TableSpec
>>> from storelib.delta.table import Table
>>> t = Table(tmp + "/committed", TableSpec("committed", pa.schema([("id", pa.int64())]))).ensure()
>>> t.commit(t.snapshot(), [], markers={"progress": 7}), t.marker(t.snapshot(), "progress")
(1, 7)
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar
from urllib.parse import unquote

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, WriterProperties
from deltalake.exceptions import CommitFailedError, DeltaError
from deltalake.transaction import AddAction, PostCommitHookProperties, RemoveAction

from storelib.delta.checkpoints import CHECKPOINTS, checkpoint_interval
from storelib.delta.files import map_io
from storelib.delta.location import filesystem, is_local
from storelib.delta.log import LogChanges, add_actions, apply_changes, committed_by, entry_path
from storelib.delta.stats import narrowed
from storelib.delta.turn import CommitConflict, CommitTurn
from storelib.model.errors import ConcurrentWriteError

if TYPE_CHECKING:
    from storelib.delta.spec import TableSpec

__all__ = [
    "Committing",
    "CommitConflict",
    "WrittenFile",
    "remove_actions",
    "with_retries",
    "commits_here",
    "flush_to_disk",
    "COMMIT_ID",
]

log = logging.getLogger("storelib.delta.table")

T = TypeVar("T")

_WRITTEN: dict[str, int] = {}  # commits this process made, by table path

#: The ``commitInfo`` field holding the id each :meth:`Table.commit` gives its commit (:func:`committed_by`).
COMMIT_ID = "storelib.commit"

#: A table handle's commits clean up expired log entries at most this often (delta-rs would on every commit:
#: it lists the log folder, and when it deleted anything, nearly always on a busy table, loads the whole
#: table state again: a producer alone spent 53 against 57-60 us of delta-rs CPU per message sent, measured).
#: Entries then outlive the log retention by at most this long while the table takes commits, and never go sooner.
LOG_CLEANUP_EVERY_S = 5.0


def commits_here(path: str) -> int:
    """How many commits this process has made to the table at ``path`` (views look at the log when it moves).

    >>> commits_here(tmp + "/never-written")
    0
    """
    return _WRITTEN.get(path, 0)


@dataclass(frozen=True)
class WrittenFile:
    """A Parquet file written into a table's folder, not yet committed.

    ``path`` is relative to the table root; ``stats`` is Delta's per-file statistics JSON;
    ``summary`` what the writer's :class:`~storelib.delta.sink.Summarizer` made of the file, if any.

    >>> WrittenFile("part-0.parquet", 100, 3, "{}").add_action(data_change=False).data_change
    False
    """

    path: str
    size: int
    num_records: int
    stats: str
    summary: str | None = None

    def add_action(self, data_change: bool = True) -> AddAction:
        return AddAction(self.path, self.size, {}, int(time.time() * 1000), data_change, self.stats)


class Committing:
    """What a :class:`~storelib.delta.table.Table` does to commit: the commit itself, the turn writers on one
    machine take, and the bookkeeping of the files it writes, removes or gives up.

    >>> from storelib.delta.spec import TableSpec
    >>> from storelib.delta.table import Table
    >>> t = Table(tmp + "/turns", TableSpec("turns", pa.schema([("id", pa.int64())]))).ensure()
    >>> with t.commit_turn() as snapshot:
    ...     t.commit(snapshot, [], markers={"m": 1})
    1
    >>> seen = commits_here(t.path); t.touched(); commits_here(t.path) - seen
    1
    >>> t.discard([WrittenFile("part-never.parquet", 0, 0, "{}")])      # written, never to be committed
    """

    path: str
    spec: "TableSpec"
    #: Whether a commit returns only once its files and log entry are on the disk (a local table; the
    #: commitlog's under ``flush_disk_type`` SYNC_FLUSH).
    sync_commits: bool = False
    _turns: CommitTurn
    _cleaned: float | None
    _checkpoint_every: int | None = None  # the table's checkpoint interval, read at this handle's first commit
    snapshot: Callable[..., DeltaTable]

    @contextlib.contextmanager
    def commit_turn(self, snapshot: bool = True) -> Iterator[DeltaTable | None]:
        """Hold this table's turn to commit on this machine (:class:`~storelib.delta.turn.CommitTurn`) and
        yield its newest snapshot, kept warm between turns (None with ``snapshot=False``).

        >>> t = store.context.tables.topic_config
        >>> with t.commit_turn() as snapshot:
        ...     snapshot.version() == t.snapshot().version()
        True
        """
        with self._turns.hold(snapshot) as held:
            yield held

    @contextlib.contextmanager
    def try_commit_turn(self) -> Iterator[bool]:
        """Hold this table's turn if nobody does now, without waiting; yields whether it is held (never on an
        object store).

        >>> with store.context.tables.topic_config.try_commit_turn() as held:
        ...     held
        True
        """
        with self._turns.try_hold() as held:
            yield held

    @staticmethod
    @contextlib.contextmanager
    def commit_turns(tables: Sequence["Committing"]) -> Iterator[list[DeltaTable]]:
        """Hold the turns of ``tables``, taken in that order (writers taking several queue alike), and yield their
        newest snapshots: brought forward at once on an object store, where each costs round trips.

        >>> tables = [store.context.tables.topic_config, store.context.tables.subscription_group]
        >>> with Committing.commit_turns(tables) as snapshots:
        ...     [s.version() for s in snapshots] == [t.snapshot().version() for t in tables]
        True
        """
        with contextlib.ExitStack() as held:
            for table in tables:
                held.enter_context(table._turns.hold(snapshot=False))
            remote = not all(is_local(t.path) for t in tables)
            yield map_io(lambda t: t._turns.snapshot(), list(tables), remote=remote)

    def commit(
        self,
        dt: DeltaTable,
        files: Sequence[WrittenFile],
        *,
        markers: Mapping[str, int] | None = None,
        removes: Sequence[RemoveAction] = (),
        operation: str = "WRITE",
        info: Mapping[str, Any] | None = None,
        data_change: bool = True,
        rebase: bool = False,
    ) -> int:
        """Commit ``files`` (and ``markers``) as the version right after ``dt``'s, or raise :class:`CommitConflict`.

        ``rebase`` (for rewrites that change no data, e.g. compaction) lets the commit land on a
        later version when the commits in between touched none of its files (Delta's conflict check).

        Exactly one version is tried, so whatever the caller computed from ``dt`` (offsets,
        progress) is still true when the commit lands. On a conflict the files are deleted. Expired log
        entries are cleaned up by at most one commit every :data:`LOG_CLEANUP_EVERY_S`; on an object store the
        checkpoint a commit makes due, and the clean-up after it, are written beside the commit
        (:mod:`storelib.delta.checkpoints`). The files
        ``removes`` name get the time of their removal as their modification time, before the commit
        (:data:`TOMBSTONE_RETENTION`).
        """
        self._turns.spent()  # whatever the outcome, the snapshot a turn holds is no longer the table's newest
        self.stamp(a.path for a in removes)
        if self.sync_commits:  # the files first, so that no entry on the disk names a file that is not
            flush_to_disk([f"{self.path}/{f.path}" for f in files], self.path)
        actions: list[AddAction | RemoveAction] = [f.add_action(data_change) for f in files]
        actions.extend(removes)
        txns = [Transaction(app, int(v)) for app, v in (markers or {}).items()]
        props, hooks, commit_id, clean = self._commit_settings(txns, operation, info, rebase)
        try:
            dt.create_write_transaction(
                actions, mode="append", schema=dt.schema(), commit_properties=props, post_commithook_properties=hooks
            )
        except (CommitFailedError, OSError) as e:
            landed = self._refused(e, commit_id, dt.version())
            if landed is not None:
                return landed
            self.discard(files)
            raise CommitConflict(str(e)) from None
        version = self._landed(dt, dt.version() + 1, clean)
        if not rebase:  # landed exactly after dt's version: the view here may take it as it is
            changes = _own_changes(version, actions, txns)
            self._committed(dt.version(), changes.txns, lambda view_actions: apply_changes(view_actions, changes))
        return version

    def commit_rows(
        self,
        dt: DeltaTable,
        data: pa.Table,
        writer_properties: WriterProperties,
        *,
        markers: Mapping[str, int] | None = None,
        operation: str = "WRITE",
        info: Mapping[str, Any] | None = None,
        rebase: bool = False,
    ) -> int:
        """Write ``data`` into one new file and commit it (and ``markers``) as the version right after ``dt``'s, as
        :meth:`commit` does, but with delta-rs writing the file (``writer_properties``: the table's Parquet
        settings). ``dt`` is then that new version: delta-rs keeps the snapshot of the commit it wrote (its
        ``create_write_transaction`` drops it), so the table's turn needs no look before its next commit here
        (:meth:`CommitTurn.kept`). For a few rows on an object store, where that look is three requests.

        ``rebase`` lets the commit land after commits made since ``dt`` that set none of its ``markers`` (Delta's
        conflict check refuses it when one did): for appends whose every writer sets the markers their offsets
        come from (the commitlog's), which then pass another process's merges rather than be refused by them.

        >>> from storelib.delta.spec import TableSpec
        >>> from storelib.delta.sink import writer_properties
        >>> from storelib.delta.table import Table
        >>> t = Table(tmp + "/rows", TableSpec("rows", pa.schema([("id", pa.int64())]))).ensure()
        >>> with t.commit_turn() as dt:
        ...     t.commit_rows(dt, pa.table({"id": [1, 2]}), writer_properties(t.spec), markers={"m": 2}), dt.version()
        (1, 1)
        >>> t.read_arrow().num_rows, t.marker(t.snapshot(), "m")
        (2, 2)
        """
        from deltalake import write_deltalake

        self._turns.spent()
        base = dt.version()
        txns = [Transaction(app, int(v)) for app, v in (markers or {}).items()]
        props, hooks, commit_id, clean = self._commit_settings(txns, operation, info, rebase)
        try:
            write_deltalake(
                dt,
                data,
                mode="append",
                writer_properties=writer_properties,
                commit_properties=props,
                post_commithook_properties=hooks,
            )
        except (DeltaError, OSError) as e:  # the file delta-rs wrote, if any, is an orphan for the sweep
            landed = self._refused(e, commit_id, base)
            if landed is not None:
                return landed
            raise CommitConflict(str(e)) from None
        version = self._landed(dt, dt.version(), clean)
        self._turns.kept(dt)  # the newest this process knows of, rebased or not
        if version == base + 1:  # not rebased: the view takes it (past others' commits it reads their markers)
            files = lambda _: narrowed(add_actions(dt), self.spec.view_statistics)  # noqa: E731  (as dt has them)
            self._committed(base, {t.app_id: int(t.version) for t in txns}, files)
        return version

    def _commit_settings(
        self, txns: list[Transaction], operation: str, info: Mapping[str, Any] | None, rebase: bool
    ) -> tuple[CommitProperties, PostCommitHookProperties, str, bool]:
        """What every commit here gives delta-rs: its retries (none unless ``rebase``), ``txns``, its info with
        a fresh commit id, and its post-commit hooks (none on an object store: :mod:`storelib.delta.checkpoints`);
        and whether it cleans up the log (at most every :data:`LOG_CLEANUP_EVERY_S`, on local disk)."""
        commit_id = uuid.uuid4().hex
        props = CommitProperties(
            max_commit_retries=15 if rebase else 0,
            app_transactions=txns or None,
            custom_metadata={"storelib.operation": operation, **(info or {}), COMMIT_ID: commit_id},
        )
        now, remote = time.monotonic(), not is_local(self.path)
        clean = not remote and (self._cleaned is None or now - self._cleaned >= LOG_CLEANUP_EVERY_S)
        hooks = PostCommitHookProperties(
            create_checkpoint=not remote,
            cleanup_expired_logs=None if clean else False,  # None: as the table says
        )
        return props, hooks, commit_id, clean

    def _refused(self, e: Exception, commit_id: str, base: int) -> int | None:
        """After delta-rs raised ``e`` on a commit made on version ``base``: its version if it landed all the same
        (its answer lost), else None (a :class:`CommitFailedError` is a conflict; any other error, which did not
        reach the store, is raised: nothing is committed, and the files are orphans for the sweep)."""
        landed = committed_by(self.path, base, COMMIT_ID, commit_id)
        if landed is not None:
            self._flushed(landed)
            self.touched()
            log.warning(
                "%s: version %d was committed although its writer was told otherwise (%s)",
                self.spec.name,
                landed,
                str(e).splitlines()[0][:200],
            )
            return landed
        if not isinstance(e, CommitFailedError):
            raise e
        return None

    def _landed(self, dt: DeltaTable, version: int, clean: bool) -> int:
        """The bookkeeping after ``version`` landed: the log's clean-up time, the checkpoint it makes due on an
        object store, its entry on the disk, this process's count of commits."""
        if clean:
            self._cleaned = time.monotonic()
        if not is_local(self.path):
            self._checkpoint_every = self._checkpoint_every or checkpoint_interval(dt)
            if version % self._checkpoint_every == 0:
                CHECKPOINTS.due(self.path, self.snapshot, version)
        self._flushed(version)
        self.touched()
        return version

    def _flushed(self, version: int) -> None:
        """With :attr:`sync_commits`, version ``version``'s log entry and the log folder's entry of it on the disk."""
        if self.sync_commits:
            flush_to_disk([entry_path(self.path, version)], f"{self.path}/_delta_log")

    def _committed(self, base: int, txns: Mapping[str, int], files: Callable[[pa.Table], pa.Table | None]) -> None:
        """This process's commit of version ``base + 1``, which set ``txns``; ``files`` makes the add actions after
        it from those before (:class:`~storelib.delta.table.Table` applies it to its warm view, which then needs
        no read of the entry just written)."""

    def touched(self) -> None:
        """Say this process committed to the table (views of it here look at the log at their next call)."""
        _WRITTEN[self.path] = _WRITTEN.get(self.path, 0) + 1

    def stamp(self, paths: Iterable[str]) -> int:
        """Set the modification time of data files (paths relative to the table, as in its log) to now, so
        that once their tombstones have left the log, the orphan sweep still counts their age from their
        removal (:mod:`storelib.delta.orphans`); files already gone are skipped. Object stores keep no
        settable time: there nothing is stamped, and tables keep Delta's week of tombstones. Returns how
        many files were stamped.

        >>> from storelib.delta.log import add_actions
        >>> t = store.context.tables.commitlog
        >>> t.stamp(add_actions(t.snapshot()).column("path").to_pylist()), t.stamp(["part-gone.parquet"])
        (1, 0)
        """
        if not is_local(self.path):
            return 0
        base = filesystem(self.path)[1]
        stamped = 0
        for path in paths:
            try:
                os.utime(f"{base}/{unquote(path)}")
                stamped += 1
            except FileNotFoundError:
                pass
        return stamped

    def discard(self, files: Iterable[WrittenFile]) -> None:
        """Delete files that were written but will never be committed."""
        fs, base = filesystem(self.path)
        for f in files:
            try:
                fs.delete_file(f"{base}/{f.path}")
            except FileNotFoundError:
                pass


def flush_to_disk(paths: Sequence[str], folder: str) -> None:
    """``fsync`` the local files ``paths``, then ``folder`` (their names in it): on the disk, not only in the
    operating system's cache. Object-store paths are skipped (a PUT that succeeded is stored).

    >>> import os
    >>> open(os.path.join(tmp, "f"), "w").close(); flush_to_disk([os.path.join(tmp, "f")], tmp)
    """
    if not is_local(folder):
        return
    for path in [*paths, folder]:
        fd = os.open(path.removeprefix("file://"), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _own_changes(version: int, actions: Sequence[AddAction | RemoveAction], txns: Sequence[Transaction]) -> LogChanges:
    """What a commit of ``actions`` and ``txns`` as ``version`` did, as a view would read it from its entry.

    >>> changes = _own_changes(3, [AddAction("part-1.parquet", 10, {}, 7, True, "{}")], [Transaction("m", 5)])
    >>> changes.version, [a["path"] for a in changes.adds], changes.txns
    (3, ['part-1.parquet'], {'m': 5})
    """
    adds = [
        {
            "path": a.path,
            "size": a.size,
            "modificationTime": a.modification_time,
            "dataChange": a.data_change,
            "stats": a.stats,
        }
        for a in actions
        if isinstance(a, AddAction)
    ]
    removes = {a.path for a in actions if isinstance(a, RemoveAction)}
    return LogChanges(version, adds, removes, {t.app_id: int(t.version) for t in txns})


def remove_actions(files: "pa.Table | Iterable[Mapping[str, Any]]", data_change: bool = True) -> list[RemoveAction]:
    """Remove actions for files given as add actions (a table, or rows with ``path`` and ``size_bytes``).

    ``data_change=False`` for rewrites that keep the rows (compaction), True for deletions (retention).

    >>> [a.path for a in remove_actions([{"path": "part-1.parquet", "size_bytes": 10}], data_change=False)]
    ['part-1.parquet']
    """
    rows = files.select(["path", "size_bytes"]).to_pylist() if isinstance(files, pa.Table) else files
    now = int(time.time() * 1000)
    return [RemoveAction(r["path"], data_change, now, r["size_bytes"], {}) for r in rows]


def with_retries(
    table: Committing, attempts: int, step: Callable[[DeltaTable], T], *, what: str, serial: bool = False
) -> T:
    """Run ``step(snapshot)`` until its commit lands; it raises :class:`CommitConflict` to retry.

    ``serial`` runs each attempt in the table's :meth:`~Table.commit_turn`: for short steps (a
    send's append), whose writers then queue rather than conflict.

    >>> t = store.context.tables.topic_config
    >>> with_retries(t, 3, lambda snapshot: snapshot.version(), what="look", serial=True) == t.snapshot().version()
    True
    """
    for attempt in range(1, attempts + 1):
        try:
            if serial:
                with table.commit_turn() as snapshot:
                    assert snapshot is not None  # commit_turn() yields one
                    return step(snapshot)
            return step(table.snapshot())
        except CommitConflict:
            log.info("%s: commit conflict on %s, attempt %d", what, table.spec.name, attempt)
            time.sleep(min(0.5, 0.005 * 2**attempt) * random.uniform(0.5, 1.5))  # backs off, with jitter
    raise ConcurrentWriteError(table.spec.name, f"{what}: other writers won {attempts} commits in a row")
