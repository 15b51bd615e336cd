"""Upkeep of the store's tables: compaction (Delta's OPTIMIZE, keeping each table's clustering, and
clustering the settled commitlog) and vacuum (Delta's VACUUM, plus what DataFrame sends that died
left staged, and the orphan files of writes that died before their commit: :mod:`storelib.delta.orphans`),
and retention's steps in their order (:func:`delete_expired`).

>>> sorted(compact_store(store.context))
['commitlog', 'commitlog_clustered', 'consume_queue', 'consume_queue_ext', 'index', 'orphans']
"""

from __future__ import annotations

from storelib.context import StoreContext
from storelib.delta.compaction import compact_table
from storelib.delta.log import add_actions
from storelib.delta.orphans import remove_orphans
from storelib.filter.summary import summarizer_for
from storelib.maintenance.cluster import cluster_commitlog
from storelib.maintenance.retention import clean_commitlog, clean_consume_queue
from storelib.maintenance.topic_retention import expire_topics
from storelib.model.errors import ConfigError, require_int
from storelib.storage.commitlog import is_clustered
from storelib.storage.summaries import forget_summaries, record_summaries

__all__ = ["compact_store", "vacuum_store", "remove_all_orphans", "delete_expired"]

#: The tables compaction merges, and the order each keeps inside its files beyond its clustering.
_COMPACTED = {"commitlog": "physical_offset", "consume_queue": None, "consume_queue_ext": None, "index": None}


def compact_store(ctx: StoreContext, full: bool = False, settle_ms: int | None = None) -> dict[str, tuple[int, int]]:
    """Cluster the settled commitlog (:func:`~storelib.maintenance.cluster.cluster_commitlog`, as
    ``commitlog_clustered``), then merge small files of every data table, keeping each file to one
    queue / key-hash range / offset run; ``full`` also rewrites large files. Returns ``{table:
    (files removed, files added)}``. The ext table's files get fresh summaries, recorded before
    their commit; summary files of data files gone for an hour are removed."""
    if not isinstance(full, bool):
        raise ConfigError("full", "must be True or False", value=full)
    require_int(ConfigError, "settle_ms", settle_ms, 0, optional=True)
    tables = ctx.tables.by_name()
    clustered = cluster_commitlog(ctx, settle_ms=settle_ms)
    out = {"commitlog_clustered": (clustered.files_removed, clustered.files_added)}
    for name, order in _COMPACTED.items():
        summarize = before_commit = None
        if name == "consume_queue_ext":
            summarize = summarizer_for(ctx.registry.all())
            before_commit = lambda files: record_summaries(ctx.tables.ext_summary, files)  # noqa: E731
        out[name] = compact_table(
            ctx.spark,
            tables[name],
            target_file_size=ctx.config.target_file_size,
            order_by=order,
            full=full,
            summarize=summarize,
            before_commit=before_commit,
            leave=is_clustered if name == "commitlog" else None,
        )
    for data, summaries in (
        (ctx.tables.commitlog, ctx.tables.commitlog_summary),
        (ctx.tables.consume_queue_ext, ctx.tables.ext_summary),
    ):
        forget_summaries(summaries, add_actions(data.snapshot()).column("path").to_pylist())
    out["orphans"] = (remove_all_orphans(ctx), 0)
    return out


def remove_all_orphans(ctx: StoreContext) -> int:
    """Delete the orphan files of every table older than ``orphan_file_min_age_hours``; return how many.

    >>> remove_all_orphans(store.context)
    0
    """
    age = ctx.config.orphan_file_min_age_hours * 3600
    return sum(remove_orphans(t, age) for t in ctx.tables.by_name().values())


def vacuum_store(ctx: StoreContext, retention_hours: int = 168) -> dict[str, int]:
    """Delete files no snapshot younger than ``retention_hours`` needs, in every table, staged
    files of dead DataFrame sends older than ``retention_hours`` (at least an hour), and orphan files
    (written, never committed) older than ``orphan_file_min_age_hours``; returns counts. A file
    removed longer ago than the log keeps its tombstone (:data:`~storelib.delta.table.TOMBSTONE_RETENTION`)
    is an orphan, deleted once ``orphan_file_min_age_hours`` past its removal, whatever ``retention_hours`` says.

    >>> vacuum_store(store.context)["staging"], vacuum_store(store.context)["orphans"]
    (0, 0)
    >>> vacuum_store(store.context, -1)
    Traceback (most recent call last):
    ...
    storelib.model.errors.ConfigError: retention_hours: must be an integer >= 0 (got -1)
    """
    require_int(ConfigError, "retention_hours", retention_hours, 0)
    counts = {
        name: len(
            t.snapshot().vacuum(
                retention_hours=retention_hours, dry_run=False, enforce_retention_duration=retention_hours >= 168
            )
        )
        for name, t in ctx.tables.by_name().items()
    }
    counts["staging"] = ctx.commitlog.clean_staging(max(1, retention_hours))
    counts["orphans"] = remove_all_orphans(ctx)
    return counts


def delete_expired(
    ctx: StoreContext, reserved_hours: float | None = None, now: object = None
) -> tuple[dict[str, int], dict[str, int]]:
    """Retention's steps in RocketMQ's order, the commitlog's expired files (``file_reserved_time``), then
    each topic's messages past its ``retention_ms``, then what pointed into what went; returns the files
    removed per table and the messages removed per topic with a retention. Safe to run again after a
    crash anywhere: each step finishes what an earlier run left undone.

    >>> delete_expired(store.context)
    ({'commitlog': 0, 'consume_queue': 0, 'consume_queue_ext': 0, 'index': 0}, {})
    """
    files = {"commitlog": clean_commitlog(ctx, reserved_hours, now)}
    messages = expire_topics(ctx, now)
    files.update(clean_consume_queue(ctx))
    return files, messages
