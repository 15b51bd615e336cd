"""Dispatch: RocketMQ's ReputMessageService, as a Spark job over the new part of the commitlog.

Each target table (``consume_queue``, ``consume_queue_ext`` and ``index``) keeps its
own ``reput`` marker in its Delta log: the commitlog offset up to which it holds rows. A run reads
the commitlog's sequenced end from one snapshot, and for every target behind it reads only the
commitlog files of ``[marker, end)``, builds that target's rows as Spark columns, writes them from
the executors, and commits them together with the advanced marker in one Delta commit. A run that
dies anywhere leaves each target either fully at its old marker or fully at the new one, so the
next run redoes exactly what is missing: nothing twice, nothing skipped.

With the ext queue on (``enable_consume_queue_ext``), each consume queue row's tag code is the
decorated address of its ``consume_queue_ext`` row, which holds the real tag code, the store time
and the filter bitmap: CommitLogDispatcherCalcBitMap evaluates every live SQL92 subscription of
the message's topic (Spark columns, all subscriptions in one pass) and sets the subscription's Bloom
bits where it returns TRUE. Each ext row records the registry version its bitmap was computed with.
With the ext queue off, the ext target still moves its marker (with no rows), so the two always
cover the same messages.

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
from storelib.filter.summary import record_summaries, summarizer_for
from storelib.message import MessageConst, SysFlag
from storelib.tables import Prune, Table, with_retries
from storelib.writer import write_dataframe

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from storelib.filter.registry import Subscription, SubscriptionRegistry

__all__ = ["Dispatcher", "DispatchResult", "queued", "REPUT_MARKER", "FAULT_ENV"]

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


def queued(rows: "DataFrame") -> "DataFrame":
    """Messages that get a consume queue row: normal and committed ones (not prepared, not rolled back)."""
    from pyspark.sql import functions as F

    tran = F.col("sysflag").bitwiseAND(F.lit(SysFlag.TRANSACTION_ROLLBACK_TYPE))
    return rows.where(tran.isin(SysFlag.TRANSACTION_NOT_TYPE, SysFlag.TRANSACTION_COMMIT_TYPE))


class Dispatcher:
    """Builds consume queue, ext and index rows for what is new in the commitlog."""

    def __init__(self, spark: "SparkSession", commitlog: Table, targets: dict[str, Table], config: StoreConfig,
                 fault: Callable[[str], None] | None = None, registry: "SubscriptionRegistry | None" = None,
                 summaries: Table | None = None):
        self.spark = spark
        self.commitlog = commitlog
        self.targets = targets
        self.config = config
        self._fault = fault
        self.registry = registry
        self.summaries = summaries
        self._filters: tuple[int, list["Subscription"]] | None = None

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
        self._filters = None
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
        files, summarize = [], None
        if name != "consume_queue_ext" or self.ext_enabled:
            rows = self.commitlog.read(self.spark, commitlog, Prune(between={"physical_offset": (start, end - 1)}))
            rows = rows.where((rows.physical_offset >= start) & (rows.physical_offset < end))
            summarize = summarizer_for(self.filters()[1]) if name == "consume_queue_ext" else None
            files = write_dataframe(getattr(self, f"_build_{name}")(rows), table, cluster_by=table.spec.cluster_by,
                                    target_file_size=self.config.target_file_size, summarize=summarize)
        self._step(f"{name}.written")
        if summarize is not None and self.summaries is not None and files:
            record_summaries(self.summaries, files, self.config.max_commit_attempts)
            self._step(f"{name}.summarized")
        version = table.commit(target, files, markers={REPUT_MARKER: end}, operation="DISPATCH",
                               info={"storelib.from": str(start), "storelib.to": str(end)})
        self._step(f"{name}.committed")
        return start, sum(f.num_records for f in files), version

    @property
    def ext_enabled(self) -> bool:
        return self.config.enable_consume_queue_ext and "consume_queue_ext" in self.targets

    def filters(self) -> tuple[int, list["Subscription"]]:
        """The registry version this run uses and its live SQL92 subscriptions with valid Bloom data."""
        if self._filters is None:
            if self.registry is None or not self.config.enable_calc_filter_bitmap:
                self._filters = (0, [])
            else:
                snapshot = self.registry.snapshot()
                bloom = self.registry.bloom_filter
                subs = [s for s in self.registry.all(snapshot)
                        if s.is_sql92 and s.bloom is not None and bloom.is_valid(s.bloom)]
                self._filters = (snapshot.version(), subs)
        return self._filters

    # ---- row builders: one per target table ------------------------------------------------
    def _build_consume_queue(self, rows: "DataFrame") -> "DataFrame":
        """CommitLogDispatcherBuildConsumeQueue; the tag code is the decorated ext address with the ext queue on."""
        from pyspark.sql import functions as F

        code = C.decorate_ext_addr(F.col("queue_offset")) if self.ext_enabled else self._tags_code()
        out = queued(rows).select(
            "topic", "queue_id", "queue_offset", F.col("physical_offset").alias("commitlog_offset"), "size",
            code.alias("tags_code"), "store_timestamp")
        return out  # commitlog order is queue-offset order; the writer files each queue apart

    def _tags_code(self) -> "Column":
        """The real tag code of a row (checkMessageAndReturnSize): ``String.hashCode`` of TAGS, except
        that a SCHEDULE_TOPIC_XXXX message with a DELAY level > 0 gets its deliver timestamp instead:
        store time in ms plus the delay of the level, the level capped at the highest one."""
        from pyspark.sql import functions as F

        from storelib.topics import SCHEDULE_TOPIC

        delays = self.config.delay_levels_ms
        level = F.try_element_at(F.col("properties"), F.lit(MessageConst.DELAY)).try_cast("int")
        capped = F.least(level, F.lit(len(delays)))
        delay_ms = F.try_element_at(F.array(*[F.lit(d).cast("long") for d in delays]), capped)
        deliver = F.unix_millis(F.col("store_timestamp")) + delay_ms
        scheduled = (F.col("topic") == SCHEDULE_TOPIC) & level.isNotNull() & (level > 0)
        return F.when(scheduled, deliver).otherwise(C.tags_code(F.col("tags"))).cast("long")

    def _build_consume_queue_ext(self, rows: "DataFrame") -> "DataFrame":
        """ConsumeQueueExt units: real tag code, store time, and the CalcBitMap filter bitmap."""
        from pyspark.sql import functions as F

        from storelib.filter.bloom import bitmap_column

        version, subs = self.filters()
        if subs:
            from storelib.filter.sql92_spark import to_columns_with_inputs

            # Each property look-up and number parse once per row, shared by every subscription.
            inputs, predicates = to_columns_with_inputs([s.compiled.tree for s in subs], "properties")
            rows = rows.select("*", *inputs)
            matches = [((F.col("topic") == s.topic) & p, s.bloom) for s, p in zip(subs, predicates)]
            topics = sorted({s.topic for s in subs})
            bitmap = F.when(F.col("topic").isin(topics), bitmap_column(matches, subs[0].bloom.bit_num))
            filter_version = F.when(F.col("topic").isin(topics), F.lit(version).cast("long"))
        else:
            bitmap, filter_version = F.lit(None).cast("binary"), F.lit(None).cast("long")
        return queued(rows).select(
            "topic", "queue_id", "queue_offset", F.col("queue_offset").alias("ext_offset"),
            F.col("physical_offset").alias("commitlog_offset"), "size", self._tags_code().alias("tags_code"),
            "store_timestamp", bitmap.alias("filter_bitmap"), filter_version.alias("filter_version"))

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
