"""Java's ``String.hashCode``: the base of ConsumeQueue tag codes and IndexFile key hashes.

``s[0]*31^(n-1) + ... + s[n-1]`` over the string's UTF-16 code units, modulo 2^32, read as a
signed int. Three forms of the same value:

* :func:`java_string_hash` - one string, pure Python;
* :func:`java_hash_codes` - a whole Arrow array with numpy: every unit is weighted by a power of
  31 and each string's weighted units are summed in one ``reduceat`` (no Python per row);
* :func:`java_hash_code_column` - a Spark column, computed by Java itself (``Objects.hashCode``
  through Spark's built-in ``reflect``, a constant class and method name, never users' text).

>>> import pyarrow as pa
>>> java_string_hash("TagA"), java_string_hash("a\\U0001F600b")
(2598919, 57849694)
>>> java_hash_codes(pa.array(["TagA||TagB", "", None, "Aa", "BB", "é", "😀"])).tolist()
[1789476431, 0, 0, 2112, 2112, 233, 1772899]
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = [
    "java_string_hash",
    "consistent_hash",
    "java_hash_codes",
    "java_hash_code_column",
    "string_hashes",
    "powers_of_31",
]


def java_string_hash(s: str) -> int:
    """Java ``String.hashCode`` of ``s`` (over UTF-16 code units) as a signed 32-bit int.

    >>> java_string_hash("Aa") == java_string_hash("BB")
    True
    """
    if s.isascii():
        units: bytes | tuple[int, ...] = s.encode("ascii")
    else:  # supplementary characters become two surrogate units, exactly as in Java
        data = s.encode("utf-16-be", "surrogatepass")
        units = struct.unpack(f">{len(data) // 2}H", data)
    h = 0
    for start in range(0, len(units), 64):  # mask per chunk: small ints, no per-unit masking
        for unit in units[start : start + 64]:
            h = 31 * h + unit
        h &= 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


_POW31 = np.array([1], dtype=np.uint32)


def consistent_hash(key: int, buckets: int) -> int:
    """Guava's ``Hashing.consistentHash(long, int)``: the bucket RocketMQ 5's proxy sends a message group
    to (``consistentHash(messageGroup.hashCode(), writeQueues)``); few keys move when buckets are added.

    >>> consistent_hash(java_string_hash("order-1"), 8), [consistent_hash(k, 1) for k in (0, -5, 99)]
    (3, [0, 0, 0])
    """
    if buckets < 1:
        raise ValueError(f"buckets must be positive, got {buckets}")
    state, candidate = key & 0xFFFFFFFFFFFFFFFF, 0
    while True:
        state = (2862933555777941757 * state + 1) & 0xFFFFFFFFFFFFFFFF
        following = (candidate + 1) / ((float((state >> 33) + 1)) / 2.0**31)
        following = min(int(following), 2**31 - 1)  # Java's (int) of a double saturates
        if not 0 <= following < buckets:
            return candidate
        candidate = following


def powers_of_31(n: int) -> np.ndarray:
    """At least ``n`` powers 31^0, 31^1, ... modulo 2^32 (uint32 arithmetic wraps).

    >>> powers_of_31(3)[:3].tolist()
    [1, 31, 961]
    """
    global _POW31
    if len(_POW31) < n:
        _POW31 = np.cumprod(
            np.concatenate(([1], np.full(max(n, 2 * len(_POW31)) - 1, 31))).astype(np.uint32), dtype=np.uint32
        )
    return _POW31


def _utf16_units(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The strings' UTF-16 code units back to back, and where each string's units start and end."""
    strings = strings.cast(pa.large_string()) if not pa.types.is_large_string(strings.type) else strings
    offsets = np.frombuffer(strings.buffers()[1], np.int64)[strings.offset : strings.offset + len(strings) + 1]
    data = np.frombuffer(strings.buffers()[2], np.uint8) if strings.buffers()[2] is not None else np.zeros(0, np.uint8)
    data = data[offsets[0] : offsets[-1]]
    offsets = offsets - offsets[0]
    if not len(data) or data.max() < 0x80:  # ASCII: one unit per byte
        return data, offsets
    # A UTF-8 lead byte starts one unit, or two (a surrogate pair) when it starts 4 bytes; continuation bytes none.
    per_byte = np.where(data < 0x80, 1, np.where(data < 0xC0, 0, np.where(data < 0xF0, 1, 2)))
    unit_at = np.concatenate(([0], np.cumsum(per_byte)))
    units = np.frombuffer(bytes(data).decode("utf-8", errors="strict").encode("utf-16-le"), np.dtype("<u2"))
    return units, unit_at[offsets]


def string_hashes(strings: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """``String.hashCode`` of each string as uint32 (0 for null), and its length in UTF-16 units.

    >>> h, n = string_hashes(pa.array(["Aa", None]))
    >>> h.tolist(), n.tolist()
    ([2112, 0], [2, 0])
    """
    if isinstance(strings, pa.ChunkedArray):
        strings = strings.combine_chunks()
    units, offsets = _utf16_units(strings)
    lengths = np.diff(offsets)
    out = np.zeros(len(strings), dtype=np.uint32)
    if len(units):
        longest = int(lengths.max())
        if (lengths == longest).all():  # one length (ids, keys of one shape): the units are the matrix
            for column in units.reshape(len(strings), longest).T:
                out *= np.uint32(31)
                out += column
        elif len(strings) * longest <= 4 * len(units):
            # Dense: one column per string, right-aligned (leading zeros add nothing), folded row by
            # row as Java does: h = 31 * h + unit.
            narrow = offsets.astype(np.int32 if offsets[-1] < 2**31 else np.int64)
            position = np.arange(longest, dtype=narrow.dtype)[:, None] - longest + narrow[None, 1:]
            inside = position >= narrow[None, :-1]
            matrix = np.where(inside, units[np.maximum(position, 0)], 0).astype(np.uint32)
            for row in matrix:
                out *= np.uint32(31)
                out += row
        else:
            ends = np.repeat(offsets[1:], lengths)
            weights = powers_of_31(longest)[ends - 1 - np.arange(len(units))]
            filled = lengths > 0
            out[filled] = np.add.reduceat(units.astype(np.uint32) * weights, offsets[:-1][filled], dtype=np.uint32)
    if strings.null_count:
        out[pc.is_null(strings).to_numpy(zero_copy_only=False)] = 0
    return out, lengths


def java_hash_codes(strings: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``String.hashCode`` of each string as int32 (``Objects.hashCode``: 0 for null).

    Strings must be valid UTF-8, as Arrow strings are.
    """
    return string_hashes(strings)[0].view(np.int32)


def java_hash_code_column(c: "Column") -> "Column":
    """``String.hashCode`` of a string column as int; 0 for null (``Objects.hashCode``).

    >>> spark.range(1).select(java_hash_code_column(F.lit("TagA")).alias("h")).first().h
    2598919
    """
    from pyspark.sql import functions as F

    return F.reflect(F.lit("java.util.Objects"), F.lit("hashCode"), c).cast("int")
