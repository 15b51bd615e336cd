"""Times given to the store: epoch milliseconds (``int``) or timezone-aware ``datetime`` values,
the one rule every ``begin`` / ``end`` / ``now`` / ``timestamp`` argument follows.

>>> import datetime as dt
>>> epoch_ms(dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc), "begin"), epoch_ms(None, "end", default=7)
(1709251200000, 7)
>>> epoch_ms(dt.datetime(2024, 3, 1), "begin")
Traceback (most recent call last):
...
storelib.model.errors.StoreError: begin: a datetime needs a time zone (got datetime.datetime(2024, 3, 1, 0, 0))
"""

from __future__ import annotations

import datetime as dt
import math
import time
import zoneinfo
from typing import Union

import pyarrow as pa

from storelib.model.errors import StoreError

__all__ = ["Timestamp", "epoch_ms", "now_ms", "FAR_FUTURE_MS", "arrow_timestamp", "utc_datetimes"]

#: What a time argument may be: epoch milliseconds or a timezone-aware datetime.
Timestamp = Union[int, dt.datetime]

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
#: The latest time a look-up bound means (9999-12-31T23:59:59Z): "no end".
FAR_FUTURE_MS = 253_402_300_799_000


def now_ms() -> int:
    """The clock, in epoch milliseconds.

    >>> now_ms() > 1_700_000_000_000
    True
    """
    return time.time_ns() // 1_000_000


def epoch_ms(value: object, field: str, *, default: int | None = None, error: type[StoreError] = StoreError) -> int:
    """``value`` as epoch milliseconds; ``default`` where it is None (and a default is given), else
    ``error`` naming ``field``. Whole floats count as milliseconds too."""
    if value is None and default is not None:
        return default
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            raise error(field, "a datetime needs a time zone", value=value)
        return (value - _EPOCH) // dt.timedelta(milliseconds=1)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return int(value)
    raise error(field, "must be epoch milliseconds or a timezone-aware datetime", value=value)


def arrow_timestamp(ms: int) -> "pa.Scalar":
    """Epoch ``ms`` as the store's timestamp type (microseconds, UTC), capped at :data:`FAR_FUTURE_MS`,
    to compare with a table's time columns.

    >>> arrow_timestamp(1709251200000).as_py().isoformat()
    '2024-03-01T00:00:00+00:00'
    """

    return pa.scalar(min(ms, FAR_FUTURE_MS) * 1000, pa.timestamp("us", tz="UTC"))


_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=zoneinfo.ZoneInfo("UTC"))  # the tzinfo pyarrow gives UTC values


def utc_datetimes(column: "pa.Array | pa.ChunkedArray") -> list[dt.datetime | None]:
    """A timestamp column of the store's type (microseconds, UTC) as Python datetimes, equal to
    pyarrow's ``to_pylist()`` but built from the integers (pyarrow converts time zones value by value,
    which made this most of a pull's cost).

    >>> import pyarrow as pa
    >>> col = pa.array([1709251200000001, None], pa.timestamp("us", tz="UTC"))
    >>> utc_datetimes(col) == col.to_pylist(), utc_datetimes(col)[0].isoformat()
    (True, '2024-03-01T00:00:00.000001+00:00')
    """

    if column.type != pa.timestamp("us", tz="UTC"):
        column = column.cast(pa.timestamp("us", tz="UTC"))
    micros = column.cast(pa.int64()).to_pylist()
    delta = dt.timedelta
    return [None if v is None else _EPOCH_UTC + delta(microseconds=v) for v in micros]
