"""The CommitLog: appending messages with RocketMQ's offsets, safely from many producers at once.

Offsets are handed out by the Delta log itself. The commitlog table's ``txn`` markers hold the next
physical offset (``commitlog``) and each queue's next queue offset (``cq/<topic>/<queue>``). An
append reads them from snapshot N, writes its files, and commits them together with the advanced
markers as version N+1 *exactly*; if another producer took N+1 first, the append deletes its files
and starts again from the newer snapshot. So offsets never repeat and never skip, whoever writes.

Two paths share that protocol:

* :meth:`CommitLog.append` - a producer's messages, encoded on the driver (a few to thousands);
* :meth:`CommitLog.append_dataframe` - a DataFrame of messages, encoded and written by the executors
  in two passes: one small aggregation (sizes and counts per partition and queue), then one
  ``mapInArrow`` that assigns offsets with running sums and writes the Parquet files.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from storelib import arrays, codec
from storelib.config import StoreConfig
from storelib.errors import InputChangedError
from storelib.message import SysFlag
from storelib.schema import COMMITLOG
from storelib.tables import Table, filesystem, with_retries
from storelib.writer import write_dataframe

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from storelib.producer import EncodedFrame

__all__ = ["CommitLog", "EncodedMessage", "AppendResult", "COMMITLOG_MARKER", "queue_marker"]

log = logging.getLogger(__name__)

COMMITLOG_MARKER = "commitlog"
_INPUT_CHANGED = "storelib: input changed between passes"


def now_millis() -> dt.datetime:
    """The current UTC time at RocketMQ's precision (milliseconds), as store and born times are kept."""
    now = dt.datetime.now(dt.timezone.utc)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def queue_marker(topic: str, queue_id: int) -> str:
    """Name of the ``txn`` marker holding the next queue offset of (topic, queue_id)."""
    return f"cq/{topic}/{queue_id}"


@dataclass
class EncodedMessage:
    """A validated message with everything but its offsets, ready to append."""

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
        return codec.message_length(
            body_length=len(self.body), topic_length=len(self.topic.encode()),
            properties_length=len(codec.properties_to_string(self.properties).encode()),
            born_host_v6=bool(self.sysflag & SysFlag.BORNHOST_V6), store_host_v6=bool(self.sysflag & SysFlag.STOREHOSTADDRESS_V6))


@dataclass(frozen=True)
class AppendResult:
    """Where appended messages landed: one entry per message for small appends, ranges for DataFrames."""

    version: int
    first_offset: int
    next_offset: int
    count: int
    rows: list[dict] | None = None
    queues: dict[tuple[str, int], tuple[int, int]] | None = None


class CommitLog:
    """Appends to the ``commitlog`` table."""

    def __init__(self, table: Table, config: StoreConfig):
        self.table = table
        self.config = config
        host, port = config.store_address
        self.store_host = f"{host}:{port}"
        self.store_v6 = ":" in host
        self.msg_id_prefix = codec.create_message_id(host, port, 0)[:-16]

    # ---- offsets ---------------------------------------------------------------------------
    def next_offset(self, snapshot=None) -> int:
        """The physical offset the next message will get (RocketMQ's max commitlog offset)."""
        return Table.marker(snapshot or self.table.snapshot(), COMMITLOG_MARKER)

    def queue_next(self, topic: str, queue_id: int, snapshot=None) -> int:
        """The queue offset the next message of (topic, queue_id) will get."""
        return Table.marker(snapshot or self.table.snapshot(), queue_marker(topic, queue_id))

    # ---- small appends ---------------------------------------------------------------------
    def append(self, messages: Sequence[EncodedMessage]) -> AppendResult:
        """Append ``messages`` in order, atomically: all of them land, or none."""
        sizes = [m.size for m in messages]
        crcs = [zlib.crc32(m.body) & 0x7FFFFFFF for m in messages]

        def step(snapshot) -> AppendResult:
            start = offset = self.next_offset(snapshot)
            queues: dict[tuple[str, int], int] = {}
            now = now_millis()
            rows = []
            for m, size, crc in zip(messages, sizes, crcs):
                key = (m.topic, m.queue_id)
                if key not in queues:
                    queues[key] = self.queue_next(m.topic, m.queue_id, snapshot)
                props = m.properties
                rows.append({
                    "physical_offset": offset, "size": size, "topic": m.topic, "queue_id": m.queue_id,
                    "queue_offset": queues[key], "sysflag": m.sysflag | (SysFlag.STOREHOSTADDRESS_V6 if self.store_v6 else 0),
                    "flag": m.flag, "body_crc": crc, "born_timestamp": m.born_timestamp, "born_host": m.born_host,
                    "store_timestamp": now, "store_host": self.store_host, "reconsume_times": m.reconsume_times,
                    "prepared_transaction_offset": m.prepared_transaction_offset, "properties": list(props.items()),
                    "body": bytes(m.body), "msg_id": self.msg_id_prefix + f"{offset:016X}",
                    "tags": props.get("TAGS"), "keys": props.get("KEYS"), "uniq_key": props.get("UNIQ_KEY"),
                })
                queues[key] += 1
                offset += size
            data = pa.Table.from_pylist(rows, schema=COMMITLOG.arrow)
            markers = {COMMITLOG_MARKER: offset, **{queue_marker(t, q): n for (t, q), n in queues.items()}}
            version, _ = self.table.write_rows(snapshot, data, target_file_size=self.config.target_file_size,
                                               markers=markers, operation="SEND",
                                               info={"storelib.messages": str(len(rows))})
            return AppendResult(version, start, offset, len(rows), rows=rows)

        return with_retries(self.table, self.config.max_commit_attempts, step, what="send")

    # ---- DataFrame appends -----------------------------------------------------------------
    def append_dataframe(self, encoded: "DataFrame", reject: Callable[["DataFrame"], None],
                         frame: "EncodedFrame") -> AppendResult:
        """Append an encoded DataFrame (see :mod:`storelib.producer`) in one atomic commit.

        ``encoded`` has the commitlog columns that vary per message except the offsets, store time
        and host, msg id and UNIQ_KEY (``frame`` completes the rest on the executors), plus
        ``_pid`` (its Spark partition id) and ``_error`` (why a row is refused, or null). The
        first pass counts sizes and refused rows; ``reject`` raises when there are any. The second
        pass must see the same rows as the first: where it does not, :class:`InputChangedError`
        is raised and nothing is committed (persist the input and try again).
        """
        from pyspark.errors import PySparkException
        from pyspark.sql import functions as F

        groups = (encoded.groupBy("_pid", "topic", "queue_id")
                  .agg(F.count(F.lit(1)).alias("n"), F.sum("size").alias("bytes"), F.count("_error").alias("bad"))
                  .collect())
        if any(g["bad"] for g in groups):
            reject(encoded)
        encoded = encoded.drop("_error")
        if not groups:
            snapshot = self.table.snapshot()
            n = self.next_offset(snapshot)
            return AppendResult(snapshot.version(), n, n, 0, queues={})
        per_pid: dict[int, list[int]] = {}
        for g in groups:
            acc = per_pid.setdefault(g["_pid"], [0, 0])
            acc[0] += g["n"]
            acc[1] += g["bytes"]
        total = sum(b for _, b in per_pid.values())
        count = sum(n for n, _ in per_pid.values())
        attempt_id = uuid.uuid4().hex[:12]

        def step(snapshot) -> AppendResult:
            start = self.next_offset(snapshot)
            phys_base, offset = {}, start
            for pid in sorted(per_pid):
                phys_base[pid] = offset
                offset += per_pid[pid][1]
            queue_base, nexts = {}, {}
            for g in sorted(groups, key=lambda g: g["_pid"]):
                key = (g["topic"], g["queue_id"])
                if key not in nexts:
                    nexts[key] = self.queue_next(*key, snapshot)
                queue_base[(g["_pid"], *key)] = nexts[key]
                nexts[key] += g["n"]
            plan = _Plan(phys_base, queue_base, {p: tuple(v) for p, v in per_pid.items()}, now_millis(),
                         self.store_host, self.msg_id_prefix, SysFlag.STOREHOSTADDRESS_V6 if self.store_v6 else 0, frame)
            prefix = f"part-{attempt_id}"
            try:
                files = write_dataframe(encoded, self.table, target_file_size=self.config.target_file_size,
                                        prefix=prefix, transform=plan.place)
            except PySparkException as e:
                self._discard_attempt(prefix)
                if _INPUT_CHANGED in str(e):
                    raise InputChangedError(None, "the DataFrame gave different rows on its second read; "
                                                  "nothing was written (persist it, or pass persist=True)") from None
                raise
            markers = {COMMITLOG_MARKER: start + total}
            markers.update({queue_marker(t, q): n for (t, q), n in nexts.items()})
            version = self.table.commit(snapshot, files, markers=markers, operation="SEND_DATAFRAME",
                                        info={"storelib.messages": str(count)})
            first = {k: queue_base[min((p, *k) for p in per_pid if (p, *k) in queue_base)] for k in nexts}
            return AppendResult(version, start, start + total, count,
                                queues={k: (first[k], nexts[k]) for k in nexts})

        return with_retries(self.table, self.config.max_commit_attempts, step, what="send_dataframe")

    def _discard_attempt(self, prefix: str) -> None:
        """Delete the files a failed bulk write left behind (they were never committed)."""
        from pyarrow import fs as pafs

        fs, base = filesystem(self.table.path)
        for info in fs.get_file_info(pafs.FileSelector(base)):
            if info.base_name.startswith(prefix + "-"):
                fs.delete_file(info.path)


@dataclass(frozen=True)
class _Plan:
    """Everything an executor needs to place its partition's messages; shipped in the closure."""

    phys_base: dict[int, int]
    queue_base: dict[tuple, int]
    expected: dict[int, tuple[int, int]]
    store_timestamp: dt.datetime
    store_host: str
    msg_id_prefix: str
    sysflag_bits: int
    frame: "EncodedFrame"

    def place(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Give one partition's encoded rows their offsets and msg ids, as commitlog rows (on an executor).

        Fails the task, so that nothing is committed, when the partition is not the one the first
        pass counted.
        """
        from pyspark import TaskContext

        pid = TaskContext.get().partitionId()
        phys = self.phys_base.get(pid, 0)
        counters: dict[tuple[str, int], int] = {}
        seen_rows = seen_bytes = 0
        for b in batches:
            if b.num_rows == 0:
                continue
            sizes = b.column("size").to_numpy().astype(np.int64)
            ends = np.cumsum(sizes)
            offsets = phys + ends - sizes
            phys += int(ends[-1])
            seen_rows += b.num_rows
            seen_bytes += int(ends[-1])
            yield self._row_batch(b, offsets, self._queue_offsets(pid, b, counters), pid, seen_rows - b.num_rows)
        if (seen_rows, seen_bytes) != self.expected.get(pid, (0, 0)):
            raise RuntimeError(f"{_INPUT_CHANGED}: partition {pid} expected {self.expected.get(pid)}, "
                               f"saw {(seen_rows, seen_bytes)}; persist the DataFrame before sending")

    def _queue_offsets(self, pid: int, b: pa.RecordBatch, counters: dict) -> np.ndarray:
        topics = b.column("topic").dictionary_encode()
        t_idx = topics.indices.to_numpy().astype(np.int64)
        q = b.column("queue_id").to_numpy().astype(np.int64)
        key = t_idx * (1 << 32) + q
        uniq, inv = np.unique(key, return_inverse=True)
        inv = inv.reshape(-1)
        order = np.argsort(inv, kind="stable")
        counts = np.bincount(inv, minlength=len(uniq))
        starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
        rank = np.empty(len(inv), dtype=np.int64)
        rank[order] = np.arange(len(inv)) - np.repeat(starts, counts)
        bases = np.empty(len(uniq), dtype=np.int64)
        names = topics.dictionary.to_pylist()
        for i, k in enumerate(uniq.tolist()):
            qk = (names[k >> 32], k & 0xFFFFFFFF)
            if qk not in counters:
                counters[qk] = self.queue_base[(pid, *qk)]
            bases[i] = counters[qk]
            counters[qk] += int(counts[i])
        return bases[inv] + rank

    def _row_batch(self, b: pa.RecordBatch, offsets: np.ndarray, queue_offsets: np.ndarray, pid: int,
                   first_row: int) -> pa.RecordBatch:
        n = b.num_rows
        cols = self.frame.complete(b, pid, first_row)
        cols["physical_offset"] = pa.array(offsets, pa.int64())
        cols["queue_offset"] = pa.array(queue_offsets, pa.int64())
        cols["store_timestamp"] = pa.array([self.store_timestamp], COMMITLOG.arrow.field("store_timestamp").type).take(np.zeros(n, dtype=np.int64))
        cols["store_host"] = pa.array([self.store_host], pa.string()).take(np.zeros(n, dtype=np.int64))
        cols["sysflag"] = pa.array(cols["sysflag"].to_numpy() | self.sysflag_bits, pa.int32())
        cols["msg_id"] = arrays.hex_strings(self.msg_id_prefix, offsets, 16)
        return pa.RecordBatch.from_arrays([cols[f.name] for f in COMMITLOG.arrow], schema=COMMITLOG.arrow)
