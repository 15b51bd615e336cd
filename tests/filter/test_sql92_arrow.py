"""SQL92 evaluated over Arrow arrays (storelib.filter.sql92.arrow) against RocketMQ's own answers and
the pure-Python reference evaluator: literal cases, the conformance file, the Java number parsers,
and randomized expressions over randomized property maps."""

from __future__ import annotations

import math
import random

import numpy as np
import pyarrow as pa
import pytest

from storelib.filter.sql92 import parse_sql92
from storelib.filter.sql92.arrow import ArrowSql92, _parse_double, _parse_int, evaluate_batch
from storelib.filter.sql92.java import JavaEvaluationError, java_parse_double, java_parse_int
from storelib.filter.sql92.tree import JavaType
from storelib.model.errors import FilterExpressionError
from tests.conformance import utf8_cases
from tests.filter.test_sql92 import LITERAL_CASES, PROPERTY_VALUES, random_expression

PROPS = pa.map_(pa.string(), pa.string())


def props_array(maps: list[dict[str, str] | None]) -> pa.Array:
    return pa.array([None if m is None else list(m.items()) for m in maps], PROPS)


def arrow(text: str, *maps: dict[str, str] | None) -> list[bool]:
    return evaluate_batch(parse_sql92(text).tree, props_array(list(maps))).to_pylist()


def diagonal(cases: list[tuple[str, dict[str, str]]]) -> list[bool]:
    """Case i's expression on case i's properties, all in one evaluation (row i, tree i)."""
    matches = ArrowSql92([parse_sql92(text).tree for text, _ in cases]).matches(props_array([p for _, p in cases]))
    return [bool(matches[i][i]) for i in range(len(cases))]


# -- the literal cases of the grammar's tests, and RocketMQ's conformance cases --------------------


def test_literal_cases_one_by_one():
    wrong = [(t, p) for t, p, want in LITERAL_CASES if arrow(t, p) != [want]]
    assert not wrong


def test_literal_cases_in_one_batch():
    got = diagonal([(t, p) for t, p, _ in LITERAL_CASES])
    assert [(t, p) for (t, p, want), g in zip(LITERAL_CASES, got) if g is not want] == []


def test_conformance_cases():
    cases = [c for c in utf8_cases("sql92_cases") if c["expected"] != "parse_error"]
    got = diagonal([(c["expr"], c["props"]) for c in cases])
    assert [(c["expr"][:80], c["props"]) for c, g in zip(cases, got) if g is not c["expected"]] == []


# -- small cases, by concept ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, maps, expected",
    [
        # absent, present, null map
        ("a IS NULL", [{}, {"a": ""}, None], [True, False, True]),
        ("a IS NOT NULL", [{}, {"a": ""}, None], [False, True, False]),
        ("a = 'x'", [{"a": "x"}, {"b": "x"}, None], [True, False, False]),
        ("'x' <> a", [{"a": "x"}, {}, None], [False, True, True]),
        ("a = b", [{}, {"a": "1", "b": "1"}, {"a": "1"}, {"b": "1"}], [True, True, False, False]),
        ("a <> b", [{}, {"a": "1", "b": "1"}, {"a": "1"}, {"b": "1"}], [False, False, True, False]),
        # three-valued logic and short-circuit
        ("a = 1 AND b = 2", [{"a": "1", "b": "2"}, {"a": "1"}, {"b": "2"}], [True, False, False]),
        ("NOT (a = 1 AND b = 2)", [{"a": "2"}, {"a": "1"}, {}], [True, False, False]),
        ("a = 1 OR b > 1", [{"a": "1", "b": "x"}, {"a": "2", "b": "x"}, {"b": "2"}], [True, False, True]),
        ("b > 1 OR a = 1", [{"a": "1", "b": "x"}, {"a": "1", "b": "0"}], [False, True]),
        ("c IS NULL OR b > 1", [{"b": "x"}, {"c": "", "b": "x"}], [True, False]),
        ("(b > 1) IS NULL", [{"b": "x"}, {}, {"b": "0"}], [False, True, False]),
        ("(b > 1) = a", [{"b": "2", "a": "true"}, {"b": "2"}, {"a": "x"}], [False, False, False]),
        ("NOT a", [{"a": "x"}, {"a": "true"}, {}], [True, True, False]),
        ("a = TRUE", [{"a": "TrUe"}, {"a": "yes"}, {}], [True, False, False]),
        ("a <> TRUE", [{"a": "TrUe"}, {"a": "yes"}, {}], [False, True, False]),
        ("TRUE <> a", [{"a": "true"}, {}], [False, True]),
        # IN, CONTAINS, STARTSWITH, ENDSWITH
        ("a IN ('x', 'it''s')", [{"a": "it's"}, {"a": "X"}, {}], [True, False, False]),
        ("a NOT IN ('x')", [{"a": "y"}, {"a": "x"}, {}], [True, False, False]),
        ("a CONTAINS 'é'", [{"a": "café"}, {"a": "cafe"}, {}], [True, False, False]),
        ("a NOT CONTAINS 'b'", [{"a": "abc"}, {"a": "x"}, {}], [False, True, False]),
        ("a STARTSWITH 'ab'", [{"a": "abc"}, {"a": "xab"}], [True, False]),
        ("a NOT ENDSWITH 'bc'", [{"a": "abc"}, {"a": "bcx"}, {}], [False, True, False]),
        ("a NOT STARTSWITH ''", [{"a": "x"}, {}], [False, False]),
        ("(a = 1) CONTAINS 'x'", [{"a": "1"}, {"a": "y"}], [False, False]),
        # numbers: Integer, Long, Double literals
        (
            "a = 5",
            [{"a": "5"}, {"a": "+5"}, {"a": "05"}, {"a": "5.0"}, {"a": " 5"}, {"a": "٥"}, {"a": "+٠٥"}],
            [True, True, True, False, False, True, True],
        ),
        ("a <> 5", [{"a": "5.0"}, {"a": "6"}, {"a": "2147483648"}, {}], [False, True, False, False]),
        (
            "a > 2147483646",
            [{"a": "2147483647"}, {"a": "2147483648"}, {"a": "-2147483648"}, {"a": "-2147483649"}],
            [True, False, False, False],
        ),
        (
            "a > -2147483649",
            [{"a": "-2147483648"}, {"a": "-9223372036854775808"}, {"a": "-9223372036854775809"}],
            [True, False, False],
        ),
        (
            "a >= 9223372036854775807",
            [{"a": "9223372036854775807"}, {"a": "9223372036854775808"}, {"a": "0" * 40 + "9223372036854775807"}],
            [True, False, True],
        ),
        (
            "a < 0",
            [{"a": "-0"}, {"a": "-1"}, {"a": "+-1"}, {"a": "--1"}, {"a": "-"}, {"a": ""}],
            [False, True, False, False, False, False],
        ),
        (
            "a = 1.5",
            [
                {"a": "1.5"},
                {"a": " 1.5\t"},
                {"a": "1.5f"},
                {"a": "15e-1"},
                {"a": "0x1.8p0"},
                {"a": "0X1.8P0D"},
                {"a": "1.5x"},
                {"a": "١.5"},
            ],
            [True, True, True, True, True, True, False, False],
        ),
        (
            "a > 1.0",
            [
                {"a": "NaN"},
                {"a": "-NaN"},
                {"a": "Infinity"},
                {"a": "-Infinity"},
                {"a": "inf"},
                {"a": "1e400"},
                {"a": "0x1p99999"},
            ],
            [True, True, True, False, False, True, True],
        ),
        ("a < 1.0", [{"a": "-0.0"}, {"a": "1e-400"}, {"a": "-0x0p0"}, {"a": "0x1p0"}], [True, True, True, False]),
        ("a = 1.0", [{"a": "1"}, {"a": "1."}, {"a": "+1.0d"}, {"a": "0x1p0"}, {"a": " 1 "}, {"a": "1e0f"}], [True] * 6),
        (
            "a < b",
            [{"a": "-0.0", "b": "0.0"}, {"a": "1", "b": "NaN"}, {"a": "NaN", "b": "NaN"}, {"a": "x", "b": "1"}],
            [True, True, False, False],
        ),
        ("a BETWEEN 1 AND 5", [{"a": "1"}, {"a": "5"}, {"a": "6"}, {"a": "x"}, {}], [True, True, False, False, False]),
        ("a NOT BETWEEN 1.5 AND 2", [{"a": "1"}, {"a": "1.5"}, {"a": "NaN"}, {}], [True, False, False, False]),
        ("a NOT BETWEEN 1.5 AND 2.0", [{"a": "NaN"}, {"a": "2.5"}], [True, True]),  # NaN is above 2.0, no Integer
        ("-a > 0", [{"a": "-5"}], [False]),
        ("a > --1", [{"a": "2"}, {"a": "1"}], [True, False]),
    ],
)
def test_small_cases(text, maps, expected):
    assert arrow(text, *maps) == expected
    assert [parse_sql92(text).evaluate(m or {}) for m in maps] == expected  # the reference agrees


def test_constant_expressions_give_one_answer_per_row():
    assert arrow("TRUE", {}, None, {"a": "1"}) == [True, True, True]
    assert arrow("1 = 1.0 AND 'x' = 'x'", {}, {}) == [True, True]
    assert arrow("NULL OR FALSE", {}) == [False]


def test_arrays_of_every_shape():
    tree = parse_sql92("a > 1").tree
    maps = [{"a": "2"}, {"a": "0"}, None, {"b": "5", "a": "3"}, {}]
    array = props_array(maps)
    assert evaluate_batch(tree, array.slice(1, 3)).to_pylist() == [False, False, True]
    chunked = pa.chunked_array([array.slice(0, 2), array.slice(2)])
    assert evaluate_batch(tree, chunked).to_pylist() == [True, False, False, True, False]
    assert evaluate_batch(tree, props_array([])).to_pylist() == []
    duplicated = pa.array([[("a", "5"), ("a", "0")]], PROPS)  # the first value of a key counts
    assert evaluate_batch(tree, duplicated).to_pylist() == [True]


def test_trees_share_look_ups_and_parses():
    props = props_array([{"u": "3", "amount": "120"}, {"u": "4"}, {"u": "x"}])
    trees = [parse_sql92(t).tree for t in ("u = 3 AND amount < 500", "u = 3 OR amount > 1", "u > 3", "u <> 3")]
    assert [m.tolist() for m in ArrowSql92(trees).matches(props)] == [
        [True, False, False],
        [True, False, False],
        [False, True, False],
        [False, True, False],
    ]


# -- the Java number parsers, value by value -------------------------------------------------------

NUMBER_TEXTS = [
    "0",
    "5",
    "+5",
    "-5",
    "05",
    "-0",
    "+",
    "-",
    "",
    " 5",
    "5 ",
    "\t5\n",
    "\x005",
    "5L",
    "5l",
    "1_0",
    "+-5",
    "--5",
    "2147483647",
    "2147483648",
    "-2147483648",
    "-2147483649",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775808",
    "-9223372036854775809",
    "0" * 30 + "42",
    "-" + "0" * 30 + "2147483648",
    "9" * 40,
    "١٢",
    "+١",
    "٣x",
    "٠٠٠٥",
    "𝟓",
    "५",
    "五",
    "5.0",
    "5.",
    ".5",
    ".",
    "1e3",
    "1E+3",
    "1e",
    "e3",
    "1e400",
    "-1e-400",
    "NaN",
    "-NaN",
    "+NaN",
    "nan",
    "Infinity",
    "+Infinity",
    "-Infinity",
    "infinity",
    "Inf",
    "5f",
    "5F",
    "5d",
    "5D",
    "5df",
    "0x10",
    "0x1p4",
    "0X1P4",
    "0x1.8p1",
    "-0x.8p1f",
    "0x1p99999",
    "0x1p-99999",
    "0xp1",
    "0x1.p1",
    "0x.p1",
    " 0x1p0 ",
    "1.5e-7",
    "4.9e-324",
    "2.4703282292062328e-324",
    "1.7976931348623159e308",
    "9007199254740993",
    "0." + "0" * 300 + "1e301",
    "1." + "0" * 500 + "1",
    "١.٥",
    "true",
    "x",
    "é",
    "٥٥٥٥٥٥٥٥٥٥٥",
]


def _java(parse, text: str):
    try:
        return parse(text)
    except JavaEvaluationError:
        return None


@pytest.mark.parametrize("java_type", [JavaType.INT, JavaType.LONG])
def test_integer_and_long_value_of(java_type):
    values, ok = _parse_int(pa.array(NUMBER_TEXTS + [None]), java_type)
    got = [int(v) if k else None for v, k in zip(values, ok)]
    assert got == [_java(lambda t: java_parse_int(t, java_type), t) for t in NUMBER_TEXTS] + [None]


def test_double_value_of():
    values, ok = _parse_double(pa.array(NUMBER_TEXTS + [None]))
    got = [float(v) if k else None for v, k in zip(values, ok)]
    want = [_java(java_parse_double, t) for t in NUMBER_TEXTS] + [None]
    assert [repr(g) for g in got] == [repr(w) for w in want]  # repr: NaN == NaN, -0.0 != 0.0


def test_random_number_texts():
    rng = random.Random(11)
    alphabet = "0123456789" * 3 + "+-.eExXpPfFdD _aN١٥" + " \t"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))) for _ in range(3000)]
    texts += [f"{rng.choice(['', '+', '-'])}{rng.randint(0, 10 ** rng.randint(1, 25))}" for _ in range(2000)]
    texts += [repr(rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-320, 300)) for _ in range(2000)]
    texts += [float.hex(rng.uniform(-10, 10)) for _ in range(200)]
    array = pa.array(texts)
    for java_type in (JavaType.INT, JavaType.LONG):
        values, ok = _parse_int(array, java_type)
        assert [int(v) if k else None for v, k in zip(values, ok)] == [
            _java(lambda t: java_parse_int(t, java_type), t) for t in texts
        ]
    values, ok = _parse_double(array)
    got = [repr(float(v)) if k else None for v, k in zip(values, ok)]
    assert got == [None if (w := _java(java_parse_double, t)) is None else repr(w) for t in texts]


# -- randomized cross-check against the reference evaluator ---------------------------------------

MORE_VALUES = PROPERTY_VALUES + [
    "2147483647",
    "-2147483648",
    "-9223372036854775808",
    "0x1.8p1",
    "+",
    "١٢",
    " 5 ",
    "Infinity",
    "1e400",
    "-0x0p0",
    "\t7\n",
    "tRuE",
    "5f",
]


def test_random_expressions_against_the_reference():
    rng = random.Random(20240611)
    expressions = []
    while len(expressions) < 1500:
        try:
            expressions.append(parse_sql92(random_expression(rng)))
        except FilterExpressionError:
            continue
    maps = [{p: rng.choice(MORE_VALUES) for p in "abc" if rng.random() < 0.75} for _ in range(80)] + [{}]
    matches = ArrowSql92([e.tree for e in expressions]).matches(props_array(maps))
    mismatches = [
        (e.text, m, e.evaluate(m))
        for e, got in zip(expressions, matches)
        for m, g in zip(maps, got.tolist())
        if g is not e.evaluate(m)
    ]
    assert mismatches[:10] == []


def test_random_expressions_one_tree_at_a_time():
    """Without sharing between trees (no cache hit across them), the answers are the same."""
    rng = random.Random(5)
    maps = [{p: rng.choice(MORE_VALUES) for p in "abc" if rng.random() < 0.75} for _ in range(40)]
    array, checked = props_array(maps), 0
    while checked < 200:
        try:
            expression = parse_sql92(random_expression(rng))
        except FilterExpressionError:
            continue
        assert evaluate_batch(expression.tree, array).to_pylist() == [expression.evaluate(m) for m in maps], (
            expression.text
        )
        checked += 1


def test_no_python_per_row(monkeypatch):
    """Hex doubles are parsed once per distinct value, nothing else calls the reference parser."""
    import storelib.filter.sql92.arrow as module

    calls: list[str] = []
    monkeypatch.setattr(module, "java_parse_double", lambda t: calls.append(t) or java_parse_double(t))
    rows = 5000
    props = props_array([{"a": "0x1p3" if i % 2 else str(i), "b": "١٢"} for i in range(rows)])
    got = ArrowSql92([parse_sql92("a = 8.0").tree, parse_sql92("b = 12").tree]).matches(props)
    assert got[0].sum() == rows // 2 + 1 and bool(got[1].all())  # the odd rows, and "8"
    assert calls == ["0x1p3"]
    assert math.isclose(float(np.count_nonzero(got[0])), rows / 2 + 1)
