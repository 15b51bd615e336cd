"""The ``rocketmq`` data source: pushed filters give the rows Spark's own evaluation gives, read the way the
store's look-ups read; group streams deliver what the group's subscription takes, once; every table is
readable by Delta Spark."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from storelib import Message, MessageSelector, MessageStore, StoreConfig
from storelib.datasource.batch import plan
from storelib.datasource.options import SourceOptions
from storelib.datasource.pushdown import Pushdown
from storelib.sql import register_views
from tests.datasource.streams import stream_once

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = ["physical_offset", "topic", "queue_id", "queue_offset", "msg_id", "tags", "keys", "uniq_key", "body"]


def source(spark, store, table="messages"):
    return spark.read.format("rocketmq").option("store", store.root).option("table", table).load()


class TestBatch:
    @pytest.mark.parametrize(
        "where",
        [
            "topic = 'Orders' AND keys = 'k3 g3'",  # index, first key
            "topic = 'Orders' AND keys = 'k55'",  # not dispatched yet: the tail scan finds it
            "topic = 'Orders' AND queue_id = 1 AND queue_offset >= 3 AND queue_offset < 9",
            "topic = 'Orders' AND queue_id IN (0, 2)",
            "topic = 'Orders' AND tags IN ('T1', 'T9')",
            "physical_offset BETWEEN 500 AND 4000",
            "topic = 'Orders' AND keys = 'nowhere'",
            "msg_id = 'not-an-id'",
            "tags IS NULL OR tags <> 'T0'",  # not pushed: Spark evaluates it
            "NOT (queue_id = 1) AND body = X'35'",
        ],
    )
    def test_same_rows_as_spark_evaluating_the_filter(self, spark, orders, where):
        store, _ = orders
        got = source(spark, store).where(where).select(*COLUMNS)
        want = store.messages().where(where).select(*COLUMNS)
        assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True, ignore_metadata=True)

    def test_store_time_ranges(self, spark, orders):
        store, sent = orders
        times = sorted(
            r.store_timestamp for r in store.messages("Orders").select("store_timestamp").distinct().collect()
        )
        assert len(times) == 2  # the dispatched batch and the late one
        for where in (
            F.col("store_timestamp") >= times[1],
            F.col("store_timestamp") < times[1],
            F.col("store_timestamp").between(times[0], times[0]),
        ):
            got = source(spark, store).where(where).select(*COLUMNS)
            want = store.messages().where(where).select(*COLUMNS)
            assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True, ignore_metadata=True)
        keyed = source(spark, store).where(
            (F.col("topic") == "Orders") & (F.col("keys") == "k55") & (F.col("store_timestamp") < times[1])
        )
        assert keyed.count() == 0

    def test_ids_and_unique_keys(self, spark, orders):
        store, sent = orders
        ids = [sent[7].msg_id, sent[55].msg_id]
        got = source(spark, store).where(F.col("msg_id").isin(ids)).select("msg_id").collect()
        assert sorted(r.msg_id for r in got) == sorted(ids)
        one = source(spark, store).where((F.col("topic") == "Orders") & (F.col("uniq_key") == sent[3].uniq_key))
        assert [r.msg_id for r in one.collect()] == [sent[3].msg_id]

    def test_messages_by_key_is_query_by_key(self, spark, orders):
        store, _ = orders
        by_key = source(spark, store, "messages_by_key").where("topic = 'Orders' AND key = 'g2'")
        assert sorted(r.msg_id for r in by_key.collect()) == sorted(
            m.msg_id for m in store.query_by_key("Orders", "g2")
        )
        assert {r.kind for r in by_key.collect()} == {"KEYS"}

    def test_ways_each_filter_takes(self, orders):
        from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual

        store, sent = orders
        options = SourceOptions.parse({"store": store.root})
        ways = lambda *fs: sorted({p.way for p in plan(options, Pushdown.of(list(fs), options.arrow_schema()))})  # noqa: E731
        assert ways(EqualTo(("msg_id",), sent[0].msg_id)) == ["msg_id"]
        assert ways(EqualTo(("topic",), "Orders"), EqualTo(("keys",), "k1 g1")) == ["index", "undispatched"]
        assert ways(EqualTo(("topic",), "Orders"), EqualTo(("queue_id",), 1)) == ["consume_queue", "undispatched"]
        assert ways(GreaterThanOrEqual(("physical_offset",), 0)) == ["scan"]

    def test_key_query_reads_the_same_files_on_a_bigger_store(self, spark, orders):
        from pyspark.sql.datasource import EqualTo

        store, _ = orders
        options = SourceOptions.parse({"store": store.root})
        key = [EqualTo(("topic",), "Orders"), EqualTo(("keys",), "k7 g2")]
        files = lambda: sum(len(p.paths) for p in plan(options, Pushdown.of(key, options.arrow_schema())))  # noqa: E731
        store.dispatch()
        before = files()
        for round_ in range(5):  # five times the data, in more files
            store.send_batch([Message("Orders", keys=[f"x{round_}-{i}"], body=b"." * 100) for i in range(60)])
            store.dispatch()
        assert store.messages("Orders").count() == 360
        assert files() == before <= 2  # the index file of the key's hash range, the commitlog file holding it

    def test_reused_views_plan_every_query_afresh(self, spark, orders):
        store, _ = orders
        register_views(spark, store)
        total = spark.sql("SELECT count(*) AS n FROM messages").first().n
        assert spark.sql("SELECT count(*) AS n FROM messages WHERE topic = 'Orders' AND keys = 'k1 g1'").first().n == 1
        assert spark.sql("SELECT count(*) AS n FROM messages").first().n == total == 60
        assert (
            spark.sql("SELECT count(*) AS n FROM messages_by_key WHERE topic = 'Orders' AND key = 'g4'").first().n == 10
        )


class TestStream:
    def run(self, spark, store, group, out, ck, **options):
        return stream_once(spark, store, out, ck, group=group, topic="Orders", **options)

    def test_tag_group_in_batches_then_restart(self, spark, orders, tmp_path):
        store, sent = orders
        store.subscribe("GT", "Orders", "T1 || T9")
        store.dispatch()
        out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
        q = self.run(spark, store, "GT", out, ck, maxMessagesPerTrigger=8)
        assert len([p for p in q.recentProgress if p["numInputRows"]]) > 1
        assert all(p["numInputRows"] <= 8 for p in q.recentProgress)
        more = store.send_batch([Message("Orders", tags=t, body=b"new") for t in ("T1", "T2", "T9")])
        store.dispatch()
        self.run(spark, store, "GT", out, ck)
        got = spark.read.parquet(out).select("msg_id")
        want = store.messages("Orders").where(F.col("tags").isin("T1", "T9")).select("msg_id")
        assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True, ignore_metadata=True)
        assert got.count() == 17 + 10 + 2 and {m.msg_id for m in more} - {r.msg_id for r in got.collect()} == {
            more[1].msg_id
        }

    def test_sql92_group_and_committed_offsets(self, spark, orders, tmp_path):
        store, _ = orders
        store.subscribe("GS", "Orders", MessageSelector.by_sql("a > 40"))
        store.dispatch()
        out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
        self.run(spark, store, "GS", out, ck, maxMessagesPerTrigger=20)
        assert sorted(int(r.body) for r in spark.read.parquet(out).collect()) == list(range(41, 50))
        lag = store.consumer_lag("GS").where("topic = 'Orders'").collect()
        assert [r.committed_offset for r in lag] == [r.max_offset for r in lag]  # the query's end committed it all
        assert sum(r.lag for r in lag) == 0
        more = store.send_batch([Message("Orders", body=b"x", properties={"a": "41"}) for _ in range(3)])
        store.dispatch()
        self.run(spark, store, "GS", str(tmp_path / "out2"), str(tmp_path / "ck2"))  # new checkpoint: from the group
        assert sorted(r.msg_id for r in spark.read.parquet(str(tmp_path / "out2")).collect()) == sorted(
            m.msg_id for m in more
        )

    def test_exactly_once_into_a_delta_sink_across_restarts(self, spark, orders, tmp_path):
        store, _ = orders
        store.subscribe("GD", "Orders", "*")
        out, ck = str(tmp_path / "delta_out"), str(tmp_path / "ck")

        def run():
            (
                spark.readStream.format("rocketmq")
                .option("store", store.root)
                .option("group", "GD")
                .option("topic", "Orders")
                .option("maxMessagesPerTrigger", 16)
                .load()
                .writeStream.format("delta")
                .option("checkpointLocation", ck)
                .trigger(availableNow=True)
                .start(out)
                .awaitTermination()
            )

        store.dispatch()
        run()
        store.send_batch([Message("Orders", body=b"more") for _ in range(5)])
        store.dispatch()
        run()
        got = spark.read.format("delta").load(out)
        assert got.count() == got.select("msg_id").distinct().count() == 65

    def test_a_group_must_subscribe(self, spark, orders):
        from storelib.datasource.stream import GroupStreamReader
        from storelib.model.errors import SubscriptionNotFoundError

        store, _ = orders
        with pytest.raises(SubscriptionNotFoundError):
            GroupStreamReader(
                SourceOptions.parse({"store": store.root, "group": "Nobody", "topic": "Orders"}, streaming=True), None
            )


def comparable(df):
    """Maps as JSON text (Spark cannot sort or hash maps); everything else as it is."""
    from pyspark.sql.types import MapType

    return df.select(
        *[
            F.to_json(c.name).alias(c.name) if isinstance(c.dataType, MapType) else F.col(c.name)
            for c in df.schema.fields
        ]
    )


class TestDeltaSpark:
    def test_every_table_reads_the_same_through_delta_spark(self, spark, orders):
        store, _ = orders
        store.subscribe("GS", "Orders", MessageSelector.by_sql("a > 40"))
        store.commit_offset("GS", "Orders", 0, 3)
        store.dispatch()
        store.compact(full=True, settle_ms=0)
        store.delete_expired_files(reserved_hours=10_000)
        for name, table in store.context.tables.by_name().items():
            ours = comparable(store.table(name))
            delta = comparable(spark.read.format("delta").load(table.path)).select(*ours.columns)
            assert_df_equality(delta, ours, ignore_row_order=True, ignore_nullable=True, ignore_metadata=True), name

    def test_time_travel_and_protocol(self, spark, orders):
        from deltalake import DeltaTable

        store, _ = orders
        path = store.context.tables.commitlog.path
        assert spark.read.format("delta").option("versionAsOf", 0).load(path).count() == 0
        dt = DeltaTable(path)
        assert dt.protocol().writer_features in (None, []) or "domainMetadata" not in dt.protocol().writer_features
        assert dt.metadata().configuration["delta.checkpointInterval"] == "20"
        assert spark.sql(f"SELECT count(*) AS n FROM delta.`{path}` VERSION AS OF 0").first().n == 0

    @pytest.mark.parametrize("minutes", [0, 60])
    def test_time_travel_reaches_back_as_far_as_the_setting_says(self, spark, tmp_path, minutes):
        """Log entries half an hour old (their files' times set back) are cleaned up past the next checkpoint
        unless ``time_travel_minutes`` keeps them: ``VERSION AS OF`` an early version works only then."""
        import os
        import time

        root = str(tmp_path / "s")
        store = MessageStore.create(root, spark, StoreConfig(time_travel_minutes=minutes))
        store.create_topic("T", queues=1)
        for i in range(25):
            store.send(Message("T", body=b"%d" % i))
        store.close()
        log_dir = Path(root) / "commitlog" / "_delta_log"
        old = time.time() - 1800
        for entry in log_dir.iterdir():
            os.utime(entry, (old, old))
        store = MessageStore.open(root, spark, StoreConfig(time_travel_minutes=minutes))
        for i in range(25):
            store.send(Message("T", body=b"%d" % i))
        path = store.context.tables.commitlog.path
        store.close()
        kept = (log_dir / f"{5:020d}.json").exists()
        assert kept == bool(minutes)
        if kept:
            assert spark.sql(f"SELECT count(*) AS n FROM delta.`{path}` VERSION AS OF 5").first().n == 5

    def test_a_store_takes_a_longer_time_travel_window_when_opened_with_one(self, spark, tmp_path):
        from deltalake import DeltaTable

        root = str(tmp_path / "s")
        MessageStore.create(root, spark).close()
        MessageStore.open(root, spark, StoreConfig(time_travel_minutes=30)).close()
        setting = DeltaTable(root + "/commitlog").metadata().configuration["delta.logRetentionDuration"]
        assert setting == "interval 30 minutes"

    def test_views_over_delta_spark(self, spark, orders):
        store, _ = orders
        register_views(spark, store, delta=True)
        assert spark.sql("SELECT count(*) AS n FROM commitlog").first().n == store.messages().count() == 60
        assert spark.sql("SELECT count(*) AS n FROM consume_queue WHERE topic = 'Orders'").first().n == 50


SCRIPT = textwrap.dedent("""
    import sys
    from storelib import MessageStore, Message
    from storelib.session import get_spark
    spark = get_spark("cluster", conf={"spark.master": "local-cluster[2,1,1024]", "spark.executor.memory": "768m"})
    store = MessageStore.create(sys.argv[1], spark)
    store.create_topic("Orders", queues=4)
    sent = store.send_batch([Message("Orders", tags=f"T{i % 2}", keys=[f"k{i}"], body=b"x") for i in range(40)])
    store.subscribe("G", "Orders", "T1")
    store.dispatch()
    df = spark.read.format("rocketmq").option("store", store.root).load()
    assert df.where("topic = 'Orders' AND keys = 'k7'").count() == 1
    assert df.where("topic = 'Orders'").count() == 40
    q = (spark.readStream.format("rocketmq").option("store", store.root).option("group", "G").option("topic", "Orders")
         .load().writeStream.format("parquet").option("path", sys.argv[1] + "-out")
         .option("checkpointLocation", sys.argv[1] + "-ck").trigger(availableNow=True).start())
    q.awaitTermination()
    assert spark.read.parquet(sys.argv[1] + "-out").count() == 20
    rows = spark.range(30, numPartitions=3).selectExpr("'Orders' AS topic", "CAST(id AS STRING) AS body")
    rows.write.format("rocketmq").option("store", store.root).mode("append").save()
    import json, os
    os.makedirs(sys.argv[1] + "-in")
    with open(sys.argv[1] + "-in/a.json", "w") as f:
        f.write("\\n".join(json.dumps({"topic": "Orders", "body": str(i)}) for i in range(10)))
    w = (spark.readStream.schema("topic string, body string").json(sys.argv[1] + "-in").writeStream.format("rocketmq")
         .option("store", store.root).option("checkpointLocation", sys.argv[1] + "-wck")
         .trigger(availableNow=True).start())
    w.awaitTermination()
    assert store.messages("Orders").count() == 80
    from storelib.maintenance.cluster import cluster_commitlog
    from storelib.query.read import plan_read
    store.send_batch([Message("Orders", tags="Rare" if i % 1000 == 0 else f"T{i % 2}", body=b"y")
                      for i in range(40000)])
    store.dispatch()
    cluster_commitlog(store.context, settle_ms=0)
    assert plan_read(store.context, "Orders", "Rare").explain().reader == "row groups"  # tasks on both executors
    assert sorted(r.body for r in store.read("Orders", "Rare").collect()) == [b"y"] * 40
    print("OK")
""")


@pytest.mark.slow
def test_reads_streams_and_writes_on_separate_executors(tmp_path, python_env):
    script = tmp_path / "cluster.py"
    script.write_text(SCRIPT)
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        env=python_env,
        timeout=600,
        cwd=ROOT,
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stderr[-3000:]
    shutil.rmtree(tmp_path / "store", ignore_errors=True)
