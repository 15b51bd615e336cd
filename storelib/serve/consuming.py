"""What consumers ask of the endpoint (RocketMQ 5's pop consumption): ReceiveMessage with long polling,
AckMessage, ChangeInvisibleDuration, ForwardMessageToDeadLetterQueue and QueryAssignment, over the store's
:class:`~storelib.consume.pop.PopService`.

A receipt handle is RocketMQ's (:class:`~storelib.encoding.receipt_handle.ReceiptHandle`): the queue,
offset and receive time of the claim it names, so any endpoint over the store can ack it.

>>> from storelib.storage.pop_log import Checkpoint
>>> ck = Checkpoint("G", "T", 2, 15, 900, 1, pop_time=1000, invisible_until=31000)
>>> handle_of(ck, "broker-a")
'15 1000 30000 0 0 broker-a 2 15 900'
>>> claim_of("G", "T", handle_of(ck, "broker-a")).key == ck.key
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from storelib.consume.pop import PopService
from storelib.encoding.receipt_handle import NORMAL_TOPIC, ReceiptHandle
from storelib.model.errors import ReceiptHandleError, RequestError
from storelib.model.timestamps import now_ms
from storelib.serve.checks import MIN_INVISIBLE_MS_RECEIVE, check_group, check_invisible_time, check_topic
from storelib.serve.clients import LONG_POLLING_MS, RECEIVE_BATCH_SIZE, Sessions, selector_of
from storelib.serve.convert import proto_ms, timestamp, to_proto
from storelib.serve.status import ok, status, status_of
from storelib.storage.pop_log import Checkpoint

if TYPE_CHECKING:
    from storelib.context import StoreContext

__all__ = ["Consuming", "handle_of", "claim_of"]

#: A receive that auto-renews (a PushConsumer's) is invisible this long (``defaultInvisibleTimeMills``).
DEFAULT_INVISIBLE_MS = 60_000
#: Shortest and longest hold of a receive that finds nothing (``grpcClientConsumerMin/MaxLongPollingTimeoutMillis``).
MIN_POLLING_MS, MAX_POLLING_MS = 5_000, LONG_POLLING_MS


def handle_of(ck: Checkpoint, broker_name: str) -> str:
    """The receipt handle of a claim."""
    return ReceiptHandle(
        ck.queue_offset,
        ck.pop_time,
        ck.invisible_until - ck.pop_time,
        0,
        NORMAL_TOPIC,
        broker_name,
        ck.queue_id,
        ck.queue_offset,
        ck.commitlog_offset,
    ).encode()


def claim_of(group: str, topic: str, handle: str, now: int | None = None) -> Checkpoint:
    """The claim a receipt handle names; :class:`ReceiptHandleError` when it is no handle, or expired at ``now``."""
    h = ReceiptHandle.decode(handle)
    if now is not None and h.is_expired(now):
        raise ReceiptHandleError("receipt_handle", "receipt handle is expired", value=handle)
    return Checkpoint(group, topic, h.queue_id, h.offset, h.commit_log_offset, 0, h.retrieve_time, h.next_visible_time)


class Consuming:
    """The consumer RPCs over one store's pop service.

    >>> from rocketmq.grpc_protocol import service_pb2 as spb
    >>> c = Consuming(store.context, Sessions(), pb.Broker(name="storelib"))
    >>> a = c.assignment(spb.QueryAssignmentRequest(topic=pb.Resource(name="TopicTest"), group=pb.Resource(name="G")))
    >>> [q.message_queue.id for q in a.assignments]
    [-1]
    >>> ack = c.ack(spb.AckMessageRequest(topic=pb.Resource(name="TopicTest"), group=pb.Resource(name="G"),
    ...     entries=[spb.AckMessageEntry(message_id="x", receipt_handle="bad")]))
    >>> pb.Code.Name(ack.status.code), ack.entries[0].status.message
    ('INVALID_RECEIPT_HANDLE', "receipt_handle: is not a receipt handle: 1 fields, 8 or 9 expected (got 'bad')")
    """

    def __init__(
        self, ctx: "StoreContext", sessions: Sessions, broker: pb.Broker, min_polling_ms: int = MIN_POLLING_MS
    ):
        self.ctx = ctx
        self.sessions = sessions
        self.broker = broker
        self.min_polling_ms = min_polling_ms
        self.pop = PopService(ctx)

    # ---- ReceiveMessage ------------------------------------------------------------------------
    def receive(
        self,
        request: spb.ReceiveMessageRequest,
        client_id: str,
        time_left_s: float | None,
        waiting: Callable[[], bool] | None = None,
    ) -> Iterator[spb.ReceiveMessageResponse]:
        try:
            found = self._receive(request, client_id, time_left_s, waiting)
        except Exception as e:  # noqa: BLE001
            yield spb.ReceiveMessageResponse(status=status_of(e))
        else:
            if found:
                yield spb.ReceiveMessageResponse(status=ok())
                ns = request.message_queue.topic.resource_namespace
                for got in found:
                    yield spb.ReceiveMessageResponse(
                        message=to_proto(
                            got.message,
                            namespace=ns,
                            receipt_handle=handle_of(got.checkpoint, self.broker.name),
                            delivery_attempt=got.delivery_attempt,
                        )
                    )
            else:
                yield spb.ReceiveMessageResponse(status=status("MESSAGE_NOT_FOUND", "no new message"))
        yield spb.ReceiveMessageResponse(delivery_timestamp=timestamp(now_ms()))

    def _receive(
        self,
        request: spb.ReceiveMessageRequest,
        client_id: str,
        time_left_s: float | None,
        waiting: Callable[[], bool] | None = None,
    ) -> list:
        group, topic = request.group.name, request.message_queue.topic.name
        polling = proto_ms(request.long_polling_timeout) if request.HasField("long_polling_timeout") else 0
        polling = min(max(polling or MAX_POLLING_MS, self.min_polling_ms), MAX_POLLING_MS)
        if time_left_s is not None and polling > time_left_s * 1000:
            if time_left_s * 1000 < self.min_polling_ms:
                raise RequestError(
                    "long_polling_timeout",
                    "The deadline time remaining is not enough for polling, please check network condition",
                    code="ILLEGAL_POLLING_TIME",
                )
            polling = int(time_left_s * 1000) - 200  # answer before the client gives up
        check_topic(topic)
        check_group(group)
        if request.auto_renew:
            invisible = DEFAULT_INVISIBLE_MS
        else:
            invisible = proto_ms(request.invisible_duration)
            check_invisible_time(invisible, MIN_INVISIBLE_MS_RECEIVE)
        try:
            selector = selector_of(request.filter_expression)
        except Exception as e:  # noqa: BLE001
            raise RequestError("filter_expression", str(e), code="ILLEGAL_FILTER_EXPRESSION") from None
        config = self.ctx.groups.find(group)
        session = self.sessions.get(client_id)
        settings = session.settings if session is not None else None
        fifo = settings.subscription.fifo if settings is not None else config.consume_message_orderly
        attempts = settings.backoff_policy.max_attempts if settings is not None else 0
        return self.pop.receive(
            group,
            topic,
            max(1, min(request.batch_size or RECEIVE_BATCH_SIZE, RECEIVE_BATCH_SIZE)),
            invisible,
            selector,
            fifo=fifo,
            wait_ms=polling,
            max_attempts=attempts or config.retry_max_times + 1,
            waiting=waiting,
        )

    # ---- AckMessage ----------------------------------------------------------------------------
    def ack(self, request: spb.AckMessageRequest) -> spb.AckMessageResponse:
        try:
            check_topic(request.topic.name)
            check_group(request.group.name)
        except Exception as e:  # noqa: BLE001
            return spb.AckMessageResponse(status=status_of(e))
        group, topic, now = request.group.name, request.topic.name, now_ms()
        entries: list[spb.AckMessageResultEntry | None] = []
        claims: list[Checkpoint] = []
        at: list[int] = []
        for i, entry in enumerate(request.entries):
            try:
                claims.append(claim_of(group, topic, entry.receipt_handle, now))
                at.append(i)
                entries.append(None)
            except Exception as e:  # noqa: BLE001
                entries.append(self._ack_entry(entry, status_of(e)))
        try:
            acked = self.pop.ack(group, claims) if claims else []
        except Exception as e:  # noqa: BLE001
            return spb.AckMessageResponse(status=status_of(e))
        for i, live in zip(at, acked):
            entry = request.entries[i]
            entries[i] = self._ack_entry(
                entry, ok() if live else status("INVALID_RECEIPT_HANDLE", "receipt handle is expired")
            )
        done = [e for e in entries if e is not None]
        if not done:
            return spb.AckMessageResponse(status=status("INTERNAL_SERVER_ERROR", "ack message result is empty"))
        codes = {e.status.code for e in done}
        top = status(pb.Code.Name(codes.pop())) if len(codes) == 1 else status("MULTIPLE_RESULTS")
        return spb.AckMessageResponse(status=top, entries=done)

    @staticmethod
    def _ack_entry(entry: spb.AckMessageEntry, s: pb.Status) -> spb.AckMessageResultEntry:
        return spb.AckMessageResultEntry(message_id=entry.message_id, receipt_handle=entry.receipt_handle, status=s)

    # ---- ChangeInvisibleDuration ---------------------------------------------------------------
    def change_invisible(self, request: spb.ChangeInvisibleDurationRequest) -> spb.ChangeInvisibleDurationResponse:
        try:
            group, topic = request.group.name, request.topic.name
            check_topic(topic)
            check_group(group)
            invisible = proto_ms(request.invisible_duration)
            check_invisible_time(invisible)
            renewed = self.pop.change_invisible(
                group, claim_of(group, topic, request.receipt_handle, now_ms()), invisible
            )
            if renewed is None:
                raise ReceiptHandleError("receipt_handle", "receipt handle is expired", value=request.receipt_handle)
        except Exception as e:  # noqa: BLE001
            return spb.ChangeInvisibleDurationResponse(status=status_of(e))
        return spb.ChangeInvisibleDurationResponse(status=ok(), receipt_handle=handle_of(renewed, self.broker.name))

    # ---- ForwardMessageToDeadLetterQueue -------------------------------------------------------
    def to_dead_letter(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        try:
            group, topic = request.group.name, request.topic.name
            check_topic(topic)
            check_group(group)
            claim = claim_of(group, topic, request.receipt_handle)
            if claim.commitlog_offset < 0:
                raise ReceiptHandleError("receipt_handle", "commit log offset is empty", value=request.receipt_handle)
            if not self.pop.to_dead_letter(group, claim):
                raise ReceiptHandleError("receipt_handle", "receipt handle is expired", value=request.receipt_handle)
        except Exception as e:  # noqa: BLE001
            return spb.ForwardMessageToDeadLetterQueueResponse(status=status_of(e))
        return spb.ForwardMessageToDeadLetterQueueResponse(status=ok())

    # ---- QueryAssignment -----------------------------------------------------------------------
    def assignment(self, request: spb.QueryAssignmentRequest) -> spb.QueryAssignmentResponse:
        try:
            check_topic(request.topic.name)
            check_group(request.group.name)
            topic = self.ctx.topics.get(request.topic.name)
            if not topic.readable or topic.read_queue_nums <= 0:
                return spb.QueryAssignmentResponse(status=status("FORBIDDEN", "no readable queue"))
            perm = pb.Permission.READ_WRITE if topic.writable else pb.Permission.READ
            ids = (
                range(topic.read_queue_nums)
                if self.ctx.groups.find(request.group.name).consume_message_orderly
                else [-1]
            )
        except Exception as e:  # noqa: BLE001
            return spb.QueryAssignmentResponse(status=status_of(e))
        return spb.QueryAssignmentResponse(
            status=ok(),
            assignments=[
                pb.Assignment(
                    message_queue=pb.MessageQueue(topic=request.topic, id=i, permission=perm, broker=self.broker)
                )
                for i in ids
            ],
        )
