"""Java's String.hashCode in its three forms (scalar, Arrow, Column) against RocketMQ's values."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from storelib.encoding.hashcode import java_hash_code_column, java_hash_codes, java_string_hash
from storelib.encoding.tags import tags_code, tags_codes
from tests.conformance import conformance_params, utf8_cases


def reference_hash(s: str) -> int:
    """Java's hashCode written the slow, obvious way."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (h * 31 + int.from_bytes(data[i : i + 2], "big")) % 2**32
    return h - 2**32 if h >= 2**31 else h


TAG_CASES = conformance_params("tags_hash_cases.json", "cases", lambda c: ascii(c["tag"])[:24])


STRINGS = ["TagA", "Aa", "BB", "", "😀x", "中文", "TopicTest#order-1", "polygenelubricants", "a" * 300, "\U0010ffff"]


class TestJavaStringHash:
    @pytest.mark.parametrize(
        "s, expected",
        [
            ("", 0),
            ("a", 97),
            ("ab", 97 * 31 + 98),
            ("Aa", 2112),
            ("BB", 2112),
            ("polygenelubricants", -(2**31)),  # the classic Integer.MIN_VALUE string
            ("\U0001f600", 31 * 0xD83D + 0xDE00),  # one code point, two UTF-16 units
            ("\ud800", 0xD800),  # a lone surrogate hashes as its unit
        ],
    )
    def test_literals(self, s, expected):
        assert java_string_hash(s) == expected

    @pytest.mark.parametrize("s", ["x" * 1000, "日本\U0001f600é" * 300, "TopicTest#" + "9" * 63])
    def test_long_strings_match_reference(self, s):
        assert java_string_hash(s) == reference_hash(s)

    @pytest.mark.parametrize("case", TAG_CASES)
    def test_conformance(self, case):
        assert java_string_hash(case["tag"]) == case["java_hashCode"]
        assert tags_code(case["tag"]) == case["tagsCode"]


class TestJavaHashCodes:
    @pytest.mark.parametrize(
        "strings",
        [
            [],
            [None],
            [""],
            ["a", "ab", "Aa", "BB"],
            ["polygenelubricants"],
            ["\U0001f600", "é中", "a\U0001f600b"],
            ["x" * 5000, "y"],  # one long string among short ones: the sparse fold
            ["é中", "ab", "\U0001f600"],
            ["0A1B2C3D" * 4] * 3,  # all of one length in UTF-16 units: folded as they are
        ],
    )
    def test_literals(self, strings):
        expected = [java_string_hash(s) if s is not None else 0 for s in strings]
        assert java_hash_codes(pa.array(strings, pa.string())).tolist() == expected

    def test_random_strings_and_slices(self):
        rnd = random.Random(11)
        alphabet = "abcXYZ019 #|é中\u0800\uffff😀"
        for longest in (1, 8, 40, 300):
            strings = [
                "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(longest + 1))) if rnd.random() > 0.1 else None
                for _ in range(2000)
            ]
            expected = [java_string_hash(s) if s is not None else 0 for s in strings]
            array = pa.array(strings, pa.string())
            assert java_hash_codes(array).tolist() == expected
            assert java_hash_codes(array.slice(123, 700)).tolist() == expected[123:823]
            assert java_hash_codes(pa.chunked_array([array.slice(0, 5), array.slice(5)])).tolist() == expected

    def test_ids_of_one_length_and_their_slices(self):
        ids = [f"{i * 2654435761 % 2**128:032X}" for i in range(500)]
        expected = [java_string_hash(s) for s in ids]
        array = pa.array(ids, pa.string())
        assert java_hash_codes(array).tolist() == expected
        assert java_hash_codes(array.slice(17, 300)).tolist() == expected[17:317]

    def test_tags_conformance(self):
        cases = utf8_cases("tags_hash_cases.json")
        got = tags_codes(pa.array([c["tag"] for c in cases], pa.string())).tolist()
        assert got == [c["tagsCode"] for c in cases]

    def test_no_tags_is_zero(self):
        assert tags_codes(pa.array([None, ""], pa.string())).tolist() == [0, 0]


def test_java_hash_code_column(spark):
    df = spark.createDataFrame([(s,) for s in STRINGS] + [(None,)], "s string")
    rows = df.select("s", java_hash_code_column(F.col("s")).alias("reflect")).collect()
    for r in rows:
        want = 0 if r.s is None else java_string_hash(r.s)
        assert r.reflect == want, r.s
