"""SQL and the ``rocketmq`` data source: key and id queries, and group streams, against plain Spark.

One topic gets ``n`` messages (one key each, ``order-<i>``; tags from 100 values; 96-byte bodies) and is
dispatched. Then, in one warm session:

* ``sql_key`` / ``source_key`` / ``sql_id``: ``lookups`` queries by key through the ``messages_by_key``
  view, by key through a fresh ``spark.read.format("rocketmq")`` DataFrame, and by msg id through the
  ``messages`` view; p50 and p99 of the wall time of each ``collect()``, and the data files the plan
  opens. Baseline: the same key query through the index-joined-to-commitlog view the store had before
  (``VIEW_JOIN``), a few times (it reads the whole store).
* ``read_*``: the table reads storelib plans itself (pruned Parquet file lists) against Delta Spark's.
* ``stream_all`` / ``stream_tag``: a group stream (Trigger.AvailableNow into Spark's ``noop`` sink) of
  every message (``*``) and of one tag (1%), against a plain Spark scan of the commitlog's Parquet files
  with the same exact test into ``noop``; the better of two runs of each, alternating.
* the two bounds of any stream through PySpark's Python data source: ``python_source``, a bare Python data
  source handing every row of the same files to Spark (pyarrow reads of whole files, no filter, no
  offsets) against the scan of every row; and ``stream_start``, a stream with nothing to read
  (``startingOffsets`` latest) against the smallest Spark job: a stream's fixed cost (a Python process of
  its own for offsets, then one job).

>>> SqlFigures(10, {"sql_key": [0.5, 0.7]}, {"sql_key": 2}, 9.0, {"stream_all": 2.0}, {"stream_all": 1.0}).lines()[0]
'sql_key         p50   0.600 s  p99   0.698 s  files 2  vs view-join 9.000 s = 15.0x faster'
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jobs.benchmarks import keys_and_body, speedup
from storelib.session import parallelism

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["SqlFigures", "bench_sql", "VIEW_JOIN"]

TOPIC = "SqlBench"
#: What ``messages_by_key`` was before the data source: the whole index joined to the whole commitlog.
VIEW_JOIN = """
SELECT m.msg_id, m.topic, m.queue_id, m.queue_offset, m.physical_offset AS commitlog_offset, k.key
FROM index i JOIN commitlog m ON i.commitlog_offset = m.physical_offset
LATERAL VIEW explode(split(coalesce(m.keys, ''), ' ')) k AS key
WHERE m.topic = '{topic}' AND k.key = '{key}'
"""


@dataclass(frozen=True)
class SqlFigures:
    messages: int
    #: Seconds of each look-up, by kind.
    lookups: dict[str, list[float]]
    #: Data files each kind's plan opens.
    files: dict[str, int]
    view_join_seconds: float
    stream_seconds: dict[str, float]
    scan_seconds: dict[str, float]
    #: Table reads storelib plans itself (pruned Parquet file lists) against Delta Spark's own: (ours, delta).
    reads: dict[str, tuple[float, float]] = None  # type: ignore[assignment]
    #: What bounds a stream here (see the module's description): (seconds, baseline seconds).
    bounds: dict[str, tuple[float, float]] = None  # type: ignore[assignment]

    def lines(self) -> list[str]:
        out = []
        for kind, times in self.lookups.items():
            p50 = statistics.median(times)
            p99 = statistics.quantiles(times, n=100, method="inclusive")[98] if len(times) > 1 else times[0]
            out.append(
                f"{kind:<15} p50 {p50:7.3f} s  p99 {p99:7.3f} s  files {self.files.get(kind, 0)}  "
                f"vs view-join {self.view_join_seconds:.3f} s = {self.view_join_seconds / p50:.1f}x faster"
            )
        for kind, seconds in self.stream_seconds.items():
            base = self.scan_seconds[kind]
            out.append(
                f"{kind:<15} {self.messages / seconds:12,.0f} msgs/s ({seconds:.2f} s) vs Parquet scan "
                f"{self.messages / base:,.0f} msgs/s ({base:.2f} s) = {speedup(base, seconds)}"
            )
        for kind, (ours, delta) in (self.reads or {}).items():
            out.append(f"{kind:<15} storelib {ours:.3f} s vs Delta Spark {delta:.3f} s = {speedup(delta, ours)}")
        bounds = self.bounds or {}
        if "python_source" in bounds:
            seconds, base = bounds["python_source"]
            out.append(
                f"{'python_source':<15} {self.messages / seconds:12,.0f} msgs/s ({seconds:.2f} s) vs Parquet scan "
                f"{self.messages / base:,.0f} msgs/s ({base:.2f} s) = {speedup(base, seconds)}: the most a Python "
                "data source hands Spark here"
            )
        if "stream_start" in bounds:
            seconds, base = bounds["stream_start"]
            out.append(
                f"{'stream_start':<15} {seconds:.2f} s for a stream with nothing to read vs the smallest Spark job "
                f"{base:.3f} s"
            )
        return out

    def as_dict(self) -> dict:
        return {
            "messages": self.messages,
            "view_join_seconds": round(self.view_join_seconds, 3),
            **{
                k: {"p50": round(statistics.median(v), 4), "files": self.files.get(k, 0)}
                for k, v in self.lookups.items()
            },
            **{
                k: {
                    "seconds": round(s, 3),
                    "scan_seconds": round(self.scan_seconds[k], 3),
                    "ratio": round(self.scan_seconds[k] / s, 3),
                }
                for k, s in self.stream_seconds.items()
            },
            **{k: {"storelib": round(o, 3), "delta_spark": round(d, 3)} for k, (o, d) in (self.reads or {}).items()},
            **{
                k: {"seconds": round(o, 3), "baseline_seconds": round(b, 3)}
                for k, (o, b) in (self.bounds or {}).items()
            },
        }


def _frame(spark: "SparkSession", n: int, partitions: int) -> "DataFrame":
    from pyspark.sql import functions as F

    i = F.col("id")
    return spark.range(0, n, 1, partitions).select(
        F.lit(TOPIC).alias("topic"),
        F.concat(F.lit("Tag"), F.pmod(i, 100).cast("string")).alias("tags"),
        F.create_map(F.lit("a"), F.pmod(i, 7).cast("string")).alias("properties"),
        *keys_and_body(i),
    )


def _timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def _stream(spark: "SparkSession", store, group: str, checkpoint: str, starting: str | None = None) -> None:
    """A group's stream of the topic (Trigger.AvailableNow into ``noop``), from a new checkpoint, to its end."""
    reader = spark.readStream.format("rocketmq").option("store", store.root).option("group", group)
    reader = reader.option("topic", TOPIC).option("commitOffsets", "false")
    if starting is not None:
        reader = reader.option("startingOffsets", starting)
    writer = reader.load().writeStream.format("noop").option("checkpointLocation", checkpoint)
    writer.trigger(availableNow=True).start().awaitTermination()


def _stream_bounds(spark: "SparkSession", store, paths: list[str], work: str) -> dict[str, tuple[float, float]]:
    """``python_source`` and ``stream_start`` (see the module's description): the better of two runs each, after
    a warm-up."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from storelib.datasource.batch import output_schema

    schema = spark.read.parquet(*paths).schema
    arrow = output_schema(schema)

    class WholeFile(InputPartition):
        def __init__(self, path: str) -> None:
            self.path = path

    class WholeFiles(DataSourceReader):
        def partitions(self):
            return [WholeFile(p) for p in paths]

        def read(self, partition):
            import pyarrow.parquet as pq

            for batch in pq.ParquetFile(partition.path).iter_batches(batch_size=32 * 1024):
                yield batch.cast(arrow)

    class Bare(DataSource):  # defined here, so Spark's Python processes receive it by value
        @classmethod
        def name(cls) -> str:
            return "storelib_bench_bare"

        def schema(self):
            return schema

        def reader(self, schema):
            return WholeFiles()

    spark.dataSource.register(Bare)
    noop = lambda df: df.write.format("noop").mode("overwrite").save()  # noqa: E731
    bare = [_timed(lambda: noop(spark.read.format("storelib_bench_bare").load())) for _ in range(3)]
    scan = [_timed(lambda: noop(spark.read.parquet(*paths))) for _ in range(3)]
    floor = [_timed(lambda: noop(spark.range(1))) for _ in range(3)]
    starts = [_timed(lambda i=i: _stream(spark, store, "G_ALL", f"{work}/ck-start-{i}", "latest")) for i in range(3)]
    # the first run of each warms up (a new Python worker, the JIT)
    return {"python_source": (min(bare[1:]), min(scan[1:])), "stream_start": (min(starts[1:]), min(floor[1:]))}


def _table_reads(spark: "SparkSession", store) -> dict[str, tuple[float, float]]:
    """The reads storelib prunes itself (dispatch's commitlog tail, a topic's messages, a queue range) against
    the same reads through Delta Spark's data skipping; best of three each."""
    from pyspark.sql import functions as F

    from storelib.delta.stats import Prune

    cl, cq = store.context.tables.commitlog, store.context.tables.consume_queue
    tail = store.max_offset() - store.max_offset() // 20
    noop = lambda df: df.write.format("noop").mode("overwrite").save()  # noqa: E731
    pairs = {
        "read_tail_5pct": (
            lambda: noop(
                cl.read(spark, prune=Prune(between={"physical_offset": (tail, 2**62)})).where(
                    F.col("physical_offset") >= tail
                )
            ),
            lambda: noop(spark.read.format("delta").load(cl.path).where(F.col("physical_offset") >= tail)),
        ),
        "read_topic": (
            lambda: noop(store.messages(TOPIC)),
            lambda: noop(spark.read.format("delta").load(cl.path).where(F.col("topic") == TOPIC)),
        ),
        "read_queue": (
            lambda: store.consume_queue(TOPIC, 3, 1000, 2000).collect(),
            lambda: (
                spark.read.format("delta")
                .load(cq.path)
                .where((F.col("topic") == TOPIC) & (F.col("queue_id") == 3) & F.col("queue_offset").between(1000, 1999))
                .collect()
            ),
        ),
    }
    return {name: tuple(min(_timed(f) for _ in range(3)) for f in pair) for name, pair in pairs.items()}


def bench_sql(
    spark: "SparkSession",
    n: int,
    *,
    lookups: int = 20,
    root: str | None = None,
    queues: int = 8,
    partitions: int | None = None,
) -> SqlFigures:
    """Run the SQL / data source benchmark on ``n`` messages (see the module docstring)."""
    import random

    from pyspark.sql import functions as F

    from storelib.datasource.batch import plan
    from storelib.datasource.options import SourceOptions
    from storelib.datasource.pushdown import Pushdown
    from storelib.sql import register_views
    from storelib.store import MessageStore

    work = root or tempfile.mkdtemp(prefix="storelib-bench-sql-")
    partitions = partitions or max(2, parallelism(spark) * 2)
    try:
        store = MessageStore.create(f"{work}/store", spark)
        store.create_topic(TOPIC, queues=queues)
        store.send_dataframe(_frame(spark, n, partitions))
        store.subscribe("G_ALL", TOPIC, "*")
        store.subscribe("G_TAG", TOPIC, "Tag7")
        store.dispatch()
        register_views(spark, store)
        rng = random.Random(7)
        keys = [f"order-{rng.randrange(n)}" for _ in range(lookups)]
        ids = [
            spark.sql(f"SELECT msg_id FROM messages_by_key WHERE topic = '{TOPIC}' AND key = '{k}'").first().msg_id
            for k in keys[:3]
        ]
        ids = [ids[i % len(ids)] for i in range(lookups)]
        source = lambda: spark.read.format("rocketmq").option("store", store.root).load()  # noqa: E731
        times = {
            "sql_key": [
                _timed(
                    lambda k=k: spark.sql(
                        "SELECT * FROM messages_by_key WHERE topic = :t AND key = :k", args={"t": TOPIC, "k": k}
                    ).collect()
                )
                for k in keys
            ],
            "source_key": [
                _timed(lambda k=k: source().where((F.col("topic") == TOPIC) & (F.col("keys") == k)).collect())
                for k in keys
            ],
            "sql_id": [
                _timed(lambda i=i: spark.sql("SELECT * FROM messages WHERE msg_id = :i", args={"i": i}).collect())
                for i in ids
            ],
        }
        options = SourceOptions.parse({"store": store.root})
        schema = options.arrow_schema()
        from pyspark.sql.datasource import EqualTo

        files = {
            "sql_key": sum(
                len(p.paths)
                for p in plan(
                    SourceOptions.parse({"store": store.root, "table": "messages_by_key"}),
                    Pushdown.of(
                        [EqualTo(("topic",), TOPIC), EqualTo(("key",), keys[0])],
                        SourceOptions.parse({"store": store.root, "table": "messages_by_key"}).arrow_schema(),
                    ),
                )
            ),
            "source_key": sum(
                len(p.paths)
                for p in plan(options, Pushdown.of([EqualTo(("topic",), TOPIC), EqualTo(("keys",), keys[0])], schema))
            ),
            "sql_id": sum(len(p.paths) for p in plan(options, Pushdown.of([EqualTo(("msg_id",), ids[0])], schema))),
        }
        join = [_timed(lambda k=k: spark.sql(VIEW_JOIN.format(topic=TOPIC, key=k)).collect()) for k in keys[:3]]

        commitlog = store.context.tables.commitlog
        paths = commitlog.files(commitlog.snapshot())
        streams, scans = {}, {}
        for kind, group, test in (
            ("stream_all", "G_ALL", F.lit(True)),
            ("stream_tag", "G_TAG", F.col("tags") == "Tag7"),
        ):

            def scan(t=test) -> None:
                spark.read.parquet(*paths).where((F.col("topic") == TOPIC) & t).write.format("noop").mode(
                    "overwrite"
                ).save()

            # the better of two runs each, alternating: the first of a kind pays its warm-up
            runs = [
                (_timed(lambda i=i, g=group: _stream(spark, store, g, f"{work}/ck-{g}-{i}")), _timed(scan))
                for i in range(2)
            ]
            streams[kind], scans[kind] = min(r[0] for r in runs), min(r[1] for r in runs)
        bounds = _stream_bounds(spark, store, paths, work)
        return SqlFigures(n, times, files, statistics.median(join), streams, scans, _table_reads(spark, store), bounds)
    finally:
        if root is None:
            shutil.rmtree(work, ignore_errors=True)
