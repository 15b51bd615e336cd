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
from storelib.errors import InvalidQueueIdError, ReservedTopicError
from storelib.message import Message, SendResult
from storelib.producer import Producer
from storelib.groups import GroupConfig, GroupConfigTable
from storelib.long_polling import PullRequestHoldService
from storelib.filter.registry import Subscription, SubscriptionRegistry
from storelib.filter.selector import MessageSelector
from storelib.schema import (COMMITLOG, CONSUME_QUEUE, CONSUME_QUEUE_EXT, CONSUMER_OFFSET, EXT_SUMMARY, INDEX, SUBSCRIPTION,
                             SUBSCRIPTION_GROUP, TOPIC_CONFIG)
from storelib.tables import Prune, Table
from storelib.topics import (PERM_READ, PERM_WRITE, TopicConfig, TopicConfigTable, is_system_topic, retry_topic,
                             validate_topic)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from storelib.get_message import GetMessageResult
    from storelib.offsets import ConsumerOffsetTable
    from storelib.pull import PullMessageProcessor, PullResult
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
        self.hold_service = PullRequestHoldService()

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

    def send_dataframe(self, df: "DataFrame") -> AppendResult:
        """Store a DataFrame of messages in one atomic commit, written by the executors.

        Columns: ``topic`` (required), ``body``, ``tags``, ``keys``, ``properties``, ``queue_id``,
        ``flag``, ``born_timestamp``, ``born_host`` (see :data:`storelib.producer.DATAFRAME_COLUMNS`).
        Every row is checked; one bad row fails the whole send with a typed error and writes nothing.
        The DataFrame is read once, so it need not be deterministic or persisted.
        """
        encoded, frame = self.producer.encode_dataframe(df, self.topics.all())
        return self.commitlog.append_dataframe(encoded, frame, Producer.refuse)

    def send_back(self, msg: "StoredMessage", group: str, delay_level: int = 0,
                  max_reconsume_times: int | None = None) -> SendResult:
        """A consumption failed: store ``msg`` again for ``group`` (RocketMQ's ``consumerSendMsgBack``).

        Delayed for ``%RETRY%group`` (``SCHEDULE_TOPIC_XXXX``, level ``3 + reconsume_times`` when
        ``delay_level`` is 0), or to ``%DLQ%group`` after ``max_reconsume_times`` (the group's
        ``retry_max_times``) or with a negative ``delay_level``. Returns where the copy was stored;
        see :mod:`storelib.retry`.

        >>> store.send_back(store.query_by_id(r.msg_id), "GroupA").topic   # doctest: +SKIP
        'SCHEDULE_TOPIC_XXXX'
        """
        from storelib.retry import send_back

        return send_back(self, msg, group, delay_level, max_reconsume_times)

    # ---- dispatch --------------------------------------------------------------------------
    def dispatcher(self, fault: Callable[[str], None] | None = None) -> Dispatcher:
        # The ext rows land before the consume queue rows that point at them (putMessagePositionInfoWrapper).
        targets = {"consume_queue_ext": self.tables["consume_queue_ext"], "consume_queue": self.tables["consume_queue"]}
        if self.config.message_index_enable:
            targets["index"] = self.tables["index"]
        return Dispatcher(self.spark, self.tables["commitlog"], targets, self.config, fault=fault,
                          registry=self.registry, summaries=self.tables["consume_queue_ext_summary"])

    def dispatch(self) -> DispatchResult:
        """Build consume queue, ext (with filter bitmaps) and index rows for everything sent since the last dispatch.

        Pulls held in this process (long polling) are woken when it is done.
        """
        try:
            return self.dispatcher().run()
        finally:
            self.hold_service.notify_message_arriving()

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
        subscriptions get Bloom bits in every message dispatched from now on. As a consumer's
        heartbeat does, it also creates the group's configuration (unless groups must be created
        first, ``auto_create_subscription_group=false``) and its ``%RETRY%`` topic.

        >>> store.subscribe("GroupA", "TopicTest", "TagA || TagB").version        # doctest: +SKIP
        1
        """
        from storelib.retry import ensure_topic

        self.topic_config(topic)
        self.registry.check(topic, MessageSelector.of(selector))
        group_config = self.groups.find(group)  # a consumer's heartbeat: the group, and its retry topic
        subscription = self.registry.register(group, topic, selector)
        if group_config.retry_queue_nums > 0:
            ensure_topic(self, retry_topic(group), group_config.retry_queue_nums)
        return subscription

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

    # ---- consuming ---------------------------------------------------------------------------------
    def pull(self, group: str, topic: str, queue_id: int, offset: int, max_msgs: int = 32, *,
             selector: "MessageSelector | str | None" = None, sub_version: int | None = None,
             suspend_timeout_ms: int = 0, commit_offset: int | None = None) -> "PullResult":
        """Pull up to ``max_msgs`` messages of one queue from ``offset``, as a RocketMQ consumer pulls.

        The group's registered subscription filters the queue, unless ``selector`` brings the pull's
        own (a tag expression or a :class:`MessageSelector`). ``suspend_timeout_ms`` holds a pull that
        finds nothing new until a matching message arrives (long polling); ``commit_offset`` commits
        that offset for the group first (the commit-offset flag). Refusals are typed errors carrying
        RocketMQ's response codes; see :mod:`storelib.pull` for statuses and offsets.

        >>> r = store.pull("GroupA", "TopicTest", queue_id=0, offset=0, max_msgs=32)        # doctest: +SKIP
        >>> r.status, r.next_begin_offset, r.min_offset, r.max_offset, len(r.messages)       # doctest: +SKIP
        (<PullStatus.FOUND: 'FOUND'>, 32, 0, 1000, 32)
        """
        from storelib.pull import PullRequest

        request = PullRequest(group, topic, queue_id, offset, max_msgs,
                              None if selector is None else MessageSelector.of(selector), sub_version,
                              suspend_timeout_ms, commit_offset)
        return self.pull_processor.pull(request)

    @functools.cached_property
    def pull_processor(self) -> "PullMessageProcessor":
        from storelib.pull import PullMessageProcessor

        return PullMessageProcessor(self)

    def get_message(self, group: str, topic: str, queue_id: int, offset: int, max_msgs: int = 32,
                    selector: "MessageSelector | str | None" = None) -> "GetMessageResult":
        """The store's own answer (``DefaultMessageStore.getMessage``): no checks, no client re-check.

        >>> store.get_message("GroupA", "TopicTest", 0, 0).status                   # doctest: +SKIP
        <GetMessageStatus.FOUND: 'FOUND'>
        """
        from storelib.get_message import get_message
        from storelib.pull import PullFilter
        from storelib.filter.message_filter import MessageFilter

        message_filter = None
        if selector is not None:
            message_filter = PullFilter(MessageFilter(topic, MessageSelector.of(selector)))
        return get_message(self, group, topic, queue_id, offset, max_msgs, message_filter)

    # ---- consumer offsets ----------------------------------------------------------------------
    @functools.cached_property
    def offsets(self) -> "ConsumerOffsetTable":
        """The ``consumer_offset`` table (see :mod:`storelib.offsets`)."""
        from storelib.offsets import ConsumerOffsetTable

        return ConsumerOffsetTable(self.tables["consumer_offset"], self.config)

    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit the next queue offset ``group`` will consume from the queue (``commitOffset``).

        The last commit wins, also when it moves the offset backwards (a reset). Bad input raises a
        typed error and writes nothing.

        >>> store.commit_offset("GroupA", "TopicTest", 0, 42)                     # doctest: +SKIP
        >>> store.committed_offset("GroupA", "TopicTest", 0)                      # doctest: +SKIP
        42
        """
        self.offsets.commit(group, topic, queue_id, offset)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The group's committed offset of the queue, -1 when it has none (``queryOffset``); no Spark job.

        >>> store.committed_offset("GroupA", "TopicTest", 3)                      # doctest: +SKIP
        -1
        """
        return self.offsets.query(group, topic, queue_id)

    def consumer_lag(self, group: str) -> "DataFrame":
        """Per queue the group reads: ``topic, queue_id, max_offset, committed_offset, lag`` (``getConsumeStats``).

        Queues of the group's subscribed topics, of its ``%RETRY%`` topic where it exists, and of
        topics it committed offsets for; ``committed_offset`` is 0 where none was committed.

        >>> store.consumer_lag("GroupA").show()                                   # doctest: +SKIP
        +---------+--------+----------+----------------+---+
        |    topic|queue_id|max_offset|committed_offset|lag|
        +---------+--------+----------+----------------+---+
        |TopicTest|       0|         3|               2|  1|
        ...
        """
        from storelib.offsets import consumer_lag

        return consumer_lag(self, group)

    # ---- retention -----------------------------------------------------------------------------
    def min_offset(self) -> int:
        """The smallest commitlog offset still stored (RocketMQ's ``getMinPhyOffset``); 0 for an empty store.

        Read from the commitlog files' statistics: no data file is opened.

        >>> store.min_offset()                                                     # doctest: +SKIP
        3024
        """
        from storelib.retention import min_physical_offset

        return min_physical_offset(self.tables["commitlog"].view().actions)

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        """The first queue offset of (topic, queue) still served (``getMinOffsetInQueue``); 0 for an empty queue.

        Retention moves it past units whose messages left the commitlog, up to the queue's max
        offset when none is left. Read from the consume queue's log: no data file is opened.

        >>> store.min_queue_offset("TopicTest", 0)                                 # doctest: +SKIP
        3
        """
        from storelib.retention import min_queue_marker, queue_min_offset

        marker = min_queue_marker(topic, queue_id)
        view = self.tables["consume_queue"].view(markers=[marker])
        return queue_min_offset(view.markers.get(marker), view.actions, topic, queue_id)

    def clean_commitlog(self, reserved_hours: float | None = None, now: object = None) -> int:
        """Remove expired commitlog files, oldest first (``CleanCommitLogService``); returns files removed.

        A file expires ``reserved_hours`` (default ``file_reserved_time``, 72) after its newest
        message; removal stops at the first unexpired file, and never takes the newest file or
        anything not yet dispatched. ``now`` is epoch ms or an aware datetime (default: the clock).

        >>> store.clean_commitlog(now=time.time() * 1000 + 73 * 3_600_000)         # doctest: +SKIP
        3
        """
        from storelib.retention import clean_commitlog

        return clean_commitlog(self, reserved_hours, now)

    def clean_consume_queue(self) -> dict[str, int]:
        """Remove consume queue, ext and index files wholly below :meth:`min_offset` and move each
        queue's min offset (``CleanConsumeQueueService``); returns files removed per table.

        >>> store.clean_consume_queue()                                            # doctest: +SKIP
        {'consume_queue': 8, 'consume_queue_ext': 8, 'index': 6}
        """
        from storelib.retention import clean_consume_queue

        return clean_consume_queue(self)

    def delete_expired_files(self, reserved_hours: float | None = None, now: object = None) -> dict[str, int]:
        """Both retention steps in RocketMQ's order: the commitlog, then what pointed into it.

        Returns files removed per table. Safe to run again after a crash anywhere: each step
        finishes what an earlier run left undone and changes nothing when there is nothing to do.

        >>> store.delete_expired_files(now=time.time() * 1000 + 73 * 3_600_000)    # doctest: +SKIP
        {'commitlog': 3, 'consume_queue': 8, 'consume_queue_ext': 8, 'index': 6}
        """
        removed = {"commitlog": self.clean_commitlog(reserved_hours, now)}
        removed.update(self.clean_consume_queue())
        return removed

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
        """Delete files no snapshot younger than ``retention_hours`` needs (Delta VACUUM), and what
        DataFrame sends that died left staged (older than ``retention_hours``, at least an hour); returns counts."""
        counts = {name: len(t.snapshot().vacuum(retention_hours=retention_hours, dry_run=False,
                                                enforce_retention_duration=retention_hours >= 168))
                  for name, t in self.tables.items()}
        counts["staging"] = self.commitlog.clean_staging(max(1, retention_hours))
        return counts

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
