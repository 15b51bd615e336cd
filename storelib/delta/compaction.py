"""Compaction: merging a table's small files without losing its clustering (Delta's OPTIMIZE).

Each dispatch adds a file per queue (and per key-hash range); each send adds a commitlog file. Left
alone, a queue's offset range would touch more files the longer the store runs. Compaction groups
the small files that share a cluster (one queue, one key-hash range, or a run of adjacent commitlog
offsets), rewrites each group sorted into files of the target size from the executors, and commits
the removals and additions in one Delta commit through deltalake (``dataChange=false``: readers see
the same rows before and after). A writer that commits meanwhile makes the commit fail; compaction
then plans again from the newer snapshot, so it never removes a file it did not rewrite.

>>> from storelib import Message
>>> _ = store.send(Message("TopicTest"))                # a second small commitlog file
>>> compact_table(spark, store.context.tables.commitlog, target_file_size=1 << 20, order_by="physical_offset")
(2, 1)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

from storelib.delta.commit import CommitConflict, WrittenFile, remove_actions, with_retries
from storelib.delta.files import remember_sizes
from storelib.delta.log import add_actions
from storelib.delta.sink import Summarizer
from storelib.delta.spark_read import read_paths
from storelib.delta.table import Table
from storelib.delta.writer import write_dataframe, write_files

if TYPE_CHECKING:
    from typing import Callable

    from pyspark.sql import SparkSession

__all__ = ["compact_table", "compact_here", "plan_groups", "bin_by_size"]


def plan_groups(
    actions: pa.Table, cluster_by: tuple[str, ...], order_by: str | None, small: int, target: int
) -> list[list[dict]]:
    """Groups of small files worth rewriting together: same cluster values, or adjacent ranges of ``order_by``.

    >>> files = pa.table({"path": ["a", "b", "c"], "size_bytes": [10, 10, 10 ** 9],
    ...                   "min.q": [0, 0, 0], "max.q": [0, 0, 0]})
    >>> [[f["path"] for f in group] for group in plan_groups(files, ("q",), None, small=1000, target=10 ** 6)]
    [['a', 'b']]
    """
    rows = [r for r in actions.to_pylist() if r["size_bytes"] < small]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if cluster_by:
            lo = tuple(r.get(f"min.{c}") for c in cluster_by)
            hi = tuple(r.get(f"max.{c}") for c in cluster_by)
            if None in lo or lo != hi:  # a file spanning clusters stays as it is
                continue
            groups.setdefault(lo, []).append(r)
        else:
            groups.setdefault((), []).append(r)
    out: list[list[dict]] = []
    for files in groups.values():
        if order_by:
            files.sort(key=lambda r: (r.get(f"min.{order_by}") is None, r.get(f"min.{order_by}")))
        out.extend(b for b in bin_by_size(files, target) if len(b) > 1)
    return out


def _snapshot_groups(
    snapshot, spec, order_by: str | None, leave: "Callable[[str], bool] | None", small: int, target: int
) -> list[list[dict]]:
    """:func:`plan_groups` over a snapshot's files, those ``leave`` names left out."""
    actions = add_actions(snapshot)
    if leave is not None and actions.num_rows:
        actions = actions.filter(pa.array([not leave(p) for p in actions.column("path").to_pylist()]))
    return plan_groups(actions, spec.cluster_by, order_by, small=small, target=target)


def bin_by_size(files: list[dict], target: int) -> list[list[dict]]:
    """``files`` (add actions with ``size_bytes``), in order, cut into runs of at most ``target`` bytes
    (a file bigger than that is a run of its own).

    >>> [[f["path"] for f in b] for b in bin_by_size([{"path": p, "size_bytes": 4} for p in "abc"], 8)]
    [['a', 'b'], ['c']]
    """
    bins: list[list[dict]] = []
    current: list[dict] = []
    size = 0
    for r in files:
        if current and size + r["size_bytes"] > target:
            bins.append(current)
            current, size = [], 0
        current.append(r)
        size += r["size_bytes"]
    if current:
        bins.append(current)
    return bins


def compact_table(
    spark: "SparkSession",
    table: Table,
    *,
    target_file_size: int,
    attempts: int = 10,
    order_by: str | None = None,
    full: bool = False,
    summarize: "Summarizer | None" = None,
    before_commit: "Callable[[list[WrittenFile]], object] | None" = None,
    leave: "Callable[[str], bool] | None" = None,
) -> tuple[int, int]:
    """Rewrite ``table``'s small files group by group; return (files removed, files added).

    ``summarize`` sums up each new file and ``before_commit`` receives them before they are
    committed (the ext table records its per-file summaries this way).

    ``full`` takes every file of a cluster, large ones too, so each cluster ends as sorted files
    with disjoint ranges (a key then touches one file however many compactions came before).
    ``leave`` names files (by add path) that are never rewritten here.
    """
    spec = table.spec

    def step(snapshot) -> tuple[int, int]:
        small = 2**62 if full else target_file_size // 2
        groups = _snapshot_groups(snapshot, spec, order_by, leave, small, 2**62 if full else target_file_size)
        if not groups:
            return 0, 0
        paths = [table.path_of(r["path"]) for g in groups for r in g]
        df = read_paths(spark, spec.arrow, paths, [r["size_bytes"] for g in groups for r in g])
        if spec.cluster_by:
            df = df.repartition(max(1, len(groups)), *spec.cluster_by)
        elif order_by:
            df = df.repartitionByRange(max(1, len(groups)), order_by)
        df = df.sortWithinPartitions(*(spec.sort_by or spec.cluster_by))
        files = write_dataframe(
            df, table, cluster_by=spec.cluster_by, target_file_size=target_file_size, summarize=summarize
        )
        if before_commit is not None and files:
            before_commit(files)
        removes = remove_actions([r for g in groups for r in g], data_change=False)
        table.commit(snapshot, files, removes=removes, operation="OPTIMIZE", data_change=False)
        return len(removes), len(files)

    return with_retries(table, attempts, step, what=f"compact {spec.name}")


def compact_here(
    table: Table,
    *,
    small_bytes: int = 1024 * 1024,
    target_file_size: int = 16 * 1024 * 1024,
    order_by: str | None = None,
    row_group_rows: int | None = None,
    max_rows: int = 1_000_000,
    leave: "Callable[[str], bool] | None" = None,
    summarize: "Summarizer | None" = None,
    before_commit: "Callable[[list[WrittenFile]], object] | None" = None,
    attempts: int = 10,
) -> tuple[int, int]:
    """Merge ``table``'s fresh small files on this process with pyarrow (no Spark job); return (files
    removed, files added).

    A follower runs this every few seconds so a busy table's files stay few: a table taking a commit
    per group of sends (or per dispatch round) gains a file per commit (per queue, per key-hash range),
    and every read plans over all of them. Only files under ``small_bytes`` are merged, into files of
    up to ``target_file_size`` with row groups of ``row_group_rows`` (a pull decodes only the row
    groups it wants), at most ``max_rows`` rows a call: a merged file is merged again only while it
    is under ``small_bytes``, so a call rewrites at most that much per cluster, however big the table
    (larger merges are :func:`compact_table`'s, from the store's ``compact()``); files
    ``leave`` names stay as they are; ``summarize`` and ``before_commit`` as in :func:`compact_table`. The
    commit changes no data, so it lands after writers that only appended meanwhile (Delta's conflict
    check), and readers see the same rows before and after.

    >>> from storelib import Message
    >>> _ = store.send(Message("TopicTest"))                # a second small commitlog file
    >>> compact_here(store.context.tables.commitlog, order_by="physical_offset")
    (2, 1)
    """
    spec = table.spec
    order = list(spec.sort_by or spec.cluster_by or ((order_by,) if order_by else ()))

    def step(snapshot) -> tuple[int, int]:
        groups: list[list[dict]] = []
        rows = 0
        for group in _snapshot_groups(snapshot, spec, order_by, leave, small_bytes, target_file_size):
            count = sum(r.get("num_records") or 0 for r in group)
            if groups and rows + count > max_rows:
                break
            groups.append(group)
            rows += count
        if not groups:
            return 0, 0
        files: list[WrittenFile] = []
        try:
            for group in groups:
                paths = [table.path_of(r["path"]) for r in group]
                remember_sizes(paths, [r["size_bytes"] for r in group])  # on an object store: no HEAD a file
                data = table.read_arrow(paths=paths)
                if order:
                    data = data.sort_by([(c, "ascending") for c in order])
                files += write_files(
                    table, data, target_file_size=target_file_size, row_group_rows=row_group_rows, summarize=summarize
                )
            if before_commit is not None and files:
                before_commit(files)
        except BaseException:
            table.discard(files)
            raise
        removes = remove_actions([r for g in groups for r in g], data_change=False)
        # Queued with this machine's writers, landing after their appends, from the newest snapshot: the
        # appends made while this merge read and wrote are caught up before it queues, so the turn (which
        # every writer waits for) reads only those made while it queued, not all of them as a rebase would.
        snapshot.update_incremental()
        with table.commit_turn(snapshot=False):
            snapshot.update_incremental()
            live = set(add_actions(snapshot).column("path").to_pylist())
            if any(r.path not in live for r in removes):  # another compaction merged some of them meanwhile
                table.discard(files)
                raise CommitConflict(f"{spec.name}: files planned for compaction were removed meanwhile")
            table.commit(snapshot, files, removes=removes, operation="OPTIMIZE", data_change=False, rebase=True)
        return len(removes), len(files)

    return with_retries(table, attempts, step, what=f"compact {spec.name} here")
