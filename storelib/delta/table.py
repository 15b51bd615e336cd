"""Delta tables through deltalake, read by Spark's Parquet reader over a pruned file list.

A :class:`Table` is one Delta table of the store. It creates itself where absent, lists the data
files of a snapshot that can hold wanted rows (partition-free data skipping on per-file min/max
statistics), reads those files with Spark, and commits files written elsewhere in one atomic Delta
commit. Progress markers (how far the commitlog has been sequenced, how far dispatch has come) are
Delta ``txn`` actions committed in the same commit as the data they describe, so a marker is never
ahead of or behind its rows.

>>> from storelib.delta.spec import TableSpec
>>> t = Table(tmp + "/events", TableSpec("events", pa.schema([("id", pa.int64())]))).ensure()
>>> t.snapshot().version(), t.read_arrow().num_rows
(0, 0)
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError, TableNotFoundError
from deltalake.transaction import AddAction, PostCommitHookProperties, RemoveAction

from storelib.delta.files import (filesystem, fragment, is_local, keyed_rows, map_io, parquet_format, remember_sizes,
                                  scan_files, small_file)
from storelib.delta.location import options_for
from storelib.delta.log import TableView, apply_changes, changes_since, committed_by, tombstones
from storelib.delta.spark_read import read_paths
from storelib.delta.spec import TableSpec
from storelib.delta.stats import Prune, clustered, holding, narrowed, only, prune_actions
from storelib.model.errors import ConcurrentWriteError, StoreStateError

if TYPE_CHECKING:
    import numpy as np
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Table", "TableView", "WrittenFile", "Prune", "CommitConflict", "add_actions", "remove_actions",
           "TABLE_DEFAULTS", "TOMBSTONE_RETENTION"]

try:
    import fcntl
except ImportError:  # not POSIX: only this process's threads take turns
    fcntl = None  # type: ignore[assignment]

log = logging.getLogger(__name__)

#: Delta properties of every table the store creates (``StoreConfig.table_properties`` overrides them): a
#: checkpoint every 20 commits, and log entries kept 10 s past the next checkpoint. Each commit's
#: delta-rs refresh lists the ``_delta_log`` folder, so a table taking tens of commits a second costs more
#: per commit the more entries it keeps (a commit and refresh with 17 markers: 10.1 ms at 172 entries, 19.9
#: ms at 1,789, i.e. 2 minutes' worth; measured). Time travel (``versionAsOf``) reaches back as far as the
#: entries are kept; a setting of its own must stay above :data:`VIEW_RELOAD_S`.
TABLE_DEFAULTS = {"delta.checkpointInterval": "20", "delta.logRetentionDuration": "interval 10 seconds"}

#: How long a local table whose files leave only through :meth:`Table.commit` (``TableSpec.brief_tombstones``)
#: keeps each ``remove`` action in its log (``delta.deletedFileRetentionDuration``; Delta's default is a
#: week). Every checkpoint rewrites the tombstones it keeps, and every snapshot load reads them: at a
#: follower's rate of merges a week's worth made a table slower the longer it ran (send 1.70x, dispatch
#: 1.80x, pull 1.89x after 3*10^4 commits, measured). A removed file stays on disk regardless:
#: :meth:`Table.commit` sets its modification time to its removal, and once its tombstone has gone it is an
#: orphan (:mod:`storelib.delta.orphans`) that is deleted only ``orphan_file_min_age_hours`` after that.
TOMBSTONE_RETENTION = "interval 1 minute"
_TOMBSTONES = "delta.deletedFileRetentionDuration"

#: A read of at most this many files is a point read: its small files are kept decoded (:func:`small_file`).
POINT_READ_FILES = 32

#: A warm view is brought forward from the log entries alone for at most this long; then delta-rs catches up
#: (whatever the entries could not say). Below the log retention, so no entry a view still needs is cleaned up.
VIEW_RELOAD_S = 5.0

_WRITTEN: dict[str, int] = {}  # commits this process made, by table path

#: The ``commitInfo`` field holding the id each :meth:`Table.commit` gives its commit (:func:`committed_by`).
COMMIT_ID = "storelib.commit"

#: The hidden file whose ``flock`` is a table's :meth:`~Table.commit_turn` on this machine.
COMMIT_LOCK = "_storelib_commit.lock"

#: A table handle's commits clean up expired log entries at most this often (delta-rs would on every commit:
#: it lists the log folder, and when it deleted anything, nearly always on a busy table, loads the whole
#: table state again: a producer alone spent 53 against 57-60 us of delta-rs CPU per message sent, measured).
#: Entries then outlive the log retention by at most this long while the table takes commits, and never go sooner.
LOG_CLEANUP_EVERY_S = 5.0


class CommitConflict(Exception):
    """Another writer committed the version we meant to write; re-read and try again."""


@dataclass(frozen=True)
class WrittenFile:
    """A Parquet file written into a table's folder, not yet committed.

    ``path`` is relative to the table root; ``stats`` is Delta's per-file statistics JSON;
    ``summary`` what the writer's :class:`~storelib.delta.writer.Summarizer` made of the file, if any.

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


class Table:
    """One Delta table of the store, at ``path``, with the columns of ``spec``.

    >>> cq = store.context.tables.consume_queue
    >>> view = cq.view()
    >>> Table.only(view.actions, {"topic": "TopicTest", "queue_id": r.queue_id}).num_rows     # files of one queue
    1
    >>> cq.read_view(view, Prune(equal={"topic": "TopicTest"}), columns=["queue_offset"]).num_rows
    1
    >>> cq.read(spark).count(), len(cq.files(cq.snapshot(), Prune(equal={"topic": "Nowhere"})))
    (1, 0)
    """

    def __init__(self, path: str, spec: TableSpec, properties: Mapping[str, str] | None = None):
        self.path = path.rstrip("/")
        self.spec = spec
        self.properties = dict(properties or {})
        self._warm: DeltaTable | None = None
        self._view: TableView | None = None
        self._lock = threading.Lock()
        self._memo: dict[str, tuple[int, Any]] = {}
        self._checked = 0.0
        self._turn = threading.RLock()
        self._depth = 0
        self._committer: DeltaTable | None = None
        self._cleaned: float | None = None  # when this handle's commits last cleaned up the log
        self._local, self._looked, self._seen = is_local(self.path), 0.0, 0

    def __repr__(self) -> str:
        return f"Table({self.spec.name!r}, {self.path!r})"

    # ---- lifecycle -------------------------------------------------------------------------
    def ensure(self) -> "Table":
        """Create the table where absent; check its columns where present (nullable columns a newer
        storelib appended to the spec are added to the table, older rows reading them as null)."""
        try:
            dt = DeltaTable(self.path, storage_options=self.storage_options)
        except TableNotFoundError:
            if is_local(self.path):
                os.makedirs(self.path.removeprefix("file://"), exist_ok=True)
            conf = {**TABLE_DEFAULTS, **({_TOMBSTONES: TOMBSTONE_RETENTION} if self._brief else {}),
                    **self.properties}
            DeltaTable.create(self.path, self.spec.arrow, mode="ignore", name=self.spec.name,
                              description=self.spec.description, configuration=conf,
                              storage_options=self.storage_options)
            return self
        have = [f.name for f in dt.schema().fields]
        added = [self.spec.arrow.field(i) for i in range(len(have), len(self.spec.columns))]
        if have == self.spec.columns[:len(have)] and added and all(f.nullable for f in added):
            from deltalake.schema import Field  # columns a newer storelib added: nullable, at the end

            dt.alter.add_columns([Field.from_arrow(f) for f in added])
            have = [f.name for f in self.snapshot().schema().fields]
        if have != self.spec.columns:
            raise StoreStateError(self.spec.name, f"table at {self.path} has columns {have}, expected {self.spec.columns}")
        self._shorten_tombstones(dt)
        return self

    @property
    def _brief(self) -> bool:
        """Whether this table keeps tombstones only :data:`TOMBSTONE_RETENTION` (its spec allows it, and it is local)."""
        return self.spec.brief_tombstones and is_local(self.path)

    def _shorten_tombstones(self, dt: DeltaTable) -> None:
        """A local table made before its tombstones were brief gets :data:`TOMBSTONE_RETENTION`, unless the
        store's settings name a retention of its own; the files its tombstones name are stamped first, so
        they too stay for the orphan window, counted from now."""
        if not self._brief or _TOMBSTONES in self.properties or _TOMBSTONES in dt.metadata().configuration:
            return
        self.stamp(tombstones(dt))
        try:
            dt.alter.set_table_properties({_TOMBSTONES: TOMBSTONE_RETENTION})
        except CommitFailedError as e:  # another process's commit won: the next open tries again
            log.info("%s: tombstone retention left as it was for now (%s)", self.spec.name, e)

    def release(self) -> None:
        """Drop the warm snapshot, view and memos (native delta-rs and Arrow objects) this handle keeps."""
        with self._lock:
            self._warm, self._view = None, None
            self._memo.clear()
        with self._turn:
            self._committer = None

    def snapshot(self, version: int | None = None) -> DeltaTable:
        """The table's latest snapshot (or the given version)."""
        return DeltaTable(self.path, version=version, storage_options=self.storage_options)

    storage_options = property(lambda self: options_for(self.path), doc="What reaches the table's object store "
                               "(:func:`~storelib.delta.location.options_for`); None on local disk.")

    def view(self, markers: Iterable[str] = ()) -> TableView:
        """The newest snapshot as a :class:`TableView`, kept warm between calls.

        The first call loads the table. A later call opens the next version's log entry: while there
        is none, the view stands; when there are new entries, it reads
        them and applies their file and ``txn`` actions to the view (:mod:`storelib.delta.log`), so a
        refresh costs what was committed since, not what the table holds. At least every
        :data:`VIEW_RELOAD_S` seconds (or when the entries cannot be read) it catches up through
        delta-rs instead. ``markers`` names the ``txn`` app ids the caller will ask the view for.

        >>> t = store.context.tables.commitlog
        >>> t.view(markers=["commitlog"]) is t.view()          # nothing committed in between
        True
        """
        wanted = tuple(markers)
        with self._lock:
            view, now = self._view, time.monotonic()
            written = _WRITTEN.get(self.path, 0)  # this process's own commits are seen at once
            if view is not None and not self._local and now - self._looked < self.spec.remote_look_s \
                    and written == self._seen and all(m in view.markers for m in wanted):
                return view
            self._looked, self._seen = now, written
            if view is not None and now - self._checked < VIEW_RELOAD_S:
                rolled = self._roll(view)
                if rolled is not None and all(m in rolled.markers for m in wanted):
                    self._view = rolled
                    return rolled
            if self._warm is None:
                self._warm = self.snapshot()
            else:
                self._warm.update_incremental()
            self._checked = now
            version = self._warm.version()
            same = view is not None and view.version == version
            names = set(wanted) | (set(view.markers) if view is not None else set())
            found = {m: view.markers[m] if same and m in view.markers else self._warm.transaction_version(m)
                     for m in names}
            actions = view.actions if same else narrowed(add_actions(self._warm), self.spec.view_statistics)
            self._view = TableView(version, actions, {m: None if v is None else int(v) for m, v in found.items()})
            return self._view

    def _roll(self, view: TableView) -> TableView | None:
        """``view`` brought forward through the log entries written since (itself when there are none:
        one failed open of the next entry); None when they cannot be applied."""
        changes = changes_since(self.path, view.version)
        if changes is not None and changes.version == view.version:
            return view
        if changes is None or changes.metadata:
            return None
        actions = apply_changes(view.actions, changes)
        if actions is None:
            return None
        return TableView(changes.version, actions, {m: changes.txns.get(m, v) for m, v in view.markers.items()})

    @contextlib.contextmanager
    def commit_turn(self, snapshot: bool = True) -> Iterator[DeltaTable | None]:
        """Hold this table's turn to commit among the threads and processes of this machine, and
        yield its newest snapshot (kept warm between turns: only the log entries since are read),
        or None with ``snapshot=False``.

        Writers on one machine then queue for the next version instead of racing for it and
        retrying (RocketMQ's broker serializes its commitlog appends the same way). The turn is an
        ``flock`` on the table's hidden ``_storelib_commit.lock`` file, released by the kernel if
        its process dies; on an object store only this process's threads queue. A thread holding
        the turn may take it again (a group commit holds it while it gathers its group and appends).
        Whoever does not take the turn (another machine) is still refused by the exactly-next-version
        commit.

        >>> t = store.context.tables.topic_config
        >>> with t.commit_turn(snapshot=False), t.commit_turn() as snapshot:
        ...     snapshot.version() == t.snapshot().version()
        True
        """
        with self._turn:
            fd = None
            self._depth += 1
            try:
                if self._depth == 1 and is_local(self.path) and fcntl is not None:
                    fd = os.open(os.path.join(self.path.removeprefix("file://"), COMMIT_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
                    fcntl.flock(fd, fcntl.LOCK_EX)
                if not snapshot:
                    yield None
                    return
                if self._committer is None:
                    self._committer = self.snapshot()
                else:
                    self._committer.update_incremental()
                yield self._committer
            except BaseException:
                self._committer = None  # whatever failed, the next turn starts from a fresh load
                raise
            finally:
                self._depth -= 1
                if fd is not None:
                    os.close(fd)

    def memo(self, name: str, build: Callable[[TableView], Any], view: TableView | None = None) -> Any:
        """``build(view)`` over the newest snapshot (or ``view``), computed once per table version (a warm cache).

        For small tables read on every request (topics, groups, subscriptions), as a broker keeps
        them in memory: a request then costs one look at the log, not a read of the table.
        """
        view = view or self.view()
        cached = self._memo.get(name)
        if cached is not None and cached[0] == view.version:
            return cached[1]
        value = build(view)
        self._memo[name] = (view.version, value)
        return value

    def read_view(self, view: TableView, prune: Prune | None = None, **kwargs: Any) -> pa.Table:
        """:meth:`read_arrow` over the files of ``view`` that may hold rows matching ``prune``."""
        return self.read_arrow(paths=self.paths(self.prune(view.actions, prune)), **kwargs)

    # ---- progress markers --------------------------------------------------------------------
    @staticmethod
    def marker(dt: DeltaTable, app_id: str, default: int = 0) -> int:
        """The latest ``txn`` version committed under ``app_id``, or ``default``."""
        v = dt.transaction_version(app_id)
        return default if v is None else int(v)

    def markers_at(self, dt: DeltaTable, names: Iterable[str]) -> dict[str, int]:
        """The ``txn`` markers ``names`` of snapshot ``dt`` (0 where none): from the warm :meth:`view` when it
        stands at ``dt``'s version (brought forward first, for more than two names), else asked of ``dt``
        one by one (~0.4 ms each: less than applying a dispatch round's files to the view).

        >>> store.context.tables.commitlog.markers_at(store.context.tables.commitlog.snapshot(), ["commitlog"])["commitlog"] > 0
        True
        """
        names = list(names)
        view = self.view(markers=names) if len(names) > 2 else self._view  # one or two: the view as it stands
        if view is not None and view.version == dt.version() and set(names) <= set(view.markers):
            return {n: view.marker(n) for n in names}
        return {n: self.marker(dt, n) for n in names}

    # ---- reading -----------------------------------------------------------------------------
    def files(self, dt: DeltaTable, prune: Prune | None = None) -> list[str]:
        """Absolute paths of the snapshot's data files that may hold rows matching ``prune``.

        A file is skipped only when its statistics prove it holds no such row; files without
        statistics are always kept.
        """
        return self.paths(self.actions(dt, prune))

    @staticmethod
    def actions(dt: DeltaTable, prune: Prune | None = None) -> pa.Table:
        """The add actions (with flattened statistics) of the files :meth:`files` keeps."""
        return Table.prune(add_actions(dt), prune)

    # what the files' statistics say they may hold (storelib.delta.stats)
    prune = staticmethod(prune_actions)
    clustered = staticmethod(clustered)
    only = staticmethod(only)
    holding = staticmethod(holding)

    def files_holding(self, dt: DeltaTable, col: str, values: pa.Array) -> list[str]:
        """Absolute paths of the files whose ``[min, max]`` of ``col`` holds at least one of ``values``."""
        return self.paths(self.holding(add_actions(dt), col, values))

    def paths(self, actions: pa.Table) -> list[str]:
        paths = [self.path_of(p) for p in actions.column("path").to_pylist()]
        if not is_local(self.path) and "size_bytes" in actions.column_names:  # opened later without a HEAD
            remember_sizes(paths, actions.column("size_bytes").to_pylist())
        return paths

    def path_of(self, action_path: str) -> str:
        """Absolute path of a file named in an add action (there a URI-encoded relative path)."""
        return f"{self.path}/{unquote(action_path)}"

    def read(self, spark: "SparkSession", dt: DeltaTable | None = None, prune: Prune | None = None) -> "DataFrame":
        """The rows of the snapshot's files that may match ``prune``, as a Spark DataFrame; callers add their
        exact predicate (Spark pushes it down to Parquet row groups too)."""
        return self.read_files(spark, self.actions(dt or self.snapshot(), prune))

    def read_files(self, spark: "SparkSession", actions: pa.Table) -> "DataFrame":
        """The rows of the files named by ``actions`` (add actions, e.g. from :meth:`actions`), as a Spark DataFrame."""
        return read_paths(spark, self.spec.arrow, self.paths(actions), actions.column("size_bytes").to_pylist())

    def read_arrow(self, dt: DeltaTable | None = None, prune: Prune | None = None,
                   columns: Sequence[str] | None = None, filter: pc.Expression | None = None,
                   paths: Sequence[str] | None = None) -> pa.Table:
        """The same rows read on this process with pyarrow: for point reads that need no Spark job.

        ``paths`` (from :meth:`files` or :meth:`files_holding`) replaces the snapshot's pruned list.
        Data files never change once written, so their Parquet footers are parsed once per process
        and kept: a filter then skips row groups without opening the file again.
        """
        import pyarrow.dataset as ds

        if paths is None:
            paths = self.files(dt or self.snapshot(), prune)
        wanted = list(columns or self.spec.columns)
        if not paths:
            return self.spec.arrow.empty_table().select(wanted)
        small, large = self._decoded(paths)
        parts = []
        if small:
            rows = small[0] if len(small) == 1 else pa.concat_tables(small)
            parts.append((rows if filter is None else rows.filter(filter)).select(wanted))
        if large:
            dataset = ds.FileSystemDataset([fragment(p) for p in large], self.spec.arrow, parquet_format(),
                                           filesystem(self.path)[0])
            parts.append(dataset.to_table(columns=wanted, filter=filter))
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def read_keyed(self, paths: Sequence[str], column: str, *, values: "np.ndarray | None" = None,
                   between: tuple[int, int] | None = None, columns: Sequence[str] | None = None) -> pa.Table:
        """:meth:`read_arrow` of the rows whose integer ``column`` is among ``values`` (sorted) or in ``[lo, hi)``
        (``between``): small files searched decoded (:func:`~storelib.delta.files.keyed_rows`), the rest scanned.

        >>> t = store.context.tables.commitlog
        >>> t.read_keyed(t.files(t.snapshot()), "physical_offset", between=(0, 1), columns=["queue_offset"]).num_rows
        1
        """
        wanted = list(columns or self.spec.columns)
        small, large = self._decoded(paths, wanted if column in wanted else [*wanted, column])
        parts = [keyed_rows(rows, column, values, between).select(wanted) for rows in small]
        if large:
            key = pc.field(column)
            test = key.isin(pa.array(values, pa.int64())) if values is not None else \
                (key >= between[0]) & (key < between[1])
            parts.append(self.read_arrow(paths=large, columns=wanted, filter=test))
        if not parts:
            return self.spec.arrow.empty_table().select(wanted)
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def _decoded(self, paths: Sequence[str], columns: Sequence[str] | None = None) -> tuple[list[pa.Table], list[str]]:
        """A point read's small files decoded (from this process's cache), in ``columns`` (None: all), and
        the rest's paths. A read that needs some columns decodes and keeps only those (a pull's consume
        queue units: 4 of 7; its messages: 17 of 21, not the copies of their properties nor their cluster rank)."""
        schema, keep = self.spec.arrow, set(columns or ())
        if keep and len(keep) < len(schema):  # in the table's order, as in its files
            schema = pa.schema([f for f in schema if f.name in keep])
        small, large = [], []
        decoded = map_io(lambda p: small_file(p, schema), paths) if len(paths) <= POINT_READ_FILES else [None] * len(paths)
        for path, rows in zip(paths, decoded):
            if rows is None:
                large.append(path)
            else:
                small.append(rows)
        return small, large

    def scan(self, paths: Sequence[str], filter: pc.Expression | None = None,
             batch_size: int = 64 * 1024) -> Iterator[pa.RecordBatch]:
        """The rows of data files (full paths, from :meth:`paths`) that pass ``filter``, streamed in Arrow
        batches with pyarrow on this process, on one thread (an executor task's share of a read); row
        groups whose statistics rule the filter out are not decoded.

        >>> t = store.context.tables.commitlog
        >>> [b.num_rows for b in t.scan(t.files(t.snapshot()), pc.field("topic") == "TopicTest")]
        [1]
        """
        return scan_files(paths, self.spec.arrow, filter, batch_size)

    def read_row_groups(self, path: str, row_groups: Sequence[int], columns: Sequence[str] | None = None,
                        filter: pc.Expression | None = None) -> pa.Table:
        """Rows of some row groups of one data file (a full path, from :meth:`paths`), with pyarrow.

        >>> t = store.context.tables.commitlog
        >>> t.read_row_groups(t.files(t.snapshot())[0], [0], columns=["physical_offset"]).num_rows
        1
        """
        groups = fragment(path).subset(row_group_ids=list(row_groups))
        return groups.to_table(schema=self.spec.arrow, columns=list(columns) if columns else None, filter=filter)

    # ---- writing -----------------------------------------------------------------------------
    def commit(self, dt: DeltaTable, files: Sequence[WrittenFile], *, markers: Mapping[str, int] | None = None,
               removes: Sequence[RemoveAction] = (), operation: str = "WRITE",
               info: Mapping[str, Any] | None = None, data_change: bool = True, rebase: bool = False) -> int:
        """Commit ``files`` (and ``markers``) as the version right after ``dt``'s, or raise :class:`CommitConflict`.

        ``rebase`` (for rewrites that change no data, e.g. compaction) lets the commit land on a
        later version when the commits in between touched none of its files (Delta's conflict check).

        Exactly one version is tried, so whatever the caller computed from ``dt`` (offsets,
        progress) is still true when the commit lands. On a conflict the files are deleted. Expired log
        entries are cleaned up by at most one commit every :data:`LOG_CLEANUP_EVERY_S`. The files
        ``removes`` name get the time of their removal as their modification time, before the commit
        (:data:`TOMBSTONE_RETENTION`).
        """
        self.stamp(a.path for a in removes)
        actions: list[AddAction | RemoveAction] = [f.add_action(data_change) for f in files]
        actions.extend(removes)
        txns = [Transaction(app, int(v)) for app, v in (markers or {}).items()]
        commit_id = uuid.uuid4().hex
        props = CommitProperties(max_commit_retries=15 if rebase else 0, app_transactions=txns or None,
                                 custom_metadata={"storelib.operation": operation, **(info or {}),
                                                  COMMIT_ID: commit_id})
        now = time.monotonic()
        clean = self._cleaned is None or now - self._cleaned >= LOG_CLEANUP_EVERY_S
        hooks = PostCommitHookProperties(cleanup_expired_logs=None if clean else False)  # None: as the table says
        try:
            dt.create_write_transaction(actions, mode="append", schema=dt.schema(), commit_properties=props,
                                        post_commithook_properties=hooks)
        except (CommitFailedError, OSError) as e:
            landed = committed_by(self.path, dt.version(), COMMIT_ID, commit_id)  # its answer lost, it landed
            if landed is not None:
                self.touched()
                log.warning("%s: version %d was committed although its writer was told otherwise (%s)",
                            self.spec.name, landed, str(e).splitlines()[0][:200])
                return landed
            if isinstance(e, CommitFailedError):
                self.discard(files)
                raise CommitConflict(str(e)) from None
            raise  # it did not reach the store: nothing is committed (the files are orphans for the sweep)
        if clean:
            self._cleaned = now
        self.touched()
        return dt.version() + 1

    def touched(self) -> None:
        """Say this process committed to the table (views of it here look at the log at their next call)."""
        _WRITTEN[self.path] = _WRITTEN.get(self.path, 0) + 1

    def stamp(self, paths: Iterable[str]) -> int:
        """Set the modification time of data files (paths relative to the table, as in its log) to now, so
        that once their tombstones have left the log, the orphan sweep still counts their age from their
        removal (:mod:`storelib.delta.orphans`); files already gone are skipped. Object stores keep no
        settable time: there nothing is stamped, and tables keep Delta's week of tombstones. Returns how
        many files were stamped.

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


def remove_actions(files: "pa.Table | Iterable[Mapping[str, Any]]", data_change: bool = True) -> list[RemoveAction]:
    """Remove actions for files given as add actions (a table, or rows with ``path`` and ``size_bytes``).

    ``data_change=False`` for rewrites that keep the rows (compaction), True for deletions (retention).

    >>> [a.path for a in remove_actions([{"path": "part-1.parquet", "size_bytes": 10}], data_change=False)]
    ['part-1.parquet']
    """
    rows = files.select(["path", "size_bytes"]).to_pylist() if isinstance(files, pa.Table) else files
    now = int(time.time() * 1000)
    return [RemoveAction(r["path"], data_change, now, r["size_bytes"], {}) for r in rows]


def add_actions(dt: DeltaTable) -> pa.Table:
    """The snapshot's add actions with flattened statistics (``min.<col>``, ``max.<col>``).

    >>> add_actions(store.context.tables.commitlog.snapshot()).column("num_records").to_pylist()
    [1]
    """
    return pa.table(dt.get_add_actions(flatten=True))


def with_retries(table: Table, attempts: int, step, *, what: str, serial: bool = False):
    """Run ``step(snapshot)`` until its commit lands; it raises :class:`CommitConflict` to retry.

    ``serial`` runs each attempt in the table's :meth:`~Table.commit_turn`: for short steps (a
    send's append), whose writers then queue rather than conflict.
    """
    for attempt in range(1, attempts + 1):
        try:
            if serial:
                with table.commit_turn() as snapshot:
                    return step(snapshot)
            return step(table.snapshot())
        except CommitConflict:
            log.info("%s: commit conflict on %s, attempt %d", what, table.spec.name, attempt)
            time.sleep(min(0.5, 0.005 * 2 ** attempt) * random.uniform(0.5, 1.5))  # backs off, with jitter
    raise ConcurrentWriteError(table.spec.name, f"{what}: other writers won {attempts} commits in a row")
