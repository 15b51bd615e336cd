"""Bad input: typed errors naming the field, and nothing partial written."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from storelib import Message, StoreConfig
from storelib.model.errors import (
    BodyTooLargeError,
    InvalidPropertyError,
    InvalidQueueIdError,
    InvalidTopicError,
    MessageError,
    ReservedPropertyError,
    ReservedTopicError,
    StoreError,
    TopicNotFoundError,
    TopicPermissionError,
)
from storelib.model.topic import PERM_READ, validate_topic
from tests.stores import opened_copy


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
    pytest.param(
        Message("TopicTest", properties={"k": " "}), InvalidPropertyError, "properties['k']", id="blank-value"
    ),
    pytest.param(
        Message("TopicTest", properties={"UNIQ_KEY": "x"}),
        ReservedPropertyError,
        "properties['UNIQ_KEY']",
        id="reserved-prop",
    ),
    pytest.param(
        Message("TopicTest", properties={"DELAY": "3"}),
        ReservedPropertyError,
        "properties['DELAY']",
        id="reserved-delay",
    ),
    pytest.param(
        Message("TopicTest", properties={"k": "a\x02b"}), InvalidPropertyError, "properties['k']", id="separator-value"
    ),
    pytest.param(
        Message("TopicTest", properties={"k\x01": "v"}),
        InvalidPropertyError,
        "properties['k\\x01']",
        id="separator-name",
    ),
    pytest.param(Message("TopicTest", properties={"k": "\t"}), InvalidPropertyError, "properties['k']", id="tab-value"),
    pytest.param(Message("TopicTest", tags="TagA\x01"), MessageError, "tags", id="separator-tags"),
    pytest.param(Message("TopicTest", keys=["a", "b\x02"]), MessageError, "keys", id="separator-keys"),
    pytest.param(Message("TopicTest", queue_id=4), InvalidQueueIdError, "queue_id", id="queue-too-high"),
    pytest.param(Message("TopicTest", queue_id=-1), InvalidQueueIdError, "queue_id", id="queue-negative"),
    pytest.param(Message("TopicTest", body="text"), MessageError, "body", id="str-body"),
    pytest.param(Message("TopicTest", keys=["a", 1]), MessageError, "keys", id="non-str-key"),
]


@pytest.fixture
def small_store(spark, store_path, _fresh_store):
    """A fresh store with ``TopicTest`` (4 queues; a copy of the run's template), opened with a 1 KiB limit."""
    with opened_copy(_fresh_store, store_path, spark, config=StoreConfig(max_message_size=1024)) as s:
        yield s


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


@pytest.mark.parametrize(
    "name, ok",
    [
        ("%RETRY%GroupA", True),
        ("a|b-c_D", True),
        ("x" * 127, True),
        ("%DLQ%" + "g" * 250, True),
        ("x" * 128, False),
        ("中文", False),
        ("a.b", False),
    ],
)
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
    pytest.param(
        lambda: (F.lit("RMQ_SYS_TRANS_HALF_TOPIC"), None, None), ReservedTopicError, "topic", id="system-topic"
    ),
    pytest.param(lambda: (None, F.lit(9), None), InvalidQueueIdError, "queue_id", id="queue-id"),
    pytest.param(
        lambda: (None, None, F.create_map(F.lit("a"), F.lit("1"), F.lit("DELAY"), F.lit("3"))),
        ReservedPropertyError,
        "properties['DELAY']",
        id="reserved",
    ),
    pytest.param(
        lambda: (None, None, F.create_map(F.lit("k"), F.lit(None).cast("string"))),
        InvalidPropertyError,
        "properties",
        id="null-value",
    ),
    pytest.param(
        lambda: (None, None, F.create_map(F.lit("a"), F.lit("1"), F.lit("  "), F.lit("2"))),
        InvalidPropertyError,
        "properties",
        id="blank-name",
    ),
    pytest.param(
        lambda: (None, None, F.create_map(F.lit("a\x01b"), F.lit("1"))),
        InvalidPropertyError,
        "properties",
        id="name-with-separator",
    ),
    pytest.param(
        lambda: (None, None, F.create_map(F.lit("a\x01b"), F.lit("1\x012"))),
        InvalidPropertyError,
        "properties",
        id="name-and-value-with-separator",
    ),
    pytest.param(
        lambda: (None, None, F.create_map(F.lit("a"), F.lit("x\x02"))),
        InvalidPropertyError,
        "properties",
        id="value-with-separator",
    ),
    pytest.param(
        lambda: (None, None, F.create_map(F.lit("a"), F.lit("\t\n"))),
        InvalidPropertyError,
        "properties",
        id="whitespace-value",
    ),
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
        F.when(is_bad, props if props is not None else F.lit(None)).cast("map<string,string>").alias("properties"),
    )
    before = commitlog_version(small_store)
    with pytest.raises(error) as info:
        small_store.send_dataframe(df)
    assert info.value.field == field
    assert "nothing was written" in str(info.value)
    assert commitlog_version(small_store) == before


@pytest.mark.parametrize("column", ["tags", "keys"])
def test_send_dataframe_refuses_separators_in_tags_and_keys(spark, small_store, column):
    df = spark.range(5).select(
        F.lit("TopicTest").alias("topic"),
        F.when(F.col("id") == 3, F.lit("x\x01y")).otherwise(F.lit("ok")).alias(column),
    )
    with pytest.raises(MessageError, match="can not hold") as info:
        small_store.send_dataframe(df)
    assert info.value.field == column
    assert small_store.messages().count() == 0


def test_send_dataframe_refuses_null_keys(spark, small_store):
    df = spark.range(5).select(
        F.lit("TopicTest").alias("topic"),
        F.when(F.col("id") == 3, F.array(F.lit("a"), F.lit(None).cast("string")))
        .otherwise(F.array(F.lit("a"), F.lit("b")))
        .alias("keys"),
    )
    with pytest.raises(MessageError, match="every key must be a string"):
        small_store.send_dataframe(df)


def test_send_dataframe_accepts_good_properties_of_every_shape(spark, small_store):
    """No properties, one, several: stored as given, the system ones added."""
    df = spark.range(4).select(
        F.lit("TopicTest").alias("topic"),
        F.col("id").cast("int").alias("queue_id"),
        F.when(F.col("id") == 0, F.lit(None))
        .when(F.col("id") == 1, F.create_map(F.lit("a"), F.lit("1")))
        .otherwise(F.create_map(F.lit("a"), F.lit("1"), F.lit("b c"), F.lit(" x ")))
        .cast("map<string,string>")
        .alias("properties"),
    )
    small_store.send_dataframe(df)
    got = {
        r.queue_id: {k: v for k, v in r.properties.items() if k != "UNIQ_KEY"} for r in small_store.messages().collect()
    }
    assert got == {0: {}, 1: {"a": "1"}, 2: {"a": "1", "b c": " x "}, 3: {"a": "1", "b c": " x "}}


def test_send_dataframe_refuses_oversize_body(spark, small_store):
    df = spark.range(3).select(F.lit("TopicTest").alias("topic"), F.repeat(F.lit("x"), 2000).alias("body"))
    with pytest.raises(BodyTooLargeError):
        small_store.send_dataframe(df)


@pytest.mark.parametrize(
    "topic, body, error, field",
    [
        ("TopicTest", None, MessageError, "body"),
        (None, "x", InvalidTopicError, "topic"),
        ("ReadOnly", "x", TopicPermissionError, "topic"),
        ("%RETRY%" + "g" * 200, "x", TopicNotFoundError, "topic"),  # a legal retry-topic length, but no such topic
        ("T" * 128, "x", InvalidTopicError, "topic"),
    ],
)
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


# ---- the held-out table: every public entry point, a bad input, the typed error and the field it names ----


def _df(spark, ddl, row):
    return lambda s: s.send_dataframe(spark.createDataFrame([row], ddl))


def _bad_inputs(spark):
    from storelib import MessageSelector
    from storelib.model.errors import ConfigError, FilterExpressionError, OffsetError

    return [
        (
            "create_topic(queues=True)",
            lambda s: s.create_topic("A1", queues=True),
            InvalidQueueIdError,
            "read_queue_nums",
        ),
        ("create_topic(perm='x')", lambda s: s.create_topic("A2", perm="x"), ConfigError, "perm"),
        ("create_topic(perm=99)", lambda s: s.create_topic("A3", perm=99), ConfigError, "perm"),
        ("create_topic(perm=-1)", lambda s: s.create_topic("A4", perm=-1), ConfigError, "perm"),
        ("create_topic(order='yes')", lambda s: s.create_topic("A5", order="yes"), ConfigError, "order"),
        ("Message(keys=5)", lambda s: s.send(Message("TopicTest", keys=5)), MessageError, "keys"),
        ("Message(keys={'a': 1})", lambda s: s.send(Message("TopicTest", keys={"a": 1})), MessageError, "keys"),
        ("Message(tags=lone surrogate)", lambda s: s.send(Message("TopicTest", tags="a\ud800")), MessageError, "tags"),
        (
            "Message(keys=[lone surrogate])",
            lambda s: s.send(Message("TopicTest", keys=["\udfff"])),
            MessageError,
            "keys",
        ),
        (
            "Message(properties={'a': surrogate})",
            lambda s: s.send(Message("TopicTest", properties={"a": "\ud800"})),
            MessageError,
            "properties['a']",
        ),
        ("send_batch(None)", lambda s: s.send_batch(None), MessageError, "messages"),
        ("send_batch(5)", lambda s: s.send_batch(5), MessageError, "messages"),
        ("send_dataframe(None)", lambda s: s.send_dataframe(None), MessageError, "df"),
        ("send_dataframe(list)", lambda s: s.send_dataframe([("TopicTest", "x")]), MessageError, "df"),
        ("send_dataframe(keys int)", _df(spark, "topic string, keys int", ("TopicTest", 5)), MessageError, "columns"),
        ("send_dataframe(tags int)", _df(spark, "topic string, tags int", ("TopicTest", 5)), MessageError, "columns"),
        (
            "send_dataframe(keys array<int>)",
            _df(spark, "topic string, keys array<int>", ("TopicTest", [5])),
            MessageError,
            "columns",
        ),
        (
            "send_dataframe(properties map<string,int>)",
            _df(spark, "topic string, properties map<string,int>", ("TopicTest", {"a": 1})),
            MessageError,
            "columns",
        ),
        (
            "send_dataframe(properties map<int,string>)",
            _df(spark, "topic string, properties map<int,string>", ("TopicTest", {1: "a"})),
            MessageError,
            "columns",
        ),
        (
            "send_dataframe(queue_id 1.5)",
            _df(spark, "topic string, queue_id double", ("TopicTest", 1.5)),
            MessageError,
            "columns",
        ),
        (
            "send_dataframe(born_timestamp int)",
            _df(spark, "topic string, born_timestamp int", ("TopicTest", 5)),
            MessageError,
            "columns",
        ),
        ("send_dataframe(topic int)", _df(spark, "topic int", (5,)), MessageError, "columns"),
        (
            "send_dataframe(queue_id 2**40)",
            _df(spark, "topic string, queue_id bigint", ("TopicTest", 2**40)),
            InvalidQueueIdError,
            "queue_id",
        ),
        (
            "send_dataframe(flag 2**40)",
            _df(spark, "topic string, flag bigint", ("TopicTest", 2**40)),
            MessageError,
            "flag",
        ),
        (
            "consume_queue(queue_id='0')",
            lambda s: s.consume_queue("TopicTest", queue_id="0"),
            InvalidQueueIdError,
            "queue_id",
        ),
        ("consume_queue(begin=-5)", lambda s: s.consume_queue("TopicTest", 0, begin=-5), OffsetError, "begin"),
        ("commit_offset(unknown topic)", lambda s: s.commit_offset("G", "Nope", 0, 0), TopicNotFoundError, "topic"),
        ("commit_offset(queue -1)", lambda s: s.commit_offset("G", "TopicTest", -1, 0), OffsetError, "queue_id"),
        ("table('nope')", lambda s: s.table("nope"), StoreError, "name"),
        ("messages(5)", lambda s: s.messages(5), InvalidTopicError, "topic"),
        ("StoreConfig(misspelled)", lambda s: StoreConfig(max_msg_size=1), ConfigError, "max_msg_size"),
        ("create_group(misspelled)", lambda s: s.create_group("G", retry_max_time=3), ConfigError, "retry_max_time"),
        (
            "subscribe(tag surrogate)",
            lambda s: s.subscribe("G", "TopicTest", "Tag\ud800"),
            FilterExpressionError,
            "expression",
        ),
        ("read(selector=5)", lambda s: s.read("TopicTest", 5), FilterExpressionError, "expression"),
        ("vacuum(retention_hours=-1)", lambda s: s.vacuum(retention_hours=-1), ConfigError, "retention_hours"),
        ("compact(full=5)", lambda s: s.compact(5), ConfigError, "full"),
        ("query_by_key(None)", lambda s: s.query_by_key("TopicTest", None), StoreError, "key"),
        ("query_by_id('zz')", lambda s: s.query_by_id("zz"), StoreError, "msg_id"),
        ("pull(queue 9)", lambda s: s.pull("G", "TopicTest", 9, 0), InvalidQueueIdError, "queue_id"),
        ("pull(offset '0')", lambda s: s.pull("G", "TopicTest", 0, "0"), OffsetError, "offset"),
        (
            "subscribe(SQL92 selector=None expression)",
            lambda s: s.subscribe("G", "TopicTest", MessageSelector.by_sql("")),
            FilterExpressionError,
            "expression",
        ),
    ]


def test_every_bad_input_gets_its_typed_error(spark, small_store):
    """The table of bad inputs: each raises its StoreError subclass naming the field, and writes nothing."""
    wrong = []
    for name, call, error, field in _bad_inputs(spark):
        before = {t: tb.snapshot().version() for t, tb in small_store.context.tables.by_name().items()}
        try:
            out = call(small_store)
            if hasattr(out, "collect"):
                out.collect()
            wrong.append(f"{name}: accepted")
            continue
        except StoreError as e:
            if not isinstance(e, error) or e.field != field:
                wrong.append(
                    f"{name}: {type(e).__name__} naming {e.field!r}, expected {error.__name__} naming {field!r}"
                )
        except Exception as e:  # noqa: BLE001 (the point: nothing untyped escapes)
            wrong.append(f"{name}: untyped {type(e).__name__}: {e}")
        after = {t: tb.snapshot().version() for t, tb in small_store.context.tables.by_name().items()}
        if after != before and name.startswith("send"):
            wrong.append(f"{name}: wrote {[t for t in after if after[t] != before[t]]}")
    assert wrong == []


def test_send_dataframe_refuses_duplicate_columns_by_name(spark, small_store, capfd):
    df = spark.range(3).select(F.lit("TopicTest").alias("topic"), F.lit("a").alias("tags"), F.lit("b").alias("TAGS"))
    before = commitlog_version(small_store)
    with pytest.raises(MessageError, match=r"more than one column named \['tags'\]") as info:
        small_store.send_dataframe(df)
    assert info.value.field == "columns"
    assert commitlog_version(small_store) == before
    assert "AMBIGUOUS_REFERENCE" not in capfd.readouterr().err  # refused before Spark analyses (and logs) it


def test_send_dataframe_refuses_a_streaming_frame(spark, small_store):
    df = spark.readStream.format("rate").load().select(F.lit("TopicTest").alias("topic"))
    with pytest.raises(MessageError, match="streaming DataFrame.*writeStream.format\\('rocketmq'\\)") as info:
        small_store.send_dataframe(df)
    assert info.value.field == "df"


@pytest.mark.parametrize(
    "frame, says",
    [
        pytest.param(
            lambda spark: spark.range(2).select(F.udf(lambda x: 1 // 0, "string")(F.col("id")).alias("topic")),
            "ZeroDivisionError",
            id="their-udf-raises",
        ),
        pytest.param(
            lambda spark: spark.createDataFrame([("TopicTest", "x")], "topic string, q string").select(
                "topic", F.col("q").cast("int").alias("queue_id")
            ),
            "CAST_INVALID_INPUT",
            id="their-cast-fails",
        ),
    ],
)
def test_send_dataframe_refuses_a_frame_spark_cannot_compute(spark, small_store, capfd, frame, says):
    before = commitlog_version(small_store)
    with pytest.raises(MessageError, match=f"could not compute the DataFrame's rows.*{says}.*nothing was sent") as info:
        small_store.send_dataframe(frame(spark))
    assert info.value.field == "df"
    assert commitlog_version(small_store) == before
    assert "DataFrameQueryContextLogger" not in capfd.readouterr().err  # said once, as the error
