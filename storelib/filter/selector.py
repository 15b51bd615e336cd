"""``MessageSelector``: what a consumer asks for, by tag expression, by SQL92 (RocketMQ's client class),
or by a filter class of its own (:mod:`storelib.filter.class_filter`).

>>> MessageSelector.by_tag("TagA || TagB")
MessageSelector(expression_type='TAG', expression='TagA || TagB')
>>> MessageSelector.by_sql("a > 5").expression_type
'SQL92'
>>> MessageSelector.of("TagA").expression_type        # a bare string is a tag expression
'TAG'
>>> MessageSelector.by_class("mypkg.filters:EvenSequence", tags="TagA || TagB")
MessageSelector(expression_type='CLASS', expression='TagA || TagB', filter_class='mypkg.filters:EvenSequence')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from storelib.filter.tag import ExpressionType, build_subscription
from storelib.model.errors import FilterClassError, FilterExpressionError, FilterNotSupportedError

if TYPE_CHECKING:
    from storelib.model.config import StoreConfig

__all__ = ["MessageSelector"]

TAG, SQL92, CLASS = ExpressionType.TAG, ExpressionType.SQL92, ExpressionType.CLASS


@dataclass(frozen=True)
class MessageSelector:
    """An expression and its type: ``TAG`` (``'TagA || TagB'``, ``'*'``), ``SQL92``, or ``CLASS``.

    A ``CLASS`` selector names a filter class by import path (``filter_class``, ``'module:Class'``);
    its ``expression`` is a tag expression that prunes first, as a tag subscription does. The
    registry fills in ``filter_class_crc``, the checksum of the class's source it loaded (RocketMQ's
    CRC of ``filterClassSource``); ``filter_class_source`` is source text to run instead of an
    import (only with ``enable_filter_class_source``).

    >>> s = MessageSelector.of("TagA || TagB")
    >>> s.is_tag, s.is_sql92, MessageSelector.by_sql("a > 1").is_sql92
    (True, False, True)
    >>> MessageSelector.by_sql("a >").parse("TopicTest")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    storelib.model.errors.FilterExpressionError: expression: unexpected end of expression, expected a property, a
        literal, '(', NOT, '+' or '-' (got 'a >') [at line 1, column 4]
    """

    expression_type: str
    expression: str
    filter_class: str | None = None
    filter_class_crc: int | None = None
    filter_class_source: str | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        extra = "".join(
            f", {name}={getattr(self, name)!r}"
            for name in ("filter_class", "filter_class_crc")
            if getattr(self, name) is not None
        )
        source = ", filter_class_source=..." if self.filter_class_source is not None else ""
        return (
            f"MessageSelector(expression_type={self.expression_type!r}, expression={self.expression!r}{extra}{source})"
        )

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
    def by_class(cls, filter_class: str, tags: str | None = None, *, source: str | None = None) -> "MessageSelector":
        """A filter class (``match(msg, context) -> bool``, or ``match_batch(batch, context)``) named by
        import path ``'package.module:Class'`` (or ``'package.module.Class'``), with an optional tag
        expression that prunes first. ``source`` is the module's text, run instead of importing it
        (RocketMQ's ``filterClassSource``; the store must allow it, ``enable_filter_class_source``).

        >>> s = MessageSelector.by_class("mypkg.filters.EvenSequence")
        >>> s.is_class, s.filter_class, s.expression
        (True, 'mypkg.filters:EvenSequence', '*')
        >>> MessageSelector.by_class("no class")  # doctest: +NORMALIZE_WHITESPACE
        Traceback (most recent call last):
        ...
        storelib.model.errors.FilterClassError: filter_class: must be an import path 'package.module:Class'
            (got 'no class')
        """
        name = _class_path(filter_class, source is not None)
        if source is not None and not isinstance(source, str):
            raise FilterClassError("filter_class_source", "must be the module's source text", value=source)
        return cls(CLASS, "*" if tags is None or not str(tags).strip() else tags, name, None, source)

    @classmethod
    def of(cls, selector: "MessageSelector | str | None") -> "MessageSelector":
        """A selector as given, or a tag selector from a string (``None`` means ``*``)."""
        if isinstance(selector, MessageSelector):
            return selector
        if selector is None or isinstance(selector, str):
            return cls.by_tag(selector)
        raise FilterExpressionError(
            f"a selector is a MessageSelector or a tag string, not {type(selector).__name__}", repr(selector), 0
        )

    @property
    def is_tag(self) -> bool:
        return self.expression_type.upper() == TAG

    @property
    def is_sql92(self) -> bool:
        return self.expression_type.upper() == SQL92

    @property
    def is_class(self) -> bool:
        return self.expression_type.upper() == CLASS

    @property
    def by_tags(self) -> bool:
        """The consume queue stage compares tag codes (a tag selector, or a class selector's tag prefilter)."""
        return self.is_tag or self.is_class

    def parse(self, topic: str, config: "StoreConfig | None" = None) -> None:
        """``FilterAPI.build``: raise :class:`FilterExpressionError` (SUBSCRIPTION_PARSE_FAILED) for an
        expression outside its type's grammar, :class:`FilterNotSupportedError` for an unknown type.
        A SQL92 expression is held to ``config``'s length and nesting limits (the defaults without one).

        >>> MessageSelector.by_tag("||").parse("TopicTest")
        Traceback (most recent call last):
        ...
        storelib.model.errors.FilterExpressionError: expression: ...
        >>> from storelib.model.config import StoreConfig
        >>> MessageSelector.by_sql("a = 1 OR b = 2").parse(  # doctest: +NORMALIZE_WHITESPACE
        ...     "TopicTest", StoreConfig(max_filter_expression_length=8))
        Traceback (most recent call last):
        ...
        storelib.model.errors.FilterExpressionError: expression: expression longer than 8 characters
            (max_filter_expression_length) ...
        """
        if self.is_sql92:
            from storelib.filter.sql92 import parse_sql92  # sqlglot, imported where a SQL92 selector is

            parse_sql92(self.expression, **sql92_limits(config))
        elif self.by_tags:
            build_subscription(topic, self.expression, TAG if self.is_class else self.expression_type)
            if self.is_class:
                _class_path(self.filter_class, self.filter_class_source is not None)
        else:
            raise FilterNotSupportedError(
                "expression_type", "only TAG, SQL92 and CLASS selectors exist", value=self.expression_type
            )

    def with_crc(self, crc: int) -> "MessageSelector":
        """This class selector with the checksum of the class source it stands for.

        >>> MessageSelector.by_class("m:F").with_crc(7).filter_class_crc
        7
        """
        return MessageSelector(self.expression_type, self.expression, self.filter_class, crc, self.filter_class_source)


def sql92_limits(config: "StoreConfig | None") -> dict[str, int]:
    """:func:`~storelib.filter.sql92.parse_sql92`'s limits from a store's settings (none: its defaults)."""
    if config is None:
        return {}
    return {"max_length": config.max_filter_expression_length, "max_nesting": config.max_filter_expression_nesting}


def _class_path(name: object, from_source: bool) -> str:
    """``'module:Class'`` from ``'module:Class'`` or ``'module.Class'`` (a bare ``'Class'`` only with source)."""
    text = name.strip() if isinstance(name, str) else ""
    module, sep, cls = text.rpartition(":") if ":" in text else text.rpartition(".")
    if not sep and from_source:
        module, cls = "", text
    parts = ([p for p in module.split(".")] if module else []) + [cls]
    if not cls or (not module and not from_source) or not all(p.isidentifier() for p in parts):
        raise FilterClassError("filter_class", "must be an import path 'package.module:Class'", value=name)
    return f"{module}:{cls}" if module else cls
