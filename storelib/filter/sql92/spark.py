"""SQL92 trees compiled to a pyspark Column over a ``map<string,string>`` column of properties.

Every boolean node becomes one int Column holding its state in RocketMQ's evaluator; no SQL text, no UDF.
How, and why it stays linear: ``docs/internals.md``.

>>> from storelib.filter.sql92 import parse_sql92
>>> df = spark.createDataFrame([({"a": "7"},), ({"a": "x"},), ({},)], "properties map<string,string>")
>>> df.where(to_column(parse_sql92("a > 5").tree)).count()
1
"""

from __future__ import annotations

import operator
from typing import Callable, Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F
from sqlglot import exp

from storelib.filter.sql92.java import ASCII_DIGITS, JAVA_DOUBLE_SYNTAX, JAVA_INT_SYNTAX, UNICODE_DIGITS
from storelib.filter.sql92.states import (
    ERROR,
    FALSE,
    LOGIC_TABLES,
    NULL,
    TRUE,
    constant_comparison,
    outcome_table,
    outcomes,
    reads_text,
    state_of,
)
from storelib.filter.sql92.tree import (
    MATCHES,
    JavaType,
    Node,
    between_pair,
    is_property,
    is_truth,
    negated_predicate,
    property_names,
    terms,
)

__all__ = ["to_column", "to_columns"]

S, B, D = JavaType.STRING, JavaType.BOOLEAN, JavaType.DOUBLE
_SPARK_TYPES = {JavaType.INT: "int", JavaType.LONG: "bigint", D: "double"}
_JAVA_TRIM = r"^[\x00-\x20]+|[\x00-\x20]+\z"  # String.trim; \z, as $ also matches before a final \n
_TESTS = {MATCHES["CONTAINS"]: F.contains, MATCHES["STARTSWITH"]: F.startswith, MATCHES["ENDSWITH"]: F.endswith}
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_ORDER: dict[str, Callable[[Column, Column], Column]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


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


class _Compiler:
    """One compilation; caches every Column it may need again (each is a py4j round trip)."""

    def __init__(self, props: Column):
        self.props = props
        self._columns: dict[tuple[object, ...], Column] = {}

    def _cached(self, key: tuple[object, ...], build: Callable[[], Column]) -> Column:
        if key not in self._columns:
            self._columns[key] = build()
        return self._columns[key]

    def prop(self, node: Node) -> Column:
        return self._cached(("prop", node.name), lambda: F.try_element_at(self.props, F.lit(node.name)))

    def absent(self, node: Node) -> Column:
        return self._cached(("absent", node.name), lambda: F.isnull(self.prop(node)))

    def truthy(self, node: Node) -> Column:
        """Boolean.valueOf of the property: "true" in any case (FALSE when absent)."""
        return self._cached(("truthy", node.name), lambda: F.equal_null(F.lower(self.prop(node)), F.lit("true")))

    def parsed(self, node: Node, java_type: JavaType) -> Column:
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
            return self.code(state_of(node))
        if isinstance(node, exp.Paren):
            return self.state(node.this)
        if is_truth(node):
            return self.cases((self.absent(node), NULL), otherwise=FALSE)
        if isinstance(node, (exp.And, exp.Or)):
            table = LOGIC_TABLES[node.key.upper()]
            # AND and OR are associative over the four states: a balanced fold gives the same state
            # with a plan log2(n) deep, where a left fold of a long chain overflows Spark's stack
            states = [self.state(t) for t in terms(node)]
            while len(states) > 1:
                pairs = [self.lookup(table, (a, b)) for a, b in zip(states[::2], states[1::2])]
                states = pairs + states[len(pairs) * 2 :]
            return states[0]
        inner, negated = negated_predicate(node)
        if isinstance(inner, exp.Between):
            return self.state(between_pair(inner, negated))
        if isinstance(node, _COMPARISONS) and reads_text(node):
            return self._text_comparison(node)
        if isinstance(inner, (exp.Is, exp.In, *MATCHES.values())) and is_property(inner.this):
            return self._property_test(inner, negated)
        if isinstance(node, exp.Neg) and is_property(node.this):
            return self.code(NULL)  # -'text' is null
        return self._by_table(node)

    def _by_table(self, node: Node) -> Column:
        """A node whose children are constants, states, or properties only tested for null/"true"."""
        children, table = outcome_table(node)
        assert children, "a node reading properties has a non-constant child"
        indexes = [
            self.cases((self.absent(c), 0), (self.truthy(c), 1), otherwise=2) if is_property(c) else self.state(c)
            for c in children
        ]
        return self.lookup(table, indexes)  # type: ignore[arg-type]

    # -- what depends on property text -----------------------------------------------------------

    def _text_comparison(self, node: Node) -> Column:
        if is_property(node.this) and is_property(node.expression):
            return self._two_properties(node.this, node.expression, *outcomes(node))
        c = constant_comparison(node)
        absent_ = self.absent(c.prop)
        if c.java_type is S:
            return self.cases(
                (absent_, c.absent), (F.equal_null(self.prop(c.prop), F.lit(c.value)), c.hit), otherwise=c.miss
            )
        if c.java_type is B:
            if c.throws:
                return self.cases((absent_, c.absent), otherwise=ERROR)
            return self.cases(
                (absent_, c.absent), (F.equal_null(self.truthy(c.prop), F.lit(c.value)), c.hit), otherwise=c.miss
            )
        # A number: the sign of compare(property, constant) picks the outcome; null sign: absent or unparsable.
        # A CASE over the sign, not a lookup in a literal map: a map lookup per row and comparison
        # made CalcBitMap's 32 subscriptions about twice as slow.
        sign = self.sign(c.prop, c.java_type, c.value)  # type: ignore[arg-type]
        outcome = (
            F.when(sign < 0, self.code(c.by_sign[0]))
            .when(sign == 0, self.code(c.by_sign[1]))
            .when(sign > 0, self.code(c.by_sign[2]))
        )
        return F.nvl(outcome, self.cases((absent_, c.absent), otherwise=ERROR))

    def sign(self, prop: Node, java_type: JavaType, value: int | float) -> Column:
        """Sign (-1.0/0.0/1.0) of Java's compare of the parsed property with ``value``; NULL if the
        property is absent or does not parse. NaN is above everything. An int/long difference that
        overflows (try_subtract gives NULL) has the sign of the property: they have opposite signs."""
        parsed = self.parsed(prop, java_type)
        sign = F.signum(F.try_subtract(parsed, F.lit(value)))
        return F.nanvl(sign, F.lit(1.0)) if java_type is D else F.nvl(sign, F.signum(parsed))

    def _two_properties(self, left: Node, right: Node, op: str, hit: int, miss: int) -> Column:
        a, b, a_absent, b_absent = self.prop(left), self.prop(right), self.absent(left), self.absent(right)
        if op == "=":  # null = null is TRUE, null = x null, x = null FALSE, else String.equals
            return self.cases((F.equal_null(a, b), hit), (a_absent, NULL), otherwise=miss)
        x, y = self.parsed(left, D), self.parsed(right, D)  # two Strings are ordered as doubles
        return self.cases(
            (a_absent, NULL),
            (b_absent, NULL),
            (F.isnull(x), ERROR),
            (F.isnull(y), ERROR),
            (_double_compare(op, x, y), hit),
            otherwise=miss,
        )

    def _property_test(self, node: Node, negated: bool) -> Column:
        hit, miss = (FALSE, TRUE) if negated else (TRUE, FALSE)
        absent, p = self.absent(node.this), self.prop(node.this)
        if isinstance(node, exp.Is):
            return self.cases((absent, hit), otherwise=miss)
        if isinstance(node, exp.In):
            values = [e.this for e in node.expressions]
            return self.cases((absent, NULL), (F.array_contains(_string_array(values), p), hit), otherwise=miss)
        pattern = node.expression.this
        if not pattern:  # an empty pattern is FALSE, even negated
            return self.code(FALSE)
        found = _TESTS[type(node)](p, F.lit(pattern))
        return self.cases((absent, FALSE), (found, hit), otherwise=miss)


def _string_array(values: Sequence[str]) -> Column:
    """An array<string> literal in a few calls whatever its length: one string split on a
    character none of the values contains."""
    separator = next(chr(c) for c in range(1, 0xD800) if not any(chr(c) in v for v in values))
    return F.split(F.lit(separator.join(values)), f"\\x{{{ord(separator):x}}}")


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
    sign = (
        F.when(a < b, F.lit(-1))
        .when(a > b, F.lit(1))
        .when(a_neg_zero & ~b_neg_zero, F.lit(-1))
        .when(b_neg_zero & ~a_neg_zero, F.lit(1))
        .otherwise(F.lit(0))
    )
    return _ORDER[op](sign, F.lit(0))
