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
from typing import Callable, Mapping, cast

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


def evaluate(tree: Node, properties: Mapping[str, str]) -> bool:
    """True exactly where RocketMQ's evaluator returns Boolean TRUE; null and exceptions are False.

    >>> from storelib.filter.sql92 import parse_sql92
    >>> evaluate(parse_sql92("a = 'x' OR b > 1").tree, {"a": "x", "b": "abc"})
    True
    """
    try:
        return node_value(tree, properties) is True
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


def _ordering(op: str, left: Node, right: Node, props: Mapping[str, str]) -> bool | None:
    lv = node_value(left, props)
    if lv is None:
        return None  # the right side is not even evaluated
    rv = node_value(right, props)
    if rv is None:
        return None
    lt, rt = java_type(left), java_type(right)
    if lt is S and rt is S:  # two Strings are ordered as doubles
        return _ORDER[op](_double_compare(java_parse_double(lv), java_parse_double(rv)))  # type: ignore[arg-type]
    return _ORDER[op](java_compare(lt, lv, rt, rv))


def _equal(left: Node, right: Node, props: Mapping[str, str]) -> bool | None:
    lv, rv = node_value(left, props), node_value(right, props)
    if lv is None and rv is None:
        return True
    if lv is None:
        return None
    if rv is None:
        return False
    return java_compare(java_type(left), lv, java_type(right), rv) == 0


def _and(values: Callable[[int], bool | None], count: int, stop: bool) -> bool | None:
    """Left-to-right AND (``stop=False``) or OR (``stop=True``) with short-circuit and null."""
    saw_null = False
    for i in range(count):
        v = values(i)
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
    if isinstance(node, exp.Column):
        value = props.get(node.name)
        return (None if value is None else False) if is_truth(node) else value
    if isinstance(node, _LEAVES):
        return java_value(node)
    if isinstance(node, exp.Paren):
        return node_value(node.this, props)
    if isinstance(node, exp.Neg):
        v = node_value(node.this, props)
        return -v if v is not None and java_type(node.this) in JavaType.numeric() else None  # type: ignore[operator]
    inner, negated = negated_predicate(node)
    if isinstance(node, exp.Not) and not negated:
        v = node_value(node.this, props)
        return None if v is None else not v
    if isinstance(node, (exp.And, exp.Or)):
        chain = terms(node)
        return _and(
            lambda i: cast("bool | None", node_value(chain[i], props)),  # a chain's terms are boolean
            len(chain),
            isinstance(node, exp.Or),
        )
    if isinstance(node, (exp.EQ, exp.NEQ)):
        eq = _equal(node.this, node.expression, props)
        return eq if isinstance(node, exp.EQ) or eq is None else not eq
    if type(node) in _ORDERINGS:
        return _ordering(_ORDERINGS[type(node)], node.this, node.expression, props)
    if isinstance(inner, exp.Is):
        return (node_value(inner.this, props) is None) is not negated
    if isinstance(inner, exp.Between):
        low, high = inner.args["low"], inner.args["high"]
        ops = (("<", low), (">", high)) if negated else ((">=", low), ("<=", high))
        return _and(lambda i: _ordering(ops[i][0], inner.this, ops[i][1], props), 2, negated)
    if isinstance(inner, exp.In):
        v = node_value(inner.this, props)
        return None if v is None else (v in {e.this for e in inner.expressions}) is not negated
    if type(inner) in _MATCHERS:
        pattern = inner.expression.this
        if not pattern:
            return False
        v = node_value(inner.this, props)
        if not isinstance(v, str):  # null, a number or a Boolean
            return False
        return _MATCHERS[type(inner)](v, pattern) is not negated
    raise TypeError(f"not a SQL92 node: {node!r}")
