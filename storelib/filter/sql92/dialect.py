"""RocketMQ's SQL92 selector language as a sqlglot dialect, built from sqlglot's public extension points only.

The dialect's tokenizer, parser and generator are sqlglot's, configured by their documented class
attributes (``KEYWORDS``, ``QUOTES``, ``STRING_ESCAPES``, ``COMMENTS``, ``RANGE_PARSERS``,
``FUNCTIONS``, ``IS_PREDICATE_PRECEDENCE``, ``TRANSFORMS``); ``CONTAINS``, ``STARTSWITH`` and
``ENDSWITH`` parse into sqlglot's own ``Contains``, ``StartsWith`` and ``EndsWith``, so
``sqlglot.transpile(text, read=RocketMQSQL92, write="spark")`` gives Spark SQL. It serves display
(:attr:`~storelib.filter.sql92.expression.Sql92Expression.spark_sql`): the store's Columns are built
by walking the typed tree, never from text.

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

__all__ = ["RocketMQSQL92", "MATCH_TOKENS", "to_sqlglot", "spark_sql"]

#: The token type each pattern operator is tokenized as. sqlglot's TokenType has no member of its own
#: for them, and RANGE_PARSERS are keyed by token type: these three LIKE-family types are free here,
#: since RocketMQ's grammar has no LIKE (the word is a property name to its lexer).
MATCH_TOKENS = {"CONTAINS": TokenType.LIKE, "STARTSWITH": TokenType.ILIKE, "ENDSWITH": TokenType.RLIKE}
_MATCH_EXPRESSIONS = {"CONTAINS": exp.Contains, "STARTSWITH": exp.StartsWith, "ENDSWITH": exp.EndsWith}


def _infix(keyword: str):
    """A generator transform writing ``this KEYWORD expression`` (RocketMQ's infix pattern operators)."""
    def render(self: generator.Generator, expression: exp.Expr) -> str:
        return f"{self.sql(expression, 'this')} {keyword} {self.sql(expression, 'expression')}"
    return render


#: What RocketMQ's NOT may be written before bare: its operand is a unary expression.
_ATOMS = (exp.Column, exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.Not, exp.Neg)


def _not(self: generator.Generator, expression: exp.Not) -> str:
    """``NOT``, written as RocketMQ reads it. sqlglot's NOT takes a whole comparison (``NOT a = 1`` is
    ``NOT (a = 1)``) where RocketMQ's takes one operand (``(NOT a) = 1``), so a negated predicate is
    written with its own ``NOT`` (``a NOT IN (...)``, ``a IS NOT NULL``) and anything else that is
    not atomic is parenthesized."""
    inner = expression.this
    if isinstance(inner, _ATOMS):
        return f"NOT {self.sql(inner)}"
    this = self.sql(inner, "this")
    if isinstance(inner, exp.Is):
        return f"{this} IS NOT {self.sql(inner, 'expression')}"
    if isinstance(inner, exp.In):
        return f"{this} NOT IN ({', '.join(self.sql(e) for e in inner.expressions)})"
    if isinstance(inner, exp.Between):
        return f"{this} NOT BETWEEN {self.sql(inner, 'low')} AND {self.sql(inner, 'high')}"
    for name, kind in _MATCH_EXPRESSIONS.items():
        if isinstance(inner, kind):
            return f"{this} NOT {name} {self.sql(inner, 'expression')}"
    return f"NOT ({self.sql(inner)})"


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
            """The tokens of ``sql``, the pattern operators typed as :data:`MATCH_TOKENS` says."""
            out = []
            for token in Sql92Lexer(sql):
                if token.token_type == TokenType.UNKNOWN:
                    raise sqlglot.TokenError(f"{token.text} at offset {token.start}")
                if token.token_type == TokenType.OPERATOR:
                    token.token_type = MATCH_TOKENS[token.text]
                out.append(token)
            return out

    class Parser(parser.Parser):
        """sqlglot's expression grammar with RocketMQ's pattern operators and no functions.

        ``IS [NOT] NULL`` is parsed at the level of ``=`` (as RocketMQ does, so ``a = 1 IS NULL`` is
        ``(a = 1) IS NULL``); BETWEEN, IN and NOT before them are sqlglot's own range parsers.

        >>> repr(sqlglot.parse_one("a STARTSWITH 'x'", read=RocketMQSQL92).args["expression"])
        "Literal(this='x', is_string=True)"
        """

        IS_PREDICATE_PRECEDENCE = IsPredicatePrecedence.EQUALITY
        FUNCTIONS: dict = {}
        RANGE_PARSERS = {
            **{k: v for k, v in parser.Parser.RANGE_PARSERS.items()
               if k in (TokenType.BETWEEN, TokenType.IN, TokenType.IS)},
            **{MATCH_TOKENS[name]: binary_range_parser(kind) for name, kind in _MATCH_EXPRESSIONS.items()},
        }

    class Generator(generator.Generator):
        """Writes the pattern operators in RocketMQ's infix form, and NOT as RocketMQ reads it.

        >>> RocketMQSQL92().generate(exp.Contains(this=exp.column("a"), expression=exp.Literal.string("x")))
        "a CONTAINS 'x'"
        """

        TRANSFORMS = {**generator.Generator.TRANSFORMS, exp.Not: _not,
                      **{kind: _infix(name) for name, kind in _MATCH_EXPRESSIONS.items()}}


def to_sqlglot(tree: Node) -> exp.Expr:
    """The sqlglot expression of a typed tree: its canonical text (which parenthesizes every operand
    that is not atomic, so the two grammars' precedences never come into play) read by the dialect.

    >>> from storelib.filter.sql92 import parse_sql92
    >>> to_sqlglot(parse_sql92("NOT a = 1").tree).sql(dialect=RocketMQSQL92)
    '(NOT a) = 1'
    """
    return sqlglot.parse_one(str(tree), read=RocketMQSQL92)


def spark_sql(tree: Node) -> str:
    """Spark SQL for a typed tree (display only: property names stand for the properties' values).

    >>> from storelib.filter.sql92 import parse_sql92
    >>> spark_sql(parse_sql92("a STARTSWITH 'x' OR b NOT IN ('y')").tree)
    "STARTSWITH(a, 'x') OR NOT b IN ('y')"
    """
    return sqlglot.transpile(str(tree), read=RocketMQSQL92, write="spark")[0]
