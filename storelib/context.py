"""The store's context: what every service of the store works with, and nothing more.

Services (dispatch, reads, look-ups, pulls, retention) receive a :class:`StoreContext`, not the
public :class:`~storelib.store.MessageStore`: the Spark session, the settings, the store's tables as
typed attributes, and the store-file services built on them (the commitlog, the topic, group,
offset and subscription tables, the producer, and the notifier pulls wait on).

>>> ctx = store.context
>>> ctx.tables.commitlog.spec.name, ctx.config.store_host
('commitlog', '127.0.0.1:10911')
>>> sorted(ctx.tables.by_name())[:3]
['commitlog', 'commitlog_expired', 'commitlog_summary']
"""

from __future__ import annotations

import atexit
import gc
import threading
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Union, cast

from storelib.delta import location
from storelib.delta.files import map_io
from storelib.delta.health import table_problems, unsafe_commits
from storelib.model.config import SPARK_CONF_PREFIX, StoreConfig
from storelib.model.errors import StorageAccessError, StoreCorruptedError, StoreNotFoundError
from storelib.storage.commitlog import CommitLog
from storelib.storage.consumer_offset import ConsumerOffsetTable
from storelib.storage.group_config import GroupConfigTable
from storelib.storage.subscriptions import SubscriptionRegistry
from storelib.storage.tables import StoreTables
from storelib.storage.topic_config import TopicConfigTable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from storelib.send.group_commit import GroupCommitProducer
    from storelib.send.producer import Producer

#: A session, or what starts one when the store first needs it (:attr:`StoreContext.spark`).
SessionSource = Union["SparkSession", Callable[[], "SparkSession"]]

__all__ = ["StoreContext", "MessageArrivals"]


class MessageArrivals:
    """Tells waiting pulls that new consume queue units may have landed (what RocketMQ's
    ``notifyMessageArriving`` does): a generation counter and a condition to wait on.

    >>> a = MessageArrivals(); seen = a.generation; a.notify(); a.wait(seen, 0.0) > seen
    True
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._generation = 0

    @property
    def generation(self) -> int:
        with self._cond:
            return self._generation

    def notify(self) -> None:
        """Wake every waiting pull."""
        with self._cond:
            self._generation += 1
            self._cond.notify_all()

    def wait(self, seen: int, timeout_s: float) -> int:
        """Wait until the generation moves past ``seen`` or ``timeout_s`` runs out; return the generation."""
        with self._cond:
            self._cond.wait_for(lambda: self._generation != seen, timeout=max(0.0, timeout_s))
            return self._generation


@dataclass(eq=False)
class StoreContext:
    """What services get: the session, the settings, the tables and the store-file services.

    ``session`` is a Spark session, or a function that starts one: then Spark starts the first time
    a service asks for :attr:`spark`, and what the store answers with pyarrow alone (look-ups, pulls,
    offsets) never starts it.

    >>> ctx = StoreContext.build(tmp + "/built", spark, StoreConfig())
    >>> ctx.tables.ensure().commitlog.snapshot().version(), ctx.commitlog.next_offset()
    (0, 0)
    >>> lazy = StoreContext.build(tmp + "/built", lambda: spark, StoreConfig())
    >>> lazy.spark_started, lazy.spark is spark, lazy.spark_started
    (False, True, True)
    """

    root: str
    session: SessionSource
    config: StoreConfig
    tables: StoreTables
    commitlog: CommitLog
    topics: TopicConfigTable
    groups: GroupConfigTable
    offsets: ConsumerOffsetTable
    registry: SubscriptionRegistry
    arrivals: MessageArrivals
    _producer: "Producer | None" = field(default=None, repr=False)
    _sends: "GroupCommitProducer | None" = field(default=None, repr=False)

    @property
    def producer(self) -> "Producer":
        """What encodes this process's sends (its born host, its message ids), made on first use: a process
        that only reads (a stream's, an executor's) never imports the send path."""
        with _LAZY:
            if self._producer is None:
                from storelib.send.producer import Producer

                self._producer = Producer(self.config)
            return self._producer

    @property
    def sends(self) -> "GroupCommitProducer":
        """The store's default producer (``store.send``): concurrent sends of this process share commits."""
        with _LAZY:
            if self._sends is None:
                self._sends = self.producer.group_commit(self.commitlog, self.topics.all)
            return self._sends

    @property
    def spark(self) -> "SparkSession":
        """The Spark session, started here on first use when the context was given a function."""
        if not self.spark_started:
            with _LAZY:
                if callable(self.session):  # not self.spark_started, under the lock
                    self.session = self.session()
        return cast("SparkSession", self.session)  # started above

    @property
    def spark_started(self) -> bool:
        """Whether :attr:`spark` has a session yet (``False`` only while a lazy one is unneeded)."""
        return not callable(self.session)

    @classmethod
    def open(
        cls,
        root: str,
        spark: SessionSource,
        config: StoreConfig | None = None,
        *,
        create: bool = False,
        spark_conf: Mapping[str, str] | None = None,
        storage_options: Mapping[str, str] | None = None,
        **settings: object,
    ) -> "StoreContext":
        """The context of the store at ``root``, its tables created when ``create`` (else the store must
        exist: :class:`~storelib.model.errors.StoreNotFoundError`). Settings as ``MessageStore.open`` takes them;
        without ``config``, the ``spark.storelib.*`` entries of ``spark_conf`` (default: the session's) come first.
        A table that is not whole (:func:`~storelib.delta.health.table_problems`) refuses the store
        with :class:`~storelib.model.errors.StoreCorruptedError` before anything is created or read.

        >>> StoreContext.open(tmp + "/made", spark, create=True).tables.exists()
        True
        """
        if spark_conf is None:
            spark_conf = {} if callable(spark) else location.session_settings(spark)
        if config is None:
            config = StoreConfig.from_mapping(
                {
                    k: v
                    for k, v in spark_conf.items()
                    if k.startswith(SPARK_CONF_PREFIX) and not k.startswith(location.CONF_PREFIX)
                },
                **settings,
            )
        elif settings:
            config = config.replace(**settings)
        root = location.attach(root, storage_options, spark_conf)
        context = cls.build(root, spark, config)
        loaded: dict = {}  # the check's snapshots, which ensure() then takes
        tables = list(context.tables.by_name().values())  # on an object store, looked at all at once
        checks = map_io(lambda t: table_problems(t, loaded), tables, remote=not location.is_local(root))
        problems = [p for found in checks for p in found]
        if problems:
            raise StoreCorruptedError(problems, root)
        if not context.tables.exists():
            if not create:
                raise StoreNotFoundError(
                    "root",
                    f"no store at {root}: check the path, or make one with "
                    "'storelib store create PATH' (MessageStore.create(path); a job's --create)",
                )
            unsafe = unsafe_commits(root)
            if unsafe:
                raise StorageAccessError(
                    "root",
                    f"the object store under {root} is not safe for a store: {unsafe}; "
                    "use one that honours If-None-Match (AWS S3, MinIO, ...)",
                    value=root,
                )
        context.tables.ensure(loaded)
        _OPEN.add(context)
        return context

    def close(self) -> None:
        """Commit the default producer's queued sends, release what the tables keep warm and wake every
        held pull (they answer at once)."""
        if self._sends is not None:
            self._sends.close()
        for table in self.tables.by_name().values():
            table.release()
        self.arrivals.notify()
        _OPEN.discard(self)

    @classmethod
    def build(cls, root: str, spark: SessionSource, config: StoreConfig) -> "StoreContext":
        """The context of the store at ``root``, its tables not yet created."""
        tables = StoreTables.at(root, config.delta_properties)
        tables.commitlog.sync_commits = config.flush_disk_type == "SYNC_FLUSH"  # what a send's ack promises
        return cls(
            root,
            spark,
            config,
            tables,
            CommitLog(tables.commitlog, config),
            TopicConfigTable(tables.topic_config),
            GroupConfigTable(tables.subscription_group, config),
            ConsumerOffsetTable(tables.consumer_offset, config),
            SubscriptionRegistry(tables.subscription, config),
            MessageArrivals(),
        )


#: Guards what a context makes on first use (its session, its default producer).
_LAZY = threading.RLock()  # the default producer makes the process's producer first

#: Contexts opened and not closed yet: released before the interpreter exits, while the native
#: runtimes whose objects they hold (Arrow's thread pools, delta-rs) are still alive.
_OPEN: "weakref.WeakSet[StoreContext]" = weakref.WeakSet()


@atexit.register
def _close_open_stores() -> None:
    for ctx in list(_OPEN):
        ctx.close()
    gc.collect()
