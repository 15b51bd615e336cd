"""Dispatch in this process for small increments (same rows as the Spark job), and the follower."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from chispa import assert_df_equality

from storelib import Message, MessageSelector, MessageStore
from storelib.dispatch.reput import Dispatcher
from storelib.storage.summaries import compact_summaries, read_summaries

TABLES = ("consume_queue", "consume_queue_ext", "index")


def _fill(store, n: int = 60) -> None:
    store.subscribe("GroupSql", "TopicTest", MessageSelector.by_sql("a > 10 AND region = 'eu'"))
    store.subscribe("GroupTag", "TopicTest", "TagA || TagB")
    store.send_batch(
        [
            Message(
                "TopicTest",
                body=f"m{i}".encode(),
                tags=f"Tag{'ABC'[i % 3]}",
                keys=[f"k{i}", f"o{i % 7}"],
                properties={"a": str(i), "region": "eu" if i % 2 else "us"},
                queue_id=i % 4,
            )
            for i in range(n)
        ]
    )
    store.send_batch(
        [
            Message("TopicTest", body=b"later", delay_level=3),
            Message("TopicTest", body=b"t", deliver_time_ms=int(time.time() * 1000) + 3_600_000),
        ]
    )


def test_a_small_dispatch_here_writes_what_the_spark_job_writes(spark, store, tmp_path):
    _fill(store)
    copy = str(tmp_path / "copy")
    shutil.copytree(store.root, copy)
    by_spark = MessageStore.open(store.root, spark, dispatch_local_max_bytes=0)
    here = MessageStore.open(copy, spark)
    assert here.max_offset() <= here.config.dispatch_local_max_bytes
    sc = spark.sparkContext
    sc.setJobGroup("storelib-test-local-dispatch", "a small dispatch runs no Spark job")
    local = here.dispatch()
    jobs = len(sc.statusTracker().getJobIdsForGroup("storelib-test-local-dispatch"))
    sc.setLocalProperty("spark.jobGroup.id", None)
    assert jobs == 0 and local.consume_queue_rows == 62
    remote = by_spark.dispatch()
    assert remote.rows == local.rows
    for name in TABLES:
        a = by_spark.table(name).drop("registry_version" if name == "consume_queue_ext" else "_none_")
        b = here.table(name).drop("registry_version" if name == "consume_queue_ext" else "_none_")
        order = a.columns
        assert_df_equality(a.orderBy(*order), b.orderBy(*order), ignore_nullable=True)
    assert here.pull("GroupSql", "TopicTest", 3, 0).messages == by_spark.pull("GroupSql", "TopicTest", 3, 0).messages


def test_a_follower_dispatches_as_messages_arrive_and_stops_when_told(store):
    import threading

    stop, heard = threading.Event(), []
    follower = threading.Thread(
        target=lambda: heard.append(store.dispatcher().run(follow=True, stop=stop, interval_ms=20))
    )
    follower.start()
    try:
        for i in range(3):
            store.send(Message("TopicTest", body=str(i).encode(), queue_id=0))
            deadline = time.monotonic() + 30
            while store.max_queue_offset("TopicTest", 0) <= i and time.monotonic() < deadline:
                time.sleep(0.02)
            assert store.max_queue_offset("TopicTest", 0) == i + 1
    finally:
        stop.set()
        follower.join(timeout=60)
    assert not follower.is_alive() and heard[0].consume_queue_rows == 3


def test_a_follower_records_the_summaries_of_its_ext_files(store):
    """Summaries are recorded once a second while rounds follow each other, and when the follower is idle or stops:
    every ext file the follower committed has one."""
    import threading

    from storelib.delta.log import add_actions
    from storelib.storage.summaries import read_summaries

    store.subscribe("GroupS", "TopicTest", MessageSelector.by_sql("a > 5"))  # the topic's messages get ext units
    stop = threading.Event()
    follower = threading.Thread(target=store.dispatcher().run, kwargs={"follow": True, "stop": stop, "interval_ms": 20})
    follower.start()
    try:
        for i in range(6):
            store.send(Message("TopicTest", tags=f"Tag{i % 2}", body=b"x", queue_id=i % 2))
        deadline = time.monotonic() + 30
        while store.dispatch_progress()["consume_queue_ext"] < store.max_offset() and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        stop.set()
        follower.join(timeout=60)
    ext = store.context.tables.consume_queue_ext
    files = set(add_actions(ext.snapshot()).column("path").to_pylist())
    assert files and files <= set(
        read_summaries(store.context.tables.ext_summary, "TopicTest").column("path").to_pylist()
    )


def test_a_follower_builds_the_index_once_a_second_and_all_of_it_when_stopped(store):
    import threading

    stop = threading.Event()
    follower = threading.Thread(target=store.dispatcher().run, kwargs={"follow": True, "stop": stop, "interval_ms": 20})
    follower.start()
    try:
        store.send(Message("TopicTest", keys="first", body=b"x", queue_id=0))
        deadline = time.monotonic() + 30
        while not store.query_by_key("TopicTest", "first") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(store.query_by_key("TopicTest", "first")) == 1  # found within the follower's index cadence
        store.send(Message("TopicTest", keys="last", body=b"x", queue_id=0))
        while store.max_queue_offset("TopicTest", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()  # within a second of the last index round: the stop brings the index up
        follower.join(timeout=60)
    assert store.dispatch_progress()["index"] == store.max_offset()
    assert len(store.query_by_key("TopicTest", "last")) == 1


def test_a_round_does_not_wait_for_the_index(store):
    """The follower's index thread held at its commit: the rounds go on, and consumers see new messages; let
    go, the index catches up, and stopping brings every table to the end."""
    import threading

    store.subscribe("GroupA", "TopicTest", "*")
    release, held, stop = threading.Event(), threading.Event(), threading.Event()

    def fault(step: str) -> None:
        if step == "index.written":
            held.set()
            release.wait(60)

    follower = threading.Thread(
        target=Dispatcher.of(store.context, fault=fault).run,
        kwargs={"follow": True, "stop": stop, "interval_ms": 20, "compact_every_ms": 0},
    )
    follower.start()
    try:
        store.send(Message("TopicTest", keys="first", body=b"x", queue_id=0))
        assert held.wait(30)  # the index thread is at its commit, and stays there
        store.send(Message("TopicTest", keys="second", body=b"x", queue_id=0))
        deadline = time.monotonic() + 30
        while store.max_queue_offset("TopicTest", 0) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert store.max_queue_offset("TopicTest", 0) == 2 and store.dispatch_progress()["index"] < store.max_offset()
        assert [m.keys for m in store.pull("GroupA", "TopicTest", 0, 0).messages] == ["first", "second"]
    finally:
        release.set()
        stop.set()
        follower.join(timeout=60)
    assert set(store.dispatch_progress().values()) == {store.max_offset()}
    assert len(store.query_by_key("TopicTest", "second")) == 1


def test_a_failed_index_stops_the_follower_with_its_error_and_loses_nothing(store):
    import threading

    def fault(step: str) -> None:
        if step == "index.written":
            raise OSError("disk full")

    store.send(Message("TopicTest", keys="first", body=b"x", queue_id=0))
    stop, raised = threading.Event(), []

    def follow() -> None:
        try:
            Dispatcher.of(store.context, fault=fault).run(follow=True, stop=stop, interval_ms=20, compact_every_ms=0)
        except OSError as e:
            raised.append(e)

    follower = threading.Thread(target=follow)
    follower.start()
    follower.join(timeout=60)  # it stops by itself
    assert not follower.is_alive() and stop.is_set() and [str(e) for e in raised] == ["disk full"]
    assert store.max_queue_offset("TopicTest", 0) == 1 and store.dispatch_progress()["index"] < store.max_offset()
    store.dispatch()  # the next run builds what the failed one did not
    assert set(store.dispatch_progress().values()) == {store.max_offset()}
    assert len(store.query_by_key("TopicTest", "first")) == 1


def test_a_follower_starts_a_round_at_most_once_every_round_ms(store):
    """Messages sent every 10 ms for 1.5 s: with round_ms=400 no more than one round per 400 ms, and every
    message dispatched once."""
    import threading

    stop, heard = threading.Event(), []
    follower = threading.Thread(
        target=store.dispatcher().run,
        kwargs={
            "follow": True,
            "stop": stop,
            "interval_ms": 5,
            "round_ms": 400,
            "compact_every_ms": 0,
            "on_round": heard.append,
        },
    )
    began = time.monotonic()
    follower.start()
    sent = 0
    try:
        while time.monotonic() - began < 1.5:
            store.send(Message("TopicTest", body=b"x", queue_id=0))
            sent += 1
            time.sleep(0.01)
    finally:
        stop.set()
        follower.join(timeout=60)
    elapsed = time.monotonic() - began
    assert 1 <= len(heard) <= elapsed / 0.4 + 1 < sent
    assert store.consume_queue("TopicTest", 0).count() == sent
    assert set(store.dispatch_progress().values()) == {store.max_offset()}


def test_a_held_pull_is_answered_by_the_follower(store):
    import threading

    store.subscribe("GroupA", "TopicTest", "*")
    stop = threading.Event()
    follower = threading.Thread(target=lambda: store.dispatcher().run(follow=True, stop=stop, interval_ms=20))
    follower.start()
    try:
        threading.Timer(0.3, lambda: store.send(Message("TopicTest", body=b"wake", queue_id=2))).start()
        began = time.monotonic()
        r = store.pull("GroupA", "TopicTest", 2, 0, suspend_timeout_ms=20_000)
        assert [m.body for m in r.messages] == [b"wake"] and time.monotonic() - began < 15
    finally:
        stop.set()
        follower.join(timeout=60)


@pytest.mark.slow
def test_a_killed_follower_restarts_with_nothing_lost_or_twice(store, python_env):
    """``storelib dispatch --follow`` without Java (small increments need no Spark), killed mid-way, restarted."""
    env = {**python_env, "JAVA_HOME": "/nonexistent", "PATH": "/usr/sbin:/sbin"}
    command = [sys.executable, "-m", "storelib", "dispatch", "--follow", "--interval-ms", "20", "--store", store.root]
    sent = 0

    def send(batches: int) -> None:
        nonlocal sent
        for _ in range(batches):
            store.send_batch(
                [Message("TopicTest", body=f"{sent + i}".encode(), keys=[f"k{sent + i}"]) for i in range(25)]
            )
            sent += 25
            time.sleep(0.05)

    def caught_up(proc) -> None:
        deadline = time.monotonic() + 60
        while min(store.dispatch_progress().values()) < store.max_offset():
            assert proc.poll() is None, proc.communicate()[1][-2000:]
            assert time.monotonic() < deadline, store.dispatch_progress()
            time.sleep(0.05)

    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    send(6)
    caught_up(first)
    send(4)
    first.kill()  # SIGKILL, wherever it is
    first.communicate(timeout=60)
    send(4)
    second = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    send(2)
    caught_up(second)
    second.send_signal(signal.SIGTERM)
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, err[-2000:]
    assert out.startswith("stopped by SIGTERM after ") and "Traceback" not in err
    units = store.context.tables.consume_queue.read_arrow(columns=["queue_id", "queue_offset", "commitlog_offset"])
    assert units.num_rows == sent == len(set(units.column("commitlog_offset").to_pylist()))
    for q in range(4):
        offsets = sorted(
            o
            for qid, o in zip(units.column("queue_id").to_pylist(), units.column("queue_offset").to_pylist())
            if qid == q
        )
        assert offsets == list(range(len(offsets)))
    assert [m.body for m in store.query_by_key("TopicTest", f"k{sent - 1}")] == [str(sent - 1).encode()]
    assert MessageStore.verify(store.root, full=True) == []
    assert Path(store.root).exists() and Dispatcher.of(store.context).progress()["index"] == store.max_offset()


def test_a_follower_merges_fresh_small_files_and_reads_stay_the_same(spark, store):
    """compact_fresh: fewer files in the commitlog, consume queue and index, the same rows, pulls and
    look-ups as before, and dispatching goes on from where it was."""
    store.subscribe("GroupF", "TopicTest", "*")
    store.subscribe("GroupS", "TopicTest", MessageSelector.by_sql("a > 5"))  # its bitmaps live in the ext table
    for i in range(12):  # twelve commits, twelve dispatch rounds: a small file per commit and queue
        store.send_batch(
            [
                Message("TopicTest", body=f"{i}-{q}".encode(), keys=[f"k{i}"], queue_id=q, properties={"a": str(i)})
                for q in range(4)
            ]
        )
        store.dispatch()
    tables = {name: store.context.tables.by_name()[name] for name in ("commitlog", "consume_queue", "index")}
    ext = store.context.tables.consume_queue_ext
    before = {name: store.table(name).localCheckpoint() for name in tables}
    files = {name: t.view().actions.num_rows for name, t in tables.items()}
    ext_files = ext.view().actions.num_rows
    pulled = [m.body for m in store.pull("GroupF", "TopicTest", 2, 0, 32).messages]
    filtered = [m.body for m in store.pull("GroupS", "TopicTest", 2, 0, 32).messages]

    done = store.dispatcher().compact_fresh()

    for name, t in tables.items():
        removed, added = done[name]
        assert t.view().actions.num_rows == files[name] - removed + added < files[name], name
        order = {
            "commitlog": ["physical_offset"],
            "consume_queue": ["topic", "queue_id", "queue_offset"],
            "index": ["key_hash", "commitlog_offset"],
        }[name]
        assert_df_equality(store.table(name).orderBy(*order), before[name].orderBy(*order), ignore_nullable=True)
    assert (
        [m.body for m in store.pull("GroupF", "TopicTest", 2, 0, 32).messages]
        == pulled
        == [f"{i}-2".encode() for i in range(12)]
    )
    assert done["consume_queue_ext"][0] > 0 and ext.view().actions.num_rows < ext_files
    assert (
        [m.body for m in store.pull("GroupS", "TopicTest", 2, 0, 32).messages]
        == filtered
        == [f"{i}-2".encode() for i in range(6, 12)]
    )
    # the ext summaries: a file per dispatch round and merge, merged in turn once old enough, the rows
    # of the ext files merged away left out
    summaries = store.context.tables.ext_summary
    live = ext.view().actions.column("path").to_pylist()
    assert done["consume_queue_ext_summary"] == (0, 0)  # all younger than the default 10 s
    many = summaries.view().actions.num_rows
    assert read_summaries(summaries, "TopicTest").num_rows > len(live)
    assert compact_summaries(summaries, live, min_age_ms=0) == (many, 1)
    assert sorted(read_summaries(summaries, "TopicTest").column("path").to_pylist()) == sorted(live)
    assert [m.body for m in store.pull("GroupS", "TopicTest", 2, 0, 32).messages] == filtered
    assert sorted(m.body for m in store.query_by_key("TopicTest", "k5")) == [f"5-{q}".encode() for q in range(4)]
    store.send(Message("TopicTest", body=b"after", queue_id=2))
    assert store.dispatch().consume_queue_rows == 1
    assert [m.body for m in store.pull("GroupF", "TopicTest", 2, 12, 32).messages] == [b"after"]
    assert MessageStore.verify(store.root, full=True) == []


def test_a_merge_whose_files_another_merge_took_meanwhile_starts_over_and_doubles_nothing(store):
    """compact_here commits from the newest snapshot in the commit turn: files its plan would remove
    that another merge removed meanwhile (here, a second handle's, run while the first writes) make it
    plan again, so no row is written twice."""
    from storelib.delta.compaction import compact_here
    from storelib.delta.table import Table

    for i in range(6):
        store.send(Message("TopicTest", body=str(i).encode(), queue_id=i % 4))
    commitlog = store.context.tables.commitlog
    other = Table(commitlog.path, commitlog.spec)
    raced = []

    def race(files):
        if not raced:  # once: the other handle merges the same files before this merge commits
            raced.append(compact_here(other, order_by="physical_offset"))

    assert compact_here(commitlog, order_by="physical_offset", before_commit=race) == (0, 0)
    assert raced == [(6, 1)]  # the other merge took all six
    rows = commitlog.read_arrow(columns=["physical_offset", "body"]).sort_by("physical_offset").to_pylist()
    assert [r["body"] for r in rows] == [str(i).encode() for i in range(6)]
    assert MessageStore.verify(store.root, full=True) == []


def test_the_follower_merges_fresh_files_in_the_background(store):
    import threading

    store.subscribe("GroupB", "TopicTest", "*")
    for i in range(8):
        store.send(Message("TopicTest", body=str(i).encode(), queue_id=3))
    commitlog = store.context.tables.commitlog
    many = commitlog.view().actions.num_rows
    stop = threading.Event()
    follower = threading.Thread(
        target=lambda: store.dispatcher().run(follow=True, stop=stop, interval_ms=20, compact_every_ms=100)
    )
    follower.start()
    try:
        deadline = time.monotonic() + 60
        while commitlog.view().actions.num_rows >= many and time.monotonic() < deadline:
            time.sleep(0.05)
        assert commitlog.view().actions.num_rows < many
    finally:
        stop.set()
        follower.join(timeout=60)
    assert not follower.is_alive()
    assert [m.body for m in store.pull("GroupB", "TopicTest", 3, 0, 32).messages] == [str(i).encode() for i in range(8)]
