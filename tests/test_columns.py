"""The Spark column encodings equal RocketMQ's values (and storelib.codec) row for row."""

from __future__ import annotations

from conformance import load_cases
from pyspark.sql import functions as F

from storelib import codec
from storelib import columns as C

STRINGS = ["TagA", "Aa", "BB", "", "😀x", "中文", "TopicTest#order-1", "polygenelubricants", "a" * 300, "\U0010ffff"]


def test_java_hash_code_both_ways(spark):
    df = spark.createDataFrame([(s,) for s in STRINGS] + [(None,)], "s string")
    rows = df.select("s", C.java_hash_code(F.col("s")).alias("reflect"), C.java_hash_code_expr(F.col("s")).alias("expr")).collect()
    for r in rows:
        want = 0 if r.s is None else codec.java_string_hash(r.s)
        assert (r.reflect, r.expr) == (want, want), r.s


def test_tags_code_matches_rocketmq_cases(spark):
    cases = load_cases("tags_hash_cases.json")["cases"]
    df = spark.createDataFrame([(c["tag"],) for c in cases], "tag string")
    got = [r.code for r in df.select(C.tags_code(F.col("tag")).alias("code")).collect()]
    assert got == [c["tagsCode"] for c in cases]


def test_index_key_hash_matches_rocketmq_cases(spark):
    cases = load_cases("index_key_cases.json")["cases"]
    df = spark.createDataFrame([(c["index_key"],) for c in cases], "k string")
    got = [r.h for r in df.select(C.index_key_hash(F.col("k")).alias("h")).collect()]
    assert got == [c["keyHash"] for c in cases]


