"""The ConsumeQueue: per (topic, queue), one unit per message: commitlog offset, size and tag code
(or the decorated address of its ConsumeQueueExt unit). Its rows, built by dispatch from the
commitlog, and its look-ups, point reads with pyarrow over a warm snapshot view.

>>> roll_next_file(299_999, 300_000), roll_next_file(300_000, 300_000)
(300000, 600000)
>>> min_queue_marker("TopicTest", 3)
'cqmin/TopicTest/3'
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.delta.log import TableView
from storelib.delta.stats import Prune, ranges
from storelib.delta.table import Table
from storelib.encoding.arrow import Distinct, queue_groups
from storelib.storage.schema import CONSUME_QUEUE

__all__ = [
    "CONSUME_QUEUE",
    "CQ_STORE_UNIT_SIZE",
    "roll_next_file",
    "queue_max_offset",
    "max_offsets",
    "read_units",
    "contiguous",
    "min_queue_marker",
    "queue_files",
    "queue_offsets",
    "queue_min_offset",
    "min_offset",
    "moved_min_offsets",
    "units",
]

#: Bytes of one ConsumeQueue unit: commitlog offset (8), size (4), tags code (8).
CQ_STORE_UNIT_SIZE = 20


def roll_next_file(offset: int, units_per_file: int) -> int:
    """``ConsumeQueue.rollNextFile``: the first queue offset of the queue file after the one holding ``offset``."""
    return offset + units_per_file - offset % units_per_file


def min_queue_marker(topic: str, queue_id: int) -> str:
    """Name of the consume queue ``txn`` marker holding (topic, queue_id)'s min logical offset.

    >>> min_queue_marker("TopicTest", 3)
    'cqmin/TopicTest/3'
    """
    return f"cqmin/{topic}/{queue_id}"


def queue_files(cq: Table, view: TableView, topic: str, queue_id: int) -> pa.Table:
    """The add actions of (topic, queue_id)'s own files in ``view`` of the consume queue (or of the ext
    table: any table whose writers cluster its files by queue), as :meth:`Table.only` finds them. Worked
    out once per version in this process, for every queue at once: every pull of a queue and every
    check of a held one asks for them.

    >>> cq = store.context.tables.consume_queue
    >>> queue_files(cq, cq.view(), "TopicTest", r.queue_id).num_rows
    1
    """

    def own(v: TableView) -> pa.Table:
        files, at = cq.memo("queue_files", _by_queue, view=v)
        rows = at.get((topic, queue_id))
        return files.slice(0, 0) if rows is None else files.take(pa.array(rows))

    return cq.memo(f"queue_files\0{topic}\0{queue_id}", own, view=view)


def _by_queue(view: TableView) -> tuple[pa.Table, dict[tuple[str, int], np.ndarray]]:
    """The files of ``view`` that hold one queue each, and by (topic, queue_id) their rows among them, in order."""
    files = Table.clustered(view.actions, ["topic", "queue_id"])
    if files.num_rows == 0:
        return files, {}
    pairs, inverse, counts = queue_groups(Distinct.of(files.column("min.topic")), files.column("min.queue_id"))
    return files, dict(zip(pairs, np.split(np.argsort(inverse, kind="stable"), np.cumsum(counts)[:-1])))


def queue_offsets(cq: Table, view: TableView, topic: str, queue_id: int) -> tuple[int, int]:
    """``(getMinOffsetInQueue, getMaxOffsetInQueue)`` of (topic, queue_id) in ``view`` of the consume queue:
    :func:`queue_min_offset` (by the ``cqmin`` marker where the view holds it) and :func:`queue_max_offset`
    of the queue's :func:`queue_files`, worked out once per version (every pull and held pull asks).

    >>> cq = store.context.tables.consume_queue
    >>> queue_offsets(cq, cq.view(markers=[min_queue_marker("TopicTest", r.queue_id)]), "TopicTest", r.queue_id)
    (0, 1)
    """
    marker = min_queue_marker(topic, queue_id)

    def offsets(v: TableView) -> tuple[int, int]:
        files = queue_files(cq, v, topic, queue_id)
        top = queue_max_offset(files)
        return (queue_min_offset(v.markers.get(marker), files) if top else 0), top

    return cq.memo(f"queue_offsets\0{topic}\0{queue_id}\0{marker in view.markers}", offsets, view=view)


def queue_min_offset(marker: int | None, queue_actions: pa.Table) -> int:
    """``getMinOffsetInQueue`` from the ``cqmin/<topic>/<queue_id>`` marker (once retention has set it),
    else the smallest ``queue_offset`` among the queue's own files (:func:`queue_files`), else 0 (no
    dispatched units).

    >>> cq = store.context.tables.consume_queue
    >>> queue_min_offset(None, queue_files(cq, cq.view(), "TopicTest", r.queue_id))
    0
    """
    if marker is not None:
        return int(marker)
    mins = queue_actions.column("min.queue_offset") if queue_actions.num_rows else []
    low = pc.min(mins).as_py() if len(mins) else None
    return 0 if low is None else int(low)


def queue_max_offset(queue_actions: pa.Table) -> int:
    """``getMaxOffsetInQueue`` from the add actions of one queue's files: one past its last unit, 0 for none.

    >>> actions = Table.only(store.context.tables.consume_queue.view().actions,
    ...                      {"topic": "TopicTest", "queue_id": r.queue_id})
    >>> queue_max_offset(actions)
    1
    """
    if queue_actions.num_rows == 0:
        return 0
    top = pc.max(queue_actions.column("max.queue_offset")).as_py()
    return 0 if top is None else top + 1


def max_offsets(actions: pa.Table) -> dict[tuple[str, int], int]:
    """``getMaxOffsetInQueue`` of every queue at once, from consume queue add actions (files of one queue).

    >>> max_offsets(store.context.tables.consume_queue.view().actions) == {("TopicTest", r.queue_id): 1}
    True
    """
    actions = Table.clustered(actions, ["topic", "queue_id"])
    if actions.num_rows == 0:
        return {}
    tops = actions.group_by(["min.topic", "min.queue_id"]).aggregate([("max.queue_offset", "max")])
    return {
        (t, q): m + 1
        for t, q, m in zip(*(tops.column(c).to_pylist() for c in ("min.topic", "min.queue_id", "max.queue_offset_max")))
        if m is not None
    }


def read_units(cq: Table, queue_actions: pa.Table, lo: int, hi: int) -> pa.Table:
    """The queue's units with ``lo <= queue_offset < hi``, sorted, read with pyarrow from the files among
    ``queue_actions`` (the add actions of the queue's own files, :meth:`Table.only`) whose statistics can hold them.

    >>> cq = store.context.tables.consume_queue
    >>> actions = Table.only(cq.view().actions, {"topic": "TopicTest", "queue_id": r.queue_id})
    >>> read_units(cq, actions, 0, 32).column("commitlog_offset").to_pylist()
    [0]
    """
    actions = cq.prune(ranges(queue_actions, "queue_offset"), Prune(between={"queue_offset": (lo, hi - 1)}))
    rows = cq.read_keyed(
        cq.paths(actions),
        "queue_offset",
        between=(lo, hi),
        columns=["queue_offset", "commitlog_offset", "size", "tags_code"],
    )
    got = rows.column("queue_offset").to_numpy()
    return rows if (got[1:] > got[:-1]).all() else rows.sort_by("queue_offset")


def contiguous(units: pa.Table, offset: int) -> pa.Table:
    """The units from ``offset`` up to the first gap (a queue file that is missing ends the buffer).

    >>> contiguous(pa.table({"queue_offset": [4, 5, 7]}), 4).column("queue_offset").to_pylist()
    [4, 5]
    """
    got = units.column("queue_offset").to_numpy()
    gaps = np.flatnonzero(got != offset + np.arange(len(got)))
    return units.slice(0, int(gaps[0])) if len(gaps) else units


def min_offset(table: Table, topic: str, queue_id: int) -> int:
    """``getMinOffsetInQueue`` of (topic, queue_id) from a warm view of the consume queue table: no data
    file is opened.

    >>> min_offset(store.context.tables.consume_queue, "TopicTest", r.queue_id)
    0
    """
    marker = min_queue_marker(topic, queue_id)
    view = table.view(markers=[marker])
    return queue_min_offset(view.markers.get(marker), queue_files(table, view, topic, queue_id))


def moved_min_offsets(table: Table, queues: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """The min offsets retention moved (``cqmin`` markers) among ``queues``, by (topic, queue_id); queues
    whose min offset is still their first unit's are left out. From the log alone.

    >>> moved_min_offsets(store.context.tables.consume_queue, [("TopicTest", q) for q in range(4)])
    {}
    """
    names = {min_queue_marker(t, q): (t, q) for t, q in queues}
    view = table.view(markers=list(names))
    return {names[m]: int(v) for m, v in view.markers.items() if m in names and v is not None}


def units(b: pa.RecordBatch, tags_code: pa.Array) -> pa.RecordBatch:
    """Consume queue units of a batch of commitlog rows (``putMessagePositionInfo``): where each
    message is, its size, and ``tags_code`` (its tag code, or the decorated address of its ext unit).

    >>> batch = store.context.tables.commitlog.read_arrow().to_batches()[0]
    >>> units(batch, pa.array([7], pa.int64())).column("tags_code").to_pylist()
    [7]
    """
    return pa.RecordBatch.from_arrays(
        [
            b.column("topic"),
            b.column("queue_id"),
            b.column("queue_offset"),
            b.column("physical_offset"),
            b.column("size"),
            tags_code,
            b.column("store_timestamp"),
        ],
        schema=CONSUME_QUEUE.arrow,
    )
