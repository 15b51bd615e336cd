"""SQL92 trees evaluated over Arrow arrays of properties, vectorized: pyarrow.compute and numpy.

Details: ``docs/internals.md``, section storelib.filter.sql92.arrow.

>>> from storelib.filter.sql92 import parse_sql92
>>> props = pa.array([[("a", "7")], [("a", "x")], [], [("a", "+0５")]], pa.map_(pa.string(), pa.string()))
>>> evaluate_batch(parse_sql92("a > 5").tree, props).to_pylist()
[True, False, False, False]
>>> [m.tolist() for m in ArrowSql92([parse_sql92("a = 5").tree, parse_sql92("a IS NULL OR a > 1").tree]).matches(props)]
[[False, False, False, True], [True, False, True, True]]
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from storelib.encoding.properties import property_array
from storelib.filter.sql92.java import ASCII_DIGITS, JAVA_DOUBLE_SYNTAX, UNICODE_DIGITS, java_parse_double
from storelib.filter.sql92.states import (
    ERROR,
    FALSE,
    LOGIC_TABLES,
    NULL,
    TRUE,
    ConstantComparison,
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

__all__ = ["ArrowSql92", "evaluate_batch"]

#: A state per row (uint8), or one state for every row.
States = np.ndarray | np.uint8

S, B, D = JavaType.STRING, JavaType.BOOLEAN, JavaType.DOUBLE
_INT_BOUNDS = {JavaType.INT: 2**31, JavaType.LONG: 2**63}
_JAVA_TRIMMED = "".join(map(chr, range(33)))  # String.trim removes every char <= ' '
_DOUBLE_RE = rf"^(?:{JAVA_DOUBLE_SYNTAX})\z"
#: Per ASCII digit, a character class of the other Unicode digits of that value (Integer.valueOf).
_DIGIT_CLASSES = tuple(
    (f"[{''.join(u for u, a in zip(UNICODE_DIGITS, ASCII_DIGITS) if a == d)}]", d) for d in "0123456789"
)
_TESTS = {"CONTAINS": pc.match_substring, "STARTSWITH": pc.starts_with, "ENDSWITH": pc.ends_with}
_MATCH_NAMES = {kind: name for name, kind in MATCHES.items()}
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
_LOGIC = {op: np.asarray(table, dtype=np.uint8) for op, table in LOGIC_TABLES.items()}
_CODES = tuple(np.uint8(s) for s in (FALSE, TRUE, NULL, ERROR))
#: Which of (below, equal, above) the constant a number comparison holds for -> the numpy test.
_SIGN_TESTS: dict[tuple[bool, bool, bool], Callable[[Any, Any], np.ndarray]] = {
    (False, False, True): operator.gt,
    (False, True, True): operator.ge,
    (True, False, False): operator.lt,
    (True, True, False): operator.le,
    (False, True, False): operator.eq,
    (True, False, True): operator.ne,
}
#: A compiled step: the _Evaluation method, its constant argument, the slots of its child states.
Step = tuple[str, Any, tuple[int, ...]]


def evaluate_batch(tree: Node, properties: pa.Array | pa.ChunkedArray) -> pa.BooleanArray:
    """TRUE exactly where RocketMQ's evaluator returns Boolean TRUE on a row's properties (a
    ``map<string,string>`` array; a null map has no properties), else FALSE; never null.

    >>> from storelib.filter.sql92 import parse_sql92
    >>> props = pa.array([[("TAGS", "TagA")], None], pa.map_(pa.string(), pa.string()))
    >>> evaluate_batch(parse_sql92("TAGS IN ('TagA') OR TAGS IS NULL").tree, props).to_pylist()
    [True, True]
    """
    return pa.array(ArrowSql92([tree]).matches(properties)[0], pa.bool_())


class ArrowSql92:
    """Several SQL92 trees compiled together for the same properties (e.g. all SQL92 subscriptions
    of a topic, on batches of its messages): each property look-up, number parse and shared subtree
    is computed once per array for all of them.

    >>> from storelib.filter.sql92 import parse_sql92
    >>> props = pa.array([[("u", "3"), ("amount", "120")], [("u", "4")]], pa.map_(pa.string(), pa.string()))
    >>> compiled = ArrowSql92([parse_sql92(t).tree for t in ("u = 3 AND amount < 500", "amount >= 60", "u > 3")])
    >>> [m.tolist() for m in compiled.matches(props)], len(compiled.steps)   # u = 3 is one step for both
    ([[True, False], [True, False], [False, True]], 5)
    """

    def __init__(self, trees: Sequence[Node]):
        self.trees = tuple(trees)
        #: What a batch runs, in order; step ``i`` fills slot ``i``.
        self.steps: list[Step] = []
        self._slots: dict[object, int] = {}
        self._outputs = [self._compile(tree) for tree in self.trees]

    def __reduce__(self) -> tuple[type, tuple[tuple[Node, ...]]]:
        return ArrowSql92, (self.trees,)  # compiled again where it is unpickled

    def matches(self, properties: pa.Array | pa.ChunkedArray) -> list[np.ndarray]:
        """Per tree, a numpy bool array: does the row match (Boolean TRUE)?"""
        if isinstance(properties, pa.ChunkedArray):
            properties = properties.combine_chunks()
        evaluation = _Evaluation(properties)
        slots: list[Any] = []  # per step, its states
        for method, argument, children in self.steps:
            slots.append(getattr(evaluation, method)(argument, *(slots[i] for i in children)))
        out = []
        for slot in self._outputs:
            match = slots[slot] == TRUE
            out.append(np.full(len(properties), match) if np.ndim(match) == 0 else match)
        return out

    # -- compilation ----------------------------------------------------------------------------

    def _add(self, key: object, step: Step) -> int:
        if key not in self._slots:
            self.steps.append(step)
            self._slots[key] = len(self.steps) - 1
        return self._slots[key]

    def _compile(self, node: Node) -> int:
        """The slot of the states of a boolean (or always-null) node."""
        if node in self._slots:  # a sqlglot expression hashes its subtree once and keeps the hash
            return self._slots[node]
        if isinstance(node, exp.Paren):
            self._slots[node] = self._compile(node.this)
            return self._slots[node]
        inner, negated = negated_predicate(node)
        if isinstance(inner, exp.Between):
            self._slots[node] = self._compile(between_pair(inner, negated))
            return self._slots[node]
        if isinstance(node, (exp.And, exp.Or)) and property_names(node):
            chain, op = terms(node), node.key.upper()
            slot = self._compile(chain[0])
            for i, term in enumerate(chain[1:], 2):  # left to right, pairwise
                step: Step = ("logic", op, (slot, self._compile(term)))
                # an intermediate is keyed by its step (two slots combined)
                slot = self._add(node if i == len(chain) else step, step)
            return slot
        return self._add(node, self._step(node))

    def _step(self, node: Node) -> Step:
        if not property_names(node):
            return ("constant", state_of(node), ())
        if is_truth(node):
            return ("truth", node.name, ())
        if isinstance(node, _COMPARISONS) and reads_text(node):
            if is_property(node.this) and is_property(node.expression):
                return ("two_properties", (node.this.name, node.expression.name, *outcomes(node)), ())
            c = constant_comparison(node)
            return ({S: "equals_string", B: "equals_boolean"}.get(c.java_type, "compare_number"), c, ())
        inner, negated = negated_predicate(node)
        if isinstance(inner, (exp.Is, exp.In, *MATCHES.values())) and is_property(inner.this):
            hit, miss = (FALSE, TRUE) if negated else (TRUE, FALSE)
            name = inner.this.name
            if isinstance(inner, exp.Is):
                return ("is_null", (name, hit, miss), ())
            if isinstance(inner, exp.In):
                return ("in_list", (name, pa.array([e.this for e in inner.expressions], pa.string()), hit, miss), ())
            pattern = inner.expression.this
            if not pattern:  # an empty pattern is FALSE, even negated
                return ("constant", FALSE, ())
            return ("match", (name, _MATCH_NAMES[type(inner)], pattern, hit, miss), ())
        if isinstance(node, exp.Neg) and is_property(node.this):
            return ("constant", NULL, ())  # -'text' is null
        children, table = outcome_table(node)
        slots = tuple(
            self._add(("class", c.name), ("property_class", c.name, ())) if is_property(c) else self._compile(c)
            for c in children
        )
        return ("lookup_table", np.asarray(table, dtype=np.uint8), slots)


def _bools(array: pa.Array) -> np.ndarray:
    """A boolean Arrow array as numpy, null as False (its bits unpacked: faster than ``to_numpy``)."""
    if array.null_count:
        array = pc.fill_null(array, False)
    bits = np.frombuffer(array.buffers()[1], dtype=np.uint8)
    return np.unpackbits(bits, count=array.offset + len(array), bitorder="little")[array.offset :].view(bool)


class _Evaluation:
    """One array of properties: the steps' methods, with every look-up and parse cached by name."""

    def __init__(self, properties: pa.Array):
        self.properties = properties
        self.rows = len(properties)
        self._cache: dict[tuple[Any, ...], Any] = {}

    def _cached(self, key: tuple[Any, ...], build: Callable[[], Any]) -> Any:
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]

    # -- property look-ups ----------------------------------------------------------------------

    def entries(self) -> tuple[pa.Array, pa.Array]:
        """``(keys, values)``: the entries the maps span (the child array is not sliced with the maps)."""

        def build() -> tuple[pa.Array, pa.Array]:
            offsets = self.properties.offsets
            low, high = offsets[0].as_py(), offsets[-1].as_py()
            keys, values = self.properties.values.flatten()
            return keys.slice(low, high - low), values.slice(low, high - low)

        return self._cached(("entries",), build)

    def layout(self) -> list[str] | None:
        """The keys every map has, in order, when all maps have the same keys in the same order (the
        usual case: one producer's properties), else None. Checked on the key bytes with numpy."""

        def build() -> list[str] | None:
            keys, _ = self.entries()
            if self.rows == 0 or self.properties.null_count or keys.type != pa.string():
                return None
            counts = np.diff(np.asarray(self.properties.offsets.to_numpy(zero_copy_only=False)))
            width = int(counts[0])
            if width == 0 or not (counts == width).all():
                return None
            ends = np.frombuffer(keys.buffers()[1], dtype=np.int32)[keys.offset : keys.offset + len(keys) + 1]
            # Periodic key lengths and key bytes (equal to themselves shifted by one map): every map
            # has the first one's keys.
            lengths = np.diff(ends)
            if not np.array_equal(lengths[width:], lengths[:-width]):
                return None
            data = np.frombuffer(keys.buffers()[2], dtype=np.uint8)[ends[0] : ends[-1]]
            first = int(ends[width] - ends[0])
            return keys.slice(0, width).to_pylist() if np.array_equal(data[first:], data[:-first]) else None

        return self._cached(("layout",), build)

    def lookup(self, name: str) -> tuple[pa.Array, np.ndarray]:
        """``(values, absent)`` of a property (the first value of a repeated key): the entries with
        its key, taken to their rows (much cheaper than ``map_lookup``); by position when all maps
        have the same :meth:`layout`."""

        def build() -> tuple[pa.Array, np.ndarray]:
            layout = self.layout()
            if layout is not None:
                if name not in layout:
                    return pa.nulls(self.rows, pa.string()), np.ones(self.rows, dtype=bool)
                at = np.arange(layout.index(name), len(self.entries()[1]), len(layout))
                return self.entries()[1].take(pa.array(at)), np.zeros(self.rows, dtype=bool)
            values = property_array(self.properties, name)
            return values, ~_bools(values.is_valid())

        return self._cached(("lookup", name), build)

    def truthy(self, name: str) -> np.ndarray:
        """Boolean.valueOf of the property: "true" in any case (False when absent)."""
        return self._cached(("truthy", name), lambda: _bools(pc.equal(pc.utf8_lower(self.lookup(name)[0]), "true")))

    def parsed(self, name: str, java_type: JavaType) -> tuple[np.ndarray, np.ndarray]:
        """``(values, ok)``: Integer/Long/Double.valueOf of the property, ``ok`` False where Java
        throws or the property is absent."""
        parse = _parse_double if java_type is D else _parse_int
        return self._cached(("parsed", name, java_type), lambda: parse(self.lookup(name)[0], java_type))

    def cases(self, *branches: tuple[np.ndarray, int], otherwise: int) -> np.ndarray:
        """The state of the first branch whose condition (a bool array) holds, else ``otherwise``:
        one lookup in a table of every combination of the conditions (numpy's ``where`` with
        constants is several times slower). Conditions that hold nowhere (often: absent, does
        not parse) are left out."""
        branches = tuple((c, state) for c, state in branches if c.any())
        if not branches:
            return np.full(self.rows, otherwise, dtype=np.uint8)
        if len(branches) == 1 and (branches[0][1], otherwise) in ((TRUE, FALSE), (FALSE, TRUE)):
            condition = branches[0][0] if otherwise == FALSE else ~branches[0][0]
            return condition.view(np.uint8)  # the states are the condition's bytes
        table = _first_branch_table(tuple(state for _, state in branches), otherwise)
        index: np.ndarray = branches[0][0].view(np.uint8)
        for bit, (condition, _) in enumerate(branches[1:], 1):
            index = index | condition.view(np.uint8) << bit
        return table.take(index)

    # -- steps ----------------------------------------------------------------------------------

    def constant(self, state: int) -> States:
        return _CODES[state]

    def truth(self, name: str) -> States:
        return self.cases((self.lookup(name)[1], NULL), otherwise=FALSE)

    def logic(self, op: str, left: States, right: States) -> States:
        return _LOGIC[op].take(left << 2 | right)

    def property_class(self, name: str) -> States:
        """0 absent, 1 "true" in any case, 2 other (a property as an operand of an outcome table)."""
        return self.cases((self.lookup(name)[1], 0), (self.truthy(name), 1), otherwise=2)

    def lookup_table(self, table: np.ndarray, *indexes: States) -> States:
        """``table[i][j]...`` per row, through the flat table (fancy indexing in several dimensions is slower)."""
        index: States = np.uint8(0)
        for axis, part in enumerate(indexes):
            index = index * np.uint8(table.shape[axis]) + part
        return table.ravel().take(index)

    def equals_string(self, c: ConstantComparison) -> States:
        values, absent = self.lookup(c.prop.name)
        return self.cases((absent, c.absent), (_bools(pc.equal(values, c.value)), c.hit), otherwise=c.miss)

    def equals_boolean(self, c: ConstantComparison) -> States:
        absent = self.lookup(c.prop.name)[1]
        if c.throws:
            return self.cases((absent, c.absent), otherwise=ERROR)
        return self.cases((absent, c.absent), (self.truthy(c.prop.name) == c.value, c.hit), otherwise=c.miss)

    def compare_number(self, c: ConstantComparison) -> States:
        """The sign of Java's compare of the parsed property with the constant picks the outcome."""
        absent = self.lookup(c.prop.name)[1]
        values, ok = self.parsed(c.prop.name, c.java_type)
        hits = tuple(state == c.hit for state in c.by_sign)
        if c.java_type is D:
            holds = np.asarray(hits).take(_double_sign(values, c.value) + 1)  # type: ignore[arg-type]
        elif hits in _SIGN_TESTS:
            holds = _SIGN_TESTS[hits](values, c.value)
        else:  # holds for every sign, or for none
            holds = np.full(self.rows, hits[0])
        return self.cases((absent, c.absent), (~ok, ERROR), (holds, c.hit), otherwise=c.miss)

    def two_properties(self, spec: tuple[str, str, str, int, int]) -> States:
        left, right, op, hit, miss = spec
        (a, a_absent), (b, b_absent) = self.lookup(left), self.lookup(right)
        if op == "=":  # null = null is TRUE, null = x null, x = null FALSE, else String.equals
            same = _bools(pc.equal(a, b)) | (a_absent & b_absent)
            return self.cases((same, hit), (a_absent, NULL), otherwise=miss)
        (x, x_ok), (y, y_ok) = self.parsed(left, D), self.parsed(right, D)  # two Strings: ordered as doubles
        holds = _SIGN_TESTS[(op[0] == "<", "=" in op, op[0] == ">")](_double_sign(x, y), 0)
        return self.cases(
            (a_absent, NULL), (b_absent, NULL), (~x_ok, ERROR), (~y_ok, ERROR), (holds, hit), otherwise=miss
        )

    def is_null(self, spec: tuple[str, int, int]) -> States:
        name, hit, miss = spec
        return self.cases((self.lookup(name)[1], hit), otherwise=miss)

    def in_list(self, spec: tuple[str, pa.Array, int, int]) -> States:
        name, value_set, hit, miss = spec
        values, absent = self.lookup(name)
        return self.cases((absent, NULL), (_bools(pc.is_in(values, value_set=value_set)), hit), otherwise=miss)

    def match(self, spec: tuple[str, str, str, int, int]) -> States:
        name, op, pattern, hit, miss = spec
        values, absent = self.lookup(name)
        return self.cases((absent, FALSE), (_bools(_TESTS[op](values, pattern)), hit), otherwise=miss)


@lru_cache(maxsize=1024)
def _first_branch_table(states: tuple[int, ...], otherwise: int) -> np.ndarray:
    """For each combination of conditions (bit ``i``: condition ``i`` holds), the first holding one's state."""
    return np.array(
        [
            next((s for i, s in enumerate(states) if combination >> i & 1), otherwise)
            for combination in range(1 << len(states))
        ],
        dtype=np.uint8,
    )


def _double_sign(a: np.ndarray, b: np.ndarray | float) -> np.ndarray:
    """Sign of ``Double.compare(a, b)`` per row: NaN equals itself and is above everything, -0.0 < 0.0."""
    with np.errstate(invalid="ignore"):
        sign = (a > b).astype(np.int8) - (a < b).astype(np.int8)
        zeros = (a == b) & (np.signbit(a) != np.signbit(b))  # only zeros are equal with different signs
    sign = np.where(zeros, np.where(np.signbit(a), np.int8(-1), np.int8(1)), sign)
    a_nan, b_nan = np.isnan(a), np.isnan(b)
    return np.where(a_nan | b_nan, a_nan.astype(np.int8) - b_nan.astype(np.int8), sign)


def _parse_int(text: pa.Array, java_type: JavaType) -> tuple[np.ndarray, np.ndarray]:
    """Integer/Long.valueOf: one optional ASCII sign, then decimal digits (Unicode ones too), in range.

    When every value is a few ASCII digits (no sign, nothing that could overflow), they are simply
    cast. Otherwise the digits are cast as unsigned (at most 19 after leading zeros, so no cast can
    overflow) and the range is checked on the numbers; ``-2^31`` (``-2^63``) is the one value past
    the positive bound.
    """
    if pc.all(pc.ascii_is_decimal(text)).as_py() is not False and (pc.max(pc.binary_length(text)).as_py() or 0) < len(
        str(_INT_BOUNDS[java_type])
    ):
        values = pc.fill_null(pc.cast(text, pa.int64()), 0).to_numpy(zero_copy_only=False)
        return values, _bools(pc.is_valid(text))
    if not pc.all(pc.fill_null(pc.string_is_ascii(text), True)).as_py():
        for digit_class, digit in _DIGIT_CLASSES:
            text = pc.replace_substring_regex(text, digit_class, digit)
    body = pc.ascii_ltrim(text, "+-")
    signs = pc.subtract(pc.binary_length(text), pc.binary_length(body))
    ok = pc.and_(pc.ascii_is_decimal(body), pc.less_equal(signs, 1))
    ok = pc.and_(ok, pc.less_equal(pc.binary_length(pc.ascii_ltrim(body, "0")), 19))
    ok = pc.fill_null(ok, False)
    magnitude = pc.cast(pc.if_else(ok, body, "0"), pa.uint64()).to_numpy(zero_copy_only=False)
    negative = _bools(pc.and_(pc.equal(signs, 1), pc.starts_with(text, "-")))
    bound = np.uint64(_INT_BOUNDS[java_type])
    valid = _bools(ok) & ((magnitude < bound) | (negative & (magnitude == bound)))
    values = magnitude.astype(np.int64)  # 2^63 wraps to -2^63, the value it stands for when negative
    return np.where(negative, -values, values), valid


def _parse_double(text: pa.Array, java_type: JavaType = D) -> tuple[np.ndarray, np.ndarray]:
    """Double.valueOf: trimmed of chars <= ' ', Java's syntax (NaN, Infinity, f/F/d/D suffixes,
    hex floats). A decimal is cast by Arrow (correctly rounded, as Java); a hex float is parsed once
    per distinct value by the reference parser."""
    trimmed = pc.utf8_trim(text, _JAVA_TRIMMED)
    ok = pc.fill_null(pc.match_substring_regex(trimmed, _DOUBLE_RE), False)
    hexadecimal = pc.and_(ok, pc.match_substring(trimmed, "x", ignore_case=True))
    decimal = pc.and_(ok, pc.invert(hexadecimal))
    values = pc.cast(pc.if_else(decimal, pc.utf8_rtrim(trimmed, "fFdD"), "0"), pa.float64())
    values = np.array(values.to_numpy(zero_copy_only=False), dtype=np.float64)
    if pc.any(hexadecimal).as_py():
        rows = pc.indices_nonzero(hexadecimal)
        texts = trimmed.take(rows)
        distinct = pc.unique(texts)
        parsed = np.array([java_parse_double(t) for t in distinct.to_pylist()], dtype=np.float64)
        values[np.asarray(rows, dtype=np.int64)] = parsed[np.asarray(pc.index_in(texts, distinct), dtype=np.int64)]
    return values, _bools(ok)
