"""Class filters: the seed's filter (``SequenceId % 10 == 0 and > 100``) as user Python code on the
executors, against the same predicate as a Spark Column, in the same run.

One topic gets ``n`` messages (``SequenceId`` = 0..n-1, four other properties, tags from 8 values,
96-byte bodies that do not compress) and is dispatched. Three reads of the topic are timed, each
written to Spark's ``noop`` sink so every matching row is materialized:

* ``match``       - group ``G_MATCH`` subscribed with :class:`~storelib.filter.class_filter.EveryTenth`
  (per-message ``match(msg, context)``);
* ``match_batch`` - group ``G_BATCH`` with :class:`~storelib.filter.class_filter.EveryTenthBatch`
  (``match_batch`` over each Arrow batch);
* ``column``      - the baseline: the store's read of every message of the topic (``*``) with the
  same predicate as a Spark Column (``properties['SequenceId']`` cast to a long), so both sides read
  the same rows the same way and differ only in the filter.

Throughput is messages of the topic per second; the ratio is ours over the Column's. Runs alternate
(ours, baseline, ours, ...); the best of ``repeats`` counts.

>>> CustomFigures(10, {"match": 2.0, "match_batch": 1.0}, 1.0, 1).lines()[0].split()[:3]
['match', '5', 'msgs/s']
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.benchmarks import keys_and_body, speedup
from storelib.filter.selector import MessageSelector
from storelib.session import parallelism

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["CustomFigures", "bench_custom", "TARGETS"]

TOPIC = "CustomBench"
#: The issue's targets: throughput at least this share of the Column's.
TARGETS = {"match": 0.3, "match_batch": 0.8}
GROUPS = {
    "match": ("G_MATCH", "storelib.filter.class_filter:EveryTenth"),
    "match_batch": ("G_BATCH", "storelib.filter.class_filter:EveryTenthBatch"),
}


@dataclass(frozen=True)
class CustomFigures:
    messages: int
    #: Best seconds of each class filter's read, and of the Column baseline.
    seconds: dict[str, float]
    baseline_seconds: float
    matched: int

    def lines(self) -> list[str]:
        base = self.messages / self.baseline_seconds
        out = []
        for name, seconds in self.seconds.items():
            rate = self.messages / seconds
            out.append(
                f"{name:<12} {rate:>12,.0f} msgs/s ({seconds:.2f} s) vs Column {base:,.0f} msgs/s "
                f"({self.baseline_seconds:.2f} s) = {speedup(self.baseline_seconds, seconds)} "
                f"(target >= {TARGETS[name]}x)"
            )
        out.append(f"matched      {self.matched:,} of {self.messages:,} messages, the same on every side")
        return out

    def as_dict(self) -> dict:
        return {
            "messages": self.messages,
            "matched": self.matched,
            "baseline_seconds": round(self.baseline_seconds, 3),
            "baseline_msgs_per_s": round(self.messages / self.baseline_seconds),
            **{
                name: {
                    "seconds": round(s, 3),
                    "msgs_per_s": round(self.messages / s),
                    "ratio": round(self.baseline_seconds / s, 3),
                    "target": TARGETS[name],
                }
                for name, s in self.seconds.items()
            },
        }


def custom_frame(spark: "SparkSession", n: int, partitions: int) -> "DataFrame":
    """``n`` messages of :data:`TOPIC`: SequenceId = id, properties a, b, region, amount, tags of 8 values."""
    from pyspark.sql import functions as F

    i = F.col("id")
    props = F.create_map(
        F.lit("SequenceId"),
        i.cast("string"),
        F.lit("a"),
        F.pmod(i, 7).cast("string"),
        F.lit("b"),
        F.when(F.pmod(i, 2) == 0, F.lit("x")).otherwise(F.lit("y")),
        F.lit("region"),
        F.concat(F.lit("r"), F.pmod(F.hash(i), 100).cast("string")),
        F.lit("amount"),
        F.pmod(i * 7919, 1000).cast("string"),
    )
    return spark.range(0, n, 1, partitions).select(
        F.lit(TOPIC).alias("topic"),
        F.concat(F.lit("Tag"), F.pmod(i, 8).cast("string")).alias("tags"),
        props.alias("properties"),
        *keys_and_body(i),
    )


def seed_column() -> "Column":
    """The seed's predicate as a Spark Column."""
    from pyspark.sql import functions as F

    seq = F.col("properties")["SequenceId"].cast("long")
    return F.coalesce((seq % 10 == 0) & (seq > 100), F.lit(False))


def bench_custom(
    spark: "SparkSession",
    n: int,
    *,
    root: str | None = None,
    queues: int = 8,
    partitions: int | None = None,
    repeats: int = 2,
) -> CustomFigures:
    """Run the class filter benchmark on ``n`` messages (see the module docstring)."""
    from jobs.benchmarks.filter import _measure_pair
    from storelib.store import MessageStore

    work = root or tempfile.mkdtemp(prefix="storelib-bench-custom-")
    partitions = partitions or max(2, parallelism(spark) * 2)
    try:
        store = MessageStore.create(f"{work}/store", spark)
        store.create_topic(TOPIC, queues=queues)
        for group, filter_class in GROUPS.values():
            store.subscribe(group, TOPIC, MessageSelector.by_class(filter_class))
        store.send_dataframe(custom_frame(spark, n, partitions))
        store.dispatch()

        def baseline() -> "DataFrame":
            return store.read(TOPIC, "*").where(seed_column())

        seconds, base = {}, []
        for name, (group, _) in GROUPS.items():
            (ours, _), (theirs, _) = _measure_pair(
                spark, lambda g=group: store.read(TOPIC, group=g), baseline, repeats=repeats
            )
            seconds[name] = ours
            base.append(theirs)
        matched = {g: store.read(TOPIC, group=g).count() for g, _ in GROUPS.values()}
        expected = baseline().count()
        assert set(matched.values()) == {expected}, (matched, expected)
        return CustomFigures(n, seconds, min(base), expected)
    finally:
        if root is None:
            shutil.rmtree(work, ignore_errors=True)
