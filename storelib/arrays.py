"""Arrow array versions of the RocketMQ encodings in :mod:`storelib.codec`: whole batches at a time.

:mod:`storelib.columns` computes these values as Spark columns; the executors that write the
store's files compute them here, with numpy over Arrow buffers and no Python per row. Java's
``String.hashCode`` is a polynomial over the string's UTF-16 code units,
``s[0]*31^(n-1) + ... + s[n-1]`` modulo 2^32, so every unit is weighted by a power of 31 and each
string's weighted units are summed in one ``reduceat``.

>>> import pyarrow as pa
>>> java_hash_codes(pa.array(["TagA||TagB", "", None, "Aa", "BB", "é", "😀"])).tolist()
[1789476431, 0, 0, 2112, 2112, 233, 1772899]
>>> tags_codes(pa.array(["TagA||TagB", None, ""])).tolist()
[1789476431, 0, 0]
>>> index_key_hashes(pa.array(["TopicTest", "TopicTest"]), pa.array(["erAHomt", "order-1"])).tolist()
[0, 1829193424]
>>> hex_strings("C0A80001", np.array([0, 255]), 4).to_pylist()
['C0A800010000', 'C0A8000100FF']
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib import codec

__all__ = ["Distinct", "java_hash_codes", "tags_codes", "topic_key_prefixes", "index_key_hashes", "decorate_ext_addrs", "hex_strings",
           "message_lengths"]

_POW31 = np.array([1], dtype=np.uint32)


@dataclass(frozen=True)
class Distinct:
    """A string column as its distinct ``values`` and each row's index among them (null rows
    index one past the end): what needs a value once (a topic's checks, a Java hash of
    ``topic#``) is computed once per distinct value and spread over the rows.

    >>> d = Distinct.of(pa.array(["a", None, "b", "a"]))
    >>> d.values.to_pylist(), d.per_row(np.array([1, 2]), null=0).tolist()
    (['a', 'b'], [1, 0, 2, 1])
    """

    values: pa.Array
    rows: np.ndarray

    @classmethod
    def of(cls, strings: pa.Array | pa.ChunkedArray) -> "Distinct":
        encoded = pc.dictionary_encode(strings)
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.combine_chunks()
        return cls(encoded.dictionary, pc.fill_null(encoded.indices, len(encoded.dictionary)).to_numpy(zero_copy_only=False))

    def per_row(self, per_value: np.ndarray, null: object = False) -> np.ndarray:
        """A value per distinct value (plus one for nulls, or ``null``) spread over the rows."""
        if len(per_value) == len(self.values):
            per_value = np.append(per_value, np.array(null, dtype=per_value.dtype))
        return per_value[self.rows]


def _powers_of_31(n: int) -> np.ndarray:
    """31^0 .. 31^(n-1) modulo 2^32 (uint32 arithmetic wraps)."""
    global _POW31
    if len(_POW31) < n:
        _POW31 = np.cumprod(np.concatenate(([1], np.full(max(n, 2 * len(_POW31)) - 1, 31))).astype(np.uint32),
                            dtype=np.uint32)
    return _POW31


def _utf16_units(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """The strings' UTF-16 code units back to back, and where each string's units start and end."""
    strings = strings.cast(pa.large_string()) if not pa.types.is_large_string(strings.type) else strings
    offsets = np.frombuffer(strings.buffers()[1], np.int64)[strings.offset:strings.offset + len(strings) + 1]
    data = np.frombuffer(strings.buffers()[2], np.uint8) if strings.buffers()[2] is not None else np.zeros(0, np.uint8)
    data = data[offsets[0]:offsets[-1]]
    offsets = offsets - offsets[0]
    if not len(data) or data.max() < 0x80:  # ASCII: one unit per byte
        return data, offsets
    # A UTF-8 lead byte starts one unit, or two (a surrogate pair) when it starts 4 bytes; continuation bytes none.
    per_byte = np.where(data < 0x80, 1, np.where(data < 0xC0, 0, np.where(data < 0xF0, 1, 2)))
    unit_at = np.concatenate(([0], np.cumsum(per_byte)))
    units = np.frombuffer(bytes(data).decode("utf-8", errors="strict").encode("utf-16-le"), np.dtype("<u2"))
    return units, unit_at[offsets]


def _hashes(strings: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``String.hashCode`` of each string as uint32 (0 for null), and its length in UTF-16 units."""
    if isinstance(strings, pa.ChunkedArray):
        strings = strings.combine_chunks()
    units, offsets = _utf16_units(strings)
    lengths = np.diff(offsets)
    out = np.zeros(len(strings), dtype=np.uint32)
    if len(units):
        longest = int(lengths.max())
        if len(strings) * longest <= 4 * len(units):
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
            weights = _powers_of_31(longest)[ends - 1 - np.arange(len(units))]
            filled = lengths > 0
            out[filled] = np.add.reduceat(units.astype(np.uint32) * weights, offsets[:-1][filled], dtype=np.uint32)
    if strings.null_count:
        out[pc.is_null(strings).to_numpy(zero_copy_only=False)] = 0
    return out, lengths


def java_hash_codes(strings: pa.Array) -> np.ndarray:
    """``String.hashCode`` of each string as int32 (``Objects.hashCode``: 0 for null).

    Strings must be valid UTF-8, as Arrow strings are.
    """
    return _hashes(strings)[0].view(np.int32)


def tags_codes(tags: pa.Array) -> np.ndarray:
    """ConsumeQueue tag codes as int64: ``String.hashCode`` of TAGS, 0 where absent or empty."""
    return java_hash_codes(tags).astype(np.int64)


def topic_key_prefixes(topics: pa.Array) -> np.ndarray:
    """``String.hashCode`` of ``topic#`` for each row (uint32), computed once per distinct topic."""
    distinct = Distinct.of(topics)
    prefix, _ = _hashes(pa.array([f"{t}#" for t in distinct.values.to_pylist()], pa.string()))
    return distinct.per_row(prefix, null=0)


def index_key_hashes(topics: pa.Array | np.ndarray, keys: pa.Array) -> np.ndarray:
    """IndexFile key hashes of ``topic#key`` (IndexService.buildKey) as int32: ``abs(hashCode)``, with
    ``Integer.MIN_VALUE`` giving 0. ``topics`` may be given as :func:`topic_key_prefixes` already:
    ``hash(a + b) = hash(a) * 31^len(b) + hash(b)``, so no ``topic#key`` string is ever built."""
    prefixes = topics if isinstance(topics, np.ndarray) else topic_key_prefixes(topics)
    suffix, lengths = _hashes(keys)
    powers = _powers_of_31(int(lengths.max(initial=0)) + 1)
    full = prefixes * powers[lengths] + suffix
    return (np.abs(full.view(np.int32).astype(np.int64)) % (1 << 31)).astype(np.int32)


def decorate_ext_addrs(offsets: pa.Array) -> pa.Array:
    """ConsumeQueueExt ``decorate`` of non-negative ext offsets: ``offset + Long.MIN_VALUE``.

    >>> decorate_ext_addrs(pa.array([0, 5])).to_pylist()
    [-9223372036854775808, -9223372036854775803]
    """
    return pc.add(offsets.cast(pa.int64()), pa.scalar(-(2**63), pa.int64()))


#: Each byte's two upper-case hex digits, as the two bytes of a uint16 in memory order.
_HEX_PAIRS = np.frombuffer(b"".join(f"{b:02X}".encode() for b in range(256)), dtype=np.uint16)


def hex_strings(prefix: str, values: np.ndarray, digits: int) -> pa.Array:
    """``prefix`` followed by the low ``digits`` upper-case hex digits of each value (non-negative,
    ``digits`` even and at most 16): message ids and UNIQ_KEYs, built without Python per row."""
    n = len(values)
    head = np.frombuffer(prefix.encode(), dtype=np.uint8)
    width = len(head) + digits
    out = np.empty((n, width), dtype=np.uint8)
    out[:, :len(head)] = head
    raw = values.astype(">u8").view(np.uint8).reshape(n, 8)[:, 8 - digits // 2:]
    out[:, len(head):] = _HEX_PAIRS[raw].view(np.uint8).reshape(n, digits)
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(out)])


def message_lengths(body: np.ndarray, topic: np.ndarray, properties: np.ndarray, born_v6: bool | np.ndarray,
                    store_v6: bool) -> np.ndarray:
    """:func:`storelib.codec.message_length` (``calMsgLength``) over arrays of UTF-8 byte lengths;
    ``born_v6`` may be a flag per message.

    >>> message_lengths(np.array([0, 0]), np.array([1, 128]), np.array([0, 0]), np.array([False, True]), False).tolist()
    [92, 232]
    """
    v6 = np.asarray(born_v6, dtype=np.int64) + int(store_v6)
    topic_length_size = np.where(topic > codec.TOPIC_V1_MAX_LENGTH, 2, 1)
    return codec.RECORD_FIXED_LENGTH + 12 * v6 + body + topic_length_size + topic + properties
