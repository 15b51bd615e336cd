"""Tag subscriptions (storelib.filter.tag) against RocketMQ's FilterAPI cases, literal cases and Spark."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from storelib.encoding.hashcode import java_string_hash
from storelib.encoding.tags import tags_code
from storelib.filter.tag import (
    SUB_ALL,
    ExpressionType,
    SubscriptionData,
    build_subscription,
    build_subscription_data,
    code_match_column,
    tag_match_column,
)
from storelib.model.errors import FilterError, FilterExpressionError
from tests.conformance import load_cases

TOPIC = "TopicTest"


def filter_api_params() -> list:
    try:
        cases = load_cases("filter_api_cases.json")["cases"]
    except pytest.skip.Exception as skipped:
        return [pytest.param(None, marks=pytest.mark.skip(reason=str(skipped)))]
    return [
        pytest.param(c, id=f"{i:02d}-{c['api']}-{c.get('type_in', '<none>')}-{ascii(c['subString_in'])[:20]}")
        for i, c in enumerate(cases)
    ]


def summary(sub: SubscriptionData) -> dict:
    """The fields the conformance file records, sets sorted as it lists them."""
    return {
        "topic": sub.topic,
        "subString": sub.sub_string,
        "expressionType": sub.expression_type,
        "tagsSet": sorted(sub.tags_set),
        "codeSet": sorted(sub.code_set),
        "classFilterMode": sub.class_filter_mode,
    }


# --- RocketMQ's own answers ------------------------------------------------------------------------


@pytest.mark.parametrize("case", filter_api_params())
def test_filter_api_conformance(case):
    build = build_subscription if case["api"] == "build" else build_subscription_data
    args = (TOPIC, case["subString_in"]) + ((case["type_in"],) if "type_in" in case else ())
    if case["exception"]:
        with pytest.raises(FilterExpressionError) as info:
            build(*args)
        assert info.value.code == "SUBSCRIPTION_PARSE_FAILED"
        assert "subString split error" in case["exception"] and "subString split error" in str(info.value)
    else:
        assert summary(build(*args)) == case["result"]


# --- ExpressionType ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression_type, is_tag",
    [
        (None, True),
        ("", True),
        ("TAG", True),
        ("tag", False),
        (" TAG", False),
        ("SQL92", False),
        ("  ", False),
    ],
)
def test_is_tag_type(expression_type, is_tag):
    assert ExpressionType.is_tag_type(expression_type) is is_tag


# --- Splitting and trimming -------------------------------------------------------------------------


class TestSplitAndTrim:
    @pytest.mark.parametrize(
        "text, tags",
        [
            ("TagA", {"TagA"}),
            ("TagA||TagB", {"TagA", "TagB"}),
            ("||TagA", {"TagA"}),  # a leading empty piece is kept by the split, then skipped
            ("TagA||", {"TagA"}),  # trailing empty pieces are dropped by the split
            ("TagA|||TagB", {"TagA", "|TagB"}),  # '||' is found left to right
            ("TagA|TagB", {"TagA|TagB"}),
            (" TagA\t||\r\nTagB\x00", {"TagA", "TagB"}),  # Java trim: everything <= U+0020
            ("\u3000TagA||\xa0TagB", {"\u3000TagA", "\xa0TagB"}),  # ...but not wider spaces
            ("  ", set()),  # one blank piece: no tags, no error
            ("|| ||", set()),  # a non-empty last piece: no error either
            (" * ", {"*"}),  # only exactly '*' subscribes to all
        ],
    )
    def test_tags(self, text, tags):
        sub = build_subscription_data(TOPIC, text)
        assert (sub.sub_string, sub.tags_set) == (text, tags)
        assert sub.code_set == {java_string_hash(t) for t in tags}

    @pytest.mark.parametrize("text", [None, "", "*"])
    def test_subscribe_all(self, text):
        sub = build_subscription_data(TOPIC, text)
        assert (sub.sub_string, sub.tags_set, sub.code_set, sub.is_sub_all) == (SUB_ALL, frozenset(), frozenset(), True)

    @pytest.mark.parametrize("text", ["||", "||||", "||||||"])
    def test_only_separators_is_a_parse_error(self, text):
        with pytest.raises(FilterExpressionError, match="subString split error") as info:
            build_subscription_data(TOPIC, text, "SQL92")
        assert (info.value.expression, info.value.position, info.value.field) == (text, 0, "expression")


# --- build vs buildSubscriptionData -----------------------------------------------------------------


class TestBuildApis:
    @pytest.mark.parametrize(
        "expression_type, stored",
        [
            (None, "TAG"),
            ("", "TAG"),
            ("   ", "TAG"),
            ("\u3000", "TAG"),  # blank (Java whitespace): not stored
            ("\xa0", "\xa0"),
            ("sql92", "sql92"),
            ("SQL92", "SQL92"),  # U+00A0 is not Java whitespace
        ],
    )
    def test_build_subscription_data_stores_non_blank_types(self, expression_type, stored):
        sub = build_subscription_data(TOPIC, "TagA", expression_type)
        assert (sub.expression_type, sub.tags_set) == (stored, {"TagA"})

    def test_build_keeps_non_tag_expressions_verbatim(self):
        sub = build_subscription(TOPIC, " a > 1 || b ", "SQL92")
        assert (sub.sub_string, sub.expression_type, sub.tags_set, sub.code_set) == (
            " a > 1 || b ",
            "SQL92",
            frozenset(),
            frozenset(),
        )

    @pytest.mark.parametrize("text", [None, ""])
    @pytest.mark.parametrize("expression_type", ["SQL92", "tag", ""])
    def test_build_refuses_empty_non_tag_expression(self, text, expression_type):
        with pytest.raises(FilterExpressionError, match="can't be empty") as info:
            build_subscription(TOPIC, text, expression_type)
        assert info.value.code == "SUBSCRIPTION_PARSE_FAILED"

    def test_build_defaults_to_tag(self):
        assert build_subscription(TOPIC, "TagA") == build_subscription(TOPIC, "TagA", None)
        assert build_subscription(TOPIC, "TagA") == build_subscription_data(TOPIC, "TagA")

    @pytest.mark.parametrize(
        "args, field",
        [
            ((None, "TagA"), "topic"),
            ((TOPIC, 5), "sub_string"),
            ((TOPIC, b"TagA"), "sub_string"),
            ((TOPIC, "TagA", 1), "expression_type"),
        ],
    )
    def test_rejects_non_strings(self, args, field):
        for build in (build_subscription, build_subscription_data):
            with pytest.raises(FilterError) as info:
                build(*args)
            assert info.value.field == field


# --- SubscriptionData -------------------------------------------------------------------------------


class TestSubscriptionData:
    def test_equality_ignores_sub_version(self):
        a = SubscriptionData(TOPIC, "TagA", tags_set={"TagA"}, code_set={2598919}, sub_version=1)
        b = SubscriptionData(TOPIC, "TagA", tags_set=["TagA"], code_set=[2598919], sub_version=2)
        assert a == b and hash(a) == hash(b) and isinstance(a.tags_set, frozenset)
        assert a != SubscriptionData(TOPIC, "TagA", tags_set={"TagA"}, code_set={2598919}, class_filter_mode=True)

    def test_sub_version_is_now_in_ms(self):
        import time

        before = int(time.time() * 1000)
        assert before - 1 <= build_subscription(TOPIC, "TagA").sub_version <= int(time.time() * 1000) + 1

    def test_repr_lists_sets_sorted(self):
        sub = build_subscription(TOPIC, "TagB || TagA")
        assert "tags_set=['TagA', 'TagB'], code_set=[2598919, 2598920]" in repr(sub)

    @pytest.mark.parametrize(
        "kwargs, field",
        [
            ({"topic": None}, "topic"),
            ({"sub_string": None}, "sub_string"),
            ({"expression_type": None}, "expression_type"),
            ({"tags_set": "TagA"}, "tags_set"),
            ({"tags_set": {1}}, "tags_set"),
            ({"code_set": {2**31}}, "code_set"),
            ({"code_set": {True}}, "code_set"),
            ({"sub_version": 1.5}, "sub_version"),
            ({"class_filter_mode": 1}, "class_filter_mode"),
        ],
    )
    def test_validates(self, kwargs, field):
        with pytest.raises(FilterError) as info:
            SubscriptionData(**{"topic": TOPIC, "sub_string": "x", **kwargs})
        assert info.value.field == field


# --- Matching one value -----------------------------------------------------------------------------


class TestMatchesCode:
    @pytest.mark.parametrize(
        "text, code, expected",
        [
            ("TagA", 2598919, True),
            ("TagA", 2598920, False),
            ("TagA", 2598919 + 2**32, True),
            ("TagA", 2598919 - 2**32, True),  # Long.intValue: low 32 bits
            ("TagA", None, True),  # no valid tags code: passes
            ("*", 12345, True),
            ("*", 0, True),
            ("  ", 0, False),
            ("  ", 7, False),  # no tags and not '*': the broker passes nothing
            ("*||TagA", 2598920, False),  # '*' among tags is a tag named '*' (code 42), not a wildcard
            ("*||TagA", 42, True),
            ("TagA", 0, False),  # a message without tags has code 0
        ],
    )
    def test_tag_subscription(self, text, code, expected):
        assert build_subscription(TOPIC, text).matches_code(code) is expected

    def test_other_stages_decide_for_non_tag_types_and_class_filter(self):
        assert build_subscription_data(TOPIC, "TagA", "SQL92").matches_code(1)
        assert build_subscription_data(TOPIC, "TagA", "tag").matches_code(1)  # 'tag' is not a tag type
        assert SubscriptionData(TOPIC, "TagA", code_set={1}, class_filter_mode=True).matches_code(2)

    def test_rejects_non_int(self):
        with pytest.raises(FilterError):
            build_subscription(TOPIC, "TagA").matches_code("2598919")


class TestMatchesTag:
    @pytest.mark.parametrize(
        "text, tags, expected",
        [
            ("TagA || TagB", "TagB", True),
            ("TagA || TagB", "TagC", False),
            ("TagA || TagB", None, False),
            ("TagA || TagB", "TagA||TagB", False),  # a message's TAGS string is never split
            ("*", None, True),
            ("*", "x", True),
            ("  ", "x", True),  # empty tags set: the client keeps all
            ("*||TagA", "TagB", False),
            ("TagA", "taga", False),
        ],
    )
    def test_tag_subscription(self, text, tags, expected):
        assert build_subscription(TOPIC, text).matches_tag(tags) is expected

    def test_sql92_built_by_build_subscription_data_filters_by_tags(self):
        # buildSubscriptionData parses the SQL text as one tag; the client then filters by it.
        sub = build_subscription_data(TOPIC, "a is not null", "SQL92")
        assert sub.tags_set == {"a is not null"} and not sub.matches_tag("TagA")
        assert build_subscription(TOPIC, "a is not null", "SQL92").matches_tag("TagA")


def test_colliding_tags_python():
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    sub = build_subscription(TOPIC, "Aa")
    assert sub.matches_code(tags_code("BB")) and sub.matches_code(tags_code("Aa"))
    assert (sub.matches_tag("Aa"), sub.matches_tag("BB")) == (True, False)
    assert (sub.matches("Aa"), sub.matches("BB")) == (True, False)


# --- Spark columns ----------------------------------------------------------------------------------

SPARK_SUBS = [
    build_subscription(TOPIC, "*"),
    build_subscription(TOPIC, "TagA || TagB"),
    build_subscription(TOPIC, "Aa"),
    build_subscription(TOPIC, "  "),
    build_subscription(TOPIC, "*||TagA"),
    build_subscription(TOPIC, "a > 1", "SQL92"),
    build_subscription_data(TOPIC, "TagA", "tag"),
    build_subscription(TOPIC, "中文||😀"),
    build_subscription(TOPIC, " || ".join(f"T{i}" for i in range(40))),  # many codes: Spark's InSet
    SubscriptionData(TOPIC, "TagA", tags_set={"TagA"}, code_set={2598919}, class_filter_mode=True),
]
SPARK_ROWS = [
    (t, tags_code(t)) for t in ["TagA", "TagB", "TagC", "Aa", "BB", "*", "中文", "😀", "T7", "T39", "T40", ""]
]
SPARK_ROWS += [
    (None, 0),
    (None, None),
    ("TagA", None),
    ("TagA", 2598919 + 2**32),
    ("TagB", 2598920 - 2**33),
    ("x", 2**63 - 1),
    ("y", -(2**63)),
    ("z", 2**31),
    ("w", -(2**31) - 1),
]


def test_columns_equal_python_for_every_row_and_subscription(ansi):
    spark = ansi
    df = spark.createDataFrame(SPARK_ROWS, "tags string, tags_code long")
    cols = [F.col("tags"), F.col("tags_code")]
    for i, sub in enumerate(SPARK_SUBS):
        cols += [
            code_match_column(sub, F.col("tags_code")).alias(f"code{i}"),
            tag_match_column(sub, F.col("tags")).alias(f"tag{i}"),
        ]
    rows = df.select(*cols).collect()
    assert len(rows) == len(SPARK_ROWS)
    for row in rows:
        for i, sub in enumerate(SPARK_SUBS):
            assert row[f"code{i}"] is sub.matches_code(row.tags_code), (i, row)
            assert row[f"tag{i}"] is sub.matches_tag(row.tags), (i, row)


def test_code_column_on_int_column_and_literal_results(spark):
    df = spark.createDataFrame([(2598919,), (1,), (None,)], "c int")
    got = df.select(
        code_match_column(build_subscription(TOPIC, "TagA"), F.col("c")).alias("m"),
        code_match_column(build_subscription(TOPIC, "  "), F.col("c")).alias("none"),
    )
    assert [tuple(r) for r in got.collect()] == [(True, False), (False, False), (True, True)]


def test_colliding_tags_spark(spark):
    sub = build_subscription(TOPIC, "Aa")
    df = spark.createDataFrame([(t, tags_code(t)) for t in ["Aa", "BB", "Ab"]], "tags string, tags_code long")
    got = df.select(
        "tags",
        code_match_column(sub, F.col("tags_code")).alias("code_stage"),
        tag_match_column(sub, F.col("tags")).alias("tag_stage"),
    )
    expected = spark.createDataFrame(
        [("Aa", True, True), ("BB", True, False), ("Ab", False, False)],
        "tags string, code_stage boolean, tag_stage boolean",
    )
    assert_df_equality(got, expected, ignore_nullable=True, ignore_row_order=True)
