"""Dispatch requests: what each new commitlog message becomes in the consume queue, ext and index.

RocketMQ's ReputMessageService reads a ``DispatchRequest`` out of every new message and hands it
to each dispatcher (build consume queue, calc bitmap, build index). Here a batch of messages is
an Arrow record batch, and :class:`DispatchRequests` cuts it into each target table's rows on the
executors, with numpy and pyarrow over whole batches (hash codes from :mod:`storelib.encoding`).

The batches come from :class:`CommitlogFiles`: inside a single Spark job, each task reads a
contiguous run of commitlog files with pyarrow, with no Spark row conversion at all. When SQL92
subscriptions need filter bitmaps, CalcBitMap runs on the same batches
(:class:`~storelib.dispatch.calc_bitmap.FilterBitmaps`), vectorized on the executors.

>>> import pyarrow as pa
>>> deliver_times(pa.array(["3", None, "x", "0", "99", "+1"]), pa.array([1000] * 6, pa.int64()),
...               [1000, 5000, 10000]).to_pylist()
[11000, None, None, None, 11000, 2000]
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storelib.delta.files import fragment, is_local, local_bytes, parquet_format, remember_sizes
from storelib.encoding.ext_addr import decorate_ext_addrs
from storelib.encoding.tags import tags_codes
from storelib.model.message import MessageConst, SysFlag
from storelib.model.topic import SCHEDULE_TOPIC, TIMER_TOPIC
from storelib.storage import consume_queue, consume_queue_ext, index_file
from storelib.storage.dispatched import queued_mask

if TYPE_CHECKING:
    from storelib.dispatch.calc_bitmap import FilterBitmaps

__all__ = [
    "DispatchRequests",
    "CommitlogFiles",
    "REQUEST_COLUMNS",
    "deliver_times",
    "timer_out_times",
    "queued_units",
]

#: The commitlog columns a dispatch reads (plus ``properties`` when a delay level or bitmap needs it).
REQUEST_COLUMNS = (
    "physical_offset",
    "size",
    "topic",
    "queue_id",
    "queue_offset",
    "store_timestamp",
    "sysflag",
    "tags",
    "keys",
    "uniq_key",
)
_JAVA_INT = r"^[+-]?[0-9]{1,10}$"


def deliver_times(delay: pa.Array, store_ms: pa.Array, delays_ms: Sequence[int]) -> pa.Array:
    """ScheduleMessageService.computeDeliverTimestamp for each message's DELAY property: store time
    plus the delay of its level, the level capped at the highest one. Null where there is no level
    above 0 (``Integer.parseInt`` of the property, null when it is no Java int)."""
    valid = pc.fill_null(pc.match_substring_regex(delay, _JAVA_INT), False)
    digits = pc.replace_substring_regex(pc.if_else(valid, delay, "0"), r"^\+", "")  # Java allows "+3"
    level = pc.cast(digits, pa.int64())
    level = pc.if_else(pc.and_(valid, pc.less_equal(pc.abs(level), 2**31 - 1)), level, 0)
    if not pc.any(pc.greater(level, 0)).as_py():
        return pa.nulls(len(delay), pa.int64())
    capped = pc.min_element_wise(level, len(delays_ms))
    table = pa.array([0, *delays_ms], pa.int64())
    deliver = pc.add(store_ms, table.take(pc.max_element_wise(capped, 0)))
    return pc.if_else(pc.greater(level, 0), deliver, pa.scalar(None, pa.int64()))


def timer_out_times(timer_out: pa.Array) -> pa.Array:
    """The deliver time of each timer message (its ``TIMER_OUT_MS``, a Java long), null where it is none.

    >>> timer_out_times(pa.array(["1700000000000", None, "x"])).to_pylist()
    [1700000000000, None, None]
    """
    valid = pc.fill_null(pc.match_substring_regex(timer_out, r"^[+-]?[0-9]{1,18}$"), False)
    digits = pc.replace_substring_regex(pc.if_else(valid, timer_out, "0"), r"^\+", "")
    return pc.if_else(valid, pc.cast(digits, pa.int64()), pa.scalar(None, pa.int64()))


@dataclass(frozen=True)
class DispatchRequests:
    """Cuts batches of commitlog rows into the targets' rows, on the executors.

    A target gets the rows at or past its own start (targets may stand at different markers after
    a crash): consume queue units for queued messages (normal or committed, not prepared or rolled
    back), and, with the ext queue on, ext units for those of ``ext_topics`` (the topics CalcBitMap
    computes bitmaps for; None: every topic), whose consume queue tag code is then the decorated ext
    address; the others keep their real tag code, as a stock broker's units do. Below ``ext_from``
    (the ext table's marker, when an earlier run committed its ext units but not their consume queue
    units) a unit points at an ext unit exactly when ``ext_had`` holds its commitlog offset. Index
    rows (IndexService.buildIndex) for the UNIQ_KEY and each non-empty key of KEYS of every message
    not rolled back, as hashes of ``topic#key`` filed by hash range. A
    batch may carry ``properties`` (read when a delayed or subscribed message may be among its
    rows); with ``bitmaps``, the ext units get the ``filter_bitmap`` and ``filter_version`` it
    computes (CalcBitMap), only for the rows that become ext units.

    >>> requests = DispatchRequests({"consume_queue": 0, "index": 0}, True, 25, (1000,))
    >>> batch = store.context.tables.commitlog.read_arrow(columns=list(REQUEST_COLUMNS)).to_batches()[0]
    >>> rows = next(requests(iter([batch])))
    >>> rows["consume_queue"].num_rows, rows["index"].num_rows          # the unit; the KEYS key and the UNIQ_KEY
    (1, 2)
    >>> requests.consume_queue(batch).column("tags_code")[0].as_py() < 0   # an ext address
    True
    >>> requests.consume_queue_ext(batch).column("tags_code").to_pylist(), requests.index(batch).num_rows
    ([2598919], 2)
    """

    starts: Mapping[str, int]
    ext_enabled: bool
    index_shift: int
    delays_ms: tuple[int, ...]
    bitmaps: "FilterBitmaps | None" = None
    ext_topics: tuple[str, ...] | None = None
    ext_from: int = 0
    ext_had: tuple[int, ...] = ()

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[dict[str, pa.RecordBatch]]:
        for batch in batches:
            if batch.num_rows:
                rows = functools.lru_cache()(
                    functools.partial(self._rows_for, batch)
                )  # the consume queue's are the ext's
                yield {name: getattr(self, name)(rows(name == "index", start)) for name, start in self.starts.items()}

    @staticmethod
    def _rows_for(batch: pa.RecordBatch, index: bool, start: int) -> pa.RecordBatch:
        """The batch's rows from commitlog offset ``start`` on that the index (``index``) or a queue gets."""
        if index:
            kind = pc.bit_wise_and(batch.column("sysflag"), SysFlag.TRANSACTION_ROLLBACK_TYPE)
            wanted = pc.not_equal(kind, SysFlag.TRANSACTION_ROLLBACK_TYPE)
        else:
            wanted = queued_mask(batch.column("sysflag"))
        keep = pc.and_(wanted, pc.greater_equal(batch.column("physical_offset"), start))
        return batch if pc.all(keep).as_py() else batch.filter(keep)

    def _tags_code(self, b: pa.RecordBatch) -> pa.Array:
        """checkMessageAndReturnSize's tag code: the TAGS hash, or the deliver time of a SCHEDULE_TOPIC_XXXX
        message with a DELAY level (only batches read with ``properties`` can hold one). A timer
        message's unit carries its TIMER_OUT_MS the same way (RocketMQ's timer wheel keeps it in its
        own log instead), so delivery finds due messages from the consume queue alone."""
        code = pa.array(tags_codes(b.column("tags")), pa.int64())
        if "properties" in b.schema.names:
            timed = pc.equal(b.column("topic"), TIMER_TOPIC)
            if pc.any(timed).as_py():
                out = pc.if_else(
                    timed,
                    pc.map_lookup(b.column("properties"), pa.scalar(MessageConst.TIMER_OUT_MS), "first"),
                    pa.scalar(None, pa.string()),
                )
                code = pc.coalesce(timer_out_times(out), code)
            scheduled = pc.equal(b.column("topic"), SCHEDULE_TOPIC)
            if pc.any(scheduled).as_py():
                delay = pc.if_else(
                    scheduled,
                    pc.map_lookup(b.column("properties"), pa.scalar(MessageConst.DELAY), "first"),
                    pa.scalar(None, pa.string()),
                )
                store_ms = pc.divide(pc.cast(b.column("store_timestamp"), pa.int64()), 1000)
                code = pc.coalesce(deliver_times(delay, store_ms, self.delays_ms), code)
        return code

    def _with_ext(self, b: pa.RecordBatch) -> pa.Array | bool:
        """Which of the batch's messages have an ext unit (True or False: all or none of them)."""
        if not self.ext_enabled:
            return False
        mine = (
            pa.scalar(True)
            if self.ext_topics is None
            else pc.is_in(b.column("topic"), pa.array(self.ext_topics, pa.string()))
        )
        offsets = b.column("physical_offset")
        if self.ext_from and b.num_rows and pc.min(offsets).as_py() < self.ext_from:  # committed by an earlier run
            mine = pc.if_else(
                pc.less(offsets, self.ext_from), pc.is_in(offsets, pa.array(self.ext_had, pa.int64())), mine
            )
        if isinstance(mine, pa.Scalar):
            return mine.as_py()
        return True if pc.all(mine).as_py() else False if not pc.any(mine).as_py() else mine

    def consume_queue(self, b: pa.RecordBatch) -> pa.RecordBatch:
        # A unit with an ext unit has the decorated address of it as its tag code field; ext units are
        # numbered by queue offset (at most one per consume queue unit).
        with_ext = self._with_ext(b)
        if with_ext is True:
            return consume_queue.units(b, decorate_ext_addrs(b.column("queue_offset")))
        if with_ext is False:
            return consume_queue.units(b, self._tags_code(b))
        return consume_queue.units(
            b, pc.if_else(with_ext, decorate_ext_addrs(b.column("queue_offset")), self._tags_code(b))
        )

    def consume_queue_ext(self, b: pa.RecordBatch) -> pa.RecordBatch:
        if self.ext_topics is not None and b.num_rows:
            mine = pc.is_in(b.column("topic"), pa.array(self.ext_topics, pa.string()))
            if not pc.all(mine).as_py():  # a copy of every column, the properties map too: only when some go
                b = b.filter(mine)
        if self.bitmaps is not None and b.num_rows:
            b = self.bitmaps(b)
        return consume_queue_ext.units(b, self._tags_code(b))

    def index(self, b: pa.RecordBatch) -> pa.RecordBatch:
        return index_file.entries(b, self.index_shift)


def queued_units(rows: pa.Table, delays_ms: Sequence[int]) -> pa.Table:
    """Of committed commitlog ``rows`` (every column), those a consume queue gets, each with its unit's real
    tag code (``tags_code``, as a dispatch computes it, ext units aside): what a follower's tail takes of a
    commit that has just landed (:meth:`storelib.local.tail.TailServer.land`).

    >>> queued_units(store.context.tables.commitlog.read_arrow(), (1000,)).column("tags_code").to_pylist()
    [2598919]
    """
    requests = DispatchRequests({"consume_queue": 0}, False, 0, tuple(delays_ms))
    out = []
    for batch in rows.to_batches():
        queued = requests._rows_for(batch, False, 0)
        out.append(queued.append_column("tags_code", requests._tags_code(queued)))
    if not out:
        return rows.append_column("tags_code", pa.array([], pa.int64()))
    return pa.Table.from_batches(out)


@dataclass(frozen=True)
class CommitlogFiles:
    """The commitlog rows of ``[low, end)``, read on the executors with pyarrow and cut by ``requests``:
    the ``per_item`` of a :func:`~storelib.delta.writer.write_items` job over ``(path, whole)``,
    ``(path, whole, properties)`` or ``(path, whole, properties, size)`` items. A file ``whole`` in the range
    is read as it is; another is filtered, skipping row groups outside the range by their statistics. The
    ``properties`` column is read where the item says so, else where ``properties`` does; a ``size`` (from
    the file's add action) spares an object store the request for it.
    """

    low: int
    end: int
    properties: bool
    requests: DispatchRequests
    #: Rows per batch handed on: the reader's batches (a row group each) are joined up to this many, since
    #: every step costs a few calls per batch whatever its size (CalcBitMap's 0.41 against 0.27 us a row
    #: at 8,192 and 65,536 rows, measured).
    batch_rows: int = 65_536

    def __call__(self, item: tuple) -> Iterator[dict[str, pa.RecordBatch]]:
        yield from self.requests(self._read(*item))

    def rows(self, item: tuple) -> list[pa.RecordBatch]:
        """Item ``item``'s rows, read: what :meth:`cut` takes (a round reads its object-store files at once).

        >>> files = CommitlogFiles(0, store.max_offset(), False, DispatchRequests({"consume_queue": 0}, False, 25, ()))
        >>> t = store.context.tables.commitlog
        >>> rows = files.rows((t.files(t.snapshot())[0], True))
        >>> sum(b.num_rows for b in rows)
        1
        """
        return list(self._read(*item))

    def cut(self, rows: list[pa.RecordBatch]) -> Iterator[dict[str, pa.RecordBatch]]:
        """What each target gets of rows read by :meth:`rows` (as :meth:`__call__` gives for the item).

        >>> files = CommitlogFiles(0, store.max_offset(), False, DispatchRequests({"consume_queue": 0}, False, 25, ()))
        >>> t = store.context.tables.commitlog
        >>> next(files.cut(files.rows((t.files(t.snapshot())[0], True))))["consume_queue"].num_rows
        1
        """
        yield from self.requests(iter(rows))

    def _read(
        self, path: str, whole: bool = False, properties: bool | None = None, size: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        if size is not None:
            remember_sizes([path], [size])
        wanted = self.properties if properties is None else properties
        columns = list(REQUEST_COLUMNS) + (["properties"] if wanted else [])
        offset = pc.field("physical_offset")
        source, fs = local_bytes(path)
        if whole and isinstance(source, pa.BufferReader):  # a small file (a group commit's), already in memory:
            # read in one call, without a dataset scan's set-up (0.28 against 0.71 ms for 256 messages)
            rows = pq.ParquetFile(source).read(columns=columns, use_threads=False)
            if rows.num_columns == len(columns):  # else a column is missing: the dataset reader says which
                yield from coalesce(iter(rows.to_batches()), self.batch_rows)
                return
            source.seek(0)
        # pyarrow's dataset reader for the rest: it decodes the properties map about twice as fast as
        # ParquetFile.iter_batches (0.07 s against 0.14 s per 280k messages, measured)
        # (an object store's file through its kept fragment: its size known, no HEAD request)
        made = fragment(path) if not is_local(path) else parquet_format().make_fragment(source, fs)
        batches = made.to_batches(
            columns=columns,
            filter=None if whole else (offset >= self.low) & (offset < self.end),
            batch_size=self.batch_rows,
            use_threads=False,
        )
        yield from coalesce(batches, self.batch_rows)


def coalesce(batches: Iterator[pa.RecordBatch], rows: int) -> Iterator[pa.RecordBatch]:
    """``batches`` joined into batches of about ``rows`` rows (at least, but for the last), each one chunk;
    empty ones are dropped (a filtered read yields them for row groups it skips).

    >>> parts = [pa.record_batch({"x": list(range(i, i + 3))}) for i in range(0, 12, 3)]
    >>> [b.column("x").to_pylist() for b in coalesce(iter(parts), 5)]
    [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11]]
    >>> list(coalesce(iter([parts[0].slice(0, 0)] * 2), 5))
    []
    """
    held: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        held.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield _joined(held)
            held, count = [], 0
    if held:
        yield _joined(held)


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return batches[0] if len(batches) == 1 else pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
