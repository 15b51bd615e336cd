"""The checks RocketMQ 5's proxy makes of a request before it reaches the store (``GrpcValidator`` and the
activities' own), each raising :class:`~storelib.model.errors.RequestError` with the proxy's code and text.

>>> check_topic("Orders"), check_group("GroupA"), check_tag("TagA"), check_keys(["k1"])
(None, None, None, None)
>>> check_user_properties({"KEYS": "x"}, "", [])
Traceback (most recent call last):
...
storelib.model.errors.RequestError: user_properties: property is used by system: KEYS (got 'KEYS')
>>> check_topic("rmq_sys_x")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
storelib.model.errors.RequestError: topic: cannot access system topic (got 'rmq_sys_x')
>>> check_message_group("g" * 64)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
storelib.model.errors.RequestError: message_group: message group exceed the max size 64 (got 'ggg...')
"""

from __future__ import annotations

import re
from typing import Iterable, Mapping

from storelib.model.errors import RequestError
from storelib.model.message import RESERVED_PROPERTIES

__all__ = [
    "check_topic",
    "check_group",
    "check_tag",
    "check_keys",
    "check_message_group",
    "check_user_properties",
    "check_invisible_time",
    "check_delivery_time",
    "MAX_MESSAGE_SIZE",
    "MIN_INVISIBLE_MS_RECEIVE",
    "MAX_INVISIBLE_MS",
    "MAX_DELAY_MS",
]

_NAME = re.compile(r"^[%|a-zA-Z0-9_-]+$")
_SYSTEM_TOPICS = frozenset(
    {
        "TBW102",
        "SCHEDULE_TOPIC_XXXX",
        "BenchmarkTest",
        "RMQ_SYS_TRANS_HALF_TOPIC",
        "RMQ_SYS_TRACE_TOPIC",
        "RMQ_SYS_TRANS_OP_HALF_TOPIC",
        "TRANS_CHECK_MAX_TIME_TOPIC",
        "SELF_TEST_TOPIC",
        "OFFSET_MOVED_EVENT",
        "CHECKPOINT_TOPIC",
    }
)
#: The proxy's limits (``ProxyConfig`` defaults).
MAX_MESSAGE_SIZE = 4 * 1024 * 1024
MAX_USER_PROPERTY_SIZE = 16 * 1024
MAX_USER_PROPERTIES = 128
MAX_MESSAGE_GROUP_SIZE = 64
MIN_INVISIBLE_MS_RECEIVE = 10_000
MAX_INVISIBLE_MS = 12 * 3600 * 1000
MAX_DELAY_MS = 24 * 3600 * 1000
#: The names a user property may not take (``MessageConst.STRING_HASH_SET``, with the 5.x additions).
SYSTEM_PROPERTY_NAMES = RESERVED_PROPERTIES | {
    "__BORNHOST",
    "BORN_TIMESTAMP",
    "DLQ_ORIGIN_TOPIC",
    "DLQ_ORIGIN_MESSAGE_ID",
    "__CRC32#",
    "__SHARDINGKEY",
    "TRACE_CONTEXT",
    "CHECK_IMMUNITY_TIME_IN_SECONDS",
}


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # Java's Character.isISOControl


def _control(text: str) -> bool:
    return _CONTROL.search(text) is not None


def check_topic(name: str) -> None:
    """``validateTopic``: blank, longer than 127, characters outside ``[%|a-zA-Z0-9_-]``, or a system topic."""
    if not name or not name.strip():
        raise RequestError("topic", "The specified topic is blank", value=name, code="ILLEGAL_TOPIC")
    if len(name) > 127:
        raise RequestError(
            "topic", "The specified topic is longer than topic max length 127.", value=name, code="ILLEGAL_TOPIC"
        )
    if not _NAME.match(name):
        raise RequestError(
            "topic",
            f"The specified topic[{name}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
            value=name,
            code="ILLEGAL_TOPIC",
        )
    if name in _SYSTEM_TOPICS or name.startswith("rmq_sys_"):
        raise RequestError("topic", "cannot access system topic", value=name, code="ILLEGAL_TOPIC")


def check_group(name: str) -> None:
    """``validateConsumerGroup``: blank, longer than 120, characters outside ``[%|a-zA-Z0-9_-]``, or a system group."""
    code = "ILLEGAL_CONSUMER_GROUP"
    if not name or not name.strip():
        raise RequestError("group", "the specified group is blank", value=name, code=code)
    if len(name) > 120:
        raise RequestError(
            "group", f"the specified group[{name}] is longer than group max length: 120.", value=name, code=code
        )
    if not _NAME.match(name):
        raise RequestError(
            "group",
            f"the specified group[{name}] contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$",
            value=name,
            code=code,
        )
    if name.startswith("CID_RMQ_SYS_"):
        raise RequestError("group", "cannot use system consumer group", value=name, code=code)


def check_tag(tag: str) -> None:
    """``validateTag`` (an empty tag is no tag)."""
    if not tag:
        return
    code = "ILLEGAL_MESSAGE_TAG"
    if not tag.strip():
        raise RequestError("tag", "tag cannot be the char sequence of whitespace", value=tag, code=code)
    if "|" in tag:
        raise RequestError("tag", "tag cannot contain '|'", value=tag, code=code)
    if _control(tag):
        raise RequestError("tag", "tag cannot contain control character", value=tag, code=code)


def check_keys(keys: Iterable[str]) -> None:
    for key in keys:
        if not key.strip():
            raise RequestError(
                "keys", "key cannot be the char sequence of whitespace", value=key, code="ILLEGAL_MESSAGE_KEY"
            )
        if _control(key):
            raise RequestError("keys", "key cannot contain control character", value=key, code="ILLEGAL_MESSAGE_KEY")


def check_message_group(group: str) -> None:
    """``validateMessageGroup`` (an empty group is no group)."""
    if not group:
        return
    code = "ILLEGAL_MESSAGE_GROUP"
    if not group.strip():
        raise RequestError(
            "message_group", "message group cannot be the char sequence of whitespace", value=group, code=code
        )
    if len(group.encode()) >= MAX_MESSAGE_GROUP_SIZE:
        raise RequestError(
            "message_group", f"message group exceed the max size {MAX_MESSAGE_GROUP_SIZE}", value=group, code=code
        )
    if _control(group):
        raise RequestError("message_group", "message group cannot contain control character", value=group, code=code)


def check_user_properties(props: Mapping[str, str], tag: str, keys: Iterable[str]) -> None:
    """The user properties' count, names and values, then the size of them with the tag and keys."""
    if len(props) > MAX_USER_PROPERTIES:
        raise RequestError(
            "user_properties",
            f"too many user properties, max is {MAX_USER_PROPERTIES}",
            value=len(props),
            code="MESSAGE_PROPERTIES_TOO_LARGE",
        )
    size = 0
    for k, v in props.items():
        if k in SYSTEM_PROPERTY_NAMES:
            raise RequestError(
                "user_properties", f"property is used by system: {k}", value=k, code="ILLEGAL_MESSAGE_PROPERTY_KEY"
            )
        if _control(k):
            raise RequestError(
                "user_properties",
                "the key of property cannot contain control character",
                value=k,
                code="ILLEGAL_MESSAGE_PROPERTY_KEY",
            )
        if _control(v):
            raise RequestError(
                "user_properties",
                f"the value of property {k} cannot contain control character",
                value=v,
                code="ILLEGAL_MESSAGE_PROPERTY_KEY",
            )
        size += len(k.encode()) + len(v.encode())
    size += len(tag.encode()) + sum(len(k.encode()) for k in keys)
    if size > MAX_USER_PROPERTY_SIZE:
        raise RequestError(
            "user_properties",
            f"the total size of user property is too large, max is {MAX_USER_PROPERTY_SIZE}",
            value=size,
            code="MESSAGE_PROPERTIES_TOO_LARGE",
        )


def check_invisible_time(ms: int, minimum: int = 0) -> None:
    """``validateInvisibleTime``: within ``[minimum, 12h]``.

    >>> check_invisible_time(5_000, MIN_INVISIBLE_MS_RECEIVE)
    Traceback (most recent call last):
    ...
    storelib.model.errors.RequestError: invisible_duration: the invisibleTime is too small. min is 10000 (got 5000)
    """
    if ms < minimum:
        raise RequestError(
            "invisible_duration",
            f"the invisibleTime is too small. min is {minimum}",
            value=ms,
            code="ILLEGAL_INVISIBLE_TIME",
        )
    if ms > MAX_INVISIBLE_MS:
        raise RequestError(
            "invisible_duration",
            f"the invisibleTime is too large. max is {MAX_INVISIBLE_MS}",
            value=ms,
            code="ILLEGAL_INVISIBLE_TIME",
        )


def check_delivery_time(deliver_ms: int, now_ms: int, max_delay_ms: int = MAX_DELAY_MS) -> None:
    """``validateDelayTime``: no further than ``max_delay_ms`` ahead (a past time delivers at once).
    A client that puts milliseconds where seconds belong asks for a time thousands of years ahead.

    >>> check_delivery_time(1_700_000_000_000 * 1000, 1_700_000_000_000)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    storelib.model.errors.RequestError: delivery_timestamp: the max delay time of message is too large, ...
    """
    if deliver_ms - now_ms > max_delay_ms:
        raise RequestError(
            "delivery_timestamp",
            f"the max delay time of message is too large, max is {max_delay_ms}",
            value=deliver_ms,
            code="ILLEGAL_DELIVERY_TIME",
        )
