"""Object storage: what each operation costs in requests and time on an S3 store, beside the same on local disk.

The suite fills two stores with the same N messages (one on local disk, one on an S3-compatible server,
``--store-uri``, or a local S3 server it starts: ``moto_server``, or with ``--s3-server go`` the Go one of
``jobs/benchmarks/s3server``), puts a counting proxy with ``--latency-ms`` added to
every request in front of the S3 server (:mod:`jobs.benchmarks.s3_proxy`), and measures on both: a key
look-up, a pull of 32, a group commit of 32 messages, and a follower's dispatch round of that commit.
For each it reports p50 and p99 and the requests (GET, PUT, LIST, HEAD, DELETE) one operation makes on
the S3 store, which must not grow with the store.

>>> line = Op("pull of 32", [0.01, 0.02], [0.05, 0.06], {"GET": 4}, 2).line()
>>> line.split()[:5]
['pull', 'of', '32', 'local', 'p50']
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from jobs.benchmarks import percentile
from jobs.benchmarks.s3_proxy_process import ProxyProcess, start_s3_server
from storelib.delta.watch import WATCHER, unwatched
from storelib.storage.schema import TABLES

TABLE_NAMES = frozenset(TABLES)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["Op", "S3Figures", "bench_object_storage"]

TOPIC = "BenchTopic"


@dataclass(frozen=True)
class Op:
    """One operation's seconds on local disk and on the object store, and its requests there (per operation)."""

    name: str
    local: list[float]
    remote: list[float]
    requests: dict[str, int]
    count: int
    log_requests: int = 0  # of ``requests``, those to Delta logs (looks for new versions, commits)

    def line(self) -> str:
        per = {k: round(v / max(1, self.count), 1) for k, v in sorted(self.requests.items()) if v}
        return (
            f"{self.name:<18} local p50 {percentile(self.local, 0.5) * 1000:7.1f} ms "
            f"p99 {percentile(self.local, 0.99) * 1000:7.1f} ms"
            f" | s3 p50 {percentile(self.remote, 0.5) * 1000:7.1f} ms "
            f"p99 {percentile(self.remote, 0.99) * 1000:7.1f} ms"
            f" | requests per op {per}, of which to Delta logs {self.log_requests / max(1, self.count):.1f}"
        )

    def record(self) -> dict:
        return {
            "local_p50_ms": round(percentile(self.local, 0.5) * 1000, 2),
            "local_p99_ms": round(percentile(self.local, 0.99) * 1000, 2),
            "s3_p50_ms": round(percentile(self.remote, 0.5) * 1000, 2),
            "s3_p99_ms": round(percentile(self.remote, 0.99) * 1000, 2),
            "requests_per_op": {k: round(v / max(1, self.count), 2) for k, v in self.requests.items() if v},
            "log_requests_per_op": round(self.log_requests / max(1, self.count), 2),
        }


@dataclass(frozen=True)
class S3Figures:
    """The suite's operations at ``messages`` with ``latency_ms`` added to each S3 request."""

    messages: int
    latency_ms: float
    ops: list[Op]
    delta_spark: dict | None = None
    online: Any = None
    reads: list = ()
    #: Requests the S3 server answered over the online suite (its set-up included), by kind.
    online_requests: dict | None = None
    #: The same by (table, log or data, kind), most first.
    online_by_table: list | None = None

    def read_lines(self) -> list[str]:
        out = []
        for side, t_read, t_scan, planned, scanned, logs in self.reads:
            read, scan = percentile(t_read, 0.5), percentile(t_scan, 0.5)
            line = (
                f"filtered read of 1% after clustering, {side}: {read:.3f} s against the plain scan's {scan:.3f} s "
                f"({scan / read:.1f}x)"
            )
            if side == "s3":
                data = (sum(planned.values()) - logs[0], sum(scanned.values()) - logs[1])
                line += (
                    f"; requests {sum(planned.values())} against {sum(scanned.values())} "
                    f"({100 * sum(planned.values()) / max(1, sum(scanned.values())):.1f}%), to data files "
                    f"{data[0]} against {data[1]} ({100 * data[0] / max(1, data[1]):.1f}%)"
                )
            out.append(line)
        return out

    def lines(self) -> list[str]:
        head = f"object storage: {self.messages:,} msgs, {self.latency_ms:g} ms added to every S3 request"
        tail = [*self.read_lines(), *([f"Delta Spark over s3a: {self.delta_spark}"] if self.delta_spark else [])]
        if self.online is not None:
            tail += ["online suite on the S3 store (with the added latency):", *self.online.lines()]
            if self.online_requests:
                total = sum(self.online_requests.values())
                kinds = ", ".join(f"{k} {v:,}" for k, v in sorted(self.online_requests.items()) if v)
                tail.append(
                    f"requests over the online suite: {total:,} ({kinds}), {total / self.online.sent:.2f} a message"
                )
            if self.online_by_table:
                top = ", ".join(f"{t} {part} {kind} {n:,}" for (t, part, kind), n in self.online_by_table[:12])
                tail.append(f"  most made: {top}")
        return [head, *(op.line() for op in self.ops), *tail]

    def as_dict(self) -> dict:
        return {
            "messages": self.messages,
            "latency_ms": self.latency_ms,
            **{op.name: op.record() for op in self.ops},
            "filtered_reads": [
                {
                    "side": side,
                    "read_s": round(percentile(a, 0.5), 3),
                    "scan_s": round(percentile(b, 0.5), 3),
                    "read_requests": c,
                    "scan_requests": d,
                    "log_requests": logs,
                }
                for side, a, b, c, d, logs in self.reads
            ],
            "delta_spark": self.delta_spark,
            "online": self.online.as_dict() if self.online is not None else None,
            "online_requests": self.online_requests,
        }


def _by_table(requests: list[tuple[str, str, str]]) -> list[tuple[tuple[str, str, str], int]]:
    """Requests ``(method, kind, target)`` counted by (table, ``log`` or ``data``, kind), most first.

    >>> _by_table([("GET", "GET", "/b/s/commitlog/_delta_log/1.json"), ("PUT", "PUT", "/b/s/commitlog/part-1.parquet"),
    ...            ("GET", "LIST", "/b?list-type=2&prefix=s%2Fcommitlog%2F_delta_log%2F")])
    [(('commitlog', 'log', 'GET'), 1), (('commitlog', 'data', 'PUT'), 1), (('commitlog', 'log', 'LIST'), 1)]
    """
    from collections import Counter
    from urllib.parse import unquote

    counts: Counter = Counter()
    for _, kind, target in requests:
        path = unquote(target.split("prefix=", 1)[1] if "prefix=" in target else target.split("?", 1)[0])
        parts = [p for p in path.split("/") if p]
        table = next((p for p in parts if p in TABLE_NAMES), "other")
        counts[(table, "log" if "_delta_log" in path else "data", kind)] += 1
    return counts.most_common()


#: Run in a process of its own (a session with Hadoop's S3A connector): Delta Spark reads a store's commitlog.
DELTA_SPARK_CHECK = """
import json, sys
from storelib.session import get_spark
root, expected = sys.argv[1], int(sys.argv[2])
spark = get_spark("storelib-s3a-check", {"spark.master": "local[2]"}, s3a=True)
table = root + "/commitlog"
out = {"count": spark.read.format("delta").load(table).count(), "expected": expected,
       "versions": len(spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()),
       "version_1_rows": spark.read.format("delta").option("versionAsOf", 1).load(table).count()}
print(json.dumps(out))
sys.exit(0 if out["count"] == expected else 1)
"""


def delta_spark_reads(root: str, expected: int, options: dict) -> dict:
    """Delta Spark (``format("delta")`` over ``s3a``) reads the store's commitlog: its count, history and a
    version; downloads hadoop-aws and the AWS SDK bundle on first use (:func:`storelib.session.s3a_settings`)."""
    import json

    env = {**os.environ, **options}
    done = subprocess.run(
        [sys.executable, "-c", DELTA_SPARK_CHECK, root, str(expected)],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"Delta Spark could not read {root}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _fill(spark: "SparkSession", store, messages: int, queues: int) -> None:
    from pyspark.sql import functions as F

    store.create_topic(TOPIC, queues=queues)
    store.subscribe("GroupAll", TOPIC, "*")
    df = spark.range(messages, numPartitions=max(1, min(64, messages // 50_000))).select(
        F.lit(TOPIC).alias("topic"),
        F.concat(F.lit("body-"), F.col("id").cast("string")).cast("binary").alias("body"),
        F.concat(F.lit("Tag"), (F.col("id") % 100).cast("string")).alias("tags"),  # a tag holds 1%
        F.array(F.concat(F.lit("key-"), (F.col("id") % max(1, messages // 10)).cast("string"))).alias("keys"),
    )
    store.send_dataframe(df)
    store.dispatch()
    store.compact(full=True, settle_ms=0)  # clustered by tag


def _scan(spark: "SparkSession", store, tag: str) -> int:
    """The plain scan a user would run without the store's plan: every commitlog file, filtered."""
    from pyspark.sql import functions as F

    from storelib.delta.spark_read import read_paths

    table = store.context.tables.commitlog
    with unwatched():
        actions = table.view().actions
    df = read_paths(spark, table.spec.arrow, table.paths(actions), actions.column("size_bytes").to_pylist())
    return df.where((F.col("topic") == TOPIC) & (F.col("tags") == tag)).count()


def _timed(fn: Callable[[], object], times: int) -> list[float]:
    out = []
    for _ in range(times):
        began = time.perf_counter()
        fn()
        out.append(time.perf_counter() - began)
    return out


def bench_object_storage(
    spark: "SparkSession",
    messages: int,
    *,
    latency_ms: float = 20.0,
    queues: int = 8,
    operations: int = 50,
    root: str | None = None,
    store_uri: str | None = None,
    storage_options: dict | None = None,
    delta_spark: bool = False,
    online_seconds: float = 0,
    online: dict | None = None,
    s3_server: str = "moto",
) -> S3Figures:
    """Fill a local and an S3 store with ``messages`` and measure look-ups, pulls, group commits and follower
    rounds on both; the S3 side through a counting proxy adding ``latency_ms`` to each request. Without
    ``store_uri``, a local ``s3_server`` (:data:`~jobs.benchmarks.s3_proxy_process.S3_SERVERS`) is started."""
    from storelib import Message, MessageStore

    work = root or tempfile.mkdtemp(prefix="storelib-s3bench-")
    server = None
    if store_uri is None:
        import boto3

        port, server = start_s3_server(s3_server)
        upstream = ("127.0.0.1", port)
        bucket = f"bench-{os.getpid()}"
        boto3.client(
            "s3",
            endpoint_url=f"http://127.0.0.1:{port}",
            aws_access_key_id="bench",
            aws_secret_access_key="bench",
            region_name="us-east-1",
        ).create_bucket(Bucket=bucket)
        store_uri = f"s3://{bucket}/store"
        storage_options = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_REGION": "us-east-1"}
    else:
        from urllib.parse import urlsplit

        given = urlsplit((storage_options or {}).get("AWS_ENDPOINT_URL") or os.environ["AWS_ENDPOINT_URL"])
        upstream = (given.hostname, given.port or 80)
    proxy = ProxyProcess(*upstream).start()
    options = {**(storage_options or {}), "AWS_ENDPOINT_URL": proxy.endpoint, "AWS_ALLOW_HTTP": "true"}
    try:
        local = MessageStore.create(f"{work}/local", spark)
        remote = MessageStore.create(store_uri, spark, storage_options=options)
        for store in (local, remote):
            _fill(spark, store, messages, queues)
        keys = [f"key-{random.randrange(max(1, messages // 10))}" for _ in range(operations)]
        ends = {q: local.max_queue_offset(TOPIC, q) for q in range(queues)}
        pulls = [
            (q, random.randrange(max(1, ends[q] - 32))) for q in (random.randrange(queues) for _ in range(operations))
        ]
        ops = []
        proxy.latency_s = latency_ms / 1000
        for name, run in (
            ("key look-up", lambda s, i: s.query_by_key(TOPIC, keys[i])),
            ("pull of 32", lambda s, i: s.pull("GroupAll", TOPIC, pulls[i][0], pulls[i][1], 32)),
            (
                "group commit of 32",
                lambda s, i: s.send_batch([Message(TOPIC, body=b"gc-%d-%d" % (i, j), tags="TagX") for j in range(32)]),
            ),
            ("follower round", lambda s, i: s.dispatch()),
        ):
            before = (
                (lambda s: s.send_batch([Message(TOPIC, body=b"f", tags="TagF")]))
                if name == "follower round"
                else (lambda s: None)
            )  # a round has a commit to dispatch, sent outside the count
            times: dict[str, list[float]] = {"local": [], "s3": []}
            counts: dict[str, int] = {}
            log_requests = 0
            for side, store in (("local", local), ("s3", remote)):
                before(store), run(store, 0)  # warm: views loaded, footers cached
                for i in range(operations):
                    before(store)
                    with proxy.counting() as counted:
                        times[side].extend(_timed(lambda: run(store, i), 1))
                    if side == "s3":
                        for k, v in counted.counts.items():
                            counts[k] = counts.get(k, 0) + v
                        log_requests += counted.log_requests
            ops.append(Op(name, times["local"], times["s3"], counts, operations, log_requests))
            print(ops[-1].line(), file=sys.stderr, flush=True)  # as it comes: the later steps take minutes
        reads = []
        WATCHER.stop()  # the reads are measured as a batch job's: no table watched for the steps before
        for side, store in (("local", local), ("s3", remote)):
            tag = "Tag37"
            assert store.read(TOPIC, tag).count() == _scan(spark, store, tag)  # warm, and the same rows
            with proxy.counting() as planned:
                t_read = _timed(lambda: store.read(TOPIC, tag).count(), 3)
            with proxy.counting() as scanned:
                t_scan = _timed(lambda: _scan(spark, store, tag), 3)
            logs = (planned.log_requests, scanned.log_requests)
            reads.append((side, t_read, t_scan, planned.counts, scanned.counts, logs))
        online_figures = None
        if online_seconds:
            from jobs.benchmarks.online import bench_online

            os.makedirs(f"{work}/online-work", exist_ok=True)
            with proxy.counting() as online_requests:
                online_figures = bench_online(
                    online_seconds,
                    store_uri=store_uri.rsplit("/", 1)[0] + "/online",
                    storage_env={**options, "AWS_ENDPOINT_URL": proxy.endpoint},
                    root=f"{work}/online-work",
                    harness={
                        "S3 server": [server.pid] if server is not None else [],
                        "latency proxy": [proxy.pid or 0],
                    },
                    **(online or {}),
                )
        checked = None
        if delta_spark:
            proxy.latency_s = 0
            checked = delta_spark_reads(remote.root, remote.messages().count(), options)
        local.close()
        remote.close()
        counted = online_requests.counts if online_seconds else None
        by_table = _by_table(proxy.requests(sum(counted.values()))) if counted else None
        return S3Figures(messages, latency_ms, ops, checked, online_figures, reads, counted, by_table)
    finally:
        proxy.stop()
        if server is not None:
            server.terminate()
        if root is None:
            shutil.rmtree(work, ignore_errors=True)
