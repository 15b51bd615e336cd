"""Per-topic retention: a topic's messages go ``retention_ms`` after their store time, whatever else
shares their commitlog files.

:func:`expire_topics` does it in four steps (queues, runs, commitlog, ext), each one commit and safe to
crash after; the steps and what reads see between them are in ``docs/internals.md``.

>>> import time
>>> from storelib import Message
>>> _ = store.create_topic("Ticks", 1, retention_ms=1)
>>> _ = store.send(Message("Ticks", body=b"old")); _ = store.send(Message("TopicTest")); _ = store.dispatch()
>>> expire_topics(store.context, now=time.time() * 1000 + 10_000)
{'Ticks': 1}
>>> store.min_queue_offset("Ticks", 0), store.messages("Ticks").count()
(1, 0)
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.context import StoreContext
from storelib.delta.commit import remove_actions, with_retries
from storelib.delta.compaction import bin_by_size
from storelib.delta.log import add_actions
from storelib.delta.stats import Prune
from storelib.delta.table import Table
from storelib.maintenance.cluster import settled_end, write_bins
from storelib.model.errors import ConfigError
from storelib.model.timestamps import FAR_FUTURE_MS, epoch_ms, now_ms
from storelib.storage.consume_queue import min_queue_marker, queue_min_offset
from storelib.storage.expired import expired_mask, record_runs, removed_runs
from storelib.storage.summaries import record_row_group_summaries

if TYPE_CHECKING:
    from deltalake import DeltaTable

__all__ = ["expire_topics", "queue_cut", "EXPIRE_TOPIC"]

log = logging.getLogger(__name__)

#: The ``storelib.operation`` of every per-topic retention commit.
EXPIRE_TOPIC = "EXPIRE_TOPIC"

Cuts = dict[str, dict[int, int]]


def queue_cut(start: int, offsets: np.ndarray) -> int:
    """The first queue offset from ``start`` on that is not among ``offsets`` (the queue's expired units).

    >>> queue_cut(2, np.array([0, 1, 2, 3, 5])), queue_cut(2, np.array([4])), queue_cut(0, np.array([1, 0]))
    (4, 2, 2)
    """
    have = np.unique(offsets[offsets >= start])
    run = np.flatnonzero(have != start + np.arange(len(have)))
    return start + (int(run[0]) if len(run) else len(have))


def expire_topics(
    ctx: StoreContext, now: object = None, *, fault: Callable[[str], None] | None = None
) -> dict[str, int]:
    """Remove the messages of every topic with a ``retention_ms`` stored at or before ``now - retention_ms``
    (``now``: epoch ms or an aware datetime, default the clock); return, per such topic, how many
    messages this call removed from the commitlog. ``fault`` (a test seam) is called with
    ``consume_queue.committed``, ``runs.recorded``, ``commitlog.written``, ``commitlog.summarized``,
    ``commitlog.committed`` and ``consume_queue_ext.committed`` as each step ends.

    >>> _ = store.create_topic("Ticks", 1, retention_ms=3_600_000)
    >>> expire_topics(store.context, now=0)     # nothing is old at the epoch
    {'Ticks': 0}
    """
    at = epoch_ms(now, "now", default=now_ms(), error=ConfigError)
    retention = {t: c.retention_ms for t, c in ctx.topics.all().items() if c.retention_ms is not None}
    if not retention:
        return {}
    attempts = ctx.config.max_commit_attempts
    cq = ctx.tables.consume_queue
    with_retries(
        cq,
        attempts,
        lambda s: _move_cuts(ctx, s, {t: at - ms for t, ms in retention.items()}),
        what="expire topics: consume queue",
    )
    _fault(fault, "consume_queue.committed")
    cuts = _cuts(cq.snapshot(), retention)
    removed = with_retries(
        ctx.tables.commitlog,
        attempts,
        lambda s: _rewrite_commitlog(ctx, s, cuts, fault),
        what="expire topics: commitlog",
    )
    ext = ctx.tables.consume_queue_ext
    with_retries(ext, attempts, lambda s: _drop_queue_files(ext, s, cuts, {}), what="expire topics: ext")
    _fault(fault, "consume_queue_ext.committed")
    return {t: removed.get(t, 0) for t in sorted(retention)}


def _fault(fault: Callable[[str], None] | None, name: str) -> None:
    if fault is not None:
        fault(name)


# ---- step 1: the cuts, as cqmin markers ----------------------------------------------------------
def _move_cuts(ctx: StoreContext, snapshot: "DeltaTable", deadlines: dict[str, int]) -> int:
    """One commit on the consume queue: each expiring queue's cqmin marker moved to its cut, and its
    files wholly below the cut removed. Returns how many markers moved."""
    cq = ctx.tables.consume_queue
    dispatched = settled_end(ctx)
    actions = Table.clustered(add_actions(snapshot), ["topic", "queue_id"])
    markers: dict[str, int] = {}
    for topic, deadline in deadlines.items():
        mine = Table.only(actions, {"topic": topic}) if actions.num_rows else actions
        if mine.num_rows == 0:
            continue
        # files that can hold an expired unit: stored at or before the deadline, dispatched everywhere
        micros = min(max(deadline, 0), FAR_FUTURE_MS) * 1000
        old = cq.prune(mine, Prune(between={"store_timestamp": (0, micros)}))
        units = cq.read_arrow(
            paths=cq.paths(old),
            columns=["queue_id", "queue_offset"],
            filter=(pc.field("topic") == topic)
            & (pc.field("commitlog_offset") < dispatched)
            & (pc.field("store_timestamp") <= pa.scalar(micros, pa.timestamp("us", tz="UTC"))),
        )
        qids = units.column("queue_id").to_numpy()
        offsets = units.column("queue_offset").to_numpy()
        for q in np.unique(qids).tolist():
            marker = min_queue_marker(topic, q)
            start = queue_min_offset(snapshot.transaction_version(marker), Table.only(mine, {"queue_id": q}))
            cut = queue_cut(start, offsets[qids == q])
            if cut > start:
                markers[marker] = cut
    if not markers:
        return 0
    cuts: Cuts = {}
    for name, cut in markers.items():
        _, topic, q = name.rsplit("/", 2)
        cuts.setdefault(topic, {})[int(q)] = cut
    return _drop_queue_files(cq, snapshot, cuts, markers)


def _cuts(snapshot: "DeltaTable", retention: dict[str, int]) -> Cuts:
    """Every queue's cut of the expiring topics, from the consume queue's cqmin markers."""
    actions = Table.clustered(add_actions(snapshot), ["topic", "queue_id"])
    out: Cuts = {}
    if actions.num_rows == 0:
        return out
    for topic, qid in set(zip(actions.column("min.topic").to_pylist(), actions.column("min.queue_id").to_pylist())):
        if topic in retention:
            cut = snapshot.transaction_version(min_queue_marker(topic, qid))
            if cut:
                out.setdefault(topic, {})[qid] = int(cut)
    return out


def _drop_queue_files(table: Table, snapshot: "DeltaTable", cuts: Cuts, markers: dict[str, int]) -> int:
    """Commit ``markers`` with the removal of the queues' files (consume queue or ext) wholly below
    their cut, each queue's file holding its largest offset kept. Returns files removed (or markers
    moved, when there are markers); commits nothing when there is nothing to do."""
    actions = Table.clustered(add_actions(snapshot), ["topic", "queue_id"])
    gone: list[int] = []
    if actions.num_rows and cuts:
        topics, qids = actions.column("min.topic").to_pylist(), actions.column("min.queue_id").to_pylist()
        top = actions.column("max.queue_offset").to_pylist()
        last: dict[tuple[str, int], int] = {}
        for i, key in enumerate(zip(topics, qids)):
            if top[i] is not None and (key not in last or top[i] > top[last[key]]):
                last[key] = i
        gone = [
            i
            for i, (t, q) in enumerate(zip(topics, qids))
            if top[i] is not None and last.get((t, q)) != i and top[i] < cuts.get(t, {}).get(q, 0)
        ]
    if not gone and not markers:
        return 0
    table.commit(
        snapshot,
        [],
        removes=remove_actions(actions.take(pa.array(gone, pa.int64()))),
        markers=markers,
        operation=EXPIRE_TOPIC,
        info={"storelib.files": str(len(gone)), "storelib.markers": str(len(markers))},
    )
    log.info("expire topics: %s: moved %d min offsets, removed %d files", table.spec.name, len(markers), len(gone))
    return len(markers) if markers else len(gone)


# ---- steps 2 and 3: the commitlog ------------------------------------------------------------------
def _rewrite_commitlog(
    ctx: StoreContext, snapshot: "DeltaTable", cuts: Cuts, fault: Callable[[str], None] | None
) -> dict[str, int]:
    """Record the runs below the cuts, then rewrite the files holding them without them, in one commit."""
    table = ctx.tables.commitlog
    actions = add_actions(snapshot)
    if actions.num_rows == 0 or not cuts:
        return {}
    end = settled_end(ctx)
    lo, hi = actions.column("min.physical_offset").to_pylist(), actions.column("max.physical_offset").to_pylist()
    low_topic, high_topic = actions.column("min.topic").to_pylist(), actions.column("max.topic").to_pylist()
    low_qo = actions.column("min.queue_offset").to_pylist()
    candidates = [
        i
        for i in range(actions.num_rows)
        if None not in (lo[i], hi[i], low_topic[i], high_topic[i], low_qo[i])
        and hi[i] < end
        and any(low_topic[i] <= t <= high_topic[i] and low_qo[i] < max(q.values()) for t, q in cuts.items())
    ]
    if not candidates:
        return {}
    picked = actions.take(pa.array(candidates, pa.int64()))
    rows = table.read_arrow(
        paths=table.paths(picked),
        columns=["topic", "queue_id", "queue_offset", "physical_offset", "size"],
        filter=pc.field("topic").isin(list(cuts)),
    )
    gone = rows.filter(pa.array(expired_mask(rows, cuts)))
    if gone.num_rows == 0:
        return {}
    offsets = gone.column("physical_offset").to_numpy()
    affected = [i for i in candidates if ((offsets >= lo[i]) & (offsets <= hi[i])).any()]
    starts, ends, counts = removed_runs(offsets, gone.column("size").to_numpy())
    record_runs(ctx.tables.commitlog_expired, starts, ends, counts, EXPIRE_TOPIC)
    _fault(fault, "runs.recorded")

    bins = _plan(actions, affected, ctx.config.target_file_size * 7 // 8)
    files = write_bins(ctx, bins, drop=cuts)
    _fault(fault, "commitlog.written")
    record_row_group_summaries(ctx.tables.commitlog_summary, files)
    _fault(fault, "commitlog.summarized")
    table.commit(
        snapshot,
        files,
        removes=remove_actions([r for b in bins for r in b], data_change=True),
        operation=EXPIRE_TOPIC,
        data_change=True,
        rebase=True,
        info={"storelib.messages": str(gone.num_rows), "storelib.files": str(len(affected))},
    )
    _fault(fault, "commitlog.committed")
    counted = gone.group_by("topic").aggregate([("topic", "count")])
    out = dict(zip(counted.column("topic").to_pylist(), counted.column("topic_count").to_pylist()))
    log.info("expire topics: removed %s from %d commitlog files (now %d)", out, len(affected), len(files))
    return out


def _plan(actions: pa.Table, affected: list[int], target: int) -> list[list[dict]]:
    """The files to rewrite as bins: runs of files adjacent in offset order, cut at about ``target`` bytes."""
    order = np.argsort(np.asarray(actions.column("min.physical_offset").to_pylist(), dtype=np.int64), kind="stable")
    rank = {int(i): r for r, i in enumerate(order)}
    rows = actions.to_pylist()
    runs: list[list[dict]] = []
    previous = None
    for i in sorted(affected, key=rank.__getitem__):
        if previous is None or rank[i] != rank[previous] + 1:
            runs.append([])
        runs[-1].append(rows[i])
        previous = i
    return [b for run in runs for b in bin_by_size(run, target)]
