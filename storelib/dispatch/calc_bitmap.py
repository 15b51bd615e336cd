"""CalcBitMap (RocketMQ's ``CommitLogDispatcherCalcBitMap``): at dispatch, every live SQL92
subscription of a message's topic is evaluated on the message, and the subscription's Bloom bits
(``group#topic``, see :mod:`storelib.filter.bloom`) are set in the message's filter bitmap where it
returns TRUE.

Here it runs on the executors, on each Arrow batch of commitlog rows the dispatch job reads
(:class:`~storelib.dispatch.request.DispatchRequests`): all subscriptions of a topic are evaluated at
once over the properties of the batch's rows of that topic (:mod:`storelib.filter.sql92.arrow`: each
property look-up and number parse done once for all of them, vectorized), and the bits are set
with numpy over the whole batch (:func:`storelib.filter.bloom.bitmap_array`).

>>> from storelib import MessageSelector
>>> sub = store.subscribe("GroupB", "TopicTest", MessageSelector.by_sql("a > 3"))
>>> batch = store.context.tables.commitlog.read_arrow().to_batches()[0]
>>> row = FilterBitmaps.of([sub], 7)(batch).select(["filter_bitmap", "filter_version"]).to_pylist()[0]
>>> BloomFilter().is_hit(sub.bloom, row["filter_bitmap"]), row["filter_version"]
(True, 7)
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.filter.bloom import BloomFilter, BloomFilterData, bitmap_array  # noqa: F401  (BloomFilter: the doctest)

if TYPE_CHECKING:
    from storelib.filter.sql92.arrow import ArrowSql92
    from storelib.filter.sql92.tree import Node
    from storelib.filter.subscription import Subscription

__all__ = ["FilterBitmaps"]

_BITMAP_COLUMNS = ("filter_bitmap", "filter_version")


@dataclass(frozen=True)
class FilterBitmaps:
    """The filter bitmaps of batches of commitlog rows, for live SQL92 subscriptions with Bloom data,
    all of ``bit_num`` bits, of registry ``version``.

    Calling it on a batch (with ``topic`` and ``properties``) appends ``filter_bitmap`` (binary) and
    ``filter_version`` (int64): for a row of a topic some subscription is for, the bits of each of
    its topic's subscriptions that returns TRUE (all clear if none does) and ``version``; null for
    rows of other topics.

    >>> from storelib.filter.sql92 import parse_sql92
    >>> data = BloomFilter().generate("G#T")
    >>> bitmaps = FilterBitmaps(((("T", parse_sql92("a > 1").tree, data)),), 5, 112)
    >>> props = pa.array([[("a", "2")], [("a", "0")], [("a", "2")]], pa.map_(pa.string(), pa.string()))
    >>> out = bitmaps(pa.RecordBatch.from_pydict({"topic": ["T", "T", "U"], "properties": props}))
    >>> ([None if b is None else b.hex() for b in out.column("filter_bitmap").to_pylist()],
    ...  out.column("filter_version").to_pylist())
    (['0000000500000000000008000000', '0000000000000000000000000000', None], [5, 5, None])
    >>> bitmaps.topics
    ('T',)
    """

    #: (topic, SQL92 tree, Bloom data) of each subscription.
    subscriptions: tuple[tuple[str, Node, BloomFilterData], ...]
    version: int
    bit_num: int

    @classmethod
    def of(cls, subs: Sequence["Subscription"], version: int) -> "FilterBitmaps":
        """For registry subscriptions: live SQL92 ones with valid Bloom data, all of one bit count."""
        entries = tuple(
            (s.topic, s.compiled.tree, s.bloom) for s in subs if s.compiled is not None and s.bloom is not None
        )
        return cls(entries, version, entries[0][2].bit_num if entries else 0)

    @property
    def topics(self) -> tuple[str, ...]:
        """The topics with subscriptions, sorted."""
        return tuple(sorted({topic for topic, _, _ in self.subscriptions}))

    @functools.cached_property
    def _compiled(self) -> list[tuple[ArrowSql92, list[BloomFilterData]]]:
        """Per topic of :attr:`topics`: its subscriptions' trees compiled together, and their Bloom data."""
        from storelib.filter.sql92.arrow import ArrowSql92  # sqlglot, imported where a SQL92 subscription is

        return [
            (
                ArrowSql92([tree for t, tree, _ in self.subscriptions if t == topic]),
                [data for t, _, data in self.subscriptions if t == topic],
            )
            for topic in self.topics
        ]

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        rows = batch.num_rows
        index = pc.index_in(batch.column("topic"), value_set=pa.array(self.topics, pa.string()))
        index = np.asarray(pc.fill_null(index, -1).to_numpy(zero_copy_only=False))
        matches: list[tuple[np.ndarray, BloomFilterData]] = []
        for i, (compiled, blooms) in enumerate(self._compiled):
            in_topic = index == i
            if not in_topic.any():
                continue
            if in_topic.all():
                matches.extend(zip(compiled.matches(batch.column("properties")), blooms))
                continue
            at = np.flatnonzero(in_topic)
            for match, data in zip(compiled.matches(batch.column("properties").take(pa.array(at))), blooms):
                full = np.zeros(rows, dtype=bool)
                full[at] = match
                matches.append((full, data))
        valid = index >= 0
        bitmap = bitmap_array(matches, self.bit_num, rows, valid) if self.subscriptions else pa.nulls(rows, pa.binary())
        version = pa.array(np.full(rows, self.version, dtype=np.int64), mask=~valid)
        kept = [name for name in batch.schema.names if name not in _BITMAP_COLUMNS]
        return pa.RecordBatch.from_arrays(
            [batch.column(n) for n in kept] + [bitmap, version], names=kept + list(_BITMAP_COLUMNS)
        )
