"""send_back: RocketMQ's consumerSendMsgBack (retry later through SCHEDULE_TOPIC_XXXX, then %DLQ%)."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from storelib import Message, MessageStore
from storelib.consume.retry import NOT_STORED, plan_send_back
from storelib.encoding.tags import tags_code
from storelib.model.errors import (
    InvalidTopicError,
    MessageError,
    MessageNotFoundError,
    StoreError,
    StorePermissionError,
    SubscriptionGroupNotFoundError,
    TopicNotFoundError,
    TopicPermissionError,
)
from storelib.model.message import StoredMessage
from storelib.model.topic import PERM_READ, SCHEDULE_TOPIC, TopicConfig

GROUP = "GroupA"
RETRY = "%RETRY%GroupA"
DLQ = "%DLQ%GroupA"
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _ms(ts: dt.datetime) -> int:
    return (ts - EPOCH) // dt.timedelta(milliseconds=1)


def _sent(store: MessageStore, **kw) -> StoredMessage:
    r = store.send(
        Message("TopicTest", body=b"payload", tags="TagA", keys=["order-1"], properties={"a": "5"}, flag=7, **kw)
    )
    return store.query_by_id(r.msg_id)


def _unit_codes(store: MessageStore) -> dict[tuple[str, int], int]:
    """(topic, commitlog offset) -> tag code of every consume queue unit."""
    rows = store.table("consume_queue").select("topic", "commitlog_offset", "tags_code").collect()
    return {(r.topic, r.commitlog_offset): r.tags_code for r in rows}


def _state(store: MessageStore) -> tuple[int, dict]:
    return store.max_offset(), store.context.topics.all()


def test_send_back_goes_to_schedule_topic_with_retry_properties(store):
    m = _sent(store)
    levels = store.config.delay_levels_ms
    end = store.max_offset()
    r = store.send_back(m, GROUP)

    assert (r.send_status, r.topic, r.queue_id, r.queue_offset, r.commitlog_offset) == (
        "SEND_OK",
        SCHEDULE_TOPIC,
        2,
        0,
        end,
    )
    assert r.uniq_key == m.uniq_key  # no new client id
    back = store.query_by_id(r.msg_id)
    assert back.msg_id == r.msg_id and back.commitlog_offset == end
    p = back.properties
    assert p["DELAY"] == "3" and p["REAL_TOPIC"] == RETRY and p["REAL_QID"] == "0"
    assert p["RETRY_TOPIC"] == "TopicTest" and p["RECONSUME_TIME"] == "1" and p["ORIGIN_MESSAGE_ID"] == m.msg_id
    assert {k: p[k] for k in ("TAGS", "KEYS", "a", "UNIQ_KEY")} == {
        "TAGS": "TagA",
        "KEYS": "order-1",
        "a": "5",
        "UNIQ_KEY": m.uniq_key,
    }
    assert back.reconsume_times == 1 and m.reconsume_times == 0
    assert (back.body, back.flag, back.sysflag, back.born_timestamp, back.born_host) == (
        m.body,
        m.flag,
        m.sysflag,
        m.born_timestamp,
        m.born_host,
    )
    topics = store.context.topics.all()
    assert topics[RETRY] == TopicConfig(RETRY, 1, 1, 6)
    assert topics[SCHEDULE_TOPIC] == TopicConfig(SCHEDULE_TOPIC, len(levels), len(levels), 6)

    # The same message again at the same level: the next queue offset, the next commitlog offset.
    r2 = store.send_back(m, GROUP)
    assert (r2.topic, r2.queue_id, r2.queue_offset, r2.commitlog_offset) == (SCHEDULE_TOPIC, 2, 1, end + back.size)

    store.dispatch()
    codes = _unit_codes(store)
    for res in (r, r2):
        stored = store.query_by_id(res.msg_id)
        assert codes[SCHEDULE_TOPIC, res.commitlog_offset] == _ms(stored.store_timestamp) + levels[2]  # 3rd level: 10s
    assert codes[("TopicTest", m.commitlog_offset)] == tags_code("TagA")  # other topics keep their tag code
    assert len(codes) == 3
    cq = store.consume_queue(SCHEDULE_TOPIC, 2).orderBy("queue_offset").collect()
    assert [u.queue_offset for u in cq] == [0, 1]
    assert store.table("consume_queue_ext").count() == 0  # no SQL92 group: no bitmap, so no ext unit


def test_deliver_timestamp_in_consume_queue_without_ext(spark, tmp_path):
    store = MessageStore.create(
        str(tmp_path / "s"),
        spark,
        enable_consume_queue_ext=False,
        enable_calc_filter_bitmap=False,
        enable_property_filter=False,
    )
    store.create_topic("TopicTest", queues=4)
    m = _sent(store)
    a = store.send_back(m, GROUP, delay_level=1)
    b = store.send_back(m, GROUP, delay_level=40)  # above the last level: capped at 18
    assert (a.queue_id, b.queue_id) == (0, 17)
    assert store.query_by_id(b.msg_id).properties["DELAY"] == "18"
    store.dispatch()
    levels = store.config.delay_levels_ms
    for res, delay in ((a, levels[0]), (b, levels[-1])):
        unit = store.consume_queue(SCHEDULE_TOPIC, res.queue_id).collect()
        assert [u.commitlog_offset for u in unit] == [res.commitlog_offset]
        assert unit[0].tags_code == _ms(store.query_by_id(res.msg_id).store_timestamp) + delay
    assert store.consume_queue("TopicTest", m.queue_id).collect()[0].tags_code == tags_code("TagA")


def test_repeated_send_back_raises_the_level_then_dead_letters(store):
    m = _sent(store)
    cur, seen = m, []
    for n in range(3):
        r = store.send_back(cur, GROUP, max_reconsume_times=3)
        cur = store.query_by_id(r.msg_id)
        seen.append(
            (r.topic, r.queue_id, cur.properties["DELAY"], cur.reconsume_times, cur.properties["RECONSUME_TIME"])
        )
        assert cur.properties["RETRY_TOPIC"] == "TopicTest" and cur.properties["ORIGIN_MESSAGE_ID"] == m.msg_id
        assert cur.uniq_key == m.uniq_key
    assert seen == [
        (SCHEDULE_TOPIC, 2, "3", 1, "1"),
        (SCHEDULE_TOPIC, 3, "4", 2, "2"),
        (SCHEDULE_TOPIC, 4, "5", 3, "3"),
    ]

    r = store.send_back(cur, GROUP, max_reconsume_times=3)
    dead = store.query_by_id(r.msg_id)
    assert (r.topic, r.queue_id, r.queue_offset) == (DLQ, 0, 0)
    assert dead.topic == DLQ and dead.reconsume_times == 4 and dead.properties["DELAY"] == "0"
    assert dead.properties["RETRY_TOPIC"] == "TopicTest" and dead.properties["ORIGIN_MESSAGE_ID"] == m.msg_id
    assert dead.body == m.body and dead.uniq_key == m.uniq_key
    assert store.context.topics.all()[DLQ] == TopicConfig(DLQ, 1, 1, 6)


def test_default_sixteen_reconsumes_then_dlq(store):
    m = _sent(store)
    cur, queues = m, []
    for _ in range(16):
        r = store.send_back(cur, GROUP)
        queues.append(r.queue_id)
        cur = store.query_by_id(r.msg_id)
    # levels 3 + n, capped at the 18th (queue 17)
    assert queues == [min(2 + n, 17) for n in range(16)]
    assert cur.reconsume_times == 16 and cur.properties["DELAY"] == "18"
    r = store.send_back(cur, GROUP)
    assert r.topic == DLQ and store.query_by_id(r.msg_id).reconsume_times == 17


def test_negative_delay_goes_straight_to_dlq(store):
    m = _sent(store)
    r = store.send_back(m, GROUP, delay_level=-1)
    dead = store.query_by_id(r.msg_id)
    assert (r.topic, dead.reconsume_times, dead.properties["DELAY"], dead.properties["RETRY_TOPIC"]) == (
        DLQ,
        1,
        "0",
        "TopicTest",
    )
    assert "REAL_TOPIC" not in dead.properties
    assert RETRY in store.context.topics.all()  # created before the decision, as RocketMQ does


def test_retry_queue_nums_of_the_group(store):
    store.create_group("G3", retry_queue_nums=3)
    m = _sent(store)
    qids = {int(store.query_by_id(store.send_back(m, "G3").msg_id).properties["REAL_QID"]) for _ in range(6)}
    assert qids <= {0, 1, 2}
    assert store.context.topics.all()["%RETRY%G3"] == TopicConfig("%RETRY%G3", 3, 3, 6)


def test_no_retry_queues_stores_nothing(store):
    store.create_group("G0", retry_queue_nums=0)
    m = _sent(store)
    before = _state(store)
    r = store.send_back(m, "G0")
    assert (r.send_status, r.topic, r.commitlog_offset) == (NOT_STORED, "%RETRY%G0", -1)
    assert _state(store) == before


def test_unknown_group_without_auto_create(spark, store, store_path):
    m = _sent(store)
    strict = MessageStore.create(store_path, spark, auto_create_subscription_group=False)
    before = _state(strict)
    with pytest.raises(SubscriptionGroupNotFoundError) as e:
        strict.send_back(m, "Nobody")
    assert e.value.code == "SUBSCRIPTION_GROUP_NOT_EXIST" and e.value.field == "group"
    assert _state(strict) == before


def test_unwritable_store_and_retry_topic(spark, store, store_path):
    m = _sent(store)
    readonly = MessageStore.create(store_path, spark, broker_permission=4)
    before = _state(store)
    with pytest.raises(StorePermissionError) as e:
        readonly.send_back(m, GROUP)
    assert e.value.code == "NO_PERMISSION"
    store.context.topics.put(TopicConfig("%RETRY%Locked", 1, 1, PERM_READ))
    with pytest.raises(TopicPermissionError) as e:
        store.send_back(m, "Locked")
    assert e.value.code == "NO_PERMISSION" and e.value.value == "%RETRY%Locked"
    assert store.max_offset() == before[0]


def test_message_gone(store):
    m = _sent(store)
    bogus = dataclasses.replace(m, commitlog_offset=10**12)
    before = store.max_offset()
    with pytest.raises(MessageNotFoundError) as e:
        store.send_back(bogus, GROUP)
    assert isinstance(e.value, StoreError) and e.value.code == "SYSTEM_ERROR"
    assert e.value.field == "msg.commitlog_offset" and "look message by offset failed" in str(e.value)
    assert store.max_offset() == before


@pytest.mark.parametrize(
    "args, error, field",
    [
        (({"topic": "TopicTest"}, GROUP), MessageError, "msg"),
        ((None, "bad group"), InvalidTopicError, "group"),
        ((None, ""), InvalidTopicError, "group"),
        ((None, GROUP, "3"), MessageError, "delay_level"),
        ((None, GROUP, True), MessageError, "delay_level"),
        ((None, GROUP, 0, 2.5), MessageError, "max_reconsume_times"),
    ],
)
def test_bad_input_writes_nothing(store, args, error, field):
    m = _sent(store)
    args = tuple(m if a is None else a for a in args[:1]) + args[1:]
    before = _state(store)
    with pytest.raises(error) as e:
        store.send_back(*args[:3], **({"max_reconsume_times": args[3]} if len(args) > 3 else {}))
    assert e.value.field == field
    assert _state(store) == before
    with pytest.raises(TopicNotFoundError):
        store.topic_config(RETRY)


def test_plan_matches_rocketmq():
    assert plan_send_back(0, "G", 0, 0, 16, 18).delay_level == 3
    assert plan_send_back(2, "G", 1, 0, 16, 18).delay_level == 5
    assert plan_send_back(5, "G", 1, 7, 16, 18).delay_level == 7  # an explicit level wins
    assert plan_send_back(16, "G", 0, 5, 16, 18).dead
    assert plan_send_back(0, "G", 0, 0, 0, 18).dead  # max reconsume 0: the first failure is final
