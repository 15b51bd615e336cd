"""SQL92 subscriptions: the grammar, the Python reference evaluator and the Spark Column, against
RocketMQ's own answers and against each other.

Spark checks run many expressions in one job: one DataFrame row per property map, one column per
expression (through ``to_columns``), read back whole or along the diagonal.
"""

from __future__ import annotations

import math
import pickle
import random
from pathlib import Path

import pytest
import sqlglot
from chispa import assert_df_equality
from pyspark.sql import functions as F
from sqlglot import exp

from storelib.filter.selector import MessageSelector
from storelib.filter.sql92 import (
    MAX_EXPRESSION_LENGTH,
    MAX_NESTING,
    RocketMQSQL92,
    Sql92Expression,
    Sql92Parser,
    compile_sql92,
    parse_sql92,
)
from storelib.filter.sql92 import tree as T
from storelib.filter.sql92.arrow import evaluate_batch
from storelib.filter.sql92.dialect import (
    DISPLAY_MAX_DEPTH,
    MATCH_TOKENS,
    PRECEDENCE_CASES,
    spark_sql,
    to_sqlglot,
    typed_tree,
)
from storelib.filter.sql92.java import JavaEvaluationError, evaluate, java_parse_double, java_parse_int, java_parse_long
from storelib.filter.sql92.lexer import tokenize_sql92
from storelib.filter.sql92.spark import to_column, to_columns
from storelib.filter.sql92.tree import JavaType, depth, java_type, java_value, terms, walk
from storelib.model.config import StoreConfig
from storelib.model.errors import FilterExpressionError
from tests.conformance import load_cases

INT, LONG, DOUBLE, STRING, BOOLEAN = JavaType.INT, JavaType.LONG, JavaType.DOUBLE, JavaType.STRING, JavaType.BOOLEAN


def a_eq(value: int) -> T.Node:
    return T.comparison("=", T.prop("a"), T.literal(value, INT))


def signature(tree: T.Node) -> list[tuple[str, JavaType, int, object]]:
    """What sqlglot's equality leaves out: every node's Java type, depth and literal value."""
    return [(type(n).__name__, java_type(n), depth(n), java_value(n)) for n in walk(tree)]


def assert_tree(got: T.Node, expected: T.Node) -> None:
    """The same sqlglot expression, its nodes typed alike."""
    assert got == expected, (got.sql(), expected.sql())
    assert signature(got) == signature(expected), got.sql()


# -- literal cases: (expression, properties, RocketMQ's answer), grouped by concept --------------

OPERATORS = [
    ("a = 5", {"a": "5"}, True),
    ("a = 5", {"a": "6"}, False),
    ("a = 5", {}, False),
    ("a <> 5", {"a": "6"}, True),
    ("a <> 5", {}, False),
    ("a = 'x'", {"a": "x"}, True),
    ("a = 'x'", {"a": "X"}, False),
    ("a <> 'x'", {"a": "y"}, True),
    ("a > 5", {"a": "6"}, True),
    ("a > 5", {"a": "5"}, False),
    ("a >= 5", {"a": "5"}, True),
    ("a < 5", {"a": "5"}, False),
    ("a <= 5", {"a": "5"}, True),
    ("5 < a", {"a": "6"}, True),
    ("a BETWEEN 1 AND 5", {"a": "1"}, True),
    ("a BETWEEN 1 AND 5", {"a": "6"}, False),
    ("a NOT BETWEEN 1 AND 5", {"a": "6"}, True),
    ("a NOT BETWEEN 1 AND 5", {}, False),
    ("a IN ('x', 'y')", {"a": "y"}, True),
    ("a IN ('x', 'y')", {}, False),
    ("a NOT IN ('x', 'y')", {"a": "z"}, True),
    ("a NOT IN ('x')", {}, False),
    ("a IS NULL", {}, True),
    ("a IS NULL", {"a": ""}, False),
    ("a IS NOT NULL", {"a": ""}, True),
    ("a CONTAINS 'b'", {"a": "abc"}, True),
    ("a NOT CONTAINS 'b'", {"a": "abc"}, False),
    ("a NOT CONTAINS 'b'", {}, False),
    ("a STARTSWITH 'ab'", {"a": "abc"}, True),
    ("a NOT STARTSWITH 'ab'", {"a": "xbc"}, True),
    ("a ENDSWITH 'bc'", {"a": "abc"}, True),
    ("a NOT ENDSWITH 'z'", {"a": "abc"}, True),
    ("a NOT STARTSWITH ''", {"a": "x"}, False),
    ("a CONTAINS ''", {"a": "x"}, False),
    ("a = 1 AND b = 2", {"a": "1", "b": "2"}, True),
    ("a = 1 AND b = 2", {"a": "1"}, False),
    ("a = 1 OR b = 2", {"b": "2"}, True),
    ("NOT (a = 1)", {"a": "2"}, True),
    ("NOT (a = 1)", {}, False),
]
COERCION = [
    ("a = 5", {"a": "+5"}, True),
    ("a = 5", {"a": "５"}, True),
    ("a = 5", {"a": " 5"}, False),
    ("a = 5", {"a": "5.0"}, False),
    ("a <> 5", {"a": "5.0"}, False),
    ("a <> 5", {"a": "2147483648"}, False),
    ("a <> 5000000000", {"a": "2147483648"}, True),
    ("a = 10L", {"a": "10"}, True),
    ("a = 5.0", {"a": " 5 "}, True),
    ("a = 5.0", {"a": "5d"}, True),
    ("a = 8.0", {"a": "0x1p3"}, True),
    ("a > 5.0", {"a": "Infinity"}, True),
    ("a > 5.0", {"a": "infinity"}, False),
    ("a > 5.0", {"a": "NaN"}, True),
    ("a < 5.0", {"a": "NaN"}, False),
    ("a > 5", {"a": "NaN"}, False),
    ("a = 1.0", {"a": "1"}, True),
    ("a > 9223372036854775806", {"a": "9223372036854775807"}, True),
    ("a = TRUE", {"a": "tRuE"}, True),
    ("a = FALSE", {"a": "yes"}, True),
    ("a = 'true'", {"a": "TRUE"}, False),
    ("TRUE = a", {"a": "true"}, False),
    ("TRUE = a", {}, False),
    ("TRUE <> a", {}, True),
    ("'x' <> a", {}, True),
    ("'x' = a", {}, False),
    ("a = b", {}, True),
    ("a = b", {"a": "1"}, False),
    ("a <> b", {"a": "1"}, True),
    ("a <> b", {"b": "1"}, False),
    ("a = b", {"a": "1", "b": "1.0"}, False),
    ("a > b", {"a": "10", "b": "9"}, True),
    ("a >= b", {"a": "-0.0", "b": "0.0"}, False),
    ("a < b", {"a": "-0.0", "b": "0.0"}, True),
    ("a > b", {"a": "NaN", "b": "Infinity"}, True),
    ("a > b", {"a": "x", "b": "1"}, False),
    ("1 = 1.0", {}, True),
    ("5000000000 > 4.5", {}, True),
    ("-a > 0", {"a": "-5"}, False),
    ("a > --1", {"a": "2"}, True),
    ("a > -2147483648", {"a": "-2147483648"}, False),
    ("'true' = TRUE", {}, True),
    ("1 = TRUE", {}, False),
    ("1 CONTAINS '1'", {}, False),
]
SHORT_CIRCUIT = [
    ("a = 'x' OR b > 1", {"a": "x", "b": "abc"}, True),
    ("b > 1 OR a = 'x'", {"a": "x", "b": "abc"}, False),
    ("a = 'y' AND b > 1", {"a": "x", "b": "abc"}, False),
    ("b > 1 AND a = 'y'", {"a": "x", "b": "abc"}, False),
    ("TRUE OR b > 1", {"b": "abc"}, True),
    ("b > 1 OR TRUE", {"b": "abc"}, False),
    ("c > 1 AND b > 1", {"b": "abc"}, False),
    ("c IS NULL OR b > 1", {"b": "abc"}, True),
    ("NOT (b > 1)", {"b": "abc"}, False),
    ("(b > 1) IS NULL", {"b": "abc"}, False),
    ("(b > 1) IS NULL", {}, True),
    ("c > b", {"b": "abc"}, False),
    ("(b > 1) CONTAINS ''", {"b": "abc"}, False),
    ("a IN ('x') AND (b > 1) = TRUE", {"a": "y", "b": "abc"}, False),
]
BOOLEANS_AND_PRECEDENCE = [
    ("a", {"a": "true"}, False),
    ("NOT a", {"a": "x"}, True),
    ("NOT a", {}, False),
    ("a AND b", {"a": "true"}, False),
    ("TRUE", {}, True),
    ("FALSE", {}, False),
    ("NULL", {}, False),
    ("NOT NULL", {}, False),
    ("NOT a = 1", {"a": "1"}, False),
    ("NOT a = TRUE", {"a": "x"}, True),
    ("NOT a = FALSE", {"a": "x"}, False),
    ("NOT a CONTAINS 'x'", {"a": "x"}, False),
    ("a = 1 OR b = 2 AND c = 3", {"a": "1"}, True),
    ("(a = 1 OR b = 2) AND c = 3", {"a": "1"}, False),
    ("a = 1 = TRUE", {"a": "1"}, True),
    ("a CONTAINS 'x' = FALSE", {"a": "abc"}, True),
    ("a IS NULL = TRUE", {}, True),
    ("a BETWEEN 1 AND 2 AND b = 1", {"a": "2", "b": "1"}, True),
]
LITERAL_CASES = OPERATORS + COERCION + SHORT_CIRCUIT + BOOLEANS_AND_PRECEDENCE


@pytest.mark.parametrize("text, props, expected", LITERAL_CASES, ids=[f"{c[0]}|{c[1]}" for c in LITERAL_CASES])
def test_python_evaluator_on_literal_cases(text, props, expected):
    assert parse_sql92(text).evaluate(props) is expected


def _conformance() -> list[dict]:
    return load_cases("sql92_cases")["cases"]


def test_python_on_conformance_cases():
    wrong = []
    for case in _conformance():
        try:
            got: object = parse_sql92(case["expr"]).evaluate(case["props"])
        except FilterExpressionError:
            got = "parse_error"
        if got != case["expected"]:
            wrong.append((case["expr"][:80], case["props"], case["expected"], got))
    assert not wrong


@pytest.fixture(scope="module")
def spark_answers(spark) -> dict[tuple[str, str], bool]:
    """Spark's answer for every literal case and every (parseable) conformance case, in one job:
    row i holds case i's properties, column i its expression, and cell (i, i) is kept. Separate
    columns rather than one array of them: Spark compiles and shares those far better."""
    try:
        conformance = [(c["expr"], c["props"]) for c in _conformance() if c["expected"] != "parse_error"]
    except pytest.skip.Exception:
        conformance = []
    cases = [(text, props) for text, props, _ in LITERAL_CASES] + conformance
    df = spark.createDataFrame(
        [(i, props) for i, (_, props) in enumerate(cases)], "i int, properties map<string,string>"
    )
    columns = to_columns([parse_sql92(text).tree for text, _ in cases])
    rows = df.select("i", *(c.alias(f"c{i}") for i, c in enumerate(columns))).collect()
    return {(cases[row.i][0], repr(cases[row.i][1])): row[f"c{row.i}"] for row in rows}


def test_spark_on_literal_cases(spark_answers):
    wrong = [(t, p, spark_answers[t, repr(p)]) for t, p, want in LITERAL_CASES if spark_answers[t, repr(p)] is not want]
    assert not wrong


def test_spark_on_conformance_cases(spark_answers):
    cases = [c for c in _conformance() if c["expected"] != "parse_error"]
    wrong = [
        (c["expr"][:80], c["props"]) for c in cases if spark_answers[c["expr"], repr(c["props"])] is not c["expected"]
    ]
    assert not wrong


# -- grammar ---------------------------------------------------------------------------------------


def test_not_binds_tighter_than_comparisons():
    assert_tree(parse_sql92("NOT a = 1").tree, T.comparison("=", T.not_(T.truth(T.prop("a"))), T.literal(1, INT)))
    assert_tree(parse_sql92("NOT (a = 1)").tree, T.not_(a_eq(1)))
    assert_tree(parse_sql92("NOT a IS NULL").tree, T.is_null(T.not_(T.truth(T.prop("a")))))
    for text in ("NOT a > 1", "NOT a BETWEEN 1 AND 2", "NOT a IN ('x')"):
        with pytest.raises(FilterExpressionError):
            parse_sql92(text)


def test_and_binds_tighter_than_or_and_chains_are_left_deep():
    def b2() -> T.Node:
        return T.comparison("=", T.prop("b"), T.literal(2, INT))

    def c3() -> T.Node:
        return T.comparison("=", T.prop("c"), T.literal(3, INT))

    and_, or_ = (lambda x, y: T.logic("AND", x, y)), (lambda x, y: T.logic("OR", x, y))
    assert_tree(parse_sql92("a = 1 OR b = 2 AND c = 3").tree, or_(a_eq(1), and_(b2(), c3())))
    assert_tree(parse_sql92("a = 1 AND b = 2 OR c = 3").tree, or_(and_(a_eq(1), b2()), c3()))
    chain = parse_sql92("a = 1 AND b = 2 AND c = 3").tree
    assert_tree(chain, and_(and_(a_eq(1), b2()), c3()))
    assert depth(chain) == 2 and [t.sql() for t in terms(chain)] == ["a = 1", "b = 2", "c = 3"]
    nested = parse_sql92("a = 1 AND (b = 2 AND c = 3)").tree
    assert_tree(nested, and_(a_eq(1), and_(b2(), c3())))
    assert depth(nested) == 3 and len(terms(nested)) == 2


def test_between_takes_the_first_and():
    tree = parse_sql92("a BETWEEN 1 AND 2 AND b IS NULL").tree
    between = T.between(T.prop("a"), T.literal(1, INT), T.literal(2, INT))
    assert_tree(tree, T.logic("AND", between, T.is_null(T.prop("b"))))


def test_each_operator_builds_its_node():
    assert_tree(parse_sql92("a <> 'x'").tree, T.comparison("<>", T.prop("a"), T.literal("x", STRING)))
    assert_tree(parse_sql92("a NOT IN ('x','y')").tree, T.in_list(T.prop("a"), ("x", "y"), negated=True))
    assert_tree(parse_sql92("a NOT ENDSWITH 'z'").tree, T.match("ENDSWITH", T.prop("a"), "z", negated=True))
    assert_tree(parse_sql92("a IS NOT NULL").tree, T.is_null(T.prop("a"), negated=True))
    assert_tree(parse_sql92("-a < 1").tree, T.comparison("<", T.negate(T.prop("a")), T.literal(1, INT)))
    assert_tree(parse_sql92("+a < +1").tree, T.comparison("<", T.prop("a"), T.literal(1, INT)))
    # sqlglot's own expressions, as its builders make them
    assert parse_sql92("a NOT IN ('x')").tree == exp.Not(this=exp.column("a").isin("x"))
    assert parse_sql92("NOT (a CONTAINS 'x')").tree == exp.Not(
        this=exp.Paren(this=exp.Contains(this=exp.column("a"), expression=exp.Literal.string("x")))
    )


@pytest.mark.parametrize(
    "literal, expected",
    [
        ("5", ("literal", 5, INT)),
        ("0", ("literal", 0, INT)),
        ("10L", ("literal", 10, INT)),
        ("10l", ("literal", 10, INT)),
        ("2147483647", ("literal", 2147483647, INT)),
        ("2147483648", ("literal", 2147483648, LONG)),
        ("9223372036854775807", ("literal", 9223372036854775807, LONG)),
        ("1.5", ("literal", 1.5, DOUBLE)),
        ("5.", ("literal", 5.0, DOUBLE)),
        (".5", ("literal", 0.5, DOUBLE)),
        ("1e3", ("literal", 1000.0, DOUBLE)),
        ("1.5E-3", ("literal", 0.0015, DOUBLE)),
        ("5e+2", ("literal", 500.0, DOUBLE)),
        ("00.5", ("literal", 0.5, DOUBLE)),
        ("4.9e-324", ("literal", 5e-324, DOUBLE)),
        ("'it''s'", ("literal", "it's", STRING)),
        ("''", ("literal", "", STRING)),
        ("'a\nb'", ("literal", "a\nb", STRING)),
        ("TRUE", ("literal", True, BOOLEAN)),
        ("false", ("literal", False, BOOLEAN)),
        ("-5", ("negate", T.literal(5, INT))),
        ("-2147483648", ("negate", T.literal(2147483648, LONG))),
    ],
)
def test_literal_forms(literal, expected):
    kind, *args = expected
    assert_tree(parse_sql92(f"a = {literal}").tree.expression, getattr(T, kind)(*args))


@pytest.mark.parametrize(
    "literal, offset",
    [
        ("0x1F", 1),
        ("017", 1),
        ("0L", 1),
        ("1f", 1),
        ("1d", 1),
        ("1e", 1),
        ("1.5.3", 3),  # leftover text
        ("0.0", 0),
        ("1e-400", 0),
        ("1e400", 0),
        ("9223372036854775808", 0),
        ("'x", 0),
        ('"x"', 0),
    ],
)
def test_literals_outside_the_grammar(literal, offset):
    with pytest.raises(FilterExpressionError) as e:
        parse_sql92(f"a = {literal}")
    assert e.value.position == 4 + offset


def test_keywords_are_case_insensitive_and_property_names_case_sensitive():
    upper = parse_sql92("a IS NOT NULL AND b BETWEEN 1 AND 2 OR c NOT IN ('x') OR d CONTAINS 'x' OR TRUE")
    mixed = parse_sql92("a iS nOt NuLl aNd b bEtWeEn 1 AnD 2 oR c NoT iN ('x') Or d cOnTaInS 'x' oR tRuE")
    assert mixed == upper and str(mixed) == str(upper)
    assert parse_sql92("A = 1").properties == {"A"}
    assert not parse_sql92("A = 1").evaluate({"a": "1"}) and parse_sql92("A = 1").evaluate({"A": "1"})
    assert parse_sql92("nullx IS NULL").properties == {"nullx"}  # a keyword prefix is a name


@pytest.mark.parametrize(
    "text",
    [
        "a = 1 /* c */ AND b = 2",
        "/**/a=1 AND b=2/***/",
        "a = 1 -- c\nAND b = 2",
        "a = 1 -- c\r\nAND b = 2",
        "a = 1 -- c\rAND b = 2",
        "/* multi\nline * / */ a = 1\tAND\fb = 2 -- trailing\n",
        "a = 1 AND b = 2--\n",
    ],
)
def test_comments_and_white_space(text):
    assert parse_sql92(text) == parse_sql92("a = 1 AND b = 2")


@pytest.mark.parametrize(
    "text, position, reason",
    [
        ("a LIKE 'x%'", 2, "LIKE is not supported"),
        ("f()", 1, "function calls"),
        ("a = upper(b)", 9, "function calls"),
        ("a + 1 > 2", 2, "arithmetic"),
        ("a * 2 > 1", 2, "arithmetic"),
        ("a = 4 / 2", 6, "arithmetic"),
        ("a % 2 = 0", 2, "arithmetic"),
        ("a - 1 = 0", 2, "arithmetic"),
        ("a IN (SELECT b FROM t)", 6, "unexpected 'SELECT'"),
        ("(SELECT 1)", 8, "unexpected '1'"),
        ("SELECT * FROM t", 7, "arithmetic"),
        ("a = 1; DROP TABLE x", 5, "';'"),
        ("a = 1;", 5, "';'"),
        ('a = "x"', 4, "double quotes"),
        ("\"a\" = 'x'", 0, "double quotes"),
        ("a = 1 garbage", 6, "unexpected 'garbage'"),
        ("a = 01", 5, "unexpected '1'"),
        ("a = 5 5", 6, "unexpected '5'"),
        ("a = 1 -- comment", 6, "must end with a line break"),
        ("a IN (-1)", 6, "expected a string literal"),
        ("a = 1 /* c", 6, "unterminated comment"),
        ("a = 'abc", 4, "unterminated string"),
        ("", 0, "empty expression"),
        ("  \n ", 4, "empty expression"),
        ("/* */", 5, "empty expression"),
        ("a = ", 4, "unexpected end"),
        ("a = 1 AND", 9, "unexpected end"),
        ("a = 1 AND (b = 2", 16, "expected ')'"),
        ("a > 'x'", 4, "cannot be ordered"),
        ("'2' > 1", 4, "cannot be ordered"),
        ("a > TRUE", 4, "cannot be ordered"),
        ("NOT a > 1", 6, "cannot be ordered"),
        ("a > 1 > 0", 6, "cannot be ordered"),
        ("a = NULL", 4, "NULL cannot be compared"),
        ("NULL <> a", 5, "NULL cannot be compared"),
        ("TRUE = 1", 7, "cannot be compared"),
        ("a IN ()", 6, "string literal"),
        ("a IN (1)", 6, "string literal"),
        ("a IN ('x' 'y')", 10, "',' or ')'"),
        ("NOT a IN ('x')", 6, "IN needs a property"),
        ("'x' IN ('x')", 4, "IN needs a property"),
        ("a BETWEEN 5 AND 1", 16, "out of order"),
        ("a BETWEEN 1.5 AND 1", 18, "out of order"),
        ("a BETWEEN 'a' AND 'b'", 10, "cannot be ordered"),
        ("a NOT 'x'", 2, "NOT after an operand"),
        ("a IS TRUE", 5, "NULL or NOT NULL"),
        ("a IS NOT", 8, "NULL"),
        ("'x'", 0, "not a boolean"),
        ("1", 0, "not a boolean"),
        ("-a", 0, "not a boolean"),
        ("a AND 'x'", 6, "not a boolean"),
        ("'x' OR a", 4, "not a boolean"),
        ("NOT 1", 4, "not a boolean"),
        ("in = 1", 0, "unexpected 'in'"),
        ("a = :x", 4, "':'"),
        ("a = @x", 4, "'@'"),
        ("a = 1 #", 6, "'#'"),
        ("é = 1", 0, "'é'"),
        ("a = 1 \v", 6, "'\\x0b'"),
        ("a =< 1", 3, "unexpected '<'"),
        ("a == 1", 3, "unexpected '='"),
        ("a != 1", 2, "'!'"),
    ],
)
def test_rejections_name_the_first_offending_token(text, position, reason):
    with pytest.raises(FilterExpressionError) as e:
        parse_sql92(text)
    assert (e.value.position, e.value.code) == (position, "SUBSCRIPTION_PARSE_FAILED")
    assert reason in e.value.reason


@pytest.mark.parametrize(
    "text, position",
    [
        ("a = '1' OR java_method('java.lang.Runtime','getRuntime') IS NOT NULL", 22),
        ("reflect('java.lang.Runtime','getRuntime')", 7),
        ("a = 1; DROP TABLE x", 5),
        ("a = '1') OR (1 = 1", 7),
        ("a = '1' UNION SELECT * FROM t", 8),
        ("a = x'00'", 5),
        ("${jndi:ldap://x}", 1),
        ("a = '\\'' OR 1=1", 7),
        ("SLEEP(5)", 5),
        ("a = CHAR(65)", 8),
        ("TAGS = 'x' OR 1 = 1) --\n", 19),
        ("a = '1' || 'x'", 8),
    ],
)
def test_injection_attempts_do_not_parse(text, position):
    with pytest.raises(FilterExpressionError) as e:
        compile_sql92(text)
    assert e.value.position == position


def test_nothing_but_filter_expression_error_escapes():
    rng = random.Random(7)
    alphabet = "ab TAGS=<>()',.+-*/%;\"\\01259eELxX_$\n\t\v-/*notandorinisbetweennullcontains中é\x00😀"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(3000)]
    texts += [
        "(" * (MAX_NESTING + 5) + "a" + ")" * (MAX_NESTING + 5),
        "NOT " * 2000 + "a",
        "-" * 5000 + "1 = a",
        "a = 1" + " AND a = 1" * 3000,
        "'" * 10001,
    ]
    for text in texts:
        try:
            parse_sql92(text)
        except FilterExpressionError:
            pass
    with pytest.raises(FilterExpressionError):
        parse_sql92(None)  # type: ignore[arg-type]
    assert parse_sql92("(" * 50 + "a = 1" + ")" * 50).evaluate({"a": "1"})


# -- limits, untrusted text and linear work ---------------------------------------------------------

#: The lexer examines each character a bounded number of times (at most four: a string read twice,
#: searched for surrogates and passed for line counting), plus a few steps per token.
STEPS_PER_CHAR, STEPS_CONSTANT = 5, 8


def adversarial(n: int) -> list[str]:
    """Texts of about ``n`` characters that cost the old lexer or parser time quadratic in ``n``, or
    that failed later than the parser, and some long valid ones."""
    return [
        "a > " + "-" * n + "1",
        ")" * n,
        "a = 1 AND " * (n // 10),
        "a = 1" + " AND a = 1" * (n // 10),
        "'" * n,
        "'" * (n + 1),
        "'''" + "x" * n,
        "a = " + "0" * n,
        "a = 1 /*" + "x" * n,
        "a = 1 /*" + "*/" * (n // 2),
        "a = 1 " + "-- x " * (n // 5),
        "a = 1" + " -- c\n" * (n // 6),
        "--" + " " * n,
        "a" + " IS NULL" * (n // 8),
        "(" * (n // 2) + "a" + ")" * (n // 2),
        "NOT " * (n // 4) + "a",
        "a" + " = TRUE" * (n // 7),
        "a = '" + "''" * (n // 2) + "'",
        "a IN (" + "'x', " * (n // 5) + "'y')",
        "1e" * (n // 2),
        ".5" * (n // 2),
        "\n" * n + "a",
        "\r\n" * (n // 2),
        "a = '" + "x" * n + "\ud800'",
        "a = 1 OR " + "(" * 50 + "b = 2 AND c" * (n // 12) + ")" * 50,
        "a" + " CONTAINS 'x'" * (n // 13),
        '"' * n,
        "a = 1 " + "\t\f" * (n // 2),
    ]


def mutations(rng: random.Random, count: int) -> list[str]:
    """Valid expressions (the literal cases and random ones) with a few characters inserted, deleted or replaced."""
    valid = [text for text, _, _ in LITERAL_CASES] + [random_expression(rng) for _ in range(200)]
    bits = [
        "'",
        "''",
        "(",
        ")",
        "-",
        "--",
        "/*",
        "*/",
        "\n",
        "\r",
        " ",
        "0",
        "1e",
        ".",
        "L",
        "NOT ",
        " AND ",
        "IS ",
        "\ud800",
        "\udfff",
        "é",
        "😀",
        "\x00",
        "\v",
        ";",
        '"',
        "=",
        "<>",
        "BETWEEN ",
        ",",
        "IN (",
    ]
    out = []
    for _ in range(count):
        chars = list(rng.choice(valid))
        for _ in range(rng.randint(1, 4)):
            at = rng.randint(0, len(chars))
            roll = rng.random()
            if roll < 0.5:
                chars[at:at] = rng.choice(bits)
            elif chars and roll < 0.8:
                del chars[min(at, len(chars) - 1)]
            elif chars:
                chars[min(at, len(chars) - 1)] = rng.choice(bits)
        out.append("".join(chars))
    return out


def checked_parse(text: str) -> tuple[Sql92Expression | None, int, int]:
    """parse_sql92's answer (None when refused) and the work of a parse: lexer steps, tokens consumed.
    Only FilterExpressionError may escape, from the parser itself too (no safety net)."""
    parser = Sql92Parser()
    try:
        parser.parse_text(text)
    except FilterExpressionError:
        pass
    try:
        expression: Sql92Expression | None = parse_sql92(text)
    except FilterExpressionError as e:
        assert 0 <= e.position <= len(text) and str(e).encode("utf-8"), text[:80]
        expression = None
    return expression, parser.lexer.steps, parser.consumed  # type: ignore[union-attr]


def test_fuzz_only_filter_expression_errors_and_linear_work():
    rng = random.Random(19)
    texts = mutations(rng, 2000) + [text for n in (1000, 10_000, 60_000) for text in adversarial(n)]
    parsed = 0
    for text in texts:
        assert len(text) <= MAX_EXPRESSION_LENGTH
        expression, steps, consumed = checked_parse(text)
        assert steps <= STEPS_PER_CHAR * len(text) + STEPS_CONSTANT, (text[:80], len(text), steps)
        assert consumed <= len(text), (text[:80], consumed)
        tokens, all_steps = tokenize_sql92(text)  # the whole text, where the parser stopped early
        assert all_steps <= STEPS_PER_CHAR * len(text) + STEPS_CONSTANT, (text[:80], len(text), all_steps)
        assert len(tokens) <= len(text)
        if expression is not None:
            parsed += 1
            canonical = str(expression)  # no recursion in length: long chains and deep trees render
            assert parse_sql92(canonical).tree == expression.tree, text[:80]
            assert expression.evaluate({"a": "1"}) in (True, False)
            assert all(not 0xD800 <= ord(c) <= 0xDFFF for c in canonical)
    assert parsed > 100  # the mutations keep plenty valid


def test_long_valid_expressions_parse_in_linear_work():
    for text, count in [("a = 1" + " AND a = 1" * 6000, 6001), ("a = 1" + " OR b IN ('x')" * 4000, 4001)]:
        expression, steps, consumed = checked_parse(text)
        assert expression is not None and len(terms(expression.tree)) == count
        assert steps <= STEPS_PER_CHAR * len(text) + STEPS_CONSTANT and consumed == len(tokenize_sql92(text)[0])


def test_a_text_refused_early_is_not_read_further():
    for text in (")" * 60_000, "a = 1 1" + " AND a = 1" * 6000, "a = ; " + "'" * 60_000):
        _, steps, consumed = checked_parse(text)
        assert steps < 50 and consumed <= 4


def test_over_long_text_is_refused_at_the_limit_before_it_is_read():
    longest = "a = 1" + " " * (MAX_EXPRESSION_LENGTH - 5)
    assert_tree(parse_sql92(longest).tree, a_eq(1))
    for text in (longest + " ", "'" + "x" * MAX_EXPRESSION_LENGTH, ")" * 10**6):
        with pytest.raises(FilterExpressionError) as e:
            parse_sql92(text)
        assert e.value.position == MAX_EXPRESSION_LENGTH
        assert f"longer than {MAX_EXPRESSION_LENGTH} characters" in e.value.reason
        assert "max_filter_expression_length" in e.value.reason


@pytest.mark.parametrize(
    "text, position",
    [
        ("a = '\ud800'", 5),
        ("a = 'x\udfff' AND b", 6),
        ("a IN ('x', 'y\udbff')", 13),
        ("\ud800 = 1", 0),
        ("a = 1 AND b\ud800 = 2", 11),
        ("a = 1 /* \ud800 */", 9),
        ("a = 1 -- \udc00\n", 9),
        ("a = 'x' AND \udfff", 12),
        ("a = 1 AND '\ud83d\ude00' = b", 11),
    ],
)
def test_lone_surrogates_are_refused_where_they_are(text, position):
    with pytest.raises(FilterExpressionError) as e:
        parse_sql92(text)
    assert e.value.position == position and "surrogate" in e.value.reason
    str(e.value).encode("utf-8")  # the message itself can be printed, stored and sent anywhere
    assert parse_sql92("a = '😀' /* é */").evaluate({"a": "😀"})  # what is valid Unicode stays valid


def test_nesting_at_the_limit_parses_and_one_deeper_is_refused():
    deepest = MAX_NESTING - 1  # the operand inside them is one level more
    for make, at in [
        (lambda k: "(" * k + "a = 1" + ")" * k, lambda k: k),
        (lambda k: "NOT " * k + "a", lambda k: 4 * k),
        (lambda k: "-" * k + "1 < a", lambda k: k),
    ]:
        assert str(parse_sql92(make(deepest)))
        with pytest.raises(FilterExpressionError) as e:
            parse_sql92(make(deepest + 1))
        assert e.value.position == at(deepest + 1) and f"nested more than {MAX_NESTING} deep" in e.value.reason
    # operators applied to other operators' results nest too: what is accepted renders, evaluates and pickles
    assert parse_sql92("a" + " IS NULL" * MAX_NESTING).evaluate({}) is False
    with pytest.raises(FilterExpressionError, match=f"nested more than {MAX_NESTING} deep") as e:
        parse_sql92("a" + " IS NULL" * (MAX_NESTING + 1))
    assert e.value.position == 1 + 8 * MAX_NESTING + 1
    shape = lambda k: "(" * k + "a" + ") CONTAINS 'x' = TRUE AND b OR c" * k  # noqa: E731 (four levels a parenthesis)
    deepest = parse_sql92(shape(MAX_NESTING // 4)).tree
    assert depth(deepest) == MAX_NESTING and T.canonical(deepest)
    assert_tree(pickle.loads(pickle.dumps(deepest)), deepest)  # the Java types travel with the tree
    with pytest.raises(FilterExpressionError, match="nested more than"):
        parse_sql92(shape(MAX_NESTING // 4 + 1))


def test_custom_limits_through_keyword_arguments():
    assert parse_sql92("NOT NOT a", max_nesting=3) and parse_sql92("a = 'xyz'", max_length=9)
    with pytest.raises(FilterExpressionError, match="nested more than 2 deep") as e:
        parse_sql92("NOT NOT a", max_nesting=2)
    assert e.value.position == 8
    with pytest.raises(FilterExpressionError, match="longer than 8 characters") as e:
        compile_sql92("a = 'xyz'", max_length=8)
    assert e.value.position == 8
    long = "a = 1" + " OR a = 1" * 10_000
    assert len(terms(parse_sql92(long, max_length=len(long)).tree)) == 10_001
    assert_tree(parse_sql92("(" * 120 + "a" + ")" * 120, max_nesting=121).tree, T.truth(T.prop("a")))


def test_store_settings_are_the_limits(spark, store_path):
    from storelib import MessageStore

    assert (StoreConfig().max_filter_expression_length, StoreConfig().max_filter_expression_nesting) == (65536, 100)
    config = StoreConfig(max_filter_expression_length=30, max_filter_expression_nesting=3)
    with pytest.raises(FilterExpressionError, match="max_filter_expression_length") as e:
        MessageSelector.by_sql("a = 1 OR b = 2 OR c = 3 OR d = 4").parse("TopicTest", config)
    assert e.value.position == 30
    store = MessageStore.create(
        store_path, spark, max_filter_expression_length=MAX_EXPRESSION_LENGTH * 2, max_filter_expression_nesting=3
    )
    store.create_topic("TopicTest", queues=1)
    longer = "a = '" + "x" * MAX_EXPRESSION_LENGTH + "' OR TAGS IS NULL"  # over the default, within the store's
    store.subscribe("GroupL", "TopicTest", MessageSelector.by_sql(longer))
    assert store.subscription("GroupL", "TopicTest").compiled.text == longer
    assert store.read("TopicTest", MessageSelector.by_sql(longer)).count() == 0
    # the Arrow check sent to pyarrow tasks parses with the store's limits too
    import pyarrow as pa

    from storelib.filter.message_filter import MessageFilter

    check = MessageFilter("TopicTest", MessageSelector.by_sql(longer), config=store.context.config).commitlog_check()
    props = pa.array([[("a", "y")], [("a", "y"), ("TAGS", "T")]], pa.map_(pa.string(), pa.string()))
    assert check(pa.table({"properties": props})).to_pylist() == [True, False]
    for refused in ("NOT NOT NOT a", "a = '" + "x" * 2 * MAX_EXPRESSION_LENGTH + "'"):
        with pytest.raises(FilterExpressionError):
            store.subscribe("GroupL", "TopicTest", MessageSelector.by_sql(refused))
        with pytest.raises(FilterExpressionError):
            store.pull("GroupL", "TopicTest", 0, 0, selector=MessageSelector.by_sql(refused))
        with pytest.raises(FilterExpressionError):
            store.read("TopicTest", MessageSelector.by_sql(refused))


def test_canonical_text_and_expression_object():
    e = parse_sql92("not a=1 or b in('x','y''z') and c between -1 and 2.5")
    assert str(e) == "(NOT a) = 1 OR (b IN ('x', 'y''z') AND c BETWEEN -1 AND 2.5)"
    assert repr(e) == "Sql92Expression(\"(NOT a) = 1 OR (b IN ('x', 'y''z') AND c BETWEEN -1 AND 2.5)\")"
    assert e.text == "not a=1 or b in('x','y''z') and c between -1 and 2.5"
    assert e.properties == frozenset({"a", "b", "c"}) and isinstance(e, Sql92Expression)
    for text, _, _ in LITERAL_CASES:
        tree = parse_sql92(text).tree
        assert_tree(parse_sql92(T.canonical(tree)).tree, tree)


# -- the sqlglot dialect ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, spark_text",
    [
        ("a BETWEEN 1 AND 2", "a BETWEEN 1 AND 2"),
        ("a NOT BETWEEN 1 AND 2", "NOT a BETWEEN 1 AND 2"),
        ("a IN ('x', 'y''z')", "a IN ('x', 'y\\'z')"),
        ("a NOT IN ('x')", "NOT a IN ('x')"),
        ("a IS NULL", "a IS NULL"),
        ("a IS NOT NULL", "NOT a IS NULL"),
        ("a CONTAINS 'x'", "CONTAINS(a, 'x')"),
        ("a NOT STARTSWITH 'x'", "NOT STARTSWITH(a, 'x')"),
        ("a ENDSWITH 'x'", "ENDSWITH(a, 'x')"),
        ("(NOT a) = 1", "(NOT a) = 1"),
        ("a <> 10L", "a <> 10L"),
        ("a = 1 IS NULL", "(a = 1) IS NULL"),
        ("a > -b OR TRUE AND c = .5", "a > -b OR TRUE AND c = .5"),
    ],
)
def test_dialect_transpiles_to_spark(text, spark_text):
    assert sqlglot.transpile(text, read=RocketMQSQL92, write="spark") == [spark_text]


def test_dialect_builds_sqlglot_expressions():
    tree = sqlglot.parse_one("a NOT CONTAINS 'x' AND b IS NOT NULL OR c BETWEEN 1 AND 2", read=RocketMQSQL92)
    contains = exp.Not(this=exp.Contains(this=exp.column("a"), expression=exp.Literal.string("x")))
    not_null = exp.Not(this=exp.Is(this=exp.column("b"), expression=exp.Null()))
    between = exp.Between(this=exp.column("c"), low=exp.Literal.number(1), high=exp.Literal.number(2))
    assert tree == exp.Or(this=exp.And(this=contains, expression=not_null), expression=between)
    assert [t.token_type for t in RocketMQSQL92().tokenize("a contains 'x' startswith 'y' endswith 'z'")][1::2] == list(
        MATCH_TOKENS.values()
    )
    with pytest.raises(sqlglot.TokenError, match="unterminated string literal"):
        RocketMQSQL92().tokenize("a = 'x")


@pytest.mark.parametrize("text, rocketmq", PRECEDENCE_CASES)
def test_dialect_reads_not_and_levels_as_rocketmq_not_as_sqlglot_does(text, rocketmq):
    assert str(parse_sql92(text)) == rocketmq
    assert sqlglot.transpile(text, read=RocketMQSQL92, write=RocketMQSQL92) == [rocketmq]
    assert typed_tree(sqlglot.parse_one(text, read=RocketMQSQL92)) == parse_sql92(text).tree
    try:  # sqlglot's own grammar reads it otherwise, or not at all (it has no CONTAINS operator)
        own: list[str] | None = sqlglot.transpile(text, write=RocketMQSQL92)
    except sqlglot.ParseError:
        own = None
    assert own != [rocketmq]


def _parentheses_depth(text: str) -> int:
    """The deepest nesting of parentheses in a text: sqlglot's parser recurses on each, the tree keeps none."""
    depth = deepest = 0
    for token in tokenize_sql92(text)[0]:
        depth += {"L_PAREN": 1, "R_PAREN": -1}.get(token.token_type.name, 0)
        deepest = max(deepest, depth)
    return deepest


def test_dialect_reads_every_valid_selector_as_the_parser_of_record():
    """sqlglot's reading of the text itself, through the dialect, is the store's parser's tree: on the
    literal cases, RocketMQ's cases, random expressions and fuzzed ones that stay valid."""
    rng = random.Random(5)
    texts = (
        [t for t, _, _ in LITERAL_CASES]
        + [c["expr"] for c in _conformance() if c["expected"] != "parse_error"]
        + [random_expression(rng) for _ in range(1000)]
        + mutations(rng, 2000)
        + ["a = 1" + " AND b IN ('x')" * 3000, "a = 1" + " OR b = 2 AND c" * 2000]
    )
    checked = 0
    for text in texts:
        try:
            tree = parse_sql92(text).tree
        except FilterExpressionError:
            continue
        if depth(tree) + _parentheses_depth(text) > DISPLAY_MAX_DEPTH:  # deeper than sqlglot's recursion reaches
            continue
        assert_tree(typed_tree(sqlglot.parse_one(text, read=RocketMQSQL92)), tree)
        checked += 1
    assert checked > 1000


def test_dialect_reads_levels_as_rocketmq_does():
    """IS NULL with =, ordering with BETWEEN/IN/CONTAINS, left to right, NOT on one operand."""
    for text in (
        "a > 1 CONTAINS 'x'",
        "a = 1 IS NULL",
        "a IS NULL = TRUE",
        "a IN ('x') CONTAINS 'y'",
        "a CONTAINS 'x' IS NULL",
        "a > 1 = TRUE",
        "a = 1 = TRUE",
        "a BETWEEN 1 AND 2 AND b",
        "a NOT BETWEEN -1 AND 2 OR c < -b",
        "NOT (a = 1) AND b NOT IN ('x', 'y')",
    ):
        assert sqlglot.transpile(text, read=RocketMQSQL92, write=RocketMQSQL92) == [str(parse_sql92(text))], text


def test_expressions_built_with_sqlglot_are_checked_as_text_is():
    a, b = exp.column("a"), exp.column("b")
    built = exp.Or(
        this=exp.Not(this=exp.In(this=a, expressions=[exp.Literal.string("x")])),
        expression=exp.Between(this=b, low=exp.Literal.number(1), high=exp.Literal.number("10L")),
    )
    e = Sql92Expression.from_sqlglot(built)
    expected = (
        T.in_list(T.prop("a"), ("x",), negated=True),
        T.between(T.prop("b"), T.literal(1, INT), T.literal(10, INT)),
    )
    assert_tree(e.tree, T.logic("OR", *expected))
    assert e.evaluate({"a": "x", "b": "5"}) and not e.evaluate({"a": "x", "b": "50"})
    for refused, reason in [
        (a.eq(exp.Null()), "NULL cannot be compared"),
        (a > exp.Literal.string("x"), "cannot be ordered"),
        (exp.Anonymous(this="f", expressions=[a]), "function calls"),
        (exp.Add(this=a, expression=b).eq(1), "arithmetic"),
    ]:
        with pytest.raises(FilterExpressionError, match=reason):
            Sql92Expression.from_sqlglot(refused)
    with pytest.raises(FilterExpressionError, match="nested more than 1 deep"):
        Sql92Expression.from_sqlglot(exp.Not(this=exp.Not(this=a)), max_nesting=1)


def test_the_evaluators_walk_sqlglot_expressions(spark):
    """A tree built with sqlglot's own builders and typed by ``typed_tree`` is the tree the parser builds,
    and the Python, Arrow and Spark evaluators walk it to the parsed text's answers."""
    import pyarrow as pa

    a, b, c, d = (exp.column(name) for name in "abcd")
    built = exp.or_(
        exp.and_(a.eq(exp.Literal.number(5)), exp.Not(this=b.isin("x", "y"))),  # and_/or_ wrap in Paren
        exp.Contains(this=c, expression=exp.Literal.string("z")),
        exp.Between(this=d, low=exp.Literal.number("1.5"), high=exp.Literal.number("10L")),
        exp.Not(this=exp.column("e")),
    )
    text = "a = 5 AND b NOT IN ('x', 'y') OR c CONTAINS 'z' OR d BETWEEN 1.5 AND 10L OR NOT e"
    tree, parsed = typed_tree(built), parse_sql92(text)
    assert isinstance(parsed.tree, exp.Or) and isinstance(tree, exp.Or)
    assert_tree(tree, parsed.tree)
    assert java_type(tree.expression.this) is BOOLEAN and java_type(terms(tree)[2].args["high"]) is INT  # NOT e; 10L
    maps = [
        {"a": "5", "b": "w"},
        {"a": "5", "b": "x"},
        {"a": "5.0"},
        {"c": "xyz"},
        {"d": "2"},
        {"d": "10.5", "e": "x"},
        {"d": "abc"},
        {"e": "true"},
        {},
    ]
    expected = [parsed.evaluate(m) for m in maps]
    assert [evaluate(tree, m) for m in maps] == expected
    assert True in expected and False in expected
    props = pa.array([list(m.items()) for m in maps], pa.map_(pa.string(), pa.string()))
    assert evaluate_batch(tree, props).to_pylist() == expected
    df = spark.createDataFrame([(i, m) for i, m in enumerate(maps)], "i int, properties map<string,string>")
    rows = df.select("i", to_column(tree).alias("match")).collect()
    assert [r.match for r in sorted(rows, key=lambda r: r.i)] == expected
    with pytest.raises(ValueError, match="not a typed SQL92 node"):  # the Java types are the tree's own
        evaluate(built, {})


def test_spark_sql_of_deep_trees_within_the_display_depth_and_none_beyond():
    shapes = [
        lambda k: "NOT " * k + "a",
        lambda k: "NOT (" * k + "a" + ")" * k,
        lambda k: "-" * k + "1 < a",
        lambda k: "a" + " IS NULL" * k,
        lambda k: "(" * k + "a" + ") CONTAINS 'x' AND b" * k,
    ]
    for make in shapes:
        deepest = 1
        while depth(parse_sql92(make(deepest + 1)).tree) <= DISPLAY_MAX_DEPTH:
            deepest += 1
        e = parse_sql92(make(deepest))
        assert e.spark_sql and Sql92Expression.from_sqlglot(e.sqlglot) == e
        deeper = parse_sql92(make(deepest + 1))
        assert depth(deeper.tree) > DISPLAY_MAX_DEPTH and deeper.spark_sql is None
        with pytest.raises(ValueError, match="DISPLAY_MAX_DEPTH"):
            _ = deeper.sqlglot
    long = parse_sql92("a = 1" + " OR b IN ('x')" * 4000)  # long chains are loops in sqlglot too
    assert long.spark_sql.count(" OR ") == 4000  # type: ignore[union-attr]


def test_dialect_round_trips_every_tree():
    """The dialect reads every canonical text and writes it back as text RocketMQ's grammar reads as the same tree."""
    texts = [t for t, _, _ in LITERAL_CASES] + [c["expr"] for c in _conformance() if c["expected"] != "parse_error"]
    rng = random.Random(3)
    texts += [random_expression(rng) for _ in range(300)]
    checked = 0
    for text in texts:
        try:
            tree = parse_sql92(text).tree
        except FilterExpressionError:  # some random expressions are refused
            continue
        checked += 1
        written = to_sqlglot(tree).sql(dialect=RocketMQSQL92)
        assert parse_sql92(written).tree == tree, (text, written)
        assert spark_sql(tree) == parse_sql92(text).spark_sql
        assert Sql92Expression.from_sqlglot(parse_sql92(text).sqlglot).tree == tree
    assert checked > len(LITERAL_CASES) + 200


# -- Java's number parsers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, value",
    [
        ("5", 5),
        ("+5", 5),
        ("-0", 0),
        ("0005", 5),
        ("٣", 3),
        ("５", 5),
        ("-१२", -12),
        ("2147483647", 2**31 - 1),
        ("-2147483648", -(2**31)),
    ],
)
def test_java_integer_value_of(text, value):
    assert java_parse_int(text) == value


@pytest.mark.parametrize("text", ["", "+", "-", " 5", "5 ", "5.0", "2147483648", "1_0", "0x5", "5L", "\U0001d7d3"])
def test_java_integer_value_of_throws(text):
    with pytest.raises(JavaEvaluationError):
        java_parse_int(text)


def test_java_long_value_of():
    assert java_parse_long("9223372036854775807") == 2**63 - 1 and java_parse_long("-9223372036854775808") == -(2**63)
    with pytest.raises(JavaEvaluationError):
        java_parse_long("9223372036854775808")


@pytest.mark.parametrize(
    "text, value",
    [
        ("5", 5.0),
        (" 5 \n", 5.0),
        ("\x00\x1f5\x20", 5.0),
        ("5.", 5.0),
        (".5", 0.5),
        ("1e3", 1000.0),
        ("1E+3", 1000.0),
        ("5f", 5.0),
        ("5D", 5.0),
        ("0x1p3", 8.0),
        ("0x1.8p1", 3.0),
        ("-0X.8P1d", -1.0),
        ("-Infinity", -math.inf),
        ("Infinity ", math.inf),
        ("1e400", math.inf),
        ("0x1p99999999999", math.inf),
        ("-0.0", -0.0),
        ("1e-400", 0.0),
        ("9007199254740993", 9007199254740992.0),
    ],
)
def test_java_double_value_of(text, value):
    assert java_parse_double(text) == value and math.copysign(1, java_parse_double(text)) == math.copysign(1, value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "nan",
        "inf",
        "infinity",
        "1e",
        "1.5.3",
        "0x1.8",
        "5dd",
        "٥",
        "\u00a05",
        "1_000",
        "0x",
        ".",
        "+",
        "NaNd",
        "1e3.5",
        "0x1p3.5",
    ],
)
def test_java_double_value_of_throws(text):
    with pytest.raises(JavaEvaluationError):
        java_parse_double(text)


def test_java_double_nan_forms():
    assert all(math.isnan(java_parse_double(t)) for t in ("NaN", "+NaN", "-NaN", " NaN\t"))


# -- Spark specifics --------------------------------------------------------------------------------

ANSI_VALUES = [
    "abc",
    "9999999999999999999999",
    "",
    " 5",
    "5 ",
    "NaN",
    "nan",
    "inf",
    "1e400",
    "0x1p3",
    "١٢",
    "-0.0",
    "5.0",
    "2147483648",
    "1_000",
    "5L",
    "+",
    "\u00a05",
    "0" * 30 + "5",
    "-" + "9" * 40,
    None,
]
ANSI_EXPRESSIONS = [
    "a > 5",
    "a = 5",
    "a <> 5",
    "a = 5000000000",
    "a < 1.5",
    "a BETWEEN 1 AND 10",
    "a > b",
    "a = b",
    "b <= a",
    "a IN ('abc', '')",
    "a = TRUE",
    "a > 5 OR a < 5",
    "5.5 >= a",
]


@pytest.mark.parametrize("ansi", ["true", "false"])
def test_no_property_value_fails_a_read(spark, ansi):
    previous = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", ansi)
    try:
        maps = [{k: v for k, v in (("a", x), ("b", y)) if v is not None} for x in ANSI_VALUES for y in ("7", x)]
        df = spark.createDataFrame([(i, m) for i, m in enumerate(maps)], "i int, properties map<string,string>")
        trees = [parse_sql92(text).tree for text in ANSI_EXPRESSIONS]
        rows = df.select("i", *(c.alias(f"e{j}") for j, c in enumerate(to_columns(trees)))).collect()
    finally:
        spark.conf.set("spark.sql.ansi.enabled", previous)
    for row in rows:
        for j, text in enumerate(ANSI_EXPRESSIONS):
            assert row[f"e{j}"] is parse_sql92(text).evaluate(maps[row.i]), (text, maps[row.i], ansi)


def test_compile_takes_a_column_or_a_name(spark):
    df = spark.createDataFrame([({"TAGS": "TagA"},), ({"TAGS": "TagB"},), ({},)], "props map<string,string>")
    by_name = df.where(compile_sql92("TAGS IN ('TagA')", "props"))
    by_column = df.where(compile_sql92("TAGS IN ('TagA')", F.col("props")))
    assert_df_equality(by_name, by_column)
    assert by_name.count() == 1


def test_columns_are_built_from_functions_only():
    source = (Path(__file__).parents[2] / "storelib" / "filter" / "sql92" / "spark.py").read_text()
    for forbidden in ("F.expr(", "selectExpr", ".sql(", "udf", "pandas_udf"):
        assert forbidden not in source


# -- randomized cross-check: reference evaluator vs Spark -----------------------------------------

PROPERTY_VALUES = [
    "1",
    "5",
    "+5",
    "-0",
    "05",
    "2147483648",
    "9223372036854775808",
    "-1.5",
    "5.0",
    "1e3",
    "NaN",
    "-Infinity",
    "0x1p3",
    " 7",
    "7 ",
    "abc",
    "",
    "true",
    "TRUE",
    "false",
    "５",
    "0.0",
    "-0.0",
    "x",
    "5d",
    "it's",
]
NUMBERS = ["0", "1", "5", "7", "10L", "2147483648", "5000000000", "1.5", "5.0", "0.5", "1e3", "-1", "-1.5", "--5"]
STRINGS = ["'x'", "'abc'", "''", "'true'", "'5'", "'it''s'"]


def random_expression(rng: random.Random, depth: int = 0) -> str:
    prop = rng.choice("abc")
    operand = lambda: rng.choice([rng.choice("abc")] * 4 + NUMBERS + STRINGS + ["TRUE", "FALSE", "-c"])  # noqa: E731
    kind = rng.choice(
        ["cmp", "cmp", "cmp", "between", "in", "null", "match", "bare"]
        + (["not", "logic", "logic", "nested"] if depth < 3 else [])
    )
    if kind == "cmp":
        return f"{operand()} {rng.choice(['=', '<>', '>', '>=', '<', '<='])} {operand()}"
    if kind == "between":
        bounds = rng.choice([NUMBERS, NUMBERS, list("abc")])
        return f"{prop} {rng.choice(['', 'NOT '])}BETWEEN {rng.choice(bounds)} AND {rng.choice(bounds)}"
    if kind == "in":
        return f"{prop} {rng.choice(['', 'NOT '])}IN ({', '.join(rng.sample(STRINGS, rng.randint(1, 3)))})"
    if kind == "null":
        return f"{operand()} IS {rng.choice(['', 'NOT '])}NULL"
    if kind == "match":
        op = rng.choice(["CONTAINS", "STARTSWITH", "ENDSWITH"])
        return f"{rng.choice([prop, prop, '1'])} {rng.choice(['', 'NOT '])}{op} {rng.choice(STRINGS)}"
    if kind == "bare":
        return rng.choice([prop, "TRUE", "FALSE", "NULL", f"NOT {prop}"])
    if kind == "not":
        return f"NOT ({random_expression(rng, depth + 1)})"
    if kind == "nested":
        return f"({random_expression(rng, depth + 1)}) {rng.choice(['=', '<>'])} {rng.choice(['TRUE', 'FALSE', prop])}"
    joined = f" {rng.choice(['AND', 'OR'])} ".join(random_expression(rng, depth + 1) for _ in range(rng.randint(2, 3)))
    return f"({joined})" if rng.random() < 0.5 else joined


def test_random_expressions_python_vs_spark(spark):
    rng = random.Random(20240601)
    expressions: list[Sql92Expression] = []
    while len(expressions) < 250:
        try:
            expressions.append(parse_sql92(random_expression(rng)))
        except FilterExpressionError:
            continue
    maps = [{p: rng.choice(PROPERTY_VALUES) for p in "abc" if rng.random() < 0.75} for _ in range(30)]
    df = spark.createDataFrame([(i, m) for i, m in enumerate(maps)], "i int, properties map<string,string>")
    columns = to_columns([e.tree for e in expressions])
    rows = df.select("i", *(c.alias(f"e{j}") for j, c in enumerate(columns))).collect()
    mismatches = [
        (e.text, maps[row.i], e.evaluate(maps[row.i]), row[f"e{j}"])
        for row in rows
        for j, e in enumerate(expressions)
        if row[f"e{j}"] is not e.evaluate(maps[row.i])
    ]
    assert not mismatches[:10]
    for e in expressions:  # the canonical text parses back to the same tree
        assert parse_sql92(str(e)).tree == e.tree, e.text


# -- long chains -------------------------------------------------------------------------------------


def test_a_long_chain_is_one_level_deep():
    tree = parse_sql92(" AND ".join(f"a{i} = {i}" for i in range(3000))).tree
    assert isinstance(tree, exp.And) and len(terms(tree)) == 3000 and depth(tree) == 2
    assert parse_sql92("(a = 1 AND b = 2) AND c = 3").tree == parse_sql92("a = 1 AND b = 2 AND c = 3").tree
