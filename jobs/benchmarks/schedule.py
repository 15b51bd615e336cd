"""Delayed delivery and the transaction check-back, each against a bare Spark job in the same run.

Set-up (not timed). ``n`` messages of one topic (``seq`` = 0..n-1 as a property, tags from 8
values, a key each, 100-byte bodies) go through the store's own DataFrame send
(:meth:`~storelib.send.producer.Producer.encode_dataframe` and
:meth:`~storelib.storage.commitlog.CommitLog.append_dataframe`: every row checked and completed on
the executors as a send does), with one more step on each completed batch, :class:`Scheduled`: what
the list path does to a message sent with a delay level (:func:`~storelib.send.schedule.plan_schedule`:
``SCHEDULE_TOPIC_XXXX`` queue ``level - 1``, ``DELAY``, ``REAL_TOPIC``, ``REAL_QID``) or as a half
message (:func:`~storelib.schedule.transaction.send_half`: ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0,
``TRAN_MSG``, ``PGROUP``, ``__transactionId__``, ``REAL_TOPIC``, ``REAL_QID``), the size computed
again. ``send_dataframe`` itself refuses those reserved properties, and sending 10^6 transactions one
by one would take hours. The delayed messages spread over the 18 delay levels. Both stores are
dispatched; each timed run gets a fresh copy of its store (delivery and check-back consume their input).

Timed, runs alternating (ours, baseline, ours, ...), best of ``repeats``, after one warm-up run of
each side (on a store of ``max(SPARK_ROWS + 1, n / 20)`` messages, so delivery's Spark path is warm too;
on the measured store itself when ``n`` is no bigger):

* ``deliver`` - ``store.deliver_delayed(now=...)`` with ``now`` past every deliver time (all ``n``
  due), against a bare Spark job that reads the due ``SCHEDULE_TOPIC_XXXX`` rows from the commitlog's
  Parquet files (deliver time = store time + the level's delay), rewrites topic, queue and properties
  (``DELAY`` cleared) with Spark columns and writes them as Parquet to a scratch folder.
* ``check`` - ``store.check_transactions(now=...)`` with the producer group's checker
  :func:`half_commit` (COMMIT for an even ``seq``, ROLLBACK for an odd one), against a bare Spark job
  that reads the half and op topics, leaves out half messages an op message names, applies the same
  answer as a Spark column and writes the committed real messages and one op message per half
  message as Parquet, in one pass.

Throughput is messages per second; the ratio is ours over the baseline's seconds (target <= 2x).

>>> ScheduleFigures(100, {"deliver": 2.0}, {"deliver": 1.0}, {"deliver": "100 delivered"}).lines()[0].split()[:4]
['deliver', '50', 'msgs/s', '(2.00']
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.encoding.arrow import Distinct
from storelib.encoding.properties import edit_properties
from storelib.model.message import MessageConst, StoredMessage, SysFlag
from storelib.model.topic import SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from storelib.schedule.deliver import restaged
from storelib.schedule.transaction import REMOVE_TAG, TransactionState
from storelib.session import parallelism
from storelib.storage.commitlog import STAGED_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from storelib.store import MessageStore

__all__ = ["ScheduleFigures", "Scheduled", "bench_schedule", "half_commit", "schedule_frame", "TARGET"]

TOPIC = "ScheduleBench"
GROUP = "PG_BENCH"
#: The checker :func:`half_commit`, by the import path ``register_checker`` wants.
CHECKER = "jobs.benchmarks.schedule:half_commit"
#: The issue's target: each step at most this many times its baseline's seconds.
TARGET = 2.0
HOUR = 3_600_000


def half_commit(message: StoredMessage) -> TransactionState:
    """The benchmark's check-back: COMMIT when the message's ``seq`` property is even, else ROLLBACK.

    >>> from types import SimpleNamespace
    >>> (half_commit(SimpleNamespace(properties={"seq": "4"})).name,
    ...  half_commit(SimpleNamespace(properties={"seq": "7"})).name)
    ('COMMIT_MESSAGE', 'ROLLBACK_MESSAGE')
    """
    return (
        TransactionState.COMMIT_MESSAGE
        if int(message.properties["seq"]) % 2 == 0
        else TransactionState.ROLLBACK_MESSAGE
    )


@dataclass(frozen=True)
class ScheduleFigures:
    """Best seconds of each step (``deliver``, ``check``) and of its bare Spark baseline, and what each did.

    >>> f = ScheduleFigures(10, {"check": 1.0}, {"check": 4.0}, {"check": "5 committed"})
    >>> f.as_dict()["check"]["ratio"], f.lines()[1]
    (0.25, 'check        5 committed')
    """

    messages: int
    seconds: dict[str, float]
    baseline_seconds: dict[str, float]
    notes: dict[str, str]

    def lines(self) -> list[str]:
        out = []
        for name, seconds in self.seconds.items():
            base = self.baseline_seconds[name]
            out.append(
                f"{name:<8} {self.messages / seconds:>12,.0f} msgs/s ({seconds:.2f} s) vs bare Spark "
                f"{self.messages / base:,.0f} msgs/s ({base:.2f} s) = {seconds / base:.2f}x (target <= {TARGET:g}x)"
            )
        out.extend(f"{name:<12} {note}" for name, note in self.notes.items())
        return out

    def as_dict(self) -> dict:
        return {
            "messages": self.messages,
            "target": TARGET,
            **{
                name: {
                    "seconds": round(s, 3),
                    "msgs_per_s": round(self.messages / s),
                    "baseline_seconds": round(self.baseline_seconds[name], 3),
                    "baseline_msgs_per_s": round(self.messages / self.baseline_seconds[name]),
                    "ratio": round(s / self.baseline_seconds[name], 3),
                    "note": self.notes.get(name),
                }
                for name, s in self.seconds.items()
            },
        }


def schedule_frame(spark: "SparkSession", n: int, partitions: int) -> "DataFrame":
    """``n`` messages of :data:`TOPIC`: ``seq`` = id as a property, tags of 8 values, a key each, 100-byte bodies.

    >>> schedule_frame(spark, 3, 1).columns
    ['topic', 'tags', 'keys', 'properties', 'body']
    """
    from pyspark.sql import functions as F

    i = F.col("id")
    return spark.range(0, n, 1, partitions).select(
        F.lit(TOPIC).alias("topic"),
        F.concat(F.lit("Tag"), F.pmod(i, 8).cast("string")).alias("tags"),
        F.array(F.concat(F.lit("order-"), i.cast("string"))).alias("keys"),
        F.create_map(F.lit("seq"), i.cast("string")).alias("properties"),
        F.encode(F.rpad(F.concat(F.lit("scheduled body "), i.cast("string")), 100, "."), "UTF-8").alias("body"),
    )


@dataclass(frozen=True)
class _Topics:
    distinct: Distinct  # of the rows as stored (what the append counts queues by)
    sent: Any  # the send's BatchTopics, of the rows as sent


@dataclass(frozen=True)
class Scheduled:
    """A DataFrame send's executor step (``frame``, the send's :class:`~storelib.send.frame.EncodedFrame`)
    followed by what storing a delayed message (``kind="delay"``, level ``1 + row % levels``) or a half
    message of ``producer_group`` (``kind="half"``) does to each completed row, as whole Arrow batches.

    >>> from storelib.send.frame import EncodedFrame, UniqKeys
    >>> from storelib.model.topic import TopicConfig
    >>> from storelib.storage.commitlog import now_millis
    >>> defaults = {"sysflag": 0, "flag": 0, "born_host": "h:0", "born_timestamp": now_millis(), "reconsume_times": 0,
    ...             "prepared_transaction_offset": 0}
    >>> sent = EncodedFrame(defaults, UniqKeys("0A0000010001", "x", 5), {"T": TopicConfig("T")}, 99)
    >>> batch = pa.RecordBatch.from_pydict({"topic": ["T"], "body": [b"x"], "body_crc": pa.array([0], pa.int32()),
    ...     "tags": pa.nulls(1, pa.string()), "keys": pa.nulls(1, pa.string()), "property_names": ["seq"],
    ...     "property_values": ["0"], "property_count": pa.array([1], pa.int32())})
    >>> frame = Scheduled(sent, "delay", 18)
    >>> cols = frame.complete(batch, 0, 2, frame.topics_of(batch))
    >>> cols["topic"][0].as_py(), cols["queue_id"][0].as_py(), [k for k, _ in cols["properties"][0].as_py()]
    ('SCHEDULE_TOPIC_XXXX', 2, ['seq', 'UNIQ_KEY', 'DELAY', 'REAL_TOPIC', 'REAL_QID'])
    """

    frame: Any
    kind: str
    levels: int = 18
    producer_group: str = GROUP

    def topics_of(self, batch: pa.RecordBatch) -> _Topics:
        stored = SCHEDULE_TOPIC if self.kind == "delay" else TRANS_HALF_TOPIC
        return _Topics(Distinct.of(pa.repeat(pa.scalar(stored), batch.num_rows)), self.frame.topics_of(batch))

    def refusals(self, batch: pa.RecordBatch, topics: _Topics | None = None) -> pa.Array:
        return self.frame.refusals(batch, (topics or self.topics_of(batch)).sent)

    def complete(
        self, batch: pa.RecordBatch, partition: int, first_row: int, topics: _Topics | None = None
    ) -> dict[str, pa.Array]:
        n = batch.num_rows
        cols = self.frame.complete(batch, partition, first_row, (topics or self.topics_of(batch)).sent)
        rows = pa.table({name: cols[name] for name in STAGED_SCHEMA.names})
        real_topic, real_qid = cols["topic"], pc.cast(cols["queue_id"], pa.string())
        sysflag = None
        if self.kind == "delay":  # plan_schedule
            level = (first_row + np.arange(n, dtype=np.int64)) % self.levels + 1
            put = {
                MessageConst.DELAY: pa.array(level.astype(str)),
                MessageConst.REAL_TOPIC: real_topic,
                MessageConst.REAL_QID: real_qid,
            }
            topic, queue_id = SCHEDULE_TOPIC, pa.array(level - 1, pa.int32())
        else:  # send_half
            put = {
                MessageConst.TRAN_MSG: pa.repeat(pa.scalar("true"), n),
                MessageConst.PGROUP: pa.repeat(pa.scalar(self.producer_group), n),
                MessageConst.TRANSACTION_ID: cols["uniq_key"],
                MessageConst.REAL_TOPIC: real_topic,
                MessageConst.REAL_QID: real_qid,
            }
            topic, queue_id = TRANS_HALF_TOPIC, pa.repeat(pa.scalar(0, pa.int32()), n)
            sysflag = pc.bit_wise_and(cols["sysflag"], pa.scalar(~SysFlag.TRANSACTION_ROLLBACK_TYPE, pa.int32()))
        props = edit_properties(cols["properties"], (), put)
        out = restaged(rows, pa.repeat(pa.scalar(topic), n), queue_id, props, sysflag=sysflag)
        return {name: out.column(name).combine_chunks() for name in out.column_names}


def _send_scheduled(store: "MessageStore", df: "DataFrame", kind: str) -> int:
    """Store ``df``'s messages as delayed or half messages (see :class:`Scheduled`); returns how many."""
    from storelib.send.producer import Producer

    ctx = store.context
    encoded, frame = ctx.producer.encode_dataframe(df, ctx.topics.all())
    return ctx.commitlog.append_dataframe(
        encoded, Scheduled(frame, kind, len(ctx.config.delay_levels_ms)), Producer.refuse
    ).count


def _setup(spark: "SparkSession", root: str, n: int, partitions: int) -> "MessageStore":
    """A store with ``n`` delayed messages and ``n`` half messages, dispatched, its checker registered."""
    from storelib.store import MessageStore

    store = MessageStore.create(root, spark)
    store.create_topic(TOPIC, queues=8)
    store.register_transaction_checker(GROUP, CHECKER)
    frame = schedule_frame(spark, n, partitions)
    assert _send_scheduled(store, frame, "delay") == n
    assert _send_scheduled(store, frame, "half") == n
    store.dispatch()
    return store


def _baseline_deliver(store: "MessageStore", now: int, out: str) -> None:
    """The bare Spark job: the due SCHEDULE_TOPIC_XXXX rows, moved to their real topic and queue, as Parquet."""
    from pyspark.sql import functions as F

    delays = F.array(*[F.lit(d) for d in store.config.delay_levels_ms])
    props = F.col("properties")
    due_ms = F.unix_millis(F.col("store_timestamp")) + F.element_at(delays, props[MessageConst.DELAY].cast("int"))
    cleared = [MessageConst.DELAY, MessageConst.TIMER_DELIVER_MS, MessageConst.TIMER_DELAY_SEC]
    store.messages(SCHEDULE_TOPIC).where(due_ms <= now).select(
        props[MessageConst.REAL_TOPIC].alias("topic"),
        props[MessageConst.REAL_QID].cast("int").alias("queue_id"),
        F.map_filter(props, lambda k, v: ~k.isin(cleared)).alias("properties"),
        *[c for c in STAGED_SCHEMA.names if c not in ("topic", "queue_id", "properties")],
    ).write.mode("overwrite").parquet(out)


def _baseline_check(store: "MessageStore", out: str) -> None:
    """The bare Spark job: pending half messages (no op message names them), the checker's answer as a
    column, each COMMIT's real message and every half message's op message, as Parquet, in one pass."""
    from pyspark.sql import functions as F

    tail = store.messages().where(F.col("topic").isin(TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC))
    ops = (
        tail.where(F.col("topic") == TRANS_OP_HALF_TOPIC)
        .select(F.explode(F.split(F.decode("body", "UTF-8"), ",")).alias("done"))
        .where(F.col("done") != "")
        .select(F.col("done").cast("long").alias("done"))
    )
    halves = tail.where(F.col("topic") == TRANS_HALF_TOPIC)
    pending = halves.join(ops, halves.queue_offset == ops.done, "left_anti")
    props = F.col("properties")
    commit = F.pmod(props["seq"].cast("long"), F.lit(2)) == 0
    rows = pending.withColumn(
        "op", F.explode(F.when(commit, F.array(F.lit(False), F.lit(True))).otherwise(F.array(F.lit(True))))
    )
    op = F.col("op")
    cleared = [MessageConst.REAL_TOPIC, MessageConst.REAL_QID, MessageConst.TRAN_PREPARED_QUEUE_OFFSET]
    op_body = F.encode(F.concat(F.col("queue_offset").cast("string"), F.lit(",")), "UTF-8")
    rows.select(
        F.when(op, F.lit(TRANS_OP_HALF_TOPIC)).otherwise(props[MessageConst.REAL_TOPIC]).alias("topic"),
        F.when(op, F.lit(0)).otherwise(props[MessageConst.REAL_QID].cast("int")).alias("queue_id"),
        F.when(
            op,
            F.create_map(
                F.lit(MessageConst.TAGS),
                F.lit(REMOVE_TAG),
                F.lit(MessageConst.UNIQ_KEY),
                F.concat("uniq_key", F.lit("OP")),
            ),
        )
        .otherwise(F.map_filter(props, lambda k, v: ~k.isin(cleared)))
        .alias("properties"),
        F.when(op, F.lit(0))
        .otherwise(
            (F.col("sysflag").bitwiseAND(~SysFlag.TRANSACTION_ROLLBACK_TYPE)).bitwiseOR(SysFlag.TRANSACTION_COMMIT_TYPE)
        )
        .alias("sysflag"),
        F.when(op, op_body).otherwise(F.col("body")).alias("body"),
        F.when(op, F.crc32(op_body).bitwiseAND(0x7FFFFFFF).cast("int")).otherwise(F.col("body_crc")).alias("body_crc"),
        F.when(op, F.lit(REMOVE_TAG)).otherwise(F.col("tags")).alias("tags"),
        F.when(op, F.lit(None)).otherwise(F.col("keys")).alias("keys"),
        F.when(op, F.concat("uniq_key", F.lit("OP"))).otherwise(F.col("uniq_key")).alias("uniq_key"),
        "born_timestamp",
        "born_host",
        "reconsume_times",
        "flag",
    ).write.mode("overwrite").parquet(out)


def _runs(
    work: str, template: str, ours: Callable[[str], Any], baseline: Callable[[str], None], repeats: int
) -> tuple[float, float, Any]:
    """Best seconds of ``repeats`` runs of each side, alternating, each on a fresh copy of ``template``
    (copied outside the timing), and the result of ours' best run."""
    times: list[list[float]] = [[], []]
    results = []
    for _ in range(repeats):
        for side, fn in enumerate((ours, baseline)):
            copy = f"{work}/run-{side}"
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(template, copy)
            began = time.perf_counter()
            got = fn(copy)
            times[side].append(time.perf_counter() - began)
            if side == 0:
                results.append(got)
            shutil.rmtree(copy, ignore_errors=True)
    best = int(np.argmin(times[0]))
    return min(times[0]), min(times[1]), results[best]


def bench_schedule(
    spark: "SparkSession", n: int, *, root: str | None = None, partitions: int | None = None, repeats: int = 2
) -> ScheduleFigures:
    """Run the delivery and check-back benchmark on ``n`` delayed and ``n`` half messages (see the module docstring)."""
    from storelib.schedule.deliver import SPARK_ROWS
    from storelib.store import MessageStore

    work = root or tempfile.mkdtemp(prefix="storelib-bench-schedule-")
    partitions = partitions or max(2, parallelism(spark) * 2)
    try:
        began = time.perf_counter()
        template = _setup(spark, f"{work}/template", n, partitions).root
        setup_seconds = time.perf_counter() - began
        warm_n = min(n, max(SPARK_ROWS + 1, n // 20))  # big enough for delivery's Spark path when n is
        warm = _setup(spark, f"{work}/warm", warm_n, partitions).root if warm_n < n else template
        # past every deliver time and every transaction timeout
        now = int(time.time() * 1000) + max(MessageStore.create(template, spark).config.delay_levels_ms) + HOUR

        def deliver(path: str):
            return MessageStore.create(path, spark).deliver_delayed(now=now)

        def deliver_baseline(path: str) -> None:
            _baseline_deliver(MessageStore.create(path, spark), now, f"{work}/baseline-out")

        def check(path: str):
            return MessageStore.create(path, spark).check_transactions(now=now)

        def check_baseline(path: str) -> None:
            _baseline_check(MessageStore.create(path, spark), f"{work}/baseline-out")

        seconds, base, notes = {}, {}, {}
        for name, ours, theirs in (("deliver", deliver, deliver_baseline), ("check", check, check_baseline)):
            _runs(work, warm, ours, theirs, 1)
            seconds[name], base[name], result = _runs(work, template, ours, theirs, repeats)
            if name == "deliver":
                assert result.delivered == n, result
                notes[name] = (
                    f"{result.delivered:,} delivered over {len(result.levels)} levels "
                    f"({'one Spark job' if result.spark else 'pyarrow on the driver'})"
                )
            else:
                assert (result.checked, result.committed, result.rolled_back) == (n, (n + 1) // 2, n // 2), result
                notes[name] = (
                    f"{result.checked:,} checked: {result.committed:,} committed, {result.rolled_back:,} rolled back"
                )
        notes["setup"] = f"{n:,} delayed + {n:,} half messages sent and dispatched in {setup_seconds:.1f} s (not timed)"
        return ScheduleFigures(n, seconds, base, notes)
    finally:
        if root is None:
            shutil.rmtree(work, ignore_errors=True)
