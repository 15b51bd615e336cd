"""Arrow helpers the batch forms of the encodings share: values computed once per distinct value,
and hex strings written without Python per row.

>>> import numpy as np, pyarrow as pa
>>> hex_strings("C0A80001", np.array([0, 255]), 4).to_pylist()
['C0A800010000', 'C0A8000100FF']
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.model.errors import MessageIdError

__all__ = ["Distinct", "queue_groups", "hex_strings", "hex_bytes", "matches", "utf8_lengths"]

_HEX = frozenset("0123456789abcdefABCDEF")


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
        return cls(
            encoded.dictionary, pc.fill_null(encoded.indices, len(encoded.dictionary)).to_numpy(zero_copy_only=False)
        )

    def per_row(self, per_value: np.ndarray, null: object = False) -> np.ndarray:
        """A value per distinct value (plus one for nulls, or ``null``) spread over the rows."""
        if len(per_value) == len(self.values):
            per_value = np.append(per_value, np.array(null, dtype=per_value.dtype))
        return per_value[self.rows]


def queue_groups(
    topics: Distinct, queue_id: pa.Array | pa.ChunkedArray
) -> tuple[list[tuple[str, int]], np.ndarray, np.ndarray]:
    """The rows' (topic, queue_id) pairs in sorted order, each row's index among them, and their counts.

    >>> queue_groups(Distinct.of(pa.array(["b", "a", "b"])), pa.array([1, 0, 1]))
    ([('b', 1), ('a', 0)], array([0, 1, 0]), array([2, 1]))
    """
    key = topics.rows.astype(np.int64) * (1 << 32) + queue_id.to_numpy().astype(np.int64)
    unique, inverse = np.unique(key, return_inverse=True)
    names = topics.values.to_pylist()
    pairs = [(names[k >> 32], k & 0xFFFFFFFF) for k in unique.tolist()]
    return pairs, inverse.reshape(-1), np.bincount(inverse.reshape(-1), minlength=len(unique))


#: Each byte's two upper-case hex digits, as the two bytes of a uint16 in memory order.
_HEX_PAIRS = np.frombuffer(b"".join(f"{b:02X}".encode() for b in range(256)), dtype=np.uint16)


def hex_strings(prefix: str, values: np.ndarray, digits: int) -> pa.Array:
    """``prefix`` followed by the low ``digits`` upper-case hex digits of each value (non-negative,
    ``digits`` even and at most 16): message ids and UNIQ_KEYs, built without Python per row."""
    n = len(values)
    head = np.frombuffer(prefix.encode(), dtype=np.uint8)
    width = len(head) + digits
    out = np.empty((n, width), dtype=np.uint8)
    out[:, : len(head)] = head
    raw = values.astype(">u8").view(np.uint8).reshape(n, 8)[:, 8 - digits // 2 :]
    out[:, len(head) :] = _HEX_PAIRS[raw].view(np.uint8).reshape(n, digits)
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(out)])


def hex_bytes(field: str, text: object, lengths: tuple[int, ...]) -> bytes:
    """The bytes of a hex string of one of ``lengths`` characters (an id), else :class:`MessageIdError`
    naming ``field`` and, for a bad character, its position.

    >>> hex_bytes("msg_id", "0aFF", (4,))
    b'\\n\\xff'
    >>> hex_bytes("msg_id", "0aFG", (4,))
    Traceback (most recent call last):
    ...
    storelib.model.errors.MessageIdError: msg_id: non-hex character 'G' at position 3 (got '0aFG')
    """
    if not isinstance(text, str):
        raise MessageIdError(field, "must be a hex string", value=text)
    if len(text) not in lengths:
        expected = " or ".join(map(str, lengths))
        raise MessageIdError(field, f"length is {len(text)}, expected {expected} hex chars", value=text)
    for pos, char in enumerate(text):
        if char not in _HEX:
            raise MessageIdError(field, f"non-hex character {char!r} at position {pos}", value=text)
    return bytes.fromhex(text)


def matches(flags: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A boolean Arrow array as numpy, null as False.

    >>> matches(pa.array([True, None, False])).tolist()
    [True, False, False]
    """
    return pc.fill_null(flags, False).to_numpy(zero_copy_only=False)


def utf8_lengths(strings: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """UTF-8 byte lengths (0 for null) as int64.

    >>> utf8_lengths(pa.array(["é", None, "ab"])).tolist()
    [2, 0, 2]
    """
    return pc.fill_null(pc.binary_length(strings), 0).to_numpy(zero_copy_only=False).astype(np.int64)
