"""Consumer lag: how far a group is behind on each queue it reads (RocketMQ's ``getConsumeStats``).

>>> store.consumer_lag("GroupDoc").columns
['topic', 'queue_id', 'max_offset', 'committed_offset', 'lag']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from storelib.context import StoreContext
from storelib.model.topic import retry_topic, validate_group
from storelib.storage.consume_queue import max_offsets

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["consumer_lag", "CONSUMER_LAG_DDL"]

#: Columns of :func:`consumer_lag`'s DataFrame.
CONSUMER_LAG_DDL = "topic string, queue_id int, max_offset long, committed_offset long, lag long"


def consumer_lag(ctx: StoreContext, group: str) -> "DataFrame":
    """How far ``group`` is behind on each queue it reads (RocketMQ's ``getConsumeStats``).

    Queues: every queue (``0..read_queue_nums-1``) of each topic the group has a live subscription
    to, of the group's ``%RETRY%`` topic where that topic exists, and of every topic it committed
    offsets for (with any committed queue beyond the topic's read queues). ``max_offset`` is the
    queue's dispatched end (``getMaxOffsetInQueue``), ``committed_offset`` the committed offset or
    0 when none, ``lag`` their difference. Computed on the driver from table metadata and the
    group's offset rows; returned as a small DataFrame sorted by topic and queue.
    """
    validate_group(group)
    topics = ctx.topics.all()
    committed: dict[tuple[str, int], int] = {
        (r["topic"], r["queue_id"]): r["offset"] for r in ctx.offsets.offsets(group).to_pylist()}
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
    return ctx.spark.createDataFrame(rows, CONSUMER_LAG_DDL)
