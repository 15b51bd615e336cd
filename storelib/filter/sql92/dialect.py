"""RocketMQ's SQL92 selector language as a sqlglot dialect, built from sqlglot's public extension points only.

The dialect's tokenizer, parser and generator are sqlglot's, configured by their documented class
attributes (``KEYWORDS``, ``QUOTES``, ``STRING_ESCAPES``, ``COMMENTS``, ``COMPARISON``,
``RANGE_PARSERS``, ``FUNCTIONS``, ``IS_PREDICATE_PRECEDENCE``, ``TRANSFORMS``); ``CONTAINS``,
``STARTSWITH`` and ``ENDSWITH`` parse into sqlglot's own ``Contains``, ``StartsWith`` and ``EndsWith``,
so ``sqlglot.transpile(text, read=RocketMQSQL92, write="spark")`` gives Spark SQL, and the generator
writes any such expression as text RocketMQ's grammar reads as that expression. The store's parse
is its own parser's typed tree (see :data:`PRECEDENCE_DIFFERENCES` for why); the dialect reads that
tree's canonical text for display (:attr:`~storelib.filter.sql92.expression.Sql92Expression.spark_sql`),
and Columns are built by walking the typed tree, never from text.

>>> sqlglot.transpile("a BETWEEN 1 AND 2 AND b NOT CONTAINS 'x'", read=RocketMQSQL92, write="spark")
["a BETWEEN 1 AND 2 AND NOT CONTAINS(b, 'x')"]
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp, generator, parser, tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.parser import IsPredicatePrecedence, binary_range_parser
from sqlglot.tokens import Token, TokenType

from storelib.filter.sql92.lexer import KEYWORDS, OPERATORS, Sql92Lexer
from storelib.filter.sql92.tree import Node

__all__ = ["RocketMQSQL92", "MATCH_TOKENS", "PRECEDENCE_DIFFERENCES", "DISPLAY_MAX_DEPTH", "to_sqlglot", "spark_sql"]

#: The deepest tree the dialect reads (:attr:`~storelib.filter.sql92.tree.Node.depth`). sqlglot's parser
#: recurses through some thirty frames per level of nesting, so under Python's default recursion limit
#: it reads about 35 levels of NOT; the store's own parser allows ``MAX_NESTING`` (100). Deeper trees
#: have no sqlglot form and no Spark SQL for display; they are filtered all the same.
DISPLAY_MAX_DEPTH = 24

#: Where sqlglot's grammar, configured through its public extension points, reads a text otherwise than
#: RocketMQ: ``(text, RocketMQ's reading, sqlglot's reading)``. RocketMQ's NOT takes one operand, sqlglot's
#: a whole comparison (its unary parser for NOT calls the parser's private equality method, and a
#: replacement would have to call a private method too); and sqlglot builds one tree for ``NOT a
#: CONTAINS 'x'`` and ``a NOT CONTAINS 'x'`` (likewise IN, BETWEEN, IS NULL), so no pass over its tree can
#: tell them apart. This is why the store's parser of record is its own
#: (:class:`~storelib.filter.sql92.parser.Sql92Parser`) and the dialect reads canonical text only, where
#: every operand that is not atomic is in parentheses and the two readings agree.
PRECEDENCE_DIFFERENCES = (
    ("NOT a = 1", "(NOT a) = 1", "NOT (a = 1)"),
    ("NOT a IS NULL", "(NOT a) IS NULL", "a IS NOT NULL"),
    ("NOT a CONTAINS 'x'", "(NOT a) CONTAINS 'x'", "a NOT CONTAINS 'x'"),
    ("NOT NOT a = TRUE", "(NOT (NOT a)) = TRUE", "NOT (NOT (a = TRUE))"),
)

#: The token type each pattern operator is tokenized as. sqlglot's TokenType has no member of its own
#: for them, and RANGE_PARSERS are keyed by token type: these three LIKE-family types are free here,
#: since RocketMQ's grammar has no LIKE (the word is a property name to its lexer).
MATCH_TOKENS = {"CONTAINS": TokenType.LIKE, "STARTSWITH": TokenType.ILIKE, "ENDSWITH": TokenType.RLIKE}
_MATCH_EXPRESSIONS = {"CONTAINS": exp.Contains, "STARTSWITH": exp.StartsWith, "ENDSWITH": exp.EndsWith}


#: Operands written bare; anything else is parenthesized, so RocketMQ's grammar reads the text as the
#: tree it came from whatever the two grammars' precedences (as the typed tree's canonical text does).
_ATOMS = (exp.Column, exp.Literal, exp.Boolean, exp.Null, exp.Paren)
_COMPARISONS = {exp.EQ: "=", exp.NEQ: "<>", exp.GT: ">", exp.GTE: ">=", exp.LT: "<", exp.LTE: "<="}


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


_PREDICATES = (exp.Is, exp.In, exp.Between, *_MATCH_EXPRESSIONS.values(), *_COMPARISONS)


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
        KEYWORDS = {**{k: MATCH_TOKENS.get(k, v) for k, v in KEYWORDS.items()},
                    **{k: v for k, v in OPERATORS.items() if len(k) == 2}}
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
        them are sqlglot's own range parsers. The one level no public extension point can set is
        NOT's: see :data:`PRECEDENCE_DIFFERENCES`.

        >>> repr(sqlglot.parse_one("a STARTSWITH 'x'", read=RocketMQSQL92).args["expression"])
        "Literal(this='x', is_string=True)"
        """

        IS_PREDICATE_PRECEDENCE = IsPredicatePrecedence.EQUALITY
        FUNCTIONS: dict = {}
        COMPARISON: dict = {}
        RANGE_PARSERS = {
            **{token: binary_range_parser(kind) for token, kind in parser.Parser.COMPARISON.items()},
            **{k: v for k, v in parser.Parser.RANGE_PARSERS.items()
               if k in (TokenType.BETWEEN, TokenType.IN, TokenType.IS)},
            **{MATCH_TOKENS[name]: binary_range_parser(kind) for name, kind in _MATCH_EXPRESSIONS.items()},
        }

    class Generator(generator.Generator):
        """Writes text RocketMQ's grammar reads as the tree written: the pattern operators infix, NOT as
        RocketMQ reads it, and every operand that is not atomic in parentheses.

        >>> RocketMQSQL92().generate(exp.Contains(this=exp.column("a"), expression=exp.Literal.string("x")))
        "a CONTAINS 'x'"
        """

        TRANSFORMS = {**generator.Generator.TRANSFORMS, exp.Not: _not, exp.Neg: _neg,
                      **{kind: lambda self, e: _predicate(self, e, False) for kind in _PREDICATES}}


def to_sqlglot(tree: Node) -> exp.Expr:
    """The sqlglot expression of a typed tree: its canonical text (which parenthesizes every operand
    that is not atomic, so the two grammars' precedences never come into play) read by the dialect.

    >>> from storelib.filter.sql92 import parse_sql92
    >>> to_sqlglot(parse_sql92("NOT a = 1").tree).sql(dialect=RocketMQSQL92)
    '(NOT a) = 1'
    >>> to_sqlglot(parse_sql92("NOT " * 30 + "a").tree)
    Traceback (most recent call last):
    ...
    ValueError: the tree nests 31 deep, more than the dialect reads (DISPLAY_MAX_DEPTH = 24)
    """
    if tree.depth > DISPLAY_MAX_DEPTH:
        raise ValueError(f"the tree nests {tree.depth} deep, more than the dialect reads "
                         f"(DISPLAY_MAX_DEPTH = {DISPLAY_MAX_DEPTH})")
    return sqlglot.parse_one(str(tree), read=RocketMQSQL92)


def spark_sql(tree: Node) -> str | None:
    """Spark SQL for a typed tree (display only: property names stand for the properties' values), or
    None for a tree deeper than :data:`DISPLAY_MAX_DEPTH`.

    >>> from storelib.filter.sql92 import parse_sql92
    >>> spark_sql(parse_sql92("a STARTSWITH 'x' OR b NOT IN ('y')").tree)
    "STARTSWITH(a, 'x') OR NOT b IN ('y')"
    """
    if tree.depth > DISPLAY_MAX_DEPTH:
        return None
    return to_sqlglot(tree).sql(dialect="spark")
