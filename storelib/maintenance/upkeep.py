"""Upkeep of the store's tables: compaction (Delta's OPTIMIZE, keeping each table's clustering) and
vacuum (Delta's VACUUM, plus what DataFrame sends that died left staged).

>>> sorted(compact_store(store.context))
['commitlog', 'consume_queue', 'consume_queue_ext', 'index']
"""

from __future__ import annotations

from storelib.context import StoreContext
from storelib.delta.compaction import compact_table
from storelib.filter.summary import record_summaries, summarizer_for

__all__ = ["compact_store", "vacuum_store"]

#: The tables compaction merges, and the order each keeps inside its files beyond its clustering.
_COMPACTED = {"commitlog": "physical_offset", "consume_queue": None, "consume_queue_ext": None, "index": None}


def compact_store(ctx: StoreContext, full: bool = False) -> dict[str, tuple[int, int]]:
    """Merge small files of every data table, keeping each file to one queue / key-hash range /
    offset run; ``full`` also rewrites large files. Returns ``{table: (files removed, files added)}``.
    The ext table's files get fresh summaries, recorded before their commit."""
    tables = ctx.tables.by_name()
    out = {}
    for name, order in _COMPACTED.items():
        summarize = before_commit = None
        if name == "consume_queue_ext":
            summarize = summarizer_for(ctx.registry.all())
            before_commit = lambda files: record_summaries(ctx.tables.ext_summary, files)  # noqa: E731
        out[name] = compact_table(ctx.spark, tables[name], target_file_size=ctx.config.target_file_size,
                                  order_by=order, full=full, summarize=summarize, before_commit=before_commit)
    return out


def vacuum_store(ctx: StoreContext, retention_hours: int = 168) -> dict[str, int]:
    """Delete files no snapshot younger than ``retention_hours`` needs, in every table, and staged
    files of dead DataFrame sends older than ``retention_hours`` (at least an hour); returns counts.

    >>> vacuum_store(store.context)["staging"]
    0
    """
    counts = {name: len(t.snapshot().vacuum(retention_hours=retention_hours, dry_run=False,
                                            enforce_retention_duration=retention_hours >= 168))
              for name, t in ctx.tables.by_name().items()}
    counts["staging"] = ctx.commitlog.clean_staging(max(1, retention_hours))
    return counts
