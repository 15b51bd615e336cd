"""States of SQL92 nodes, and the tables that combine them, for compilations of the tree (sqlglot expressions).

A compiled SQL92 tree (a Spark Column in :mod:`~storelib.filter.sql92.spark`, numpy arrays over
Arrow batches in :mod:`~storelib.filter.sql92.arrow`) gives each boolean node a *state* per row, its
outcome in RocketMQ's evaluator: :data:`FALSE`, :data:`TRUE`, :data:`NULL` or :data:`ERROR` (an
exception, which means no match). A parent reads each child's state through a table that the
reference evaluator (:mod:`~storelib.filter.sql92.java`) fills in, by evaluating the parent over
stand-in children that have each state; so AND/OR short-circuit, ``NOT null`` and the like are
RocketMQ's by construction, in every compilation alike. Only what depends on property text (null
tests, string equality, number parsing) is compiled by hand; :func:`constant_comparison` says what
a property compared with a constant gives.

>>> from storelib.filter.sql92 import parse_sql92
>>> LOGIC_TABLES["AND"][NULL][FALSE], LOGIC_TABLES["OR"][ERROR][TRUE], state_of(parse_sql92("1 = 1.0").tree)
(0, 3, 1)
>>> children, table = outcome_table(parse_sql92("(a > 1) = TRUE").tree)
>>> [c.sql() for c in children], table                     # by the state of a > 1
(['a > 1'], [0, 1, 2, 3])
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from sqlglot import exp

from storelib.filter.sql92.java import JavaEvaluationError, node_value
from storelib.filter.sql92.tree import (
    JavaType,
    JavaValue,
    Node,
    comparison,
    is_property,
    java_type,
    literal,
    logic,
    negate,
    operands,
    property_names,
    rebuild,
)

__all__ = [
    "FALSE",
    "TRUE",
    "NULL",
    "ERROR",
    "state_of",
    "LOGIC_TABLES",
    "outcome_table",
    "reads_text",
    "ConstantComparison",
    "constant_comparison",
    "outcomes",
    "PROPERTY_CLASSES",
    "OPERATORS",
]

#: The states of a boolean node: FALSE, TRUE, null, an exception.
FALSE, TRUE, NULL, ERROR = 0, 1, 2, 3
#: What a property read as a boolean operand can be: absent, "true" in any case, anything else.
PROPERTY_CLASSES = ("absent", "true", "other")

S, B = JavaType.STRING, JavaType.BOOLEAN
_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
    "=": operator.eq,
}
# Stand-ins for a child whose state is only known per row: one node per state (0..3) that
# evaluates to FALSE, TRUE, null or throws; for a property, one per class of PROPERTY_CLASSES.
_THROWS = comparison("=", literal("x", S), literal(1, JavaType.INT))
_STAND_INS = {
    B: (literal(False, B), literal(True, B), literal(None, B), _THROWS),
    JavaType.NULL: (literal(None, JavaType.NULL),) * 3 + (negate(_THROWS.copy()),),
}
_PROPERTY_STAND_INS = (literal(None, S), literal("true", S), literal("x", S))
#: The operator of each comparison expression.
OPERATORS: dict[type[exp.Expr], str] = {
    exp.EQ: "=",
    exp.NEQ: "<>",
    exp.GT: ">",
    exp.GTE: ">=",
    exp.LT: "<",
    exp.LTE: "<=",
}


def state_of(node: Node) -> int:
    """The state of a node that reads no property, from the reference evaluator.

    >>> from storelib.filter.sql92 import parse_sql92
    >>> [state_of(parse_sql92(t).tree) for t in ("FALSE", "TRUE", "NULL", "'x' = 1 OR TRUE")]
    [0, 1, 2, 3]
    """
    try:
        value = node_value(node, {})
    except JavaEvaluationError:
        return ERROR
    return NULL if value is None else TRUE if value is True else FALSE


#: AND/OR of two states: ``LOGIC_TABLES[op][left][right]``.
LOGIC_TABLES = {
    op: [[state_of(logic(op, a.copy(), b.copy())) for b in _STAND_INS[B]] for a in _STAND_INS[B]]
    for op in ("AND", "OR")
}


def outcome_table(node: Node) -> tuple[list[Node], list | int]:
    """``(children, table)`` for a comparison, NOT, unary minus, IS NULL or CONTAINS-like node whose
    outcome depends on property text only through null tests and ``Boolean.valueOf``: the children
    that read properties, in order, and the node's state nested by each one's index, the index of a
    property child being its class (:data:`PROPERTY_CLASSES`), of another child its state.

    >>> from storelib.filter.sql92 import parse_sql92
    >>> outcome_table(parse_sql92("NOT (a > 1)").tree)[1]      # by the state of a > 1
    [1, 0, 2, 3]
    >>> children, table = outcome_table(parse_sql92("(b > 1) = a").tree)
    >>> [c.sql() for c in children], table[FALSE]       # a absent, "true", other: Boolean vs String throws
    (['b > 1', 'a'], [0, 3, 3])
    """
    varying: list[Node] = []
    axes: list[Sequence[Node]] = []
    for child in operands(node):
        if not property_names(child):
            axes.append((child,))
            continue
        varying.append(child)
        axes.append(_PROPERTY_STAND_INS if is_property(child) else _STAND_INS[java_type(child)])

    def fill(axis: int, chosen: tuple[Node, ...]) -> list | int:
        if axis == len(axes):
            return state_of(rebuild(node, chosen))
        if len(axes[axis]) == 1:  # a constant child: no dimension of its own
            return fill(axis + 1, chosen + (axes[axis][0],))
        return [fill(axis + 1, chosen + (stand_in,)) for stand_in in axes[axis]]

    return varying, fill(0, ())


def reads_text(node: Node) -> bool:
    """Whether a comparison depends on property text beyond null tests: property vs property, or
    property vs a constant that is not null and does not throw (and is a number when ordering).

    >>> from storelib.filter.sql92 import parse_sql92
    >>> [reads_text(parse_sql92(t).tree) for t in ("a > 5", "a = b", "-a > 5", "a = TRUE", "a = (b > 1)")]
    [True, True, False, True, False]
    """
    for side in (node.this, node.expression):
        if is_property(side):
            continue
        if property_names(side):
            return False
        try:
            value = node_value(side, {})
        except JavaEvaluationError:
            return False
        if value is None or (OPERATORS[type(node)] not in ("=", "<>") and java_type(side) not in JavaType.numeric()):
            return False
    return True


@dataclass(frozen=True)
class ConstantComparison:
    """What ``property op constant`` (either side) gives, for a comparison where :func:`reads_text`
    holds and one side is a constant: ``absent`` when the property is absent; for a String or
    Boolean constant ``hit`` when the property equals it (Boolean: by ``Boolean.valueOf``), else
    ``miss``; for a number ``by_sign[s + 1]`` where ``s`` is the sign of Java's compare of the
    parsed property with ``value``, :data:`ERROR` when the property does not parse.

    >>> from storelib.filter.sql92 import parse_sql92
    >>> c = constant_comparison(parse_sql92("5 < a").tree)
    >>> c.prop.name, c.value, c.java_type.value, c.by_sign, c.absent
    ('a', 5, 'Integer', (0, 0, 1), 2)
    """

    prop: exp.Column
    value: JavaValue
    java_type: JavaType
    absent: int
    hit: int
    miss: int
    by_sign: tuple[int, int, int]
    #: A Boolean compared with a present property: RocketMQ casts the Boolean to String and throws.
    throws: bool = False


def constant_comparison(node: Node) -> ConstantComparison:
    """The :class:`ConstantComparison` of a property compared with a constant (see the class).

    >>> from storelib.filter.sql92 import parse_sql92
    >>> c = constant_comparison(parse_sql92("'x' <> s").tree)       # an absent s: 'x' = s is FALSE, so TRUE
    >>> c.prop.name, c.value, c.absent, c.hit, c.miss
    ('s', 'x', 1, 0, 1)
    """
    op, hit, miss = outcomes(node)
    prop_left = is_property(node.this)
    prop: exp.Column = node.this if prop_left else node.expression
    constant = node.expression if prop_left else node.this
    # An absent property gives null, except in 'x' = prop, FALSE (so 'x' <> prop is TRUE).
    absent = miss if op == "=" and not prop_left else NULL
    by_sign = tuple(hit if _ORDER[op](s if prop_left else -s, 0) else miss for s in (-1, 0, 1))
    return ConstantComparison(
        prop,
        node_value(constant, {}),
        java_type(constant),
        absent,
        hit,
        miss,
        by_sign,  # type: ignore[arg-type]
        throws=java_type(constant) is B and not prop_left,
    )


def outcomes(node: Node) -> tuple[str, int, int]:
    """``(op, hit, miss)``: the states where ``op`` holds and where it does not; ``<>`` is ``NOT (=)``
    (the outcomes swapped; null stays null).

    >>> from storelib.filter.sql92 import parse_sql92
    >>> outcomes(parse_sql92("a <> b").tree), outcomes(parse_sql92("a > b").tree)
    (('=', 0, 1), ('>', 1, 0))
    """
    op = OPERATORS[type(node)]
    return ("=", FALSE, TRUE) if op == "<>" else (op, TRUE, FALSE)
