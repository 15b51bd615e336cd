"""Group commit: concurrent sends of one process share commits; offsets stay RocketMQ's across processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections import defaultdict
from concurrent.futures import Future

import pytest

from storelib import Message
from storelib.model.errors import ConcurrentWriteError, ConfigError, InvalidTopicError, StoreStateError
from storelib.send.group_commit import GroupCommitProducer


def _check_offsets(store, topic: str = "TopicTest") -> list[dict]:
    """Every stored message of ``topic``: physical offsets back to back, queue offsets 0..n-1 per queue."""
    rows = sorted(
        store.context.tables.commitlog.read_arrow(
            columns=["physical_offset", "size", "topic", "queue_id", "queue_offset", "body"]
        ).to_pylist(),
        key=lambda r: r["physical_offset"],
    )
    for a, b in zip(rows, rows[1:]):
        assert b["physical_offset"] == a["physical_offset"] + a["size"], (a, b)
    per_queue = defaultdict(list)
    for r in rows:
        if r["topic"] == topic:
            per_queue[r["queue_id"]].append(r["queue_offset"])
    for offsets in per_queue.values():
        assert offsets == list(range(len(offsets)))
    return [r for r in rows if r["topic"] == topic]


def test_threads_share_commits_and_keep_their_order(store):
    threads, each = 8, 25
    results: dict[int, list] = {}

    with store.producer() as producer:

        def work(t: int) -> None:
            results[t] = [
                producer.send(Message("TopicTest", body=f"{t}-{i}".encode(), queue_id=t % 4)) for i in range(each)
            ]

        running = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for th in running:
            th.start()
        for th in running:
            th.join()
        commits = producer.commits
    sent = [r for rs in results.values() for r in rs]
    assert len(sent) == threads * each and {r.send_status for r in sent} == {"SEND_OK"}
    assert len({r.msg_id for r in sent}) == len(sent) and len({r.commitlog_offset for r in sent}) == len(sent)
    assert commits < len(sent)  # sends waiting on a commit went in together
    for t, rs in results.items():  # each thread's sends in order in its queue
        assert [r.queue_offset for r in rs] == sorted(r.queue_offset for r in rs)
    rows = _check_offsets(store)
    assert sorted(r["body"] for r in rows) == sorted(f"{t}-{i}".encode() for t in range(threads) for i in range(each))
    by_offset = {r.commitlog_offset: r for r in sent}
    assert all(by_offset[row["physical_offset"]].queue_offset == row["queue_offset"] for row in rows)


def test_a_linger_gathers_async_sends_into_one_commit(store):
    producer = store.producer(linger_ms=200, max_batch=50)
    futures = [producer.send_async(Message("TopicTest", body=str(i).encode(), queue_id=0)) for i in range(20)]
    assert [f.result().queue_offset for f in futures] == list(range(20))
    assert (producer.commits, producer.committed) == (1, 20)
    producer.close()
    with pytest.raises(StoreStateError, match="is closed"):
        producer.send(Message("TopicTest"))


def test_after_a_commit_of_several_callers_the_next_group_regathers_and_a_lone_sender_never_waits():
    """``regather_ms``: the callers a commit of several answered, sending again within it, share the next commit
    (without it, the first to come back would be committed alone); a lone sender's next send is not held."""
    groups: list[list[int]] = []
    committing, queued = threading.Event(), threading.Event()

    def append(group):
        committing.set()
        queued.wait()  # the first commit lasts until the next two sends are queued: they share the second
        groups.append(list(group))
        return list(group)

    with GroupCommitProducer(lambda m: m, append, regather_ms=600) as p:
        first = [p.send_async(0)]
        committing.wait(5)
        first += [p.send_async(1), p.send_async(2)]
        queued.set()
        assert [f.result() for f in first] == [0, 1, 2] and groups == [[0], [1, 2]]
        later = [p.send_async(10)]
        time.sleep(0.1)  # well inside the 600 ms
        later.append(p.send_async(11))
        assert [f.result() for f in later] == [10, 11]
    assert groups[-1] == [10, 11], groups
    with GroupCommitProducer(lambda m: m, append, regather_ms=60_000) as lone:
        assert [lone.send(i) for i in range(3)] == [0, 1, 2]  # a minute's regathering each would time the test out
    assert groups[-3:] == [[0], [1], [2]]
    with pytest.raises(ConfigError, match="regather_ms"):
        GroupCommitProducer(lambda m: m, append, regather_ms=-1)


def test_max_batch_splits_groups_and_flush_waits(store):
    with store.producer(linger_ms=500, max_batch=4) as producer:
        futures = [producer.send_async(Message("TopicTest", queue_id=1)) for _ in range(10)]
        producer.flush()
        assert all(f.done() for f in futures) and producer.commits >= 3 and producer.committed == 10
    assert store.max_queue_offset("TopicTest", 1) == 0 and _check_offsets(store)[-1]["queue_offset"] == 9


def test_a_bad_message_fails_only_its_own_send(store):
    with store.producer(linger_ms=100) as producer:
        good = producer.send_async(Message("TopicTest", body=b"ok"))
        with pytest.raises(InvalidTopicError):
            producer.send_async(Message("No Such Topic!", body=b"bad"))
        assert good.result().send_status == "SEND_OK"
    assert [r["body"] for r in _check_offsets(store)] == [b"ok"]


def test_a_failed_commit_fails_every_send_of_its_group():
    calls = []

    def append(group):
        calls.append(list(group))
        if len(calls) == 1:
            raise ConcurrentWriteError("commitlog", "send: other writers won 16 commits in a row")
        return [f"ok {g}" for g in group]

    with GroupCommitProducer(lambda m: m, append, linger_ms=100) as producer:
        first = [producer.send_async(i) for i in range(3)]
        for f in first:
            with pytest.raises(ConcurrentWriteError):
                f.result()
        assert producer.send(9) == "ok 9"  # the next group commits
    assert calls == [[0, 1, 2], [9]] and producer.commits == 1


def test_submit_keeps_in_flight_groups_handed_on_and_settles_them_in_order():
    """With ``submit``, the committer hands a group on and takes the next without waiting for it to
    land, up to ``in_flight`` at once; each group's senders get its results, or its error alone."""
    handed: list[tuple[list, Future]] = []
    lock = threading.Condition()

    def submit(group):
        future = Future()
        with lock:
            handed.append((list(group), future))
            lock.notify_all()
        return future

    def wait_for(n):
        with lock:
            assert lock.wait_for(lambda: len(handed) >= n, timeout=10)

    producer = GroupCommitProducer(lambda m: m, None, submit=submit, in_flight=2)
    a = producer.send_async(1)
    wait_for(1)
    b = producer.send_async(2)
    wait_for(2)  # handed on while the first is under way
    c, d = producer.send_async(3), producer.send_async(4)
    time.sleep(0.2)
    assert [g for g, _ in handed] == [[1], [2]]  # two under way: the third waits for a slot
    handed[0][1].set_result(["one"])
    wait_for(3)
    assert [g for g, _ in handed] == [[1], [2], [3, 4]] and a.result() == "one"
    handed[1][1].set_exception(ConcurrentWriteError("commitlog", "lost"))
    handed[2][1].set_result(["three", "four"])
    with pytest.raises(ConcurrentWriteError):
        b.result()
    assert (c.result(), d.result()) == ("three", "four")
    producer.flush()
    assert (producer.commits, producer.committed) == (2, 3)
    producer.close()


def test_submit_and_append_are_exclusive():
    with pytest.raises(ConfigError, match="exactly one of append and submit"):
        GroupCommitProducer(lambda m: m, lambda g: g, submit=lambda g: Future())
    with pytest.raises(ConfigError, match="in_flight"):
        GroupCommitProducer(lambda m: m, None, submit=lambda g: Future(), in_flight=0)


def test_store_send_from_threads_goes_through_the_default_producer(store):
    def work(t):
        for i in range(10):
            store.send(Message("TopicTest", body=f"{t}.{i}".encode()))

    running = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for th in running:
        th.start()
    for th in running:
        th.join()
    assert store.context.sends.committed == 60 and store.context.sends.commits < 60
    assert len(_check_offsets(store)) == 60


def test_bad_settings_are_refused(store):
    from storelib.model.errors import ConfigError

    with pytest.raises(ConfigError, match="linger_ms"):
        store.producer(linger_ms=-1)
    with pytest.raises(ConfigError, match="max_batch"):
        store.producer(max_batch=0)


PRODUCER = textwrap.dedent("""
    import sys, threading
    from storelib import Message, MessageStore
    store = MessageStore.open(sys.argv[1])
    with store.producer(linger_ms=2) as producer:
        def work(t):
            for i in range(int(sys.argv[3])):
                producer.send(Message("TopicTest", body=f"{sys.argv[2]}-{t}-{i}".encode()))
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        [t.start() for t in threads]; [t.join() for t in threads]
        print(producer.commits, producer.committed)
""")


@pytest.mark.slow
def test_producer_processes_never_share_or_skip_an_offset(store, python_env):
    """Two processes, four threads each, one store: every message once, offsets back to back (no Spark)."""
    each = 15
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PRODUCER, store.root, str(p), str(each)],
            env=python_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    assert [int(o[0].split()[1]) for o in outs] == [4 * each, 4 * each]
    rows = _check_offsets(store)
    assert sorted(r["body"] for r in rows) == sorted(
        f"{p}-{t}-{i}".encode() for p in range(2) for t in range(4) for i in range(each)
    )


HOLDER = textwrap.dedent("""
    import sys, time
    from storelib import MessageStore
    store = MessageStore.open(sys.argv[1])
    with store.context.tables.commitlog.commit_turn():
        print("held", flush=True)
        time.sleep(600)
""")


@pytest.mark.slow
def test_sends_wait_for_another_process_turn_and_then_share_one_commit(store, python_env):
    """Processes of one machine take turns to commit: sends queued while another process holds the
    commitlog's turn wait, then go in one commit; a holder killed mid-turn frees it."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, store.root], env=python_env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with store.producer() as producer:
            futures = [
                producer.send_async(Message("TopicTest", body=str(i).encode(), queue_id=i % 4)) for i in range(50)
            ]
            done = threading.Event()
            done.wait(0.5)
            assert not any(f.done() for f in futures)  # no commit while the other process holds the turn
            holder.kill()
            holder.wait()
            results = [f.result(timeout=60) for f in futures]
            assert producer.commits == 1
        assert {r.send_status for r in results} == {"SEND_OK"}
        assert sorted(r["body"] for r in _check_offsets(store)) == sorted(str(i).encode() for i in range(50))
    finally:
        holder.kill()
        holder.wait()


def test_store_send_async_returns_futures_of_send_results(store):
    futures = [store.send_async(Message("TopicTest", body=str(i).encode(), queue_id=2)) for i in range(10)]
    offsets = [f.result(timeout=60).queue_offset for f in futures]
    assert offsets == list(range(10))  # one thread's sends keep their order in the queue
    with pytest.raises(InvalidTopicError):
        store.send_async(Message("Absent Topic!"))
