"""Benchmark suites behind ``jobs/benchmark.py``: each measures the store against a baseline run in the
same process (``send``: send and dispatch, key look-ups; ``filter``: filtered reads; ``pull``: pulls)."""


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
