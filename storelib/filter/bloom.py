"""RocketMQ's Bloom filter for SQL92 subscriptions (``BloomFilter``, ``BloomFilterData``, ``BitsArray``).

Each SQL92 subscription gets ``k`` of ``m`` bits; dispatch sets a matching subscription's bits in a message's
bitmap, and a pull skips a message missing one. Details: ``docs/internals.md``.

>>> bf = BloomFilter(20, 32)
>>> bits = bf.new_bits()
>>> bf.hash_to("GID_1#T", bits)
>>> bf.is_hit("GID_1#T", bits), bf.is_hit("GID_2#T", bits)
(True, False)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import reduce
from typing import TYPE_CHECKING, Iterable, Sequence

import numpy as np
import pyarrow as pa

from storelib.model.errors import BloomFilterError

if TYPE_CHECKING:  # Spark only where a Column is built: the commands and the endpoint never start it
    from pyspark.sql import Column

__all__ = [
    "murmur3_128_as_long",
    "BloomFilterData",
    "BloomFilter",
    "bitmap_column",
    "bitmap_array",
    "is_hit_column",
    "may_match_column",
    "bits_or",
]

_M64 = (1 << 64) - 1
_C1, _C2 = 0x87C37B91114253D5, 0x4CF5AD432745937F
_INT_MAX = (1 << 31) - 1


# --- murmur3 x64 128 -----------------------------------------------------------------------------
def _rotl64(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _fmix64(k: int) -> int:
    k = ((k ^ (k >> 33)) * 0xFF51AFD7ED558CCD) & _M64
    k = ((k ^ (k >> 33)) * 0xC4CEB9FE1A85EC53) & _M64
    return k ^ (k >> 33)


def _mix_k1(k1: int) -> int:
    return (_rotl64((k1 * _C1) & _M64, 31) * _C2) & _M64


def _mix_k2(k2: int) -> int:
    return (_rotl64((k2 * _C2) & _M64, 33) * _C1) & _M64


def _java_utf8(text: str) -> bytes:
    """``String.getBytes(UTF_8)`` of the Java string with ``text``'s UTF-16 units: surrogate pairs
    (even two lone surrogate code points in a row) become one 4-byte character, and a surrogate
    without its partner becomes ``?``, as Java's encoder replaces it."""
    if text.isascii():
        return text.encode("ascii")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # surrogates: rejoin pairs through UTF-16, then replace the lone ones
        joined = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        return joined.encode("utf-8", "replace")


def murmur3_128_as_long(key: str | bytes) -> int:
    """Guava's ``Hashing.murmur3_128().hashString(key, UTF_8).asLong()`` (seed 0) as a signed 64-bit int:
    the first 8 bytes, little-endian, of MurmurHash3 x64 128 over the key's UTF-8 bytes (``bytes``: as is).

    >>> murmur3_128_as_long("G2#T1"), murmur3_128_as_long("")
    (-3681761298179543019, 0)
    """
    if isinstance(key, str):
        data = _java_utf8(key)
    elif isinstance(key, (bytes, bytearray, memoryview)):
        data = bytes(key)
    else:
        raise BloomFilterError("key", "must be a string or bytes", value=key)
    n = len(data)
    h1 = h2 = 0
    end = n - n % 16
    for i in range(0, end, 16):
        h1 ^= _mix_k1(int.from_bytes(data[i : i + 8], "little"))
        h1 = (_rotl64(h1, 27) + h2) & _M64
        h1 = (h1 * 5 + 0x52DCE729) & _M64
        h2 ^= _mix_k2(int.from_bytes(data[i + 8 : i + 16], "little"))
        h2 = (_rotl64(h2, 31) + h1) & _M64
        h2 = (h2 * 5 + 0x38495AB5) & _M64
    tail = data[end:]
    if len(tail) > 8:
        h2 ^= _mix_k2(int.from_bytes(tail[8:], "little"))
    if tail:
        h1 ^= _mix_k1(int.from_bytes(tail[:8], "little"))
    h1 ^= n
    h2 ^= n
    h1 = (h1 + h2) & _M64
    h2 = (h2 + h1) & _M64
    h1, h2 = _fmix64(h1), _fmix64(h2)
    h1 = (h1 + h2) & _M64
    return h1 - (1 << 64) if h1 >> 63 else h1


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >> 31 else value


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# --- BloomFilterData / BloomFilter ---------------------------------------------------------------
@dataclass
class BloomFilterData:
    """The ``k`` bit positions given to one ``group#topic`` and the map size ``bit_num`` (``m``) they are for.

    >>> BloomFilterData([103, 44, 46], 112)
    BloomFilterData(bit_pos=[103, 44, 46], bit_num=112)
    """

    bit_pos: list[int]
    bit_num: int

    def __post_init__(self) -> None:
        if not _is_int(self.bit_num) or not 1 <= self.bit_num <= _INT_MAX:
            raise BloomFilterError("bit_num", f"must be an int in [1, {_INT_MAX}]", value=self.bit_num)
        if isinstance(self.bit_pos, (str, bytes)) or not isinstance(self.bit_pos, Iterable):
            raise BloomFilterError("bit_pos", "must be a list of ints", value=self.bit_pos)
        positions = list(self.bit_pos)
        if not positions or not all(_is_int(p) and 0 <= p < self.bit_num for p in positions):
            raise BloomFilterError(
                "bit_pos", f"must be a non-empty list of ints in [0, {self.bit_num})", value=self.bit_pos
            )
        self.bit_pos = positions


class BloomFilter:
    """RocketMQ's ``BloomFilter.createByFn(f, n)``: error rate ``f``% for ``n`` keys per map.

    ``k = ceil(log_0.5(f/100))`` hash functions and ``m = ceil(n * log2(100/f) * log2(e))`` bits,
    rounded up to a whole number of bytes. The broker's defaults (``maxErrorRateOfBloomFilter`` 20,
    ``expectConsumerNumUseFilter`` 32) give ``k = 3``, ``m = 112``.

    >>> BloomFilter(20, 32)
    BloomFilter(f=20, n=32, k=3, m=112)
    """

    __slots__ = ("f", "n", "k", "m")

    def __init__(self, max_error_rate: int = 20, expect_num: int = 32):
        if not _is_int(max_error_rate) or not 1 <= max_error_rate < 100:
            raise BloomFilterError("max_error_rate", "must be an int percentage in [1, 100)", value=max_error_rate)
        if not _is_int(expect_num) or expect_num < 1:
            raise BloomFilterError("expect_num", "must be an int >= 1", value=expect_num)
        error_rate = max_error_rate / 100.0
        k = math.ceil(math.log(error_rate) / math.log(0.5))
        bits = math.ceil(expect_num * (math.log(1 / error_rate) / math.log(2)) * (math.log(math.e) / math.log(2)))
        m = 8 * math.ceil(bits / 8.0)
        if m > _INT_MAX:
            raise BloomFilterError("expect_num", "gives more bits than a Java int holds", value=expect_num)
        self.f: int | None = max_error_rate  # None: a filter of_shape, of its data alone
        self.n: int | None = expect_num
        self.k, self.m = k, m

    @classmethod
    def of_shape(cls, data: "BloomFilterData") -> "BloomFilter":
        """The filter ``data`` came from, as far as bits go: ``m = data.bit_num`` and ``k`` its positions
        (a key's positions depend on nothing else; ``f`` and ``n``, which only sized it, are unknown).

        >>> data = BloomFilter(20, 64).generate("G#T")
        >>> BloomFilter.of_shape(data).generate("G#T") == data
        True
        """
        if not isinstance(data, BloomFilterData) or not data.bit_pos or not 1 <= data.bit_num <= _INT_MAX:
            raise BloomFilterError("data", "must be BloomFilterData with positions and a bit count", value=data)
        shaped = cls()
        shaped.f, shaped.n, shaped.k, shaped.m = None, None, len(data.bit_pos), data.bit_num
        return shaped

    def __repr__(self) -> str:
        return f"BloomFilter(f={self.f}, n={self.n}, k={self.k}, m={self.m})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BloomFilter):
            return NotImplemented
        return (self.f, self.n, self.k, self.m) == (other.f, other.n, other.k, other.m)

    def __hash__(self) -> int:
        return hash((self.f, self.n, self.k, self.m))

    @property
    def bits_length(self) -> int:
        """Bytes of one bitmap: ``ceil(m / 8)``.

        >>> BloomFilter().bits_length
        14
        """
        return (self.m + 7) // 8

    def new_bits(self) -> bytearray:
        """An all-clear bitmap of :attr:`bits_length` bytes (``BitsArray.create(m)``).

        >>> BloomFilter().new_bits() == bytearray(14)
        True
        """
        return bytearray(self.bits_length)

    def calc_bit_positions(self, key: str) -> list[int]:
        """The ``k`` bit positions of ``key`` (``calcBitPositions``); may repeat a position.

        >>> BloomFilter().calc_bit_positions("CID_5#topic0")
        [103, 44, 46]
        """
        if not isinstance(key, str):
            raise BloomFilterError("key", "must be a string", value=key)
        hash64 = murmur3_128_as_long(key)
        hash1, hash2 = _int32(hash64), _int32(hash64 >> 32)
        positions = []
        for i in range(1, self.k + 1):
            combined = _int32(hash1 + i * hash2)
            if combined < 0:
                combined = ~combined
            positions.append(combined % self.m)
        return positions

    def generate(self, key: str) -> BloomFilterData:
        """:meth:`calc_bit_positions` with this filter's ``m`` (``generate``; the broker's key is ``group#topic``).

        >>> BloomFilter().generate("G2#T1")
        BloomFilterData(bit_pos=[111, 20, 41], bit_num=112)
        """
        return BloomFilterData(self.calc_bit_positions(key), self.m)

    def is_valid(self, data: object) -> bool:
        """Whether ``data`` belongs to this filter: a :class:`BloomFilterData` with ``bit_num == m``
        and exactly ``k`` positions.

        >>> BloomFilter().is_valid(BloomFilterData([1, 2, 3], 112)), BloomFilter().is_valid(BloomFilterData([1], 112))
        (True, False)
        """
        return isinstance(data, BloomFilterData) and data.bit_num == self.m and len(data.bit_pos) == self.k

    def _positions(self, data_or_key: BloomFilterData | str) -> list[int]:
        if isinstance(data_or_key, str):
            return self.calc_bit_positions(data_or_key)
        if not self.is_valid(data_or_key):
            raise BloomFilterError("data", f"does not belong to {self!r}", value=data_or_key)
        return data_or_key.bit_pos

    def _check_bits(self, bits: object, *, writable: bool) -> None:
        kinds = (bytearray,) if writable else (bytes, bytearray, memoryview)
        if not isinstance(bits, kinds):
            raise BloomFilterError("bits", "must be a bytearray" if writable else "must be bytes", value=bits)
        if len(bits) * 8 != self.m:
            raise BloomFilterError(
                "bits", f"must be {self.bits_length} bytes long (m = {self.m} bits)", value=f"{len(bits)} bytes"
            )

    def hash_to(self, data_or_key: BloomFilterData | str, bits: bytearray) -> None:
        """Set the bits of a key (or of its :class:`BloomFilterData`, which must be valid) in ``bits``
        in place (``hashTo``).

        >>> bits = BloomFilter().new_bits()
        >>> BloomFilter().hash_to(BloomFilterData([0, 9, 111], 112), bits)
        >>> bits.hex()
        '0102000000000000000000000080'
        """
        positions = self._positions(data_or_key)
        self._check_bits(bits, writable=True)
        for p in positions:
            bits[p >> 3] |= 1 << (p & 7)

    def is_hit(self, data_or_key: BloomFilterData | str, bits: bytes | bytearray | memoryview) -> bool:
        """Whether every bit of a key (or valid :class:`BloomFilterData`) is set in ``bits`` (``isHit``).

        >>> BloomFilter().is_hit(BloomFilterData([0, 9, 111], 112), bytes.fromhex("0102" + "00" * 11 + "80"))
        True
        """
        positions = self._positions(data_or_key)
        self._check_bits(bits, writable=False)
        return all(bits[p >> 3] >> (p & 7) & 1 for p in positions)


# --- Spark columns -------------------------------------------------------------------------------
def _byte_masks(data: BloomFilterData) -> dict[int, int]:
    """Byte index -> mask of the bits ``data`` sets in it."""
    masks: dict[int, int] = {}
    for p in data.bit_pos:
        masks[p >> 3] = masks.get(p >> 3, 0) | 1 << (p & 7)
    return masks


#: For each 4-bit mask, the (uppercase) hex digits that have all of its bits set.
_DIGITS_WITH: dict[int, list[str]] = {mask: [f"{v:X}" for v in range(16) if v & mask == mask] for mask in range(16)}


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >> 63 else value


def bitmap_column(matches: Sequence[tuple[Column, BloomFilterData]], bit_num: int) -> Column:
    """The ``CommitLogDispatcherCalcBitMap`` bitmap as a binary column of ``ceil(bit_num/8)`` bytes:
    the bits of every :class:`BloomFilterData` whose boolean column is TRUE (NULL or FALSE sets nothing).

    Each group of 8 bytes is one bigint, the bitwise OR of ``when(match, mask)`` (the mask laid out so
    that its big-endian hex is the bytes in order); the hex digits of all groups are unhexed at once.
    No subscription: all bytes zero (RocketMQ stores no bitmap when none is registered for the topic).

    >>> data = BloomFilter().generate("G#T")
    >>> df = spark.createDataFrame([(2,), (0,)], "a int")
    >>> [bytes(r[0]).hex() for r in df.select(bitmap_column([(F.col("a") > 1, data)], 112)).collect()]
    ['0000000500000000000008000000', '0000000000000000000000000000']
    """
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    if not _is_int(bit_num) or not 1 <= bit_num <= _INT_MAX:
        raise BloomFilterError("bit_num", f"must be an int in [1, {_INT_MAX}]", value=bit_num)
    n_bytes = (bit_num + 7) // 8
    words: list[list[Column]] = [[] for _ in range((n_bytes + 7) // 8)]
    for pair in matches:
        if not (
            isinstance(pair, (tuple, list))
            and len(pair) == 2
            and isinstance(pair[0], Column)
            and isinstance(pair[1], BloomFilterData)
        ):
            raise BloomFilterError("matches", "must be (Column, BloomFilterData) pairs", value=pair)
        match, data = pair
        if data.bit_num != bit_num:
            raise BloomFilterError("matches", f"holds Bloom data for {data.bit_num} bits, not {bit_num}", value=data)
        word_masks: dict[int, int] = {}
        for byte, mask in _byte_masks(data).items():
            word, size = byte >> 3, min(8, n_bytes - (byte & ~7))
            shift = (size - 1 - (byte & 7)) * 8
            word_masks[word] = word_masks.get(word, 0) | mask << shift
        for word, mask in word_masks.items():
            words[word].append(F.when(match, F.lit(_signed64(mask)).cast("long")).otherwise(F.lit(0).cast("long")))
    hex_parts = []
    for word, terms in enumerate(words):
        size = min(8, n_bytes - word * 8)
        value = reduce(Column.bitwiseOR, terms) if terms else F.lit(0).cast("long")
        hex_parts.append(F.lpad(F.hex(value), 2 * size, "0"))
    return F.unhex(F.concat(*hex_parts) if len(hex_parts) > 1 else hex_parts[0])


def bitmap_array(
    matches: Sequence[tuple[np.ndarray, BloomFilterData]], bit_num: int, rows: int, valid: np.ndarray | None = None
) -> pa.BinaryArray:
    """:func:`bitmap_column` for a batch of ``rows`` messages, with numpy: a binary array of
    ``ceil(bit_num/8)``-byte bitmaps where row ``i`` has the bits of every :class:`BloomFilterData`
    whose bool array is True at ``i``; null where ``valid`` is False.

    The bits are set byte by byte (one contiguous uint8 array per byte of the map), then the
    bytes are laid out row after row.

    >>> data = BloomFilter().generate("G#T")
    >>> bitmaps = bitmap_array([(np.array([True, False, True]), data)], 112, 3, np.array([True, True, False]))
    >>> [None if b is None else b.hex() for b in bitmaps.to_pylist()]
    ['0000000500000000000008000000', '0000000000000000000000000000', None]
    """
    if not _is_int(bit_num) or not 1 <= bit_num <= _INT_MAX:
        raise BloomFilterError("bit_num", f"must be an int in [1, {_INT_MAX}]", value=bit_num)
    n_bytes = (bit_num + 7) // 8
    columns = np.zeros((n_bytes, rows), dtype=np.uint8)
    for pair in matches:
        if not (
            isinstance(pair, (tuple, list))
            and len(pair) == 2
            and isinstance(pair[1], BloomFilterData)
            and np.shape(pair[0]) == (rows,)
        ):
            raise BloomFilterError("matches", f"must be (bool array of {rows} rows, BloomFilterData) pairs", value=pair)
        match, data = pair
        if data.bit_num != bit_num:
            raise BloomFilterError("matches", f"holds Bloom data for {data.bit_num} bits, not {bit_num}", value=data)
        hit = np.ascontiguousarray(match, dtype=bool).view(np.uint8)
        for byte, mask in _byte_masks(data).items():
            np.bitwise_or(columns[byte], hit * np.uint8(mask), out=columns[byte])
    data_bytes = np.ascontiguousarray(columns.T)
    offsets = np.arange(0, (rows + 1) * n_bytes, n_bytes, dtype=np.int32)
    validity, nulls = None, 0
    if valid is not None:
        valid = np.asarray(valid, dtype=bool)
        nulls = rows - int(np.count_nonzero(valid))
        validity = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    return pa.Array.from_buffers(
        pa.binary(), rows, [validity, pa.py_buffer(offsets), pa.py_buffer(data_bytes)], null_count=nulls
    )


def is_hit_column(bitmap: Column, data: BloomFilterData) -> Column:
    """TRUE iff every bit of ``data.bit_pos`` is set in the binary column ``bitmap`` (``isHit``);
    FALSE for a NULL bitmap or one too short to hold a bit. Lengths are not checked: see
    :func:`may_match_column`.

    Each byte holding some of the bits is cut out (``substring``, 1 byte) and written as two hex
    digits; each digit with bits to test must be one of the at most 8 digits having them all. This
    is as fast as a lookup of the byte in a 128-value set, and keeps the plan small (few literals).

    >>> data = BloomFilter().generate("G#T")
    >>> bits = bytearray(14); BloomFilter().hash_to(data, bits)
    >>> df = spark.createDataFrame([(bytes(bits),), (bytes(14),)], "filter_bitmap binary")
    >>> [r[0] for r in df.select(is_hit_column(F.col("filter_bitmap"), data)).collect()]
    [True, False]
    """
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    if not isinstance(data, BloomFilterData):
        raise BloomFilterError("data", "must be a BloomFilterData", value=data)
    tests = []
    for byte, mask in sorted(_byte_masks(data).items()):
        digits = F.hex(F.substring(bitmap, byte + 1, 1))
        for offset, nibble in ((1, mask >> 4), (2, mask & 0xF)):
            if nibble:
                tests.append(F.substring(digits, offset, 1).isin(*_DIGITS_WITH[nibble]))
    return F.coalesce(reduce(Column.__and__, tests), F.lit(False))


def may_match_column(bitmap: Column, data: BloomFilterData) -> Column:
    """``ExpressionMessageFilter``'s Bloom check: TRUE when the bitmap cannot rule the message out,
    i.e. it is NULL or its length in bits is not ``data.bit_num`` (computed under another ``m``);
    otherwise :func:`is_hit_column`. Never NULL.

    >>> data = BloomFilter().generate("G#T")
    >>> df = spark.createDataFrame([(None,), (bytes(3),), (bytes(14),)], "filter_bitmap binary")
    >>> [r[0] for r in df.select(may_match_column(F.col("filter_bitmap"), data)).collect()]
    [True, True, False]
    """
    from pyspark.sql import functions as F

    if not isinstance(data, BloomFilterData):
        raise BloomFilterError("data", "must be a BloomFilterData", value=data)
    if data.bit_num % 8:
        return F.lit(True)  # no byte string is a non-multiple of 8 bits long
    return bitmap.isNull() | (F.octet_length(bitmap) != F.lit(data.bit_num // 8)) | is_hit_column(bitmap, data)


def bits_or(bitmaps: Iterable[bytes | None]) -> bytes | None:
    """The bitwise OR of bitmaps of one length: a summary that rules out a subscription for all of them.

    ``None`` when there is nothing to OR or the result could not safely rule anything out: some
    bitmap is ``None`` or the lengths differ (such rows always may match).

    >>> bits_or([b"\\x01\\x00", b"\\x04\\x80"]).hex(), bits_or([b"\\x01", None])
    ('0580', None)
    """
    if isinstance(bitmaps, (bytes, bytearray, memoryview, str)):
        raise BloomFilterError("bitmaps", "must be an iterable of bitmaps", value=bitmaps)
    acc: int | None = None
    length = -1
    for bitmap in bitmaps:
        if bitmap is None:
            return None
        if not isinstance(bitmap, (bytes, bytearray, memoryview)):
            raise BloomFilterError("bitmaps", "must hold bytes or None", value=bitmap)
        if length not in (-1, len(bitmap)):
            return None
        length = len(bitmap)
        value = int.from_bytes(bitmap, "little")
        acc = value if acc is None else acc | value
    return None if acc is None else acc.to_bytes(length, "little")
