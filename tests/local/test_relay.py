"""The machine's committer: producer processes hand their groups to one leader, and lose or double
nothing when it goes away (politely or killed)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from storelib import Message, MessageStore
from storelib.delta.log import entry_actions
from storelib.local.relay import REQUESTS_INFO, relay_for
from storelib.storage.commitlog import EncodedMessage, now_millis
from tests.send.test_group_commit import _check_offsets


@pytest.fixture
def store(spark, store_path):
    """A store whose handle hands sends to the machine's committer (``relay_sends``, off by default)."""
    s = MessageStore.create(store_path, spark, relay_sends=True)
    s.create_topic("TopicTest", queues=4)
    yield s
    s.close()


def _rows(store, *keys: str):
    return store.context.commitlog.stage(
        [
            EncodedMessage("TopicTest", i % 4, 0, 0, k.encode(), {"UNIQ_KEY": k}, now_millis(), "127.0.0.1:0")
            for i, k in enumerate(keys)
        ]
    )


def _commit_infos(store, since: int) -> list[dict]:
    table = store.context.tables.commitlog
    out = []
    for version in range(since + 1, table.view().version + 1):
        entry = entry_actions(table.path, version)
        out.append(next(a["commitInfo"] for a in entry if "commitInfo" in a))
    return out


CLIENT = textwrap.dedent("""
    import sys, threading
    from storelib import Message, MessageStore
    from storelib.local.relay import relay_for
    store = MessageStore.open(sys.argv[1], relay_sends=True)
    name, each = sys.argv[2], int(sys.argv[3])
    with store.producer() as producer:
        def work(t):
            futures = [producer.send_async(Message("TopicTest", body=f"{name}-{t}-{i}".encode(), queue_id=t % 4))
                       for i in range(each)]
            offsets = [f.result().queue_offset for f in futures]
            assert offsets == sorted(offsets), offsets
        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        [t.start() for t in threads]; [t.join() for t in threads]
        relay = relay_for(store.context.commitlog)
        print(relay.commits, relay.leading, producer.committed, flush=True)
""")


@pytest.fixture
def s3_store(spark, s3, s3_template, python_env):
    """The same on the suite's S3 server (the machine's committer keyed by the store's URI; a copy of a store
    made once per run), and the environment its other processes reach the server with."""
    s = MessageStore.open(s3.copy(s3_template(4)), spark, storage_options=s3.options, relay_sends=True)
    yield s, {**python_env, **s3.options}
    s.close()


@pytest.mark.slow
def test_producer_processes_hand_their_groups_to_the_leader(store, python_env):
    """This process leads (its producer committed first); two others send through it: they commit
    nothing themselves, every message lands once with offsets back to back, in each thread's order."""
    _hand_over(store, python_env)


@pytest.mark.slow
def test_producer_processes_on_s3_hand_their_groups_to_the_leader(s3_store):
    """The same with the store on an object store: one committer per machine there too."""
    _hand_over(*s3_store)


def _hand_over(store, python_env) -> None:
    with store.producer() as producer:
        producer.send(Message("TopicTest", body=b"first"))
        relay = relay_for(store.context.commitlog)
        assert relay.leading
        before = store.context.tables.commitlog.view().version
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", CLIENT, store.root, f"p{p}", "30"],
                env=python_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for p in range(2)
        ]
        outs = [p.communicate(timeout=300) for p in procs]
        assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
        assert [o[0].split() for o in outs] == [["0", "False", "120"]] * 2
        assert relay.committer.committed >= 2 * 4 * 30 // 1000 + 1
    rows = _check_offsets(store)
    assert sorted(r["body"] for r in rows) == sorted(
        [b"first"] + [f"p{p}-{t}-{i}".encode() for p in range(2) for t in range(4) for i in range(30)]
    )
    infos = _commit_infos(store, before)
    assert all(REQUESTS_INFO in i for i in infos)  # every commit since was the leader's


def test_a_group_the_dead_leader_committed_is_found_not_written_again(store):
    """Recovery after a leader died holding a group: found in the log when its commit landed (its rows
    come back as the commit placed them), committed once when it did not."""
    relay = relay_for(store.context.commitlog)
    rows = _rows(store, "dead-1", "dead-2", "dead-3")
    landed = relay._direct(rows, "a" * 32)  # the commit the leader made before it died
    version = store.context.tables.commitlog.view().version
    again = relay._recover("a" * 32, rows, time.time())
    assert again.to_pylist() == landed.to_pylist()
    assert store.context.tables.commitlog.view().version == version  # nothing written twice
    other = _rows(store, "lost-1", "lost-2")
    placed = relay._recover("b" * 32, other, time.time())  # the leader died before committing it
    assert placed.column("uniq_key").to_pylist() == ["lost-1", "lost-2"]
    assert store.context.tables.commitlog.view().version == version + 1
    stored = [r["body"] for r in _check_offsets(store)]
    assert sorted(stored) == [b"dead-1", b"dead-2", b"dead-3", b"lost-1", b"lost-2"]


def test_a_group_is_found_by_its_rows_when_the_log_no_longer_reaches_back(store, monkeypatch):
    """With the log entries since the send cleaned up, recovery looks for the group's rows in the files
    written since: found, they come back; absent, the group is committed once."""
    from storelib.local import relay as relay_module

    relay = relay_for(store.context.commitlog)
    rows = _rows(store, "gone-1", "gone-2")
    sent_at = time.time()
    landed = relay._direct(rows, "d" * 32)
    version = store.context.tables.commitlog.view().version

    def cleaned_up(table_path: str, version: int) -> list:
        raise FileNotFoundError(version)

    monkeypatch.setattr(relay_module, "entry_actions", cleaned_up)
    assert relay._recover("d" * 32, rows, sent_at).to_pylist() == landed.to_pylist()
    assert store.context.tables.commitlog.view().version == version
    placed = relay._recover("e" * 32, _rows(store, "new-1"), time.time())
    assert placed.column("uniq_key").to_pylist() == ["new-1"]
    assert sorted(r["body"] for r in _check_offsets(store)) == [b"gone-1", b"gone-2", b"new-1"]


LEADER = textwrap.dedent("""
    import sys, threading, time
    from storelib import Message, MessageStore
    from storelib.local.relay import relay_for
    store = MessageStore.open(sys.argv[1], relay_sends=True)
    producer = store.producer()
    producer.send(Message("TopicTest", body=b"leader-0"))
    assert relay_for(store.context.commitlog).leading
    print("leading", flush=True)
    if sys.argv[2] == "close":
        sys.stdin.readline()
        producer.close()
        print("closed", flush=True)
    sys.stdin.readline()
""")


def _sending(store, n: int, threads: int = 8):
    """Threads sending ``n`` messages each through a producer of this process; returns (producer, results, threads)."""
    producer = store.producer()
    results: dict[int, list] = {t: [] for t in range(threads)}

    def work(t: int) -> None:
        for i in range(n):
            results[t].append(producer.send(Message("TopicTest", body=f"c-{t}-{i}".encode(), queue_id=t % 4)))

    running = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in running:
        th.start()
    return producer, results, running


@pytest.mark.slow
@pytest.mark.parametrize("how", ["killed", "close"])
def test_the_leader_going_away_loses_and_doubles_nothing(store, python_env, how):
    """Another process leads; this one sends from 8 threads while the leader is killed (SIGKILL, groups
    in its hands) or closes its producer: every send is acknowledged, stored once, where its result
    says; this process then leads."""
    _leader_goes_away(store, python_env, how)


@pytest.mark.slow
def test_the_leader_killed_on_s3_loses_and_doubles_nothing(s3_store):
    """The same on an object store, where no machine-wide commit turn says the dead leader's last commit
    has landed or never will (the producer waits for it first)."""
    _leader_goes_away(*s3_store, "killed", n=20)


def _leader_goes_away(store, python_env, how: str, n: int = 60) -> None:
    """8 threads send ``n`` each; the leader goes away once 100 have been acknowledged."""
    leader = subprocess.Popen(
        [sys.executable, "-c", LEADER, store.root, how],
        env=python_env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert leader.stdout.readline().strip() == "leading", leader.stderr.read()[-2000:]
        producer, results, running = _sending(store, n)
        relay = relay_for(store.context.commitlog)
        deadline = time.monotonic() + 60
        while sum(map(len, results.values())) < 100 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not relay.leading  # the other process leads while we send
        if how == "killed":
            os.kill(leader.pid, signal.SIGKILL)
        else:
            leader.stdin.write("\n")
            leader.stdin.flush()
            assert leader.stdout.readline().strip() == "closed"
        for th in running:
            th.join(timeout=300)
        assert relay.leading  # the next producer to find no leader became it
        producer.close()
    finally:
        leader.kill()
        leader.communicate()
    sent = [r for rs in results.values() for r in rs]
    assert len(sent) == 8 * n and {r.send_status for r in sent} == {"SEND_OK"}
    _check_offsets(store)
    rows = store.context.tables.commitlog.read_arrow(
        columns=["physical_offset", "queue_id", "queue_offset", "msg_id", "body"]
    ).to_pylist()
    assert sorted(r["body"] for r in rows) == sorted(
        [b"leader-0"] + [f"c-{t}-{i}".encode() for t in range(8) for i in range(n)]
    )
    by_offset = {r["physical_offset"]: r for r in rows}
    for r in sent:  # each result is where its message is
        row = by_offset[r.commitlog_offset]
        assert (row["queue_id"], row["queue_offset"], row["msg_id"]) == (r.queue_id, r.queue_offset, r.msg_id)
    for t, rs in results.items():
        assert [r.queue_offset for r in rs] == sorted(r.queue_offset for r in rs)


@pytest.mark.slow
def test_groups_under_way_when_the_leader_dies_land_once_in_the_order_sent(store, python_env):
    """Groups are handed on without waiting for the last to land: two are under way at a leader that
    is stopped, then killed; both are recovered in the order sent, once each, and the next group,
    handed on after them, lands after them."""
    leader = subprocess.Popen(
        [sys.executable, "-c", LEADER, store.root, "stay"],
        env=python_env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    relay = relay_for(store.context.commitlog).acquire()
    try:
        assert leader.stdout.readline().strip() == "leading", leader.stderr.read()[-2000:]
        os.kill(leader.pid, signal.SIGSTOP)
        first, second = relay.submit(_rows(store, "u-1", "u-2")), relay.submit(_rows(store, "u-3"))
        time.sleep(0.3)
        assert not first.done() and not second.done() and not relay.leading  # both under way at the stopped leader
        os.kill(leader.pid, signal.SIGKILL)
        leader.wait(timeout=60)
        landed = [f.result(timeout=60) for f in (first, second)]
        third = relay.submit(_rows(store, "u-4")).result(timeout=60)
        assert relay.leading  # the next group found no leader: this process leads
    finally:
        relay.release()
        leader.kill()
        leader.communicate()
    offsets = [o for t in (*landed, third) for o in t.column("physical_offset").to_pylist()]
    assert [k for t in (*landed, third) for k in t.column("uniq_key").to_pylist()] == ["u-1", "u-2", "u-3", "u-4"]
    assert offsets == sorted(offsets)
    assert sorted(r["body"] for r in _check_offsets(store)) == [b"leader-0", b"u-1", b"u-2", b"u-3", b"u-4"]


def test_a_store_without_the_relay_commits_in_each_process(store_path, spark):
    """``relay_sends`` off (the default): the producer commits itself, in the commit turn."""
    store = MessageStore.create(store_path, spark)
    store.create_topic("TopicTest", queues=4)
    with store.producer() as producer:
        assert producer.send(Message("TopicTest", body=b"x")).send_status == "SEND_OK"
    relay = relay_for(store.context.commitlog)
    assert not relay.enabled and not relay.leading and relay.commits == 1
    store.close()


def test_rows_of_another_layout_fail_alone_with_a_typed_error(store):
    """A process handing the leader rows without the staged columns gets StoreStateError for its
    group; the leader commits the next group as usual."""
    import socket

    import pyarrow as pa

    from storelib.local import wire
    from storelib.model.errors import StoreStateError

    with store.producer() as producer:
        producer.send(Message("TopicTest", body=b"lead"))
        relay = relay_for(store.context.commitlog)
        assert relay.leading
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(relay.address)
            wire.send_frame(sock, wire.REQUEST, "c" * 32, *wire.pack(rows=pa.table({"body": [b"x"]})))
            kind, request_id, body = wire.receive_frame(sock)
        assert (kind, request_id) == (wire.FAILED, "c" * 32)
        error = wire.error_of(body)
        assert isinstance(error, StoreStateError) and "another layout" in str(error)
        assert producer.send(Message("TopicTest", body=b"after")).send_status == "SEND_OK"
    assert sorted(r["body"] for r in _check_offsets(store)) == [b"after", b"lead"]


def test_a_forked_child_lets_go_of_the_role_and_the_leader_keeps_serving(store, python_env):
    """A child forked from the leading process does not lead (its copies of the lock and socket are
    closed); when it exits, the parent still leads and another process's sends still reach it."""
    with store.producer() as producer:
        producer.send(Message("TopicTest", body=b"lead"))
        relay = relay_for(store.context.commitlog)
        assert relay.leading
        pid = os.fork()
        if pid == 0:  # the child: it must not believe it leads
            os._exit(0 if not relay_for(store.context.commitlog).leading else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert relay.leading
        client = subprocess.run(
            [sys.executable, "-c", CLIENT, store.root, "after-fork", "5"],
            env=python_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert client.returncode == 0, client.stderr[-2000:]
        assert client.stdout.split() == ["0", "False", "20"]  # it committed nothing itself: the parent took its groups
    assert len(_check_offsets(store)) == 21


@contextlib.contextmanager
def _hand_written_leader(store, answer):
    """This test as the machine's leader, on the real lock and socket: ``answer(client, request_id, rows)``
    runs, on a thread, for the first group handed on; the relay is acquired meanwhile."""
    import fcntl
    import socket

    from storelib.local import wire
    from storelib.local.relay import LEADER_LOCK

    relay = relay_for(store.context.commitlog)
    lock = os.open(os.path.join(store.context.tables.commitlog.path, LEADER_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the role is taken: this process's producer is a client
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(relay.address)
    server.listen(1)

    def lead() -> None:
        client, _ = server.accept()
        with client:
            _, request_id, body = wire.receive_frame(client)
            answer(client, request_id, wire.unpack(body)[1])

    leader = threading.Thread(target=lead)
    leader.start()
    relay.acquire()
    try:
        yield relay
        leader.join(timeout=60)
    finally:
        relay.release()
        server.close()
        os.close(lock)


def _commit_as_leader(store, request_id: str, rows):
    return store.context.commitlog.append_arrow(rows, results="arrow", info={REQUESTS_INFO: request_id}).landed


@pytest.mark.parametrize("stray", ["a request never sent", "a frame too short to name one"])
def test_an_answer_to_no_group_under_way_is_skipped_and_the_group_lands_once(store, caplog, stray):
    """The leader answers first a request this process never sent (or sends a frame too short to name
    one), then commits the group and answers it: the producer skips the stray frame, with a warning
    naming it, and takes the real answer. Settling its group on the stray frame, as if the leader were
    gone, would have committed the group itself while the live leader committed it too."""
    import logging
    import socket
    import struct

    from storelib.local import wire

    warning = "f" * 32 if stray == "a request never sent" else "a frame of 5 bytes is too short"

    def answer(client, request_id, rows):
        if stray == "a request never sent":
            wire.send_frame(client, wire.ANSWER, "f" * 32)
        else:
            client.sendall(struct.pack(">I", 5) + wire.ANSWER + b"1234")
        client.settimeout(0.5)  # a producer that took the stray answer as the leader's end closes now
        with contextlib.suppress(socket.timeout):
            assert client.recv(1) == b"", "the producer sent more than its one group"
        landed = _commit_as_leader(store, request_id, rows)
        with contextlib.suppress(OSError):
            wire.send_frame(client, wire.ANSWER, request_id, *wire.pack(rows=landed))

    with caplog.at_level(logging.WARNING, logger="storelib.local"), _hand_written_leader(store, answer) as relay:
        landed = relay.submit(_rows(store, "s-1", "s-2")).result(timeout=60)
    assert landed.column("uniq_key").to_pylist() == ["s-1", "s-2"]
    assert sorted(r["body"] for r in _check_offsets(store)) == [b"s-1", b"s-2"]
    assert any(warning in r.getMessage() for r in caplog.records)


def test_landed_rows_that_cannot_be_read_are_found_in_the_log(store, caplog):
    """The leader commits the group and answers with rows that are not Arrow: the send neither hangs
    nor fails, nor commits again. Its rows are read back from the leader's commit, found by request id."""
    import logging

    from storelib.local import wire

    def answer(client, request_id, rows):
        _commit_as_leader(store, request_id, rows)
        wire.send_frame(client, wire.ANSWER, request_id, b"not Arrow")

    version = store.context.tables.commitlog.view().version
    with caplog.at_level(logging.WARNING, logger="storelib.local.relay"), _hand_written_leader(store, answer) as relay:
        landed = relay.submit(_rows(store, "b-1", "b-2")).result(timeout=60)
    assert landed.column("uniq_key").to_pylist() == ["b-1", "b-2"]
    assert sorted(r["body"] for r in _check_offsets(store)) == [b"b-1", b"b-2"]
    assert store.context.tables.commitlog.view().version == version + 1  # the leader's commit alone
    assert any("could not be read" in r.getMessage() for r in caplog.records)


def test_a_failure_whose_error_cannot_be_read_fails_the_group_with_a_typed_error(store):
    """The leader fails the group and answers with an error record that is not JSON: the send fails
    with StoreStateError saying so (rather than hanging), and nothing is written."""
    from storelib.local import wire
    from storelib.model.errors import StoreStateError

    def answer(client, request_id, rows):
        wire.send_frame(client, wire.FAILED, request_id, b"not JSON")

    version = store.context.tables.commitlog.view().version
    with _hand_written_leader(store, answer) as relay:
        failed = relay.submit(_rows(store, "e-1"))
        with pytest.raises(StoreStateError, match="failed the group; its error cannot be read"):
            failed.result(timeout=60)
    assert store.context.tables.commitlog.view().version == version
