"""Dispatch: RocketMQ's ReputMessageService, as a Spark job over the new part of the commitlog, or, for
an increment of at most ``dispatch_local_max_bytes``, the same work in this process with pyarrow alone.

Each target table (``consume_queue``, ``consume_queue_ext`` and ``index``) keeps its
own ``reput`` marker in its Delta log: the commitlog offset up to which it holds rows. A run reads
the commitlog's sequenced end from one snapshot; one Spark job reads the commitlog files of
``[lowest marker, end)`` once and writes every target's rows from its own marker on (see
:mod:`storelib.dispatch.request`); then each target commits its files together with its advanced
marker, ext first, then consume queue, then index (putMessagePositionInfoWrapper writes the ext
unit before the unit pointing at it). A run that dies anywhere leaves each target either fully at
its old marker or fully at the new one, so the next run redoes exactly what is missing: nothing
twice, nothing skipped.

With the ext queue on (``enable_consume_queue_ext``), a message of a topic with live SQL92
subscriptions gets a ``consume_queue_ext`` row holding its real tag code, store time and filter
bitmap, and its consume queue row's tag code is the decorated address of it:
CommitLogDispatcherCalcBitMap evaluates every live SQL92 subscription of the message's topic (on the
executors, vectorized over each batch the job reads: see :mod:`storelib.dispatch.calc_bitmap`) and
sets the subscription's Bloom bits where it returns TRUE. Each ext row records the registry version
its bitmap was computed with. Other messages have no ext row (there is no bitmap to keep), and their
consume queue rows hold their real tag codes, as a stock broker's do. A one-off run moves the ext
marker with the others; a follower's round only when it adds ext rows, or once a second: up to the
consume queue's marker, no unit points past the ext marker.

A follower (``Dispatcher.run(follow=True)``, ``storelib dispatch --follow``) runs dispatch as messages
arrive, round after round, until it is told to stop; each round is one run like any other, so a
follower killed anywhere is restarted with nothing lost or dispatched twice.

>>> from storelib import Message
>>> sent = store.send(Message("TopicTest", keys=["k1", "k2"]))
>>> result = store.dispatch()
>>> result.consume_queue_rows, result.index_rows, result.to_offset == store.max_offset()   # index: k1, k2, UNIQ_KEY
(1, 3, True)
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Protocol

import pyarrow as pa

from storelib.context import StoreContext
from storelib.delta.compaction import compact_here
from storelib.delta.table import CommitConflict, Prune, Table, WrittenFile
from storelib.delta.writer import Target, write_items, write_items_here
from storelib.dispatch.calc_bitmap import FilterBitmaps
from storelib.dispatch.request import CommitlogFiles, DispatchRequests
from storelib.filter.summary import compact_summaries, record_summaries, summarizer_for
from storelib.model.config import StoreConfig
from storelib.model.errors import ConcurrentWriteError, StoreCorruptedError, StoreError
from storelib.model.message import SysFlag
from storelib.storage.commitlog import COMMITLOG_MARKER, is_clustered
from storelib.storage.schema import CLUSTERED_ROW_GROUP_ROWS
from storelib.storage.index_file import hash_range_shift

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from storelib.filter.registry import Subscription, SubscriptionRegistry

__all__ = ["Dispatcher", "DispatchResult", "UnitFeed", "queued", "dispatch_targets", "ahead_of_commitlog", "REPUT_MARKER"]

log = logging.getLogger(__name__)

REPUT_MARKER = "reput"


@dataclass
class DispatchResult:
    """What one dispatch run did: the commitlog range it covered, the rows and version each table got,
    and the seconds of the one job that read and wrote (``scan``) and of each table's commit.

    >>> result = store.dispatch()                              # nothing new since the seed's dispatch
    >>> result.from_offset == result.to_offset == store.max_offset(), result.consume_queue_rows, result.index_rows
    (True, 0, 0)
    """

    from_offset: int
    to_offset: int
    rows: dict[str, int] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def consume_queue_rows(self) -> int:
        return self.rows.get("consume_queue", 0)

    @property
    def index_rows(self) -> int:
        return self.rows.get("index", 0)

    def then(self, later: "DispatchResult | None") -> "DispatchResult":
        """This run followed by ``later`` (a follower's rounds, added up), ``self`` updated.

        >>> DispatchResult(0, 5, {"index": 2}).then(DispatchResult(5, 9, {"index": 1})).rows
        {'index': 3}
        """
        if later is not None:
            self.to_offset = later.to_offset
            for name, n in later.rows.items():
                self.rows[name] = self.rows.get(name, 0) + n
            self.versions.update(later.versions)
        return self


class UnitFeed(Protocol):
    """What a dispatcher hands each run's consume queue units to, when it dispatched in this process
    (:attr:`Dispatcher.feed`; a follower serving tail pulls: :class:`~storelib.local.tail.TailServer`).

    >>> class Heard:
    ...     def expect(self, paths): print("committing", len(paths), "file")
    ...     def publish(self, units): print("committed", units.num_rows, "unit")
    >>> from storelib import Message
    >>> _ = store.send(Message("TopicTest", queue_id=0))
    >>> dispatcher = store.dispatcher(); dispatcher.feed = Heard()
    >>> _ = dispatcher.run()
    committing 1 file
    committed 1 unit
    """

    def expect(self, paths: list[str]) -> None:
        """Just before the consume queue commits: the files (paths relative to the table) whose units
        :meth:`publish` will bring, unless the commit fails."""

    def publish(self, units: pa.Table) -> None:
        """The moment the consume queue has committed, before the run's later tables: the units."""


def queued(rows: "DataFrame") -> "DataFrame":
    """Messages that get a consume queue row: normal and committed ones (not prepared, not rolled back).

    >>> queued(store.messages("TopicTest")).count()       # not prepared, not rolled back
    1
    """
    from pyspark.sql import functions as F

    kind = F.col("sysflag").bitwiseAND(F.lit(SysFlag.TRANSACTION_ROLLBACK_TYPE))
    return rows.where(kind.isin(*SysFlag.QUEUED_TRANSACTION_TYPES))


def queued_expression():
    """:func:`queued` as a pyarrow expression over ``sysflag``, for rows read with pyarrow.

    >>> import pyarrow as pa
    >>> pa.table({"sysflag": [0, 4, 8, 12]}).filter(queued_expression()).column(0).to_pylist()
    [0, 8]
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = pc.bit_wise_and(pc.field("sysflag"), pa.scalar(SysFlag.TRANSACTION_ROLLBACK_TYPE, pa.int32()))
    return kind.isin(list(SysFlag.QUEUED_TRANSACTION_TYPES))


def ahead_of_commitlog(markers: Mapping[str, int], end: int) -> list[str]:
    """The dispatched tables whose ``reput`` marker is past the commitlog's end ``end``: the commitlog lost
    commits they point into, and sends would hand out those offsets and message ids again.

    >>> ahead_of_commitlog({"consume_queue": 900, "index": 400}, 500)
    ["consume_queue is dispatched to commitlog offset 900, past the commitlog's end 500"]
    """
    return [f"{name} is dispatched to commitlog offset {marker}, past the commitlog's end {end}"
            for name, marker in markers.items() if marker > end]


def dispatch_targets(ctx: StoreContext) -> dict[str, Table]:
    """The tables dispatch writes, in commit order: the ext rows land before the consume queue rows
    that point at them (putMessagePositionInfoWrapper), the index last (when ``message_index_enable``).

    >>> list(dispatch_targets(store.context))
    ['consume_queue_ext', 'consume_queue', 'index']
    """
    targets = {"consume_queue_ext": ctx.tables.consume_queue_ext, "consume_queue": ctx.tables.consume_queue}
    if ctx.config.message_index_enable:
        targets["index"] = ctx.tables.index
    return targets


#: A follower records the summaries of the ext files it committed at most this often (one commit of the
#: summary table a second instead of one a round); a filtered read reads files not yet summed up.
SUMMARY_EVERY_S = 1.0
#: ... and builds the index at most this often, on a thread of its own (one commit of it a second, of all
#: that arrived since), and moves a lagging ext marker: a message's keys are found at most this long after
#: its queue unit.
INDEX_EVERY_S = 1.0
#: A follower starts a round at most this often (ms) while messages keep coming: a round's commits, and the
#: pulls it wakes in every consumer, cost per round, so back-to-back rounds of a few hundred messages cost
#: more CPU than they save in wait on a busy machine (see the README's online figures).
ROUND_MS = 120


class Dispatcher:
    """Builds consume queue, ext and index rows for what is new in the commitlog.

    >>> from storelib import Message
    >>> _ = store.send(Message("TopicTest", tags="TagB"))
    >>> dispatcher = Dispatcher.of(store.context)
    >>> dispatcher.run().rows                                # no SQL92 group on TopicTest: no bitmap, no ext unit
    {'consume_queue_ext': 0, 'consume_queue': 1, 'index': 1}
    >>> len(set(dispatcher.progress().values()))             # every table at the commitlog's end
    1
    """

    def __init__(self, spark: "SparkSession | Callable[[], SparkSession]", commitlog: Table, targets: dict[str, Table], config: StoreConfig,
                 fault: Callable[[str], None] | None = None, registry: "SubscriptionRegistry | None" = None,
                 summaries: Table | None = None, notify: Callable[[], None] | None = None):
        self._spark = spark
        self._notify = notify
        self.commitlog = commitlog
        self.targets = targets
        self.config = config
        self._fault = fault
        self.registry = registry
        self.summaries = summaries
        self._filters: tuple[int, list["Subscription"]] | None = None
        self._done_to: int | None = None  # every target dispatched to this commitlog offset by this dispatcher
        self._queued_to: int | None = None  # every target dispatched this far, but perhaps the index and the ext marker
        self._full_every_s, self._full_at = 0.0, 0.0  # a round of every target (index, ext marker) at most this often
        self._unsummarized: list[WrittenFile] = []  # committed ext files whose summaries are not recorded yet
        self._summary_every_s, self._summarized_at = 0.0, 0.0
        #: Handed each run's consume queue units when it dispatched in this process (a follower serving
        #: tail pulls hands them to its server).
        self.feed: UnitFeed | None = None
        self._kept: list[pa.RecordBatch] | None = None  # the units the last write made, when kept
        self._apart: tuple[str, ...] = ()  # targets a thread of their own dispatches (a follower's index)

    @property
    def spark(self) -> "SparkSession":
        """The session the dispatch job runs in (started by the first dispatch that needs one)."""
        if callable(self._spark):
            self._spark = self._spark()
        return self._spark

    @classmethod
    def of(cls, ctx: StoreContext, fault: Callable[[str], None] | None = None) -> "Dispatcher":
        """The dispatcher of a store's context. ``fault`` (a test seam) is called with the name of
        each step it reaches (``<table>.written``, ``<table>.summarized``, ``<table>.committed``)."""
        return cls(lambda: ctx.spark, ctx.tables.commitlog, dispatch_targets(ctx), ctx.config, fault=fault,
                   registry=ctx.registry, summaries=ctx.tables.ext_summary, notify=ctx.arrivals.notify)

    def _step(self, name: str) -> None:
        if self._fault is not None:
            self._fault(name)

    def progress(self) -> dict[str, int]:
        """Each target's ``reput`` marker, and the commitlog's sequenced end as ``commitlog``."""
        out = {name: Table.marker(t.snapshot(), REPUT_MARKER) for name, t in self.targets.items()}
        out["commitlog"] = Table.marker(self.commitlog.snapshot(), COMMITLOG_MARKER)
        return out

    def run(self, follow: bool = False, *, stop: threading.Event | None = None, interval_ms: int = 100,
            on_round: Callable[[DispatchResult], None] | None = None, compact_every_ms: int = 10_000,
            round_ms: int = ROUND_MS) -> DispatchResult:
        """Dispatch everything sequenced so far; return what was done. Pulls held in this process are woken.

        One Spark job (or, for a small increment, this process) reads the commitlog range once and
        writes every target's files; the targets then commit one by one, in order. When another
        dispatcher took a target's next version, the targets not yet committed are redone from fresh
        snapshots. With ``follow``, it goes on round after round until ``stop`` is set: a round that
        found nothing new waits ``interval_ms``; ``on_round`` hears of each round that dispatched
        something; the result then covers every round. A round starts at most once every ``round_ms``
        (0: as soon as the last one ends; see :data:`ROUND_MS`). A thread of the follower builds the
        index, once every :data:`INDEX_EVERY_S`, so a round never waits for it; stopping brings it up to
        the rest. Every ``compact_every_ms`` (0: never) another thread merges the small files the
        tables gained (:meth:`compact_fresh`), so reads and commits stay as fast as the tables grow.

        >>> from storelib import Message
        >>> stop = threading.Event()
        >>> def heard(r):
        ...     print("dispatched", r.consume_queue_rows); stop.set()
        >>> _ = store.send(Message("TopicTest"))
        >>> Dispatcher.of(store.context).run(follow=True, stop=stop, on_round=heard).consume_queue_rows
        dispatched 1
        1
        """
        if not follow:
            try:
                return self._run_once()
            finally:
                if self._notify is not None:
                    self._notify()
        stop = stop or threading.Event()
        total: DispatchResult | None = None
        compactor = None
        if compact_every_ms:  # in the background: a round never waits for a merge, only for its commit turn
            compactor = threading.Thread(target=self._compact_until, args=(stop, compact_every_ms / 1000),
                                         name="storelib-compact-fresh", daemon=True)
            compactor.start()
        # a follower records summaries, and moves the ext marker alone, once a second rather than every round
        self._summary_every_s, self._full_every_s = SUMMARY_EVERY_S, INDEX_EVERY_S
        indexing = self._index_apart(stop)
        try:
            while not stop.is_set():
                began = time.monotonic()
                r = self.run()
                total = (total or DispatchResult(r.from_offset, r.to_offset)).then(r)
                if r.to_offset > r.from_offset:
                    if on_round is not None:
                        on_round(r)
                    stop.wait(max(0.0, round_ms / 1000 - (time.monotonic() - began)))
                else:
                    self._summarize(force=True)  # idle: nothing to wait for
                    stop.wait(interval_ms / 1000)
        except BaseException:
            stop.set()  # the follower's other threads end with it
            raise
        self._summary_every_s = self._full_every_s = 0.0
        self._summarize(force=True)
        if compactor is not None:
            compactor.join()
        total = self._index_joined(indexing, total)
        last = self.run()  # the index brought up to where the rest is
        return (total or DispatchResult(last.from_offset, last.from_offset)).then(last)

    def _index_apart(self, stop: threading.Event) -> tuple[threading.Thread, list] | None:
        """Start a follower's index thread: a dispatcher of the index alone, a run every :data:`INDEX_EVERY_S`
        until ``stop``; its rounds' results and its failure (which stops the follower) go into the list."""
        if "index" not in self.targets:
            return None
        indexer = Dispatcher(self._spark, self.commitlog, {"index": self.targets["index"]}, self.config, fault=self._fault)
        heard: list = []

        def index_until() -> None:
            while not stop.wait(INDEX_EVERY_S):
                try:
                    heard.append(indexer.run())
                except BaseException as e:  # the follower stops, and raises it
                    heard.append(e)
                    stop.set()
                    return

        self._apart = ("index",)
        thread = threading.Thread(target=index_until, name="storelib-index", daemon=True)
        thread.start()
        return thread, heard

    def _index_joined(self, indexing: tuple[threading.Thread, list] | None,
                      total: DispatchResult | None) -> DispatchResult | None:
        """Wait for the index thread :meth:`_index_apart` started; ``total`` with the index rows it added.
        Its failure is raised here."""
        if indexing is None:
            return total
        thread, heard = indexing
        thread.join()
        self._apart, self._done_to = (), None  # done so far meant: but the index
        for r in heard:
            if isinstance(r, BaseException):
                raise r
            if total is not None:
                total.rows["index"] = total.rows.get("index", 0) + r.index_rows
        return total

    def _compact_until(self, stop: threading.Event, every_s: float) -> None:
        while not stop.wait(every_s):
            try:
                self.compact_fresh()
            except StoreError as e:  # the next time tries again; dispatching goes on
                log.warning("dispatch: compacting fresh files failed: %s", e)

    def compact_fresh(self) -> dict[str, tuple[int, int]]:
        """Merge the small files of the commitlog (in offset order, small row groups, clustered files
        left alone), the ext table (its new files summed up and their summaries recorded first), the
        consume queue and the index on this process (:func:`compact_here`), then the ext summaries
        (those of ext files merged away left out: :func:`compact_summaries`); return ``{table: (files
        removed, files added)}``.

        >>> from storelib import Message
        >>> _ = [store.send(Message("TopicTest", queue_id=0)) for _ in range(2)]
        >>> _ = store.dispatch(); _ = store.dispatch()
        >>> store.dispatcher().compact_fresh()["commitlog"][1]
        1
        """
        out = {"commitlog": compact_here(self.commitlog, order_by="physical_offset", leave=is_clustered,
                                         row_group_rows=CLUSTERED_ROW_GROUP_ROWS)}
        for name in self.targets:
            extra = {}
            if name == "consume_queue_ext" and self.summaries is not None:
                subs = self.registry.all() if self.registry is not None else []
                extra = {"summarize": summarizer_for(subs), "before_commit": lambda files: record_summaries(
                    self.summaries, files, self.config.max_commit_attempts)}
            out[name] = compact_here(self.targets[name], **extra)
        if "consume_queue_ext" in self.targets and self.summaries is not None:  # the merged files' summaries go
            live = self.targets["consume_queue_ext"].view().actions.column("path").to_pylist()
            out["consume_queue_ext_summary"] = compact_summaries(self.summaries, live, attempts=self.config.max_commit_attempts)
        return out

    def _run_once(self) -> DispatchResult:
        known = self.commitlog.view(markers=[COMMITLOG_MARKER]).marker(COMMITLOG_MARKER)
        full_due = time.monotonic() - self._full_at >= self._full_every_s
        if known == self._done_to or (known == self._queued_to and not full_due):
            return DispatchResult(known, known)  # nothing new for this dispatcher: no turn, no snapshot
        result: DispatchResult | None = None
        self._filters = None
        targets = [name for name in self.targets if name not in self._apart]
        pending = [name for name in targets if name != "index" or full_due]
        lazy = self._full_every_s > 0 and not full_due  # a follower's round between two full ones
        everything = len(pending) == len(targets) and not lazy
        for attempt in range(1, self.config.max_commit_attempts + 1):
            with contextlib.ExitStack() as turns:  # the targets' turns, in one order: local dispatchers queue
                snapshots = {name: turns.enter_context(self.targets[name].commit_turn()) for name in pending}
                commitlog = self.commitlog.view(markers=[COMMITLOG_MARKER])  # read once the turns are held
                if result is None:  # every attempt dispatches up to the first one's end
                    end = commitlog.marker(COMMITLOG_MARKER)
                    result = DispatchResult(end, end)
                pending = self._attempt(pending, snapshots, commitlog.actions, end, result, lazy)
            if not pending:
                self._queued_to = result.to_offset
                if everything:
                    self._done_to, self._full_at = result.to_offset, time.monotonic()
                return result
            log.info("dispatch: commit conflict on %s, attempt %d", pending[0], attempt)
            time.sleep(min(0.5, 0.01 * attempt))
        raise ConcurrentWriteError(pending[0], f"dispatch: other writers won {self.config.max_commit_attempts} "
                                               "commits in a row")

    def _attempt(self, pending: list[str], snapshots: dict, commitlog: "pa.Table", end: int,
                 result: DispatchResult, lazy: bool = False) -> list[str]:
        """One try at every pending target from ``snapshots``, up to commitlog offset ``end``; the targets still to do.
        With ``lazy``, an ext commit that would move the marker alone is left for a later round."""
        starts = {name: self.targets[name].markers_at(snapshots[name], [REPUT_MARKER])[REPUT_MARKER] for name in pending}
        marked = dict(starts)  # where each target is: one behind ``end`` commits, with files or its marker alone
        ext_at = starts.get("consume_queue_ext")
        if ext_at is not None and "consume_queue" in starts and ext_at < starts["consume_queue"]:
            # behind the consume queue only by rounds that had no ext unit to write (the ext table commits first
            # otherwise): no unit up to the consume queue's marker points at one, so there is nothing to redo
            starts["consume_queue_ext"] = starts["consume_queue"]
        ahead = ahead_of_commitlog(starts, end)  # past this view's end: another dispatcher went on, or commits were lost
        if ahead and ahead_of_commitlog(starts, Table.marker(self.commitlog.snapshot(), COMMITLOG_MARKER)):
            raise StoreCorruptedError(ahead, self.commitlog.path.rsplit("/", 1)[0])  # lost: never caught up, silently
        for name in pending:
            result.from_offset = min(result.from_offset, starts[name])
        began = time.perf_counter()
        files = self._write({n: s for n, s in starts.items() if s < end}, commitlog, end, ext_at)
        result.seconds["scan"] = round(result.seconds.get("scan", 0.0) + time.perf_counter() - began, 3)
        try:
            return self._commit_in_order(pending, snapshots, marked, files, end, result, lazy)
        except BaseException:
            for name, written in files.items():
                if name not in result.versions:
                    self.targets[name].discard(written)
            raise

    def _commit_in_order(self, pending: list[str], snapshots: dict, marked: dict[str, int],
                         files: dict[str, list[WrittenFile]], end: int, result: DispatchResult,
                         lazy: bool = False) -> list[str]:
        """Commit each pending target's files with its marker moved to ``end``, in order; stop at the
        first conflict (its files are deleted) and return the targets still to do. The summaries of the
        ext files committed are recorded last, off the path to the consume queue's commit: until they
        are, a filtered read reads those files rather than skipping them. With ``lazy``, the ext table
        gets no commit when it has no rows (its marker moves once a second): the consume
        queue units of the range then hold real tag codes, so nothing points past the ext marker."""
        summarize: list[WrittenFile] = []
        try:
            for i, name in enumerate(pending):
                table, written = self.targets[name], files.get(name, [])
                began = time.perf_counter()
                left = marked[name] >= end or (lazy and name == "consume_queue_ext" and not written)
                if left:
                    version = snapshots[name].version()
                else:
                    self._step(f"{name}.written")
                    if name == "consume_queue" and self._kept:  # kept only for a feed
                        self.feed.expect([f.path for f in written])
                    try:
                        version = table.commit(snapshots[name], written, markers={REPUT_MARKER: end},
                                               operation="DISPATCH",
                                               info={"storelib.from": str(marked[name]), "storelib.to": str(end)})
                    except CommitConflict:
                        for later in pending[i + 1:]:
                            self.targets[later].discard(files.get(later, []))
                        return pending[i:]
                    if name == "consume_queue_ext" and self.summaries is not None:
                        summarize = written
                if name == "consume_queue" and not left and self._kept:
                    self.feed.publish(pa.Table.from_batches(self._kept))
                result.rows[name] = sum(f.num_records for f in written)
                result.versions[name] = version  # committed: its files are the table's now
                result.seconds[name] = round(time.perf_counter() - began, 3)
                if not left:
                    self._step(f"{name}.committed")
            return []
        finally:
            self._unsummarized.extend(summarize)
            self._summarize()

    def _summarize(self, force: bool = False) -> None:
        """Record the summaries of the committed ext files not yet recorded (a follower: at most once
        every :data:`SUMMARY_EVERY_S`); a failure only leaves those files unskippable until compaction."""
        written = self._unsummarized
        if not written or (not force and time.monotonic() - self._summarized_at < self._summary_every_s):
            return
        self._unsummarized, self._summarized_at = [], time.monotonic()
        try:
            record_summaries(self.summaries, written, self.config.max_commit_attempts)
        except StoreError as e:
            log.warning("dispatch: recording the summaries of %d ext files failed (filtered reads read them "
                        "until the next compaction): %s", len(written), e)
            return
        self._step("consume_queue_ext.summarized")

    def _write(self, starts: dict[str, int], commitlog, end: int, ext_at: int | None = None) -> dict[str, list[WrittenFile]]:
        """Every target's rows for commitlog ``[its start, end)``, written in one Spark job over one read;
        ``ext_at`` is the ext table's marker.

        The executors read the commitlog files with pyarrow and cut the rows into each target's; when
        SQL92 subscriptions of a topic in the range need filter bitmaps, they compute them on the same
        batches (:class:`~storelib.dispatch.calc_bitmap.FilterBitmaps`). Only the messages of those
        topics get ext units (the ext table holds what a bitmap was computed for); the others' consume
        queue units keep their real tag codes. The ``properties`` map, the widest column, is read only
        from the files that may hold a message needing it: a delayed or timer one (its tag code is its
        deliver time) or one of a subscribed topic.
        """
        from storelib.model.topic import SCHEDULE_TOPIC, TIMER_TOPIC

        self._kept = None
        writing = {n: s for n, s in starts.items() if n != "consume_queue_ext" or self.ext_enabled}
        if not writing:
            return {}
        low = min(writing.values())
        actions = Table.prune(commitlog, Prune(between={"physical_offset": (low, end - 1)}))
        holding = functools.partial(_files_holding, actions)
        coded = "consume_queue_ext" in writing or "consume_queue" in writing  # real tag codes
        version, live = self.filters()
        subs = [s for s in live if holding(s.topic)] if coded and self.ext_enabled else []
        bitmaps = FilterBitmaps.of(subs, version) if subs else None
        with_properties = set().union(*(holding(t) for t in {s.topic for s in subs}),
                                      holding(SCHEDULE_TOPIC) | holding(TIMER_TOPIC) if coded else set())
        shift = hash_range_shift(self.config.index_hash_ranges)
        ext_from, ext_had = 0, ()
        if self.ext_enabled and "consume_queue" in writing and ext_at is not None and ext_at > writing["consume_queue"]:
            ext_from, ext_had = ext_at, self._ext_units_between(writing["consume_queue"], min(ext_at, end))
        requests = DispatchRequests(writing, self.ext_enabled, shift, tuple(self.config.delay_levels_ms), bitmaps,
                                    ext_topics=bitmaps.topics if bitmaps else (), ext_from=ext_from, ext_had=ext_had)
        targets = {}
        for name in writing:
            summarize = summarizer_for(live) if name == "consume_queue_ext" else None
            targets[name] = Target.of(self.targets[name], target_file_size=self.config.target_file_size,
                                      summarize=summarize)
        actions = actions.sort_by("min.physical_offset")
        files = [(self.commitlog.path_of(p), lo is not None and lo >= low and hi < end, p in with_properties)
                 for p, lo, hi in zip(actions.column("path").to_pylist(),
                                      actions.column("min.physical_offset").to_pylist(),
                                      actions.column("max.physical_offset").to_pylist())]
        per_file = CommitlogFiles(low, end, False, requests)
        if end - low <= self.config.dispatch_local_max_bytes:  # a small increment: here, no Spark job
            if self.feed is not None:
                self._kept = []
                return write_items_here(files, targets, functools.partial(_keeping, per_file, self._kept))
            return write_items_here(files, targets, per_file)
        return write_items(self.spark, files, actions.column("size_bytes").to_pylist(), targets, per_file)

    def _ext_units_between(self, low: int, high: int) -> tuple[int, ...]:
        """The commitlog offsets in ``[low, high)`` the ext table holds units for (committed by a run that
        died before its consume queue commit: the consume queue units written again point at exactly those)."""
        import pyarrow.compute as pc

        ext = self.targets["consume_queue_ext"]
        rows = ext.read_view(ext.view(), Prune(between={"commitlog_offset": (low, high - 1)}), columns=["commitlog_offset"],
                             filter=(pc.field("commitlog_offset") >= low) & (pc.field("commitlog_offset") < high))
        return tuple(sorted(rows.column("commitlog_offset").to_pylist()))

    @property
    def ext_enabled(self) -> bool:
        return self.config.enable_consume_queue_ext and "consume_queue_ext" in self.targets

    def filters(self) -> tuple[int, list["Subscription"]]:
        """The registry version this run uses and its live SQL92 subscriptions with valid Bloom data."""
        if self._filters is None:
            if self.registry is None or not self.config.enable_calc_filter_bitmap:
                self._filters = (0, [])
            else:
                version = self.registry.table.view().version  # first: the subscriptions read are at least as new
                bloom = self.registry.bloom_filter
                subs = [s for s in self.registry.all() if s.is_sql92 and s.bloom is not None and bloom.is_valid(s.bloom)]
                self._filters = (version, subs)
        return self._filters


def _keeping(per_file: CommitlogFiles, kept: list, item) -> Iterator[dict[str, "pa.RecordBatch"]]:
    """``per_file(item)``'s parts, the consume queue's kept in ``kept`` on their way to the writer."""
    for parts in per_file(item):
        if "consume_queue" in parts:
            kept.append(parts["consume_queue"])
        yield parts


def _files_holding(actions: "pa.Table", topic: str) -> set[str]:
    """The paths of the commitlog files among ``actions`` that may hold a message of ``topic`` (by their statistics)."""
    return set(Table.prune(actions, Prune(equal={"topic": topic})).column("path").to_pylist())
