"""The ``topic_config`` Delta table (RocketMQ's TopicConfigManager): one row per topic, the latest write wins.

>>> TopicConfigTable(store.context.tables.topic_config).get("TopicTest").write_queue_nums
4
"""

from __future__ import annotations

import datetime as dt
from typing import Sequence

import pyarrow as pa

from storelib.delta.rows import delete_rows, replace_rows
from storelib.delta.table import Table
from storelib.model.errors import ConfigError, InvalidQueueIdError, ReservedTopicError, TopicNotFoundError, require_int
from storelib.model.topic import (
    PERM_INHERIT,
    PERM_PRIORITY,
    PERM_READ,
    PERM_WRITE,
    TAGS_KEY,
    UNCHANGED,
    TopicConfig,
    is_system_topic,
    validate_cluster_by,
    validate_retention_ms,
    validate_topic,
)
from storelib.storage.schema import TOPIC_CONFIG

__all__ = ["TopicConfigTable"]


class TopicConfigTable:
    """The ``topic_config`` Delta table: one row per topic, the latest write wins.

    >>> topics = TopicConfigTable(store.context.tables.topic_config)
    >>> topics.put(TopicConfig("Orders", 2, 2)); sorted(topics.all())
    ['%RETRY%GroupA', 'Orders', 'TopicTest']
    """

    def __init__(self, table: Table):
        self.table = table

    def all(self) -> dict[str, TopicConfig]:
        """Every topic's configuration, from memory while the table has not moved."""
        return self.table.memo("all", lambda view: self._latest(self.table.read_view(view).to_pylist()))

    @staticmethod
    def _latest(rows: list[dict]) -> dict[str, TopicConfig]:
        latest: dict[str, dict] = {}
        for r in sorted(rows, key=lambda r: r["updated_at"]):
            latest[r["topic"]] = r
        return {
            t: TopicConfig(
                t,
                r["read_queue_nums"],
                r["write_queue_nums"],
                r["perm"],
                r["topic_filter_type"],
                r["order"],
                tuple(r["cluster_by"]) if r.get("cluster_by") is not None else (TAGS_KEY,),
                r.get("retention_ms"),
            )
            for t, r in latest.items()
        }

    def get(self, topic: str) -> TopicConfig:
        """The topic's configuration, or :class:`TopicNotFoundError`."""
        config = self.all().get(topic)
        if config is None:
            raise TopicNotFoundError(
                "topic", f"topic {topic} does not exist in this store; create it first", value=topic
            )
        return config

    def put(self, config: TopicConfig) -> None:
        """Write ``config`` for its topic, replacing any earlier one, in one atomic commit."""
        row = {**config.__dict__, "cluster_by": list(config.cluster_by), "updated_at": dt.datetime.now(dt.timezone.utc)}
        data = pa.Table.from_pylist([row], schema=TOPIC_CONFIG.arrow)
        replace_rows(self.table, data, {"topic": config.topic}, "CREATE_TOPIC")

    def delete(self, topic: str) -> TopicConfig:
        """Remove the topic's configuration (``deleteTopic``) in one commit and return what it was; a topic
        that does not exist raises :class:`TopicNotFoundError`, a system topic :class:`ReservedTopicError`.
        Its messages stay until retention removes them; created again, its queues go on from their offsets.

        >>> topics = TopicConfigTable(store.context.tables.topic_config)
        >>> topics.delete(topics.create("Gone", 1, 1).topic).topic, "Gone" in topics.all()
        ('Gone', False)
        """
        validate_topic(topic)
        if is_system_topic(topic):
            raise ReservedTopicError("topic", "is a system topic and cannot be deleted by users", value=topic)
        config = self.get(topic)
        delete_rows(self.table, {"topic": topic}, "DELETE_TOPIC")
        return config

    def create(
        self,
        topic: str,
        read_queues: int,
        write_queues: int,
        perm: int = PERM_READ | PERM_WRITE,
        order: bool = False,
        cluster_by: Sequence[str] | None = None,
        retention_ms: object = UNCHANGED,
    ) -> TopicConfig:
        """Create or update a user topic (``updateAndCreateTopic``); system topics are refused.
        ``cluster_by``: its clustering keys (default ``TAGS``; an update without it keeps the old ones).
        ``retention_ms``: how long its messages are kept (None: no per-topic retention, the default;
        an update without it keeps the old value).

        >>> topics = TopicConfigTable(store.context.tables.topic_config)
        >>> topics.create("DocTopic", 2, 2, cluster_by=["region"], retention_ms=60_000).cluster_by
        ('region',)
        >>> (topics.create("DocTopic", 4, 4).retention_ms,
        ...  topics.create("DocTopic", 4, 4, retention_ms=None).retention_ms)
        (60000, None)
        """
        validate_topic(topic)
        if is_system_topic(topic):
            raise ReservedTopicError("topic", "is a system topic and cannot be created by users", value=topic)
        for name, value in (("read_queue_nums", read_queues), ("write_queue_nums", write_queues)):
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 1024:
                raise InvalidQueueIdError(name, "must be an integer in 1..1024", value=value)
        # PermName's four bits (PRIORITY 8, READ 4, WRITE 2, INHERIT 1), as mqadmin's updateTopic takes them
        require_int(ConfigError, "perm", perm, 0, PERM_PRIORITY | PERM_READ | PERM_WRITE | PERM_INHERIT)
        if not isinstance(order, bool):
            raise ConfigError("order", "must be True or False", value=order)
        if cluster_by is None:
            old = self.all().get(topic)
            keys = old.cluster_by if old is not None else (TAGS_KEY,)
        else:
            keys = validate_cluster_by(cluster_by)
        if retention_ms is UNCHANGED:
            old = self.all().get(topic)
            retention_ms = old.retention_ms if old is not None else None
        else:
            retention_ms = validate_retention_ms(retention_ms)
        config = TopicConfig(topic, read_queues, write_queues, perm, "SINGLE_TAG", order, keys, retention_ms)
        self.put(config)
        return config
