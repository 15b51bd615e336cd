"""ConsumeQueueExt addresses: a consume queue unit's tag code field holds either a tag code or the
decorated address of its ext unit (``decorate``: ``offset + Long.MIN_VALUE``, wrapping), told apart
by ``isExtAddr`` (``<= MAX_ADDR``, that is ``Integer.MIN_VALUE - 1``).

>>> import pyarrow as pa
>>> decorate_ext_addr(0), is_ext_addr(decorate_ext_addr(0)), undecorate_ext_addr(decorate_ext_addr(7))
(-9223372036854775808, True, 7)
>>> is_ext_addr(-2147483648), is_ext_addr(-2147483649)
(False, True)
>>> decorate_ext_addrs(pa.array([0, 5])).to_pylist()
[-9223372036854775808, -9223372036854775803]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.model.errors import StoreError, require_int

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = [
    "MAX_EXT_ADDR",
    "is_ext_addr",
    "decorate_ext_addr",
    "undecorate_ext_addr",
    "decorate_ext_addrs",
    "undecorate_ext_addrs",
    "is_ext_addr_column",
]

#: Largest value that is a ConsumeQueueExt address rather than a tag code (Integer.MIN_VALUE - 1).
MAX_EXT_ADDR = -2147483649
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _int64(value: int) -> int:
    """Wrap an unbounded int to Java's signed 64-bit range."""
    value &= 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >> 63 else value


def is_ext_addr(addr: int) -> bool:
    """True when a ConsumeQueue ``tagsCode`` field holds a decorated ConsumeQueueExt address."""
    return addr <= MAX_EXT_ADDR


def decorate_ext_addr(offset: int) -> int:
    """``decorate``: ``offset + Long.MIN_VALUE`` (wrapping) unless already an address.

    >>> decorate_ext_addr(1)
    -9223372036854775807
    """
    require_int(StoreError, "offset", offset, _INT64_MIN, _INT64_MAX)
    return offset if is_ext_addr(offset) else _int64(offset + _INT64_MIN)


def undecorate_ext_addr(addr: int) -> int:
    """``unDecorate``: ``addr - Long.MIN_VALUE`` (wrapping) if an address, else unchanged.

    >>> undecorate_ext_addr(-9223372036854775807)
    1
    """
    require_int(StoreError, "addr", addr, _INT64_MIN, _INT64_MAX)
    return _int64(addr - _INT64_MIN) if is_ext_addr(addr) else addr


def decorate_ext_addrs(offsets: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``decorate`` of non-negative ext offsets, a whole Arrow array at once."""
    return pc.add(offsets.cast(pa.int64()), pa.scalar(_INT64_MIN, pa.int64()))


def undecorate_ext_addrs(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which tag code fields are ext addresses, and their ext offsets (0 elsewhere), over numpy int64.

    >>> is_ext, at = undecorate_ext_addrs(np.array([decorate_ext_addr(3), 2598919]))
    >>> is_ext.tolist(), at.tolist()
    ([True, False], [3, 0])
    """
    is_ext = codes <= MAX_EXT_ADDR
    return is_ext, np.where(is_ext, codes - np.int64(_INT64_MIN), 0)  # wrapping as Java's long does


def is_ext_addr_column(tags_code: "Column") -> "Column":
    """``isExtAddr`` of a consume queue tag code column.

    >>> spark.range(1).select(is_ext_addr_column(F.lit(-2147483649)).alias("x")).first().x
    True
    """
    from pyspark.sql import functions as F

    return tags_code <= F.lit(MAX_EXT_ADDR)
