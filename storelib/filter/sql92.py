"""RocketMQ's SQL92 message selector: a sqlglot dialect of its own and a small typed tree.

The grammar is RocketMQ's ``SelectorParser.jj`` (ActiveMQ's JMS selector without LIKE, arithmetic,
hex and octal): ``OR`` < ``AND`` < ``= <> IS [NOT] NULL`` < ``> >= < <= [NOT] BETWEEN / IN /
CONTAINS / STARTSWITH / ENDSWITH`` < unary ``+ - NOT``. ``NOT`` binds tighter than every comparison,
so ``NOT a = 1`` means ``(NOT a) = 1``. The checks RocketMQ makes while building its tree (only
numbers and properties can be ordered, ``IN`` needs a property, ``BETWEEN`` bounds in order, no
``= NULL``, literal ranges) are made here too, so every text RocketMQ refuses is refused here with a
:class:`~storelib.model.errors.FilterExpressionError` naming the first offending token. Unlike RocketMQ,
text left over after a complete expression is an error, not silently ignored.

>>> str(parse_sql92("a between 1 and 5 and TAGS in ('TagA','TagB')"))
"a BETWEEN 1 AND 5 AND TAGS IN ('TagA', 'TagB')"
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Mapping, NoReturn

from sqlglot import parser as sqlglot_parser
from sqlglot import tokens as sqlglot_tokens
from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import Token, TokenType

from storelib.filter.sql92_eval import java_compare
from storelib.filter.sql92_tree import (Between, Comparison, InList, IsNull, JavaType, Literal, Logic, Match, Negate,
                                        Node, Not, Property, Truth, property_names)
from storelib.model.errors import FilterExpressionError

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = ["parse_sql92", "compile_sql92", "Sql92Expression", "RocketMQSQL92", "MAX_NESTING", "MAX_EXPRESSION_LENGTH"]

#: Parentheses, NOT and unary signs nested deeper than this are refused (RocketMQ's limit is its stack);
#: the store's ``max_filter_expression_nesting`` setting.
MAX_NESTING = 100
#: Longer expressions are refused before they are read (a subscription is untrusted input); the store's
#: ``max_filter_expression_length`` setting.
MAX_EXPRESSION_LENGTH = 64 * 1024

_KEYWORDS = {"NOT": TokenType.NOT, "AND": TokenType.AND, "OR": TokenType.OR, "BETWEEN": TokenType.BETWEEN,
             "IN": TokenType.IN, "TRUE": TokenType.TRUE, "FALSE": TokenType.FALSE, "NULL": TokenType.NULL,
             "IS": TokenType.IS, "CONTAINS": TokenType.OPERATOR, "STARTSWITH": TokenType.OPERATOR,
             "ENDSWITH": TokenType.OPERATOR}
_OPERATORS = {"<>": TokenType.NEQ, ">=": TokenType.GTE, "<=": TokenType.LTE, "=": TokenType.EQ,
              ">": TokenType.GT, "<": TokenType.LT, "(": TokenType.L_PAREN, ")": TokenType.R_PAREN,
              ",": TokenType.COMMA, "+": TokenType.PLUS, "-": TokenType.DASH}
# JavaCC token regular expressions of SelectorParser.jj, ASCII only (ID has no Unicode letters).
_LEXEMES = re.compile(
    r"(?P<skip>[ \t\n\r\f]|/\*.*?\*/)"
    r"|(?P<float>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?|\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)"
    r"|(?P<decimal>0|[1-9][0-9]*[lL]?)|(?P<word>[A-Za-z_$][A-Za-z0-9_$]*)|(?P<op><>|<=|>=|[=<>(),+-])",
    re.S)
_DECIMAL = re.compile(r"(0|[1-9][0-9]*)[lL]?")
_LINE_BREAK = re.compile(r"[\n\r]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_BAD_CHAR_HINTS = {'"': "double quotes are not allowed, string literals use single quotes",
                   ";": "';' is not allowed, a subscription is one expression",
                   "*": "arithmetic is not supported", "/": "arithmetic is not supported",
                   "%": "arithmetic is not supported"}
_INT_MAX, _LONG_MAX = 2**31 - 1, 2**63 - 1
_OPERAND_ENDS = {TokenType.VAR, TokenType.NUMBER, TokenType.STRING, TokenType.R_PAREN, TokenType.TRUE,
                 TokenType.FALSE, TokenType.NULL}


class Sql92Tokenizer(sqlglot_tokens.Tokenizer):
    """RocketMQ's lexer: JavaCC longest match over the tokens of ``SelectorParser.jj``.

    sqlglot's generic scanner is close but not exact for this grammar (``.5`` and ``10L`` are one
    token, ``1e`` two, a ``--`` comment must end with a line break, ``\\v`` is not white space), so
    :meth:`tokenize` does the scanning itself and hands sqlglot ``Token`` objects to the parser.
    Keywords come out upper-cased; CONTAINS/STARTSWITH/ENDSWITH as ``OPERATOR`` tokens; a string
    token's text is its decoded value. Text that is no token ends the list with one ``UNKNOWN``
    token whose text is the reason, so the parser reports whichever problem comes first.
    """

    QUOTES = ["'"]
    STRING_ESCAPES = ["'"]
    COMMENTS = ["--", ("/*", "*/")]
    KEYWORDS = {**_KEYWORDS, **{k: v for k, v in _OPERATORS.items() if len(k) == 2}}
    SINGLE_TOKENS = {k: v for k, v in _OPERATORS.items() if len(k) == 1}

    #: Steps the last :meth:`tokenize` took: characters consumed, plus one per token and per search for
    #: a line break. The scan never goes back, so this stays within a small multiple of the length.
    steps: int = 0

    def tokenize(self, sql: str) -> list[Token]:
        """The tokens of ``sql``; see the class docstring. One pass: line and column are carried
        along, and the next line break (where a ``--`` comment ends) is searched for once per break."""
        out: list[Token] = []
        pos, size, steps = 0, len(sql), 0
        line, last_newline = 1, -1  # of ``pos``: its line, and the index of the "\n" before it
        next_break = -1  # first line break at or after ``pos``; ``size`` when there is none

        def token(kind: TokenType, text: str, start: int, end: int) -> Token:
            return Token(kind, text, line=line, col=start - last_newline, start=start, end=end - 1)

        while pos < size:
            end, tok = None, None
            if sql[pos] == "'":
                end, scanned = _string_end(sql, pos)
                steps += scanned - pos
                if end is None:
                    out.append(token(TokenType.UNKNOWN, "unterminated string literal", pos, size))
                    break
                tok = token(TokenType.STRING, sql[pos + 1:end - 1].replace("''", "'"), pos, end)
            elif sql.startswith("--", pos):
                if next_break < pos:
                    found = _LINE_BREAK.search(sql, pos)
                    next_break = found.start() if found else size
                    steps += next_break - pos + 1
                if next_break < size:  # a comment, with the line break that ends it
                    end = next_break + (2 if sql.startswith("\r\n", next_break) else 1)
            if end is None:
                m = _LEXEMES.match(sql, pos)
                if m is None:
                    reason = ("unterminated comment" if sql.startswith("/*", pos)
                              else _BAD_CHAR_HINTS.get(sql[pos], f"unexpected character {sql[pos]!r}"))
                    out.append(token(TokenType.UNKNOWN, reason, pos, pos + 1))
                    break
                kind, text, end = m.lastgroup, m.group(), m.end()
                if kind == "word" and text.upper() in self.KEYWORDS:
                    tok = token(self.KEYWORDS[text.upper()], text.upper(), pos, end)
                elif kind == "word":
                    tok = token(TokenType.VAR, text, pos, end)
                elif kind in ("float", "decimal"):
                    tok = token(TokenType.NUMBER, text, pos, end)
                elif kind == "op":
                    tok = token(self.KEYWORDS.get(text) or self.SINGLE_TOKENS[text], text, pos, end)
            if tok is not None:
                out.append(tok)
            steps += end - pos + 1
            newlines = sql.count("\n", pos, end)
            if newlines:
                line, last_newline = line + newlines, sql.rfind("\n", pos, end)
            pos = end
        self.steps = steps
        return out


def _string_end(sql: str, start: int) -> tuple[int | None, int]:
    """End (exclusive) of the longest ``'...'`` literal at ``start`` (``''`` escapes a quote), or None;
    and how far the scan read."""
    i, last = start + 1, None
    while True:
        quote = sql.find("'", i)
        if quote < 0:
            return last, len(sql)
        last = quote + 1
        if not sql.startswith("''", quote):
            return last, last
        i = quote + 2


class Sql92Parser(sqlglot_parser.Parser):
    """RocketMQ's selector grammar over :class:`Sql92Tokenizer` tokens, building the typed tree.

    It uses sqlglot's token cursor (``_curr``, ``_match``, ``_advance``) and nothing of sqlglot's
    SQL grammar. Every error is a :class:`FilterExpressionError`.
    """

    def parse(self, raw_tokens: list[Token], sql: str) -> list[Any]:  # type: ignore[override]
        """``[tree]``: this dialect has one statement kind, the selector."""
        return [self.parse_selector(raw_tokens, sql)]

    #: Deepest nesting of parentheses, NOT and unary signs accepted (None: only Python's stack limits it).
    max_nesting: int | None = MAX_NESTING

    def parse_selector(self, raw_tokens: list[Token], sql: str) -> Node:
        """The tree of one whole selector, or :class:`FilterExpressionError`."""
        self.reset()
        self.sql, self._tokens, self._tokens_size, self._index = sql, raw_tokens, len(raw_tokens), -1
        self._advance()
        self._depth = 0
        if not self._curr:
            raise FilterExpressionError("empty expression", sql, len(sql))
        tree = self._as_boolean(self._or(), None)
        if self._curr:
            self._unexpected("AND, OR or the end of the expression")
        return tree

    # -- errors ---------------------------------------------------------------------------------

    def _fail(self, reason: str, at: Token | Node | None) -> NoReturn:
        pos = len(self.sql) if at is None else at.start if isinstance(at, Token) else at.pos
        raise FilterExpressionError(reason, self.sql, pos)

    def _unexpected(self, expected: str) -> NoReturn:
        tok = self._curr
        if not tok:
            self._fail(f"unexpected end of expression, expected {expected}", None)
        if tok.token_type == TokenType.UNKNOWN:
            self._fail(tok.text, tok)
        shown = self.sql[tok.start:tok.end + 1]
        shown = repr(shown if len(shown) <= 20 else shown[:20] + "...")
        after_operand = bool(self._prev) and self._prev.token_type in _OPERAND_ENDS
        if tok.token_type == TokenType.DASH and self.sql.startswith("--", tok.start):
            self._fail(f"a '--' comment must end with a line break: unexpected {shown}", tok)
        if tok.token_type == TokenType.L_PAREN and after_operand and self._prev.token_type == TokenType.VAR:
            self._fail(f"function calls are not supported: unexpected {shown}", tok)
        if tok.token_type in (TokenType.PLUS, TokenType.DASH) and after_operand:
            self._fail(f"arithmetic is not supported: unexpected {shown}", tok)
        if tok.token_type == TokenType.VAR and tok.text.upper() == "LIKE":
            self._fail("LIKE is not supported (use CONTAINS, STARTSWITH or ENDSWITH): unexpected 'LIKE'", tok)
        self._fail(f"unexpected {shown}, expected {expected}", tok)

    def _expect(self, kind: TokenType, expected: str) -> Token:
        if not self._match(kind):
            self._unexpected(expected)
        return self._prev

    # -- grammar (one method per production of SelectorParser.jj) ---------------------------------

    def _or(self) -> Node:
        return self._logic_chain(TokenType.OR, "OR", self._and)

    def _and(self) -> Node:
        return self._logic_chain(TokenType.AND, "AND", self._equality)

    def _logic_chain(self, token: TokenType, name: str, operand) -> Node:
        """``operand (token operand)*``, left-associative, each side a boolean expression; one flat
        node of all the operands (a parenthesized chain of the same operator first is merged in)."""
        first = operand()
        terms: list[Node] = []
        while self._match(token):
            if not terms:
                left = self._as_boolean(first, self._prev)
                terms.extend(left.terms if isinstance(left, Logic) and left.op == name else (left,))
            terms.append(self._as_boolean(operand(), None))
        return Logic(name, tuple(terms), pos=first.pos) if terms else first

    def _equality(self) -> Node:
        left = self._comparison()
        while True:
            if self._match_set((TokenType.EQ, TokenType.NEQ)):
                op = self._prev
                right = self._comparison()
                for side, at in ((left, op), (right, right)):
                    if isinstance(side, Literal) and side.type is JavaType.NULL:
                        self._fail(f"NULL cannot be compared with '{op.text}', use IS [NOT] NULL", at)
                if _is_boolean_literal(left) and isinstance(right, Literal) and not _is_boolean_literal(right):
                    self._fail(f"{_show(left)} cannot be compared with {_show(right)}", right)
                left = Comparison(op.text, left, right, pos=left.pos)
            elif self._match(TokenType.IS):
                negated = self._match(TokenType.NOT)
                self._expect(TokenType.NULL, "NULL" if negated else "NULL or NOT NULL")
                left = IsNull(left, negated, pos=left.pos)
            else:
                return left

    def _comparison(self) -> Node:
        left = self._unary()
        while True:
            tok = self._curr
            kind = tok.token_type if tok else None
            if kind in (TokenType.GT, TokenType.GTE, TokenType.LT, TokenType.LTE):
                self._advance()
                self._orderable(left, tok)
                right = self._unary()
                left = Comparison(tok.text, left, self._orderable(right, None), pos=left.pos)
                continue
            negated = kind == TokenType.NOT
            if negated:
                self._advance()
                nxt = self._curr.token_type if self._curr else None
                if nxt not in (TokenType.OPERATOR, TokenType.BETWEEN, TokenType.IN):
                    self._fail("NOT after an operand must be followed by CONTAINS, STARTSWITH, ENDSWITH, "
                               "BETWEEN or IN", tok)
                kind = nxt
            if kind == TokenType.OPERATOR:
                op = self._curr.text
                self._advance()
                pattern = self._expect(TokenType.STRING, f"a string literal after {op}").text
                left = Match(op, left, pattern, negated, pos=left.pos)
            elif kind == TokenType.BETWEEN:
                self._advance()
                self._orderable(left, tok)
                low = self._orderable(self._unary(), None)
                self._expect(TokenType.AND, "AND of BETWEEN")
                high = self._orderable(self._unary(), None)
                if not negated and isinstance(low, Literal) and isinstance(high, Literal) \
                        and java_compare(high.type, high.value, low.type, low.value) < 0:
                    self._fail(f"BETWEEN bounds out of order: {low} is greater than {high}", high)
                left = Between(left, low, high, negated, pos=left.pos)
            elif kind == TokenType.IN:
                self._advance()
                if not isinstance(left, Property):
                    self._fail("IN needs a property on its left", tok)
                self._expect(TokenType.L_PAREN, "'(' after IN")
                values = [self._expect(TokenType.STRING, "a string literal in the IN list").text]
                while self._match(TokenType.COMMA):
                    values.append(self._expect(TokenType.STRING, "a string literal in the IN list").text)
                self._expect(TokenType.R_PAREN, "',' or ')' in the IN list")
                left = InList(left, tuple(values), negated, pos=left.pos)
            else:
                return left

    def _unary(self) -> Node:
        tok = self._curr
        self._depth += 1
        if self.max_nesting is not None and self._depth > self.max_nesting:
            self._fail(f"expression nested more than {self.max_nesting} deep (setting max_filter_expression_nesting)",
                       tok)
        try:
            if self._match(TokenType.PLUS):
                return replace(self._unary(), pos=tok.start)
            if self._match(TokenType.DASH):
                return Negate(self._unary(), pos=tok.start)
            if self._match(TokenType.NOT):
                operand = self._unary()
                return Not(self._as_boolean(operand, None), pos=tok.start)
            return self._primary()
        finally:
            self._depth -= 1

    def _primary(self) -> Node:
        tok = self._curr
        if self._match(TokenType.L_PAREN):
            inner = self._or()
            self._expect(TokenType.R_PAREN, "')'")
            return replace(inner, pos=tok.start)
        if self._match(TokenType.VAR):
            return Property(tok.text, pos=tok.start)
        if self._match(TokenType.STRING):
            return Literal(tok.text, JavaType.STRING, pos=tok.start)
        if self._match_set((TokenType.TRUE, TokenType.FALSE)):
            return Literal(tok.token_type == TokenType.TRUE, JavaType.BOOLEAN, pos=tok.start)
        if self._match(TokenType.NULL):
            return Literal(None, JavaType.NULL, pos=tok.start)
        if self._match(TokenType.NUMBER):
            return self._number(tok)
        self._unexpected("a property, a literal, '(', NOT, '+' or '-'")

    def _number(self, tok: Token) -> Literal:
        """ConstantExpression.createFromDecimal / createFloat: Long range, then Integer if it fits;
        a float must be a finite double of at least Double.MIN_VALUE (so ``0.0`` is refused)."""
        m = _DECIMAL.fullmatch(tok.text)
        if m:
            value = int(m.group(1))
            if value > _LONG_MAX:
                self._fail(f"{tok.text} is out of the range of a long", tok)
            return Literal(value, JavaType.INT if value <= _INT_MAX else JavaType.LONG, pos=tok.start)
        number = float(tok.text)
        if number == 0.0 or number == float("inf"):
            self._fail(f"{tok.text} is outside RocketMQ's float range [4.9E-324, 1.8E308]", tok)
        return Literal(number, JavaType.DOUBLE, pos=tok.start)

    # -- RocketMQ's construction checks -----------------------------------------------------------

    # An error is reported at ``blame``: the operator for a left operand (the text was fine until
    # the operator came), the operand itself otherwise.

    def _as_boolean(self, node: Node, blame: Token | None) -> Node:
        """asBooleanExpression: a property becomes a boolean cast; a string/number is refused."""
        if node.is_boolean:
            return node
        if isinstance(node, Property):
            return Truth(node, pos=node.pos)
        self._fail(f"{_show(node)} is not a boolean expression", blame or node)

    def _orderable(self, node: Node, blame: Token | None) -> Node:
        """checkLessThanOperand: only numbers, properties and negations can be ordered."""
        if node.is_boolean or (isinstance(node, Literal) and node.type not in JavaType.numeric()):
            self._fail(f"{_show(node)} cannot be ordered (only numbers and properties can)", blame or node)
        return node


def _show(node: Node) -> str:
    """A node's text for messages, quoted unless it is a string literal (already quoted)."""
    text = str(node)
    return text if isinstance(node, Literal) and node.type is JavaType.STRING else f"'{text}'"


def _is_boolean_literal(node: Node) -> bool:
    return isinstance(node, Literal) and node.type is JavaType.BOOLEAN


class RocketMQSQL92(Dialect):
    """The sqlglot dialect of RocketMQ's SQL92 selectors (``SelectorParser.jj``)."""

    Tokenizer = Sql92Tokenizer
    Parser = Sql92Parser


_DIALECT = RocketMQSQL92()


@dataclass(frozen=True)
class Sql92Expression:
    """A parsed, validated SQL92 subscription expression.

    ``text`` is what the subscriber sent, ``tree`` the typed tree, ``properties`` the property
    names it reads; ``str()`` is a canonical text that parses back to the same tree.

    >>> e = parse_sql92("a BETWEEN 1 AND 9 AND TAGS IS NOT NULL")
    >>> sorted(e.properties), e.evaluate({"a": "5", "TAGS": "x"}), e.evaluate({"a": "5"})
    (['TAGS', 'a'], True, False)
    >>> spark.createDataFrame([({"a": "5", "TAGS": "x"},)], "properties map<string,string>").where(e.to_column()).count()
    1
    """

    text: str = field(compare=False)
    tree: Node

    @property
    def properties(self) -> frozenset[str]:
        """Names of the message properties the expression reads (``TAGS`` included)."""
        return property_names(self.tree)

    def evaluate(self, properties: Mapping[str, str]) -> bool:
        """True where RocketMQ's evaluator returns Boolean TRUE for these properties."""
        from storelib.filter.sql92_eval import evaluate

        return evaluate(self.tree, properties)

    def to_column(self, properties: "Column | str" = "properties") -> "Column":
        """Boolean Column (never NULL) over a ``map<string,string>`` column of properties."""
        from storelib.filter.sql92_spark import to_column

        return to_column(self.tree, properties)

    def __str__(self) -> str:
        return str(self.tree)

    def __repr__(self) -> str:
        return f"Sql92Expression({str(self.tree)!r})"


def parse_sql92(text: str, *, max_length: int | None = MAX_EXPRESSION_LENGTH,
                max_nesting: int | None = MAX_NESTING) -> Sql92Expression:
    """Parse and validate a SQL92 subscription expression; :class:`FilterExpressionError` if invalid.

    Text longer than ``max_length`` is refused before it is read, a lone surrogate where it stands,
    nesting deeper than ``max_nesting`` where it goes too deep (``None``: no limit; for texts
    already checked at the door). Time and memory are linear in the text's length.

    >>> e = parse_sql92("TAGS = 'TagA' AND price > 100")
    >>> sorted(e.properties), e.evaluate({"TAGS": "TagA", "price": "250"})
    (['TAGS', 'price'], True)
    >>> parse_sql92("a = 1 OR b = 2", max_length=10)
    Traceback (most recent call last):
    ...
    storelib.model.errors.FilterExpressionError: expression: is 14 characters, over the limit of 10 (setting max_filter_expression_length) (got 'a = 1 OR b = 2') [at line 1, column 11]
    """
    if not isinstance(text, str):
        raise FilterExpressionError(f"expression must be a string, not {type(text).__name__}", repr(text), 0)
    if max_length is not None and len(text) > max_length:
        raise FilterExpressionError(f"is {len(text)} characters, over the limit of {max_length} "
                                    "(setting max_filter_expression_length)", text, max_length)
    surrogate = _SURROGATE.search(text)
    if surrogate:
        raise FilterExpressionError("a lone surrogate is not valid Unicode text", text, surrogate.start())
    return _parse(text, max_nesting)


@lru_cache(maxsize=256)
def _parse(text: str, max_nesting: int | None = MAX_NESTING) -> Sql92Expression:
    parser = Sql92Parser(dialect=_DIALECT)
    parser.max_nesting = max_nesting
    try:
        tree = parser.parse_selector(_DIALECT.tokenize(text), text)
    except FilterExpressionError:
        raise
    except RecursionError:
        raise FilterExpressionError("expression nested too deeply", text, 0) from None
    except Exception as e:  # never let a sqlglot or Python error escape as anything else
        raise FilterExpressionError(f"invalid expression ({type(e).__name__}: {e})", text, 0) from None
    return Sql92Expression(text, tree)


def compile_sql92(text: str, properties: "Column | str" = "properties", *, max_length: int | None = MAX_EXPRESSION_LENGTH,
                  max_nesting: int | None = MAX_NESTING) -> "Column":
    """Parse ``text`` and compile it to a boolean Column over a ``map<string,string>`` properties column.

    >>> df = spark.createDataFrame([({"a": "7"},), ({"TAGS": "TagA"},), ({"a": "1"},)], "properties map<string,string>")
    >>> df.where(compile_sql92("a > 5 OR TAGS IN ('TagA')")).count()
    2
    """
    return parse_sql92(text, max_length=max_length, max_nesting=max_nesting).to_column(properties)
