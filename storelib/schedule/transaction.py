"""Transactional messages: half messages, ending them, and the broker's check-back.

Details: ``docs/internals.md``, section storelib.schedule.transaction.

>>> from storelib import Message
>>> r = send_in_transaction(store.context, Message("TopicTest", body=b"order"),
...                         lambda m, arg: TransactionState.COMMIT, "PG")
>>> r.local_state, r.topic
(<TransactionState.COMMIT_MESSAGE: 'COMMIT_MESSAGE'>, 'RMQ_SYS_TRANS_HALF_TOPIC')
>>> end_transaction(store.context, r.transaction_id, TransactionState.ROLLBACK)  # doctest: +NORMALIZE_WHITESPACE
Traceback (most recent call last):
...
storelib.model.errors.TransactionEndedError: transaction_id: was already committed or rolled back; nothing was written
    (got '...')
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.context import StoreContext
from storelib.delta.stats import Prune
from storelib.encoding.properties import edit_properties, property_array
from storelib.encoding.record import body_crcs
from storelib.model.errors import (
    MessageError,
    ProgressMovedError,
    TransactionEndedError,
    TransactionError,
    TransactionNotFoundError,
)
from storelib.model.message import Message, MessageConst, SendResult, SysFlag
from storelib.model.topic import TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, validate_group
from storelib.query.lookup import MessageQuery
from storelib.schedule.deliver import restaged
from storelib.storage.commitlog import STAGED_SCHEMA, EncodedMessage, Progress, now_millis, queue_marker

__all__ = [
    "TransactionState",
    "TransactionSendResult",
    "as_half",
    "send_half",
    "send_in_transaction",
    "end_transaction",
    "keep",
    "pending_halves",
    "ended_rows",
    "CHECK_MARKER",
    "REMOVE_TAG",
]

log = logging.getLogger(__name__)

#: Commitlog offset below which no half message is pending (``txn`` marker of the commitlog).
CHECK_MARKER = "transaction/check"
#: ``TransactionalMessageUtil.REMOVE_TAG``: the tag of op messages.
REMOVE_TAG = "d"
_HALF_CLEARED = (MessageConst.REAL_TOPIC, MessageConst.REAL_QID, MessageConst.TRAN_PREPARED_QUEUE_OFFSET)


class TransactionState(enum.Enum):
    """A local transaction's state (``LocalTransactionState``); ``COMMIT``, ``ROLLBACK`` and ``UNKNOWN`` are aliases.

    >>> TransactionState.COMMIT is TransactionState.COMMIT_MESSAGE, TransactionState.of("UNKNOW")
    (True, <TransactionState.UNKNOW: 'UNKNOW'>)
    """

    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"
    COMMIT = "COMMIT_MESSAGE"
    ROLLBACK = "ROLLBACK_MESSAGE"
    UNKNOWN = "UNKNOW"

    @classmethod
    def of(cls, value: object) -> "TransactionState":
        """The state ``value`` names (a state, or its name as text); else :class:`TransactionError`."""

        if isinstance(value, cls):
            return value
        if isinstance(value, str) and value.upper() in cls.__members__:
            return cls[value.upper()]
        raise TransactionError("state", "must be COMMIT_MESSAGE, ROLLBACK_MESSAGE or UNKNOW", value=value)


@dataclass(frozen=True)
class TransactionSendResult:
    """What :func:`send_in_transaction` returns: where the half message went, its transaction id,
    and the local transaction's answer (UNKNOW, with ``error``, when it raised).

    >>> TransactionSendResult(SendResult("SEND_OK", "ID", "K", "T", 0, 0, 0), "K", TransactionState.UNKNOW).topic
    'T'
    """

    half: SendResult
    transaction_id: str
    local_state: TransactionState
    error: str | None = None

    @property
    def topic(self) -> str:
        return self.half.topic

    @property
    def msg_id(self) -> str:
        return self.half.msg_id


def as_half(encoded: EncodedMessage, producer_group: str) -> EncodedMessage:
    """``encoded`` made a half message of ``producer_group`` (``TransactionalMessageBridge.parseHalfMessageInner``):
    stored in the half topic, its real topic and queue in properties, its UNIQ_KEY its transaction id.

    >>> from storelib.storage.commitlog import now_millis
    >>> h = as_half(EncodedMessage("T", 2, 0, 0, b"", {"UNIQ_KEY": "K"}, now_millis(), "127.0.0.1:0"), "PG")
    >>> h.topic, h.queue_id, h.properties["REAL_QID"], h.properties["__transactionId__"]
    ('RMQ_SYS_TRANS_HALF_TOPIC', 0, '2', 'K')
    """
    props = dict(encoded.properties)
    props[MessageConst.TRAN_MSG] = "true"
    props[MessageConst.PGROUP] = producer_group
    props[MessageConst.TRANSACTION_ID] = props[MessageConst.UNIQ_KEY]
    props[MessageConst.REAL_TOPIC] = encoded.topic
    props[MessageConst.REAL_QID] = str(encoded.queue_id)
    encoded.properties, encoded.topic, encoded.queue_id = props, TRANS_HALF_TOPIC, 0
    encoded.sysflag &= ~SysFlag.TRANSACTION_ROLLBACK_TYPE
    return encoded


def send_half(ctx: StoreContext, message: Message, producer_group: str) -> SendResult:
    """Store ``message`` as a half message of ``producer_group`` (see the module docstring).

    >>> from storelib import Message
    >>> send_half(store.context, Message("TopicTest"), "PG").topic
    'RMQ_SYS_TRANS_HALF_TOPIC'
    """
    validate_group(producer_group, "producer_group")
    if getattr(message, "delay_level", 0) or getattr(message, "deliver_time_ms", None) is not None:
        raise MessageError("message", "a transactional message can not be delayed (RocketMQ clears DELAY)")
    encoded = as_half(ctx.producer.encode([message], ctx.topics.all())[0], producer_group)
    rows = ctx.commitlog.append([encoded]).rows
    assert rows is not None  # append answers a row per message
    return SendResult.of_row(rows[0])


def send_in_transaction(
    ctx: StoreContext,
    message: Message,
    local_transaction: Callable[[Message, Any], Any],
    producer_group: str,
    arg: Any = None,
) -> TransactionSendResult:
    """``TransactionMQProducer.sendMessageInTransaction``: the half message, then ``local_transaction(message, arg)``,
    then :func:`end_transaction` with its answer. An answer of UNKNOW, or an exception, leaves the
    half message to the check-back (``check_transactions``)."""
    half = send_half(ctx, message, producer_group)
    error = None
    try:
        state = TransactionState.of(local_transaction(message, arg))
    except Exception as e:  # the client logs it and ends the transaction as UNKNOW
        state, error = TransactionState.UNKNOW, f"{type(e).__name__}: {e}"
        log.warning("local transaction of %s raised %s", half.uniq_key, error)
    if state is not TransactionState.UNKNOW:
        end_transaction(ctx, half.uniq_key, state)
    return TransactionSendResult(half, half.uniq_key, state, error)


def pending_halves(ctx: StoreContext, snapshot_view=None) -> tuple[pa.Table, dict[str, int], int]:
    """The half messages still pending (latest copy of each transaction, no op message for it), oldest
    first, with the markers they were read under (check progress, op queue end) and the commitlog end.

    >>> rows, markers, end = pending_halves(store.context)
    >>> rows.num_rows, sorted(markers)
    (0, ['cq/RMQ_SYS_TRANS_OP_HALF_TOPIC/0', 'transaction/check'])
    """
    log_table = ctx.tables.commitlog
    names = [CHECK_MARKER, queue_marker(TRANS_OP_HALF_TOPIC, 0), "commitlog"]
    view = snapshot_view or log_table.view(markers=names)
    low = view.marker(CHECK_MARKER)
    tail = log_table.read_view(
        view,
        Prune(between={"physical_offset": (low, 2**62)}),
        filter=(pc.field("physical_offset") >= low) & pc.field("topic").isin([TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC]),
    )
    offsets = tail.column("physical_offset").to_numpy()
    if len(offsets) > 1 and (np.diff(offsets) < 0).any():  # files are read in order; rows within a file are
        tail = tail.take(pa.array(np.argsort(offsets, kind="stable")))
    is_half = pc.equal(tail.column("topic"), TRANS_HALF_TOPIC)
    halves = keep(tail, is_half)
    ops = tail.filter(pc.invert(is_half))
    done: set[int] = set()
    for body in ops.column("body").to_pylist():  # op messages are few per run: one per ended transaction
        done.update(int(x) for x in body.decode().split(",") if x.strip().isdigit())
    tid = pc.coalesce(
        property_array(halves.column("properties"), MessageConst.TRANSACTION_ID),
        halves.column("uniq_key").combine_chunks(),
    )
    ended = pc.is_in(halves.column("queue_offset"), value_set=pa.array(sorted(done), pa.int64()))
    # the latest copy of each transaction counts (older ones were put back by a check)
    codes = pc.dictionary_encode(tid).indices.to_numpy(zero_copy_only=False)
    n = len(codes)
    _, last_from_end = np.unique(codes[::-1], return_index=True)
    latest = np.zeros(n, dtype=bool)
    latest[n - 1 - last_from_end] = True
    ended_any = (
        pc.is_in(tid, value_set=pc.unique(tid.filter(ended))).to_numpy(zero_copy_only=False)
        if done
        else np.zeros(n, dtype=bool)
    )
    pending = latest & ~ended_any
    rows = keep(halves, pending).append_column("transaction_id", keep(tid, pending))
    markers = {CHECK_MARKER: low, names[1]: view.marker(names[1])}
    return rows, markers, view.marker("commitlog")


def keep(rows: pa.Table | pa.Array, mask) -> pa.Table | pa.Array:
    """``rows.filter(mask)``, without copying when every row is kept.

    >>> keep(pa.table({"a": [1, 2]}), np.array([True, False])).num_rows, keep(pa.array([1]), [True]).to_pylist()
    (1, [1])
    """
    mask = mask if isinstance(mask, (pa.Array, pa.ChunkedArray)) else pa.array(np.asarray(mask, dtype=bool))
    return rows if pc.all(mask).as_py() is not False else rows.filter(mask)


def ended_rows(rows: pa.Table, states: list[TransactionState], born_host: str) -> pa.Table:
    """What ending ``rows`` (pending half messages) with ``states`` writes, in order: each COMMIT's
    real message, then one op message per half message (tag ``d``, body its half queue offset).

    >>> ended_rows(pending_halves(store.context)[0], [], "127.0.0.1:0").num_rows
    0
    """
    commit = np.array([s is TransactionState.COMMIT_MESSAGE for s in states], dtype=bool)
    parts = []
    if commit.any():
        real = keep(rows, commit)
        props = real.column("properties").combine_chunks()
        topic = property_array(props, MessageConst.REAL_TOPIC)
        qid = pc.cast(property_array(props, MessageConst.REAL_QID), pa.int32())
        flags = pc.bit_wise_or(
            pc.bit_wise_and(real.column("sysflag").combine_chunks(), ~SysFlag.TRANSACTION_ROLLBACK_TYPE),
            SysFlag.TRANSACTION_COMMIT_TYPE,
        )
        parts.append(restaged(real, topic, qid, edit_properties(props, _HALF_CLEARED), sysflag=flags))
    if len(states):
        n = rows.num_rows
        offsets = pc.cast(rows.column("queue_offset"), pa.string()).combine_chunks()
        body = pc.cast(pc.binary_join_element_wise(offsets, pa.scalar(","), ""), pa.binary())
        uniq = pc.binary_join_element_wise(rows.column("uniq_key").combine_chunks(), pa.scalar("OP"), "")
        props = pa.MapArray.from_arrays(
            pa.array(np.arange(0, 2 * n + 1, 2), pa.int32()),
            pa.array([MessageConst.TAGS, MessageConst.UNIQ_KEY] * n),
            pc.cast(_interleave(pa.repeat(pa.scalar(REMOVE_TAG), n), uniq), pa.string()),
        )
        base = pa.table(
            {
                "sysflag": pa.repeat(pa.scalar(0, pa.int32()), n),
                "flag": pa.repeat(pa.scalar(0, pa.int32()), n),
                "body_crc": pc.cast(pa.repeat(pa.scalar(0), n), pa.int32()),
                "born_timestamp": pa.repeat(pa.scalar(now_millis(), STAGED_SCHEMA.field("born_timestamp").type), n),
                "born_host": pa.repeat(pa.scalar(born_host), n),
                "reconsume_times": pa.repeat(pa.scalar(0, pa.int32()), n),
                "tags": pa.repeat(pa.scalar(REMOVE_TAG), n),
                "keys": pa.nulls(n, pa.string()),
                "uniq_key": uniq,
            }
        )
        base = base.set_column(base.schema.get_field_index("body_crc"), "body_crc", body_crcs(body))
        parts.append(
            restaged(
                base,
                pa.repeat(pa.scalar(TRANS_OP_HALF_TOPIC), n),
                pa.repeat(pa.scalar(0, pa.int32()), n),
                props,
                body=body,
            )
        )
    if not parts:
        return STAGED_SCHEMA.empty_table()
    return pa.concat_tables(parts)


def _interleave(a: pa.Array, b: pa.Array) -> pa.Array:
    """``a[0], b[0], a[1], b[1], ...``"""
    n = len(a)
    order = np.empty(2 * n, dtype=np.int64)
    order[0::2], order[1::2] = np.arange(n), np.arange(n) + n
    return pa.concat_arrays([a.cast(pa.string()), b.cast(pa.string())]).take(pa.array(order))


def end_transaction(ctx: StoreContext, transaction_id: str, state: TransactionState | str) -> int | None:
    """End a pending transaction (``endTransaction``): COMMIT stores the real message and an op
    message, ROLLBACK the op message; UNKNOW changes nothing (the check-back will ask). Returns the
    commitlog version written, or None.

    A transaction with no pending half message raises :class:`TransactionEndedError` when it was
    ended, :class:`TransactionNotFoundError` when none is known.
    """
    state = TransactionState.of(state)
    if not isinstance(transaction_id, str) or not transaction_id:
        raise TransactionNotFoundError(
            "transaction_id", "must be the transaction id a half message's send returned", value=transaction_id
        )
    if state is TransactionState.UNKNOW:
        return None
    for _ in range(ctx.config.max_commit_attempts):
        rows, markers, _ = pending_halves(ctx)
        mine = rows.filter(pc.equal(rows.column("transaction_id"), transaction_id))
        if not mine.num_rows:
            if _ever_sent(ctx, transaction_id):
                raise TransactionEndedError(
                    "transaction_id", "was already committed or rolled back; nothing was written", value=transaction_id
                )
            raise TransactionNotFoundError(
                "transaction_id", "no half message is pending under this transaction id", value=transaction_id
            )
        out = ended_rows(mine, [state], ctx.producer.born_host)
        try:
            return ctx.commitlog.append_arrow(out, Progress(markers, {}), operation="END_TRANSACTION").version
        except ProgressMovedError:
            continue
    raise ProgressMovedError(None, "transaction checks kept moving first")


def _ever_sent(ctx: StoreContext, transaction_id: str) -> bool:
    """Whether a half message with this transaction id was stored (dispatched: by the index; else the
    commitlog tail)."""

    try:
        MessageQuery(ctx).by_unique_key(TRANS_HALF_TOPIC, transaction_id)
        return True
    except LookupError:
        pass
    low = ctx.tables.index.view(markers=["reput"]).marker("reput")
    tail = ctx.tables.commitlog.read_view(
        ctx.tables.commitlog.view(),
        Prune(between={"physical_offset": (low, 2**62)}),
        columns=["uniq_key"],
        filter=(pc.field("physical_offset") >= low) & (pc.field("topic") == TRANS_HALF_TOPIC),
    )
    return transaction_id in set(tail.column("uniq_key").to_pylist())
