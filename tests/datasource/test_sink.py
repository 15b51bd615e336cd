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
            [("TopicTest", "x", {"UNIQ_KEY": "u"})],
            "topic string, body string, properties map<string,string>",
            "ReservedPropertyError",
        ),
    ],
)
def test_a_refused_row_writes_nothing(spark, store, rows, schema, error):
    before = store.context.tables.commitlog.snapshot().version()
    with pytest.raises(Exception) as e:
        spark.createDataFrame(rows, schema).write.format("rocketmq").option("store", store.root).mode("append").save()
    assert error in str(e.value)
    assert store.context.tables.commitlog.snapshot().version() == before
    staging = f"{store.root}/commitlog/_staging"
    assert not os.path.exists(staging) or not os.listdir(staging)


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
