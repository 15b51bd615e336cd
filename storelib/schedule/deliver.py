"""Delivering delayed messages: RocketMQ's ScheduleMessageService and the 5.x timer's dequeue.

:func:`deliver` stores the due messages of ``SCHEDULE_TOPIC_XXXX`` (delay levels) and
``rmq_sys_wheel_timer`` (timers) under their real topic and queue, in one commitlog commit with the
advanced progress markers, so each is delivered exactly once; :func:`recall` cancels a timer message.
The details are in ``docs/internals.md``.

>>> import time
>>> from storelib import Message
>>> sent = store.send(Message("TopicTest", body=b"later", delay_level=1))
>>> sent.topic, sent.queue_id
('SCHEDULE_TOPIC_XXXX', 0)
>>> deliver(store.context, now=time.time_ns() // 10**6 - 60_000).delivered      # not due yet
0
>>> result = deliver(store.context, now=time.time_ns() // 10**6 + 60_000)
>>> result.delivered, result.levels
(1, {1: 1})
>>> deliver(store.context, now=time.time_ns() // 10**6 + 60_000).delivered      # exactly once
0
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.context import StoreContext
from storelib.delta.stats import Prune, prune_actions
from storelib.dispatch.request import deliver_times, timer_out_times
from storelib.encoding.arrow import Distinct
from storelib.encoding.ext_addr import MAX_EXT_ADDR
from storelib.encoding.message_id import decode_message_id
from storelib.encoding.properties import edit_properties, properties_lengths
from storelib.encoding.record import message_lengths
from storelib.model.errors import MessageNotFoundError, ProgressMovedError, StoreError, TimerMessageError
from storelib.model.message import MessageConst, SysFlag
from storelib.model.timestamps import epoch_ms, now_ms
from storelib.model.topic import SCHEDULE_TOPIC, TIMER_TOPIC
from storelib.storage.commitlog import STAGED_SCHEMA, EncodedMessage, Progress, now_millis
from storelib.storage.commitlog_reads import read_messages
from storelib.storage.consume_queue_ext import ext_units_of
from storelib.storage.dispatched import REPUT_MARKER

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "DeliveryResult",
    "deliver",
    "may_hold_scheduled",
    "recall",
    "delivered_rows",
    "restaged",
    "level_marker",
    "TIMER_TIME_MARKER",
    "TIMER_QUEUE_MARKER",
    "RECALL_MARKER",
    "SPARK_ROWS",
]

TIMER_TIME_MARKER = "schedule/timer/time"
TIMER_QUEUE_MARKER = "schedule/timer/queue"
#: Recalls stored so far: a delivery planned before a recall landed plans again.
RECALL_MARKER = "schedule/timer/recalls"
#: Due messages above which a run moves them with Spark rather than on the driver.
SPARK_ROWS = 50_000
_LEVEL_CLEARED = (MessageConst.DELAY, MessageConst.TIMER_DELIVER_MS, MessageConst.TIMER_DELAY_SEC)
_TIMER_CLEARED = (MessageConst.REAL_TOPIC, MessageConst.REAL_QID)
_UNITS = ["queue_offset", "commitlog_offset", "tags_code"]


def level_marker(level: int) -> str:
    """Name of the commitlog ``txn`` marker holding the next SCHEDULE_TOPIC_XXXX queue offset of a level to deliver.

    >>> level_marker(3)
    'schedule/level/3'
    """
    return f"schedule/level/{level}"


@dataclass
class DeliveryResult:
    """What one delivery run did: messages delivered per delay level and from the timer, recalled
    (with their recall markers), those whose REAL_TOPIC / REAL_QID could not be read (skipped), the
    newest deliver time delivered (epoch ms), the commitlog version written and the seconds taken.

    >>> DeliveryResult(now=0, levels={3: 2}, timer=1).delivered
    3
    """

    now: int
    levels: dict[int, int] = field(default_factory=dict)
    timer: int = 0
    recalled: int = 0
    undeliverable: int = 0
    newest_delivered_ms: int | None = None
    version: int | None = None
    spark: bool = False
    seconds: float = 0.0

    @property
    def delivered(self) -> int:
        return sum(self.levels.values()) + self.timer


@dataclass(frozen=True)
class _Plan:
    """The due messages of one run: per level the queue offsets ``[begin, end)``, the timer's
    progress before and after, the due commitlog offsets and deliver times, and the markers."""

    levels: dict[int, tuple[int, int]]
    timer: tuple[int, int, int, int] | None  # T before, Q before, T after, Q after
    offsets: np.ndarray
    deliver_ms: np.ndarray
    progress: Progress
    recalls: int


def _units(ctx: StoreContext, topic: str, queue_id: int, low: int, timer_after: int | None) -> tuple[pa.Table, int]:
    """Units of one schedule queue from ``low`` on (for the timer: also those below it due after
    ``timer_after``), as queue_offset, commitlog_offset, deliver time (tags_code): the dispatched ones
    from the unit table, the rest read from the commitlog past the table's ``reput`` marker."""
    table = ctx.tables.consume_queue
    view = table.view(markers=[REPUT_MARKER])
    reput = view.marker(REPUT_MARKER)
    test = (pc.field("topic") == topic) & (pc.field("queue_id") == queue_id)
    wanted = pc.field("queue_offset") >= low
    prune = Prune(equal={"topic": topic, "queue_id": queue_id}, between={"queue_offset": (low, 2**62)})
    if timer_after is not None:
        wanted = wanted | (pc.field("tags_code") > timer_after) | (pc.field("tags_code") <= MAX_EXT_ADDR)
        prune = Prune(equal={"topic": topic, "queue_id": queue_id})
    units = _real_codes(ctx, topic, queue_id, table.read_view(view, prune, columns=_UNITS, filter=test & wanted))
    if timer_after is not None:
        units = units.filter((pc.field("queue_offset") >= low) | (pc.field("tags_code") > timer_after))
    log = ctx.tables.commitlog
    tail = log.read_view(
        log.view(),
        Prune(between={"physical_offset": (reput, 2**62)}),
        columns=["physical_offset", "queue_offset", "store_timestamp", "properties"],
        filter=test & (pc.field("physical_offset") >= reput),
    )
    if tail.num_rows:
        props = tail.column("properties")
        if topic == TIMER_TOPIC:
            code = timer_out_times(pc.map_lookup(props, pa.scalar(MessageConst.TIMER_OUT_MS), "first"))
        else:
            store_ms = pc.divide(pc.cast(tail.column("store_timestamp"), pa.int64()), 1000)
            code = deliver_times(
                pc.map_lookup(props, pa.scalar(MessageConst.DELAY), "first"), store_ms, ctx.config.delay_levels_ms
            )
        extra = pa.table(
            {
                "queue_offset": tail.column("queue_offset"),
                "commitlog_offset": tail.column("physical_offset"),
                "tags_code": pc.fill_null(code, 0),
            }
        )
        units = pa.concat_tables([units.cast(extra.schema), extra])
    return units.sort_by("queue_offset"), reput


def _real_codes(ctx: StoreContext, topic: str, queue_id: int, units: pa.Table) -> pa.Table:
    """``units`` with the tag code of the ext unit where theirs is an ext address (a unit whose ext unit
    is gone keeps its address: below any deliver time, it is due, so it is delivered rather than lost)."""
    codes = units.column("tags_code").to_numpy()
    ext, at, _, found = ext_units_of(ctx.tables.consume_queue_ext, topic, queue_id, codes)
    if not found.any():
        return units
    fixed = np.where(found, ext.column("tags_code").to_numpy()[at], codes)
    return units.set_column(units.schema.get_field_index("tags_code"), "tags_code", pa.array(fixed, pa.int64()))


def _plan(ctx: StoreContext, now: int) -> _Plan:
    log = ctx.tables.commitlog
    names = [level_marker(n) for n in range(1, len(ctx.config.delay_levels_ms) + 1)]
    view = log.view(markers=names + [TIMER_TIME_MARKER, TIMER_QUEUE_MARKER, RECALL_MARKER])
    expect, advance, levels = {}, {}, {}
    offsets, delivers = [], []
    for level, name in enumerate(names, start=1):
        begin = view.marker(name)
        units, _ = _units(ctx, SCHEDULE_TOPIC, level - 1, begin, None)
        q = units.column("queue_offset").to_numpy()
        code = units.column("tags_code").to_numpy()
        # (RocketMQ's correctDeliverTimestamp would also let a deliver time more than the level's delay
        # ahead of the clock go now; with an injected clock that would deliver early, so it does not.)
        late = np.nonzero(code > now)[0]
        k = int(late[0]) if len(late) else len(q)
        # stop at a gap too: units from ``begin`` on must follow one another
        gaps = np.nonzero(q[:k] != begin + np.arange(k))[0]
        k = int(gaps[0]) if len(gaps) else k
        if k:
            levels[level] = (begin, begin + k)
            expect[name], advance[name] = begin, begin + k
            offsets.append(units.column("commitlog_offset").to_numpy()[:k])
            delivers.append(code[:k])
    t_before, q_before = view.marker(TIMER_TIME_MARKER), view.marker(TIMER_QUEUE_MARKER)
    t_after = max(now, t_before)
    units, _ = _units(ctx, TIMER_TOPIC, 0, q_before, t_before)
    q = units.column("queue_offset").to_numpy()
    code = units.column("tags_code").to_numpy()
    due = np.where(q < q_before, (code > t_before) & (code <= t_after), code <= t_after)
    q_after = max(q_before, int(q.max()) + 1 if len(q) else 0)
    timer = None
    if due.any():
        timer = (t_before, q_before, t_after, q_after)
        expect.update({TIMER_TIME_MARKER: t_before, TIMER_QUEUE_MARKER: q_before})
        advance.update({TIMER_TIME_MARKER: t_after, TIMER_QUEUE_MARKER: q_after})
        offsets.append(units.column("commitlog_offset").to_numpy()[due])
        delivers.append(code[due])
    recalls = view.marker(RECALL_MARKER)
    if expect:
        expect[RECALL_MARKER] = recalls
    return _Plan(
        levels,
        timer,
        np.concatenate(offsets) if offsets else np.zeros(0, np.int64),
        np.concatenate(delivers) if delivers else np.zeros(0, np.int64),
        Progress(expect, advance),
        recalls,
    )


def may_hold_scheduled(ctx: StoreContext) -> bool:
    """Whether any commitlog file may hold a delayed, timer or sent-back message (its topic statistics only,
    no file read): when none does, a delivery run has nothing to do. A service that delivers every second
    asks this first.

    >>> may_hold_scheduled(store.context)
    False
    """
    actions = ctx.tables.commitlog.view().actions
    return any(prune_actions(actions, Prune(equal={"topic": t})).num_rows for t in (SCHEDULE_TOPIC, TIMER_TOPIC))


def delivered_rows(rows: pa.Table | pa.RecordBatch, now: int) -> pa.Table:
    """Scheduled commitlog rows as the messages delivered from them (the :data:`STAGED_SCHEMA` columns),
    in the same order; rows whose REAL_TOPIC / REAL_QID cannot be read come out with a null topic.

    >>> rows = store.context.tables.commitlog.read_arrow()
    >>> delivered_rows(rows, 0).column("topic").to_pylist()        # not a scheduled message: no REAL_TOPIC
    [None]
    """

    def column(name: str) -> pa.Array:
        c = rows.column(name)
        return c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c

    props = column("properties")
    timer = pc.equal(column("topic"), TIMER_TOPIC).to_numpy(zero_copy_only=False)
    real_topic = pc.map_lookup(props, pa.scalar(MessageConst.REAL_TOPIC), "first")
    qid_text = pc.map_lookup(props, pa.scalar(MessageConst.REAL_QID), "first")
    valid = pc.fill_null(pc.match_substring_regex(qid_text, r"^[0-9]{1,9}$"), False)
    real_qid = pc.cast(pc.if_else(valid, qid_text, "0"), pa.int32())
    topic = pc.if_else(valid, real_topic, pa.scalar(None, pa.string()))
    n = len(props)
    store_ms = pc.cast(pc.divide(pc.cast(column("store_timestamp"), pa.int64()), 1000), pa.string())
    absent = pa.nulls(n, pa.string())
    props = edit_properties(props, _LEVEL_CLEARED, rows=~timer)
    props = edit_properties(
        props,
        _TIMER_CLEARED,
        {
            MessageConst.TIMER_ENQUEUE_MS: pc.if_else(pa.array(timer), store_ms, absent),
            MessageConst.TIMER_DEQUEUE_MS: pc.if_else(pa.array(timer), pa.scalar(str(now)), absent),
        },
        rows=timer,
    )
    return restaged(rows, topic, real_qid, props)


def restaged(
    rows: pa.Table | pa.RecordBatch,
    topic: pa.Array,
    queue_id: pa.Array,
    props: pa.Array,
    sysflag: pa.Array | None = None,
    body: pa.Array | None = None,
) -> pa.Table:
    """Stored rows as new messages to append (:data:`STAGED_SCHEMA`): the given topic, queue, properties
    (and sysflag, body), everything else kept, the size computed again (``calMsgLength``).

    >>> rows = store.context.tables.commitlog.read_arrow()
    >>> out = restaged(rows, pa.array(["Other"]), pa.array([0], pa.int32()), rows.column("properties").combine_chunks())
    >>> out.column("size").to_pylist() == [rows.column("size")[0].as_py() - len("TopicTest") + len("Other")]
    True
    """

    def column(name: str) -> pa.Array:
        c = rows.column(name)
        return c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c

    n = rows.num_rows
    sysflag = column("sysflag") if sysflag is None else sysflag
    body = column("body") if body is None else body
    flags = sysflag.to_numpy().astype(np.int64)
    size = message_lengths(
        pc.binary_length(body).to_numpy(zero_copy_only=False).astype(np.int64),
        pc.fill_null(pc.binary_length(topic), 0).to_numpy(zero_copy_only=False).astype(np.int64),
        properties_lengths(props),
        (flags & SysFlag.BORNHOST_V6) != 0,
        False,
    )
    size = size + np.where((flags & SysFlag.STOREHOSTADDRESS_V6) != 0, 12, 0)
    cols = {name: column(name) for name in STAGED_SCHEMA.names if name in rows.schema.names}
    cols.update(
        {
            "topic": topic,
            "queue_id": queue_id,
            "properties": props,
            "size": pa.array(size, pa.int32()),
            "sysflag": pa.array(flags, pa.int32()),
            "body": body,
            "prepared_transaction_offset": pa.repeat(pa.scalar(0, pa.int64()), n),
        }
    )
    return pa.table([cols[f.name] for f in STAGED_SCHEMA], schema=STAGED_SCHEMA)


def _recalled(rows: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Rows cancelled by a recall: the recall markers themselves, and the timer messages they name."""
    props = rows.column("properties")
    marker = pc.map_lookup(props, pa.scalar(MessageConst.TIMER_DEL_UNIQKEY), "first")
    is_marker = pc.is_valid(marker).to_numpy(zero_copy_only=False)
    if not is_marker.any():
        return is_marker, is_marker
    key = pc.binary_join_element_wise(
        pc.map_lookup(props, pa.scalar(MessageConst.REAL_TOPIC), "first"), rows.column("uniq_key"), "+"
    )
    named = pc.is_in(key, value_set=pc.drop_null(marker).unique()).to_numpy(zero_copy_only=False)
    timed = pc.equal(rows.column("topic"), TIMER_TOPIC).to_numpy(zero_copy_only=False)
    return is_marker, named & timed & ~is_marker


def deliver(
    ctx: StoreContext, now: object = None, *, fault: Callable[[str], None] | None = None, spark_rows: int = SPARK_ROWS
) -> DeliveryResult:
    """Deliver every message due at ``now`` (epoch ms or an aware datetime; default the clock) once;
    see the module docstring. ``fault`` (a test seam) is called with ``planned`` and ``committed``."""
    began = time.perf_counter()
    now = epoch_ms(now, "now", default=now_ms())
    for _ in range(ctx.config.max_commit_attempts):
        plan = _plan(ctx, now)
        result = DeliveryResult(now=now)
        if not len(plan.offsets):
            return result
        if fault:
            fault("planned")
        try:
            if len(plan.offsets) > spark_rows:
                result.spark = True
                appended = _deliver_spark(ctx, plan, now, result)
            else:
                appended = _deliver_arrow(ctx, plan, now, result)
        except ProgressMovedError:
            continue  # another run delivered first: plan again
        if fault:
            fault("committed")
        result.version = appended
        result.newest_delivered_ms = int(plan.deliver_ms.max())
        result.seconds = round(time.perf_counter() - began, 3)
        return result
    raise ProgressMovedError(None, "other delivery runs kept moving the progress first")


def _count(result: DeliveryResult, plan: _Plan, rows: pa.Table, dropped: np.ndarray) -> None:
    topics = rows.column("topic").to_numpy(zero_copy_only=False)
    queues = rows.column("queue_id").to_numpy(zero_copy_only=False)
    result.timer = int(((topics == TIMER_TOPIC) & ~dropped).sum())
    for level in plan.levels:
        result.levels[level] = int(((topics == SCHEDULE_TOPIC) & (queues == level - 1) & ~dropped).sum())


def _deliver_arrow(ctx: StoreContext, plan: _Plan, now: int, result: DeliveryResult) -> int:
    log = ctx.tables.commitlog
    wanted = pa.array(np.sort(plan.offsets), pa.int64())
    rows = log.read_arrow(
        paths=log.paths(log.holding(log.view().actions, "physical_offset", wanted)),
        filter=pc.field("physical_offset").isin(wanted),
    )
    # the Spark path's order: by level, then the timer, each in deliver-time order
    timer_ms = timer_out_times(pc.map_lookup(rows.column("properties"), pa.scalar(MessageConst.TIMER_OUT_MS), "first"))
    key = pa.table(
        {"topic": rows.column("topic"), "q": rows.column("queue_id"), "t": timer_ms, "o": rows.column("queue_offset")}
    )
    rows = rows.take(
        pc.sort_indices(key, [("topic", "ascending"), ("q", "ascending"), ("t", "ascending"), ("o", "ascending")])
    )
    markers, cancelled = _recalled(rows)
    recalled = markers | cancelled
    out = delivered_rows(rows, now)
    bad = pc.is_null(out.column("topic")).to_numpy(zero_copy_only=False) & ~recalled
    _count(result, plan, rows, recalled | bad)
    result.recalled, result.undeliverable = int(cancelled.sum()), int(bad.sum())
    out = out.filter(pa.array(~(recalled | bad)))
    return ctx.commitlog.append_arrow(out, plan.progress, operation="DELIVER").version


def _due_rows(ctx: StoreContext, plan: _Plan) -> "DataFrame":
    """The due scheduled rows as a Spark DataFrame, by the same rules as the plan (no offset lists)."""
    from pyspark.sql import functions as F

    log = ctx.tables.commitlog
    low, high = int(plan.offsets.min()), int(plan.offsets.max())
    df = log.read_files(ctx.spark, log.prune(log.view().actions, Prune(between={"physical_offset": (low, high)})))
    df = df.where(F.col("physical_offset").between(low, high))
    sched = F.col("topic") == SCHEDULE_TOPIC
    test = F.lit(False)
    for level, (begin, end) in plan.levels.items():
        test = test | (sched & (F.col("queue_id") == level - 1) & F.col("queue_offset").between(begin, end - 1))
    if plan.timer is not None:
        t_before, q_before, t_after, q_after = plan.timer
        d = F.col("properties")[MessageConst.TIMER_OUT_MS].try_cast("long")
        q = F.col("queue_offset")
        test = test | (
            (F.col("topic") == TIMER_TOPIC)
            & (F.col("queue_id") == 0)
            & F.when(q < q_before, (d > t_before) & (d <= t_after)).otherwise((q < q_after) & (d <= t_after))
        )
    return df.where(test)


def _deliver_spark(ctx: StoreContext, plan: _Plan, now: int, result: DeliveryResult) -> int:
    from pyspark.sql import functions as F

    due = _due_rows(ctx, plan)
    if plan.timer is not None and plan.recalls:
        markers = due.where(F.col("properties")[MessageConst.TIMER_DEL_UNIQKEY].isNotNull())
        keys = [r[0] for r in markers.select(F.col("properties")[MessageConst.TIMER_DEL_UNIQKEY]).collect()]
        if keys:
            named = F.concat_ws("+", F.col("properties")[MessageConst.REAL_TOPIC], F.col("uniq_key")).isin(keys)
            cancel = F.col("properties")[MessageConst.TIMER_DEL_UNIQKEY].isNotNull() | (
                (F.col("topic") == TIMER_TOPIC) & named
            )
            result.recalled = len(keys)
            due = due.where(~cancel)
    due = due.orderBy(
        "topic", "queue_id", F.col("properties")[MessageConst.TIMER_OUT_MS].try_cast("long"), "queue_offset"
    )
    if plan.timer is None:  # a level's due units are [begin, end) of its queue: no counting job
        counts = {(SCHEDULE_TOPIC, level - 1): end - begin for level, (begin, end) in plan.levels.items()}
    else:
        counts = {(r[0], r[1]): r[2] for r in due.groupBy("topic", "queue_id").count().collect()}
    appended = ctx.commitlog.append_dataframe(due, _DeliveryFrame(now), _refuse, plan.progress, operation="DELIVER")
    result.timer = counts.get((TIMER_TOPIC, 0), 0)
    result.levels = {level: counts.get((SCHEDULE_TOPIC, level - 1), 0) for level in plan.levels}
    result.undeliverable = result.delivered - appended.count
    return appended.version


def _refuse(bad) -> None:
    raise StoreError(None, f"a delivery row was refused: {bad}")


@dataclass(frozen=True)
class _Topics:
    distinct: Distinct


@dataclass(frozen=True)
class _DeliveryFrame:
    """What the executors do to each batch of due rows in a Spark delivery (the ``BatchCompleter`` of
    :meth:`~storelib.storage.commitlog.CommitLog.append_dataframe`): :func:`delivered_rows`, with the rows
    that cannot be delivered left out."""

    now: int
    _last: list = field(default_factory=lambda: [None, None], compare=False, repr=False)

    def _out(self, batch: pa.RecordBatch) -> pa.Table:
        """The batch delivered, once per batch (the three steps of a stage ask for it in turn)."""
        if self._last[0] is not batch:
            out = delivered_rows(pa.Table.from_batches([batch]), self.now)
            self._last[:] = [batch, out.filter(pc.is_valid(out.column("topic")))]
        return self._last[1]

    def topics_of(self, batch: pa.RecordBatch) -> _Topics:
        return _Topics(Distinct.of(self._out(batch).column("topic")))

    def refusals(self, batch: pa.RecordBatch, topics: object = None) -> pa.Array:
        return pa.nulls(len(self._out(batch)), pa.string())

    def complete(
        self, batch: pa.RecordBatch, partition: int, first_row: int, topics: object = None
    ) -> dict[str, pa.Array]:
        out = self._out(batch)
        return {name: out.column(name).combine_chunks() for name in out.column_names}


def recall(ctx: StoreContext, msg_id: str) -> int:
    """Recall a timer message not yet delivered, by its store id (5.3.2's ``recallMessage``): store a
    ``TIMER_DEL_UNIQKEY`` marker so the run that finds it due delivers neither. Returns the deliver time.

    A message already delivered, or not waiting in the timer, raises :class:`TimerMessageError`.

    >>> import time
    >>> from storelib import Message
    >>> later = time.time_ns() // 10**6 + 3_600_000
    >>> sent = store.send(Message("TopicTest", deliver_time_ms=later))
    >>> recall(store.context, sent.msg_id) == later
    True
    >>> deliver(store.context, now=later).recalled
    1
    """

    _, _, offset = decode_message_id(msg_id)
    log = ctx.tables.commitlog
    found = read_messages(log, log.view().actions, [offset])
    if offset not in found:
        raise MessageNotFoundError("msg_id", f"no message at commitlog offset {offset} in this store", value=msg_id)
    m = found[offset]
    deliver_at = m.properties.get(MessageConst.TIMER_OUT_MS)
    if m.topic != TIMER_TOPIC or deliver_at is None or MessageConst.TIMER_DEL_UNIQKEY in m.properties:
        raise TimerMessageError("msg_id", "is not a timer message waiting for delivery", value=msg_id)
    for _ in range(ctx.config.max_commit_attempts):
        view = log.view(markers=[TIMER_TIME_MARKER, TIMER_QUEUE_MARKER, RECALL_MARKER])
        t, q, n = (view.marker(k) for k in (TIMER_TIME_MARKER, TIMER_QUEUE_MARKER, RECALL_MARKER))
        if m.queue_offset < q and int(deliver_at) <= t:
            raise TimerMessageError("msg_id", f"was already delivered (at {deliver_at})", value=msg_id)
        props = {
            MessageConst.TIMER_DEL_UNIQKEY: f"{m.properties.get(MessageConst.REAL_TOPIC)}+{m.uniq_key}",
            MessageConst.TIMER_OUT_MS: deliver_at,
            MessageConst.REAL_TOPIC: m.properties.get(MessageConst.REAL_TOPIC, ""),
            MessageConst.REAL_QID: m.properties.get(MessageConst.REAL_QID, "0"),
        }
        marker = EncodedMessage(TIMER_TOPIC, 0, 0, 0, b"", props, now_millis(), ctx.producer.born_host)
        progress = Progress({TIMER_TIME_MARKER: t, TIMER_QUEUE_MARKER: q, RECALL_MARKER: n}, {RECALL_MARKER: n + 1})
        try:
            ctx.commitlog.append([marker], progress)
            return int(deliver_at)
        except ProgressMovedError:
            continue
    raise ProgressMovedError(None, "deliveries kept moving the timer's progress first")
