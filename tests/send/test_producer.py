"""Sending: SendResults, RocketMQ offsets, message encoding, and atomic batches and DataFrames."""

from __future__ import annotations

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from storelib import Message, decode_message_id
from storelib.encoding.message_id import create_message_id
from storelib.encoding.properties import properties_to_string
from storelib.encoding.record import message_length
from storelib.model.message import MessageConst


def commitlog_rows(store):
    return store.messages().orderBy("physical_offset").collect()


def recomputed_size(r) -> int:
    """RocketMQ's calMsgLength of a stored row, from its body, topic, properties and host flags."""
    from storelib.model.message import SysFlag

    return message_length(
        body_length=len(r.body),
        topic_length=len(r.topic.encode()),
        properties_length=len(properties_to_string(dict(r.properties)).encode()),
        born_host_v6=bool(r.sysflag & SysFlag.BORNHOST_V6),
        store_host_v6=bool(r.sysflag & SysFlag.STOREHOSTADDRESS_V6),
    )


def assert_offsets_contiguous(rows):
    """physical_offset + size is the next offset; queue offsets run 0..n-1 per (topic, queue)."""
    assert rows[0].physical_offset == 0
    for a, b in zip(rows, rows[1:]):
        assert a.physical_offset + a.size == b.physical_offset
    per_queue: dict = {}
    for r in rows:
        per_queue.setdefault((r.topic, r.queue_id), []).append(r.queue_offset)
    for offsets in per_queue.values():
        assert sorted(offsets) == list(range(len(offsets)))


class TestSend:
    def test_send_result(self, store):
        r = store.send(Message("TopicTest", tags="TagA", keys=["order-1"], body=b"hi", properties={"a": "5"}))
        assert r.send_status == "SEND_OK"
        assert (r.queue_offset, r.commitlog_offset) == (0, 0)
        assert 0 <= r.queue_id < 4
        assert decode_message_id(r.msg_id) == ("127.0.0.1", 10911, 0)
        assert len(r.uniq_key) == 32

    def test_message_is_stored_with_rocketmq_properties(self, store):
        r = store.send(
            Message("TopicTest", tags="TagA", keys=["order-1", "order-2"], body=b"hi", properties={"a": "5"})
        )
        row = commitlog_rows(store)[0]
        props = dict(row.properties)
        assert props == {
            "a": "5",
            MessageConst.TAGS: "TagA",
            MessageConst.KEYS: "order-1 order-2",
            MessageConst.UNIQ_KEY: r.uniq_key,
        }
        assert (row.tags, row.keys, row.uniq_key, row.body) == ("TagA", "order-1 order-2", r.uniq_key, bytearray(b"hi"))
        assert row.size == message_length(
            body_length=2, topic_length=9, properties_length=len(properties_to_string(props).encode())
        )
        assert row.msg_id == r.msg_id

    def test_offsets_run_on_across_sends(self, store):
        results = [store.send(Message("TopicTest", body=b"x" * i, queue_id=1)) for i in range(5)]
        assert [r.queue_offset for r in results] == [0, 1, 2, 3, 4]
        rows = commitlog_rows(store)
        assert_offsets_contiguous(rows)
        assert [r.commitlog_offset for r in results] == [r.physical_offset for r in rows]
        assert store.max_offset() == rows[-1].physical_offset + rows[-1].size

    def test_producer_rotates_queues(self, store):
        results = store.send_batch([Message("TopicTest", body=b"m") for _ in range(8)])
        queues = [r.queue_id for r in results]
        assert sorted(set(queues)) == [0, 1, 2, 3]
        assert all((b - a) % 4 == 1 for a, b in zip(queues, queues[1:]))

    def test_batch_is_one_commit(self, store):
        before = store.context.tables.commitlog.snapshot().version()
        store.send_batch([Message("TopicTest", body=b"a"), Message("TopicTest", body=b"b")])
        assert store.context.tables.commitlog.snapshot().version() == before + 1

    def test_uniq_keys_are_unique(self, store):
        results = store.send_batch([Message("TopicTest", body=b"m") for _ in range(200)])
        assert len({r.uniq_key for r in results}) == 200


class TestSendDataFrame:
    def frame(self, spark, n, partitions=3):
        return spark.range(0, n, 1, partitions).select(
            F.when(F.col("id") % 3 == 0, "TopicOther").otherwise("TopicTest").alias("topic"),
            F.concat(F.lit("body-"), F.col("id").cast("string")).alias("body"),
            F.concat(F.lit("Tag"), (F.col("id") % 2).cast("string")).alias("tags"),
            F.array(F.concat(F.lit("k"), F.col("id").cast("string"))).alias("keys"),
            F.create_map(F.lit("n"), F.col("id").cast("string")).alias("properties"),
        )

    def test_rows_offsets_and_encoding(self, spark, store):
        store.create_topic("TopicOther", queues=2)
        store.send(Message("TopicTest", body=b"first"))
        result = store.send_dataframe(self.frame(spark, 300))
        assert result.count == 300
        rows = commitlog_rows(store)
        assert len(rows) == 301
        assert_offsets_contiguous(rows)
        assert result.first_offset == rows[1].physical_offset and result.next_offset == store.max_offset()
        for r in rows[1:]:
            props = dict(r.properties)
            n = props["n"]
            assert r.body == bytearray(f"body-{n}".encode())
            assert props[MessageConst.TAGS] == r.tags == f"Tag{int(n) % 2}"
            assert props[MessageConst.KEYS] == r.keys == f"k{n}"
            assert props[MessageConst.UNIQ_KEY] == r.uniq_key
            assert r.size == message_length(
                body_length=len(r.body),
                topic_length=len(r.topic),
                properties_length=len(properties_to_string(props).encode()),
            )
            assert r.msg_id == create_message_id("127.0.0.1", 10911, r.physical_offset)
            assert r.body_crc == (__import__("zlib").crc32(r.body) & 0x7FFFFFFF)
        assert len({r.uniq_key for r in rows}) == 301

    def test_same_rows_as_sending_one_by_one(self, spark, store_path, store):
        """A DataFrame send stores what a list send stores, except ids, times and queue choice."""
        from storelib import MessageStore

        other = MessageStore.create(store_path + "-list", spark)
        other.create_topic("TopicTest", queues=4)
        msgs = [
            Message(
                "TopicTest", body=f"b{i}".encode(), tags="T", keys=[f"k{i}"], properties={"i": str(i)}, queue_id=i % 4
            )
            for i in range(20)
        ]
        other.send_batch(msgs)
        df = spark.createDataFrame(
            [(m.topic, m.body, m.tags, m.keys, dict(m.properties), m.queue_id) for m in msgs],
            "topic string, body binary, tags string, keys array<string>, properties map<string,string>, queue_id int",
        )
        store.send_dataframe(df.coalesce(1))
        cols = [
            "physical_offset",
            "size",
            "topic",
            "queue_id",
            "queue_offset",
            "sysflag",
            "flag",
            "body_crc",
            "body",
            "tags",
            "keys",
        ]
        assert_df_equality(
            store.messages().select(*cols), other.messages().select(*cols), ignore_row_order=True, ignore_nullable=True
        )

    def test_empty_frame(self, spark, store):
        result = store.send_dataframe(self.frame(spark, 0).where("topic = 'TopicTest'"))
        assert result.count == 0 and store.max_offset() == 0

    def test_nondeterministic_frame_is_read_once(self, spark, store):
        """rand() differs on every read: one read means every stored row is consistent with its size."""
        df = spark.range(0, 200, 1, 4).select(
            F.lit("TopicTest").alias("topic"), F.expr("repeat('x', cast(rand() * 50 as int))").alias("body")
        )
        store.send_dataframe(df)
        rows = commitlog_rows(store)
        assert len(rows) == 200
        assert_offsets_contiguous(rows)
        assert all(r.size == recomputed_size(r) for r in rows)

    def test_failed_send_leaves_nothing_staged(self, spark, store):
        import os

        from pyspark.errors import PySparkException

        from storelib.model.errors import MessageError

        df = spark.range(0, 50, 1, 2).select(
            F.lit("TopicTest").alias("topic"),
            F.when(F.col("id") == 42, F.raise_error(F.lit("boom"))).otherwise(F.lit("b")).alias("body"),
        )
        before = store.context.tables.commitlog.snapshot().version()
        with pytest.raises(MessageError, match="boom") as info:  # the frame's own failure, Spark's error chained
            store.send_dataframe(df)
        assert info.value.field == "df"
        assert isinstance(info.value.__cause__, PySparkException)
        assert store.context.tables.commitlog.snapshot().version() == before
        staging = os.path.join(store.context.tables.commitlog.path, "_staging")
        assert not os.path.exists(staging) or os.listdir(staging) == []

    def test_vacuum_removes_what_dead_sends_staged(self, store):
        import os
        import time

        staging = os.path.join(store.context.tables.commitlog.path, "_staging")
        for name, age_hours in (("dead", 5), ("running", 0)):
            os.makedirs(os.path.join(staging, name))
            with open(os.path.join(staging, name, "0-x.arrows"), "wb") as f:
                f.write(b"partial")
            stamp = time.time() - age_hours * 3600
            os.utime(os.path.join(staging, name), (stamp, stamp))
        assert store.vacuum(retention_hours=2)["staging"] == 1
        assert os.listdir(staging) == ["running"]


def test_ipv6_store_host_counts_in_every_size(spark, store_path):
    """A store on an IPv6 address stores 16-byte store hosts: the flag and 12 more bytes per message,
    whichever way the message was sent (the sizes must still chain: offset + size = next)."""
    from storelib import MessageStore
    from storelib.model.message import SysFlag

    v6 = MessageStore.create(store_path, spark, store_host="[::1]:10911")
    v6.create_topic("TopicTest", queues=2)
    v6.send(Message("TopicTest", body=b"one", properties={"a": "1"}))
    v6.send_dataframe(spark.range(3).select(F.lit("TopicTest").alias("topic"), F.lit("two").alias("body")))
    rows = commitlog_rows(v6)
    assert_offsets_contiguous(rows)
    for r in rows:
        assert r.sysflag & SysFlag.STOREHOSTADDRESS_V6
        assert r.size == recomputed_size(r)
    assert decode_message_id(rows[0].msg_id)[:2] == ("::1", 10911)


def test_given_born_hosts_set_the_born_v6_flag_per_row(spark, store):
    """A DataFrame's own ``born_host`` decides BORNHOST_V6 row by row, and with it 12 bytes of size."""
    from storelib.model.message import SysFlag

    hosts = ["[::1]:5000", "10.0.0.1:5000", "fe80::1:7"]
    store.send_dataframe(spark.createDataFrame([("TopicTest", h) for h in hosts], "topic string, born_host string"))
    rows = commitlog_rows(store)
    assert_offsets_contiguous(rows)
    assert [(r.born_host, bool(r.sysflag & SysFlag.BORNHOST_V6)) for r in rows] == [
        ("[::1]:5000", True),
        ("10.0.0.1:5000", False),
        ("fe80::1:7", True),
    ]
    for r in rows:
        assert r.size == recomputed_size(r)


def test_dataframe_queue_ids_given_or_turned(spark, store):
    """Rows naming a queue land in it; the others turn round-robin over the topic's write queues,
    as RocketMQ's producer does, so a run of 40 messages with no queue fills all 4 evenly."""
    df = (
        spark.range(48)
        .select(
            F.lit("TopicTest").alias("topic"),
            F.col("id").cast("string").alias("body"),
            F.when(F.col("id") >= 40, F.lit(3)).cast("int").alias("queue_id"),
        )
        .coalesce(1)
    )
    store.send_dataframe(df)
    rows = commitlog_rows(store)
    assert_offsets_contiguous(rows)
    named = [r.queue_id for r in rows if int(r.body) >= 40]
    turned = [r.queue_id for r in rows if int(r.body) < 40]
    assert named == [3] * 8
    assert sorted(turned.count(q) for q in range(4)) == [10, 10, 10, 10]
    assert all(a != b for a, b in zip(turned, turned[1:]))
