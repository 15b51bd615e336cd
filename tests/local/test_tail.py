"""Tail pulls (storelib.local.tail): the follower's answers are the tables' answers, and nothing depends on it."""

from __future__ import annotations

import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from storelib import Message, MessageSelector, MessageStore
from storelib.local.relay import relay_for
from storelib.local.tail import TailServer, tail_client

#: Small queue files and transfer limits, so scans stop at a file's end and batches fill by bytes or count.
SETTINGS = {
    "consume_queue_file_units": 40,
    "max_transfer_count_on_message_in_memory": 7,
    "max_transfer_bytes_on_message_in_memory": 2_000,
}
SELECTORS = ["*", "TagA", "TagA || TagB", "TagZ"]


def _send(store: MessageStore, n: int, start: int = 0, server: TailServer | None = None) -> None:
    """Send ``n`` messages and dispatch them; with ``server``, as a serving follower does: the round's
    units handed to it."""
    store.send_batch(
        [
            Message(
                "TopicTest",
                body=b"x" * (7 * (i % 40)),
                tags=["TagA", "TagB", "TagC", None][i % 4],
                keys=[f"k{i}"],
                properties={"n": str(i)},
                queue_id=i % 2,
            )
            for i in range(start, start + n)
        ]
    )
    if server is None:
        store.dispatch()
        return
    handed: list[int] = []

    class Counted:
        expect = server.expect

        def publish(self, units):
            handed.append(units.num_rows)
            server.publish(units)

    dispatcher = store.dispatcher()
    dispatcher.feed = Counted()
    dispatcher.run()
    assert handed == [n]


def _pulls(store: MessageStore) -> list:
    """Every pull of the cases (each queue, offset, batch size and tag expression), with what it returned."""
    out = []
    for q in range(2):
        top = store.get_message("GroupT", "TopicTest", q, 0).max_offset
        for offset in sorted({0, 1, 39, 40, 41, top - 9, top - 1, top, top + 1}):
            for max_msgs in (1, 3, 32):
                for expression in SELECTORS:
                    p = store.pull("GroupT", "TopicTest", q, offset, max_msgs, selector=expression)
                    out.append(
                        (
                            (q, offset, max_msgs, expression),
                            p.status,
                            p.get_status,
                            p.response_code,
                            p.next_begin_offset,
                            p.min_offset,
                            p.max_offset,
                            p.messages,
                        )
                    )
    return out


@pytest.fixture
def stores(spark, store_path):
    """A store read three ways: by the follower's handle (``serving``), by a consumer that asks it
    (``asking``) and by one that reads the tables (``reading``)."""
    serving = MessageStore.create(store_path, spark, **SETTINGS)
    serving.create_topic("TopicTest", queues=2)
    serving.subscribe("GroupT", "TopicTest", "*")
    asking = MessageStore.open(store_path, spark, **SETTINGS)  # tail_pulls: on by default
    reading = MessageStore.open(store_path, spark, tail_pulls=False, **SETTINGS)
    yield serving, asking, reading
    for s in (serving, asking, reading):
        s.close()


def test_a_tail_pull_answers_what_the_tables_answer(stores):
    serving, asking, reading = stores
    _send(serving, 120)
    client = tail_client(asking.context)
    with TailServer(serving.context) as server:
        assert server.serving
        asked = _pulls(asking)
        assert asked == _pulls(reading)
        assert server.answered == client.answered
        statuses = {a[2].value for a in asked}
        assert {"FOUND", "NO_MATCHED_MESSAGE", "OFFSET_OVERFLOW_ONE"} <= statuses
        # the tail begins a quarter of TAIL_UNITS behind each queue's end: here at 0, so all but the
        # pulls past the end (OFFSET_OVERFLOW_BADLY) came from it
        assert server.answered == sum(1 for a in asked if a[2].value != "OFFSET_OVERFLOW_BADLY")
        assert any(len(a[-1]) == 7 for a in asked) and any(0 < len(a[-1]) < 7 and a[0][2] == 32 for a in asked)


def test_the_tail_follows_new_rounds_and_merges(stores):
    serving, asking, reading = stores
    _send(serving, 30)
    client = tail_client(asking.context)
    with TailServer(serving.context) as server:
        assert _pulls(asking) == _pulls(reading)
        for start in (30, 50):  # new rounds, handed over or read, then the small files merged: each unit once
            _send(serving, 20, start, server if start == 30 else None)
            assert _pulls(asking) == _pulls(reading)
        serving.dispatcher().compact_fresh()
        _send(serving, 16, 70)
        before = client.answered
        assert _pulls(asking) == _pulls(reading)
        assert client.answered > before
        assert all(
            t.units.column("queue_offset").to_pylist() == list(range(t.start, t.end)) for t in server._tails.values()
        )
        assert {t.end for t in server._tails.values()} == {43}


def test_pulls_the_tail_cannot_answer_read_the_tables(stores):
    serving, asking, reading = stores
    serving.subscribe("GroupSql", "TopicTest", MessageSelector.by_sql("n > 5"))
    _send(serving, 40)
    serving.send_back(serving.get_message("GroupT", "TopicTest", 0, 0).messages[0], "GroupT", delay_level=1)
    serving.dispatch()
    serving.deliver_delayed(now=int(time.time() * 1000) + 3_600_000)
    serving.dispatch()
    client = tail_client(asking.context)
    with TailServer(serving.context):
        for q in range(2):
            for group, expression in (("GroupSql", None), ("GroupT", "TagA")):  # SQL92; tag codes behind ext units
                a = asking.pull(group, "TopicTest", q, 0, 32, selector=expression)
                b = reading.pull(group, "TopicTest", q, 0, 32, selector=expression)
                assert (a.status, a.next_begin_offset, a.messages) == (b.status, b.next_begin_offset, b.messages)
        a = asking.pull("GroupT", "%RETRY%GroupT", 0, 0)
        assert a.messages == reading.pull("GroupT", "%RETRY%GroupT", 0, 0).messages and len(a.messages) == 1
        assert client.answered == 0
        serving.subscribe("GroupSql", "TopicTest", "TagA")  # no SQL92 subscription left: new units hold tag codes
        _send(serving, 10, 40)
        assert (
            asking.pull("GroupT", "TopicTest", 0, 20, 32).messages
            == reading.pull("GroupT", "TopicTest", 0, 20, 32).messages
        )
        assert client.answered == 1


def test_without_the_follower_pulls_read_the_tables(stores):
    serving, asking, reading = stores
    _send(serving, 40)
    client = tail_client(asking.context)
    server = TailServer(serving.context).start()
    assert asking.pull("GroupT", "TopicTest", 0, 0).messages == reading.pull("GroupT", "TopicTest", 0, 0).messages
    assert client.answered == 1
    server.close()  # gone between two pulls, with the connection open
    _send(serving, 10, 40)
    assert _pulls(asking) == _pulls(reading)
    assert client.answered == 1
    other = TailServer(serving.context).start()
    assert other.serving and not TailServer(serving.context).start().serving  # one per store
    other.close()


def test_the_tails_stay_within_tail_pulls_max_mb_the_least_recently_pulled_going_first(spark, tmp_path):
    serving = MessageStore.create(str(tmp_path / "small"), spark, tail_pulls_max_mb=1)
    serving.create_topic("TopicTest", queues=2)
    serving.subscribe("GroupT", "TopicTest", "*")
    asking = MessageStore.open(serving.root, spark)
    reading = MessageStore.open(serving.root, spark, tail_pulls=False)
    serving.send_batch(
        [Message("TopicTest", body=bytes([i]) * 60_000, queue_id=i % 2) for i in range(24)]
    )  # 720 kB a queue
    serving.dispatch()
    try:
        with TailServer(serving.context) as server:
            got = [asking.pull("GroupT", "TopicTest", q, 0, 32) for q in (0, 1)]  # queue 0's tail, then queue 1's
            assert server.answered == 2 and server.dropped == 1 and set(server._tails) == {("TopicTest", 1)}
            assert 0 < server._tails.nbytes <= 1024 * 1024
            assert [p.messages for p in got] == [reading.pull("GroupT", "TopicTest", q, 0, 32).messages for q in (0, 1)]
            again = asking.pull("GroupT", "TopicTest", 0, 0, 32)  # asked again: back, and queue 1's goes
            assert again.messages == got[0].messages and server.answered == 3
            assert server.dropped == 2 and set(server._tails) == {("TopicTest", 0)}
    finally:
        for s in (serving, asking, reading):
            s.close()


@pytest.mark.parametrize("relayed", [False, True], ids=["sent", "relayed"])
def test_a_killed_serving_follower_loses_and_repeats_nothing(store, python_env, relayed):
    """``storelib dispatch --follow`` (which serves pulls unless told ``--no-serve-pulls``) in its own process;
    a consumer long-polls through it, the follower is killed, the consumer goes on from the tables, and gets
    every message once, in order. Relayed: the sends go through the machine's committer, which hands each
    commit's rows to the follower as it lands, so pulls are answered ahead of the consume queue's commits."""
    store.subscribe("GroupT", "TopicTest", "*")
    asking = MessageStore.open(store.root, store.context.spark)
    sending = MessageStore.open(store.root, store.context.spark, relay_sends=True) if relayed else store
    client = tail_client(asking.context)
    command = [sys.executable, "-m", "storelib", "dispatch", "--follow", "--interval-ms", "20", "--store", store.root]
    if relayed:  # after its first round, the follower's next is ten minutes away: the rest reach the tail landed
        command += ["--round-ms", "600000"]
    follower = subprocess.Popen(command, env=python_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    got, offset, sent = [], 0, 0

    def send(n: int) -> None:
        nonlocal sent
        messages = [Message("TopicTest", body=str(sent + i).encode(), queue_id=0) for i in range(n)]
        if relayed:  # one at a time, in order, through the committer
            [sending.send(m) for m in messages]
        else:
            store.send_batch(messages)
        sent += n

    def consume(until: int, deadline_s: float = 120) -> None:
        nonlocal offset
        deadline = time.monotonic() + deadline_s
        while len(got) < until and time.monotonic() < deadline:
            p = asking.pull("GroupT", "TopicTest", 0, offset, 8, suspend_timeout_ms=200)
            got.extend(int(m.body) for m in p.messages)
            offset = p.next_begin_offset

    try:
        said = [follower.stderr.readline() for _ in range(2)]  # following ...; serving tail pulls: ...
        assert "serving tail pulls: yes" in said[-1], said
        for _ in range(5):
            send(6)
            consume(sent)
        assert client.answered > 0
        follower.kill()
        follower.communicate(timeout=60)
        answered = client.answered
        if relayed:  # the consumer is past the consume queue's end: reading the tables, it waits there
            assert store.get_message("GroupT", "TopicTest", 0, 0).max_offset < offset == sent
            p = asking.pull("GroupT", "TopicTest", 0, offset, 8)
            assert (p.status.value, p.next_begin_offset, p.messages) == ("NO_NEW_MSG", offset, [])
        send(9)
        store.dispatch()  # no follower now: a one-off dispatch
        consume(sent)
        assert client.answered == answered
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate(timeout=60)
        asking.close()
        if relayed:
            sending.close()
    assert got == list(range(sent))


def test_a_pull_between_a_commit_and_its_hand_over_waits_for_the_units(stores):
    """The dispatcher says which files it commits before it hands their units over. A pull that finds them
    committed but not handed over waits for the hand-over rather than reading them; one never handed over
    is read from the files after a while. Either way, the tables' answer."""
    import threading

    serving, asking, reading = stores
    _send(serving, 20)
    client = tail_client(asking.context)
    with TailServer(serving.context) as server:
        assert _pulls(asking) == _pulls(reading)  # every queue's tail started
        for start, late in ((20, 0.3), (24, None)):  # handed over 0.3 s after the commit; never
            committed = threading.Event()

            class Late:
                expect = server.expect

                def publish(self, units):
                    committed.set()
                    if late is not None:
                        time.sleep(late)
                        server.publish(units)

            serving.send_batch(
                [
                    Message("TopicTest", body=b"x", properties={"n": str(i)}, queue_id=i % 2)
                    for i in range(start, start + 4)
                ]
            )
            dispatcher = serving.dispatcher()
            dispatcher.feed = Late()
            running = threading.Thread(target=dispatcher.run)
            running.start()
            assert committed.wait(60)
            began, answered = time.monotonic(), client.answered
            p = asking.pull("GroupT", "TopicTest", 0, 10, 32)
            waited = time.monotonic() - began
            running.join()
            assert [int(m.properties["n"]) for m in p.messages] == list(range(20, start + 4, 2))
            assert p.messages == reading.pull("GroupT", "TopicTest", 0, 10, 32).messages
            assert client.answered == answered + 1 and "tail behind" not in server.declined
            assert waited >= 0.2  # it waited for the hand-over (0.3 s), or for the time it is given (0.5 s)
        assert _pulls(asking) == _pulls(reading)
        assert all(
            t.units.column("queue_offset").to_pylist() == list(range(t.start, t.end)) for t in server._tails.values()
        )


def test_a_held_pull_waits_at_the_follower_and_wakes_when_a_round_is_handed_over(stores):
    import threading

    serving, asking, reading = stores
    _send(serving, 10)
    client = tail_client(asking.context)
    with TailServer(serving.context) as server:
        p = asking.pull("GroupT", "TopicTest", 0, 5, suspend_timeout_ms=300)  # nothing arrives: held the whole time
        q = reading.pull("GroupT", "TopicTest", 0, 5, suspend_timeout_ms=300)
        assert (p.status, p.next_begin_offset, p.messages) == (q.status, q.next_begin_offset, q.messages)
        assert (
            p.status.value == "NO_NEW_MSG" and p.suspended_ms >= 300 and client.answered >= 3
        )  # pull, wait(s), pull again
        answered = client.answered
        later = threading.Timer(0.5, _send, args=(serving, 4, 10, server))
        later.start()
        p = asking.pull("GroupT", "TopicTest", 0, 5, 32, suspend_timeout_ms=20_000)
        later.join()
        assert [int(m.properties["n"]) for m in p.messages] == [10, 12]
        assert 400 <= p.suspended_ms < 10_000 and client.answered >= answered + 2  # the pull, the wait that woke
        assert p.messages == reading.pull("GroupT", "TopicTest", 0, 5, 32).messages


def test_a_relayed_send_is_pulled_from_the_tail_before_any_round_and_the_round_changes_nothing(
    stores, store_path, spark
):
    """The machine's committer hands each commit's rows to the follower's tail as it lands
    (storelib.local.landing): a held pull returns a message no round has dispatched yet, a queue nobody had
    pulled starts its tail from them, and once the round runs every pull is the tables' answer again."""
    import threading

    serving, asking, reading = stores
    serving.create_topic("TopicNew", queues=1)
    serving.subscribe("GroupN", "TopicNew", "*")
    relaying = MessageStore.open(store_path, spark, relay_sends=True, **SETTINGS)
    _send(serving, 20)
    client = tail_client(asking.context)
    try:
        with TailServer(serving.context) as server:
            assert _pulls(asking) == _pulls(reading)  # every queue's tail started
            top = asking.get_message("GroupT", "TopicTest", 0, 0).max_offset
            later = threading.Timer(
                0.3, lambda: relaying.send(Message("TopicTest", body=b"r0", tags="TagA", queue_id=0))
            )
            later.start()
            p = asking.pull("GroupT", "TopicTest", 0, top, 32, suspend_timeout_ms=20_000)
            later.join()
            assert [m.body for m in p.messages] == [b"r0"] and p.next_begin_offset == top + 1
            assert p.max_offset == top + 1 and p.suspended_ms < 10_000 and server.landed == 1
            # not in the consume queue yet: the tables say so, and a consumer at the tail's end reading them waits
            assert reading.get_message("GroupT", "TopicTest", 0, 0).max_offset == top
            held = reading.pull("GroupT", "TopicTest", 0, top + 1, 32)
            assert (held.status.value, held.next_begin_offset) == ("NO_NEW_MSG", top + 1)
            beyond = reading.pull("GroupT", "TopicTest", 0, top + 2, 32)
            assert beyond.status.value == "OFFSET_ILLEGAL"  # past the commitlog's end too: moved, as before
            committer = relay_for(relaying.context.commitlog).committer
            commits = committer.commits
            futures = [relaying.send_async(Message("TopicNew", body=b"n%d" % i)) for i in range(3)] + [
                relaying.send_async(Message("TopicTest", body=b"r%d" % i, tags="TagB", queue_id=i % 2))
                for i in range(1, 5)
            ]
            [f.result() for f in futures]
            deadline = time.monotonic() + 30
            while server.landed < 1 + committer.commits - commits and time.monotonic() < deadline:
                time.sleep(0.01)
            answered = client.answered
            fresh = asking.pull("GroupN", "TopicNew", 0, 0, 32)  # its tail starts from the rows landed
            assert [m.body for m in fresh.messages] == [b"n0", b"n1", b"n2"] and client.answered == answered + 1
            tagged = asking.pull("GroupT", "TopicTest", 1, top, 32, selector="TagB")
            assert [m.body for m in tagged.messages] == [b"r1", b"r3"]
            dispatcher = serving.dispatcher()
            dispatcher.feed = server
            dispatcher.run()
            assert _pulls(asking) == _pulls(reading)
            assert (
                asking.pull("GroupN", "TopicNew", 0, 0, 32).messages
                == reading.pull("GroupN", "TopicNew", 0, 0, 32).messages
            )
            assert all(
                t.units.column("queue_offset").to_pylist() == list(range(t.start, t.end))
                for t in server._tails.values()
            )
    finally:
        relaying.close()


def test_a_round_extends_a_tail_that_landed_rows_took_ahead(stores, store_path, spark):
    """Units from the tables, from landed rows and from a round's hand-over join one tail: a round bringing
    units past what landed (a commit made without the committer) extends it, the landed ones checked."""
    serving, asking, reading = stores
    relaying = MessageStore.open(store_path, spark, relay_sends=True, **SETTINGS)
    _send(serving, 20)
    try:
        with TailServer(serving.context) as server:
            assert _pulls(asking) == _pulls(reading)  # the tails started from the tables
            relaying.send(Message("TopicTest", body=b"landed", queue_id=0))
            deadline = time.monotonic() + 30
            while server.landed < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert server._tails[("TopicTest", 0)].end == 11
            serving.send_batch([Message("TopicTest", body=b"%d" % i, queue_id=i % 2) for i in range(4)])
            assert serving.dispatch().consume_queue_rows == 5  # committed here, not landed
            units = serving.context.tables.consume_queue.read_arrow(filter=pc.field("queue_offset") >= 10)
            server.publish(pa.Table.from_arrays(units.columns, names=units.column_names))  # nullable columns
            assert {k: (t.start, t.end) for k, t in server._tails.items()} == {
                ("TopicTest", 0): (0, 13),
                ("TopicTest", 1): (0, 12),
            }
            assert _pulls(asking) == _pulls(reading)
    finally:
        relaying.close()
