"""The ConsumeQueueExt: per (topic, queue), one ext unit per message, addressed by ``ext_offset``:
the real tag code, the store time and the filter bitmap (CalcBitMap's Bloom bits), with the
registry version the bitmap was computed with. A consume queue unit points at its ext unit by a
decorated address in its tag code field (:mod:`storelib.encoding.ext_addr`).
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from storelib.delta.table import Prune, Table
from storelib.storage.schema import CONSUME_QUEUE_EXT

__all__ = ["CONSUME_QUEUE_EXT", "ext_units"]


def ext_units(ext: Table, topic: str, queue_id: int, lo: int, hi: int) -> pa.Table:
    """Ext units of the queue with ``lo <= ext_offset <= hi``, sorted: real tags code, bitmap, bitmap version."""
    actions = ext.prune(Table.only(ext.view().actions, {"topic": topic, "queue_id": queue_id}),
                        Prune(between={"ext_offset": (lo, hi)}))
    rows = ext.read_arrow(paths=ext.paths(actions),
                          columns=["ext_offset", "tags_code", "filter_bitmap", "filter_version"],
                          filter=(pc.field("topic") == topic) & (pc.field("queue_id") == queue_id)
                          & (pc.field("ext_offset") >= lo) & (pc.field("ext_offset") <= hi))
    return rows.sort_by("ext_offset")
