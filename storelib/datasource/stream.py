"""Structured Streaming reads of the ``rocketmq`` source: a consumer group consuming one topic or several.

Details: ``docs/internals.md``, section storelib.datasource.stream.

>>> _ = store.subscribe("GroupS", "TopicTest", "TagA")
>>> reader = GroupStreamReader(SourceOptions.parse({"store": store.root, "group": "GroupS", "topic": "TopicTest"},
...                                                streaming=True), None)
>>> start = reader.initialOffset(); end = reader.latestOffset(start, None)
>>> end["TopicTest"][str(r.queue_id)], sum(end["TopicTest"].values())      # per topic and queue, as Kafka's
(1, 1)
>>> [b.column("msg_id").to_pylist() for p in reader.partitions(start, end) for b in reader.read(p)] == [[r.msg_id]]
True
>>> reader.commit(end); store.committed_offset("GroupS", "TopicTest", r.queue_id)    # Spark committed the batch
1
>>> reader.getDefaultReadLimit()                                  # no maxMessagesPerTrigger
ReadAllAvailable()
>>> reader.prepareForTriggerAvailableNow(); reader.latestOffset(end, None) == end   # Trigger.AvailableNow's end
True
>>> reader.latestOffset({"0": 0, "1": 0, "2": 0, "3": 0}, None) == end  # a checkpoint of an older one-topic stream
True
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from storelib.context import StoreContext
from storelib.datasource.batch import MAX_SCAN_PARTITIONS, output_schema
from storelib.datasource.offsets import OffsetSpec, Position, nested, queue_bounds, resolve, stream_offsets
from storelib.datasource.options import MESSAGES, SourceOptions
from storelib.datasource.scope import check, ranges_mask, store_context, subscriptions
from storelib.delta.log import add_actions
from storelib.delta.spark_read import contiguous_groups
from storelib.delta.stats import Prune
from storelib.delta.table import Table
from storelib.filter.message_filter import MessageFilter
from storelib.model.errors import OffsetError
from storelib.storage.consume_queue import read_units
from storelib.storage.dispatched import queued_mask

__all__ = ["GroupStreamReader", "BatchFiles"]

try:  # PySpark 4.2+
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as _AvailableNow
except ImportError:  # pragma: no cover
    _AvailableNow = object  # type: ignore[assignment,misc]

Offsets = dict[tuple[str, int], int]


@dataclass(frozen=True)
class BatchFiles(InputPartition):
    """One task of a micro-batch: the commitlog files ``paths``, of which it reads the rows between the
    commitlog offsets ``low`` and ``high`` whose queue offsets fall in ``queues`` ((topic, queue_id, begin,
    end))."""

    paths: tuple[str, ...]
    low: int
    high: int
    queues: tuple[tuple[str, int, int, int], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", None)


class GroupStreamReader(DataSourceStreamReader, _AvailableNow):
    """A group's stream over its topics (see the module's description). The topics are fixed when the query
    starts (a ``topicPattern``'s matches then); a query started again picks up new ones."""

    def __init__(self, options: SourceOptions, schema: StructType | None) -> None:
        options.check_stream()
        self.options = options
        self.schema = schema
        self.group = str(options.group)
        ctx = store_context(options)
        self.topics = check(options, ctx) or []
        self.subscriptions = subscriptions(ctx, self.group, self.topics)
        self.queues = {t: ctx.topics.get(t).read_queue_nums for t in self.topics}

    def _context(self) -> StoreContext:
        return store_context(self.options)

    # ---- offsets -------------------------------------------------------------------------------
    def _flat(self, offset: Mapping) -> Offsets:
        return stream_offsets(offset, self.topics)

    def _from(self, ctx: StoreContext, bounds: Mapping, spec: OffsetSpec | None = None) -> Offsets:
        found = resolve(ctx, spec, Position("group"), bounds, self.group)
        return {k: v for k, v in found.items() if v is not None}

    def initialOffset(self) -> dict:
        ctx = self._context()
        self._initial = nested(self._from(ctx, queue_bounds(ctx, self.queues), self.options.starting))
        return self._initial

    def prepareForTriggerAvailableNow(self) -> None:
        """``Trigger.AvailableNow``: read up to what is there now, in batches of ``maxMessagesPerTrigger``."""
        self._until = {k: hi for k, (_, hi) in queue_bounds(self._context(), self.queues).items()}

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:
        """The next batch's end. Spark asks from a batch's end only after writing that batch to its commit
        log, so ``start`` is committed for the group here: when a query ends (``Trigger.AvailableNow``'s last
        ask finds nothing new), the group's offsets equal the checkpoint's, where ``commit(end)`` alone (called
        when Spark plans the next batch) leaves them one batch behind. A queue ``start`` lacks (a queue or
        topic added since) ends this batch where the group is (its earliest offset where the group has none),
        and is read from there on."""
        ctx = self._context()
        bounds = queue_bounds(ctx, self.queues)
        ends = getattr(self, "_until", None) or {k: hi for k, (_, hi) in bounds.items()}
        if start is None:
            return nested(ends)
        if start != getattr(self, "_initial", None):
            self.commit(start)  # Spark plans from ``start`` only once its checkpoint's commit log holds it
        begins = self._flat(start)
        self._check_loss(begins, bounds)
        fresh = self._from(ctx, {k: b for k, b in bounds.items() if k in ends and k not in begins})
        budget = getattr(limit, "max_rows", None)
        if budget is None and limit is None:
            budget = self.options.max_messages_per_trigger
        out = {}
        waiting = {k: max(0, ends[k] - begins[k]) for k in ends if k in begins}
        left = budget
        busy = sum(1 for n in waiting.values() if n)
        for k, end in ends.items():
            if k not in begins:
                out[k] = fresh.get(k, end)
                continue
            if left is None:
                out[k] = max(begins[k], end)
                continue
            take = min(waiting[k], -(-left // busy)) if waiting[k] else 0  # an even share of what is left
            busy -= 1 if waiting[k] else 0
            left -= take
            out[k] = begins[k] + take
        return nested(out)

    def _check_loss(self, begins: Offsets, bounds: Mapping[tuple[str, int], tuple[int, int]]) -> None:
        """``failOnDataLoss``: refuse to go on when retention removed messages the stream had not read (else,
        as a RocketMQ consumer whose offset is too small, it reads on from the queue's min offset)."""
        if not self.options.fail_on_data_loss:
            return
        for (topic, q), begin in sorted(begins.items()):
            lo = bounds.get((topic, q), (0, 0))[0]
            if begin < lo:
                raise OffsetError(
                    "failOnDataLoss",
                    f"{topic}/{q}: offsets {begin} to {lo - 1} were removed (retention) before the stream read "
                    "them; failOnDataLoss=false reads on from the queue's min offset",
                    value=True,
                )

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        n = self.options.max_messages_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    # ---- reading -------------------------------------------------------------------------------
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """The commitlog files holding the batch's units, cut into runs of about equal size: a batch reads
        each file once, whichever topics and queues its messages belong to. Units retention removed are
        skipped."""
        begins, stops = self._flat(start), self._flat(end)
        ctx = self._context()
        lows = {k: lo for k, (lo, _) in queue_bounds(ctx, self.queues).items()}
        ranges = []
        for (topic, q), stop in sorted(stops.items()):
            begin = max(begins.get((topic, q), stop), lows.get((topic, q), 0))
            if stop > begin:
                ranges.append((topic, q, begin, stop))
        if not ranges:
            return []
        cq = ctx.tables.consume_queue
        actions = add_actions(cq.snapshot())
        ends = []
        for topic, q, begin, stop in ranges:
            queue = Table.only(actions, {"topic": topic, "queue_id": q})
            for at in (begin, stop - 1):
                ends.append(read_units(cq, queue, at, at + 1).column("commitlog_offset").to_pylist())
        found = [o for pair in ends for o in pair]
        lo = min(found) if len(found) == len(ends) else 0
        hi = max(found) if len(found) == len(ends) else 2**62
        commitlog = ctx.tables.commitlog
        kept = commitlog.prune(add_actions(commitlog.snapshot()), Prune(between={"physical_offset": (lo, hi)}))
        paths = commitlog.paths(kept)
        runs = contiguous_groups(
            paths,
            kept.column("size_bytes").to_pylist() if "size_bytes" in kept.column_names else [1] * len(paths),
            min(len(paths), MAX_SCAN_PARTITIONS),
        )
        return [BatchFiles(tuple(run), lo, hi, tuple(ranges)) for run in runs if run]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The partition's rows: its files' row groups decoded once (those whose statistics leave no row of
        the batch skipped), cut to the batch's rows by numpy masks, then each topic's exact check."""
        if not isinstance(partition, BatchFiles):
            return  # Spark's one empty partition when a batch has none
        ctx = self._context()
        topics = sorted({t for t, _, _, _ in partition.queues})
        filters = {}
        for topic in topics:
            sub = self.subscriptions[topic]
            filters[topic] = MessageFilter(topic, sub.selector, sub)
        schema = output_schema(self.schema) or MESSAGES
        rows_of = functools.partial(_batch_rows, partition, filters)
        for batch in ctx.tables.commitlog.scan(list(partition.paths), prune=_prune(partition, filters), keep=rows_of):
            rows = pa.Table.from_batches([batch])
            for topic, flt in filters.items():
                mine = rows.filter(pc.equal(rows.column("topic"), topic)) if len(filters) > 1 else rows
                keep = _exact(flt, mine)
                if keep is not None:
                    mine = mine.filter(keep)
                if mine.num_rows:
                    yield from mine.select(schema.names).cast(schema).to_batches()

    def commit(self, end: dict) -> None:
        if self.options.commit_offsets and end:
            self._context().offsets.commit_many(self.group, self._flat(end))


def _prune(partition: BatchFiles, filters: Mapping[str, MessageFilter]) -> pc.Expression:
    """What a micro-batch's row groups must be able to hold, for their statistics: its commitlog offsets, its
    topics and, for a tag selector, its tags (clustered files keep a tag's rows together)."""
    either = None
    for topic, flt in filters.items():
        mine = pc.field("topic") == topic
        tags = flt.commitlog_expression() if flt.selector.by_tags and not flt.tags_all else None
        mine = mine if tags is None else mine & tags
        either = mine if either is None else either | mine
    return (pc.field("physical_offset") >= partition.low) & (pc.field("physical_offset") <= partition.high) & either


def _batch_rows(partition: BatchFiles, filters: Mapping[str, MessageFilter], batch: pa.RecordBatch) -> np.ndarray:
    """The rows of ``batch`` the micro-batch reads: queued messages in its offsets' ranges passing their
    topic's tag test, as a numpy mask (the tasks' part of :func:`_prune`, tested row by row)."""
    offsets = batch.column("physical_offset").to_numpy()
    keep = (offsets >= partition.low) & (offsets <= partition.high)
    keep &= queued_mask(batch.column("sysflag")).to_numpy(zero_copy_only=False)
    keep &= ranges_mask(batch, partition.queues)
    for topic, flt in filters.items():
        tags = flt.commitlog_tags_mask(batch) if flt.selector.by_tags and not flt.tags_all else None
        if tags is not None:
            passed = pc.fill_null(tags, False).to_numpy(zero_copy_only=False)
            if len(filters) > 1:  # other topics' rows are not this one's to test
                passed |= pc.fill_null(pc.not_equal(batch.column("topic"), topic), True).to_numpy(zero_copy_only=False)
            keep &= passed
    return keep


def _exact(flt: MessageFilter, rows: pa.Table) -> pa.Array | None:
    """Stage 2 over commitlog rows, beyond what the scan's predicate already tested (the topic, the ranges and a
    tag or class selector's tags): a SQL92 selector's check, a class selector's class; None when nothing is left
    to test (the rows pass as read, with no copy)."""
    check = flt.commitlog_check()
    keep = check(rows) if check is not None else None
    cf = flt.class_filter
    if cf is not None and rows.num_rows:
        kept = rows if keep is None else rows.filter(keep)
        decided = kept.column("physical_offset").filter(pa.array(cf.match_rows(kept), pa.bool_()))
        in_class = pc.is_in(rows.column("physical_offset"), decided)
        keep = in_class if keep is None else pc.and_(keep, in_class)
    return keep
