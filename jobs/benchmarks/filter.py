"""Benchmark of filtered reads: tag and SQL92 selectors against full scans, Bloom false positives, bitmap cost.

One store gets ``n`` messages with 32 registered SQL92 subscriptions and is dispatched (bitmaps on);
a second store gets the same messages dispatched with bitmaps off, for the bitmaps' extra cost.
Four reads are timed against a bare Spark scan of every commitlog row of the topic evaluating the
same test (the baseline), each read written to Spark's ``noop`` sink so every matching row is
materialized:

* ``tag uniform``  - tag ``TagU``, 1% of messages spread evenly;
* ``tag burst``    - tag ``TagBurst``, 1% of messages sent in runs (a campaign, a batch job);
* ``sql uniform``  - group ``G_U`` with ``u = 42``, 1% evenly;
* ``sql burst``    - group ``G_B`` with ``campaign = 'spring'``, 1% in runs.

Bytes read are what the processes read during each read (``rchar`` of ``/proc/<pid>/io``, Linux).
The false positive rate of each SQL92 group is measured over the whole store: among units whose
message does not match, the share whose bitmap still hits the group's bits.

>>> BURST_RUN
20000
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from storelib.session import parallelism

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ReadFigure", "FilterFigures", "bench_filtering", "BURST_RUN"]

TOPIC = "FilterBench"
#: Messages per run of the "burst" attributes (1 run in 100 carries them).
BURST_RUN = 20_000


def filter_frame(spark: "SparkSession", n: int, partitions: int) -> "DataFrame":
    """Messages with a 1% uniform tag/property (``TagU``, ``u = 42``) and a 1% bursty one (``TagBurst``,
    ``campaign = 'spring'``); other tags from 8 values; ``u`` is ``id % 100``; 96-byte bodies of hash
    bytes, which do not compress (as real payloads mostly do not)."""
    from pyspark.sql import functions as F

    i = F.col("id")
    burst = F.pmod(F.floor(i / BURST_RUN), 100) == 7
    u = F.pmod(i, 100)
    tags = (F.when(burst, F.lit("TagBurst")).when(u == 42, F.lit("TagU"))
            .otherwise(F.concat(F.lit("Tag"), F.pmod(i, 8).cast("string"))))
    props = F.create_map(F.lit("u"), u.cast("string"), F.lit("campaign"),
                         F.when(burst, F.lit("spring")).otherwise(F.lit("none")),
                         F.lit("amount"), F.pmod(i * 7919, 1000).cast("string"))
    return spark.range(0, n, 1, partitions).select(
        F.lit(TOPIC).alias("topic"), tags.alias("tags"),
        F.array(F.concat(F.lit("order-"), i.cast("string"))).alias("keys"), props.alias("properties"),
        F.unhex(F.concat(F.sha2(i.cast("string"), 256), F.sha2(F.concat(i.cast("string"), F.lit("b")), 256),
                         F.sha2(F.concat(i.cast("string"), F.lit("c")), 256))).alias("body"))


def subscriptions() -> dict[str, str]:
    """32 SQL92 subscriptions: the two measured ones, 15 broad and 15 narrow others."""
    subs = {"G_U": "u = 42", "G_B": "campaign = 'spring'"}
    subs.update({f"G_BROAD_{k}": f"amount >= {k * 60}" for k in range(1, 16)})
    subs.update({f"G_NARROW_{k}": f"u = {k} AND amount < 500" for k in range(15)})
    return subs


@dataclass(frozen=True)
class ReadFigure:
    name: str
    seconds: float
    baseline_seconds: float
    bytes_read: int
    baseline_bytes: int
    rows: int

    def line(self) -> str:
        return (f"{self.name:<12} {self.rows:>9,} rows  {self.seconds:7.2f} s vs scan {self.baseline_seconds:7.2f} s "
                f"= {self.baseline_seconds / self.seconds:5.1f}x faster;  bytes {self.bytes_read / 2**20:8.1f} MiB vs "
                f"{self.baseline_bytes / 2**20:8.1f} MiB = {100 * self.bytes_read / max(1, self.baseline_bytes):5.1f}%")


@dataclass
class FilterFigures:
    messages: int
    reads: list[ReadFigure] = field(default_factory=list)
    false_positive_rates: dict[str, float] = field(default_factory=dict)
    dispatch_seconds: float = 0.0
    dispatch_no_bitmap_seconds: float = 0.0
    ext_seconds: float = 0.0
    ext_no_bitmap_seconds: float = 0.0

    def lines(self) -> list[str]:
        rates = sorted(self.false_positive_rates.values())
        out = [r.line() for r in self.reads]
        out.append(f"bloom fpr    groups {len(rates)}: min {100 * rates[0]:.2f}%  median "
                   f"{100 * statistics.median(rates):.2f}%  max {100 * rates[-1]:.2f}%  (configured 20%); "
                   f"G_U {100 * self.false_positive_rates['G_U']:.2f}%  G_B {100 * self.false_positive_rates['G_B']:.2f}%")
        out.append(f"bitmaps      dispatch {self.dispatch_seconds:.2f} s with 32 SQL92 subscriptions vs "
                   f"{self.dispatch_no_bitmap_seconds:.2f} s without = {self.dispatch_seconds / self.dispatch_no_bitmap_seconds:.2f}x; "
                   f"scan+write part {self.ext_seconds:.2f} s vs {self.ext_no_bitmap_seconds:.2f} s")
        return out

    def as_dict(self) -> dict:
        return {"reads": {r.name: {"seconds": round(r.seconds, 3), "baseline_seconds": round(r.baseline_seconds, 3),
                                   "speedup": round(r.baseline_seconds / r.seconds, 2), "bytes": r.bytes_read,
                                   "baseline_bytes": r.baseline_bytes,
                                   "bytes_pct": round(100 * r.bytes_read / max(1, r.baseline_bytes), 2),
                                   "rows": r.rows} for r in self.reads},
                "false_positive_rates": {g: round(v, 4) for g, v in sorted(self.false_positive_rates.items())},
                "dispatch_seconds": round(self.dispatch_seconds, 3),
                "dispatch_no_bitmap_seconds": round(self.dispatch_no_bitmap_seconds, 3),
                "ext_seconds": round(self.ext_seconds, 3), "ext_no_bitmap_seconds": round(self.ext_no_bitmap_seconds, 3)}


def input_bytes(spark: "SparkSession") -> int:
    """Bytes the Spark JVM (driver and, in local mode, executors) and this process have read so far:
    ``rchar`` of ``/proc/<pid>/io``, every ``read`` call whether served by the disk or the page cache.
    (Spark's own ``inputBytes`` metric leaves out most Parquet column reads, so it is not used.)"""
    import os

    pids = {os.getpid(), int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())}
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/io") as io:
            total += next(int(line.split()[1]) for line in io if line.startswith("rchar:"))
    return total


def _measure(spark: "SparkSession", df_fn: Callable[[], "DataFrame"], repeats: int = 2) -> tuple[float, int]:
    """Best time of ``repeats`` materializations (after one warm-up), and the bytes one of them read."""
    df_fn().write.format("noop").mode("overwrite").save()
    times, read = [], 0
    for _ in range(repeats):
        before = input_bytes(spark)
        start = time.perf_counter()
        df_fn().write.format("noop").mode("overwrite").save()
        times.append(time.perf_counter() - start)
        read = input_bytes(spark) - before
    return min(times), read


def bench_filtering(spark: "SparkSession", n: int, *, root: str | None = None, queues: int = 8,
                    partitions: int | None = None) -> FilterFigures:
    """Run the filtering benchmark on ``n`` messages (see the module docstring)."""
    from pyspark.sql import functions as F

    from storelib.filter.selector import MessageSelector
    from storelib.store import MessageStore

    work = root or tempfile.mkdtemp(prefix="storelib-bench-filter-")
    partitions = partitions or max(2, parallelism(spark) * 2)
    figures = FilterFigures(n)
    try:
        plain = MessageStore.open(f"{work}/no-bitmap", spark, enable_calc_filter_bitmap=False)
        store = MessageStore.open(f"{work}/store", spark)
        for s in (plain, store):
            s.create_topic(TOPIC, queues=queues)
        for group, expression in subscriptions().items():
            for s in (plain, store):
                s.subscribe(group, TOPIC, MessageSelector.by_sql(expression))
        frame = filter_frame(spark, n, partitions)
        for s in (plain, store):
            s.send_dataframe(frame)
        began = time.perf_counter()
        no_bitmap = plain.dispatch()
        figures.dispatch_no_bitmap_seconds = time.perf_counter() - began
        began = time.perf_counter()
        result = store.dispatch()
        figures.dispatch_seconds = time.perf_counter() - began
        figures.ext_seconds = result.seconds.get("scan", 0.0)
        figures.ext_no_bitmap_seconds = no_bitmap.seconds.get("scan", 0.0)

        from storelib.filter.sql92 import compile_sql92

        def scan() -> "DataFrame":
            return store.messages(TOPIC)

        cases = [
            ("tag uniform", lambda: store.read(TOPIC, MessageSelector.by_tag("TagU")),
             lambda: scan().where(F.col("tags") == "TagU")),
            ("tag burst", lambda: store.read(TOPIC, MessageSelector.by_tag("TagBurst")),
             lambda: scan().where(F.col("tags") == "TagBurst")),
            ("sql uniform", lambda: store.read(TOPIC, group="G_U"), lambda: scan().where(compile_sql92("u = 42"))),
            ("sql burst", lambda: store.read(TOPIC, group="G_B"),
             lambda: scan().where(compile_sql92("campaign = 'spring'"))),
        ]
        for name, ours, baseline in cases:
            seconds, read = _measure(spark, ours)
            base_seconds, base_read = _measure(spark, baseline)
            figures.reads.append(ReadFigure(name, seconds, base_seconds, read, base_read, ours().count()))
        figures.false_positive_rates = _false_positive_rates(store, list(subscriptions()))
        return figures
    finally:
        if root is None:
            shutil.rmtree(work, ignore_errors=True)


def _false_positive_rates(store, groups: list[str]) -> dict[str, float]:
    """Per group: units whose message does not match but whose bitmap hits, over units that do not match."""
    from pyspark.sql import functions as F

    from storelib.filter.message_filter import MessageFilter

    units = store.table("consume_queue_ext").where(F.col("topic") == TOPIC)
    messages = store.messages(TOPIC).select("physical_offset", "tags", "properties")
    joined = units.join(messages, units.commitlog_offset == messages.physical_offset)
    aggs = []
    subscriptions = {s.group: s for s in store.context.registry.for_topic(TOPIC)}
    for g in groups:
        mf = MessageFilter(TOPIC, subscriptions[g].selector, subscriptions[g], store.context.registry.bloom_filter)
        miss = ~mf.commitlog_column()
        aggs += [F.count_if(miss).alias(f"{g}__neg"), F.count_if(miss & mf.bitmap_hit()).alias(f"{g}__fp")]
    row = joined.agg(*aggs).first()
    return {g: row[f"{g}__fp"] / max(1, row[f"{g}__neg"]) for g in groups}
