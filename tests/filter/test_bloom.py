"""RocketMQ's Bloom filter (storelib.filter.bloom) against RocketMQ's cases, literal cases and Spark."""

from __future__ import annotations

import random

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from storelib.filter.bloom import (
    BloomFilter,
    BloomFilterData,
    bitmap_column,
    bits_or,
    is_hit_column,
    may_match_column,
    murmur3_128_as_long,
)
from storelib.model.errors import BloomFilterError, FilterError, StoreError
from tests.conformance import load_cases


def cases(key: str) -> list:
    try:
        items = load_cases("bloom_cases.json")[key]
    except pytest.skip.Exception as skipped:
        return [pytest.param(None, marks=pytest.mark.skip(reason=str(skipped)))]
    return [pytest.param(c, id=f"{i:02d}-{ascii(c.get('str', c.get('name')))[:30]}") for i, c in enumerate(items)]


def int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - 2**32 if value >= 2**31 else value


def reference_may_match(bitmap: bytes | None, data: BloomFilterData) -> bool:
    """ExpressionMessageFilter's rule, written out plainly."""
    if bitmap is None or len(bitmap) * 8 != data.bit_num:
        return True
    return all(bitmap[p // 8] & (1 << (p % 8)) for p in data.bit_pos)


# --- murmur3_128 -------------------------------------------------------------------------------------


class TestMurmur3:
    @pytest.mark.parametrize("case", cases("bit_positions"))
    def test_conformance_intermediates(self, case):
        as_long = murmur3_128_as_long(case["str"])
        assert as_long == case["murmur3_128_asLong"]
        assert (int32(as_long), int32(as_long >> 32)) == (case["hash1"], case["hash2"])
        assert murmur3_128_as_long(case["str"].encode("utf-8")) == as_long
        assert len(case["str"].encode("utf-8")) == case["utf8_length"]

    # Guava 33.6 Hashing.murmur3_128().hashString(s, UTF_8).asLong(), run on Java 17 for these strings.
    @pytest.mark.parametrize(
        "text, expected",
        [
            ("", 0),
            ("GID_1#T", 7134668056400713054),
            ("abcdefghijklmnopq", 8459014091212432983),  # one full 16-byte block and a 1-byte tail
            ("\U0001f600", 1544085228167910492),
            ("\ud83d\ude00", 1544085228167910492),  # a pair of surrogate code points is the same Java string
            ("\ud83d", -9034837761737348116),  # a lone surrogate is encoded as '?'
            ("a\ud800b", 7348157743185517386),
            ("x\udc00", 7182067213915771755),
            ("\ude00\ud83d", -1319162365530314579),  # reversed pair: two lone surrogates, '??'
            ("\ud800\ud800\udc00", 6162532555310644368),  # '?' then a valid pair
        ],
    )
    def test_guava_literals(self, text, expected):
        assert murmur3_128_as_long(text) == expected

    def test_lone_surrogate_hashes_like_question_mark(self):
        assert murmur3_128_as_long("a\ud800b") == murmur3_128_as_long("a?b")

    @pytest.mark.parametrize("key", [None, 5, ["a"]])
    def test_rejects_non_text(self, key):
        with pytest.raises(BloomFilterError):
            murmur3_128_as_long(key)


# --- BloomFilter sizing ------------------------------------------------------------------------------


class TestBloomFilterSizing:
    def test_broker_defaults(self):
        meta = load_cases("bloom_cases.json")["meta"]
        bf = BloomFilter()
        assert (bf.f, bf.n, bf.k, bf.m, bf.bits_length) == (
            meta["f"],
            meta["n"],
            meta["k"],
            meta["m"],
            meta["bitmap_byte_length"],
        )
        assert bf == BloomFilter(20, 32) and hash(bf) == hash(BloomFilter(20, 32)) and bf != BloomFilter(10, 32)

    # createByFn's formula evaluated with Java doubles for each (f, n) (same for all f < 100, n <= 3000).
    @pytest.mark.parametrize(
        "f, n, k, m",
        [
            (1, 1, 7, 16),
            (10, 128, 4, 616),
            (99, 1, 1, 8),
            (50, 7, 1, 16),
            (20, 1, 3, 8),
            (1, 1000, 7, 9592),
        ],
    )
    def test_k_and_m(self, f, n, k, m):
        bf = BloomFilter(f, n)
        assert (bf.k, bf.m, bf.bits_length, len(bf.new_bits())) == (k, m, m // 8, m // 8)

    @pytest.mark.parametrize(
        "f, n, field",
        [
            (0, 32, "max_error_rate"),
            (100, 32, "max_error_rate"),
            (20.0, 32, "max_error_rate"),
            (True, 32, "max_error_rate"),
            (20, 0, "expect_num"),
            (20, "32", "expect_num"),
            (1, 2**31, "expect_num"),
        ],
    )
    def test_rejects(self, f, n, field):
        with pytest.raises(BloomFilterError) as info:
            BloomFilter(f, n)
        assert info.value.field == field and isinstance(info.value, FilterError)


# --- BloomFilterData -------------------------------------------------------------------------------


class TestBloomFilterData:
    def test_generate(self):
        data = BloomFilter().generate("CID_5#topic0")
        assert data == BloomFilterData([103, 44, 46], 112) and data.bit_pos == [103, 44, 46]

    @pytest.mark.parametrize(
        "bit_pos, bit_num, field",
        [
            ([1, 2, 3], 0, "bit_num"),
            ([1], True, "bit_num"),
            ([], 112, "bit_pos"),
            ([112], 112, "bit_pos"),
            ([-1], 112, "bit_pos"),
            ([1.0], 112, "bit_pos"),
            ("123", 112, "bit_pos"),
            (None, 112, "bit_pos"),
        ],
    )
    def test_rejects(self, bit_pos, bit_num, field):
        with pytest.raises(BloomFilterError) as info:
            BloomFilterData(bit_pos, bit_num)
        assert info.value.field == field

    @pytest.mark.parametrize(
        "data, valid",
        [
            (BloomFilterData([1, 2, 3], 112), True),
            (BloomFilterData([1, 1, 1], 112), True),
            (BloomFilterData([1, 2], 112), False),
            (BloomFilterData([1, 2, 3, 4], 112), False),
            (BloomFilterData([1, 2, 3], 120), False),
            (None, False),
            ([1, 2, 3], False),
        ],
    )
    def test_is_valid(self, data, valid):
        assert BloomFilter().is_valid(data) is valid


# --- Bit positions, hash_to, is_hit ----------------------------------------------------------------


class TestBits:
    @pytest.mark.parametrize("case", cases("bit_positions"))
    def test_bit_positions_conformance(self, case):
        bf = BloomFilter()
        assert bf.calc_bit_positions(case["str"]) == case["bitPos"]
        assert bf.generate(case["str"]) == BloomFilterData(case["bitPos"], case["bitNum"])

    @pytest.mark.parametrize("case", cases("scenarios"))
    def test_scenario_conformance(self, case):
        bf = BloomFilter()
        bits = bf.new_bits()
        for key in case["matched"]:
            bf.hash_to(bf.generate(key), bits)
        assert list(bits) == case["bitmap_unsigned"] and bits.hex() == case["bitmap_hex"]
        assert [i for i in range(bf.m) if bits[i // 8] >> (i % 8) & 1] == case["set_bits"]
        for hit in case["isHit"]:
            assert bf.is_hit(hit["group_topic"], bytes(bits)) is hit["isHit"], hit
            assert bf.is_hit(bf.generate(hit["group_topic"]), bits) is hit["isHit"], hit

    def test_layout_is_lsb_first(self):
        bf = BloomFilter()
        bits = bf.new_bits()
        bf.hash_to(BloomFilterData([0, 9, 111], 112), bits)
        assert bits == bytearray([0x01, 0x02] + [0] * 11 + [0x80])
        bf.hash_to("G2#T1", bits)  # a key's bits are its generate() bits
        assert bf.is_hit(BloomFilterData([111, 20, 41], 112), bits)

    def test_is_hit_needs_every_bit(self):
        bits = bytes([0x01, 0x02] + [0] * 12)
        assert BloomFilter().is_hit(BloomFilterData([0, 9, 9], 112), bits)
        assert not BloomFilter().is_hit(BloomFilterData([0, 9, 10], 112), bits)

    @pytest.mark.parametrize("bits", [bytearray(13), bytearray(15), bytes(14), [0] * 14, None])
    def test_hash_to_needs_a_bytearray_of_m_bits(self, bits):
        with pytest.raises(BloomFilterError) as info:
            BloomFilter().hash_to("G#T", bits)
        assert info.value.field == "bits"

    @pytest.mark.parametrize("bits", [bytes(13), bytearray(0), "x" * 14])
    def test_is_hit_needs_m_bits(self, bits):
        with pytest.raises(BloomFilterError):
            BloomFilter().is_hit("G#T", bits)

    @pytest.mark.parametrize("data", [BloomFilterData([1, 2], 112), BloomFilterData([1, 2, 3], 120), 5])
    def test_data_of_another_filter_is_refused(self, data):
        with pytest.raises(BloomFilterError):
            BloomFilter().hash_to(data, BloomFilter().new_bits())
        with pytest.raises(BloomFilterError):
            BloomFilter().is_hit(data, bytes(14))

    def test_errors_are_store_errors(self):
        assert issubclass(BloomFilterError, FilterError) and issubclass(BloomFilterError, StoreError)


class TestBitsOr:
    @pytest.mark.parametrize(
        "bitmaps, expected",
        [
            ([b"\x01\x00", b"\x04\x80", b"\x01\x01"], b"\x05\x81"),
            ([b"\xff"], b"\xff"),
            ([bytearray(b"\x01"), memoryview(b"\x02")], b"\x03"),
            ([b"", b""], b""),
            ([], None),
            ([b"\x01", None], None),  # a row without a bitmap always may match: no summary prunes it
            ([None], None),
            ([b"\x01", b"\x01\x00"], None),  # lengths differ: some row was computed under another m
        ],
    )
    def test_cases(self, bitmaps, expected):
        assert bits_or(iter(bitmaps)) == expected

    @pytest.mark.parametrize("bitmaps", [b"\x01\x02", [b"\x01", "x"], [1]])
    def test_rejects(self, bitmaps):
        with pytest.raises(BloomFilterError):
            bits_or(bitmaps)


# --- Spark columns -------------------------------------------------------------------------------


def test_bitmap_and_hits_equal_rocketmq_scenarios(ansi):
    spark, bf = ansi, BloomFilter()
    scenarios = load_cases("bloom_cases.json")["scenarios"]
    df = spark.createDataFrame([(s["name"], s["matched"]) for s in scenarios], "name string, matched array<string>")
    keys = sorted({k for s in scenarios for k in s["registered"]})
    matches = [(F.array_contains(F.col("matched"), k), bf.generate(k)) for k in keys]
    names = sorted({h["group_topic"] for s in scenarios for h in s["isHit"]})
    with_bits = df.select("name", bitmap_column(matches, bf.m).alias("bitmap"))
    got = with_bits.select(
        "name",
        "bitmap",
        *[is_hit_column(F.col("bitmap"), bf.generate(n)).alias(f"hit{i}") for i, n in enumerate(names)],
    ).cache()
    expected = spark.createDataFrame(
        [(s["name"], bytearray.fromhex(s["bitmap_hex"])) for s in scenarios], "name string, bitmap binary"
    )
    assert_df_equality(got.select("name", "bitmap"), expected, ignore_nullable=True, ignore_row_order=True)
    rows = {r.name: r for r in got.collect()}
    for s in scenarios:
        for hit in s["isHit"]:
            assert rows[s["name"]][f"hit{names.index(hit['group_topic'])}"] is hit["isHit"], (s["name"], hit)


def test_bitmap_column_equals_python_hash_to(ansi):
    """Random matches (NULL included) for m = 112, a multi-word m = 616 and a non-byte bit_num."""
    spark, rng = ansi, random.Random(20240301)
    setups = [(BloomFilter(20, 32), 24), (BloomFilter(10, 128), 40)]
    odd = [BloomFilterData(rng.sample(range(13), 2), 13) for _ in range(5)]
    n_flags = 40 + 5
    rows = [[rng.choice([True, False, None]) for _ in range(n_flags)] for _ in range(60)]
    rows += [[True] * n_flags, [False] * n_flags, [None] * n_flags]
    df = spark.createDataFrame(rows, ", ".join(f"f{i} boolean" for i in range(n_flags)))
    datas = {bf.m: [bf.generate(f"G{i}#T{bf.m}") for i in range(count)] for bf, count in setups}
    cols = [bitmap_column([(F.col(f"f{i}"), d) for i, d in enumerate(ds)], m).alias(f"m{m}") for m, ds in datas.items()]
    cols.append(bitmap_column([(F.col(f"f{40 + i}"), d) for i, d in enumerate(odd)], 13).alias("m13"))
    cols.append(bitmap_column([], 112).alias("empty"))
    got = df.select(*[F.col(f"f{i}") for i in range(n_flags)], *cols).collect()
    for row in got:
        for bf, _ in setups:
            bits = bf.new_bits()
            for i, d in enumerate(datas[bf.m]):
                if row[f"f{i}"]:
                    bf.hash_to(d, bits)
            assert bytes(row[f"m{bf.m}"]) == bytes(bits)
        small = bytearray(2)
        for i, d in enumerate(odd):
            if row[f"f{40 + i}"]:
                for p in d.bit_pos:
                    small[p // 8] |= 1 << (p % 8)
        assert bytes(row.m13) == bytes(small) and bytes(row.empty) == bytes(14)


def test_is_hit_and_may_match_agree_with_python(ansi):
    spark, rng, bf = ansi, random.Random(7), BloomFilter()
    # Two random bytes ANDed: about a quarter of the bits set, so hits and misses both occur.
    bitmaps: list[bytes | None] = [
        bytes(rng.getrandbits(8) & rng.getrandbits(8) for _ in range(14)) for _ in range(300)
    ]
    bitmaps += [None, b"", bytes(13), b"\xff" * 13, b"\xff" * 14, b"\xff" * 15, bytes(14)]
    datas = [bf.generate(f"CID_{i}#T") for i in range(12)] + [
        BloomFilterData([0, 7, 111], 112),
        BloomFilterData([8, 9, 15], 112),
        BloomFilterData([5, 5, 5], 112),
        BloomFilterData([3, 7, 9], 120),
    ]
    df = spark.createDataFrame([(b,) for b in bitmaps], "b binary")
    cols = [is_hit_column(F.col("b"), d).alias(f"hit{i}") for i, d in enumerate(datas)]
    cols += [may_match_column(F.col("b"), d).alias(f"may{i}") for i, d in enumerate(datas)]
    rows = df.select("b", *cols).collect()
    assert len(rows) == len(bitmaps)
    for row in rows:
        b = None if row.b is None else bytes(row.b)
        for i, d in enumerate(datas):
            fits = b is not None and all(p // 8 < len(b) for p in d.bit_pos)
            assert row[f"hit{i}"] is (fits and all(b[p // 8] >> (p % 8) & 1 for p in d.bit_pos)), (b, d)
            assert row[f"may{i}"] is reference_may_match(b, d), (b, d)
            if b is not None and len(b) == 14 and d.bit_num == 112:
                assert row[f"hit{i}"] is bf.is_hit(d, b)


def test_may_match_passes_bit_num_not_a_byte_multiple(spark):
    data = BloomFilterData([1, 2], 13)
    row = spark.createDataFrame([(bytes(2),)], "b binary").select(may_match_column(F.col("b"), data).alias("m")).first()
    assert row.m is True


@pytest.mark.parametrize(
    "make, bit_num",
    [
        (lambda: [(F.lit(True), BloomFilterData([1, 2, 3], 120))], 112),
        (lambda: [(True, BloomFilterData([1, 2, 3], 112))], 112),
        (lambda: [(F.lit(True), [1, 2, 3])], 112),
        (lambda: [F.lit(True)], 112),
        (lambda: [], 0),
        (lambda: [], 2**31),
    ],
)
def test_bitmap_column_rejects(spark, make, bit_num):
    with pytest.raises(BloomFilterError):
        bitmap_column(make(), bit_num)


def test_hit_columns_reject_non_data(spark):
    with pytest.raises(BloomFilterError):
        is_hit_column(F.col("b"), [1, 2, 3])
    with pytest.raises(BloomFilterError):
        may_match_column(F.col("b"), None)
