"""Spark Column versions of the RocketMQ encodings in :mod:`storelib.codec`.

Values that need Java semantics are computed by Java itself: ``java_hash_code`` calls
``java.util.Objects.hashCode`` (that is ``String.hashCode``, 0 for null) through Spark's built-in
``reflect``, a constant class and method name, never text from users. :func:`java_hash_code_expr`
is the same value as a pure column expression, for clusters that forbid ``reflect``.

>>> from storelib.columns import java_hash_code  # doctest: +SKIP
>>> df.select(java_hash_code(F.col("tags")))       # doctest: +SKIP
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from storelib.codec import MAX_EXT_ADDR

__all__ = ["java_hash_code", "java_hash_code_expr", "tags_code", "index_key_hash", "decorate_ext_addr", "is_ext_addr",
           "MAX_EXT_ADDR"]

_MASK32 = 0xFFFFFFFF


def java_hash_code(c: Column) -> Column:
    """``String.hashCode`` of a string column as int; 0 for null (``Objects.hashCode``)."""
    return F.reflect(F.lit("java.util.Objects"), F.lit("hashCode"), c).cast("int")


def java_hash_code_expr(c: Column) -> Column:
    """The same value as :func:`java_hash_code` without calling Java: a fold over UTF-16 code units."""
    n = F.char_length(c)

    def step(acc: Column, i: Column) -> Column:
        cp = F.ascii(F.substring(c, i, 1)).cast("long")
        one = (acc * 31 + cp).bitwiseAND(F.lit(_MASK32))
        hi = F.lit(0xD800) + F.shiftright(cp - 0x10000, 10)
        lo = F.lit(0xDC00) + (cp - 0x10000).bitwiseAND(F.lit(0x3FF))
        two = ((acc * 31 + hi).bitwiseAND(F.lit(_MASK32)) * 31 + lo).bitwiseAND(F.lit(_MASK32))
        return F.when(cp > 0xFFFF, two).otherwise(one)

    u = F.when(F.coalesce(n, F.lit(0)) == 0, F.lit(0).cast("long")).otherwise(
        F.aggregate(F.sequence(F.lit(1), n), F.lit(0).cast("long"), step))
    return F.when(u >= 2**31, u - 2**32).otherwise(u).cast("int")


def tags_code(tags: Column) -> Column:
    """RocketMQ's tagsCode as bigint: ``String.hashCode`` of the whole TAGS string, 0 when absent."""
    return F.when(F.coalesce(F.length(tags), F.lit(0)) == 0, F.lit(0)).otherwise(java_hash_code(tags)).cast("long")


def index_key_hash(index_key: Column) -> Column:
    """IndexFile's keyHash: ``abs(hashCode)``, with ``Integer.MIN_VALUE`` giving 0."""
    # abs over long turns Integer.MIN_VALUE into 2^31, which the modulo sends to 0: one hashCode call per row.
    return F.pmod(F.abs(java_hash_code(index_key).cast("long")), F.lit(2**31)).cast("int")


def decorate_ext_addr(offset: Column) -> Column:
    """ConsumeQueueExt ``decorate`` of a non-negative ext offset: ``offset + Long.MIN_VALUE``."""
    return (offset.cast("long") + F.lit(-(2**63))).cast("long")


def is_ext_addr(tags_code: Column) -> Column:
    """ConsumeQueueExt ``isExtAddr``: the consume queue tag code holds an ext address."""
    return tags_code <= F.lit(MAX_EXT_ADDR)
