"""Dispatch: RocketMQ's ReputMessageService, as a Spark job over the new part of the commitlog, or, for
an increment of at most ``dispatch_local_max_bytes``, the same work in this process with pyarrow alone.

Each target table keeps its own ``reput`` marker, committed with its rows, so a run that dies anywhere is
redone with nothing twice and nothing skipped. The details (ext units, followers) are in
``docs/internals.md``.

>>> from storelib import Message
>>> sent = store.send(Message("TopicTest", keys=["k1", "k2"]))
>>> result = store.dispatch()
>>> result.consume_queue_rows, result.index_rows, result.to_offset == store.max_offset()   # index: k1, k2, UNIQ_KEY
(1, 3, True)
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

import pyarrow as pa

from storelib.context import StoreContext
from storelib.delta.commit import CommitConflict, WrittenFile
from storelib.delta.compaction import compact_here
from storelib.delta.table import Table
from storelib.dispatch.follow import ROUND_MS
from storelib.dispatch.follow import follow as follow_rounds
from storelib.dispatch.plan import plan_round
from storelib.dispatch.result import DispatchResult, UnitFeed
from storelib.filter.summary import summarizer_for
from storelib.model.config import StoreConfig
from storelib.model.errors import ConcurrentWriteError, StoreCorruptedError, StoreError
from storelib.storage.commitlog import COMMITLOG_MARKER, is_clustered
from storelib.storage.dispatched import REPUT_MARKER, ahead_of_commitlog, dispatch_targets
from storelib.storage.schema import CLUSTERED_ROW_GROUP_ROWS
from storelib.storage.summaries import compact_summaries, record_summaries

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from storelib.filter.subscription import Subscription
    from storelib.storage.subscriptions import SubscriptionRegistry

__all__ = ["Dispatcher"]

log = logging.getLogger(__name__)


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

    def __init__(
        self,
        spark: "SparkSession | Callable[[], SparkSession]",
        commitlog: Table,
        targets: dict[str, Table],
        config: StoreConfig,
        fault: Callable[[str], None] | None = None,
        registry: "SubscriptionRegistry | None" = None,
        summaries: Table | None = None,
        notify: Callable[[], None] | None = None,
    ):
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
        return cls(
            lambda: ctx.spark,
            ctx.tables.commitlog,
            dispatch_targets(ctx.tables, ctx.config),
            ctx.config,
            fault=fault,
            registry=ctx.registry,
            summaries=ctx.tables.ext_summary,
            notify=ctx.arrivals.notify,
        )

    def _step(self, name: str) -> None:
        if self._fault is not None:
            self._fault(name)

    def progress(self) -> dict[str, int]:
        """Each target's ``reput`` marker, and the commitlog's sequenced end as ``commitlog``."""
        out = {name: Table.marker(t.snapshot(), REPUT_MARKER) for name, t in self.targets.items()}
        out["commitlog"] = Table.marker(self.commitlog.snapshot(), COMMITLOG_MARKER)
        return out

    def run(
        self,
        follow: bool = False,
        *,
        stop: threading.Event | None = None,
        interval_ms: int = 100,
        on_round: Callable[[DispatchResult], None] | None = None,
        compact_every_ms: int = 10_000,
        round_ms: int = ROUND_MS,
    ) -> DispatchResult:
        """Dispatch everything sequenced so far; return what was done. Pulls held in this process are woken.

        One Spark job (or, for a small increment, this process) reads the commitlog range once and
        writes every target's files; the targets then commit one by one, in order. When another
        dispatcher took a target's next version, the targets not yet committed are redone from fresh
        snapshots. With ``follow``, it goes on round after round until ``stop`` is set
        (:func:`~storelib.dispatch.follow.follow`, which takes the other arguments).

        >>> from storelib import Message
        >>> _ = store.send(Message("TopicTest"))
        >>> Dispatcher.of(store.context).run().consume_queue_rows
        1
        """
        if follow:
            return follow_rounds(self, stop or threading.Event(), interval_ms, on_round, compact_every_ms, round_ms)
        try:
            return self._run_once()
        finally:
            if self._notify is not None:
                self._notify()

    def alone(self, name: str) -> "Dispatcher":
        """A dispatcher of the target ``name`` alone (a follower's index thread).

        >>> list(store.dispatcher().alone("index").targets)
        ['index']
        """
        return Dispatcher(self._spark, self.commitlog, {name: self.targets[name]}, self.config, fault=self._fault)

    def pace(self, summary_every_s: float, full_every_s: float) -> None:
        """Record ext summaries at most every ``summary_every_s`` and dispatch every target (the index, a
        lagging ext marker) at most every ``full_every_s``; 0: every run (a follower paces its rounds)."""
        self._summary_every_s, self._full_every_s = summary_every_s, full_every_s

    def set_apart(self, names: tuple[str, ...]) -> None:
        """Leave the targets ``names`` to another thread's dispatcher (none: this one does every target again)."""
        self._apart = names
        if not names:
            self._done_to = None  # done so far meant: but those

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
        out = {
            "commitlog": compact_here(
                self.commitlog, order_by="physical_offset", leave=is_clustered, row_group_rows=CLUSTERED_ROW_GROUP_ROWS
            )
        }
        for name in self.targets:
            extra: dict[str, Any] = {}
            if name == "consume_queue_ext" and self.summaries is not None:
                subs = self.registry.all() if self.registry is not None else []
                extra = {
                    "summarize": summarizer_for(subs),
                    "before_commit": lambda files: record_summaries(
                        self.summaries, files, self.config.max_commit_attempts
                    ),
                }
            out[name] = compact_here(self.targets[name], **extra)
        if "consume_queue_ext" in self.targets and self.summaries is not None:  # the merged files' summaries go
            live = self.targets["consume_queue_ext"].view().actions.column("path").to_pylist()
            out["consume_queue_ext_summary"] = compact_summaries(
                self.summaries, live, attempts=self.config.max_commit_attempts
            )
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
            # the targets' turns, in one order: local dispatchers queue
            with Table.commit_turns([self.targets[name] for name in pending]) as held:
                snapshots = dict(zip(pending, held))
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
        raise ConcurrentWriteError(
            pending[0], f"dispatch: other writers won {self.config.max_commit_attempts} commits in a row"
        )

    def _attempt(
        self,
        pending: list[str],
        snapshots: dict,
        commitlog: "pa.Table",
        end: int,
        result: DispatchResult,
        lazy: bool = False,
    ) -> list[str]:
        """One try at every pending target from ``snapshots``, up to commitlog offset ``end``; the targets still to do.
        With ``lazy``, an ext commit that would move the marker alone is left for a later round."""
        starts = {
            name: self.targets[name].markers_at(snapshots[name], [REPUT_MARKER])[REPUT_MARKER] for name in pending
        }
        marked = dict(starts)  # where each target is: one behind ``end`` commits, with files or its marker alone
        ext_at = starts.get("consume_queue_ext")
        if ext_at is not None and "consume_queue" in starts and ext_at < starts["consume_queue"]:
            # behind the consume queue only by rounds that had no ext unit to write (the ext table commits first
            # otherwise): no unit up to the consume queue's marker points at one, so there is nothing to redo
            starts["consume_queue_ext"] = starts["consume_queue"]
        ahead = ahead_of_commitlog(
            starts, end
        )  # past this view's end: another dispatcher went on, or commits were lost
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

    def _commit_in_order(
        self,
        pending: list[str],
        snapshots: dict,
        marked: dict[str, int],
        files: dict[str, list[WrittenFile]],
        end: int,
        result: DispatchResult,
        lazy: bool = False,
    ) -> list[str]:
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
                        assert self.feed is not None
                        self.feed.expect([f.path for f in written])
                    try:
                        version = table.commit(
                            snapshots[name],
                            written,
                            markers={REPUT_MARKER: end},
                            operation="DISPATCH",
                            info={"storelib.from": str(marked[name]), "storelib.to": str(end)},
                        )
                    except CommitConflict:
                        for later in pending[i + 1 :]:
                            self.targets[later].discard(files.get(later, []))
                        return pending[i:]
                    if name == "consume_queue_ext" and self.summaries is not None:
                        summarize = written
                if name == "consume_queue" and not left and self._kept:  # kept only for a feed
                    assert self.feed is not None
                    self.feed.publish(pa.Table.from_batches(self._kept))
                result.rows[name] = sum(f.num_records for f in written)
                result.versions[name] = version  # committed: its files are the table's now
                result.seconds[name] = round(time.perf_counter() - began, 3)
                if not left:
                    self._step(f"{name}.committed")
            return []
        finally:
            self._unsummarized.extend(summarize)
            self.summarize()

    def summarize(self, force: bool = False) -> None:
        """Record the summaries of the committed ext files not yet recorded (a follower: at most once
        every :data:`SUMMARY_EVERY_S`); a failure only leaves those files unskippable until compaction."""
        written = self._unsummarized
        if not written or (not force and time.monotonic() - self._summarized_at < self._summary_every_s):
            return
        self._unsummarized, self._summarized_at = [], time.monotonic()
        assert self.summaries is not None  # ext files wait for their summaries only when there is a summary table
        try:
            record_summaries(self.summaries, written, self.config.max_commit_attempts)
        except StoreError as e:
            log.warning(
                "dispatch: recording the summaries of %d ext files failed (filtered reads read them "
                "until the next compaction): %s",
                len(written),
                e,
            )
            return
        self._step("consume_queue_ext.summarized")

    def _write(
        self, starts: dict[str, int], commitlog: pa.Table, end: int, ext_at: int | None = None
    ) -> dict[str, list[WrittenFile]]:
        """Every target's rows for commitlog ``[its start, end)`` (:func:`~storelib.dispatch.plan.plan_round`);
        ``ext_at`` is the ext table's marker. A round written here keeps its consume queue units for a feed."""
        self._kept = None
        writing = {n: s for n, s in starts.items() if n != "consume_queue_ext" or self.ext_enabled}
        if not writing:
            return {}
        plan = plan_round(
            self.commitlog, self.targets, self.config, writing, commitlog, end, ext_at, self.filters(), self.ext_enabled
        )
        if plan.local and self.feed is not None:
            self._kept = []
        return plan.write(lambda: self.spark, self._kept)

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
                subs = [
                    s for s in self.registry.all() if s.is_sql92 and s.bloom is not None and bloom.is_valid(s.bloom)
                ]
                self._filters = (version, subs)
        return self._filters
