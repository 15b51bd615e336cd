"""Ranges of ``cluster_seq`` a clustered read keeps: joined, capped in number, and tested as one predicate.

A read of kept row groups names them by their ``cluster_seq`` spans (one per row group, contiguous in a
clustered file); adjacent spans are joined, and a plan keeps at most a few hundred, as Spark turns the
predicate into a Parquet filter recursively.

>>> ranges = cap(merged([(0, 9), (10, 19), (40, 49), (90, 99)]), 2)
>>> ranges
[(0, 49), (90, 99)]
>>> import pyarrow as pa, pyarrow.compute as pc
>>> pa.table({"cluster_seq": [5, 60, 95]}).filter(any_between(pc.field("cluster_seq"), ranges, pc.scalar)).num_rows
2
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["merged", "cap", "any_between"]


def merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted ranges with adjacent and overlapping ones joined.

    >>> merged([(5, 9), (0, 4), (20, 30)])
    [(0, 9), (20, 30)]
    """
    out: list[list[int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def cap(ranges: list[tuple[int, int]], limit: int) -> list[tuple[int, int]]:
    """At most ``limit`` ranges covering ``ranges``: the two with the smallest gap are joined first."""
    spans = list(ranges)
    while len(spans) > limit:
        gaps = np.array([spans[i + 1][0] - spans[i][1] for i in range(len(spans) - 1)])
        cut = np.sort(np.argsort(gaps, kind="stable")[: len(spans) - limit])
        for i in cut[::-1]:
            spans[i : i + 2] = [(spans[i][0], spans[i + 1][1])]
    return spans


def any_between(col: Any, ranges: list[tuple[int, int]], lit: Callable[[Any], Any]) -> Any:
    """``col`` in any of ``ranges``, as a balanced OR (Spark converts it to a Parquet filter recursively);
    ``col`` a Spark Column (``lit`` is ``F.lit``) or a pyarrow expression (``pc.scalar``)."""
    if not ranges:
        return lit(False)
    if len(ranges) == 1:
        lo, hi = ranges[0]
        return (col >= lit(lo)) & (col <= lit(hi))
    mid = len(ranges) // 2
    return any_between(col, ranges[:mid], lit) | any_between(col, ranges[mid:], lit)
