"""Clustering the commitlog: settled messages sorted so that filtered reads skip row groups.

The commitlog is written in offset order, so a 1% selection lands in every row group and a
filtered read has nothing to skip. Compaction therefore rewrites *settled* commitlog files (every
message dispatched, the newest older than ``cluster_settle_ms``) the way Delta's liquid clustering
rewrites a table, while keeping every RocketMQ address:

* each new file holds one contiguous run of commitlog offsets, as the files it replaces did, so
  file-level ``physical_offset`` statistics still find a message by its offset, id or key;
* inside a file, rows are sorted by topic, then the topic's clustering keys (``TAGS`` and/or
  property values, :attr:`~storelib.model.topic.TopicConfig.cluster_by`), then the Bloom hits of
  the registered SQL92 groups, rarest group first (from the messages' ``consume_queue_ext``
  bitmaps), then offset; row groups are cut every
  :data:`~storelib.storage.schema.CLUSTERED_ROW_GROUP_ROWS` rows;
* each row gets ``cluster_seq`` (the file's first offset plus the row's rank), so a read can name
  the row groups it wants as ``cluster_seq`` ranges that Spark pushes down to Parquet;
* each row group is summed up in ``commitlog_summary`` (tag codes, OR of the bitmaps, groups no
  bitmap hits) before the files are committed, and a point read finds a row by offset through
  the file's ``physical_offset`` column (:func:`storelib.storage.commitlog.read_messages`).

The rewrite commits with ``dataChange=false`` in one Delta commit; producers and dispatch keep
appending meanwhile (the commit lands after theirs unless they touched the same files). A crash
anywhere leaves at most unreferenced files: a rerun plans from the table again.

>>> from storelib import Message
>>> _ = store.send(Message("TopicTest", tags="TagB")); _ = store.dispatch()
>>> cluster_commitlog(store.context, settle_ms=0).files_added
1
>>> cluster_commitlog(store.context, settle_ms=0).files_added        # idempotent: nothing left to cluster
0
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa

from storelib.context import StoreContext
from storelib.delta.spec import spark_schema
from storelib.delta.table import Prune, Table, add_actions, remove_actions, with_retries
from storelib.delta.writer import write_dataframe
from storelib.dispatch.reput import REPUT_MARKER, dispatch_targets
from storelib.filter.summary import RowGroupSummarizer, record_row_group_summaries, summarizer_for
from storelib.model.timestamps import now_ms
from storelib.model.topic import TAGS_KEY, MAX_CLUSTER_KEYS
from storelib.storage.commitlog import CLUSTERED_PREFIX, is_clustered
from storelib.storage.schema import CLUSTERED_ROW_GROUP_ROWS, COMMITLOG

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from storelib.filter.registry import Subscription

__all__ = ["ClusterResult", "cluster_commitlog", "plan_bins", "settled_end", "MAX_SORT_GROUPS"]

#: At most this many SQL92 groups (the rarest) order rows after the clustering keys.
MAX_SORT_GROUPS = 16
#: Groups matching more than this share of the rows do not order rows (they would prune nothing).
SORT_GROUP_SHARE = 0.25


@dataclass(frozen=True)
class ClusterResult:
    """What one clustering pass did.

    >>> ClusterResult(3, 1, 1000, 0.5).files_removed
    3
    """

    files_removed: int
    files_added: int
    rows: int
    seconds: float


def settled_end(ctx: StoreContext) -> int:
    """The commitlog offset below which every message is dispatched to every table dispatch writes.

    >>> settled_end(store.context) > 0
    True
    """
    targets = dict(dispatch_targets(ctx))
    if not ctx.config.enable_consume_queue_ext:
        targets.pop("consume_queue_ext", None)
    return min(Table.marker(t.snapshot(), REPUT_MARKER) for t in targets.values())


def plan_bins(actions: pa.Table, end: int, cutoff_ms: int, target: int) -> list[list[dict]]:
    """Runs of adjacent commitlog files to rewrite, each run becoming one clustered file.

    A file qualifies when all its messages lie below ``end`` (dispatched) and its newest store time
    is at or before ``cutoff_ms``. Clustered files of at least half ``target`` bytes stay as they
    are and split runs; a run is cut into bins of about ``target`` bytes, and a bin is rewritten when
    it holds a file not yet clustered or several small clustered ones.

    >>> import datetime as dt
    >>> old = dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc)
    >>> files = pa.table({"path": ["a", "clustered-b", "c", "d"], "size_bytes": [10, 10, 10, 10],
    ...     "min.physical_offset": [0, 100, 200, 300], "max.physical_offset": [99, 199, 299, 399],
    ...     "max.store_timestamp": [old] * 4})
    >>> [[f["path"] for f in b] for b in plan_bins(files, end=300, cutoff_ms=now_ms(), target=1000)]
    [['a', 'clustered-b', 'c']]
    """
    if actions.num_rows == 0:
        return []
    rows = sorted(actions.to_pylist(), key=lambda r: (r.get("min.physical_offset") is None, r.get("min.physical_offset")))
    runs: list[list[dict]] = [[]]
    for r in rows:
        newest = r.get("max.store_timestamp")
        newest_ms = None if newest is None else int(newest.timestamp() * 1000)
        ok = (r.get("min.physical_offset") is not None and r.get("max.physical_offset") is not None
              and r["max.physical_offset"] < end and newest_ms is not None and newest_ms <= cutoff_ms)
        big_clustered = is_clustered(r["path"]) and r["size_bytes"] >= target // 2
        if ok and not big_clustered:
            runs[-1].append(r)
        elif runs[-1]:
            runs.append([])
    bins: list[list[dict]] = []
    for run in runs:
        current: list[dict] = []
        size = 0
        for r in run:
            if current and size + r["size_bytes"] > target:
                bins.append(current)
                current, size = [], 0
            current.append(r)
            size += r["size_bytes"]
        if current:
            bins.append(current)
    return [b for b in bins if len(b) > 1 or not is_clustered(b[0]["path"])]


def cluster_commitlog(ctx: StoreContext, *, settle_ms: int | None = None, attempts: int | None = None,
                      fault: Callable[[str], None] | None = None) -> ClusterResult:
    """Cluster the settled commitlog files (see the module docstring); idempotent and crash-safe.

    ``settle_ms`` overrides :attr:`~storelib.model.config.StoreConfig.cluster_settle_ms`. ``fault``
    (a test seam) is called with ``written``, ``summarized`` and ``committed`` as each step ends.
    """
    table = ctx.tables.commitlog
    settle = ctx.config.cluster_settle_ms if settle_ms is None else settle_ms
    began = time.perf_counter()

    def step(snapshot) -> ClusterResult:
        bins = plan_bins(add_actions(snapshot), settled_end(ctx), now_ms() - settle, ctx.config.target_file_size)
        if not bins:
            return ClusterResult(0, 0, 0, time.perf_counter() - began)
        files = _write_bins(ctx, bins)
        _fault(fault, "written")
        record_row_group_summaries(ctx.tables.commitlog_summary, files)
        _fault(fault, "summarized")
        removes = remove_actions([r for b in bins for r in b], data_change=False)
        table.commit(snapshot, files, removes=removes, operation="CLUSTER", data_change=False, rebase=True)
        _fault(fault, "committed")
        return ClusterResult(len(removes), len(files), sum(f.num_records for f in files), time.perf_counter() - began)

    return with_retries(table, attempts or ctx.config.max_commit_attempts, step, what="cluster commitlog")


def _fault(fault: Callable[[str], None] | None, name: str) -> None:
    if fault is not None:
        fault(name)


def _write_bins(ctx: StoreContext, bins: list[list[dict]]):
    """One Spark job: the bins' rows joined to their bitmaps, sorted, written one file per bin."""
    from pyspark.sql import functions as F

    spark, table = ctx.spark, ctx.tables.commitlog
    spans = [(min(r["min.physical_offset"] for r in b), max(r["max.physical_offset"] for r in b)) for b in bins]
    lo, hi = spans[0][0], spans[-1][1]
    paths = [table.path_of(r["path"]) for b in bins for r in b]
    rows = spark.read.schema(spark_schema(COMMITLOG.arrow)).parquet(*paths).drop("cluster_seq")
    rows = rows.withColumn("_bin", _bin_column(F.col("physical_offset"), spans))
    ext = ctx.tables.consume_queue_ext.read(spark, prune=Prune(between={"commitlog_offset": (lo, hi)}))
    ext = ext.where(F.col("commitlog_offset").between(lo, hi))
    subs = _sort_groups(ctx, ext)
    ext = (ext.select(F.col("commitlog_offset").alias("physical_offset"), "filter_bitmap", "filter_version")
           .withColumn("_bin", _bin_column(F.col("physical_offset"), spans)))
    n = len(bins)
    joined = rows.repartition(n, "_bin").join(ext.repartition(n, "_bin"), ["_bin", "physical_offset"], "left")
    keys = _key_columns(ctx)
    hits = [F.when(_hit(s), 0).otherwise(1) for s in subs]
    ordered = joined.sortWithinPartitions("_bin", "topic", *keys, *hits, "physical_offset")
    summarize = RowGroupSummarizer(summarizer_for(ctx.registry.all()), CLUSTERED_ROW_GROUP_ROWS)
    return write_dataframe(ordered, table, cluster_by=("_bin",), target_file_size=2**62, prefix=CLUSTERED_PREFIX,
                           transform=ClusterSeq({i: s[0] for i, s in enumerate(spans)}), summarize=summarize,
                           row_group_rows=CLUSTERED_ROW_GROUP_ROWS)


def _bin_column(offset: "Column", spans: Sequence[tuple[int, int]]) -> "Column":
    from pyspark.sql import functions as F

    col = F.lit(len(spans) - 1)
    for i in range(len(spans) - 2, -1, -1):
        col = F.when(offset <= spans[i][1], F.lit(i)).otherwise(col)
    return col


def _key_columns(ctx: StoreContext) -> list["Column"]:
    """Per position ``i``, the value of each row's topic's ``i``-th clustering key (null past its last)."""
    from pyspark.sql import functions as F

    topics = ctx.topics.all()
    out = []
    for i in range(MAX_CLUSTER_KEYS):
        col = None
        for name, config in sorted(topics.items()):
            if len(config.cluster_by) <= i:
                continue
            key = config.cluster_by[i]
            value = F.col("tags") if key == TAGS_KEY else F.col("properties")[key]
            col = (F.when(F.col("topic") == name, value) if col is None
                   else col.when(F.col("topic") == name, value))
        if col is not None:
            out.append(col)
    if not out:
        out.append(F.col("tags"))
    return out


def _hit(sub: "Subscription") -> "Column":
    from pyspark.sql import functions as F

    from storelib.filter.bloom import is_hit_column

    return F.coalesce((F.col("topic") == sub.topic) & (F.col("filter_version") >= F.lit(sub.version))
                      & is_hit_column(F.col("filter_bitmap"), sub.bloom), F.lit(False))


def _sort_groups(ctx: StoreContext, ext: "DataFrame") -> list["Subscription"]:
    """The SQL92 groups that order rows: the rarest (by their Bloom hits among the rows), up to
    :data:`MAX_SORT_GROUPS`, none matching more than :data:`SORT_GROUP_SHARE` of them."""
    from pyspark.sql import functions as F

    bloom = ctx.registry.bloom_filter
    subs = [s for s in ctx.registry.all() if s.is_sql92 and s.bloom is not None and bloom.is_valid(s.bloom)]
    if not subs:
        return []
    row = ext.agg(F.count(F.lit(1)).alias("n"), *[F.count_if(_hit(s)).alias(f"g{i}") for i, s in enumerate(subs)]).first()
    total = max(1, row["n"])
    counted = sorted((row[f"g{i}"], i) for i in range(len(subs)) if 0 < row[f"g{i}"] <= SORT_GROUP_SHARE * total)
    return [subs[i] for _, i in counted[:MAX_SORT_GROUPS]]


@dataclass(frozen=True)
class ClusterSeq:
    """On the executors: each row's ``cluster_seq``, its bin's first offset plus its rank in the bin
    (rows arrive sorted by bin, then in clustered order).

    >>> batch = pa.RecordBatch.from_pydict({"_bin": [0, 0, 1], "physical_offset": [0, 100, 500]})
    >>> next(ClusterSeq({0: 0, 1: 500})(iter([batch]))).column("cluster_seq").to_pylist()
    [0, 1, 500]
    """

    bases: Mapping[int, int]

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        seen: dict[int, int] = {}
        for batch in batches:
            bins = batch.column("_bin").to_numpy(zero_copy_only=False)
            seq = np.empty(len(bins), dtype=np.int64)
            starts = np.flatnonzero(np.diff(bins, prepend=bins[:1] - 1)) if len(bins) else []
            for i, start in enumerate(starts):
                stop = starts[i + 1] if i + 1 < len(starts) else len(bins)
                b = int(bins[start])
                done = seen.get(b, 0)
                seq[start:stop] = self.bases[b] + done + np.arange(stop - start)
                seen[b] = done + stop - start
            if "cluster_seq" in batch.schema.names:
                batch = batch.drop_columns(["cluster_seq"])
            yield batch.append_column("cluster_seq", pa.array(seq, pa.int64()))

