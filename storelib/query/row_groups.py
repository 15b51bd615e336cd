"""Reading the row groups a plan kept, and nothing else: pyarrow on the executors, a task per share.

When a read's plan (:mod:`storelib.query.read`) keeps a small part of the clustered commitlog, a
plain Spark Parquet read of those files costs more than the bytes it returns: Spark cuts the files
into splits by size (a task and a footer parse per split, whatever the split keeps) and tests the
``cluster_seq`` ranges against every row group. :func:`read_row_groups` hands each executor task a
share of the kept row groups instead (about equal bytes, :func:`~storelib.delta.writer.contiguous_groups`),
which it reads with pyarrow, filters (topic, dispatched, queued, the exact tag check) and hands to
Spark, so a task costs what it returns and each footer is parsed once.

>>> import pyarrow.compute as pc
>>> t = store.context.tables.commitlog
>>> reads = [RowGroups(t.files(t.snapshot())[0], None, 100)]
>>> read_row_groups(spark, t.path, reads, pc.field("topic") == "TopicTest").count()
1
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["RowGroups", "read_row_groups", "TASK_BYTES"]

#: A task reads about this many (estimated, compressed) bytes at most; a small read has a task per core.
TASK_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class RowGroups:
    """Row groups to read from one commitlog data file (a full path): their indices, or None for
    every one, and the bytes that is estimated to read.

    >>> RowGroups("/store/commitlog/clustered-1.parquet", (0, 7), 2048).row_groups
    (0, 7)
    """

    path: str
    row_groups: tuple[int, ...] | None
    bytes: int


def read_row_groups(spark: "SparkSession", table_root: str, reads: Sequence[RowGroups],
                    filter: pc.Expression) -> "DataFrame":
    """The commitlog rows (of the table at ``table_root``) in ``reads`` that pass ``filter``, as a
    DataFrame of commitlog rows: one Spark job whose tasks each read a contiguous share of ``reads``."""
    from storelib.delta.spec import spark_schema
    from storelib.delta.writer import contiguous_groups, parallelism
    from storelib.storage.schema import COMMITLOG

    reads = list(reads)
    total = sum(r.bytes for r in reads)
    tasks = max(1, min(len(reads), max(parallelism(spark), -(-total // TASK_BYTES))))
    shares = contiguous_groups(reads, [max(1, r.bytes) for r in reads], tasks) if reads else []
    task = functools.partial(_read_shares, table_root, shares, filter)
    return spark.range(len(shares), numPartitions=max(1, len(shares))).mapInArrow(task, spark_schema(COMMITLOG.arrow))


#: Rows per Arrow batch handed to Spark.
_BATCH_ROWS = 32 * 1024


def _read_shares(table_root: str, shares: list[list[RowGroups]], filter: pc.Expression,
                 tasks: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One executor task: the shares whose numbers ``tasks`` holds, read and filtered."""
    from storelib.delta.table import Table
    from storelib.storage.schema import COMMITLOG

    table = Table(table_root, COMMITLOG)
    for task in tasks:
        for i in task.column(0).to_pylist():
            for read in shares[i]:
                if read.row_groups is None:
                    yield from table.scan([read.path], filter, _BATCH_ROWS)
                    continue
                rows = table.read_row_groups(read.path, read.row_groups, filter=filter)
                yield from rows.to_batches(max_chunksize=_BATCH_ROWS)
