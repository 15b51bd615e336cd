"""Finding messages: by id, by key (colliding hashes told apart), by unique key, by time; and from SQL."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from storelib import Message, create_message_id
from storelib.encoding.index_key import index_key_hash
from storelib.model.errors import MessageIdError, MessageNotFoundError, StoreError
from storelib.query.lookup import MessageQuery
from storelib.sql import SqlParameterError, register_views, run_file
from tests.stores import copied_per_test

ROOT = Path(__file__).resolve().parents[2]
SQL = ROOT / "sql"


def three_rounds(store) -> list:
    """Three rounds of sends (distinct store times), dispatched; ``order-1`` appears once per round."""
    results = []
    for r in range(3):
        batch = [
            Message(
                "TopicTest", body=f"r{r}-{i}".encode(), tags="TagA", keys=[f"order-{i}", f"round-{r}"], queue_id=i % 2
            )
            for i in range(4)
        ]
        results.append(store.send_batch(batch))
        time.sleep(0.02)
    store.dispatch()
    return results


#: ``(store, results)``: :func:`three_rounds` in a copy of a store made once, and its send results by round.
filled = copied_per_test(three_rounds)


class TestById:
    def test_round_trip(self, filled):
        store, rounds = filled
        for r in rounds[1]:
            m = store.query_by_id(r.msg_id)
            assert (m.msg_id, m.queue_id, m.queue_offset, m.commitlog_offset) == (
                r.msg_id,
                r.queue_id,
                r.queue_offset,
                r.commitlog_offset,
            )
            assert m.uniq_key == r.uniq_key and m.tags == "TagA"

    def test_lower_case_id(self, filled):
        store, rounds = filled
        assert store.query_by_id(rounds[0][2].msg_id.lower()).body == b"r0-2"

    def test_other_store_host(self, filled):
        store, rounds = filled
        with pytest.raises(MessageIdError, match="but this store is 127.0.0.1:10911"):
            store.query_by_id(create_message_id("10.0.0.9", 10911, 0))

    @pytest.mark.parametrize("bad", ["", "XYZ", "7F00000100002A9F000000000000000G", "7F0000010000"])
    def test_malformed(self, filled, bad):
        with pytest.raises(MessageIdError) as info:
            filled[0].query_by_id(bad)
        assert info.value.field == "msg_id"

    def test_offset_with_no_message(self, filled):
        store, _ = filled
        with pytest.raises(MessageNotFoundError) as info:
            store.query_by_id(create_message_id("127.0.0.1", 10911, store.max_offset() + 7))
        assert info.value.code == "QUERY_NOT_FOUND"


class TestByKey:
    def test_newest_first(self, filled):
        store, rounds = filled
        found = store.query_by_key("TopicTest", "order-1")
        assert [m.commitlog_offset for m in found] == [rounds[r][1].commitlog_offset for r in (2, 1, 0)]

    def test_max_num_and_time_range(self, filled):
        store, rounds = filled
        assert len(store.query_by_key("TopicTest", "order-1", max_num=2)) == 2
        t1 = store.query_by_id(rounds[1][0].msg_id).store_timestamp
        middle = store.query_by_key("TopicTest", "order-1", begin=t1, end=t1)
        assert [m.commitlog_offset for m in middle] == [rounds[1][1].commitlog_offset]
        ms = int(t1.timestamp() * 1000)
        assert [m.commitlog_offset for m in store.query_by_key("TopicTest", "order-1", end=ms - 1)] == [
            rounds[0][1].commitlog_offset
        ]

    def test_max_num_is_capped_at_64(self, store):
        store.send_batch([Message("TopicTest", body=b"x", keys=["hot"]) for _ in range(70)])
        store.dispatch()
        assert len(store.query_by_key("TopicTest", "hot", max_num=1000)) == 64
        assert len(store.query_by_key("TopicTest", "hot")) == 32

    def test_colliding_keys_are_told_apart(self, store):
        assert index_key_hash("TopicTest#Aa") == index_key_hash("TopicTest#BB")
        a = store.send(Message("TopicTest", body=b"a", keys=["Aa"]))
        b = store.send(Message("TopicTest", body=b"b", keys=["BB"]))
        store.dispatch()
        assert [m.msg_id for m in store.query_by_key("TopicTest", "Aa")] == [a.msg_id]
        assert [m.msg_id for m in store.query_by_key("TopicTest", "BB")] == [b.msg_id]

    def test_other_topic_and_unknown_key(self, filled):
        store, _ = filled
        store.create_topic("Other")
        assert store.query_by_key("Other", "order-1") == []
        assert store.query_by_key("TopicTest", "no-such-key") == []

    @pytest.mark.parametrize(
        "kwargs", [{"max_num": 0}, {"key": ""}, {"begin": "yesterday"}, {"begin": dt.datetime(2024, 1, 1)}]
    )
    def test_bad_arguments(self, filled, kwargs):
        args = {"topic": "TopicTest", "key": "order-1", **kwargs}
        with pytest.raises(StoreError):
            filled[0].query_by_key(**args)

    def test_unique_key(self, filled):
        store, rounds = filled
        r = rounds[2][3]
        assert store.query_by_unique_key("TopicTest", r.uniq_key).msg_id == r.msg_id
        with pytest.raises(MessageNotFoundError):
            store.query_by_unique_key("TopicTest", "order-1")  # a KEYS key is not a UNIQ_KEY

    def test_lookup_touches_one_index_and_one_commitlog_file_after_compaction(self, filled):
        store, rounds = filled
        store.compact()
        query = MessageQuery(store.context)
        found = query.by_key("TopicTest", "round-1")
        assert len(found) == 4
        assert query.files_touched == {"index": 1, "commitlog": 1}


class TestSearchOffset:
    def test_boundaries(self, filled):
        store, rounds = filled
        times = [store.query_by_id(rounds[r][0].msg_id).store_timestamp for r in range(3)]
        q = 0  # two messages of queue 0 per round
        assert store.search_offset("TopicTest", q, times[0] - dt.timedelta(days=1)) == 0
        assert store.search_offset("TopicTest", q, times[0]) == 0
        assert store.search_offset("TopicTest", q, times[1]) == 2
        assert store.search_offset("TopicTest", q, times[1] + dt.timedelta(milliseconds=1)) == 4
        assert store.search_offset("TopicTest", q, times[2] + dt.timedelta(days=1)) == 6
        assert store.search_offset("TopicTest", 3, times[0]) == 0  # empty queue
        assert store.search_offset("TopicTest", q, int(times[2].timestamp() * 1000) + 1) == 6


class TestSql:
    def test_messages_by_key_equals_python(self, spark, filled):
        store, _ = filled
        register_views(spark, store)
        rows = run_file(
            spark, SQL / "messages_by_key.sql", {"topic": "TopicTest", "key": "order-1", "max_num": 2}
        ).collect()
        python = store.query_by_key("TopicTest", "order-1", max_num=2)
        assert [(r.msg_id, r.commitlog_offset, r.queue_offset) for r in rows] == [
            (m.msg_id, m.commitlog_offset, m.queue_offset) for m in python
        ]

    def test_message_by_id_equals_python(self, spark, filled):
        store, rounds = filled
        register_views(spark, store)
        r = rounds[1][2]
        row = run_file(spark, SQL / "message_by_id.sql", {"msg_id": r.msg_id.lower()}).collect()
        m = store.query_by_id(r.msg_id)
        assert len(row) == 1
        assert (row[0].msg_id, row[0].commitlog_offset, bytes(row[0].body), dict(row[0].properties)) == (
            m.msg_id,
            m.commitlog_offset,
            m.body,
            m.properties,
        )

    def test_messages_by_time_equals_dataframe(self, spark, filled):
        store, rounds = filled
        register_views(spark, store)
        t0 = store.query_by_id(rounds[1][0].msg_id).store_timestamp
        got = run_file(spark, SQL / "messages_by_time.sql", {"topic": "TopicTest", "begin": t0, "end": t0})
        want = (
            store.messages("TopicTest")
            .where(F.col("store_timestamp") == t0)
            .orderBy("physical_offset")
            .select(
                "msg_id",
                "topic",
                "queue_id",
                "queue_offset",
                F.col("physical_offset").alias("commitlog_offset"),
                "store_timestamp",
                "tags",
                "keys",
            )
        )
        assert_df_equality(got, want, ignore_nullable=True, ignore_metadata=True)
        firsts = {r.queue_id: r.queue_offset for r in got.collect()[::-1]}
        assert firsts == {q: store.search_offset("TopicTest", q, t0) for q in firsts}

    def test_parameters_are_bound_not_formatted(self, spark, filled):
        store, _ = filled
        register_views(spark, store)
        sneaky = "order-1' OR '1'='1"
        assert run_file(spark, SQL / "messages_by_key.sql", {"topic": "TopicTest", "key": sneaky}).count() == 0

    def test_missing_and_unknown_parameters(self, spark, filled):
        register_views(spark, filled[0])
        with pytest.raises(SqlParameterError, match="needs :key"):
            run_file(spark, SQL / "messages_by_key.sql", {"topic": "TopicTest"})
        with pytest.raises(SqlParameterError, match="not \\['colour'\\]"):
            run_file(spark, SQL / "message_by_id.sql", {"msg_id": "x", "colour": "red"})

    def test_every_sql_file_documents_a_one_liner(self):
        for path in SQL.glob("*.sql"):
            assert f"--   storelib sql {path.stem}" in path.read_text(), path.name
