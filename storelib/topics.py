"""Topics: RocketMQ's name rules, system topics, permissions, and the topic configuration table.

>>> validate_topic("TopicTest")
'TopicTest'
>>> validate_topic("bad topic")
Traceback (most recent call last):
...
storelib.errors.InvalidTopicError: topic: contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$ (got 'bad topic')
>>> retry_topic("GroupA"), dlq_topic("GroupA")
('%RETRY%GroupA', '%DLQ%GroupA')
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

import pyarrow as pa
from deltalake import write_deltalake, CommitProperties

from storelib.errors import InvalidTopicError, TopicNotFoundError, TopicPermissionError
from storelib.schema import TOPIC_CONFIG
from storelib.tables import Table

__all__ = [
    "PERM_READ", "PERM_WRITE", "PERM_INHERIT", "PERM_PRIORITY",
    "SCHEDULE_TOPIC", "TRANS_HALF_TOPIC", "TRANS_OP_HALF_TOPIC", "RETRY_GROUP_TOPIC_PREFIX",
    "DLQ_GROUP_TOPIC_PREFIX", "SYSTEM_TOPICS", "NOT_ALLOWED_SEND_TOPICS",
    "TopicConfig", "TopicConfigTable", "validate_topic", "validate_group", "is_system_topic", "retry_topic", "dlq_topic",
]

# PermName
PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT = 0x8, 0x4, 0x2, 0x1

TOPIC_MAX_LENGTH = 127
RETRY_OR_DLQ_TOPIC_MAX_LENGTH = 255
GROUP_MAX_LENGTH = 120
RETRY_GROUP_TOPIC_PREFIX = "%RETRY%"
DLQ_GROUP_TOPIC_PREFIX = "%DLQ%"
SYSTEM_TOPIC_PREFIX = "rmq_sys_"

SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
TRANS_HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
TRANS_OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"

#: TopicValidator's system topics: users may not create them.
SYSTEM_TOPICS = frozenset({
    "TBW102", SCHEDULE_TOPIC, "BenchmarkTest", TRANS_HALF_TOPIC, "RMQ_SYS_TRACE_TOPIC", TRANS_OP_HALF_TOPIC,
    TRANS_CHECK_MAX_TIME_TOPIC, "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT", "CHECKPOINT_TOPIC",
})
#: System topics no producer may send to (the store itself writes them).
NOT_ALLOWED_SEND_TOPICS = frozenset({
    SCHEDULE_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC, "SELF_TEST_TOPIC",
    "OFFSET_MOVED_EVENT",
})

TOPIC_NAME_PATTERN = "^[%|a-zA-Z0-9_-]+$"
_VALID = re.compile(r"[%|a-zA-Z0-9_\-]+")


def validate_topic(topic: object, field: str = "topic") -> str:
    """Check a topic name as RocketMQ's ``TopicValidator.validateTopic``; return it."""
    if not isinstance(topic, str) or not topic.strip():
        raise InvalidTopicError(field, "the specified topic is blank", value=topic)
    if not _VALID.fullmatch(topic):
        raise InvalidTopicError(field, f"contains illegal characters, allowing only {TOPIC_NAME_PATTERN}", value=topic)
    limit = RETRY_OR_DLQ_TOPIC_MAX_LENGTH if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)) else TOPIC_MAX_LENGTH
    if len(topic) > limit:
        raise InvalidTopicError(field, f"is longer than topic max length {limit}", value=topic)
    return topic


def validate_group(group: object, field: str = "group") -> str:
    """Check a consumer or producer group name as ``TopicValidator.validateGroup``; return it."""
    if not isinstance(group, str) or not group.strip():
        raise InvalidTopicError(field, "the specified group is blank", value=group)
    if not _VALID.fullmatch(group):
        raise InvalidTopicError(field, f"contains illegal characters, allowing only {TOPIC_NAME_PATTERN}", value=group)
    if len(group) > GROUP_MAX_LENGTH:
        raise InvalidTopicError(field, f"is longer than group max length {GROUP_MAX_LENGTH}", value=group)
    return group


def is_system_topic(topic: str) -> bool:
    """``TopicValidator.isSystemTopic``."""
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def retry_topic(group: str) -> str:
    """``MixAll.getRetryTopic``: where a group's messages go back for redelivery."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def dlq_topic(group: str) -> str:
    """``MixAll.getDLQTopic``: where a group's messages go after too many redeliveries."""
    return DLQ_GROUP_TOPIC_PREFIX + group


@dataclass(frozen=True)
class TopicConfig:
    """RocketMQ's ``TopicConfig``: queue counts and permission bits of one topic."""

    topic: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    order: bool = False

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    def check_writable(self, queue_id: int | None = None, field: str = "queue_id") -> None:
        """Raise unless a producer may write to this topic (and to ``queue_id``)."""
        if not self.writable:
            raise TopicPermissionError("topic", f"the topic {self.topic} is not writable (perm {self.perm})", value=self.topic)
        if queue_id is not None and not 0 <= queue_id < self.write_queue_nums:
            from storelib.errors import InvalidQueueIdError

            raise InvalidQueueIdError(field, f"queue id must be in [0, {self.write_queue_nums}) for topic {self.topic}", value=queue_id)


class TopicConfigTable:
    """The ``topic_config`` Delta table: one row per topic, the latest write wins."""

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
        return {t: TopicConfig(t, r["read_queue_nums"], r["write_queue_nums"], r["perm"], r["topic_filter_type"], r["order"])
                for t, r in latest.items()}

    def get(self, topic: str) -> TopicConfig:
        """The topic's configuration, or :class:`TopicNotFoundError`."""
        config = self.all().get(topic)
        if config is None:
            raise TopicNotFoundError("topic", f"topic {topic} does not exist in this store; create it first", value=topic)
        return config

    def put(self, config: TopicConfig) -> None:
        """Write ``config`` for its topic, replacing any earlier one, in one atomic commit."""
        row = {**config.__dict__, "updated_at": dt.datetime.now(dt.timezone.utc)}
        data = pa.Table.from_pylist([row], schema=TOPIC_CONFIG.arrow)
        write_deltalake(self.table.path, data, mode="overwrite", predicate=f"topic = '{config.topic}'",
                        commit_properties=CommitProperties(custom_metadata={"storelib.operation": "CREATE_TOPIC"}))
