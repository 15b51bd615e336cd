"""A stream's micro-batch reads exactly the messages its group would pull over the same offsets.

The stream's tasks read row groups and cut them with numpy masks (queued messages, each queue's offset
range, the topic's tags, then the exact check); pulls go through the consume queue. Both must give the
same messages, on fresh and clustered files, for tag and SQL92 groups, over several topics at once.
"""

from __future__ import annotations

import pytest

from storelib import Message, MessageSelector
from storelib.datasource.options import SourceOptions
from storelib.datasource.stream import GroupStreamReader
from storelib.maintenance.cluster import cluster_commitlog


def _send(store, n: int, first: int) -> None:
    store.send_batch(
        [Message("A", tags=f"T{i % 4}", body=b"a%d" % i, properties={"n": str(i)}) for i in range(first, first + n)]
        + [Message("B", tags=f"T{i % 3}", body=b"b%d" % i, properties={"n": str(i)}) for i in range(first, first + n)]
    )


@pytest.fixture
def two_topics(store):
    """Topics A (3 queues, clustered by tag) and B (2 queues): half of their messages clustered, half fresh,
    a transaction committed and one rolled back between; group G takes tags T1 || T3 of A and a SQL92 test
    of property ``n`` of B."""
    store.create_topic("A", queues=3, cluster_by=["TAGS"])
    store.create_topic("B", queues=2)
    store.subscribe("G", "A", "T1 || T3")
    store.subscribe("G", "B", MessageSelector.by_sql("n < 8 OR n BETWEEN 12 AND 17 OR n >= 30"))
    _send(store, 24, 0)
    store.dispatch()
    cluster_commitlog(store.context, settle_ms=0)
    for state in ("COMMIT_MESSAGE", "ROLLBACK_MESSAGE"):
        store.send_in_transaction(Message("A", tags="T1", body=b"tx"), lambda m, a, s=state: s)
    _send(store, 16, 24)
    store.dispatch()
    return store


def _pulled(store, topic: str, queue: int, begin: int, end: int) -> set[tuple]:
    found, at = set(), begin
    while at < end:
        result = store.pull("G", topic, queue, at, 32)
        found |= {(topic, m.queue_id, m.queue_offset, m.msg_id) for m in result.messages if m.queue_offset < end}
        if result.next_begin_offset <= at:
            break
        at = result.next_begin_offset
    return found


def _streamed(store, start: dict, end: dict) -> set[tuple]:
    options = SourceOptions.parse({"store": store.root, "group": "G", "topics": "A,B"}, streaming=True)
    reader = GroupStreamReader(options, None)
    rows = [b for p in reader.partitions(start, end) for b in reader.read(p)]
    return {
        (r["topic"], r["queue_id"], r["queue_offset"], r["msg_id"])
        for b in rows
        for r in b.select(["topic", "queue_id", "queue_offset", "msg_id"]).to_pylist()
    }


@pytest.mark.parametrize("cut", [(0, None), (3, None), (0, 5), (6, 9)])
def test_a_micro_batch_reads_what_the_group_pulls(two_topics, cut):
    store = two_topics
    queues = {"A": 3, "B": 2}
    ends = {t: {q: store.max_queue_offset(t, q) for q in range(n)} for t, n in queues.items()}
    begin, stop = cut
    start = {t: {str(q): min(begin, e) for q, e in qs.items()} for t, qs in ends.items()}
    end = {t: {str(q): e if stop is None else min(stop, e) for q, e in qs.items()} for t, qs in ends.items()}
    expected = set()
    for t, qs in ends.items():
        for q in qs:
            expected |= _pulled(store, t, q, start[t][str(q)], end[t][str(q)])
    assert expected, "the cut holds matching messages"
    assert {t for t, *_ in expected} == {"A", "B"}
    assert _streamed(store, start, end) == expected


def test_the_store_read_holds_clustered_and_fresh_files(two_topics):
    from storelib.storage.commitlog import is_clustered

    commitlog = two_topics.context.tables.commitlog
    kinds = {is_clustered(p) for p in commitlog.paths(commitlog.view().actions)}
    assert kinds == {True, False}
