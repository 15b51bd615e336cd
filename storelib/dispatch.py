"""Dispatch: RocketMQ's ReputMessageService, as a Spark job over the new part of the commitlog.

Each target table (``consume_queue``, ``index``, and ``consume_queue_ext`` when enabled) keeps its
own ``reput`` marker in its Delta log: the commitlog offset up to which it holds rows. A run reads
the commitlog's sequenced end from one snapshot, and for every target behind it reads only the
commitlog files of ``[marker, end)``, builds that target's rows as Spark columns, writes them from
the executors, and commits them together with the advanced marker in one Delta commit. A run that
dies anywhere leaves each target either fully at its old marker or fully at the new one, so the
next run redoes exactly what is missing: nothing twice, nothing skipped.

>>> store.dispatch()                                  # doctest: +SKIP
DispatchResult(from_offset=0, to_offset=4021, consume_queue_rows=40, index_rows=80, ...)
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from storelib import columns as C
from storelib.commitlog import COMMITLOG_MARKER
from storelib.config import StoreConfig
from storelib.message import MessageConst, SysFlag
from storelib.tables import CommitConflict, Prune, Table, with_retries
from storelib.writer import write_dataframe

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Dispatcher", "DispatchResult", "REPUT_MARKER", "FAULT_ENV"]

log = logging.getLogger(__name__)

REPUT_MARKER = "reput"
#: Set to a step name (e.g. ``consume_queue.written``) to make the process exit hard at that step.
FAULT_ENV = "STORELIB_FAULT_AT"


@dataclass
class DispatchResult:
    """What one dispatch run did: the commitlog range it covered and the rows each table got."""

    from_offset: int
    to_offset: int
    rows: dict[str, int] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def consume_queue_rows(self) -> int:
        return self.rows.get("consume_queue", 0)

    @property
    def index_rows(self) -> int:
        return self.rows.get("index", 0)


class Dispatcher:
    """Builds consume queue, ext and index rows for what is new in the commitlog."""

    def __init__(self, spark: "SparkSession", commitlog: Table, targets: dict[str, Table], config: StoreConfig,
                 fault: Callable[[str], None] | None = None):
        self.spark = spark
        self.commitlog = commitlog
        self.targets = targets
        self.config = config
        self._fault = fault

    def _step(self, name: str) -> None:
        if os.environ.get(FAULT_ENV) == name:
            log.error("fault injected at %s: exiting", name)
            os._exit(86)
        if self._fault is not None:
            self._fault(name)

    def progress(self) -> dict[str, int]:
        """Each target's ``reput`` marker, and the commitlog's sequenced end as ``commitlog``."""
        out = {name: Table.marker(t.snapshot(), REPUT_MARKER) for name, t in self.targets.items()}
        out["commitlog"] = Table.marker(self.commitlog.snapshot(), COMMITLOG_MARKER)
        return out

    def run(self) -> DispatchResult:
        """Dispatch everything sequenced so far; return what was done."""
        snapshot = self.commitlog.snapshot()
        end = Table.marker(snapshot, COMMITLOG_MARKER)
        result = DispatchResult(end, end)
        for name, table in self.targets.items():
            began = time.perf_counter()
            start, n, version = with_retries(
                table, self.config.max_commit_attempts,
                lambda target, name=name, table=table: self._dispatch_into(name, table, target, snapshot, end),
                what=f"dispatch {name}")
            result.seconds[name] = round(time.perf_counter() - began, 3)
            result.from_offset = min(result.from_offset, start)
            result.rows[name] = n
            result.versions[name] = version
        return result

    def _dispatch_into(self, name: str, table: Table, target, commitlog, end: int) -> tuple[int, int, int]:
        """One target's rows for commitlog ``[its reput marker, end)``, committed with the marker moved to ``end``.

        Returns (start offset, rows written, table version); raises CommitConflict to be retried.
        """
        start = Table.marker(target, REPUT_MARKER)
        if start >= end:
            return start, 0, target.version()
        rows = self.commitlog.read(self.spark, commitlog, Prune(between={"physical_offset": (start, end - 1)}))
        rows = rows.where((rows.physical_offset >= start) & (rows.physical_offset < end))
        files = write_dataframe(getattr(self, f"_build_{name}")(rows), table, cluster_by=table.spec.cluster_by,
                                target_file_size=self.config.target_file_size)
        self._step(f"{name}.written")
        try:
            version = table.commit(target, files, markers={REPUT_MARKER: end}, operation="DISPATCH",
                                   info={"storelib.from": str(start), "storelib.to": str(end)})
        except CommitConflict:
            table.discard(files)
            raise
        self._step(f"{name}.committed")
        return start, sum(f.num_records for f in files), version

    # ---- row builders: one per target table ------------------------------------------------
    def _build_consume_queue(self, rows: "DataFrame") -> "DataFrame":
        """CommitLogDispatcherBuildConsumeQueue: normal and committed messages only."""
        from pyspark.sql import functions as F

        tran = F.col("sysflag").bitwiseAND(F.lit(SysFlag.TRANSACTION_ROLLBACK_TYPE))
        out = rows.where(tran.isin(SysFlag.TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE)).select(
            "topic", "queue_id", "queue_offset", F.col("physical_offset").alias("commitlog_offset"), "size",
            C.tags_code(F.col("tags")).alias("tags_code"), "store_timestamp")
        return out  # commitlog order is queue-offset order; the writer files each queue apart

    def _build_index(self, rows: "DataFrame") -> "DataFrame":
        """IndexService.buildIndex: one row per UNIQ_KEY and per non-empty KEYS key, rollbacks excepted."""
        from pyspark.sql import functions as F

        tran = F.col("sysflag").bitwiseAND(F.lit(SysFlag.TRANSACTION_ROLLBACK_TYPE))
        rows = rows.where(tran != SysFlag.TRANSACTION_ROLLBACK_TYPE)
        # The UNIQ_KEY and each non-empty key of KEYS split on spaces, hashed as IndexFile does.
        candidates = F.concat(F.array(F.col("uniq_key")),
                              F.split(F.coalesce(F.col("keys"), F.lit("")), MessageConst.KEY_SEPARATOR))
        exploded = (rows.select("topic", "physical_offset", "store_timestamp", F.explode(candidates).alias("key"))
                    .where(F.length("key") > 0))
        index_key = F.concat(F.col("topic"), F.lit("#"), F.col("key"))
        shift = 31 - max(0, (self.config.index_hash_ranges - 1).bit_length())
        out = exploded.select(C.index_key_hash(index_key).alias("key_hash"),
                              F.col("physical_offset").alias("commitlog_offset"), "store_timestamp")
        # No shuffle: each task files its rows by hash range; compaction later merges and sorts them.
        return out.withColumn("hash_range", F.shiftright(F.col("key_hash"), shift).cast("int"))
