"""Pure-Python reference evaluator of SQL92 trees: RocketMQ's evaluator, rule for rule.

It serves point reads on the driver and cross-checks the Spark compilation. Each node evaluates to
a Java value (String, Integer/Long, Double, Boolean or null) or throws what RocketMQ would throw
(:class:`JavaEvaluationError`, e.g. ``Integer.valueOf("abc")``); a message matches only when the
whole tree gives Boolean TRUE. The Java number parsers are reproduced exactly, including Unicode
digits for ``Integer.valueOf`` and hex floats for ``Double.valueOf``.

>>> from storelib.filter.sql92 import parse_sql92
>>> evaluate(parse_sql92("a > 5").tree, {"a": "abc"}), evaluate(parse_sql92("a > 5.0").tree, {"a": "NaN"})
(False, True)
"""

from __future__ import annotations

import math
import re
import unicodedata
from functools import lru_cache
from typing import Callable, Mapping, Sequence

from sqlglot import exp

from storelib.filter.sql92.tree import (
    MATCHES,
    JavaType,
    JavaValue,
    Node,
    is_truth,
    java_type,
    java_value,
    negated_predicate,
    terms,
)

__all__ = [
    "JavaEvaluationError",
    "evaluate",
    "node_value",
    "value_of",
    "compiled",
    "java_compare",
    "java_parse_int",
    "java_parse_long",
    "java_parse_double",
    "java_boolean",
    "JAVA_DOUBLE_SYNTAX",
    "JAVA_INT_SYNTAX",
    "UNICODE_DIGITS",
    "ASCII_DIGITS",
]

S, INT, L, D, B = JavaType.STRING, JavaType.INT, JavaType.LONG, JavaType.DOUBLE, JavaType.BOOLEAN

#: The Unicode decimal digits of the Basic Multilingual Plane other than 0-9 (what Java's
#: Character.digit accepts in Integer.valueOf; a supplementary digit is two chars, neither a digit).
UNICODE_DIGITS = "".join(
    chr(c) for c in range(128, 0x10000) if not 0xD800 <= c < 0xE000 and unicodedata.category(chr(c)) == "Nd"
)
#: The ASCII digit of each character of :data:`UNICODE_DIGITS`.
ASCII_DIGITS = "".join(str(unicodedata.decimal(c)) for c in UNICODE_DIGITS)
_TO_ASCII = str.maketrans(UNICODE_DIGITS, ASCII_DIGITS)

#: Integer/Long.valueOf after digits are made ASCII (no trimming, one optional sign).
JAVA_INT_SYNTAX = r"[+-]?[0-9]+"
#: Double.valueOf after trimming chars <= ' ' (FloatingDecimal.readJavaFormatString and its hex form).
JAVA_DOUBLE_SYNTAX = (
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?"
    r"|0[xX](?:[0-9a-fA-F]+\.?|[0-9a-fA-F]*\.[0-9a-fA-F]+)[pP][+-]?[0-9]+[fFdD]?)"
)
_INT_RE, _DOUBLE_RE = re.compile(JAVA_INT_SYNTAX), re.compile(JAVA_DOUBLE_SYNTAX)
_RANGES = {INT: 2**31, L: 2**63}
_JAVA_TRIMMED = "".join(map(chr, range(33)))  # String.trim removes every char <= ' '


class JavaEvaluationError(Exception):
    """What RocketMQ's evaluator throws (NumberFormatException, ClassCastException): no match."""


#: A node compiled by :func:`value_of`: its Java value for a message's properties.
Value = Callable[[Mapping[str, str]], JavaValue]


def evaluate(tree: Node, properties: Mapping[str, str]) -> bool:
    """True exactly where RocketMQ's evaluator returns Boolean TRUE; null and exceptions are False.

    >>> from storelib.filter.sql92 import parse_sql92
    >>> evaluate(parse_sql92("a = 'x' OR b > 1").tree, {"a": "x", "b": "abc"})
    True
    """
    try:
        return compiled(tree)(properties) is True
    except JavaEvaluationError:
        return False


def java_parse_int(text: str, java_type: JavaType = INT) -> int:
    """``Integer.valueOf`` (or ``Long.valueOf`` for ``JavaType.LONG``), JavaEvaluationError if it throws.

    >>> java_parse_int("+0５"), java_parse_int("2147483648", JavaType.LONG)
    (5, 2147483648)
    """
    ascii_text = text.translate(_TO_ASCII)
    if not _INT_RE.fullmatch(ascii_text):
        raise JavaEvaluationError(f"NumberFormatException: For input string: {text!r}")
    value, bound = int(ascii_text), _RANGES[java_type]
    if not -bound <= value < bound:
        raise JavaEvaluationError(f"NumberFormatException: {text!r} is out of range for {java_type.value}")
    return value


def java_parse_long(text: str) -> int:
    """``Long.valueOf``.

    >>> java_parse_long("+42"), java_parse_long("-9223372036854775808")
    (42, -9223372036854775808)
    """
    return java_parse_int(text, L)


def java_parse_double(text: str) -> float:
    """``Double.valueOf``: trims chars <= ' ', accepts NaN, Infinity, f/F/d/D suffixes and hex floats.

    >>> java_parse_double(" 0x1.8p1d\\t"), java_parse_double("-Infinity")
    (3.0, -inf)
    """
    trimmed = text.strip(_JAVA_TRIMMED)
    if not _DOUBLE_RE.fullmatch(trimmed):
        raise JavaEvaluationError(f"NumberFormatException: For input string: {text!r}")
    negative, core = trimmed.startswith("-"), trimmed.lstrip("+-")
    if core in ("NaN", "Infinity"):
        value = math.nan if core == "NaN" else math.inf
    elif core[:2] in ("0x", "0X"):
        try:
            value = float.fromhex(core.rstrip("fFdD"))
        except OverflowError:  # Java gives infinity for a too large binary exponent
            value = math.inf
    else:
        value = float(core.rstrip("fFdD"))
    return -value if negative else value


def java_boolean(text: str) -> bool:
    """``Boolean.valueOf(String)``: ``"true"`` in any case, everything else false.

    >>> java_boolean("TRUE"), java_boolean("yes")
    (True, False)
    """
    return text.lower() == "true"


def _double_compare(a: float, b: float) -> int:
    """``Double.compare``: NaN equals itself and is above everything, -0.0 < 0.0."""

    def key(x: float) -> tuple[int, float, float]:
        return (1, 0.0, 0.0) if math.isnan(x) else (0, x, math.copysign(1.0, x))

    ka, kb = key(a), key(b)
    return (ka > kb) - (ka < kb)


def _sign(a: int | float | str | bool, b: int | float | str | bool) -> int:
    return (a > b) - (a < b)  # type: ignore[operator]


_PARSERS: dict[JavaType, Callable[[str], int | float]] = {INT: java_parse_int, L: java_parse_long, D: java_parse_double}


def java_compare(lt: JavaType, lv: JavaValue, rt: JavaType, rv: JavaValue) -> int:
    """ComparisonExpression.__compare of two non-null values: numeric promotion, a String parsed with
    the other side's type, Boolean.valueOf for String vs Boolean, -1 for other mixed kinds.

    >>> java_compare(JavaType.LONG, 5, JavaType.DOUBLE, 4.5), java_compare(JavaType.STRING, "b", JavaType.STRING, "a")
    (1, 1)
    """
    assert lv is not None and rv is not None
    if lt is rt:
        return _double_compare(lv, rv) if lt is D else _sign(lv, rv)  # type: ignore[arg-type]
    if lt is B:
        if rt is S:  # RocketMQ casts the Boolean to String here: ClassCastException
            raise JavaEvaluationError("ClassCastException: Boolean cannot be cast to String")
        return -1
    if lt is S:
        if rt is B:
            return _sign(java_boolean(lv), rv)  # type: ignore[arg-type]
        return java_compare(rt, _PARSERS[rt](lv), rt, rv) if rt in _PARSERS else -1  # type: ignore[arg-type]
    if rt is S:
        return java_compare(lt, lv, lt, _PARSERS[lt](rv)) if lt in _PARSERS else -1  # type: ignore[arg-type]
    if lt in _PARSERS and rt in _PARSERS:
        if D in (lt, rt):
            return _double_compare(float(lv), float(rv))
        return _sign(lv, rv)
    return -1


_ORDER: dict[str, Callable[[int], bool]] = {
    ">": lambda c: c > 0,
    ">=": lambda c: c >= 0,
    "<": lambda c: c < 0,
    "<=": lambda c: c <= 0,
}


def _and(values: Sequence[Value], stop: bool, props: Mapping[str, str]) -> bool | None:
    """Left-to-right AND (``stop=False``) or OR (``stop=True``) of boolean values, with short-circuit and null."""
    saw_null = False
    for value in values:
        v = value(props)
        if v is stop:
            return stop
        saw_null = saw_null or v is None
    return None if saw_null else not stop


_MATCHERS: dict[type[exp.Expr], Callable[[str, str], bool]] = {
    MATCHES["CONTAINS"]: lambda s, p: p in s,
    MATCHES["STARTSWITH"]: str.startswith,
    MATCHES["ENDSWITH"]: str.endswith,
}
_ORDERINGS: dict[type[exp.Expr], str] = {exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}
_LEAVES = (exp.Literal, exp.Boolean, exp.Null)


def node_value(node: Node, props: Mapping[str, str]) -> JavaValue:
    """The Java value of ``node``; raises :class:`JavaEvaluationError` where RocketMQ throws.

    >>> from storelib.filter.sql92.tree import literal, prop
    >>> node_value(prop("a"), {"a": "7"}), node_value(literal(3, JavaType.INT), {})
    ('7', 3)
    """
    return value_of(node)(props)


def compiled(tree: Node) -> Value:
    """:func:`value_of` a whole tree, kept for the trees evaluated most recently (a subscription's
    expression is evaluated on every message a pull looks at).

    >>> from storelib.filter.sql92 import parse_sql92
    >>> tree = parse_sql92("a > 5").tree
    >>> compiled(tree) is compiled(tree), compiled(tree)({"a": "7"})
    (True, True)
    """
    # Equal sqlglot expressions are typed alike wherever the builders type them by their place in the
    # tree; only the root's place is not in the expression (a property read as a boolean, or not).
    return _compiled(tree, java_type(tree))


@lru_cache(maxsize=1024)
def _compiled(tree: Node, kind: JavaType) -> Value:
    return value_of(tree)


def value_of(node: Node) -> Value:
    """The tree as a Python function of the properties: each node's static Java types and constants
    worked out once, so that evaluating a message only runs what depends on its properties.

    >>> from storelib.filter.sql92 import parse_sql92
    >>> value = value_of(parse_sql92("a BETWEEN 1 AND 5 OR b IS NULL").tree)
    >>> value({"a": "3", "b": "x"}), value({"a": "9", "b": "x"}), value({"a": "9"})
    (True, False, True)
    """
    kind = type(node)
    if kind is exp.Column:
        name = node.name
        if is_truth(node):  # a String is no Boolean: FALSE, or null when absent
            return lambda props: None if props.get(name) is None else False
        return lambda props: props.get(name)
    if isinstance(node, _LEAVES):
        constant = java_value(node)
        return lambda props: constant
    if kind is exp.Paren:
        return value_of(node.this)
    if kind is exp.Neg:
        operand = value_of(node.this)
        if java_type(node.this) not in JavaType.numeric():
            return lambda props: (operand(props), None)[1]  # evaluated all the same: it may throw
        return lambda props: None if (v := operand(props)) is None else -v  # type: ignore[operator]
    predicate, negated = negated_predicate(node)
    if kind is exp.Not and not negated:
        operand = value_of(node.this)
        return lambda props: None if (v := operand(props)) is None else not v
    if kind in (exp.And, exp.Or):
        values, stop = [value_of(t) for t in terms(node)], kind is exp.Or
        return lambda props: _and(values, stop, props)
    if kind in (exp.EQ, exp.NEQ):
        return _equality(node.this, node.expression, kind is exp.NEQ)
    if kind in _ORDERINGS:
        return _ordering(_ORDERINGS[kind], node.this, node.expression)
    if isinstance(predicate, exp.Is):
        operand = value_of(predicate.this)
        return lambda props: (operand(props) is None) is not negated
    if isinstance(predicate, exp.Between):
        low, high = predicate.args["low"], predicate.args["high"]
        ops = (("<", low), (">", high)) if negated else ((">=", low), ("<=", high))
        bounds = [_ordering(op, predicate.this, bound) for op, bound in ops]
        return lambda props: _and(bounds, negated, props)
    if isinstance(predicate, exp.In):
        operand, members = value_of(predicate.this), frozenset(e.this for e in predicate.expressions)
        return lambda props: None if (v := operand(props)) is None else (v in members) is not negated
    if type(predicate) in _MATCHERS:
        return _match(_MATCHERS[type(predicate)], value_of(predicate.this), predicate.expression.this, negated)
    raise TypeError(f"not a SQL92 node: {node!r}")


def _ordering(op: str, left: Node, right: Node) -> Value:
    lv_of, rv_of, lt, rt, holds = value_of(left), value_of(right), java_type(left), java_type(right), _ORDER[op]

    def value(props: Mapping[str, str]) -> bool | None:
        lv = lv_of(props)
        if lv is None:
            return None  # the right side is not even evaluated
        rv = rv_of(props)
        if rv is None:
            return None
        if lt is S and rt is S:  # two Strings are ordered as doubles
            return holds(_double_compare(java_parse_double(lv), java_parse_double(rv)))  # type: ignore[arg-type]
        return holds(java_compare(lt, lv, rt, rv))

    return value


def _equality(left: Node, right: Node, negated: bool) -> Value:
    lv_of, rv_of, lt, rt = value_of(left), value_of(right), java_type(left), java_type(right)

    def value(props: Mapping[str, str]) -> bool | None:
        lv, rv = lv_of(props), rv_of(props)
        if lv is None and rv is None:
            eq = True
        elif lv is None:
            return None
        elif rv is None:
            eq = False
        else:
            eq = java_compare(lt, lv, rt, rv) == 0
        return eq is not negated

    return value


def _match(test: Callable[[str, str], bool], operand: Value, pattern: str, negated: bool) -> Value:
    if not pattern:
        return lambda props: False
    return lambda props: isinstance(v := operand(props), str) and test(v, pattern) is not negated
