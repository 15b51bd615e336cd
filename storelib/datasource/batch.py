"""Batch reads of the ``rocketmq`` source: pushed filters answered the way the store's API answers them.

Details: ``docs/internals.md``, section storelib.datasource.batch.

>>> from pyspark.sql.datasource import EqualTo
>>> reader = MessageReader(SourceOptions.parse({"store": store.root}), None)
>>> list(reader.pushFilters([EqualTo(("msg_id",), r.msg_id), EqualTo(("properties", "a"), "5")]))   # left to Spark
[EqualTo(attribute=('properties', 'a'), value='5')]
>>> [(p.way, p.offsets) for p in reader.partitions()] == [
...     (p.way, p.offsets) for p in plan(reader.options, reader.pushdown)]
True
>>> [(p.way, p.offsets) for p in reader.partitions()]
[('msg_id', (0,))]
>>> [b.column("msg_id").to_pylist() for b in reader.read(reader.partitions()[0])] == [[r.msg_id]]
True
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition
from pyspark.sql.types import StructType

from storelib.datasource.options import MESSAGES, SourceOptions
from storelib.datasource.pushdown import Pushdown
from storelib.datasource.scope import Limits, read_limits
from storelib.delta.log import add_actions
from storelib.delta.spark_read import contiguous_groups
from storelib.delta.stats import Prune
from storelib.delta.table import Table
from storelib.encoding.index_key import build_index_key, index_key_hash
from storelib.encoding.message_id import decode_message_id
from storelib.model.errors import StoreError
from storelib.model.message import MessageConst
from storelib.model.timestamps import FAR_FUTURE_MS
from storelib.storage.commitlog_reads import read_rows
from storelib.storage.consume_queue import read_units
from storelib.storage.dispatched import REPUT_MARKER, undispatched_paths
from storelib.storage.index_file import offsets_of
from storelib.storage.tables import StoreTables

__all__ = ["MessageReader", "ReadPartition", "plan", "by_key_rows", "MAX_SCAN_PARTITIONS"]

#: Offsets read per partition when a read goes by offsets (ids, keys, queues).
OFFSETS_PER_PARTITION = 64 * 1024
#: A scan is cut into at most this many partitions unless the ``partitions`` option says otherwise.
MAX_SCAN_PARTITIONS = 256
#: An end past every queue offset and commitlog offset (an open end of a range).
_NO_END = 2**62


@dataclass(frozen=True)
class ReadPartition(InputPartition):
    """One task of a read: the rows at ``offsets`` in ``paths``, or (``offsets`` None) every row of
    ``paths`` at or past ``min_offset``; ``way`` says which rule of :func:`plan` made it."""

    way: str
    paths: tuple[str, ...]
    offsets: tuple[int, ...] | None = None
    min_offset: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", None)


class MessageReader(DataSourceReader):
    """The batch reader: accepts the filters it can answer, plans partitions, reads them with pyarrow."""

    def __init__(self, options: SourceOptions, schema: StructType | None) -> None:
        self.options = options
        self.schema = schema
        self.pushdown = Pushdown(options.arrow_schema())
        self.limits = read_limits(options)

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        self.pushdown = Pushdown(self.options.arrow_schema())  # Spark may hand a planned reader a new query
        yield from self.pushdown.take(filters)

    def partitions(self) -> Sequence[InputPartition]:
        return plan(self.options, self.pushdown, self.limits)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ReadPartition):
            return  # Spark's one empty partition when the plan has none
        yield from read_partition(self.options, self.pushdown, partition, output_schema(self.schema), self.limits)


def output_schema(spark_schema: StructType | None) -> pa.Schema | None:
    """The exact Arrow schema Spark expects of the batches a Python data source returns."""
    if spark_schema is None:
        return None
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark_schema, timezone="UTC")


def plan(options: SourceOptions, pushdown: Pushdown, limits: Limits | None = None) -> list[ReadPartition]:
    """The partitions of a read (see the module's description), planned without a Spark job; ``limits``
    those of the options (:func:`~storelib.datasource.scope.read_limits`, worked out when not given)."""
    limits = read_limits(options) if limits is None else limits
    tables = StoreTables.at(options.store)
    commitlog = tables.commitlog
    actions = add_actions(commitlog.snapshot())
    ids = pushdown.values("msg_id")
    if ids is not None:
        offsets = sorted({o for o in (_offset_of(i) for i in ids) if o is not None})
        return _by_offsets("msg_id", commitlog, actions, offsets)
    topics = pushdown.topics
    if limits.topics is not None:
        topics = [t for t in limits.topics if topics is None or t in topics]
    lo_ms, hi_ms = _time_bounds(pushdown)
    hashes = _key_hashes(options, pushdown, topics)
    if hashes is not None:
        found: set[int] = set()
        for h in hashes:
            found.update(offsets_of(tables.index, h, lo_ms, hi_ms)[0])
        marker = Table.marker(tables.index.snapshot(), REPUT_MARKER)
        return _by_offsets("index", commitlog, actions, sorted(found)) + _tail(commitlog, actions, marker)
    queues = pushdown.values("queue_id")
    lo, hi = pushdown.bounds("queue_offset")
    low, high = max(0, lo or 0), _NO_END if hi is None else hi + 1  # the pushed filters' queue offsets
    ranges = None
    if limits.ranges is not None:
        ranges = [
            (t, q, max(b or 0, low), min(_NO_END if e is None else e, high))
            for t, q, b, e in limits.ranges
            if (topics is None or t in topics) and (queues is None or q in queues)
        ]
    elif topics is not None and queues is not None:
        ranges = [(t, q, low, high) for t in topics for q in queues]
    if ranges is not None:
        if not ranges:
            return []  # the options' ranges and the pushed filters leave no queue
        cq = tables.consume_queue
        cq_snapshot = cq.snapshot()
        cq_actions = add_actions(cq_snapshot)
        found_offsets: list[np.ndarray] = []
        for topic, q, begin, end in ranges:
            if begin < end:
                units = read_units(cq, Table.only(cq_actions, {"topic": topic, "queue_id": q}), begin, end)
                found_offsets.append(units.column("commitlog_offset").to_numpy())
        unique = np.unique(np.concatenate(found_offsets)) if found_offsets else np.array([], np.int64)
        marker = Table.marker(cq_snapshot, REPUT_MARKER)
        return _by_offsets("consume_queue", commitlog, actions, unique.tolist()) + _tail(commitlog, actions, marker)
    return _scan(options, commitlog, actions, pushdown, topics)


def read_partition(
    options: SourceOptions,
    pushdown: Pushdown,
    part: ReadPartition,
    schema: pa.Schema | None = None,
    limits: Limits | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of one partition that pass every accepted filter and are within ``limits``, in the read's shape."""
    commitlog = StoreTables.at(options.store).commitlog
    own = [n for n in MESSAGES.names]
    on_messages = pushdown.predicate(own)
    within = limits.predicate() if limits is not None else None
    if within is not None:
        on_messages = within if on_messages is None else on_messages & within
    if part.offsets is not None:
        rows = read_rows(commitlog, part.paths, pa.array(part.offsets, pa.int64()))
        batches: Iterable[Any] = [rows.filter(on_messages) if on_messages is not None else rows]
    else:
        test = pc.field("physical_offset") >= part.min_offset
        batches = commitlog.scan(list(part.paths), test if on_messages is None else test & on_messages)
    schema = schema or options.arrow_schema()
    rest = pushdown.predicate() if options.table == "messages_by_key" else None
    for batch in batches:
        table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
        if options.table == "messages_by_key":
            table = by_key_rows(table)
            if rest is not None:
                table = table.filter(rest)
        if table.num_rows:
            yield from table.select(schema.names).cast(schema).to_batches()


def by_key_rows(messages: pa.Table) -> pa.Table:
    """One row per message and key it is indexed under: its UNIQ_KEY (``kind`` UNIQ_KEY) and each
    key of its KEYS (``kind`` KEYS), as ``messages_by_key`` shows them.

    >>> t = pa.table({"topic": ["T"], "keys": ["k1 k2"], "uniq_key": ["U"]})
    >>> by_key_rows(t).select(["key", "kind"]).to_pylist()
    [{'key': 'U', 'kind': 'UNIQ_KEY'}, {'key': 'k1', 'kind': 'KEYS'}, {'key': 'k2', 'kind': 'KEYS'}]
    """
    split = pc.split_pattern(messages.column("keys"), MessageConst.KEY_SEPARATOR)
    keys, parents = pc.list_flatten(split), pc.list_parent_indices(split)
    uniq = messages.column("uniq_key")
    owners = pa.chunked_array([pa.array(np.arange(messages.num_rows)), parents]).combine_chunks()
    key = pa.chunked_array([uniq, keys], pa.string()).combine_chunks()
    kind = pa.array(np.repeat(np.array(["UNIQ_KEY", "KEYS"]), [len(uniq), len(keys)]).tolist(), pa.string())
    keep = pc.fill_null(pc.greater(pc.binary_length(key), 0), False)
    rows = messages.take(owners.filter(keep))
    return rows.append_column("key", key.filter(keep)).append_column("kind", kind.filter(keep))


# ---- planning helpers ------------------------------------------------------------------------
def _offset_of(msg_id: object) -> int | None:
    try:
        return decode_message_id(str(msg_id))[2]
    except (StoreError, ValueError):
        return None  # not an id: no row has it


def _time_bounds(pushdown: Pushdown) -> tuple[int, int]:
    lo, hi = pushdown.bounds("store_timestamp")
    to_ms = lambda t, default: default if t is None else int(t.timestamp() * 1000)  # noqa: E731
    return to_ms(lo, 0), to_ms(hi, FAR_FUTURE_MS) + (1 if hi is not None else 0)


def _key_hashes(options: SourceOptions, pushdown: Pushdown, topics: list[str] | None) -> list[int] | None:
    """The index key hashes a key filter asks for, None when no key filter (with its topic) is pushed."""
    if topics is None:
        return None
    if options.table == "messages_by_key":
        keys = pushdown.values("key")
    else:
        keys = pushdown.values("uniq_key")
        if keys is None:
            whole = pushdown.values("keys")  # KEYS as stored: its first key is indexed
            keys = None if whole is None else [k.split()[0] for k in whole if k.split()]
    if keys is None:
        return None
    return sorted({index_key_hash(build_index_key(t, k)) for t in topics for k in keys if k})


def _by_offsets(way: str, commitlog: Table, actions: pa.Table, offsets: Sequence[int]) -> list[ReadPartition]:
    out = []
    for start in range(0, len(offsets), OFFSETS_PER_PARTITION):
        chunk = pa.array(offsets[start : start + OFFSETS_PER_PARTITION], pa.int64())
        paths = commitlog.paths(commitlog.holding(actions, "physical_offset", chunk))
        if paths:
            out.append(ReadPartition(way, tuple(paths), tuple(chunk.to_pylist())))
    return out


def _tail(commitlog: Table, actions: pa.Table, marker: int) -> list[ReadPartition]:
    """A scan of the commitlog past a dispatch marker (what the index or consume queue does not hold yet)."""
    paths = undispatched_paths(commitlog, actions, marker)
    return [ReadPartition("undispatched", tuple(paths), None, marker)] if paths else []


def _scan(
    options: SourceOptions, commitlog: Table, actions: pa.Table, pushdown: Pushdown, topics: list[str] | None
) -> list[ReadPartition]:
    between = {}
    for column in ("physical_offset", "store_timestamp"):
        lo, hi = pushdown.bounds(column)
        if lo is not None or hi is not None:
            between[column] = (lo, hi)
    if topics is not None and not topics:
        return []
    equal = {"topic": topics[0]} if topics is not None and len(topics) == 1 else None
    kept = commitlog.prune(actions, Prune(equal=equal, between={c: _closed(c, b) for c, b in between.items()}))
    paths = commitlog.paths(kept)
    if not paths:
        return []
    sizes = kept.column("size_bytes").to_pylist() if "size_bytes" in kept.column_names else [1] * len(paths)
    runs = contiguous_groups(paths, sizes, options.partitions or min(len(paths), MAX_SCAN_PARTITIONS))
    return [ReadPartition("scan", tuple(run)) for run in runs if run]


def _closed(column: str, bounds: tuple) -> tuple:
    """Open ends of a range closed at the column's extremes (for file statistics)."""

    lo, hi = bounds
    if column == "store_timestamp":
        return (
            lo or dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc),
            hi or dt.datetime(9999, 1, 1, tzinfo=dt.timezone.utc),
        )
    return (0 if lo is None else lo, _NO_END if hi is None else hi)
