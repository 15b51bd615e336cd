"""The typed tree of a SQL92 selector, one node class per kind of RocketMQ expression.

Every node has a static :class:`JavaType`: the Java class its value has in RocketMQ's evaluator
whenever it is not null (properties are Strings, ``5`` an Integer, ``5000000000`` and ``-2147483648``
Longs, ``1.5`` a Double, comparisons Booleans, ``-a`` always null). ``str(node)`` is canonical
text that parses back to an equal tree; positions (``pos``) are kept for error messages only.

>>> tree = Logic("AND", (Comparison("=", Property("a"), Literal(1, JavaType.INT)), Not(IsNull(Property("b"), False))))
>>> str(tree.terms[0]), tree.type, tree.is_boolean
('a = 1', <JavaType.BOOLEAN: 'Boolean'>, True)
>>> [type(n).__name__ for n in tree.walk()][:3], len(tree.children())
(['Logic', 'Comparison', 'Property'], 2)
>>> Property("a").type, Property("a").is_boolean, Literal(1.5, JavaType.DOUBLE).type in JavaType.numeric()
(<JavaType.STRING: 'String'>, False, True)
>>> Negate(Property("a")).type, [str(c) for c in Negate(Property("a")).children()]
(<JavaType.NULL: 'null'>, ['a'])
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Iterator, Union

__all__ = [
    "JavaType",
    "JavaValue",
    "Node",
    "Property",
    "Literal",
    "Negate",
    "Not",
    "Truth",
    "Logic",
    "Comparison",
    "IsNull",
    "Between",
    "InList",
    "Match",
    "property_names",
]

#: A value in RocketMQ's evaluator: String, Integer/Long (int), Double (float), Boolean or null.
JavaValue = Union[str, int, float, bool, None]


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
        return _NUMERIC


_NUMERIC = frozenset({JavaType.INT, JavaType.LONG, JavaType.DOUBLE})


@dataclass(frozen=True)
class Node:
    """Base of all nodes. ``pos`` is the 0-based offset of the node's first token in the text;
    ``depth`` counts the operator nodes on the longest path down from this one (0 for a property or
    a literal), computed as the node is built.

    >>> Not(Not(Truth(Property("a")))).depth, Logic("OR", (Property("a"), Not(Truth(Property("b"))))).depth
    (3, 3)
    """

    pos: int = field(default=0, compare=False, repr=False, kw_only=True)
    depth: int = field(default=0, init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        children = self.children()
        if children:
            object.__setattr__(self, "depth", 1 + max(child.depth for child in children))

    @property
    def type(self) -> JavaType:
        return JavaType.BOOLEAN

    @property
    def is_boolean(self) -> bool:
        """True for what RocketMQ calls a BooleanExpression (TRUE/FALSE/NULL literals included)."""
        return True

    def children(self) -> tuple[Node, ...]:
        return ()

    def walk(self) -> Iterator[Node]:
        """This node and all below it, depth first, parents before children (no recursion)."""
        stack: list[Node] = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children()))

    def __str__(self) -> str:
        return _render(self)


@dataclass(frozen=True)
class Property(Node):
    """A message property (``TAGS`` included); its value is the String or null when absent."""

    name: str

    @property
    def type(self) -> JavaType:
        return JavaType.STRING

    @property
    def is_boolean(self) -> bool:
        return False


@dataclass(frozen=True)
class Literal(Node):
    """A constant: ``'x'``, ``5``, ``5000000000``, ``1.5``, ``TRUE``/``FALSE`` or ``NULL``."""

    value: JavaValue
    java_type: JavaType

    @property
    def type(self) -> JavaType:
        return self.java_type

    @property
    def is_boolean(self) -> bool:
        return self.java_type in (JavaType.BOOLEAN, JavaType.NULL)


@dataclass(frozen=True)
class Negate(Node):
    """Unary ``-``: the negated number, null for anything that is not a number."""

    operand: Node

    @property
    def type(self) -> JavaType:
        return self.operand.type if self.operand.type in _NUMERIC else JavaType.NULL

    @property
    def is_boolean(self) -> bool:
        return False

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Not(Node):
    """``NOT x``: null stays null."""

    operand: Node

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Truth(Node):
    """A bare property used as a boolean: FALSE when present (a String is no Boolean), null when absent."""

    operand: Property

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Logic(Node):
    """``AND``/``OR`` of two or more terms, evaluated left to right with short-circuit."""

    op: str
    terms: tuple[Node, ...]

    def children(self) -> tuple[Node, ...]:
        return self.terms


@dataclass(frozen=True)
class Comparison(Node):
    """``= <> > >= < <=`` between two operands (``<>`` is ``NOT (=)``)."""

    op: str
    left: Node
    right: Node

    def children(self) -> tuple[Node, ...]:
        return (self.left, self.right)


@dataclass(frozen=True)
class IsNull(Node):
    """``x IS NULL`` / ``x IS NOT NULL``: never null itself."""

    operand: Node
    negated: bool = False

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Between(Node):
    """``v BETWEEN lo AND hi`` is ``v >= lo AND v <= hi``; NOT BETWEEN is ``v < lo OR v > hi``."""

    value: Node
    low: Node
    high: Node
    negated: bool = False

    def children(self) -> tuple[Node, ...]:
        return (self.value, self.low, self.high)


@dataclass(frozen=True)
class InList(Node):
    """``prop [NOT] IN ('a', 'b')``: string literals only; null when the property is absent."""

    operand: Property
    values: tuple[str, ...]
    negated: bool = False

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


@dataclass(frozen=True)
class Match(Node):
    """``x [NOT] CONTAINS|STARTSWITH|ENDSWITH 'p'``: FALSE (never null) for an absent or non-String
    operand and for an empty pattern."""

    op: str
    operand: Node
    pattern: str
    negated: bool = False

    def children(self) -> tuple[Node, ...]:
        return (self.operand,)


def property_names(node: Node) -> frozenset[str]:
    """Names of all properties a tree reads.

    >>> sorted(property_names(Logic("AND", (Property("a"), Property("b")))))
    ['a', 'b']
    """
    return frozenset(n.name for n in node.walk() if isinstance(n, Property))


def quote(text: str) -> str:
    """A SQL92 string literal for ``text`` (``'`` doubled)."""
    return "'" + text.replace("'", "''") + "'"


def _render(node: Node) -> str:
    """Canonical text, built with an explicit stack: a deep tree needs no deep recursion."""
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
    if isinstance(node, Property):
        return [node.name]
    if isinstance(node, Literal):
        if node.java_type is JavaType.STRING:
            return [quote(str(node.value))]
        if node.java_type in (JavaType.BOOLEAN, JavaType.NULL):
            return [{True: "TRUE", False: "FALSE", None: "NULL"}[node.value]]  # type: ignore[index]
        return [repr(node.value)]
    if isinstance(node, Truth):
        return [node.operand.name]
    if isinstance(node, Negate):
        inner = node.operand
        return ["-", inner] if isinstance(inner, (Property, Literal)) else ["-(", inner, ")"]
    if isinstance(node, Not):
        return ["NOT ", *_operand(node.operand)]
    if isinstance(node, Logic):
        out: list[Node | str] = []
        for i, term in enumerate(node.terms):
            out += ([f" {node.op} "] if i else []) + (["(", term, ")"] if isinstance(term, Logic) else [term])
        return out
    if isinstance(node, Comparison):
        return [*_operand(node.left), f" {node.op} ", *_operand(node.right)]
    neg = "NOT " if getattr(node, "negated", False) else ""
    if isinstance(node, IsNull):
        return [*_operand(node.operand), f" IS {neg}NULL"]
    if isinstance(node, Between):
        return [*_operand(node.value), f" {neg}BETWEEN ", *_operand(node.low), " AND ", *_operand(node.high)]
    if isinstance(node, InList):
        return [f"{node.operand.name} {neg}IN ({', '.join(quote(v) for v in node.values)})"]
    if isinstance(node, Match):
        return [*_operand(node.operand), f" {neg}{node.op} {quote(node.pattern)}"]
    raise TypeError(f"not a SQL92 node: {node!r}")


def _operand(node: Node) -> list[Node | str]:
    """An operand of a comparison: bare if it is atomic, else in parentheses."""
    atomic = isinstance(node, (Property, Literal, Truth)) or (
        isinstance(node, Negate) and isinstance(node.operand, (Property, Literal))
    )
    return [node] if atomic else ["(", node, ")"]
