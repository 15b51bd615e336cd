"""Dispatch: RocketMQ's ReputMessageService, as a Spark job over the new part of the commitlog.

Each target table (``consume_queue``, ``consume_queue_ext`` and ``index``) keeps its
own ``reput`` marker in its Delta log: the commitlog offset up to which it holds rows. A run reads
the commitlog's sequenced end from one snapshot, and for every target behind it reads only the
commitlog files of ``[marker, end)``, builds that target's rows as Spark columns, writes them from
the executors, and commits them together with the advanced marker in one Delta commit. A run that
dies anywhere leaves each target either fully at its old marker or fully at the new one, so the
next run redoes exactly what is missing: nothing twice, nothing skipped.

With the ext queue on (``enable_consume_queue_ext``), each consume queue row's tag code is the
decorated address of its ``consume_queue_ext`` row, which holds the real tag code, the store time
and the filter bitmap: CommitLogDispatcherCalcBitMap evaluates every live SQL92 subscription of
the message's topic (Spark columns, all subscriptions in one pass) and sets the subscription's Bloom
bits where it returns TRUE. Each ext row records the registry version its bitmap was computed with.
With the ext queue off, the ext target still moves its marker (with no rows), so the two always
cover the same messages.

>>> store.dispatch()                                  # doctest: +SKIP
DispatchResult(from_offset=0, to_offset=4021, consume_queue_rows=40, index_rows=80, ...)
"""

from __future__ import annotations

import functools
import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib import arrays
from storelib.commitlog import COMMITLOG_MARKER
from storelib.config import StoreConfig
from storelib.filter.summary import record_summaries, summarizer_for
from storelib.errors import ConcurrentWriteError
from storelib.message import MessageConst, SysFlag
from storelib.schema import CONSUME_QUEUE, CONSUME_QUEUE_EXT, INDEX
from storelib.tables import CommitConflict, Prune, Table, WrittenFile
from storelib.writer import Target, write_split

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from storelib.filter.registry import Subscription, SubscriptionRegistry

__all__ = ["Dispatcher", "DispatchResult", "queued", "REPUT_MARKER", "FAULT_ENV"]

log = logging.getLogger(__name__)

REPUT_MARKER = "reput"
#: Set to a step name (e.g. ``consume_queue.written``) to make the process exit hard at that step.
FAULT_ENV = "STORELIB_FAULT_AT"


@dataclass
class DispatchResult:
    """What one dispatch run did: the commitlog range it covered and the rows each table got."""

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


def queued(rows: "DataFrame") -> "DataFrame":
    """Messages that get a consume queue row: normal and committed ones (not prepared, not rolled back)."""
    return rows.where(_queued())


class Dispatcher:
    """Builds consume queue, ext and index rows for what is new in the commitlog."""

    def __init__(self, spark: "SparkSession", commitlog: Table, targets: dict[str, Table], config: StoreConfig,
                 fault: Callable[[str], None] | None = None, registry: "SubscriptionRegistry | None" = None,
                 summaries: Table | None = None):
        self.spark = spark
        self.commitlog = commitlog
        self.targets = targets
        self.config = config
        self._fault = fault
        self.registry = registry
        self.summaries = summaries
        self._filters: tuple[int, list["Subscription"]] | None = None

    def _step(self, name: str) -> None:
        if os.environ.get(FAULT_ENV) == name:
            log.error("fault injected at %s: exiting", name)
            os._exit(86)
        if self._fault is not None:
            self._fault(name)

    def progress(self) -> dict[str, int]:
        """Each target's ``reput`` marker, and the commitlog's sequenced end as ``commitlog``."""
        out = {name: Table.marker(t.snapshot(), REPUT_MARKER) for name, t in self.targets.items()}
        out["commitlog"] = Table.marker(self.commitlog.snapshot(), COMMITLOG_MARKER)
        return out

    def run(self) -> DispatchResult:
        """Dispatch everything sequenced so far; return what was done.

        One Spark job reads the commitlog range once and writes every target's files; the targets
        then commit one by one, in order. When another dispatcher took a target's next version,
        the targets not yet committed are redone from fresh snapshots.
        """
        commitlog = self.commitlog.snapshot()
        end = Table.marker(commitlog, COMMITLOG_MARKER)
        result = DispatchResult(end, end)
        self._filters = None
        pending = list(self.targets)
        for attempt in range(1, self.config.max_commit_attempts + 1):
            snapshots = {name: self.targets[name].snapshot() for name in pending}
            starts = {name: Table.marker(snapshots[name], REPUT_MARKER) for name in pending}
            for name in pending:
                result.from_offset = min(result.from_offset, starts[name])
            began = time.perf_counter()
            files = self._write({n: s for n, s in starts.items() if s < end}, commitlog, end)
            result.seconds["scan"] = round(result.seconds.get("scan", 0.0) + time.perf_counter() - began, 3)
            try:
                pending = self._commit_in_order(pending, snapshots, starts, files, end, result)
            except BaseException:
                for name, written in files.items():
                    if name not in result.versions:
                        self.targets[name].discard(written)
                raise
            if not pending:
                return result
            log.info("dispatch: commit conflict on %s, attempt %d", pending[0], attempt)
            time.sleep(min(0.5, 0.01 * attempt))
        raise ConcurrentWriteError(pending[0], f"dispatch: other writers won {self.config.max_commit_attempts} "
                                               "commits in a row")

    def _commit_in_order(self, pending: list[str], snapshots: dict, starts: dict[str, int],
                         files: dict[str, list[WrittenFile]], end: int, result: DispatchResult) -> list[str]:
        """Commit each pending target's files with its marker moved to ``end``, in order; stop at the
        first conflict (its files are deleted) and return the targets still to do."""
        for i, name in enumerate(pending):
            table, written = self.targets[name], files.get(name, [])
            began = time.perf_counter()
            if starts[name] >= end:
                version = snapshots[name].version()
            else:
                self._step(f"{name}.written")
                if name == "consume_queue_ext" and self.summaries is not None and written:
                    record_summaries(self.summaries, written, self.config.max_commit_attempts)
                    self._step(f"{name}.summarized")
                try:
                    version = table.commit(snapshots[name], written, markers={REPUT_MARKER: end}, operation="DISPATCH",
                                           info={"storelib.from": str(starts[name]), "storelib.to": str(end)})
                except CommitConflict:
                    for later in pending[i + 1:]:
                        self.targets[later].discard(files.get(later, []))
                    return pending[i:]
            result.rows[name] = sum(f.num_records for f in written)
            result.versions[name] = version  # committed: its files are the table's now
            result.seconds[name] = round(time.perf_counter() - began, 3)
            if starts[name] < end:
                self._step(f"{name}.committed")
        return []

    def _write(self, starts: dict[str, int], commitlog, end: int) -> dict[str, list[WrittenFile]]:
        """Every target's rows for commitlog ``[its start, end)``, written in one Spark job over one read."""
        writing = {n: s for n, s in starts.items() if n != "consume_queue_ext" or self.ext_enabled}
        if not writing:
            return {}
        low = min(writing.values())
        actions = Table.actions(commitlog, Prune(between={"physical_offset": (low, end - 1)}))
        rows = self.commitlog.read_files(self.spark, actions)
        rows = rows.where((rows.physical_offset >= low) & (rows.physical_offset < end))
        units = self._units(rows, set(writing), actions)
        targets = {}
        for name in writing:
            table = self.targets[name]
            summarize = summarizer_for(self.filters()[1]) if name == "consume_queue_ext" else None
            targets[name] = Target.of(table, target_file_size=self.config.target_file_size, summarize=summarize)
        shift = 31 - max(0, (self.config.index_hash_ranges - 1).bit_length())
        return write_split(units, targets, UnitSplit(writing, self.ext_enabled, shift))

    @property
    def ext_enabled(self) -> bool:
        return self.config.enable_consume_queue_ext and "consume_queue_ext" in self.targets

    def filters(self) -> tuple[int, list["Subscription"]]:
        """The registry version this run uses and its live SQL92 subscriptions with valid Bloom data."""
        if self._filters is None:
            if self.registry is None or not self.config.enable_calc_filter_bitmap:
                self._filters = (0, [])
            else:
                snapshot = self.registry.snapshot()
                bloom = self.registry.bloom_filter
                subs = [s for s in self.registry.all(snapshot)
                        if s.is_sql92 and s.bloom is not None and bloom.is_valid(s.bloom)]
                self._filters = (snapshot.version(), subs)
        return self._filters

    # ---- the units of every target, as columns of one row per message -------------------------
    def _units(self, rows: "DataFrame", names: set[str], actions: "pa.Table") -> "DataFrame":
        """One row per message with what the targets need, for :class:`UnitSplit` to cut and hash.

        Spark reads and filters; hash codes are computed by the executors' Python over whole
        batches (:mod:`storelib.arrays`). The ``properties`` map, the widest column of the
        commitlog, is read only when a file of the range may hold a message that needs it: a
        delayed one (its tag code is its deliver time) or one a SQL92 subscription checks.
        """
        from pyspark.sql import functions as F

        from storelib.topics import SCHEDULE_TOPIC

        may_hold = functools.partial(_may_hold_topic, actions)
        cols: list = ["physical_offset", "size", "topic", "queue_id", "queue_offset", "store_timestamp",
                      _queued().alias("queued")]
        if "consume_queue_ext" in names or "consume_queue" in names and not self.ext_enabled:
            cols.append("tags")
            if may_hold(SCHEDULE_TOPIC):
                cols.append(self._deliver_time().alias("deliver_time"))
        if "consume_queue_ext" in names:
            version, subs = self.filters()
            subs = [s for s in subs if may_hold(s.topic)]
            if subs:
                from storelib.filter.bloom import bitmap_column
                from storelib.filter.sql92_spark import to_columns_with_inputs

                # Each property look-up and number parse once per row, shared by every subscription.
                inputs, predicates = to_columns_with_inputs([s.compiled.tree for s in subs], "properties")
                rows = rows.select("*", *inputs)
                matches = [((F.col("topic") == s.topic) & p, s.bloom) for s, p in zip(subs, predicates)]
                subscribed = F.col("topic").isin(sorted({s.topic for s in subs}))
                cols += [F.when(subscribed, bitmap_column(matches, subs[0].bloom.bit_num)).alias("filter_bitmap"),
                         F.when(subscribed, F.lit(version).cast("long")).alias("filter_version")]
            else:
                cols += [F.lit(None).cast("binary").alias("filter_bitmap"),
                         F.lit(None).cast("long").alias("filter_version")]
        if "index" in names:
            cols += [(_transaction_type() != SysFlag.TRANSACTION_ROLLBACK_TYPE).alias("indexed"), "keys", "uniq_key"]
        return rows.select(*cols)

    def _deliver_time(self) -> "Column":
        """A delayed message's tag code (checkMessageAndReturnSize): for a SCHEDULE_TOPIC_XXXX message
        with a DELAY level > 0, its deliver timestamp, store time in ms plus the delay of the level
        (capped at the highest one); null for every other message, whose tag code is its TAGS hash."""
        from pyspark.sql import functions as F

        from storelib.topics import SCHEDULE_TOPIC

        delays = self.config.delay_levels_ms
        level = F.try_element_at(F.col("properties"), F.lit(MessageConst.DELAY)).try_cast("int")
        capped = F.least(level, F.lit(len(delays)))
        delay_ms = F.try_element_at(F.array(*[F.lit(d).cast("long") for d in delays]), capped)
        deliver = F.unix_millis(F.col("store_timestamp")) + delay_ms
        return F.when((F.col("topic") == SCHEDULE_TOPIC) & (level > 0), deliver).cast("long")


def _transaction_type() -> "Column":
    from pyspark.sql import functions as F

    return F.col("sysflag").bitwiseAND(F.lit(SysFlag.TRANSACTION_ROLLBACK_TYPE))


def _queued() -> "Column":
    """Whether a message gets a consume queue row: a normal or committed one (not prepared, not rolled back)."""
    return _transaction_type().isin(SysFlag.TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE)


def _may_hold_topic(actions: "pa.Table", topic: str) -> bool:
    """Whether a commitlog file among ``actions`` may hold a message of ``topic`` (by its statistics)."""
    return Table.prune(actions, Prune(equal={"topic": topic})).num_rows > 0


@dataclass(frozen=True)
class UnitSplit:
    """Cuts each batch of message units (:meth:`Dispatcher._units`) into the targets' rows, on the executors.

    A target gets the rows at or past its own start (targets may stand at different markers after
    a crash): consume queue and ext units for queued messages, with the consume queue's tag code the
    decorated ext address when the ext queue is on; index rows (IndexService.buildIndex) for the
    UNIQ_KEY and each non-empty key of KEYS of every message not rolled back, as hashes of
    ``topic#key`` filed by hash range.
    """

    starts: Mapping[str, int]
    ext_enabled: bool
    index_shift: int

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[dict[str, pa.RecordBatch]]:
        for batch in batches:
            if batch.num_rows:
                yield {name: getattr(self, name)(self._rows_for(batch, name)) for name in self.starts}

    def _rows_for(self, batch: pa.RecordBatch, name: str) -> pa.RecordBatch:
        flag = batch.column("indexed" if name == "index" else "queued")
        keep = pc.and_(flag, pc.greater_equal(batch.column("physical_offset"), self.starts[name]))
        return batch if pc.all(keep).as_py() else batch.filter(keep)

    @staticmethod
    def _tags_code(b: pa.RecordBatch) -> pa.Array:
        code = pa.array(arrays.tags_codes(b.column("tags")), pa.int64())
        if "deliver_time" in b.schema.names:
            code = pc.coalesce(b.column("deliver_time"), code)
        return code

    def consume_queue(self, b: pa.RecordBatch) -> pa.RecordBatch:
        code = (pc.add(b.column("queue_offset"), pa.scalar(-(2**63), pa.int64())) if self.ext_enabled
                else self._tags_code(b))
        return pa.RecordBatch.from_arrays(
            [b.column("topic"), b.column("queue_id"), b.column("queue_offset"), b.column("physical_offset"),
             b.column("size"), code, b.column("store_timestamp")], schema=CONSUME_QUEUE.arrow)

    def consume_queue_ext(self, b: pa.RecordBatch) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(
            [b.column("topic"), b.column("queue_id"), b.column("queue_offset"), b.column("queue_offset"),
             b.column("physical_offset"), b.column("size"), self._tags_code(b), b.column("store_timestamp"),
             b.column("filter_bitmap"), b.column("filter_version")], schema=CONSUME_QUEUE_EXT.arrow)

    def index(self, b: pa.RecordBatch) -> pa.RecordBatch:
        split = pc.split_pattern(b.column("keys"), MessageConst.KEY_SEPARATOR)
        keys = pa.concat_arrays([b.column("uniq_key"), pc.list_flatten(split)])
        owner = np.concatenate([np.arange(b.num_rows), pc.list_parent_indices(split).to_numpy()])
        filled = pc.fill_null(pc.greater(pc.binary_length(keys), 0), False).to_numpy(zero_copy_only=False)
        keys, owner = keys.filter(pa.array(filled)), owner[filled]
        order = np.argsort(owner, kind="stable")  # each message's keys together: its UNIQ_KEY first
        keys, owner = keys.take(pa.array(order)), pa.array(owner[order])
        topics = b.column("topic").take(owner)
        hashes = pa.array(arrays.index_key_hashes(pc.binary_join_element_wise(topics, keys, "#")), pa.int32())
        return pa.RecordBatch.from_arrays(
            [pc.shift_right(hashes, self.index_shift), hashes, b.column("physical_offset").take(owner),
             b.column("store_timestamp").take(owner)], schema=INDEX.arrow)
