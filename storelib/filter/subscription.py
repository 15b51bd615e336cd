"""A consumer group's subscription to a topic (RocketMQ's SubscriptionData with ConsumerFilterData), and
the one check a selector passes before a subscription, a pull or a read uses it.

>>> sub = store.subscription("GroupA", "TopicTest")
>>> sub.selector.expression, sub.is_sql92
('TagA || TagB', False)
"""

from __future__ import annotations

import datetime as dt
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from storelib.filter.bloom import BloomFilterData
from storelib.filter.class_filter import ClassFilter, load_filter
from storelib.filter.selector import MessageSelector, sql92_limits
from storelib.filter.tag import ExpressionType, SubscriptionData, build_subscription
from storelib.model.config import StoreConfig
from storelib.model.errors import FilterNotSupportedError

if TYPE_CHECKING:
    from storelib.filter.sql92 import Sql92Expression

__all__ = ["Subscription", "check_selector"]


@dataclass(frozen=True)
class Subscription:
    """A registered subscription of a consumer group to a topic (ConsumerFilterData + SubscriptionData).

    >>> sub = store.subscription("GroupA", "TopicTest")
    >>> sub.selector.expression, sub.is_sql92, sorted(sub.data.tags_set)
    ('TagA || TagB', False, ['TagA', 'TagB'])
    """

    group: str
    topic: str
    selector: MessageSelector
    version: int
    sub_version: int
    born_timestamp: dt.datetime
    bloom: BloomFilterData | None = None
    #: The settings of the registry it came from: :attr:`compiled` parses with their SQL92 limits.
    config: StoreConfig | None = field(default=None, compare=False, repr=False)

    @property
    def is_sql92(self) -> bool:
        return self.selector.is_sql92

    @property
    def is_class(self) -> bool:
        return self.selector.is_class

    @functools.cached_property
    def data(self) -> "SubscriptionData":
        """RocketMQ's SubscriptionData (``FilterAPI.build``): tags set and code set for tag subscriptions
        (for a class subscription, those of its tag prefilter)."""
        kind = ExpressionType.TAG if self.selector.is_class else self.selector.expression_type
        return build_subscription(self.topic, self.selector.expression, kind)

    @functools.cached_property
    def compiled(self) -> "Sql92Expression | None":
        """The SQL92 expression, parsed (``None`` for tag subscriptions)."""
        if not self.is_sql92:
            return None
        from storelib.filter.sql92 import parse_sql92  # sqlglot, imported where a SQL92 selector is

        return parse_sql92(self.selector.expression, **sql92_limits(self.config))


def check_selector(
    topic: str,
    selector: "MessageSelector | str | None",
    config: StoreConfig,
    group: str | None = None,
    *,
    subscribing: bool = False,
) -> MessageSelector:
    """The selector, checked as RocketMQ's broker checks a subscription, or the typed error it would give.

    A SQL92 selector needs ``enable_property_filter`` and must parse within the store's limits; a tag
    selector must parse; a class selector must load here (:class:`FilterClassError`; a module changed
    since this process loaded it is reloaded) and, when it carries a CRC, be that class
    (:class:`SubscriptionNotLatestError`); source text needs ``enable_filter_class_source``. A class
    selector comes back with the CRC of its class as loaded, so one check loads it once.

    >>> check_selector("TopicTest", "TagA || TagB", StoreConfig()).expression
    'TagA || TagB'
    >>> check_selector("TopicTest", MessageSelector.by_sql("a >"), StoreConfig())  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    storelib.model.errors.FilterExpressionError: expression: unexpected end of expression, expected a property, a
        literal, '(', NOT, '+' or '-' (got 'a >') [at line 1, column 4]
    >>> check_selector("TopicTest", MessageSelector.by_class("storelib.filter.class_filter:Everything"),
    ...                StoreConfig()).filter_class_crc > 0
    True
    """
    selector = MessageSelector.of(selector)
    if selector.is_sql92 and not config.enable_property_filter:
        raise FilterNotSupportedError(
            "expression_type",
            "SQL92 filtering is off in this store (enable_property_filter=false)",
            value=selector.expression,
        )
    if selector.is_class and selector.filter_class_source is not None and not config.enable_filter_class_source:
        raise FilterNotSupportedError(
            "filter_class_source",
            "running uploaded filter class source is off in this "
            "store (enable_filter_class_source=false); install the module and name it "
            "by import path",
            value=selector.filter_class,
        )
    selector.parse(topic, config)
    if selector.is_class:
        assert selector.filter_class is not None  # parse checked its import path
        if subscribing:
            return selector.with_crc(load_filter(selector.filter_class, selector.filter_class_source, refresh=True).crc)
        return selector.with_crc(ClassFilter.of(selector, group, topic).load().crc)
    return selector
