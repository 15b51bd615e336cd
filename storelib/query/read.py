"""Reading a topic through a selector: the consume queue first, the commitlog second.

:func:`read_topic` is ``store.read(topic, selector | group=)``. It plans three steps, all Spark
work except the file choice:

1. **files** - the topic's ``consume_queue_ext`` files, minus those whose summary proves that no
   unit can pass (:meth:`MessageFilter.may_skip_file`: Bloom bits or tag codes); plus the
   ``consume_queue`` files that may hold units without an ext row (their tag-code statistics reach
   above ``MAX_ADDR``);
2. **consume queue match** - each unit's real tag code against the code set, or the group's Bloom
   bits against its bitmap (:meth:`MessageFilter.consume_queue_column`);
3. **commitlog match** - the passing units say where in the commitlog their messages are: one
   small Spark job buckets their offsets into a few ranges (1 MiB buckets, at most 64 ranges), and
   only commitlog files and Parquet row groups overlapping those ranges are read. There every
   dispatched message is kept where the exact check holds (tag string, or SQL92 predicate), so the
   answer never depends on how well step 2 pruned. When the passing units are everywhere, the
   ranges are dropped and the topic's files are read whole: in a columnar store, cutting a file
   into thousands of ranges costs more than scanning it.

Only file lists and bucket numbers reach the driver. :func:`filter_stats` runs the same plan with
counters: units checked, skipped by file summaries, pruned by bitmap, and messages matched.

>>> store.read("TopicTest", MessageSelector.by_tag("TagA")).count()
1
>>> stats = store.filter_stats("GroupA", "TopicTest")
>>> stats.checked, stats.matched
(1, 1)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column

from storelib.context import StoreContext
from storelib.delta.table import Prune, Table
from storelib.encoding.ext_addr import MAX_EXT_ADDR
from storelib.filter.message_filter import MessageFilter
from storelib.filter.selector import MessageSelector
from storelib.filter.summary import read_summaries

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    pass

__all__ = ["ReadPlan", "FilterStats", "plan_read", "read_topic", "filter_stats"]

#: Granularity, in commitlog bytes, of the ranges a filtered read cuts the commitlog into.
RANGE_BUCKET = 1 << 20
#: More buckets than this: matches are everywhere, read the files whole.
MAX_BUCKETS = 4096
#: Up to this many units, the passing ones are found with pyarrow on the driver instead of a Spark job.
LOCAL_UNITS = 4_000_000
#: At most this many ranges go into the read's predicate (close ones are joined).
MAX_RANGES = 64
#: Ranges covering more than this share of the commitlog: read the files whole.
COVERAGE_LIMIT = 0.5

_UNIT_COLUMNS = ("topic", "queue_id", "queue_offset", "commitlog_offset", "tags_code", "filter_bitmap",
                 "filter_version")


@dataclass
class ReadPlan:
    """What a filtered read will open: unit files (ext and plain consume queue) and commitlog files.

    >>> plan = plan_read(store.context, "TopicTest", "TagA")
    >>> len(plan.commitlog_files()), plan.units(spark).count(), plan.commitlog_ranges(spark)
    (1, 1, None)
    """

    filter: MessageFilter
    ext_files: list[str]
    cq_files: list[str]
    commitlog: Table
    #: Add actions of the commitlog files overlapping the planned unit files.
    commitlog_actions: pa.Table
    units_total: int
    units_skipped: int
    files_skipped: int
    #: Commitlog offset up to which both consume queue tables are dispatched.
    end: int = 2**63 - 1

    def commitlog_files(self, ranges: list[tuple[int, int]] | None = None) -> list[str]:
        """The planned commitlog files, or only those overlapping ``ranges``."""
        actions = self.commitlog_actions if ranges is None else _overlapping(self.commitlog_actions, ranges)
        return [self.commitlog.path_of(p) for p in actions.column("path").to_pylist()] if actions.num_rows else []

    def units(self, spark) -> "DataFrame":
        """Every unit of the planned files with its real tag code, bitmap and filter version."""
        from pyspark.sql import functions as F

        from storelib.delta.spec import spark_schema
        from storelib.encoding.ext_addr import is_ext_addr_column as is_ext_addr
        from storelib.storage.schema import CONSUME_QUEUE, CONSUME_QUEUE_EXT

        parts = []
        if self.ext_files:
            parts.append(spark.read.schema(spark_schema(CONSUME_QUEUE_EXT.arrow)).parquet(*self.ext_files)
                         .select(*_UNIT_COLUMNS))
        if self.cq_files:
            cq = spark.read.schema(spark_schema(CONSUME_QUEUE.arrow)).parquet(*self.cq_files)
            parts.append(cq.where(~is_ext_addr(F.col("tags_code"))).select(
                "topic", "queue_id", "queue_offset", "commitlog_offset", "tags_code",
                F.lit(None).cast("binary").alias("filter_bitmap"), F.lit(None).cast("long").alias("filter_version")))
        if not parts:
            return spark.createDataFrame([], ", ".join(f"{c} {t}" for c, t in zip(_UNIT_COLUMNS, (
                "string", "int", "long", "long", "long", "binary", "long"))))
        units = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
        return units.where(F.col("topic") == self.filter.topic)

    def commitlog_ranges(self, spark, bucket: int = RANGE_BUCKET) -> list[tuple[int, int]] | None:
        """Where in the commitlog the units passing the consume queue stage are, as a few offset ranges.

        One Spark job: the passing units' offsets, bucketed by :data:`RANGE_BUCKET` bytes, distinct.
        ``None`` when they are everywhere (more than :data:`MAX_BUCKETS` buckets, or most of the
        topic's span): then reading the planned files whole is cheaper than cutting them up.
        """
        if self.units_total - self.units_skipped <= LOCAL_UNITS:
            found = self._local_buckets(bucket)
        else:
            from pyspark.sql import functions as F

            passing = self.units(spark).where(self.filter.consume_queue_column())
            buckets = passing.select(F.floor(F.col("commitlog_offset") / bucket).alias("b")).distinct()
            found = sorted(r.b for r in buckets.limit(MAX_BUCKETS + 1).collect())
        if len(found) > MAX_BUCKETS:
            return None
        if not found:
            return []
        ranges = [[found[0], found[0]]]
        for b in found[1:]:
            if b == ranges[-1][1] + 1:
                ranges[-1][1] = b
            else:
                ranges.append([b, b])
        while len(ranges) > MAX_RANGES:  # join the two ranges with the smallest gap between them
            gap = min(range(len(ranges) - 1), key=lambda i: ranges[i + 1][0] - ranges[i][1])
            ranges[gap:gap + 2] = [[ranges[gap][0], ranges[gap + 1][1]]]
        covered = sum(hi - lo + 1 for lo, hi in ranges)
        span = self.end // bucket + 1 if self.end < 2**62 else 2**40  # buckets of the dispatched commitlog
        if covered > COVERAGE_LIMIT * span:
            return None
        return [(lo * bucket, (hi + 1) * bucket - 1) for lo, hi in ranges]


    def _local_buckets(self, bucket: int) -> list[int]:
        """The buckets of passing units, read with pyarrow on this process (small unit sets: no Spark job)."""
        import pyarrow.dataset as ds

        from storelib.storage.schema import CONSUME_QUEUE, CONSUME_QUEUE_EXT

        cols = ["topic", "commitlog_offset", "tags_code", "filter_bitmap", "filter_version"]
        parts = []
        topic = pc.field("topic") == self.filter.topic
        if self.ext_files:
            parts.append(ds.dataset(self.ext_files, schema=CONSUME_QUEUE_EXT.arrow, format="parquet")
                         .to_table(columns=cols, filter=topic))
        if self.cq_files:
            cq = ds.dataset(self.cq_files, schema=CONSUME_QUEUE.arrow, format="parquet").to_table(
                columns=["topic", "commitlog_offset", "tags_code"], filter=topic & (pc.field("tags_code") > MAX_EXT_ADDR))
            parts.append(cq.append_column("filter_bitmap", pa.nulls(cq.num_rows, pa.binary()))
                         .append_column("filter_version", pa.nulls(cq.num_rows, pa.int64())))
        if not parts:
            return []
        units = pa.concat_tables(parts)
        offsets = units.column("commitlog_offset").to_numpy()[self.filter.consume_queue_mask(units)]
        return np.unique(offsets // bucket).tolist()


def plan_read(ctx: StoreContext, topic: str, selector: MessageSelector | str | None = None,
              group: str | None = None) -> ReadPlan:
    """Choose the files a filtered read of ``topic`` opens (see the module's steps 1 and 3).

    >>> plan = plan_read(store.context, "TopicTest", group="GroupA")
    >>> len(plan.commitlog_files()), plan.filter.passes_every_unit
    (1, False)
    """
    ctx.topics.get(topic)
    if group is not None:
        sub = ctx.registry.get(group, topic)
        if selector is not None and MessageSelector.of(selector) != sub.selector:
            from storelib.model.errors import FilterError

            raise FilterError("selector", "give a selector or a group, not both: the group's subscription is "
                              f"{sub.selector.expression!r}", value=MessageSelector.of(selector).expression)
        selector = sub.selector
    else:
        sub = None
    selector = MessageSelector.of(selector)
    ctx.registry.check(topic, selector)
    mf = MessageFilter(topic, selector, sub, ctx.registry.bloom_filter)

    from storelib.dispatch.reput import REPUT_MARKER

    ext, cq, clog = ctx.tables.consume_queue_ext, ctx.tables.consume_queue, ctx.tables.commitlog
    ext_view, cq_view = ext.view(markers=[REPUT_MARKER]), cq.view(markers=[REPUT_MARKER])
    of_topic = Prune(equal={"topic": topic})
    ext_actions = Table.prune(ext_view.actions, of_topic)
    summaries = read_summaries(ctx.tables.ext_summary, topic) if ext_actions.num_rows else {}
    keep = np.array([not (p in summaries and mf.may_skip_file(summaries[p]))
                     for p in ext_actions.column("path").to_pylist()], dtype=bool)
    records = _column(ext_actions, "num_records", 0)
    skipped = ext_actions.filter(pa.array(~keep))
    ext_actions = ext_actions.filter(pa.array(keep))
    cq_actions = Table.prune(cq_view.actions, of_topic)
    cq_actions = cq_actions.filter(pc.fill_null(pc.greater(cq_actions.column("max.tags_code"), MAX_EXT_ADDR), True)) \
        if cq_actions.num_rows else cq_actions
    ranges = [(lo, hi) for a in (ext_actions, cq_actions) if a.num_rows
              for lo, hi in zip(a.column("min.commitlog_offset").to_pylist(), a.column("max.commitlog_offset").to_pylist())]
    end = min(cq_view.marker(REPUT_MARKER), ext_view.marker(REPUT_MARKER))
    return ReadPlan(mf, [ext.path_of(p) for p in ext_actions.column("path").to_pylist()],
                    [cq.path_of(p) for p in cq_actions.column("path").to_pylist()],
                    clog, _overlapping(clog.view().actions, ranges), int(records.sum()) + int(_column(cq_actions, "num_records", 0).sum()),
                    int(_column(skipped, "num_records", 0).sum()), skipped.num_rows, end)


def read_topic(ctx: StoreContext, topic: str, selector: MessageSelector | str | None = None,
               group: str | None = None) -> "DataFrame":
    """The topic's dispatched messages that match ``selector`` (or ``group``'s subscription), as commitlog rows.

    >>> read_topic(store.context, "TopicTest", "TagA || TagZ").select("msg_id").first().msg_id == r.msg_id
    True
    """
    from pyspark.sql import functions as F

    from storelib.delta.spec import spark_schema
    from storelib.dispatch.reput import queued
    from storelib.storage.schema import COMMITLOG

    plan = plan_read(ctx, topic, selector, group)
    spark = ctx.spark
    ranges = None
    if plan.commitlog_actions.num_rows and not plan.filter.matches_all:
        ranges = plan.commitlog_ranges(spark)
    files = plan.commitlog_files(ranges)
    if not files:
        return spark.createDataFrame([], spark_schema(COMMITLOG.arrow))
    messages = spark.read.schema(spark_schema(COMMITLOG.arrow)).parquet(*files)
    messages = queued(messages.where((F.col("topic") == topic) & (F.col("physical_offset") < plan.end)))
    if ranges is not None:
        messages = messages.where(reduce(Column.__or__, [F.col("physical_offset").between(lo, hi) for lo, hi in ranges]))
    return messages.where(plan.filter.commitlog_column())


@dataclass(frozen=True)
class FilterStats:
    """How a group's subscription filters its topic now: per stage, how many units or messages.

    >>> stats = store.filter_stats("GroupA", "TopicTest")
    >>> stats.checked, stats.matched, stats.false_positives
    (1, 1, 0)
    """

    group: str | None
    topic: str
    expression: str
    #: Consume queue units of the topic (every dispatched message).
    checked: int
    #: Units never opened: their ext file's summary ruled them out.
    skipped_by_file: int
    #: Units opened and ruled out by the Bloom bitmap (SQL92) or the tag code (tags).
    pruned_by_bitmap: int
    #: Units that passed the consume queue stage and had their message read.
    passed_consume_queue: int
    #: Messages that matched exactly.
    matched: int

    @property
    def false_positives(self) -> int:
        """Units the consume queue stage let through that the exact check then refused."""
        return self.passed_consume_queue - self.matched


def filter_stats(ctx: StoreContext, topic: str, selector: MessageSelector | str | None = None,
                 group: str | None = None) -> FilterStats:
    """Count what each stage of a filtered read of ``topic`` does (one Spark job)."""
    from pyspark.sql import functions as F

    plan = plan_read(ctx, topic, selector, group)
    spark = ctx.spark
    units = plan.units(spark).withColumn("_pass", plan.filter.consume_queue_column())
    messages = ctx.tables.commitlog.read(spark, prune=Prune(equal={"topic": topic}))
    joined = units.join(messages.select("physical_offset", "tags", "properties"),
                        units.commitlog_offset == messages.physical_offset, "left")
    exact = F.coalesce(plan.filter.commitlog_column(), F.lit(False))
    row = joined.agg(F.count(F.lit(1)).alias("opened"), F.count_if(~F.col("_pass")).alias("pruned"),
                     F.count_if(F.col("_pass")).alias("passed"),
                     F.count_if(F.col("_pass") & exact).alias("matched")).first()
    return FilterStats(group, topic, plan.filter.selector.expression, plan.units_total, plan.units_skipped,
                       int(row["pruned"]), int(row["passed"]), int(row["matched"]))


def _column(actions: pa.Table, name: str, default: int) -> np.ndarray:
    if actions.num_rows == 0 or name not in actions.column_names:
        return np.zeros(0, dtype=np.int64)
    return np.asarray(pc.fill_null(actions.column(name), default).to_numpy(zero_copy_only=False), dtype=np.int64)


def _overlapping(actions: pa.Table, ranges: list[tuple[int | None, int | None]]) -> pa.Table:
    """The commitlog add actions whose physical offsets overlap any of ``ranges`` (unknown bounds overlap all)."""
    if not ranges or actions.num_rows == 0:
        return actions.slice(0, 0)
    if any(lo is None or hi is None for lo, hi in ranges):
        return actions
    spans = sorted(ranges)
    merged = [list(spans[0])]
    for lo, hi in spans[1:]:
        if lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    starts = np.array([m[0] for m in merged], dtype=np.int64)
    ends = np.array([m[1] for m in merged], dtype=np.int64)
    flo = pc.fill_null(actions.column("min.physical_offset"), -2**63).to_numpy(zero_copy_only=False)
    fhi = pc.fill_null(actions.column("max.physical_offset"), 2**63 - 1).to_numpy(zero_copy_only=False)
    # A file [flo, fhi] overlaps a merged span when the last span starting at or before fhi ends at or after flo.
    idx = np.searchsorted(starts, fhi, side="right") - 1
    hit = (idx >= 0) & (ends[np.maximum(idx, 0)] >= flo)
    return actions.filter(pa.array(hit))
