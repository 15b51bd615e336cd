"""Benchmark of filtered reads: tag and SQL92 selectors against plain scans, fresh and clustered.

One store gets ``n`` messages (topic clustered by ``TAGS`` and ``region``) with 32 registered SQL92
subscriptions and is dispatched (bitmaps on); a second store gets the same messages dispatched with
bitmaps off, for the bitmaps' extra cost. Five reads are timed against a plain Spark scan of the
topic's commitlog rows evaluating the same exact test (the baseline), each written to Spark's
``noop`` sink so every matching row is materialized:

* ``tag uniform``  - tag ``TagU``, 1% of messages spread evenly;
* ``tag burst``    - tag ``TagBurst``, 1% of messages sent in runs (a campaign, a batch job);
* ``sql key``      - group ``G_R`` with ``region = 'r42'``, 1% evenly, on a clustering key;
* ``sql burst``    - group ``G_B`` with ``campaign = 'spring'``, 1% in runs;
* ``sql other``    - group ``G_V`` with ``v = 7``, 1% evenly, on a property that is not a clustering key.

Each is measured on the fresh store (append order), then again after ``compact()`` clustered it,
against the plain scan of the same (clustered) files and against the fresh store's scan. Also:
compaction against a bare Spark read-sort-write of the same rows, pulls and key look-ups on the
fresh and on the clustered store, the Bloom false positive rate of every group, and Spark's floor: the
smallest Spark job (one row to the ``noop`` sink), which no read through Spark can beat, so a read cannot
be 10x faster than a scan that takes less than 10 floors; the same floor for a job with a Python task (the
reads of kept row groups are such jobs); and the topic's commitlog bytes before and after clustering (a
read that must scan every clustered file is bounded by their ratio).

Bytes read are what the processes read during each read (``rchar`` of ``/proc/<pid>/io``, Linux),
the fewest over its repeats as its time is the best.
The false positive rate of each SQL92 group is measured over the whole store: among units whose
message does not match, the share whose bitmap still hits the group's bits.

>>> BURST_RUN
20000
>>> figures = FilterFigures(100, [ReadFigure("tag burst (clustered)", 0.47, 0.58, 1, 1, 1)], spark_floor_seconds=0.061)
>>> line = figures.lines()[-1]
>>> line[:45], "under 0.61 s" in line, line.split(": ")[-1]
('spark floor  0.061 s (the smallest Spark job)', True, 'tag burst (clustered)')
"""

from __future__ import annotations

import random
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from jobs.benchmarks import keys_and_body, percentile, speedup
from storelib.filter.selector import MessageSelector
from storelib.session import parallelism

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ReadFigure", "FilterFigures", "bench_filtering", "BURST_RUN"]

TOPIC = "FilterBench"
#: Messages per run of the "burst" attributes (1 run in 100 carries them).
BURST_RUN = 20_000


def filter_frame(spark: "SparkSession", n: int, partitions: int) -> "DataFrame":
    """Messages with a 1% uniform tag/property (``TagU``, ``u = 42``), a 1% bursty one (``TagBurst``,
    ``campaign = 'spring'``), a ``region`` of 100 values and a ``v`` of 100 values, both hashed from
    the id (independent of the tags); other tags from 8 values; 96-byte bodies of hash bytes, which do
    not compress (as real payloads mostly do not)."""
    from pyspark.sql import functions as F

    i = F.col("id")
    burst = F.pmod(F.floor(i / BURST_RUN), 100) == 7
    u = F.pmod(i, 100)
    tags = (
        F.when(burst, F.lit("TagBurst"))
        .when(u == 42, F.lit("TagU"))
        .otherwise(F.concat(F.lit("Tag"), F.pmod(i, 8).cast("string")))
    )
    props = F.create_map(
        F.lit("u"),
        u.cast("string"),
        F.lit("campaign"),
        F.when(burst, F.lit("spring")).otherwise(F.lit("none")),
        F.lit("amount"),
        F.pmod(i * 7919, 1000).cast("string"),
        F.lit("region"),
        F.concat(F.lit("r"), F.pmod(F.hash(i, F.lit(1)), 100).cast("string")),
        F.lit("v"),
        F.pmod(F.hash(i, F.lit(2)), 100).cast("string"),
    )
    return spark.range(0, n, 1, partitions).select(
        F.lit(TOPIC).alias("topic"),
        tags.alias("tags"),
        props.alias("properties"),
        *keys_and_body(i),
    )


def subscriptions() -> dict[str, str]:
    """32 SQL92 subscriptions: the four measured ones, 14 broad and 14 narrow others."""
    subs = {"G_U": "u = 42", "G_B": "campaign = 'spring'", "G_R": "region = 'r42'", "G_V": "v = 7"}
    subs.update({f"G_BROAD_{k}": f"amount >= {k * 60}" for k in range(1, 15)})
    subs.update({f"G_NARROW_{k}": f"u = {k} AND amount < 500" for k in range(14)})
    return subs


#: The measured reads: (name, group or tag, the exact test of the baseline scan).
CASES = [
    ("tag uniform", "TagU", None),
    ("tag burst", "TagBurst", None),
    ("sql key", "G_R", "region = 'r42'"),
    ("sql burst", "G_B", "campaign = 'spring'"),
    ("sql other", "G_V", "v = 7"),
]


@dataclass(frozen=True)
class ReadFigure:
    name: str
    seconds: float
    baseline_seconds: float
    bytes_read: int
    baseline_bytes: int
    rows: int
    #: The plan's choice (``prune`` or ``scan``).
    choice: str = ""
    #: On clustered data: the fresh store's scan (append order) of the same rows, seconds and bytes.
    fresh_scan_seconds: float | None = None
    fresh_scan_bytes: int | None = None

    def line(self) -> str:
        out = (
            f"{self.name:<22} {self.rows:>8,} rows {self.choice:<5} {self.seconds:6.2f} s vs scan "
            f"{self.baseline_seconds:6.2f} s = {speedup(self.baseline_seconds, self.seconds, 1)}; bytes "
            f"{self.bytes_read / 2**20:7.1f} MiB = {100 * self.bytes_read / max(1, self.baseline_bytes):5.1f}%"
        )
        if self.fresh_scan_seconds is not None:
            out += (
                f" | vs fresh scan {speedup(self.fresh_scan_seconds, self.seconds, 1)}, "
                f"{100 * self.bytes_read / max(1, self.fresh_scan_bytes or 0):5.1f}% of its bytes"
            )
        return out


@dataclass
class FilterFigures:
    messages: int
    reads: list[ReadFigure] = field(default_factory=list)
    false_positive_rates: dict[str, float] = field(default_factory=dict)
    dispatch_seconds: float = 0.0
    dispatch_no_bitmap_seconds: float = 0.0
    ext_seconds: float = 0.0
    ext_no_bitmap_seconds: float = 0.0
    compact_seconds: float = 0.0
    bare_sort_seconds: float = 0.0
    #: Point reads, fresh and clustered: kind -> seconds per call; and commitlog files a key look-up opened.
    point_reads: dict[str, list[float]] = field(default_factory=dict)
    lookup_files: dict[str, int] = field(default_factory=dict)
    #: The best time of the smallest Spark job: no read through Spark is faster.
    spark_floor_seconds: float = 0.0
    #: The best time of the smallest job with a Python task (as reads of kept row groups are).
    python_floor_seconds: float = 0.0
    #: The topic's commitlog files, in bytes, as sent (``fresh``) and after clustering (``clustered``).
    commitlog_bytes: dict[str, int] = field(default_factory=dict)

    def lines(self) -> list[str]:
        rates = sorted(self.false_positive_rates.values())
        out = [r.line() for r in self.reads]
        if rates:
            worst = max(self.false_positive_rates, key=self.false_positive_rates.get)
            out.append(
                f"bloom fpr    groups {len(rates)}: min {100 * rates[0]:.2f}%  median "
                f"{100 * statistics.median(rates):.2f}%  max {100 * rates[-1]:.2f}% ({worst})  (configured 20%)"
            )
        if self.dispatch_no_bitmap_seconds:
            out.append(
                f"bitmaps      dispatch {self.dispatch_seconds:.2f} s with 32 SQL92 subscriptions vs "
                f"{self.dispatch_no_bitmap_seconds:.2f} s without = "
                f"{self.dispatch_seconds / self.dispatch_no_bitmap_seconds:.2f}x; "
                f"scan+write part {self.ext_seconds:.2f} s vs {self.ext_no_bitmap_seconds:.2f} s"
            )
        if self.bare_sort_seconds:
            out.append(
                f"clustering   {self.compact_seconds:.2f} s vs bare read-sort-write {self.bare_sort_seconds:.2f} s "
                f"= {self.compact_seconds / self.bare_sort_seconds:.2f}x"
            )
        for kind, times in self.point_reads.items():
            out.append(
                f"{kind:<30} p50 {1000 * percentile(times, 0.5):7.1f} ms  p99 {1000 * percentile(times, 0.99):7.1f} ms"
                + (f"  commitlog files {self.lookup_files[kind]}" if kind in self.lookup_files else "")
            )
        for what, floor in (
            ("spark floor ", self.spark_floor_seconds),
            ("python floor", self.python_floor_seconds),
        ):
            if floor:
                below = [r.name for r in self.reads if (r.fresh_scan_seconds or r.baseline_seconds) < 10 * floor]
                job = "the smallest Spark job" if what.startswith("spark") else "the smallest job with a Python task"
                out.append(
                    f"{what} {floor:.3f} s ({job}): no such read is 10x faster than a scan (fresh where "
                    f"clustered) under {10 * floor:.2f} s: {', '.join(below) or 'no case'}"
                )
        fresh, clustered = self.commitlog_bytes.get("fresh"), self.commitlog_bytes.get("clustered")
        if fresh and clustered:
            out.append(
                f"layout       commitlog {clustered / 2**20:.1f} MiB clustered vs {fresh / 2**20:.1f} MiB as sent = "
                f"{100 * (clustered / fresh - 1):+.1f}%: a read that must scan every clustered file is at most "
                f"{fresh / clustered:.2f}x of the fresh scan"
            )
        return out

    def as_dict(self) -> dict:
        return {
            "reads": {
                r.name: {
                    "seconds": round(r.seconds, 3),
                    "baseline_seconds": round(r.baseline_seconds, 3),
                    "speedup": round(r.baseline_seconds / r.seconds, 2),
                    "bytes": r.bytes_read,
                    "baseline_bytes": r.baseline_bytes,
                    "choice": r.choice,
                    "bytes_pct": round(100 * r.bytes_read / max(1, r.baseline_bytes), 2),
                    "speedup_vs_fresh_scan": None
                    if r.fresh_scan_seconds is None
                    else round(r.fresh_scan_seconds / r.seconds, 2),
                    "bytes_pct_of_fresh_scan": None
                    if r.fresh_scan_bytes is None
                    else round(100 * r.bytes_read / max(1, r.fresh_scan_bytes), 2),
                    "rows": r.rows,
                }
                for r in self.reads
            },
            "false_positive_rates": {g: round(v, 4) for g, v in sorted(self.false_positive_rates.items())},
            "dispatch_seconds": round(self.dispatch_seconds, 3),
            "dispatch_no_bitmap_seconds": round(self.dispatch_no_bitmap_seconds, 3),
            "ext_seconds": round(self.ext_seconds, 3),
            "ext_no_bitmap_seconds": round(self.ext_no_bitmap_seconds, 3),
            "compact_seconds": round(self.compact_seconds, 3),
            "bare_sort_seconds": round(self.bare_sort_seconds, 3),
            "point_reads": {
                k: {
                    "p50_ms": round(1000 * percentile(t, 0.5), 1),
                    "p99_ms": round(1000 * percentile(t, 0.99), 1),
                    "commitlog_files": self.lookup_files.get(k),
                }
                for k, t in self.point_reads.items()
            },
            "spark_floor_seconds": round(self.spark_floor_seconds, 3),
            "python_floor_seconds": round(self.python_floor_seconds, 3),
            "commitlog_bytes": self.commitlog_bytes,
        }


def input_bytes(spark: "SparkSession") -> dict[int, int]:
    """Bytes read from files so far, per process, by this process, the Spark JVM (driver and, in local mode,
    executors) and the JVM's Python workers: ``rchar`` of ``/proc/<pid>/io``, every ``read`` call
    whether served by the disk or the page cache. Rows a Python worker hands to Spark cross a socket
    and count in the JVM's ``rchar``; they are taken off (the workers' ``wchar``), so only files count.
    (Spark's own ``inputBytes`` metric leaves out most Parquet column reads, so it is not used.)
    :func:`bytes_since` sums the growth since an earlier call."""
    import os

    jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    out = {pid: _io(pid)[0] for pid in {os.getpid(), jvm}}
    for pid in _descendants(jvm):
        read, written = _io(pid)
        out[pid] = read - written
    return out


def bytes_since(spark: "SparkSession", before: dict[int, int]) -> int:
    """Bytes read from files since ``before`` (:func:`input_bytes`), by the processes alive now (a worker
    that ended meanwhile takes its reads with it; Spark keeps its Python workers, so few do)."""
    return sum(n - before.get(pid, 0) for pid, n in input_bytes(spark).items())


def _io(pid: int) -> tuple[int, int]:
    """``rchar`` and ``wchar`` of a process (zeros once it is gone)."""
    try:
        with open(f"/proc/{pid}/io") as io:
            fields = dict(line.split(":") for line in io)
        return int(fields["rchar"]), int(fields["wchar"])
    except (FileNotFoundError, ProcessLookupError, KeyError):
        return 0, 0


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (the Python daemon and its workers), from ``/proc/<pid>/task/*/children``."""
    import glob

    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for path in glob.glob(f"/proc/{parent}/task/*/children"):
            try:
                with open(path) as f:
                    children = [int(c) for c in f.read().split()]
            except FileNotFoundError:
                continue
            out.extend(children)
            todo.extend(children)
    return out


def _measure_pair(
    spark: "SparkSession", ours: Callable[[], "DataFrame"], baseline: Callable[[], "DataFrame"] | None, repeats: int = 3
) -> list[tuple[float, int]]:
    """Best time of ``repeats`` materializations of each side (after one warm-up each) and the fewest
    bytes one of them read, the runs alternating (ours, baseline, ours, ...) so that neither
    side gains from running later (a warmer JIT, page cache). The fewest, as the best time: when a
    Python worker exits during a run, the rows it handed to the JVM are no longer taken off, and
    count as file bytes (the same read of 10^7 messages measured 13.2 and 30.6 MiB in turn)."""
    sides = [ours] if baseline is None else [ours, baseline]
    for fn in sides:
        fn().write.format("noop").mode("overwrite").save()
    times: list[list[float]] = [[] for _ in sides]
    read: list[list[int]] = [[] for _ in sides]
    for _ in range(repeats):
        for i, fn in enumerate(sides):
            before = input_bytes(spark)
            start = time.perf_counter()
            fn().write.format("noop").mode("overwrite").save()
            times[i].append(time.perf_counter() - start)
            read[i].append(bytes_since(spark, before))
    return [(min(t), min(r)) for t, r in zip(times, read)]


def bench_filtering(
    spark: "SparkSession",
    n: int,
    *,
    root: str | None = None,
    queues: int = 8,
    partitions: int | None = None,
    bitmap_cost: bool = True,
    pulls: int = 100,
    bloom_consumers: int | None = None,
) -> FilterFigures:
    """Run the filtering benchmark on ``n`` messages (see the module docstring). ``bloom_consumers``
    sizes the Bloom filter (``expect_consumer_num_use_filter``; RocketMQ's 32 by default)."""
    from storelib.maintenance.cluster import cluster_commitlog
    from storelib.store import MessageStore

    work = root or tempfile.mkdtemp(prefix="storelib-bench-filter-")
    partitions = partitions or max(2, parallelism(spark) * 2)
    figures = FilterFigures(n)
    sizing = {"expect_consumer_num_use_filter": bloom_consumers} if bloom_consumers else {}
    try:
        store = MessageStore.create(f"{work}/store", spark, **sizing)
        stores = [store]
        if bitmap_cost:
            stores.append(MessageStore.create(f"{work}/no-bitmap", spark, enable_calc_filter_bitmap=False, **sizing))
        for s in stores:
            s.create_topic(TOPIC, queues=queues, cluster_by=["TAGS", "region"])
            for group, expression in subscriptions().items():
                s.subscribe(group, TOPIC, MessageSelector.by_sql(expression))
            s.subscribe("G_ALL", TOPIC, "*")
            s.subscribe("G_TAG", TOPIC, "TagU || Tag3")
            s.send_dataframe(filter_frame(spark, n, partitions))
        if bitmap_cost:
            began = time.perf_counter()
            no_bitmap = stores[1].dispatch()
            figures.dispatch_no_bitmap_seconds = time.perf_counter() - began
            figures.ext_no_bitmap_seconds = no_bitmap.seconds.get("scan", 0.0)
        began = time.perf_counter()
        result = store.dispatch()
        figures.dispatch_seconds = time.perf_counter() - began
        figures.ext_seconds = result.seconds.get("scan", 0.0)

        fresh = _measure_cases(spark, store, "fresh")
        figures.reads.extend(fresh)
        figures.spark_floor_seconds = _spark_floor(spark)
        figures.python_floor_seconds = _python_floor(spark)
        figures.commitlog_bytes["fresh"] = _topic_bytes(store)
        _point_reads(store, figures, "fresh", queues, pulls)
        figures.bare_sort_seconds = _bare_sort(spark, store, f"{work}/bare")
        began = time.perf_counter()
        cluster_commitlog(store.context, settle_ms=0)  # what compact() adds for the commitlog
        figures.compact_seconds = time.perf_counter() - began
        store.compact(settle_ms=0)  # the other tables
        figures.commitlog_bytes["clustered"] = _topic_bytes(store)
        for figure, before in zip(_measure_cases(spark, store, "clustered"), fresh):
            figures.reads.append(
                ReadFigure(
                    figure.name,
                    figure.seconds,
                    figure.baseline_seconds,
                    figure.bytes_read,
                    figure.baseline_bytes,
                    figure.rows,
                    figure.choice,
                    before.baseline_seconds,
                    before.baseline_bytes,
                )
            )
        _point_reads(store, figures, "clustered", queues, pulls)
        figures.false_positive_rates = _false_positive_rates(store, list(subscriptions()))
        return figures
    finally:
        if root is None:
            shutil.rmtree(work, ignore_errors=True)


def _spark_floor(spark: "SparkSession", repeats: int = 5) -> float:
    """The best of ``repeats`` runs (after a warm-up) of the smallest Spark job: one row to the ``noop`` sink."""
    return _measure_pair(spark, lambda: spark.range(1), None, repeats=repeats)[0][0]


def _python_floor(spark: "SparkSession", repeats: int = 5) -> float:
    """The best of ``repeats`` runs (after a warm-up) of the smallest job with a Python task: one row through
    ``mapInArrow`` to the ``noop`` sink."""
    return _measure_pair(spark, lambda: spark.range(1).mapInArrow(lambda it: it, "id long"), None, repeats)[0][0]


def _topic_bytes(store) -> int:
    """The bytes of the commitlog's data files holding the topic's messages."""
    from storelib.delta.log import add_actions
    from storelib.delta.stats import Prune

    commitlog = store.context.tables.commitlog
    kept = commitlog.prune(add_actions(commitlog.snapshot()), Prune(equal={"topic": TOPIC}))
    return sum(kept.column("size_bytes").to_pylist())


def _measure_cases(spark: "SparkSession", store, label: str) -> list[ReadFigure]:
    """Each case of :data:`CASES`: the store's read and the plain scan with the same exact test."""
    from pyspark.sql import functions as F

    from storelib.filter.sql92 import compile_sql92

    out = []
    for name, what, sql in CASES:
        if sql is None:

            def ours(tag=what):
                return store.read(TOPIC, MessageSelector.by_tag(tag))

            def scan(tag=what):
                return store.messages(TOPIC).where(F.col("tags") == tag)
        else:

            def ours(group=what):
                return store.read(TOPIC, group=group)

            def scan(expression=sql):
                return store.messages(TOPIC).where(compile_sql92(expression))

        (seconds, read), (base_seconds, base_read) = _measure_pair(spark, ours, scan)
        choice = (
            store.explain_read(TOPIC, MessageSelector.by_tag(what))
            if sql is None
            else store.explain_read(TOPIC, group=what)
        )
        out.append(
            ReadFigure(f"{name} ({label})", seconds, base_seconds, read, base_read, ours().count(), choice.choice)
        )
    return out


def _bare_sort(spark: "SparkSession", store, path: str) -> float:
    """A bare Spark read-sort-write of the commitlog's rows: range-partitioned by offset into files
    of the store's target size, sorted by topic, tags, region and offset inside each."""
    from pyspark.sql import functions as F

    table = store.context.tables.commitlog
    snapshot = table.snapshot()
    files = table.files(snapshot)
    size = sum(int(s) for s in snapshot.get_add_actions(flatten=True).column("size_bytes").to_pylist())
    began = time.perf_counter()
    df = spark.read.parquet(*files)
    df = df.repartitionByRange(max(1, -(-size // store.config.target_file_size)), "physical_offset")
    df = df.sortWithinPartitions("topic", "tags", F.col("properties")["region"], "physical_offset")
    df.write.mode("overwrite").parquet(path)
    return time.perf_counter() - began


def _point_reads(store, figures: FilterFigures, label: str, queues: int, pulls: int) -> None:
    """Pulls of 32 (``*``, tag and SQL92 groups) at random offsets, and key look-ups, on this process."""
    from storelib.query.lookup import MessageQuery

    rng = random.Random(5)
    per_queue = store.max_queue_offset(TOPIC, 0)
    requests = [(rng.randrange(queues), rng.randrange(max(1, per_queue - 32))) for _ in range(pulls)]
    for group in ("G_ALL", "G_TAG", "G_U"):
        store.pull(group, TOPIC, 0, 0, 32)  # warm
        times = []
        for queue_id, offset in requests:
            began = time.perf_counter()
            store.pull(group, TOPIC, queue_id, offset, 32)
            times.append(time.perf_counter() - began)
        figures.point_reads[f"pull {group} ({label})"] = times
    query = MessageQuery(store.context)
    query.by_key(TOPIC, "order-0")
    times, files = [], 0
    for _ in range(pulls // 2):
        key = f"order-{rng.randrange(figures.messages)}"
        began = time.perf_counter()
        found = query.by_key(TOPIC, key)
        times.append(time.perf_counter() - began)
        files = max(files, query.files_touched.get("commitlog", 0))
        assert found, key
    figures.point_reads[f"key lookup ({label})"] = times
    figures.lookup_files[f"key lookup ({label})"] = files


def _false_positive_rates(store, groups: list[str]) -> dict[str, float]:
    """Per group: units whose message does not match but whose bitmap hits, over units that do not match."""
    from pyspark.sql import functions as F

    from storelib.filter.message_filter import MessageFilter

    units = store.table("consume_queue_ext").where(F.col("topic") == TOPIC)
    messages = store.messages(TOPIC).select("physical_offset", "tags", "properties")
    joined = units.join(messages, units.commitlog_offset == messages.physical_offset)
    aggs = []
    subscriptions = {s.group: s for s in store.context.registry.for_topic(TOPIC)}
    for g in groups:
        mf = MessageFilter(TOPIC, subscriptions[g].selector, subscriptions[g], store.context.registry.bloom_filter)
        miss = ~mf.commitlog_column()
        aggs += [F.count_if(miss).alias(f"{g}__neg"), F.count_if(miss & mf.bitmap_hit()).alias(f"{g}__fp")]
    row = joined.agg(*aggs).first()
    return {g: row[f"{g}__fp"] / max(1, row[f"{g}__neg"]) for g in groups}
