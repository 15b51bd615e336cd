"""storelib: Apache RocketMQ's storage model and message filtering on Delta tables, for PySpark.

The one handle is :class:`MessageStore`; everything it returns, and every encoding a RocketMQ
engineer would check, is importable from here.

>>> from storelib import tags_code, create_message_id, index_key_hash
>>> tags_code("TagA")
2598919
>>> create_message_id("10.0.0.1", 10911, 4096)
'0A00000100002A9F0000000000001000'
>>> sorted(build_subscription("TopicTest", "TagA || TagB").code_set)
[2598919, 2598920]
>>> BloomFilter().generate("G2#T1").bit_pos
[111, 20, 41]

Its layers, each importing only from those below it, are listed in ``docs/internals.md`` (Layout).
"""

from typing import TYPE_CHECKING

from storelib.model.errors import *  # noqa: F401,F403  (the whole hierarchy, rooted in StoreError)
from storelib.model.errors import StoreError

if TYPE_CHECKING:
    from storelib.consume.get_message import GetMessageResult, GetMessageStatus
    from storelib.consume.pull import PullResult, PullStatus
    from storelib.context import StoreContext
    from storelib.delta.stats import Prune
    from storelib.dispatch.result import DispatchResult
    from storelib.encoding.ext_addr import decorate_ext_addr, is_ext_addr, undecorate_ext_addr
    from storelib.encoding.index_key import index_key_hash
    from storelib.encoding.message_id import create_message_id, decode_message_id
    from storelib.encoding.tags import tags_code
    from storelib.filter.bloom import BloomFilter, BloomFilterData
    from storelib.filter.class_batch import FilterFailure
    from storelib.filter.class_filter import FilterContext
    from storelib.filter.selector import MessageSelector
    from storelib.filter.sql92 import compile_sql92, parse_sql92
    from storelib.filter.subscription import Subscription
    from storelib.filter.tag import SubscriptionData, build_subscription
    from storelib.model.config import StoreConfig
    from storelib.model.group import GroupConfig
    from storelib.model.message import Message, SendResult, StoredMessage
    from storelib.model.timestamps import Timestamp
    from storelib.model.topic import PERM_READ, PERM_WRITE, TopicConfig
    from storelib.query.filter_stats import FilterStats
    from storelib.schedule.check import CheckResult
    from storelib.schedule.deliver import DeliveryResult
    from storelib.schedule.transaction import TransactionSendResult, TransactionState
    from storelib.storage.commitlog import AppendResult
    from storelib.store import MessageStore

#: Where each public name lives: imported on first use (PEP 562), so that a process needing one layer (a
#: Spark worker reading a stream, ``storelib --help``) does not import them all.
_HOMES = {
    "GetMessageResult": "storelib.consume.get_message",
    "GetMessageStatus": "storelib.consume.get_message",
    "PullResult": "storelib.consume.pull",
    "PullStatus": "storelib.consume.pull",
    "StoreContext": "storelib.context",
    "Prune": "storelib.delta.stats",
    "DispatchResult": "storelib.dispatch.result",
    "decorate_ext_addr": "storelib.encoding.ext_addr",
    "is_ext_addr": "storelib.encoding.ext_addr",
    "undecorate_ext_addr": "storelib.encoding.ext_addr",
    "index_key_hash": "storelib.encoding.index_key",
    "create_message_id": "storelib.encoding.message_id",
    "decode_message_id": "storelib.encoding.message_id",
    "tags_code": "storelib.encoding.tags",
    "BloomFilter": "storelib.filter.bloom",
    "BloomFilterData": "storelib.filter.bloom",
    "FilterFailure": "storelib.filter.class_batch",
    "FilterContext": "storelib.filter.class_filter",
    "MessageSelector": "storelib.filter.selector",
    "compile_sql92": "storelib.filter.sql92",
    "parse_sql92": "storelib.filter.sql92",
    "Subscription": "storelib.filter.subscription",
    "SubscriptionData": "storelib.filter.tag",
    "build_subscription": "storelib.filter.tag",
    "StoreConfig": "storelib.model.config",
    "GroupConfig": "storelib.model.group",
    "Message": "storelib.model.message",
    "SendResult": "storelib.model.message",
    "StoredMessage": "storelib.model.message",
    "Timestamp": "storelib.model.timestamps",
    "PERM_READ": "storelib.model.topic",
    "PERM_WRITE": "storelib.model.topic",
    "TopicConfig": "storelib.model.topic",
    "FilterStats": "storelib.query.filter_stats",
    "CheckResult": "storelib.schedule.check",
    "DeliveryResult": "storelib.schedule.deliver",
    "TransactionSendResult": "storelib.schedule.transaction",
    "TransactionState": "storelib.schedule.transaction",
    "AppendResult": "storelib.storage.commitlog",
    "MessageStore": "storelib.store",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'storelib' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOMES))


__all__ = [
    "MessageStore",
    "StoreConfig",
    "StoreContext",
    "StoreError",
    "Message",
    "SendResult",
    "AppendResult",
    "StoredMessage",
    "DispatchResult",
    "PullResult",
    "PullStatus",
    "GetMessageResult",
    "GetMessageStatus",
    "FilterStats",
    "TopicConfig",
    "GroupConfig",
    "Subscription",
    "Prune",
    "Timestamp",
    "PERM_READ",
    "PERM_WRITE",
    "tags_code",
    "create_message_id",
    "decode_message_id",
    "decorate_ext_addr",
    "undecorate_ext_addr",
    "is_ext_addr",
    "index_key_hash",
    "MessageSelector",
    "compile_sql92",
    "parse_sql92",
    "build_subscription",
    "SubscriptionData",
    "BloomFilter",
    "BloomFilterData",
    "FilterContext",
    "FilterFailure",
    "DeliveryResult",
    "TransactionState",
    "TransactionSendResult",
    "CheckResult",
]
__version__ = "0.1.0"
