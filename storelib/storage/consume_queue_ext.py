"""The ConsumeQueueExt: per (topic, queue), one ext unit per message of a topic with SQL92 groups (one
a bitmap is computed for), addressed by ``ext_offset``: the real tag code, the store time and the
filter bitmap (CalcBitMap's Bloom bits), with the registry version the bitmap was computed with. A consume queue unit points at its ext unit by a
decorated address in its tag code field (:mod:`storelib.encoding.ext_addr`).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from storelib.delta.table import Prune, Table
from storelib.storage.consume_queue import queue_files
from storelib.storage.schema import CONSUME_QUEUE_EXT

__all__ = ["CONSUME_QUEUE_EXT", "ext_units", "units"]


def ext_units(ext: Table, topic: str, queue_id: int, lo: int, hi: int) -> pa.Table:
    """Ext units of the queue with ``lo <= ext_offset <= hi``, sorted: real tags code, bitmap, bitmap version.

    >>> from storelib import Message, MessageSelector
    >>> _ = store.subscribe("GroupS", "TopicTest", MessageSelector.by_sql("a > 3"))   # the topic's messages get ext units
    >>> sent = store.send(Message("TopicTest", tags="TagA", properties={"a": "5"})); _ = store.dispatch()
    >>> ext = ext_units(store.context.tables.consume_queue_ext, "TopicTest", sent.queue_id, 0, 9)
    >>> ext.column("ext_offset").to_pylist() == [sent.queue_offset], ext.column("tags_code").to_pylist()
    (True, [2598919])
    """
    actions = ext.prune(queue_files(ext, ext.view(), topic, queue_id), Prune(between={"ext_offset": (lo, hi)}))
    rows = ext.read_arrow(paths=ext.paths(actions),
                          columns=["ext_offset", "tags_code", "filter_bitmap", "filter_version"],
                          filter=(pc.field("topic") == topic) & (pc.field("queue_id") == queue_id)
                          & (pc.field("ext_offset") >= lo) & (pc.field("ext_offset") <= hi))
    return rows.sort_by("ext_offset")


def units(b: pa.RecordBatch, tags_code: pa.Array) -> pa.RecordBatch:
    """Ext units of a batch of commitlog rows: the real ``tags_code``, the store time, and the filter
    bitmap with the registry version it was computed with where the batch carries them (CalcBitMap);
    each unit's ``ext_offset`` is its message's queue offset.

    >>> batch = store.context.tables.commitlog.read_arrow().to_batches()[0]
    >>> units(batch, pa.array([2598919], pa.int64())).column("ext_offset").to_pylist()
    [0]
    """
    n, names = b.num_rows, b.schema.names
    bitmap = b.column("filter_bitmap") if "filter_bitmap" in names else pa.nulls(n, pa.binary())
    version = b.column("filter_version") if "filter_version" in names else pa.nulls(n, pa.int64())
    return pa.RecordBatch.from_arrays(
        [b.column("topic"), b.column("queue_id"), b.column("queue_offset"), b.column("queue_offset"),
         b.column("physical_offset"), b.column("size"), tags_code, b.column("store_timestamp"),
         bitmap, version], schema=CONSUME_QUEUE_EXT.arrow)
