"""Topics and groups: RocketMQ's name rules, system topics, permissions and ``TopicConfig``.

>>> validate_topic("TopicTest")
'TopicTest'
>>> validate_topic("bad topic")  # doctest: +NORMALIZE_WHITESPACE
Traceback (most recent call last):
...
storelib.model.errors.InvalidTopicError: topic: contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$
    (got 'bad topic')
>>> retry_topic("GroupA"), dlq_topic("GroupA")
('%RETRY%GroupA', '%DLQ%GroupA')
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from storelib.model.errors import ConfigError, InvalidTopicError, TopicPermissionError, require_int

__all__ = [
    "PERM_READ",
    "PERM_WRITE",
    "PERM_INHERIT",
    "PERM_PRIORITY",
    "perm_to_string",
    "SCHEDULE_TOPIC",
    "TRANS_HALF_TOPIC",
    "TRANS_OP_HALF_TOPIC",
    "TRANS_CHECK_MAX_TIME_TOPIC",
    "TIMER_TOPIC",
    "RETRY_GROUP_TOPIC_PREFIX",
    "DLQ_GROUP_TOPIC_PREFIX",
    "SYSTEM_TOPICS",
    "NOT_ALLOWED_SEND_TOPICS",
    "TopicConfig",
    "TAGS_KEY",
    "MAX_CLUSTER_KEYS",
    "UNCHANGED",
    "validate_cluster_by",
    "validate_retention_ms",
    "validate_topic",
    "validate_group",
    "is_system_topic",
    "retry_topic",
    "dlq_topic",
]

# PermName
PERM_PRIORITY, PERM_READ, PERM_WRITE, PERM_INHERIT = 0x8, 0x4, 0x2, 0x1


def perm_to_string(perm: int) -> str:
    """``PermName.perm2String``: ``R``, ``W`` and ``X`` (inherit) in three places, ``-`` where a bit is off.

    >>> perm_to_string(PERM_READ | PERM_WRITE), perm_to_string(PERM_READ), perm_to_string(7)
    ('RW-', 'R--', 'RWX')
    """
    return "".join(c if perm & bit else "-" for c, bit in (("R", PERM_READ), ("W", PERM_WRITE), ("X", PERM_INHERIT)))


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
#: ``TimerMessageStore.TIMER_TOPIC``: where 5.x timer (any-time delivery) messages wait.
TIMER_TOPIC = SYSTEM_TOPIC_PREFIX + "wheel_timer"

#: TopicValidator's system topics: users may not create them.
SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        SCHEDULE_TOPIC,
        "BenchmarkTest",
        TRANS_HALF_TOPIC,
        "RMQ_SYS_TRACE_TOPIC",
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "CHECKPOINT_TOPIC",
    }
)
#: System topics no producer may send to (the store itself writes them).
NOT_ALLOWED_SEND_TOPICS = frozenset(
    {
        SCHEDULE_TOPIC,
        TRANS_HALF_TOPIC,
        TRANS_OP_HALF_TOPIC,
        TRANS_CHECK_MAX_TIME_TOPIC,
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        TIMER_TOPIC,
    }
)

TOPIC_NAME_PATTERN = "^[%|a-zA-Z0-9_-]+$"
#: The TAGS property: the default clustering key of every topic.
TAGS_KEY = "TAGS"
#: Delta's liquid clustering takes at most four keys; so does a topic.
MAX_CLUSTER_KEYS = 4
_VALID = re.compile(r"[%|a-zA-Z0-9_\-]+")


def validate_topic(topic: object, field: str = "topic") -> str:
    """Check a topic name as RocketMQ's ``TopicValidator.validateTopic``; return it."""
    if not isinstance(topic, str) or not topic.strip():
        raise InvalidTopicError(field, "the specified topic is blank", value=topic)
    if not _VALID.fullmatch(topic):
        raise InvalidTopicError(field, f"contains illegal characters, allowing only {TOPIC_NAME_PATTERN}", value=topic)
    limit = (
        RETRY_OR_DLQ_TOPIC_MAX_LENGTH
        if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX))
        else TOPIC_MAX_LENGTH
    )
    if len(topic) > limit:
        raise InvalidTopicError(field, f"is longer than topic max length {limit}", value=topic)
    return topic


def validate_group(group: object, field: str = "group") -> str:
    """Check a consumer or producer group name as ``TopicValidator.validateGroup``; return it.

    >>> validate_group("GroupA")
    'GroupA'
    """
    if not isinstance(group, str) or not group.strip():
        raise InvalidTopicError(field, "the specified group is blank", value=group)
    if not _VALID.fullmatch(group):
        raise InvalidTopicError(field, f"contains illegal characters, allowing only {TOPIC_NAME_PATTERN}", value=group)
    if len(group) > GROUP_MAX_LENGTH:
        raise InvalidTopicError(field, f"is longer than group max length {GROUP_MAX_LENGTH}", value=group)
    return group


def is_system_topic(topic: str) -> bool:
    """``TopicValidator.isSystemTopic``.

    >>> is_system_topic("SCHEDULE_TOPIC_XXXX"), is_system_topic("rmq_sys_x"), is_system_topic("Orders")
    (True, True, False)
    """
    return topic in SYSTEM_TOPICS or topic.startswith(SYSTEM_TOPIC_PREFIX)


def retry_topic(group: str) -> str:
    """``MixAll.getRetryTopic``: where a group's messages go back for redelivery."""
    return RETRY_GROUP_TOPIC_PREFIX + group


def validate_cluster_by(keys: object, field: str = "cluster_by") -> tuple[str, ...]:
    """A topic's clustering keys: at most 4 distinct names, ``TAGS`` or message property names.

    >>> validate_cluster_by(["TAGS", "region"])
    ('TAGS', 'region')
    >>> validate_cluster_by(["a", "b", "c", "d", "e"])  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    storelib.model.errors.InvalidTopicError: cluster_by: at most 4 clustering keys, as Delta's liquid clustering
        (got ['a', 'b', 'c', 'd', 'e'])
    """
    if isinstance(keys, str) or not isinstance(keys, (list, tuple)):
        raise InvalidTopicError(field, "must be a list of key names, e.g. ['TAGS', 'region']", value=keys)
    if len(keys) > MAX_CLUSTER_KEYS:
        raise InvalidTopicError(
            field, f"at most {MAX_CLUSTER_KEYS} clustering keys, as Delta's liquid clustering", value=keys
        )
    for k in keys:
        if not isinstance(k, str) or not k or not k.isprintable() or any(c.isspace() for c in k):
            raise InvalidTopicError(
                field, "each key is TAGS or a property name: a non-empty string without spaces", value=keys
            )
    if len(set(keys)) != len(keys):
        raise InvalidTopicError(field, "names a key twice", value=keys)
    return tuple(keys)


class _Unchanged:
    """The default of a topic setting an update leaves as it was."""

    def __repr__(self) -> str:
        return "UNCHANGED"


#: Passed for a topic setting (``retention_ms``): keep the topic's current value (its default when new).
UNCHANGED = _Unchanged()
#: The longest per-topic retention, in milliseconds (about 292 million years).
MAX_RETENTION_MS = 2**63 // 1000


def validate_retention_ms(value: object, field: str = "retention_ms") -> int | None:
    """A topic's retention: a positive number of milliseconds, or None (only the store's
    ``file_reserved_time`` applies).

    >>> validate_retention_ms(3_600_000), validate_retention_ms(None)
    (3600000, None)
    >>> validate_retention_ms(0)
    Traceback (most recent call last):
    ...
    storelib.model.errors.ConfigError: retention_ms: must be an integer in 1..9223372036854775 or None (got 0)
    """
    require_int(ConfigError, field, value, 1, MAX_RETENTION_MS, optional=True)
    return value  # type: ignore[return-value]


def dlq_topic(group: str) -> str:
    """``MixAll.getDLQTopic``: where a group's messages go after too many redeliveries."""
    return DLQ_GROUP_TOPIC_PREFIX + group


@dataclass(frozen=True)
class TopicConfig:
    """RocketMQ's ``TopicConfig``: queue counts and permission bits of one topic.

    >>> c = TopicConfig("Orders", 8, 8, PERM_READ)
    >>> c.readable, c.writable
    (True, False)
    """

    topic: str
    read_queue_nums: int = 4
    write_queue_nums: int = 4
    perm: int = PERM_READ | PERM_WRITE
    topic_filter_type: str = "SINGLE_TAG"
    order: bool = False
    #: Clustering keys of the topic's settled commitlog data (TAGS and/or property names), as
    #: Delta's liquid clustering keys; compaction sorts each clustered file by them.
    cluster_by: tuple[str, ...] = (TAGS_KEY,)
    #: How long the topic's messages are kept after their store time, in ms (None: only the
    #: store's ``file_reserved_time`` applies); see :mod:`storelib.maintenance.topic_retention`.
    retention_ms: int | None = None

    @property
    def readable(self) -> bool:
        return bool(self.perm & PERM_READ)

    @property
    def writable(self) -> bool:
        return bool(self.perm & PERM_WRITE)

    def check_writable(self) -> None:
        """Raise unless a producer may write to this topic.

        >>> TopicConfig("T", perm=PERM_READ).check_writable()
        Traceback (most recent call last):
        ...
        storelib.model.errors.TopicPermissionError: topic: the topic T is not writable (perm 4) (got 'T')
        """
        if not self.writable:
            raise TopicPermissionError(
                "topic", f"the topic {self.topic} is not writable (perm {self.perm})", value=self.topic
            )
