"""Reading planned data files and row groups on Spark's executors with pyarrow: no Hadoop connector needed.

A read the store plans (a pruned file list, the row groups a filter keeps) becomes one Spark job whose
tasks each take a contiguous share of about equal bytes, read it with pyarrow (the footer parsed once, the
row groups the plan dropped never fetched) and hand Arrow batches to Spark. On an object store that is
the only way Spark reads the store's files (Spark's own Parquet reader would need ``s3a://`` and
``hadoop-aws``); on local disk Spark's reader is used for whole files.

>>> import pyarrow.compute as pc
>>> t = store.context.tables.commitlog
>>> reads = [RowGroups(t.files(t.snapshot())[0], None, 100)]
>>> read_row_groups(spark, t.spec.arrow, reads, pc.field("topic") == "TopicTest").count()
1
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Sequence, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from storelib.delta.files import fragment, kept_batches, remember_sizes
from storelib.delta.location import is_local
from storelib.delta.spec import spark_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["RowGroups", "read_row_groups", "read_paths", "contiguous_groups", "parallelism", "TASK_BYTES"]

T = TypeVar("T")

#: A task reads about this many (estimated, compressed) bytes at most; a small read has a task per core.
TASK_BYTES = 256 * 1024 * 1024
#: Rows per Arrow batch handed to Spark.
_BATCH_ROWS = 32 * 1024


@dataclass(frozen=True)
class RowGroups:
    """Row groups to read from one data file (a full path): their indices, or None for every one, the
    bytes that is estimated to read, and the file's size where known (an executor then opens it on an
    object store without a HEAD request).

    >>> RowGroups("/store/commitlog/clustered-1.parquet", (0, 7), 2048).row_groups
    (0, 7)
    """

    path: str
    row_groups: tuple[int, ...] | None
    bytes: int
    file_size: int | None = None


def read_row_groups(
    spark: "SparkSession",
    schema: pa.Schema,
    reads: Sequence[RowGroups],
    filter: pc.Expression | None = None,
    check: Callable[[pa.RecordBatch], pa.Array] | None = None,
) -> "DataFrame":
    """The rows (of a table with ``schema``) in ``reads`` that pass ``filter`` and ``check`` (a test pyarrow's
    expressions cannot state, e.g. a SQL92 selector's; it runs in the tasks, sent to them by value), as a
    DataFrame: one Spark job whose tasks each read a contiguous share of ``reads`` with pyarrow."""
    reads = list(reads)
    total = sum(r.bytes for r in reads)
    tasks = max(1, min(len(reads), max(parallelism(spark), -(-total // TASK_BYTES))))
    shares = contiguous_groups(reads, [max(1, r.bytes) for r in reads], tasks) if reads else []
    task = functools.partial(_read_shares, schema, shares, filter, check)
    return spark.range(len(shares), numPartitions=max(1, len(shares))).mapInArrow(task, spark_schema(schema))


def read_paths(
    spark: "SparkSession", schema: pa.Schema, paths: Sequence[str], sizes: Sequence[int] | None = None
) -> "DataFrame":
    """Every row of the data files ``paths`` (full paths or URIs, of a table with ``schema``), as a
    DataFrame: Spark's Parquet reader for local files, :func:`read_row_groups` for an object store's.

    >>> t = store.context.tables.commitlog
    >>> read_paths(spark, t.spec.arrow, t.files(t.snapshot())).count()
    1
    """
    if not paths:
        return spark.createDataFrame([], spark_schema(schema))
    if all(is_local(p) for p in paths):
        return spark.read.schema(spark_schema(schema)).parquet(*paths)
    known = list(sizes) if sizes is not None else [None] * len(paths)
    return read_row_groups(spark, schema, [RowGroups(p, None, s or 1, s) for p, s in zip(paths, known)])


def _read_shares(
    schema: pa.Schema,
    shares: list[list[RowGroups]],
    filter: pc.Expression | None,
    check: Callable[[pa.RecordBatch], pa.Array] | None,
    tasks: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """One executor task: the shares whose numbers ``tasks`` holds, read and filtered."""
    for task in tasks:
        for i in task.column(0).to_pylist():
            known = [r for r in shares[i] if r.file_size is not None]
            remember_sizes([r.path for r in known], [r.file_size for r in known])
            for read in shares[i]:
                found = fragment(read.path)
                if read.row_groups is not None:
                    found = found.subset(row_group_ids=list(read.row_groups))
                elif filter is not None:
                    found = found.subset(filter=filter)  # the row groups statistics leave
                for batch in kept_batches(found, schema, filter, _BATCH_ROWS):
                    kept = batch if check is None else batch.filter(check(batch))
                    if kept.num_rows:
                        yield kept


def contiguous_groups(items: Sequence[T], sizes: Sequence[int], groups: int) -> list[list[T]]:
    """``items`` (in order) cut into at most ``groups`` contiguous runs of about equal total size:
    the work of each task of a job over files, keeping each task's files in order.

    >>> contiguous_groups(["a", "b", "c", "d"], [10, 10, 10, 30], 2)
    [['a', 'b', 'c'], ['d']]
    >>> contiguous_groups(["a", "b", "c", "d"], [99, 99, 100, 100], 2)
    [['a', 'b'], ['c', 'd']]
    """
    # Each item goes to the run its midpoint falls in: runs come out balanced and contiguous,
    # whatever the sizes (cutting when the running total passes a share is off by one item
    # whenever the first items are a little smaller than the rest).
    total = max(1, sum(sizes))
    out: dict[int, list[T]] = {}
    done = 0
    for item, size in zip(items, sizes):
        out.setdefault(min(groups - 1, int((done + size / 2) * groups // total)), []).append(item)
        done += size
    return list(out.values())


def parallelism(spark: "SparkSession") -> int:
    """How many tasks the cluster runs at once (``defaultParallelism``), for sizing jobs over files.

    Spark Connect sessions have no SparkContext: there it is ``spark.default.parallelism``, else this
    machine's cores.

    >>> parallelism(spark)
    2
    """
    try:
        return max(1, spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect
        default = str(os.cpu_count() or 1)  # with a default, get returns a str (its stub says str | None)
        return max(1, int(spark.conf.get("spark.default.parallelism", default)))  # type: ignore[arg-type]
