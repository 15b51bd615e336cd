"""What :class:`~storelib.store.MessageStore` does to keep a store lean: retention (RocketMQ's clean services and
per-topic retention), compaction and vacuum. A part of the one handle (it inherits these); every method
delegates to the maintenance services.

>>> store.min_offset(), store.clean_commitlog()
(0, 0)
"""

from __future__ import annotations

from storelib.context import StoreContext
from storelib.maintenance.retention import clean_commitlog, clean_consume_queue
from storelib.maintenance.topic_retention import expire_topics
from storelib.maintenance.upkeep import compact_store, delete_expired, vacuum_store
from storelib.model.errors import translate_methods
from storelib.model.timestamps import Timestamp
from storelib.storage.commitlog_reads import min_physical_offset
from storelib.storage.consume_queue import min_offset as queue_min

__all__ = ["Upkeep"]


@translate_methods
class Upkeep:
    """Retention, compaction and vacuum; :class:`~storelib.store.MessageStore` is the class to use.

    >>> isinstance(store, Upkeep)
    True
    """

    _ctx: StoreContext

    # ---- retention -----------------------------------------------------------------------------
    def min_offset(self) -> int:
        """The smallest commitlog offset still stored (``getMinPhyOffset``; 0 when empty), from file statistics.

        >>> store.min_offset()
        0
        """
        return min_physical_offset(self._ctx.tables.commitlog.view().actions)

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        """The first queue offset of (topic, queue) still served (``getMinOffsetInQueue``; 0 when empty), from
        the consume queue's log. Retention moves it past units whose messages left, up to the max offset.

        >>> store.min_queue_offset("TopicTest", 0)
        0
        """
        return queue_min(self._ctx.tables.consume_queue, topic, queue_id)

    def clean_commitlog(self, reserved_hours: float | None = None, *, now: Timestamp | None = None) -> int:
        """Remove expired commitlog files, oldest first (``CleanCommitLogService``); returns files removed.

        A file expires ``reserved_hours`` (default ``file_reserved_time``, 72) after its newest message;
        never the newest file nor undispatched data. ``now``: epoch ms or an aware datetime (default: the clock).

        >>> store.clean_commitlog()            # nothing is 72 hours old yet
        0
        """
        return clean_commitlog(self._ctx, reserved_hours, now)

    def clean_consume_queue(self) -> dict[str, int]:
        """Drop consume queue, ext and index files wholly below :meth:`min_offset`, move queue min offsets
        (``CleanConsumeQueueService``); returns files removed per table.

        >>> store.clean_consume_queue()
        {'consume_queue': 0, 'consume_queue_ext': 0, 'index': 0}
        """
        return clean_consume_queue(self._ctx)

    def expire_topics(self, *, now: Timestamp | None = None) -> dict[str, int]:
        """Remove each topic's messages older than its ``retention_ms`` (per-topic retention, see
        :mod:`storelib.maintenance.topic_retention`); returns messages removed per such topic.

        >>> _ = store.create_topic("Logs", 2, retention_ms=60_000); store.expire_topics()
        {'Logs': 0}
        """
        return expire_topics(self._ctx, now)

    def delete_expired_files(
        self, reserved_hours: float | None = None, *, now: Timestamp | None = None
    ) -> dict[str, int]:
        """The global steps in RocketMQ's order, the commitlog then what pointed into it, with per-topic
        retention (:meth:`expire_topics`) in between. Returns files removed per table by the global steps.
        Safe to run again after a crash anywhere: each step finishes what an earlier run left undone.

        >>> store.delete_expired_files()
        {'commitlog': 0, 'consume_queue': 0, 'consume_queue_ext': 0, 'index': 0}
        """
        return delete_expired(self._ctx, reserved_hours, now)[0]

    # ---- upkeep ----------------------------------------------------------------------------
    def compact(self, full: bool = False, *, settle_ms: int | None = None) -> dict[str, tuple[int, int]]:
        """Cluster the settled commitlog by each topic's clustering keys and Bloom bitmaps (dispatched
        messages older than ``settle_ms``, default ``cluster_settle_ms``), then merge small files of every
        table, each file one queue / key-hash range / offset run; ``full=True`` also rewrites large files.
        Returns ``{table: (files removed, files added)}``, the clustering as ``commitlog_clustered``.

        >>> sorted(store.compact())
        ['commitlog', 'commitlog_clustered', 'consume_queue', 'consume_queue_ext', 'index', 'orphans']
        """
        return compact_store(self._ctx, full, settle_ms)

    def vacuum(self, retention_hours: int = 168) -> dict[str, int]:
        """Delete files no snapshot younger than ``retention_hours`` needs (Delta VACUUM) and staged files of
        DataFrame sends that died (older than ``retention_hours``, at least an hour); returns counts.

        >>> store.vacuum()["commitlog"]
        0
        """
        return vacuum_store(self._ctx, retention_hours)
