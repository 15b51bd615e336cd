"""``MessageStore``: the store's public face, RocketMQ's DefaultMessageStore on Delta tables.

>>> store = MessageStore.open("./data/store", spark)                      # doctest: +SKIP
>>> store.create_topic("TopicTest", queues=4)                             # doctest: +SKIP
>>> r = store.send(Message("TopicTest", tags="TagA", keys=["order-1"], body=b"hi"))  # doctest: +SKIP
>>> r.msg_id, r.queue_id, r.queue_offset                                  # doctest: +SKIP
('7F00000100002A9F0000000000000000', 2, 0)
>>> store.dispatch().consume_queue_rows                                   # doctest: +SKIP
1
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING, Any, Callable, Sequence

from storelib.commitlog import AppendResult, CommitLog
from storelib.config import StoreConfig
from storelib.dispatch import Dispatcher, DispatchResult
from storelib.errors import InputChangedError, InvalidQueueIdError, ReservedTopicError
from storelib.message import Message, SendResult
from storelib.producer import Producer
from storelib.groups import GroupConfig, GroupConfigTable
from storelib.filter.registry import Subscription, SubscriptionRegistry
from storelib.filter.selector import MessageSelector
from storelib.schema import (COMMITLOG, CONSUME_QUEUE, CONSUME_QUEUE_EXT, CONSUMER_OFFSET, EXT_SUMMARY, INDEX, SUBSCRIPTION,
                             SUBSCRIPTION_GROUP, TOPIC_CONFIG)
from storelib.tables import Prune, Table
from storelib.topics import (PERM_READ, PERM_WRITE, TopicConfig, TopicConfigTable, is_system_topic, validate_topic)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from storelib.query import MessageQuery, StoredMessage
    from storelib.read import FilterStats

__all__ = ["MessageStore"]

log = logging.getLogger(__name__)


class MessageStore:
    """A message store rooted at one folder (or object-store path) holding its Delta tables."""

    def __init__(self, root: str, spark: "SparkSession", config: StoreConfig):
        self.root = root.rstrip("/")
        self.spark = spark
        self.config = config
        props = dict(config.table_properties)
        self.tables = {spec.name: Table(f"{self.root}/{spec.name}", spec, props)
                       for spec in (COMMITLOG, CONSUME_QUEUE, CONSUME_QUEUE_EXT, EXT_SUMMARY, INDEX, TOPIC_CONFIG,
                                    SUBSCRIPTION, SUBSCRIPTION_GROUP, CONSUMER_OFFSET)}
        self.commitlog = CommitLog(self.tables["commitlog"], config)
        self.topics = TopicConfigTable(self.tables["topic_config"])
        self.registry = SubscriptionRegistry(self.tables["subscription"], config)
        self.groups = GroupConfigTable(self.tables["subscription_group"], config)
        self.producer = Producer(config)

    @classmethod
    def open(cls, root: str, spark: "SparkSession | None" = None, config: StoreConfig | None = None,
             **settings: Any) -> "MessageStore":
        """Open the store at ``root``, creating its tables where absent.

        Settings come from ``config``, else from ``spark.storelib.*`` Spark settings, with
        ``settings`` keywords on top (``enable_consume_queue_ext=True``, ...).
        """
        from storelib.session import get_spark

        spark = spark or get_spark()
        if config is None:
            conf = {k: v for k, v in spark.sparkContext.getConf().getAll() if k.startswith("spark.storelib.")}
            config = StoreConfig.from_mapping(conf, **settings)
        elif settings:
            config = config.replace(**settings)
        if "://" not in root:
            import os

            root = os.path.abspath(root)
        store = cls(root, spark, config)
        for table in store.tables.values():
            table.ensure()
        return store

    # ---- topics ----------------------------------------------------------------------------
    def create_topic(self, topic: str, queues: int | None = None, *, read_queues: int | None = None,
                     write_queues: int | None = None, perm: int = PERM_READ | PERM_WRITE, order: bool = False) -> TopicConfig:
        """Create or update a topic (``updateAndCreateTopic``); system topics are refused."""
        validate_topic(topic)
        if is_system_topic(topic):
            raise ReservedTopicError("topic", "is a system topic and cannot be created by users", value=topic)
        n = self.config.default_topic_queue_nums if queues is None else queues
        config = TopicConfig(topic, read_queues if read_queues is not None else n,
                             write_queues if write_queues is not None else n, perm, "SINGLE_TAG", order)
        for name in ("read_queue_nums", "write_queue_nums"):
            value = getattr(config, name)
            if not isinstance(value, int) or not 1 <= value <= 1024:
                raise InvalidQueueIdError(name, "must be an integer in 1..1024", value=value)
        self.topics.put(config)
        return config

    def topic_config(self, topic: str) -> TopicConfig:
        """The topic's configuration, or :class:`~storelib.errors.TopicNotFoundError`."""
        return self.topics.get(topic)

    # ---- sending ---------------------------------------------------------------------------
    def send(self, message: Message) -> SendResult:
        """Store one message; return where it went (``SEND_OK``)."""
        return self.send_batch([message])[0]

    def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        """Store many messages in one atomic commit: all are stored, or none (and an error says why)."""
        messages = list(messages)
        if not messages:
            return []
        encoded = self.producer.encode(messages, self.topics.all())
        result = self.commitlog.append(encoded)
        return [SendResult("SEND_OK", r["msg_id"], r["uniq_key"], r["topic"], r["queue_id"], r["queue_offset"],
                           r["physical_offset"]) for r in result.rows]

    def send_dataframe(self, df: "DataFrame", persist: bool | None = None) -> AppendResult:
        """Store a DataFrame of messages in one atomic commit, written by the executors.

        Columns: ``topic`` (required), ``body``, ``tags``, ``keys``, ``properties``, ``queue_id``,
        ``flag``, ``born_timestamp``, ``born_host`` (see :data:`storelib.producer.DATAFRAME_COLUMNS`).
        Every row is checked first; one bad row fails the whole send with a typed error and writes nothing.

        The DataFrame is read twice (sizes, then offsets and files). ``persist`` caches it between
        the reads; by default only a DataFrame whose plan Spark calls nondeterministic is cached,
        and one that still changes is cached and sent again.
        """
        from pyspark import StorageLevel

        if persist is None:
            persist = not _deterministic(df)
        encoded = self.producer.encode_dataframe(df, self.topics.all())
        if persist:
            encoded = encoded.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            return self.commitlog.append_dataframe(encoded, Producer.check_encoded)
        except InputChangedError:
            if persist:
                raise
            log.warning("send_dataframe: input changed between reads; sending again from a persisted copy")
            return self.send_dataframe(df, persist=True)
        finally:
            if persist:
                encoded.unpersist()

    # ---- dispatch --------------------------------------------------------------------------
    def dispatcher(self, fault: Callable[[str], None] | None = None) -> Dispatcher:
        targets = {"consume_queue": self.tables["consume_queue"], "consume_queue_ext": self.tables["consume_queue_ext"]}
        if self.config.message_index_enable:
            targets["index"] = self.tables["index"]
        return Dispatcher(self.spark, self.tables["commitlog"], targets, self.config, fault=fault,
                          registry=self.registry, summaries=self.tables["consume_queue_ext_summary"])

    def dispatch(self) -> DispatchResult:
        """Build consume queue, ext (with filter bitmaps) and index rows for everything sent since the last dispatch."""
        return self.dispatcher().run()

    def dispatch_progress(self) -> dict[str, int]:
        """How far each dispatched table has come, in commitlog offsets, and where the commitlog ends."""
        return self.dispatcher().progress()

    # ---- consumer groups -------------------------------------------------------------------------
    def create_group(self, group: str, **settings: Any) -> GroupConfig:
        """Create or update a consumer group's configuration (``updateSubscriptionGroup``).

        >>> store.create_group("GroupA", retry_max_times=3).retry_max_times       # doctest: +SKIP
        3
        """
        return self.groups.put(GroupConfig(group, **settings))

    def group_config(self, group: str) -> GroupConfig:
        """The group's configuration; created with RocketMQ's defaults on first use unless
        ``auto_create_subscription_group`` is off (then :class:`~storelib.errors.SubscriptionGroupNotFoundError`)."""
        return self.groups.find(group)

    # ---- subscriptions and filtered reads ---------------------------------------------------------
    def subscribe(self, group: str, topic: str, selector: "MessageSelector | str | None" = None) -> Subscription:
        """Register ``group``'s subscription to ``topic``: a tag expression (``'TagA || TagB'``) or a selector.

        A later call replaces the group's expression for the topic and bumps its version. SQL92
        subscriptions get Bloom bits in every message dispatched from now on.

        >>> store.subscribe("GroupA", "TopicTest", "TagA || TagB").version        # doctest: +SKIP
        1
        """
        self.topic_config(topic)
        return self.registry.register(group, topic, selector)

    def unsubscribe(self, group: str, topic: str) -> bool:
        """Remove ``group``'s subscription to ``topic``; False when it had none."""
        return self.registry.unregister(group, topic)

    def subscription(self, group: str, topic: str) -> Subscription:
        """The group's current subscription to the topic, or :class:`~storelib.errors.SubscriptionNotFoundError`."""
        return self.registry.get(group, topic)

    def read(self, topic: str, selector: "MessageSelector | str | None" = None, *, group: str | None = None) -> "DataFrame":
        """The topic's dispatched messages matching ``selector`` or ``group``'s subscription, as commitlog rows.

        Two stages, as the broker filters: consume queue units by tag code or Bloom bitmap (whole
        ext files skipped by their summaries), then the exact check on the commitlog row.

        >>> store.read("TopicTest", MessageSelector.by_sql("a between 0 and 3")).count()   # doctest: +SKIP
        4
        """
        from storelib.read import read_topic

        return read_topic(self, topic, selector, group)

    def filter_stats(self, group: str, topic: str) -> "FilterStats":
        """Units checked, skipped by file summaries, pruned by bitmap, and messages matched for the group now."""
        from storelib.read import filter_stats

        return filter_stats(self, topic, group=group)

    # ---- consumer offsets ----------------------------------------------------------------------

    # ---- retention -----------------------------------------------------------------------------

    # ---- upkeep ----------------------------------------------------------------------------
    def compact(self, full: bool = False) -> dict[str, tuple[int, int]]:
        """Merge small files of every table, keeping each file to one queue / key-hash range / offset run.

        ``full=True`` also rewrites large files, so each cluster ends as sorted files with disjoint
        ranges. Returns ``{table: (files removed, files added)}``. Safe beside producers and dispatch.
        """
        from storelib.compaction import compact_table

        from storelib.filter.summary import record_summaries, summarizer_for

        order = {"commitlog": "physical_offset"}
        summaries = self.tables["consume_queue_ext_summary"]
        hooks = {"consume_queue_ext": (summarizer_for(self.registry.all()),
                                       lambda files: record_summaries(summaries, files))}
        return {name: compact_table(self.spark, self.tables[name], target_file_size=self.config.target_file_size,
                                    order_by=order.get(name), full=full, summarize=hooks.get(name, (None, None))[0],
                                    before_commit=hooks.get(name, (None, None))[1])
                for name in ("commitlog", "consume_queue", "consume_queue_ext", "index")}

    def vacuum(self, retention_hours: int = 168) -> dict[str, int]:
        """Delete files no snapshot younger than ``retention_hours`` needs (Delta VACUUM); returns counts."""
        return {name: len(t.snapshot().vacuum(retention_hours=retention_hours, dry_run=False,
                                              enforce_retention_duration=retention_hours >= 168))
                for name, t in self.tables.items()}

    # ---- finding messages -------------------------------------------------------------------
    @functools.cached_property
    def query(self) -> "MessageQuery":
        """Point lookups over this store (see :mod:`storelib.query`)."""
        from storelib.query import MessageQuery

        return MessageQuery(self)

    def query_by_id(self, msg_id: str) -> "StoredMessage":
        """The message with this store message id, or :class:`~storelib.errors.MessageNotFoundError`.

        An id of another store host, or a malformed id, raises :class:`~storelib.errors.MessageIdError`.
        """
        return self.query.by_id(msg_id)

    def query_by_key(self, topic: str, key: str, max_num: int = 32, begin: object = None,
                     end: object = None) -> list["StoredMessage"]:
        """Messages of ``topic`` with ``key`` among their KEYS, newest first (``max_num`` capped at 64).

        ``begin`` and ``end`` bound the store time, inclusive: epoch milliseconds or aware datetimes.
        """
        return self.query.by_key(topic, key, max_num, begin, end)

    def query_by_unique_key(self, topic: str, uniq_key: str) -> "StoredMessage":
        """The message whose UNIQ_KEY is ``uniq_key`` (RocketMQ client's message id)."""
        return self.query.by_unique_key(topic, uniq_key)

    def search_offset(self, topic: str, queue_id: int, timestamp: object) -> int:
        """First queue offset stored at or after ``timestamp`` (``getOffsetInQueueByTime``)."""
        return self.query.search_offset(topic, queue_id, timestamp)

    # ---- reading ---------------------------------------------------------------------------
    def max_offset(self) -> int:
        """The next commitlog offset (RocketMQ's ``getMaxPhyOffset``)."""
        return self.commitlog.next_offset()

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        """One past the last dispatched queue offset of (topic, queue), 0 for none (``getMaxOffsetInQueue``).

        Read from the consume queue files' statistics: no data file is opened.
        """
        return self.query.max_queue_offset(topic, queue_id)

    def table(self, name: str, prune: Prune | None = None) -> "DataFrame":
        """A table's current rows as a DataFrame (files skipped by ``prune``'s statistics)."""
        return self.tables[name].read(self.spark, prune=prune)

    def messages(self, topic: str | None = None) -> "DataFrame":
        """Commitlog rows, optionally of one topic."""
        from pyspark.sql import functions as F

        df = self.table("commitlog", Prune(equal={"topic": topic}) if topic else None)
        return df.where(F.col("topic") == topic) if topic else df

    def consume_queue(self, topic: str, queue_id: int, begin: int = 0, end: int | None = None) -> "DataFrame":
        """Consume queue rows of one queue with ``begin <= queue_offset < end``, reading only files that can hold them."""
        from pyspark.sql import functions as F

        hi = end - 1 if end is not None else 2**63 - 1
        df = self.table("consume_queue", Prune(equal={"topic": topic, "queue_id": queue_id},
                                               between={"queue_offset": (begin, hi)}))
        return df.where((F.col("topic") == topic) & (F.col("queue_id") == queue_id)
                        & (F.col("queue_offset") >= begin) & (F.col("queue_offset") <= hi))


def _deterministic(df: "DataFrame") -> bool:
    """Whether Spark calls the DataFrame's plan deterministic (False where it cannot tell)."""
    try:
        return bool(df._jdf.queryExecution().analyzed().deterministic())
    except Exception:  # Spark Connect and other sessions without the JVM plan
        return False
