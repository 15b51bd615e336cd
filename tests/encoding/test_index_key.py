"""IndexFile keys and hashes in every form."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from storelib.encoding.hashcode import java_string_hash
from storelib.encoding.index_key import (
    build_index_key,
    index_key_hash,
    index_key_hash_column,
    index_key_hashes,
    index_slot,
)
from storelib.model.errors import StoreError
from tests.conformance import conformance_params, load_cases, utf8_cases

INDEX_KEY_CASES = conformance_params("index_key_cases.json", "cases", lambda c: c["index_key"][:30])


class TestIndexKey:
    @pytest.mark.parametrize("case", INDEX_KEY_CASES)
    def test_conformance(self, case):
        key = build_index_key(case["topic"], case["key"])
        assert key == case["index_key"]
        assert java_string_hash(key) == case["java_hashCode"]
        assert index_key_hash(key) == case["keyHash"]
        assert index_slot(key) == case["slotPos"]
        assert 40 + index_slot(key) * 4 == case["absSlotPos"]

    def test_int_min_hash_gives_zero_and_negatives_flip(self):
        assert index_key_hash("polygenelubricants") == 0
        assert index_key_hash("TopicTest#erAHomt") == 0
        assert index_key_hash("Topic_1#key_6_ed1dd874") == 1502440466

    def test_custom_slot_count(self):
        assert index_slot("#", 10) == 35 % 10
        with pytest.raises(StoreError):
            index_slot("#", 0)


class TestIndexKeyHashes:
    def test_conformance(self):
        cases = utf8_cases("index_key_cases.json")
        got = index_key_hashes(pa.array([c["topic"] for c in cases]), pa.array([c["key"] for c in cases]))
        assert got.tolist() == [c["keyHash"] for c in cases]

    def test_matches_codec_over_many_topics(self):
        rnd = random.Random(5)
        topics = [rnd.choice(["TopicTest", "T2", "Tö", "%RETRY%G"]) for _ in range(3000)]
        keys = ["".join(rnd.choice("ab #é😀") for _ in range(rnd.randrange(1, 30))) for _ in topics]
        got = index_key_hashes(pa.array(topics), pa.array(keys))
        assert got.tolist() == [index_key_hash(f"{t}#{k}") for t, k in zip(topics, keys)]


def test_index_key_hash_matches_rocketmq_cases(spark):
    cases = load_cases("index_key_cases.json")["cases"]
    df = spark.createDataFrame([(c["index_key"],) for c in cases], "k string")
    got = [r.h for r in df.select(index_key_hash_column(F.col("k")).alias("h")).collect()]
    assert got == [c["keyHash"] for c in cases]
