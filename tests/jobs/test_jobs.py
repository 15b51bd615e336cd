"""The jobs and SQL files, run as users run them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from storelib.model.errors import JavaNotFoundError
from storelib.session import check_java, read_properties_file

ROOT = Path(__file__).resolve().parents[2]


def test_quickstart_job(tmp_path, python_env):
    out = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "quickstart.py"), "--store", str(tmp_path / "qs"), "--messages", "400"],
        env=python_env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "sent: 40 messages one by one (send_batch), 360 as a DataFrame (send_dataframe)" in text
    assert "OrderEvents" in text and "PaymentEvents" in text and "AuditLog" in text
    assert "messages with key 'order-200': AuditLog @ commitlog offset" in text  # 200 % 3 topics -> the third
    assert "UNIQ_KEY" in text
    per_queue = [line.split() for line in text.splitlines() if line.startswith(("OrderEvents ", "AuditLog "))]
    assert per_queue and all(n == m for _, _, n, m in per_queue)  # max offset: the next offset (a fresh store)


def test_missing_java_is_a_clear_message(store, tmp_path, python_env):
    """Spark starts only when a job has Spark work: here a dispatch that the settings file sends to Spark
    (``spark.storelib.dispatch_local_max_bytes 0``, read before any session starts), without Java."""
    from storelib import Message

    store.send(Message("TopicTest", body=b"x"))
    conf = tmp_path / "spark-defaults.conf"
    conf.write_text((ROOT / "spark-defaults.conf").read_text() + "spark.storelib.dispatch_local_max_bytes 0\n")
    env = {**python_env, "PATH": str(tmp_path), "JAVA_HOME": "", "STORELIB_SPARK_CONF": str(conf)}
    env.pop("JAVA_HOME")
    out = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "dispatch.py"), "--store", store.root],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "Spark needs Java 17 or newer" in out.stderr
    assert "Traceback" not in out.stderr


def test_check_java_names_a_bad_java_home(tmp_path, monkeypatch):
    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(JavaNotFoundError, match="has no bin/java"):
        check_java()


def test_spark_defaults_file_has_what_the_store_needs():
    conf = read_properties_file(ROOT / "spark-defaults.conf")
    assert conf["spark.sql.parquet.outputTimestampType"] == "TIMESTAMP_MICROS"
    assert conf["spark.driver.maxResultSize"]


def test_sql_queue_depth_equals_python_answer(spark, store):
    from storelib import Message

    store.send_batch([Message("TopicTest", body=b"x", queue_id=i % 3) for i in range(7)])
    store.dispatch()
    store.table("consume_queue").createOrReplaceTempView("consume_queue")
    rows = spark.sql((ROOT / "sql" / "consume_queue_depth.sql").read_text()).collect()
    assert [(r.queue_id, r.messages, r.min_offset, r.max_offset) for r in rows] == [
        (q, n, 0, store.max_queue_offset("TopicTest", q)) for q, n in ((0, 3), (1, 2), (2, 2))
    ]


def test_readme_commands_are_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = subprocess.run(
        ["bash", "-c", "awk '/<!-- test-command -->/{getline; getline; print; exit}' README.md"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert ci.endswith("-m pytest") and ci in readme
    assert "awk '/<!-- test-command -->/" in (ROOT / ".ci" / "run").read_text()


def test_schedule_benchmark_stores_what_a_send_stores(spark, store):
    """The benchmark's bulk set-up stores delayed and half messages exactly as the send paths would."""
    from jobs.benchmarks.schedule import TOPIC, _send_scheduled, schedule_frame
    from storelib import Message
    from storelib.schedule.transaction import send_half

    store.create_topic(TOPIC, queues=8)
    assert _send_scheduled(store, schedule_frame(spark, 3, 1), "delay") == 3
    assert _send_scheduled(store, schedule_frame(spark, 1, 1), "half") == 1
    body = b"scheduled body 2".ljust(100, b".")
    sent = store.send(Message(TOPIC, body=body, tags="Tag2", keys=["order-2"], properties={"seq": "2"}, delay_level=3))
    half = send_half(
        store.context,
        Message(TOPIC, body=body.replace(b"2", b"0", 1), tags="Tag0", keys=["order-0"], properties={"seq": "0"}),
        "PG_BENCH",
    )

    def same(a, b, ids=("UNIQ_KEY", "__transactionId__", "REAL_QID")):
        pa_, pb = dict(a.properties), dict(b.properties)
        assert [k for k in pa_] == [k for k in pb]
        assert {k: v for k, v in pa_.items() if k not in ids} == {k: v for k, v in pb.items() if k not in ids}
        assert (a.size, a.sysflag, a.flag, a.body, a.tags, a.keys, a.born_host) == (
            b.size,
            b.sysflag,
            b.flag,
            b.body,
            b.tags,
            b.keys,
            b.born_host,
        )

    ours = [r for r in store.messages("SCHEDULE_TOPIC_XXXX").collect() if r.msg_id != sent.msg_id]
    assert sorted(r.queue_id for r in ours) == [0, 1, 2]  # levels 1, 2, 3
    same(next(r for r in ours if r.queue_id == 2), store.messages().where(f"msg_id = '{sent.msg_id}'").first())
    halves = {r.msg_id: r for r in store.messages("RMQ_SYS_TRANS_HALF_TOPIC").collect()}
    same(next(r for k, r in halves.items() if k != half.msg_id), halves[half.msg_id])


def test_schedule_benchmark_suite_runs(spark, tmp_path, capsys):
    """``jobs/benchmark.py --suite schedule`` at a tiny size: every message delivered, every half message checked."""
    import json

    from jobs.benchmark import main

    assert main(["--suite", "schedule", "--messages", "200", "--repeats", "1", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    figures = json.loads(out.strip().splitlines()[-1])["schedule"]
    assert figures["messages"] == 200 and figures["deliver"]["ratio"] > 0 and figures["check"]["ratio"] > 0
    assert "200 delivered over 18 levels" in out and "100 committed, 100 rolled back" in out


def test_object_storage_benchmark_suite_runs(spark, tmp_path, capsys):
    """``--suite s3`` at a tiny size: every operation's requests counted on its own moto server, through the proxy;
    a look-up and a group commit make a bounded number of requests, and so does a filtered read (the suite checks
    that it returns the plain scan's rows)."""
    import json

    from jobs.benchmark import main

    assert (
        main(
            [
                "--suite",
                "s3",
                "--messages",
                "400",
                "--lookups",
                "4",
                "--latency-ms",
                "0",
                "--queues",
                "2",
                "--root",
                str(tmp_path),
            ]
        )
        == 0
    )
    figures = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["s3"]
    for op in ("key look-up", "pull of 32", "group commit of 32", "follower round"):
        assert figures[op]["s3_p50_ms"] > 0 and sum(figures[op]["requests_per_op"].values()) > 0, op
    assert sum(figures["key look-up"]["requests_per_op"].values()) < 10
    assert sum(figures["group commit of 32"]["requests_per_op"].get(k, 0) for k in ("PUT", "POST")) >= 2
    s3_read = next(r for r in figures["filtered_reads"] if r["side"] == "s3")
    assert 0 < sum(s3_read["read_requests"].values()) < 3 * 30  # three reads


def test_growth_benchmark_suite_runs(spark, tmp_path, capsys):
    """``--suite growth`` at a tiny size, merging fresh files as it goes: a ratio per stage."""
    import json

    from jobs.benchmark import main

    assert main(["--suite", "growth", "--commits", "40", "--compact-every-s", "0.2", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    figures = json.loads(out.strip().splitlines()[-1])["growth"]
    assert figures["commits"] == 40 and all(figures[f"{s}_ratio"] > 0 for s in ("send", "dispatch", "pull"))
    assert "pull p50: first 20 of 40 commits" in out
    files, tombstones = figures["consume_queue_files_tombstones"]  # merged every 0.2 s: some files went
    assert 0 < files < 40 and tombstones > 0 and f"consume_queue at the end: {files:,} files" in out


def test_online_benchmark_starts_its_clock_once_every_process_is_ready_at_the_niceness_asked(tmp_path):
    """``--suite online`` at a tiny size: every process opens the store before any sends (the clock starts
    then, for all at once), every message sent is pulled, each role's CPU is counted, and with
    ``--consumer-nice`` and ``--follower-nice`` those roles run lower."""
    import os
    from pathlib import Path

    from jobs.benchmarks.online import bench_online

    figures = bench_online(
        1.5, producers=2, threads=2, window=2, consumers=2, root=str(tmp_path), consumer_nice=4, follower_nice=3
    )
    began = float(Path(tmp_path, "go").read_text())
    for role in ("producer0", "producer1", "consumer0", "consumer1"):
        assert Path(tmp_path, f"{role}.json.ready").stat().st_mtime <= began
    assert figures.sent > 0 and len(figures.end_to_end) == figures.sent == len(figures.acks)
    assert 1.5 <= figures.seconds < 60 and set(figures.cpu) == {"producers", "consumers", "follower"}
    assert all(s > 0 for v in figures.cpu.values() for s in v)
    here = os.nice(0)
    assert figures.nice == {"consumers": [min(19, here + 4)] * 2, "follower": [min(19, here + 3)]}
    assert figures.as_dict()["nice_follower"] == min(19, here + 3)


JOBS = ["dispatch.py", "deliver_delayed.py", "check_transactions.py", "quickstart.py", "benchmark.py"]


@pytest.mark.parametrize("job", JOBS)
def test_every_job_explains_every_option_with_its_default(job, python_env):
    out = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / job), "--help"],
        env=python_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    options = [line.split()[0] for line in out.stdout.splitlines() if line.startswith("  --")]
    assert options and "--help" not in options[1:]
    for option in options:
        if option in ("--help", "--create"):
            continue
        block = out.stdout[out.stdout.index(f"  {option}") :]
        block = block[: block.find("\n  --", 3) if "\n  --" in block[3:] else len(block)]
        assert "(default:" in block, (option, block)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--suite", "bogus"], "unknown suite bogus; the suites are send, lookup"),
        (["--suite", "send,filtr"], "unknown suite filtr"),
        (["--messages", "-5"], "must be an integer >= 1, got '-5'"),
        (["--messages", "many"], "must be an integer >= 1, got 'many'"),
    ],
)
def test_benchmark_refuses_bad_arguments_before_starting_spark(args, says, python_env):
    out = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "benchmark.py"), *args],
        env=python_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and says in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert out.stdout == ""


def test_dispatch_job_reports_progress_and_one_summary_line_without_spark_noise(tmp_path, python_env):
    env = {k: v for k, v in python_env.items() if k != "STORELIB_SPARK_LOG_LEVEL"}  # the job's own default
    job = [sys.executable, str(ROOT / "jobs" / "dispatch.py"), "--store", str(tmp_path / "s"), "--create"]
    first = subprocess.run(job, env=env, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.splitlines() == ["nothing new: the store is dispatched up to commitlog offset 0"]
    assert "[storelib dispatch " in first.stderr and "dispatching from commitlog offset 0" in first.stderr
    assert not [line for line in first.stderr.splitlines() if " INFO " in line], first.stderr[-2000:]
    from storelib import Message, MessageStore
    from storelib.session import get_spark

    store = MessageStore.open(str(tmp_path / "s"), get_spark())
    store.create_topic("TopicTest", queues=2)
    store.send_batch([Message("TopicTest", body=b"x") for _ in range(5)])
    second = subprocess.run(job, env=env, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-2000:]
    [summary] = second.stdout.splitlines()
    assert (
        summary.startswith(f"dispatched commitlog [0, {store.max_offset()}) in ") and "5 consume_queue rows" in summary
    )
