"""The store's tables as Spark DataFrames, reading only the files whose statistics can hold the rows asked for.

>>> topic_messages(store.context, "TopicTest").columns[:4]
['physical_offset', 'size', 'topic', 'queue_id']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from storelib.context import StoreContext
from storelib.delta.stats import Prune
from storelib.model.errors import InvalidQueueIdError, OffsetError, StoreError, require_int
from storelib.model.topic import validate_topic
from storelib.storage.consume_queue import min_offset

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["table_rows", "topic_messages", "queue_units"]


def table_rows(ctx: StoreContext, name: str, prune: Prune | None = None) -> "DataFrame":
    """A table's current rows (files skipped by ``prune``'s statistics; rows not filtered by it).

    >>> table_rows(store.context, "consume_queue").count()
    1
    """
    tables = ctx.tables.by_name()
    if name not in tables:
        raise StoreError("name", f"no such table; the store's tables are {sorted(tables)}", value=name)
    return tables[name].read(ctx.spark, prune=prune)


def topic_messages(ctx: StoreContext, topic: str | None = None) -> "DataFrame":
    """Commitlog rows, optionally of one topic."""
    from pyspark.sql import functions as F

    if topic is not None:
        validate_topic(topic)
    df = ctx.tables.commitlog.read(ctx.spark, prune=Prune(equal={"topic": topic}) if topic else None)
    return df.where(F.col("topic") == topic) if topic else df


def queue_units(ctx: StoreContext, topic: str, queue_id: int, begin: int = 0, end: int | None = None) -> "DataFrame":
    """Consume queue rows of one queue with ``begin <= queue_offset < end``, none below the queue's min
    offset (units retention passed but whose file still holds later ones are left out).

    >>> queue_units(store.context, "TopicTest", r.queue_id, 0, 1).first().commitlog_offset
    0
    """
    from pyspark.sql import functions as F

    validate_topic(topic)
    require_int(InvalidQueueIdError, "queue_id", queue_id, 0, 2**31 - 1)
    require_int(OffsetError, "begin", begin, 0)
    require_int(OffsetError, "end", end, 0, optional=True)
    hi = end - 1 if end is not None else 2**63 - 1
    begin = max(begin, min_offset(ctx.tables.consume_queue, topic, queue_id))
    df = ctx.tables.consume_queue.read(
        ctx.spark, prune=Prune(equal={"topic": topic, "queue_id": queue_id}, between={"queue_offset": (begin, hi)})
    )
    return df.where(
        (F.col("topic") == topic)
        & (F.col("queue_id") == queue_id)
        & (F.col("queue_offset") >= begin)
        & (F.col("queue_offset") <= hi)
    )
