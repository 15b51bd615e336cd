"""Pulling: getMessage statuses and offsets, batch limits, filters, the broker's checks, client statuses."""

from __future__ import annotations

import pytest

from storelib import Message, MessageSelector, MessageStore, StoreError
from storelib.consume.get_message import GetMessageStatus as S
from storelib.consume.pull import PullStatus as P
from storelib.filter.sql92 import parse_sql92
from storelib.model.errors import (
    ConsumeDisabledError,
    FilterExpressionError,
    FilterNotSupportedError,
    InvalidQueueIdError,
    OffsetError,
    StorePermissionError,
    SubscriptionGroupNotFoundError,
    SubscriptionNotFoundError,
    SubscriptionNotLatestError,
    TopicNotFoundError,
    TopicPermissionError,
)
from storelib.model.topic import PERM_WRITE

TAGS = ["TagA", "TagB", "Aa", "BB"]  # "Aa" and "BB" share a String.hashCode


def fill(store: MessageStore, n: int, queue_id: int = 0, topic: str = "TopicTest", start: int = 0) -> None:
    store.send_batch(
        [
            Message(topic, tags=TAGS[i % 4], body=b"m%d" % i, queue_id=queue_id, properties={"n": str(i)})
            for i in range(start, start + n)
        ]
    )
    store.dispatch()


@pytest.fixture
def filled(store):
    fill(store, 40)
    store.subscribe("GroupA", "TopicTest", "*")
    return store


def bodies(result) -> list[bytes]:
    return [m.body for m in result.messages]


# ---- statuses and next_begin_offset ---------------------------------------------------------------
def test_found_takes_max_msgs_and_moves_next_offset(filled):
    r = filled.pull("GroupA", "TopicTest", 0, 0, 8)
    assert (r.status, r.get_status, r.response_code) == (P.FOUND, S.FOUND, "SUCCESS")
    assert (r.next_begin_offset, r.min_offset, r.max_offset) == (8, 0, 40)
    assert bodies(r) == [b"m%d" % i for i in range(8)]
    assert [m.queue_offset for m in r.messages] == list(range(8))
    assert r.messages[0].properties["MIN_OFFSET"] == "0" and r.messages[0].properties["MAX_OFFSET"] == "40"
    r = filled.pull("GroupA", "TopicTest", 0, 36, 8)
    assert bodies(r) == [b"m%d" % i for i in range(36, 40)] and r.next_begin_offset == 40


def test_offset_overflow_one_and_badly(filled):
    r = filled.pull("GroupA", "TopicTest", 0, 40)
    assert (r.status, r.get_status, r.response_code, r.next_begin_offset) == (
        P.NO_NEW_MSG,
        S.OFFSET_OVERFLOW_ONE,
        "PULL_NOT_FOUND",
        40,
    )
    r = filled.pull("GroupA", "TopicTest", 0, 41)
    assert (r.status, r.get_status, r.response_code) == (P.OFFSET_ILLEGAL, S.OFFSET_OVERFLOW_BADLY, "PULL_OFFSET_MOVED")
    assert r.next_begin_offset == 0  # the minOffset == 0 rule: back to the min offset, not the max


def test_empty_queue(filled):
    r = filled.pull("GroupA", "TopicTest", 1, 0)
    assert (r.status, r.get_status, r.response_code, r.next_begin_offset) == (
        P.NO_NEW_MSG,
        S.NO_MESSAGE_IN_QUEUE,
        "PULL_NOT_FOUND",
        0,
    )
    r = filled.pull("GroupA", "TopicTest", 1, 7)
    assert (r.status, r.get_status, r.response_code, r.next_begin_offset) == (
        P.OFFSET_ILLEGAL,
        S.NO_MESSAGE_IN_QUEUE,
        "PULL_OFFSET_MOVED",
        0,
    )


def test_no_matched_logic_queue(filled):
    got = filled.get_message("GroupA", "NoSuchTopic", 0, 3)
    assert (got.status, got.next_begin_offset, got.min_offset, got.max_offset) == (S.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
    assert filled.get_message("GroupA", "TopicTest", 9, 0).status is S.NO_MATCHED_LOGIC_QUEUE


def test_message_was_removing_then_offset_too_small(store):
    fill(store, 10, queue_id=0)
    fill(store, 10, queue_id=1, start=10)
    store.subscribe("GroupA", "TopicTest", "*")
    old = store.messages().where("queue_id = 0").agg({"store_timestamp": "max"}).collect()[0][0]
    assert store.clean_commitlog(reserved_hours=0, now=int(old.timestamp() * 1000) + 1) == 1
    # The commitlog lost queue 0's messages; the consume queue still points at them.
    r = store.pull("GroupA", "TopicTest", 0, 3, 4)
    assert (r.get_status, r.response_code, r.status) == (
        S.MESSAGE_WAS_REMOVING,
        "PULL_RETRY_IMMEDIATELY",
        P.NO_MATCHED_MSG,
    )
    assert (r.messages, r.next_begin_offset, r.min_offset, r.max_offset) == ([], 10, 0, 10)
    assert bodies(store.pull("GroupA", "TopicTest", 1, 0, 3)) == [b"m10", b"m11", b"m12"]
    store.clean_consume_queue()  # the queue's min offset moves past what the commitlog lost
    r = store.pull("GroupA", "TopicTest", 0, 3, 4)
    assert (r.get_status, r.status, r.next_begin_offset, r.min_offset, r.max_offset) == (
        S.OFFSET_TOO_SMALL,
        P.OFFSET_ILLEGAL,
        10,
        10,
        10,
    )
    r = store.pull("GroupA", "TopicTest", 0, 25, 4)  # past the max while the min is not 0: to the max
    assert (r.get_status, r.next_begin_offset) == (S.OFFSET_OVERFLOW_BADLY, 10)
    fill(store, 2, queue_id=0, start=20)
    assert bodies(store.pull("GroupA", "TopicTest", 0, 10, 4)) == [b"m20", b"m21"]


def test_offset_found_null_rolls_to_next_queue_file(spark, store_path):
    from deltalake.transaction import RemoveAction

    from storelib.delta.log import add_actions
    from storelib.storage.consume_queue import min_queue_marker

    store = MessageStore.create(store_path, spark, consume_queue_file_units=10)
    store.create_topic("TopicTest", queues=1)
    fill(store, 12)
    fill(store, 12, start=12)
    store.subscribe("GroupA", "TopicTest", "*")
    cq = store.context.tables.consume_queue
    snapshot = cq.snapshot()
    first = [a for a in add_actions(snapshot).to_pylist() if a["min.queue_offset"] == 0]
    assert len(first) == 1
    # The queue file holding offsets 0..11 is gone, though the queue's min offset still says 0.
    cq.commit(
        snapshot,
        [],
        removes=[RemoveAction(first[0]["path"], True, 0, first[0]["size_bytes"], {})],
        markers={min_queue_marker("TopicTest", 0): 0},
        operation="TEST_LOSE_FILE",
    )
    r = store.pull("GroupA", "TopicTest", 0, 3)
    assert (r.get_status, r.response_code, r.status, r.next_begin_offset) == (
        S.OFFSET_FOUND_NULL,
        "PULL_NOT_FOUND",
        P.NO_NEW_MSG,
        10,
    )
    assert bodies(store.pull("GroupA", "TopicTest", 0, 12, 2)) == [b"m12", b"m13"]


# ---- the scan window and isTheBatchFull ----------------------------------------------------------------
def test_filter_window_is_800_units_or_max_msgs(store):
    fill(store, 1000)
    store.subscribe("GroupA", "TopicTest", MessageSelector.by_sql("n >= 990"))
    r = store.pull("GroupA", "TopicTest", 0, 0, 32)
    assert (r.get_status, r.status, r.next_begin_offset) == (S.NO_MATCHED_MESSAGE, P.NO_MATCHED_MSG, 800)
    r = store.pull("GroupA", "TopicTest", 0, 800, 32)
    assert r.status is P.FOUND and [m.properties["n"] for m in r.messages] == [str(i) for i in range(990, 1000)]
    assert r.next_begin_offset == 1000
    r = store.pull("GroupA", "TopicTest", 0, 0, 999)  # max(16000, 999 * 20) bytes: 999 units
    assert (r.get_status, r.next_begin_offset, len(r.messages)) == (S.FOUND, 999, 9)


def test_window_stops_at_the_queue_file_end(spark, store_path):
    store = MessageStore.create(store_path, spark, consume_queue_file_units=300)
    store.create_topic("TopicTest", queues=1)
    fill(store, 1000)
    store.subscribe("GroupA", "TopicTest", MessageSelector.by_sql("n >= 990"))
    assert store.pull("GroupA", "TopicTest", 0, 250, 32).next_begin_offset == 300
    assert store.pull("GroupA", "TopicTest", 0, 300, 32).next_begin_offset == 600


def test_batch_full_by_count_and_bytes(spark, store_path):
    store = MessageStore.create(store_path, spark, max_transfer_bytes_on_message_in_memory=1000)
    store.create_topic("TopicTest", queues=1)
    fill(store, 100)
    store.subscribe("GroupA", "TopicTest", "*")
    size = store.pull("GroupA", "TopicTest", 0, 0, 1).messages[0].size
    r = store.pull("GroupA", "TopicTest", 0, 0, 64)
    assert len(r.messages) == 1000 // size and r.next_begin_offset == len(r.messages)


def test_batch_full_in_memory_and_on_disk(spark, store_path):
    store = MessageStore.create(store_path, spark)
    store.create_topic("TopicTest", queues=1)
    fill(store, 100)
    store.subscribe("GroupA", "TopicTest", "*")
    assert len(store.pull("GroupA", "TopicTest", 0, 0, 64).messages) == 32  # maxTransferCountOnMessageInMemory
    cold = MessageStore.create(store_path, spark, access_message_in_memory_max_ratio=0)  # everything counts as on disk
    assert len(cold.pull("GroupA", "TopicTest", 0, 0, 64).messages) == 8  # maxTransferCountOnMessageInDisk


# ---- filters -----------------------------------------------------------------------------------------
def test_tag_codes_match_on_the_broker_and_strings_on_the_client(store):
    fill(store, 20)
    store.subscribe("GroupA", "TopicTest", "Aa")
    got = store.get_message("GroupA", "TopicTest", 0, 0, 32, selector="Aa")
    assert {m.tags for m in got.messages} == {"Aa", "BB"}  # the broker sees the hash code only
    r = store.pull("GroupA", "TopicTest", 0, 0, 32)
    assert r.status is P.FOUND and {m.tags for m in r.messages} == {"Aa"}
    assert bodies(r) == [b"m%d" % i for i in range(2, 20, 4)]
    r = store.pull("GroupA", "TopicTest", 0, 3, 1, selector="Aa")  # only a colliding "BB" in the batch
    assert (r.status, r.messages, r.next_begin_offset) == (P.FOUND, [], 4)


def test_tag_or_expression_and_no_match(store):
    fill(store, 20)
    r = store.pull("GroupX", "TopicTest", 0, 0, 32, selector="TagA || TagB")
    assert [m.tags for m in r.messages] == ["TagA", "TagB"] * 5
    r = store.pull("GroupX", "TopicTest", 0, 0, 32, selector="NoSuchTag")
    assert (r.status, r.get_status, r.next_begin_offset) == (P.NO_MATCHED_MSG, S.NO_MATCHED_MESSAGE, 20)


def test_sql92_with_bitmaps_is_exact(store):
    expression = "n > 7 AND n < 30 AND TAGS <> 'BB'"
    store.subscribe("GroupS", "TopicTest", MessageSelector.by_sql(expression))
    fill(store, 60)
    expected = [str(i) for i in range(60) if parse_sql92(expression).evaluate({"n": str(i), "TAGS": TAGS[i % 4]})]
    got, offset = [], 0
    while True:
        r = store.pull("GroupS", "TopicTest", 0, offset, 5)
        got += [m.properties["n"] for m in r.messages]
        if r.status is P.NO_NEW_MSG:
            break
        offset = r.next_begin_offset
    assert got == expected


def test_sql92_pulled_with_its_own_selector_matches_the_registered_one(store):
    store.subscribe("GroupS", "TopicTest", MessageSelector.by_sql("n BETWEEN 3 AND 5"))
    fill(store, 10)
    own = store.pull("GroupT", "TopicTest", 0, 0, selector=MessageSelector.by_sql("n BETWEEN 3 AND 5"))
    registered = store.pull("GroupS", "TopicTest", 0, 0)
    assert bodies(own) == bodies(registered) == [b"m3", b"m4", b"m5"]


# ---- the broker's checks -------------------------------------------------------------------------------
def test_checks_carry_rocketmq_response_codes(spark, store_path):
    store = MessageStore.create(store_path, spark)
    store.create_topic("TopicTest", queues=2)
    store.create_topic("WriteOnly", queues=2, perm=PERM_WRITE)
    store.subscribe("GroupA", "TopicTest", "*")
    cases = [
        (lambda: store.pull("GroupA", "NoSuchTopic", 0, 0), TopicNotFoundError, "TOPIC_NOT_EXIST"),
        (lambda: store.pull("GroupA", "WriteOnly", 0, 0, selector="*"), TopicPermissionError, "NO_PERMISSION"),
        (lambda: store.pull("GroupA", "TopicTest", 2, 0), InvalidQueueIdError, "SYSTEM_ERROR"),
        (lambda: store.pull("GroupA", "TopicTest", -1, 0), InvalidQueueIdError, "SYSTEM_ERROR"),
        (lambda: store.pull("GroupB", "TopicTest", 0, 0), SubscriptionNotFoundError, "SUBSCRIPTION_NOT_EXIST"),
        (
            lambda: store.pull("GroupA", "TopicTest", 0, 0, selector="||"),
            FilterExpressionError,
            "SUBSCRIPTION_PARSE_FAILED",
        ),
        (
            lambda: store.pull("GroupA", "TopicTest", 0, 0, selector=MessageSelector.by_sql("a LIKE 'x'")),
            FilterExpressionError,
            "SUBSCRIPTION_PARSE_FAILED",
        ),
        (
            lambda: store.pull("GroupA", "TopicTest", 0, 0, sub_version=2**62),
            SubscriptionNotLatestError,
            "SUBSCRIPTION_NOT_LATEST",
        ),
    ]
    for call, error, code in cases:
        with pytest.raises(error) as caught:
            call()
        assert caught.value.code == code, caught.value
    with pytest.raises(OffsetError):
        store.pull("GroupA", "TopicTest", 0, -1)
    with pytest.raises(StoreError, match="max_msgs"):
        store.pull("GroupA", "TopicTest", 0, 0, 0)


def test_group_and_store_checks(spark, store_path):
    store = MessageStore.create(store_path, spark)
    store.create_topic("TopicTest", queues=1)
    store.subscribe("GroupA", "TopicTest", "*")
    store.create_group("Disabled", consume_enable=False)
    with pytest.raises(ConsumeDisabledError) as caught:
        store.pull("Disabled", "TopicTest", 0, 0, selector="*")
    assert caught.value.code == "NO_PERMISSION"
    strict = MessageStore.create(store_path, spark, auto_create_subscription_group=False)
    with pytest.raises(SubscriptionGroupNotFoundError) as caught:
        strict.pull("Unknown", "TopicTest", 0, 0, selector="*")
    assert caught.value.code == "SUBSCRIPTION_GROUP_NOT_EXIST"
    assert "Unknown" not in strict.context.groups.all()
    assert strict.pull("GroupA", "TopicTest", 0, 0).status is P.NO_NEW_MSG  # auto-created when it subscribed
    closed = MessageStore.create(store_path, spark, broker_permission=PERM_WRITE)
    with pytest.raises(StorePermissionError) as caught:
        closed.pull("GroupA", "TopicTest", 0, 0)
    assert caught.value.code == "NO_PERMISSION"
    off = MessageStore.create(store_path, spark, enable_property_filter=False)
    with pytest.raises(FilterNotSupportedError) as caught:
        off.pull("GroupA", "TopicTest", 0, 0, selector=MessageSelector.by_sql("a = 1"))
    assert caught.value.code == "SYSTEM_ERROR"


# ---- offsets ---------------------------------------------------------------------------------------
def test_pull_commits_the_offset_it_is_given(filled):
    r = filled.pull("GroupA", "TopicTest", 0, 0, 8)
    assert filled.committed_offset("GroupA", "TopicTest", 0) == -1
    filled.pull("GroupA", "TopicTest", 0, r.next_begin_offset, 8, commit_offset=r.next_begin_offset)
    assert filled.committed_offset("GroupA", "TopicTest", 0) == 8
    with pytest.raises(OffsetError):
        filled.pull("GroupA", "TopicTest", 0, 0, commit_offset=-3)
    assert filled.committed_offset("GroupA", "TopicTest", 0) == 8


# ---- retry topics ---------------------------------------------------------------------------------------
def put_retry_messages(store: MessageStore, group: str) -> None:
    """Messages as the delay service will deliver them to ``%RETRY%group``: RETRY_TOPIC names their topic."""
    from storelib.storage.commitlog import EncodedMessage, now_millis

    rows = [
        ("TopicTest", "TagA", "1"),
        ("TopicTest", "TagB", "2"),
        ("OtherTopic", "TagB", "3"),
        ("TopicTest", "TagA", "4"),
    ]
    store.context.commitlog.append(
        [
            EncodedMessage(
                f"%RETRY%{group}",
                0,
                0,
                0,
                b"retry-" + n.encode(),
                {"TAGS": tags, "RETRY_TOPIC": topic, "n": n},
                now_millis(),
                "127.0.0.1:0",
                reconsume_times=1,
            )
            for topic, tags, n in rows
        ]
    )
    store.dispatch()


def test_retry_topic_applies_the_group_filter_of_the_original_topic(store):
    store.create_topic("OtherTopic", queues=1)
    store.subscribe("GroupA", "TopicTest", "TagA")  # creates %RETRY%GroupA, as a heartbeat does
    put_retry_messages(store, "GroupA")
    r = store.pull("GroupA", "%RETRY%GroupA", 0, 0)
    assert r.status is P.FOUND
    assert bodies(r) == [b"retry-1", b"retry-3", b"retry-4"]  # no subscription to OtherTopic: it passes
    store.subscribe("GroupA", "TopicTest", MessageSelector.by_sql("n > 1"))
    assert bodies(store.pull("GroupA", "%RETRY%GroupA", 0, 0)) == [b"retry-2", b"retry-3", b"retry-4"]


def test_retry_filter_can_be_turned_off(spark, store_path):
    store = MessageStore.create(store_path, spark, filter_support_retry=False)
    store.create_topic("TopicTest", queues=1)
    store.create_topic("OtherTopic", queues=1)
    store.subscribe("GroupA", "TopicTest", "TagA")
    put_retry_messages(store, "GroupA")
    assert len(store.pull("GroupA", "%RETRY%GroupA", 0, 0).messages) == 4
