"""The producer side: checking messages and encoding them for the commitlog.

A message is checked as RocketMQ's client and broker check it, by the rules of
:mod:`storelib.model.validation` (topic rules, permissions, queue id, body size, reserved and blank
properties); TAGS, KEYS and a fresh UNIQ_KEY join its properties; a
queue is chosen round-robin where the message names none (``MQFaultStrategy`` without latency
fault tolerance). Lists of :class:`~storelib.model.message.Message` are encoded here on the driver.
A DataFrame crosses from Spark to the executors' Python with only what varies per message;
there :class:`~storelib.send.frame.EncodedFrame` runs the same checks over Arrow batches and completes the rows, and
a bad row is reported before anything is written.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import random
import time
import uuid
from concurrent.futures import Future
from typing import TYPE_CHECKING, Callable, Iterator, Mapping, Sequence

import pyarrow as pa

from storelib.delta.location import is_local
from storelib.encoding.uniq_id import UniqIdGenerator, local_ip, month_start_ms, uniq_id_prefix_hex
from storelib.local.relay import RELAY_IN_FLIGHT, relay_for
from storelib.model.config import StoreConfig
from storelib.model.errors import MessageError, error_from_record
from storelib.model.message import PROPERTY_JOIN, Message, MessageConst, SendResult, SysFlag
from storelib.model.topic import TopicConfig
from storelib.model.validation import check_queue_id, check_send_topic, validate_message
from storelib.send.arrow_frame import DATAFRAME_COLUMNS, MIRRORED_PROPERTIES, NULL_VALUE, check_columns, spark_types
from storelib.send.frame import NULL_KEY, EncodedFrame, UniqKeys
from storelib.send.group_commit import GroupCommitProducer, regather_ms, then
from storelib.send.schedule import plan_schedule, split_timer_properties, timer_deliver_ms
from storelib.storage.commitlog import (
    COMMITLOG_MARKER,
    AppendResult,
    CommitLog,
    EncodedMessage,
    now_millis,
    queue_marker,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["Producer", "DATAFRAME_COLUMNS"]


def _ours(error: Exception) -> bool:
    """Whether a Spark job's failure came from this package's own code on the executors (a Python traceback
    through it), not from computing the user's DataFrame (a UDF of theirs, an ANSI cast of their column).

    >>> _ours(ValueError('File "/x/storelib/send/frame.py", line 3')), _ours(ValueError("CAST_INVALID_INPUT"))
    (True, False)
    """
    return f"{os.sep}storelib{os.sep}" in str(error)


def _gist(error: Exception) -> str:
    """A Spark job's failure in one line: a Python worker's exception (the last line of its traceback), else the
    first line of Spark's message.

    >>> _gist(ValueError("An exception was thrown from the Python worker:\\nTraceback ...\\nZeroDivisionError: x\\n"))
    'ZeroDivisionError: x'
    """
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if lines and "Python worker" in lines[0]:
        raised = [line for line in lines if line.split(":", 1)[0].endswith(("Error", "Exception"))]
        lines = raised[-1:] or lines
    return lines[0][:300] if lines else type(error).__name__


@contextlib.contextmanager
def _quiet_query_context() -> Iterator[None]:
    """Keep pyspark's query-context logger quiet while a job computes a user's DataFrame: its failure is raised
    as one :class:`MessageError`, not logged as well."""
    logger = logging.getLogger("DataFrameQueryContextLogger")
    was, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = was


class Producer:
    """Checks and encodes messages for one store; keeps RocketMQ's per-topic queue rotation.

    >>> producer, ctx = store.context.producer, store.context
    >>> [m.queue_id for m in producer.encode([Message("TopicTest", queue_id=2)], ctx.topics.all())]
    [2]
    >>> producer.send_batch(ctx.commitlog, ctx.topics.all(), [Message("TopicTest")])[0].send_status
    'SEND_OK'
    >>> df = spark.createDataFrame([("TopicTest", "hi")], "topic string, body string")
    >>> producer.send_dataframe(ctx.commitlog, ctx.topics.all(), df).count
    1
    >>> encoded, frame = producer.encode_dataframe(df, ctx.topics.all())
    >>> encoded.columns[:3]
    ['topic', 'body_crc', 'property_names']
    >>> Producer.refuse({"error": "BodyTooLargeError", "field": "body", "reason": "too big",
    ...                  "topic": "T", "partition": 0})
    Traceback (most recent call last):
    ...
    storelib.model.errors.BodyTooLargeError: body: too big [at DataFrame partition 0, topic 'T'; nothing was written]
    """

    def __init__(self, config: StoreConfig):
        self.config = config
        self.ip = local_ip()
        self.born_host = f"{self.ip}:0"
        self.uniq = UniqIdGenerator(ip=self.ip, pid=os.getpid())
        self._rotation: dict[str, itertools.count] = {}

    def _next_queue(self, topic: str, write_queue_nums: int) -> int:
        counter = self._rotation.get(topic)
        if counter is None:  # a random start per topic, drawn once
            counter = self._rotation.setdefault(topic, itertools.count(random.randrange(1 << 16)))
        return next(counter) % write_queue_nums

    # ---- sending ---------------------------------------------------------------------------
    def send_batch(
        self, commitlog: CommitLog, topics: Mapping[str, TopicConfig], messages: Sequence[Message]
    ) -> list[SendResult]:
        """Check and encode ``messages`` and append them to ``commitlog`` in one atomic commit."""
        if isinstance(messages, (str, bytes, Mapping)) or not hasattr(messages, "__iter__"):
            raise MessageError("messages", "must be a list of storelib.Message", value=type(messages).__name__)
        messages = list(messages)
        if not messages:
            return []
        rows = commitlog.append(self.encode(messages, topics)).rows
        assert rows is not None  # append answers a row per message, and there are some
        return self._results(rows)

    @staticmethod
    def _results(rows: list[dict]) -> list[SendResult]:
        return [SendResult.of_row(r) for r in rows]

    def group_commit(
        self,
        commitlog: CommitLog,
        topics: Callable[[], Mapping[str, TopicConfig]],
        *,
        linger_ms: int = 0,
        max_batch: int = 1000,
        encoded: bool = False,
    ) -> GroupCommitProducer[Message, EncodedMessage, SendResult]:
        """A thread-safe producer whose concurrent sends share commits (:mod:`storelib.send.group_commit`):
        each message is checked and encoded in its caller's thread, and each group appended to
        ``commitlog`` in one atomic commit: by this process, in the commit turn, or (with the setting
        ``relay_sends``) by the machine's committer, often with other processes' groups
        (:mod:`storelib.local.relay`). The topics' configuration is read (``topics()``, a look at the topic
        table's log) once per commit, not once per message, and again at once for a topic it does not know
        yet, as a broker keeps its topic table in memory. With ``encoded``, what is sent is already an
        :class:`~storelib.storage.commitlog.EncodedMessage`. On an object store the producer loads what a commit
        reads (the commitlog's snapshot, the markers of the known topics' queues) before it returns, as a
        RocketMQ producer's ``start()`` connects before the first send: the first sends do not wait for those
        round trips.

        >>> ctx = store.context
        >>> with ctx.producer.group_commit(ctx.commitlog, ctx.topics.all) as p:
        ...     p.send(Message("TopicTest", body=b"g", queue_id=r.queue_id)).queue_offset == r.queue_offset + 1
        True
        """
        known = [topics()]
        if not is_local(commitlog.table.path):  # any process's producer may become the machine's committer
            queues = [queue_marker(name, q) for name, t in known[0].items() for q in range(t.write_queue_nums)]
            with commitlog.table.commit_turn():
                commitlog.table.view(markers=[COMMITLOG_MARKER, *queues])
        relay = relay_for(commitlog).acquire()

        def encode(message: Message) -> EncodedMessage:
            if encoded:  # checked and encoded by the caller (the gRPC endpoint, with the proxy's checks)
                return message  # type: ignore[return-value]
            current = known[0]
            if getattr(message, "topic", None) not in current:
                current = known[0] = topics()
            return self.encode([message], current)[0]

        def results(landed: pa.Table) -> Sequence[SendResult]:
            known[0] = topics()  # for the next group's senders: a changed permission is seen one commit later
            return self._results(landed.to_pylist())

        if relay.enabled:  # groups handed on to the machine's committer, RELAY_IN_FLIGHT at a time

            def submit(group: Sequence[EncodedMessage]) -> "Future[Sequence[SendResult]]":
                return then(relay.submit(commitlog.stage(group)), results)

            return GroupCommitProducer(
                encode,
                None,
                submit=submit,
                in_flight=RELAY_IN_FLIGHT,
                linger_ms=linger_ms,
                max_batch=max_batch,
                on_close=relay.release,
            )
        # Without a machine's committer, this producer's group waits for the commit turn, and is taken once the
        # turn's snapshot is brought forward, so that everything sent while other writers commit, and during
        # that look (a round trip on an object store), joins it.
        return GroupCommitProducer(
            encode,
            lambda group: results(relay.commit(commitlog.stage(group))),
            linger_ms=linger_ms,
            max_batch=max_batch,
            on_close=relay.release,
            turn=commitlog.table.commit_turn,
            regather_ms=regather_ms(commitlog.table.path),
        )

    def send_dataframe(self, commitlog: CommitLog, topics: Mapping[str, TopicConfig], df: "DataFrame") -> AppendResult:
        """Check, complete and append a DataFrame of messages in one atomic commit (see :meth:`encode_dataframe`)."""
        from pyspark.errors import PySparkException
        from pyspark.sql import DataFrame

        if not isinstance(df, DataFrame):
            raise MessageError("df", "must be a pyspark DataFrame of messages", value=type(df).__name__)
        if df.isStreaming:
            raise MessageError(
                "df", "is a streaming DataFrame: send its rows with df.writeStream.format('rocketmq') instead"
            )
        encoded, frame = self.encode_dataframe(df, topics)
        with _quiet_query_context():
            try:
                return commitlog.append_dataframe(encoded, frame, Producer.refuse)
            except PySparkException as e:
                if _ours(e):
                    raise
                why = f"Spark could not compute the DataFrame's rows ({_gist(e)}); nothing was sent"
                raise MessageError("df", why, value=df.columns) from e

    # ---- lists of messages -----------------------------------------------------------------
    def encode(self, messages: Sequence[Message], topics: Mapping[str, TopicConfig]) -> list[EncodedMessage]:
        """Check every message (all before any is encoded) and encode them."""
        if isinstance(messages, Message):
            messages = [messages]
        born = now_millis()
        now = int(born.timestamp() * 1000)
        levels = len(self.config.delay_levels_ms)
        split, delivers = [], []
        for i, m in enumerate(messages):
            where = f"message {i}" if len(messages) > 1 else None
            m, timer = split_timer_properties(m)
            validate_message(m, max_body=self.config.max_message_size, where=where)
            check_queue_id(check_send_topic(topics, m.topic, where), m.queue_id, where)
            delivers.append((timer, timer_deliver_ms(timer, m.deliver_time_ms, now)))
            plan_schedule(
                m.topic,
                0,
                {},
                delay_level=m.delay_level,
                deliver_ms=delivers[-1][1],
                now=now,
                levels=levels,
                max_delay_ms=self.config.timer_max_delay_ms,
            )  # refuses before anything is encoded
            split.append(m)
        v6 = ":" in self.ip
        out = []
        for m, (timer, deliver) in zip(split, delivers):
            config = topics[m.topic]
            queue_id = m.queue_id if m.queue_id is not None else self._next_queue(m.topic, config.write_queue_nums)
            props = {**m.properties, **m.system_properties(), MessageConst.UNIQ_KEY: self.uniq.next_id()}
            topic, queue_id, props = plan_schedule(
                m.topic,
                queue_id,
                props,
                delay_level=m.delay_level,
                deliver_ms=deliver,
                now=now,
                levels=levels,
                max_delay_ms=self.config.timer_max_delay_ms,
                timer=timer,
            )
            out.append(
                EncodedMessage(
                    topic,
                    queue_id,
                    SysFlag.BORNHOST_V6 if v6 else 0,
                    m.flag,
                    bytes(m.body),
                    props,
                    born,
                    self.born_host,
                )
            )
        return out

    # ---- DataFrames ------------------------------------------------------------------------
    def encode_dataframe(
        self, df: "DataFrame", topics: Mapping[str, TopicConfig]
    ) -> tuple["DataFrame", "EncodedFrame"]:
        """A DataFrame of messages in two halves: what varies per message, as Spark hands it to
        the executors, unchecked (topic, the given queue id or null, body and its CRC, user
        properties as joined names and values, tags, keys, and the optional columns given); and
        the :class:`EncodedFrame` that checks and completes those rows there, over Arrow batches.
        Every column crossing from Spark costs about a third of what Spark's own Parquet writer
        spends on a row, so none crosses that the executors can compute.
        """
        from pyspark.sql import functions as F
        from pyspark.sql.types import ArrayType, StringType

        check_columns(spark_types(df.schema))

        def col(name: str, default: "Column") -> "Column":
            return F.col(name) if name in df.columns else default

        body = col("body", F.lit(b"").cast("binary"))
        if "body" in df.columns and isinstance(df.schema["body"].dataType, StringType):
            body = F.encode(F.col("body"), "UTF-8")
        keys = col("keys", F.lit(None).cast("string"))
        if "keys" in df.columns and isinstance(df.schema["keys"].dataType, ArrayType):
            keys = F.array_join(F.col("keys"), MessageConst.KEY_SEPARATOR, NULL_KEY)
        tags = col("tags", F.lit(None).cast("string"))
        user = F.coalesce(
            col("properties", F.lit(None).cast("map<string,string>")), F.create_map().cast("map<string,string>")
        )
        user = F.map_filter(user, lambda name, _: ~name.isin(list(MIRRORED_PROPERTIES)))  # the columns' say
        names, values, count = self._joined_properties(user)
        # integers cross as 64 bits and are range-checked per row (EncodedFrame.refusals): no silent wrap
        given = {
            "queue_id": lambda c: c.cast("bigint"),
            "flag": lambda c: c.cast("bigint"),
            "born_host": lambda c: c,
            "born_timestamp": lambda c: F.date_trunc("millisecond", c),
        }
        optional = [cast(F.col(name)).alias(name) for name, cast in given.items() if name in df.columns]
        keys_array = "keys" in df.columns and isinstance(df.schema["keys"].dataType, ArrayType)
        return df.select(
            F.col("topic").alias("topic"),
            F.crc32(body).bitwiseAND(F.lit(0x7FFFFFFF)).cast("int").alias("body_crc"),
            names.alias("property_names"),
            values.alias("property_values"),
            count.alias("property_count"),
            body.alias("body"),
            F.when(F.length(tags) > 0, tags).alias("tags"),
            F.when(F.length(keys) > 0, keys).alias("keys"),
            *optional,
        ), self.frame(topics, keys_array)

    @staticmethod
    def _joined_properties(user: "Column") -> list["Column"]:
        """The user properties as two strings, names and values each joined by NAME_VALUE_SEPARATOR
        (null when there are none), and their count: strings cross from Spark to Python far cheaper
        than a map.
        A null value is joined as :data:`NULL_VALUE` (blank, as Java trims it). :meth:`EncodedFrame.refusals`
        checks them."""
        from pyspark.sql import functions as F

        count = F.size(user)
        return [
            F.when(count > 0, F.array_join(F.map_keys(user), PROPERTY_JOIN)),
            F.when(count > 0, F.array_join(F.map_values(user), PROPERTY_JOIN, NULL_VALUE)),
            count,
        ]

    def frame(self, topics: Mapping[str, TopicConfig], keys_array: bool) -> "EncodedFrame":
        """What :meth:`encode_dataframe` (or :func:`~storelib.send.arrow_frame.encode_batch`) leaves to the
        executors: the checks, the per-send constants, the queue rotation and the UNIQ_KEYs.

        >>> Producer(StoreConfig()).frame(store.context.topics.all(), keys_array=False).max_body
        4194304
        """
        born_v6 = ":" in self.ip
        defaults = {
            "sysflag": SysFlag.BORNHOST_V6 if born_v6 else 0,
            "flag": 0,
            "born_host": self.born_host,
            "born_timestamp": now_millis(),
            "reconsume_times": 0,
            "prepared_transaction_offset": 0,
        }
        now = int(time.time() * 1000)
        since_month = now - month_start_ms(now)
        prefix = uniq_id_prefix_hex(self.ip, os.getpid(), 0)[:12]
        return EncodedFrame(
            defaults,
            UniqKeys(prefix, uuid.uuid4().hex, since_month),
            dict(topics),
            self.config.max_message_size,
            random.randrange(1 << 16),
            self.config.store_v6,
            keys_array,
        )

    @staticmethod
    def refuse(bad: Mapping[str, object]) -> None:
        """Raise the typed error of a refused row: its error record, with the ``topic`` and ``partition`` it
        came from."""
        raise error_from_record(
            dict(bad), where=f"DataFrame partition {bad['partition']}, topic {bad['topic']!r}; nothing was written"
        )
