"""Per-topic retention: one topic's old messages go from files it shares with others, judged by an injected clock."""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from storelib import Message, MessageSelector, MessageStore
from storelib.consume.get_message import GetMessageStatus
from storelib.consume.pull import PullStatus
from storelib.delta.log import add_actions
from storelib.delta.table import Table
from storelib.maintenance.topic_retention import EXPIRE_TOPIC, expire_topics
from storelib.model.errors import ConfigError, MessageNotFoundError
from storelib.sql import register_views

HOUR_MS = 3_600_000
SHORT = "Short"
FAULTS = (
    "consume_queue.committed",
    "runs.recorded",
    "commitlog.written",
    "commitlog.summarized",
    "commitlog.committed",
    "consume_queue_ext.committed",
)


class Crash(Exception):
    pass


def send_shared(store, count, start=0):
    """``count`` batches, each one commit (one commitlog file) holding a message of each Short queue
    and of each TopicTest queue; per batch the SendResults of Short and of TopicTest."""
    batches = []
    for b in range(start, start + count):
        results = store.send_batch(
            [Message(SHORT, body=b"s" * 50, queue_id=q, keys=[f"s{b}-{q}"]) for q in range(2)]
            + [Message("TopicTest", body=b"t" * 80, queue_id=q, keys=[f"k{b}-{q}"]) for q in range(4)]
        )
        batches.append((results[:2], results[2:]))
        time.sleep(0.005)  # each batch its own store time in milliseconds
    return batches


def stored_ms(store, results):
    """The newest store time (epoch ms) of these sends, read from the commitlog rows."""
    offsets = [r.commitlog_offset for r in results]
    rows = store.context.tables.commitlog.read_arrow(columns=["physical_offset", "store_timestamp"])
    micros = dict(
        zip(rows.column("physical_offset").to_pylist(), rows.column("store_timestamp").cast(pa.int64()).to_pylist())
    )
    return max(micros[o] for o in offsets) // 1000


def make_store(spark, path, **settings):
    store = MessageStore.create(path, spark, **settings)
    store.create_topic("TopicTest", queues=4)
    store.create_topic(SHORT, queues=2, retention_ms=HOUR_MS)
    for topic in ("TopicTest", SHORT):  # SQL92 groups: the topics' messages get ext units, which retention cuts too
        store.subscribe(f"GroupSql{topic}", topic, MessageSelector.by_sql("TAGS IS NOT NULL"))
    return store


def sortable(df):
    """Maps (commitlog properties) as sorted entry arrays: Spark cannot sort or compare maps."""
    return df.select(
        *[
            F.array_sort(F.map_entries(f.name)).alias(f.name) if f.dataType.typeName() == "map" else F.col(f.name)
            for f in df.schema.fields
        ]
    ).drop("cluster_seq")


def assert_same_rows(actual, expected):
    assert_df_equality(
        sortable(actual), sortable(expected), ignore_row_order=True, ignore_nullable=True, ignore_metadata=True
    )


def frozen(df):
    """The rows now, independent of the files they came from (which expiry replaces)."""
    rows = df.collect()
    return df.sparkSession.createDataFrame(rows, df.schema) if rows else df.sparkSession.createDataFrame([], df.schema)


def offsets_of(batches, which):
    return [r.commitlog_offset for b in batches for r in b[which]]


def versions(store):
    return {n: t.snapshot().version() for n, t in store.context.tables.by_name().items()}


def scenario(store):
    """Four shared batches, dispatched; the clock at which the first two batches of Short have expired."""
    batches = send_shared(store, 4)
    store.dispatch()
    now = stored_ms(store, batches[1][0]) + HOUR_MS
    assert stored_ms(store, batches[2][0]) > now - HOUR_MS  # batch 2 is younger than the retention
    return batches, now


def assert_expired(store, spark, batches):
    """Short's batches 0-1 gone from every read; batches 2-3 and every TopicTest message still there."""
    kept = offsets_of(batches[2:], 0)
    short = store.messages(SHORT)
    assert sorted(r.physical_offset for r in short.select("physical_offset").collect()) == kept
    assert store.read(SHORT).count() == 4
    assert sorted(r.physical_offset for r in store.read(SHORT).select("physical_offset").collect()) == kept
    assert store.read("TopicTest").count() == 16
    for q in range(2):
        assert store.min_queue_offset(SHORT, q) == 2 and store.max_queue_offset(SHORT, q) == 4
        got = store.get_message("G", SHORT, q, 0)
        assert (got.status, got.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, 2)
        pulled = store.pull("G", SHORT, q, 1, selector="*")
        assert (pulled.status, pulled.next_begin_offset) == (PullStatus.OFFSET_ILLEGAL, 2)
        pulled = store.pull("G", SHORT, q, 2, selector="*")
        assert pulled.status == PullStatus.FOUND and [m.queue_offset for m in pulled.messages] == [2, 3]
        assert {q: store.min_queue_offset("TopicTest", q) for q in range(4)} == dict.fromkeys(range(4), 0)
        assert store.search_offset(SHORT, q, 0) == 2
        assert [r.queue_offset for r in store.consume_queue(SHORT, q).collect()] == [2, 3]
    gone = batches[0][0][1]
    assert store.query_by_key(SHORT, "s0-1") == [] and store.query_by_key(SHORT, "s1-0") == []
    assert [m.queue_offset for m in store.query_by_key(SHORT, "s2-1")] == [2]
    with pytest.raises(MessageNotFoundError):
        store.query_by_id(gone.msg_id)
    with pytest.raises(MessageNotFoundError):
        store.query_by_unique_key(SHORT, gone.uniq_key)
    assert store.query_by_id(batches[0][1][0].msg_id).topic == "TopicTest"
    assert [m.msg_id for m in store.query_by_key("TopicTest", "k0-3")] == [batches[0][1][3].msg_id]

    register_views(spark, store)
    assert spark.sql(f"SELECT count(*) AS n FROM commitlog WHERE topic = '{SHORT}'").first().n == 4
    assert spark.sql(f"SELECT count(*) AS n FROM messages WHERE topic = '{SHORT}'").first().n == 4
    assert (
        spark.sql(f"SELECT count(*) AS n FROM messages_by_key WHERE topic = '{SHORT}' AND key = 's1-1'").first().n == 0
    )
    assert (
        spark.sql(f"SELECT count(*) AS n FROM messages_by_key WHERE topic = '{SHORT}' AND key = 's3-1'").first().n == 1
    )
    assert spark.sql("SELECT count(*) AS n FROM messages WHERE topic = 'TopicTest'").first().n == 16
    for view in ("consume_queue", "consume_queue_ext"):  # units below the min offsets are not served
        rows = spark.sql(f"SELECT topic, queue_offset FROM {view} WHERE topic IN ('{SHORT}', 'TopicTest')").collect()
        assert sorted(r.queue_offset for r in rows if r.topic == SHORT) == [2, 2, 3, 3]
        assert sorted(r.queue_offset for r in rows if r.topic == "TopicTest") == sorted(list(range(4)) * 4)
    assert MessageStore.verify(store.root, spark, full=True) == []


def test_expired_messages_leave_every_read_and_the_other_topic_stays(spark, store_path):
    store = make_store(spark, store_path)
    batches, now = scenario(store)
    others = frozen(store.messages("TopicTest"))
    survivors = frozen(store.messages(SHORT).where(F.col("physical_offset").isin(offsets_of(batches[2:], 0))))

    assert store.expire_topics(now=now - 1) == {SHORT: 2}  # a millisecond earlier, batch 1 is still live
    assert store.min_queue_offset(SHORT, 0) == 1
    assert store.expire_topics(now=now) == {SHORT: 2}
    assert_same_rows(store.messages("TopicTest"), others)
    assert_same_rows(store.messages(SHORT), survivors)
    assert_expired(store, spark, batches)
    snapshot = store.context.tables.commitlog.snapshot()
    assert snapshot.history(1)[0]["storelib.operation"] == EXPIRE_TOPIC
    with open(os.path.join(store.context.tables.commitlog.path, "_delta_log", f"{snapshot.version():020d}.json")) as f:
        actions = [json.loads(line) for line in f]
    changes = [a[k]["dataChange"] for a in actions for k in ("add", "remove") if k in a]
    assert len(changes) >= 2 and all(changes)  # rows are gone: a data change, as Delta requires

    version = versions(store)
    assert store.expire_topics(now=now) == {SHORT: 0}
    assert versions(store) == version  # nothing left to do: nothing committed

    # Later on, the rest of Short expires too: each queue's min offset reaches its max offset.
    assert store.delete_expired_files(now=stored_ms(store, batches[3][0]) + HOUR_MS)["commitlog"] == 0
    assert store.messages(SHORT).count() == 0
    assert {q: (store.min_queue_offset(SHORT, q), store.max_queue_offset(SHORT, q)) for q in range(2)} == {
        0: (4, 4),
        1: (4, 4),
    }
    assert store.get_message("G", SHORT, 0, 4).status == GetMessageStatus.OFFSET_OVERFLOW_ONE
    assert_same_rows(store.messages("TopicTest"), others)
    assert MessageStore.verify(store.root, spark, full=True) == []
    assert MessageStore.open(store.root, spark).max_offset() == store.max_offset()


@pytest.mark.parametrize("fault", FAULTS)
def test_crash_at_every_fault_point_then_rerun(spark, store_path, fault):
    store = make_store(spark, store_path, enable_consume_queue_ext=True)
    batches, now = scenario(store)
    others = frozen(store.messages("TopicTest"))
    ext_before = store.table("consume_queue_ext").where(F.col("topic") == "TopicTest").count()

    def crash(step):
        if step == fault:
            raise Crash(step)

    with pytest.raises(Crash):
        expire_topics(store.context, now, fault=crash)
    assert MessageStore.verify(store.root, spark, full=True) == []  # consistent wherever it stopped
    assert_same_rows(store.messages("TopicTest"), others)

    removed = store.expire_topics(now=now)[SHORT]
    assert removed == (0 if FAULTS.index(fault) >= FAULTS.index("commitlog.committed") else 4)
    assert store.expire_topics(now=now) == {SHORT: 0}
    assert_same_rows(store.messages("TopicTest"), others)
    assert store.table("consume_queue_ext").where(F.col("topic") == "TopicTest").count() == ext_before
    assert_expired(store, spark, batches)


def test_after_compaction(spark, store_path):
    """Clustered files (rows sorted by topic and tags, not offset) lose their expired rows the same way."""
    store = make_store(spark, store_path)
    batches, now = scenario(store)
    store.compact(full=True, settle_ms=0)
    files = store.context.tables.commitlog.files(store.context.tables.commitlog.snapshot())
    assert files and all(os.path.basename(f).startswith("clustered-") for f in files)
    others = frozen(store.messages("TopicTest"))
    assert store.expire_topics(now=now) == {SHORT: 4}
    assert_same_rows(store.messages("TopicTest"), others)
    assert_expired(store, spark, batches)
    store.compact(full=True, settle_ms=0)  # and compacting again keeps it all
    assert_same_rows(store.messages("TopicTest"), others)
    assert MessageStore.verify(store.root, spark, full=True) == []


def folder_usage(path):
    files = [
        os.path.join(d, f)
        for d, _, names in os.walk(path)
        for f in names
        if f.endswith(".parquet") and "_delta_log" not in d
    ]
    return len(files), sum(os.path.getsize(f) for f in files)


def test_vacuum_reclaims_the_space(spark, store_path):
    store = make_store(spark, store_path)
    store.create_topic(SHORT, 2, retention_ms=1)
    for _ in range(3):  # files of Short alone: wholly expired, removed
        store.send_batch([Message(SHORT, body=b"x" * 10_000, queue_id=q) for q in range(2)])
    send_shared(store, 3)
    store.dispatch()
    commitlog = store.context.tables.commitlog.path
    before = folder_usage(commitlog)
    assert store.expire_topics(now=time.time() * 1000 + 1_000) == {SHORT: 12}
    assert store.messages(SHORT).count() == 0 and store.messages("TopicTest").count() == 12
    assert folder_usage(commitlog) >= before  # the old files stay until vacuumed
    assert store.vacuum(retention_hours=0)["commitlog"] == 6
    after = folder_usage(commitlog)
    assert after[0] < before[0] and after[1] < before[1]
    assert store.min_offset() == store.messages().agg(F.min("physical_offset")).first()[0]
    assert MessageStore.verify(store.root, spark, full=True) == []


def queue_files(store, name):
    """Files per queue of a consume queue table, by topic."""
    actions = add_actions(store.context.tables.by_name()[name].snapshot())
    return {
        t: [Table.only(actions, {"topic": t, "queue_id": q}).num_rows for q in range(n)]
        for t, n in ((SHORT, 2), ("TopicTest", 4))
    }


def test_undispatched_messages_are_never_removed(spark, store_path):
    store = make_store(spark, store_path)
    batches = send_shared(store, 2)
    store.dispatch()
    batches += send_shared(store, 2, start=2)  # sent, not dispatched
    far = 2**62
    assert store.expire_topics(now=far) == {SHORT: 4}
    assert {q: store.min_queue_offset(SHORT, q) for q in range(2)} == {0: 2, 1: 2}
    assert sorted(r.physical_offset for r in store.messages(SHORT).collect()) == offsets_of(batches[2:], 0)
    store.dispatch()
    files = {name: queue_files(store, name) for name in ("consume_queue", "consume_queue_ext")}
    assert store.expire_topics(now=far) == {SHORT: 4}
    assert store.messages(SHORT).count() == 0 and store.messages("TopicTest").count() == 16
    assert {q: store.min_queue_offset(SHORT, q) for q in range(2)} == {0: 4, 1: 4}
    assert {q: store.max_queue_offset(SHORT, q) for q in range(2)} == {0: 4, 1: 4}
    for name, before in files.items():  # per Short queue, a file or more per dispatch: all but the last go
        assert min(before[SHORT]) >= 2 and queue_files(store, name)[SHORT] == [1, 1]
        assert queue_files(store, name)["TopicTest"] == before["TopicTest"]
    assert MessageStore.verify(store.root, spark, full=True) == []


def test_retention_setting(store):
    assert store.topic_config("TopicTest").retention_ms is None
    assert store.create_topic(SHORT, 2, retention_ms=HOUR_MS).retention_ms == HOUR_MS
    assert store.create_topic(SHORT, 4).retention_ms == HOUR_MS  # an update without it keeps it
    assert store.topic_config(SHORT).read_queue_nums == 4
    assert store.expire_topics(now=0) == {SHORT: 0}
    assert store.create_topic(SHORT, 4, retention_ms=None).retention_ms is None
    assert store.expire_topics(now=0) == {}
    for bad in (0, -5, True, 1.5, "1h"):
        with pytest.raises(ConfigError) as e:
            store.create_topic(SHORT, 4, retention_ms=bad)
        assert e.value.field == "retention_ms"
    assert store.topic_config(SHORT).retention_ms is None
    with pytest.raises(ConfigError) as e:
        store.expire_topics(now="tomorrow")
    assert e.value.field == "now"


def test_store_from_before_per_topic_retention(spark, store_path):
    """A store written without retention_ms and commitlog_expired: it verifies, opens, and gets both."""
    import datetime as dt
    import shutil

    from deltalake import DeltaTable, write_deltalake

    from storelib.storage.schema import TOPIC_CONFIG

    store = MessageStore.create(store_path, spark)
    store.create_topic("TopicTest", queues=4)
    store.send(Message("TopicTest", body=b"x"))
    store.dispatch()
    store.close()
    tables = store.context.tables
    shutil.rmtree(tables.commitlog_expired.path)
    old = pa.schema([f for f in TOPIC_CONFIG.arrow if f.name != "retention_ms"])
    shutil.rmtree(tables.topic_config.path)
    DeltaTable.create(tables.topic_config.path, old)
    write_deltalake(
        tables.topic_config.path,
        pa.Table.from_pylist(
            [
                {
                    "topic": "TopicTest",
                    "read_queue_nums": 4,
                    "write_queue_nums": 4,
                    "perm": 6,
                    "topic_filter_type": "SINGLE_TAG",
                    "order": False,
                    "updated_at": dt.datetime.now(dt.timezone.utc),
                    "cluster_by": None,
                }
            ],
            schema=old,
        ),
        mode="append",
    )

    assert MessageStore.verify(store_path, spark, full=True) == []
    reopened = MessageStore.open(store_path, spark)
    assert reopened.topic_config("TopicTest").retention_ms is None
    assert reopened.create_topic("TopicTest", 4, retention_ms=5).retention_ms == 5
    assert reopened.expire_topics(now=2**62) == {"TopicTest": 1}
    assert MessageStore.verify(store_path, spark, full=True) == []


def test_a_pull_that_read_the_queue_before_the_cut_gets_message_was_removing(spark, store_path):
    """A pull racing expiry: its consume queue view is from before the markers moved (here a copy of the
    table taken then), its commitlog view from after the rewrite. RocketMQ's answer: MESSAGE_WAS_REMOVING,
    and the next offset past the units scanned."""
    import dataclasses
    import shutil

    from storelib.consume.get_message import get_message

    store = make_store(spark, store_path)
    batches, now = scenario(store)
    cq = store.context.tables.consume_queue
    shutil.copytree(cq.path, store_path + "-cq-before")
    store.expire_topics(now=now)
    tables = dataclasses.replace(store.context.tables, consume_queue=Table(store_path + "-cq-before", cq.spec))
    racing = dataclasses.replace(store.context, tables=tables)
    got = get_message(racing, "G", SHORT, 0, 0, 32)  # units 0-1 point at removed rows, 2-3 are found
    assert (got.status, got.queue_offsets, got.next_begin_offset) == (GetMessageStatus.FOUND, [2, 3], 4)
    store.expire_topics(now=2**62)  # now every Short message is gone
    for offset in (0, 2, 3):
        got = get_message(racing, "G", SHORT, 0, offset, 32)
        assert (got.status, got.messages, got.next_begin_offset) == (GetMessageStatus.MESSAGE_WAS_REMOVING, [], 4)
    got = store.get_message("G", SHORT, 0, 0)
    assert (got.status, got.next_begin_offset) == (GetMessageStatus.OFFSET_TOO_SMALL, 4)


def test_a_send_while_the_commitlog_is_rewritten_is_kept(spark, store_path):
    """A producer commits between the rewrite's plan and its commit: the commit lands after it, the send stays."""
    store = make_store(spark, store_path)
    batches, now = scenario(store)
    sent = []

    def send_meanwhile(step):
        if step == "commitlog.summarized" and not sent:
            sent.append(store.send(Message(SHORT, body=b"meanwhile", queue_id=0)))

    assert expire_topics(store.context, now, fault=send_meanwhile) == {SHORT: 4}
    assert store.query_by_id(sent[0].msg_id).body == b"meanwhile"
    store.dispatch()
    pulled = store.pull("G", SHORT, 0, 2, selector="*")
    assert [m.body for m in pulled.messages][-1] == b"meanwhile" and pulled.next_begin_offset == 5
    assert MessageStore.verify(store.root, spark, full=True) == []
