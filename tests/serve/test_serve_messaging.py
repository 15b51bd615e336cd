"""Sends and receives through ``storelib serve`` with the official RocketMQ 5 Python client: a normal
round trip (ids, keys, tag, properties, born host and time), look-ups in the store, TAG and SQL92
filters, FIFO order per message group, and delayed delivery."""

from __future__ import annotations

import time

import pytest
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq import FilterExpression
from rocketmq.grpc_protocol import FilterType
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.v5.exception import BadRequestException
from serve_helpers import make_store, message, meta, producer, raw_stub, receive_until, simple_consumer, wait_for

TOPICS = {
    "RoundTrip": 4,
    "Lookup": 2,
    "Tagged": 4,
    "Sql": 4,
    "Fifo": 4,
    "Delayed": 2,
    "DelayedMs": 2,
    "FifoBlock": 1,
    "Recall": 2,
    "FifoRetry": 1,
}
GROUPS = {
    "GFifo": {"consume_message_orderly": True},
    "GFifoBlock": {"consume_message_orderly": True},
    "GFifoRetry": {"consume_message_orderly": True},
}


@pytest.fixture(scope="module")
def server(serve, tmp_path_factory):
    path = make_store(str(tmp_path_factory.mktemp("messaging") / "store"), TOPICS, GROUPS)
    return serve(path)


def test_round_trip_keeps_what_was_sent(server):
    before_ms = int(time.time()) * 1000
    with producer(server.address, "RoundTrip") as p:
        m = message("RoundTrip", b"hello", tag="TagA", keys=("k1", "k2"), props={"color": "red", "n": "7"})
        receipt = p.send(m)
    with simple_consumer(server.address, "GRoundTrip", {"RoundTrip": "*"}) as c:
        (got,) = receive_until(c, 1)
        try:
            assert got.message_id == receipt.message_id
            assert got.body == b"hello"
            assert got.topic == "RoundTrip"
            assert got.tag == "TagA"
            assert got.keys == {"k1", "k2"}
            assert got.properties == {"color": "red", "n": "7"}
            assert got.delivery_attempt == 1
            assert before_ms <= got.born_timestamp <= int(time.time() * 1000) + 1000
            assert not got.corrupted
        finally:
            c.ack(got)


def test_born_host_is_the_clients(server):
    with producer(server.address, "RoundTrip") as p:
        receipt = p.send(message("RoundTrip", b"host"))
    from rocketmq.v5.util import Misc

    with simple_consumer(server.address, "GBornHost", {"RoundTrip": "*"}) as c:
        got = [m for m in receive_until(c, 2) if m.message_id == receipt.message_id]
        assert got and got[0].born_host == Misc.get_local_ip()


def test_message_group_round_trips(server):
    with producer(server.address, "Fifo") as p:
        receipt = p.send(message("Fifo", b"grouped", group="order-1"))
    with simple_consumer(server.address, "GGroupTrip", {"Fifo": "*"}) as c:
        got = [m for m in receive_until(c, 1) if m.message_id == receipt.message_id]
        assert got and got[0].message_group == "order-1"
        c.ack(got[0])


def test_sent_message_is_found_in_the_store(server):
    from storelib import MessageStore

    with producer(server.address, "Lookup") as p:
        receipt = p.send(message("Lookup", b"find me", keys=("lookup-key",), tag="T"))

    def found():
        s = MessageStore.open(server.path)
        try:
            return s.query_by_unique_key("Lookup", receipt.message_id), s.query_by_key("Lookup", "lookup-key", begin=0)
        finally:
            s.close()

    by_id, by_key = wait_for(found, timeout=30)
    assert by_id.body == b"find me" and by_id.tags == "T"
    assert [m.uniq_key for m in by_key] == [receipt.message_id]


def test_tag_filter(server):
    with producer(server.address, "Tagged") as p:
        for i, tag in enumerate(["A", "B", "C", "A", "B"]):
            p.send(message("Tagged", f"{tag}{i}".encode(), tag=tag))
    with simple_consumer(server.address, "GTagged", {"Tagged": "A||C"}) as c:
        got = receive_until(c, 3)
        for m in got:
            c.ack(m)
        assert sorted(m.body for m in got) == [b"A0", b"A3", b"C2"]
        assert c.receive(32, 15) == []  # B was filtered out, not merely late


def test_sql92_filter_on_user_properties(server):
    with producer(server.address, "Sql") as p:
        for a in range(10):
            p.send(message("Sql", f"a={a}".encode(), props={"a": str(a)}))
    sql = FilterExpression("a > 5", FilterType.SQL)
    with simple_consumer(server.address, "GSql", {"Sql": sql}) as c:
        got = receive_until(c, 4)
        for m in got:
            c.ack(m)
        assert sorted(int(m.properties["a"]) for m in got) == [6, 7, 8, 9]


def test_fifo_order_per_message_group(server):
    groups = ["g1", "g2", "g3"]
    with producer(server.address, "Fifo") as p:
        for i in range(4):
            for g in groups:
                p.send(message("Fifo", f"{g}-{i}".encode(), group=g))
    seen: dict[str, list[int]] = {g: [] for g in groups}
    with simple_consumer(server.address, "GFifo", {"Fifo": "*"}) as c:
        deadline = time.monotonic() + 60
        while sum(map(len, seen.values())) < 12 and time.monotonic() < deadline:
            batch = c.receive(32, 15)
            for m in batch:
                if m.message_group not in seen:  # from test_message_group_round_trips
                    c.ack(m)
                    continue
                g, i = m.body.decode().split("-")
                seen[g].append(int(i))
            for m in batch:
                if m.message_group in seen:
                    c.ack(m)
    assert seen == {g: [0, 1, 2, 3] for g in groups}


def test_fifo_queue_blocks_until_ack(server):
    with producer(server.address, "FifoBlock") as p:
        for i in range(3):
            p.send(message("FifoBlock", f"blk-{i}".encode(), group="blocking"))
    with simple_consumer(server.address, "GFifoBlock", {"FifoBlock": "*"}) as c:
        (first,) = receive_until(c, 1, batch=1)
        assert first.body == b"blk-0"
        assert c.receive(32, 15) == [], "the queue handed out more while its head was unacked"
        c.ack(first)
        (second,) = receive_until(c, 1, batch=1)
        assert second.body == b"blk-1"
        c.ack(second)
        (third,) = receive_until(c, 1, batch=1)
        assert third.body == b"blk-2"
        c.ack(third)


def test_delayed_message_waits_until_its_time(server):
    with producer(server.address, "Delayed") as p:
        at = int(time.time()) + 4
        receipt = p.send(message("Delayed", b"later", deliver_at=at))
        assert receipt.message_id
    with simple_consumer(server.address, "GDelayed", {"Delayed": "*"}) as c:
        if time.time() < at - 1.5:  # a receive (long polling 1 s) that ends before the time: nothing yet
            assert c.receive(32, 15) == [], "delivered before its time"
        got = receive_until(c, 1, timeout=30)
        assert [m.body for m in got] == [b"later"]
        assert time.time() >= at - 1
        assert got[0].delivery_timestamp == at * 1000
        c.ack(got[0])


def test_delivery_time_too_far_ahead_is_refused(server):
    with producer(server.address, "DelayedMs") as p:
        with pytest.raises(BadRequestException) as e:
            p.send(message("DelayedMs", b"2 days", deliver_at=int(time.time()) + 2 * 86400))
        assert "ILLEGAL_DELIVERY_TIME" in str(e.value) or "max delay time" in str(e.value)


def test_delivery_time_in_milliseconds_is_refused(server):
    """The client puts the number into ``delivery_timestamp.seconds``: epoch milliseconds there are a time
    far beyond a day ahead (and beyond protobuf's range), refused with ILLEGAL_DELIVERY_TIME."""
    with producer(server.address, "DelayedMs") as p:
        with pytest.raises(BadRequestException) as e:
            p.send(message("DelayedMs", b"ms", deliver_at=int(time.time() * 1000) + 5000))
        assert str(pb.Code.Value("ILLEGAL_DELIVERY_TIME")) in str(e.value)
    stub, channel = raw_stub(server.address)
    try:
        for seconds in (int(time.time() * 1000), 253402300799):  # beyond protobuf's range, and its last second
            m = pb.Message(
                topic=pb.Resource(name="DelayedMs"),
                body=b"ms",
                system_properties=pb.SystemProperties(
                    message_id="01RAWDELAYMS",
                    message_type=pb.MessageType.DELAY,
                    body_encoding=pb.Encoding.IDENTITY,
                    born_timestamp=Timestamp(seconds=int(time.time())),
                ),
            )
            m.system_properties.delivery_timestamp.seconds = seconds
            r = stub.SendMessage(spb.SendMessageRequest(messages=[m]), metadata=meta(), timeout=10)
            assert pb.Code.Name(r.status.code) == "ILLEGAL_DELIVERY_TIME", seconds
            assert not r.entries
    finally:
        channel.close()


def test_recalled_delayed_message_is_never_delivered(server):
    with producer(server.address, "Recall") as p:
        at = int(time.time()) + 3
        recalled = p.send(message("Recall", b"recalled", deliver_at=at))
        kept = p.send(message("Recall", b"kept", deliver_at=at))
        assert recalled.recall_handle
        assert p.recall_message("Recall", recalled.recall_handle) == recalled.message_id
    with simple_consumer(server.address, "GRecall", {"Recall": "*"}) as c:
        got = receive_until(c, 1, timeout=20)
        for m in got:
            c.ack(m)
        got += c.receive(32, 15)
        assert [m.message_id for m in got] == [kept.message_id]


def test_reserved_property_key_is_refused(server):
    stub, channel = raw_stub(server.address)
    try:
        m = pb.Message(
            topic=pb.Resource(name="Recall"),
            body=b"x",
            user_properties={"UNIQ_KEY": "mine"},
            system_properties=pb.SystemProperties(
                message_id="01RAWRESERVED",
                message_type=pb.MessageType.NORMAL,
                body_encoding=pb.Encoding.IDENTITY,
                born_timestamp=Timestamp(seconds=int(time.time())),
            ),
        )
        r = stub.SendMessage(spb.SendMessageRequest(messages=[m]), metadata=meta(), timeout=10)
        assert pb.Code.Name(r.status.code) == "ILLEGAL_MESSAGE_PROPERTY_KEY"
    finally:
        channel.close()


def test_fifo_redelivers_the_head_before_the_rest(server):
    with producer(server.address, "FifoRetry") as p:
        for i in range(2):
            p.send(message("FifoRetry", f"head-{i}".encode(), group="retrying"))
    with simple_consumer(server.address, "GFifoRetry", {"FifoRetry": "*"}) as c:
        (first,) = receive_until(c, 1, batch=1)
        assert (first.body, first.delivery_attempt) == (b"head-0", 1)
        c.change_invisible_duration(first, 1)
        (again,) = receive_until(c, 1, batch=1)
        assert (again.body, again.delivery_attempt) == (b"head-0", 2), "the queue skipped its unacked head"
        c.ack(again)
        (nxt,) = receive_until(c, 1, batch=1)
        assert (nxt.body, nxt.delivery_attempt) == (b"head-1", 1)
        c.ack(nxt)
