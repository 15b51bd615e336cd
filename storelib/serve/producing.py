"""What producers ask of the endpoint: SendMessage (normal, FIFO, delayed, transactional, batches),
EndTransaction, RecallMessage, and the check-back of orphaned transactions over their Telemetry streams.

Sends of every client share commitlog commits (:class:`~storelib.send.group_commit.GroupCommitProducer`);
the client's message id is the stored message's UNIQ_KEY, so look-ups by it work.

>>> from storelib.serve.convert import pb
>>> recall_handle("Orders", "broker-a", 1700000000000, "01AB", "0A00") == recall_handle("Orders", "broker-a",
...     1700000000000, "01AB", "0A00")
True
>>> read_recall_handle(recall_handle("Orders", "broker-a", 1700000000000, "01AB", "0A00"))
('Orders', '01AB', '0A00')
"""

from __future__ import annotations

import base64
import itertools
import logging
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING, Sequence

import pyarrow as pa
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from storelib.encoding.hashcode import consistent_hash, java_string_hash
from storelib.model.errors import RequestError, TopicPermissionError, TransactionEndedError
from storelib.model.message import MessageConst, SendResult, StoredMessage
from storelib.model.timestamps import now_ms
from storelib.model.topic import PERM_WRITE, TopicConfig
from storelib.schedule.check import ask_registered
from storelib.schedule.deliver import recall
from storelib.schedule.transaction import TransactionState, as_half, end_transaction
from storelib.send.schedule import plan_schedule
from storelib.serve.checks import (
    check_delivery_time,
    check_keys,
    check_message_group,
    check_tag,
    check_topic,
    check_user_properties,
)
from storelib.serve.clients import Sessions
from storelib.serve.convert import message_properties, proto_ms, to_proto
from storelib.serve.status import ok, status, status_of
from storelib.storage.commitlog import EncodedMessage, now_millis

if TYPE_CHECKING:
    from storelib.context import StoreContext
    from storelib.send.group_commit import GroupCommitProducer

__all__ = ["Producing", "recall_handle", "read_recall_handle"]

log = logging.getLogger("storelib.serve")

#: How old the endpoint's view of the topics may be when a send checks its topic (seconds).
TOPICS_LOOK_S = 1.0


def recall_handle(topic: str, broker: str, deliver_ms: int, uniq_key: str, msg_id: str) -> str:
    """The handle a delayed message's sender may recall it with (RocketMQ's ``RecallMessageHandle.HandleV1``,
    with the store's message id added): base64url of its space-separated fields."""
    return base64.urlsafe_b64encode(f"v1 {topic} {broker} {deliver_ms} {uniq_key} {msg_id}".encode()).decode()


def read_recall_handle(handle: str) -> tuple[str, str, str]:
    """``(topic, uniq_key, msg_id)`` of a recall handle, or :class:`RequestError`."""
    try:
        parts = base64.urlsafe_b64decode(handle.encode()).decode().split(" ")
    except (ValueError, UnicodeDecodeError):
        parts = []
    if len(parts) != 6 or parts[0] != "v1":
        raise RequestError("recall_handle", "recall handle is invalid", value=handle, code="INTERNAL_SERVER_ERROR")
    return parts[1], parts[4], parts[5]


class Producing:
    """SendMessage, EndTransaction and RecallMessage over one store, and the check-back asker.

    >>> p = Producing(store.context, Sessions(), "storelib")
    >>> m = pb.Message(topic=pb.Resource(name="TopicTest"), body=b"x",
    ...                system_properties=pb.SystemProperties(message_id="01AB", message_type=pb.MessageType.NORMAL))
    >>> sent = p.send(spb.SendMessageRequest(messages=[m]), "127.0.0.1")
    >>> pb.Code.Name(sent.status.code), sent.entries[0].message_id
    ('OK', '01AB')
    >>> end = p.end(spb.EndTransactionRequest(topic=pb.Resource(name="TopicTest"), transaction_id=""))
    >>> pb.Code.Name(end.status.code), pb.Code.Name(p.recall(spb.RecallMessageRequest(
    ...     topic=pb.Resource(name="TopicTest"), recall_handle="x")).status.code)
    ('INVALID_TRANSACTION_ID', 'INTERNAL_SERVER_ERROR')
    >>> from storelib.schedule.transaction import pending_halves
    >>> p.ask_producers(store.context, pending_halves(store.context)[0]); p.close()
    []
    """

    def __init__(self, ctx: "StoreContext", sessions: Sessions, broker_name: str):
        self.ctx = ctx
        self.sessions = sessions
        self.broker_name = broker_name
        self.sends: "GroupCommitProducer" = ctx.producer.group_commit(ctx.commitlog, ctx.topics.all, encoded=True)
        self._rotation = itertools.count()
        self._topics: dict[str, TopicConfig] = {}
        self._topics_read = 0.0

    def close(self) -> None:
        self.sends.close()

    def _topic(self, topic: str) -> TopicConfig:
        """The topic's configuration as of at most :data:`TOPICS_LOOK_S` ago (a broker keeps its topic
        table in memory), read again at once for a topic not seen yet."""
        now = time.monotonic()
        if now - self._topics_read > TOPICS_LOOK_S or topic not in self._topics:
            self._topics, self._topics_read = self.ctx.topics.all(), now
        found = self._topics.get(topic)
        return found if found is not None else self.ctx.topics.get(topic)  # raises TopicNotFoundError

    # ---- SendMessage ---------------------------------------------------------------------------
    def send(self, request: spb.SendMessageRequest, peer_host: str) -> spb.SendMessageResponse:
        try:
            encoded = self._encode(request.messages, peer_host)
            futures: list[Future[SendResult]] = [self.sends.send_async(e) for e in encoded]
        except Exception as e:  # noqa: BLE001  (answered as the proxy answers it)
            return spb.SendMessageResponse(status=status_of(e))
        entries = []
        for m, sent, future in zip(request.messages, encoded, futures):
            try:
                result = future.result()
            except Exception as err:  # noqa: BLE001
                entries.append(spb.SendResultEntry(status=status_of(err)))
                continue
            entry = spb.SendResultEntry(status=ok(), message_id=result.uniq_key, offset=result.queue_offset)
            if m.system_properties.message_type == pb.MessageType.TRANSACTION:
                entry.transaction_id = result.uniq_key
            deliver = sent.properties.get(MessageConst.TIMER_DELIVER_MS)
            if deliver:
                entry.recall_handle = recall_handle(
                    m.topic.name, self.broker_name, int(deliver), result.uniq_key, result.msg_id
                )
            entries.append(entry)
        codes = {x.status.code for x in entries}
        top = status(pb.Code.Name(codes.pop())) if len(codes) == 1 else status("MULTIPLE_RESULTS")
        return spb.SendMessageResponse(status=top, entries=entries)

    def _encode(self, messages: Sequence[pb.Message], peer_host: str) -> list[EncodedMessage]:
        """Every message checked as the proxy does, in its order, then encoded (none is sent if one fails)."""
        if not messages:
            raise RequestError("messages", "no message to send", code="MESSAGE_CORRUPTED")
        topic = messages[0].topic.name
        check_topic(topic)
        now = now_ms()
        born_now = now_millis()
        config = self._topic(topic)
        if not config.perm & PERM_WRITE:
            raise TopicPermissionError("topic", "no writable queue", value=topic)
        out = []
        for m in messages:
            sp = m.system_properties
            if m.topic.name != topic:
                raise RequestError(
                    "topic", "topic in message is not same", value=m.topic.name, code="MESSAGE_CORRUPTED"
                )
            if not m.body:
                raise RequestError("body", "message body cannot be empty", code="MESSAGE_BODY_EMPTY")
            if len(m.body) > self.ctx.config.max_message_size:
                raise RequestError(
                    "body",
                    f"message body cannot exceed the max {self.ctx.config.max_message_size}",
                    value=len(m.body),
                    code="MESSAGE_BODY_TOO_LARGE",
                )
            check_user_properties(m.user_properties, sp.tag, sp.keys)
            check_tag(sp.tag)
            check_keys(sp.keys)
            if not sp.message_id.strip():
                raise RequestError("message_id", "message id cannot be empty", code="ILLEGAL_MESSAGE_ID")
            transactional = sp.message_type == pb.MessageType.TRANSACTION
            if transactional and sp.orphaned_transaction_recovery_duration.seconds > 3600:
                raise RequestError(
                    "orphaned_transaction_recovery_duration",
                    "the max transaction recovery time of message is too large, max is 3600",
                    code="BAD_REQUEST",
                )
            deliver = proto_ms(sp.delivery_timestamp) if sp.HasField("delivery_timestamp") else None
            if deliver is not None:
                check_delivery_time(deliver, now)
            check_message_group(sp.message_group)
            props = message_properties(m)
            if sp.message_group:
                queue_id = consistent_hash(java_string_hash(sp.message_group), config.write_queue_nums)
            else:
                queue_id = next(self._rotation) % config.write_queue_nums
            born = born_now
            if sp.HasField("born_timestamp"):
                try:
                    born = sp.born_timestamp.ToDatetime().replace(tzinfo=born_now.tzinfo)
                except (ValueError, OverflowError):
                    raise RequestError(
                        "born_timestamp", "born timestamp is not valid", value=sp.born_timestamp.seconds
                    ) from None
            target, queue_id, props = plan_schedule(
                topic,
                queue_id,
                props,
                delay_level=0,
                deliver_ms=deliver if deliver is not None and deliver > now else None,
                now=now,
                levels=len(self.ctx.config.delay_levels_ms),
                max_delay_ms=self.ctx.config.timer_max_delay_ms,
            )
            encoded = EncodedMessage(target, queue_id, 0, 0, bytes(m.body), props, born, f"{peer_host}:0")
            out.append(as_half(encoded, topic) if transactional else encoded)
        return out

    # ---- transactions --------------------------------------------------------------------------
    def end(self, request: spb.EndTransactionRequest) -> spb.EndTransactionResponse:
        try:
            check_topic(request.topic.name)
            if not request.transaction_id.strip():
                raise RequestError("transaction_id", "transaction id cannot be empty", code="INVALID_TRANSACTION_ID")
            resolution = {
                pb.TransactionResolution.COMMIT: TransactionState.COMMIT_MESSAGE,
                pb.TransactionResolution.ROLLBACK: TransactionState.ROLLBACK_MESSAGE,
            }.get(request.resolution)
            if resolution is not None:  # UNSPECIFIED: unknown yet, checked back later
                try:
                    end_transaction(self.ctx, request.transaction_id, resolution)
                except TransactionEndedError:
                    pass  # the broker ignores a second end
        except Exception as e:  # noqa: BLE001
            return spb.EndTransactionResponse(status=status_of(e))
        return spb.EndTransactionResponse(status=ok())

    def ask_producers(self, ctx: "StoreContext", rows: pa.Table) -> list[tuple[TransactionState, str | None]]:
        """Check-back: each due half message goes to a producer publishing its topic, on its Telemetry
        stream (its answer comes as an EndTransaction); halves no client publishes are asked of the
        store's registered checkers."""
        messages = StoredMessage.from_rows(rows.drop_columns(["transaction_id"]))
        tids = rows.column("transaction_id").to_pylist()
        answers: list[tuple[TransactionState, str | None]] = [(TransactionState.UNKNOW, None)] * len(messages)
        rest = []
        for i, (m, tid) in enumerate(zip(messages, tids)):
            topic = m.properties.get(MessageConst.REAL_TOPIC, m.topic)
            command = spb.TelemetryCommand(
                recover_orphaned_transaction_command=spb.RecoverOrphanedTransactionCommand(
                    message=to_proto(m, topic=topic), transaction_id=tid
                )
            )
            if not any(s.push(command) for s in self.sessions.producers_of(topic)[:1]):
                rest.append(i)
        if rest:
            for i, answer in zip(rest, ask_registered(ctx, rows.take(pa.array(rest)))):
                answers[i] = answer
        return answers

    # ---- RecallMessage -------------------------------------------------------------------------
    def recall(self, request: spb.RecallMessageRequest) -> spb.RecallMessageResponse:
        try:
            check_topic(request.topic.name)
            topic, uniq_key, msg_id = read_recall_handle(request.recall_handle)
            if topic != request.topic.name:
                raise RequestError("recall_handle", "recall failed, topic not match", code="INTERNAL_SERVER_ERROR")
            recall(self.ctx, msg_id)
        except Exception as e:  # noqa: BLE001
            return spb.RecallMessageResponse(status=status_of(e))
        return spb.RecallMessageResponse(status=ok(), message_id=uniq_key)
