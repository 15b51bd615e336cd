"""The message model: RocketMQ's property names, system flags, ``Message``, ``SendResult`` and
``StoredMessage`` (``MessageExt``).

>>> m = Message("TopicTest", body=b"hi", tags="TagA", keys=["order-1", "order-2"], properties={"a": "5"})
>>> m.system_properties()
{'TAGS': 'TagA', 'KEYS': 'order-1 order-2'}
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import pyarrow as pa

from storelib.model.timestamps import utc_datetimes

__all__ = [
    "Message",
    "SendResult",
    "StoredMessage",
    "MESSAGE_COLUMNS",
    "RESERVED_PROPERTIES",
    "MessageConst",
    "SysFlag",
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
]


class MessageConst:
    """RocketMQ's ``MessageConst`` property names."""

    KEYS = "KEYS"
    TAGS = "TAGS"
    WAIT = "WAIT"
    DELAY = "DELAY"
    RETRY_TOPIC = "RETRY_TOPIC"
    REAL_TOPIC = "REAL_TOPIC"
    REAL_QID = "REAL_QID"
    TRAN_MSG = "TRAN_MSG"
    PGROUP = "PGROUP"
    MIN_OFFSET = "MIN_OFFSET"
    MAX_OFFSET = "MAX_OFFSET"
    ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
    RECONSUME_TIME = "RECONSUME_TIME"
    UNIQ_KEY = "UNIQ_KEY"
    MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
    TRAN_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
    TRANSACTION_ID = "__transactionId__"
    TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
    CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
    DLQ_ORIGIN_TOPIC = "DLQ_ORIGIN_TOPIC"
    DLQ_ORIGIN_MESSAGE_ID = "DLQ_ORIGIN_MESSAGE_ID"
    TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
    #: RocketMQ 5's message group (``PROPERTY_SHARDING_KEY``), the client's born host and trace context.
    SHARDING_KEY = "__SHARDINGKEY"
    BORN_HOST = "__BORNHOST"
    TRACE_CONTEXT = "TRACE_CONTEXT"
    TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
    TIMER_DELAY_MS = "TIMER_DELAY_MS"
    TIMER_OUT_MS = "TIMER_OUT_MS"
    TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
    TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
    TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"
    KEY_SEPARATOR = " "


#: ``MessageConst.STRING_HASH_SET``: names ``putUserProperty`` refuses.
RESERVED_PROPERTIES = frozenset(
    {
        "TRACE_ON",
        "MSG_REGION",
        "KEYS",
        "TAGS",
        "WAIT",
        "DELAY",
        "RETRY_TOPIC",
        "REAL_TOPIC",
        "REAL_QID",
        "TRAN_MSG",
        "PGROUP",
        "MIN_OFFSET",
        "MAX_OFFSET",
        "BUYER_ID",
        "ORIGIN_MESSAGE_ID",
        "TRANSFER_FLAG",
        "CORRECTION_FLAG",
        "MQ2_FLAG",
        "RECONSUME_TIME",
        "UNIQ_KEY",
        "MAX_RECONSUME_TIMES",
        "CONSUME_START_TIME",
        "POP_CK",
        "POP_CK_OFFSET",
        "1ST_POP_TIME",
        "TRAN_PREPARED_QUEUE_OFFSET",
        "DUP_INFO",
        "EXTEND_UNIQ_INFO",
        "INSTANCE_ID",
        "CORRELATION_ID",
        "REPLY_TO_CLIENT",
        "TTL",
        "ARRIVE_TIME",
        "PUSH_REPLY_TIME",
        "CLUSTER",
        "MSG_TYPE",
        "INNER_MULTI_QUEUE_OFFSET",
        "TIMER_DELAY_MS",
        "TIMER_DELAY_SEC",
        "TIMER_DELIVER_MS",
        "TIMER_ENQUEUE_MS",
        "TIMER_DEQUEUE_MS",
        "TIMER_ROLL_TIMES",
        "TIMER_OUT_MS",
        "TIMER_DEL_UNIQKEY",
        "TIMER_DELAY_LEVEL",
        "__BORNHOST",
        "BORN_TIMESTAMP",
        "DLQ_ORIGIN_TOPIC",
        "DLQ_ORIGIN_MESSAGE_ID",
        "__CRC32#",
    }
)

#: MessageDecoder's separators of the encoded properties string: ``name\x01value\x02`` per property
#: (see :mod:`storelib.encoding.properties`).
NAME_VALUE_SEPARATOR = "\u0001"
PROPERTY_SEPARATOR = "\u0002"

#: A property name or value may not hold MessageDecoder's separators: the broker would split it there.
SEPARATORS_PATTERN = f"[{NAME_VALUE_SEPARATOR}{PROPERTY_SEPARATOR}]"
#: Tags and keys are properties too (TAGS, KEYS).
SEPARATORS_REASON_TAGS = "can not hold \\u0001 or \\u0002, the separators of RocketMQ's encoded properties"
SEPARATORS_REASON = f"a property name or value {SEPARATORS_REASON_TAGS}"
#: What Java's ``String.trim()`` strips: every char up to U+0020. RocketMQ's ``putUserProperty``
#: refuses a name or value that is empty once trimmed, so "\t" and "\x00" are blank; "\u00a0" is not.
JAVA_TRIMMED = "".join(map(chr, range(0x21)))
#: A blank entry (as above) of names or values joined by NAME_VALUE_SEPARATOR (``\x01``), as RE2 sees it.
BLANK_ENTRY_PATTERN = r"(?:^|\x01)[\x00\x02-\x20]*(?:\x01|$)"


def is_blank(text: str) -> bool:
    """Blank as ``putUserProperty`` sees it: empty after Java's ``trim()``.

    >>> is_blank(" \t"), is_blank("\u00a0"), is_blank("a ")
    (True, False, False)
    """
    return not text.strip(JAVA_TRIMMED)


#: How a DataFrame send carries property names (and values) from Spark to the executors' Python: joined by it.
PROPERTY_JOIN = NAME_VALUE_SEPARATOR


class SysFlag:
    """RocketMQ's ``MessageSysFlag`` bits.

    >>> commit = SysFlag.TRANSACTION_COMMIT_TYPE
    >>> SysFlag.transaction_value(commit | SysFlag.BORNHOST_V6) == commit
    True
    """

    COMPRESSED = 0x1
    MULTI_TAGS = 0x1 << 1
    TRANSACTION_NOT_TYPE = 0
    TRANSACTION_PREPARED_TYPE = 0x1 << 2
    TRANSACTION_COMMIT_TYPE = 0x2 << 2
    TRANSACTION_ROLLBACK_TYPE = 0x3 << 2
    BORNHOST_V6 = 0x1 << 4
    STOREHOSTADDRESS_V6 = 0x1 << 5
    #: Transaction types that get a consume queue unit (CommitLogDispatcherBuildConsumeQueue).
    QUEUED_TRANSACTION_TYPES = (TRANSACTION_NOT_TYPE, TRANSACTION_COMMIT_TYPE)

    @staticmethod
    def transaction_value(sysflag: int) -> int:
        return sysflag & SysFlag.TRANSACTION_ROLLBACK_TYPE


@dataclass
class Message:
    """A message to send, as RocketMQ's ``org.apache.rocketmq.common.message.Message``.

    ``keys`` is a list of keys or one space-separated string; ``properties`` are user properties
    (``putUserProperty``); ``queue_id`` picks a queue, else the producer rotates over the topic's queues.
    ``delay_level`` (``setDelayTimeLevel``: 0 none, capped at the last level) or ``deliver_time_ms``
    (5.x ``setDeliverTimeMs``, epoch ms) delay the message (see :mod:`storelib.send.schedule`).

    >>> Message("T", keys=["a", "b"]).keys_string
    'a b'
    >>> Message("T", delay_level=3).delay_level
    3
    """

    topic: str
    body: bytes = b""
    tags: str | None = None
    keys: Sequence[str] | str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    flag: int = 0
    queue_id: int | None = None
    delay_level: int = 0
    deliver_time_ms: int | None = None

    @property
    def keys_string(self) -> str | None:
        if self.keys is None:
            return None
        return self.keys if isinstance(self.keys, str) else MessageConst.KEY_SEPARATOR.join(self.keys)

    def system_properties(self) -> dict[str, str]:
        """TAGS and KEYS as RocketMQ's ``Message`` puts them (only when set)."""
        out = {}
        if self.tags:
            out[MessageConst.TAGS] = self.tags
        keys = self.keys_string
        if keys:
            out[MessageConst.KEYS] = keys
        return out


@dataclass(frozen=True)
class SendResult:
    """What a send returns. ``msg_id`` is the store's id (RocketMQ's ``offsetMsgId``: store host,
    port and commitlog offset); ``uniq_key`` is the producer-side id (RocketMQ's ``SendResult.msgId``).

    >>> r.offset_msg_id == r.msg_id, len(r.uniq_key)
    (True, 32)
    """

    send_status: str
    msg_id: str
    uniq_key: str
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int

    @property
    def offset_msg_id(self) -> str:
        return self.msg_id

    @classmethod
    def of_row(cls, row: Mapping) -> "SendResult":
        """The result of a message appended as ``row`` (a row the commitlog's append answers with).

        >>> SendResult.of_row({"msg_id": "ID", "uniq_key": "K", "topic": "T", "queue_id": 1, "queue_offset": 2,
        ...                    "physical_offset": 3}).commitlog_offset
        3
        """
        return cls(
            "SEND_OK",
            row["msg_id"],
            row["uniq_key"],
            row["topic"],
            row["queue_id"],
            row["queue_offset"],
            row["physical_offset"],
        )


@dataclass(frozen=True)
class StoredMessage:
    """A stored message, as RocketMQ's ``MessageExt``: the commitlog row with its properties as a dict.

    >>> m = store.query_by_id(r.msg_id)
    >>> m.tags, m.keys, m.uniq_key == r.uniq_key, m.properties["a"]
    ('TagA', 'order-1', True, '5')
    """

    msg_id: str
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    size: int
    sysflag: int
    flag: int
    body_crc: int
    born_timestamp: dt.datetime
    born_host: str
    store_timestamp: dt.datetime
    store_host: str
    reconsume_times: int
    prepared_transaction_offset: int
    properties: dict
    body: bytes

    @property
    def tags(self) -> str | None:
        return self.properties.get(MessageConst.TAGS)

    @property
    def keys(self) -> str | None:
        return self.properties.get(MessageConst.KEYS)

    @property
    def uniq_key(self) -> str | None:
        return self.properties.get(MessageConst.UNIQ_KEY)

    @classmethod
    def from_rows(cls, rows: "pa.Table") -> list["StoredMessage"]:
        """The messages of commitlog rows (an Arrow table with at least the :data:`MESSAGE_COLUMNS`), as
        :meth:`from_row` of ``rows.to_pylist()`` but with the time columns converted from their integers
        (:func:`~storelib.model.timestamps.utc_datetimes`) and no dict made per row.

        >>> t = store.context.tables.commitlog.read_arrow()
        >>> StoredMessage.from_rows(t) == [StoredMessage.from_row(r) for r in t.to_pylist()]
        True
        """

        columns = [
            utc_datetimes(col) if pa.types.is_timestamp(col.type) else col.to_pylist()
            for col in map(rows.column, MESSAGE_COLUMNS)
        ]
        return [
            cls(*fields, dict(properties), bytes(body))  # type: ignore[call-arg]  # mypy: too many after *fields
            for *fields, properties, body in zip(*columns)
        ]

    @classmethod
    def from_row(cls, row: dict) -> "StoredMessage":
        """The message of one commitlog row (a dict by column; those :data:`MESSAGE_COLUMNS` names are read)."""
        return cls(  # type: ignore[call-arg]  # mypy: too many after *(...)
            *(row[name] for name in MESSAGE_COLUMNS[:-2]), dict(row["properties"]), bytes(row["body"])
        )


#: The commitlog columns a :class:`StoredMessage` is made of, in the order of its fields (``physical_offset``
#: is its ``commitlog_offset``; ``tags``, ``keys`` and ``uniq_key`` are its properties again).
MESSAGE_COLUMNS = (
    "msg_id",
    "topic",
    "queue_id",
    "queue_offset",
    "physical_offset",
    "size",
    "sysflag",
    "flag",
    "body_crc",
    "born_timestamp",
    "born_host",
    "store_timestamp",
    "store_host",
    "reconsume_times",
    "prepared_transaction_offset",
    "properties",
    "body",
)
