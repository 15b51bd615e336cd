"""Consumer lag: how far a group is behind on each queue it reads (RocketMQ's ``getConsumeStats``).

>>> store.consumer_lag("GroupDoc").columns
['topic', 'queue_id', 'max_offset', 'committed_offset', 'lag']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from storelib.context import StoreContext
from storelib.model.topic import retry_topic, validate_group
from storelib.storage.consume_queue import max_offsets
from storelib.storage.consumer_offset import check_offset_entry

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["consumer_lag", "consumer_lag_rows", "commit_offset", "CONSUMER_LAG_DDL"]

#: Columns of :func:`consumer_lag`'s DataFrame.
CONSUMER_LAG_DDL = "topic string, queue_id int, max_offset long, committed_offset long, lag long"


def commit_offset(ctx: StoreContext, group: str, topic: str, queue_id: int, offset: int) -> None:
    """Commit ``group``'s next offset of a queue, with the broker's checks (``updateConsumerOffset``):
    the group must exist (or be auto-created, as a consumer's first request creates it), and the topic
    too (``TOPIC_NOT_EXIST``). As on a broker, a queue id past the topic's read queues is kept, not
    refused (a topic may grow; :func:`consumer_lag` shows such a queue).

    >>> commit_offset(store.context, "GroupA", "NoSuchTopic", 0, 1)  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    storelib.model.errors.TopicNotFoundError: topic: topic NoSuchTopic does not exist in this store; create it first
        (got 'NoSuchTopic')
    """
    validate_group(group)
    check_offset_entry(topic, queue_id, offset)
    ctx.groups.find(group)
    ctx.topics.get(topic)
    ctx.offsets.commit(group, topic, queue_id, offset)


def consumer_lag(ctx: StoreContext, group: str) -> "DataFrame":
    """:func:`consumer_lag_rows` as a small DataFrame (columns :data:`CONSUMER_LAG_DDL`).

    >>> consumer_lag(store.context, "GroupDoc").columns[-1]
    'lag'
    """
    return ctx.spark.createDataFrame(consumer_lag_rows(ctx, group), CONSUMER_LAG_DDL)


def consumer_lag_rows(ctx: StoreContext, group: str) -> list[tuple[str, int, int, int, int]]:
    """How far ``group`` is behind on each queue it reads (RocketMQ's ``getConsumeStats``), as
    ``(topic, queue_id, max_offset, committed_offset, lag)`` tuples sorted by topic and queue; no Spark.

    Queues: every queue (``0..read_queue_nums-1``) of each topic the group has a live subscription
    to, of the group's ``%RETRY%`` topic where that topic exists, and of every topic it committed
    offsets for (with any committed queue beyond the topic's read queues). ``max_offset`` is the
    queue's dispatched end (``getMaxOffsetInQueue``), ``committed_offset`` the committed offset or
    0 when none, ``lag`` their difference. Computed from table metadata and the group's offset rows.

    >>> store.commit_offset("GroupDoc", "TopicTest", r.queue_id, 0)
    >>> rows = consumer_lag_rows(store.context, "GroupDoc")
    >>> len(rows), rows[r.queue_id] == ("TopicTest", r.queue_id, 1, 0, 1)
    (4, True)
    """
    validate_group(group)
    topics = ctx.topics.all()
    committed: dict[tuple[str, int], int] = {
        (r["topic"], r["queue_id"]): r["offset"] for r in ctx.offsets.offsets(group).to_pylist()
    }
    wanted = {s.topic for s in ctx.registry.all() if s.group == group}
    if retry_topic(group) in topics:
        wanted.add(retry_topic(group))
    wanted.update(t for t, _ in committed)
    queues: set[tuple[str, int]] = set(committed)
    for topic in wanted:
        if topic in topics:
            queues.update((topic, q) for q in range(topics[topic].read_queue_nums))
    ends = max_offsets(ctx.tables.consume_queue.view().actions)  # one pass over the file statistics
    rows = []
    for topic, queue_id in sorted(queues):
        max_offset = ends.get((topic, queue_id), 0)
        offset = max(0, committed.get((topic, queue_id), -1))
        rows.append((topic, queue_id, max_offset, offset, max_offset - offset))
    return rows
