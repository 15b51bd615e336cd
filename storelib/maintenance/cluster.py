"""Clustering the commitlog: settled messages sorted so that filtered reads skip row groups.

Settled commitlog files are rewritten the way Delta's liquid clustering rewrites a table (one commit,
``dataChange=false``, safe to crash in), while every RocketMQ address keeps working. How rows are
ordered, numbered and summed up is in ``docs/internals.md``.

>>> from storelib import Message
>>> _ = store.send(Message("TopicTest", tags="TagB")); _ = store.dispatch()
>>> cluster_commitlog(store.context, settle_ms=0).files_added
1
>>> cluster_commitlog(store.context, settle_ms=0).files_added        # idempotent: nothing left to cluster
0
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storelib.context import StoreContext
from storelib.delta.commit import remove_actions, with_retries
from storelib.delta.compaction import bin_by_size
from storelib.delta.location import filesystem
from storelib.delta.log import add_actions
from storelib.delta.stats import Prune
from storelib.delta.table import Table
from storelib.delta.writer import Target, write_items
from storelib.filter.summary import RowGroupSummarizer, bitmap_hits, summarizer_for
from storelib.model.timestamps import now_ms
from storelib.model.topic import MAX_CLUSTER_KEYS, TAGS_KEY
from storelib.storage.commitlog import CLUSTERED_PREFIX, is_clustered
from storelib.storage.dispatched import REPUT_MARKER, dispatch_targets
from storelib.storage.expired import expired_mask
from storelib.storage.schema import CLUSTERED_ROW_GROUP_ROWS, CONSUME_QUEUE_EXT
from storelib.storage.summaries import record_row_group_summaries

if TYPE_CHECKING:
    from storelib.filter.subscription import Subscription

__all__ = [
    "ClusterResult",
    "ClusterBin",
    "Clusterer",
    "cluster_commitlog",
    "plan_bins",
    "settled_end",
    "MAX_SORT_GROUPS",
]

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
    targets = dict(dispatch_targets(ctx.tables, ctx.config))
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
    rows = sorted(
        actions.to_pylist(), key=lambda r: (r.get("min.physical_offset") is None, r.get("min.physical_offset"))
    )
    runs: list[list[dict]] = [[]]
    for r in rows:
        newest = r.get("max.store_timestamp")
        newest_ms = None if newest is None else int(newest.timestamp() * 1000)
        ok = (
            r.get("min.physical_offset") is not None
            and r.get("max.physical_offset") is not None
            and r["max.physical_offset"] < end
            and newest_ms is not None
            and newest_ms <= cutoff_ms
        )
        big_clustered = is_clustered(r["path"]) and r["size_bytes"] >= target // 2
        if ok and not big_clustered:
            runs[-1].append(r)
        elif runs[-1]:
            runs.append([])
    bins = [b for run in runs for b in bin_by_size(run, target)]
    return [b for b in bins if len(b) > 1 or not is_clustered(b[0]["path"])]


def cluster_commitlog(
    ctx: StoreContext,
    *,
    settle_ms: int | None = None,
    attempts: int | None = None,
    fault: Callable[[str], None] | None = None,
) -> ClusterResult:
    """Cluster the settled commitlog files (see the module docstring); idempotent and crash-safe.

    ``settle_ms`` overrides :attr:`~storelib.model.config.StoreConfig.cluster_settle_ms`. ``fault``
    (a test seam) is called with ``written``, ``summarized`` and ``committed`` as each step ends.
    """
    table = ctx.tables.commitlog
    settle = ctx.config.cluster_settle_ms if settle_ms is None else settle_ms
    began = time.perf_counter()

    def step(snapshot) -> ClusterResult:
        # clustered files come out ~1/8 bigger (offsets and keys no longer in order): aim below the target
        bins = plan_bins(
            add_actions(snapshot), settled_end(ctx), now_ms() - settle, ctx.config.target_file_size * 7 // 8
        )
        if not bins:
            return ClusterResult(0, 0, 0, time.perf_counter() - began)
        files = write_bins(ctx, bins)
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


def write_bins(ctx: StoreContext, bins: list[list[dict]], drop: Mapping[str, Mapping[int, int]] | None = None):
    """One Spark job, one task per run of bins: each bin read, sorted and written by :class:`ClusterBin`
    with pyarrow on an executor (no shuffle, no sort by Spark); rows below ``drop``'s cuts left out
    (per-topic retention, :mod:`storelib.maintenance.topic_retention`)."""
    table, ext = ctx.tables.commitlog, ctx.tables.consume_queue_ext
    ext_actions = add_actions(ext.snapshot()) if ctx.config.enable_consume_queue_ext else None
    bloom = ctx.registry.bloom_filter
    subs = tuple(s for s in ctx.registry.all() if s.is_sql92 and s.bloom is not None and bloom.is_valid(s.bloom))
    keys = {name: config.cluster_by for name, config in ctx.topics.all().items()}
    items, sizes = [], []
    for i, b in enumerate(bins):
        lo, hi = min(r["min.physical_offset"] for r in b), max(r["max.physical_offset"] for r in b)
        ext_paths = (
            []
            if ext_actions is None
            else ext.paths(Table.prune(ext_actions, Prune(between={"commitlog_offset": (lo, hi)})))
        )
        items.append(ClusterBin(i, tuple(table.path_of(r["path"]) for r in b), lo, hi, tuple(ext_paths)))
        sizes.append(sum(r["size_bytes"] for r in b))
    target = Target.of(
        table,
        cluster_by=("_bin",),
        target_file_size=2**62,
        prefix=CLUSTERED_PREFIX,
        summarize=RowGroupSummarizer(summarizer_for(subs), CLUSTERED_ROW_GROUP_ROWS),
        row_group_rows=CLUSTERED_ROW_GROUP_ROWS,
    )
    return write_items(ctx.spark, items, sizes, {"commitlog": target}, Clusterer(keys, subs, drop=drop or {}))[
        "commitlog"
    ]


@dataclass(frozen=True)
class ClusterBin:
    """One future clustered file: its commitlog files (full paths), their offset span, and the
    ``consume_queue_ext`` files (full paths) that may hold bitmaps of its messages."""

    index: int
    paths: tuple[str, ...]
    low: int
    high: int
    ext_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class Clusterer:
    """On the executors: a bin's rows with their bitmaps, in clustered order, with ``cluster_seq``.

    ``keys`` maps each topic to its clustering keys; ``subs`` are the SQL92 subscriptions whose
    Bloom hits may order rows (the bin's rarest, see :data:`MAX_SORT_GROUPS`); rows below ``drop``'s
    cuts (``{topic: {queue_id: first queue offset kept}}``) are left out.

    >>> batch = pa.table({"topic": ["T"] * 3, "tags": ["b", "a", "b"], "physical_offset": [0, 100, 200],
    ...     "properties": pa.array([[("r", "2")], [("r", "1")], [("r", "1")]], pa.map_(pa.string(), pa.string()))})
    >>> Clusterer({"T": ("TAGS", "r")}, ()).order(batch, pa.nulls(3, pa.binary()), pa.nulls(3, pa.int64())).tolist()
    [1, 2, 0]
    """

    keys: Mapping[str, tuple[str, ...]]
    subs: tuple["Subscription", ...]
    batch_rows: int = 64 * 1024
    drop: Mapping[str, Mapping[int, int]] = field(default_factory=dict)

    def __call__(self, item: ClusterBin) -> Iterator[dict[str, pa.RecordBatch]]:

        parts = []
        for path in item.paths:
            fs, local = filesystem(path)
            with pq.ParquetFile(fs.open_input_file(local)) as f:
                parts.append(f.read(use_threads=False))
        rows = pa.concat_tables(parts).drop_columns(["cluster_seq"]).combine_chunks()
        if self.drop:
            rows = rows.filter(pa.array(~expired_mask(rows, self.drop)))
        if rows.num_rows == 0:
            return
        bitmaps, versions = self._bitmaps(item, rows.column("physical_offset").to_numpy())
        order = self.order(rows, bitmaps, versions)
        rows = rows.take(order)
        rows = rows.append_column("cluster_seq", pa.array(item.low + np.arange(rows.num_rows, dtype=np.int64)))
        rows = rows.append_column("filter_bitmap", bitmaps.take(order)).append_column(
            "filter_version", versions.take(order)
        )
        rows = rows.append_column("_bin", pa.array(np.full(rows.num_rows, item.index, dtype=np.int32)))
        for batch in rows.to_batches(max_chunksize=self.batch_rows):
            yield {"commitlog": batch}

    @staticmethod
    def _bitmaps(item: ClusterBin, offsets: np.ndarray) -> tuple[pa.Array, pa.Array]:
        """Each row's filter bitmap and version from the ext files (null where it has none)."""
        n = len(offsets)
        if not item.ext_paths:
            return pa.nulls(n, pa.binary()), pa.nulls(n, pa.int64())

        import pyarrow.dataset as ds  # imports pandas: only where clustering needs it

        fs = filesystem(item.ext_paths[0])[0]
        units = ds.dataset(
            [filesystem(p)[1] for p in item.ext_paths], schema=CONSUME_QUEUE_EXT.arrow, format="parquet", filesystem=fs
        ).to_table(
            columns=["commitlog_offset", "filter_bitmap", "filter_version"],
            filter=(pc.field("commitlog_offset") >= item.low) & (pc.field("commitlog_offset") <= item.high),
        )
        at = units.column("commitlog_offset").to_numpy()
        if not len(at):
            return pa.nulls(n, pa.binary()), pa.nulls(n, pa.int64())
        order = np.argsort(at, kind="stable")
        pos = np.minimum(np.searchsorted(at[order], offsets), len(at) - 1)
        take = pa.array(order[pos], mask=at[order][pos] != offsets)  # null: no ext row for that message
        return (
            units.column("filter_bitmap").combine_chunks().take(take),
            units.column("filter_version").combine_chunks().take(take),
        )

    def order(self, rows: pa.Table, bitmaps: pa.Array, versions: pa.Array) -> np.ndarray:
        """The clustered order: topic, the topic's clustering keys, rare groups' hits first, offset."""

        topic = rows.column("topic")
        columns: dict[str, pa.Array] = {"topic": topic}
        present = pc.unique(topic).to_pylist()
        for i in range(MAX_CLUSTER_KEYS):
            key = None
            for t in present:
                names = self.keys.get(t, (TAGS_KEY,))
                if len(names) <= i:
                    continue
                value = (
                    rows.column("tags")
                    if names[i] == TAGS_KEY
                    else pc.map_lookup(rows.column("properties"), names[i], "first")
                )
                key = pc.if_else(
                    pc.equal(topic, t), value, key if key is not None else pa.nulls(len(topic), pa.string())
                )
            if key is not None:
                columns[f"_k{i}"] = key
        n = rows.num_rows
        hits: list[tuple[float, int, np.ndarray]] = []
        usable = pc.fill_null(pc.is_valid(bitmaps), False).to_numpy(zero_copy_only=False)
        if self.subs and usable.any():
            vers = pc.fill_null(versions, -1).to_numpy(zero_copy_only=False)
            for sub in self.subs:
                hit = np.zeros(n, dtype=bool)
                rows_of = (
                    usable
                    & (vers >= sub.version)
                    & pc.fill_null(pc.equal(topic, sub.topic), False).to_numpy(zero_copy_only=False)
                )
                if rows_of.any():
                    assert sub.bloom is not None  # subs have Bloom data (see where they are chosen)
                    idx = np.flatnonzero(rows_of)
                    hit[idx] = bitmap_hits(bitmaps.take(pa.array(idx)), sub.bloom)
                share = hit.sum() / max(1, n)
                if 0 < share <= SORT_GROUP_SHARE:
                    hits.append((share, len(hits), hit))
        for j, (_, _, hit) in enumerate(sorted(hits, key=lambda h: h[:2])[:MAX_SORT_GROUPS]):
            columns[f"_h{j}"] = pa.array(~hit)  # hits first
        columns["physical_offset"] = rows.column("physical_offset")
        keyed = pa.table(columns)
        return pc.sort_indices(keyed, sort_keys=[(c, "ascending") for c in keyed.column_names]).to_numpy()
