"""Flat as it grows: send, dispatch and pull latency over a long run of commits.

One process, one store: each step sends one message (one commitlog commit), dispatches it (one
commit on each dispatch table) and pulls it back, so every table takes ``commits`` commits; every
``compact_every_s`` the fresh small files are merged, as the follower does. Reported: the p50 of the
first and the last 1,000 steps of each, and their ratio (the target: within 1.5x).

>>> GrowthFigures(2000, {"send": ([0.01] * 1000, [0.012] * 1000)}).lines()[0]
'send p50: first 1,000 of 2,000 commits 10.0 ms, last 1,000 12.0 ms (1.20x)'
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass

__all__ = ["GrowthFigures", "bench_growth"]

TOPIC, GROUP, QUEUES = "Growth", "GroupGrowth", 4


@dataclass(frozen=True)
class GrowthFigures:
    """Steps run, and per stage the seconds of the first and the last 1,000 steps."""

    commits: int
    stages: dict[str, tuple[list[float], list[float]]]

    def ratio(self, stage: str) -> float:
        first, last = self.stages[stage]
        return statistics.median(last) / statistics.median(first)

    def lines(self) -> list[str]:
        return [f"{stage} p50: first {len(first):,} of {self.commits:,} commits {statistics.median(first) * 1000:.1f} ms, "
                f"last {len(last):,} {statistics.median(last) * 1000:.1f} ms ({self.ratio(stage):.2f}x)"
                for stage, (first, last) in self.stages.items()]

    def as_dict(self) -> dict:
        return {"commits": self.commits, **{f"{stage}_ratio": round(self.ratio(stage), 2) for stage in self.stages}}


def bench_growth(commits: int = 10_000, *, compact_every_s: float = 10.0, root: str | None = None) -> GrowthFigures:
    """Run ``commits`` steps of send, dispatch, pull (see the module docstring)."""
    from storelib import Message, MessageStore

    work = root or tempfile.mkdtemp(prefix="storelib-bench-")
    try:
        store = MessageStore.create(f"{work}/growth")
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
        store.close()
        edge = min(1000, max(1, commits // 2))
        return GrowthFigures(commits, {stage: (t[:edge], t[-edge:]) for stage, t in times.items()})
    finally:
        if root is None:
            shutil.rmtree(work, ignore_errors=True)
