"""Planning a dispatch round: which commitlog files it reads, which tables it writes, with which filter bitmaps,
and where the work runs (this process for a small increment, else one Spark job).

>>> from storelib import Message
>>> _ = store.send(Message("TopicTest"))
>>> d = store.dispatcher(); clog = d.commitlog.view().actions
>>> end = store.max_offset(); start = d.progress()["consume_queue"]
>>> plan = plan_round(d.commitlog, d.targets, d.config, {"consume_queue": start}, clog, end, None, (0, []), False)
>>> plan.local, list(plan.targets)
(True, ['consume_queue'])
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from storelib.delta.commit import WrittenFile
from storelib.delta.files import is_local, map_io
from storelib.delta.stats import Prune
from storelib.delta.table import Table
from storelib.delta.writer import Target, write_items, write_items_here
from storelib.dispatch.calc_bitmap import FilterBitmaps
from storelib.dispatch.request import CommitlogFiles, DispatchRequests
from storelib.filter.summary import summarizer_for
from storelib.model.config import StoreConfig
from storelib.model.topic import SCHEDULE_TOPIC, TIMER_TOPIC
from storelib.storage.index_file import hash_range_shift

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from storelib.filter.subscription import Subscription

__all__ = ["RoundPlan", "plan_round"]

#: What a round does with each item it reads: each target's part of its rows.
PerItem = Callable[[Any], Iterator[dict[str, pa.RecordBatch]]]


@dataclass(frozen=True)
class RoundPlan:
    """One round's writes: the commitlog files to read (path, wholly in range, properties needed), their sizes,
    each target's writer, the per-file work, and whether it runs here (``local``) or as a Spark job.

    >>> from storelib import Message
    >>> _ = store.send(Message("TopicTest"))
    >>> d = store.dispatcher(); start = d.progress()["consume_queue"]
    >>> plan = plan_round(d.commitlog, d.targets, d.config, {"consume_queue": start}, d.commitlog.view().actions,
    ...                   store.max_offset(), None, (0, []), False)
    >>> [f.num_records for f in plan.write(lambda: spark)["consume_queue"]]      # written, not committed
    [1]
    """

    files: list[tuple[str, bool, bool, int]]
    sizes: list[int]
    targets: dict[str, Target]
    per_file: CommitlogFiles
    local: bool

    def write(self, spark: Callable[[], "SparkSession"], kept: list | None = None) -> dict[str, list[WrittenFile]]:
        """Write every target's files; ``kept`` (a local round) gathers the consume queue units on their way.
        A local round reads an object store's files at once (each read waits its round trips), then cuts
        their rows in commitlog order."""
        if not self.local:
            return write_items(spark(), self.files, self.sizes, self.targets, self.per_file)
        items: list = self.files
        work: PerItem = self.per_file
        if self.files and not is_local(self.files[0][0]):
            items, work = map_io(self.per_file.rows, self.files, remote=True), self.per_file.cut
        if kept is not None:
            work = functools.partial(_keeping, work, kept)
        return write_items_here(items, self.targets, work)


def plan_round(
    commitlog: Table,
    tables: dict[str, Table],
    config: StoreConfig,
    writing: dict[str, int],
    actions: pa.Table,
    end: int,
    ext_at: int | None,
    filters: tuple[int, list["Subscription"]],
    ext_enabled: bool,
) -> RoundPlan:
    """The plan for writing each of ``writing``'s tables from its start to commitlog offset ``end``;
    ``actions`` are the commitlog's files, ``ext_at`` the ext table's marker, ``filters`` the registry
    version and live SQL92 subscriptions.

    The executors (or this process) read the commitlog files with pyarrow and cut the rows into each
    target's; when SQL92 subscriptions of a topic in the range need filter bitmaps, they compute them on
    the same batches (:class:`~storelib.dispatch.calc_bitmap.FilterBitmaps`). Only the messages of those
    topics get ext units (the ext table holds what a bitmap was computed for); the others' consume queue
    units keep their real tag codes. The ``properties`` map, the widest column, is read only from the files
    that may hold a message needing it: a delayed or timer one (its tag code is its deliver time) or one of
    a subscribed topic.
    """
    low = min(writing.values())
    actions = Table.prune(actions, Prune(between={"physical_offset": (low, end - 1)}))
    holding = functools.partial(_files_holding, actions)
    coded = "consume_queue_ext" in writing or "consume_queue" in writing  # real tag codes
    version, live = filters
    subs = [s for s in live if holding(s.topic)] if coded and ext_enabled else []
    bitmaps = FilterBitmaps.of(subs, version) if subs else None
    with_properties = set().union(
        *(holding(t) for t in {s.topic for s in subs}),
        holding(SCHEDULE_TOPIC) | holding(TIMER_TOPIC) if coded else set(),
    )
    shift = hash_range_shift(config.index_hash_ranges)
    ext_from = 0
    ext_had: tuple[int, ...] = ()
    if ext_enabled and "consume_queue" in writing and ext_at is not None and ext_at > writing["consume_queue"]:
        ext_from = ext_at
        ext_had = _ext_units_between(tables["consume_queue_ext"], writing["consume_queue"], min(ext_at, end))
    requests = DispatchRequests(
        writing,
        ext_enabled,
        shift,
        tuple(config.delay_levels_ms),
        bitmaps,
        ext_topics=bitmaps.topics if bitmaps else (),
        ext_from=ext_from,
        ext_had=ext_had,
    )
    targets = {}
    for name in writing:
        summarize = summarizer_for(live) if name == "consume_queue_ext" else None
        targets[name] = Target.of(tables[name], target_file_size=config.target_file_size, summarize=summarize)
    actions = actions.sort_by("min.physical_offset")
    files = [
        (commitlog.path_of(p), lo is not None and lo >= low and hi < end, p in with_properties, size)
        for p, lo, hi, size in zip(
            actions.column("path").to_pylist(),
            actions.column("min.physical_offset").to_pylist(),
            actions.column("max.physical_offset").to_pylist(),
            actions.column("size_bytes").to_pylist(),
        )
    ]
    return RoundPlan(
        files,
        actions.column("size_bytes").to_pylist(),
        targets,
        CommitlogFiles(low, end, False, requests),
        end - low <= config.dispatch_local_max_bytes,
    )


def _ext_units_between(ext: Table, low: int, high: int) -> tuple[int, ...]:
    """The commitlog offsets in ``[low, high)`` the ext table holds units for (committed by a run that
    died before its consume queue commit: the consume queue units written again point at exactly those)."""
    rows = ext.read_view(
        ext.view(),
        Prune(between={"commitlog_offset": (low, high - 1)}),
        columns=["commitlog_offset"],
        filter=(pc.field("commitlog_offset") >= low) & (pc.field("commitlog_offset") < high),
    )
    return tuple(sorted(rows.column("commitlog_offset").to_pylist()))


def _keeping(work: "PerItem", kept: list, item) -> Iterator[dict[str, pa.RecordBatch]]:
    """``work(item)``'s parts, the consume queue's kept in ``kept`` on their way to the writer."""
    for parts in work(item):
        if "consume_queue" in parts:
            kept.append(parts["consume_queue"])
        yield parts


def _files_holding(actions: "pa.Table", topic: str) -> set[str]:
    """The paths of the commitlog files among ``actions`` that may hold a message of ``topic`` (by their statistics)."""
    return set(Table.prune(actions, Prune(equal={"topic": topic})).column("path").to_pylist())
