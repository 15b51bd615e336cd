"""RocketMQ's SQL92 lexer: JavaCC longest match over the tokens of ``SelectorParser.jj``, in one pass.

The lexer walks the text once, left to right, keeping the line and column as it goes, and hands
out tokens as the parser asks for them, so a text refused at its first token is not read further.
Every scan looks at each character a bounded number of times: :attr:`Sql92Lexer.steps` counts the
characters examined (each call of a scanning primitive by the span it covers, plus one per token),
so that tests can check the work is linear in the text's length without timing anything.

>>> tokens, steps = tokenize_sql92("a = 'it''s' -- note\\nAND b > .5")
>>> [(t.token_type.name, t.text, t.line, t.col, t.start, t.end) for t in tokens]  # doctest: +NORMALIZE_WHITESPACE
[('VAR', 'a', 1, 1, 0, 0), ('EQ', '=', 1, 3, 2, 2), ('STRING', "it's", 1, 5, 4, 10), ('AND', 'AND', 2, 1, 20, 22),
    ('VAR', 'b', 2, 5, 24, 24), ('GT', '>', 2, 7, 26, 26), ('NUMBER', '.5', 2, 9, 28, 29)]
>>> steps <= 4 * len("a = 'it''s' -- note\\nAND b > .5") + 4
True
"""

from __future__ import annotations

import re
from typing import Iterator

from sqlglot.tokens import Token, TokenType

from storelib.model.validation import lone_surrogate

__all__ = ["Sql92Lexer", "tokenize_sql92", "KEYWORDS", "OPERATORS", "surrogate_reason"]

KEYWORDS = {
    "NOT": TokenType.NOT,
    "AND": TokenType.AND,
    "OR": TokenType.OR,
    "BETWEEN": TokenType.BETWEEN,
    "IN": TokenType.IN,
    "TRUE": TokenType.TRUE,
    "FALSE": TokenType.FALSE,
    "NULL": TokenType.NULL,
    "IS": TokenType.IS,
    "CONTAINS": TokenType.OPERATOR,
    "STARTSWITH": TokenType.OPERATOR,
    "ENDSWITH": TokenType.OPERATOR,
}
OPERATORS = {
    "<>": TokenType.NEQ,
    ">=": TokenType.GTE,
    "<=": TokenType.LTE,
    "=": TokenType.EQ,
    ">": TokenType.GT,
    "<": TokenType.LT,
    "(": TokenType.L_PAREN,
    ")": TokenType.R_PAREN,
    ",": TokenType.COMMA,
    "+": TokenType.PLUS,
    "-": TokenType.DASH,
}
_BAD_CHAR_HINTS = {
    '"': "double quotes are not allowed, string literals use single quotes",
    ";": "';' is not allowed, a subscription is one expression",
    "*": "arithmetic is not supported",
    "/": "arithmetic is not supported",
    "%": "arithmetic is not supported",
}
# JavaCC token regular expressions of SelectorParser.jj, ASCII only (ID has no Unicode letters). Each
# pattern is a run of one character class: it examines what it consumes and one character more.
_SPACES = re.compile(r"[ \t\n\r\f]+")
_WORD = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_DIGITS = re.compile(r"[0-9]*")
_QUOTES = re.compile(r"'+")
_LINE_BREAK = re.compile(r"[\n\r]")
_SPACE_CHARS = frozenset(" \t\n\r\f")
_WORD_START = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_$")
_DIGIT_CHARS = frozenset("0123456789")
_OPERATOR_CHARS = frozenset("<>=(),+-")
_TWO_CHAR_OPERATORS = frozenset(k for k in OPERATORS if len(k) == 2)


def surrogate_reason(char: str) -> str:
    """The reason given for a lone surrogate: text that is no valid Unicode cannot be stored or sent to Spark.

    >>> surrogate_reason(chr(0xD800)).endswith("(a lone surrogate: the expression is not valid Unicode text)")
    True
    """
    return f"unexpected character {char!r} (a lone surrogate: the expression is not valid Unicode text)"


class Sql92Lexer:
    """The tokens of one text, produced lazily: iterate over it (once).

    Keywords come out upper-cased; CONTAINS/STARTSWITH/ENDSWITH as ``OPERATOR`` tokens; a string
    token's text is its decoded value. Text that is no token ends the tokens with one ``UNKNOWN``
    token whose text is the reason, so the parser reports whichever problem comes first. ``steps``
    counts the characters examined so far: under five per character of the text, plus a few.

    >>> lexer = Sql92Lexer("a >= 1 /* c */ OR b IN ('x')")
    >>> [t.text for t in lexer], lexer.steps <= 3 * len(lexer.sql) + 2
    (['a', '>=', '1', 'OR', 'b', 'IN', '(', 'x', ')'], True)
    >>> [(t.token_type.name, t.text, t.start) for t in Sql92Lexer("a = 1 -- no line break")][3:5]
    [('DASH', '-', 6), ('DASH', '-', 7)]
    >>> last = list(Sql92Lexer("x = 'a\\ud800'"))[-1]               # a lone surrogate, even in a string
    >>> last.token_type.name, last.start, "lone surrogate" in last.text
    ('UNKNOWN', 6, True)
    """

    def __init__(self, sql: str):
        self.sql = sql
        self.steps = 0
        self._line = 1
        self._line_start = 0  # offset just after the last "\n" before the scan position
        self._break = -1  # offset of the next line break at or after the last search (len(sql): none)

    def __iter__(self) -> Iterator[Token]:
        return self._scan()

    # -- the scan ---------------------------------------------------------------------------------

    def _token(self, kind: TokenType, text: str, start: int, end: int) -> Token:
        return Token(kind, text, line=self._line, col=start - self._line_start + 1, start=start, end=end - 1)

    def _passed(self, start: int, end: int) -> None:
        """Move the line and column over ``sql[start:end]`` (white space, a comment or a string)."""
        lines = self.sql.count("\n", start, end)
        self.steps += end - start
        if lines:
            self._line += lines
            self._line_start = self.sql.rfind("\n", start, end) + 1
            self.steps += end - self._line_start

    def _surrogate(self, start: int, end: int) -> int | None:
        """Offset of the first lone surrogate in ``sql[start:end]``, if any."""
        self.steps += end - start
        return lone_surrogate(self.sql, start, end)

    def _scan(self) -> Iterator[Token]:
        sql, size = self.sql, len(self.sql)
        pos = 0
        while pos < size:
            self.steps += 1
            char = sql[pos]
            if char in _SPACE_CHARS:
                end = _SPACES.match(sql, pos).end()  # type: ignore[union-attr]
                self.steps += end - pos
                self._passed(pos, end)
                pos = end
            elif char in _WORD_START:
                end = _WORD.match(sql, pos).end()  # type: ignore[union-attr]
                self.steps += end - pos
                text = sql[pos:end]
                kind = KEYWORDS.get(text.upper())
                yield self._token(kind or TokenType.VAR, text.upper() if kind else text, pos, end)
                pos = end
            elif char in _DIGIT_CHARS or (char == "." and sql[pos + 1 : pos + 2] in _DIGIT_CHARS):
                for start, end in self._numbers(pos):
                    yield self._token(TokenType.NUMBER, sql[start:end], start, end)
                    pos = end
            elif char == "'":
                end = self._string_end(pos)
                if end is None:
                    yield self._token(TokenType.UNKNOWN, "unterminated string literal", pos, size)
                    return
                if (bad := self._surrogate(pos, end)) is not None:
                    yield self._token(TokenType.UNKNOWN, surrogate_reason(sql[bad]), bad, bad + 1)
                    return
                yield self._token(TokenType.STRING, sql[pos + 1 : end - 1].replace("''", "'"), pos, end)
                self._passed(pos, end)
                pos = end
            elif char == "/" and sql.startswith("*", pos + 1):
                close = sql.find("*/", pos + 2)
                if close < 0:
                    self.steps += size - pos
                    yield self._token(TokenType.UNKNOWN, "unterminated comment", pos, pos + 1)
                    return
                end = close + 2
                self.steps += end - pos
                if (bad := self._surrogate(pos, end)) is not None:
                    yield self._token(TokenType.UNKNOWN, surrogate_reason(sql[bad]), bad, bad + 1)
                    return
                self._passed(pos, end)
                pos = end
            elif char == "-" and sql.startswith("-", pos + 1) and self._line_break(pos + 2) < size:
                end = self._break + (2 if sql.startswith("\r\n", self._break) else 1)
                if (bad := self._surrogate(pos, end)) is not None:
                    yield self._token(TokenType.UNKNOWN, surrogate_reason(sql[bad]), bad, bad + 1)
                    return
                self._passed(pos, end)
                pos = end
            elif char in _OPERATOR_CHARS:
                end = pos + 2 if sql[pos : pos + 2] in _TWO_CHAR_OPERATORS else pos + 1
                self.steps += 1
                yield self._token(OPERATORS[sql[pos:end]], sql[pos:end], pos, end)
                pos = end
            else:
                reason = (
                    surrogate_reason(char)
                    if "\ud800" <= char <= "\udfff"
                    else _BAD_CHAR_HINTS.get(char, f"unexpected character {char!r}")
                )
                yield self._token(TokenType.UNKNOWN, reason, pos, pos + 1)
                return

    def _line_break(self, start: int) -> int:
        """Offset of the first line break at or after ``start`` (``len(sql)`` if none). Each search
        starts past the previous answer, so the searches together read the text once: a text of
        ``--`` without a line break after it is not rescanned at every dash."""
        if self._break < start:
            found = _LINE_BREAK.search(self.sql, start)
            self._break = len(self.sql) if found is None else found.start()
            self.steps += self._break - start + 1
        return self._break

    def _numbers(self, pos: int) -> Iterator[tuple[int, int]]:
        """(start, end) of the number tokens at ``pos``: one FLOATING_POINT_LITERAL, else the
        DECIMAL_LITERALs of the digit run (``0|[1-9][0-9]*[lL]?``, so ``007`` is ``0``, ``0``, ``7``).
        What follows the run decides for every token of it alike, so the run is read once."""
        sql, size = self.sql, len(self.sql)
        digits_end = _DIGITS.match(sql, pos).end()  # type: ignore[union-attr]
        end, is_float = digits_end, False
        if end < size and sql[end] == ".":
            fraction_end = _DIGITS.match(sql, end + 1).end()  # type: ignore[union-attr]
            if digits_end > pos or fraction_end > end + 1:
                end, is_float = fraction_end, True
        if end < size and sql[end] in "eE":
            exponent = end + 2 if sql[end + 1 : end + 2] in ("+", "-") else end + 1
            exponent_end = _DIGITS.match(sql, exponent).end()  # type: ignore[union-attr]
            if exponent_end > exponent:
                end, is_float = exponent_end, True
        self.steps += end - pos + 2
        if is_float:
            yield pos, end
            return
        while pos < digits_end and sql[pos] == "0":
            yield pos, pos + 1
            pos += 1
        if pos < digits_end:
            yield pos, digits_end + 1 if sql[digits_end : digits_end + 1] in ("l", "L") else digits_end

    def _string_end(self, start: int) -> int | None:
        """End (exclusive) of the longest ``'...'`` literal at ``start`` (``''`` escapes a quote).

        Inside, every run of quotes must have even length; a run of odd length ends the literal
        with its last quote. At the end of the text the longest literal is the one closed by the
        last quote of the last run (an even run less one), if any. A text scanned to its end this
        way has no quote after that run, so the next scan (from it) reads that tail once more and
        stops: at most two reads of any character."""
        sql, size = self.sql, len(self.sql)
        at, last = start + 1, None
        while True:
            quote = sql.find("'", at)
            if quote < 0:
                self.steps += size - at
                return last
            run_end = _QUOTES.match(sql, quote).end()  # type: ignore[union-attr]
            self.steps += run_end - at + 1
            if (run_end - quote) % 2:
                return run_end
            last, at = run_end - 1, run_end


def tokenize_sql92(text: str) -> tuple[list[Token], int]:
    """All tokens of ``text`` (the last one ``UNKNOWN`` if some text is no token) and the lexer's steps.

    >>> tokens, steps = tokenize_sql92("a = 007")
    >>> [t.text for t in tokens], steps <= 4 * len("a = 007") + 4
    (['a', '=', '0', '0', '7'], True)
    >>> [(t.token_type.name, t.text, t.start) for t in tokenize_sql92("a = 'x")[0]]
    [('VAR', 'a', 0), ('EQ', '=', 2), ('UNKNOWN', 'unterminated string literal', 4)]
    """
    lexer = Sql92Lexer(text)
    tokens = list(lexer)
    return tokens, lexer.steps
