"""The ``rocketmq`` source's options in the spirit of Spark's Kafka source: several topics (a list, a pattern),
starting offsets per topic and queue or by time, batch offset ranges, Kafka's names as aliases, refusals at
``load()`` with the store's own errors, and every option in the guide's table."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.errors import AnalysisException

from storelib import Message
from storelib.datasource.options import ALIASES, OPTIONS, SourceOptions
from storelib.datasource.stream import GroupStreamReader
from storelib.model.errors import DataSourceOptionError, InvalidTopicError, OffsetError
from tests.datasource.streams import stream_once

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide.md"
SHOWN = ["topic", "queue_id", "queue_offset", "msg_id"]


@pytest.fixture
def audit(orders):
    """``orders`` and a second topic, Audit: 6 messages over 2 queues, not dispatched yet."""
    store, sent = orders
    store.create_topic("Audit", queues=2)
    sent += store.send_batch([Message("Audit", tags="A", body=b"a%d" % i, queue_id=i % 2) for i in range(6)])
    return store, sent


def stream_reader(store, **options):
    return GroupStreamReader(SourceOptions.parse({"store": store.root, **options}, streaming=True), None)


def rows(reader, start, end):
    return [row for p in reader.partitions(start, end) for b in reader.read(p) for row in b.to_pylist()]


def same(got, want):
    assert want.count() > 0
    assert_df_equality(got.select(*SHOWN), want.select(*SHOWN), ignore_row_order=True, ignore_nullable=True)


class TestParsing:
    def test_kafka_names_are_aliases_and_names_are_case_insensitive(self):
        o = SourceOptions.parse(
            {"STORE": "/s", "Subscribe": "Orders, Audit,Orders", "maxOffsetsPerTrigger": "7", "GROUP": "G"}
        )
        assert (o.topics, o.max_messages_per_trigger, o.group) == (("Orders", "Audit"), 7, "G")
        p = SourceOptions.parse({"store": "/s", "subscribePattern": "Ord.*", "failOnDataLoss": "TRUE"})
        assert (p.topics, p.topic_pattern, p.fail_on_data_loss) == (None, "Ord.*", True)

    @pytest.mark.parametrize(
        "options, field, text",
        [
            ({"kafka.bootstrap.servers": "h:9092"}, "kafka.bootstrap.servers", "Kafka client"),
            ({"assign": '{"Orders": [0]}'}, "assign", "whole topics"),
            ({"includeHeaders": "true"}, "includeHeaders", "properties"),
            ({"colour": "red"}, "colour", "not an option"),
            ({"topic": "A", "subscribe": "B"}, "subscribe", "one of topic, topics and topicPattern"),
            ({"maxOffsetsPerTrigger": "5", "maxMessagesPerTrigger": "5"}, "maxMessagesPerTrigger", "again"),
            ({"topic": "A", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger", "positive"),
            ({"topicPattern": "(Orders"}, "topicPattern", "regular expression"),
            ({"topic": "A", "startingOffsets": "{bad"}, "startingOffsets", "earliest, latest, group or JSON"),
            ({"topic": "A", "startingOffsets": '{"A": {"0": -3}}'}, "startingOffsets", "A/0"),
            ({"topic": "A", "startingOffsets": '{"A": {"x": 1}}'}, "startingOffsets", "queue ids"),
            ({"topic": "A", "startingOffsets": "group"}, "startingOffsets", "group option"),
            ({"startingOffsets": "latest"}, "startingOffsets", "needs the topics"),
            ({"topic": "A", "endingOffsets": "earliest"}, "endingOffsets", "an end is latest"),
            ({"topic": "A", "endingOffsets": '{"A": {"0": -2}}'}, "endingOffsets", "-1 (latest)"),
            ({"topic": "A", "startingTimestamp": "yesterday"}, "startingTimestamp", "epoch milliseconds"),
            ({"topic": "A", "startingTimestamp": "1", "startingOffsets": "earliest"}, "startingTimestamp", "one of"),
            ({"topic": "A", "startingOffsetsByTimestamp": '{"A": {"0": "x"}}'}, "startingOffsetsByTimestamp", "A/0"),
            ({"failOnDataLoss": "maybe"}, "failOnDataLoss", "true or false"),
        ],
    )
    def test_refused_options_name_themselves(self, options, field, text):
        with pytest.raises(DataSourceOptionError) as e:
            SourceOptions.parse({"store": "/s", **options})
        assert e.value.field == field and text in str(e.value)

    @pytest.mark.parametrize(
        "options, field",
        [
            ({"topic": "A"}, "group"),
            ({"group": "G"}, "topic"),
            ({"group": "G", "topic": "A", "endingOffsets": "latest"}, "endingOffsets"),
            ({"group": "G", "topic": "A", "table": "messages_by_key"}, "table"),
        ],
    )
    def test_what_a_stream_needs(self, options, field):
        SourceOptions.parse({"store": "/s", **options})  # a batch read takes them
        with pytest.raises(DataSourceOptionError) as e:
            SourceOptions.parse({"store": "/s", **options}, streaming=True)
        assert e.value.field == field

    def test_topic_names_follow_rocketmq_rules(self):
        with pytest.raises(InvalidTopicError) as e:
            SourceOptions.parse({"store": "/s", "topics": "Orders,,Audit"})
        assert e.value.field == "topics"

    def test_every_option_is_in_the_guides_table(self):
        text = GUIDE.read_text()
        section = text[text.index("the `rocketmq` data source") :]
        table = [line for line in section.splitlines() if line.startswith("| `")]
        named = {n for line in table for cell in line.split("|")[1:3] for n in re.findall(r"`([^`]+)`", cell)}
        assert set(OPTIONS.values()) | set(ALIASES) <= named


class TestAtLoad:
    @pytest.mark.parametrize(
        "options, stream, error, names",
        [
            ({"store": "/nowhere/store"}, False, "StoreNotFoundError", "/nowhere/store"),
            ({"topics": "Orders,Nope"}, False, "TopicNotFoundError", "Nope"),
            ({"group": "Nobody", "subscribePattern": "Ord.*"}, True, "SubscriptionNotFoundError", "Orders"),
            ({"topic": "Orders", "endingOffsets": '{"Audit": {"0": 1}}'}, False, "DataSourceOptionError", "Audit"),
        ],
    )
    def test_a_bad_store_topic_group_or_option_fails_at_load(self, spark, orders, options, stream, error, names):
        store, _ = orders
        reader = (spark.readStream if stream else spark.read).format("rocketmq").option("store", store.root)
        for k, v in options.items():
            reader = reader.option(k, v)
        with pytest.raises(AnalysisException) as e:
            reader.load()
        assert f"storelib.model.errors.{error}" in str(e.value) and names in str(e.value)


class TestBatch:
    def test_offset_ranges_per_topic_and_queue_compose_with_filters(self, spark, audit):
        store, _ = audit
        df = (
            spark.read.format("rocketmq")
            .option("store", store.root)
            .option("topics", "Orders,Audit")
            .option("startingOffsets", '{"Orders": {"0": 2, "1": -2}}')
            .option("endingOffsets", '{"Orders": {"0": 5}, "Audit": {"1": 1}}')  # end exclusive, as Kafka's
            .load()
        )
        kept = (
            "topic = 'Orders' AND NOT (queue_id = 0 AND (queue_offset < 2 OR queue_offset >= 5))"
            " OR topic = 'Audit' AND NOT (queue_id = 1 AND queue_offset >= 1)"
        )
        same(df, store.messages().where(kept))  # Audit's not dispatched yet: read from the commitlog's tail
        same(
            df.where("queue_id = 0 AND queue_offset < 4"),
            store.messages().where(f"({kept}) AND queue_id = 0 AND queue_offset < 4"),
        )
        pattern = spark.read.format("rocketmq").option("store", store.root).option("subscribePattern", "Aud.*").load()
        same(pattern, store.messages().where("topic = 'Audit'"))

    def test_starting_at_a_time(self, spark, orders):
        store, sent = orders
        store.dispatch()
        at = int(store.query_by_id(sent[50].msg_id).store_timestamp.timestamp() * 1000)  # the late batch's time
        df = (
            spark.read.format("rocketmq")
            .option("store", store.root)
            .option("topic", "Orders")
            .option("startingTimestamp", str(at))
            .load()
        )
        same(df, store.messages("Orders").where("body = 'late'"))


class TestStream:
    def test_several_topics_with_kafka_names_and_offsets_per_topic(self, spark, audit, tmp_path):
        store, _ = audit
        store.subscribe("GM", "Orders", "T1 || T9")
        store.subscribe("GM", "Audit", "*")
        store.dispatch()
        out, ck = str(tmp_path / "out"), str(tmp_path / "ck")
        q = stream_once(  # the other queues start from the group's offsets
            spark,
            store,
            out,
            ck,
            group="GM",
            subscribe="Orders,Audit",
            startingOffsets='{"Orders": {"0": 3}}',
            maxOffsetsPerTrigger=20,
        )
        want = store.messages().where(
            "topic = 'Audit' OR topic = 'Orders' AND tags IN ('T1', 'T9') AND NOT (queue_id = 0 AND queue_offset < 3)"
        )
        same(spark.read.parquet(out), want)
        assert len([p for p in q.recentProgress if p["numInputRows"]]) > 1
        end = q.recentProgress[-1]["sources"][0]["endOffset"]
        maxima = {t: {str(i): store.max_queue_offset(t, i) for i in range(n)} for t, n in (("Audit", 2), ("Orders", 4))}
        assert (json.loads(end) if isinstance(end, str) else end) == maxima  # Kafka's JSON shape
        assert {
            (t, i): store.committed_offset("GM", t, i) for t, n in (("Audit", 2), ("Orders", 4)) for i in range(n)
        } == {(t, int(i)): o for t, queues in maxima.items() for i, o in queues.items()}

    def test_a_patterns_topics_are_fixed_at_start_and_new_ones_start_where_the_group_is(self, audit):
        store, _ = audit
        store.create_topic("AuditEU", queues=1)
        for topic in ("Audit", "AuditEU"):
            store.subscribe("GP", topic, "*")
        store.dispatch()
        reader = stream_reader(store, group="GP", topicPattern="Aud.*")
        start = reader.initialOffset()
        assert start == {"Audit": {"0": 0, "1": 0}, "AuditEU": {"0": 0}}
        store.create_topic("AuditUS", queues=1)
        store.subscribe("GP", "AuditUS", "*")
        late = store.send_batch([Message(t, body=b"new") for t in ("AuditEU", "AuditUS")])
        store.dispatch()
        end = reader.latestOffset(start, None)
        assert sorted(end) == ["Audit", "AuditEU"]  # AuditUS came after the query started
        again = stream_reader(store, group="GP", topicPattern="Aud.*")  # the query started again
        later = again.latestOffset(end, None)
        assert later["AuditUS"] == {"0": 0}  # new to the checkpoint: where the group is (earliest: it has none)
        last = again.latestOffset(later, None)
        assert [r["msg_id"] for r in rows(again, later, last)] == [late[1].msg_id]

    def test_starting_at_a_time_and_checkpoints_of_one_topic_streams(self, orders):
        store, sent = orders
        store.subscribe("GT", "Orders", "*")
        store.dispatch()
        at = int(store.query_by_id(sent[50].msg_id).store_timestamp.timestamp() * 1000)  # the late batch's time
        reader = stream_reader(store, group="GT", topic="Orders", startingTimestamp=str(at))
        start = reader.initialOffset()
        assert start["Orders"] == {str(i): min(s.queue_offset for s in sent[50:] if s.queue_id == i) for i in range(4)}
        old = {str(i): 10 for i in range(4)}  # a checkpoint written before streams took several topics
        end = reader.latestOffset(old, None)
        assert sorted(r["msg_id"] for r in rows(reader, old, end)) == sorted(
            s.msg_id for s in sent if s.queue_offset >= 10
        )
        store.create_topic("Audit", queues=1)
        store.subscribe("GT", "Audit", "*")
        with pytest.raises(DataSourceOptionError, match="new checkpoint"):
            stream_reader(store, group="GT", topics="Orders,Audit").latestOffset(old, None)

    def test_fail_on_data_loss(self, store):
        store.create_topic("Short", queues=1, retention_ms=1)
        store.subscribe("GL", "Short", "*")
        store.send_batch([Message("Short", body=b"old") for _ in range(3)])
        store.dispatch()
        store.expire_topics(now=time.time() * 1000 + 1_000)
        kept = store.send_batch([Message("Short", body=b"new") for _ in range(2)])
        store.dispatch()
        behind = {"Short": {"0": 0}}
        with pytest.raises(OffsetError, match="Short/0: offsets 0 to 2 were removed"):
            stream_reader(store, group="GL", topic="Short", failOnDataLoss="true").latestOffset(behind, None)
        reader = stream_reader(store, group="GL", topic="Short")  # as a RocketMQ consumer: on from the min offset
        end = reader.latestOffset(behind, None)
        assert end == {"Short": {"0": 5}} and [r["msg_id"] for r in rows(reader, behind, end)] == [
            k.msg_id for k in kept
        ]
