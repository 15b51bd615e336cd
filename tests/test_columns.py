"""The Spark Column forms of the encodings equal RocketMQ's values (and the scalar forms) row for row."""

from __future__ import annotations

from pyspark.sql import functions as F

from conformance import load_cases
from storelib.encoding.hashcode import java_hash_code_column, java_string_hash
from storelib.encoding.index_key import index_key_hash_column
from storelib.encoding.tags import tags_code_column

STRINGS = ["TagA", "Aa", "BB", "", "😀x", "中文", "TopicTest#order-1", "polygenelubricants", "a" * 300, "\U0010ffff"]


def test_java_hash_code_column(spark):
    df = spark.createDataFrame([(s,) for s in STRINGS] + [(None,)], "s string")
    rows = df.select("s", java_hash_code_column(F.col("s")).alias("reflect")).collect()
    for r in rows:
        want = 0 if r.s is None else java_string_hash(r.s)
        assert r.reflect == want, r.s


def test_tags_code_matches_rocketmq_cases(spark):
    cases = load_cases("tags_hash_cases.json")["cases"]
    df = spark.createDataFrame([(c["tag"],) for c in cases], "tag string")
    got = [r.code for r in df.select(tags_code_column(F.col("tag")).alias("code")).collect()]
    assert got == [c["tagsCode"] for c in cases]


def test_index_key_hash_matches_rocketmq_cases(spark):
    cases = load_cases("index_key_cases.json")["cases"]
    df = spark.createDataFrame([(c["index_key"],) for c in cases], "k string")
    got = [r.h for r in df.select(index_key_hash_column(F.col("k")).alias("h")).collect()]
    assert got == [c["keyHash"] for c in cases]
