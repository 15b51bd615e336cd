"""The ``commitlog_expired`` table: offset runs that per-topic retention removed from the commitlog.

Per-topic retention (:mod:`storelib.maintenance.topic_retention`) rewrites commitlog files without
the expired messages of one topic while the other topics' messages stay. The offsets stay RocketMQ's
(a message's ``physical_offset`` never changes), so the commitlog then has runs of offsets no row
holds. Each such run is recorded here *before* the commitlog commit that removes it, so the
integrity checks (:mod:`storelib.maintenance.integrity`) count the run as present and still find every
other gap. A run recorded by a pass that died before its commitlog commit overlaps rows still there:
harmless, the checks only use runs to bridge gaps, and a rerun records nothing twice.

>>> starts, ends, counts = removed_runs(np.array([100, 0, 300]), np.array([100, 100, 50]))
>>> starts.tolist(), ends.tolist(), counts.tolist()
([0, 300], [200, 350], [2, 1])
>>> bridged({0: 200, 200: 350}, 0, 350), bridged({0: 200}, 0, 350)
(True, False)
"""

from __future__ import annotations

import datetime as dt
from typing import Mapping

import numpy as np
import pyarrow as pa
from deltalake.exceptions import TableNotFoundError

from storelib.delta.rows import append_rows
from storelib.delta.table import Table
from storelib.storage.schema import COMMITLOG_EXPIRED

__all__ = ["removed_runs", "record_runs", "read_runs", "bridged", "expired_mask", "COMMITLOG_EXPIRED"]


def expired_mask(rows: pa.Table, cuts: Mapping[str, Mapping[int, int]]) -> np.ndarray:
    """Which commitlog ``rows`` (with ``topic``, ``queue_id``, ``queue_offset``) lie below their queue's
    cut: ``cuts[topic][queue_id]`` is the first queue offset kept.

    >>> rows = pa.table({"topic": ["T", "T", "U", "T"], "queue_id": [0, 1, 0, 0], "queue_offset": [4, 4, 0, 5]})
    >>> expired_mask(rows, {"T": {0: 5}}).tolist()
    [True, False, False, False]
    """
    out = np.zeros(rows.num_rows, dtype=bool)
    if not cuts or rows.num_rows == 0:
        return out
    topic = rows.column("topic").to_numpy(zero_copy_only=False)
    qid = rows.column("queue_id").to_numpy(zero_copy_only=False)
    qo = rows.column("queue_offset").to_numpy(zero_copy_only=False)
    for name, queues in cuts.items():
        of = topic == name
        if not of.any():
            continue
        for q, cut in queues.items():
            out |= of & (qid == q) & (qo < cut)
    return out


def removed_runs(offsets: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Removed messages (``physical_offset``, ``size``, any order) as runs of adjacent ones: starts,
    ends (exclusive) and message counts, by start (see the module's example)."""
    order = np.argsort(offsets, kind="stable")
    offsets = np.asarray(offsets, dtype=np.int64)[order]
    ends = offsets + np.asarray(sizes, dtype=np.int64)[order]
    if not len(offsets):
        return offsets, ends, np.zeros(0, dtype=np.int64)
    first = np.concatenate([[True], offsets[1:] != ends[:-1]])
    heads = np.flatnonzero(first)
    tails = np.concatenate([heads[1:], [len(offsets)]]) - 1
    return offsets[heads], ends[tails], tails - heads + 1


def read_runs(table: Table) -> dict[int, int]:
    """Every recorded run as ``{start: end}`` (the furthest end where runs share a start); none where
    the table is not there yet (a store last opened by a storelib without per-topic retention).

    >>> read_runs(store.context.tables.commitlog_expired)
    {}
    """
    try:
        rows = table.read_arrow(columns=["start_offset", "end_offset"])
    except TableNotFoundError:
        return {}
    out: dict[int, int] = {}
    for s, e in zip(rows.column("start_offset").to_pylist(), rows.column("end_offset").to_pylist()):
        out[s] = max(e, out.get(s, e))
    return out


def record_runs(table: Table, starts: np.ndarray, ends: np.ndarray, counts: np.ndarray, operation: str) -> int:
    """Append the runs not recorded yet (same start and end) in one commit; return how many were new.

    >>> record_runs(store.context.tables.commitlog_expired, np.array([], np.int64), np.array([], np.int64),
    ...             np.array([], np.int64), "DOC")
    0
    """
    known = table.read_arrow(columns=["start_offset", "end_offset"])
    have = set(zip(known.column("start_offset").to_pylist(), known.column("end_offset").to_pylist()))
    new = [(int(s), int(e), int(c)) for s, e, c in zip(starts, ends, counts) if (int(s), int(e)) not in have]
    if not new:
        return 0
    now = dt.datetime.now(dt.timezone.utc)
    data = pa.Table.from_pylist(
        [{"start_offset": s, "end_offset": e, "messages": c, "removed_at": now} for s, e, c in new],
        schema=COMMITLOG_EXPIRED.arrow,
    )
    append_rows(table, data, operation)
    return len(new)


def bridged(runs: dict[int, int], start: int, end: int) -> bool:
    """Whether recorded runs, one starting where the last ended, cover the offsets ``[start, end)``
    (never when ``start`` is past ``end``: messages that overlap)."""
    if start > end:
        return False
    at = start
    while at < end and at in runs:
        at = runs[at]
    return at >= end
