"""IndexFile keys: ``topic#key`` (``IndexService.buildKey``), the key hash ``abs(hashCode)`` with
``Integer.MIN_VALUE`` giving 0, and the hash slot ``hash % slots``.

>>> import pyarrow as pa
>>> build_index_key("TopicTest", "order-1"), index_key_hash("TopicTest#order-1")
('TopicTest#order-1', 1829193424)
>>> index_key_hash("TopicTest#erAHomt")   # hashCode is Integer.MIN_VALUE
0
>>> index_key_hashes(pa.array(["TopicTest", "TopicTest"]), pa.array(["erAHomt", "order-1"])).tolist()
[0, 1829193424]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from storelib.encoding.arrow import Distinct
from storelib.encoding.hashcode import java_hash_code_column, java_string_hash, powers_of_31, string_hashes
from storelib.model.errors import StoreError, require_int

if TYPE_CHECKING:
    from pyspark.sql import Column

__all__ = [
    "build_index_key",
    "index_key_hash",
    "index_slot",
    "topic_key_prefixes",
    "index_key_hashes",
    "index_key_hash_column",
]

_INT32_MIN = -(1 << 31)


def build_index_key(topic: str, key: str) -> str:
    """``IndexService.buildKey``: ``topic#key``."""
    return f"{topic}#{key}"


def index_key_hash(index_key: str) -> int:
    """IndexFile key hash of one ``topic#key``."""
    h = java_string_hash(index_key)
    return 0 if h == _INT32_MIN else abs(h)


def index_slot(index_key: str, slots: int = 5_000_000) -> int:
    """Hash slot of ``index_key`` in an IndexFile with ``slots`` slots (``hashSlotNum``).

    >>> index_slot("#")
    35
    """
    require_int(StoreError, "slots", slots, 1)
    return index_key_hash(index_key) % slots


def topic_key_prefixes(topics: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``String.hashCode`` of ``topic#`` for each row (uint32), computed once per distinct topic.

    >>> topic_key_prefixes(pa.array(["T", "T"])).tolist() == [java_string_hash("T#")] * 2
    True
    """
    distinct = Distinct.of(topics)
    prefix, _ = string_hashes(pa.array([f"{t}#" for t in distinct.values.to_pylist()], pa.string()))
    return distinct.per_row(prefix, null=0)


def index_key_hashes(topics: pa.Array | np.ndarray, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Key hashes of ``topic#key`` for whole arrays, as int32. ``topics`` may be given as
    :func:`topic_key_prefixes` already: ``hash(a + b) = hash(a) * 31^len(b) + hash(b)``, so no
    ``topic#key`` string is ever built."""
    prefixes = topics if isinstance(topics, np.ndarray) else topic_key_prefixes(topics)
    suffix, lengths = string_hashes(keys)
    powers = powers_of_31(int(lengths.max(initial=0)) + 1)
    full = prefixes * powers[lengths] + suffix
    return (np.abs(full.view(np.int32).astype(np.int64)) % (1 << 31)).astype(np.int32)


def index_key_hash_column(index_key: "Column") -> "Column":
    """Key hashes of a ``topic#key`` string column, as int.

    >>> spark.range(1).select(index_key_hash_column(F.lit("TopicTest#erAHomt")).alias("h")).first().h
    0
    """
    from pyspark.sql import functions as F

    # abs over long turns Integer.MIN_VALUE into 2^31, which the modulo sends to 0: one hashCode call per row.
    return F.pmod(F.abs(java_hash_code_column(index_key).cast("long")), F.lit(2**31)).cast("int")
