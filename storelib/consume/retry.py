"""Sending a message back after its consumption failed: RocketMQ's ``consumerSendMsgBack``.

The store stores a copy of the message for later: delayed into the group's retry topic
``%RETRY%<group>``, or into the dead letter topic ``%DLQ%<group>`` once it was redelivered too often.
The rules and the copy's properties are in ``docs/internals.md``.

>>> m = store.query_by_id(r.msg_id)
>>> sent = store.send_back(m, "GroupA")
>>> sent.topic, sent.queue_id                                     # delay level 3: schedule queue 2
('SCHEDULE_TOPIC_XXXX', 2)
>>> back = store.query_by_id(sent.msg_id)
>>> back.properties["REAL_TOPIC"], back.properties["DELAY"], back.reconsume_times
('%RETRY%GroupA', '3', 1)
>>> store.send_back(back, "GroupA", delay_level=-1).topic
'%DLQ%GroupA'

Where the group's ``retry_queue_nums`` is 0, nothing is stored and the answer's ``send_status``
is :data:`NOT_STORED` (RocketMQ answers SUCCESS without storing anything: the message is dropped).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from storelib.context import StoreContext
from storelib.model.errors import (
    MessageError,
    MessageNotFoundError,
    StorePermissionError,
    TopicPermissionError,
    require_int,
)
from storelib.model.message import MessageConst, SendResult, StoredMessage
from storelib.model.topic import (
    PERM_READ,
    PERM_WRITE,
    SCHEDULE_TOPIC,
    TopicConfig,
    dlq_topic,
    retry_topic,
    validate_group,
)
from storelib.storage.commitlog import EncodedMessage
from storelib.storage.commitlog_reads import read_messages

if TYPE_CHECKING:
    from storelib.model.group import GroupConfig

__all__ = ["send_back", "plan_send_back", "SendBackPlan", "NOT_STORED", "DLQ_NUMS_PER_GROUP", "FIRST_RETRY_LEVEL"]

#: ``send_status`` of a send back that stored nothing (the group has no retry queues).
NOT_STORED = "NOT_STORED"
#: ``MixAll.DLQ_NUMS_PER_GROUP``: queues of a ``%DLQ%`` topic.
DLQ_NUMS_PER_GROUP = 1
#: Delay level of a first redelivery asked for with level 0 (``3 + reconsumeTimes``).
FIRST_RETRY_LEVEL = 3


@dataclass(frozen=True)
class SendBackPlan:
    """Where a sent-back message goes, decided before anything is written.

    ``topic``/``queue_id`` are where it is stored; ``real_topic``/``real_queue_id`` where it is
    delivered (the retry queue) when ``delay_level > 0``; ``dead`` when it goes to ``%DLQ%``.
    """

    topic: str
    queue_id: int
    real_topic: str
    real_queue_id: int
    delay_level: int
    dead: bool


def _check_input(
    ctx: StoreContext, msg: object, group: object, delay_level: object, max_reconsume_times: object
) -> None:

    if not isinstance(msg, StoredMessage):
        raise MessageError(
            "msg", "must be a storelib.StoredMessage (a message read from this store)", value=type(msg).__name__
        )
    require_int(MessageError, "msg.commitlog_offset", msg.commitlog_offset, 0)
    validate_group(group)
    require_int(MessageError, "delay_level", delay_level)
    require_int(MessageError, "max_reconsume_times", max_reconsume_times, optional=True)


def plan_send_back(
    reconsume_times: int,
    group: str,
    retry_queue_id: int,
    delay_level: int,
    max_reconsume_times: int,
    max_delay_level: int,
) -> SendBackPlan:
    """The decision of ``consumerSendMsgBack`` and ``transformDelayLevelMessage`` for one message.

    >>> plan_send_back(0, "G", 0, 0, 16, 18)  # doctest: +NORMALIZE_WHITESPACE
    SendBackPlan(topic='SCHEDULE_TOPIC_XXXX', queue_id=2, real_topic='%RETRY%G', real_queue_id=0,
        delay_level=3, dead=False)
    >>> plan_send_back(16, "G", 0, 0, 16, 18).topic, plan_send_back(0, "G", 0, -1, 16, 18).topic
    ('%DLQ%G', '%DLQ%G')
    >>> plan_send_back(15, "G", 0, 0, 16, 18).delay_level      # 3 + 15, still within the 18 levels
    18
    >>> plan_send_back(0, "G", 0, 40, 16, 18).queue_id         # capped at the last level
    17
    """
    if reconsume_times >= max_reconsume_times or delay_level < 0:
        dead = dlq_topic(group)
        return SendBackPlan(dead, random.randrange(DLQ_NUMS_PER_GROUP), dead, 0, 0, True)
    retry = retry_topic(group)
    if delay_level == 0:
        delay_level = FIRST_RETRY_LEVEL + reconsume_times
    delay_level = min(delay_level, max_delay_level)
    return SendBackPlan(SCHEDULE_TOPIC, delay_level - 1, retry, retry_queue_id, delay_level, False)


def ensure_topic(ctx: StoreContext, topic: str, queues: int) -> TopicConfig:
    """``createTopicInSendMessageBackMethod``: the topic's configuration, created read|write where absent."""
    found = ctx.topics.all().get(topic)
    if found is None:
        found = TopicConfig(topic, queues, queues, PERM_READ | PERM_WRITE)
        ctx.topics.put(found)
    return found


def send_back(
    ctx: StoreContext, msg: "StoredMessage", group: str, delay_level: int = 0, max_reconsume_times: int | None = None
) -> SendResult:
    """Store ``msg`` again for ``group``'s retry (delayed) or dead letter topic; see the module docstring.

    Checks, in RocketMQ's order: the group's configuration (SUBSCRIPTION_GROUP_NOT_EXIST where it
    is missing and groups are not created on first use), the store's write permission
    (NO_PERMISSION), the group's retry queues (none: nothing stored, ``send_status`` NOT_STORED),
    the retry topic's write permission (NO_PERMISSION), and the message itself, read again at its
    commitlog offset (gone: :class:`MessageNotFoundError` with code SYSTEM_ERROR).
    """
    _check_input(ctx, msg, group, delay_level, max_reconsume_times)
    config: "GroupConfig" = ctx.groups.find(group)
    if not ctx.config.broker_permission & PERM_WRITE:
        raise StorePermissionError(
            None,
            f"the store is not writable (broker_permission {ctx.config.broker_permission}); "
            "sending messages back is forbidden",
            value=ctx.config.broker_permission,
        )
    retry = retry_topic(group)
    if config.retry_queue_nums <= 0:
        return SendResult(NOT_STORED, "", msg.uniq_key or "", retry, -1, -1, -1)

    retry_config = ensure_topic(ctx, retry, config.retry_queue_nums)
    if not retry_config.writable:
        raise TopicPermissionError(
            "topic",
            f"the topic {retry} is not writable (perm {retry_config.perm}); sending messages back is forbidden",
            value=retry,
        )
    found = list(
        read_messages(ctx.tables.commitlog, ctx.tables.commitlog.view().actions, [msg.commitlog_offset]).values()
    )
    if not found:
        raise MessageNotFoundError(
            "msg.commitlog_offset",
            f"look message by offset failed, {msg.commitlog_offset}",
            value=msg.commitlog_offset,
            code="SYSTEM_ERROR",
        )
    old = found[0]

    # RocketMQ draws from retryQueueNums; an older retry topic with fewer queues bounds the draw,
    # so that no message goes to a queue its consumers never read.
    queue_id = random.randrange(max(1, min(config.retry_queue_nums, retry_config.write_queue_nums)))
    limit = config.retry_max_times if max_reconsume_times is None else max_reconsume_times
    levels = ctx.config.delay_levels_ms
    plan = plan_send_back(old.reconsume_times, group, queue_id, delay_level, limit, len(levels))

    props = dict(old.properties)
    props.setdefault(MessageConst.RETRY_TOPIC, old.topic)
    props[MessageConst.DELAY] = str(plan.delay_level)
    times = old.reconsume_times + 1
    props[MessageConst.RECONSUME_TIME] = str(times)
    if not (props.get(MessageConst.ORIGIN_MESSAGE_ID) or "").strip():
        props[MessageConst.ORIGIN_MESSAGE_ID] = old.msg_id
    if plan.dead:
        ensure_topic(ctx, plan.topic, DLQ_NUMS_PER_GROUP)
    else:
        ensure_topic(ctx, SCHEDULE_TOPIC, len(levels))
        props[MessageConst.REAL_TOPIC] = plan.real_topic
        props[MessageConst.REAL_QID] = str(plan.real_queue_id)

    encoded = EncodedMessage(
        plan.topic,
        plan.queue_id,
        old.sysflag,
        old.flag,
        bytes(old.body),
        props,
        old.born_timestamp,
        old.born_host,
        reconsume_times=times,
    )
    rows = ctx.commitlog.append([encoded]).rows
    assert rows is not None  # append answers a row per message
    return SendResult.of_row(rows[0])
