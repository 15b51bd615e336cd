"""RocketMQ 5's protobuf messages and the store's, both ways (the proxy's ``GrpcConverter`` and
``SendMessageActivity.buildMessage``): system properties to message properties and back.

>>> from storelib.storage.commitlog import now_millis
>>> m = pb.Message(topic=pb.Resource(name="Orders"), body=b"hi", user_properties={"a": "1"},
...                system_properties=pb.SystemProperties(tag="TagA", keys=["k1", "k2"], message_id="01ABC",
...                                                      message_group="g1"))
>>> props = message_properties(m)
>>> props["TAGS"], props["KEYS"], props["UNIQ_KEY"], props["__SHARDINGKEY"], props["a"]
('TagA', 'k1 k2', '01ABC', 'g1', '1')
>>> message_type_of(props) == pb.MessageType.FIFO, user_properties(props)
(True, {'a': '1'})
>>> timestamp(1500).nanos, duration(2500).seconds, millis(dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.timezone.utc))
(500000000, 2, 1000)
>>> received = to_proto(store.query_by_id(r.msg_id), receipt_handle="h", delivery_attempt=2)
>>> received.system_properties.message_id == r.uniq_key, received.system_properties.delivery_attempt
(True, 2)
"""

from __future__ import annotations

import datetime as dt
import zlib
from typing import Mapping

from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq.grpc_protocol import definition_pb2 as pb

from storelib.model.message import MessageConst, StoredMessage, SysFlag
from storelib.serve.checks import SYSTEM_PROPERTY_NAMES

__all__ = [
    "pb",
    "message_properties",
    "user_properties",
    "message_type_of",
    "to_proto",
    "timestamp",
    "duration",
    "millis",
    "proto_ms",
    "body_digest",
]

_DELAYED = (
    MessageConst.DELAY,
    MessageConst.TIMER_DELIVER_MS,
    MessageConst.TIMER_DELAY_SEC,
    MessageConst.TIMER_DELAY_MS,
)


def timestamp(ms: int) -> Timestamp:
    """A protobuf timestamp of epoch milliseconds."""
    t = Timestamp()
    t.FromMilliseconds(int(ms))
    return t


def duration(ms: int) -> Duration:
    d = Duration()
    d.FromMilliseconds(int(ms))
    return d


def millis(value: dt.datetime) -> int:
    return int(value.timestamp() * 1000)


def proto_ms(value: Timestamp | Duration) -> int:
    """Milliseconds of a client's timestamp or duration, however far out of protobuf's range (its own
    ``ToMilliseconds`` raises ValueError there: a client's epoch milliseconds put where seconds belong).

    >>> proto_ms(Timestamp(seconds=1_700_000_000_000)), proto_ms(Duration(seconds=2, nanos=500_000_000))
    (1700000000000000, 2500)
    """
    return value.seconds * 1000 + value.nanos // 1_000_000


def body_digest(body: bytes) -> pb.Digest:
    """The digest the client checks: CRC32 as 8 upper-case hex characters.

    >>> body_digest(b"hello").checksum
    '3610A686'
    """
    return pb.Digest(type=pb.DigestType.CRC32, checksum=format(zlib.crc32(body) & 0xFFFFFFFF, "08X"))


def message_properties(m: pb.Message) -> dict[str, str]:
    """The stored properties of a message a producer sends: its user properties, then TAGS, KEYS,
    UNIQ_KEY (the client's message id), the message group, born host and trace context."""
    sp = m.system_properties
    props = dict(m.user_properties)
    if sp.tag:
        props[MessageConst.TAGS] = sp.tag
    if sp.keys:
        props[MessageConst.KEYS] = MessageConst.KEY_SEPARATOR.join(sp.keys)
    props[MessageConst.UNIQ_KEY] = sp.message_id
    if sp.message_group:
        props[MessageConst.SHARDING_KEY] = sp.message_group
    if sp.born_host:
        props[MessageConst.BORN_HOST] = sp.born_host
    if sp.trace_context:
        props[MessageConst.TRACE_CONTEXT] = sp.trace_context
    if sp.HasField("orphaned_transaction_recovery_duration"):
        props[MessageConst.CHECK_IMMUNITY_TIME_IN_SECONDS] = str(sp.orphaned_transaction_recovery_duration.seconds)
    return props


def user_properties(props: Mapping[str, str]) -> dict[str, str]:
    """The properties a consumer sees as user properties: none of the system's."""
    return {k: v for k, v in props.items() if k not in SYSTEM_PROPERTY_NAMES}


def message_type_of(props: Mapping[str, str]) -> int:
    """``GrpcConverter.buildMessageType``: TRANSACTION, DELAY, FIFO or NORMAL, from the properties."""
    if props.get(MessageConst.TRAN_MSG) == "true":
        return pb.MessageType.TRANSACTION
    if any(k in props for k in _DELAYED):
        return pb.MessageType.DELAY
    if props.get(MessageConst.SHARDING_KEY):
        return pb.MessageType.FIFO
    return pb.MessageType.NORMAL


def to_proto(
    message: StoredMessage,
    *,
    namespace: str = "",
    topic: str | None = None,
    receipt_handle: str | None = None,
    delivery_attempt: int | None = None,
) -> pb.Message:
    """A stored message as a consumer receives it (``GrpcConverter.buildMessage``), under ``topic``
    (default its own), with its receipt handle and delivery attempt when received by pop."""
    props = message.properties
    sp = pb.SystemProperties(
        message_id=props.get(MessageConst.UNIQ_KEY) or message.msg_id,
        body_digest=body_digest(bytes(message.body)),
        body_encoding=pb.Encoding.GZIP if message.sysflag & SysFlag.COMPRESSED else pb.Encoding.IDENTITY,
        message_type=message_type_of(props),
        born_timestamp=timestamp(millis(message.born_timestamp)),
        born_host=props.get(MessageConst.BORN_HOST) or message.born_host,
        store_timestamp=timestamp(millis(message.store_timestamp)),
        store_host=message.store_host,
        queue_id=message.queue_id,
        queue_offset=message.queue_offset,
        delivery_attempt=delivery_attempt if delivery_attempt is not None else message.reconsume_times + 1,
    )
    if props.get(MessageConst.TAGS):
        sp.tag = props[MessageConst.TAGS]
    if props.get(MessageConst.KEYS):
        sp.keys.extend(k for k in props[MessageConst.KEYS].split(MessageConst.KEY_SEPARATOR) if k)
    if props.get(MessageConst.SHARDING_KEY):
        sp.message_group = props[MessageConst.SHARDING_KEY]
    if props.get(MessageConst.TRACE_CONTEXT):
        sp.trace_context = props[MessageConst.TRACE_CONTEXT]
    deliver = props.get(MessageConst.TIMER_DELIVER_MS, "")
    if deliver.isdigit():
        sp.delivery_timestamp.CopyFrom(timestamp(int(deliver)))
    if receipt_handle is not None:
        sp.receipt_handle = receipt_handle
    origin_topic, origin_id = props.get(MessageConst.DLQ_ORIGIN_TOPIC), props.get(MessageConst.DLQ_ORIGIN_MESSAGE_ID)
    if origin_topic and origin_id:
        sp.dead_letter_queue.CopyFrom(pb.DeadLetterQueue(topic=origin_topic, message_id=origin_id))
    return pb.Message(
        topic=pb.Resource(name=topic or message.topic, resource_namespace=namespace),
        user_properties=user_properties(props),
        system_properties=sp,
        body=bytes(message.body),
    )
