"""Reads through a class filter: one Spark job whose tasks read planned commitlog files with pyarrow on the
executors, run the class over their Arrow batches, and hand Spark only the rows kept (or their counts).

>>> from storelib.filter.class_filter import ClassFilter
>>> from storelib.filter.selector import MessageSelector
>>> cf = ClassFilter.of(MessageSelector.by_class("storelib.filter.class_filter:Everything"), "GroupC", "TopicTest")
>>> t = store.context.tables.commitlog
>>> files = t.files(t.snapshot())
>>> read_kept(spark, cf, t.path, files, [pc.field("topic") == "TopicTest"]).count()
1
>>> count_kept(spark, cf, t.path, files, [pc.field("topic") == "Elsewhere"])
(0, ())
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from storelib.delta.spec import spark_schema
from storelib.delta.table import Table
from storelib.filter.class_batch import FilterFailure, FilterFailures
from storelib.filter.class_filter import ClassFilter
from storelib.storage.schema import COMMITLOG

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["read_kept", "count_kept", "SCAN_BATCH_ROWS"]

_log = logging.getLogger("storelib.filter")

_STATS_DDL = "kind string, count long, msg_id string, line string"
_STATS = pa.schema([("kind", pa.string()), ("count", pa.int64()), ("msg_id", pa.string()), ("line", pa.string())])
#: Rows per Arrow batch a filter gets on the executors.
SCAN_BATCH_ROWS = 32 * 1024


def read_kept(
    spark: "SparkSession", cf: ClassFilter, table_root: str, files: Sequence[str], filters: Sequence[pc.Expression]
) -> "DataFrame":
    """The commitlog rows of ``files`` (under ``table_root``) that pass their ``filters`` (one pyarrow
    expression per file) and the class filter ``cf``. One task per file reads it with pyarrow on an
    executor, streams its Arrow batches through the filter and hands Spark only the rows kept, so no row
    is converted between Spark and Python that the filter does not keep."""
    cf.load()
    task = functools.partial(_scan_partition, cf, table_root, list(files), list(filters), False)
    return spark.range(len(files), numPartitions=max(1, len(files))).mapInArrow(task, spark_schema(COMMITLOG.arrow))


def count_kept(
    spark: "SparkSession", cf: ClassFilter, table_root: str, files: Sequence[str], filters: Sequence[pc.Expression]
) -> tuple[int, tuple[FilterFailure, ...]]:
    """How many rows :func:`read_kept` keeps, and the filter's failures on the others (one Spark job; the
    executors count them, the driver adds up one row per file and failure kind)."""
    cf.load()
    task = functools.partial(_scan_partition, cf, table_root, list(files), list(filters), True)
    rows = spark.range(len(files), numPartitions=max(1, len(files))).mapInArrow(task, _STATS_DDL).collect()
    tally, kept = FilterFailures(cf.name), 0
    for row in rows:
        if row.kind == "kept":
            kept += row["count"]
        else:
            tally.add(row.kind, row["count"], row.msg_id, row.line)
    return kept, tally.report()


def _scan_partition(
    cf: ClassFilter, table_root: str, files: list[str], filters: list, stats: bool, tasks: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """One executor task: the files whose numbers ``tasks`` holds, read with pyarrow and filtered;
    the rows kept (``stats`` False), or one row of counts per failure kind and one of rows kept."""
    loaded, why = cf.load_here()
    table = Table(table_root, COMMITLOG)
    failures, kept = FilterFailures(cf.name), 0
    for task in tasks:
        for i in task.column(0).to_pylist():
            for batch in table.scan([files[i]], filters[i], SCAN_BATCH_ROWS):
                keep = cf.match_rows(batch, failures, loaded, why)
                if stats:
                    kept += int(keep.sum())
                elif keep.any():
                    yield batch.filter(pa.array(keep))
    if stats:
        rows = [{"kind": "kept", "count": kept, "msg_id": None, "line": None}] + [
            {"kind": f.kind, "count": f.count, "msg_id": f.msg_id, "line": f.line} for f in failures.report()
        ]
        yield pa.RecordBatch.from_pylist(rows, schema=_STATS)
    for f in failures.report():
        _log.warning(
            "class filter %s: %d messages failed (%s), e.g. %s: %s", f.filter, f.count, f.kind, f.msg_id, f.line
        )
