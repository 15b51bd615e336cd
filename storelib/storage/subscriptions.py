"""The subscription registry: RocketMQ's ConsumerFilterManager, kept as a Delta table.

One expression per (consumer group, topic). Every registration is a row; the newest row of a
(group, topic) is its subscription, so a later registration replaces the earlier one. Rows carry
the registry ``version`` they were committed at (the ``subscription`` table's Delta version), and
SQL92 rows carry the Bloom filter data of ``group#topic``. Dispatch records the registry version
it computed bitmaps with, so a bitmap is trusted for exactly the subscriptions it knew.

>>> reg = SubscriptionRegistry(store.context.tables.subscription, StoreConfig())
>>> s = reg.register("GroupB", "TopicTest", MessageSelector.by_sql("a > 5"))
>>> s.version > reg.get("GroupA", "TopicTest").version, s.bloom.bit_pos
(True, [20, 108, 93])
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Iterable

import pyarrow as pa

from storelib.delta.commit import with_retries
from storelib.delta.table import Table
from storelib.delta.writer import write_rows
from storelib.filter.bloom import BloomFilter, BloomFilterData
from storelib.filter.selector import MessageSelector
from storelib.filter.subscription import Subscription
from storelib.model.config import StoreConfig
from storelib.model.errors import SubscriptionNotFoundError
from storelib.model.topic import validate_group, validate_topic
from storelib.storage.schema import SUBSCRIPTION

if TYPE_CHECKING:
    from deltalake import DeltaTable

__all__ = ["SubscriptionRegistry"]

log = logging.getLogger(__name__)

#: ``(max_error_rate_of_bloom_filter, expect_consumer_num_use_filter)`` as :class:`StoreConfig` has them.
_BLOOM_DEFAULTS = (StoreConfig.max_error_rate_of_bloom_filter, StoreConfig.expect_consumer_num_use_filter)


class SubscriptionRegistry:
    """The ``subscription`` table: register, replace, unregister and look up subscriptions.

    >>> reg = store.context.registry
    >>> [(s.group, s.topic) for s in reg.all()], list(reg.current())
    ([('GroupA', 'TopicTest')], [('GroupA', 'TopicTest')])
    >>> [s.group for s in reg.for_topic("TopicTest")], reg.snapshot().version() >= 1
    (['GroupA'], True)
    >>> reg.unregister("GroupA", "TopicTest"), reg.unregister("GroupA", "TopicTest")
    (True, False)
    """

    def __init__(self, table: Table, config: StoreConfig):
        self.table = table
        self.config = config

    @property
    def bloom_filter(self) -> BloomFilter:
        """The Bloom filter subscriptions get their bits from (``ConsumerFilterManager``'s), made from
        ``max_error_rate_of_bloom_filter`` and ``expect_consumer_num_use_filter``. Left at their defaults,
        a store keeps the filter its newest SQL92 subscription was registered with, so that opening a
        store sized otherwise does not silently stop every bitmap from pruning. Set to something else,
        they win, as the broker's settings do; subscriptions sized otherwise are then checked exactly
        until registered again (RocketMQ drops their persisted filter data).

        >>> store.context.registry.bloom_filter
        BloomFilter(f=20, n=32, k=3, m=112)
        """
        return self.table.memo("bloom_filter", lambda view: self._bloom_for(self.all()))

    def _bloom_for(self, subs: list[Subscription]) -> BloomFilter:
        c = self.config
        configured = BloomFilter(c.max_error_rate_of_bloom_filter, c.expect_consumer_num_use_filter)
        newest = max((s for s in subs if s.bloom is not None), key=lambda s: s.version, default=None)
        if newest is None or configured.is_valid(newest.bloom):
            return configured
        assert newest.bloom is not None  # the newest of those with Bloom data
        if (c.max_error_rate_of_bloom_filter, c.expect_consumer_num_use_filter) == _BLOOM_DEFAULTS:
            return BloomFilter.of_shape(newest.bloom)
        log.warning(
            "subscription %s@%s has Bloom bits for m=%d, k=%d, not those of this store's settings, %r: its "
            "messages are checked exactly until it subscribes again",
            newest.group,
            newest.topic,
            newest.bloom.bit_num,
            len(newest.bloom.bit_pos),
            configured,
        )
        return configured

    # ---- writing -----------------------------------------------------------------------------
    def register(self, group: str, topic: str, selector: "MessageSelector | str | None") -> Subscription:
        """Subscribe ``group`` to ``topic``; replaces the group's earlier expression for the topic.

        The selector is stored as given: check it first (:func:`~storelib.filter.subscription.check_selector`,
        which also gives a class selector its class's CRC). Registering the same expression again changes
        nothing and returns the current subscription, unless its Bloom bits were made by another filter
        (:attr:`bloom_filter`): it then gets this one's.
        """
        validate_group(group)
        validate_topic(topic)
        selector = MessageSelector.of(selector)
        bloom = self.bloom_filter.generate(f"{group}#{topic}") if selector.is_sql92 else None

        def step(snapshot: "DeltaTable") -> Subscription:
            current = self._current(snapshot).get((group, topic))
            if current is not None and current.selector == selector and current.bloom == bloom:
                return current
            version = snapshot.version() + 1
            now = dt.datetime.now(dt.timezone.utc)
            sub = Subscription(group, topic, selector, version, _sub_version(now, current), now, bloom, self.config)
            write_rows(self.table, snapshot, _rows([sub], dead=False), prefix="sub", operation="SUBSCRIBE")
            return sub

        return with_retries(self.table, self.config.max_commit_attempts, step, what="subscribe")

    def unregister(self, group: str, topic: str) -> bool:
        """Remove the group's subscription to the topic; False if it had none."""

        def step(snapshot: "DeltaTable") -> bool:
            current = self._current(snapshot).get((group, topic))
            if current is None:
                return False
            now = dt.datetime.now(dt.timezone.utc)
            gone = Subscription(group, topic, current.selector, snapshot.version() + 1, _sub_version(now, current), now)
            write_rows(self.table, snapshot, _rows([gone], dead=True), prefix="sub", operation="UNSUBSCRIBE")
            return True

        return with_retries(self.table, self.config.max_commit_attempts, step, what="unsubscribe")

    # ---- reading -----------------------------------------------------------------------------
    def snapshot(self) -> "DeltaTable":
        return self.table.snapshot()

    def current(self) -> dict[tuple[str, str], Subscription]:
        """Live subscriptions by (group, topic) of the newest registry version, kept in memory between versions."""
        return self.table.memo("current", lambda view: self._latest(self.table.read_view(view)))

    def get(self, group: str, topic: str, snapshot: "DeltaTable | None" = None) -> Subscription:
        """The group's live subscription to the topic, or :class:`SubscriptionNotFoundError`."""
        sub = (self._current(snapshot) if snapshot is not None else self.current()).get((group, topic))
        if sub is None:
            raise SubscriptionNotFoundError(
                "group", f"consumer group {group} has no subscription to topic {topic}", value=group
            )
        return sub

    def for_topic(self, topic: str, snapshot: "DeltaTable | None" = None) -> list[Subscription]:
        """Every live subscription to ``topic``, by group name."""
        subs = self._current(snapshot) if snapshot is not None else self.current()
        return [s for (g, t), s in sorted(subs.items()) if t == topic]

    def all(self, snapshot: "DeltaTable | None" = None) -> list[Subscription]:
        subs = self._current(snapshot) if snapshot is not None else self.current()
        return [s for _, s in sorted(subs.items())]

    def _current(self, snapshot: "DeltaTable") -> dict[tuple[str, str], Subscription]:
        return self._latest(self.table.read_arrow(snapshot))

    def _latest(self, table: pa.Table) -> dict[tuple[str, str], Subscription]:
        rows = table.to_pylist()
        latest: dict[tuple[str, str], dict] = {}
        for r in sorted(rows, key=lambda r: r["version"]):
            latest[(r["consumer_group"], r["topic"])] = r
        return {k: _subscription(r, self.config) for k, r in latest.items() if not r["dead"]}


def _sub_version(now: dt.datetime, current: Subscription | None) -> int:
    millis = int(now.timestamp() * 1000)
    return max(millis, current.sub_version + 1) if current is not None else millis


def _rows(subs: Iterable[Subscription], dead: bool) -> pa.Table:
    return pa.Table.from_pylist([_row(s, dead) for s in subs], schema=SUBSCRIPTION.arrow)


def _row(sub: Subscription, dead: bool) -> dict:
    return {
        "consumer_group": sub.group,
        "topic": sub.topic,
        "expression_type": sub.selector.expression_type,
        "expression": sub.selector.expression,
        "version": sub.version,
        "sub_version": sub.sub_version,
        "born_timestamp": sub.born_timestamp,
        "dead": dead,
        "bloom_bit_pos": list(sub.bloom.bit_pos) if sub.bloom else None,
        "bloom_bit_num": sub.bloom.bit_num if sub.bloom else None,
        "filter_class": sub.selector.filter_class,
        "filter_class_crc": sub.selector.filter_class_crc,
        "filter_class_source": sub.selector.filter_class_source,
    }


def _subscription(r: dict, config: StoreConfig) -> Subscription:
    bloom = BloomFilterData(list(r["bloom_bit_pos"]), r["bloom_bit_num"]) if r["bloom_bit_pos"] is not None else None
    selector = MessageSelector(
        r["expression_type"],
        r["expression"],
        r.get("filter_class"),
        r.get("filter_class_crc"),
        r.get("filter_class_source"),
    )
    return Subscription(
        r["consumer_group"], r["topic"], selector, r["version"], r["sub_version"], r["born_timestamp"], bloom, config
    )
