"""``getMessage``: one batch of a queue from a given offset, as RocketMQ's DefaultMessageStore answers it.

The store answers a pull with a status, the messages it found and the offset the consumer should
ask for next (``nextBeginOffset``), all by point reads with pyarrow (no Spark job). The statuses, their
corrections and the scan limits are in ``docs/internals.md``.

>>> g = store.get_message("GroupA", "TopicTest", r.queue_id, 0, 32)
>>> g.status, g.next_begin_offset, len(g.messages)
(<GetMessageStatus.FOUND: 'FOUND'>, 1, 1)
"""

from __future__ import annotations

import enum
import itertools
import os
from dataclasses import dataclass, field
from typing import Iterator, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.context import StoreContext
from storelib.delta.log import TableView
from storelib.delta.table import Table
from storelib.model.message import StoredMessage
from storelib.storage.commitlog import COMMITLOG_MARKER, queue_marker
from storelib.storage.commitlog_reads import min_physical_offset, read_messages
from storelib.storage.consume_queue import (
    CQ_STORE_UNIT_SIZE,
    contiguous,
    min_queue_marker,
    queue_files,
    queue_offsets,
    read_units,
    roll_next_file,
)
from storelib.storage.consume_queue_ext import ext_units_of

__all__ = [
    "GetMessageStatus",
    "GetMessageResult",
    "ConsumeQueueFilter",
    "get_message",
    "passing_units",
    "scan_window",
    "batch_full",
]

_MIN_LONG = -(1 << 63)


class GetMessageStatus(enum.StrEnum):
    """RocketMQ's ``GetMessageStatus``.

    >>> store.get_message("GroupA", "TopicTest", r.queue_id, 1).status      # caught up
    <GetMessageStatus.OFFSET_OVERFLOW_ONE: 'OFFSET_OVERFLOW_ONE'>
    """

    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass
class GetMessageResult:
    """RocketMQ's ``GetMessageResult``: status, messages, offsets, and the bytes transferred.

    >>> g = store.get_message("GroupA", "TopicTest", r.queue_id, 0)
    >>> g.message_count, g.min_offset, g.max_offset, g.buffer_total_size == g.messages[0].size
    (1, 0, 1, True)
    """

    status: GetMessageStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[StoredMessage] = field(default_factory=list)
    #: Queue offset of each message in :attr:`messages`.
    queue_offsets: list[int] = field(default_factory=list)
    buffer_total_size: int = 0
    suggest_pulling_from_slave: bool = False
    #: Messages that passed the consume queue stage but not the commitlog stage (``filterMessageCount``).
    filter_message_count: int = 0

    @property
    def message_count(self) -> int:
        return len(self.messages)


class ConsumeQueueFilter(Protocol):
    """The two checks a pull makes (RocketMQ's ``MessageFilter``); ``passes_every_unit`` when the
    first lets every unit through, so the units' ext rows need not be read.

    >>> from storelib.consume.pull import PullFilter
    >>> from storelib.filter.message_filter import MessageFilter
    >>> from storelib.filter.selector import MessageSelector
    >>> f: ConsumeQueueFilter = PullFilter(MessageFilter("TopicTest", MessageSelector.by_tag("TagB")))
    >>> units = pa.table({"tags_code": [2598919], "filter_bitmap": pa.nulls(1, pa.binary()),
    ...                   "filter_version": pa.nulls(1, pa.int64())})
    >>> f.passes_every_unit, f.consume_queue_mask(units).tolist(), f.is_matched_by_commitlog(
    ...     store.query_by_id(r.msg_id))
    (False, [False], True)
    """

    @property
    def passes_every_unit(self) -> bool: ...

    def consume_queue_mask(self, units: pa.Table) -> "np.ndarray": ...

    def is_matched_by_commitlog(self, message: StoredMessage) -> bool: ...


def total_physical_memory() -> int:
    """RocketMQ's ``StoreUtil.TOTAL_PHYSICAL_MEMORY_SIZE`` (bytes of RAM; 24 GiB where it cannot be read)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 24 * 1024**3


def get_message(
    ctx: StoreContext,
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    max_msgs: int,
    message_filter: ConsumeQueueFilter | None = None,
) -> GetMessageResult:
    """Up to ``max_msgs`` messages of (topic, queue_id) from ``offset`` that pass ``message_filter``.

    No checks of the group, topic or subscription are made here (the pull processor makes them).
    """
    config = ctx.config
    cq, ext, commitlog = ctx.tables.consume_queue, ctx.tables.consume_queue_ext, ctx.tables.commitlog
    marker = min_queue_marker(topic, queue_id)
    cq_view = cq.view(markers=[marker])
    queue_actions = queue_files(cq, cq_view, topic, queue_id)
    if queue_actions.num_rows == 0 and not _queue_exists(ctx, topic, queue_id):
        return GetMessageResult(GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    min_offset, max_offset = queue_offsets(cq, cq_view, topic, queue_id)

    if offset > max_offset and offset <= commitlog.view(markers=[queue_marker(topic, queue_id)]).marker(
        queue_marker(topic, queue_id)
    ):  # in the commitlog, not yet in the consume queue: a follower's tail answered up to here (TailServer.land)
        return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
    if max_offset == 0:
        return GetMessageResult(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0, min_offset, max_offset)
    if offset < min_offset:
        return GetMessageResult(GetMessageStatus.OFFSET_TOO_SMALL, min_offset, min_offset, max_offset)
    if offset == max_offset:
        return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_ONE, offset, min_offset, max_offset)
    if offset > max_offset:
        nxt = min_offset if min_offset == 0 else max_offset
        return GetMessageResult(GetMessageStatus.OFFSET_OVERFLOW_BADLY, nxt, min_offset, max_offset)

    units_per_file = config.consume_queue_file_units
    window = scan_window(config, offset, max_offset, max_msgs)
    # A filter passes an unknown share of the units: read the scan window's units (and their ext rows) at
    # once, which costs about what a read of the first ``max_msgs`` does (a read decodes whole row groups);
    # without one, the first ``max_msgs`` units fill the batch.
    filtering = message_filter is not None and not message_filter.passes_every_unit
    chunks = _unit_chunks(cq, queue_actions, offset, offset + window, window if filtering else max_msgs)
    first = next(chunks, None)
    if first is None:
        return GetMessageResult(
            GetMessageStatus.OFFSET_FOUND_NULL, roll_next_file(offset, units_per_file), min_offset, max_offset
        )

    clog_view = commitlog.view(markers=[COMMITLOG_MARKER])
    max_offset_py = clog_view.marker(COMMITLOG_MARKER)
    clog_min = min_physical_offset(clog_view.actions)
    memory = total_physical_memory() * config.access_message_in_memory_max_ratio // 100
    result = GetMessageResult(GetMessageStatus.NO_MATCHED_MESSAGE, offset, min_offset, max_offset)
    reader = _CommitLogReader(commitlog, clog_view, batch=max_msgs, on_read=getattr(message_filter, "prefetch", None))

    next_phy_file_start = _MIN_LONG
    max_phy_offset_pulling = 0
    taken = 0  # units scanned
    for units in itertools.chain([first], chunks):  # the units are read as the scan reaches them
        passed = passing_units(message_filter, units, ext, topic, queue_id)
        offsets_py = units.column("commitlog_offset").to_pylist()
        sizes = units.column("size").to_pylist()
        unit_offsets = units.column("queue_offset").to_pylist()
        reader.plan([o for o, p in zip(offsets_py, passed) if p and o >= clog_min])
        full = False
        for i, (offset_py, size_py) in enumerate(zip(offsets_py, sizes)):
            max_phy_offset_pulling = offset_py
            if next_phy_file_start != _MIN_LONG and offset_py < next_phy_file_start:
                taken += 1
                continue
            in_disk = (max_offset_py - offset_py) > memory
            if batch_full(config, size_py, max_msgs, result.buffer_total_size, result.message_count, in_disk):
                full = True
                break
            taken += 1
            if not passed[i]:
                if result.buffer_total_size == 0:
                    result.status = GetMessageStatus.NO_MATCHED_MESSAGE
                continue
            message = reader.get(offset_py) if offset_py >= clog_min else None
            if message is None:
                if result.buffer_total_size == 0:
                    result.status = GetMessageStatus.MESSAGE_WAS_REMOVING
                next_phy_file_start = max(clog_min, offset_py + 1)  # commitLog.rollNextFile
                continue
            if message_filter is not None and not message_filter.is_matched_by_commitlog(message):
                if result.buffer_total_size == 0:
                    result.status = GetMessageStatus.NO_MATCHED_MESSAGE
                result.filter_message_count += 1
                continue
            result.messages.append(message)
            result.queue_offsets.append(unit_offsets[i])
            result.buffer_total_size += size_py
            result.status = GetMessageStatus.FOUND
            next_phy_file_start = _MIN_LONG
        if full or max_msgs <= result.message_count:  # full: the next unit would not be taken either
            break
    result.next_begin_offset = offset + taken
    result.suggest_pulling_from_slave = (max_offset_py - max_phy_offset_pulling) > memory
    return result


def _unit_chunks(cq: Table, queue_actions: pa.Table, offset: int, end: int, first: int) -> Iterator[pa.Table]:
    """The queue's units from ``offset`` up to ``end`` or the first gap, read in chunks of ``first``
    units, then twice the last: a pull whose batch fills early reads no more of the scan window."""
    at, size = offset, max(first, 1)
    while at < end:
        hi = min(end, at + size)
        units = read_units(cq, queue_actions, at, hi)
        if units.num_rows == 0 or units.column("queue_offset")[0].as_py() != at:
            return
        units = contiguous(units, at)
        yield units
        if units.num_rows < hi - at:  # a gap: a missing queue file ends the buffer
            return
        at, size = hi, size * 2


def scan_window(config, offset: int, max_offset: int, max_msgs: int) -> int:
    """How many units from ``offset`` a pull scans: ``max(max_filter_message_size, max_msgs * 20)`` bytes
    of units, never past the queue's end or the end of the queue file holding ``offset``.

    >>> scan_window(store.config, 0, 10_000, 32), scan_window(store.config, 299_990, 10**6, 32)
    (800, 10)
    """
    file_end = min(max_offset, roll_next_file(offset, config.consume_queue_file_units))
    window_bytes = min(
        (file_end - offset) * CQ_STORE_UNIT_SIZE, max(config.max_filter_message_size, max_msgs * CQ_STORE_UNIT_SIZE)
    )
    return -(-window_bytes // CQ_STORE_UNIT_SIZE)


def batch_full(config, size_py: int, max_msgs: int, buffer_total: int, message_total: int, in_disk: bool) -> bool:
    """``isTheBatchFull``: may one more message of ``size_py`` bytes join the batch (no: True)?

    >>> batch_full(store.config, 100, 32, 0, 0, False), batch_full(store.config, 100, 2, 200, 2, False)
    (False, True)
    """
    if buffer_total == 0 or message_total == 0:
        return False
    if max_msgs <= message_total:
        return True
    if in_disk:
        return (
            buffer_total + size_py > config.max_transfer_bytes_on_message_in_disk
            or message_total > config.max_transfer_count_on_message_in_disk - 1
        )
    return (
        buffer_total + size_py > config.max_transfer_bytes_on_message_in_memory
        or message_total > config.max_transfer_count_on_message_in_memory - 1
    )


def passing_units(
    message_filter: ConsumeQueueFilter | None, units: pa.Table, ext: Table, topic: str, queue_id: int
) -> list[bool]:
    """``isMatchedByConsumeQueue`` for every unit at once, with the real tag code, bitmap and bitmap
    version of units whose ``tags_code`` is an ext address. A unit whose ext row is not there passes
    (RocketMQ logs it and lets the client filter).

    >>> from storelib.filter.message_filter import MessageFilter
    >>> from storelib.filter.selector import MessageSelector
    >>> units = store.consume_queue("TopicTest", r.queue_id).toArrow()
    >>> tables = store.context.tables
    >>> passing_units(MessageFilter("TopicTest", MessageSelector.by_tag("TagB")), units, tables.consume_queue_ext,
    ...               "TopicTest", r.queue_id)
    [False]
    """
    n = units.num_rows
    if message_filter is None or message_filter.passes_every_unit:
        return [True] * n
    codes = units.column("tags_code").to_numpy()
    rows, at, is_ext, found = ext_units_of(ext, topic, queue_id, codes)
    if not is_ext.any():
        cq_units = pa.table(
            {"tags_code": codes, "filter_bitmap": pa.nulls(n, pa.binary()), "filter_version": pa.nulls(n, pa.int64())}
        )
        return message_filter.consume_queue_mask(cq_units).tolist()
    from_ext, unknown = pa.array(found), pa.array(is_ext & ~found)

    def column(name: str, plain: pa.Array) -> pa.Array:
        picked = rows.column(name).take(pa.array(at)).combine_chunks() if rows.num_rows else plain
        return pc.if_else(unknown, pa.nulls(n, plain.type), pc.if_else(from_ext, picked, plain))

    cq_units = pa.table(
        {
            "tags_code": column("tags_code", pa.array(codes)),
            "filter_bitmap": column("filter_bitmap", pa.nulls(n, pa.binary())),
            "filter_version": column("filter_version", pa.nulls(n, pa.int64())),
        }
    )
    return message_filter.consume_queue_mask(cq_units).tolist()


# ---- reading the tables ---------------------------------------------------------------------------
def _queue_exists(ctx: StoreContext, topic: str, queue_id: int) -> bool:
    config = ctx.topics.all().get(topic)
    return config is not None and 0 <= queue_id < max(config.read_queue_nums, config.write_queue_nums)


class _CommitLogReader:
    """Commitlog rows at planned offsets, read in growing batches as the scan reaches them.

    A tag pull needs about ``max_msgs`` rows; a SQL92 pull whose matches are rare reads on, each
    batch twice the last, so a scan costs a few reads however selective the filter is.
    """

    def __init__(self, table: Table, view: TableView, batch: int, on_read=None):
        self.table, self.view = table, view
        self.on_read = on_read  # gets each chunk's messages (a filter that checks them all at once)
        self.planned: list[int] = []
        self.position: dict[int, int] = {}
        self.read_upto = 0
        self.batch = max(batch, 8)
        self.rows: dict[int, StoredMessage] = {}

    def plan(self, offsets: list[int]) -> None:
        """Add the offsets of the next units the scan may take, in scan order."""
        self.position.update((o, len(self.planned) + i) for i, o in enumerate(offsets))
        self.planned.extend(offsets)

    def get(self, offset: int) -> StoredMessage | None:
        """The message at ``offset``, or None when the commitlog no longer holds it."""
        if offset not in self.rows:
            i = self.position.get(offset)
            if i is None or i < self.read_upto:
                return None
            chunk = self.planned[i : i + self.batch]
            self._read(chunk)
            self.read_upto, self.batch = i + len(chunk), self.batch * 2
        return self.rows.get(offset)

    def _read(self, offsets: list[int]) -> None:
        rows = read_messages(self.table, self.view.actions, offsets)
        self.rows.update(rows)
        if self.on_read is not None:
            self.on_read(list(rows.values()))
