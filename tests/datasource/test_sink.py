"""Writes through the ``rocketmq`` source: the same messages a DataFrame send stores, the same refusals with
nothing written, and streaming writes that store each micro-batch once, across restarts."""

from __future__ import annotations

import json
import os
import time

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from storelib import MessageStore
from storelib.datasource.options import SourceOptions
from storelib.datasource.sink import MessageStreamWriter

ROWS = "topic string, body string, tags string, keys array<string>, properties map<string,string>, queue_id int"
COMPARED = [
    "physical_offset",
    "topic",
    "queue_id",
    "queue_offset",
    "msg_id",
    "tags",
    "keys",
    "body",
    "size",
    "body_crc",
]


def frame(spark, n=40):
    return spark.createDataFrame(
        [("TopicTest", f"b{i}", f"Tag{i % 3}", [f"k{i}", "shared"], {"a": str(i)}, i % 4) for i in range(n)], ROWS
    ).repartition(3)


def test_a_write_stores_what_send_dataframe_stores(spark, store, tmp_path):
    other = MessageStore.create(str(tmp_path / "other"), spark)
    other.create_topic("TopicTest", queues=4)
    df = frame(spark).localCheckpoint()
    df.write.format("rocketmq").option("store", store.root).mode("append").save()
    other.send_dataframe(df)
    ours, theirs = store.messages("TopicTest"), other.messages("TopicTest")
    assert_df_equality(
        ours.select(*COMPARED),
        theirs.select(*COMPARED),
        ignore_row_order=True,
        ignore_nullable=True,
        ignore_metadata=True,
    )
    props = lambda d: d.select("physical_offset", F.col("properties")["a"])  # noqa: E731
    assert_df_equality(props(ours), props(theirs), ignore_row_order=True, ignore_nullable=True)
    store.dispatch()
    assert store.query_by_key("TopicTest", "k7")[0].body == b"b7"
    assert (
        not os.listdir(f"{store.root}/commitlog/_staging")
        if os.path.exists(f"{store.root}/commitlog/_staging")
        else True
    )


@pytest.mark.parametrize(
    "rows, schema, error",
    [
        ([("Nowhere", "x")], "topic string, body string", "TopicNotFoundError"),
        ([("TopicTest", "x", 9)], "topic string, body string, queue_id int", "InvalidQueueIdError"),
        (
            [("TopicTest", "x", {"UNIQ_KEY": "u", "TRAN_MSG": "true"})],
            "topic string, body string, properties map<string,string>",
            "ReservedPropertyError | properties['TRAN_MSG']: is used by the system, choose another name",
        ),
    ],
)
def test_a_refused_row_writes_nothing(spark, store, rows, schema, error):
    before = store.context.tables.commitlog.snapshot().version()
    with pytest.raises(Exception) as e:
        spark.createDataFrame(rows, schema).write.format("rocketmq").option("store", store.root).mode("append").save()
    assert all(part in str(e.value) for part in error.split(" | ")), str(e.value)[:2000]
    assert store.context.tables.commitlog.snapshot().version() == before
    staging = f"{store.root}/commitlog/_staging"
    assert not os.path.exists(staging) or not os.listdir(staging)


def test_rows_read_with_the_source_write_back_with_the_sink(spark, store, tmp_path):
    """The source's rows, as they are: the store's own columns (offsets, ids, store time, CRC, ...) and the
    system properties that repeat the row's columns (TAGS, KEYS, UNIQ_KEY) are the new store's to give."""
    frame(spark, 12).write.format("rocketmq").option("store", store.root).mode("append").save()
    copy = MessageStore.create(str(tmp_path / "copy"), spark)
    copy.create_topic("TopicTest", queues=4)
    read = spark.read.format("rocketmq").option("store", store.root).load().where("topic = 'TopicTest'")
    read.write.format("rocketmq").option("store", copy.root).mode("append").save()
    kept = ["topic", "queue_id", "tags", "keys", "body", "born_timestamp", "born_host", "properties"]
    # the id is each store's own; entries sorted, since rows with maps cannot be ordered
    mine = F.array_sort(F.map_entries(F.map_filter("properties", lambda k, _: ~k.isin("UNIQ_KEY"))))
    ours, theirs = (s.messages("TopicTest").withColumn("properties", mine).select(*kept) for s in (store, copy))
    assert_df_equality(ours, theirs, ignore_row_order=True, ignore_nullable=True, ignore_metadata=True)
    ids = [r.uniq_key for r in copy.messages("TopicTest").select("uniq_key").collect()]
    assert len(set(ids)) == 12 and not set(ids) & {r.uniq_key for r in store.messages("TopicTest").collect()}


def test_columns_and_mode_are_checked_when_the_write_is_planned(spark, store):
    with pytest.raises(Exception, match="unknown message columns"):
        spark.createDataFrame([("TopicTest", 1)], "topic string, colour int").write.format("rocketmq").option(
            "store", store.root
        ).mode("append").save()
    with pytest.raises(Exception, match="only appends"):
        frame(spark, 2).write.format("rocketmq").option("store", store.root).mode("overwrite").save()


def test_a_stream_of_files_is_stored_once_across_restarts(spark, store, tmp_path):
    inbox, ck = tmp_path / "inbox", str(tmp_path / "ck")
    inbox.mkdir()

    def drop(name, n):
        (inbox / f"{name}.json").write_text(
            "\n".join(json.dumps({"topic": "TopicTest", "body": f"{name}-{i}"}) for i in range(n))
        )

    def run():
        q = (
            spark.readStream.schema("topic string, body string")
            .json(str(inbox))
            .writeStream.format("rocketmq")
            .option("store", store.root)
            .option("checkpointLocation", ck)
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()

    drop("a", 5)
    drop("b", 7)
    run()
    drop("c", 3)
    run()
    run()  # nothing new
    bodies = [bytes(r.body).decode() for r in store.messages("TopicTest").collect()]
    assert sorted(bodies) == sorted(
        [f"a-{i}" for i in range(5)] + [f"b-{i}" for i in range(7)] + [f"c-{i}" for i in range(3)]
    )


def test_a_replayed_batch_is_skipped(spark, store, tmp_path):
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType([StructField("topic", StringType()), StructField("body", StringType())])
    options = SourceOptions.parse({"store": store.root, "checkpointLocation": str(tmp_path / "ck")}, writing=True)
    import pyarrow as pa

    def batch(writer, text):
        return writer.write(iter([pa.RecordBatch.from_pydict({"topic": ["TopicTest"], "body": [text]})]))

    writer = MessageStreamWriter(options, schema, False)
    writer.commit([batch(writer, "first")], 0)
    again = MessageStreamWriter(options, schema, False)  # the query restarted from its checkpoint
    again.commit([batch(again, "first")], 0)  # Spark replays batch 0
    again.commit([batch(again, "second")], 1)
    assert sorted(bytes(r.body) for r in store.messages("TopicTest").collect()) == [b"first", b"second"]
    time.sleep(0)
