"""Benchmarks of the store against bare Spark jobs measured in the same run.

Machines are shared and noisy, so every figure is reported next to a baseline doing comparable work
in the same process, and as a ratio to it. ``jobs/benchmark.py`` is the entry point.

>>> r = Figure("send", 10, 1.0, 0.5)
>>> round(r.ratio, 2), r.rate
(2.0, 10.0)
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Figure", "message_frame", "bench_send_and_dispatch"]


@dataclass(frozen=True)
class Figure:
    """One measured step: ``seconds`` for the store, ``baseline_seconds`` for the bare Spark job."""

    name: str
    messages: int
    seconds: float
    baseline_seconds: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else float("inf")

    @property
    def ratio(self) -> float:
        return self.seconds / self.baseline_seconds if self.baseline_seconds else float("inf")

    def line(self) -> str:
        return (f"{self.name:<10} {self.messages:>12,} msgs  {self.seconds:8.2f} s  {self.rate:>12,.0f} msg/s   "
                f"baseline {self.baseline_seconds:8.2f} s   ratio {self.ratio:5.2f}")


def message_frame(spark: "SparkSession", n: int, topics: list[str], partitions: int) -> "DataFrame":
    """``n`` deterministic messages: tags from 10 values, one key each (an order id), three properties,
    ~100-byte bodies. Each message also gets its UNIQ_KEY, so dispatch writes two index rows per message."""
    from pyspark.sql import functions as F

    i = F.col("id")
    topic = F.element_at(F.array(*[F.lit(t) for t in topics]), (F.pmod(i, len(topics)) + 1).cast("int"))
    return spark.range(0, n, 1, partitions).select(
        topic.alias("topic"),
        F.concat(F.lit("Tag"), F.pmod(i, 10).cast("string")).alias("tags"),
        F.array(F.concat(F.lit("order-"), i.cast("string"))).alias("keys"),
        F.create_map(F.lit("a"), F.pmod(i, 100).cast("string"), F.lit("region"), F.lit("eu-west"),
                     F.lit("seq"), i.cast("string")).alias("properties"),
        F.encode(F.rpad(F.concat(F.lit("message body "), i.cast("string")), 100, "."), "UTF-8").alias("body"),
    )


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_send_and_dispatch(spark: "SparkSession", n: int, *, root: str | None = None, topics: int = 4,
                            queues: int = 8, partitions: int | None = None) -> list[Figure]:
    """Send ``n`` messages as a DataFrame and dispatch them; baselines write the same rows as plain Parquet."""
    from pyspark.sql import functions as F

    from storelib.store import MessageStore

    work = root or tempfile.mkdtemp(prefix="storelib-bench-")
    partitions = partitions or max(2, spark.sparkContext.defaultParallelism * 2)
    names = [f"BenchTopic{i}" for i in range(topics)]
    try:
        store = MessageStore.open(f"{work}/store", spark)
        for t in names:
            store.create_topic(t, queues=queues)
        frame = message_frame(spark, n, names, partitions)
        # Warm the JVM's JIT and the Python workers on a run of 5% (>= 100k messages) for both sides,
        # so neither the store nor the baseline pays start-up costs in the measured run.
        warm_n = min(n, max(100_000, n // 20))
        store_warm = MessageStore.open(f"{work}/warm", spark)
        for t in names:
            store_warm.create_topic(t, queues=queues)
        warm = message_frame(spark, warm_n, names, partitions)
        warm.write.mode("overwrite").parquet(f"{work}/warm-parquet")
        store_warm.send_dataframe(warm)
        store_warm.table("commitlog").select("topic", "queue_id").write.mode("overwrite").parquet(f"{work}/warm-cq")
        store_warm.dispatch()

        base_send = _timed(lambda: frame.write.mode("overwrite").parquet(f"{work}/baseline-send"))
        send = _timed(lambda: store.send_dataframe(frame))

        cols = ["topic", "queue_id", "queue_offset", "physical_offset", "size", "tags", "store_timestamp", "sysflag",
                "keys", "uniq_key"]

        def baseline_dispatch() -> None:
            rows = store.table("commitlog").select(*cols)
            rows.select("topic", "queue_id", "queue_offset", F.col("physical_offset").alias("commitlog_offset"),
                        "size", F.hash("tags").cast("long").alias("tags_code"), "store_timestamp") \
                .write.mode("overwrite").parquet(f"{work}/baseline-dispatch")

        base_dispatch = _timed(baseline_dispatch)
        result: list = []
        dispatch = _timed(lambda: result.append(store.dispatch()))
        parts = result[0].seconds
        return [Figure("send", n, send, base_send), Figure("dispatch", n, dispatch, base_dispatch),
                Figure("  cq part", n, parts.get("consume_queue", 0.0), base_dispatch),
                Figure("  index part", n, parts.get("index", 0.0), base_dispatch)]
    finally:
        if root is None:
            shutil.rmtree(work, ignore_errors=True)
