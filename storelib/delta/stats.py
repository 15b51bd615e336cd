"""What a data file's statistics say it may hold: the per-file min/max columns of flattened add actions
(``min.<col>``, ``max.<col>``), compared without opening a file.

>>> import pyarrow as pa
>>> actions = pa.table({"min.queue_offset": [0, 10], "max.queue_offset": [9, 19]})
>>> may_contain(actions, "queue_offset", 5, 12).to_pylist()
[True, True]
>>> may_contain(actions, "queue_offset", 12, 30).to_pylist(), may_contain(actions, "topic", "a", "a")
([False, True], None)
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["may_contain", "typed_scalar"]


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
