"""The store on object storage: every area run against the suite's local S3 server (``moto_server``).

Each test does on an ``s3://`` store what a user does on disk, and where the answer can be compared, the
same calls on a local store give the same rows (chispa): offsets, ids and bodies do not depend on where
the tables live.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest
from chispa import assert_df_equality

from storelib import Message, MessageStore
from storelib.delta import location
from storelib.model.errors import ConfigError, StorageAccessError, StoreNotFoundError

COLUMNS = ["topic", "queue_id", "queue_offset", "physical_offset", "size", "tags", "body", "msg_id"]


def fill(store: MessageStore, spark) -> None:
    """The same messages through every send path: single, group commit, batch and DataFrame."""
    store.subscribe("GroupA", "TopicTest", "TagA || TagB")
    store.send(Message("TopicTest", body=b"one", tags="TagA", keys=["order-1"], properties={"a": "1"}, queue_id=0))
    with store.producer(linger_ms=5) as p:
        futures = [p.send_async(Message("TopicTest", body=b"g%d" % i, tags="TagB", queue_id=1)) for i in range(5)]
        [f.result() for f in futures]
    store.send_batch(
        [Message("TopicTest", body=b"b%d" % i, tags="TagC", keys=[f"k{i}"], queue_id=i % 4) for i in range(20)]
    )
    store.send_dataframe(
        spark.createDataFrame(
            [("TopicTest", b"d%d" % i, "TagA", i % 4) for i in range(30)],
            "topic string, body binary, tags string, queue_id int",
        )
    )


def log_gets(proxy, since: int, suffix: str = "") -> list[tuple[str, str, str]]:
    """The GETs of Delta log files (named ``...suffix``) the proxy passed after its first ``since`` requests."""
    return [
        r
        for r in proxy.requests(last=100_000)[since:]
        if r[1] == "GET" and "/_delta_log/" in r[2] and r[2].endswith(suffix)
    ]


def rows(store: MessageStore, topic: str = "TopicTest"):
    return store.messages(topic).select(*COLUMNS).orderBy("physical_offset")


def test_a_store_on_s3_holds_what_a_local_one_does(spark, s3, tmp_path):
    on_s3 = MessageStore.create(s3.bucket() + "/store", spark, storage_options=s3.options)
    local = MessageStore.create(str(tmp_path / "store"), spark)
    for store in (on_s3, local):
        store.create_topic("TopicTest", queues=4)
        fill(store, spark)
        store.dispatch()
    assert_df_equality(rows(on_s3), rows(local))
    assert on_s3.max_offset() == local.max_offset() and on_s3.dispatch_progress() == local.dispatch_progress()
    for queue in range(4):
        pulled = [
            [(m.msg_id, m.queue_offset, m.body) for m in s.pull("GroupA", "TopicTest", queue, 0).messages]
            for s in (on_s3, local)
        ]
        assert pulled[0] == pulled[1] and pulled[0]
    assert on_s3.query_by_key("TopicTest", "order-1")[0].body == local.query_by_key("TopicTest", "order-1")[0].body
    first = local.query_by_key("TopicTest", "k3")[0]
    assert on_s3.query_by_id(first.msg_id).body == first.body == b"b3"
    assert_df_equality(
        on_s3.read("TopicTest", "TagA").select(*COLUMNS).orderBy("physical_offset"),
        local.read("TopicTest", "TagA").select(*COLUMNS).orderBy("physical_offset"),
    )
    source = (
        spark.read.format("rocketmq").option("store", on_s3.root).load().select(*COLUMNS).orderBy("physical_offset")
    )
    assert_df_equality(source, rows(local))
    assert MessageStore.verify(on_s3.root, spark, full=True) == []
    on_s3.close()
    local.close()


def test_dispatch_by_spark_and_by_the_driver_agree_on_s3(spark, s3):
    store = MessageStore.create(
        s3.bucket() + "/store", spark, storage_options=s3.options, dispatch_local_max_bytes=0
    )  # every round a Spark job
    store.create_topic("TopicTest", queues=4)
    fill(store, spark)
    result = store.dispatch()
    assert result.rows["consume_queue"] == 56 and result.to_offset == store.max_offset()
    assert store.consume_queue("TopicTest", 2).count() == store.messages("TopicTest").where("queue_id = 2").count()
    store.close()


def test_a_long_polling_pull_on_s3_wakes_when_its_message_is_dispatched(s3_store):
    s3_store.subscribe("GroupA", "TopicTest", "TagA")

    def later():
        time.sleep(1.0)
        s3_store.send(Message("TopicTest", body=b"late", tags="TagA", queue_id=0))
        s3_store.dispatch()

    thread = threading.Thread(target=later)
    thread.start()
    r = s3_store.pull("GroupA", "TopicTest", 0, 0, suspend_timeout_ms=60_000)
    thread.join()
    assert [m.body for m in r.messages] == [b"late"] and r.suspended_ms < 30_000


def test_delayed_and_transactional_messages_on_s3(s3_store):
    from storelib.schedule.transaction import TransactionState

    sent = s3_store.send(Message("TopicTest", body=b"later", tags="TagA", delay_level=1, queue_id=3))
    s3_store.dispatch()
    stored = s3_store.query_by_id(sent.msg_id).store_timestamp
    due = int(stored.timestamp() * 1000) + s3_store.config.delay_levels_ms[0]
    assert s3_store.deliver_delayed(now=due - 1).delivered == 0
    assert s3_store.deliver_delayed(now=due).delivered == 1
    r = s3_store.send_in_transaction(
        Message("TopicTest", body=b"order", queue_id=3), lambda m, a: "UNKNOW", producer_group="PG"
    )
    s3_store.end_transaction(r.transaction_id, TransactionState.COMMIT)
    s3_store.dispatch()
    got = s3_store.pull("GroupA", "TopicTest", 3, 0, selector="*").messages
    assert sorted(m.body for m in got) == [b"later", b"order"]


def test_compaction_retention_and_vacuum_on_s3(s3_store, spark):
    for i in range(6):
        s3_store.send_batch([Message("TopicTest", body=b"m%d-%d" % (i, j), tags="TagA") for j in range(10)])
    s3_store.dispatch()
    before = s3_store.messages("TopicTest").select("physical_offset", "body").orderBy("physical_offset").collect()
    compacted = s3_store.compact(full=True)
    assert compacted["commitlog"][0] > 1  # files in, files out
    assert (
        s3_store.messages("TopicTest").select("physical_offset", "body").orderBy("physical_offset").collect() == before
    )
    assert s3_store.vacuum(retention_hours=0)["commitlog"] >= compacted["commitlog"][0]
    assert MessageStore.verify(s3_store.root, spark, full=True) == []
    removed = s3_store.clean_commitlog(reserved_hours=0, now=time.time() * 1000 + 3_600_000)
    assert removed >= 0 and MessageStore.verify(s3_store.root, spark) == []


def test_clustering_orphans_and_reads_after_clustering_on_s3(s3, spark):
    from storelib.delta.orphans import orphan_files, remove_orphans

    store = MessageStore.create(s3.bucket() + "/store", spark, storage_options=s3.options)
    store.create_topic("TopicTest", queues=2)
    for i in range(4):
        store.send_batch([Message("TopicTest", body=b"c%d-%d" % (i, j), tags=f"Tag{j % 4}") for j in range(25)])
    store.dispatch()
    before = store.read("TopicTest", "Tag1").select("physical_offset", "body").orderBy("physical_offset").collect()
    assert store.compact(full=True, settle_ms=0)["commitlog_clustered"][0] > 0
    after = store.read("TopicTest", "Tag1").select("physical_offset", "body").orderBy("physical_offset").collect()
    assert after == before and len(before) == 4 * len(range(1, 25, 4))
    assert store.explain_read("TopicTest", "Tag1").files_read >= 1
    table = store.context.tables.consume_queue
    fs, base = location.filesystem(table.path)
    with fs.open_output_stream(f"{base}/part-dead.parquet") as out:
        out.write(b"not committed")
    assert orphan_files(table, min_age_s=0) == ["part-dead.parquet"]
    assert remove_orphans(table, min_age_s=0) == 1 and orphan_files(table, min_age_s=0) == []
    assert MessageStore.verify(store.root, spark, full=True) == []
    store.close()


def test_a_notebook_and_its_sql_files_run_on_s3_from_the_environment(spark, s3, tmp_path, monkeypatch):
    """The notebook's ``store`` parameter is a URI; credentials only in the driver's environment, where the
    Python workers (started before) never saw them: they are shipped."""
    import runpy
    from pathlib import Path

    from storelib.notebook import ENV_PREFIX

    for key, value in s3.options.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv(ENV_PREFIX + "STORE", s3.bucket() + "/quickstart")
    monkeypatch.setenv(ENV_PREFIX + "OUTPUT", str(tmp_path / "output"))
    monkeypatch.setenv(ENV_PREFIX + "MESSAGES", "300")
    monkeypatch.chdir(tmp_path)
    path = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.py"
    names = runpy.run_path(str(path), init_globals={"spark": spark}, run_name="__main__")
    assert names["nb"].store.startswith("s3://")
    assert (tmp_path / "output" / "messages_per_queue.png").exists()


def test_the_rocketmq_source_streams_and_writes_on_s3(s3_store, spark, tmp_path):
    s3_store.subscribe("GroupS", "TopicTest", "*")
    s3_store.send_batch([Message("TopicTest", body=b"s%d" % i, tags="TagA") for i in range(12)])
    s3_store.dispatch()
    out = str(tmp_path / "out")
    query = (
        spark.readStream.format("rocketmq")
        .option("store", s3_store.root)
        .option("group", "GroupS")
        .option("topic", "TopicTest")
        .load()
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    assert sorted(r.body for r in spark.read.parquet(out).collect()) == sorted(b"s%d" % i for i in range(12))
    (
        spark.createDataFrame([("TopicTest", b"w%d" % i) for i in range(5)], "topic string, body binary")
        .write.format("rocketmq")
        .option("store", s3_store.root)
        .mode("append")
        .save()
    )
    assert s3_store.messages("TopicTest").where("body like 'w%'").count() == 5


def test_options_come_from_spark_settings_and_reach_the_executors(spark, s3):
    root = s3.bucket() + "/store"
    for key, value in s3.options.items():
        spark.conf.set(location.CONF_PREFIX + key, value)
    try:
        store = MessageStore.create(root, spark, storage_options=None)
    finally:
        for key in s3.options:
            spark.conf.unset(location.CONF_PREFIX + key)
    store.create_topic("TopicTest", queues=2)
    store.send_dataframe(spark.createDataFrame([("TopicTest", b"x")], "topic string, body binary"))  # executors write
    assert json.loads(spark.sparkContext.environment[location.ENV_KEY])[root]["AWS_ENDPOINT_URL"] == s3.endpoint
    assert store.messages("TopicTest").count() == 1
    store.close()


def test_bad_roots_are_refused_by_name_before_anything_is_written(spark, s3):
    with pytest.raises(ConfigError, match="ftp"):
        MessageStore.create("ftp://host/store", spark)
    with pytest.raises(StorageAccessError, match="does not exist"):
        MessageStore.create("s3://no-such-bucket-here/store", spark, storage_options=s3.options)
    with pytest.raises(StorageAccessError, match="did not answer"):
        MessageStore.create(
            "s3://bucket/store", spark, storage_options={**s3.options, "AWS_ENDPOINT_URL": "http://127.0.0.1:9"}
        )
    bucket = s3.bucket()
    with pytest.raises(StoreNotFoundError, match="no store at"):
        MessageStore.open(bucket + "/nothing", spark, storage_options=s3.options)
    assert s3.keys(bucket) == []  # nothing was written


def test_a_server_that_ignores_conditional_puts_is_refused_at_create(spark, s3):
    from jobs.benchmarks.s3_proxy_process import ProxyProcess

    bucket = s3.bucket()
    with ProxyProcess("127.0.0.1", s3.port) as proxy:
        options = {**s3.options, "AWS_ENDPOINT_URL": proxy.endpoint}
        proxy.ignore_conditions()  # a server that overwrites a log version instead of refusing the second commit
        with pytest.raises(StorageAccessError, match="not safe for a store: it accepted two commits"):
            MessageStore.create(bucket + "/unsafe", spark, storage_options=options)
        proxy.ignore_conditions(False)  # the same server, honouring If-None-Match: the store is made
        MessageStore.create(bucket + "/safe", spark, storage_options=options).close()
    keys = s3.keys(bucket)
    # refused before any of the store was written (pyarrow leaves an empty marker of the probe's folder)
    assert [k for k in keys if k.startswith("unsafe/")] == ["unsafe/_storelib_probe/"]
    assert [k for k in keys if k.startswith("safe/commitlog/")]


def test_wrong_credentials_are_refused_by_name(spark):
    from jobs.benchmarks.s3_proxy_process import start_moto

    port, process = start_moto({"INITIAL_NO_AUTH_ACTION_COUNT": "0"})  # this server checks credentials
    try:
        options = {
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "wrong",
            "AWS_SECRET_ACCESS_KEY": "wrong",
            "AWS_REGION": "us-east-1",
        }
        with pytest.raises(StorageAccessError, match="credentials were refused"):
            MessageStore.create("s3://secured/store", spark, storage_options=options)
    finally:
        process.kill()


def test_the_command_reaches_s3_from_the_environment(s3, python_env):
    root = s3.bucket() + "/store"
    env = {**python_env, **s3.options}
    MessageStore  # the command makes and uses the store on its own
    run = [sys.executable, "-m", "storelib"]
    created = subprocess.run(
        run + ["topic", "create", "Orders", "--queues", "2", "--store", root, "--create"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert created.returncode == 0, created.stderr
    sent = subprocess.run(
        run + ["send", "Orders", "--tags", "TagA", "--keys", "o-1", "--body", "hi", "--store", root, "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert sent.returncode == 0, sent.stderr
    status = subprocess.run(
        run + ["verify", "--store", root, "--json"], env=env, capture_output=True, text=True, timeout=600
    )
    assert status.returncode == 0, status.stderr


PRODUCER = """
import sys
from storelib import Message, MessageStore

root, name, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
with MessageStore.open(root) as store:               # the AWS_* variables alone reach the bucket; no Spark
    for b in range(batches):
        store.send_batch([Message("TopicTest", body=f"{name}-{b}-{i}".encode(), keys=[f"{name}-{b}-{i}"])
                          for i in range(4)])
"""


@pytest.mark.slow
def test_four_producers_and_a_follower_sharing_only_the_bucket_lose_and_repeat_nothing(spark, s3, python_env):
    """Processes that share nothing but the bucket (no file lock, no local socket: the conditional put of each
    log entry is the arbiter): RocketMQ's offsets stay exact, every message arrives once."""
    store = MessageStore.create(s3.bucket() + "/store", spark, storage_options=s3.options)
    store.create_topic("TopicTest", queues=4)
    env = {**python_env, **s3.options, "JAVA_HOME": "/nonexistent"}  # none of them may need Spark
    follower = subprocess.Popen(
        [sys.executable, "-m", "storelib", "dispatch", "--follow", "--interval-ms", "50", "--store", store.root],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    names, batches = [f"p{i}" for i in range(4)], 8
    producers = [
        subprocess.Popen(
            [sys.executable, "-c", PRODUCER, store.root, name, str(batches)], env=env, stderr=subprocess.PIPE, text=True
        )
        for name in names
    ]
    for p in producers:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
    deadline = time.monotonic() + 120
    while min(store.dispatch_progress().values()) < store.max_offset():
        assert follower.poll() is None and time.monotonic() < deadline, follower.communicate()[1][-2000:]
        time.sleep(0.2)
    follower.terminate()
    follower.communicate(timeout=60)

    rows = (
        store.context.tables.commitlog.read_arrow(
            columns=["physical_offset", "size", "queue_id", "queue_offset", "body"]
        )
        .sort_by("physical_offset")
        .to_pylist()
    )
    assert sorted(r["body"].decode() for r in rows) == sorted(
        f"{n}-{b}-{i}" for n in names for b in range(batches) for i in range(4)
    )
    assert rows[0]["physical_offset"] == 0
    assert all(a["physical_offset"] + a["size"] == b["physical_offset"] for a, b in zip(rows, rows[1:]))
    units = store.context.tables.consume_queue.read_arrow(columns=["queue_id", "queue_offset", "commitlog_offset"])
    assert sorted(units.column("commitlog_offset").to_pylist()) == [r["physical_offset"] for r in rows]
    for q in range(4):
        mine = sorted(r["queue_offset"] for r in rows if r["queue_id"] == q)
        assert mine == list(range(len(mine)))
    assert [m.body for m in store.query_by_key("TopicTest", "p3-7-3")] == [b"p3-7-3"]
    assert MessageStore.verify(store.root, spark, full=True) == []
    store.close()


def test_a_connection_cut_mid_commit_leaves_nothing_half_written_and_a_rerun_is_safe(spark, s3):
    """Through a proxy that cuts connections: a commit whose answer is lost is known to have landed (not sent
    again, its files kept); a commit that never reaches the server fails, commits nothing, and the rerun
    takes the same offsets; the store stays sound throughout."""
    from jobs.benchmarks.s3_proxy_process import ProxyProcess
    from storelib.model.errors import StoreError

    with ProxyProcess("127.0.0.1", s3.port) as proxy:
        options = {**s3.options, "AWS_ENDPOINT_URL": proxy.endpoint, "max_retries": "2", "retry_timeout": "5s"}
        store = MessageStore.create(s3.bucket() + "/store", spark, storage_options=options)
        store.create_topic("TopicTest", queues=2)
        log_entries = "/commitlog/_delta_log/0"
        proxy.cut_responses_next(1, kind="PUT", path_contains=log_entries)
        landed = store.send(Message("TopicTest", body=b"a", keys=["a"]))
        proxy.cut_next(100, kind="PUT", path_contains=log_entries)
        with pytest.raises(StoreError):
            store.send_batch([Message("TopicTest", body=b"lost", keys=["lost"])])
        proxy.cancel_cuts()
        proxy.cut_next(100, kind="PUT", path_contains="/commitlog/part-")  # the data file's upload fails
        with pytest.raises(StoreError, match="part-"):  # its own error, typed (not the closed stream's)
            store.send_batch([Message("TopicTest", body=b"unwritten", keys=["unwritten"])])
        proxy.cancel_cuts()
        rerun = store.send_batch([Message("TopicTest", body=b"b", keys=["b"])])[0]
        store.dispatch()
        messages = store.context.tables.commitlog.read_arrow(columns=["physical_offset", "size", "body"])
        assert sorted(messages.column("body").to_pylist()) == [b"a", b"b"]
        assert rerun.commitlog_offset == landed.commitlog_offset + messages.column("size").to_pylist()[0]
        assert store.query_by_key("TopicTest", "lost") == [] and store.query_by_key("TopicTest", "b")[0].body == b"b"
        assert MessageStore.verify(store.root, spark, full=True) == []
        store.close()


def test_a_warm_view_on_s3_gives_a_marker_first_asked_for_between_two_looks(s3_store):
    """On an object store a view looks at the log at most every 0.2 s; a marker it does not hold yet is still
    fetched at once (read as 0, a plan would take every message as undispatched)."""
    table = s3_store.context.tables.commitlog
    s3_store.send(Message("TopicTest", body=b"x"))
    table.view()  # looked just now, without markers
    assert table.view(markers=["commitlog"]).marker("commitlog") == s3_store.max_offset() > 0


def test_checkpoints_on_s3_are_written_beside_the_commits_and_a_failed_one_fails_no_commit(s3):
    """On an object store a commit that makes a checkpoint due leaves it to a thread of its own: a checkpoint
    whose upload is cut fails no commit; the next interval's is written, and the log entries before it, past
    the log's retention, are deleted after it."""
    from jobs.benchmarks.s3_proxy_process import ProxyProcess
    from storelib.delta.checkpoints import CHECKPOINTS
    from storelib.delta.table import Table
    from storelib.storage.schema import TOPIC_CONFIG

    with ProxyProcess("127.0.0.1", s3.port) as proxy:
        root = location.attach(
            s3.bucket() + "/t",
            {**s3.options, "AWS_ENDPOINT_URL": proxy.endpoint, "max_retries": "1", "retry_timeout": "2s"},
        )
        t = Table(
            root, TOPIC_CONFIG, {"delta.checkpointInterval": "2", "delta.logRetentionDuration": "interval 0 seconds"}
        ).ensure()

        def commit(marks):
            for m in marks:
                with t.commit_turn() as dt:
                    t.commit(dt, [], markers={"m": m})

        assert CHECKPOINTS.wait(60)
        failed, written = CHECKPOINTS.failed, CHECKPOINTS.written
        proxy.cut_next(100, kind="PUT", path_contains=".checkpoint.parquet")
        commit([1, 2])  # version 2 makes a checkpoint due; its upload is cut
        assert CHECKPOINTS.wait(60) and (CHECKPOINTS.failed, CHECKPOINTS.written) == (failed + 1, written)
        assert Table.marker(t.snapshot(), "m") == 2 and not [
            n for n in s3.keys(root + "/_delta_log") if "checkpoint" in n
        ]
        proxy.cancel_cuts()
        commit([3, 4])  # version 4's is written
        assert CHECKPOINTS.wait(60) and CHECKPOINTS.written == written + 1
        names = s3.keys(root + "/_delta_log")
        assert "00000000000000000004.checkpoint.parquet" in names and "_last_checkpoint" in names
        assert [n for n in names if n.endswith(".json")] == ["00000000000000000004.json"]  # the rest expired
        snapshot = t.snapshot()
        assert (snapshot.version(), Table.marker(snapshot, "m")) == (4, 4)


def test_a_producer_on_s3_reads_the_log_before_its_first_send_not_in_it(spark, s3):
    """A producer made on an object store loads what a commit reads (the commitlog's snapshot, its queues'
    markers) as it starts: its first send reads no more of the log than its second."""
    from jobs.benchmarks.s3_proxy_process import ProxyProcess

    with ProxyProcess("127.0.0.1", s3.port) as proxy:
        options = {**s3.options, "AWS_ENDPOINT_URL": proxy.endpoint}
        made = MessageStore.create(s3.bucket() + "/store", spark, storage_options=options)
        made.create_topic("TopicTest", queues=4)
        for q in range(4):
            made.send(Message("TopicTest", body=b"x", queue_id=q))
        made.close()
        store = MessageStore.open(made.root, spark, storage_options=options)  # as a producer's process opens it
        with store.producer() as p:
            reads = []
            for q in (1, 2):
                before = len(proxy.requests(last=100_000))
                p.send(Message("TopicTest", body=b"y", queue_id=q))
                reads.append(log_gets(proxy, before))
        store.close()
    assert len(reads[0]) <= len(reads[1]), [len(r) for r in reads]


def test_a_producer_on_s3_commits_on_the_snapshot_its_last_commit_kept_and_passes_merges(spark, s3, monkeypatch):
    """On an object store a send's commit keeps delta-rs's snapshot of it, so the next send reads nothing of the
    log before its data file goes up. A merge of the commitlog made meanwhile by another process (it sets no
    marker) is passed, not conflicted with; another process's append refuses the next send's first try, which
    then looks and lands after it. Offsets stay contiguous throughout."""
    from jobs.benchmarks.s3_proxy_process import ProxyProcess
    from storelib.delta.compaction import compact_here
    from storelib.delta.table import Table
    from storelib.storage.schema import COMMITLOG

    monkeypatch.setattr("storelib.delta.turn.KEPT_S", 600.0)  # however slow the merge below

    def looks_of_send(producer, body: bytes):
        """The send's result, and the LISTs of the commitlog's log (a look's) made before its data file's PUT
        (the watcher's looks at the log, in the background, are single reads of entries: no LIST)."""
        before = len(proxy.requests(last=100_000))
        result = producer.send(Message("TopicTest", body=body))
        made = [r for r in proxy.requests(last=100_000)[before:] if "/commitlog" in r[2]]
        put = next(i for i, r in enumerate(made) if r[1] == "PUT" and "/_delta_log/" not in r[2])
        return result, [r for r in made[:put] if r[1] == "LIST"]

    with ProxyProcess("127.0.0.1", s3.port) as proxy:
        options = {**s3.options, "AWS_ENDPOINT_URL": proxy.endpoint}
        store = MessageStore.create(s3.bucket() + "/store", spark, storage_options=options)
        store.create_topic("TopicTest", queues=1)
        other = MessageStore.open(store.root, spark, storage_options=options)  # another process's handle
        with store.producer() as p:
            sent = [p.send(Message("TopicTest", body=b"0"))]
            result, looks = looks_of_send(p, b"1")
            sent.append(result)
            assert looks == []  # its data file went up before any look at the log
            log = Table(other.context.tables.commitlog.path, COMMITLOG)
            assert compact_here(log, small_bytes=1 << 30)[0] >= 2  # another process merges the small files
            merged = log.snapshot().version()
            result, looks = looks_of_send(p, b"2")
            sent.append(result)
            assert looks == []  # on the snapshot from before the merge
            assert store.context.tables.commitlog.snapshot().version() == merged + 1  # and passed it
            other.send(Message("TopicTest", body=b"3"))  # another process appends
            sent.append(p.send(Message("TopicTest", body=b"4")))
        other.close()
        assert [r.queue_offset for r in sent] == [0, 1, 2, 4]
        assert MessageStore.verify(store.root, spark, full=True) == []
        bodies = [r.body for r in store.messages("TopicTest").select("body").collect()]
        assert sorted(bodies) == [b"0", b"1", b"2", b"3", b"4"]
        store.close()


def test_a_checkpoint_made_due_as_the_process_exits_is_written_before_it_ends(s3, python_env):
    """A commit made while the interpreter exits (an ``atexit`` handler, after Python has joined its threads)
    makes a checkpoint due: it is written before the process ends, and the process ends cleanly (a checkpoint
    thread left inside delta-rs as the interpreter tears down ended it with SIGSEGV)."""
    root = s3.bucket() + "/t"
    script = f"""
import atexit
from storelib.delta import location
from storelib.delta.table import Table
from storelib.storage.schema import TOPIC_CONFIG
root = location.attach({root!r})
t = Table(root, TOPIC_CONFIG, {{"delta.checkpointInterval": "1"}}).ensure()
def commit_at_exit():
    with t.commit_turn() as dt:
        t.commit(dt, [], markers={{"m": 1}})
atexit.register(commit_at_exit)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], env={**python_env, **s3.options}, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "00000000000000000001.checkpoint.parquet" in s3.keys(root + "/_delta_log")


def test_a_view_reads_the_markers_it_asks_for_in_one_read_of_the_log(s3):
    """delta-rs reads the log again for each ``txn`` marker asked (on an object store, each entry's GET every
    time); a view asking for several reads the log once: the newest checkpoint's markers, then the entries after
    it. Whatever the layout of the log, the markers are delta-rs's own."""
    from jobs.benchmarks.s3_proxy_process import ProxyProcess
    from storelib.delta.checkpoints import CHECKPOINTS
    from storelib.delta.log import txn_versions
    from storelib.delta.table import Table
    from storelib.storage.schema import TOPIC_CONFIG

    with ProxyProcess("127.0.0.1", s3.port) as proxy:
        root = location.attach(s3.bucket() + "/t", {**s3.options, "AWS_ENDPOINT_URL": proxy.endpoint})
        names = [f"m{i}" for i in range(8)]
        t = Table(root, TOPIC_CONFIG, {"delta.checkpointInterval": "6"}).ensure()
        for i in range(10):  # versions 1-10: each sets one marker, two of them twice; a checkpoint at 6
            with t.commit_turn() as dt:
                t.commit(dt, [], markers={names[i % 8]: 100 + i})
        assert CHECKPOINTS.wait(60)
        snapshot = t.snapshot()
        expected = {n: snapshot.transaction_version(n) for n in names}
        assert (
            txn_versions(root, snapshot.version())
            == expected
            == {n: 100 + i + (8 if i < 2 else 0) for i, n in enumerate(names)}
        )
        assert txn_versions(root, 4) == {n: 100 + i for i, n in enumerate(names[:4])}  # before the checkpoint

        fresh = Table(root, TOPIC_CONFIG)  # nothing warm, as in a process that just opened the store
        before = len(proxy.requests(last=100_000))
        view = fresh.view(markers=names, watch=False)
        entries = log_gets(proxy, before, ".json")
        assert {n: view.marker(n) for n in names} == expected
        assert len(entries) <= 3 * (snapshot.version() - 6), len(entries)  # delta-rs's load, then one read: not 8

        one = Table(root, TOPIC_CONFIG)  # asked one marker at a time (a queue's, at its first pull)
        assert one.view(markers=names[:1], watch=False).marker(names[0]) == expected[names[0]]
        before = len(proxy.requests(last=100_000))
        assert [one.view(markers=[n], watch=False).marker(n) for n in names[1:]] == [expected[n] for n in names[1:]]
        assert log_gets(proxy, before) == []  # the first read kept every marker of the version
