"""ConsumeQueue tag codes (tagsString2tagsCode) in every form."""

from __future__ import annotations

from pyspark.sql import functions as F

from storelib.encoding.hashcode import java_string_hash
from storelib.encoding.tags import tags_code, tags_code_column
from tests.conformance import load_cases


class TestTagsCode:
    def test_no_tags_is_zero(self):
        assert tags_code(None) == 0
        assert tags_code("") == 0

    def test_whole_string_is_hashed(self):
        assert tags_code("TagA||TagB") == java_string_hash("TagA||TagB")
        assert tags_code("TagA||TagB") != tags_code("TagA")


def test_tags_code_matches_rocketmq_cases(spark):
    cases = load_cases("tags_hash_cases.json")["cases"]
    df = spark.createDataFrame([(c["tag"],) for c in cases], "tag string")
    got = [r.code for r in df.select(tags_code_column(F.col("tag")).alias("code")).collect()]
    assert got == [c["tagsCode"] for c in cases]
