"""Reading a topic through a selector: pruning from what the store already knows, then the exact check.

Details: ``docs/internals.md``, section storelib.query.read.

>>> store.read("TopicTest", MessageSelector.by_tag("TagA")).count()
1
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.context import StoreContext
from storelib.delta.spark_read import RowGroups, read_paths, read_row_groups
from storelib.delta.spec import spark_schema
from storelib.delta.stats import Prune
from storelib.delta.table import Table
from storelib.delta.watch import unwatched
from storelib.encoding.ext_addr import MAX_EXT_ADDR
from storelib.encoding.ext_addr import is_ext_addr_column as is_ext_addr
from storelib.filter.message_filter import MessageFilter
from storelib.filter.selector import MessageSelector
from storelib.filter.subscription import check_selector
from storelib.model.errors import FilterError
from storelib.model.message import SysFlag
from storelib.query.class_scan import read_kept
from storelib.query.seq_ranges import any_between, cap, merged
from storelib.storage.commitlog import is_clustered
from storelib.storage.dispatched import REPUT_MARKER, queued, queued_expression
from storelib.storage.schema import COMMITLOG, CONSUME_QUEUE, CONSUME_QUEUE_EXT
from storelib.storage.summaries import read_row_group_summaries, read_summaries

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "ReadPlan",
    "ReadExplain",
    "plan_read",
    "read_topic",
    "explain_read",
    "PRUNE_LIMIT",
    "ROW_GROUP_LIMIT",
    "MAX_RANGES",
]

#: Pruning pays when it reads at most this share of the plain scan's bytes; above it, the plain scan runs.
PRUNE_LIMIT = 0.8
#: Kept clustered row groups are read by pyarrow tasks of their own (:mod:`storelib.delta.spark_read`) when
#: they are at most this share of the scan's bytes; above it Spark's vectorized reader, given the
#: ``cluster_seq`` ranges, is cheaper per byte than handing rows from Python to Spark.
ROW_GROUP_LIMIT = 0.05
#: At most this many ``cluster_seq`` ranges go into a read's pushed-down predicate (the closest are joined).
MAX_RANGES = 512

_UNIT_COLUMNS = (
    "topic",
    "queue_id",
    "queue_offset",
    "commitlog_offset",
    "tags_code",
    "filter_bitmap",
    "filter_version",
)


@dataclass(frozen=True)
class ReadExplain:
    """A filtered read's plan as data: what it considers, skips and reads, and why.

    >>> e = store.explain_read("TopicTest", MessageSelector.by_tag("TagA"))
    >>> e.choice, e.files_considered, e.files_read
    ('scan', 1, 1)
    """

    topic: str
    expression: str
    #: ``prune`` (reads only what summaries cannot rule out) or ``scan`` (the plain scan with the exact check).
    choice: str
    reason: str
    #: Commitlog files of the topic (by statistics), and those the read opens.
    files_considered: int
    files_read: int
    #: Fresh files ruled out because no consume queue file that may match points into them (by its
    #: consume_queue_ext summary, or for a tag selector by its tag code statistics).
    files_skipped_by_summary: int
    #: Row groups of clustered files: considered, ruled out by tag codes, by bitmap summaries, read.
    row_groups_considered: int
    row_groups_skipped_by_statistics: int
    row_groups_skipped_by_bitmap: int
    row_groups_read: int
    #: ``cluster_seq`` ranges pushed down to the Parquet reader (0 when the kept row groups are read by
    #: pyarrow tasks, ``reader == "row groups"``).
    ranges: int
    #: Estimated bytes read, and the plain scan's bytes.
    estimated_bytes: int
    scan_bytes: int
    #: How clustered files are read: ``spark`` (Spark's Parquet reader) or ``row groups`` (only the kept
    #: row groups, by pyarrow tasks).
    reader: str = "spark"
    #: A SQL92 expression as Spark SQL (:attr:`~storelib.filter.sql92.Sql92Expression.spark_sql`), for display.
    spark_sql: str | None = None

    def __str__(self) -> str:
        pct = 100 * self.estimated_bytes / max(1, self.scan_bytes)
        skipped = (
            f"{self.row_groups_skipped_by_statistics} skipped by tag codes, "
            f"{self.row_groups_skipped_by_bitmap} by bitmap summaries"
        )
        return "\n".join(
            [
                f"read {self.topic} where {self.expression}: {self.choice.upper()} ({self.reason})",
                *([f"  spark sql   {self.spark_sql}"] if self.spark_sql is not None else []),
                f"  files       {self.files_considered} considered, {self.files_skipped_by_summary} skipped by "
                f"consume_queue_ext summaries, {self.files_read} read",
                f"  row groups  {self.row_groups_considered} clustered, {skipped}, {self.row_groups_read} read "
                + (
                    " by pyarrow tasks"
                    if self.reader == "row groups"
                    else f" ({self.ranges} cluster_seq ranges)"
                    if self.ranges
                    else ""
                ),
                f"  estimate    {self.estimated_bytes:,} of the scan's {self.scan_bytes:,} bytes ({pct:.1f}%)",
            ]
        )


@dataclass
class ReadPlan:
    """What a filtered read will open: clustered files with the ``cluster_seq`` ranges of their kept
    row groups, and fresh files (see the module docstring).

    >>> plan = plan_read(store.context, "TopicTest", "TagA")
    >>> len(plan.commitlog_files()), plan.units(spark).count(), plan.choice
    (1, 1, 'scan')
    """

    filter: MessageFilter
    commitlog: Table
    #: Commitlog offset up to which both consume queue tables are dispatched.
    end: int
    #: Add actions of the clustered files to read, and the ``cluster_seq`` ranges to read in them (None: whole).
    clustered_actions: pa.Table
    ranges: list[tuple[int, int]] | None
    #: Add actions of the fresh (append-order) commitlog files to read.
    fresh_actions: pa.Table
    #: The consume queue files the fresh part's choice came from
    #: (for :func:`~storelib.query.filter_stats.filter_stats`).
    ext_files: list[str]
    cq_files: list[str]
    units_total: int
    units_skipped: int
    files_skipped: int
    choice: str = "scan"
    reason: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    #: The kept row groups of each clustered file to read, when pyarrow tasks read them
    #: (:data:`ROW_GROUP_LIMIT`); None when Spark reads the clustered files with :attr:`ranges`.
    row_groups: list[RowGroups] | None = None

    def commitlog_files(self) -> list[str]:
        """Every commitlog file the read opens, clustered and fresh."""
        return self.commitlog.paths(self.clustered_actions) + self.commitlog.paths(self.fresh_actions)

    def explain(self) -> ReadExplain:
        c = self.counts
        return ReadExplain(
            self.filter.topic,
            self.filter.selector.expression,
            self.choice,
            self.reason,
            c["files_considered"],
            len(self.commitlog_files()),
            c.get("fresh_skipped", 0),
            c["row_groups"],
            c["skipped_by_statistics"],
            c["skipped_by_bitmap"],
            c["row_groups_read"],
            0 if self.row_groups is not None else len(self.ranges or ()),
            c["estimated_bytes"],
            c["scan_bytes"],
            "spark" if self.row_groups is None else "row groups",
            None if self.filter.sql is None else self.filter.sql.spark_sql,
        )

    def dataframe(self, spark) -> "DataFrame":
        """The rows the plan reads, with the exact check (every message read is tested); a class
        selector's class runs on the executors over the same rows (:meth:`class_scan`)."""
        from pyspark.sql import functions as F

        if self.filter.class_filter is not None:
            return read_kept(spark, self.filter.class_filter, self.commitlog.path, *self.class_scan())
        schema = spark_schema(COMMITLOG.arrow)
        parts = []
        if self.row_groups is not None and self.clustered_actions.num_rows:  # already cut to the topic's rows
            # the exact check runs in the tasks (a tag selector's in arrow_rows, a SQL92 one's as the commitlog
            # check): only the rows that pass reach Spark
            check = self.filter.commitlog_check()
            parts.append(read_row_groups(spark, COMMITLOG.arrow, self.row_groups, self.arrow_rows(), check))
        elif self.clustered_actions.num_rows:
            df = self.commitlog.read_files(spark, self.clustered_actions)
            if self.ranges is not None:
                df = df.where(any_between(F.col("cluster_seq"), self.ranges, F.lit))
            parts.append(self._of_topic(df, self.clustered_actions))
        if self.fresh_actions.num_rows:
            df = self.commitlog.read_files(spark, self.fresh_actions)
            parts.append(self._of_topic(df, self.fresh_actions))
        if not parts:
            return spark.createDataFrame([], schema)
        return parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])

    def _of_topic(self, df: "DataFrame", actions: pa.Table) -> "DataFrame":
        """``df`` (Spark's read of the files ``actions`` names) cut to the topic's dispatched, queued rows
        that pass the exact check, which comes first (it fails most rows, and its tag test is the one
        pushed down). What every file's statistics already imply is left out: a pushed ``topic``
        predicate makes the Parquet reader fetch each row group's dictionary page (measured: 1,920 MiB
        read for 1,309 MiB of clustered files, whose row groups hold 1,024 rows), and a plain scan
        should cost what the same query written by hand costs."""
        from pyspark.sql import functions as F

        topic, end = self.filter.topic, self.end
        df = df.where(self.filter.commitlog_column())
        lows, highs = (_stat(actions, "min.topic"), _stat(actions, "max.topic"))
        if not all(lo == hi == topic for lo, hi in zip(lows, highs)):
            df = df.where(F.col("topic") == topic)
        if not all(top is not None and top < end for top in _stat(actions, "max.physical_offset")):
            df = df.where(F.col("physical_offset") < end)
        if not all(
            top is not None and top < SysFlag.TRANSACTION_PREPARED_TYPE for top in _stat(actions, "max.sysflag")
        ):
            df = queued(df)  # below the first transaction bit, every row is a normal message
        return df

    def class_scan(self) -> tuple[list[str], list]:
        """For a class selector: the files the executors read with pyarrow, each with its row filter -
        the topic, dispatched and queued rows, the exact tag check and, in clustered files, the kept
        row groups' ``cluster_seq`` ranges (the same rows :meth:`dataframe` reads for other selectors).

        >>> everything = MessageSelector.by_class("storelib.filter.class_filter:Everything")
        >>> plan = plan_read(store.context, "TopicTest", everything)
        >>> files, filters = plan.class_scan()
        >>> len(files), len(filters)
        (1, 1)
        """
        rows = self.arrow_rows()
        clustered = rows if self.ranges is None else rows & any_between(pc.field("cluster_seq"), self.ranges, pc.scalar)
        files = self.commitlog.paths(self.clustered_actions), self.commitlog.paths(self.fresh_actions)
        return files[0] + files[1], [clustered] * len(files[0]) + [rows] * len(files[1])

    def arrow_rows(self) -> pc.Expression:
        """The rows a read keeps, as a pyarrow expression: the topic's dispatched, queued messages that
        pass the selector's exact tag check (all of them for a SQL92 selector: its check is
        ``MessageFilter.commitlog_check``, run beside this one in the row group tasks).

        >>> rows = pa.table({"topic": ["TopicTest", "TopicTest", "Other", "TopicTest"],
        ...                  "tags": ["TagA", "TagA", "TagA", "TagB"],
        ...                  "physical_offset": [0, 10**12, 0, 0], "sysflag": [0, 0, 0, 0]})
        >>> # kept: not the undispatched one, the other topic's, nor TagB
        >>> rows.filter(plan_read(store.context, "TopicTest", "TagA").arrow_rows()).num_rows
        1
        """

        rows = (pc.field("topic") == self.filter.topic) & (pc.field("physical_offset") < self.end) & queued_expression()
        tags = None if self.filter.selector.is_sql92 else self.filter.commitlog_expression()
        return rows if tags is None else rows & tags

    def units(self, spark) -> "DataFrame":
        """Every unit of the topic's consume queue files with its real tag code, bitmap and filter version."""
        from pyspark.sql import functions as F

        parts = []
        if self.ext_files:
            parts.append(read_paths(spark, CONSUME_QUEUE_EXT.arrow, self.ext_files).select(*_UNIT_COLUMNS))
        if self.cq_files:
            cq = read_paths(spark, CONSUME_QUEUE.arrow, self.cq_files)
            parts.append(
                cq.where(~is_ext_addr(F.col("tags_code"))).select(
                    "topic",
                    "queue_id",
                    "queue_offset",
                    "commitlog_offset",
                    "tags_code",
                    F.lit(None).cast("binary").alias("filter_bitmap"),
                    F.lit(None).cast("long").alias("filter_version"),
                )
            )
        if not parts:
            return spark.createDataFrame(
                [],
                ", ".join(
                    f"{c} {t}"
                    for c, t in zip(_UNIT_COLUMNS, ("string", "int", "long", "long", "long", "binary", "long"))
                ),
            )
        units = parts[0] if len(parts) == 1 else parts[0].unionByName(parts[1])
        return units.where(F.col("topic") == self.filter.topic)


@unwatched()  # a batch read plans once: no thread need keep its tables current afterwards
def plan_read(
    ctx: StoreContext, topic: str, selector: MessageSelector | str | None = None, group: str | None = None
) -> ReadPlan:
    """Plan a filtered read of ``topic`` (see the module docstring); no Spark job.

    >>> plan = plan_read(store.context, "TopicTest", group="GroupA")
    >>> len(plan.commitlog_files()), plan.filter.passes_every_unit
    (1, False)
    """
    t = ctx.tables
    ext, cq, clog = t.consume_queue_ext, t.consume_queue, t.commitlog
    looks: list[tuple[Table, Iterable[str]]] = [(ext, [REPUT_MARKER]), (cq, [REPUT_MARKER]), (clog, ())]
    looks += [(t.commitlog_summary, ()), (t.topic_config, ())] + ([(t.subscription, ())] if group is not None else [])
    ext_view, cq_view, clog_view, *_ = Table.views(looks)  # looked at together, then read as they stand
    mf = _message_filter(ctx, topic, selector, group)
    end = min(cq_view.marker(REPUT_MARKER), ext_view.marker(REPUT_MARKER))
    of_topic = Prune(equal={"topic": topic})
    topic_files = Table.prune(clog_view.actions, of_topic)
    clustered_mask = pa.array([is_clustered(p) for p in topic_files.column("path").to_pylist()], pa.bool_())
    clustered = topic_files.filter(clustered_mask)
    fresh = topic_files.filter(pc.invert(clustered_mask))
    counts = {"files_considered": topic_files.num_rows, "scan_bytes": int(_column(topic_files, "size_bytes", 0).sum())}

    # the fresh tail: which consume queue files may hold a passing unit, and where they point
    ext_actions = Table.prune(ext_view.actions, of_topic)
    fresh_units = ext_actions.num_rows and fresh.num_rows and not mf.tags_all
    keep = np.ones(ext_actions.num_rows, dtype=bool)
    if fresh_units:
        summaries = read_summaries(ctx.tables.ext_summary, topic)
        skipped_paths = summaries.column("path").filter(mf.skippable(summaries))
        keep = ~pc.is_in(ext_actions.column("path"), value_set=skipped_paths.combine_chunks()).to_numpy(
            zero_copy_only=False
        )
    records = _column(ext_actions, "num_records", 0)
    skipped = ext_actions.filter(pa.array(~keep))
    ext_actions = ext_actions.filter(pa.array(keep))
    cq_actions = Table.prune(cq_view.actions, of_topic)
    cq_actions = (
        cq_actions.filter(pc.fill_null(pc.greater(cq_actions.column("max.tags_code"), MAX_EXT_ADDR), True))
        if cq_actions.num_rows
        else cq_actions
    )
    cq_actions = _holding_tag(cq_actions, mf)
    spans = [
        (lo, hi)
        for a in (ext_actions, cq_actions)
        if a.num_rows
        for lo, hi in zip(a.column("min.commitlog_offset").to_pylist(), a.column("max.commitlog_offset").to_pylist())
    ]
    fresh_read = fresh if mf.tags_all else _overlapping(fresh, spans)
    counts["fresh_skipped"] = fresh.num_rows - fresh_read.num_rows
    fresh_bytes = int(_column(fresh_read, "size_bytes", 0).sum())

    # clustered files: row group summaries
    ranges, clustered_read, clustered_bytes, reads = _plan_clustered(ctx, mf, clustered, counts)
    counts["estimated_bytes"] = clustered_bytes + fresh_bytes
    plan = ReadPlan(
        mf,
        clog,
        end,
        clustered_read,
        ranges,
        fresh_read,
        [ext.path_of(p) for p in ext_actions.column("path").to_pylist()],
        [cq.path_of(p) for p in cq_actions.column("path").to_pylist()],
        int(records.sum()) + int(_column(cq_actions, "num_records", 0).sum()),
        int(_column(skipped, "num_records", 0).sum()),
        skipped.num_rows,
        counts=counts,
    )
    scan = counts["scan_bytes"]
    if mf.tags_all:
        plan.choice, plan.reason = "scan", "the selector's tags match every message"
    elif counts["estimated_bytes"] <= PRUNE_LIMIT * scan:
        plan.choice = "prune"
        plan.reason = f"summaries leave {100 * counts['estimated_bytes'] / max(1, scan):.1f}% of the scan's bytes"
        if reads and clustered_bytes <= ROW_GROUP_LIMIT * scan:
            plan.row_groups = reads
        elif mf.selector.is_tag:
            # the tag predicate pushed down to Parquet skips the same row groups by their tags
            # statistics (clustered row groups hold one tag or a few); ranges would only add their cost
            plan.ranges = None
    else:
        plan.choice = "scan"
        plan.reason = (
            f"summaries would leave {100 * counts['estimated_bytes'] / max(1, scan):.1f}% of the scan's "
            f"bytes (pruning pays below {100 * PRUNE_LIMIT:.0f}%)"
        )
        plan.clustered_actions, plan.ranges, plan.fresh_actions = clustered, None, fresh
        counts["row_groups_read"] = counts["row_groups"]
        counts["estimated_bytes"] = scan
    return plan


def _holding_tag(cq_actions: pa.Table, mf: MessageFilter) -> pa.Table:
    """Consume queue files a tag selector may find units in: their ``tags_code`` statistics hold one of its
    codes, unless a value outside int's range (RocketMQ tests ``tagsCode.intValue()``) makes the range say
    nothing. A fresh commitlog file no kept file points into is not read.

    >>> from storelib.filter.selector import MessageSelector
    >>> mf = MessageFilter("T", MessageSelector.by_tag("TagA"))
    >>> actions = pa.table({"path": ["a", "b", "c"], "min.tags_code": [2598919, 5, -2**40],
    ...                     "max.tags_code": [2598919, 9, 9]})
    >>> _holding_tag(actions, mf).column("path").to_pylist()
    ['a', 'c']
    """
    if (
        not mf.selector.by_tags
        or mf.tags_all
        or not cq_actions.num_rows
        or "min.tags_code" not in cq_actions.column_names
    ):
        return cq_actions
    lo = pc.fill_null(cq_actions.column("min.tags_code"), -(2**63)).to_numpy()
    hi = pc.fill_null(cq_actions.column("max.tags_code"), 2**63 - 1).to_numpy()
    plain = (lo >= -(2**31)) & (hi < 2**31)
    codes = pa.array(sorted(mf.data.code_set), pa.int64())
    held = {p for p in Table.holding(cq_actions.filter(pa.array(plain)), "tags_code", codes).column("path").to_pylist()}
    keep = [not ok or p in held for p, ok in zip(cq_actions.column("path").to_pylist(), plain.tolist())]
    return cq_actions.filter(pa.array(keep, pa.bool_()))


def _message_filter(
    ctx: StoreContext, topic: str, selector: MessageSelector | str | None, group: str | None
) -> MessageFilter:
    ctx.topics.get(topic)
    if group is not None:
        sub = ctx.registry.get(group, topic)
        if selector is not None and MessageSelector.of(selector) != sub.selector:
            raise FilterError(
                "selector",
                f"give a selector or a group, not both: the group's subscription is {sub.selector.expression!r}",
                value=MessageSelector.of(selector).expression,
            )
        selector = sub.selector
    else:
        sub = None
    selector = check_selector(topic, selector, ctx.config, group)
    return MessageFilter(topic, selector, sub, ctx.registry.bloom_filter, config=ctx.config)


def _plan_clustered(
    ctx: StoreContext, mf: MessageFilter, clustered: pa.Table, counts: dict[str, int]
) -> tuple[list[tuple[int, int]] | None, pa.Table, int, list[RowGroups]]:
    """The clustered files to read, the ``cluster_seq`` ranges of their kept row groups, the bytes
    that costs, and the same as row groups per file (full paths, for pyarrow tasks); ``counts`` gets
    the row group counters. A file whose row group summaries do not add up to its rows is read whole.
    Vectorized over the row groups: at 10^7 messages a topic's clustered files hold about 10^4."""
    counts.update(row_groups=0, skipped_by_statistics=0, skipped_by_bitmap=0, row_groups_read=0)
    total = int(_column(clustered, "size_bytes", 0).sum())
    if clustered.num_rows == 0 or mf.tags_all:
        return None, clustered, total, []
    paths = clustered.column("path").to_pylist()
    sizes, rows = _column(clustered, "size_bytes", 0), _column(clustered, "num_records", 0)
    groups = read_row_group_summaries(ctx.tables.commitlog_summary, mf.topic, paths)
    of = pc.index_in(groups.column("path"), value_set=pa.array(paths, pa.string())).to_numpy(zero_copy_only=False)
    order = np.argsort(of, kind="stable")  # by file as ``paths`` has them, each file's row groups in order
    of, groups = of[order], groups.take(order)
    records = _column(groups, "num_records", 0)
    summed = np.bincount(of, weights=records, minlength=len(paths)).astype(np.int64) == rows
    summed &= np.bincount(of, minlength=len(paths)) > 0
    in_summed = summed[of]  # row groups of the files read by their summaries
    skip = mf.skippable(groups)
    kept = in_summed & ~skip
    counts["row_groups"] = int(in_summed.sum())
    counts["skipped_by_statistics" if mf.selector.by_tags else "skipped_by_bitmap"] = int((in_summed & skip).sum())
    counts["row_groups_read"] = int(kept.sum())
    kept_rows = np.bincount(of[kept], weights=records[kept], minlength=len(paths)).astype(np.int64)
    numbers = _column(groups, "row_group", 0)
    firsts = np.searchsorted(of[kept], np.arange(len(paths) + 1))  # where each file's kept row groups start
    kept_numbers = numbers[kept]
    reads: list[RowGroups] = []
    keep = ~summed | (kept_rows > 0)
    for i in np.flatnonzero(keep).tolist():
        chosen = tuple(kept_numbers[firsts[i] : firsts[i + 1]].tolist()) if summed[i] else None
        cost = int(sizes[i] * kept_rows[i] / max(1, rows[i])) if summed[i] else int(sizes[i])
        reads.append(RowGroups(ctx.tables.commitlog.path_of(paths[i]), chosen, cost, int(sizes[i])))
    kept_files, estimate = clustered.filter(pa.array(keep)), sum(r.bytes for r in reads)
    lows = _column(groups, "cluster_seq_min", 0)[kept].tolist()
    highs = _column(groups, "cluster_seq_max", 0)[kept].tolist()
    whole_lows, whole_highs = _stat(clustered, "min.cluster_seq"), _stat(clustered, "max.cluster_seq")
    for i in np.flatnonzero(keep & ~summed).tolist():  # read whole: their own cluster_seq statistics are their range
        if whole_lows[i] is None or whole_highs[i] is None:
            return None, kept_files, estimate, reads
        lows.append(whole_lows[i])
        highs.append(whole_highs[i])
    return cap(merged(list(zip(lows, highs))), MAX_RANGES), kept_files, estimate, reads


def read_topic(
    ctx: StoreContext, topic: str, selector: MessageSelector | str | None = None, group: str | None = None
) -> "DataFrame":
    """The topic's dispatched messages that match ``selector`` (or ``group``'s subscription), as commitlog rows.

    >>> read_topic(store.context, "TopicTest", "TagA || TagZ").select("msg_id").first().msg_id == r.msg_id
    True
    """
    return plan_read(ctx, topic, selector, group).dataframe(ctx.spark)


def explain_read(
    ctx: StoreContext, topic: str, selector: MessageSelector | str | None = None, group: str | None = None
) -> ReadExplain:
    """How :func:`read_topic` would read (files and row groups considered, skipped and why, the
    estimate and the choice), without reading anything.

    >>> print(explain_read(store.context, "TopicTest", group="GroupA"))     # doctest: +ELLIPSIS
    read TopicTest where TagA || TagB: SCAN (...)
    ...
    """
    return plan_read(ctx, topic, selector, group).explain()


def _stat(actions: pa.Table, name: str) -> list:
    """A statistics column of add actions, one value per file (None where a file has none, or none has any)."""
    return actions.column(name).to_pylist() if name in actions.column_names else [None] * actions.num_rows


def _column(actions: pa.Table, name: str, default: int) -> np.ndarray:
    if actions.num_rows == 0 or name not in actions.column_names:
        return np.zeros(0, dtype=np.int64)
    return np.asarray(pc.fill_null(actions.column(name), default).to_numpy(zero_copy_only=False), dtype=np.int64)


def _overlapping(actions: pa.Table, ranges: list[tuple[int | None, int | None]]) -> pa.Table:
    """The commitlog add actions whose physical offsets overlap any of ``ranges`` (unknown bounds overlap all)."""
    if not ranges or actions.num_rows == 0:
        return actions.slice(0, 0)
    known = [(lo, hi) for lo, hi in ranges if lo is not None and hi is not None]
    if len(known) < len(ranges):
        return actions
    spans = sorted(known)
    merged = [list(spans[0])]
    for lo, hi in spans[1:]:
        if lo <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    starts = np.array([m[0] for m in merged], dtype=np.int64)
    ends = np.array([m[1] for m in merged], dtype=np.int64)
    flo = pc.fill_null(actions.column("min.physical_offset"), -(2**63)).to_numpy(zero_copy_only=False)
    fhi = pc.fill_null(actions.column("max.physical_offset"), 2**63 - 1).to_numpy(zero_copy_only=False)
    # A file [flo, fhi] overlaps a merged span when the last span starting at or before fhi ends at or after flo.
    idx = np.searchsorted(starts, fhi, side="right") - 1
    hit = (idx >= 0) & (ends[np.maximum(idx, 0)] >= flo)
    return actions.filter(pa.array(hit))
