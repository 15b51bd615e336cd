"""Flat as it grows: send, dispatch and pull latency over a long run of commits.

One process, one store: each step sends one message (one commitlog commit), dispatches it (one
commit on each dispatch table) and pulls it back, so every table takes ``commits`` commits; every
``compact_every_s`` the fresh small files are merged, as the follower does. Reported: the p50 of the
first and the last 1,000 steps of each, and their ratio (the target: within 1.5x), and the p50 of
every window of 1,000 steps between, to show where any growth happens (tables keep two minutes of
log entries, so the first windows run with fewer of them to list).

>>> figures = GrowthFigures(2000, {"send": ([0.01] * 1000, [0.012] * 1000)}, {"send": [0.01, 0.012]})
>>> figures.lines()  # doctest: +NORMALIZE_WHITESPACE
['send p50: first 1,000 of 2,000 commits 10.0 ms, last 1,000 12.0 ms (1.20x)',
 'send p50 per 1,000 commits (ms): 10.0 12.0']
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["GrowthFigures", "bench_growth"]

TOPIC, GROUP, QUEUES = "Growth", "GroupGrowth", 4
#: Steps per window of the timeline.
WINDOW = 1000


@dataclass(frozen=True)
class GrowthFigures:
    """Steps run, and per stage the seconds of the first and the last 1,000 steps."""

    commits: int
    stages: dict[str, tuple[list[float], list[float]]]
    #: Per stage, the p50 of each window of :data:`WINDOW` steps, in order.
    windows: dict[str, list[float]] = field(default_factory=dict)
    #: Per table, the files its newest snapshot holds and the tombstones (``remove`` actions) it still carries,
    #: at the end: a table's log grows with what it keeps of either.
    log_sizes: dict[str, tuple[int, int]] = field(default_factory=dict)

    def ratio(self, stage: str) -> float:
        first, last = self.stages[stage]
        return statistics.median(last) / statistics.median(first)

    def lines(self) -> list[str]:
        out = [
            f"{stage} p50: first {len(first):,} of {self.commits:,} commits {statistics.median(first) * 1000:.1f} ms, "
            f"last {len(last):,} {statistics.median(last) * 1000:.1f} ms ({self.ratio(stage):.2f}x)"
            for stage, (first, last) in self.stages.items()
        ]
        return (
            out
            + [
                f"{stage} p50 per {WINDOW:,} commits (ms): " + " ".join(f"{1000 * p:.1f}" for p in p50s)
                for stage, p50s in self.windows.items()
            ]
            + [
                f"{name} at the end: {files:,} files, {tombstones:,} tombstones"
                for name, (files, tombstones) in self.log_sizes.items()
            ]
        )

    def as_dict(self) -> dict:
        return {
            "commits": self.commits,
            **{f"{stage}_ratio": round(self.ratio(stage), 2) for stage in self.stages},
            **{
                f"{stage}_p50_ms_per_{WINDOW}": [round(1000 * p, 2) for p in p50s]
                for stage, p50s in self.windows.items()
            },
            **{f"{name}_files_tombstones": list(sizes) for name, sizes in self.log_sizes.items()},
        }


def bench_growth(
    commits: int = 10_000,
    *,
    compact_every_s: float = 10.0,
    root: str | None = None,
    progress: Callable[[str], object] | None = None,
    time_travel_minutes: int = 0,
) -> GrowthFigures:
    """Run ``commits`` steps of send, dispatch, pull (see the module docstring); ``progress`` is handed a
    line with each window's p50s as the window ends (a long run takes an hour or more). With
    ``time_travel_minutes`` the store keeps that long a window of log entries (``StoreConfig``)."""
    from storelib import Message, MessageStore, StoreConfig

    work = root or tempfile.mkdtemp(prefix="storelib-bench-")
    try:
        store = MessageStore.create(f"{work}/growth", config=StoreConfig(time_travel_minutes=time_travel_minutes))
        store.create_topic(TOPIC, queues=QUEUES)
        store.subscribe(GROUP, TOPIC, "*")
        dispatcher = store.dispatcher()
        offsets = dict.fromkeys(range(QUEUES), 0)
        times: dict[str, list[float]] = {"send": [], "dispatch": [], "pull": []}
        compacted = time.monotonic()
        for i in range(commits):
            if compact_every_s and time.monotonic() - compacted >= compact_every_s:
                dispatcher.compact_fresh()
                compacted = time.monotonic()
            began = time.perf_counter()
            sent = store.send(Message(TOPIC, body=b"x" * 100, queue_id=i % QUEUES))
            sent_at = time.perf_counter()
            dispatcher.run()
            dispatched_at = time.perf_counter()
            pulled = store.pull(GROUP, TOPIC, sent.queue_id, offsets[sent.queue_id], 32)
            times["pull"].append(time.perf_counter() - dispatched_at)
            times["send"].append(sent_at - began)
            times["dispatch"].append(dispatched_at - sent_at)
            offsets[sent.queue_id] = pulled.next_begin_offset
            if progress is not None and (i + 1) % WINDOW == 0:
                progress(
                    f"{i + 1:,} commits: "
                    + ", ".join(f"{stage} {1000 * statistics.median(t[-WINDOW:]):.1f} ms" for stage, t in times.items())
                )
        log_sizes = {
            name: _log_size(table)
            for name, table in store.context.tables.by_name().items()
            if name in ("commitlog", "consume_queue", "index")
        }
        store.close()
        edge = min(WINDOW, max(1, commits // 2))
        windows = {
            stage: [statistics.median(t[i : i + WINDOW]) for i in range(0, len(t) - WINDOW + 1, WINDOW)]
            for stage, t in times.items()
        }
        return GrowthFigures(
            commits,
            {stage: (t[:edge], t[-edge:]) for stage, t in times.items()},
            {stage: p50s for stage, p50s in windows.items() if p50s},
            log_sizes,
        )
    finally:
        if root is None:
            shutil.rmtree(work, ignore_errors=True)


def _log_size(table) -> tuple[int, int]:
    """A table's live files and the tombstones its newest snapshot carries."""
    from storelib.delta.log import tombstones

    dt = table.snapshot()
    return len(dt.file_uris()), len(tombstones(dt))
