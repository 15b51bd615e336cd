"""RocketMQ's SQL92 selector grammar: a recursive-descent parser building the typed tree (sqlglot
expressions, :mod:`~storelib.filter.sql92.tree`), with RocketMQ's checks.

The grammar is RocketMQ's ``SelectorParser.jj`` (ActiveMQ's JMS selector without LIKE, arithmetic,
hex and octal): ``OR`` < ``AND`` < ``= <> IS [NOT] NULL`` < ``> >= < <= [NOT] BETWEEN / IN /
CONTAINS / STARTSWITH / ENDSWITH`` < unary ``+ - NOT``. ``NOT`` binds tighter than every comparison,
so ``NOT a = 1`` means ``(NOT a) = 1``. The checks RocketMQ makes while building its tree (only
numbers and properties can be ordered, ``IN`` needs a property, ``BETWEEN`` bounds in order, no
``= NULL``, literal ranges) are made as the tree is built, so every text RocketMQ refuses is refused
with a :class:`~storelib.model.errors.FilterExpressionError` naming the first offending token. Unlike
RocketMQ, text left over after a complete expression is an error, not silently ignored.

>>> tree = Sql92Parser().parse_text("a between 1 and 5 and TAGS in ('TagA','TagB')")
>>> type(tree).__name__, canonical(tree)
('And', "a BETWEEN 1 AND 5 AND TAGS IN ('TagA', 'TagB')")
"""

from __future__ import annotations

import re
from typing import Iterable, Iterator, NoReturn

from sqlglot import exp
from sqlglot.tokens import Token, TokenType

from storelib.filter.sql92.java import java_compare
from storelib.filter.sql92.lexer import Sql92Lexer
from storelib.filter.sql92.tree import (
    JavaType,
    Node,
    between,
    canonical,
    comparison,
    depth,
    in_list,
    is_boolean,
    is_null,
    java_type,
    java_value,
    literal,
    logic,
    match,
    negate,
    not_,
    prop,
    set_pos,
    truth,
)
from storelib.filter.sql92.tree import pos as node_pos
from storelib.model.errors import FilterExpressionError

__all__ = ["Sql92Parser", "number_literal", "MAX_NESTING", "MAX_EXPRESSION_LENGTH"]

#: Parentheses, NOT and unary signs nested deeper than this are refused (RocketMQ's limit is its stack),
#: and so are operators applied to other operators' results deeper than this (``a IS NULL IS NULL ...``).
MAX_NESTING = 100
#: Texts longer than this (in characters) are refused before they are read: a subscription is
#: untrusted input, parsed on every registration and pull.
MAX_EXPRESSION_LENGTH = 64 * 1024

_DECIMAL = re.compile(r"(0|[1-9][0-9]*)[lL]?")
_INT_MAX, _LONG_MAX = 2**31 - 1, 2**63 - 1
_LOGIC_LEVELS = ((TokenType.OR, "OR"), (TokenType.AND, "AND"))
_CONNECTORS = (exp.Or, exp.And)
_OPERAND_ENDS = {
    TokenType.VAR,
    TokenType.NUMBER,
    TokenType.STRING,
    TokenType.R_PAREN,
    TokenType.TRUE,
    TokenType.FALSE,
    TokenType.NULL,
}


class Sql92Parser:
    """RocketMQ's selector grammar over :class:`~storelib.filter.sql92.lexer.Sql92Lexer` tokens, building the
    typed tree.

    A recursive-descent parser with a one-token cursor of its own. Tokens are pulled one at a time as
    the grammar needs them (no lookahead), so a text refused at a token is not lexed past it;
    ``consumed`` counts the tokens taken, and every token costs the parser a bounded amount of work.
    Every error is a :class:`FilterExpressionError` naming the first offending token.

    >>> parser = Sql92Parser()
    >>> canonical(parser.parse_text("a = 1 OR b")), parser.consumed, parser.lexer.steps <= 4 * 10 + 4
    ('a = 1 OR b', 5, True)
    """

    def __init__(self) -> None:
        self.sql = ""
        self.consumed = 0
        self.lexer: Sql92Lexer | None = None
        #: The token under the cursor (None at the end of the text) and the one taken before it.
        self.current: Token | None = None
        self.previous: Token | None = None
        self._stream: Iterator[Token] = iter(())
        self._max_nesting, self._depth = MAX_NESTING, 0

    def parse_text(self, sql: str, max_nesting: int = MAX_NESTING) -> Node:
        """The tree of ``sql``, lexed as it is parsed; ``lexer`` keeps the lexer (and its steps).

        >>> parser = Sql92Parser()
        >>> canonical(parser.parse_text("a IS NULL = TRUE")), parser.consumed
        ('(a IS NULL) = TRUE', 5)
        """
        self.lexer = Sql92Lexer(sql)
        return self.parse_selector(self.lexer, sql, max_nesting)

    def parse_selector(self, tokens: Iterable[Token], sql: str, max_nesting: int = MAX_NESTING) -> Node:
        """The tree of one whole selector, or :class:`FilterExpressionError`.

        >>> canonical(Sql92Parser().parse_selector(Sql92Lexer("NOT a = 1"), "NOT a = 1"))
        '(NOT a) = 1'
        """
        self.sql, self._stream, self.consumed = sql, iter(tokens), 0
        self.current = self.previous = None
        self._max_nesting, self._depth = max_nesting, 0
        self._step()
        if not self.current:
            raise FilterExpressionError("empty expression", sql, len(sql))
        tree = self._as_boolean(self._or(), None)
        if self.current:
            self._unexpected("AND, OR or the end of the expression")
        return tree

    # -- the cursor -------------------------------------------------------------------------------

    def _step(self) -> None:
        """Take the next token from the stream."""
        if self.current:
            self.previous = self.current
        self.current = next(self._stream, None)
        if self.current:
            self.consumed += 1

    def _take(self, kind: TokenType) -> bool:
        """Step past the current token if it is a ``kind``."""
        if self.current and self.current.token_type == kind:
            self._step()
            return True
        return False

    def _take_any(self, kinds: tuple[TokenType, ...]) -> bool:
        """Step past the current token if it is one of ``kinds``."""
        if self.current and self.current.token_type in kinds:
            self._step()
            return True
        return False

    def _nest(self, tok: Token | None) -> None:
        """One level deeper into parentheses, NOT or a sign; refused past the limit at ``tok``, the level's
        first token."""
        self._depth += 1
        if self._depth > self._max_nesting:
            self._too_deep(tok)

    def _built(self, node: Node, tok: Token) -> Node:
        """``node``, unless its operators nest deeper than the limit (then refused at ``tok``, its operator):
        ``a IS NULL IS NULL ...`` nests as deep as parentheses do, and so does what the tree's users walk."""
        if depth(node) > self._max_nesting:
            self._too_deep(tok)
        return node

    def _too_deep(self, tok: Token | None) -> NoReturn:
        self._fail(f"expression nested more than {self._max_nesting} deep (max_filter_expression_nesting)", tok)

    # -- errors ---------------------------------------------------------------------------------

    def _fail(self, reason: str, at: Token | Node | None) -> NoReturn:
        pos = len(self.sql) if at is None else at.start if isinstance(at, Token) else node_pos(at)
        raise FilterExpressionError(reason, self.sql, pos)

    def _unexpected(self, expected: str) -> NoReturn:
        tok = self.current
        if not tok:
            self._fail(f"unexpected end of expression, expected {expected}", None)
        if tok.token_type == TokenType.UNKNOWN:
            self._fail(tok.text, tok)
        shown = self.sql[tok.start : tok.end + 1]
        shown = repr(shown if len(shown) <= 20 else shown[:20] + "...")
        prev = self.previous
        after_operand = bool(prev) and prev is not None and prev.token_type in _OPERAND_ENDS
        if tok.token_type == TokenType.DASH and self.sql.startswith("--", tok.start):
            self._fail(f"a '--' comment must end with a line break: unexpected {shown}", tok)
        if (
            tok.token_type == TokenType.L_PAREN
            and after_operand
            and prev is not None
            and prev.token_type == TokenType.VAR
        ):
            self._fail(f"function calls are not supported: unexpected {shown}", tok)
        if tok.token_type in (TokenType.PLUS, TokenType.DASH) and after_operand:
            self._fail(f"arithmetic is not supported: unexpected {shown}", tok)
        if tok.token_type == TokenType.VAR and tok.text.upper() == "LIKE":
            self._fail("LIKE is not supported (use CONTAINS, STARTSWITH or ENDSWITH): unexpected 'LIKE'", tok)
        self._fail(f"unexpected {shown}, expected {expected}", tok)

    def _expect(self, kind: TokenType, expected: str) -> Token:
        if not self._take(kind):
            self._unexpected(expected)
        assert self.previous is not None  # the token _take stepped past
        return self.previous

    # -- grammar (a method per production of SelectorParser.jj; OR and AND share one) ---------------

    def _or(self, level: int = 0) -> Node:
        """``and (OR and)*`` at level 0, ``equality (AND equality)*`` at level 1: left-associative, each
        side a boolean expression, one left-deep chain of ``exp.And``/``exp.Or`` (a left operand that is
        the same operator in parentheses is the start of the chain). One method for both keeps the stack
        shallow per nesting level."""
        token, name = _LOGIC_LEVELS[level]
        left = self._or(1) if level == 0 else self._equality()
        if not self._take(token):
            return left
        op = self.previous
        first = self._as_boolean(left, op)
        chain, deepest = first, depth(first) - 1 if type(first) is _CONNECTORS[level] else depth(first)
        while True:
            if deepest >= self._max_nesting:  # the chain is one level above its deepest term
                self._too_deep(op)
            term = self._as_boolean(self._or(1) if level == 0 else self._equality(), None)
            deepest = max(deepest, depth(term))
            if deepest >= self._max_nesting:
                self._too_deep(op)
            chain = logic(name, chain, term, node_pos(first))
            if not self._take(token):
                return chain
            op = self.previous

    def _equality(self) -> Node:
        left = self._comparison()
        while True:
            if self._take_any((TokenType.EQ, TokenType.NEQ)):
                op = self.previous
                assert op is not None  # the token _take_any stepped past
                right = self._comparison()
                for side, at in ((left, op), (right, right)):
                    if isinstance(side, exp.Null):
                        self._fail(f"NULL cannot be compared with '{op.text}', use IS [NOT] NULL", at)
                if _is_boolean_literal(left) and _is_literal(right) and not _is_boolean_literal(right):
                    self._fail(f"{_show(left)} cannot be compared with {_show(right)}", right)
                left = self._built(comparison(op.text, left, right), op)
            elif self._take(TokenType.IS):
                op = self.previous
                assert op is not None  # the token _take stepped past
                negated = self._take(TokenType.NOT)
                self._expect(TokenType.NULL, "NULL" if negated else "NULL or NOT NULL")
                left = self._built(is_null(left, negated), op)
            else:
                return left

    def _comparison(self) -> Node:
        left = self._unary()
        while True:
            tok = self.current
            if tok is None:  # the end: no operator follows
                return left
            kind = tok.token_type
            if kind in (TokenType.GT, TokenType.GTE, TokenType.LT, TokenType.LTE):
                self._step()
                self._orderable(left, tok)
                right = self._unary()
                left = self._built(comparison(tok.text, left, self._orderable(right, None)), tok)
                continue
            negated = kind == TokenType.NOT
            if negated:
                self._step()
                nxt = self.current.token_type if self.current else None
                if nxt not in (TokenType.OPERATOR, TokenType.BETWEEN, TokenType.IN):
                    self._fail(
                        "NOT after an operand must be followed by CONTAINS, STARTSWITH, ENDSWITH, BETWEEN or IN", tok
                    )
                kind = nxt
            if kind == TokenType.OPERATOR:
                assert self.current is not None  # the OPERATOR token
                op = self.current.text
                self._step()
                pattern = self._expect(TokenType.STRING, f"a string literal after {op}").text
                left = self._built(match(op, left, pattern, negated), tok)
            elif kind == TokenType.BETWEEN:
                self._step()
                self._orderable(left, tok)
                low = self._orderable(self._unary(), None)
                self._expect(TokenType.AND, "AND of BETWEEN")
                high = self._orderable(self._unary(), None)
                if (
                    not negated
                    and _is_literal(low)
                    and _is_literal(high)
                    and java_compare(java_type(high), java_value(high), java_type(low), java_value(low)) < 0
                ):
                    self._fail(f"BETWEEN bounds out of order: {canonical(low)} is greater than {canonical(high)}", high)
                left = self._built(between(left, low, high, negated), tok)
            elif kind == TokenType.IN:
                self._step()
                if not isinstance(left, exp.Column):
                    self._fail("IN needs a property on its left", tok)
                self._expect(TokenType.L_PAREN, "'(' after IN")
                values = [self._expect(TokenType.STRING, "a string literal in the IN list").text]
                while self._take(TokenType.COMMA):
                    values.append(self._expect(TokenType.STRING, "a string literal in the IN list").text)
                self._expect(TokenType.R_PAREN, "',' or ')' in the IN list")
                left = in_list(left, tuple(values), negated)  # depth 1: its operand is a property
            else:
                return left

    def _unary(self) -> Node:
        tok = self.current
        self._nest(tok)
        try:
            if tok is not None:  # else no sign nor NOT: the end, which _primary reports
                if self._take(TokenType.PLUS):
                    return set_pos(self._unary(), tok.start)
                if self._take(TokenType.DASH):
                    return self._built(negate(self._unary(), tok.start), tok)
                if self._take(TokenType.NOT):
                    operand = self._unary()
                    return self._built(not_(self._as_boolean(operand, None), tok.start), tok)
            return self._primary()
        finally:
            self._depth -= 1

    def _primary(self) -> Node:
        tok = self.current
        if tok is not None:  # else the end, reported below
            if self._take(TokenType.L_PAREN):
                inner = self._or()
                self._expect(TokenType.R_PAREN, "')'")
                return set_pos(inner, tok.start)
            if self._take(TokenType.VAR):
                return prop(tok.text, tok.start)
            if self._take(TokenType.STRING):
                return literal(tok.text, JavaType.STRING, tok.start)
            if self._take_any((TokenType.TRUE, TokenType.FALSE)):
                return literal(tok.token_type == TokenType.TRUE, JavaType.BOOLEAN, tok.start)
            if self._take(TokenType.NULL):
                return literal(None, JavaType.NULL, tok.start)
            if self._take(TokenType.NUMBER):
                return self._number(tok)
        self._unexpected("a property, a literal, '(', NOT, '+' or '-'")

    def _number(self, tok: Token) -> Node:
        try:
            return number_literal(tok.text, tok.start)
        except ValueError as e:
            self._fail(str(e), tok)

    # -- RocketMQ's construction checks -----------------------------------------------------------

    # An error is reported at ``blame``: the operator for a left operand (the text was fine until
    # the operator came), the operand itself otherwise.

    def _as_boolean(self, node: Node, blame: Token | None) -> Node:
        """asBooleanExpression: a property becomes a boolean cast; a string/number is refused."""
        if is_boolean(node):
            return node
        if isinstance(node, exp.Column):
            return truth(node)
        self._fail(f"{_show(node)} is not a boolean expression", blame or node)

    def _orderable(self, node: Node, blame: Token | None) -> Node:
        """checkLessThanOperand: only numbers, properties and negations can be ordered."""
        if is_boolean(node) or (_is_literal(node) and java_type(node) not in JavaType.numeric()):
            self._fail(f"{_show(node)} cannot be ordered (only numbers and properties can)", blame or node)
        return node


def _show(node: Node) -> str:
    """A node's text for messages, quoted unless it is a string literal (already quoted)."""
    text = canonical(node)
    return text if isinstance(node, exp.Literal) and node.is_string else f"'{text}'"


def _is_literal(node: Node) -> bool:
    return isinstance(node, (exp.Literal, exp.Boolean, exp.Null))


def _is_boolean_literal(node: Node) -> bool:
    return isinstance(node, exp.Boolean)


def number_literal(text: str, at: int = 0) -> Node:
    """The literal of a number token, as ConstantExpression.createFromDecimal / createFloat make it:
    Long range, then Integer if it fits; a float must be a finite double of at least Double.MIN_VALUE
    (so ``0.0`` is refused, with ValueError).

    >>> [(n.sql(), java_type(n).value, java_value(n)) for n in map(number_literal, ("10L", "2147483648", ".5"))]
    [('10', 'Integer', 10), ('2147483648', 'Long', 2147483648), ('0.5', 'Double', 0.5)]
    """
    m = _DECIMAL.fullmatch(text)
    if m:
        # more digits than a long has is out of range; Python also refuses int() of > 4300 digits
        value = int(m.group(1)) if len(m.group(1)) <= 19 else _LONG_MAX + 1
        if value > _LONG_MAX:
            raise ValueError(f"{text} is out of the range of a long")
        return literal(value, JavaType.INT if value <= _INT_MAX else JavaType.LONG, at)
    number = float(text)
    if number == 0.0 or number == float("inf"):
        raise ValueError(f"{text} is outside RocketMQ's float range [4.9E-324, 1.8E308]")
    return literal(number, JavaType.DOUBLE, at)
