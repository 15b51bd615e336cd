"""The summary tables (``consume_queue_ext_summary``, ``commitlog_summary``): the per-file and per-row-group
summaries of :mod:`storelib.filter.summary`, recorded before their data files are committed (so every
committed file has one; a file without one is simply read), read back by filtered reads, compacted
and forgotten with the files they sum up.

>>> read_summaries(store.context.tables.ext_summary, "Nowhere").num_rows
0
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from storelib.delta.commit import WrittenFile, remove_actions, with_retries
from storelib.delta.log import add_actions
from storelib.delta.stats import Prune
from storelib.delta.table import Table
from storelib.delta.writer import write_files, write_rows

if TYPE_CHECKING:
    from deltalake import DeltaTable

__all__ = [
    "record_summaries",
    "read_summaries",
    "record_row_group_summaries",
    "read_row_group_summaries",
    "compact_summaries",
    "forget_summaries",
]


def record_summaries(table: Table, files: Sequence[WrittenFile], attempts: int = 50) -> int:
    """Append the summaries of ``files`` (not yet committed to the ext table); return how many.

    >>> record_summaries(store.context.tables.ext_summary, [])
    0
    """
    rows = []
    for f in files:
        if not f.summary:
            continue
        s = json.loads(f.summary)
        rows.append(
            {
                "path": f.path,
                "topic": s["topic"],
                "queue_id": s["queue_id"],
                "num_records": f.num_records,
                "filter_bitmap_or": bytes.fromhex(s["bitmap"]) if s["bitmap"] is not None else None,
                "filter_version_min": s["version_min"],
                "tags_codes": s["codes"],
                "no_hit": s.get("no_hit") or [],
            }
        )
    return _append(table, rows, attempts)


def read_summaries(table: Table, topic: str) -> pa.Table:
    """Summaries of the topic's ext files, a row per file (``path``, ``filter_bitmap_or``, ``filter_version_min``,
    ``tags_codes``, ``no_hit``), for :meth:`~storelib.filter.message_filter.MessageFilter.skippable`.

    >>> from storelib import Message, MessageSelector
    >>> _ = store.subscribe("GroupS", "TopicTest", MessageSelector.by_sql("a > 3"))  # the topic gets ext units
    >>> _ = store.send(Message("TopicTest", tags="TagA", properties={"a": "5"})); _ = store.dispatch()
    >>> read_summaries(store.context.tables.ext_summary, "TopicTest").column("tags_codes").to_pylist()
    [[2598919]]
    """
    return table.read_arrow(
        prune=Prune(equal={"topic": topic}),
        filter=pc.field("topic") == topic,
        columns=["path", "filter_bitmap_or", "filter_version_min", "tags_codes", "no_hit"],
    )


def record_row_group_summaries(table: Table, files: Sequence[WrittenFile], attempts: int = 50) -> int:
    """Append the row group summaries of clustered commitlog ``files`` (before their commit); return how many.

    >>> record_row_group_summaries(store.context.tables.commitlog_summary, [])
    0
    """
    rows = []
    for f in files:
        for g in json.loads(f.summary) if f.summary else ():
            rows.append(
                {
                    "path": f.path,
                    "row_group": g["row_group"],
                    "topic": g["topic"],
                    "topics": g["topics"],
                    "num_records": g["num_records"],
                    "cluster_seq_min": g["seq_min"],
                    "cluster_seq_max": g["seq_max"],
                    "filter_bitmap_or": bytes.fromhex(g["bitmap"]) if g["bitmap"] is not None else None,
                    "filter_version_min": g["version_min"],
                    "tags_codes": g["codes"],
                    "no_hit": g.get("no_hit") or [],
                }
            )
    return _append(table, rows, attempts)


def _append(table: Table, rows: list[dict], attempts: int) -> int:
    """Append summary rows to a summary table in one commit (retried on conflicts); return how many."""
    if not rows:
        return 0
    data = pa.Table.from_pylist(rows, schema=table.spec.arrow)

    def step(snapshot: "DeltaTable") -> int:
        write_rows(table, snapshot, data, prefix="summary", operation="SUMMARIZE")
        return len(rows)

    # in the table's commit turn: a warm snapshot brought forward, not a load of every file the table holds
    return with_retries(table, attempts, step, what=f"record {table.spec.name} rows", serial=True)


def compact_summaries(
    table: Table, live: "Iterable[str]", min_age_ms: int = 10_000, attempts: int = 10
) -> tuple[int, int]:
    """Merge the files of ``consume_queue_ext_summary`` older than ``min_age_ms`` into one, leaving out
    the rows of ext files no longer in the ext table (``live``: its add paths; compaction replaced
    them); return (files removed, files added). Younger files stay as they are: their ext files may be
    about to be committed. A follower runs this after merging the ext table's fresh files, so the
    summary table, which gains a file each time summaries are recorded, keeps a few however long it runs.

    >>> compact_summaries(store.context.tables.ext_summary, [], min_age_ms=10**12)
    (0, 0)
    """
    live = pa.array(sorted(set(live)), pa.string())

    def step(snapshot: "DeltaTable") -> tuple[int, int]:
        actions = add_actions(snapshot)
        old = actions.filter(pc.less(actions.column("modification_time"), int(time.time() * 1000) - min_age_ms))
        if old.num_rows == 0:
            return 0, 0
        rows = table.read_arrow(paths=table.paths(old))
        kept = rows.filter(pc.is_in(rows.column("path"), live))
        if old.num_rows == 1 and kept.num_rows == rows.num_rows:
            return 0, 0  # one file, every row live: nothing to gain
        files = write_files(table, kept, prefix="summary") if kept.num_rows else []
        table.commit(snapshot, files, removes=remove_actions(old), operation="OPTIMIZE")
        return old.num_rows, len(files)

    return with_retries(table, attempts, step, what=f"compact {table.spec.name}", serial=True)


def read_row_group_summaries(table: Table, topic: str, paths: "Iterable[str]") -> pa.Table:
    """Row group summaries of the given clustered commitlog files (add paths) that hold ``topic``, a row per row
    group sorted by path and row group: ``path``, ``row_group``, ``num_records``, ``cluster_seq_min`` and
    ``_max``, and the summary's columns (:func:`read_summaries`). A row group whose first row is of another
    topic is listed too when it spans several topics. The summary table is read once per version and kept
    (it is small: a row per 1,024 messages).

    >>> read_row_group_summaries(store.context.tables.commitlog_summary, "TopicTest", []).num_rows
    0
    """
    every = table.memo(
        "row_group_summaries",
        lambda view: table.read_view(view, columns=_ROW_GROUP_COLUMNS).sort_by(
            [("path", "ascending"), ("row_group", "ascending")]
        ),
    )  # read once per version of the summary table
    wanted = pa.array(sorted(set(paths)), pa.string())
    held = pc.and_(
        pc.is_in(every.column("path"), value_set=wanted),
        pc.or_(pc.greater(every.column("topics"), 1), pc.equal(every.column("topic"), topic)),
    )
    return every.filter(pc.fill_null(held, False))


_ROW_GROUP_COLUMNS = [
    "path",
    "row_group",
    "topic",
    "topics",
    "num_records",
    "cluster_seq_min",
    "cluster_seq_max",
    "filter_bitmap_or",
    "filter_version_min",
    "tags_codes",
    "no_hit",
]


def forget_summaries(table: Table, live: "Iterable[str]", min_age_ms: int = 3_600_000, attempts: int = 50) -> int:
    """Remove the summary files (of ``consume_queue_ext_summary`` or ``commitlog_summary``) whose every
    row sums up a data file no longer in its table (``live``: the data table's add paths), written at
    least ``min_age_ms`` ago (so summaries of files about to be committed stay); returns how many.

    >>> forget_summaries(store.context.tables.ext_summary, [], min_age_ms=10**12)
    0
    """
    live = set(live)

    def step(snapshot: "DeltaTable") -> int:
        actions = add_actions(snapshot)
        if actions.num_rows == 0:
            return 0
        now = time.time() * 1000
        gone = []
        for row in actions.select(["path", "size_bytes", "modification_time"]).to_pylist():
            if now - row["modification_time"] < min_age_ms:
                continue
            paths = table.read_arrow(paths=[table.path_of(row["path"])], columns=["path"])
            if not live.intersection(paths.column("path").to_pylist()):
                gone.append(row)
        if gone:
            table.commit(snapshot, [], removes=remove_actions(gone, data_change=True), operation="FORGET")
        return len(gone)

    return with_retries(table, attempts, step, what="forget summaries")
