"""Dispatch: consume queue and index rows, incremental, idempotent under failures, distributed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from storelib import Message, MessageSelector
from storelib.dispatch.reput import Dispatcher
from storelib.encoding.ext_addr import decorate_ext_addr
from storelib.encoding.index_key import index_key_hash
from storelib.encoding.tags import tags_code

ROOT = Path(__file__).resolve().parents[2]
STEPS = [
    "consume_queue.written",
    "consume_queue.committed",
    "consume_queue_ext.written",
    "consume_queue_ext.summarized",
    "consume_queue_ext.committed",
    "index.written",
    "index.committed",
]


def send_some(store, n, start=0, tags=("TagA", "TagB", "Aa", "BB")):
    return store.send_batch(
        [
            Message("TopicTest", body=f"m{i}".encode(), tags=tags[i % len(tags)], keys=[f"order-{i}", f"user-{i % 3}"])
            for i in range(start, start + n)
        ]
    )


def sql92_topics(store):
    """The topics some group subscribes to by SQL92: their messages get ext units (with the ext queue on)."""
    return (
        {s.topic for s in store.context.registry.all() if s.is_sql92}
        if store.config.enable_consume_queue_ext
        else set()
    )


def expected_consume_queue(spark, store):
    """The tag code is the decorated address of the message's ext unit where it has one, else the real one."""
    with_ext = sql92_topics(store)
    rows = (
        store.messages()
        .select(
            "topic",
            "queue_id",
            "queue_offset",
            F.col("physical_offset").alias("commitlog_offset"),
            "size",
            "tags",
            "store_timestamp",
        )
        .collect()
    )
    data = [
        (
            r.topic,
            r.queue_id,
            r.queue_offset,
            r.commitlog_offset,
            r.size,
            decorate_ext_addr(r.queue_offset) if r.topic in with_ext else tags_code(r.tags),
            r.store_timestamp,
        )
        for r in rows
    ]
    return spark.createDataFrame(data, store.table("consume_queue").schema)


def expected_ext(spark, store):
    """One ext unit per message of a topic subscribed by SQL92: real tag code, store time (bitmaps apart)."""
    with_ext = sql92_topics(store)
    rows = [r for r in store.messages().collect() if r.topic in with_ext]
    data = [
        (
            r.topic,
            r.queue_id,
            r.queue_offset,
            r.queue_offset,
            r.physical_offset,
            r.size,
            tags_code(r.tags),
            r.store_timestamp,
            None,
            None,
        )
        for r in rows
    ]
    return spark.createDataFrame(data, store.table("consume_queue_ext").schema)


def expected_index(store):
    """(key hash, commitlog offset, store time) for the UNIQ_KEY and each key of every message."""
    out = []
    for r in store.messages().collect():
        keys = [r.uniq_key] + [k for k in (r["keys"] or "").split(" ") if k]
        out += [(index_key_hash(f"{r.topic}#{k}"), r.physical_offset, r.store_timestamp) for k in keys]
    return sorted(out)


def index_rows(store):
    return [(r.key_hash, r.commitlog_offset, r.store_timestamp, r.hash_range) for r in store.table("index").collect()]


def assert_dispatched_exactly(spark, store):
    assert_df_equality(
        store.table("consume_queue"),
        expected_consume_queue(spark, store),
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_metadata=True,
    )
    ext = store.table("consume_queue_ext")
    assert (
        ext.where("filter_bitmap IS NULL OR filter_version IS NULL").count() == 0
    )  # each unit is there for its bitmap
    assert_df_equality(
        ext.withColumn("filter_bitmap", F.lit(None).cast("binary")).withColumn(
            "filter_version", F.lit(None).cast("long")
        ),
        expected_ext(spark, store),
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_metadata=True,
    )
    rows = index_rows(store)
    assert sorted((h, off, ts) for h, off, ts, _ in rows) == expected_index(store)  # each once: no dup, no gap
    assert all(hash_range == key_hash >> 25 for key_hash, _, _, hash_range in rows)
    progress = store.dispatch_progress()
    assert (
        progress["consume_queue"]
        == progress["consume_queue_ext"]
        == progress["index"]
        == progress["commitlog"]
        == store.max_offset()
    )


class TestDispatch:
    def test_builds_consume_queue_and_index(self, spark, store):
        send_some(store, 12)
        result = store.dispatch()
        assert (result.from_offset, result.to_offset) == (0, store.max_offset())
        assert result.consume_queue_rows == 12 and result.index_rows == 36
        assert_dispatched_exactly(spark, store)

    def test_colliding_tags_keep_their_hash_codes(self, spark, store):
        send_some(store, 4, tags=("Aa", "BB"))
        store.dispatch()
        codes = {r.tags_code for r in store.table("consume_queue").collect()}  # no SQL92 group: no ext units
        assert codes == {tags_code("Aa")} == {2112}

    def test_ext_queue_off_keeps_real_tag_codes(self, spark, store_path):
        from storelib import MessageStore

        plain = MessageStore.create(store_path, spark, enable_consume_queue_ext=False)
        plain.create_topic("TopicTest", queues=4)
        send_some(plain, 4, tags=("Aa", "BB"))
        plain.dispatch()
        assert {r.tags_code for r in plain.table("consume_queue").collect()} == {2112}
        assert plain.table("consume_queue_ext").count() == 0
        assert plain.dispatch_progress()["consume_queue_ext"] == plain.max_offset()  # the marker moves all the same

    def test_offsets_are_delta_encoded_and_read_back_by_spark_as_written(self, spark, store):
        import pyarrow.parquet as pq

        store.subscribe("GroupS", "TopicTest", MessageSelector.by_sql("TAGS IS NOT NULL"))  # ext units too
        send_some(store, 40)
        store.dispatch()
        for name in ("consume_queue", "consume_queue_ext"):
            table = getattr(store.context.tables, name)
            paths = table.files(table.snapshot())
            assert paths and table.spec.delta_encoded
            for path in paths:
                meta = pq.ParquetFile(path).metadata
                encodings = {
                    meta.row_group(0).column(j).path_in_schema: meta.row_group(0).column(j).encodings
                    for j in range(meta.num_columns)
                }
                assert all("DELTA_BINARY_PACKED" in encodings[c] for c in table.spec.delta_encoded), encodings
                assert "DELTA_BINARY_PACKED" not in encodings["size"]  # only the columns named
            assert_df_equality(
                store.table(name),
                spark.createDataFrame(table.read_arrow().to_pandas(), store.table(name).schema),
                ignore_row_order=True,
                ignore_nullable=True,
                ignore_metadata=True,
            )
        assert_dispatched_exactly(spark, store)

    def test_max_queue_offset_follows_dispatch(self, store):
        send_some(store, 6)
        assert store.max_queue_offset("TopicTest", 0) == 0  # sent, not yet dispatched
        store.dispatch()
        counts = {q: store.consume_queue("TopicTest", q).count() for q in range(4)}
        assert {q: store.max_queue_offset("TopicTest", q) for q in range(4)} == counts
        assert store.max_queue_offset("NoSuchTopic", 0) == 0

    def test_incremental(self, spark, store):
        send_some(store, 5)
        first = store.dispatch()
        send_some(store, 7, start=5)
        second = store.dispatch()
        assert second.from_offset == first.to_offset and second.consume_queue_rows == 7
        again = store.dispatch()
        assert again.rows == {"consume_queue": 0, "consume_queue_ext": 0, "index": 0}
        assert_dispatched_exactly(spark, store)

    def test_reads_only_new_commitlog_files(self, spark, store):
        send_some(store, 5)
        store.dispatch()
        send_some(store, 2, start=5)
        table = store.context.tables.commitlog
        from storelib.delta.stats import Prune

        new = table.files(
            table.snapshot(), Prune(between={"physical_offset": (store.dispatch_progress()["index"], 2**62)})
        )
        assert len(new) == 1 < len(table.files(table.snapshot()))

    @pytest.mark.parametrize("properties", [False, True])
    def test_a_small_commitlog_file_reads_the_same_whole_or_through_a_scan(self, store, properties):
        import pyarrow.dataset as ds

        from storelib.dispatch.request import REQUEST_COLUMNS, CommitlogFiles

        send_some(store, 5)
        table = store.context.tables.commitlog
        reader = CommitlogFiles(0, 2**62, properties, requests=None)
        columns = list(REQUEST_COLUMNS) + (["properties"] if properties else [])
        for path in table.files(table.snapshot()):
            whole = pa.Table.from_batches(list(reader._read(path, whole=True)))  # read in one call
            scanned = pa.Table.from_batches(list(reader._read(path, whole=False)))  # a filtered scan
            assert whole.num_rows > 0 and whole.equals(scanned)
            assert whole.equals(ds.dataset(path).to_table(columns=columns))

    @pytest.mark.parametrize(
        "step,sql92",
        [(step, sql92) for sql92 in (False, True) for step in STEPS if sql92 or step != "consume_queue_ext.summarized"],
    )  # no ext file to sum up
    def test_failure_at_any_step_then_rerun(self, spark, store, step, sql92):
        if sql92:  # the topic's messages get ext units
            store.subscribe("GroupS", "TopicTest", MessageSelector.by_sql("TAGS IS NOT NULL"))
        send_some(store, 6)
        store.dispatch()
        send_some(store, 6, start=6)

        def fail(name):
            if name == step:
                raise RuntimeError(f"injected failure at {name}")

        with pytest.raises(RuntimeError, match="injected"):
            Dispatcher.of(store.context, fault=fail).run()
        store.dispatch()
        assert_dispatched_exactly(spark, store)


def test_a_follower_round_moves_the_ext_marker_only_with_rows_or_with_the_index(spark, store):
    """Between two full rounds a follower commits the ext table only when it has units to add; the ext units
    of a later round start at the consume queue's marker, since no unit below it points at one."""
    import time

    dispatcher = Dispatcher.of(store.context)
    dispatcher._full_every_s, dispatcher._full_at = 3600.0, time.monotonic()  # a follower, a full round just made
    ext = store.context.tables.consume_queue_ext
    before = ext.snapshot().version()
    first = store.send(Message("TopicTest", tags="TagA", properties={"a": "7"}))
    assert dispatcher.run().rows["consume_queue"] == 1
    assert ext.snapshot().version() == before  # nothing to add: no commit
    progress = store.dispatch_progress()
    assert progress["consume_queue_ext"] < progress["consume_queue"] == store.max_offset()

    store.subscribe("GroupS", "TopicTest", MessageSelector.by_sql("a > 5"))
    second = store.send(Message("TopicTest", tags="TagB", properties={"a": "9"}))
    assert dispatcher.run().rows["consume_queue_ext"] == 1
    assert [r.commitlog_offset for r in store.table("consume_queue_ext").collect()] == [second.commitlog_offset]
    codes = {r.commitlog_offset: r.tags_code for r in store.table("consume_queue").collect()}
    assert codes[first.commitlog_offset] == tags_code("TagA")
    assert codes[second.commitlog_offset] == decorate_ext_addr(second.queue_offset)
    assert (
        store.read("TopicTest", group="GroupS").count() == 2
    )  # the first by its exact check, the second by its bitmap too
    store.dispatch()
    progress = store.dispatch_progress()
    assert progress["consume_queue_ext"] == progress["consume_queue"] == progress["index"] == store.max_offset()


def test_dispatch_never_collects_messages(spark, store):
    """The session's maxResultSize is 4m; these (incompressible) bodies add up to ~23 MB."""
    assert spark.sparkContext.getConf().get("spark.driver.maxResultSize") == "4m"
    noise = F.concat(*[F.sha2(F.concat(F.col("id").cast("string"), F.lit(f"-{j}")), 256) for j in range(60)])
    df = spark.range(0, 6000, 1, 4).select(
        F.lit("TopicTest").alias("topic"), noise.alias("body"), F.array(F.col("id").cast("string")).alias("keys")
    )
    store.send_dataframe(df)
    with pytest.raises(Exception, match="maxResultSize|bigger than"):
        store.messages().select("body").collect()  # proves the limit bites
    result = store.dispatch()
    assert result.consume_queue_rows == 6000 and result.index_rows == 12000
    assert store.table("consume_queue").count() == 6000


#: A dispatch in its own process that dies hard (no cleanup, no finally) at the step named by argv[2].
CRASHING_DISPATCH = """
import os, sys
from storelib import MessageStore
from storelib.dispatch.reput import Dispatcher
from storelib.session import get_spark

store = MessageStore.create(sys.argv[1], get_spark("crashing-dispatch"))
Dispatcher.of(store.context, fault=lambda step: os._exit(86) if step == sys.argv[2] else None).run()
"""


def test_dispatch_job_crash_and_rerun(spark, store, python_env, tmp_path):
    """A dispatch process killed hard after writing files, then the job run again through ``spark-submit``,
    from another folder than the repository's: its log settings are still found (no INFO line, no log4j error)."""
    send_some(store, 8)
    crashed = subprocess.run(
        [sys.executable, "-c", CRASHING_DISPATCH, store.root, "index.written"],
        env=python_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    submit = str(Path(sys.executable).parent / "spark-submit")
    job = [submit, "--properties-file", str(ROOT / "spark-defaults.conf"), str(ROOT / "jobs" / "dispatch.py")]
    job += ["--store", store.root]
    assert crashed.returncode == 86, crashed.stderr[-2000:]
    progress = store.dispatch_progress()
    assert progress["consume_queue"] == store.max_offset() and progress["index"] == 0
    rerun = subprocess.run(job, env=python_env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert not [line for line in rerun.stderr.splitlines() if " INFO " in line or "Reconfiguration failed" in line]
    assert "dispatched" in rerun.stdout
    assert_dispatched_exactly(spark, store)
