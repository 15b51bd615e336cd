"""Bad input: typed errors naming the field, and nothing partial written."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from storelib import Message, StoreConfig
from storelib.model.errors import (BodyTooLargeError, InvalidPropertyError, InvalidQueueIdError, InvalidTopicError,
                                   MessageError, ReservedPropertyError, ReservedTopicError, StoreError,
                                   TopicNotFoundError, TopicPermissionError)
from storelib.model.topic import PERM_READ, validate_topic


def commitlog_version(store):
    return store.context.tables.commitlog.snapshot().version()


BAD_MESSAGES = [
    pytest.param(Message("bad topic"), InvalidTopicError, "topic", id="illegal-char"),
    pytest.param(Message(""), InvalidTopicError, "topic", id="blank-topic"),
    pytest.param(Message("T" * 128), InvalidTopicError, "topic", id="topic-too-long"),
    pytest.param(Message("SCHEDULE_TOPIC_XXXX"), ReservedTopicError, "topic", id="system-topic"),
    pytest.param(Message("NoSuchTopic"), TopicNotFoundError, "topic", id="unknown-topic"),
    pytest.param(Message("TopicTest", body=b"x" * 1025), BodyTooLargeError, "body", id="oversize-body"),
    pytest.param(Message("TopicTest", properties={1: "v"}), InvalidPropertyError, "properties[1]", id="int-key"),
    pytest.param(Message("TopicTest", properties={"k": 5}), InvalidPropertyError, "properties['k']", id="int-value"),
    pytest.param(Message("TopicTest", properties={"k": " "}), InvalidPropertyError, "properties['k']", id="blank-value"),
    pytest.param(Message("TopicTest", properties={"UNIQ_KEY": "x"}), ReservedPropertyError, "properties['UNIQ_KEY']", id="reserved-prop"),
    pytest.param(Message("TopicTest", properties={"DELAY": "3"}), ReservedPropertyError, "properties['DELAY']", id="reserved-delay"),
    pytest.param(Message("TopicTest", properties={"k": "a\x02b"}), InvalidPropertyError, "properties['k']", id="separator-value"),
    pytest.param(Message("TopicTest", properties={"k\x01": "v"}), InvalidPropertyError, "properties['k\\x01']", id="separator-name"),
    pytest.param(Message("TopicTest", properties={"k": "\t"}), InvalidPropertyError, "properties['k']", id="tab-value"),
    pytest.param(Message("TopicTest", tags="TagA\x01"), MessageError, "tags", id="separator-tags"),
    pytest.param(Message("TopicTest", keys=["a", "b\x02"]), MessageError, "keys", id="separator-keys"),
    pytest.param(Message("TopicTest", queue_id=4), InvalidQueueIdError, "queue_id", id="queue-too-high"),
    pytest.param(Message("TopicTest", queue_id=-1), InvalidQueueIdError, "queue_id", id="queue-negative"),
    pytest.param(Message("TopicTest", body="text"), MessageError, "body", id="str-body"),
    pytest.param(Message("TopicTest", keys=["a", 1]), MessageError, "keys", id="non-str-key"),
]


@pytest.fixture
def small_store(spark, store_path):
    from storelib import MessageStore

    s = MessageStore.create(store_path, spark, config=StoreConfig(max_message_size=1024))
    s.create_topic("TopicTest", queues=4)
    return s


@pytest.mark.parametrize("message, error, field", BAD_MESSAGES)
def test_send_refuses(small_store, message, error, field):
    before = commitlog_version(small_store)
    with pytest.raises(error) as info:
        small_store.send(message)
    assert isinstance(info.value, StoreError)
    assert info.value.field == field
    assert str(info.value).startswith(field)
    assert commitlog_version(small_store) == before


def test_one_bad_message_fails_the_whole_batch(small_store):
    good = Message("TopicTest", body=b"ok")
    with pytest.raises(BodyTooLargeError) as info:
        small_store.send_batch([good, good, Message("TopicTest", body=b"x" * 2000)])
    assert info.value.where == "message 2"
    assert small_store.messages().count() == 0


def test_read_only_topic_refuses_sends(small_store):
    small_store.create_topic("ReadOnly", queues=1, perm=PERM_READ)
    with pytest.raises(TopicPermissionError) as info:
        small_store.send(Message("ReadOnly", body=b"x"))
    assert info.value.code == "NO_PERMISSION"


@pytest.mark.parametrize("topic", ["TBW102", "RMQ_SYS_TRANS_HALF_TOPIC", "rmq_sys_anything", "bad/topic"])
def test_create_topic_refuses(small_store, topic):
    with pytest.raises(InvalidTopicError):
        small_store.create_topic(topic)


@pytest.mark.parametrize("name, ok", [("%RETRY%GroupA", True), ("a|b-c_D", True), ("x" * 127, True),
                                      ("%DLQ%" + "g" * 250, True), ("x" * 128, False), ("中文", False), ("a.b", False)])
def test_topic_rules(name, ok):
    if ok:
        assert validate_topic(name) == name
    else:
        with pytest.raises(InvalidTopicError):
            validate_topic(name)


# (topic, queue_id, properties) of the one bad row, as SQL-free column builders (Spark is not up at import).
BAD_ROWS = [
    pytest.param(lambda: (F.lit("NoSuchTopic"), None, None), TopicNotFoundError, "topic", id="unknown-topic"),
    pytest.param(lambda: (F.lit("bad topic"), None, None), InvalidTopicError, "topic", id="illegal-topic"),
    pytest.param(lambda: (F.lit("RMQ_SYS_TRANS_HALF_TOPIC"), None, None), ReservedTopicError, "topic", id="system-topic"),
    pytest.param(lambda: (None, F.lit(9), None), InvalidQueueIdError, "queue_id", id="queue-id"),
    pytest.param(lambda: (None, None, F.create_map(F.lit("KEYS"), F.lit("x"))), ReservedPropertyError, "properties", id="reserved"),
    pytest.param(lambda: (None, None, F.create_map(F.lit("k"), F.lit(None).cast("string"))), InvalidPropertyError,
                 "properties", id="null-value"),
    pytest.param(lambda: (None, None, F.create_map(F.lit("a"), F.lit("1"), F.lit("  "), F.lit("2"))), InvalidPropertyError,
                 "properties", id="blank-name"),
    pytest.param(lambda: (None, None, F.create_map(F.lit("a\x01b"), F.lit("1"))), InvalidPropertyError,
                 "properties", id="name-with-separator"),
    pytest.param(lambda: (None, None, F.create_map(F.lit("a\x01b"), F.lit("1\x012"))), InvalidPropertyError,
                 "properties", id="name-and-value-with-separator"),
    pytest.param(lambda: (None, None, F.create_map(F.lit("a"), F.lit("x\x02"))), InvalidPropertyError,
                 "properties", id="value-with-separator"),
    pytest.param(lambda: (None, None, F.create_map(F.lit("a"), F.lit("\t\n"))), InvalidPropertyError,
                 "properties", id="whitespace-value"),
]


@pytest.mark.parametrize("bad, error, field", BAD_ROWS)
def test_send_dataframe_refuses_bad_rows(spark, small_store, bad, error, field):
    """One bad row among good ones: typed error, and not one row written."""
    topic, queue_id, props = bad()
    is_bad = F.col("id") == 37
    df = spark.range(50).select(
        F.when(is_bad, topic if topic is not None else F.lit("TopicTest")).otherwise(F.lit("TopicTest")).alias("topic"),
        F.lit(b"body").alias("body"),
        F.when(is_bad, queue_id if queue_id is not None else F.lit(None)).cast("int").alias("queue_id"),
        F.when(is_bad, props if props is not None else F.lit(None)).cast("map<string,string>").alias("properties"))
    before = commitlog_version(small_store)
    with pytest.raises(error) as info:
        small_store.send_dataframe(df)
    assert info.value.field == field
    assert "nothing was written" in str(info.value)
    assert commitlog_version(small_store) == before


@pytest.mark.parametrize("column", ["tags", "keys"])
def test_send_dataframe_refuses_separators_in_tags_and_keys(spark, small_store, column):
    df = spark.range(5).select(F.lit("TopicTest").alias("topic"),
                               F.when(F.col("id") == 3, F.lit("x\x01y")).otherwise(F.lit("ok")).alias(column))
    with pytest.raises(MessageError, match="can not hold") as info:
        small_store.send_dataframe(df)
    assert info.value.field == column
    assert small_store.messages().count() == 0


def test_send_dataframe_refuses_null_keys(spark, small_store):
    df = spark.range(5).select(F.lit("TopicTest").alias("topic"),
                               F.when(F.col("id") == 3, F.array(F.lit("a"), F.lit(None).cast("string")))
                               .otherwise(F.array(F.lit("a"), F.lit("b"))).alias("keys"))
    with pytest.raises(MessageError, match="every key must be a string"):
        small_store.send_dataframe(df)


def test_send_dataframe_accepts_good_properties_of_every_shape(spark, small_store):
    """No properties, one, several: stored as given, the system ones added."""
    df = spark.range(4).select(F.lit("TopicTest").alias("topic"), F.col("id").cast("int").alias("queue_id"),
                               F.when(F.col("id") == 0, F.lit(None))
                               .when(F.col("id") == 1, F.create_map(F.lit("a"), F.lit("1")))
                               .otherwise(F.create_map(F.lit("a"), F.lit("1"), F.lit("b c"), F.lit(" x ")))
                               .cast("map<string,string>").alias("properties"))
    small_store.send_dataframe(df)
    got = {r.queue_id: {k: v for k, v in r.properties.items() if k != "UNIQ_KEY"} for r in small_store.messages().collect()}
    assert got == {0: {}, 1: {"a": "1"}, 2: {"a": "1", "b c": " x "}, 3: {"a": "1", "b c": " x "}}


def test_send_dataframe_refuses_oversize_body(spark, small_store):
    df = spark.range(3).select(F.lit("TopicTest").alias("topic"), F.repeat(F.lit("x"), 2000).alias("body"))
    with pytest.raises(BodyTooLargeError):
        small_store.send_dataframe(df)


@pytest.mark.parametrize("topic, body, error, field", [
    ("TopicTest", None, MessageError, "body"),
    (None, "x", InvalidTopicError, "topic"),
    ("ReadOnly", "x", TopicPermissionError, "topic"),
    ("%RETRY%" + "g" * 200, "x", TopicNotFoundError, "topic"),   # a legal retry-topic length, but no such topic
    ("T" * 128, "x", InvalidTopicError, "topic"),
])
def test_send_dataframe_refuses_like_send(spark, small_store, topic, body, error, field):
    """The executors' checks are the list path's: the same error class and field for the same row."""
    small_store.create_topic("ReadOnly", queues=1, perm=PERM_READ)
    rows = [("TopicTest", "ok")] * 3 + [(topic, body)]
    with pytest.raises(error) as info:
        small_store.send_dataframe(spark.createDataFrame(rows, "topic string, body string"))
    assert info.value.field == field
    if body is not None:
        with pytest.raises(error):
            small_store.send(Message(topic or "", body=body.encode()))
    assert small_store.messages().count() == 0


def test_send_dataframe_refuses_unknown_columns(spark, small_store):
    with pytest.raises(MessageError, match="unknown message columns"):
        small_store.send_dataframe(spark.range(1).select(F.lit("TopicTest").alias("topic"), F.lit(1).alias("colour")))
