"""Dispatch requests: the executors' cut of commitlog batches into consume queue, ext and index rows."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from storelib import Message
from storelib.dispatch.request import REQUEST_COLUMNS, DispatchRequests, deliver_times
from storelib.encoding.ext_addr import decorate_ext_addr, is_ext_addr
from storelib.encoding.index_key import index_key_hash
from storelib.encoding.tags import tags_code
from storelib.filter.selector import MessageSelector
from storelib.model.message import SysFlag
from storelib.model.topic import SCHEDULE_TOPIC
from storelib.storage.schema import COMMITLOG

DELAYS = [1000, 5000, 10000]


@pytest.mark.parametrize(
    "delay, expected",
    [
        ("1", 2000),
        ("3", 11000),
        ("+2", 6000),
        ("99", 11000),  # capped at the highest level
        ("0", None),
        ("-1", None),
        (None, None),
        ("x", None),
        (" 1", None),
        ("1.0", None),
        ("2147483648", None),  # not a Java int: Integer.parseInt fails
    ],
)
def test_deliver_times_follow_parse_int(delay, expected):
    got = deliver_times(pa.array([delay], pa.string()), pa.array([1000], pa.int64()), DELAYS)
    assert got.to_pylist() == [expected]


def batch(rows: list[dict]) -> pa.RecordBatch:
    base = {
        "size": 100,
        "queue_id": 0,
        "store_timestamp": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
        "sysflag": 0,
        "tags": None,
        "keys": None,
        "uniq_key": None,
    }
    columns = list(REQUEST_COLUMNS)
    data = {c: [{**base, **r}[c] for r in rows] for c in columns}
    return pa.RecordBatch.from_pydict(data, schema=pa.schema([COMMITLOG.arrow.field(c) for c in columns]))


def test_each_target_from_its_own_start_and_transaction_types():
    rows = [
        {"physical_offset": 0, "topic": "T", "queue_offset": 0, "tags": "TagA", "uniq_key": "U0", "keys": "k1  k2"},
        {
            "physical_offset": 100,
            "topic": "T",
            "queue_offset": 1,
            "sysflag": SysFlag.TRANSACTION_PREPARED_TYPE,
            "uniq_key": "U1",
        },
        {
            "physical_offset": 200,
            "topic": "T",
            "queue_offset": 2,
            "sysflag": SysFlag.TRANSACTION_ROLLBACK_TYPE,
            "uniq_key": "U2",
        },
        {
            "physical_offset": 300,
            "topic": "T",
            "queue_offset": 3,
            "sysflag": SysFlag.TRANSACTION_COMMIT_TYPE,
            "tags": "Aa",
            "uniq_key": "U3",
        },
    ]
    requests = DispatchRequests({"consume_queue": 100, "consume_queue_ext": 0, "index": 0}, True, 25, tuple(DELAYS))
    out = next(requests(iter([batch(rows)])))
    # Prepared and rolled back messages get no units; the consume queue starts at its own marker.
    assert out["consume_queue"].column("commitlog_offset").to_pylist() == [300]
    assert out["consume_queue"].column("tags_code").to_pylist() == [decorate_ext_addr(3)]
    assert out["consume_queue_ext"].column("tags_code").to_pylist() == [tags_code("TagA"), tags_code("Aa")]
    # Index: the UNIQ_KEY and each non-empty key, for every message but the rolled back one.
    index = out["index"].to_pydict()
    assert sorted(zip(index["key_hash"], index["commitlog_offset"])) == sorted(
        (index_key_hash(f"T#{k}"), off) for k, off in [("U0", 0), ("k1", 0), ("k2", 0), ("U1", 100), ("U3", 300)]
    )
    assert index["hash_range"] == [h >> 25 for h in index["key_hash"]]


def test_ext_units_only_for_the_topics_given_and_the_rest_keep_real_tag_codes():
    rows = [
        {"physical_offset": i * 100, "topic": t, "queue_offset": i, "tags": "TagA", "uniq_key": f"U{i}"}
        for i, t in enumerate(["S", "T", "S", "T"])
    ]
    requests = DispatchRequests(
        {"consume_queue": 0, "consume_queue_ext": 0}, True, 25, tuple(DELAYS), ext_topics=("S",)
    )
    out = next(requests(iter([batch(rows)])))
    assert out["consume_queue"].column("tags_code").to_pylist() == [
        decorate_ext_addr(0),
        tags_code("TagA"),
        decorate_ext_addr(2),
        tags_code("TagA"),
    ]
    assert out["consume_queue_ext"].column("commitlog_offset").to_pylist() == [0, 200]
    none = DispatchRequests({"consume_queue": 0, "consume_queue_ext": 0}, True, 25, tuple(DELAYS), ext_topics=())
    out = next(none(iter([batch(rows)])))
    assert out["consume_queue"].column("tags_code").to_pylist() == [tags_code("TagA")] * 4
    assert out["consume_queue_ext"].num_rows == 0


def test_units_below_the_ext_marker_point_at_exactly_the_ext_units_committed():
    """A run that died between the ext commit and the consume queue commit: the units written again
    below the ext marker follow what the ext table holds, whatever the subscriptions are now."""
    rows = [
        {"physical_offset": i * 100, "topic": "S", "queue_offset": i, "tags": "TagA", "uniq_key": f"U{i}"}
        for i in range(4)
    ]
    requests = DispatchRequests(
        {"consume_queue": 0}, True, 25, tuple(DELAYS), ext_topics=(), ext_from=200, ext_had=(100,)
    )
    out = next(requests(iter([batch(rows)])))
    assert out["consume_queue"].column("tags_code").to_pylist() == [
        tags_code("TagA"),
        decorate_ext_addr(1),
        tags_code("TagA"),
        tags_code("TagA"),
    ]
    again = DispatchRequests({"consume_queue": 0}, True, 25, tuple(DELAYS), ext_topics=("S",), ext_from=200, ext_had=())
    out = next(again(iter([batch(rows)])))
    assert out["consume_queue"].column("tags_code").to_pylist() == [
        tags_code("TagA"),
        tags_code("TagA"),
        decorate_ext_addr(2),
        decorate_ext_addr(3),
    ]


def test_both_read_paths_give_delayed_messages_their_deliver_time(spark, store):
    """A SQL92 subscription on a topic of the range makes Spark read the commitlog (bitmaps); without
    one the executors read it with pyarrow. Both give SCHEDULE_TOPIC units their deliver time."""
    store.create_topic("Other", queues=1)
    for name in ("TopicTest", "Other"):
        store.send(Message(name, body=b"x", tags="TagA", properties={"a": "1"}))
    first = store.query_by_id(store.send(Message("TopicTest", body=b"y", tags="TagB")).msg_id)
    store.send_back(first, "GroupA")
    store.dispatch()  # no subscription yet: the pyarrow path
    store.subscribe("GroupB", "Other", MessageSelector.by_sql("a = 1"))
    store.send(Message("Other", body=b"z", properties={"a": "1"}))
    store.send_back(first, "GroupA")
    store.dispatch()  # the Spark path, with bitmaps for Other
    units = store.table("consume_queue").where(f"topic = '{SCHEDULE_TOPIC}'").collect()
    assert len(units) == 2
    for unit in units:
        store_ms = int(unit.store_timestamp.timestamp() * 1000)
        assert unit.tags_code == store_ms + store.config.delay_levels_ms[2]  # level 3 for a first send-back
    # Ext units only where a bitmap was computed: the one message of Other sent after its subscription.
    ext = store.table("consume_queue_ext").collect()
    assert [(r.topic, r.queue_offset, bool(r.filter_bitmap)) for r in ext] == [("Other", 1, True)]
    other = store.table("consume_queue").where("topic = 'Other'").orderBy("queue_offset").collect()
    assert [is_ext_addr(u.tags_code) for u in other] == [False, True]
    assert other[0].tags_code == tags_code("TagA")


def test_commitlog_files_read_only_the_range(tmp_path):
    """A file partly in ``[low, end)`` is filtered; one wholly in it is read as it is."""
    import pyarrow.parquet as pq

    from storelib.dispatch.request import CommitlogFiles

    rows = [{"physical_offset": i * 100, "topic": "T", "queue_offset": i, "uniq_key": f"U{i}"} for i in range(10)]
    path = str(tmp_path / "part-0.parquet")
    pq.write_table(pa.Table.from_batches([batch(rows)]), path, row_group_size=3)
    requests = DispatchRequests({"consume_queue_ext": 0}, True, 25, tuple(DELAYS))
    files = CommitlogFiles(300, 700, False, requests)
    assert pa.Table.from_batches(list(files._read(path))).column("physical_offset").to_pylist() == [300, 400, 500, 600]
    whole = CommitlogFiles(0, 1000, False, requests)
    units = [out["consume_queue_ext"] for out in whole((path, True))]
    assert pa.Table.from_batches(units).column("queue_offset").to_pylist() == list(range(10))
