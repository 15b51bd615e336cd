"""Consumer offsets: commit and query, last write wins, atomic batches, compaction, concurrent
committers (threads and processes), crashes between writing and committing, and consumer lag."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable

from storelib import Message, MessageStore
from storelib.delta.table import Table
from storelib.model.errors import InvalidTopicError, OffsetError
from storelib.storage.consumer_offset import ConsumerOffsetTable
from storelib.storage.schema import CONSUMER_OFFSET

LAG_DDL = "topic string, queue_id int, max_offset long, committed_offset long, lag long"


def version(store) -> int:
    return DeltaTable(store.context.tables.consumer_offset.path).version()


def data_files(store) -> int:
    return len(DeltaTable(store.context.tables.consumer_offset.path).file_uris())


def operations(store) -> list[str]:
    """The storelib operation of every commit after the table's creation, oldest first."""
    history = DeltaTable(store.context.tables.consumer_offset.path).history()
    return [h.get("storelib.operation") for h in sorted(history, key=lambda h: h["version"]) if h["version"] > 0]


def committer(store, **settings) -> ConsumerOffsetTable:
    """A committer of its own (own Table object), as another broker thread or client would have."""
    return ConsumerOffsetTable(
        Table(store.context.tables.consumer_offset.path, CONSUMER_OFFSET), store.config.replace(**settings)
    )


class TestCommitAndQuery:
    def test_round_trip(self, store):
        before = version(store)
        store.commit_offset("GroupA", "TopicTest", 1, 42)
        assert version(store) == before + 1
        assert store.committed_offset("GroupA", "TopicTest", 1) == 42
        assert store.context.offsets.commit("GroupA", "TopicTest", 2, 7) == before + 2
        assert store.committed_offset("GroupA", "TopicTest", 2) == 7
        assert operations(store) == ["COMMIT_OFFSET", "COMMIT_OFFSET"]

    def test_minus_one_when_none(self, store):
        assert store.committed_offset("GroupA", "TopicTest", 0) == -1
        store.commit_offset("GroupA", "TopicTest", 0, 5)
        assert store.committed_offset("GroupA", "TopicTest", 1) == -1  # another queue
        assert store.committed_offset("GroupB", "TopicTest", 0) == -1  # another group
        assert store.committed_offset("GroupA", "OtherTopic", 0) == -1  # another topic

    def test_last_write_wins_also_backwards(self, store):
        versions = [store.context.offsets.commit("GroupA", "TopicTest", 0, o) for o in (10, 20, 5, 0)]
        assert versions == sorted(versions) and len(set(versions)) == 4
        assert store.committed_offset("GroupA", "TopicTest", 0) == 0
        store.commit_offset("GroupA", "TopicTest", 0, 3)
        assert store.committed_offset("GroupA", "TopicTest", 0) == 3

    def test_commit_many_is_one_atomic_commit(self, store):
        store.commit_offset("GroupA", "TopicTest", 0, 1)
        before = version(store)
        entries = {("TopicTest", q): 100 + q for q in range(4)} | {("%RETRY%GroupA", 0): 9}
        assert store.context.offsets.commit_many("GroupA", entries) == before + 1
        assert version(store) == before + 1
        assert {k: store.committed_offset("GroupA", *k) for k in entries} == entries
        assert (
            DeltaTable(store.context.tables.consumer_offset.path).history(1)[0]["storelib.operation"] == "COMMIT_OFFSET"
        )
        assert store.context.offsets.commit_many("GroupA", {}) == before + 1  # nothing to commit: nothing written
        assert version(store) == before + 1

    def test_offsets_are_the_latest_row_per_queue(self, store):
        store.context.offsets.commit_many("GroupA", {("TopicTest", 0): 4, ("TopicTest", 1): 8})
        store.context.offsets.commit_many("GroupB", {("TopicTest", 0): 1})
        v = store.context.offsets.commit("GroupA", "TopicTest", 0, 2)
        rows = store.context.offsets.offsets().select(["consumer_group", "topic", "queue_id", "offset"]).to_pylist()
        assert rows == [
            {"consumer_group": "GroupA", "topic": "TopicTest", "queue_id": 0, "offset": 2},
            {"consumer_group": "GroupA", "topic": "TopicTest", "queue_id": 1, "offset": 8},
            {"consumer_group": "GroupB", "topic": "TopicTest", "queue_id": 0, "offset": 1},
        ]
        mine = store.context.offsets.offsets("GroupA")
        assert mine.column("offset").to_pylist() == [2, 8]
        assert mine.column("commit_version").to_pylist() == [v, v - 2]
        assert mine.schema.equals(CONSUMER_OFFSET.arrow, check_metadata=False)
        assert store.context.offsets.offsets("GroupC").num_rows == 0


BAD = [
    (("Group A", "TopicTest", 0, 1), InvalidTopicError, "group"),
    (("", "TopicTest", 0, 1), InvalidTopicError, "group"),
    ((None, "TopicTest", 0, 1), InvalidTopicError, "group"),
    (("GroupA", "bad topic", 0, 1), InvalidTopicError, "topic"),
    (("GroupA", "T" * 128, 0, 1), InvalidTopicError, "topic"),
    (("GroupA", "TopicTest", -1, 1), OffsetError, "queue_id"),
    (("GroupA", "TopicTest", True, 1), OffsetError, "queue_id"),
    (("GroupA", "TopicTest", "0", 1), OffsetError, "queue_id"),
    (("GroupA", "TopicTest", 1.0, 1), OffsetError, "queue_id"),
    (("GroupA", "TopicTest", 2**31, 1), OffsetError, "queue_id"),
    (("GroupA", "TopicTest", 0, -1), OffsetError, "offset"),
    (("GroupA", "TopicTest", 0, None), OffsetError, "offset"),
    (("GroupA", "TopicTest", 0, 2.5), OffsetError, "offset"),
    (("GroupA", "TopicTest", 0, False), OffsetError, "offset"),
    (("GroupA", "TopicTest", 0, 2**63), OffsetError, "offset"),
]


class TestBadInput:
    @pytest.mark.parametrize("args, error, field", BAD, ids=[f"{f}-{i}" for i, (_, _, f) in enumerate(BAD)])
    def test_typed_error_and_nothing_written(self, store, args, error, field):
        before = version(store)
        with pytest.raises(error) as e:
            store.commit_offset(*args)
        assert e.value.field == field
        assert version(store) == before

    def test_one_bad_entry_fails_the_whole_batch(self, store):
        store.commit_offset("GroupA", "TopicTest", 0, 1)
        before = version(store)
        for entries, field in [
            ({("TopicTest", 0): 5, ("TopicTest", 1): -3}, "offset"),
            ({("TopicTest", 0): 5, ("TopicTest", -1): 3}, "queue_id"),
            ({("TopicTest", 0): 5, ("bad topic", 1): 3}, "topic"),
            ({("TopicTest", 0): 5, "TopicTest": 3}, "entries"),
            ([(("TopicTest", 0), 5)], "entries"),
        ]:
            with pytest.raises((OffsetError, InvalidTopicError)) as e:
                store.context.offsets.commit_many("GroupA", entries)
            assert e.value.field == field
        assert version(store) == before
        assert store.committed_offset("GroupA", "TopicTest", 0) == 1
        assert store.committed_offset("GroupA", "TopicTest", 1) == -1

    def test_query_checks_its_input(self, store):
        with pytest.raises(InvalidTopicError):
            store.committed_offset("Group A", "TopicTest", 0)
        with pytest.raises(OffsetError):
            store.committed_offset("GroupA", "TopicTest", -1)


class TestCompaction:
    def test_keeps_every_latest_value_and_bounds_files(self, spark, store_path):
        store = MessageStore.create(store_path, spark, consumer_offset_compact_files=3)
        store.create_topic("TopicTest", queues=4)
        want = {}
        for i in range(12):
            key = ("GroupA" if i % 3 else "GroupB", "TopicTest", i % 4)
            want[key] = (i * 7) % 5  # moves back and forth
            store.commit_offset(*key, want[key])
            assert data_files(store) <= 3
        # files after each commit: 1 2 3 4->1 2 3 4->1 2 3 4->1 2 3
        assert operations(store).count("COMMIT_OFFSET") == 12 and operations(store).count("COMPACT_OFFSETS") == 3
        latest = {
            (r["consumer_group"], r["topic"], r["queue_id"]): r["offset"]
            for r in store.context.offsets.offsets().to_pylist()
        }
        assert latest == want
        assert {k: store.committed_offset(*k) for k in want} == want

    def test_explicit_compact_leaves_one_file_of_latest_rows(self, store):
        for o in range(5):
            store.context.offsets.commit_many("GroupA", {("TopicTest", 0): o, ("TopicTest", 1): 10 - o})
        store.context.offsets.commit("GroupB", "TopicTest", 3, 8)
        before = store.context.offsets.offsets()
        assert data_files(store) == 6
        v = version(store)
        assert store.context.offsets.compact() == (6, 1)
        assert version(store) == v + 1 and data_files(store) == 1
        assert store.context.offsets.offsets() == before
        assert store.context.offsets.compact() == (0, 0)  # nothing left to merge
        assert DeltaTable(store.context.tables.consumer_offset.path).to_pyarrow_table().num_rows == 3
        assert store.committed_offset("GroupA", "TopicTest", 1) == 6

    def test_commit_landing_during_compaction_is_kept(self, store):
        for o in range(4):
            store.commit_offset("GroupA", "TopicTest", o, o)
        other = committer(store)
        raced = []

        def race(point):
            if point == "compact_written" and not raced:  # our rewrite is written, not committed
                raced.append(other.commit("GroupA", "TopicTest", 0, 99))

        compactor = ConsumerOffsetTable(store.context.tables.consumer_offset, store.config, fault=race)
        assert compactor.compact() == (5, 1)  # second attempt: four commits and the raced one
        assert raced and store.committed_offset("GroupA", "TopicTest", 0) == 99
        assert [store.committed_offset("GroupA", "TopicTest", q) for q in (1, 2, 3)] == [1, 2, 3]
        assert operations(store)[-2:] == ["COMMIT_OFFSET", "COMPACT_OFFSETS"]


class TestConcurrency:
    def test_threads_never_lose_a_commit(self, store):
        threads, rounds = 4, 10
        shared: list[tuple[int, int]] = []  # (version, offset) of each commit of the shared queue
        errors: list[BaseException] = []
        lock = threading.Lock()

        def work(t: int) -> None:
            offsets = committer(store, consumer_offset_compact_files=6)
            try:
                for r in range(rounds):
                    offsets.commit("GroupA", "TopicTest", 10 + t, r)  # a queue of its own
                    offset = 1000 * t + r
                    v = offsets.commit("GroupA", "TopicTest", 0, offset)  # the queue everyone commits
                    with lock:
                        shared.append((v, offset))
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert not errors, errors
        assert [store.committed_offset("GroupA", "TopicTest", 10 + t) for t in range(threads)] == [rounds - 1] * threads
        assert len({v for v, _ in shared}) == threads * rounds  # each commit its own version
        assert store.committed_offset("GroupA", "TopicTest", 0) == max(shared)[1]  # the last commit wins
        ops = operations(store)
        assert ops.count("COMMIT_OFFSET") == 2 * threads * rounds and "COMPACT_OFFSETS" in ops
        assert data_files(store) <= 6

    @pytest.mark.slow
    def test_two_processes_commit_different_queues(self, store, python_env):
        script = textwrap.dedent("""
            import sys
            from storelib.model.config import StoreConfig
            from storelib.storage.consumer_offset import ConsumerOffsetTable
            from storelib.storage.schema import CONSUMER_OFFSET
            from storelib.delta.table import Table

            root, first, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
            offsets = ConsumerOffsetTable(Table(root + "/consumer_offset", CONSUMER_OFFSET),
                                          StoreConfig(consumer_offset_compact_files=5))
            for r in range(rounds):
                offsets.commit_many("GroupP", {("TopicTest", first): r, ("TopicTest", first + 1): 2 * r})
                offsets.commit("GroupP", "TopicTest", 9, r)
        """)
        rounds = 12
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", script, store.root, str(first), str(rounds)],
                env=python_env,
                stderr=subprocess.PIPE,
                text=True,
            )
            for first in (0, 2)
        ]
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
        last = rounds - 1
        assert [store.committed_offset("GroupP", "TopicTest", q) for q in range(4)] == [last, 2 * last] * 2
        assert store.committed_offset("GroupP", "TopicTest", 9) == last
        ops = operations(store)
        assert ops.count("COMMIT_OFFSET") == 4 * rounds and "COMPACT_OFFSETS" in ops
        assert data_files(store) <= 5

    @pytest.mark.slow
    def test_killed_between_write_and_commit(self, store, python_env):
        store.commit_offset("GroupA", "TopicTest", 0, 5)
        before = version(store)
        script = textwrap.dedent("""
            import os, sys
            from storelib.model.config import StoreConfig
            from storelib.storage.consumer_offset import ConsumerOffsetTable
            from storelib.storage.schema import CONSUMER_OFFSET
            from storelib.delta.table import Table

            def die(point):
                if point == "written":
                    os._exit(86)

            table = Table(sys.argv[1] + "/consumer_offset", CONSUMER_OFFSET)
            offsets = ConsumerOffsetTable(table, StoreConfig(), fault=die)
            offsets.commit_many("GroupA", {("TopicTest", 0): 77, ("TopicTest", 1): 78})
        """)
        crashed = subprocess.run(
            [sys.executable, "-c", script, store.root], env=python_env, capture_output=True, text=True, timeout=120
        )
        assert crashed.returncode == 86, crashed.stderr[-2000:]
        folder = store.context.tables.consumer_offset.path
        on_disk = [f for f in os.listdir(folder) if f.endswith(".parquet")]
        assert len(on_disk) == data_files(store) + 1  # the dead process's file, never committed
        assert version(store) == before
        assert store.committed_offset("GroupA", "TopicTest", 0) == 5
        assert store.committed_offset("GroupA", "TopicTest", 1) == -1
        store.context.offsets.commit_many("GroupA", {("TopicTest", 0): 6, ("TopicTest", 1): 7})
        assert version(store) == before + 1
        store.context.offsets.compact()
        assert store.context.offsets.offsets().column("offset").to_pylist() == [6, 7]


class TestConsumerLag:
    def test_lag_of_subscribed_retry_and_committed_topics(self, spark, store):
        store.create_topic("OtherTopic", queues=2)
        store.create_topic("%RETRY%GroupA", queues=1)
        store.create_topic("Unrelated", queues=2)
        counts = {0: 3, 1: 1, 3: 2}
        store.send_batch(
            [Message("TopicTest", body=b"x", queue_id=q) for q, n in counts.items() for _ in range(n)]
            + [Message("OtherTopic", body=b"y", queue_id=1)] * 4
            + [Message("Unrelated", body=b"z")]
        )
        store.dispatch()
        store.subscribe("GroupA", "TopicTest", "*")
        store.subscribe("GroupB", "Unrelated", "*")
        store.commit_offset("GroupA", "TopicTest", 0, 2)
        store.commit_offset("GroupA", "TopicTest", 3, 2)
        store.commit_offset("GroupA", "OtherTopic", 1, 1)
        store.commit_offset("GroupB", "TopicTest", 1, 1)
        expected = spark.createDataFrame(
            [
                ("%RETRY%GroupA", 0, 0, 0, 0),
                ("OtherTopic", 0, 0, 0, 0),
                ("OtherTopic", 1, 4, 1, 3),
                ("TopicTest", 0, 3, 2, 1),
                ("TopicTest", 1, 1, 0, 1),
                ("TopicTest", 2, 0, 0, 0),
                ("TopicTest", 3, 2, 2, 0),
            ],
            LAG_DDL,
        )
        assert_df_equality(store.consumer_lag("GroupA"), expected)

    def test_unsubscribed_group_keeps_only_its_retry_queue_and_bad_group_is_refused(self, spark, store):
        assert_df_equality(store.consumer_lag("GroupC"), spark.createDataFrame([], LAG_DDL))
        store.subscribe("GroupC", "TopicTest", "TagA")  # as a heartbeat, creates %RETRY%GroupC
        store.unsubscribe("GroupC", "TopicTest")
        assert_df_equality(
            store.consumer_lag("GroupC"), spark.createDataFrame([("%RETRY%GroupC", 0, 0, 0, 0)], LAG_DDL)
        )
        with pytest.raises(InvalidTopicError) as e:
            store.consumer_lag("bad group")
        assert e.value.field == "group"

    def test_committed_queue_beyond_read_queues_is_shown(self, spark, store):
        store.send_batch([Message("TopicTest", body=b"x", queue_id=0)])
        store.dispatch()
        store.commit_offset("GroupD", "TopicTest", 7, 3)  # e.g. before the topic shrank
        expected = spark.createDataFrame(
            [
                ("TopicTest", 0, 1, 0, 1),
                ("TopicTest", 1, 0, 0, 0),
                ("TopicTest", 2, 0, 0, 0),
                ("TopicTest", 3, 0, 0, 0),
                ("TopicTest", 7, 0, 3, -3),
            ],
            LAG_DDL,
        )
        assert_df_equality(store.consumer_lag("GroupD"), expected)
