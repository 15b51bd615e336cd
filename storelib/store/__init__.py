"""``MessageStore``: the store's one public handle, RocketMQ's DefaultMessageStore on Delta tables.

It holds the store's :class:`~storelib.context.StoreContext` and delegates every call to the service
that does the work; an error of Spark, pyarrow, deltalake or the file system under a call leaves as a
:class:`~storelib.model.errors.StoreError` (``ExternalError``, ``StoreIOError``), the original chained.

>>> store = MessageStore.create(tmp + "/quickstart", spark)
>>> store.create_topic("TopicTest", queues=4).write_queue_nums
4
>>> r = store.send(Message("TopicTest", tags="TagA", keys=["order-1"], body=b"hi"))
>>> r.msg_id, r.queue_offset
('7F00000100002A9F0000000000000000', 0)
>>> store.dispatch().consume_queue_rows
1
>>> store.query_by_key("TopicTest", "order-1")[0].body
b'hi'
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Sequence

from storelib.consume.get_message import GetMessageResult
from storelib.consume.offsets import commit_offset, consumer_lag
from storelib.consume.pull import PullMessageProcessor, PullRequest, PullResult, get_message_by_selector
from storelib.consume.retry import send_back
from storelib.consume.subscription import subscribe
from storelib.context import StoreContext
from storelib.delta import location
from storelib.dispatch.reput import Dispatcher
from storelib.dispatch.result import DispatchResult
from storelib.filter.selector import MessageSelector
from storelib.filter.subscription import Subscription
from storelib.maintenance.integrity import check_store, store_problems
from storelib.maintenance.lost_tail import Repaired, repair_lost_tail
from storelib.model.config import StoreConfig
from storelib.model.errors import translate_methods
from storelib.model.group import GroupConfig
from storelib.model.message import Message, SendResult, StoredMessage
from storelib.model.timestamps import Timestamp
from storelib.model.topic import PERM_READ, PERM_WRITE, UNCHANGED, TopicConfig
from storelib.query.filter_stats import FilterStats, filter_stats
from storelib.query.lookup import MessageQuery
from storelib.query.read import ReadExplain, explain_read, read_topic
from storelib.schedule.check import CheckResult, check_transactions, register_checker
from storelib.schedule.deliver import DeliveryResult, deliver, recall
from storelib.schedule.transaction import TransactionSendResult, TransactionState, end_transaction, send_in_transaction
from storelib.send.group_commit import GroupCommitProducer
from storelib.session import ensure_session, get_spark, session_source
from storelib.storage.commitlog import AppendResult
from storelib.store.lookups import Lookups
from storelib.store.upkeep import Upkeep

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["MessageStore"]


@translate_methods
class MessageStore(Lookups, Upkeep):
    """A message store rooted at one folder (or object-store path) holding its Delta tables.

    Open one with :meth:`open`. ``root``, ``spark`` and ``config`` say where it is, which session it
    uses and with which settings; :attr:`context` is what its services work with.

    >>> store.root.endswith("/store"), store.config.store_host, store.context.tables.commitlog.spec.name
    (True, '127.0.0.1:10911', 'commitlog')
    """

    def __init__(self, context: StoreContext):
        self._ctx = context
        self._pulls = PullMessageProcessor(context)
        self._query = MessageQuery(context)

    @classmethod
    def open(
        cls,
        root: str,
        spark: "SparkSession | None" = None,
        config: StoreConfig | None = None,
        *,
        create: bool = False,
        storage_options: "dict[str, str] | None" = None,
        **settings: Any,
    ) -> "MessageStore":
        """Open the store at ``root``; a path holding no store raises
        :class:`~storelib.model.errors.StoreNotFoundError` (``create=True``, or :meth:`create`, makes one).

        ``root`` is a folder or an object-store URI (``s3://bucket/store``); ``storage_options`` (deltalake's
        keys: ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...) reach it, over ``spark.storelib.storage.*``
        settings and the standard environment variables (:mod:`storelib.delta.location`).

        Settings come from ``config``, else from ``spark.storelib.*`` Spark settings, with
        ``settings`` keywords on top (``enable_consume_queue_ext=True``, ...); an unknown setting
        raises :class:`~storelib.model.errors.ConfigError`. A session made elsewhere is given what the
        store needs; with none given or active, Spark starts when first needed
        (:func:`~storelib.session.session_source`).

        >>> MessageStore.open(tmp + "/other", spark, create=True, max_message_size=1024).config.max_message_size
        1024
        >>> MessageStore.open(tmp + "/typo", spark)                 # doctest: +ELLIPSIS
        Traceback (most recent call last):
        storelib.model.errors.StoreNotFoundError: root: no store at .../typo: ...
        """

        source, spark_conf = session_source(spark)
        context = StoreContext.open(
            root, source, config, create=create, spark_conf=spark_conf, storage_options=storage_options, **settings
        )
        if context.spark_started and not location.is_local(context.root):
            ensure_session(context.spark)  # the data source's workers get the root's options too
        check_store(context)
        return cls(context)

    @staticmethod
    def verify(
        root: str,
        spark: "SparkSession | None" = None,
        *,
        full: bool = False,
        storage_options: "dict[str, str] | None" = None,
    ) -> list[str]:
        """Every problem of the store at ``root`` (``[]``: sound), also of one :meth:`open` refuses;
        ``full`` reads every commitlog offset too (:mod:`storelib.maintenance.integrity`).

        >>> MessageStore.verify(store.root, spark, full=True)
        []
        """

        root = location.attach(root, storage_options)
        return store_problems(StoreContext.build(root, spark or get_spark, StoreConfig()), full=full)

    @staticmethod
    def repair(
        root: str,
        spark: "SparkSession | None" = None,
        *,
        storage_options: "dict[str, str] | None" = None,
    ) -> Repaired:
        """Commit back the commitlog's lost tail (data files of sends whose log entries were lost), after checking
        their messages; also on a store :meth:`open` refuses for it (:mod:`storelib.maintenance.lost_tail`).

        >>> MessageStore.repair(store.root, spark).lines()
        []
        """
        root = location.attach(root, storage_options)
        return repair_lost_tail(StoreContext.build(root, spark or get_spark, StoreConfig()).tables.commitlog)

    @classmethod
    def create(
        cls,
        root: str,
        spark: "SparkSession | None" = None,
        config: StoreConfig | None = None,
        *,
        storage_options: "dict[str, str] | None" = None,
        **settings: Any,
    ) -> "MessageStore":
        """Create the store at ``root`` (its tables), or open it where it exists.

        >>> MessageStore.create(tmp + "/new", spark).dispatch_progress()["commitlog"]
        0
        """
        return cls.open(root, spark, config, create=True, storage_options=storage_options, **settings)

    def close(self) -> None:
        """Release what this handle holds (warm table snapshots, held pulls); the store stays on disk.
        A handle is also closed by ``with`` and, if still open, before the interpreter exits.

        >>> with MessageStore.open(store.root, spark) as s:
        ...     s.max_offset() == store.max_offset()
        True
        """
        self._ctx.close()

    def __enter__(self) -> "MessageStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def root(self) -> str:
        """The store's folder or URI; each table is a folder under it."""
        return self._ctx.root

    @property
    def spark(self) -> "SparkSession":
        return self._ctx.spark

    @property
    def config(self) -> StoreConfig:
        return self._ctx.config

    @property
    def context(self) -> StoreContext:
        """The tables and services this handle delegates to (for jobs, tests and extensions)."""
        return self._ctx

    # ---- topics ----------------------------------------------------------------------------
    def create_topic(
        self,
        topic: str,
        queues: int | None = None,
        *,
        read_queues: int | None = None,
        write_queues: int | None = None,
        perm: int = PERM_READ | PERM_WRITE,
        order: bool = False,
        cluster_by: Sequence[str] | None = None,
        retention_ms: Any = UNCHANGED,
    ) -> TopicConfig:
        """Create or update a topic (``updateAndCreateTopic``); system topics are refused.

        ``cluster_by``: the clustering keys :meth:`compact` sorts the topic's settled messages by,
        ``TAGS`` and/or property names, at most 4 (default ``["TAGS"]``). ``retention_ms``: how long
        its messages are kept (see :meth:`expire_topics`; None: only ``file_reserved_time``). An update
        without one keeps the topic's current value.

        >>> store.create_topic("Orders", 8, perm=PERM_READ).writable
        False
        >>> store.create_topic("Orders", 8, cluster_by=["TAGS", "region"], retention_ms=86_400_000).retention_ms
        86400000
        """
        n = self.config.default_topic_queue_nums if queues is None else queues
        return self._ctx.topics.create(
            topic,
            n if read_queues is None else read_queues,
            n if write_queues is None else write_queues,
            perm,
            order,
            cluster_by,
            retention_ms,
        )

    def topic_config(self, topic: str) -> TopicConfig:
        """The topic's configuration, or :class:`~storelib.model.errors.TopicNotFoundError`.

        >>> store.topic_config("TopicTest").read_queue_nums
        4
        """
        return self._ctx.topics.get(topic)

    def delete_topic(self, topic: str) -> TopicConfig:
        """Remove a topic's configuration (``deleteTopic``); its messages stay until retention removes them.

        >>> store.delete_topic(store.create_topic("Gone", 1).topic).topic
        'Gone'
        """
        return self._ctx.topics.delete(topic)

    # ---- sending ---------------------------------------------------------------------------
    def send(self, message: Message) -> SendResult:
        """Store one message; return where it went (``SEND_OK``). Concurrent sends share commits (:meth:`producer`).

        >>> store.send(Message("TopicTest", body=b"x", queue_id=1)).queue_id
        1
        """
        return self._ctx.sends.send(message)

    def send_async(self, message: Message) -> "Future[SendResult]":
        """Check ``message`` now (a bad one raises here) and queue it on the store's producer: a future
        of its :class:`SendResult`, done when the commit holding it lands (RocketMQ's async send).
        Keeping many sends in flight lets each commit carry many messages.

        >>> futures = [store.send_async(Message("TopicTest", body=b"a", queue_id=1)) for _ in range(2)]
        >>> [f.result().send_status for f in futures]
        ['SEND_OK', 'SEND_OK']
        """
        return self._ctx.sends.send_async(message)

    def producer(self, linger_ms: int = 0, max_batch: int = 1000) -> GroupCommitProducer:
        """A thread-safe producer: ``send``, ``send_async`` (a future), ``flush``, ``close``; concurrent sends
        share one commit (group commit), a group waiting up to ``linger_ms`` for more, at most ``max_batch``.

        >>> with store.producer(linger_ms=5) as p:
        ...     [f.result().send_status for f in [p.send_async(Message("TopicTest")) for _ in range(3)]]
        ['SEND_OK', 'SEND_OK', 'SEND_OK']
        """
        return self._ctx.producer.group_commit(
            self._ctx.commitlog, self._ctx.topics.all, linger_ms=linger_ms, max_batch=max_batch
        )

    def send_batch(self, messages: Sequence[Message]) -> list[SendResult]:
        """Store many messages in one atomic commit: all are stored, or none (and an error says why).

        >>> [r.send_status for r in store.send_batch([Message("TopicTest"), Message("TopicTest")])]
        ['SEND_OK', 'SEND_OK']
        """
        return self._ctx.producer.send_batch(self._ctx.commitlog, self._ctx.topics.all(), messages)

    def send_dataframe(self, df: "DataFrame") -> AppendResult:
        """Store a DataFrame of messages in one atomic commit, written by the executors.

        Columns: see :data:`storelib.send.producer.DATAFRAME_COLUMNS` (``topic`` required). One bad row
        fails the whole send with a typed error and writes nothing. The DataFrame is read once.

        >>> store.send_dataframe(spark.createDataFrame([("TopicTest", "a")], "topic string, tags string")).count
        1
        """
        return self._ctx.producer.send_dataframe(self._ctx.commitlog, self._ctx.topics.all(), df)

    def send_back(
        self, msg: StoredMessage, group: str, delay_level: int = 0, *, max_reconsume_times: int | None = None
    ) -> SendResult:
        """A consumption failed: store ``msg`` again for ``group`` (RocketMQ's ``consumerSendMsgBack``).

        Delayed for ``%RETRY%group`` (``SCHEDULE_TOPIC_XXXX``, level ``3 + reconsume_times`` when
        ``delay_level`` is 0), or to ``%DLQ%group`` after ``max_reconsume_times`` (the group's
        ``retry_max_times``) or with a negative ``delay_level``. See :mod:`storelib.consume.retry`.

        >>> store.send_back(store.query_by_id(r.msg_id), "GroupA").topic
        'SCHEDULE_TOPIC_XXXX'
        """
        return send_back(self._ctx, msg, group, delay_level, max_reconsume_times)

    # ---- delayed messages --------------------------------------------------------------------
    def deliver_delayed(self, now: Timestamp | None = None) -> DeliveryResult:
        """Move every delayed, timer and sent-back message due at ``now`` (epoch ms or an aware
        datetime; default the clock) to its real topic, exactly once (see :mod:`storelib.schedule.deliver`).

        >>> store.deliver_delayed().delivered
        0
        """
        return deliver(self._ctx, now)

    def recall(self, msg_id: str) -> int:
        """Recall a timer message before its deliver time, by the store id its send returned; returns that time.

        >>> import time
        >>> at = time.time_ns() // 10**6 + 60_000
        >>> store.recall(store.send(Message("TopicTest", deliver_time_ms=at)).msg_id) == at
        True
        """
        return recall(self._ctx, msg_id)

    # ---- transactions ------------------------------------------------------------------------
    def send_in_transaction(
        self, message: Message, local_transaction: Any, arg: Any = None, *, producer_group: str = "DEFAULT_PRODUCER"
    ) -> TransactionSendResult:
        """Send a half message, run ``local_transaction(message, arg)``, and end the transaction with
        its answer (see :mod:`storelib.schedule.transaction`); UNKNOW or an exception leaves it to the check-back.

        >>> store.send_in_transaction(Message("TopicTest"), lambda m, a: "COMMIT_MESSAGE").local_state.name
        'COMMIT_MESSAGE'
        """
        return send_in_transaction(self._ctx, message, local_transaction, producer_group, arg)

    def end_transaction(self, transaction_id: str, state: TransactionState | str) -> int | None:
        """Commit or roll back a pending transaction (UNKNOW changes nothing); ending one twice is an error.

        >>> r = store.send_in_transaction(Message("TopicTest"), lambda m, a: TransactionState.UNKNOW)
        >>> store.end_transaction(r.transaction_id, TransactionState.ROLLBACK) > 0
        True
        """
        return end_transaction(self._ctx, transaction_id, state)

    def register_transaction_checker(self, producer_group: str, checker: str) -> None:
        """Register the check-back callable of a producer group by import path (``'pkg.module:function'``).

        >>> store.register_transaction_checker("PG", "storelib.schedule.check:commit_all")
        """
        register_checker(self._ctx, producer_group, checker)

    def check_transactions(self, now: Timestamp | None = None) -> CheckResult:
        """Ask the producer groups' checkers about half messages pending past their timeout, and apply
        the answers (see :mod:`storelib.schedule.check`).

        >>> store.check_transactions().checked
        0
        """
        return check_transactions(self._ctx, now)

    # ---- dispatch --------------------------------------------------------------------------
    def dispatch(self) -> DispatchResult:
        """Build consume queue, ext (with filter bitmaps) and index rows for everything sent since
        the last dispatch. Pulls held in this process (long polling) are woken when it is done.

        >>> store.dispatch().to_offset == store.max_offset()
        True
        """
        return Dispatcher.of(self._ctx).run()

    def dispatcher(self) -> Dispatcher:
        """The store's dispatcher: ``run()`` once, or ``run(follow=True, stop=event)`` to keep dispatching as
        messages arrive (a follower, as ``storelib dispatch --follow`` runs it).

        >>> store.dispatcher().progress()["commitlog"] == store.max_offset()
        True
        """
        return Dispatcher.of(self._ctx)

    def dispatch_progress(self) -> dict[str, int]:
        """How far each dispatched table has come, in commitlog offsets, and where the commitlog ends.

        >>> len(set(store.dispatch_progress().values()))      # all caught up
        1
        """
        return Dispatcher.of(self._ctx).progress()

    # ---- consumer groups -------------------------------------------------------------------------
    def create_group(self, group: str, **settings: Any) -> GroupConfig:
        """Create or update a consumer group's configuration (``updateSubscriptionGroup``).

        >>> store.create_group("GroupR", retry_max_times=3).retry_max_times
        3
        """
        return self._ctx.groups.put(GroupConfig(group, **settings))

    def group_config(self, group: str) -> GroupConfig:
        """The group's configuration; created with RocketMQ's defaults on first use unless
        ``auto_create_subscription_group`` is off (then :class:`~storelib.model.errors.SubscriptionGroupNotFoundError`).

        >>> store.group_config("GroupA").retry_max_times
        16
        """
        return self._ctx.groups.find(group)

    # ---- subscriptions and filtered reads ---------------------------------------------------------
    def subscribe(self, group: str, topic: str, selector: MessageSelector | str | None = None) -> Subscription:
        """Register ``group``'s subscription to ``topic``: a tag expression (``'TagA || TagB'``) or a selector.

        A later call replaces the expression and bumps its version; SQL92 subscriptions get Bloom bits in
        messages dispatched from now on. Like a heartbeat, it creates the group (unless
        ``auto_create_subscription_group=false``) and its ``%RETRY%`` topic.

        >>> store.subscribe("GroupA", "TopicTest", "TagA || TagB").selector.expression
        'TagA || TagB'
        """
        return subscribe(self._ctx, group, topic, selector)

    def unsubscribe(self, group: str, topic: str) -> bool:
        """Remove ``group``'s subscription to ``topic``; False when it had none.

        >>> store.unsubscribe("GroupNone", "TopicTest")
        False
        """
        return self._ctx.registry.unregister(group, topic)

    def subscription(self, group: str, topic: str) -> Subscription:
        """The group's current subscription to the topic, or :class:`~storelib.model.errors.SubscriptionNotFoundError`.

        >>> store.subscription("GroupA", "TopicTest").is_sql92
        False
        """
        return self._ctx.registry.get(group, topic)

    def read(
        self, topic: str, selector: MessageSelector | str | None = None, *, group: str | None = None
    ) -> "DataFrame":
        """The topic's dispatched messages matching ``selector`` or ``group``'s subscription, as commitlog rows.

        Row groups of clustered data and fresh files that the summaries (tag codes, Bloom bitmaps)
        rule out are never read; every message read gets the exact check. Where pruning would not
        pay, the plain scan runs (see :meth:`explain_read`).

        >>> store.read("TopicTest", MessageSelector.by_tag("TagA")).count()
        1
        """
        return read_topic(self._ctx, topic, selector, group)

    def explain_read(
        self, topic: str, selector: MessageSelector | str | None = None, *, group: str | None = None
    ) -> ReadExplain:
        """How :meth:`read` would read: files and row groups considered, skipped by statistics or by
        bitmap summaries, the estimate and the choice (prune or plain scan); ``print`` it to read it.

        >>> store.explain_read("TopicTest", group="GroupA").choice
        'scan'
        """
        return explain_read(self._ctx, topic, selector, group)

    def filter_stats(self, group: str, topic: str) -> FilterStats:
        """Units checked, skipped by file summaries, pruned by bitmap, and messages matched for the group now.

        >>> store.filter_stats("GroupA", "TopicTest").matched
        1
        """
        return filter_stats(self._ctx, topic, group=group)

    # ---- consuming ---------------------------------------------------------------------------------
    def pull(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int = 32,
        *,
        selector: MessageSelector | str | None = None,
        sub_version: int | None = None,
        suspend_timeout_ms: int = 0,
        commit_offset: int | None = None,
    ) -> PullResult:
        """Pull up to ``max_msgs`` messages of one queue from ``offset``, as a RocketMQ consumer pulls.

        The group's registered subscription filters the queue, unless ``selector`` brings the pull's
        own (a tag expression or a :class:`MessageSelector`). ``suspend_timeout_ms`` holds a pull that
        finds nothing new until a matching message arrives (long polling); ``commit_offset`` commits
        that offset for the group first (the commit-offset flag). Refusals are typed errors carrying
        RocketMQ's response codes; see :mod:`storelib.consume.pull` for statuses and offsets.

        >>> p = store.pull("GroupA", "TopicTest", queue_id=r.queue_id, offset=0)
        >>> p.status, p.next_begin_offset, [m.tags for m in p.messages]
        (<PullStatus.FOUND: 'FOUND'>, 1, ['TagA'])
        """
        request = PullRequest(
            group,
            topic,
            queue_id,
            offset,
            max_msgs,
            None if selector is None else MessageSelector.of(selector),
            sub_version,
            suspend_timeout_ms,
            commit_offset,
        )
        return self._pulls.pull(request)

    def get_message(
        self,
        group: str,
        topic: str,
        queue_id: int,
        offset: int,
        max_msgs: int = 32,
        *,
        selector: MessageSelector | str | None = None,
    ) -> GetMessageResult:
        """The store's own answer (``DefaultMessageStore.getMessage``): no checks, no client re-check.

        >>> store.get_message("GroupA", "TopicTest", r.queue_id, 0).status
        <GetMessageStatus.FOUND: 'FOUND'>
        """
        return get_message_by_selector(self._ctx, group, topic, queue_id, offset, max_msgs, selector)

    # ---- consumer offsets ----------------------------------------------------------------------
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        """Commit the next queue offset ``group`` will consume from the queue (``commitOffset``).

        The last commit wins, also when it moves the offset backwards (a reset). Bad input raises a
        typed error and writes nothing.

        >>> store.commit_offset("GroupA", "TopicTest", 0, 42)
        """
        commit_offset(self._ctx, group, topic, queue_id, offset)

    def committed_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The group's committed offset of the queue, -1 when it has none (``queryOffset``); no Spark job.

        >>> store.commit_offset("GroupA", "TopicTest", 0, 42)
        >>> store.committed_offset("GroupA", "TopicTest", 0), store.committed_offset("GroupA", "TopicTest", 3)
        (42, -1)
        """
        return self._ctx.offsets.query(group, topic, queue_id)

    def consumer_lag(self, group: str) -> "DataFrame":
        """Per queue the group reads: ``topic, queue_id, max_offset, committed_offset, lag`` (``getConsumeStats``).

        Queues of the group's subscribed topics, of its ``%RETRY%`` topic where it exists, and of
        topics it committed offsets for; ``committed_offset`` is 0 where none was committed, as in RocketMQ's
        ``getConsumeStats`` (:meth:`committed_offset`, RocketMQ's ``queryOffset``, says -1 there).

        >>> store.consumer_lag("GroupA").where("topic = 'TopicTest'").count()
        4
        """
        return consumer_lag(self._ctx, group)
