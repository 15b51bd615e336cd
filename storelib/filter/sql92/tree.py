"""The typed tree of a SQL92 selector: sqlglot expressions, each node's Java type in its ``meta``.

A selector is a tree of sqlglot's own expressions: ``exp.Column`` (a property), ``exp.Literal``,
``exp.Boolean``, ``exp.Null``, ``exp.Neg``, ``exp.Not``, ``exp.And``/``exp.Or`` (a chain of one
connector is left-deep, as sqlglot builds it), ``exp.EQ``/``NEQ``/``GT``/``GTE``/``LT``/``LTE``,
``exp.Is`` (with ``exp.Null``), ``exp.Between``, ``exp.In`` and ``exp.Contains``/``StartsWith``/
``EndsWith``. A negated predicate (``a NOT IN (...)``, ``a IS NOT NULL``) is ``exp.Not`` right over it;
``NOT`` applied to a parenthesized predicate keeps its ``exp.Paren`` (``NOT (a CONTAINS 'x')`` is TRUE
for an absent ``a``, ``a NOT CONTAINS 'x'`` FALSE). No other ``exp.Paren`` is kept.

Every node carries, in its public ``meta`` dict, its static :class:`JavaType` (the Java class of its
value in RocketMQ's evaluator whenever it is not null: properties are Strings, ``5`` an Integer,
``5000000000`` and ``-2147483648`` Longs, ``1.5`` a Double, predicates Booleans, ``-a`` always null), a
literal its exact Java value, and the nesting ``depth`` and text position (``pos``) the parser checks
and reports. :func:`java_type` and :func:`java_value` read them; the builders below set them. A property
read as a boolean (RocketMQ's BooleanCastExpression: FALSE when present, null when absent) is a column
whose type is Boolean. ``str()`` of an expression is sqlglot's; :func:`canonical` is RocketMQ text
that parses back to an equal tree.

>>> tree = logic("AND", comparison("=", prop("a"), literal(1, JavaType.INT)), not_(is_null(prop("b"), False)))
>>> canonical(tree), java_type(tree), type(tree).__name__
('a = 1 AND NOT (b IS NULL)', <JavaType.BOOLEAN: 'Boolean'>, 'And')
>>> [type(n).__name__ for n in walk(tree)][:3], depth(tree), java_type(negate(prop("a")))
(['And', 'EQ', 'Column'], 3, <JavaType.NULL: 'null'>)
"""

from __future__ import annotations

import enum
from typing import Iterator, Union

from sqlglot import exp

__all__ = [
    "JavaType",
    "JavaValue",
    "Node",
    "COMPARISONS",
    "MATCHES",
    "NEGATABLE",
    "java_type",
    "java_value",
    "depth",
    "pos",
    "set_pos",
    "is_boolean",
    "is_property",
    "is_truth",
    "negated_predicate",
    "operands",
    "terms",
    "walk",
    "property_names",
    "prop",
    "truth",
    "literal",
    "negate",
    "not_",
    "logic",
    "comparison",
    "is_null",
    "between",
    "in_list",
    "match",
    "rebuild",
    "between_pair",
    "canonical",
    "quote",
]

#: A value in RocketMQ's evaluator: String, Integer/Long (int), Double (float), Boolean or null.
JavaValue = Union[str, int, float, bool, None]
#: A node of a typed tree.
Node = exp.Expr


class JavaType(enum.Enum):
    """The Java class of a node's non-null values."""

    STRING = "String"
    INT = "Integer"
    LONG = "Long"
    DOUBLE = "Double"
    BOOLEAN = "Boolean"
    NULL = "null"

    @staticmethod
    def numeric() -> frozenset[JavaType]:
        """The numeric types (Integer, Long, Double), which compare with one another.

        >>> JavaType.LONG in JavaType.numeric(), JavaType.STRING in JavaType.numeric()
        (True, False)
        """
        return _NUMERIC


_NUMERIC = frozenset({JavaType.INT, JavaType.LONG, JavaType.DOUBLE})
_BOOLEAN_OR_NULL = (JavaType.BOOLEAN, JavaType.NULL)

#: RocketMQ's comparison operators and their sqlglot expressions.
COMPARISONS: dict[str, type[exp.Expr]] = {
    "=": exp.EQ,
    "<>": exp.NEQ,
    ">": exp.GT,
    ">=": exp.GTE,
    "<": exp.LT,
    "<=": exp.LTE,
}
#: The pattern operators and their sqlglot expressions.
MATCHES: dict[str, type[exp.Expr]] = {"CONTAINS": exp.Contains, "STARTSWITH": exp.StartsWith, "ENDSWITH": exp.EndsWith}
#: The predicates with a negated form of their own (``a NOT IN``, ``a IS NOT NULL``, ...): ``exp.Not`` right over one.
NEGATABLE: tuple[type[exp.Expr], ...] = (exp.Is, exp.In, exp.Between, *MATCHES.values())
_OPERATORS = {kind: op for op, kind in COMPARISONS.items()}
_MATCH_NAMES = {kind: name for name, kind in MATCHES.items()}
_CONNECTORS: dict[str, type[exp.Expr]] = {"AND": exp.And, "OR": exp.Or}
_LEAVES = (exp.Column, exp.Literal, exp.Boolean, exp.Null)


# -- reading a node's meta ------------------------------------------------------------------------------


def java_type(node: Node) -> JavaType:
    """The Java type of a node's non-null values (ValueError for an expression no builder typed).

    >>> java_type(literal(5000000000, JavaType.LONG)), java_type(truth(prop("a")))
    (<JavaType.LONG: 'Long'>, <JavaType.BOOLEAN: 'Boolean'>)
    """
    kind = node.meta_get("java_type")
    if kind is None:
        raise ValueError(f"not a typed SQL92 node (build it with the tree's builders or typed_tree): {node!r}")
    return kind


def java_value(node: Node) -> JavaValue:
    """The exact Java value of a literal (an int is an Integer or a Long as :func:`java_type` says).

    >>> java_value(literal(0.5, JavaType.DOUBLE)), java_value(literal(None, JavaType.NULL))
    (0.5, None)
    """
    return node.meta_get("java_value")


def depth(node: Node) -> int:
    """The operator nodes on the longest path down from ``node`` (a chain of one connector counts once,
    a property read as a boolean once, a literal or property not at all), as the nesting limit counts them.

    >>> a, b, c = (truth(prop(name)) for name in "abc")
    >>> depth(not_(not_(a))), depth(logic("OR", logic("OR", b, c), not_(truth(prop("d")))))
    (3, 3)
    """
    return node.meta_get("depth", 0)


def pos(node: Node) -> int:
    """The 0-based offset in the text of the node's first token (for error messages).

    >>> pos(prop("a", 4)), pos(set_pos(prop("a", 4), 3))
    (4, 3)
    """
    return node.meta_get("pos", 0)


def set_pos(node: Node, at: int) -> Node:
    """``node``, its position moved to ``at`` (a parenthesis or sign before it).

    >>> pos(set_pos(literal(1, JavaType.INT, 5), 4))
    4
    """
    node.meta["pos"] = at
    return node


def _typed(node: Node, kind: JavaType, height: int, at: int, value: JavaValue = None) -> Node:
    meta = node.meta
    meta["java_type"], meta["depth"], meta["pos"] = kind, height, at
    if isinstance(node, _LEAVES):
        meta["java_value"] = value
    return node


def is_boolean(node: Node) -> bool:
    """True for what RocketMQ calls a BooleanExpression (TRUE/FALSE/NULL literals included).

    >>> is_boolean(prop("a")), is_boolean(truth(prop("a"))), is_boolean(literal(None, JavaType.NULL))
    (False, True, True)
    """
    return not isinstance(node, exp.Neg) and java_type(node) in _BOOLEAN_OR_NULL


def is_property(node: Node) -> bool:
    """A property read as its String value.

    >>> is_property(prop("a")), is_property(truth(prop("a"))), is_property(literal("a", JavaType.STRING))
    (True, False, False)
    """
    return isinstance(node, exp.Column) and java_type(node) is JavaType.STRING


def is_truth(node: Node) -> bool:
    """A property read as a boolean: FALSE when present (a String is no Boolean), null when absent.

    >>> is_truth(truth(prop("a"))), is_truth(prop("a"))
    (True, False)
    """
    return isinstance(node, exp.Column) and java_type(node) is JavaType.BOOLEAN


def negated_predicate(node: Node) -> tuple[Node, bool]:
    """``(predicate, True)`` for a negated predicate (``exp.Not`` right over IS/IN/BETWEEN/CONTAINS...),
    else ``(node, False)``.

    >>> p, negated = negated_predicate(in_list(prop("a"), ("x",), True))
    >>> type(p).__name__, negated
    ('In', True)
    """
    if isinstance(node, exp.Not) and isinstance(node.this, NEGATABLE):
        return node.this, True
    return node, False


def operands(node: Node) -> tuple[Node, ...]:
    """The operand nodes of a node (a negated predicate's are its predicate's; ``NOT (p)``'s is ``p``).

    >>> [canonical(o) for o in operands(between(prop("a"), literal(1, JavaType.INT), literal(2, JavaType.INT), True))]
    ['a', '1', '2']
    """
    node, _ = negated_predicate(node)
    if isinstance(node, _LEAVES):
        return ()
    if isinstance(node, exp.Between):
        return (node.this, node.args["low"], node.args["high"])
    if isinstance(node, (exp.Not, exp.Neg)):
        inner = node.this
        return (inner.this,) if isinstance(inner, exp.Paren) else (inner,)
    if isinstance(node, exp.Paren):
        return (node.this,)
    if isinstance(node, (exp.Is, exp.In, *MATCHES.values())):
        return (node.this,)
    return (node.this, node.expression)


def terms(node: Node) -> list[Node]:
    """The terms of a chain of one connector (left to right; a left operand of the same connector is
    part of the chain), without recursion; ``[node]`` for anything else.

    >>> [canonical(t) for t in terms(logic("AND", logic("AND", truth(prop("a")), truth(prop("b"))), truth(prop("c"))))]
    ['a', 'b', 'c']
    """
    kind, rights = type(node), []
    if kind not in (exp.And, exp.Or):
        return [node]
    while type(node) is kind:
        rights.append(node.expression)
        node = node.this
    return [node, *reversed(rights)]


def walk(node: Node) -> Iterator[Node]:
    """This node and all operands below it, depth first, parents before children (no recursion)."""
    stack: list[Node] = [node]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(operands(node)))


def property_names(node: Node) -> frozenset[str]:
    """Names of all properties a tree reads.

    >>> sorted(property_names(logic("AND", truth(prop("a")), truth(prop("b")))))
    ['a', 'b']
    """
    return frozenset(n.name for n in walk(node) if isinstance(n, exp.Column))


# -- builders -------------------------------------------------------------------------------------


def prop(name: str, at: int = 0) -> exp.Column:
    """A message property (``TAGS`` included); its value is the String or null when absent."""
    return _typed(exp.column(name, quoted=False), JavaType.STRING, 0, at)  # type: ignore[return-value]


def truth(column: exp.Column) -> exp.Column:
    """asBooleanExpression of a property: the same column, read as a boolean (typed in place).

    >>> java_type(truth(prop("a"))), canonical(not_(truth(prop("a"))))
    (<JavaType.BOOLEAN: 'Boolean'>, 'NOT a')
    """
    return _typed(column, JavaType.BOOLEAN, 1, pos(column))  # type: ignore[return-value]


def literal(value: JavaValue, kind: JavaType, at: int = 0) -> Node:
    """A constant: ``'x'``, ``5``, ``5000000000``, ``1.5``, ``TRUE``/``FALSE`` or ``NULL`` (a NULL may be
    typed Boolean: the states' stand-ins are).

    >>> literal(10, JavaType.INT).sql(), literal(0.5, JavaType.DOUBLE).sql(), literal("it's", JavaType.STRING).sql()
    ('10', '0.5', "'it''s'")
    """
    node: Node
    if value is None:
        node = exp.Null()
    elif kind is JavaType.STRING:
        node = exp.Literal.string(str(value))
    elif kind is JavaType.BOOLEAN:
        node = exp.Boolean(this=bool(value))
    else:
        node = exp.Literal.number(repr(value))
    return _typed(node, kind, 0, at, value)


def negate(operand: Node, at: int = 0) -> exp.Neg:
    """Unary ``-``: the negated number, null for anything that is not a number."""
    kind = java_type(operand) if java_type(operand) in _NUMERIC else JavaType.NULL
    return _typed(exp.Neg(this=operand), kind, 1 + depth(operand), at)  # type: ignore[return-value]


def not_(operand: Node, at: int = 0) -> exp.Not:
    """``NOT x`` (null stays null); a predicate with a negated form of its own is kept in parentheses."""
    if isinstance(operand, NEGATABLE):
        operand = _typed(exp.Paren(this=operand), JavaType.BOOLEAN, depth(operand), pos(operand))
    return _typed(exp.Not(this=operand), JavaType.BOOLEAN, 1 + depth(operand), at)  # type: ignore[return-value]


def logic(op: str, left: Node, right: Node, at: int | None = None) -> Node:
    """``left AND right`` / ``left OR right``, evaluated left to right with short-circuit. A left operand
    of the same connector is the start of the chain: the chain is one level deep, whatever its length."""
    kind = _CONNECTORS[op]
    height = max(depth(left) if type(left) is kind else 1 + depth(left), 1 + depth(right))
    return _typed(kind(this=left, expression=right), JavaType.BOOLEAN, height, pos(left) if at is None else at)


def comparison(op: str, left: Node, right: Node, at: int | None = None) -> Node:
    """``= <> > >= < <=`` between two operands (``<>`` is ``NOT (=)``)."""
    node = COMPARISONS[op](this=left, expression=right)
    return _typed(node, JavaType.BOOLEAN, 1 + max(depth(left), depth(right)), pos(left) if at is None else at)


def _negated(node: Node, negated: bool, height: int, at: int) -> Node:
    _typed(node, JavaType.BOOLEAN, height, at)
    return _typed(exp.Not(this=node), JavaType.BOOLEAN, height, at) if negated else node


def is_null(operand: Node, negated: bool = False, at: int | None = None) -> Node:
    """``x IS NULL`` / ``x IS NOT NULL``: never null itself."""
    node = exp.Is(this=operand, expression=exp.Null())
    return _negated(node, negated, 1 + depth(operand), pos(operand) if at is None else at)


def between(value: Node, low: Node, high: Node, negated: bool = False, at: int | None = None) -> Node:
    """``v BETWEEN lo AND hi`` is ``v >= lo AND v <= hi``; NOT BETWEEN is ``v < lo OR v > hi``.

    >>> canonical(between(prop("a"), literal(1, JavaType.INT), literal(5, JavaType.INT), negated=True))
    'a NOT BETWEEN 1 AND 5'
    """
    node = exp.Between(this=value, low=low, high=high)
    height = 1 + max(depth(value), depth(low), depth(high))
    return _negated(node, negated, height, pos(value) if at is None else at)


def in_list(operand: exp.Column, values: tuple[str, ...], negated: bool = False, at: int | None = None) -> Node:
    """``prop [NOT] IN ('a', 'b')``: string literals only; null when the property is absent.

    >>> canonical(in_list(prop("t"), ("a", "b")))
    "t IN ('a', 'b')"
    """
    node = exp.In(this=operand, expressions=[exp.Literal.string(v) for v in values])
    return _negated(node, negated, 1, pos(operand) if at is None else at)


def match(op: str, operand: Node, pattern: str, negated: bool = False, at: int | None = None) -> Node:
    """``x [NOT] CONTAINS|STARTSWITH|ENDSWITH 'p'``: FALSE (never null) for an absent or non-String
    operand and for an empty pattern.

    >>> canonical(match("STARTSWITH", prop("a"), "x", negated=True))
    "a NOT STARTSWITH 'x'"
    """
    node = MATCHES[op](this=operand, expression=exp.Literal.string(pattern))
    return _negated(node, negated, 1 + depth(operand), pos(operand) if at is None else at)


def between_pair(node: exp.Between, negated: bool) -> Node:
    """``v >= lo AND v <= hi`` for ``v BETWEEN lo AND hi``, ``v < lo OR v > hi`` for NOT BETWEEN (on copies).

    >>> one, two = literal(1, JavaType.INT), literal(2, JavaType.INT)
    >>> canonical(between_pair(between(prop("a"), one, two), True))
    'a < 1 OR a > 2'
    """
    (low_op, high_op), op = (("<", ">"), "OR") if negated else ((">=", "<="), "AND")
    value, low, high = node.this, node.args["low"], node.args["high"]
    return logic(op, comparison(low_op, value.copy(), low.copy()), comparison(high_op, value.copy(), high.copy()))


def rebuild(node: Node, children: tuple[Node, ...]) -> Node:
    """A node like ``node`` (a comparison, NOT, unary minus, IS NULL or pattern test) over other operands
    (copies of them: a sqlglot node has one parent).

    >>> canonical(rebuild(comparison(">", prop("a"), literal(1, JavaType.INT)), (prop("b"), literal(2, JavaType.INT))))
    'b > 2'
    """
    copies = tuple(c.copy() for c in children)
    inner, negated = negated_predicate(node)
    if isinstance(inner, exp.Is):
        return is_null(copies[0], negated)
    if type(inner) in _MATCH_NAMES:
        return match(_MATCH_NAMES[type(inner)], copies[0], inner.expression.this, negated)
    if isinstance(node, exp.Not):
        return not_(copies[0])
    if isinstance(node, exp.Neg):
        return negate(copies[0])
    return comparison(_OPERATORS[type(node)], copies[0], copies[1])


# -- canonical text -----------------------------------------------------------------------------------


def quote(text: str) -> str:
    """A SQL92 string literal for ``text`` (``'`` doubled).

    >>> print(quote("it's"))
    'it''s'
    """
    return "'" + text.replace("'", "''") + "'"


def canonical(node: Node) -> str:
    """Canonical RocketMQ text of a tree, built with an explicit stack: a deep tree needs no deep recursion.

    >>> canonical(comparison("=", not_(truth(prop("a"))), literal(1, JavaType.INT)))
    '(NOT a) = 1'
    """
    out: list[str] = []
    stack: list[Node | str] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        else:
            stack.extend(reversed(_pieces(item)))
    return "".join(out)


def _pieces(node: Node) -> list[Node | str]:
    """A node's text as text pieces and the child nodes to render in their places."""
    if isinstance(node, exp.Column):
        return [node.name]
    if isinstance(node, exp.Literal):
        return [quote(node.this) if node.is_string else node.this]
    if isinstance(node, exp.Boolean):
        return ["TRUE" if node.this else "FALSE"]
    if isinstance(node, exp.Null):
        return ["NULL"]
    if isinstance(node, exp.Paren):
        return ["(", node.this, ")"]
    if isinstance(node, exp.Neg):
        inner = node.this
        return ["-", inner] if isinstance(inner, _LEAVES) else ["-(", inner, ")"]
    inner, negated = negated_predicate(node)
    if isinstance(node, exp.Not) and not negated:
        return ["NOT ", *_operand(node.this)]
    if isinstance(node, (exp.And, exp.Or)):
        word, out = f" {node.key.upper()} ", list[Node | str]()
        for i, term in enumerate(terms(node)):
            out += ([word] if i else []) + (["(", term, ")"] if isinstance(term, (exp.And, exp.Or)) else [term])
        return out
    if type(inner) in _OPERATORS:
        return [*_operand(inner.this), f" {_OPERATORS[type(inner)]} ", *_operand(inner.expression)]
    neg = "NOT " if negated else ""
    if isinstance(inner, exp.Is):
        return [*_operand(inner.this), f" IS {neg}NULL"]
    if isinstance(inner, exp.Between):
        low, high = _operand(inner.args["low"]), _operand(inner.args["high"])
        return [*_operand(inner.this), f" {neg}BETWEEN ", *low, " AND ", *high]
    if isinstance(inner, exp.In):
        values = ", ".join(quote(v.this) for v in inner.expressions)
        return [*_operand(inner.this), f" {neg}IN ({values})"]
    if type(inner) in _MATCH_NAMES:
        return [*_operand(inner.this), f" {neg}{_MATCH_NAMES[type(inner)]} {quote(inner.expression.this)}"]
    raise TypeError(f"not a SQL92 node: {node!r}")


def _operand(node: Node) -> list[Node | str]:
    """An operand of a comparison: bare if it is atomic, else in parentheses."""
    atomic = isinstance(node, (*_LEAVES, exp.Paren)) or (isinstance(node, exp.Neg) and isinstance(node.this, _LEAVES))
    return [node] if atomic else ["(", node, ")"]
