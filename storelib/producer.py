"""The producer side: checking messages and encoding them for the commitlog.

A message is checked as RocketMQ's client and broker check it (topic rules, permissions, queue id,
body size, reserved and blank properties); TAGS, KEYS and a fresh UNIQ_KEY join its properties; a
queue is chosen round-robin where the message names none (``MQFaultStrategy`` without latency
fault tolerance). Lists of :class:`~storelib.message.Message` are encoded here on the driver;
DataFrames are encoded as Spark columns, and their bad rows are reported before anything is written.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
import time
import uuid
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib import arrays, codec
from storelib.commitlog import EncodedMessage, now_millis
from storelib.config import StoreConfig
from storelib.errors import (BodyTooLargeError, InvalidPropertyError, InvalidQueueIdError, InvalidTopicError,
                             MessageError, ReservedPropertyError, ReservedTopicError, StoreError,
                             TopicNotFoundError, TopicPermissionError)
from storelib.message import (BLANK_ENTRY_PATTERN, PROPERTY_JOIN, RESERVED_PROPERTIES, SEPARATORS_PATTERN,
                              SEPARATORS_REASON, SEPARATORS_REASON_TAGS, Message, MessageConst, SysFlag,
                              validate_message)
from storelib.topics import (NOT_ALLOWED_SEND_TOPICS, RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX,
                             RETRY_OR_DLQ_TOPIC_MAX_LENGTH, TOPIC_MAX_LENGTH, TopicConfig)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["Producer", "DATAFRAME_COLUMNS", "EncodedFrame", "UniqKeys"]

#: How a null property value crosses from Spark (it is refused as blank): a separator, which no value may hold.
NULL_VALUE = MessageConst.PROPERTY_SEPARATOR

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
        """Encoded rows plus ``_error`` (why a row is refused, or null); not yet checked."""
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
        born_v6 = ":" in self.ip

        # The size needs no map: the user's properties plus TAGS, KEYS and the fixed-width UNIQ_KEY entries.
        def entry(name: str, value: "Column") -> "Column":
            return F.when(value.isNotNull(), F.octet_length(value) + len(name) + 2).otherwise(F.lit(0))

        # Joined by 1-byte separators, the entries' name+value bytes plus their 2 separators each are
        # the joined names' and values' lengths plus 2 (refused rows aside: their size is never used).
        names, values, count = self._joined_properties(user)
        user_len = F.when(count > 0, F.octet_length(names) + F.octet_length(values) + 2).otherwise(F.lit(0))
        props_len = (user_len + entry(MessageConst.TAGS, tags) + entry(MessageConst.KEYS, keys)
                     + len(MessageConst.UNIQ_KEY) + 32 + 2)
        host_v6 = ":" in self.config.store_address[0]
        size = C.message_length(body, topic, props_len, born_v6=born_v6, store_v6=host_v6)
        # Only what varies per row comes from Spark; the commitlog writer adds the rest (see
        # ``EncodedFrame``): constants, the UNIQ_KEY and the system properties.
        given = {"flag": lambda c: c.cast("int"), "born_host": lambda c: c.cast("string"),
                 "born_timestamp": lambda c: F.date_trunc("millisecond", c.cast("timestamp"))}
        optional = [cast(F.col(name)).alias(name) for name, cast in given.items() if name in df.columns]
        return df.select(
            topic.alias("topic"), chosen.cast("int").alias("queue_id"),
            F.crc32(body).bitwiseAND(F.lit(0x7FFFFFFF)).cast("int").alias("body_crc"),
            names.alias("property_names"), values.alias("property_values"), count.alias("property_count"),
            body.alias("body"), tags.alias("tags"), keys.alias("keys"), *optional,
            error.alias("_error"), size.alias("size"),
        )

    @staticmethod
    def _joined_properties(user: "Column") -> list["Column"]:
        """The user properties as two strings, names and values each joined by NAME_VALUE_SEPARATOR
        (null when there are none), and their count: strings cross from Spark to Python far cheaper
        than a map.
        A null value is joined as :data:`NULL_VALUE` (blank, as Java trims it). :meth:`EncodedFrame.refusals` checks them."""
        from pyspark.sql import functions as F

        count = F.size(user)
        return [F.when(count > 0, F.array_join(F.map_keys(user), PROPERTY_JOIN)),
                F.when(count > 0, F.array_join(F.map_values(user), PROPERTY_JOIN, NULL_VALUE)), count]

    def frame_defaults(self) -> "EncodedFrame":
        """What :meth:`encode_dataframe` leaves to the commitlog writer: per-send constants and UNIQ_KEYs."""
        born_v6 = ":" in self.ip
        defaults = {"sysflag": SysFlag.BORNHOST_V6 if born_v6 else 0, "flag": 0, "born_host": self.born_host,
                    "born_timestamp": now_millis(), "reconsume_times": 0, "prepared_transaction_offset": 0}
        now = int(time.time() * 1000)
        since_month = now - codec.month_start_ms(now)
        prefix = codec.uniq_id_prefix_hex(self.ip, os.getpid(), 0)[:12]
        return EncodedFrame(defaults, UniqKeys(prefix, uuid.uuid4().hex, since_month))

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
        ]
        if "keys" in df.columns and isinstance(df.schema["keys"].dataType, ArrayType):
            # array_join skips null elements unless told what to put there: the lengths differ iff one is null.
            nulls = F.length(F.array_join(F.col("keys"), " ")) != F.length(F.array_join(F.col("keys"), " ", "?"))
            errors.append((nulls, "MessageError|keys|every key must be a string"))
        # The properties are checked by the executors (EncodedFrame.refusals), over whole batches.
        error = F.lit(None).cast("string")
        for cond, text in reversed(errors):
            error = F.when(F.coalesce(cond, F.lit(False)), F.lit(text)).otherwise(error)
        return error

    @staticmethod
    def refuse(bad: Mapping[str, object]) -> None:
        """Raise the typed error of a refused row (``error``, ``topic``, ``queue_id``, ``partition``)."""
        kind, field, reason = str(bad["error"]).split("|", 2)
        cls = {c.__name__: c for c in (InvalidTopicError, ReservedTopicError, TopicNotFoundError, TopicPermissionError,
                                       MessageError, BodyTooLargeError, InvalidQueueIdError, ReservedPropertyError,
                                       InvalidPropertyError)}.get(kind, StoreError)
        extra = {"value": bad["topic"]} if field == "topic" else {}
        raise cls(field, reason, where=f"DataFrame partition {bad['partition']}, topic {bad['topic']!r}; nothing was written",
                  **extra)


@dataclass(frozen=True)
class UniqKeys:
    """RocketMQ-shaped UNIQ_KEYs for the rows of one DataFrame send, made on the executors: the
    host and pid prefix, a salt per send and partition, then milliseconds since the month's start
    (<< 16) plus the row's index in its partition, all upper-case hex (32 characters).

    >>> keys = UniqKeys("0A0000010001", "nonce", 5).for_rows(0, 0, 2).to_pylist()
    >>> [len(k) for k in keys], keys[0][:12], keys[0][-12:], keys[1][-12:]
    ([32, 32], '0A0000010001', '000000050000', '000000050001')
    """

    prefix: str
    nonce: str
    since_month_ms: int

    def for_rows(self, partition: int, first_row: int, n: int) -> pa.Array:
        salt = zlib.crc32(f"{self.nonce}/{partition}".encode())
        tail = ((self.since_month_ms << 16) + first_row + np.arange(n, dtype=np.int64)) % (1 << 48)
        return arrays.hex_strings(f"{self.prefix}{salt:08X}", tail, 12)


@dataclass(frozen=True)
class EncodedFrame:
    """The columns of a DataFrame send that the commitlog writer completes on the executors:
    ``defaults`` for the columns the DataFrame did not have, and the UNIQ_KEYs."""

    defaults: Mapping[str, object]
    uniq: UniqKeys

    def refusals(self, batch: pa.RecordBatch) -> pa.Array:
        """Why each row is refused (``ErrorClass|field|reason``, the first failing check), or null:
        Spark's ``_error``, else what ``putUserProperty`` and the properties encoding refuse.

        The checks read the joined names and values as they came (see
        :meth:`Producer.encode_dataframe`); names are checked once per distinct joined string,
        since the rows of a DataFrame mostly share their property names.
        """
        joined_names, joined_values = batch.column("property_names"), batch.column("property_values")
        count = batch.column("property_count").to_numpy(zero_copy_only=False)
        names = pc.dictionary_encode(joined_names)
        distinct = names.dictionary
        split = pc.split_pattern(distinct, PROPERTY_JOIN)
        flat = pc.list_flatten(split)
        reserved_names = np.zeros(len(distinct), dtype=bool)
        reserved_names[pc.list_parent_indices(split).to_numpy()[
            pc.is_in(flat, value_set=pa.array(sorted(RESERVED_PROPERTIES))).to_numpy(zero_copy_only=False)]] = True
        rows = pc.fill_null(names.indices, len(distinct)).to_numpy(zero_copy_only=False)

        def per_row(per_name: np.ndarray) -> np.ndarray:  # null names (no properties) pass
            return np.append(per_name, False)[rows]

        def matches(joined: pa.Array, pattern: str) -> np.ndarray:
            return pc.fill_null(pc.match_substring_regex(joined, pattern), False).to_numpy(zero_copy_only=False)

        def entries(joined: pa.Array) -> np.ndarray:
            return pc.fill_null(pc.count_substring(joined, PROPERTY_JOIN), -1).to_numpy(zero_copy_only=False) + 1

        reserved = per_row(reserved_names)
        blank = per_row(matches(distinct, BLANK_ENTRY_PATTERN)) | matches(joined_values, BLANK_ENTRY_PATTERN)
        # A NAME_VALUE_SEPARATOR inside a name or value makes more entries than the map has.
        separators = ((per_row(entries(distinct)) != count) & (count > 0)) | ((entries(joined_values) != count) & (count > 0)) \
            | per_row(matches(distinct, MessageConst.PROPERTY_SEPARATOR)) \
            | matches(joined_values, MessageConst.PROPERTY_SEPARATOR)
        tags_keys = [matches(batch.column(c), SEPARATORS_PATTERN) for c in ("tags", "keys")]
        code = np.select([reserved, blank, separators, *tags_keys], [1, 2, 3, 4, 5], default=0)
        if not code.any():
            return batch.column("_error")
        found = pa.array([None, "ReservedPropertyError|properties|uses a name reserved by the system",
                          "InvalidPropertyError|properties|the name or value of a property can not be blank",
                          f"InvalidPropertyError|properties|{SEPARATORS_REASON}",
                          f"MessageError|tags|{SEPARATORS_REASON_TAGS}",
                          f"MessageError|keys|{SEPARATORS_REASON_TAGS}"], pa.string()).take(pa.array(code))
        return pc.coalesce(batch.column("_error"), found)

    def complete(self, batch: pa.RecordBatch, partition: int, first_row: int) -> dict[str, pa.Array]:
        """The batch's columns plus the defaults, ``uniq_key``, and ``properties``: the user's, then
        TAGS, KEYS and UNIQ_KEY where present. Rows must have passed :meth:`refusals`.

        The map is built by appending the system entries to the joined strings and splitting once,
        which costs a third of splitting and then inserting entries into a map.
        """
        from storelib.schema import COMMITLOG

        n = batch.num_rows
        cols = {name: batch.column(name) for name in batch.schema.names}
        for name, value in self.defaults.items():
            if name not in cols:
                cols[name] = pa.repeat(pa.scalar(value, COMMITLOG.arrow.field(name).type), n)
        cols["uniq_key"] = self.uniq.for_rows(partition, first_row, n)
        system = [(MessageConst.TAGS, cols["tags"]), (MessageConst.KEYS, cols["keys"]), (MessageConst.UNIQ_KEY, cols["uniq_key"])]
        absent = pa.scalar(None, pa.string())
        names = pc.binary_join_element_wise(cols["property_names"], *[
            pc.if_else(pc.is_valid(v), pa.scalar(name), absent) for name, v in system], PROPERTY_JOIN, null_handling="skip")
        values = pc.binary_join_element_wise(cols["property_values"], *[v for _, v in system], PROPERTY_JOIN,
                                             null_handling="skip")
        names, values = pc.split_pattern(names, PROPERTY_JOIN), pc.split_pattern(values, PROPERTY_JOIN)
        if not names.offsets.equals(values.offsets):
            raise StoreError(None, "property names and values fell out of step; the rows were not checked")
        cols["properties"] = pa.MapArray.from_arrays(names.offsets, pc.list_flatten(names), pc.list_flatten(values))
        return cols
