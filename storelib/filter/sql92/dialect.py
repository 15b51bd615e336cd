"""RocketMQ's SQL92 selector language as a sqlglot dialect, built from sqlglot's public extension points only.

The store's typed tree is sqlglot's own expressions (:mod:`~storelib.filter.sql92.tree`), and every
evaluator walks them; this dialect reads every valid selector into the same expressions
(:func:`typed_tree`) and gives the Spark SQL shown for display (:func:`spark_sql`). The parser of record
is :class:`~storelib.filter.sql92.parser.Sql92Parser`, which builds those expressions directly: sqlglot's
public parse needs the whole token list and stops with its own messages, where RocketMQ's rules (the
first offending token, with RocketMQ's message and position, the text not read past it) are checked as
the tree is built; it recurses 20 Python frames per level of parentheses (27 per ``NOT (``), so under
Python's default limit it reads 48 levels of parentheses where RocketMQ allows 100; and it parses at
1.9-3.1 us/char where ours takes 1.6-2.0 (30K-240K characters, both linear). Details: ``docs/internals.md``.

>>> sqlglot.transpile("a BETWEEN 1 AND 2 AND b NOT CONTAINS 'x'", read=RocketMQSQL92, write="spark")
["a BETWEEN 1 AND 2 AND NOT CONTAINS(b, 'x')"]
"""

from __future__ import annotations

from typing import ClassVar

import sqlglot
from sqlglot import exp, generator, parser, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.parser import IsPredicatePrecedence, binary_range_parser
from sqlglot.tokens import Token, TokenType

from storelib.filter.sql92.lexer import KEYWORDS, OPERATORS, Sql92Lexer
from storelib.filter.sql92.parser import number_literal
from storelib.filter.sql92.tree import (
    COMPARISONS,
    MATCHES,
    NEGATABLE,
    JavaType,
    Node,
    between,
    canonical,
    comparison,
    depth,
    in_list,
    is_null,
    is_property,
    literal,
    logic,
    match,
    negate,
    not_,
    prop,
    truth,
)

__all__ = [
    "RocketMQSQL92",
    "UnaryOperand",
    "MATCH_TOKENS",
    "PRECEDENCE_CASES",
    "DISPLAY_MAX_DEPTH",
    "to_sqlglot",
    "typed_tree",
    "spark_sql",
]

#: The deepest tree shown as Spark SQL (:func:`~storelib.filter.sql92.tree.depth`). sqlglot's parser
#: recurses through 20 Python frames per level of parentheses, 27 per ``NOT (``: under Python's default
#: recursion limit it reads 36 levels of ``NOT (`` (48 of parentheses), where RocketMQ allows
#: ``MAX_NESTING`` (100), and a display is read inside whatever stack its caller has used. Deeper trees
#: have no Spark SQL for display; they are filtered all the same (the evaluators walk the tree itself).
DISPLAY_MAX_DEPTH = 24

#: Texts that read differently with sqlglot's own precedence, and RocketMQ's reading, which the dialect's
#: is too: RocketMQ's NOT takes one operand where sqlglot's takes a comparison, its ordering operators
#: share a level with BETWEEN/IN/CONTAINS, and IS NULL shares ``=``'s.
PRECEDENCE_CASES = (
    ("NOT a = 1", "(NOT a) = 1"),
    ("NOT a IS NULL", "(NOT a) IS NULL"),
    ("NOT a CONTAINS 'x'", "(NOT a) CONTAINS 'x'"),
    ("NOT NOT a = TRUE", "(NOT (NOT a)) = TRUE"),
    ("a > 1 CONTAINS 'x'", "(a > 1) CONTAINS 'x'"),
    ("a = 1 IS NULL", "(a = 1) IS NULL"),
)

#: The token type each pattern operator is tokenized as. sqlglot's TokenType has no member of its own
#: for them, and RANGE_PARSERS are keyed by token type: these three LIKE-family types are free here,
#: since RocketMQ's grammar has no LIKE (the word is a property name to its lexer).
MATCH_TOKENS = {"CONTAINS": TokenType.LIKE, "STARTSWITH": TokenType.ILIKE, "ENDSWITH": TokenType.RLIKE}
_MATCH_EXPRESSIONS = MATCHES


#: Operands written bare; anything else is parenthesized, so RocketMQ's grammar reads the text as the
#: tree it came from whatever the two grammars' precedences (as the typed tree's canonical text does).
_ATOMS = (exp.Column, exp.Literal, exp.Boolean, exp.Null, exp.Paren)
_COMPARISONS: dict[type[exp.Expr], str] = {kind: op for op, kind in COMPARISONS.items()}


def _operand(self: generator.Generator, node: exp.Expr) -> str:
    """An operand as RocketMQ reads it: bare if atomic (a negated atom too), else in parentheses."""
    text = self.sql(node)
    atomic = isinstance(node, _ATOMS) or (isinstance(node, exp.Neg) and isinstance(node.this, _ATOMS))
    return text if atomic else f"({text})"


def _predicate(self: generator.Generator, node: exp.Expr, negated: bool) -> str:
    """A comparison, IS NULL, BETWEEN, IN or pattern test, with its own NOT when ``negated``."""
    this, neg = _operand(self, node.this), " NOT" if negated else ""
    if isinstance(node, exp.Is):
        return f"{this} IS{neg} {self.sql(node, 'expression')}"
    if isinstance(node, exp.In):
        return f"{this}{neg} IN ({', '.join(self.sql(e) for e in node.expressions)})"
    if isinstance(node, exp.Between):
        return f"{this}{neg} BETWEEN {_operand(self, node.args['low'])} AND {_operand(self, node.args['high'])}"
    for name, kind in _MATCH_EXPRESSIONS.items():
        if isinstance(node, kind):
            return f"{this}{neg} {name} {self.sql(node, 'expression')}"
    return f"{this} {_COMPARISONS[type(node)]} {_operand(self, node.expression)}"


_PREDICATES: tuple[type[exp.Expr], ...] = (exp.Is, exp.In, exp.Between, *_MATCH_EXPRESSIONS.values(), *_COMPARISONS)


def _not(self: generator.Generator, expression: exp.Not) -> str:
    """``NOT``, written as RocketMQ reads it. sqlglot's NOT takes a whole comparison (``NOT a = 1`` is
    ``NOT (a = 1)``) where RocketMQ's takes one operand (``(NOT a) = 1``), so a negated IS NULL, IN,
    BETWEEN or pattern test is written with its own ``NOT`` (``a NOT IN (...)``, ``a IS NOT NULL``)
    and any other operand that is not atomic is parenthesized."""
    inner = expression.this
    if isinstance(inner, _PREDICATES) and not isinstance(inner, tuple(_COMPARISONS)):
        return _predicate(self, inner, True)
    return f"NOT {_operand(self, inner)}"


def _neg(self: generator.Generator, expression: exp.Neg) -> str:
    return f"-{_operand(self, expression.this)}"


class UnaryOperand(exp.Expression):
    """The operand sqlglot's public :func:`~sqlglot.parser.binary_range_parser` reads after an operator
    (a unary expression here, where there is no arithmetic), with no left side: how the dialect's
    NOT reads one operand, as RocketMQ's does. Never part of a finished tree.

    >>> UnaryOperand(expression=exp.column("a")).expression.sql()
    'a'
    """

    arg_types = {"this": False, "expression": True}


_read_operand = binary_range_parser(UnaryOperand)


def _not_operand(self: parser.Parser) -> exp.Expr:
    """RocketMQ's unary NOT: the operand after it is one unary expression (``NOT a = 1`` is ``(NOT a) = 1``)."""
    operand = _read_operand(self, None)
    assert operand is not None  # the range parser builds its node
    return self.expression(exp.Not(this=operand.expression))


class RocketMQSQL92(Dialect):
    """The sqlglot dialect of RocketMQ's SQL92 selectors (``SelectorParser.jj``).

    >>> e = sqlglot.parse_one("(NOT a) = 1 OR b IS NOT NULL AND c ENDSWITH 'z'", read=RocketMQSQL92)
    >>> type(e).__name__, e.sql(dialect=RocketMQSQL92)
    ('Or', "(NOT a) = 1 OR b IS NOT NULL AND c ENDSWITH 'z'")
    >>> sqlglot.transpile("NOT (a NOT BETWEEN 1 AND 2)", read=RocketMQSQL92, write=RocketMQSQL92)
    ['NOT (a NOT BETWEEN 1 AND 2)']
    """

    class Tokenizer(tokens.Tokenizer):
        """RocketMQ's tokens: its keywords, ``'`` strings with ``''`` as the only escape, both comment forms.

        The scanning itself is :class:`~storelib.filter.sql92.lexer.Sql92Lexer` (``tokenize`` is
        overridden): sqlglot's generic scanner, configured by these attributes, is close to JavaCC's
        longest match but not exact for this grammar (``.5`` and ``10L`` are one token, ``1e`` two,
        a ``--`` comment must end with a line break, ``\\v`` is no white space, ``007`` is three
        tokens). Text that is no token raises sqlglot's ``TokenError``.

        >>> [(t.token_type.name, t.text) for t in RocketMQSQL92().tokenize("a NOT CONTAINS 'it''s'")]
        [('VAR', 'a'), ('NOT', 'NOT'), ('LIKE', 'CONTAINS'), ('STRING', "it's")]
        """

        QUOTES = ["'"]
        STRING_ESCAPES = ["'"]
        COMMENTS = ["--", ("/*", "*/")]
        KEYWORDS = {
            **{k: MATCH_TOKENS.get(k, v) for k, v in KEYWORDS.items()},
            **{k: v for k, v in OPERATORS.items() if len(k) == 2},
        }
        SINGLE_TOKENS = {k: v for k, v in OPERATORS.items() if len(k) == 1}

        def tokenize(self, sql: str) -> list[Token]:
            """The tokens of ``sql``, the pattern operators typed as :data:`MATCH_TOKENS` says.

            >>> [t.token_type.name for t in RocketMQSQL92.Tokenizer().tokenize("a ENDSWITH 'x' AND b <> 1L")]
            ['VAR', 'RLIKE', 'STRING', 'AND', 'VAR', 'NEQ', 'NUMBER']
            """
            out = []
            for token in Sql92Lexer(sql):
                if token.token_type == TokenType.UNKNOWN:
                    raise sqlglot.TokenError(f"{token.text} at offset {token.start}")
                if token.token_type == TokenType.OPERATOR:
                    token.token_type = MATCH_TOKENS[token.text]
                out.append(token)
            return out

    class Parser(parser.Parser):
        """sqlglot's expression grammar with RocketMQ's levels for its operators, and no functions.

        As in RocketMQ, ``IS [NOT] NULL`` is parsed at the level of ``=`` (``a = 1 IS NULL`` is
        ``(a = 1) IS NULL``), and ``> >= < <=`` at the level of BETWEEN, IN and the pattern operators,
        all left-associative (``a > 1 CONTAINS 'x'`` is ``(a > 1) CONTAINS 'x'``): they are range
        parsers here, and sqlglot's comparison level is left empty. BETWEEN, IN, IS and the NOT before
        them are sqlglot's own range parsers. A leading NOT takes one unary operand (``NOT a = 1`` is
        ``(NOT a) = 1``), read by sqlglot's public ``binary_range_parser`` (see :class:`UnaryOperand`).
        So the dialect reads every valid selector as RocketMQ does (:data:`PRECEDENCE_CASES`).

        >>> repr(sqlglot.parse_one("a STARTSWITH 'x'", read=RocketMQSQL92).args["expression"])
        "Literal(this='x', is_string=True)"
        """

        IS_PREDICATE_PRECEDENCE = IsPredicatePrecedence.EQUALITY
        UNARY_PARSERS = {**parser.Parser.UNARY_PARSERS, TokenType.NOT: _not_operand}
        FUNCTIONS: ClassVar[dict] = {}
        COMPARISON: ClassVar[dict] = {}
        RANGE_PARSERS = {
            **{token: binary_range_parser(kind) for token, kind in parser.Parser.COMPARISON.items()},
            **{
                k: v
                for k, v in parser.Parser.RANGE_PARSERS.items()
                if k in (TokenType.BETWEEN, TokenType.IN, TokenType.IS)
            },
            **{MATCH_TOKENS[name]: binary_range_parser(kind) for name, kind in _MATCH_EXPRESSIONS.items()},
        }

    class Generator(generator.Generator):
        """Writes text RocketMQ's grammar reads as the tree written: the pattern operators infix, NOT as
        RocketMQ reads it, and every operand that is not atomic in parentheses.

        >>> RocketMQSQL92().generate(exp.Contains(this=exp.column("a"), expression=exp.Literal.string("x")))
        "a CONTAINS 'x'"
        """

        TRANSFORMS = {
            **generator.Generator.TRANSFORMS,
            exp.Not: _not,
            exp.Neg: _neg,
            **{kind: lambda self, e: _predicate(self, e, False) for kind in _PREDICATES},
        }


def to_sqlglot(tree: Node) -> exp.Expr:
    """The dialect's own reading of a typed tree's canonical text (with the ``Paren`` nodes sqlglot's
    generators need to write it back), for trees no deeper than :data:`DISPLAY_MAX_DEPTH`.

    >>> from storelib.filter.sql92 import parse_sql92
    >>> to_sqlglot(parse_sql92("NOT a = 1").tree).sql(dialect=RocketMQSQL92)
    '(NOT a) = 1'
    >>> to_sqlglot(parse_sql92("NOT " * 30 + "a").tree)
    Traceback (most recent call last):
    ...
    ValueError: the tree nests 31 deep, more than the dialect reads (DISPLAY_MAX_DEPTH = 24)
    """
    if depth(tree) > DISPLAY_MAX_DEPTH:
        raise ValueError(
            f"the tree nests {depth(tree)} deep, more than the dialect reads (DISPLAY_MAX_DEPTH = {DISPLAY_MAX_DEPTH})"
        )
    return sqlglot.parse_one(canonical(tree), read=RocketMQSQL92)


def spark_sql(tree: Node) -> str | None:
    """Spark SQL for a typed tree, ``sqlglot.transpile`` of its canonical text from the dialect (display
    only: property names stand for the properties' values), or None for a tree deeper than
    :data:`DISPLAY_MAX_DEPTH`.

    >>> from storelib.filter.sql92 import parse_sql92
    >>> spark_sql(parse_sql92("a STARTSWITH 'x' OR b NOT IN ('y')").tree)
    "STARTSWITH(a, 'x') OR NOT b IN ('y')"
    """
    if depth(tree) > DISPLAY_MAX_DEPTH:
        return None
    return sqlglot.transpile(canonical(tree), read=RocketMQSQL92, write="spark")[0]


_CONNECTORS: dict[type[exp.Expr], str] = {exp.And: "AND", exp.Or: "OR"}
_MATCH_NAMES: dict[type[exp.Expr], str] = {kind: name for name, kind in _MATCH_EXPRESSIONS.items()}


def typed_tree(expression: exp.Expr) -> Node:
    """The typed tree of a sqlglot expression the dialect read from a valid selector (or one built with
    sqlglot's builders in that shape): the tree :class:`~storelib.filter.sql92.parser.Sql92Parser` builds
    from the same text, every node typed (a bare property where a boolean is needed is read as a
    boolean, parentheses are dropped but for ``NOT (predicate)``). It checks shapes, not RocketMQ's
    rules: ValueError for what has no typed form. The expression itself is left as it is.

    >>> from storelib.filter.sql92 import parse_sql92
    >>> tree = typed_tree(sqlglot.parse_one("NOT a = 1 OR b IN ('x')", read=RocketMQSQL92))
    >>> canonical(tree), tree == parse_sql92("NOT a = 1 OR b IN ('x')").tree
    ("(NOT a) = 1 OR b IN ('x')", True)
    """
    return _boolean(_typed(expression))


def _boolean(node: Node) -> Node:
    """asBooleanExpression: a bare property read as a boolean."""
    return truth(node) if is_property(node) else node  # type: ignore[arg-type]


def _unparen(node: exp.Expr) -> exp.Expr:
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _typed(e: exp.Expr) -> Node:
    e = _unparen(e)
    if type(e) in _CONNECTORS:
        # A chain of one connector is left-deep in sqlglot (parenthesized on the left or not): walked
        # as a loop, since a chain can be thousands long.
        kind, rights = type(e), []
        while type(e) is kind:
            rights.append(e.expression)
            e = _unparen(e.this)
        chain = _boolean(_typed(e))
        for right in reversed(rights):
            chain = logic(_CONNECTORS[kind], chain, _boolean(_typed(right)))
        return chain
    if isinstance(e, exp.Column):
        return prop(e.name)
    if isinstance(e, exp.Literal):
        return literal(e.this, JavaType.STRING) if e.is_string else number_literal(e.this)
    if isinstance(e, exp.Boolean):
        return literal(bool(e.this), JavaType.BOOLEAN)
    if isinstance(e, exp.Null):
        return literal(None, JavaType.NULL)
    if isinstance(e, exp.Neg):
        return negate(_typed(e.this))
    if isinstance(e, exp.Not):
        inner: exp.Expr = e.this  # a predicate right under NOT, not in parentheses, is a negated predicate
        if isinstance(inner, NEGATABLE):
            return _predicate_node(inner, True)
        return not_(_boolean(_typed(inner)))
    if isinstance(e, (*_COMPARISONS, *NEGATABLE)):
        return _predicate_node(e, False)
    raise ValueError(f"no SQL92 form for {e.sql()!r}")


def _predicate_node(e: exp.Expr, negated: bool) -> Node:
    if isinstance(e, exp.Is) and isinstance(e.expression, exp.Null):
        return is_null(_typed(e.this), negated)
    if (
        isinstance(e, exp.In)
        and isinstance(operand := _typed(e.this), exp.Column)
        and all(isinstance(v, exp.Literal) and v.is_string for v in e.expressions)
    ):
        return in_list(operand, tuple(v.this for v in e.expressions), negated)
    if isinstance(e, exp.Between):
        return between(_typed(e.this), _typed(e.args["low"]), _typed(e.args["high"]), negated)
    if type(e) in _MATCH_NAMES and isinstance(e.expression, exp.Literal) and e.expression.is_string:
        return match(_MATCH_NAMES[type(e)], _typed(e.this), e.expression.this, negated)
    if type(e) in _COMPARISONS and not negated:
        return comparison(_COMPARISONS[type(e)], _typed(e.this), _typed(e.expression))
    raise ValueError(f"no SQL92 form for {e.sql()!r}")
