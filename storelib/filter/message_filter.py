"""``MessageFilter``: one selector's two checks, RocketMQ's ExpressionMessageFilter as Spark columns.

Details: ``docs/internals.md``, section storelib.filter.message_filter.

>>> from storelib.filter.selector import MessageSelector
>>> f = MessageFilter("TopicTest", MessageSelector.by_tag("Aa"))
>>> f.is_matched_by_consume_queue(tags_code=2112), f.is_matched_by_commitlog(tags="BB")   # "BB" collides
(True, False)
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.filter.bloom import BloomFilter, may_match_column
from storelib.filter.class_filter import ClassFilter
from storelib.filter.selector import MessageSelector, sql92_limits
from storelib.filter.summary import bitmap_hits, subscription_key
from storelib.filter.tag import build_subscription, code_match_column, tag_match_column

if TYPE_CHECKING:
    from pyspark.sql import Column

    from storelib.filter.bloom import BloomFilter, BloomFilterData
    from storelib.filter.class_filter import ClassFilter
    from storelib.filter.subscription import Subscription
    from storelib.model.config import StoreConfig

__all__ = ["MessageFilter", "properties_pass"]


class MessageFilter:
    """The consume-queue and commitlog checks of one selector on one topic.

    ``subscription`` (a registered group's) brings Bloom data and its registry version; an ad hoc
    selector has none, so its consume-queue check is by tag code only (SQL92 passes every unit).

    >>> sql = MessageFilter("TopicTest", MessageSelector.by_sql("a > 3"))
    >>> sql.matches_all, sql.uses_bitmap, sql.passes_every_unit       # no registered Bloom data: no bitmap test
    (False, False, True)
    >>> df = store.messages("TopicTest")
    >>> df.where(sql.commitlog_column()).count(), sql.sql.evaluate({"a": "5"})
    (1, True)
    >>> tag = MessageFilter("TopicTest", MessageSelector.by_tag("TagA"))
    >>> from storelib import Message
    >>> _ = store.subscribe("GroupS", "TopicTest", MessageSelector.by_sql("a > 3"))  # the topic gets ext units
    >>> _ = store.send(Message("TopicTest", tags="TagA", properties={"a": "5"})); _ = store.dispatch()
    >>> ext = store.context.tables.consume_queue_ext.read(spark)     # real tag codes, bitmaps
    >>> ext.where(tag.consume_queue_column()).count()
    1
    >>> import pyarrow as pa
    >>> units = pa.table({"tags_code": [2598919, 7], "filter_bitmap": pa.nulls(2, pa.binary()),
    ...                   "filter_version": pa.nulls(2, pa.int64())})
    >>> tag.consume_queue_mask(units).tolist(), tag.skippable(pa.table({"tags_codes": [[7]]})).tolist()
    ([True, False], [True])
    >>> ext.select(sql.trusted_bitmap().alias("t")).first().t          # no Bloom data registered: not trusted
    False
    """

    def __init__(
        self,
        topic: str,
        selector: MessageSelector,
        subscription: "Subscription | None" = None,
        bloom_filter: "BloomFilter | None" = None,
        *,
        config: "StoreConfig | None" = None,
    ):
        self.topic = topic
        self.selector = selector
        self.subscription = subscription
        self.config = config  # the store's settings: its SQL92 limits
        bloom = subscription.bloom if subscription is not None and subscription.is_sql92 else None
        self.bloom: "BloomFilterData | None" = (
            bloom if bloom is not None and (bloom_filter is None or bloom_filter.is_valid(bloom)) else None
        )
        self.version = subscription.version if subscription is not None else None
        self.bloom_filter = bloom_filter

    @functools.cached_property
    def data(self):
        """RocketMQ's SubscriptionData (tags set and code set; none for SQL92)."""

        kind = "TAG" if self.selector.is_class else self.selector.expression_type
        return build_subscription(self.topic, self.selector.expression, kind)

    @functools.cached_property
    def class_filter(self) -> "ClassFilter | None":
        """A class selector's filter (run after both stages), None for tag and SQL92 selectors.

        >>> MessageFilter("TopicTest", MessageSelector.by_class("m:F", tags="TagA")).class_filter.name
        'm:F'
        """

        group = self.subscription.group if self.subscription is not None else None
        return ClassFilter.of(self.selector, group, self.topic) if self.selector.is_class else None

    @functools.cached_property
    def sql(self):
        """The SQL92 expression, parsed with the store's limits (the registered subscription's, if it is
        this selector)."""

        if not self.selector.is_sql92:
            return None
        if self.subscription is not None and self.subscription.selector == self.selector:
            return self.subscription.compiled
        from storelib.filter.sql92 import parse_sql92  # sqlglot, imported where a SQL92 selector is

        return parse_sql92(self.selector.expression, **sql92_limits(self.config))

    @property
    def matches_all(self) -> bool:
        """A ``*`` tag subscription: every message of the topic."""
        return self.selector.is_tag and self.data.sub_string == "*"

    @property
    def tags_all(self) -> bool:
        """Both stages pass every message: a ``*`` tag subscription, or a class selector with no tag prefilter."""
        return self.selector.by_tags and self.data.sub_string == "*"

    @property
    def passes_every_unit(self) -> bool:
        """Step 1 lets every unit through (``*``, or SQL92 without Bloom data): units need no ext lookup."""
        return self.tags_all if self.selector.by_tags else self.bloom is None

    @property
    def uses_bitmap(self) -> bool:
        return self.bloom is not None

    # ---- Spark columns -------------------------------------------------------------------------
    def consume_queue_column(self) -> "Column":
        """Step 1 over ``tags_code`` (real), ``filter_bitmap`` and ``filter_version`` columns; never NULL."""
        from pyspark.sql import functions as F

        if self.selector.by_tags:
            return code_match_column(self.data, F.col("tags_code"))
        if self.bloom is None:
            return F.lit(True)
        return F.coalesce(~self.trusted_bitmap() | self.bitmap_hit(), F.lit(True))

    def trusted_bitmap(self) -> "Column":
        """TRUE where the unit's bitmap was computed knowing this subscription (so it may prune)."""
        from pyspark.sql import functions as F

        return F.coalesce(F.col("filter_version") >= F.lit(self.version), F.lit(False))

    def bitmap_hit(self) -> "Column":
        from pyspark.sql import functions as F

        assert self.bloom is not None  # asked only of a filter that uses_bitmap
        return F.coalesce(may_match_column(F.col("filter_bitmap"), self.bloom), F.lit(True))

    def commitlog_column(self) -> "Column":
        """Step 2 over commitlog columns ``tags`` and ``properties``; never NULL (a class selector's
        tag prefilter; the class itself runs on the executors, :meth:`ClassFilter.apply`)."""
        from pyspark.sql import functions as F

        if self.selector.by_tags:
            return tag_match_column(self.data, F.col("tags"))
        return self.sql.to_column("properties")

    def commitlog_check(self) -> "Callable[[pa.RecordBatch | pa.Table], pa.BooleanArray] | None":
        """Step 2 of a SQL92 selector over Arrow rows, as a function small enough to send to Spark's tasks (None
        for tag and class selectors, whose step 2 is :meth:`commitlog_expression`).

        >>> check = MessageFilter("TopicTest", MessageSelector.by_sql("a > 5")).commitlog_check()
        >>> props = pa.array([[("a", "7")], [("a", "1")]], pa.map_(pa.string(), pa.string()))
        >>> check(pa.table({"properties": props})).to_pylist()
        [True, False]
        """
        if not self.selector.is_sql92:
            return None
        return functools.partial(properties_pass, self.sql.text, **sql92_limits(self.config))

    def commitlog_expression(self):
        """Step 2 of a tag or class selector as a pyarrow expression over ``tags`` (None: every row passes),
        for rows read with pyarrow.

        >>> MessageFilter("TopicTest", MessageSelector.by_class("m:F", tags="TagA")).commitlog_expression()
        <pyarrow.compute.Expression is_in(tags, {value_set=string:[
          "TagA"
        ], null_matching_behavior=MATCH})>
        """

        tags = self._commitlog_tags()
        return None if tags is None else pc.field("tags").isin(tags)

    def commitlog_tags_mask(self, rows: "pa.RecordBatch | pa.Table") -> "pa.Array | pa.ChunkedArray | None":
        """:meth:`commitlog_expression` over rows already read: a boolean array (None: every row passes).

        >>> flt = MessageFilter("TopicTest", MessageSelector.by_tag("TagA || TagB"))
        >>> flt.commitlog_tags_mask(pa.table({"tags": ["TagB", "TagC", None]})).to_pylist()
        [True, False, False]
        """
        tags = self._commitlog_tags()
        return None if tags is None else pc.is_in(rows.column("tags"), value_set=tags)

    def _commitlog_tags(self) -> "pa.Array | None":
        """The tags a tag or class selector's step 2 keeps over commitlog rows (None: every row passes)."""
        if not self.selector.by_tags:
            raise NotImplementedError("SQL92 is checked by Spark columns")
        if self.data.class_filter_mode or not self.data.tags_set:
            return None
        return pa.array(sorted(self.data.tags_set), pa.string())

    # ---- Arrow, for units read on the driver --------------------------------------------------------
    def consume_queue_mask(self, units: "pa.Table") -> "np.ndarray":
        """Step 1 for a table of units (``tags_code``, ``filter_bitmap``, ``filter_version``), vectorized."""

        n = units.num_rows
        if self.selector.by_tags:
            if self.tags_all:
                return np.ones(n, dtype=bool)
            codes = units.column("tags_code")
            low32 = pc.fill_null(codes, 0).to_numpy().astype(np.int64).astype(np.int32)  # Long.intValue()
            return np.isin(low32, np.array(sorted(self.data.code_set), dtype=np.int32)) | pc.is_null(codes).to_numpy(
                zero_copy_only=False
            )
        if self.bloom is None:
            return np.ones(n, dtype=bool)
        return self._bitmap_passes(units.column("filter_bitmap"), units.column("filter_version"))

    def _bitmap_passes(self, bitmaps: "pa.ChunkedArray", versions: "pa.ChunkedArray") -> np.ndarray:
        """Per row: may its Bloom bitmap hold a match? Only a bitmap computed knowing this subscription (its
        version at least the subscription's registry version) and of the subscription's length can say no."""
        assert self.bloom is not None  # asked only of a filter that uses_bitmap
        width = self.bloom.bit_num // 8 if self.bloom.bit_num % 8 == 0 else -1
        sized = pc.fill_null(pc.equal(pc.binary_length(bitmaps), width), False).to_numpy(zero_copy_only=False)
        trusted = (pc.fill_null(versions, -1).to_numpy() >= self.version) & sized
        passed = ~trusted
        if trusted.any():
            rows = np.flatnonzero(trusted)
            passed[rows] = bitmap_hits(bitmaps.take(rows).combine_chunks(), self.bloom)
        return passed

    # ---- summaries of files and row groups ------------------------------------------------------
    def skippable(self, summaries: "pa.Table") -> np.ndarray:
        """Per summary row (of a consume_queue_ext file or a clustered row group, :mod:`storelib.filter.summary`):
        does it prove that none of its units passes step 1? Columns ``tags_codes`` (a tag selector: none of the
        codes matches, and the list is known) or ``no_hit``, ``filter_bitmap_or`` and ``filter_version_min`` (a
        SQL92 selector with Bloom data: its subscription is listed as hitting nothing, or the OR of the bitmaps,
        computed knowing it, misses its bits).

        >>> tag = MessageFilter("TopicTest", MessageSelector.by_tag("TagA"))
        >>> tag.skippable(pa.table({"tags_codes": pa.array([[7], [7, 2598919], None], pa.list_(pa.int64()))})).tolist()
        [True, False, False]
        """
        n = summaries.num_rows
        if self.selector.by_tags:
            if self.tags_all:
                return np.zeros(n, dtype=bool)
            lists = summaries.column("tags_codes").combine_chunks()
            codes = pc.list_flatten(lists)
            matching = [c for c in pc.unique(codes).to_pylist() if self.data.matches_code(c)]  # the rule's one home
            hit = pc.is_in(codes, value_set=pa.array(matching, pa.int64())).to_numpy(zero_copy_only=False)
            matched = np.zeros(n, dtype=bool)
            matched[pc.list_parent_indices(lists).to_numpy()[hit]] = True
            return ~matched & lists.is_valid().to_numpy(zero_copy_only=False)
        if self.bloom is None:
            return np.zeros(n, dtype=bool)
        assert self.subscription is not None and self.version is not None  # the Bloom data's subscription
        lists = summaries.column("no_hit").combine_chunks()
        listed = pc.equal(pc.list_flatten(lists), subscription_key(self.subscription.group, self.version))
        skip = np.zeros(n, dtype=bool)
        skip[pc.list_parent_indices(lists).to_numpy()[listed.to_numpy(zero_copy_only=False)]] = True
        return skip | ~self._bitmap_passes(summaries.column("filter_bitmap_or"), summaries.column("filter_version_min"))

    # ---- Python, for point reads -----------------------------------------------------------------
    def is_matched_by_consume_queue(
        self, tags_code: int | None = None, filter_bitmap: bytes | None = None, filter_version: int | None = None
    ) -> bool:
        """Step 1 for one unit (tag code real, not an ext address)."""
        if self.selector.by_tags:
            return tags_code is None or self.data.matches_code(tags_code)
        if self.bloom is None or filter_bitmap is None or filter_version is None:
            return True
        assert self.version is not None  # the Bloom data's subscription's
        if filter_version < self.version:
            return True
        if len(filter_bitmap) * 8 != self.bloom.bit_num:
            return True
        return self._hit(filter_bitmap)

    def _hit(self, bitmap: bytes) -> bool:
        assert self.bloom is not None  # asked only of a filter that uses_bitmap
        return (self.bloom_filter or BloomFilter()).is_hit(self.bloom, bytearray(bitmap))

    def is_matched_by_commitlog(self, tags: str | None = None, properties: Mapping[str, str] | None = None) -> bool:
        """Step 2 for one message (a class selector: its tag prefilter only)."""
        if self.selector.by_tags:
            return self.data.matches_tag(tags)
        return self.sql.evaluate(properties or {})


def properties_pass(text: str, rows: pa.RecordBatch | pa.Table, **limits: int) -> pa.BooleanArray:
    """TRUE where the SQL92 expression ``text`` holds for a row's ``properties`` (RocketMQ's evaluator: Boolean
    TRUE), FALSE elsewhere; the expression is parsed once per process (:func:`~storelib.filter.sql92.parse_sql92`,
    with the store's ``limits``, :func:`~storelib.filter.selector.sql92_limits`).

    >>> props = pa.array([[("region", "r2")], None], pa.map_(pa.string(), pa.string()))
    >>> properties_pass("region = 'r2'", pa.table({"properties": props})).to_pylist()
    [True, False]
    """
    from storelib.filter.sql92 import parse_sql92
    from storelib.filter.sql92.arrow import evaluate_batch

    return evaluate_batch(parse_sql92(text, **limits).tree, rows.column("properties"))
