"""SQL92 trees compiled to a pyspark Column over a ``map<string,string>`` column of properties.

Every boolean node becomes one non-null int Column, its *state* in RocketMQ's evaluator: 0 FALSE,
1 TRUE, 2 null, 3 an exception. A parent reads each child's state once, through a small lookup
table that the Python reference evaluator fills in (so AND/OR short-circuit, ``NOT null`` and the
like are RocketMQ's by construction), which keeps the plan linear in the size of the expression.
Only what depends on property text is written out in Spark: null tests, string equality,
IN/CONTAINS, and the Java number parsers (a regular-expression guard and ``try_cast``, so no
property value can fail a query, ANSI mode on or off). Subtrees that read no property are folded on
the driver. Columns are built from ``pyspark.sql.functions`` (no SQL text, no UDF), preferring
functions to Column methods and caching what repeats: in classic PySpark each Column method costs
about eleven py4j round trips (call-site capture), a function three.

>>> from storelib.filter.sql92 import parse_sql92
>>> df = spark.createDataFrame([({"a": "7"},), ({"a": "x"},), ({},)], "properties map<string,string>")
>>> df.where(to_column(parse_sql92("a > 5").tree)).count()
1
"""

from __future__ import annotations

import operator
from dataclasses import replace
from functools import reduce
from typing import Any, Callable, Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F

from storelib.filter.sql92_eval import (ASCII_DIGITS, JAVA_DOUBLE_SYNTAX, JAVA_INT_SYNTAX, UNICODE_DIGITS,
                                        JavaEvaluationError, node_value)
from storelib.filter.sql92_tree import (Between, Comparison, InList, IsNull, JavaType, Literal, Logic, Match, Negate,
                                        Node, Not, Property, Truth, property_names)

__all__ = ["to_column", "to_columns", "to_columns_with_inputs"]

FALSE, TRUE, NULL, ERROR = 0, 1, 2, 3
S, B, D = JavaType.STRING, JavaType.BOOLEAN, JavaType.DOUBLE
_SPARK_TYPES = {JavaType.INT: "int", JavaType.LONG: "bigint", D: "double"}
_JAVA_TRIM = r"^[\x00-\x20]+|[\x00-\x20]+\z"  # String.trim; \z, as $ also matches before a final \n
_ORDER: dict[str, Callable[[Any, Any], Any]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "=": operator.eq}
_TESTS = {"CONTAINS": F.contains, "STARTSWITH": F.startswith, "ENDSWITH": F.endswith}
# Stand-ins for a child whose state is only known per row: one node per state (0..3) that
# evaluates to FALSE, TRUE, null or throws; a property is classed as absent, "true" (any case), other.
_THROWS = Comparison("=", Literal("x", S), Literal(1, JavaType.INT))
_STAND_INS = {B: (Literal(False, B), Literal(True, B), Literal(None, B), _THROWS),
              JavaType.NULL: (Literal(None, JavaType.NULL),) * 3 + (Negate(_THROWS),)}
_PROPERTY_STAND_INS = (Literal(None, S), Literal("true", S), Literal("x", S))
_CHILD_FIELDS = {Comparison: ("left", "right"), Not: ("operand",), Negate: ("operand",),
                 IsNull: ("operand",), Match: ("operand",)}


def _code(node: Node) -> int:
    """The state of a node that reads no property, from the reference evaluator."""
    try:
        value = node_value(node, {})
    except JavaEvaluationError:
        return ERROR
    return NULL if value is None else TRUE if value is True else FALSE


#: AND/OR of two states: ``table[left][right]``.
_LOGIC_TABLES = {op: [[_code(Logic(op, (a, b))) for b in _STAND_INS[B]] for a in _STAND_INS[B]] for op in ("AND", "OR")}


def to_column(tree: Node, properties: Column | str = "properties") -> Column:
    """Boolean Column, TRUE exactly where RocketMQ's evaluator returns Boolean TRUE, else FALSE.

    >>> from storelib.filter.sql92 import parse_sql92
    >>> df = spark.createDataFrame([({"TAGS": "TagA"},), ({},)], "props map<string,string>")
    >>> [r[0] for r in df.select(to_column(parse_sql92("TAGS IN ('TagA')").tree, "props")).collect()]
    [True, False]
    """
    return to_columns([tree], properties)[0]


def to_columns(trees: Sequence[Node], properties: Column | str = "properties") -> list[Column]:
    """:func:`to_column` of several trees over the same properties, sharing property look-ups,
    number parsing and tables (e.g. all SQL92 subscriptions of a topic, evaluated at once).

    >>> from storelib.filter.sql92 import parse_sql92
    >>> a, b = to_columns([parse_sql92(t).tree for t in ("a > 5", "a < 2")])
    >>> spark.createDataFrame([({"a": "1"},)], "properties map<string,string>").select(a, b).first()[:]
    (False, True)
    """
    compiler = _Compiler(F.col(properties) if isinstance(properties, str) else properties)
    true = compiler.code(TRUE)
    return [F.equal_null(compiler.state(tree), true) for tree in trees]


#: What :func:`to_columns_with_inputs` computes once per row: property look-ups and parsed numbers.
_INPUT_KINDS = ("prop", "truthy", "parsed")


def to_columns_with_inputs(trees: Sequence[Node], properties: Column | str = "properties",
                           prefix: str = "_sql92_in") -> tuple[list[Column], list[Column]]:
    """:func:`to_columns` in two steps, for many expressions over many rows (dispatch's bitmaps).

    Returns ``(inputs, predicates)``: select ``inputs`` (named ``<prefix><n>``: each property
    look-up and each Java number parse the trees need, once) next to the rows first, then the
    ``predicates``, which read those columns instead of parsing the same text again per expression.

    >>> from storelib.filter.sql92 import parse_sql92
    >>> inputs, preds = to_columns_with_inputs([parse_sql92("a > 5").tree])
    >>> df = spark.createDataFrame([({"a": "7"},)], "properties map<string,string>")
    >>> df.select("*", *inputs).select(*preds).first()[0]
    True
    """
    props = F.col(properties) if isinstance(properties, str) else properties
    first = _Compiler(props)
    for tree in trees:
        first.state(tree)
    keys = [k for k in first._columns if k[0] in _INPUT_KINDS]
    inputs = [first._columns[k].alias(f"{prefix}{i}") for i, k in enumerate(keys)]
    second = _Compiler(props, {k: F.col(f"{prefix}{i}") for i, k in enumerate(keys)})
    true = second.code(TRUE)
    return inputs, [F.equal_null(second.state(tree), true) for tree in trees]


class _Compiler:
    """One compilation; caches every Column it may need again (each is a py4j round trip)."""

    def __init__(self, props: Column, known: dict[tuple[object, ...], Column] | None = None):
        self.props = props
        self._columns: dict[tuple[object, ...], Column] = dict(known or {})

    def _cached(self, key: tuple[object, ...], build: Callable[[], Column]) -> Column:
        if key not in self._columns:
            self._columns[key] = build()
        return self._columns[key]

    def prop(self, node: Property) -> Column:
        return self._cached(("prop", node.name), lambda: F.try_element_at(self.props, F.lit(node.name)))

    def absent(self, node: Property) -> Column:
        return self._cached(("absent", node.name), lambda: F.isnull(self.prop(node)))

    def truthy(self, node: Property) -> Column:
        """Boolean.valueOf of the property: "true" in any case (FALSE when absent)."""
        return self._cached(("truthy", node.name), lambda: F.equal_null(F.lower(self.prop(node)), F.lit("true")))

    def parsed(self, node: Property, java_type: JavaType) -> Column:
        """Integer/Long/Double.valueOf of the property, NULL where Java throws (or it is absent)."""
        return self._cached(("parsed", node.name, java_type), lambda: _parse(self.prop(node), java_type))

    def code(self, state: int) -> Column:
        return self._cached(("code", state), lambda: F.lit(state))

    def lookup(self, table: list, indexes: Sequence[Column]) -> Column:
        """``table[i][j]...`` for int Columns ``indexes`` (``table`` nested as deep as there are)."""
        def build(cell: list | int) -> Column:
            return F.array(*(build(c) for c in cell)) if isinstance(cell, list) else self.code(cell)
        result = self._cached(("table", repr(table)), lambda: build(table))
        for index in indexes:
            result = F.get(result, index)
        return result

    def cases(self, *branches: tuple[Column, int], otherwise: int) -> Column:
        """CASE WHEN ... THEN state ... ELSE state END, as nvl(when(..), nvl(when(..), ..))."""
        result = self.code(otherwise)
        for condition, state in reversed(branches):
            result = F.nvl(F.when(condition, self.code(state)), result)
        return result

    # -- states ---------------------------------------------------------------------------------

    def state(self, node: Node) -> Column:
        """The state Column of a boolean (or always-null) node."""
        if not property_names(node):
            return self.code(_code(node))
        if isinstance(node, Truth):
            return self.cases((self.absent(node.operand), NULL), otherwise=FALSE)
        if isinstance(node, Logic):
            table = _LOGIC_TABLES[node.op]
            return reduce(lambda a, b: self.lookup(table, (a, b)), (self.state(t) for t in node.terms))
        if isinstance(node, Between):
            ops, logic = (("<", ">"), "OR") if node.negated else ((">=", "<="), "AND")
            pair = (Comparison(ops[0], node.value, node.low), Comparison(ops[1], node.value, node.high))
            return self.state(Logic(logic, pair))
        if isinstance(node, Comparison) and _reads_text(node):
            return self._text_comparison(node)
        if isinstance(node, (IsNull, InList, Match)) and isinstance(node.operand, Property):
            return self._property_test(node)
        if isinstance(node, Negate) and isinstance(node.operand, Property):
            return self.code(NULL)  # -'text' is null
        return self._by_table(node)

    def _by_table(self, node: Node) -> Column:
        """A node whose children are constants, states, or properties only tested for null/"true"."""
        fields = _CHILD_FIELDS[type(node)]
        axes: list[tuple[Column | None, Sequence[Node]]] = []
        for name in fields:
            child = getattr(node, name)
            if not property_names(child):
                axes.append((None, (child,)))
            elif isinstance(child, Property):
                kind = self.cases((self.absent(child), 0), (self.truthy(child), 1), otherwise=2)
                axes.append((kind, _PROPERTY_STAND_INS))
            else:
                axes.append((self.state(child), _STAND_INS[child.type]))
        def fill(axis: int, chosen: tuple[Node, ...]) -> list | int:
            if axis == len(axes):
                changes: dict[str, Any] = dict(zip(fields, chosen))
                return _code(replace(node, **changes))
            column, stand_ins = axes[axis]
            if column is None:  # a constant child: no dimension of its own
                return fill(axis + 1, chosen + (stand_ins[0],))
            return [fill(axis + 1, chosen + (stand_in,)) for stand_in in stand_ins]
        indexes = [column for column, _ in axes if column is not None]
        assert indexes, "a node reading properties has a non-constant child"
        return self.lookup(fill(0, ()), indexes)  # type: ignore[arg-type]

    # -- what depends on property text -----------------------------------------------------------

    def _text_comparison(self, node: Comparison) -> Column:
        op, hit, miss = node.op, TRUE, FALSE
        if op == "<>":  # NOT (=): swap the outcomes, null stays null
            op, hit, miss = "=", FALSE, TRUE
        if isinstance(node.left, Property) and isinstance(node.right, Property):
            return self._two_properties(op, node.left, node.right, hit, miss)
        prop_left = isinstance(node.left, Property)
        prop: Property = node.left if prop_left else node.right  # type: ignore[assignment]
        constant = node.right if prop_left else node.left
        value, java_type, absent_ = node_value(constant, {}), constant.type, self.absent(prop)
        # An absent property gives null, except in 'x' = prop, FALSE (so 'x' <> prop is TRUE).
        absent = miss if op == "=" and not prop_left else NULL
        if java_type is S:
            return self.cases((absent_, absent), (F.equal_null(self.prop(prop), F.lit(value)), hit), otherwise=miss)
        if java_type is B:
            if not prop_left:  # Boolean = String: RocketMQ casts the Boolean to String and throws
                return self.cases((absent_, absent), otherwise=ERROR)
            return self.cases((absent_, absent), (F.equal_null(self.truthy(prop), F.lit(value)), hit), otherwise=miss)
        # A number: the sign of compare(property, constant) picks the outcome; null sign: absent or unparsable.
        # A CASE over the sign, not a lookup in a literal map: a map lookup per row and comparison
        # made CalcBitMap's 32 subscriptions about twice as slow.
        outcomes = {s: hit if _ORDER[op](s if prop_left else -s, 0) else miss for s in (-1, 0, 1)}
        sign = self.sign(prop, java_type, value)
        outcome = (F.when(sign < 0, self.code(outcomes[-1])).when(sign == 0, self.code(outcomes[0]))
                   .when(sign > 0, self.code(outcomes[1])))
        return F.nvl(outcome, self.cases((absent_, absent), otherwise=ERROR))

    def sign(self, prop: Property, java_type: JavaType, value: int | float) -> Column:
        """Sign (-1.0/0.0/1.0) of Java's compare of the parsed property with ``value``; NULL if the
        property is absent or does not parse. NaN is above everything. An int/long difference that
        overflows (try_subtract gives NULL) has the sign of the property: they have opposite signs."""
        parsed = self.parsed(prop, java_type)
        sign = F.signum(F.try_subtract(parsed, F.lit(value)))
        return F.nanvl(sign, F.lit(1.0)) if java_type is D else F.nvl(sign, F.signum(parsed))

    def _two_properties(self, op: str, left: Property, right: Property, hit: int, miss: int) -> Column:
        a, b, a_absent, b_absent = self.prop(left), self.prop(right), self.absent(left), self.absent(right)
        if op == "=":  # null = null is TRUE, null = x null, x = null FALSE, else String.equals
            return self.cases((F.equal_null(a, b), hit), (a_absent, NULL), otherwise=miss)
        x, y = self.parsed(left, D), self.parsed(right, D)  # two Strings are ordered as doubles
        return self.cases((a_absent, NULL), (b_absent, NULL), (F.isnull(x), ERROR), (F.isnull(y), ERROR),
                          (_double_compare(op, x, y), hit), otherwise=miss)

    def _property_test(self, node: IsNull | InList | Match) -> Column:
        hit, miss = (FALSE, TRUE) if node.negated else (TRUE, FALSE)
        absent, p = self.absent(node.operand), self.prop(node.operand)  # type: ignore[arg-type]
        if isinstance(node, IsNull):
            return self.cases((absent, hit), otherwise=miss)
        if isinstance(node, InList):
            return self.cases((absent, NULL), (F.array_contains(_string_array(node.values), p), hit), otherwise=miss)
        if not node.pattern:  # an empty pattern is FALSE, even negated
            return self.code(FALSE)
        found = _TESTS[node.op](p, F.lit(node.pattern))
        return self.cases((absent, FALSE), (found, hit), otherwise=miss)


def _string_array(values: Sequence[str]) -> Column:
    """An array<string> literal in a few calls whatever its length: one string split on a
    character none of the values contains."""
    separator = next(chr(c) for c in range(1, 0xD800) if not any(chr(c) in v for v in values))
    return F.split(F.lit(separator.join(values)), f"\\x{{{ord(separator):x}}}")


def _reads_text(node: Comparison) -> bool:
    """Property vs property, or property vs a constant that is not null and does not throw (and is
    a number when ordering); anything else only needs to know whether a property is null/"true"."""
    for side in (node.left, node.right):
        if isinstance(side, Property):
            continue
        if property_names(side):
            return False
        try:
            value = node_value(side, {})
        except JavaEvaluationError:
            return False
        if value is None or (node.op not in ("=", "<>") and side.type not in _SPARK_TYPES):
            return False
    return True


def _parse(text: Column, java_type: JavaType) -> Column:
    """Integer/Long/Double.valueOf of a string Column, NULL where Java throws. The syntax guard is a
    regexp_extract (empty, so NULL after try_cast, unless the whole text is Java syntax), which
    keeps the text a single reference in the plan."""
    if java_type is D:
        candidate, syntax = F.regexp_replace(text, _JAVA_TRIM, ""), JAVA_DOUBLE_SYNTAX
    else:
        # Plain ASCII digits (nearly every value) skip the translation of Unicode digits.
        ascii_only = F.regexp_like(text, F.lit(r"^[+-]?[0-9]+\z"))
        candidate = F.when(ascii_only, text).otherwise(F.translate(text, UNICODE_DIGITS, ASCII_DIGITS))
        syntax = JAVA_INT_SYNTAX
    return F.regexp_extract(candidate, rf"^({syntax})\z", 1).try_cast(_SPARK_TYPES[java_type])


def _double_compare(op: str, a: Column, b: Column) -> Column:
    """``Double.compare(a, b) op 0``. Spark already puts NaN above everything and equal to itself,
    but it has -0.0 = 0.0 where Java puts -0.0 first."""
    a_neg_zero = (a == F.lit(0.0)) & a.cast("string").startswith("-")
    b_neg_zero = (b == F.lit(0.0)) & b.cast("string").startswith("-")
    sign = (F.when(a < b, F.lit(-1)).when(a > b, F.lit(1))
            .when(a_neg_zero & ~b_neg_zero, F.lit(-1)).when(b_neg_zero & ~a_neg_zero, F.lit(1))
            .otherwise(F.lit(0)))
    return _ORDER[op](sign, F.lit(0))
