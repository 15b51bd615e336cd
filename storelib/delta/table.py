"""One Delta table of the store: made where absent, seen through a warm view, read and committed to.

A :class:`Table` creates itself where absent and keeps a view of its newest version warm (brought
forward from the log entries since). What it does to read is :mod:`storelib.delta.reading`, to
commit :mod:`storelib.delta.commit`, to take turns :mod:`storelib.delta.turn`. Progress markers (how
far the commitlog has been sequenced, how far dispatch has come) are Delta ``txn`` actions committed
in the same commit as the data they describe, so a marker is never ahead of or behind its rows.

>>> from storelib.delta.spec import TableSpec
>>> t = Table(tmp + "/events", TableSpec("events", pa.schema([("id", pa.int64())]))).ensure()
>>> t.snapshot().version(), t.read_arrow().num_rows
(0, 0)
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Iterable, Mapping

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from storelib.delta.commit import Committing, commits_here
from storelib.delta.files import map_io
from storelib.delta.location import is_local, options_for
from storelib.delta.log import (
    LogChanges,
    TableView,
    add_actions,
    apply_changes,
    changes_since,
    tombstones,
    txn_versions,
)
from storelib.delta.reading import Reading
from storelib.delta.spec import TableSpec
from storelib.delta.stats import Prune, narrowed
from storelib.delta.turn import CommitTurn
from storelib.delta.watch import WATCHER, watching_asked
from storelib.model.errors import StoreStateError

__all__ = ["Table", "TABLE_DEFAULTS", "TOMBSTONE_RETENTION"]

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
_LOG_RETENTION = "delta.logRetentionDuration"

#: A warm view not looked at for this long catches up through delta-rs instead of from the log entries: an
#: entry written since its last look may be older than this, and the log's retention (above this) may have
#: cleaned it up. While it is looked at more often, every look reads only the entries since (a HEAD when none).
VIEW_RELOAD_S = 5.0

#: While the watcher keeps an object store's table current, a view looked at this much longer ago than the
#: table's ``remote_look_s`` is still used as it stands (a look takes a round trip, and its thread a turn).
WATCH_SLACK_S = 0.25


class Table(Reading, Committing):
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
        self._rolled_txns: dict[str, int] = {}  # txn markers of the log entries rolled over since _warm's version
        self._txns: tuple[int, dict[str, int]] | None = None  # every txn marker of one version (_markers_of)
        self._view: TableView | None = None
        self._lock = threading.Lock()
        self._memo: dict[str, tuple[int, Any]] = {}
        self._turns = CommitTurn(self.path, self.snapshot)
        self._cleaned: float | None = None  # when this handle's commits last cleaned up the log
        self._local, self._looked, self._seen = is_local(self.path), 0.0, 0

    def __repr__(self) -> str:
        return f"Table({self.spec.name!r}, {self.path!r})"

    # ---- lifecycle -------------------------------------------------------------------------
    def ensure(self, dt: DeltaTable | None = None) -> "Table":
        """Create the table where absent; check its columns where present (nullable columns a newer
        storelib appended to the spec are added to the table, older rows reading them as null). ``dt``: a
        snapshot of it read just before (none is loaded then)."""
        try:
            if dt is None:
                dt = DeltaTable(self.path, storage_options=self.storage_options)
        except TableNotFoundError:
            if is_local(self.path):
                os.makedirs(self.path.removeprefix("file://"), exist_ok=True)
            conf = {**TABLE_DEFAULTS, **({_TOMBSTONES: TOMBSTONE_RETENTION} if self._brief else {}), **self.properties}
            DeltaTable.create(
                self.path,
                self.spec.arrow,
                mode="ignore",
                name=self.spec.name,
                description=self.spec.description,
                configuration=conf,
                storage_options=self.storage_options,
            )
            return self
        have = [f.name for f in dt.schema().fields]
        added = [self.spec.arrow.field(i) for i in range(len(have), len(self.spec.columns))]
        if have == self.spec.columns[: len(have)] and added and all(f.nullable for f in added):
            from deltalake.schema import Field  # columns a newer storelib added: nullable, at the end

            dt.alter.add_columns([Field.from_arrow(f) for f in added])
            have = [f.name for f in self.snapshot().schema().fields]
        if have != self.spec.columns:
            raise StoreStateError(
                self.spec.name, f"table at {self.path} has columns {have}, expected {self.spec.columns}"
            )
        self._shorten_tombstones(dt)
        self._keep_log(dt)
        return self

    def _keep_log(self, dt: DeltaTable) -> None:
        """A table made with other log or tombstone retentions than the store's settings name now (such as
        ``time_travel_minutes``) takes the ones named: time travel then reaches that far back from here on."""
        have = dt.metadata().configuration
        wanted = {k: self.properties[k] for k in (_LOG_RETENTION, _TOMBSTONES) if k in self.properties}
        wanted = {k: v for k, v in wanted.items() if have.get(k) != v}
        if not wanted:
            return
        try:
            dt.alter.set_table_properties(wanted)
        except CommitFailedError as e:  # another process's commit won: the next open tries again
            log.info("%s: retentions left as they were for now (%s)", self.spec.name, e)

    @property
    def _brief(self) -> bool:
        """Whether this table keeps tombstones only :data:`TOMBSTONE_RETENTION` (its spec allows it, and it
        is local)."""
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
        WATCHER.forget(self)
        with self._lock:
            self._warm, self._view, self._txns = None, None, None
            self._memo.clear()
        self._turns.forget()

    def snapshot(self, version: int | None = None) -> DeltaTable:
        """The table's latest snapshot (or the given version)."""
        return DeltaTable(self.path, version=version, storage_options=self.storage_options)

    storage_options = property(
        lambda self: options_for(self.path),
        doc="What reaches the table's object store (:func:`~storelib.delta.location.options_for`); None on local disk.",
    )

    def view(self, markers: Iterable[str] = (), watch: bool | None = None) -> TableView:
        """The newest snapshot as a :class:`TableView`, kept warm between calls.

        The first call loads the table. A later call opens the next version's log entry: while there
        is none, the view stands; when there are new entries, it reads
        them and applies their file and ``txn`` actions to the view (:mod:`storelib.delta.log`), so a
        refresh costs what was committed since, not what the table holds. A view not looked at for
        :data:`VIEW_RELOAD_S` seconds (or whose entries cannot be read) catches up through delta-rs instead.
        ``markers`` names the ``txn`` app ids the caller will ask the view for. On an object store the
        :data:`~storelib.delta.watch.WATCHER` then keeps the view current, unless ``watch`` is false (None:
        unless asked within :func:`~storelib.delta.watch.unwatched`).

        >>> t = store.context.tables.commitlog
        >>> t.view(markers=["commitlog"]) is t.view()          # nothing committed in between
        True
        """
        wanted = tuple(markers)
        watch = watching_asked() if watch is None else watch
        if not self._local:
            view = self._view
            if view is not None and commits_here(self.path) == self._seen and self._current():
                # (this process's own commits are seen at once)
                if watch:
                    WATCHER.watch(self)
                if all(m in view.markers for m in wanted):
                    return view
                with self._lock:
                    filled = self._with_markers(view, wanted) if self._view is view else None
                    if filled is not None:
                        self._view = filled
                        return filled
        with self._lock:
            view = self._refresh(wanted)
        if not self._local and watch:
            WATCHER.watch(self)
        return view

    @staticmethod
    def views(tables: Iterable[tuple["Table", Iterable[str]]]) -> list[TableView]:
        """Several tables' :meth:`view` (each with the markers named beside it), brought forward at once: on an
        object store each look is a round trip. Watched as :meth:`view` would from the calling thread.

        >>> tables = store.context.tables
        >>> [v.version for v in Table.views([(tables.commitlog, ["commitlog"]), (tables.topic_config, [])])] == [
        ...     tables.commitlog.view().version, tables.topic_config.view().version]
        True
        """
        asked = [(t, tuple(m)) for t, m in tables]
        watch = watching_asked()
        remote = not all(t._local for t, _ in asked)
        return map_io(lambda tm: tm[0].view(markers=tm[1], watch=watch), asked, remote=remote)

    def refresh(self) -> None:
        """Bring the warm view forward now (what the :data:`~storelib.delta.watch.WATCHER` does for a table
        on an object store every ``remote_look_s``, so that readers find it current). The look for new log
        entries is made outside the table's lock, so this process's commits, which apply themselves to the
        view under it, never wait on a look's round trips."""
        view, now, written = self._view, time.monotonic(), commits_here(self.path)
        if view is not None and now - self._looked < VIEW_RELOAD_S:
            changes = changes_since(self.path, view.version)
            with self._lock:
                if self._view is not view:
                    return  # moved on meanwhile (a commit of this process): the next look starts from there
                rolled = self._rolled(view, changes)
                if rolled is not None:
                    self._view, self._looked, self._seen = rolled, now, written
                    return
        with self._lock:
            self._refresh(())

    def _current(self) -> bool:
        """Whether an object store's table's view may be used as it stands: looked at within
        ``remote_look_s``, or within :data:`WATCH_SLACK_S` more while the watcher keeps it current."""
        age, look = time.monotonic() - self._looked, self.spec.remote_look_s
        return age < look or (age < look + WATCH_SLACK_S and WATCHER.watching(self))

    def _refresh(self, wanted: tuple[str, ...]) -> TableView:
        """The view brought forward (under the lock): see :meth:`view`. It counts as looked at (and as
        holding this process's commits so far) only once the look succeeded."""
        now, written = time.monotonic(), commits_here(self.path)
        fresh = self._brought_forward(wanted, now)
        self._looked, self._seen = now, written
        return fresh

    def _brought_forward(self, wanted: tuple[str, ...], now: float) -> TableView:
        view = self._view
        if view is not None and now - self._looked < VIEW_RELOAD_S:
            rolled = self._roll(view)
            filled = None if rolled is None else self._with_markers(rolled, wanted)
            if filled is not None:
                self._view = filled
                return filled
        if self._warm is None:
            self._warm = self.snapshot()
        else:
            self._warm.update_incremental()
        self._rolled_txns = {}
        version = self._warm.version()
        same = view is not None and view.version == version
        names = set(wanted) | (set(view.markers) if view is not None else set())
        found = {m: view.markers[m] for m in names if view is not None and same and m in view.markers}
        found.update(self._markers_of(self._warm, [m for m in names if m not in found]))
        actions = (
            view.actions if view is not None and same else narrowed(add_actions(self._warm), self.spec.view_statistics)
        )
        self._view = TableView(version, actions, {m: None if v is None else int(v) for m, v in found.items()})
        return self._view

    def _committed(self, base: int, txns: Mapping[str, int], files: Callable[[pa.Table], pa.Table | None]) -> None:
        """This process's own commit of version ``base + 1``, which set ``txns``, applied to the warm view where it
        stands at ``base`` (``files`` makes its add actions after the commit from those before; None, or other
        columns, and the view reads the entry instead): the next :meth:`view` here holds it without reading the
        entry back (on an object store, a round trip on the committer's path)."""
        with self._lock:
            view = self._view
            if view is None or view.version != base:
                return
            actions = files(view.actions)
            if actions is None or actions.schema != view.actions.schema:
                return
            self._rolled_txns.update(txns)
            markers = {m: txns.get(m, v) for m, v in view.markers.items()}
            self._view, self._seen = TableView(base + 1, actions, markers), commits_here(self.path)

    def _with_markers(self, view: TableView, wanted: tuple[str, ...]) -> TableView | None:
        """``view`` that also knows the markers ``wanted``: as of the warm snapshot, unless a log entry rolled
        over since set one (no request); None when one is missing and there is no warm snapshot to ask."""
        missing = [m for m in wanted if m not in view.markers]
        if not missing:
            return view
        if self._warm is None:
            return None
        known = self._markers_of(self._warm, [m for m in missing if m not in self._rolled_txns])
        known.update({m: self._rolled_txns[m] for m in missing if m in self._rolled_txns})
        return TableView(
            view.version, view.actions, {**view.markers, **{m: None if v is None else int(v) for m, v in known.items()}}
        )

    def _markers_of(self, dt: DeltaTable, names: list[str]) -> dict[str, int | None]:
        """The ``txn`` markers ``names`` of snapshot ``dt`` (None where none): on an object store from one read of
        the log (:func:`~storelib.delta.log.txn_versions`), where delta-rs would read it again for each name, kept
        for that version (a version's markers never change), so a marker asked for later (another queue's, at
        its first pull) costs no request."""
        if not names:
            return {}
        if not self._local:
            version, kept = dt.version(), self._txns
            every = kept[1] if kept is not None and kept[0] == version else txn_versions(self.path, version)
            if every is not None:
                self._txns = (version, every)
                return {m: every.get(m) for m in names}
        return {m: dt.transaction_version(m) for m in names}

    def _roll(self, view: TableView) -> TableView | None:
        """``view`` brought forward through the log entries written since (itself when there are none:
        one failed open of the next entry); None when they cannot be applied."""
        return self._rolled(view, changes_since(self.path, view.version))

    def _rolled(self, view: TableView, changes: LogChanges | None) -> TableView | None:
        """``view`` with ``changes`` (read since its version) applied; None when they cannot be."""
        if changes is not None and changes.version == view.version:
            return view
        if changes is None or changes.metadata:
            return None
        actions = apply_changes(view.actions, changes)
        if actions is None:
            return None
        self._rolled_txns.update(changes.txns)
        return TableView(changes.version, actions, {m: changes.txns.get(m, v) for m, v in view.markers.items()})

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
        stands at ``dt``'s version (brought forward first, for more than two names or on an object store), else
        asked of ``dt`` one by one (~0.4 ms each on a disk: less than applying a dispatch round's files to the
        view; on an object store, a read of every log entry since the checkpoint).

        >>> commitlog = store.context.tables.commitlog
        >>> commitlog.markers_at(commitlog.snapshot(), ["commitlog"])["commitlog"] > 0
        True
        """
        names = list(names)
        view = self.view(markers=names) if len(names) > 2 or not self._local else self._view
        if view is not None and view.version == dt.version() and set(names) <= set(view.markers):
            return {n: view.marker(n) for n in names}
        return {n: self.marker(dt, n) for n in names}
