"""What a message must be to be sent: one table of rules that both send paths run.

Each :class:`Rule` is one check's error class, field and reason. A list of messages is checked on
the driver by :func:`validate_message`, one message at a time; a DataFrame is checked on the
executors over whole Arrow batches (:mod:`storelib.send.frame`) with the same rules, so a bad
message is refused with the same error class, field and reason whichever way it was sent. The
order of :data:`SEND_RULES` is the order both paths check in: the first failing rule is reported.

>>> m = Message("TopicTest", body=b"hi", tags="TagA", keys=["order-1", "order-2"], properties={"a": "5"})
>>> validate_message(m, max_body=4 * 1024 * 1024) is m
True
>>> validate_message(Message("TopicTest", properties={"TAGS": "x"}), max_body=10)
Traceback (most recent call last):
...
storelib.model.errors.ReservedPropertyError: properties['TAGS']: is used by the system, choose another name
>>> BODY_TOO_LARGE.error(value=11, max=10)
BodyTooLargeError('body: is over the maximum of 10 bytes (got 11)')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from storelib.model.errors import (
    MISSING,
    BodyTooLargeError,
    InvalidPropertyError,
    InvalidQueueIdError,
    MessageError,
    ReservedPropertyError,
    ReservedTopicError,
    StoreError,
    TopicNotFoundError,
)
from storelib.model.message import (
    RESERVED_PROPERTIES,
    SEPARATORS_PATTERN,
    SEPARATORS_REASON,
    SEPARATORS_REASON_TAGS,
    Message,
    is_blank,
)
from storelib.model.topic import NOT_ALLOWED_SEND_TOPICS, TopicConfig, validate_topic

__all__ = [
    "Rule",
    "SEND_RULES",
    "validate_message",
    "MESSAGE_TYPE",
    "BODY_TYPE",
    "BODY_NULL",
    "BODY_TOO_LARGE",
    "QUEUE_ID_TYPE",
    "QUEUE_ID_RANGE",
    "TAGS_TYPE",
    "KEYS_TYPE",
    "TAGS_SEPARATORS",
    "KEYS_SEPARATORS",
    "FLAG_RANGE",
    "PROPERTIES_TYPE",
    "PROPERTY_TYPES",
    "RESERVED_PROPERTY",
    "BLANK_PROPERTY",
    "PROPERTY_SEPARATORS",
    "LONE_SURROGATE",
    "lone_surrogate",
    "check_send_topic",
    "check_queue_id",
]


@dataclass(frozen=True)
class Rule:
    """One check of a message: the error it raises, the field it names and why (``{}`` fields of
    the reason are filled in by :meth:`error`)."""

    kind: type[StoreError]
    field: str
    reason: str

    def error(
        self, *, field: str | None = None, value: Any = MISSING, where: str | None = None, **details: Any
    ) -> StoreError:
        """The error of this rule, naming ``field`` (default the rule's own) and ``value``."""
        return self.kind(field or self.field, self.reason.format(**details), value=value, where=where)


MESSAGE_TYPE = Rule(MessageError, "message", "must be a storelib.Message")
BODY_TYPE = Rule(MessageError, "body", "must be bytes")
BODY_NULL = Rule(MessageError, "body", "must not be null")
BODY_TOO_LARGE = Rule(BodyTooLargeError, "body", "is over the maximum of {max} bytes")
TAGS_TYPE = Rule(MessageError, "tags", "must be a string")
KEYS_TYPE = Rule(MessageError, "keys", "every key must be a string")
TAGS_SEPARATORS = Rule(MessageError, "tags", SEPARATORS_REASON_TAGS)
KEYS_SEPARATORS = Rule(MessageError, "keys", SEPARATORS_REASON_TAGS)
FLAG_RANGE = Rule(MessageError, "flag", "must be a 32-bit integer")
QUEUE_ID_TYPE = Rule(MessageError, "queue_id", "must be an integer")
QUEUE_ID_RANGE = Rule(InvalidQueueIdError, "queue_id", "queue id must be in [0, {queues}) for topic {topic}")
PROPERTIES_TYPE = Rule(InvalidPropertyError, "properties", "must be a mapping of str to str")
PROPERTY_TYPES = Rule(InvalidPropertyError, "properties", "property names and values must be strings")
RESERVED_PROPERTY = Rule(ReservedPropertyError, "properties", "is used by the system, choose another name")
BLANK_PROPERTY = Rule(InvalidPropertyError, "properties", "the name or value of a property can not be blank")
PROPERTY_SEPARATORS = Rule(InvalidPropertyError, "properties", SEPARATORS_REASON)
#: A lone surrogate (a half of a UTF-16 pair) is no character: it has no UTF-8 bytes to store.
LONE_SURROGATE = Rule(MessageError, "tags", "holds a lone surrogate at index {at}, which is not valid Unicode text")
_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str, start: int = 0, end: int | None = None) -> int | None:
    """Index of the first lone surrogate in ``text[start:end]``, or None: the one home of the rule that
    messages, tag subscriptions and SQL92 expressions must be valid Unicode text.

    >>> lone_surrogate("ok"), lone_surrogate("a\\ud800b"), lone_surrogate("😀")
    (None, 1, None)
    """
    found = _SURROGATE.search(text, start, len(text) if end is None else end)
    return None if found is None else found.start()


#: The rules in the order both send paths check them (after the topic's own checks). Type rules
#: apply to Python values only: a DataFrame's schema already fixes its columns' types.
SEND_RULES: tuple[Rule, ...] = (
    MESSAGE_TYPE,
    BODY_TYPE,
    BODY_NULL,
    BODY_TOO_LARGE,
    TAGS_TYPE,
    KEYS_TYPE,
    TAGS_SEPARATORS,
    KEYS_SEPARATORS,
    LONE_SURROGATE,
    FLAG_RANGE,
    QUEUE_ID_TYPE,
    PROPERTIES_TYPE,
    PROPERTY_TYPES,
    RESERVED_PROPERTY,
    BLANK_PROPERTY,
    PROPERTY_SEPARATORS,
    QUEUE_ID_RANGE,
)


def validate_message(msg: Message, *, max_body: int, where: str | None = None) -> Message:
    """Check a message as RocketMQ's producer and broker would; raise the first failing rule's error."""
    if not isinstance(msg, Message):
        raise MESSAGE_TYPE.error(value=type(msg).__name__, where=where)
    validate_topic(msg.topic)
    if not isinstance(msg.body, (bytes, bytearray, memoryview)):
        raise BODY_TYPE.error(value=type(msg.body).__name__, where=where)
    if len(msg.body) > max_body:
        raise BODY_TOO_LARGE.error(value=len(msg.body), where=where, max=max_body)
    if msg.tags is not None and not isinstance(msg.tags, str):
        raise TAGS_TYPE.error(value=msg.tags, where=where)
    if isinstance(msg.keys, (Mapping, bytes)) or (
        msg.keys is not None and not isinstance(msg.keys, str) and not hasattr(msg.keys, "__iter__")
    ):
        raise KEYS_TYPE.error(value=msg.keys, where=where)
    keys = [msg.keys] if isinstance(msg.keys, str) else list(msg.keys or [])
    if any(not isinstance(k, str) for k in keys):
        raise KEYS_TYPE.error(value=msg.keys, where=where)
    for rule, text in ((TAGS_SEPARATORS, msg.tags or ""), (KEYS_SEPARATORS, "".join(keys))):
        if re.search(SEPARATORS_PATTERN, text):
            raise rule.error(value=text, where=where)
        _check_unicode(rule.field, text, where)
    if not isinstance(msg.flag, int) or isinstance(msg.flag, bool) or not -(2**31) <= msg.flag < 2**31:
        raise FLAG_RANGE.error(value=msg.flag, where=where)
    if msg.queue_id is not None and (not isinstance(msg.queue_id, int) or isinstance(msg.queue_id, bool)):
        raise QUEUE_ID_TYPE.error(value=msg.queue_id, where=where)
    if not isinstance(msg.properties, Mapping):
        raise PROPERTIES_TYPE.error(value=type(msg.properties).__name__, where=where)
    for name, value in msg.properties.items():
        field = f"properties[{name!r}]"
        if not isinstance(name, str) or not isinstance(value, str):
            raise PROPERTY_TYPES.error(field=field, value=value, where=where)
        if name in RESERVED_PROPERTIES:
            raise RESERVED_PROPERTY.error(field=field, where=where)
        if is_blank(name) or is_blank(value):
            raise BLANK_PROPERTY.error(field=field, value=value, where=where)
        if re.search(SEPARATORS_PATTERN, name + value):
            raise PROPERTY_SEPARATORS.error(field=field, value=value, where=where)
        _check_unicode(field, name + value, where)
    return msg


def _check_unicode(field: str, text: str, where: str | None) -> None:
    at = lone_surrogate(text)
    if at is not None:
        raise LONE_SURROGATE.error(field=field, value=text, where=where, at=at)


def check_queue_id(config: TopicConfig, queue_id: int | None, where: str | None = None) -> None:
    """The last rule, once the topic is known: a queue id the message names must be one of the topic's
    write queues.

    >>> check_queue_id(TopicConfig("T", 4, 4), 4)
    Traceback (most recent call last):
    ...
    storelib.model.errors.InvalidQueueIdError: queue_id: queue id must be in [0, 4) for topic T (got 4)
    """
    if queue_id is not None and not 0 <= queue_id < config.write_queue_nums:
        raise QUEUE_ID_RANGE.error(value=queue_id, where=where, queues=config.write_queue_nums, topic=config.topic)


def check_send_topic(topics: Mapping[str, TopicConfig], topic: str, where: str | None = None) -> TopicConfig:
    """The configuration of the topic a message goes to, once its name is valid: not a topic only the
    store writes, one that exists, and writable.

    >>> check_send_topic({}, "SCHEDULE_TOPIC_XXXX")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    storelib.model.errors.ReservedTopicError: topic: is a system topic that producers may not send to
        (got 'SCHEDULE_TOPIC_XXXX')
    """
    if topic in NOT_ALLOWED_SEND_TOPICS:
        raise ReservedTopicError("topic", "is a system topic that producers may not send to", value=topic, where=where)
    if topic not in topics:
        raise TopicNotFoundError(
            "topic", f"topic {topic} does not exist in this store; create it first", value=topic, where=where
        )
    topics[topic].check_writable()
    return topics[topic]
