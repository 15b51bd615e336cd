"""The producer side: checking messages and encoding them for the commitlog.

A message is checked as RocketMQ's client and broker check it (topic rules, permissions, queue id,
body size, reserved and blank properties); TAGS, KEYS and a fresh UNIQ_KEY join its properties; a
queue is chosen round-robin where the message names none (``MQFaultStrategy`` without latency
fault tolerance). Lists of :class:`~storelib.message.Message` are encoded here on the driver;
DataFrames are encoded as Spark columns, and their bad rows are reported before anything is written.
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
import random
import socket
import uuid
from typing import TYPE_CHECKING, Mapping, Sequence

from storelib import codec
from storelib.commitlog import EncodedMessage, now_millis
from storelib.config import StoreConfig
from storelib.errors import (BodyTooLargeError, InvalidPropertyError, InvalidQueueIdError, InvalidTopicError,
                             MessageError, ReservedPropertyError, ReservedTopicError, StoreError,
                             TopicNotFoundError, TopicPermissionError)
from storelib.message import RESERVED_PROPERTIES, Message, MessageConst, SysFlag, validate_message
from storelib.topics import (NOT_ALLOWED_SEND_TOPICS, RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX,
                             RETRY_OR_DLQ_TOPIC_MAX_LENGTH, TOPIC_MAX_LENGTH, TopicConfig)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["Producer", "DATAFRAME_COLUMNS"]

#: Columns a DataFrame of messages may have; only ``topic`` is required.
DATAFRAME_COLUMNS = {
    "topic": "string", "body": "binary or string", "tags": "string", "keys": "string or array<string>",
    "properties": "map<string,string>", "queue_id": "int", "flag": "int", "born_timestamp": "timestamp",
    "born_host": "string",
}


def _local_ip() -> str:
    try:
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class Producer:
    """Checks and encodes messages for one store; keeps RocketMQ's per-topic queue rotation."""

    def __init__(self, config: StoreConfig):
        self.config = config
        self.ip = _local_ip()
        self.born_host = f"{self.ip}:0"
        self.uniq = codec.UniqIdGenerator(ip=self.ip, pid=os.getpid())
        self._rotation: dict[str, itertools.count] = {}

    def _next_queue(self, topic: str, write_queue_nums: int) -> int:
        counter = self._rotation.setdefault(topic, itertools.count(random.randrange(1 << 16)))
        return next(counter) % write_queue_nums

    # ---- lists of messages -----------------------------------------------------------------
    def encode(self, messages: Sequence[Message], topics: Mapping[str, TopicConfig]) -> list[EncodedMessage]:
        """Check every message (all before any is encoded) and encode them."""
        if isinstance(messages, Message):
            messages = [messages]
        for i, m in enumerate(messages):
            where = f"message {i}" if len(messages) > 1 else None
            validate_message(m, max_body=self.config.max_message_size, where=where)
            config = self._topic(topics, m.topic, where)
            config.check_writable(m.queue_id)
        born = now_millis()
        v6 = ":" in self.ip
        out = []
        for m in messages:
            config = topics[m.topic]
            queue_id = m.queue_id if m.queue_id is not None else self._next_queue(m.topic, config.write_queue_nums)
            props = {**m.properties, **m.system_properties(), MessageConst.UNIQ_KEY: self.uniq.next_id()}
            out.append(EncodedMessage(m.topic, queue_id, SysFlag.BORNHOST_V6 if v6 else 0, m.flag, bytes(m.body),
                                      props, born, self.born_host))
        return out

    @staticmethod
    def _topic(topics: Mapping[str, TopicConfig], topic: str, where: str | None) -> TopicConfig:
        if topic in NOT_ALLOWED_SEND_TOPICS:
            raise ReservedTopicError("topic", "is a system topic that producers may not send to", value=topic, where=where)
        if topic not in topics:
            raise TopicNotFoundError("topic", f"topic {topic} does not exist in this store; create it first",
                                     value=topic, where=where)
        return topics[topic]

    # ---- DataFrames ------------------------------------------------------------------------
    def encode_dataframe(self, df: "DataFrame", topics: Mapping[str, TopicConfig]) -> "DataFrame":
        """Encoded rows plus ``_error`` (why a row is refused, or null) and ``_pid``; not yet checked."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import ArrayType, StringType

        from storelib import columns as C

        unknown = sorted(set(df.columns) - set(DATAFRAME_COLUMNS))
        if unknown:
            raise MessageError("columns", f"unknown message columns {unknown}; allowed: {sorted(DATAFRAME_COLUMNS)}")
        if "topic" not in df.columns:
            raise MessageError("columns", "a DataFrame of messages needs a 'topic' column")

        def col(name: str, default: "Column") -> "Column":
            return F.col(name) if name in df.columns else default

        body = col("body", F.lit(b"").cast("binary"))
        if "body" in df.columns and isinstance(df.schema["body"].dataType, StringType):
            body = F.encode(F.col("body"), "UTF-8")
        keys = col("keys", F.lit(None).cast("string"))
        if "keys" in df.columns and isinstance(df.schema["keys"].dataType, ArrayType):
            keys = F.array_join(F.col("keys"), MessageConst.KEY_SEPARATOR)
        keys = F.when(F.length(keys) > 0, keys)
        tags = col("tags", F.lit(None).cast("string"))
        tags = F.when(F.length(tags) > 0, tags)
        user = F.coalesce(col("properties", F.lit(None)).cast("map<string,string>"), F.create_map().cast("map<string,string>"))

        wq = F.create_map(*itertools.chain.from_iterable((F.lit(t), F.lit(c.write_queue_nums)) for t, c in topics.items())) \
            if topics else F.create_map().cast("map<string,int>")
        topic = F.col("topic")
        queue_id = col("queue_id", F.lit(None).cast("int")).cast("int")
        row_index = F.monotonically_increasing_id().bitwiseAND(F.lit((1 << 33) - 1))
        pid = F.spark_partition_id()
        nqueues = F.try_element_at(wq, topic)
        chosen = F.coalesce(queue_id, F.pmod(row_index + pid * 7 + F.lit(random.randrange(1 << 16)), F.coalesce(nqueues, F.lit(1))))
        error = self._refusal(df, topics, topic, body, queue_id, nqueues, user)
        uniq = self._uniq_key(pid, row_index)

        empty = F.create_map().cast("map<string,string>")
        system = F.map_concat(F.when(tags.isNotNull(), F.create_map(F.lit(MessageConst.TAGS), tags)).otherwise(empty),
                              F.when(keys.isNotNull(), F.create_map(F.lit(MessageConst.KEYS), keys)).otherwise(empty),
                              F.create_map(F.lit(MessageConst.UNIQ_KEY), uniq))
        # Only the second pass reads this column, and only once the first found no refused row:
        # a reserved name in ``user`` (a duplicate key for map_concat) never gets here.
        properties = F.map_concat(user, system)
        born_v6 = ":" in self.ip
        born_ts = F.date_trunc("millisecond", col("born_timestamp", F.current_timestamp()).cast("timestamp"))
        # The size needs no map: user properties plus TAGS, KEYS and the fixed-width UNIQ_KEY entries.
        def entry(name: str, value: "Column") -> "Column":
            return F.when(value.isNotNull(), F.octet_length(value) + len(name) + 2).otherwise(F.lit(0))

        props_len = (C.properties_length(user) + entry(MessageConst.TAGS, tags) + entry(MessageConst.KEYS, keys)
                     + len(MessageConst.UNIQ_KEY) + 32 + 2)
        host_v6 = ":" in self.config.store_address[0]
        size = C.message_length(body, topic, props_len, born_v6=born_v6, store_v6=host_v6)
        encoded = df.select(
            topic.alias("topic"), chosen.cast("int").alias("queue_id"),
            F.lit(SysFlag.BORNHOST_V6 if born_v6 else 0).cast("int").alias("sysflag"),
            col("flag", F.lit(0)).cast("int").alias("flag"),
            F.crc32(body).bitwiseAND(F.lit(0x7FFFFFFF)).cast("int").alias("body_crc"),
            born_ts.alias("born_timestamp"),
            col("born_host", F.lit(self.born_host)).alias("born_host"),
            F.lit(0).alias("reconsume_times"), F.lit(0).cast("long").alias("prepared_transaction_offset"),
            properties.alias("properties"), body.alias("body"),
            tags.alias("tags"), keys.alias("keys"), uniq.alias("uniq_key"),
            error.alias("_error"), pid.alias("_pid"), size.alias("size"),
        )
        return encoded

    def _refusal(self, df: "DataFrame", topics: Mapping[str, TopicConfig], topic: "Column", body: "Column",
                 queue_id: "Column", nqueues: "Column", user: "Column") -> "Column":
        """Why a row is refused, as ``ErrorClass|field|reason`` (the first failing check), or null."""
        from pyspark.sql import functions as F
        from pyspark.sql.types import ArrayType

        writable = [t for t, c in topics.items() if c.writable]
        limit = F.when(topic.startswith(RETRY_GROUP_TOPIC_PREFIX) | topic.startswith(DLQ_GROUP_TOPIC_PREFIX),
                       RETRY_OR_DLQ_TOPIC_MAX_LENGTH).otherwise(TOPIC_MAX_LENGTH)
        known = sorted(topics)
        # Topics known to the store were checked when created: the name rules only run for unknown ones.
        errors = [
            (topic.isNull() | (F.trim(topic) == ""), "InvalidTopicError|topic|the specified topic is blank"),
            (~topic.isin(*known) & ~topic.rlike("^[%|a-zA-Z0-9_-]+$") if known else ~topic.rlike("^[%|a-zA-Z0-9_-]+$"),
             "InvalidTopicError|topic|contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"),
            (~topic.isin(*known) & (F.length(topic) > limit) if known else F.length(topic) > limit,
             "InvalidTopicError|topic|is longer than the topic max length"),
            (topic.isin(*sorted(NOT_ALLOWED_SEND_TOPICS)), "ReservedTopicError|topic|is a system topic that producers may not send to"),
            (nqueues.isNull(), "TopicNotFoundError|topic|topic does not exist in this store; create it first"),
            (~topic.isin(*writable) if writable else F.lit(True), "TopicPermissionError|topic|the topic is not writable"),
            (body.isNull(), "MessageError|body|must not be null"),
            (F.length(body) > self.config.max_message_size,
             f"BodyTooLargeError|body|is over the maximum of {self.config.max_message_size} bytes"),
            (queue_id.isNotNull() & ((queue_id < 0) | (queue_id >= nqueues)), "InvalidQueueIdError|queue_id|is outside [0, writeQueueNums) of the topic"),
            (F.exists(F.map_keys(user), lambda k: k.isin(*sorted(RESERVED_PROPERTIES))), "ReservedPropertyError|properties|uses a name reserved by the system"),
            (F.exists(F.map_entries(user), lambda e: (F.trim(e["key"]) == "") | e["value"].isNull() | (F.trim(e["value"]) == "")),
             "InvalidPropertyError|properties|the name or value of a property can not be blank"),
        ]
        if "keys" in df.columns and isinstance(df.schema["keys"].dataType, ArrayType):
            errors.append((F.exists(F.col("keys"), lambda k: k.isNull()), "MessageError|keys|every key must be a string"))
        error = F.lit(None).cast("string")
        for cond, text in reversed(errors):
            error = F.when(F.coalesce(cond, F.lit(False)), F.lit(text)).otherwise(error)
        return error

    def _uniq_key(self, pid: "Column", row_index: "Column") -> "Column":
        """RocketMQ-shaped UNIQ_KEYs made by Spark: host and pid prefix, a per-partition salt, then
        milliseconds since the month's start (<< 16) plus the row's index in its partition."""
        from pyspark.sql import functions as F

        prefix = codec.uniq_id_prefix_hex(self.ip, os.getpid(), 0)[:12]
        salt = F.pmod(F.hash(F.lit(uuid.uuid4().hex), pid), F.lit(1 << 32))
        now_ms = int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000)
        month = dt.datetime.now(dt.timezone.utc).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        since_month = now_ms - int(month.timestamp() * 1000)
        tail = F.pmod(F.lit(since_month << 16) + row_index, F.lit(1 << 48))
        return F.concat(F.lit(prefix), F.lpad(F.hex(salt), 8, "0"), F.lpad(F.hex(tail), 12, "0"))

    @staticmethod
    def check_encoded(encoded: "DataFrame") -> None:
        """Raise the typed error of the first refused row, if any row is refused."""
        from pyspark.sql import functions as F

        bad = encoded.where(F.col("_error").isNotNull()).select("_error", "topic", "queue_id", "_pid").first()
        if bad is None:
            return
        kind, field, reason = bad["_error"].split("|", 2)
        cls = {c.__name__: c for c in (InvalidTopicError, ReservedTopicError, TopicNotFoundError, TopicPermissionError,
                                       MessageError, BodyTooLargeError, InvalidQueueIdError, ReservedPropertyError,
                                       InvalidPropertyError)}.get(kind, StoreError)
        extra = {"value": bad["topic"]} if field == "topic" else {}
        raise cls(field, reason, where=f"DataFrame partition {bad['_pid']}, topic {bad['topic']!r}; nothing was written",
                  **extra)
