"""Subscribing: what a consumer's heartbeat registers (RocketMQ's ``ConsumerManager.registerConsumer``
with ``ConsumerFilterManager.register``): the group's configuration, its subscription to the topic,
and the group's ``%RETRY%`` topic.

>>> subscribe(store.context, "GroupDoc", "TopicTest", "TagA || TagB").version >= 1
True
"""

from __future__ import annotations

from storelib.consume.retry import ensure_topic
from storelib.context import StoreContext
from storelib.filter.selector import MessageSelector
from storelib.filter.subscription import Subscription, check_selector
from storelib.model.topic import retry_topic

__all__ = ["subscribe"]


def subscribe(ctx: StoreContext, group: str, topic: str, selector: MessageSelector | str | None = None) -> Subscription:
    """Register ``group``'s subscription to ``topic`` (a tag expression or a selector); a later call
    replaces it and bumps its version. Creates the group's configuration on first use (unless
    ``auto_create_subscription_group`` is off) and its ``%RETRY%`` topic. The selector is checked
    (:func:`~storelib.filter.subscription.check_selector`) before anything is written."""
    ctx.topics.get(topic)
    selector = check_selector(topic, selector, ctx.config, group, subscribing=True)
    group_config = ctx.groups.find(group)
    subscription = ctx.registry.register(group, topic, selector)
    if group_config.retry_queue_nums > 0:
        ensure_topic(ctx, retry_topic(group), group_config.retry_queue_nums)
    return subscription
