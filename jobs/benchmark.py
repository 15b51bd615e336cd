"""Benchmark: send N messages as a DataFrame and dispatch them, each against a bare Spark baseline.

    spark-submit --properties-file spark-defaults.conf jobs/benchmark.py --messages 10000000
    spark-submit --properties-file spark-defaults.conf jobs/benchmark.py --suite filter   # filtered reads
    spark-submit --properties-file spark-defaults.conf jobs/benchmark.py --suite pull     # pull latency
    spark-submit --properties-file spark-defaults.conf jobs/benchmark.py --suite custom   # class filters
    spark-submit --properties-file spark-defaults.conf jobs/benchmark.py --suite sql      # SQL by key, the data source
    # delivery and check-back, then the storelib command:
    spark-submit --properties-file spark-defaults.conf jobs/benchmark.py --suite schedule --messages 1000000
    spark-submit --properties-file spark-defaults.conf jobs/benchmark.py --suite admin --messages 1000000
    python jobs/benchmark.py --suite online --seconds 60       # 4 producers x 16 threads, a follower, 4 consumers
    python jobs/benchmark.py --suite online --seconds 60 --relay   # the producers handing groups to one committer
    python jobs/benchmark.py --suite online --seconds 60 --consumer-nice 10   # consumers yield the CPU to producers
    python jobs/benchmark.py --suite growth --commits 10000    # send, dispatch, pull: the first and last 1,000 commits
    python jobs/benchmark.py --suite flush                     # what SYNC_FLUSH costs a group commit
    python jobs/benchmark.py --suite s3 --messages 10000 --latency-ms 20   # requests and latency on an S3 store
    python jobs/benchmark.py --suite grpc --seconds 30 --producers 2 --consumers 2   # RocketMQ's client, storelib serve
    python jobs/benchmark.py --suite grpc --floor --seconds 20   # the same clients against a server storing nothing

Prints messages per second and the ratio to the baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.benchmarks.admin import bench_admin  # noqa: E402
from jobs.benchmarks.custom import bench_custom  # noqa: E402
from jobs.benchmarks.filter import bench_filtering  # noqa: E402
from jobs.benchmarks.flush import bench_flush  # noqa: E402
from jobs.benchmarks.growth import bench_growth  # noqa: E402
from jobs.benchmarks.grpc import bench_grpc  # noqa: E402
from jobs.benchmarks.object_storage import bench_object_storage  # noqa: E402
from jobs.benchmarks.online import bench_online  # noqa: E402
from jobs.benchmarks.pull import bench_pull  # noqa: E402
from jobs.benchmarks.s3_proxy_process import S3_SERVERS  # noqa: E402
from jobs.benchmarks.schedule import bench_schedule  # noqa: E402
from jobs.benchmarks.send import bench_key_lookup, bench_send_and_dispatch  # noqa: E402
from jobs.benchmarks.sql import bench_sql  # noqa: E402
from storelib.cli import job_parser, non_negative_int, positive_int  # noqa: E402
from storelib.model.errors import StoreError  # noqa: E402
from storelib.session import get_spark  # noqa: E402

#: The suites ``--suite`` may name.
SUITES = (
    "send",
    "lookup",
    "filter",
    "pull",
    "custom",
    "schedule",
    "sql",
    "admin",
    "online",
    "growth",
    "s3",
    "grpc",
    "flush",
)


def suite_list(text: str) -> list[str]:
    """``--suite``'s type: known suite names, comma-separated."""
    import argparse

    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in SUITES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown suite {', '.join(unknown) or repr(text)}; the suites are {', '.join(SUITES)}"
        )
    return names


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__, store=False)
    parser.add_argument("--messages", type=positive_int, default=10_000_000, help="messages to send")
    parser.add_argument("--topics", type=positive_int, default=4, help="topics the messages spread over")
    parser.add_argument("--queues", type=positive_int, default=8, help="queues per topic")
    parser.add_argument(
        "--partitions", type=positive_int, default=None, help="Spark partitions of the generated messages"
    )
    parser.add_argument("--root", default=None, help="keep the benchmark's tables here (default: a temp dir, removed)")
    parser.add_argument(
        "--repeats", type=positive_int, default=2, help="runs of each side of the send suite; the best counts"
    )
    parser.add_argument(
        "--suite",
        type=suite_list,
        default="send,lookup",
        help="comma-separated: send (send+dispatch), lookup (keys), filter (filtered reads), "
        "pull (pull latency), custom (class filters against a Spark Column), "
        "schedule (N delayed messages delivered, N half messages checked back), "
        "sql (key and id queries through SQL and the rocketmq source, group streams), "
        "admin (the storelib command's look-ups, a new process each), "
        "online (concurrent producers, a follower, long-polling consumers; --seconds), "
        "growth (send, dispatch, pull latency over --commits commits), "
        "s3 (look-ups, pulls, group commits, follower rounds on an S3 store: requests and latency), "
        "flush (group commits with flush_disk_type SYNC_FLUSH against ASYNC_FLUSH)",
    )
    parser.add_argument(
        "--store-uri",
        default=None,
        help="s3 suite: an s3:// root to use (its endpoint and keys from the AWS_* variables); "
        "default: a local moto_server the suite starts",
    )
    parser.add_argument("--latency-ms", type=float, default=20.0, help="s3 suite: latency added to every request")
    parser.add_argument(
        "--s3-server",
        choices=S3_SERVERS,
        default="moto",
        help="s3 suite without --store-uri: the local S3 server to start (go: jobs/benchmarks/s3server, built with "
        "the go command; it costs a small fraction of moto's CPU a request)",
    )
    parser.add_argument(
        "--online-seconds",
        type=non_negative_int,
        default=0,
        help="s3 suite: also run the online suite this long on an S3 store, through the latency proxy",
    )
    parser.add_argument(
        "--delta-spark",
        action="store_true",
        help="s3 suite: also read the S3 store with Delta Spark over s3a (downloads hadoop-aws and "
        "the AWS SDK bundle, about 690 MB, on first use)",
    )
    parser.add_argument(
        "--distinct-keys", type=positive_int, default=None, help="keys for the lookup suite (None: N/10)"
    )
    parser.add_argument(
        "--lookups", type=positive_int, default=50, help="look-ups of each kind (lookup and sql suites)"
    )
    parser.add_argument("--pulls", type=positive_int, default=200, help="pulls of each kind for the pull suite")
    parser.add_argument(
        "--bloom-consumers",
        type=positive_int,
        default=None,
        help="filter suite: Bloom filter sizing (expect_consumer_num_use_filter; RocketMQ's 32 by default)",
    )
    parser.add_argument(
        "--commits",
        type=positive_int,
        default=None,
        help="growth suite: commits each table takes (default 10,000); flush suite: group commits per round (200)",
    )
    parser.add_argument(
        "--compact-every-s",
        type=float,
        default=10.0,
        help="growth suite: merge fresh small files this often, as the follower does (0: never)",
    )
    parser.add_argument(
        "--time-travel-minutes",
        type=int,
        default=0,
        help="growth suite: the store's time_travel_minutes (log entries kept that long; 0: 10 s)",
    )
    parser.add_argument("--seconds", type=positive_int, default=60, help="online suite: how long the producers send")
    parser.add_argument(
        "--rate", type=non_negative_int, default=0, help="grpc suite: messages a second all producers send (0: no cap)"
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="grpc suite: the clients against a server that stores nothing (jobs/benchmarks/grpc_floor.py)",
    )
    parser.add_argument("--producers", type=positive_int, default=4, help="online suite: producer processes")
    parser.add_argument("--threads", type=positive_int, default=16, help="online suite: sending threads per producer")
    parser.add_argument(
        "--consumers", type=positive_int, default=4, help="online suite: long-polling consumer processes"
    )
    parser.add_argument(
        "--window",
        type=positive_int,
        default=16,
        help="online suite: sends each thread keeps in flight (send_async); 1 sends one at a time",
    )
    parser.add_argument(
        "--relay",
        action="store_true",
        help="online suite: the producer processes hand their groups to one committer (relay_sends)",
    )
    parser.add_argument(
        "--tail-pulls",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="online suite: the follower answers the consumers' pulls of the queues' tails (tail_pulls; "
        "default); --no-tail-pulls: the consumers read the tables",
    )
    parser.add_argument(
        "--round-ms",
        type=non_negative_int,
        default=None,
        help="online suite: the follower's --round-ms (default: the follower's own)",
    )
    parser.add_argument(
        "--consumer-nice",
        type=non_negative_int,
        default=0,
        help="online suite: niceness of the consumer processes (the nice command), to give the producers the CPU first",
    )
    parser.add_argument(
        "--follower-nice",
        type=non_negative_int,
        default=0,
        help="online suite: niceness of the follower process (the nice command)",
    )
    args = parser.parse_args(argv)
    suites = set(args.suite)
    out: dict = {}
    try:
        # the online and growth suites run no Spark job: a JVM starting beside them would take their CPU
        spark = get_spark("storelib-benchmark") if suites - {"online", "growth", "grpc", "flush"} else None
        if "send" in suites:
            figures = bench_send_and_dispatch(
                spark,
                args.messages,
                root=args.root,
                topics=args.topics,
                queues=args.queues,
                partitions=args.partitions,
                repeats=args.repeats,
            )
            for f in figures:
                print(f.line() + (" (slower than the baseline)" if f.ratio > 1 else ""), flush=True)
                out[f.name.strip()] = {
                    "messages": f.messages,
                    "seconds": round(f.seconds, 3),
                    "msgs_per_s": round(f.rate),
                    "baseline_seconds": round(f.baseline_seconds, 3),
                    "ratio": round(f.ratio, 3),
                }
        runs = {
            "lookup": lambda: bench_key_lookup(
                spark,
                args.messages,
                args.distinct_keys or max(1, args.messages // 10),
                lookups=args.lookups,
                root=args.root,
                partitions=args.partitions,
            ),
            "filter": lambda: bench_filtering(
                spark,
                args.messages,
                root=args.root,
                queues=args.queues,
                partitions=args.partitions,
                bloom_consumers=args.bloom_consumers,
            ),
            "pull": lambda: bench_pull(
                spark, args.messages, pulls=args.pulls, root=args.root, queues=args.queues, partitions=args.partitions
            ),
            "custom": lambda: bench_custom(
                spark,
                args.messages,
                root=args.root,
                queues=args.queues,
                partitions=args.partitions,
                repeats=args.repeats,
            ),
            "sql": lambda: bench_sql(
                spark,
                args.messages,
                lookups=args.lookups,
                root=args.root,
                queues=args.queues,
                partitions=args.partitions,
            ),
            "online": lambda: bench_online(
                args.seconds,
                producers=args.producers,
                threads=args.threads,
                window=args.window,
                consumers=args.consumers,
                root=args.root,
                relay=args.relay,
                consumer_nice=args.consumer_nice,
                follower_nice=args.follower_nice,
                tail_pulls=args.tail_pulls,
                round_ms=args.round_ms,
            ),
            "growth": lambda: bench_growth(
                args.commits or 10_000,
                compact_every_s=args.compact_every_s,
                root=args.root,
                progress=lambda line: print(line, file=sys.stderr, flush=True),
                time_travel_minutes=args.time_travel_minutes,
            ),
            "admin": lambda: bench_admin(
                spark, args.messages, root=args.root, queues=args.queues, partitions=args.partitions
            ),
            "s3": lambda: bench_object_storage(
                spark,
                args.messages,
                latency_ms=args.latency_ms,
                queues=args.queues,
                operations=args.lookups,
                root=args.root,
                store_uri=args.store_uri,
                delta_spark=args.delta_spark,
                s3_server=args.s3_server,
                online_seconds=args.online_seconds,
                online={
                    "producers": args.producers,
                    "threads": args.threads,
                    "window": args.window,
                    "consumers": args.consumers,
                    "relay": args.relay,
                },
            ),
            "grpc": lambda: bench_grpc(
                args.seconds,
                producers=args.producers,
                window=args.window * args.threads,
                consumers=args.consumers,
                root=args.root,
                rate=args.rate,
                floor=args.floor,
            ),
            "flush": lambda: bench_flush(args.commits or 200, root=args.root),
            "schedule": lambda: bench_schedule(
                spark, args.messages, root=args.root, partitions=args.partitions, repeats=args.repeats
            ),
        }
        for suite, run in runs.items():
            if suite in suites:
                figures = run()
                for line in figures.lines():
                    print(line, flush=True)
                out[suite] = figures.as_dict()
    except StoreError as e:
        print(f"benchmark failed: {e}", file=sys.stderr)
        return 2
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
