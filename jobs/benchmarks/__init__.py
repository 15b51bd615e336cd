"""Benchmark suites behind ``jobs/benchmark.py``: each measures the store against a baseline run in the
same process (``send``: send and dispatch, key look-ups; ``filter``: filtered reads; ``pull``: pulls)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column


def speedup(baseline_seconds: float, ours_seconds: float, digits: int = 2) -> str:
    """How many times faster ours is than the baseline, saying "slower" when it is below 1.

    >>> speedup(2.0, 1.0), speedup(1.0, 4.0)
    ('2.00x', '0.25x (slower)')
    """
    ratio = baseline_seconds / ours_seconds if ours_seconds else float("inf")
    return f"{ratio:.{digits}f}x" + (" (slower)" if ratio < 1 else "")


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (the nearest rank at or below), NaN for none.

    >>> percentile([3.0, 1.0, 2.0], 0.5), percentile([], 0.5)
    (2.0, nan)
    """
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def latency_figures(acks: list[float], end_to_end: list[float]) -> dict[str, float]:
    """Send ack and end-to-end p50 and p99 in milliseconds, as the online and grpc suites report them.

    >>> latency_figures([0.01, 0.02], [0.1])["e2e_p99_ms"]
    100.0
    """
    return {
        f"{name}_p{q}_ms": round(percentile(values, q / 100) * 1000, 1)
        for name, values in (("ack", acks), ("e2e", end_to_end))
        for q in (50, 99)
    }


def keys_and_body(i: "Column") -> list["Column"]:
    """A generated message's ``keys`` (``order-<i>``) and a 96-byte body of hashes of ``i``, as Spark columns:
    what every suite's messages carry besides their topic, tags and properties.

    >>> row = spark.range(7, 8).select(*keys_and_body(F.col("id"))).first()
    >>> row.keys, len(row.body)
    (['order-7'], 96)
    """
    from pyspark.sql import functions as F

    text = i.cast("string")
    body = F.concat(*(F.sha2(F.concat(text, F.lit(s)) if s else text, 256) for s in ("", "b", "c")))
    return [F.array(F.concat(F.lit("order-"), text)).alias("keys"), F.unhex(body).alias("body")]
