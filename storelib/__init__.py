"""storelib: Apache RocketMQ's storage model and message filtering on Delta tables, for PySpark.

>>> from storelib import tags_code, create_message_id, index_key_hash
>>> tags_code("TagA")
2598919
>>> create_message_id("10.0.0.1", 10911, 4096)
'0A00000100002A9F0000000000001000'
>>> sorted(build_subscription("TopicTest", "TagA || TagB").code_set)
[2598919, 2598920]
>>> BloomFilter().generate("G2#T1").bit_pos
[111, 20, 41]
"""

from storelib.codec import (create_message_id, decode_message_id, decorate_ext_addr, index_key_hash, is_ext_addr,
                            tags_code, undecorate_ext_addr)
from storelib.config import StoreConfig
from storelib.errors import *  # noqa: F401,F403  (the whole hierarchy, rooted in StoreError)
from storelib.errors import StoreError
from storelib.filter.bloom import BloomFilter, BloomFilterData
from storelib.filter.selector import MessageSelector
from storelib.filter.sql92 import compile_sql92, parse_sql92
from storelib.filter.tag import SubscriptionData, build_subscription
from storelib.message import Message, SendResult
from storelib.store import MessageStore

__all__ = [
    "MessageStore", "Message", "SendResult", "StoreConfig", "StoreError",
    "tags_code", "create_message_id", "decode_message_id", "decorate_ext_addr", "undecorate_ext_addr",
    "is_ext_addr", "index_key_hash",
    "MessageSelector", "compile_sql92", "parse_sql92", "build_subscription", "SubscriptionData", "BloomFilter",
    "BloomFilterData",
]
__version__ = "0.1.0"
