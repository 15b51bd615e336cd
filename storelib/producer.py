"""The producer side: checking messages and encoding them for the commitlog.

A message is checked as RocketMQ's client and broker check it (topic rules, permissions, queue id,
body size, reserved and blank properties); TAGS, KEYS and a fresh UNIQ_KEY join its properties; a
queue is chosen round-robin where the message names none (``MQFaultStrategy`` without latency
fault tolerance). Lists of :class:`~storelib.message.Message` are encoded here on the driver.
A DataFrame crosses from Spark to the executors' Python with only what varies per message;
there :class:`EncodedFrame` runs the same checks over Arrow batches and completes the rows, and
a bad row is reported before anything is written.
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
from storelib.message import (BLANK_ENTRY_PATTERN, PROPERTY_JOIN, RESERVED_PROPERTIES,
                              SEPARATORS_REASON, SEPARATORS_REASON_TAGS, Message, MessageConst, SysFlag,
                              validate_message)
from storelib.topics import NOT_ALLOWED_SEND_TOPICS, TopicConfig, validate_topic

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["Producer", "DATAFRAME_COLUMNS", "EncodedFrame", "UniqKeys"]

#: How a null property value crosses from Spark (it is refused as blank): a separator, which no value may hold.
NULL_VALUE = codec.PROPERTY_SEPARATOR

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
    def encode_dataframe(self, df: "DataFrame", topics: Mapping[str, TopicConfig]) -> tuple["DataFrame", "EncodedFrame"]:
        """A DataFrame of messages in two halves: what varies per message, as Spark hands it to
        the executors, unchecked (topic, the given queue id or null, body and its CRC, user
        properties as joined names and values, tags, keys, and the optional columns given); and
        the :class:`EncodedFrame` that checks and completes those rows there, over Arrow batches.
        Every column crossing from Spark costs about a third of what Spark's own Parquet writer
        spends on a row, so none crosses that the executors can compute.
        """
        from pyspark.sql import functions as F
        from pyspark.sql.types import ArrayType, StringType

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
            keys = F.array_join(F.col("keys"), MessageConst.KEY_SEPARATOR, NULL_KEY)
        tags = col("tags", F.lit(None).cast("string"))
        user = F.coalesce(col("properties", F.lit(None)).cast("map<string,string>"), F.create_map().cast("map<string,string>"))
        names, values, count = self._joined_properties(user)
        given = {"queue_id": lambda c: c.cast("int"), "flag": lambda c: c.cast("int"), "born_host": lambda c: c.cast("string"),
                 "born_timestamp": lambda c: F.date_trunc("millisecond", c.cast("timestamp"))}
        optional = [cast(F.col(name)).alias(name) for name, cast in given.items() if name in df.columns]
        keys_array = "keys" in df.columns and isinstance(df.schema["keys"].dataType, ArrayType)
        return df.select(
            F.col("topic").cast("string").alias("topic"),
            F.crc32(body).bitwiseAND(F.lit(0x7FFFFFFF)).cast("int").alias("body_crc"),
            names.alias("property_names"), values.alias("property_values"), count.alias("property_count"),
            body.alias("body"), F.when(F.length(tags) > 0, tags).alias("tags"), F.when(F.length(keys) > 0, keys).alias("keys"),
            *optional,
        ), self._frame(topics, keys_array)

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

    def _frame(self, topics: Mapping[str, TopicConfig], keys_array: bool) -> "EncodedFrame":
        """What :meth:`encode_dataframe` leaves to the executors: the checks, the per-send
        constants, the queue rotation and the UNIQ_KEYs."""
        born_v6 = ":" in self.ip
        defaults = {"sysflag": SysFlag.BORNHOST_V6 if born_v6 else 0, "flag": 0, "born_host": self.born_host,
                    "born_timestamp": now_millis(), "reconsume_times": 0, "prepared_transaction_offset": 0}
        now = int(time.time() * 1000)
        since_month = now - codec.month_start_ms(now)
        prefix = codec.uniq_id_prefix_hex(self.ip, os.getpid(), 0)[:12]
        return EncodedFrame(defaults, UniqKeys(prefix, uuid.uuid4().hex, since_month), dict(topics),
                            self.config.max_message_size, random.randrange(1 << 16),
                            self.config.store_v6, keys_array)

    @staticmethod
    def refuse(bad: Mapping[str, object]) -> None:
        """Raise the typed error of a refused row (``error``, ``topic``, ``partition``)."""
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
class BatchTopics:
    """A batch's distinct topics, each one's refusal (``ErrorClass|field|reason`` or None) and
    write queue count; the last entry of both stands for a null topic."""

    distinct: arrays.Distinct
    refusals: list[str | None]
    queues: np.ndarray


def refusal_text(error: StoreError) -> str:
    """A refusal as it travels from the executors: ``ErrorClass|field|reason`` (see :meth:`Producer.refuse`)."""
    return f"{type(error).__name__}|{(error.field or '').split('[')[0]}|{error.reason}"


@dataclass(frozen=True)
class EncodedFrame:
    """The executors' half of a DataFrame send: they check the rows :meth:`Producer.encode_dataframe`
    sends (the list path's checks, as Arrow batch operations) and complete them into commitlog
    rows: ``defaults`` for the columns the DataFrame did not have, the queue where the row names
    none, the UNIQ_KEY, the properties map and the size.
    """

    defaults: Mapping[str, object]
    uniq: UniqKeys
    topics: Mapping[str, TopicConfig]
    max_body: int
    queue_salt: int = 0
    store_v6: bool = False
    keys_array: bool = False

    def topics_of(self, batch: pa.RecordBatch) -> "BatchTopics":
        """The batch's distinct topics, each checked once (see :class:`BatchTopics`)."""
        topics = arrays.Distinct.of(batch.column("topic"))
        refusals, queues = [], []
        for topic in topics.values.to_pylist() + [None]:
            try:
                validate_topic(topic)
                config = Producer._topic(self.topics, topic, None)
                config.check_writable()
                refusals.append(None)
                queues.append(config.write_queue_nums)
            except StoreError as e:
                refusals.append(refusal_text(e))
                queues.append(1)
        return BatchTopics(topics, refusals, np.array(queues, dtype=np.int64))

    def refusals(self, batch: pa.RecordBatch, topics: "BatchTopics | None" = None) -> pa.Array:
        """Why each row is refused (``ErrorClass|field|reason``, the first failing check), or null.

        The checks are the list path's (``validate_message``, the topic's existence and
        permission, the queue id's range), in its order: topic, body, queue id, keys, properties.
        Topics and property names are checked once per distinct value, since a DataFrame's rows
        mostly share them.
        """
        n = batch.num_rows
        topics = topics or self.topics_of(batch)
        body = batch.column("body")
        queue_id = batch.column("queue_id") if "queue_id" in batch.schema.names else pa.nulls(n, pa.int32())
        given = pc.is_valid(queue_id).to_numpy(zero_copy_only=False)
        qid = pc.fill_null(queue_id, 0).to_numpy(zero_copy_only=False)
        keys = batch.column("keys")
        keys_separators = _separators(keys)
        null_keys = np.zeros(n, dtype=bool)
        if self.keys_array and keys_separators.any():
            null_keys = _matches(pc.match_substring_regex(keys, NULL_KEY_PATTERN))
        tags = arrays.Distinct.of(batch.column("tags"))
        fixed = [
            (topics.distinct.per_row(np.array([r is not None for r in topics.refusals])), None),
            (pc.is_null(body).to_numpy(zero_copy_only=False), "MessageError|body|must not be null"),
            (_matches(pc.greater(pc.binary_length(body), self.max_body)),
             f"BodyTooLargeError|body|is over the maximum of {self.max_body} bytes"),
            (given & ((qid < 0) | (qid >= topics.distinct.per_row(topics.queues))),
             "InvalidQueueIdError|queue_id|is outside [0, writeQueueNums) of the topic"),
            (null_keys, "MessageError|keys|every key must be a string"),
            *self._property_refusals(batch),
            (tags.per_row(_separators(tags.values)), f"MessageError|tags|{SEPARATORS_REASON_TAGS}"),
            (keys_separators, f"MessageError|keys|{SEPARATORS_REASON_TAGS}"),
        ]
        texts = [None] + [text for _, text in fixed[1:]] + topics.refusals
        topic_choice = len(fixed) + topics.distinct.rows
        code = np.select([hit for hit, _ in fixed], [topic_choice] + list(range(1, len(fixed))), default=0)
        if not code.any():
            return pa.nulls(n, pa.string())
        return pa.array(texts, pa.string()).take(pa.array(code))

    @staticmethod
    def _property_refusals(batch: pa.RecordBatch) -> list[tuple[np.ndarray, str]]:
        """``putUserProperty``'s checks and the encoding's separators, over the joined names and values."""
        joined_names, joined_values = batch.column("property_names"), batch.column("property_values")
        count = batch.column("property_count").to_numpy(zero_copy_only=False)
        names = arrays.Distinct.of(joined_names)
        distinct = names.values
        split = pc.split_pattern(distinct, PROPERTY_JOIN)
        reserved_names = np.zeros(len(distinct), dtype=bool)
        reserved_names[pc.list_parent_indices(split).to_numpy()[_matches(
            pc.is_in(pc.list_flatten(split), value_set=pa.array(sorted(RESERVED_PROPERTIES))))]] = True
        per_row = names.per_row  # null names (no properties) pass

        def entries(joined: pa.Array) -> np.ndarray:
            return pc.fill_null(pc.count_substring(joined, PROPERTY_JOIN), -1).to_numpy(zero_copy_only=False) + 1

        blank = per_row(_matches(pc.match_substring_regex(distinct, BLANK_ENTRY_PATTERN))) \
            | _matches(pc.match_substring_regex(joined_values, BLANK_ENTRY_PATTERN))
        # A NAME_VALUE_SEPARATOR inside a name or value makes more entries than the map has.
        separators = (((per_row(entries(distinct)) != count) | (entries(joined_values) != count)) & (count > 0)) \
            | per_row(_matches(pc.match_substring(distinct, codec.PROPERTY_SEPARATOR))) \
            | _matches(pc.match_substring(joined_values, codec.PROPERTY_SEPARATOR))
        return [(per_row(reserved_names), "ReservedPropertyError|properties|uses a name reserved by the system"),
                (blank, "InvalidPropertyError|properties|the name or value of a property can not be blank"),
                (separators, f"InvalidPropertyError|properties|{SEPARATORS_REASON}")]

    def complete(self, batch: pa.RecordBatch, partition: int, first_row: int,
                 topics: "BatchTopics | None" = None) -> dict[str, pa.Array]:
        """The batch's columns plus the defaults, the chosen queue ids, ``uniq_key``, ``properties``
        (the user's, then TAGS, KEYS and UNIQ_KEY where present) and ``size``. Rows must have
        passed :meth:`refusals`.

        The map is built by appending the system entries to the joined strings and splitting once,
        which costs a third of splitting and then inserting entries into a map.
        """
        from storelib.schema import COMMITLOG

        n = batch.num_rows
        cols = {name: batch.column(name) for name in batch.schema.names}
        for name, value in self.defaults.items():
            if name not in cols:
                cols[name] = pa.repeat(pa.scalar(value, COMMITLOG.arrow.field(name).type), n)
        topics = topics or self.topics_of(batch)
        # Round-robin over the topic's write queues, as MQFaultStrategy turns without latency faults.
        turn = (first_row + np.arange(n, dtype=np.int64) + partition * 7 + self.queue_salt) % topics.distinct.per_row(topics.queues)
        turn = pa.array(turn, pa.int32())
        cols["queue_id"] = pc.coalesce(cols["queue_id"], turn) if "queue_id" in cols else turn
        cols["uniq_key"] = self.uniq.for_rows(partition, first_row, n)
        system = [(MessageConst.TAGS, cols["tags"]), (MessageConst.KEYS, cols["keys"]), (MessageConst.UNIQ_KEY, cols["uniq_key"])]
        absent = pa.scalar(None, pa.string())
        names = pc.binary_join_element_wise(cols["property_names"], *[
            pc.if_else(pc.is_valid(v), pa.scalar(name), absent) for name, v in system], PROPERTY_JOIN, null_handling="skip")
        values = pc.binary_join_element_wise(cols["property_values"], *[v for _, v in system], PROPERTY_JOIN,
                                             null_handling="skip")
        # Joined by 1-byte separators, the k entries' names and values are 2k - 2 bytes shorter
        # than RocketMQ's properties string, where each entry ends name\x01value\x02.
        properties_length = _lengths(names) + _lengths(values) + 2
        names, values = pc.split_pattern(names, PROPERTY_JOIN), pc.split_pattern(values, PROPERTY_JOIN)
        if not names.offsets.equals(values.offsets):
            raise StoreError(None, "property names and values fell out of step; the rows were not checked")
        cols["properties"] = pa.MapArray.from_arrays(names.offsets, pc.list_flatten(names), pc.list_flatten(values))
        # The hosts' address families set their sysflag bits, and with them 12 bytes of size each.
        born_v6 = bool(self.defaults["sysflag"] & SysFlag.BORNHOST_V6)
        if "born_host" in batch.schema.names:  # given hosts: an IPv6 ip:port has more than one colon
            born_v6 = _matches(pc.greater(pc.count_substring(cols["born_host"], ":"), 1))
        sysflag = (cols["sysflag"].to_numpy() & ~SysFlag.BORNHOST_V6) | np.where(born_v6, SysFlag.BORNHOST_V6, 0)
        cols["sysflag"] = pa.array(sysflag | (SysFlag.STOREHOSTADDRESS_V6 if self.store_v6 else 0), pa.int32())
        cols["size"] = pa.array(arrays.message_lengths(_lengths(cols["body"]), _lengths(cols["topic"]), properties_length,
                                                       born_v6, self.store_v6), pa.int32())
        return cols


#: How a null element of an array of keys crosses from Spark: a separator, which no key may hold,
#: standing alone between key separators. Both are refused; a key that is exactly "\u0002" is
#: reported as a null key.
NULL_KEY = codec.PROPERTY_SEPARATOR
NULL_KEY_PATTERN = r"(?:^| )\x02(?: |$)"


def _separators(strings: pa.Array) -> np.ndarray:
    """Rows holding a separator of RocketMQ's properties string (\\u0001 or \\u0002); null rows don't."""
    return (_matches(pc.match_substring(strings, codec.NAME_VALUE_SEPARATOR))
            | _matches(pc.match_substring(strings, codec.PROPERTY_SEPARATOR)))


def _matches(flags: pa.Array) -> np.ndarray:
    """A boolean Arrow array as numpy, null as False."""
    return pc.fill_null(flags, False).to_numpy(zero_copy_only=False)


def _lengths(strings: pa.Array) -> np.ndarray:
    """UTF-8 byte lengths (0 for null) as int64."""
    return pc.fill_null(pc.binary_length(strings), 0).to_numpy(zero_copy_only=False).astype(np.int64)
