"""What SYNC_FLUSH costs: group commits on a local store with each ``flush_disk_type``, alternated in one run.

Each round opens the store with one setting and times ``commits`` group commits of ``batch`` messages (one
``send_batch`` each); rounds alternate between ASYNC_FLUSH (the baseline) and SYNC_FLUSH, so both meet the
same minutes of a shared machine. The figure is the SYNC_FLUSH p50 and p99 against ASYNC_FLUSH's.

>>> Flush({"ASYNC_FLUSH": [0.010, 0.012], "SYNC_FLUSH": [0.015, 0.018]}, 32).lines()[-1].split()[:4]
['SYNC_FLUSH:', 'p50', '16.5', 'ms,']
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass

from jobs.benchmarks import percentile

__all__ = ["Flush", "bench_flush"]


@dataclass(frozen=True)
class Flush:
    """Seconds of each group commit, by ``flush_disk_type``."""

    seconds: dict[str, list[float]]
    batch: int

    def lines(self) -> list[str]:
        base = self.seconds["ASYNC_FLUSH"]
        out = [f"group commits of {self.batch} messages on local disk, {len(base)} with each flush_disk_type"]
        for kind, times in self.seconds.items():
            p50, p99 = percentile(times, 0.5), percentile(times, 0.99)
            out.append(
                f"{kind}: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms "
                f"({p50 / percentile(base, 0.5):.2f}x and {p99 / percentile(base, 0.99):.2f}x ASYNC_FLUSH's)"
            )
        return out

    def as_dict(self) -> dict:
        return {
            kind: {"p50_ms": round(percentile(t, 0.5) * 1000, 2), "p99_ms": round(percentile(t, 0.99) * 1000, 2)}
            for kind, t in self.seconds.items()
        }


def bench_flush(commits: int = 200, *, batch: int = 32, rounds: int = 4, root: str | None = None) -> Flush:
    """``rounds`` rounds of each setting, alternated, ``commits`` group commits each (no Spark)."""
    from storelib import Message, MessageStore

    work = root or tempfile.mkdtemp(prefix="storelib-flush-")
    seconds: dict[str, list[float]] = {"ASYNC_FLUSH": [], "SYNC_FLUSH": []}
    try:
        MessageStore.create(f"{work}/store").create_topic("Bench", queues=4)
        for r in range(rounds * 2):
            kind = ("ASYNC_FLUSH", "SYNC_FLUSH")[r % 2]
            with MessageStore.open(f"{work}/store", flush_disk_type=kind) as store:
                for i in range(commits):
                    group = [Message("Bench", body=b"m-%d-%d" % (i, j), tags="T") for j in range(batch)]
                    began = time.perf_counter()
                    store.send_batch(group)
                    seconds[kind].append(time.perf_counter() - began)
        return Flush(seconds, batch)
    finally:
        if root is None:
            shutil.rmtree(work, ignore_errors=True)
