"""Retention: dropping expired commitlog files, then what pointed into them (RocketMQ's clean services).

:func:`clean_commitlog` removes the expired prefix of the commitlog, :func:`clean_consume_queue` the
consume queue, ext and index files below the new minimum, each as Delta commits removing whole data
files; how they follow RocketMQ's services is in ``docs/internals.md``.

Planning the commitlog step is a pure function of each file's offset range and newest store time:

>>> files = [Span(0, 900, 1_000), Span(1_000, 1_900, 2_000), Span(2_000, 2_900, 3_000)]
>>> expired_prefix(files, deadline_ms=2_500, dispatched_below=10_000)   # the first two expired
2
>>> expired_prefix(files, deadline_ms=9_999, dispatched_below=10_000)   # the newest file always stays
2
>>> expired_prefix(files, deadline_ms=9_999, dispatched_below=1_500)    # undispatched data stays
1
>>> expired_prefix(files, deadline_ms=1_500, dispatched_below=10_000)   # stops at the first unexpired file
1
>>> overlapping = [Span(0, 3_900, 1_500), Span(1_000, 1_900, 5_000), Span(4_000, 4_900, 6_000)]
>>> expired_prefix(overlapping, deadline_ms=2_000, dispatched_below=10_000)  # removing the first would leave a hole
0

>>> import time
>>> from storelib import Message
>>> later = store.send(Message("TopicTest", body=b"later", queue_id=r.queue_id)); _ = store.dispatch()
>>> removed = store.delete_expired_files(now=time.time() * 1000 + 73 * 3_600_000)  # the newest file stays
>>> removed["commitlog"], store.min_offset() == later.commitlog_offset
(1, True)
>>> store.min_queue_offset("TopicTest", r.queue_id)
1
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Callable, NamedTuple, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.context import StoreContext
from storelib.delta.commit import remove_actions, with_retries
from storelib.delta.log import add_actions
from storelib.delta.table import Table
from storelib.model.errors import ConfigError
from storelib.model.timestamps import epoch_ms, now_ms
from storelib.storage.commitlog_reads import commitlog_min_offset
from storelib.storage.consume_queue import min_queue_marker
from storelib.storage.dispatched import REPUT_MARKER, dispatch_targets

if TYPE_CHECKING:
    from deltalake import DeltaTable


__all__ = ["Span", "expired_prefix", "clean_commitlog", "clean_consume_queue", "DELETE_EXPIRED"]

log = logging.getLogger(__name__)

#: The ``storelib.operation`` of every retention commit.
DELETE_EXPIRED = "DELETE_EXPIRED"
_HOUR_MS = 3_600_000


class Span(NamedTuple):
    """One commitlog file as retention sees it: first and last physical offset, newest store time (ms).

    A field is None where the file has no statistics for it; such a file is never removed.
    """

    min_offset: int | None
    max_offset: int | None
    newest_ms: int | None


def expired_prefix(spans: Sequence[Span], deadline_ms: int, dispatched_below: int) -> int:
    """How many of ``spans`` (sorted by ``min_offset``) to remove, from the first.

    A file goes when its newest message was stored at or before ``deadline_ms`` (RocketMQ: now >=
    last modified + reserved time) and all its offsets are below ``dispatched_below``; the walk
    stops at the first file that may not go, and never takes the file holding the newest offset.
    The prefix is then shortened until every removed offset lies below every kept one, so what
    stays is a suffix of the log even where compaction left files with overlapping ranges.
    """
    if not spans:
        return 0
    newest = max(range(len(spans)), key=lambda i: -1 if (top := spans[i].max_offset) is None else top)
    n = 0
    for i, s in enumerate(spans):
        if i == newest or s.min_offset is None or s.max_offset is None or s.newest_ms is None:
            break
        if s.newest_ms > deadline_ms or s.max_offset >= dispatched_below:
            break
        n += 1
    tops = [s.max_offset for s in spans[:n] if s.max_offset is not None]  # every one: the walk stops at a None
    highest: np.ndarray | list[int] = np.maximum.accumulate(tops) if n else []
    while n > 0 and ((low := spans[n].min_offset) is None or highest[n - 1] >= low):
        n -= 1
    return n


# ---- reading the minimums --------------------------------------------------------------------


# ---- CleanCommitLogService -------------------------------------------------------------------
def clean_commitlog(ctx: StoreContext, reserved_hours: float | None = None, now: object = None) -> int:
    """Remove the expired prefix of the commitlog in one commit; return how many files went.

    ``reserved_hours`` defaults to the store's ``file_reserved_time``; ``now`` (epoch ms or an
    aware datetime, default the clock) lets a caller judge expiry at another time.

    >>> clean_commitlog(store.context, now=0)       # nothing is old at the epoch
    0
    """
    hours = ctx.config.file_reserved_time if reserved_hours is None else reserved_hours
    if not isinstance(hours, (int, float)) or isinstance(hours, bool) or not math.isfinite(hours) or hours < 0:
        raise ConfigError("reserved_hours", "must be a non-negative number of hours", value=reserved_hours)
    deadline = epoch_ms(now, "now", default=now_ms(), error=ConfigError) - round(hours * _HOUR_MS)
    table = ctx.tables.commitlog
    targets = list(dispatch_targets(ctx.tables, ctx.config).values())

    def step(snapshot: "DeltaTable") -> int:
        dispatched = min(Table.marker(t.snapshot(), REPUT_MARKER) for t in targets)
        actions = _sorted_by(add_actions(snapshot), "min.physical_offset")
        if actions.num_rows == 0:
            return 0
        spans = [
            Span(*fields)
            for fields in zip(
                _column(actions, "min.physical_offset"), _column(actions, "max.physical_offset"), _newest_ms(actions)
            )
        ]
        n = expired_prefix(spans, deadline, dispatched)
        if n == 0:
            return 0
        gone = actions.slice(0, n)
        table.commit(
            snapshot,
            [],
            removes=remove_actions(gone),
            operation=DELETE_EXPIRED,
            info={"storelib.files": str(n), "storelib.min_offset": str(spans[n].min_offset)},
        )
        log.info("clean commitlog: removed %d files; min offset now %s", n, spans[n].min_offset)
        return n

    return with_retries(table, ctx.config.max_commit_attempts, step, what="clean commitlog")


# ---- CleanConsumeQueueService ----------------------------------------------------------------
def clean_consume_queue(ctx: StoreContext, *, fault: Callable[[str], None] | None = None) -> dict[str, int]:
    """Follow the commitlog's min offset: drop consume queue, ext and index files wholly below it.

    Returns files removed per table. Each table's removals are one commit (the consume queue's
    carries the moved ``cqmin`` markers); a run that changes nothing commits nothing. ``fault`` is
    called with ``<table>.committed`` after each commit (tests use it to crash in between).

    >>> clean_consume_queue(store.context)
    {'consume_queue': 0, 'consume_queue_ext': 0, 'index': 0}
    """
    min_phy = commitlog_min_offset(ctx.tables.commitlog.snapshot())
    attempts = ctx.config.max_commit_attempts
    out: dict[str, int] = {}
    for name in ("consume_queue", "consume_queue_ext"):
        table = getattr(ctx.tables, name)
        out[name] = with_retries(table, attempts, lambda s: _clean_queues(table, s, min_phy), what=f"clean {name}")
        if fault is not None:
            fault(f"{name}.committed")
    index = ctx.tables.index
    out["index"] = with_retries(index, attempts, lambda s: _clean_index(index, s, min_phy), what="clean index")
    if fault is not None:
        fault("index.committed")
    return out


def _clean_queues(table: Table, snapshot: "DeltaTable", min_phy: int) -> int:
    """One commit on a consume queue table: expired files out, and (consume_queue) min offsets moved."""
    actions = Table.clustered(add_actions(snapshot), ["topic", "queue_id"])  # files of one queue only
    if actions.num_rows == 0 or min_phy <= 0:
        return 0
    with_markers = table.spec.name == "consume_queue"
    topics = _column(actions, "min.topic")
    qids, max_qo = _column(actions, "min.queue_id"), _column(actions, "max.queue_offset")
    min_qo = _column(actions, "min.queue_offset")
    lo_phy, hi_phy = _column(actions, "min.commitlog_offset"), _column(actions, "max.commitlog_offset")
    queues: dict[tuple[str, int], list[int]] = {}
    for i in range(actions.num_rows):
        if None not in (max_qo[i], min_qo[i], lo_phy[i], hi_phy[i]):
            queues.setdefault((topics[i], qids[i]), []).append(i)

    gone: list[int] = []
    candidates: dict[tuple[str, int], int] = {}
    straddle: list[int] = []
    for queue, rows in queues.items():
        last = max(rows, key=lambda i: max_qo[i])  # always kept: the queue's max offset lives in it
        kept = [i for i in rows if i == last or hi_phy[i] >= min_phy]
        gone.extend(i for i in rows if i != last and hi_phy[i] < min_phy)
        if not with_markers:
            continue
        if all(hi_phy[i] < min_phy for i in kept):
            candidates[queue] = max_qo[last] + 1  # nothing of it left in the commitlog: min = max
            continue
        whole = [min_qo[i] for i in kept if lo_phy[i] >= min_phy]
        if whole:
            candidates[queue] = min(whole)
        straddle.extend(i for i in kept if lo_phy[i] < min_phy <= hi_phy[i])
    if straddle:
        _first_valid_offsets(table, actions.take(pa.array(straddle, pa.int64())), min_phy, candidates)

    markers: dict[str, int] = {}
    removed = set(gone)
    for queue, value in candidates.items():
        current = snapshot.transaction_version(min_queue_marker(*queue))
        if current is None:  # what queue_min_offset answers without a marker, once the removals land
            current = min(min_qo[i] for i in queues[queue] if i not in removed)
        if value > current:
            markers[min_queue_marker(*queue)] = value
    if not gone and not markers:
        return 0
    table.commit(
        snapshot,
        [],
        removes=remove_actions(actions.take(pa.array(gone, pa.int64()))),
        markers=markers,
        operation=DELETE_EXPIRED,
        info={"storelib.files": str(len(gone)), "storelib.min_phy_offset": str(min_phy)},
    )
    log.info(
        "clean %s: removed %d files, moved %d min offsets (min physical offset %d)",
        table.spec.name,
        len(gone),
        len(markers),
        min_phy,
    )
    return len(gone)


def _first_valid_offsets(table: Table, files: pa.Table, min_phy: int, into: dict[tuple[str, int], int]) -> None:
    """Lower ``into[queue]`` to the smallest queue offset in ``files`` whose message is still stored.

    Only these boundary files are opened, on this process, with pyarrow.
    """
    paths = [table.path_of(p) for p in files.column("path").to_pylist()]
    rows = table.read_arrow(
        paths=paths, columns=["topic", "queue_id", "queue_offset"], filter=pc.field("commitlog_offset") >= min_phy
    )
    if rows.num_rows == 0:
        return
    firsts = rows.group_by(["topic", "queue_id"]).aggregate([("queue_offset", "min")])
    for topic, qid, first in zip(*(firsts.column(c).to_pylist() for c in ("topic", "queue_id", "queue_offset_min"))):
        key = (topic, qid)
        into[key] = min(first, into.get(key, first))


def _clean_index(table: Table, snapshot: "DeltaTable", min_phy: int) -> int:
    """One commit on the index: files whose every entry points below ``min_phy``
    (``IndexService.deleteExpiredFile``)."""
    actions = add_actions(snapshot)
    if actions.num_rows == 0 or min_phy <= 0:
        return 0
    below = pc.fill_null(pc.less(actions.column("max.commitlog_offset"), pa.scalar(min_phy, pa.int64())), False)
    gone = actions.filter(below)
    if gone.num_rows == 0:
        return 0
    table.commit(
        snapshot,
        [],
        removes=remove_actions(gone),
        operation=DELETE_EXPIRED,
        info={"storelib.files": str(gone.num_rows), "storelib.min_phy_offset": str(min_phy)},
    )
    return gone.num_rows


# ---- helpers ---------------------------------------------------------------------------------
def _column(actions: pa.Table, name: str) -> list:
    """A statistics column as a list, all None where the table keeps no such statistic."""
    if name not in actions.column_names:
        return [None] * actions.num_rows
    return actions.column(name).to_pylist()


def _newest_ms(actions: pa.Table) -> list[int | None]:
    """Each file's newest ``store_timestamp`` statistic in epoch milliseconds (integer arithmetic, no floats)."""
    if "max.store_timestamp" not in actions.column_names:
        return [None] * actions.num_rows
    micros = actions.column("max.store_timestamp").cast(pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_pylist()
    return [None if us is None else us // 1000 for us in micros]


def _sorted_by(actions: pa.Table, column: str) -> pa.Table:
    """Files in ``column`` order, those without the statistic first (so a walk from the start stops at them)."""
    if actions.num_rows == 0 or column not in actions.column_names:
        return actions
    values = actions.column(column)
    order = np.lexsort(
        (pc.fill_null(values, 0).to_numpy(zero_copy_only=False), pc.is_valid(values).to_numpy(zero_copy_only=False))
    )
    return actions.take(pa.array(order))
