"""``MessageSelector``: what a consumer asks for, by tag expression or by SQL92 (RocketMQ's client class).

>>> MessageSelector.by_tag("TagA || TagB")
MessageSelector(expression_type='TAG', expression='TagA || TagB')
>>> MessageSelector.by_sql("a > 5").expression_type
'SQL92'
>>> MessageSelector.of("TagA").expression_type        # a bare string is a tag expression
'TAG'
"""

from __future__ import annotations

from dataclasses import dataclass

from storelib.filter.tag import ExpressionType
from storelib.model.errors import FilterExpressionError, FilterNotSupportedError

__all__ = ["MessageSelector"]

TAG, SQL92 = ExpressionType.TAG, ExpressionType.SQL92


@dataclass(frozen=True)
class MessageSelector:
    """An expression and its type: ``TAG`` (``'TagA || TagB'``, ``'*'``) or ``SQL92``.

    >>> s = MessageSelector.of("TagA || TagB")
    >>> s.is_tag, s.is_sql92, MessageSelector.by_sql("a > 1").is_sql92
    (True, False, True)
    >>> MessageSelector.by_sql("a >").parse("TopicTest")
    Traceback (most recent call last):
    ...
    storelib.model.errors.FilterExpressionError: expression: unexpected end of expression, expected a property, a literal, '(', NOT, '+' or '-' (got 'a >') [at line 1, column 4]
    """

    expression_type: str
    expression: str

    @classmethod
    def by_tag(cls, tag: str | None) -> "MessageSelector":
        """A tag expression: tags joined by ``||``; ``*`` or empty means every message."""
        return cls(TAG, "*" if tag is None or not tag.strip() else tag)

    @classmethod
    def by_sql(cls, sql: str) -> "MessageSelector":
        """A SQL92 expression over the message's properties (TAGS included), e.g. ``a between 0 and 3``."""
        if not isinstance(sql, str) or not sql.strip():
            raise FilterExpressionError("a SQL92 selector needs an expression", "" if sql is None else str(sql), 0)
        return cls(SQL92, sql)

    @classmethod
    def of(cls, selector: "MessageSelector | str | None") -> "MessageSelector":
        """A selector as given, or a tag selector from a string (``None`` means ``*``)."""
        if isinstance(selector, MessageSelector):
            return selector
        if selector is None or isinstance(selector, str):
            return cls.by_tag(selector)
        raise FilterExpressionError(f"a selector is a MessageSelector or a tag string, not {type(selector).__name__}",
                                    repr(selector), 0)

    @property
    def is_tag(self) -> bool:
        return self.expression_type.upper() == TAG

    @property
    def is_sql92(self) -> bool:
        return self.expression_type.upper() == SQL92

    def parse(self, topic: str) -> None:
        """``FilterAPI.build``: raise :class:`FilterExpressionError` (SUBSCRIPTION_PARSE_FAILED) for an
        expression outside its type's grammar, :class:`FilterNotSupportedError` for an unknown type.

        >>> MessageSelector.by_tag("||").parse("TopicTest")
        Traceback (most recent call last):
        ...
        storelib.model.errors.FilterExpressionError: expression: ...
        """
        if self.is_sql92:
            from storelib.filter.sql92 import parse_sql92

            parse_sql92(self.expression)
        elif self.is_tag:
            from storelib.filter.tag import build_subscription

            build_subscription(topic, self.expression, self.expression_type)
        else:
            raise FilterNotSupportedError("expression_type", "only TAG and SQL92 selectors exist",
                                          value=self.expression_type)
