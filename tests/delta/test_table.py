"""Tables: real Delta tables, file skipping by statistics, schemas with comments, settings."""

from __future__ import annotations

import dataclasses
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from deltalake import DeltaTable
from pyspark.sql import functions as F

from storelib import Message, MessageStore, StoreConfig
from storelib.delta.compaction import compact_here
from storelib.delta.log import add_actions
from storelib.delta.orphans import orphan_files
from storelib.delta.spark_read import contiguous_groups
from storelib.delta.spec import TableSpec
from storelib.delta.stats import Prune
from storelib.delta.table import TOMBSTONE_RETENTION, Table
from storelib.delta.writer import write_rows
from storelib.model.errors import ConfigError, StoreStateError
from storelib.query.lookup import MessageQuery
from storelib.storage.schema import CONSUME_QUEUE, TABLES

ORDER = {
    "commitlog": ["physical_offset"],
    "consume_queue": ["topic", "queue_id", "queue_offset"],
    "index": ["key_hash", "commitlog_offset"],
}


def assert_same_rows(name, actual, expected):
    """chispa equality in the table's natural order (maps cannot be sorted on)."""
    assert_df_equality(
        actual.orderBy(*ORDER[name]), expected.orderBy(*ORDER[name]), ignore_nullable=True, ignore_metadata=True
    )


def fill(store, rounds=4, per_round=8):
    """Several sends and dispatches, so each table has several files."""
    for r in range(rounds):
        store.send_batch(
            [
                Message("TopicTest", body=f"{r}-{i}".encode(), keys=[f"k{r}-{i}"], queue_id=i % 4)
                for i in range(per_round)
            ]
        )
        store.dispatch()


class TestDelta:
    def test_tables_are_delta_tables_readable_by_deltalake(self, spark, store):
        fill(store, rounds=2)
        for name in ("commitlog", "consume_queue", "index"):
            rows = DeltaTable(store.context.tables.by_name()[name].path).to_pyarrow_table().to_pylist()
            rows = [{k: dict(v) if k == "properties" else v for k, v in r.items()} for r in rows]
            via_delta = spark.createDataFrame(rows, schema=store.table(name).schema)
            assert_same_rows(name, store.table(name), via_delta)

    def test_column_comments_are_in_the_delta_schema(self, store):
        schema = DeltaTable(store.context.tables.consume_queue.path).schema()
        comments = {f.name: f.metadata.get("comment") for f in schema.fields}
        assert comments["tags_code"].startswith("Java String.hashCode of TAGS")
        assert set(comments) == set(CONSUME_QUEUE.columns)
        assert all(comments.values())

    def test_spark_schema_carries_comments(self, store):
        field = store.table("commitlog").schema["physical_offset"]
        assert "running byte position" in field.metadata["comment"]

    def test_every_table_is_created(self, store):
        for name in TABLES:
            assert DeltaTable.is_deltatable(store.context.tables.by_name()[name].path)

    def test_existing_table_with_other_columns_is_refused(self, tmp_path):
        path = str(tmp_path / "t")
        DeltaTable.create(path, pa.schema([("x", pa.int64())]))
        with pytest.raises(StoreStateError):
            Table(path, CONSUME_QUEUE).ensure()


class TestTombstones:
    def test_local_tables_keep_tombstones_briefly_but_the_topic_configuration_a_week(self, store):
        for name, table in store.context.tables.by_name().items():
            conf = DeltaTable(table.path).metadata().configuration
            expected = None if name == "topic_config" else TOMBSTONE_RETENTION  # None: Delta's week
            assert conf.get("delta.deletedFileRetentionDuration") == expected, name

    def test_a_removed_file_outlives_its_tombstone_by_the_orphan_window_from_its_removal(self, spark, store_path):
        brief = StoreConfig(table_properties={"delta.deletedFileRetentionDuration": "interval 1 second"})
        store = MessageStore.create(store_path, spark, config=brief)
        store.create_topic("TopicTest", queues=4)
        fill(store, rounds=3)
        cq = store.context.tables.consume_queue
        written = sorted(add_actions(cq.snapshot()).column("path").to_pylist())
        two_days_ago = time.time() - 2 * 86400
        for path in written:  # as if written long ago: their age must count from their removal
            os.utime(f"{cq.path}/{path}", (two_days_ago, two_days_ago))
        assert compact_here(cq) == (len(written), 4)
        time.sleep(1.5)
        cq.snapshot().create_checkpoint()  # drops the expired tombstones
        assert cq.snapshot().vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False) == []
        assert all(os.path.exists(f"{cq.path}/{path}") for path in written)
        assert orphan_files(cq, min_age_s=3600) == []  # removed just now, though written two days ago
        assert orphan_files(cq, min_age_s=0) == written
        assert store.vacuum(retention_hours=0)["orphans"] == 0 and all(
            os.path.exists(f"{cq.path}/{p}") for p in written
        )
        store.subscribe("G", "TopicTest", "*")
        assert sorted(m.body for m in store.pull("G", "TopicTest", 0, 0, 32).messages) == [
            b"0-0",
            b"0-4",
            b"1-0",
            b"1-4",
            b"2-0",
            b"2-4",
        ]
        store.close()

    def test_a_table_made_with_a_week_of_tombstones_is_upgraded_when_opened_with_its_tombstones_stamped(self, tmp_path):
        spec = TableSpec("events", pa.schema([("id", pa.int64())]))
        old = Table(str(tmp_path / "events"), dataclasses.replace(spec, brief_tombstones=False)).ensure()
        for i in range(3):
            write_rows(old, old.snapshot(), pa.table({"id": [i]}), prefix="e")
        assert compact_here(old) == (3, 1)
        gone = sorted(old.snapshot().vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False))
        assert len(gone) == 3
        two_days_ago = time.time() - 2 * 86400
        for path in gone:  # removed before stamps existed
            os.utime(f"{old.path}/{path}", (two_days_ago, two_days_ago))
        assert "delta.deletedFileRetentionDuration" not in DeltaTable(old.path).metadata().configuration
        Table(old.path, spec).ensure()
        assert (
            DeltaTable(old.path).metadata().configuration["delta.deletedFileRetentionDuration"] == TOMBSTONE_RETENTION
        )
        assert all(os.path.getmtime(f"{old.path}/{path}") > two_days_ago + 86400 for path in gone)
        own = {"delta.deletedFileRetentionDuration": "interval 3 days"}  # a store's own setting is kept
        Table(str(tmp_path / "own"), spec, own).ensure()
        Table(str(tmp_path / "own"), spec).ensure()
        assert (
            DeltaTable(str(tmp_path / "own")).metadata().configuration["delta.deletedFileRetentionDuration"]
            == "interval 3 days"
        )


class TestFileSkipping:
    def test_one_queue_range_reads_one_file(self, store):
        fill(store, rounds=4)
        cq = store.context.tables.consume_queue
        snapshot = cq.snapshot()
        every = cq.files(snapshot)
        assert len(every) == 4 * 4  # one file per queue per dispatch
        one = cq.files(snapshot, Prune(equal={"topic": "TopicTest", "queue_id": 2}, between={"queue_offset": (2, 3)}))
        assert len(one) == 1

    def test_consume_queue_range_rows(self, spark, store):
        fill(store, rounds=3)
        got = store.consume_queue("TopicTest", 1, begin=2, end=5).select("queue_offset").orderBy("queue_offset")
        assert [r.queue_offset for r in got.collect()] == [2, 3, 4]

    def test_commitlog_offset_range_skips_files(self, store):
        fill(store, rounds=3)
        cl = store.context.tables.commitlog
        snapshot = cl.snapshot()
        last = store.messages().agg(F.max("physical_offset")).first()[0]
        assert len(cl.files(snapshot, Prune(between={"physical_offset": (last, last)}))) == 1
        assert len(cl.files(snapshot)) == 3

    def test_index_key_hash_range_skips_files(self, store):
        fill(store, rounds=3, per_round=40)
        from storelib import index_key_hash

        ix = store.context.tables.index
        h = index_key_hash("TopicTest#k1-7")
        every = ix.files(ix.snapshot())
        kept = ix.files(ix.snapshot(), Prune(between={"key_hash": (h, h)}))
        # Random UNIQ_KEYs may put another file's key range around h too; the one holding it is always kept.
        holding = [f for f in every if h in pq.read_table(f, columns=["key_hash"]).column(0).to_pylist()]
        assert len(holding) == 1 and set(holding) <= set(kept) and len(kept) <= len(every) / 4


class TestContiguousGroups:
    """How a job over files cuts them into tasks: contiguous, in order, about equal in size."""

    @pytest.mark.parametrize(
        "sizes, groups, expected",
        [
            ([10, 10, 10, 10], 2, [[0, 1], [2, 3]]),
            ([99, 99, 100, 100], 2, [[0, 1], [2, 3]]),  # first items a little smaller: still 2 + 2
            ([100, 100, 99, 99], 2, [[0, 1], [2, 3]]),
            ([10, 10, 10, 30], 2, [[0, 1, 2], [3]]),
            ([5, 5, 5], 4, [[0], [1], [2]]),
            ([1, 1, 1, 1, 1, 1], 3, [[0, 1], [2, 3], [4, 5]]),
            ([0, 0, 0], 2, [[0, 1, 2]]),
            ([], 2, []),
        ],
    )
    def test_runs(self, sizes, groups, expected):
        assert contiguous_groups(list(range(len(sizes))), sizes, groups) == expected


class TestConfig:
    def test_defaults_are_rocketmq_defaults(self):
        c = StoreConfig()
        assert (
            c.max_message_size,
            c.message_index_enable,
            c.max_hash_slot_num,
            c.max_error_rate_of_bloom_filter,
            c.expect_consumer_num_use_filter,
        ) == (4 * 1024 * 1024, True, 5_000_000, 20, 32)

    def test_filtering_is_on_by_default_and_can_be_turned_off(self):
        c = StoreConfig()
        assert (c.enable_consume_queue_ext, c.enable_property_filter, c.enable_calc_filter_bitmap) == (True, True, True)
        off = StoreConfig.from_mapping({"spark.storelib.enable_property_filter": "false"})
        assert off.enable_property_filter is False

    def test_from_spark_settings(self):
        c = StoreConfig.from_mapping({"spark.storelib.max_message_size": "1024", "spark.master": "local"})
        assert c.max_message_size == 1024

    @pytest.mark.parametrize(
        "conf",
        [
            {"spark.storelib.max_message_size": "big"},
            {"spark.storelib.nope": "1"},
            {"spark.storelib.store_host": "localhost"},
        ],
    )
    def test_bad_settings(self, conf):
        with pytest.raises(ConfigError):
            StoreConfig.from_mapping(conf)

    def test_store_host_goes_into_message_ids(self, spark, store_path):
        from storelib import MessageStore, decode_message_id

        store = MessageStore.create(store_path, spark, store_host="10.1.2.3:9876")
        store.create_topic("TopicTest")
        r = store.send(Message("TopicTest", body=b"x"))
        assert decode_message_id(r.msg_id) == ("10.1.2.3", 9876, 0)


class TestCompaction:
    def test_compaction_keeps_rows_and_clustering(self, spark, store):
        fill(store, rounds=5)
        before = {n: store.table(n).collect() for n in ("commitlog", "consume_queue", "index")}
        counts = {
            n: len(store.context.tables.by_name()[n].files(store.context.tables.by_name()[n].snapshot()))
            for n in before
        }
        result = store.compact()
        for name, rows in before.items():
            after = store.table(name)
            assert_same_rows(name, after, spark.createDataFrame(rows, after.schema))
            removed, added = result[name]
            assert added < removed <= counts[name]
        clusters = {
            "commitlog": 1,
            "consume_queue": 4,
            "index": store.table("index").select("hash_range").distinct().count(),
        }
        for name, n in clusters.items():  # one file per cluster is left
            assert len(store.context.tables.by_name()[name].files(store.context.tables.by_name()[name].snapshot())) == n
        cq = store.context.tables.consume_queue
        assert len(cq.files(cq.snapshot())) == 4  # one file per queue
        one = cq.files(
            cq.snapshot(), Prune(equal={"topic": "TopicTest", "queue_id": 1}, between={"queue_offset": (0, 9)})
        )
        assert len(one) == 1
        assert store.dispatch_progress()["consume_queue"] == store.max_offset()  # markers survive compaction
        history = DeltaTable(cq.path).history(1)[0]
        assert history["storelib.operation"] == "OPTIMIZE"

    def test_compaction_then_more_sends(self, spark, store):
        fill(store, rounds=2)
        store.compact()
        fill(store, rounds=1)
        cq = (
            store.table("consume_queue")
            .groupBy("queue_id")
            .agg(F.count("*").alias("n"), F.max("queue_offset").alias("m"))
        )
        assert sorted((r.n, r.m) for r in cq.collect()) == [(6, 5)] * 4

    def test_full_compaction_leaves_disjoint_key_ranges(self, spark, store_path):
        """Files already large still get merged and sorted, so one key never spans two files of a range."""
        from storelib import MessageStore

        store = MessageStore.create(store_path, spark, target_file_size=4096)
        store.create_topic("TopicTest", queues=4)
        fill(store, rounds=3, per_round=60)
        store.compact()
        store.compact(full=True)
        ix = store.context.tables.index
        actions = pa.table(ix.snapshot().get_add_actions(flatten=True)).to_pylist()
        by_range: dict = {}
        for a in actions:
            assert a["min.hash_range"] == a["max.hash_range"]
            by_range.setdefault(a["min.hash_range"], []).append((a["min.key_hash"], a["max.key_hash"]))
        for spans in by_range.values():
            spans.sort()
            assert all(prev[1] <= nxt[0] for prev, nxt in zip(spans, spans[1:]))
        query = MessageQuery(store.context)
        found = query.by_key("TopicTest", "k1-7")
        assert len(found) == 1 and query.files_touched["index"] == 1


class TestWarmViews:
    """A warm view brought forward from the log entries alone equals a view loaded afresh."""

    @staticmethod
    def fresh(table):
        return Table(table.path, table.spec).view(markers=())

    def assert_same_view(self, warm, table):
        fresh = Table(table.path, table.spec)
        expected = fresh.view(markers=list(warm.markers))
        assert warm.version == expected.version, table.spec.name
        assert dict(warm.markers) == dict(expected.markers), table.spec.name
        by_path = lambda t: t.sort_by("path")  # noqa: E731
        assert by_path(warm.actions).equals(by_path(expected.actions)), table.spec.name

    def test_a_commitlog_view_keeps_only_the_statistics_its_readers_ask_for(self, store):
        from storelib.delta.log import add_actions

        t = Table(store.context.tables.commitlog.path, store.context.tables.commitlog.spec)
        t.view()
        fill(store, rounds=1)  # brought forward from the log: it fills the same columns
        kept = {c.split(".", 1)[1] for c in t.view().actions.column_names if c.startswith(("min.", "max."))}
        written = {c.split(".", 1)[1] for c in add_actions(t.snapshot()).column_names if c.startswith(("min.", "max."))}
        assert kept == set(t.spec.view_statistics) & written and len(kept) < len(written)
        assert not [c for c in t.view().actions.column_names if c.startswith("null_count.")]

    def test_rolled_forward_through_sends_dispatches_and_compaction(self, store):
        tables = {name: Table(t.path, t.spec) for name, t in store.context.tables.by_name().items()}
        wanted = {"commitlog": ["commitlog", "cq/TopicTest/0"], "consume_queue": ["reput"], "index": ["reput"]}
        for name, t in tables.items():
            t.view(markers=wanted.get(name, []))  # warm from the start
        steps = [
            lambda: fill(store, rounds=2),
            lambda: store.send(Message("TopicTest", queue_id=0)),
            lambda: store.compact(full=True, settle_ms=0),
            lambda: fill(store, rounds=1),
        ]
        for step in steps:
            step()
            for t in tables.values():
                self.assert_same_view(t.view(), t)

    def test_a_view_rolled_forward_reads_no_snapshot(self, store, monkeypatch):
        t = Table(store.context.tables.commitlog.path, store.context.tables.commitlog.spec)
        t.view(markers=["commitlog"])
        fill(store, rounds=1)
        monkeypatch.setattr(t, "_warm", None)  # a load would be needed to answer without the log entries
        monkeypatch.setattr(Table, "snapshot", lambda self, version=None: pytest.fail("loaded a snapshot"))
        view = t.view()
        monkeypatch.undo()
        assert view.marker("commitlog") == store.max_offset()
        self.assert_same_view(view, t)

    def test_a_view_looked_at_within_the_interval_never_reloads(self, store, monkeypatch):
        """Each look is timed from the last: a view looked at more often than VIEW_RELOAD_S rolls forward for as
        long as it is looked at (a reload on an object store costs a listing and reads of the log)."""
        import storelib.delta.table as table_module

        monkeypatch.setattr(table_module, "VIEW_RELOAD_S", 0.5)
        t = Table(store.context.tables.commitlog.path, store.context.tables.commitlog.spec)
        t.view(markers=["commitlog"])
        monkeypatch.setattr(t, "_warm", None)  # a reload would need a snapshot
        monkeypatch.setattr(t, "snapshot", lambda version=None: pytest.fail("reloaded"))
        for _ in range(6):  # 1.5 s of looks, three times the interval
            store.send(Message("TopicTest", body=b"x"))
            time.sleep(0.25)
            assert t.view(markers=["commitlog"]).marker("commitlog") == store.max_offset()
        monkeypatch.undo()
        self.assert_same_view(t.view(), t)

    def test_reload_after_the_interval_gives_the_same_view(self, store, monkeypatch):
        import storelib.delta.table as table_module

        t = Table(store.context.tables.consume_queue.path, store.context.tables.consume_queue.spec)
        t.view(markers=["reput"])
        fill(store, rounds=2)
        monkeypatch.setattr(table_module, "VIEW_RELOAD_S", 0.0)
        self.assert_same_view(t.view(), t)


class TestByteLRU:
    """The per-process cache of decoded files and footers (storelib.delta.files.ByteLRU)."""

    @staticmethod
    def together(n, ask):
        import threading

        start, got = threading.Barrier(n), [None] * n

        def one(i):
            start.wait()
            try:
                got[i] = ask()
            except Exception as e:  # noqa: BLE001  (what each thread got is the answer)
                got[i] = e

        threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        return got

    def test_threads_asking_for_a_key_being_built_wait_for_that_build(self):
        import time

        from storelib.delta.files import ByteLRU

        cache, builds = ByteLRU(1000), []

        def build():
            builds.append(1)
            time.sleep(0.2)  # the others ask meanwhile
            return "decoded", 10

        assert self.together(4, lambda: cache.get("f", build)) == ["decoded"] * 4
        assert len(builds) == 1 and len(cache) == 1

    def test_a_failed_build_fails_every_asker_and_keeps_nothing(self):
        from storelib.delta.files import ByteLRU

        cache = ByteLRU(1000)

        def build():
            raise OSError("unreadable")

        assert all(isinstance(e, OSError) for e in self.together(3, lambda: cache.get("f", build)))
        assert len(cache) == 0 and cache.get("f", lambda: ("later", 1)) == "later"


class TestPointReads:
    def test_small_files_read_from_the_cache_equal_a_scan(self, store):
        import pyarrow.compute as pc
        import pyarrow.dataset as ds

        from storelib.delta.files import small_file

        fill(store, rounds=3)
        t = store.context.tables.commitlog
        paths = t.files(t.snapshot())
        assert all(small_file(p, t.spec.arrow) is not None for p in paths)  # kept decoded
        test = pc.field("queue_id") == 1
        cached = t.read_arrow(paths=paths, columns=["physical_offset", "body"], filter=test).sort_by("physical_offset")
        scanned = (
            ds.dataset(paths, schema=t.spec.arrow, format="parquet")
            .to_table(columns=["physical_offset", "body"], filter=test)
            .sort_by("physical_offset")
        )
        assert cached.num_rows == 6 and cached.equals(scanned)

    def test_a_point_read_of_some_columns_decodes_and_keeps_only_those(self, store, monkeypatch):
        import storelib.delta.files as files

        monkeypatch.setattr(files, "_small", files.ByteLRU(files.SMALL_FILE_CACHE_BYTES))
        fill(store, rounds=2)
        t = store.context.tables.commitlog
        paths = t.files(t.snapshot())
        everything = t.read_keyed(paths, "physical_offset", between=(0, 1 << 40))
        bodies = t.read_keyed(paths, "physical_offset", between=(0, 1 << 40), columns=["body"])
        assert everything.num_rows == t.read_arrow().num_rows >= 16 and bodies.column_names == ["body"]
        assert bodies.equals(everything.select(["body"]))
        kept = {tuple(rows.column_names) for key, (rows, _) in files._small._values.items() if key.startswith(t.path)}
        assert kept == {tuple(t.spec.columns), ("physical_offset", "body")}  # the key column, to find the rows

    @pytest.mark.parametrize("read_bytes", [4 << 20, 0])  # read whole into memory, or through the parsed footer
    def test_a_small_file_decodes_the_same_either_way(self, store, tmp_path, monkeypatch, read_bytes):
        import pyarrow.dataset as ds

        import storelib.delta.files as files

        monkeypatch.setattr(files, "SMALL_FILE_READ_BYTES", read_bytes)
        monkeypatch.setattr(files, "_small", files.ByteLRU(files.SMALL_FILE_CACHE_BYTES))
        fill(store, rounds=2)
        t = store.context.tables.commitlog
        some = pa.schema([t.spec.arrow.field(c) for c in ("physical_offset", "queue_id", "properties")])
        for p in t.files(t.snapshot()):
            assert files.small_file(p, t.spec.arrow).equals(ds.dataset(p, schema=t.spec.arrow).to_table())
            assert files.small_file(p, some).equals(ds.dataset(p, schema=t.spec.arrow).to_table(columns=some.names))
        # a file written before a column was added: the column comes back null
        older = str(tmp_path / "older.parquet")
        pq.write_table(pa.table({"physical_offset": pa.array([7, 9], pa.int64())}), older)
        for schema in (t.spec.arrow, some):
            rows = files.small_file(older, schema)
            assert rows.schema.names == schema.names and rows.column("physical_offset").to_pylist() == [7, 9]
            assert rows.column("queue_id").null_count == 2
        monkeypatch.setattr(files, "SMALL_FILE_ROWS", 1)  # too many rows: read by row groups instead
        monkeypatch.setattr(files, "_small", files.ByteLRU(files.SMALL_FILE_CACHE_BYTES))
        assert files.small_file(older, t.spec.arrow) is None


def test_commits_clean_up_expired_log_entries_at_most_once_per_interval(tmp_path, monkeypatch):
    from storelib.delta import commit as delta_commit
    from storelib.storage.schema import TOPIC_CONFIG

    t = Table(
        str(tmp_path / "t"),
        TOPIC_CONFIG,
        properties={"delta.checkpointInterval": "2", "delta.logRetentionDuration": "interval 0 seconds"},
    ).ensure()
    entries = lambda: len(list((tmp_path / "t" / "_delta_log").glob("*.json")))  # noqa: E731

    def commit(n):
        for i in range(n):
            with t.commit_turn() as dt:
                t.commit(dt, [], markers={"m": i})

    monkeypatch.setattr(delta_commit, "LOG_CLEANUP_EVERY_S", 3600.0)
    commit(1)  # a handle's first commit cleans up; then none for the hour
    before = entries()
    commit(8)
    assert entries() == before + 8
    monkeypatch.setattr(delta_commit, "LOG_CLEANUP_EVERY_S", 0.0)
    commit(1)  # due: everything before the newest checkpoint and past retention goes
    assert entries() <= 2
    assert Table.marker(t.snapshot(), "m") == 0 and t.snapshot().version() == 10  # created, then 10 commits


def test_a_turn_inside_a_turn_takes_its_snapshot_until_a_commit_is_tried(tmp_path):
    """A group commit holds the turn, brings the snapshot forward, takes its group, then appends inside a second
    hold: that hold takes the same snapshot (no look again: a round trip on an object store). Another writer's
    commit meanwhile is refused at the commit, as it would be on an object store; after any commit is tried, a
    hold inside looks again, bringing the same snapshot forward (a refused commit leaves it behind, not broken:
    a fresh load would read the table's whole log again)."""
    from storelib.delta.commit import CommitConflict
    from storelib.storage.schema import TOPIC_CONFIG

    t = Table(str(tmp_path / "t"), TOPIC_CONFIG).ensure()
    other = Table(t.path, TOPIC_CONFIG)  # another writer: a process of its own
    with t.commit_turn() as outer:
        assert outer is not None
        seen = outer.version()
        other.commit(other.snapshot(), [], markers={"m": 1})  # lands while the turn is held
        with pytest.raises(CommitConflict):
            with t.commit_turn() as inner:
                assert inner is outer and inner.version() == seen  # taken as the outer hold brought it
                t.commit(inner, [], markers={"m": 2})
        with t.commit_turn() as again:  # a commit was tried: this hold looks again
            assert again is outer and again.version() == seen + 1
            assert t.commit(again, [], markers={"m": 3}) == seen + 2
        with t.commit_turn() as after:
            assert after is not None and after.version() == seen + 2  # and after a commit that landed, too
    assert Table.marker(t.snapshot(), "m") == 3


def test_rows_delta_rs_writes_pass_commits_that_set_none_of_their_markers_and_are_refused_by_one_that_did(tmp_path):
    """``commit_rows``: delta-rs writes the file and keeps the snapshot of the commit (the handle moves to it, and
    the warm view holds it as committed). With ``rebase`` it lands after commits made since its snapshot that
    set none of its markers (a merge); one that set a marker it sets (another append) refuses it, its offsets
    computed from a marker that moved. Without ``rebase`` any commit since refuses it."""
    from storelib.delta.commit import CommitConflict
    from storelib.delta.sink import writer_properties

    spec = TableSpec("t", pa.schema([("id", pa.int64())]))
    t = Table(str(tmp_path / "t"), spec).ensure()
    other = Table(t.path, spec)  # another writer: a process of its own
    rows = pa.table({"id": pa.array([1, 2], pa.int64())})
    props = writer_properties(spec)
    with t.commit_turn() as dt:
        assert t.commit_rows(dt, rows, props, markers={"end": 2}) == dt.version() == 1
    assert t.view(markers=["end"]).marker("end") == 2 and t.view().actions.num_rows == 1
    stale = t.snapshot()
    other.commit(other.snapshot(), [], markers={"progress": 7})  # sets none of the append's markers
    with pytest.raises(CommitConflict):
        t.commit_rows(t.snapshot(1), rows, props, markers={"end": 4})  # exactly the next version, or nothing
    assert t.commit_rows(stale, rows, props, markers={"end": 4}, rebase=True) == stale.version() == 3
    stale = t.snapshot()
    other.commit(other.snapshot(), [], markers={"end": 5})  # an append: it moved the marker this one read
    with pytest.raises(CommitConflict):
        t.commit_rows(stale, rows, props, markers={"end": 6}, rebase=True)
    assert t.read_arrow().num_rows == 4 and Table.marker(t.snapshot(), "end") == 5
    assert Table.marker(t.snapshot(), "progress") == 7


class TestLogChanges:
    """Bringing a view forward from log entries alone (storelib.delta.log)."""

    @staticmethod
    def entries(root, *versions):
        log = root / "_delta_log"
        log.mkdir(parents=True)
        for v, lines in enumerate(versions, start=1):
            (log / f"{v:020d}.json").write_text("\n".join(lines) + "\n")
        return str(root)

    @staticmethod
    def add(path):
        return '{"add": {"path": "%s", "size": 1, "modificationTime": 0, "dataChange": true, "stats": "{}"}}' % path

    @staticmethod
    def remove(path):
        return '{"remove": {"path": "%s", "dataChange": false}}' % path

    def test_a_file_added_then_removed_in_later_entries_is_neither_added_nor_kept(self, tmp_path):
        from storelib.delta.log import apply_changes, changes_since

        root = self.entries(
            tmp_path,
            [self.add("a"), self.add("b")],
            [self.remove("a"), self.remove("old"), self.add("c")],
            [self.add("a"), '{"txn": {"appId": "m", "version": 7}}'],
        )
        changes = changes_since(root, 0)
        assert [a["path"] for a in changes.adds] == ["b", "c", "a"]
        assert changes.removes == {"a", "old"}
        assert (changes.version, changes.txns, changes.metadata) == (3, {"m": 7}, False)
        later = changes_since(root, 1)
        assert ([a["path"] for a in later.adds], later.removes) == (["c", "a"], {"a", "old"})
        base = pa.table({"path": ["a", "b"], "size_bytes": [1, 1]})
        assert apply_changes(base, later).column("path").to_pylist() == ["b", "c", "a"]  # "a" once
        assert changes_since(root, 3).adds == []

    def test_an_entry_that_is_not_json_sends_the_reader_to_delta_rs(self, tmp_path):
        from storelib.delta.log import changes_since

        assert changes_since(self.entries(tmp_path, [self.add("a")], ["{not json"]), 0) is None
