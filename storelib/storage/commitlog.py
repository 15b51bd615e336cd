"""The CommitLog: appending messages with RocketMQ's offsets, safely from many producers at once.

Offsets are handed out by the Delta log itself. The commitlog table's ``txn`` markers hold the next
physical offset (``commitlog``) and each queue's next queue offset (``cq/<topic>/<queue>``). An
append reads them from snapshot N, writes its files, and commits them together with the advanced
markers as version N+1 *exactly*; if another producer took N+1 first, the append deletes its files
and starts again from the newer snapshot. So offsets never repeat and never skip, whoever writes.

Two paths share that protocol:

* :meth:`CommitLog.append` - a producer's messages, encoded on the driver (a few to thousands);
* :meth:`CommitLog.append_dataframe` - a DataFrame of messages, read once: the executors stage each
  partition's rows and count them, then place them with running sums of the counts and write the
  Parquet files.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Protocol, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyarrow import fs as pafs

from storelib.delta.commit import with_retries
from storelib.delta.location import filesystem
from storelib.delta.spec import spark_schema
from storelib.delta.table import Table
from storelib.delta.writer import Target, write_items, write_rows
from storelib.encoding.arrow import Distinct, queue_groups
from storelib.encoding.message_id import message_id_prefix, message_ids
from storelib.encoding.properties import properties_to_string
from storelib.encoding.record import body_crc, message_length
from storelib.model.config import StoreConfig
from storelib.model.errors import ProgressMovedError
from storelib.model.message import SysFlag
from storelib.storage.schema import COMMITLOG

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame


__all__ = [
    "CommitLog",
    "EncodedMessage",
    "AppendResult",
    "Progress",
    "STAGED_SCHEMA",
    "staged_rows",
    "COMMITLOG_MARKER",
    "CLUSTERED_PREFIX",
    "queue_marker",
    "stage_partition",
    "is_clustered",
]

log = logging.getLogger(__name__)

COMMITLOG_MARKER = "commitlog"
#: Name prefix of the data files compaction clustered (:mod:`storelib.maintenance.cluster`).
CLUSTERED_PREFIX = "clustered"


def is_clustered(path: str) -> bool:
    """Whether a commitlog data file (add path or full path) is a clustered one: sorted by its
    topics' clustering keys inside one contiguous offset range, rather than in offset order.

    >>> is_clustered("clustered-0a1b.c000.zstd.parquet"), is_clustered("/s/commitlog/part-0a1b.c000.zstd.parquet")
    (True, False)
    """
    return path.rsplit("/", 1)[-1].startswith(CLUSTERED_PREFIX + "-")


class BatchCompleter(Protocol):
    """What a DataFrame send's executors run on each Arrow batch before staging it (the producer's
    :class:`~storelib.send.producer.EncodedFrame`): the batch's topics, each row's refusal (null
    where it passes), and the completed commitlog columns."""

    def topics_of(self, batch: pa.RecordBatch) -> Any: ...

    def refusals(self, batch: pa.RecordBatch, topics: Any = None) -> pa.Array: ...

    def complete(
        self, batch: pa.RecordBatch, partition: int, first_row: int, topics: Any = None
    ) -> dict[str, pa.Array]: ...


def now_millis() -> dt.datetime:
    """The current UTC time at RocketMQ's precision (milliseconds), as store and born times are kept."""
    now = dt.datetime.now(dt.timezone.utc)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def queue_marker(topic: str, queue_id: int) -> str:
    """Name of the ``txn`` marker holding the next queue offset of (topic, queue_id).

    >>> queue_marker("TopicTest", 3)
    'cq/TopicTest/3'
    """
    return f"cq/{topic}/{queue_id}"


@dataclass
class EncodedMessage:
    """A validated message with everything but its offsets, ready to append.

    >>> EncodedMessage("T", 0, 0, 0, b"hi", {"UNIQ_KEY": "K"}, now_millis(), "127.0.0.1:0").size
    105
    """

    topic: str
    queue_id: int
    sysflag: int
    flag: int
    body: bytes
    properties: dict[str, str]
    born_timestamp: dt.datetime
    born_host: str
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def size(self) -> int:
        return message_length(
            body_length=len(self.body),
            topic_length=len(self.topic.encode()),
            properties_length=len(properties_to_string(self.properties).encode()),
            born_host_v6=bool(self.sysflag & SysFlag.BORNHOST_V6),
            store_host_v6=bool(self.sysflag & SysFlag.STOREHOSTADDRESS_V6),
        )


@dataclass(frozen=True)
class Progress:
    """Markers an append was planned from (``expect``) and moves on (``advance``), committed in the
    same Delta commit as its rows: a delivery's or a transaction check's progress. If another run
    moved an expected marker first, the append raises :class:`~storelib.model.errors.ProgressMovedError`
    and writes nothing, so the caller plans again from the newer state.

    >>> Progress({"a": 1}, {"a": 2}).check(store.context.tables.commitlog.snapshot())
    Traceback (most recent call last):
    ...
    storelib.model.errors.ProgressMovedError: a: moved from 1 to 0 before this write committed (got 0)
    """

    expect: Mapping[str, int]
    advance: Mapping[str, int]

    def check(self, snapshot: "DeltaTable") -> dict[str, int]:
        """The markers to commit on ``snapshot``, or :class:`ProgressMovedError`."""
        for name, value in self.expect.items():
            have = Table.marker(snapshot, name)
            if have != value:
                raise ProgressMovedError(name, f"moved from {value} to {have} before this write committed", value=have)
        return dict(self.advance)


@dataclass(frozen=True)
class AppendResult:
    """Where appended messages landed: one entry per message for small appends, ranges for DataFrames.

    >>> result = store.send_dataframe(spark.createDataFrame([("TopicTest",)] * 3, "topic string"))
    >>> result.count, sum(hi - lo for lo, hi in result.queues.values()), result.next_offset == store.max_offset()
    (3, 3, True)
    """

    version: int
    first_offset: int
    next_offset: int
    count: int
    rows: list[dict] | None = None
    queues: dict[tuple[str, int], tuple[int, int]] | None = None
    #: With ``append_arrow(..., results="arrow")``: where each row landed (:data:`LANDED` columns), and the rows.
    landed: pa.Table | None = None
    written: pa.Table | None = None


class CommitLog:
    """Appends to the ``commitlog`` table, handing out RocketMQ's offsets.

    >>> log = store.context.commitlog
    >>> before = log.next_offset()
    >>> m = EncodedMessage("DocTopic", 0, 0, 0, b"x", {"UNIQ_KEY": "K"}, now_millis(), "127.0.0.1:0")
    >>> result = log.append([m])
    >>> ((result.first_offset, result.next_offset - result.first_offset) == (before, m.size),
    ...  log.queue_next("DocTopic", 0))
    (True, 1)
    """

    def __init__(self, table: Table, config: StoreConfig):
        self.table = table
        self.config = config
        host, port = config.store_address
        self.store_host = f"{host}:{port}"
        self.store_v6 = config.store_v6
        self.msg_id_prefix = message_id_prefix(host, port)

    # ---- offsets ---------------------------------------------------------------------------
    def next_offset(self, snapshot=None) -> int:
        """The physical offset the next message will get (RocketMQ's max commitlog offset)."""
        return Table.marker(snapshot or self.table.snapshot(), COMMITLOG_MARKER)

    def queue_next(self, topic: str, queue_id: int, snapshot=None) -> int:
        """The queue offset the next message of (topic, queue_id) will get."""
        return Table.marker(snapshot or self.table.snapshot(), queue_marker(topic, queue_id))

    # ---- small appends ---------------------------------------------------------------------
    def append(self, messages: Sequence[EncodedMessage], progress: Progress | None = None) -> AppendResult:
        """Append ``messages`` in order, atomically: all of them land, or none (with ``progress``'s markers).

        The rows are built before the commit turn is taken; in it, only their offsets are placed
        (:meth:`append_arrow`), so writers queued behind this one wait for the commit alone.
        """
        return self.append_arrow(self.stage(messages), progress, results=True)

    def stage(self, messages: Sequence[EncodedMessage]) -> pa.Table:
        """The rows of ``messages`` complete but for their offsets (:data:`STAGED_SCHEMA`), built
        outside any commit turn.

        >>> m = EncodedMessage("DocTopic", 0, 0, 0, b"x", {"UNIQ_KEY": "K"}, now_millis(), "127.0.0.1:0")
        >>> store.context.commitlog.stage([m]).column("uniq_key").to_pylist()
        ['K']
        """
        # The store host's address family is the store's: the flag (and the 12 bytes) it adds count in the size.
        if self.store_v6:
            messages = [dataclasses.replace(m, sysflag=m.sysflag | SysFlag.STOREHOSTADDRESS_V6) for m in messages]
        return staged_rows(messages)

    def append_arrow(
        self,
        staged: pa.Table,
        progress: Progress | None = None,
        operation: str = "SEND",
        results: bool | str = False,
        info: Mapping[str, str] | None = None,
    ) -> AppendResult:
        """Append rows already complete but for their offsets (:data:`STAGED_SCHEMA` columns, e.g.
        messages a delivery moves), placed with numpy in row order, atomically with ``progress``'s
        markers. No rows and a ``progress`` commit the markers alone. ``results`` adds where each
        row landed (``AppendResult.rows``: its id, topic, queue and offsets; ``"arrow"``: the same as
        ``AppendResult.landed``, a table, and the rows as ``written``). ``info`` joins the commit's info.

        >>> rows = store.context.tables.commitlog.read_arrow(columns=STAGED_SCHEMA.names)
        >>> result = store.context.commitlog.append_arrow(rows)
        >>> result.count, result.queues[("TopicTest", r.queue_id)]
        (1, (1, 2))
        """
        staged = staged.select(STAGED_SCHEMA.names).cast(STAGED_SCHEMA).combine_chunks()
        batch = staged.to_batches()[0] if staged.num_rows else None
        pairs = [] if batch is None else queue_groups(Distinct.of(batch.column("topic")), batch.column("queue_id"))[0]

        def step(snapshot) -> AppendResult:
            extra = progress.check(snapshot) if progress else {}
            known = self.table.markers_at(snapshot, [COMMITLOG_MARKER, *(queue_marker(t, q) for t, q in pairs)])
            start = known[COMMITLOG_MARKER]
            if batch is None:
                if not extra:
                    return AppendResult(snapshot.version(), start, start, 0, queues={})
                version = self.table.commit(snapshot, [], markers=extra, operation=operation)
                return AppendResult(version, start, start, 0, queues={})
            counters = {(t, q): known[queue_marker(t, q)] for t, q in pairs}
            first = dict(counters)
            sizes = batch.column("size").to_numpy().astype(np.int64)
            offsets = start + np.cumsum(sizes) - sizes
            place = _Place(now_millis(), self.store_host, self.msg_id_prefix)
            rows = place._row_batch(batch, offsets, place._queue_offsets(batch, counters))
            end = start + int(sizes.sum())
            markers = {**extra, COMMITLOG_MARKER: end, **{queue_marker(t, q): n for (t, q), n in counters.items()}}
            written = pa.Table.from_batches([rows])
            version, _ = write_rows(
                self.table,
                snapshot,
                written,
                target_file_size=self.config.target_file_size,
                markers=markers,
                operation=operation,
                info={"storelib.messages": str(batch.num_rows), **(info or {})},
                rebase=True,  # every append sets COMMITLOG_MARKER: one made since refuses this one; a merge does not
            )
            landed = rows.select(LANDED) if results else None
            return AppendResult(
                *(version, start, end, batch.num_rows),
                rows=landed.to_pylist() if results is True and landed is not None else None,
                queues={k: (first[k], counters[k]) for k in first},
                landed=pa.Table.from_batches([landed]) if results == "arrow" else None,
                written=written if results == "arrow" else None,
            )

        return with_retries(self.table, self.config.max_commit_attempts, step, what=operation.lower(), serial=True)

    # ---- DataFrame appends -----------------------------------------------------------------
    def append_dataframe(
        self,
        encoded: "DataFrame",
        frame: "BatchCompleter",
        refused: Callable[[Mapping[str, Any]], None],
        progress: Progress | None = None,
        operation: str = "SEND_DATAFRAME",
    ) -> AppendResult:
        """Append an encoded DataFrame (see :mod:`storelib.send.producer`) in one atomic commit.

        ``encoded`` has what varies per message (see :meth:`Producer.encode_dataframe`); ``frame``
        checks the rows and completes them. Two Spark jobs, the DataFrame read once:

        1. each task checks and completes its partition's rows and stages them (Arrow IPC, under the
           table's hidden ``_staging`` folder), counting rows, bytes and rows per queue; a task
           meeting a refused row stages nothing and reports it, and ``refused`` raises;
        2. the driver gives every staged partition its first physical and queue offsets (running
           sums, in partition order, from the snapshot's markers), and the executors place and
           write the commitlog files, committed as the next version. If another producer took
           that version, only this step runs again (:meth:`place_staged`).
        """
        attempt_id = uuid.uuid4().hex[:12]
        staging = f"{self.table.path}/_staging/{attempt_id}"
        fs, base = filesystem(staging)
        fs.create_dir(base, recursive=True)
        try:
            stage = encoded.mapInArrow(_Stage(staging, frame), spark_schema(_STAGED_ARROW))
            staged = [r.asDict() for r in stage.collect()]
            bad = [r for r in staged if r["refused"]]
            if bad:
                refused(json.loads(min(bad, key=lambda r: r["partition"])["refused"]))

            def write(placed: list["_StagedPart"], place: "_Place", target: Target) -> list:
                return write_items(
                    encoded.sparkSession, placed, [p.bytes for p in placed], {"commitlog": target}, place
                )["commitlog"]

            return self.place_staged(staged, attempt_id, write, progress, operation)
        finally:
            fs.delete_dir(base)

    def place_staged(
        self,
        staged: Sequence[Mapping[str, Any]],
        attempt_id: str,
        write: Callable[..., list],
        progress: Progress | None = None,
        operation: str = "SEND_DATAFRAME",
    ) -> AppendResult:
        """Step 2 of :meth:`append_dataframe` over staged partitions (their ``partition``, ``path``, ``rows``,
        ``bytes`` and ``queues``): offsets given in partition order, files written by ``write(placed, place,
        target)`` (a Spark job, or this process), one commit, retried on conflicts."""
        from pyspark.errors import PySparkException

        parts = sorted((r for r in staged if r["rows"]), key=lambda r: r["partition"])
        count, total = sum(r["rows"] for r in parts), sum(r["bytes"] for r in parts)
        if not parts:
            return self.append_arrow(STAGED_SCHEMA.empty_table(), progress, operation)

        def step(snapshot) -> AppendResult:
            extra = progress.check(snapshot) if progress else {}
            start = self.next_offset(snapshot)
            placed, offset, nexts, first = [], start, {}, {}
            for r in parts:
                bases = {}
                for topic, queue_id, n in json.loads(r["queues"]):
                    key = (topic, queue_id)
                    if key not in nexts:
                        nexts[key] = first[key] = self.queue_next(topic, queue_id, snapshot)
                    bases[key] = nexts[key]
                    nexts[key] += n
                placed.append(_StagedPart(r["path"], offset, bases, r["rows"], r["bytes"]))
                offset += r["bytes"]
            prefix = f"placed-{attempt_id}"  # sent by a job: never a lost tail (lost_tail.py)
            place = _Place(now_millis(), self.store_host, self.msg_id_prefix)
            target = Target.of(self.table, target_file_size=self.config.target_file_size, prefix=prefix)
            try:
                files = write(placed, place, target)
            except (PySparkException, OSError, ValueError):
                self._discard_attempt(prefix)
                raise
            markers = {**extra, COMMITLOG_MARKER: start + total}
            markers.update({queue_marker(t, q): n for (t, q), n in nexts.items()})
            version = self.table.commit(
                snapshot, files, markers=markers, operation=operation, info={"storelib.messages": str(count)}
            )
            return AppendResult(version, start, start + total, count, queues={k: (first[k], nexts[k]) for k in nexts})

        return with_retries(self.table, self.config.max_commit_attempts, step, what=operation.lower())

    def clean_staging(self, older_than_hours: float) -> int:
        """Delete staged partitions of DataFrame sends that died (folders older than the given hours)."""

        fs, base = filesystem(f"{self.table.path}/_staging")
        if fs.get_file_info(base).type == pafs.FileType.NotFound:
            return 0
        cutoff = time.time() - older_than_hours * 3600
        stale = [
            i for i in fs.get_file_info(pafs.FileSelector(base)) if i.mtime is not None and i.mtime.timestamp() < cutoff
        ]
        for info in stale:
            fs.delete_dir(info.path) if info.type == pafs.FileType.Directory else fs.delete_file(info.path)
        if not fs.get_file_info(pafs.FileSelector(base)):
            fs.delete_dir(base)  # nothing staged: no empty folder left behind either
        return len(stale)

    def _discard_attempt(self, prefix: str) -> None:
        """Delete the files a failed bulk write left behind (they were never committed)."""
        fs, base = filesystem(self.table.path)
        for info in fs.get_file_info(pafs.FileSelector(base)):
            if info.base_name.startswith(prefix + "-"):
                fs.delete_file(info.path)


#: What :meth:`CommitLog.append` tells of each row it placed (a SendResult's fields).
#: What a send learns of where its message landed.
LANDED = ["msg_id", "uniq_key", "topic", "queue_id", "queue_offset", "physical_offset"]


def staged_rows(messages: Sequence[EncodedMessage]) -> pa.Table:
    """Encoded messages as rows complete but for their offsets (:data:`STAGED_SCHEMA`), column by column.

    >>> m = EncodedMessage("T", 1, 0, 0, b"hi", {"TAGS": "a", "UNIQ_KEY": "K"}, now_millis(), "127.0.0.1:0")
    >>> staged_rows([m]).select(["size", "queue_id", "tags", "uniq_key"]).to_pylist()
    [{'size': 112, 'queue_id': 1, 'tags': 'a', 'uniq_key': 'K'}]
    """
    props = [m.properties for m in messages]
    columns = {
        "size": [m.size for m in messages],
        "topic": [m.topic for m in messages],
        "queue_id": [m.queue_id for m in messages],
        "sysflag": [m.sysflag for m in messages],
        "flag": [m.flag for m in messages],
        "body_crc": [body_crc(m.body) for m in messages],
        "born_timestamp": [m.born_timestamp for m in messages],
        "born_host": [m.born_host for m in messages],
        "reconsume_times": [m.reconsume_times for m in messages],
        "prepared_transaction_offset": [m.prepared_transaction_offset for m in messages],
        "properties": [list(p.items()) for p in props],
        "body": [bytes(m.body) for m in messages],
        "tags": [p.get("TAGS") for p in props],
        "keys": [p.get("KEYS") for p in props],
        "uniq_key": [p.get("UNIQ_KEY") for p in props],
    }
    return pa.Table.from_arrays([pa.array(columns[f.name], f.type) for f in _STAGED], schema=_STAGED)


#: Commitlog columns the store sets when it places a message; staged rows have all the others.
_PLACED = ("physical_offset", "queue_offset", "store_timestamp", "store_host", "msg_id")
_STAGED = pa.schema([f for f in COMMITLOG.arrow if f.name not in _PLACED and f.name != "cluster_seq"])
#: The columns of rows complete but for their offsets (what :meth:`CommitLog.append_arrow` takes).
STAGED_SCHEMA = _STAGED
_STAGED_ARROW = pa.schema(
    [
        ("partition", pa.int32()),
        ("path", pa.string()),
        ("rows", pa.int64()),
        ("bytes", pa.int64()),
        ("queues", pa.string()),
        ("refused", pa.string()),
    ]
)


@dataclass(frozen=True)
class _Stage:
    """Step 1 on an executor: complete a partition's rows and stage them, or report the first refused row."""

    root: str
    frame: "BatchCompleter"

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        task = TaskContext.get()
        assert task is not None  # called in a Spark task
        row = stage_partition(self.root, self.frame, task.partitionId(), batches)
        yield pa.RecordBatch.from_pylist([row], schema=_STAGED_ARROW)


def stage_partition(root: str, frame: "BatchCompleter", pid: int, batches: Iterator[pa.RecordBatch]) -> dict[str, Any]:
    """Check, complete and stage one partition's encoded rows under ``root`` (Arrow IPC): its staged part
    (``partition``, ``path``, ``rows``, ``bytes``, ``queues``) for :meth:`CommitLog.place_staged`, or its
    first refused row (``refused``, an error record) with nothing staged.

    >>> from storelib.send.arrow_frame import encode_batch
    >>> frame = store.context.producer.frame(store.context.topics.all(), keys_array=False)
    >>> batch = encode_batch(pa.RecordBatch.from_pydict({"topic": ["TopicTest"]}))
    >>> part = stage_partition(tmp, frame, 0, iter([batch]))
    >>> part["rows"], part["refused"]
    (1, None)
    """
    fs, base = filesystem(root)
    name = f"{pid}-{uuid.uuid4().hex}.arrows"
    path = f"{base}/{name}"
    rows = nbytes = 0
    counts: dict[tuple[str, int], int] = {}
    refused = None
    with fs.open_output_stream(path) as out, pa.ipc.new_stream(out, _STAGED) as writer:
        for b in batches:
            if not b.num_rows:
                continue
            topics = frame.topics_of(b)
            errors = frame.refusals(b, topics)
            bad = pc.is_valid(errors)
            if pc.any(bad).as_py():
                i = pc.index(bad, True).as_py()
                refused = json.dumps(
                    {**json.loads(errors[i].as_py()), "topic": b.column("topic")[i].as_py(), "partition": pid}
                )
                break
            cols = frame.complete(b, pid, rows, topics)
            writer.write_batch(pa.RecordBatch.from_arrays([cols[f.name].cast(f.type) for f in _STAGED], schema=_STAGED))
            pairs, _, n = queue_groups(topics.distinct, cols["queue_id"])
            for pair, c in zip(pairs, n.tolist()):
                counts[pair] = counts.get(pair, 0) + c
            rows += b.num_rows
            nbytes += int(pc.sum(cols["size"]).as_py())
    if refused is not None:
        fs.delete_file(path)
        rows = nbytes = 0
    return {
        "partition": pid,
        "path": f"{root}/{name}",
        "rows": rows,
        "bytes": nbytes,
        "queues": json.dumps([[t, q, n] for (t, q), n in counts.items()]),
        "refused": refused,
    }


@dataclass(frozen=True)
class _StagedPart:
    """One staged partition and where its messages go: its first physical offset and per-queue offsets."""

    path: str
    physical_base: int
    queue_bases: Mapping[tuple[str, int], int]
    rows: int
    bytes: int


@dataclass(frozen=True)
class _Place:
    """Step 2 on the executors (the ``per_item`` of a :func:`~storelib.delta.writer.write_items` job): a
    staged partition placed as commitlog rows."""

    store_timestamp: dt.datetime
    store_host: str
    msg_id_prefix: str

    def __call__(self, part: _StagedPart) -> Iterator[dict[str, pa.RecordBatch]]:
        for batch in self._place(part):
            yield {"commitlog": batch}

    def _place(self, part: _StagedPart) -> Iterator[pa.RecordBatch]:
        fs, path = filesystem(part.path)
        phys = part.physical_base
        counters = dict(part.queue_bases)
        seen_rows = 0
        local = isinstance(fs, pafs.LocalFileSystem)
        with pa.memory_map(path) if local else fs.open_input_stream(path) as source:  # mapped: no copies
            for b in pa.ipc.open_stream(source):
                sizes = b.column("size").to_numpy().astype(np.int64)
                ends = np.cumsum(sizes)
                offsets = phys + ends - sizes
                phys += int(ends[-1])
                seen_rows += b.num_rows
                yield self._row_batch(b, offsets, self._queue_offsets(b, counters))
        if (seen_rows, phys - part.physical_base) != (part.rows, part.bytes):
            raise RuntimeError(
                f"staged file {part.path} holds {seen_rows} rows, {phys - part.physical_base} bytes; "
                f"expected {part.rows}, {part.bytes}"
            )

    @staticmethod
    def _queue_offsets(b: pa.RecordBatch, counters: dict[tuple[str, int], int]) -> np.ndarray:
        pairs, inverse, counts = queue_groups(Distinct.of(b.column("topic")), b.column("queue_id"))
        order = np.argsort(inverse, kind="stable")
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        rank = np.empty(len(inverse), dtype=np.int64)
        rank[order] = np.arange(len(inverse)) - np.repeat(starts, counts)
        bases = np.empty(len(pairs), dtype=np.int64)
        for i, pair in enumerate(pairs):
            bases[i] = counters[pair]
            counters[pair] += int(counts[i])
        return bases[inverse] + rank

    def _row_batch(self, b: pa.RecordBatch, offsets: np.ndarray, queue_offsets: np.ndarray) -> pa.RecordBatch:
        n = b.num_rows
        cols = {name: b.column(name) for name in b.schema.names}
        cols["physical_offset"] = pa.array(offsets, pa.int64())
        cols["queue_offset"] = pa.array(queue_offsets, pa.int64())
        cols["store_timestamp"] = pa.repeat(
            pa.scalar(self.store_timestamp, COMMITLOG.arrow.field("store_timestamp").type), n
        )
        cols["store_host"] = pa.repeat(pa.scalar(self.store_host, pa.string()), n)
        cols["msg_id"] = message_ids(self.msg_id_prefix, offsets)
        cols["cluster_seq"] = pa.nulls(n, pa.int64())  # not clustered yet
        return pa.RecordBatch.from_arrays([cols[f.name] for f in COMMITLOG.arrow], schema=COMMITLOG.arrow)
