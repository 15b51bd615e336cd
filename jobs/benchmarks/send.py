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

from storelib.session import parallelism

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from storelib.store import MessageStore

__all__ = ["Figure", "message_frame", "bench_send_and_dispatch", "bench_key_lookup", "LookupFigures"]


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
        return (
            f"{self.name:<10} {self.messages:>12,} msgs  {self.seconds:8.2f} s  {self.rate:>12,.0f} msg/s   "
            f"baseline {self.baseline_seconds:8.2f} s   ratio {self.ratio:5.2f}"
        )


def message_frame(
    spark: "SparkSession", n: int, topics: list[str], partitions: int, distinct_keys: int | None = None
) -> "DataFrame":
    """``n`` deterministic messages: tags from 10 values, one key each (an order id), three properties,
    ~100-byte bodies. Each message also gets its UNIQ_KEY, so dispatch writes two index rows per message.

    With ``distinct_keys``, consecutive messages share a key (``n / distinct_keys`` events per order,
    sent close together, as an order's events are).
    """
    from pyspark.sql import functions as F

    i = F.col("id")
    key = i if distinct_keys is None else (i * distinct_keys / n).cast("long")
    topic = F.element_at(F.array(*[F.lit(t) for t in topics]), (F.pmod(i, len(topics)) + 1).cast("int"))
    return spark.range(0, n, 1, partitions).select(
        topic.alias("topic"),
        F.concat(F.lit("Tag"), F.pmod(i, 10).cast("string")).alias("tags"),
        F.array(F.concat(F.lit("order-"), key.cast("string"))).alias("keys"),
        F.create_map(
            F.lit("a"), F.pmod(i, 100).cast("string"), F.lit("region"), F.lit("eu-west"), F.lit("seq"), i.cast("string")
        ).alias("properties"),
        F.encode(F.rpad(F.concat(F.lit("message body "), i.cast("string")), 100, "."), "UTF-8").alias("body"),
    )


def filled_store(
    spark: "SparkSession", root: str, topic: str, n: int, queues: int, partitions: int, subscriptions: dict[str, object]
) -> "MessageStore":
    """A store at ``root`` with ``topic`` of ``queues`` queues, the groups' ``subscriptions`` and ``n``
    messages (:func:`message_frame`) sent and dispatched; a store kept from an earlier run is used as it is."""
    from storelib.store import MessageStore

    store = MessageStore.create(root, spark)
    store.create_topic(topic, queues=queues)
    for group, selector in subscriptions.items():
        store.subscribe(group, topic, selector)
    if store.max_queue_offset(topic, 0) == 0:
        store.send_dataframe(message_frame(spark, n, [topic], partitions))
        store.dispatch()
    return store


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_send_and_dispatch(
    spark: "SparkSession",
    n: int,
    *,
    root: str | None = None,
    topics: int = 4,
    queues: int = 8,
    partitions: int | None = None,
    repeats: int = 2,
) -> list[Figure]:
    """Send ``n`` messages as a DataFrame and dispatch them; baselines write the same rows as plain Parquet.

    Each side runs ``repeats`` times, the store and its baseline in turn, each send into a store
    of its own; every figure is the best of its runs, so a noisy neighbour slows one run, not the
    figure.
    """
    from pyspark.sql import functions as F

    from storelib.store import MessageStore

    work = root or tempfile.mkdtemp(prefix="storelib-bench-")
    partitions = partitions or max(2, parallelism(spark) * 2)
    names = [f"BenchTopic{i}" for i in range(topics)]

    def new_store(name: str) -> MessageStore:
        store = MessageStore.create(f"{work}/{name}", spark)
        for t in names:
            store.create_topic(t, queues=queues)
        return store

    def baseline_dispatch(store: MessageStore) -> None:
        # Reading the columns dispatch reads, writing one consume-queue-like row per message.
        rows = store.table("commitlog").select(
            "topic",
            "queue_id",
            "queue_offset",
            "physical_offset",
            "size",
            "tags",
            "store_timestamp",
            "sysflag",
            "keys",
            "uniq_key",
        )
        rows.select(
            "topic",
            "queue_id",
            "queue_offset",
            F.col("physical_offset").alias("commitlog_offset"),
            "size",
            F.hash("tags").cast("long").alias("tags_code"),
            "store_timestamp",
        ).write.mode("overwrite").parquet(f"{work}/baseline-dispatch")

    try:
        frame = message_frame(spark, n, names, partitions)
        # Warm the JVM's JIT and the Python workers on a run of 5% (>= 100k messages) for both sides,
        # so neither the store nor the baseline pays start-up costs in the measured runs.
        warm_n = min(n, max(100_000, n // 20))
        store_warm = new_store("warm")
        warm = message_frame(spark, warm_n, names, partitions)
        warm.write.mode("overwrite").parquet(f"{work}/warm-parquet")
        store_warm.send_dataframe(warm)
        baseline_dispatch(store_warm)
        store_warm.dispatch()

        stores = [new_store(f"store{i}") for i in range(repeats)]
        base_send, send, base_dispatch, dispatch, results = [], [], [], [], []
        for store in stores:
            base_send.append(_timed(lambda: frame.write.mode("overwrite").parquet(f"{work}/baseline-send")))
            send.append(_timed(lambda: store.send_dataframe(frame)))
        for store in stores:
            base_dispatch.append(_timed(lambda: baseline_dispatch(stores[0])))
            dispatch.append(_timed(lambda: results.append(store.dispatch())))
        parts = results[dispatch.index(min(dispatch))].seconds
        commits = sum(v for k, v in parts.items() if k != "scan")
        return [
            Figure("send", n, min(send), min(base_send)),
            Figure("dispatch", n, min(dispatch), min(base_dispatch)),
            Figure("  scan+write", n, parts.get("scan", 0.0), min(base_dispatch)),
            Figure("  commits", n, commits, min(base_dispatch)),
        ]
    finally:
        if root is None:
            shutil.rmtree(work, ignore_errors=True)


@dataclass(frozen=True)
class LookupFigures:
    """Key lookups through the index against full scans of the commitlog for the same keys."""

    messages: int
    distinct_keys: int
    lookup_seconds: list[float]
    files_touched: list[dict]
    scan_seconds: list[float]

    @staticmethod
    def _pct(values: list[float], q: float) -> float:
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def lines(self) -> list[str]:
        p50, p99 = self._pct(self.lookup_seconds, 0.5), self._pct(self.lookup_seconds, 0.99)
        scan = self._pct(self.scan_seconds, 0.5)
        idx = max(f.get("index", 0) for f in self.files_touched)
        cl = max(f.get("commitlog", 0) for f in self.files_touched)
        return [
            f"key lookup  {self.messages:,} msgs, {self.distinct_keys:,} keys: p50 {p50 * 1000:.0f} ms, "
            f"p99 {p99 * 1000:.0f} ms over {len(self.lookup_seconds)} lookups; files touched: index {idx}, "
            f"commitlog {cl}",
            f"full scan   p50 {scan * 1000:.0f} ms over {len(self.scan_seconds)} scans   speed-up {scan / p50:.0f}x",
        ]

    def as_dict(self) -> dict:
        p50 = self._pct(self.lookup_seconds, 0.5)
        scan = self._pct(self.scan_seconds, 0.5)
        return {
            "lookup_p50_ms": round(p50 * 1000, 1),
            "lookup_p99_ms": round(self._pct(self.lookup_seconds, 0.99) * 1000, 1),
            "index_files_max": max(f.get("index", 0) for f in self.files_touched),
            "commitlog_files_max": max(f.get("commitlog", 0) for f in self.files_touched),
            "scan_p50_ms": round(scan * 1000, 1),
            "speedup": round(scan / p50, 1),
        }


def bench_key_lookup(
    spark: "SparkSession",
    n: int,
    distinct_keys: int,
    *,
    lookups: int = 50,
    scans: int = 3,
    root: str | None = None,
    partitions: int | None = None,
) -> LookupFigures:
    """Send, dispatch and compact ``n`` messages over ``distinct_keys`` keys; time key lookups and full scans."""
    import random

    from pyspark.sql import functions as F

    from storelib.query.lookup import MessageQuery
    from storelib.store import MessageStore

    work = root or tempfile.mkdtemp(prefix="storelib-bench-")
    partitions = partitions or max(2, parallelism(spark) * 2)
    try:
        store = MessageStore.create(f"{work}/lookup", spark)
        store.create_topic("BenchTopic0", queues=8)
        store.send_dataframe(message_frame(spark, n, ["BenchTopic0"], partitions, distinct_keys=distinct_keys))
        store.dispatch()
        store.compact()
        rng = random.Random(7)
        keys = [f"order-{rng.randrange(distinct_keys)}" for _ in range(lookups)]
        query = MessageQuery(store.context)  # what store.query_by_key runs, with its counters
        query.by_key("BenchTopic0", keys[0])  # warm the file listing and the Parquet readers
        times, touched = [], []
        for key in keys:
            start = time.perf_counter()
            found = query.by_key("BenchTopic0", key)
            times.append(time.perf_counter() - start)
            touched.append(dict(query.files_touched))
            assert found, key
        scan_times = []
        for key in keys[:scans]:
            start = time.perf_counter()
            store.messages("BenchTopic0").where(F.array_contains(F.split(F.col("keys"), " "), key)).orderBy(
                F.col("physical_offset").desc()
            ).limit(32).collect()
            scan_times.append(time.perf_counter() - start)
        return LookupFigures(n, distinct_keys, times, touched, scan_times)
    finally:
        if root is None:
            shutil.rmtree(work, ignore_errors=True)
