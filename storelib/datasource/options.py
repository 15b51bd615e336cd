"""The ``rocketmq`` data source's options, checked once, and the shapes of its tables.

Details: ``docs/internals.md``, section storelib.datasource.options.

>>> o = SourceOptions.parse({"path": "/data/store", "table": "messages_by_key"})
>>> o.store, o.table, o.schema().fieldNames()[:3]
('/data/store', 'messages_by_key', ['topic', 'key', 'kind'])
>>> o.arrow_schema().field("key").type
DataType(string)
>>> SourceOptions.parse({})  # doctest: +NORMALIZE_WHITESPACE
Traceback (most recent call last):
storelib.model.errors.DataSourceOptionError: store: the rocketmq data source needs the store's path:
    .option("store", path) or .load(path)
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping

import pyarrow as pa
from pyspark.sql.types import StructType

from storelib.datasource.offsets import OffsetSpec, Position, parse_offsets, parse_timestamp, parse_timestamps
from storelib.delta.spec import spark_schema
from storelib.model.errors import DataSourceOptionError
from storelib.model.topic import validate_group, validate_topic
from storelib.storage.schema import COMMITLOG

__all__ = ["SourceOptions", "MESSAGES", "MESSAGES_BY_KEY", "TABLES", "OPTIONS", "ALIASES", "KAFKA_ONLY"]

#: One row per message: the commitlog's columns (its internal clustering sequence left out).
MESSAGES = pa.schema([f for f in COMMITLOG.arrow if f.name != "cluster_seq"])
#: One row per message and key it is indexed under (each of its KEYS, and its UNIQ_KEY).
MESSAGES_BY_KEY = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("key", pa.string()),
        pa.field("kind", pa.string()),
        *[f for f in MESSAGES if f.name != "topic"],
    ]
)
TABLES = {"messages": MESSAGES, "messages_by_key": MESSAGES_BY_KEY}
#: Every option, by its lower-case name, as the documentation spells it (names are case-insensitive).
OPTIONS = {
    n.lower(): n
    for n in (
        "store",
        "path",
        "table",
        "group",
        "topic",
        "topics",
        "topicPattern",
        "startingOffsets",
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        "endingOffsets",
        "maxMessagesPerTrigger",
        "commitOffsets",
        "failOnDataLoss",
        "partitions",
        "checkpointLocation",
    )
}
#: Spark's Kafka source's names of options that mean the same here.
ALIASES = {"subscribe": "topics", "subscribePattern": "topicPattern", "maxOffsetsPerTrigger": "maxMessagesPerTrigger"}
_ALIASES = {k.lower(): v.lower() for k, v in ALIASES.items()}
#: Options of Spark's Kafka source that mean nothing here, and why (``kafka.*`` too).
KAFKA_ONLY = {
    "assign": "a read covers whole topics (topic, topics or topicPattern); filter queue_id to read some queues",
    "kafka.": "it configures a Kafka client; the source reads the store's tables directly",
    "includeheaders": "a message's properties are always read, in its properties column",
    "minpartitions": "a batch read's partitions option sets how many partitions a scan is split into",
    "minoffsetspertrigger": "a micro-batch takes what is there, up to maxMessagesPerTrigger",
    "maxtriggerdelay": "a micro-batch takes what is there, up to maxMessagesPerTrigger",
    "groupidprefix": "a stream consumes as the consumer group of the group option",
    "startingoffsetsbytimestampstrategy": "a queue with no message at or after the time starts at its latest offset",
    "kafkaconsumer.polltimeoutms": "there is no Kafka consumer: the source reads the store's tables directly",
    "fetchoffset.numretries": "there is no Kafka consumer: the source reads the store's tables directly",
    "fetchoffset.retryintervalms": "there is no Kafka consumer: the source reads the store's tables directly",
}
_TOPICS = ("topic", "topics", "topicpattern")
_STARTS = ("startingoffsets", "startingtimestamp", "startingoffsetsbytimestamp")


@dataclass(frozen=True)
class SourceOptions:
    """The data source's options, checked (option names are case-insensitive, as Spark's are); every option
    with its meaning: ``docs/guide.md``, section "Spark's own readers, streams and writers".

    ``topics`` holds ``topic`` or ``topics`` (or Kafka's ``subscribe``); ``starting`` and ``ending`` the offset
    options (None: the read's default, the group's offsets for a stream, every offset for a batch read).

    >>> o = SourceOptions.parse({"store": "/s", "subscribe": "Orders, Audit", "maxOffsetsPerTrigger": "100",
    ...                          "startingOffsets": '{"Orders": {"0": 5}}'})
    >>> o.topics, o.max_messages_per_trigger, o.starting.at("Orders", 0)
    (('Orders', 'Audit'), 100, Position(kind='offset', value=5))
    >>> SourceOptions.parse({"store": "/s", "kafka.bootstrap.servers": "h:9092"})  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    storelib.model.errors.DataSourceOptionError: kafka.bootstrap.servers: is an option of Spark's Kafka source with
        no meaning here: it configures a Kafka client; the source reads the store's tables directly
    """

    store: str
    table: str = "messages"
    group: str | None = None
    topics: tuple[str, ...] | None = None
    topic_pattern: str | None = None
    starting: OffsetSpec | None = None
    ending: OffsetSpec | None = None
    max_messages_per_trigger: int | None = None
    commit_offsets: bool = True
    fail_on_data_loss: bool = False
    partitions: int | None = None
    checkpoint: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = False, writing: bool = False) -> "SourceOptions":
        o = _names(options)
        store = o.get("store") or o.get("path")
        if not store:
            raise DataSourceOptionError(
                "store", 'the rocketmq data source needs the store\'s path: .option("store", path) or .load(path)'
            )
        store = str(store).rstrip("/")
        if "://" not in store:
            store = os.path.abspath(store)
        table = o.get("table", "messages")
        if table not in TABLES:
            raise DataSourceOptionError("table", f"must be one of {sorted(TABLES)}", value=table)
        given = [o.name(k) for k in _TOPICS if k in o]
        if len(given) > 1:
            raise DataSourceOptionError(given[1], f"give one of topic, topics and topicPattern (got {given})")
        topics = None
        if "topic" in o or "topics" in o:
            names = [o["topic"]] if "topic" in o else str(o["topics"]).split(",")
            topics = tuple(dict.fromkeys(validate_topic(str(t).strip(), given[0]) for t in names))
        pattern = o.get("topicpattern")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as e:
                raise DataSourceOptionError(
                    o.name("topicpattern"), f"is no regular expression: {e}", value=pattern
                ) from None
        group = o.get("group")
        if group is not None:
            validate_group(group, "group")
        out = cls(
            store,
            table,
            group,
            topics,
            pattern,
            _starting(o, group),
            parse_offsets(o.name("endingoffsets"), o["endingoffsets"], ending=True) if "endingoffsets" in o else None,
            _positive(o, "maxmessagespertrigger"),
            _flag(o, "commitoffsets", True),
            _flag(o, "failondataloss", False),
            _positive(o, "partitions"),
            o.get("checkpointlocation"),
        )
        for key in (*_STARTS, "endingoffsets"):
            if key in o and not given:
                raise DataSourceOptionError(
                    o.name(key), "needs the topics it applies to: set topic, topics or topicPattern"
                )
        if streaming:
            out.check_stream()
        if writing and out.table != "messages":
            raise DataSourceOptionError("table", "writes take messages", value=out.table)
        return out

    def check_stream(self) -> None:
        """What a stream needs beyond a read's options: a group, its topics, and no end."""
        if self.table != "messages":
            raise DataSourceOptionError(
                "table", "a stream reads messages; messages_by_key is for batch reads", value=self.table
            )
        if not self.group:
            raise DataSourceOptionError("group", 'a rocketmq stream consumes as a group: set .option("group", ...)')
        if self.topics is None and self.topic_pattern is None:
            raise DataSourceOptionError(
                "topic", "a rocketmq stream reads set topics: set topic, topics (subscribe) or topicPattern"
            )
        if self.ending is not None:
            raise DataSourceOptionError("endingOffsets", "is for batch reads: a stream ends when its query stops")

    def arrow_schema(self) -> pa.Schema:
        return TABLES[self.table]

    def schema(self) -> StructType:
        """The Spark schema of the rows this source reads."""
        return spark_schema(self.arrow_schema())


class _Given(dict):
    """Options by their lower-case name here (Kafka's aliases too), and how the user spelled each."""

    spelled: dict[str, str]

    def name(self, key: str) -> str:
        return self.spelled.get(key, OPTIONS[key])


def _names(options: Mapping[str, str]) -> _Given:
    """The options by lower-case name, Kafka's aliases as their names here; unknown ones refused."""
    out = _Given()
    out.spelled = {}
    for key, value in dict(options).items():
        name = str(key).lower()
        why = KAFKA_ONLY.get("kafka." if name.startswith("kafka.") else name)
        if why is not None:
            raise DataSourceOptionError(str(key), f"is an option of Spark's Kafka source with no meaning here: {why}")
        own = _ALIASES.get(name, name)
        if own not in OPTIONS:
            raise DataSourceOptionError(
                str(key),
                f"is not an option of the rocketmq data source; it takes {sorted(OPTIONS.values())} "
                f"(and Kafka's {sorted(ALIASES)})",
            )
        if own in out:
            raise DataSourceOptionError(str(key), f"is {out.name(own)} again: give one of them")
        out[own] = value
        out.spelled[own] = str(key)
    return out


def _starting(o: _Given, group: str | None) -> OffsetSpec | None:
    given = [k for k in _STARTS if k in o]
    if len(given) > 1:
        raise DataSourceOptionError(
            o.name(given[1]), "give one of startingOffsets, startingTimestamp and startingOffsetsByTimestamp"
        )
    if not given:
        return None
    name, value = o.name(given[0]), o[given[0]]
    if given[0] == "startingtimestamp":
        return parse_timestamp(name, value)
    if given[0] == "startingoffsetsbytimestamp":
        return parse_timestamps(name, value)
    spec = parse_offsets(name, value)
    if spec.default == Position("group") and not group:
        raise DataSourceOptionError(name, 'group: starts at the offsets of the group option: set .option("group", ...)')
    return spec


def _positive(o: _Given, key: str) -> int | None:
    if key not in o:
        return None
    try:
        n = int(str(o[key]))
    except ValueError:
        n = 0
    if n < 1:
        raise DataSourceOptionError(o.name(key), "must be a positive integer", value=o[key])
    return n


def _flag(o: _Given, key: str, default: bool) -> bool:
    if key not in o:
        return default
    text = str(o[key]).strip().lower()
    if text not in ("true", "false"):
        raise DataSourceOptionError(o.name(key), "must be true or false", value=o[key])
    return text == "true"
