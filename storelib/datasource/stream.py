"""Structured Streaming reads of the ``rocketmq`` source: a consumer group consuming one topic.

Details: ``docs/internals.md``, section storelib.datasource.stream.

>>> _ = store.subscribe("GroupS", "TopicTest", "TagA")
>>> reader = GroupStreamReader(SourceOptions.parse({"store": store.root, "group": "GroupS", "topic": "TopicTest"},
...                                                streaming=True), None)
>>> start = reader.initialOffset(); end = reader.latestOffset(start, None)
>>> end[str(r.queue_id)], sum(end.values())
(1, 1)
>>> [b.column("msg_id").to_pylist() for p in reader.partitions(start, end) for b in reader.read(p)] == [[r.msg_id]]
True
>>> reader.commit(end); store.committed_offset("GroupS", "TopicTest", r.queue_id)    # Spark committed the batch
1
>>> reader.getDefaultReadLimit()                                  # no maxMessagesPerTrigger
ReadAllAvailable()
>>> reader.prepareForTriggerAvailableNow(); reader.latestOffset(end, None) == end   # Trigger.AvailableNow's end
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from storelib.context import StoreContext
from storelib.datasource.batch import MAX_SCAN_PARTITIONS, output_schema
from storelib.datasource.options import MESSAGES, SourceOptions
from storelib.delta.log import add_actions
from storelib.delta.spark_read import contiguous_groups
from storelib.delta.stats import Prune
from storelib.delta.table import Table
from storelib.filter.message_filter import MessageFilter
from storelib.filter.sql92.arrow import evaluate_batch
from storelib.model.config import StoreConfig
from storelib.model.errors import SubscriptionNotFoundError
from storelib.storage.consume_queue import max_offsets, min_queue_marker, queue_files, queue_min_offset, read_units
from storelib.storage.dispatched import queued_expression

__all__ = ["GroupStreamReader", "BatchFiles"]

try:  # PySpark 4.2+
    from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow as _AvailableNow
except ImportError:  # pragma: no cover
    _AvailableNow = object  # type: ignore[assignment,misc]


@dataclass(frozen=True)
class BatchFiles(InputPartition):
    """One task of a micro-batch: the commitlog files ``paths``, of which it reads the rows between the
    commitlog offsets ``low`` and ``high`` whose queue offsets fall in ``queues`` ((queue_id, begin, end))."""

    paths: tuple[str, ...]
    low: int
    high: int
    queues: tuple[tuple[int, int, int], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", None)


class GroupStreamReader(DataSourceStreamReader, _AvailableNow):
    """A group's stream over one topic (see the module's description)."""

    def __init__(self, options: SourceOptions, schema: StructType | None) -> None:
        self.options = options
        self.schema = schema
        self.group, self.topic = str(options.group), str(options.topic)
        ctx = self._context()
        self.queues = ctx.topics.get(self.topic).read_queue_nums
        subscription = ctx.registry.current().get((self.group, self.topic))
        if subscription is None:
            raise SubscriptionNotFoundError(
                "group",
                f"group {self.group} does not subscribe to {self.topic}: "
                "store.subscribe(group, topic, expression) first",
                value=self.group,
            )
        self.selector = subscription.selector
        self.subscription = subscription

    def _context(self) -> StoreContext:
        return StoreContext.build(self.options.store, None, StoreConfig())  # type: ignore[arg-type]  # no Spark here

    # ---- offsets -------------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        ctx = self._context()
        bounds = self._bounds(ctx)
        start = {}
        for q, (lo, hi) in bounds.items():
            if self.options.starting_offsets == "latest":
                start[str(q)] = hi
            elif self.options.starting_offsets == "earliest":
                start[str(q)] = lo
            else:
                committed = ctx.offsets.query(self.group, self.topic, q)
                start[str(q)] = lo if committed < 0 else min(max(committed, lo), hi)
        self._initial = start
        return start

    def prepareForTriggerAvailableNow(self) -> None:
        """``Trigger.AvailableNow``: read up to what is there now, in batches of ``maxMessagesPerTrigger``."""
        self._until = {str(q): hi for q, (_, hi) in self._bounds(self._context()).items()}

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:
        """The next batch's end. Spark asks from a batch's end only after writing that batch to its commit
        log, so ``start`` is committed for the group here: when a query ends (``Trigger.AvailableNow``'s last
        ask finds nothing new), the group's offsets equal the checkpoint's, where ``commit(end)`` alone (called
        when Spark plans the next batch) leaves them one batch behind."""
        ends = getattr(self, "_until", None) or {str(q): hi for q, (_, hi) in self._bounds(self._context()).items()}
        if start is None:
            return ends
        if start != getattr(self, "_initial", None):
            self.commit(start)  # Spark plans from ``start`` only once its checkpoint's commit log holds it
        budget = getattr(limit, "max_rows", None)
        if budget is None and limit is None:
            budget = self.options.max_messages_per_trigger
        out = {}
        waiting = {q: max(0, ends[q] - int(start.get(q, ends[q]))) for q in ends}
        left = budget
        busy = sum(1 for n in waiting.values() if n)
        for q, end in ends.items():
            begin = int(start.get(q, end))
            if left is None:
                out[q] = end
                continue
            take = min(waiting[q], -(-left // busy)) if waiting[q] else 0  # an even share of what is left
            busy -= 1 if waiting[q] else 0
            left -= take
            out[q] = begin + take
        return out

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        n = self.options.max_messages_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def _bounds(self, ctx: StoreContext) -> dict[int, tuple[int, int]]:
        cq = ctx.tables.consume_queue
        view = cq.view(markers=[min_queue_marker(self.topic, q) for q in range(self.queues)])
        highs = max_offsets(view.actions)
        return {
            q: (
                queue_min_offset(
                    view.markers.get(min_queue_marker(self.topic, q)), queue_files(cq, view, self.topic, q)
                ),
                highs.get((self.topic, q), 0),
            )
            for q in range(self.queues)
        }

    # ---- reading -------------------------------------------------------------------------------
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """The commitlog files holding the batch's units, cut into runs of about equal size: a batch reads
        each file once, whichever queues its messages belong to."""
        ranges = tuple(
            (int(q), int(start.get(q, hi)), int(hi))
            for q, hi in sorted(end.items(), key=lambda kv: int(kv[0]))
            if int(hi) > int(start.get(q, hi))
        )
        if not ranges:
            return []
        ctx = self._context()
        cq = ctx.tables.consume_queue
        actions = add_actions(cq.snapshot())
        ends = []
        for q, begin, stop in ranges:
            queue = Table.only(actions, {"topic": self.topic, "queue_id": q})
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
        return [BatchFiles(tuple(run), lo, hi, ranges) for run in runs if run]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, BatchFiles):
            return  # Spark's one empty partition when a batch has none
        ctx = self._context()
        flt = MessageFilter(self.topic, self.selector, self.subscription)
        where = (
            (pc.field("topic") == self.topic)
            & queued_expression()
            & (pc.field("physical_offset") >= partition.low)
            & (pc.field("physical_offset") <= partition.high)
        )
        queues = None
        for q, begin, stop in partition.queues:
            one = (pc.field("queue_id") == q) & (pc.field("queue_offset") >= begin) & (pc.field("queue_offset") < stop)
            queues = one if queues is None else queues | one
        tags = flt.commitlog_expression() if flt.selector.by_tags and not flt.tags_all else None
        if tags is not None:
            where = where & tags  # lets clustered files skip row groups by their tags
        schema = output_schema(self.schema) or MESSAGES
        for batch in ctx.tables.commitlog.scan(list(partition.paths), where & queues):
            rows = pa.Table.from_batches([batch])
            rows = rows.filter(_exact(flt, rows))
            if rows.num_rows:
                yield from rows.select(schema.names).cast(schema).to_batches()

    def commit(self, end: dict) -> None:
        if self.options.commit_offsets and end:
            self._context().offsets.commit_many(self.group, {(self.topic, int(q)): int(o) for q, o in end.items()})


def _exact(flt: MessageFilter, rows: pa.Table) -> pa.Array:
    """Stage 2 over commitlog rows: what a consumer of the group keeps."""
    n = rows.num_rows
    selector = flt.selector
    keep = pa.array(np.ones(n, dtype=bool))
    if selector.by_tags and not flt.tags_all and flt.data.tags_set:
        keep = pc.fill_null(pc.is_in(rows.column("tags"), pa.array(sorted(flt.data.tags_set), pa.string())), False)
    if selector.is_sql92:
        keep = pc.fill_null(evaluate_batch(flt.sql.tree, rows.column("properties")), False)
    cf = flt.class_filter
    if cf is not None and n:
        kept = rows.filter(keep)
        decided = kept.column("physical_offset").filter(pa.array(cf.match_rows(kept), pa.bool_()))
        keep = pc.and_(keep, pc.is_in(rows.column("physical_offset"), decided))
    return keep
