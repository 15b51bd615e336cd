"""The ConsumeQueueExt: per (topic, queue), one ext unit per message of a topic with SQL92 groups (one
a bitmap is computed for), addressed by ``ext_offset``: the real tag code, the store time and the
filter bitmap (CalcBitMap's Bloom bits), with the registry version the bitmap was computed with. A
consume queue unit points at its ext unit by a decorated address in its tag code field
(:mod:`storelib.encoding.ext_addr`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.delta.stats import Prune
from storelib.delta.table import Table
from storelib.encoding.ext_addr import undecorate_ext_addrs
from storelib.storage.consume_queue import queue_files
from storelib.storage.schema import CONSUME_QUEUE_EXT

__all__ = ["CONSUME_QUEUE_EXT", "ext_units", "ext_units_of", "units"]


def ext_units(ext: Table, topic: str, queue_id: int, lo: int, hi: int) -> pa.Table:
    """Ext units of the queue with ``lo <= ext_offset <= hi``, sorted: real tags code, bitmap, bitmap version.

    >>> from storelib import Message, MessageSelector
    >>> _ = store.subscribe("GroupS", "TopicTest", MessageSelector.by_sql("a > 3"))  # the topic gets ext units
    >>> sent = store.send(Message("TopicTest", tags="TagA", properties={"a": "5"})); _ = store.dispatch()
    >>> ext = ext_units(store.context.tables.consume_queue_ext, "TopicTest", sent.queue_id, 0, 9)
    >>> ext.column("ext_offset").to_pylist() == [sent.queue_offset], ext.column("tags_code").to_pylist()
    (True, [2598919])
    """
    actions = ext.prune(queue_files(ext, ext.view(), topic, queue_id), Prune(between={"ext_offset": (lo, hi)}))
    rows = ext.read_arrow(
        paths=ext.paths(actions),
        columns=["ext_offset", "tags_code", "filter_bitmap", "filter_version"],
        filter=(pc.field("topic") == topic)
        & (pc.field("queue_id") == queue_id)
        & (pc.field("ext_offset") >= lo)
        & (pc.field("ext_offset") <= hi),
    )
    return rows.sort_by("ext_offset")


def ext_units_of(
    ext: Table, topic: str, queue_id: int, tags_codes: np.ndarray
) -> tuple[pa.Table, np.ndarray, np.ndarray, np.ndarray]:
    """The ext units consume queue units of the queue point at, given their ``tags_codes``: the ext units
    read (:func:`ext_units`, sorted), and per consume queue unit whether its code is an ext address, whether
    that ext unit is there, and its row among those read (0 where not).

    >>> from storelib import Message, MessageSelector
    >>> from storelib.encoding.ext_addr import decorate_ext_addrs
    >>> _ = store.subscribe("GroupS", "TopicTest", MessageSelector.by_sql("a > 3"))  # the topic gets ext units
    >>> sent = store.send(Message("TopicTest", tags="TagA", properties={"a": "5"})); _ = store.dispatch()
    >>> codes = np.array([7, decorate_ext_addrs(pa.array([sent.queue_offset])).to_pylist()[0]])
    >>> rows, at, is_ext, found = ext_units_of(
    ...     store.context.tables.consume_queue_ext, "TopicTest", sent.queue_id, codes)
    >>> is_ext.tolist(), found.tolist(), rows.column("tags_code").to_numpy()[at[found]].tolist()
    ([False, True], [False, True], [2598919])
    """
    is_ext, wanted = undecorate_ext_addrs(tags_codes)
    at, found = np.zeros(len(tags_codes), dtype=np.int64), np.zeros(len(tags_codes), dtype=bool)
    if not is_ext.any():
        return CONSUME_QUEUE_EXT.arrow.empty_table(), at, is_ext, found
    rows = ext_units(ext, topic, queue_id, int(wanted[is_ext].min()), int(wanted[is_ext].max()))
    have = rows.column("ext_offset").to_numpy()
    if len(have):
        at = np.minimum(np.searchsorted(have, wanted), len(have) - 1)
        found = is_ext & (have[at] == wanted)
        at = np.where(found, at, 0)
    return rows, at, is_ext, found


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
        [
            b.column("topic"),
            b.column("queue_id"),
            b.column("queue_offset"),
            b.column("queue_offset"),
            b.column("physical_offset"),
            b.column("size"),
            tags_code,
            b.column("store_timestamp"),
            bitmap,
            version,
        ],
        schema=CONSUME_QUEUE_EXT.arrow,
    )
