"""Pull latency: pulls of 32 messages from a warm store against a Spark-backed pull of the same messages.

A pull is a point read (consume queue units, their ext rows, the commitlog rows they point at) made
with pyarrow on this process over warm snapshot views, so it launches no Spark job; the benchmark
checks that by counting the jobs of a Spark job group around the pulls. The baseline answers the
same requests with Spark: the queue's consume queue range joined with the commitlog rows it points
at, over the same pruned file lists, collected to the driver.

>>> PullFigures(10, {"tag *": [0.01, 0.02, 0.03]}, [0.5, 0.6], 0).lines()[1].split()[:4]
['tag', '*', 'p50', '20.0']
"""

from __future__ import annotations

import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.benchmarks import percentile, speedup
from storelib.session import parallelism

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from storelib.store import MessageStore

__all__ = ["PullFigures", "bench_pull"]

TOPIC = "BenchTopic0"
#: The kinds of pull measured: (name, group, subscription).
KINDS = [
    ("tag *", "GroupAll", "*"),
    ("tag 2 of 10", "GroupTag", "Tag3 || Tag7"),
    ("sql92 a < 50", "GroupSql", "SQL92:a < 50"),
]


@dataclass(frozen=True)
class PullFigures:
    """Seconds per pull for each kind, the baseline's seconds per pull, and Spark jobs the pulls ran."""

    messages: int
    pulls: dict[str, list[float]]
    baseline: list[float]
    spark_jobs: int

    def lines(self) -> list[str]:
        base50 = percentile(self.baseline, 0.5)
        out = [
            f"pull of 32 from a warm store of {self.messages:,} msgs; Spark jobs run by the pulls: {self.spark_jobs}"
        ]
        for name, times in self.pulls.items():
            p50, p99 = percentile(times, 0.5), percentile(times, 0.99)
            out.append(
                f"{name:<14} p50 {p50 * 1000:6.1f} ms  p99 {p99 * 1000:6.1f} ms  over {len(times)} pulls   "
                f"baseline/ours at p50 {speedup(base50, p50, 1)}"
            )
        out.append(
            f"{'spark pull':<14} p50 {base50 * 1000:6.1f} ms  p99 {percentile(self.baseline, 0.99) * 1000:6.1f} ms  "
            f"over {len(self.baseline)} pulls (baseline)"
        )
        return out

    def as_dict(self) -> dict:
        out = {
            name: {
                "p50_ms": round(percentile(t, 0.5) * 1000, 1),
                "p99_ms": round(percentile(t, 0.99) * 1000, 1),
                "pulls": len(t),
            }
            for name, t in self.pulls.items()
        }
        out["baseline"] = {
            "p50_ms": round(percentile(self.baseline, 0.5) * 1000, 1),
            "p99_ms": round(percentile(self.baseline, 0.99) * 1000, 1),
            "pulls": len(self.baseline),
        }
        out["spark_jobs"] = self.spark_jobs
        return out


def bench_pull(
    spark: "SparkSession",
    n: int,
    *,
    pulls: int = 200,
    baseline_pulls: int = 30,
    root: str | None = None,
    queues: int = 8,
    partitions: int | None = None,
) -> PullFigures:
    """Send and dispatch ``n`` messages to one topic; time ``pulls`` random pulls of 32 of each kind."""
    from jobs.benchmarks.send import filled_store
    from storelib.filter.selector import MessageSelector

    work = root or tempfile.mkdtemp(prefix="storelib-bench-")
    partitions = partitions or max(2, parallelism(spark) * 2)
    try:
        subscriptions = {group: MessageSelector.by_sql(e[6:]) if e.startswith("SQL92:") else e for _, group, e in KINDS}
        store = filled_store(spark, f"{work}/pull", TOPIC, n, queues, partitions, subscriptions)
        per_queue = store.max_queue_offset(TOPIC, 0)
        rng = random.Random(11)
        requests = [(rng.randrange(queues), rng.randrange(max(1, per_queue - 32))) for _ in range(pulls)]
        sc = spark.sparkContext
        sc.setJobGroup("storelib-bench-pulls", "pulls must not run Spark jobs")
        times: dict[str, list[float]] = {}
        for name, group, _ in KINDS:
            store.pull(group, TOPIC, 0, 0, 32)  # warm: views loaded, readers imported
            times[name] = []
            for queue_id, offset in requests:
                start = time.perf_counter()
                r = store.pull(group, TOPIC, queue_id, offset, 32)
                times[name].append(time.perf_counter() - start)
                assert r.status.value in ("FOUND", "NO_MATCHED_MSG"), r
        jobs = len(sc.statusTracker().getJobIdsForGroup("storelib-bench-pulls"))
        sc.setJobGroup("storelib-bench-baseline", "Spark-backed pulls")
        _spark_pull(store, *requests[0])
        baseline = []
        for queue_id, offset in requests[:baseline_pulls]:
            start = time.perf_counter()
            _spark_pull(store, queue_id, offset)
            baseline.append(time.perf_counter() - start)
        sc.setLocalProperty("spark.jobGroup.id", None)
        return PullFigures(n, times, baseline, jobs)
    finally:
        if root is None:
            shutil.rmtree(work, ignore_errors=True)


def _spark_pull(store: "MessageStore", queue_id: int, offset: int) -> list:
    """The same 32 messages with Spark: consume queue units joined with their commitlog rows, collected."""
    from pyspark.sql import functions as F

    from storelib.delta.stats import Prune

    units = store.consume_queue(TOPIC, queue_id, offset, offset + 32)
    bounds = units.agg(F.min("commitlog_offset"), F.max("commitlog_offset")).collect()[0]
    rows = store.table("commitlog", Prune(between={"physical_offset": (bounds[0], bounds[1])}))
    return (
        units.join(rows, units.commitlog_offset == rows.physical_offset)
        .orderBy(units.queue_offset)
        .select(rows["*"])
        .collect()
    )
