"""What a data file's statistics say it may hold: the per-file min/max columns of flattened add actions
(``min.<col>``, ``max.<col>``), compared without opening a file. A file without statistics for a column
may hold anything, and is kept.

>>> import pyarrow as pa
>>> actions = pa.table({"min.queue_offset": [0, 10], "max.queue_offset": [9, 19]})
>>> may_contain(actions, "queue_offset", 5, 12).to_pylist()
[True, True]
>>> may_contain(actions, "queue_offset", 12, 30).to_pylist(), may_contain(actions, "topic", "a", "a")
([False, True], None)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "Prune",
    "prune_actions",
    "clustered",
    "only",
    "holding",
    "ranges",
    "may_contain",
    "typed_scalar",
    "narrowed",
    "STATS_KEYS",
]


@dataclass(frozen=True)
class Prune:
    """Which rows a read wants, for skipping files: column equalities and inclusive ranges.

    >>> Prune(equal={"topic": "T", "queue_id": 0}, between={"queue_offset": (10, 42)})
    Prune(equal={'topic': 'T', 'queue_id': 0}, between={'queue_offset': (10, 42)})
    """

    equal: Mapping[str, Any] | None = None
    between: Mapping[str, tuple[Any, Any]] | None = None


def prune_actions(actions: pa.Table, prune: Prune | None = None) -> pa.Table:
    """The add actions whose statistics say their file may hold rows matching ``prune`` (no statistics: kept).

    >>> actions = pa.table({"path": ["a", "b"], "min.queue_offset": [0, 10], "max.queue_offset": [9, 19]})
    >>> prune_actions(actions, Prune(between={"queue_offset": (12, 30)})).column("path").to_pylist()
    ['b']
    """
    if actions.num_rows == 0:
        return actions
    wanted = [(c, v, v) for c, v in ((prune.equal or {}).items() if prune else ())]
    wanted += [(c, lo, hi) for c, (lo, hi) in ((prune.between or {}).items() if prune else ())]
    keep = None
    for col, lo, hi in wanted:
        may = _may_contain_ints(actions, col, lo, hi)
        if may is None:
            may = may_contain(actions, col, lo, hi)
            may = None if may is None else pc.fill_null(may, True).to_numpy(zero_copy_only=False)
        if may is not None:
            keep = may if keep is None else keep & may
    if keep is not None and not keep.all():
        actions = actions.filter(pa.array(keep, pa.bool_()))
    return actions


def _may_contain_ints(actions: pa.Table, col: str, lo: Any, hi: Any) -> "np.ndarray | None":
    """:func:`may_contain` with numpy, for integer statistics that every file has and integer bounds (a
    point read's common case: queue or commitlog offsets); None otherwise."""
    mins, maxs = f"min.{col}", f"max.{col}"
    if (
        mins not in actions.column_names
        or maxs not in actions.column_names
        or not (isinstance(lo, int) and isinstance(hi, int))
    ):
        return None
    cmin, cmax = actions.column(mins), actions.column(maxs)
    if not (pa.types.is_integer(cmin.type) and pa.types.is_integer(cmax.type)) or cmin.null_count or cmax.null_count:
        return None
    return (cmin.to_numpy() <= hi) & (cmax.to_numpy() >= lo)


def clustered(actions: pa.Table, columns: Sequence[str]) -> pa.Table:
    """The add actions of files whose rows share one value of each column (min equals max): one
    queue's files, for tables the writers cluster by queue.

    >>> actions = pa.table({"path": ["a", "b"], "min.queue_id": [1, 0], "max.queue_id": [1, 3]})
    >>> clustered(actions, ["queue_id"]).column("path").to_pylist()
    ['a']
    """
    if actions.num_rows == 0:
        return actions
    keep = None
    for c in columns:
        if f"min.{c}" not in actions.column_names:
            return actions.slice(0, 0)
        same = pc.equal(actions.column(f"min.{c}"), actions.column(f"max.{c}"))
        keep = same if keep is None else pc.and_(keep, same)
    return actions if keep is None else actions.filter(pc.fill_null(keep, False))


def only(actions: pa.Table, equal: Mapping[str, Any]) -> pa.Table:
    """The add actions of files holding only rows with these values (min and max statistics both equal).

    >>> actions = pa.table({"path": ["a", "b"], "min.queue_id": [1, 2], "max.queue_id": [1, 2]})
    >>> only(actions, {"queue_id": 2}).column("path").to_pylist()
    ['b']
    """
    actions = clustered(actions, list(equal))
    keep = None
    for c, v in equal.items():
        column = actions.column(f"min.{c}")
        same = pc.equal(column, typed_scalar(v, column.type))
        keep = same if keep is None else pc.and_(keep, same)
    return actions if keep is None or actions.num_rows == 0 else actions.filter(pc.fill_null(keep, False))


def holding(actions: pa.Table, col: str, values: pa.Array) -> pa.Table:
    """The add actions whose ``[min, max]`` of ``col`` holds at least one of ``values`` (no stats: kept).

    >>> actions = pa.table({"path": ["a", "b"], "min.key_hash": [0, 50], "max.key_hash": [9, 59]})
    >>> holding(actions, "key_hash", pa.array([55, 70])).column("path").to_pylist()
    ['b']
    """
    if actions.num_rows == 0 or len(values) == 0:
        return actions.slice(0, 0)
    mins, maxs = f"min.{col}", f"max.{col}"
    if mins not in actions.column_names:
        return actions
    wanted = np.sort(values.to_numpy(zero_copy_only=False))
    lo = actions.column(mins).to_numpy(zero_copy_only=False)
    hi = actions.column(maxs).to_numpy(zero_copy_only=False)
    unknown = (
        pc.is_null(actions.column(mins)).to_numpy(zero_copy_only=False)
        if actions.column(mins).null_count
        else np.zeros(len(lo), bool)
    )
    first_at_or_above = np.searchsorted(wanted, np.where(unknown, 0, lo), side="left")
    holds = unknown | (
        (first_at_or_above < len(wanted))
        & (wanted[np.minimum(first_at_or_above, len(wanted) - 1)] <= np.where(unknown, 0, hi))
    )
    return actions.filter(pa.array(holds, pa.bool_()))


def ranges(actions: pa.Table, col: str) -> pa.Table:
    """``actions`` narrowed to each file's path, size and ``[min, max]`` of ``col``: what a range test reads,
    so that keeping some files costs four columns, not every statistic (a point read's file choice); the
    size opens a file on an object store without a HEAD request.

    >>> ranges(pa.table({"path": ["a"], "size_bytes": [1], "min.k": [0], "max.k": [9], "x": [0]}), "k").column_names
    ['path', 'size_bytes', 'min.k', 'max.k']
    """
    kept = ("path", "size_bytes", f"min.{col}", f"max.{col}")
    return actions.select([c for c in kept if c in actions.column_names])


def may_contain(actions: pa.Table, col: str, lo: Any, hi: Any) -> pa.ChunkedArray | None:
    """Per file: may any row have ``lo <= col <= hi``? Null (unknown) where statistics are missing,
    None where the actions keep no statistics for ``col``."""
    mins, maxs = f"min.{col}", f"max.{col}"
    if mins not in actions.column_names or maxs not in actions.column_names:
        return None
    cmin, cmax = actions.column(mins), actions.column(maxs)
    lo_s, hi_s = typed_scalar(lo, cmin.type), typed_scalar(hi, cmax.type)
    return pc.and_kleene(pc.less_equal(cmin, hi_s), pc.greater_equal(cmax, lo_s))


def typed_scalar(value: Any, kind: pa.DataType) -> pa.Scalar:
    """``value`` as a scalar of a statistics column's type (a timestamp given in microseconds, UTC).

    >>> typed_scalar(7, pa.int32()).type, typed_scalar(0, pa.timestamp("ms", tz="UTC")).as_py().year
    (DataType(int32), 1970)
    """
    if pa.types.is_timestamp(kind):
        return pa.scalar(value, type=pa.timestamp("us", tz="UTC")).cast(kind)
    return pa.scalar(value).cast(kind)


#: Where the flattened statistics columns (``min.<col>`` ...) come from in an add action's ``stats``.
STATS_KEYS = {"min": "minValues", "max": "maxValues", "null_count": "nullCount"}


def narrowed(actions: pa.Table, statistics: "tuple[str, ...] | None") -> pa.Table:
    """Flattened add actions with the min/max of ``statistics`` only (None: all), and no null counts
    unless all are kept: what a view keeps, so bringing it forward fills only those. A reader that finds
    no statistics for a column keeps every file (:func:`prune_actions`).

    >>> actions = pa.table({"path": ["a"], "min.x": [1], "max.x": [2], "min.y": [3], "null_count.x": [0]})
    >>> narrowed(actions, ("x",)).column_names
    ['path', 'min.x', 'max.x']
    """
    if statistics is None:
        return actions
    kept = [
        c
        for c in actions.column_names
        if (c.partition(".")[0] not in STATS_KEYS)
        or (c.partition(".")[0] in ("min", "max") and c.partition(".")[2] in statistics)
    ]
    return actions.select(kept)
