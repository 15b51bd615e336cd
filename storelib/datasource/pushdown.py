"""Filters Spark pushes to the ``rocketmq`` source: which ones it answers, as exact pyarrow predicates, and
the hints its planner takes from them (topics, msg ids, keys, queues, offset and time ranges).

A pushed filter is answered exactly: every row the source returns passes every filter it accepted, so
Spark does not evaluate them again. The hints only choose which rows are read at all (an id's commitlog
file, a key's index slot, a queue's consume queue range, the files whose statistics hold a range).

>>> from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In
>>> p = Pushdown.of([EqualTo(("topic",), "Orders"), In(("queue_id",), (1, 2)),
...                  GreaterThanOrEqual(("queue_offset",), 10)],
...                 MESSAGES)
>>> list(p.take([EqualTo(("properties", "a"), "5")]))        # a map entry: left to Spark
[EqualTo(attribute=('properties', 'a'), value='5')]
>>> p.topics, p.values("queue_id"), p.bounds("queue_offset")
(['Orders'], [1, 2], (10, None))
>>> p.predicate()
<pyarrow.compute.Expression (((topic == "Orders") and is_in(queue_id, {value_set=int32:[
  1,
  2
], null_matching_behavior=MATCH})) and (queue_offset >= 10))>
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringContains,
    StringEndsWith,
    StringStartsWith,
)

from storelib.datasource.options import MESSAGES  # noqa: F401  (doctest)

__all__ = ["Pushdown", "predicate_of"]

_SCALARS = (pa.types.is_integer, pa.types.is_string, pa.types.is_timestamp, pa.types.is_binary, pa.types.is_boolean)
_COMPARE = {
    GreaterThan: pc.greater,
    GreaterThanOrEqual: pc.greater_equal,
    LessThan: pc.less,
    LessThanOrEqual: pc.less_equal,
}
_STRINGS = {StringStartsWith: pc.starts_with, StringEndsWith: pc.ends_with, StringContains: pc.match_substring}


def predicate_of(f: Filter, schema: pa.Schema) -> pc.Expression | None:
    """The pyarrow predicate of one pushed filter over ``schema``'s columns, None where the source
    leaves it to Spark (a nested or map column, a value of another type).

    >>> predicate_of(EqualTo(("tags",), "TagA"), MESSAGES)
    <pyarrow.compute.Expression (tags == "TagA")>
    >>> predicate_of(EqualTo(("properties", "a"), "5"), MESSAGES) is None
    True
    """
    if isinstance(f, Not):
        inner = predicate_of(f.child, schema)
        return None if inner is None else ~inner
    if len(f.attribute) != 1 or f.attribute[0] not in schema.names:  # type: ignore[attr-defined]
        return None
    name = f.attribute[0]  # type: ignore[attr-defined]
    kind = schema.field(name).type
    if not any(test(kind) for test in _SCALARS):
        return None
    column = pc.field(name)
    if isinstance(f, (IsNull, IsNotNull)):
        return column.is_null() if isinstance(f, IsNull) else column.is_valid()
    if type(f) in _STRINGS:
        value = f.value  # type: ignore[attr-defined]
        return _STRINGS[type(f)](column, value) if pa.types.is_string(kind) and isinstance(value, str) else None
    if isinstance(f, In):
        values = [_value(v, kind) for v in f.value]
        if any(v is _BAD for v in values):
            return None
        return column.isin(pa.array([v for v in values if v is not None], kind))
    if not isinstance(f, EqualTo) and type(f) not in _COMPARE:
        return None  # EqualNullSafe and filters newer than this source: Spark evaluates them
    value = _value(f.value, kind)  # type: ignore[attr-defined]
    if value is _BAD or value is None:
        return None
    scalar = pa.scalar(value, kind)
    return column == scalar if isinstance(f, EqualTo) else _COMPARE[type(f)](column, scalar)


_BAD = object()


def _value(v: Any, kind: pa.DataType) -> Any:
    """``v`` as a value of the column type, or ``_BAD`` when it is not one (Spark then keeps the filter)."""
    if v is None:
        return None
    if pa.types.is_integer(kind):
        return v if isinstance(v, int) and not isinstance(v, bool) else _BAD
    if pa.types.is_string(kind):
        return v if isinstance(v, str) else _BAD
    if pa.types.is_binary(kind):
        return bytes(v) if isinstance(v, (bytes, bytearray)) else _BAD
    if pa.types.is_boolean(kind):
        return v if isinstance(v, bool) else _BAD
    if pa.types.is_timestamp(kind):
        if not isinstance(v, dt.datetime):
            return _BAD
        return v if v.tzinfo else v.astimezone(dt.timezone.utc)  # Spark hands naive local times
    return _BAD


@dataclass
class Pushdown:
    """The filters a read answers itself (their conjunction), and what they tell the planner."""

    schema: pa.Schema
    accepted: list[Filter] = field(default_factory=list)

    @classmethod
    def of(cls, filters: Sequence[Filter], schema: pa.Schema) -> "Pushdown":
        """Accept every filter :func:`predicate_of` can answer (see :meth:`take` for the rest)."""
        p = cls(schema)
        list(p.take(filters))
        return p

    def take(self, filters: Sequence[Filter]):
        """Accept what can be answered; yield the filters Spark must still evaluate."""
        for f in filters:
            if predicate_of(f, self.schema) is None:
                yield f
            else:
                self.accepted.append(f)

    def predicate(self, columns: Sequence[str] | None = None) -> pc.Expression | None:
        """The conjunction of the accepted filters (on ``columns`` only, when given), None for none."""
        out = None
        for f in self.accepted:
            if columns is not None and not set(_columns(f)) <= set(columns):
                continue
            e = predicate_of(f, self.schema)
            out = e if out is None else out & e
        return out

    # ---- hints -------------------------------------------------------------------------------
    def values(self, column: str) -> list | None:
        """The values an accepted ``=`` or ``IN`` pins ``column`` to (their intersection), None if none does."""
        out: list | None = None
        for f in self.accepted:
            if isinstance(f, (EqualTo, In)) and f.attribute == (column,):
                vals = [f.value] if isinstance(f, EqualTo) else list(f.value)
                vals = [v for v in vals if v is not None]
                out = vals if out is None else [v for v in out if v in vals]
        return None if out is None else sorted(set(out), key=_vals_key)

    @property
    def topics(self) -> list[str] | None:
        return self.values("topic")

    def bounds(self, column: str) -> tuple[Any, Any]:
        """The tightest inclusive ``(low, high)`` the accepted comparisons give ``column`` (None: open)."""
        lo = hi = None
        for f in self.accepted:
            if (
                isinstance(f, Not)
                or f.attribute != (column,)  # type: ignore[attr-defined]
                or (type(f) not in _COMPARE and not isinstance(f, EqualTo))
                or f.value is None  # type: ignore[attr-defined]
            ):
                continue
            v = _value(f.value, self.schema.field(column).type)  # type: ignore[attr-defined]
            if v is _BAD:
                continue
            step = 1 if isinstance(v, int) else dt.timedelta(microseconds=1)
            if isinstance(f, (GreaterThan, GreaterThanOrEqual, EqualTo)):
                low = v + step if isinstance(f, GreaterThan) else v
                lo = low if lo is None else max(lo, low)
            if isinstance(f, (LessThan, LessThanOrEqual, EqualTo)):
                high = v - step if isinstance(f, LessThan) else v
                hi = high if hi is None else min(hi, high)
        return lo, hi


def _vals_key(v: Any) -> Any:
    return (str(type(v)), v)


def _columns(f: Filter) -> tuple[str, ...]:
    return _columns(f.child) if isinstance(f, Not) else f.attribute  # type: ignore[attr-defined]
