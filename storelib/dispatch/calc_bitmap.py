"""CalcBitMap (RocketMQ's ``CommitLogDispatcherCalcBitMap``): at dispatch, every live SQL92
subscription of a message's topic is evaluated on the message, and the subscription's Bloom bits
(``group#topic``, see :mod:`storelib.filter.bloom`) are set in the message's filter bitmap where it
returns TRUE. Here all subscriptions are Spark columns evaluated in one pass over the rows; each
property look-up and number parse is computed once per row and shared by every subscription.

>>> from storelib import MessageSelector
>>> sub = store.subscribe("GroupB", "TopicTest", MessageSelector.by_sql("a > 3"))
>>> rows = store.messages("TopicTest")
>>> bitmap = with_filter_bitmaps(rows, [sub], 7, delay=False).select("filter_bitmap", "filter_version").first()
>>> BloomFilter().is_hit(sub.bloom, bytearray(bitmap.filter_bitmap)), bitmap.filter_version
(True, 7)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from storelib.dispatch.request import REQUEST_COLUMNS
from storelib.filter.bloom import BloomFilter, bitmap_column  # noqa: F401  (BloomFilter: the doctest)
from storelib.filter.sql92_spark import to_columns_with_inputs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from storelib.filter.registry import Subscription

__all__ = ["with_filter_bitmaps"]


def with_filter_bitmaps(rows: "DataFrame", subs: Sequence["Subscription"], version: int, delay: bool) -> "DataFrame":
    """The commitlog rows a dispatch reads (:data:`~storelib.dispatch.request.REQUEST_COLUMNS`, plus
    ``properties`` when ``delay``), with the filter bitmap of every message of a subscribed topic and
    the registry ``version`` it was computed with (null for other topics). ``subs`` are live SQL92
    subscriptions with Bloom data, all of one bit count."""
    from pyspark.sql import functions as F

    inputs, predicates = to_columns_with_inputs([s.compiled.tree for s in subs], "properties")
    rows = rows.select("*", *inputs)
    matches = [((F.col("topic") == s.topic) & p, s.bloom) for s, p in zip(subs, predicates)]
    subscribed = F.col("topic").isin(sorted({s.topic for s in subs}))
    return rows.select(*REQUEST_COLUMNS, *(["properties"] if delay else []),
                       F.when(subscribed, bitmap_column(matches, subs[0].bloom.bit_num)).alias("filter_bitmap"),
                       F.when(subscribed, F.lit(version).cast("long")).alias("filter_version"))
