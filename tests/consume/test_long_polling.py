"""Long and short polling: held pulls wake for matching messages only, or answer when their time is up."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from storelib import Message, MessageStore
from storelib.consume.get_message import GetMessageStatus as S
from storelib.consume.pull import PullStatus as P
from storelib.dispatch.reput import Dispatcher


def later(seconds: float, action) -> threading.Thread:
    def run():
        time.sleep(seconds)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def send_and_dispatch(store: MessageStore, tags: str, body: bytes):
    return lambda: (store.send(Message("TopicTest", tags=tags, body=body, queue_id=0)), store.dispatch())


def test_held_pull_wakes_for_a_matching_message_only(store):
    store.subscribe("GroupA", "TopicTest", "TagA")
    later(0.5, send_and_dispatch(store, "TagX", b"not for GroupA"))
    producer = later(3.0, send_and_dispatch(store, "TagA", b"for GroupA"))
    began = time.monotonic()
    r = store.pull("GroupA", "TopicTest", 0, 0, suspend_timeout_ms=120_000)
    held = time.monotonic() - began
    producer.join()
    assert (r.status, r.get_status, [m.body for m in r.messages]) == (P.FOUND, S.FOUND, [b"for GroupA"])
    assert r.next_begin_offset == 2
    assert held >= 3.0 and r.suspended_ms >= 2500  # the TagX message arrived first and did not wake it
    assert held < 100  # woken by the arrival, not by the timeout


def test_woken_pull_answers_with_the_subscription_of_its_waking(store):
    """A subscription changed while a pull was held: the woken pull is run again under the new one."""
    store.subscribe("GroupA", "TopicTest", "TagA")

    def resubscribe_then_send():
        store.subscribe("GroupA", "TopicTest", "TagB")
        send_and_dispatch(store, "TagA", b"for the old subscription")()

    later(0.3, resubscribe_then_send)
    r = store.pull("GroupA", "TopicTest", 0, 0, suspend_timeout_ms=60_000)
    assert (r.status, r.get_status, r.messages, r.next_begin_offset) == (P.NO_MATCHED_MSG, S.NO_MATCHED_MESSAGE, [], 1)
    assert r.suspended_ms < 30_000  # the TagA message woke it (the old filter held it)


def test_held_pull_answers_when_time_runs_out(store):
    store.subscribe("GroupA", "TopicTest", "TagA")
    r = store.pull("GroupA", "TopicTest", 0, 0, suspend_timeout_ms=1200)
    assert (r.status, r.get_status, r.next_begin_offset) == (P.NO_NEW_MSG, S.NO_MESSAGE_IN_QUEUE, 0)
    assert r.suspended_ms >= 1200
    send_and_dispatch(store, "TagX", b"x")()
    r = store.pull("GroupA", "TopicTest", 0, 1, suspend_timeout_ms=200)
    assert (r.status, r.next_begin_offset) == (P.NO_NEW_MSG, 1)
    producer = later(0.2, send_and_dispatch(store, "TagY", b"y"))
    r = store.pull("GroupA", "TopicTest", 0, 1, suspend_timeout_ms=2500)
    producer.join()
    assert (r.status, r.get_status, r.next_begin_offset) == (P.NO_MATCHED_MSG, S.NO_MATCHED_MESSAGE, 2)
    assert r.suspended_ms >= 2500  # a message that does not match does not end the wait


def test_pulls_that_find_something_are_not_held(store):
    store.subscribe("GroupA", "TopicTest", "*")
    send_and_dispatch(store, "TagA", b"a")()
    r = store.pull("GroupA", "TopicTest", 0, 0, suspend_timeout_ms=60_000)
    assert (r.status, r.suspended_ms) == (P.FOUND, 0)
    r = store.pull("GroupA", "TopicTest", 0, 9, suspend_timeout_ms=60_000)
    assert (r.status, r.suspended_ms) == (P.OFFSET_ILLEGAL, 0)


def test_short_polling_waits_one_second(spark, store_path):
    store = MessageStore.create(store_path, spark, long_polling_enable=False)
    store.create_topic("TopicTest", queues=1)
    store.subscribe("GroupA", "TopicTest", "*")
    r = store.pull("GroupA", "TopicTest", 0, 0, suspend_timeout_ms=60_000)
    assert r.status is P.NO_NEW_MSG and 1000 <= r.suspended_ms < 10_000


def test_offset_is_committed_once_even_when_held(store):
    store.subscribe("GroupA", "TopicTest", "*")
    before = store.context.tables.consumer_offset.snapshot().version()
    later(0.3, send_and_dispatch(store, "TagA", b"a"))
    r = store.pull("GroupA", "TopicTest", 0, 0, suspend_timeout_ms=60_000, commit_offset=0)
    assert r.status is P.FOUND
    assert store.committed_offset("GroupA", "TopicTest", 0) == 0
    assert store.context.tables.consumer_offset.snapshot().version() == before + 1


PRODUCER = textwrap.dedent("""
    import sys, time
    from storelib.storage.commitlog import CommitLog
    from storelib.model.config import StoreConfig
    from storelib.model.message import Message
    from storelib.send.producer import Producer
    from storelib.storage.schema import COMMITLOG, TOPIC_CONFIG
    from storelib.delta.table import Table
    from storelib.storage.topic_config import TopicConfigTable

    root = sys.argv[1]
    config = StoreConfig()
    log = CommitLog(Table(root + "/commitlog", COMMITLOG), config)
    topics = TopicConfigTable(Table(root + "/topic_config", TOPIC_CONFIG)).all()
    producer = Producer(config)
    time.sleep(1.0)
    log.append(producer.encode([Message("TopicTest", tags="TagX", body=b"other", queue_id=0)], topics))
    time.sleep(1.0)
    log.append(producer.encode([Message("TopicTest", tags="TagA", body=b"from another process", queue_id=0)], topics))
""")


@pytest.mark.slow
def test_held_pull_sees_messages_of_another_process(store, python_env):
    """A producer process, and a dispatcher whose commits this store is not told about: found by looking."""
    store.subscribe("GroupA", "TopicTest", "TagA")
    producer = subprocess.Popen(
        [sys.executable, "-c", PRODUCER, store.root], env=python_env, stderr=subprocess.PIPE, text=True
    )
    stop = threading.Event()

    def dispatcher():
        while not stop.is_set():
            Dispatcher.of(store.context).run()  # not store.dispatch(): no in-process wake-up
            time.sleep(0.2)

    thread = threading.Thread(target=dispatcher, daemon=True)
    thread.start()
    try:
        r = store.pull("GroupA", "TopicTest", 0, 0, suspend_timeout_ms=180_000)
    finally:
        stop.set()
        thread.join()
        _, err = producer.communicate(timeout=120)
    assert producer.returncode == 0, err
    assert (r.status, [m.body for m in r.messages], r.next_begin_offset) == (P.FOUND, [b"from another process"], 2)
    assert r.suspended_ms >= 1500
