"""The ``storelib`` command's point look-ups, end to end: a new process per command, as a user types it.

Each command (``query id``, ``query key``, ``query unique-key``, ``pull``, ``consumer progress``,
``topic status``) runs as ``python -m storelib ... --json`` against a store of N messages, and its
wall time from process start to exit is measured. The baseline, measured in the same run, is the
floor any such command pays: a process that only imports pyarrow's dataset reader and deltalake.
The target is an absolute one (≤ 1 s end to end on a 10^6-message store), so both are reported.

>>> AdminFigures(10, {"query id": [0.5, 0.6, 0.7]}, [0.2, 0.3]).lines()[1].split()[:5]
['query', 'id', 'p50', '600', 'ms']
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from storelib.session import parallelism

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["AdminFigures", "bench_admin"]

TOPIC = "BenchTopic0"
ROOT = Path(__file__).resolve().parents[2]


def _p50(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


@dataclass(frozen=True)
class AdminFigures:
    """Wall seconds per command run, and the baseline process's."""

    messages: int
    runs: dict[str, list[float]]
    baseline: list[float]

    def lines(self) -> list[str]:
        base = _p50(self.baseline)
        out = [
            f"storelib command, new process each run, store of {self.messages:,} msgs; "
            f"baseline (import pyarrow.dataset + deltalake) p50 {base * 1000:.0f} ms"
        ]
        for name, times in self.runs.items():
            p50 = _p50(times)
            out.append(
                f"{name:<18} p50 {p50 * 1000:5.0f} ms  max {max(times) * 1000:5.0f} ms  "
                f"{p50 / base:4.2f}x the baseline" + ("  (over 1 s)" if p50 > 1 else "")
            )
        return out

    def as_dict(self) -> dict:
        out = {
            name: {
                "p50_ms": round(_p50(t) * 1000),
                "max_ms": round(max(t) * 1000),
                "ratio_to_baseline": round(_p50(t) / _p50(self.baseline), 2),
            }
            for name, t in self.runs.items()
        }
        out["baseline"] = {"p50_ms": round(_p50(self.baseline) * 1000)}
        return out


def _timed(argv: list[str], env: dict) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[3:])} failed: {done.stderr.strip()[-500:]}")
    return seconds


def bench_admin(
    spark: "SparkSession",
    n: int,
    *,
    runs: int = 7,
    root: str | None = None,
    queues: int = 8,
    partitions: int | None = None,
) -> AdminFigures:
    """Send and dispatch ``n`` messages to one topic; time each command ``runs`` times in a new process."""
    from jobs.benchmarks.send import filled_store

    work = root or tempfile.mkdtemp(prefix="storelib-bench-")
    partitions = partitions or max(2, parallelism(spark) * 2)
    try:
        store = filled_store(spark, f"{work}/admin", TOPIC, n, queues, partitions, {"GroupAll": "*"})
        middle = store.pull("GroupAll", TOPIC, 3, store.max_queue_offset(TOPIC, 3) // 2, 1).messages[0]
        key = middle.keys
        env = {**os.environ, "PYTHONPATH": str(ROOT), "STORELIB_STORE": store.root}
        python = [sys.executable, "-m", "storelib"]
        commands = {
            "query id": ["query", "id", middle.msg_id],
            "query key": ["query", "key", TOPIC, key],
            "query unique-key": ["query", "unique-key", TOPIC, middle.uniq_key],
            "pull 32": ["pull", "GroupAll", TOPIC, "3", str(middle.queue_offset)],
            "consumer progress": ["consumer", "progress", "GroupAll"],
            "topic status": ["topic", "status", TOPIC],
        }
        baseline_argv = [sys.executable, "-c", "import pyarrow.dataset, deltalake"]
        times: dict[str, list[float]] = {name: [] for name in commands}
        baseline: list[float] = []
        for _ in range(runs):  # interleaved, so load on the machine falls on both sides alike
            baseline.append(_timed(baseline_argv, env))
            for name, argv in commands.items():
                times[name].append(_timed(python + argv + ["--json"], env))
        found = json.loads(
            subprocess.run(
                python + commands["query key"] + ["--json"], env=env, capture_output=True, text=True, timeout=300
            ).stdout
        )
        assert [m["OffsetID"] for m in found] == [middle.msg_id], found
        return AdminFigures(n, times, baseline)
    finally:
        if root is None:
            shutil.rmtree(work, ignore_errors=True)
