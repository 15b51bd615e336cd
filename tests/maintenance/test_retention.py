"""Retention: expired commitlog prefixes, then the consume queue, ext and index files that pointed into them."""

from __future__ import annotations

import datetime as dt
import os
import time

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from storelib import Message, MessageSelector
from storelib.delta.log import add_actions
from storelib.delta.table import Table
from storelib.dispatch.reput import Dispatcher
from storelib.maintenance.retention import DELETE_EXPIRED, clean_consume_queue
from storelib.model.errors import ConfigError, MessageNotFoundError
from storelib.storage.consume_queue import min_queue_marker, queue_offsets

HOUR_MS = 3_600_000
TABLES = ("commitlog", "consume_queue", "consume_queue_ext", "index")
QUEUED = ("consume_queue", "consume_queue_ext", "index")


def send_batches(store, count, start=0, queues=range(4)):
    """``count`` batches (one commit, so one commitlog file, each), one message per queue; their offsets."""
    batches = []
    for b in range(start, start + count):
        results = store.send_batch(
            [Message("TopicTest", body=b"x" * 100, queue_id=q, keys=[f"k{b}-{q}"]) for q in queues]
        )
        batches.append([r.commitlog_offset for r in results])
        time.sleep(0.005)  # each batch gets its own store time in milliseconds
    return batches


def stored_ms(store):
    """Store time of each stored message in epoch ms, by physical offset, read from the rows themselves."""
    rows = store.context.tables.commitlog.read_arrow(columns=["physical_offset", "store_timestamp"])
    micros = rows.column("store_timestamp").cast(pa.int64()).to_pylist()
    return {o: us // 1000 for o, us in zip(rows.column("physical_offset").to_pylist(), micros)}


def newest_ms(store, batch):
    times = stored_ms(store)
    return max(times[o] for o in batch)


def versions(store):
    return {name: store.context.tables.by_name()[name].snapshot().version() for name in TABLES}


def rows_from(store, name, min_phy):
    offset = "physical_offset" if name == "commitlog" else "commitlog_offset"
    return store.table(name).where(F.col(offset) >= min_phy)


def sortable(df):
    """Maps (commitlog properties) as sorted entry arrays: Spark cannot sort or compare maps."""
    return df.select(
        *[
            F.array_sort(F.map_entries(f.name)).alias(f.name) if f.dataType.typeName() == "map" else F.col(f.name)
            for f in df.schema.fields
        ]
    )


def assert_same_rows(actual, expected):
    assert_df_equality(
        sortable(actual), sortable(expected), ignore_row_order=True, ignore_nullable=True, ignore_metadata=True
    )


def test_prefix_removed_oldest_first_and_stops_at_first_unexpired(store):
    batches = send_batches(store, 4)
    store.dispatch()
    cut = batches[2][0]
    kept = store.messages().where(F.col("physical_offset") >= cut).persist()
    kept.count()
    # Batches 0 and 1 are 72 h old at this `now`, batches 2 and 3 are younger: the walk stops at batch 2.
    now = newest_ms(store, batches[1]) + 72 * HOUR_MS
    assert store.clean_commitlog(now=now - 1) == 1  # a millisecond earlier, batch 1 is still live
    assert store.min_offset() == batches[1][0]
    assert store.clean_commitlog(now=now) == 1
    assert store.min_offset() == cut
    assert_same_rows(store.messages(), kept)
    assert store.clean_commitlog(now=now) == 0  # nothing more has expired
    assert store.clean_commitlog(reserved_hours=1, now=newest_ms(store, batches[2]) + HOUR_MS - 1) == 0
    aware = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(
        milliseconds=newest_ms(store, batches[2]) + HOUR_MS
    )
    assert store.clean_commitlog(reserved_hours=1, now=aware) == 1
    assert store.min_offset() == batches[3][0]
    history = store.context.tables.commitlog.snapshot().history(1)[0]
    assert history["storelib.operation"] == DELETE_EXPIRED
    kept.unpersist()


def test_newest_file_is_always_kept(store):
    batches = send_batches(store, 2)
    store.dispatch()
    end = store.max_offset()
    far = dt.datetime(2999, 1, 1, tzinfo=dt.timezone.utc)
    assert store.clean_commitlog(reserved_hours=0, now=far) == 1
    assert store.clean_commitlog(reserved_hours=0, now=far) == 0
    assert store.min_offset() == batches[1][0] and store.max_offset() == end
    assert store.messages().count() == 4


def test_undispatched_data_is_never_removed(store):
    batches = send_batches(store, 3)
    store.dispatch()
    batches += send_batches(store, 2, start=3)  # sent, not dispatched
    far = 2**62
    assert store.clean_commitlog(now=far) == 3
    assert store.min_offset() == batches[3][0]

    # Dispatch that dies after the consume queues but before the index: the index's marker holds retention back.
    def die_before_index(step):
        if step == "index.written":
            raise RuntimeError("injected failure")

    with pytest.raises(RuntimeError, match="injected"):
        Dispatcher.of(store.context, fault=die_before_index).run()
    progress = store.dispatch_progress()
    assert progress["consume_queue"] == store.max_offset() > progress["index"] == batches[3][0]
    assert store.clean_commitlog(now=far) == 0

    result = store.dispatch()  # dispatch after cleaning: the index catches up from its own marker
    assert result.index_rows == 2 * 4 * 2  # batches 3 and 4: UNIQ_KEY and one key per message
    assert set(store.dispatch_progress().values()) == {store.max_offset()}
    assert store.clean_commitlog(now=far) == 1  # batch 3; batch 4 is the newest
    assert store.messages().count() == 4


def test_consume_queue_ext_and_index_follow_the_commitlog(store):
    """Files aligned with batches: everything below the new minimum goes, everything above stays as it was."""
    store.subscribe("GroupSql", "TopicTest", MessageSelector.by_sql("TAGS IS NOT NULL"))  # ext units for the topic
    batches = send_batches(store, 2)
    store.dispatch()
    batches += send_batches(store, 2, start=2)
    store.dispatch()
    maxes = {q: store.max_queue_offset("TopicTest", q) for q in range(4)}
    assert maxes == {q: 4 for q in range(4)}
    assert {store.min_queue_offset("TopicTest", q) for q in range(4)} == {0}
    min_phy = batches[2][0]
    before = {name: rows_from(store, name, min_phy).persist() for name in QUEUED}
    for df in before.values():
        df.count()

    now = newest_ms(store, batches[1]) + 72 * HOUR_MS
    assert store.clean_commitlog(now=now) == 2
    assert store.min_offset() == min_phy
    assert {store.min_queue_offset("TopicTest", q) for q in range(4)} == {0}  # the consume queue has not moved yet
    removed = store.clean_consume_queue()
    assert removed["consume_queue"] > 0 and removed["consume_queue_ext"] > 0 and removed["index"] > 0
    for name in QUEUED:
        assert_same_rows(store.table(name), before[name])  # exactly the rows at or above the minimum
        df_max = add_actions(store.context.tables.by_name()[name].snapshot()).column("max.commitlog_offset").to_pylist()
        assert min(df_max) >= min_phy
    assert {q: store.min_queue_offset("TopicTest", q) for q in range(4)} == {q: 2 for q in range(4)}
    assert {q: store.max_queue_offset("TopicTest", q) for q in range(4)} == maxes

    version = versions(store)
    assert store.clean_consume_queue() == {"consume_queue": 0, "consume_queue_ext": 0, "index": 0}
    assert store.delete_expired_files(now=now) == dict.fromkeys(TABLES, 0)
    assert versions(store) == version  # idempotent: the second run commits nothing
    for df in before.values():
        df.unpersist()

    # The minimums come from the Delta log alone: with every consume queue data file gone from disk they still answer.
    table = store.context.tables.consume_queue
    for path in table.files(table.snapshot()):
        os.remove(path)
    assert {q: store.min_queue_offset("TopicTest", q) for q in range(4)} == {q: 2 for q in range(4)}
    assert store.min_offset() == min_phy


def test_min_offsets_of_straddling_and_emptied_queues(store):
    """One dispatch over all batches: files straddle the minimum, and some queues lose every message."""
    batches = [
        send_batches(store, 1, queues=range(4))[0],
        send_batches(store, 1, start=1, queues=(0, 1))[0],
        send_batches(store, 1, start=2, queues=(0,))[0],
    ]
    store.dispatch()
    maxes = {0: 3, 1: 2, 2: 1, 3: 1}
    assert {q: store.max_queue_offset("TopicTest", q) for q in range(4)} == maxes
    cq_before = rows_from(store, "consume_queue", batches[2][0]).persist()
    cq_before.count()

    removed = store.delete_expired_files(now=2**62)
    assert removed["commitlog"] == 2 and store.min_offset() == batches[2][0]
    # Queue 0 keeps offset 2; queues 1-3 have nothing left in the commitlog: min = max (correctMinOffset).
    mins = {q: store.min_queue_offset("TopicTest", q) for q in range(4)}
    assert mins == {0: 2, 1: 2, 2: 1, 3: 1}
    assert {q: store.max_queue_offset("TopicTest", q) for q in range(4)} == maxes  # last files survive
    snapshot = store.context.tables.consume_queue.snapshot()
    assert snapshot.transaction_version(min_queue_marker("TopicTest", 1)) == 2
    assert_same_rows(rows_from(store, "consume_queue", batches[2][0]), cq_before)
    assert store.min_queue_offset("TopicTest", 9) == 0 and store.min_queue_offset("NoSuchTopic", 0) == 0

    version = versions(store)
    assert store.delete_expired_files(now=2**62) == dict.fromkeys(TABLES, 0)
    assert versions(store) == version
    cq_before.unpersist()


def test_queue_offsets_keep_the_moved_min_whichever_view_asked_first(store):
    """Per-version queue offsets (what every pull asks): a view that did not ask for a queue's ``cqmin``
    marker (a held pull's look) does not hide the moved minimum from one that did (the pull's)."""
    send_batches(store, 1, queues=range(4))
    send_batches(store, 1, start=1, queues=(0, 1))
    send_batches(store, 1, start=2, queues=(0,))
    store.dispatch()
    store.delete_expired_files(now=2**62)
    cq = store.context.tables.consume_queue
    fresh = Table(cq.path, cq.spec)  # as a consumer process that has not pulled yet holds it
    bare = fresh.view()
    assert queue_offsets(fresh, bare, "TopicTest", 1) == (0, 2)  # by the files alone
    marked = fresh.view(markers=[min_queue_marker("TopicTest", 1)])
    assert marked.version == bare.version and queue_offsets(fresh, marked, "TopicTest", 1) == (2, 2)
    got = store.get_message("G1", "TopicTest", 1, 0, 32)
    assert (got.status.name, got.next_begin_offset) == ("OFFSET_TOO_SMALL", 2)


def test_crash_between_steps_then_rerun_converges(store):
    store.subscribe("GroupSql", "TopicTest", MessageSelector.by_sql("TAGS IS NOT NULL"))  # ext units for the topic
    batches = send_batches(store, 2)
    store.dispatch()
    batches += send_batches(store, 2, start=2)
    store.dispatch()
    now = newest_ms(store, batches[1]) + 72 * HOUR_MS
    gone_id = store.query_by_key("TopicTest", "k0-1")[0].msg_id

    assert store.clean_commitlog(now=now) == 2  # ... and the process dies before the consume queue step
    # The consume queue still points into removed data (a pull there is MESSAGE_WAS_REMOVING); lookups do not crash.
    assert store.consume_queue("TopicTest", 1, 0, 1).count() == 1
    assert store.query_by_key("TopicTest", "k0-1") == []
    with pytest.raises(MessageNotFoundError):
        store.query_by_id(gone_id)

    def die_after_consume_queue(step):
        if step == "consume_queue.committed":
            raise RuntimeError("injected crash")

    with pytest.raises(RuntimeError, match="injected"):
        clean_consume_queue(store.context, fault=die_after_consume_queue)
    assert {store.min_queue_offset("TopicTest", q) for q in range(4)} == {2}

    rerun = store.delete_expired_files(now=now)
    assert rerun["commitlog"] == 0 and rerun["consume_queue"] == 0
    assert rerun["consume_queue_ext"] > 0 and rerun["index"] > 0
    for name in QUEUED:
        assert (
            min(add_actions(store.context.tables.by_name()[name].snapshot()).column("min.commitlog_offset").to_pylist())
            == store.min_offset()
            == batches[2][0]
        )
    assert store.query_by_key("TopicTest", "k0-1") == []
    assert [m.queue_offset for m in store.query_by_key("TopicTest", "k3-1")] == [3]
    assert store.delete_expired_files(now=now) == dict.fromkeys(TABLES, 0)


def test_dispatch_and_compact_after_cleaning(store):
    batches = send_batches(store, 3)
    store.dispatch()
    assert store.delete_expired_files(now=2**62)["commitlog"] == 2
    mins = {q: store.min_queue_offset("TopicTest", q) for q in range(4)}
    assert mins == {q: 2 for q in range(4)}

    send_batches(store, 2, start=3)
    result = store.dispatch()
    assert (
        result.from_offset
        == batches[2][-1] + store.messages().where(F.col("physical_offset") == batches[2][-1]).first()["size"]
    )
    assert result.consume_queue_rows == 8
    assert set(store.dispatch_progress().values()) == {store.max_offset()}
    assert {q: store.max_queue_offset("TopicTest", q) for q in range(4)} == {q: 5 for q in range(4)}
    new = store.consume_queue("TopicTest", 2, 3).orderBy("queue_offset").select("queue_offset").collect()
    assert [r.queue_offset for r in new] == [3, 4]

    min_offset = store.min_offset()
    before = {name: store.table(name).persist() for name in TABLES}
    for df in before.values():
        df.count()
    store.compact(full=True)
    for name, df in before.items():
        assert_same_rows(store.table(name), df)
        df.unpersist()
    assert store.min_offset() == min_offset
    assert {q: store.min_queue_offset("TopicTest", q) for q in range(4)} == mins  # markers survive compaction
    assert set(store.dispatch_progress().values()) == {store.max_offset()}


def test_empty_store(store):
    assert store.min_offset() == 0 and store.min_queue_offset("TopicTest", 0) == 0
    assert store.delete_expired_files(now=2**62) == dict.fromkeys(TABLES, 0)
    assert store.context.tables.commitlog.snapshot().version() == 0


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"reserved_hours": -1}, "reserved_hours"),
        ({"reserved_hours": True}, "reserved_hours"),
        ({"reserved_hours": float("nan")}, "reserved_hours"),
        ({"reserved_hours": "72"}, "reserved_hours"),
        ({"now": dt.datetime(2030, 1, 1)}, "now"),  # naive: which time zone?
        ({"now": "tomorrow"}, "now"),
    ],
)
def test_bad_input(store, kwargs, field):
    with pytest.raises(ConfigError) as e:
        store.delete_expired_files(**kwargs)
    assert e.value.field == field
    assert store.context.tables.commitlog.snapshot().version() == 0
