"""Consumer groups: RocketMQ's SubscriptionGroupConfig and SubscriptionGroupManager on a Delta table.

A group's configuration says whether it may consume, how many queues its ``%RETRY%`` topic has and
how many redeliveries a message gets before it goes to ``%DLQ%``. Groups are created on first use
(``autoCreateSubscriptionGroup``), or explicitly with settings of their own.

>>> GroupConfig("GroupA").retry_max_times, GroupConfig("GroupA").retry_queue_nums
(16, 1)
"""

from __future__ import annotations

from dataclasses import dataclass

from storelib.model.config import refuse_unknown_settings
from storelib.model.errors import ConfigError, require_int
from storelib.model.topic import validate_group

__all__ = ["GroupConfig"]


@dataclass(frozen=True)
class GroupConfig:
    """RocketMQ's ``SubscriptionGroupConfig`` with its defaults."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1
    #: RocketMQ's ``consumeMessageOrderly``: a FIFO group (RocketMQ 5 clients consume each message group in order).
    consume_message_orderly: bool = False

    def __post_init__(self) -> None:
        validate_group(self.group_name)
        for name in ("retry_queue_nums", "retry_max_times", "broker_id", "which_broker_when_consume_slowly"):
            require_int(ConfigError, name, getattr(self, name), 0)
        for name in (
            "consume_enable",
            "consume_from_min_enable",
            "consume_broadcast_enable",
            "consume_message_orderly",
        ):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, "must be true or false", value=getattr(self, name))


refuse_unknown_settings(GroupConfig, "consumer group setting")
