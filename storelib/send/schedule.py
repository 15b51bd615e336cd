"""Where a delayed message waits: RocketMQ's ``HookUtils.handleScheduleMessage`` at send time.

Details: ``docs/internals.md``, section storelib.send.schedule.

>>> plan_schedule("Orders", 1, {"UNIQ_KEY": "K"}, delay_level=3, deliver_ms=None, now=0, levels=18, max_delay_ms=10)
('SCHEDULE_TOPIC_XXXX', 2, {'UNIQ_KEY': 'K', 'DELAY': '3', 'REAL_TOPIC': 'Orders', 'REAL_QID': '1'})
>>> plan_schedule("Orders", 1, {}, delay_level=0, deliver_ms=5, now=0, levels=18, max_delay_ms=10)
('rmq_sys_wheel_timer', 0, {'TIMER_DELIVER_MS': '5', 'TIMER_OUT_MS': '5', 'REAL_TOPIC': 'Orders', 'REAL_QID': '1'})
"""

from __future__ import annotations

import dataclasses
from typing import Mapping

from storelib.model.errors import MessageError, TimerMessageError
from storelib.model.message import Message, MessageConst
from storelib.model.topic import SCHEDULE_TOPIC, TIMER_TOPIC

__all__ = ["TIMER_PROPERTIES", "split_timer_properties", "plan_schedule", "timer_deliver_ms"]

#: The properties a 5.x client sets for any-time delivery (``putProperty``, not user properties).
TIMER_PROPERTIES = (MessageConst.TIMER_DELIVER_MS, MessageConst.TIMER_DELAY_SEC, MessageConst.TIMER_DELAY_MS)


def split_timer_properties(m: Message) -> tuple[Message, dict[str, str]]:
    """The message without the timer properties a 5.x client put among its properties, and those properties.

    >>> split_timer_properties(Message("T", properties={"a": "1", "TIMER_DELAY_SEC": "5"}))[1]
    {'TIMER_DELAY_SEC': '5'}
    """
    props = getattr(m, "properties", None)
    if not isinstance(props, Mapping) or not any(k in props for k in TIMER_PROPERTIES):
        return m, {}
    timer = {k: props[k] for k in TIMER_PROPERTIES if k in props}
    rest = {k: v for k, v in props.items() if k not in TIMER_PROPERTIES}
    return dataclasses.replace(m, properties=rest), timer


def timer_deliver_ms(timer: Mapping[str, object], deliver_time_ms: object, now: int) -> int | None:
    """The deliver time a 5.x client asked for: ``TIMER_DELAY_SEC`` first, then ``TIMER_DELAY_MS``, then
    ``TIMER_DELIVER_MS`` (or ``deliver_time_ms``); None when it asked for none.

    >>> (timer_deliver_ms({"TIMER_DELAY_SEC": "2"}, None, 1000), timer_deliver_ms({}, 7, 0),
    ...  timer_deliver_ms({}, None, 0))
    (3000, 7, None)
    """

    def number(name: str, text: object) -> int:
        if isinstance(text, bool) or not isinstance(text, (int, str)):
            raise TimerMessageError(name, "must be a whole number of milliseconds or seconds", value=text)
        try:
            return int(text)
        except ValueError:
            raise TimerMessageError(name, "must be a whole number of milliseconds or seconds", value=text) from None

    if MessageConst.TIMER_DELAY_SEC in timer:
        return now + number(MessageConst.TIMER_DELAY_SEC, timer[MessageConst.TIMER_DELAY_SEC]) * 1000
    if MessageConst.TIMER_DELAY_MS in timer:
        return now + number(MessageConst.TIMER_DELAY_MS, timer[MessageConst.TIMER_DELAY_MS])
    if MessageConst.TIMER_DELIVER_MS in timer:
        return number(MessageConst.TIMER_DELIVER_MS, timer[MessageConst.TIMER_DELIVER_MS])
    if deliver_time_ms is not None:
        return number("deliver_time_ms", deliver_time_ms)
    return None


def plan_schedule(
    topic: str,
    queue_id: int,
    props: dict[str, str],
    *,
    delay_level: object,
    deliver_ms: int | None,
    now: int,
    levels: int,
    max_delay_ms: int,
    timer: Mapping[str, str] | None = None,
) -> tuple[str, int, dict[str, str]]:
    """Where a message sent to (``topic``, ``queue_id``) is stored, and its properties (see the module docstring).

    >>> plan_schedule("T", 0, {}, delay_level=40, deliver_ms=None, now=0, levels=18, max_delay_ms=1)[:2]
    ('SCHEDULE_TOPIC_XXXX', 17)
    >>> plan_schedule("T", 0, {}, delay_level=0, deliver_ms=99, now=0,  # doctest: +NORMALIZE_WHITESPACE
    ...               levels=18, max_delay_ms=10)
    Traceback (most recent call last):
    ...
    storelib.model.errors.TimerMessageError: deliver_time_ms: is 99 ms away, over the timer's maximum of 10 ms
        (timer_max_delay_ms) (got 99)
    """
    if isinstance(delay_level, bool) or not isinstance(delay_level, int):
        raise MessageError("delay_level", "must be an integer (0: not delayed)", value=delay_level)
    props = dict(props)
    if delay_level > 0:
        level = min(delay_level, levels)
        props[MessageConst.DELAY] = str(level)
        props[MessageConst.REAL_TOPIC] = topic
        props[MessageConst.REAL_QID] = str(queue_id)
        return SCHEDULE_TOPIC, level - 1, props
    props.update(timer or {})
    if deliver_ms is None or deliver_ms <= now:
        return topic, queue_id, props
    if deliver_ms - now > max_delay_ms:
        raise TimerMessageError(
            "deliver_time_ms",
            f"is {deliver_ms - now} ms away, over the timer's maximum of {max_delay_ms} ms (timer_max_delay_ms)",
            value=deliver_ms - now,
        )
    if not timer:
        props[MessageConst.TIMER_DELIVER_MS] = str(deliver_ms)
    props[MessageConst.TIMER_OUT_MS] = str(deliver_ms)
    props[MessageConst.REAL_TOPIC] = topic
    props[MessageConst.REAL_QID] = str(queue_id)
    return TIMER_TOPIC, 0, props
