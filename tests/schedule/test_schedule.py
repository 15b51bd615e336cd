"""Delayed and timer messages: stored under the schedule topics, delivered exactly once when due."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest
from chispa import assert_df_equality

from storelib import Message, MessageStore
from storelib.model.errors import ReservedPropertyError, TimerMessageError
from storelib.model.topic import SCHEDULE_TOPIC, TIMER_TOPIC
from storelib.schedule.deliver import TIMER_QUEUE_MARKER, TIMER_TIME_MARKER, deliver, level_marker

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
HOUR = 3_600_000


def _ms(ts: dt.datetime) -> int:
    return (ts - EPOCH) // dt.timedelta(milliseconds=1)


def _stored_ms(store, sent) -> int:
    return _ms(store.query_by_id(sent.msg_id).store_timestamp)


def _topic_bodies(store, topic: str) -> list[bytes]:
    return [bytes(r.body) for r in store.messages(topic).orderBy("physical_offset").collect()]


def test_delay_level_is_stored_in_the_schedule_queue(store):
    levels = store.config.delay_levels_ms
    a = store.send(Message("TopicTest", body=b"a", tags="TagA", delay_level=3, queue_id=2))
    b = store.send(Message("TopicTest", body=b"b", delay_level=99))  # above the last level: the last
    c = store.send(Message("TopicTest", body=b"c", delay_level=0))  # not delayed
    assert (a.topic, a.queue_id, b.topic, b.queue_id, c.topic) == (SCHEDULE_TOPIC, 2, SCHEDULE_TOPIC, 17, "TopicTest")
    p = store.query_by_id(a.msg_id).properties
    assert (p["DELAY"], p["REAL_TOPIC"], p["REAL_QID"], p["TAGS"]) == ("3", "TopicTest", "2", "TagA")
    assert store.query_by_id(b.msg_id).properties["DELAY"] == "18"
    store.dispatch()
    codes = {r.commitlog_offset: r.tags_code for r in store.table("consume_queue").collect()}
    assert codes[a.commitlog_offset] == _stored_ms(store, a) + levels[2]
    assert codes[b.commitlog_offset] == _stored_ms(store, b) + levels[17]


def test_nothing_is_visible_before_its_time_then_delivered_once(store):
    sent = store.send(
        Message(
            "TopicTest",
            body=b"late",
            tags="TagA",
            keys=["k1"],
            properties={"a": "1"},
            delay_level=2,
            queue_id=1,
            flag=3,
        )
    )
    store.dispatch()
    due = _stored_ms(store, sent) + store.config.delay_levels_ms[1]
    assert store.deliver_delayed(now=due - 1).delivered == 0
    store.dispatch()
    assert store.read("TopicTest").count() == 0
    assert store.pull("GroupA", "TopicTest", 1, 0, selector="*").messages == []
    assert store.query_by_key("TopicTest", "k1") == []

    result = store.deliver_delayed(now=due)
    assert (result.delivered, result.levels, result.newest_delivered_ms) == (1, {2: 1}, due)
    assert store.deliver_delayed(now=due + HOUR).delivered == 0  # exactly once
    store.dispatch()
    got = store.pull("GroupA", "TopicTest", 1, 0, selector="TagA").messages
    assert [m.body for m in got] == [b"late"]
    m, old = got[0], store.query_by_id(sent.msg_id)
    assert (m.topic, m.queue_id, m.queue_offset, m.flag, m.uniq_key) == ("TopicTest", 1, 0, 3, old.uniq_key)
    assert (m.born_timestamp, m.born_host, m.sysflag) == (old.born_timestamp, old.born_host, old.sysflag)
    assert "DELAY" not in m.properties
    assert (m.properties["REAL_TOPIC"], m.properties["REAL_QID"], m.properties["a"]) == ("TopicTest", "1", "1")
    assert store.query_by_key("TopicTest", "k1")[0].msg_id == m.msg_id
    assert m.size == store.table("commitlog").where(f"physical_offset = {m.commitlog_offset}").first().size


def _dispatch_with_every_unit_in_the_ext_table(store) -> None:
    """Dispatch as stores did before ext units were kept for bitmaps alone: every consume queue unit points at
    an ext unit holding its real tag code (a delayed message's deliver time)."""
    from storelib.delta.writer import Target, write_items_here
    from storelib.dispatch.request import CommitlogFiles, DispatchRequests
    from storelib.storage.dispatched import REPUT_MARKER

    tables, end = store.context.tables, store.max_offset()
    start = store.dispatch_progress()["consume_queue"]
    names = ("consume_queue_ext", "consume_queue")
    requests = DispatchRequests(dict.fromkeys(names, start), True, 25, tuple(store.config.delay_levels_ms))
    paths = [(p, False, True) for p in tables.commitlog.files(tables.commitlog.snapshot())]
    written = write_items_here(
        paths, {n: Target.of(tables.by_name()[n]) for n in names}, CommitlogFiles(start, end, True, requests)
    )
    for name in names:
        table = tables.by_name()[name]
        table.commit(table.snapshot(), written[name], markers={REPUT_MARKER: end})


def test_a_store_whose_units_all_point_at_ext_units_delivers_on_time(store):
    sent = store.send(Message("TopicTest", body=b"late", tags="TagA", delay_level=2, queue_id=1))
    _dispatch_with_every_unit_in_the_ext_table(store)
    units = store.consume_queue(SCHEDULE_TOPIC, 1).collect()
    assert [u.tags_code < 0 for u in units] == [True]  # an ext address, not the deliver time
    due = _stored_ms(store, sent) + store.config.delay_levels_ms[1]
    assert store.deliver_delayed(now=due - 1).delivered == 0  # the deliver time is read from the ext unit
    assert store.deliver_delayed(now=due).delivered == 1
    assert store.deliver_delayed(now=due + HOUR).delivered == 0
    assert _topic_bodies(store, "TopicTest") == [b"late"]


def test_levels_deliver_in_queue_order_and_stop_at_the_first_not_due(store):
    sent = [store.send(Message("TopicTest", body=b"%d" % i, delay_level=1, queue_id=0)) for i in range(4)]
    last = _stored_ms(store, sent[1]) + store.config.delay_levels_ms[0]
    # no dispatch at all: delivery reads the commitlog past the consume queue's end
    result = store.deliver_delayed(now=last)
    assert result.levels == {1: 2}
    assert store.context.tables.commitlog.view(markers=[level_marker(1)]).marker(level_marker(1)) == 2
    store.dispatch()
    store.deliver_delayed(now=last + HOUR)
    assert _topic_bodies(store, "TopicTest") == [b"0", b"1", b"2", b"3"]


def test_timer_messages_any_time(store):
    real = _ms(dt.datetime.now(dt.timezone.utc))
    base = real + HOUR  # deliver times an hour ahead of the real clock; the runs' clock is injected
    a = store.send(Message("TopicTest", body=b"a", deliver_time_ms=base + 3000, queue_id=3))
    b = store.send(Message("TopicTest", body=b"b", deliver_time_ms=base + 1000))
    c = store.send(Message("TopicTest", body=b"c", properties={"TIMER_DELAY_SEC": "3601", "x": "y"}))
    d = store.send(Message("TopicTest", body=b"d", deliver_time_ms=real - 5))  # already due: a normal message
    assert {a.topic, b.topic, c.topic} == {TIMER_TOPIC} and d.topic == "TopicTest"
    pa_ = store.query_by_id(a.msg_id).properties
    assert (pa_["TIMER_OUT_MS"], pa_["TIMER_DELIVER_MS"], pa_["REAL_TOPIC"], pa_["REAL_QID"]) == (
        str(base + 3000),
        str(base + 3000),
        "TopicTest",
        "3",
    )
    c_at = int(store.query_by_id(c.msg_id).properties["TIMER_OUT_MS"])
    assert base + 1000 < c_at
    store.dispatch()
    assert store.deliver_delayed(now=base + 999).delivered == 0
    assert store.deliver_delayed(now=base + 1000).timer == 1
    assert _topic_bodies(store, "TopicTest") == [b"d", b"b"]
    # a message sent now, due before the timer's progress already is, still goes at the next run
    e = store.send(Message("TopicTest", body=b"e", deliver_time_ms=base + 500))
    assert e.topic == TIMER_TOPIC
    last = max(base + 3000, c_at)
    r = store.deliver_delayed(now=last)
    assert (r.timer, r.newest_delivered_ms) == (3, last)
    in_time_order = [body for _, body in sorted([(base + 500, b"e"), (c_at, b"c"), (base + 3000, b"a")])]
    assert _topic_bodies(store, "TopicTest")[2:] == in_time_order
    store.dispatch()
    assert store.deliver_delayed(now=base + 10 * HOUR).delivered == 0
    got = {m.body: m for m in store.read("TopicTest").collect()}
    assert set(got) == {b"a", b"b", b"c", b"d", b"e"}
    pa_ = dict(got[b"a"].properties)
    assert "REAL_TOPIC" not in pa_ and pa_["TIMER_OUT_MS"] == str(base + 3000) and "TIMER_ENQUEUE_MS" in pa_
    assert pa_["TIMER_DEQUEUE_MS"] == str(last)
    assert got[b"a"].queue_id == 3 and dict(got[b"c"].properties)["x"] == "y"
    tm = store.context.tables.commitlog.view(markers=[TIMER_TIME_MARKER, TIMER_QUEUE_MARKER])
    # a run with nothing due commits nothing: the progress is the last delivering run's
    assert (tm.marker(TIMER_TIME_MARKER), tm.marker(TIMER_QUEUE_MARKER)) == (last, 4)


def test_timer_limit_is_a_setting(spark, store, store_path):
    now = _ms(dt.datetime.now(dt.timezone.utc))
    before = store.max_offset()
    with pytest.raises(TimerMessageError) as e:
        store.send(Message("TopicTest", deliver_time_ms=now + 4 * 24 * HOUR))
    assert e.value.field == "deliver_time_ms" and e.value.code == "WHEEL_TIMER_MSG_ILLEGAL"
    with pytest.raises(TimerMessageError):
        store.send(Message("TopicTest", properties={"TIMER_DELIVER_MS": "soon"}))
    with pytest.raises(ReservedPropertyError):
        store.send(Message("TopicTest", properties={"TIMER_OUT_MS": "1"}))
    assert store.max_offset() == before
    years = MessageStore.create(store_path, spark, timer_max_delay_ms=5 * 365 * 24 * HOUR)
    r = years.send(Message("TopicTest", deliver_time_ms=now + 2 * 365 * 24 * HOUR))
    assert r.topic == TIMER_TOPIC
    assert years.deliver_delayed(now=now + 365 * 24 * HOUR).delivered == 0
    assert years.deliver_delayed(now=now + 2 * 365 * 24 * HOUR).timer == 1


def test_recall_before_delivery_only(store):
    now = _ms(dt.datetime.now(dt.timezone.utc)) + HOUR
    keep = store.send(Message("TopicTest", body=b"keep", deliver_time_ms=now + 1000))
    gone = store.send(Message("TopicTest", body=b"gone", deliver_time_ms=now + 1000))
    assert store.recall(gone.msg_id) == now + 1000
    r = store.deliver_delayed(now=now + 1000)
    assert (r.timer, r.recalled) == (1, 1)
    assert _topic_bodies(store, "TopicTest") == [b"keep"]
    with pytest.raises(TimerMessageError, match="already delivered"):
        store.recall(keep.msg_id)
    with pytest.raises(TimerMessageError, match="not a timer message"):
        store.recall(store.send(Message("TopicTest")).msg_id)


def test_retry_to_dlq_end_to_end(store):
    """Fail a message 17 times: 16 redeliveries through SCHEDULE_TOPIC_XXXX to %RETRY%, then %DLQ%."""
    store.subscribe("GroupA", "TopicTest", "*")
    first = store.send(Message("TopicTest", body=b"poison", tags="TagA"))
    store.dispatch()
    m = store.pull("GroupA", "TopicTest", first.queue_id, 0).messages[0]
    far = _ms(dt.datetime.now(dt.timezone.utc)) + 100 * HOUR
    offset = 0
    for failure in range(1, 17):
        back = store.send_back(m, "GroupA")
        assert back.topic == SCHEDULE_TOPIC
        store.dispatch()
        assert store.pull("GroupA", "%RETRY%GroupA", 0, offset).messages == []  # not before its time
        assert store.deliver_delayed(now=far).delivered == 1
        store.dispatch()
        got = store.pull("GroupA", "%RETRY%GroupA", 0, offset).messages
        assert len(got) == 1 and got[0].body == b"poison" and got[0].reconsume_times == failure
        m, offset = got[0], offset + 1
    dead = store.send_back(m, "GroupA")
    assert dead.topic == "%DLQ%GroupA"
    assert store.deliver_delayed(now=far).delivered == 0
    store.dispatch()
    dlq = store.read("%DLQ%GroupA").collect()
    assert len(dlq) == 1 and dlq[0].body == b"poison" and dlq[0].reconsume_times == 17
    assert dict(dlq[0].properties)["ORIGIN_MESSAGE_ID"] == first.msg_id


def _filled(store, n: int = 30):
    now = _ms(dt.datetime.now(dt.timezone.utc))
    store.send_batch([Message("TopicTest", body=b"L%d" % i, delay_level=1 + i % 3, queue_id=i % 4) for i in range(n)])
    store.send_batch(
        [Message("TopicTest", body=b"T%d" % i, deliver_time_ms=now + 1000 + (i * 7919) % 5000) for i in range(n)]
    )
    store.dispatch()
    return now + 10 * HOUR


def _delivered(store):
    return store.messages("TopicTest").select(
        "topic", "queue_id", "queue_offset", "body", "flag", "sysflag", "uniq_key", "tags", "size", "reconsume_times"
    )


def test_spark_and_arrow_paths_deliver_the_same(spark, store, tmp_path):
    other = MessageStore.create(str(tmp_path / "other"), spark)
    other.create_topic("TopicTest", queues=4)
    now = _filled(store)
    arrow = deliver(store.context, now=now)
    assert not arrow.spark and arrow.delivered == 60
    # the same sends into another store, delivered with Spark
    now2 = _filled(other)
    big = deliver(other.context, now=now2, spark_rows=0)
    assert big.spark and big.delivered == 60 and big.levels == arrow.levels and big.timer == 30
    a = _delivered(store).where("body like 'L%'").drop("uniq_key")
    b = _delivered(other).where("body like 'L%'").drop("uniq_key")
    assert_df_equality(a, b, ignore_row_order=True, ignore_nullable=True)
    order = [r.body for r in other.messages("TopicTest").where("body like 'T%'").orderBy("physical_offset").collect()]
    times = [
        int(dict(r.properties)["TIMER_OUT_MS"])
        for r in other.messages("TopicTest").where("body like 'T%'").orderBy("physical_offset").collect()
    ]
    assert len(order) == 30 and times == sorted(times)
    assert deliver(other.context, now=now2, spark_rows=0).delivered == 0


class TestCrashSafety:
    @pytest.mark.parametrize("step", ["planned", "committed"])
    @pytest.mark.parametrize("spark_rows", [10**6, 0])
    def test_crash_then_rerun(self, store, step, spark_rows):
        now = _filled(store, 10)

        def crash(name: str) -> None:
            if name == step:
                raise KeyboardInterrupt(name)

        with pytest.raises(KeyboardInterrupt):
            deliver(store.context, now=now, fault=crash, spark_rows=spark_rows)
        again = deliver(store.context, now=now, spark_rows=spark_rows)
        assert again.delivered == (20 if step == "planned" else 0)
        assert store.messages("TopicTest").count() == 20
        assert store.messages("TopicTest").select("uniq_key").distinct().count() == 20

    def test_killed_process_then_rerun(self, store, python_env):
        now = _filled(store, 10)
        crashed = subprocess.run(
            [sys.executable, "-c", CRASHING_DELIVERY, store.root, "committed", str(now)],
            env=python_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert crashed.returncode == 86, crashed.stderr[-2000:]
        assert store.deliver_delayed(now=now).delivered == 0
        assert store.messages("TopicTest").count() == 20


#: Delivery in its own process that dies hard (no cleanup) at the step named by argv[2].
CRASHING_DELIVERY = """
import os, sys
from storelib import MessageStore
from storelib.schedule.deliver import deliver
from storelib.session import get_spark

store = MessageStore.create(sys.argv[1], get_spark("crashing-delivery"))
deliver(store.context, now=int(sys.argv[3]), fault=lambda step: os._exit(86) if step == sys.argv[2] else None)
"""


def test_deliver_job(store, python_env):
    from pathlib import Path

    now = _filled(store, 4)
    job = Path(__file__).resolve().parents[2] / "jobs" / "deliver_delayed.py"
    out = subprocess.run(
        [sys.executable, str(job), "--store", store.root, "--now", str(now)],
        env=python_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "delivered 8 messages (level 1: 2, level 2: 1, level 3: 1; timer: 4; recalled: 0)" in out.stdout
    assert store.max_queue_offset("TopicTest", 0) + store.max_queue_offset("TopicTest", 1) >= 1  # dispatched
    bad = subprocess.run(
        [sys.executable, str(job), "--store", store.root, "--now", "x"],
        env=python_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_may_hold_scheduled_is_false_until_a_message_waits(store):
    from storelib.schedule.deliver import may_hold_scheduled

    store.send(Message("TopicTest", body=b"now"))
    assert not may_hold_scheduled(store.context)
    store.send(Message("TopicTest", body=b"later", delay_level=2))
    assert may_hold_scheduled(store.context)
