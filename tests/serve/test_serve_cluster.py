"""Several endpoints over one store act as one proxy cluster; an endpoint killed with ``kill -9``
loses nothing: after a restart nothing acked comes again and nothing unacked is lost."""

from __future__ import annotations

import os
import time

import pytest
from serve_helpers import (
    live_claims,
    make_store,
    message,
    producer,
    receive_until,
    send_and_receive,
    simple_consumer,
    stop_cleanly,
    wait_for,
)


@pytest.fixture(scope="module")
def pair(serve, tmp_path_factory):
    path = make_store(str(tmp_path_factory.mktemp("cluster") / "store"), {"Shared": 4, "Back": 2, "Cross": 1})
    first = serve(path)
    second = serve(path, "--no-follow")  # dispatch is the first's
    return first, second


def test_sent_to_one_received_from_the_other(pair):
    first, second = pair
    with producer(first.address, "Shared") as p:
        ids = {p.send(message("Shared", f"s{i}".encode())).message_id for i in range(5)}
    with simple_consumer(second.address, "GShared", {"Shared": "*"}) as c:
        got = receive_until(c, 5)
        for m in got:
            c.ack(m)
    assert {m.message_id for m in got} == ids


def test_sent_to_the_follower_less_one_is_dispatched_by_the_other(pair):
    first, second = pair
    receipt, got = send_and_receive(second.address, first.address, "Back", "GBack", b"via second")
    assert [m.message_id for m in got] == [receipt.message_id]


def test_ack_at_one_endpoint_of_a_message_received_at_the_other(pair):
    first, second = pair
    with producer(first.address, "Cross") as p:
        receipt = p.send(message("Cross", b"cross ack"))
    with simple_consumer(first.address, "GCross", {"Cross": "*"}) as a:
        (got,) = receive_until(a, 1)
        assert got.message_id == receipt.message_id
        with simple_consumer(second.address, "GCross", {"Cross": "*"}) as b:
            b.ack(got)  # a handle names the claim: any endpoint over the store can end it
    assert live_claims(first.path, "GCross", "Cross") == []


def test_stop_with_sigterm_exits_zero(serve, tmp_path_factory):
    path = make_store(str(tmp_path_factory.mktemp("stop") / "store"), {"Stop": 1})
    server = serve(path)
    with simple_consumer(server.address, "GStop", {"Stop": "*"}, await_duration=20) as c:
        c.receive_async(1, 15)  # a long poll under way when the signal comes
        time.sleep(0.5)
        began = time.monotonic()
        stop_cleanly(server)
        assert time.monotonic() - began < 10, "a long poll under way held the stop up"


def test_kill_9_loses_nothing_and_repeats_no_ack(serve, tmp_path_factory):
    path = make_store(str(tmp_path_factory.mktemp("crash") / "store"), {"Crash": 2})
    server = serve(path)
    with producer(server.address, "Crash") as p:
        sent = {p.send(message("Crash", f"m{i}".encode())).message_id: f"m{i}" for i in range(4)}
    with simple_consumer(server.address, "GCrash", {"Crash": "*"}) as c:
        got = receive_until(c, 4)
        assert {m.message_id for m in got} == set(sent)
        acked, unacked = got[:2], got[2:]
        for m in acked:
            c.ack(m)
        for m in unacked:
            c.change_invisible_duration(m, 2)  # back soon after the restart
    with producer(server.address, "Crash") as p:
        late = p.send(message("Crash", b"late")).message_id  # sent, never received before the crash
    assert server.proc is not None
    followers = _children(server.proc.pid)
    assert followers, "the endpoint runs its follower in a process of its own"
    server.kill()
    # it ends its round first: 15 s was once too short with the full suite loading both cores
    assert wait_for(lambda: not any(_running(pid) for pid in followers), timeout=30), "a follower outlived its endpoint"

    claims = live_claims(path, "GCrash", "Crash")  # what the store holds after the crash
    assert len(claims) == len(unacked), "an ack was lost, or a claim was"
    assert all(ck.attempt == 1 for ck in claims)

    restarted = serve(path)
    want = {m.message_id for m in unacked} | {late}
    with simple_consumer(restarted.address, "GCrash", {"Crash": "*"}) as c:
        again = receive_until(c, len(want), timeout=40)
        for m in again:
            c.ack(m)
        assert {m.message_id for m in again} == want
        attempts = {m.message_id: m.delivery_attempt for m in again}
        assert all(attempts[m.message_id] == 2 for m in unacked)
        assert attempts[late] == 1
        assert c.receive(32, 15) == [], "something acked before the crash came again"


def _children(pid: int) -> set[int]:
    out: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out |= {int(x) for x in f.read().split()}
        except OSError:
            pass
    return out


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
