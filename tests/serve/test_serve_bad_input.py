"""Bad input gets RocketMQ's status (never a gRPC error, never a crash), clients that vanish mid-call
are survived, and the endpoint keeps serving everyone else. Raw stubs bypass the client's own checks."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from google.protobuf.duration_pb2 import Duration
from google.protobuf.timestamp_pb2 import Timestamp
from rocketmq import FilterExpression
from rocketmq.grpc_protocol import FilterType
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from serve_helpers import (
    make_store,
    message,
    meta,
    producer,
    raw_stub,
    receive_until,
    send_and_receive,
    simple_consumer,
)

TOPICS = {"Bad": 2, "Healthy": 2}


@pytest.fixture(scope="module")
def server(serve, tmp_path_factory):
    path = make_store(str(tmp_path_factory.mktemp("bad") / "store"), TOPICS)
    return serve(path)


@pytest.fixture
def stub(server):
    s, channel = raw_stub(server.address)
    try:
        yield s
    finally:
        channel.close()


def raw_message(topic: str, body: bytes = b"x", message_id: str = "01RAW") -> pb.Message:
    return pb.Message(
        topic=pb.Resource(name=topic),
        body=body,
        system_properties=pb.SystemProperties(
            message_id=message_id,
            message_type=pb.MessageType.NORMAL,
            body_encoding=pb.Encoding.IDENTITY,
            born_timestamp=Timestamp(seconds=int(time.time())),
        ),
    )


def send(stub, *messages: pb.Message, client_id: str | None = "raw-test@1@0@x") -> spb.SendMessageResponse:
    return stub.SendMessage(spb.SendMessageRequest(messages=list(messages)), metadata=meta(client_id), timeout=10)


def receive_request(topic: str, group: str, expression: str = "*", kind=FilterType.TAG, polling_s: int = 5):
    return spb.ReceiveMessageRequest(
        group=pb.Resource(name=group),
        message_queue=pb.MessageQueue(topic=pb.Resource(name=topic), id=-1, broker=pb.Broker(name="storelib")),
        filter_expression=pb.FilterExpression(type=kind, expression=expression),
        batch_size=16,
        invisible_duration=Duration(seconds=15),
        long_polling_timeout=Duration(seconds=polling_s),
        auto_renew=False,
    )


def code(status) -> str:
    return pb.Code.Name(status.code)


@pytest.fixture(autouse=True)
def still_serving(server):
    """After every test: the server is alive and a normal send and receive work."""
    yield
    assert server.alive(), server.stderr()
    receipt, got = send_and_receive(server.address, server.address, "Healthy", "GHealthy", b"still here")
    assert receipt.message_id in {m.message_id for m in got}


def test_invalid_topic_name(stub):
    r = send(stub, raw_message("bad topic!"))
    assert code(r.status) == "ILLEGAL_TOPIC" and "illegal characters" in r.status.message
    route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="bad topic!")), metadata=meta(), timeout=10)
    assert code(route.status) == "ILLEGAL_TOPIC"


def test_system_topic_is_refused(stub):
    assert code(send(stub, raw_message("rmq_sys_anything")).status) == "ILLEGAL_TOPIC"


def test_unknown_topic(server, stub):
    route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="NoSuchTopic")), metadata=meta(), timeout=10)
    assert code(route.status) == "TOPIC_NOT_FOUND"
    assert code(send(stub, raw_message("NoSuchTopic")).status) == "TOPIC_NOT_FOUND"
    with producer(server.address, "Bad") as p:
        with pytest.raises(Exception, match="NoSuchTopic"):  # the client: "failed to fetch topic:... route"
            p.send(message("NoSuchTopic", b"nowhere"))


def test_oversized_body(stub):
    r = send(stub, raw_message("Bad", body=b"x" * (4 * 1024 * 1024 + 1)))
    assert code(r.status) == "MESSAGE_BODY_TOO_LARGE"
    assert not r.entries


def test_empty_body(stub):
    assert code(send(stub, raw_message("Bad", body=b"")).status) == "MESSAGE_BODY_EMPTY"


def test_no_message(stub):
    assert code(send(stub).status) == "MESSAGE_CORRUPTED"


def test_missing_client_id(stub):
    assert code(send(stub, raw_message("Bad"), client_id=None).status) == "CLIENT_ID_REQUIRED"
    responses = list(stub.ReceiveMessage(receive_request("Bad", "GBad"), timeout=10))
    assert [code(r.status) for r in responses if r.HasField("status")] == ["CLIENT_ID_REQUIRED"]
    ack = stub.AckMessage(spb.AckMessageRequest(topic=pb.Resource(name="Bad")), timeout=10)
    assert code(ack.status) == "CLIENT_ID_REQUIRED"


def test_bad_sql92_filter(stub):
    responses = list(
        stub.ReceiveMessage(receive_request("Bad", "GBadSql", "a >>> (", FilterType.SQL), metadata=meta(), timeout=10)
    )
    assert [code(r.status) for r in responses if r.HasField("status")] == ["ILLEGAL_FILTER_EXPRESSION"]


def test_bad_sql92_filter_through_the_client(server):
    from rocketmq import SimpleConsumer
    from rocketmq.v5.exception import BadRequestException
    from serve_helpers import config

    c = SimpleConsumer(config(server.address), "GBadSql2", {"Bad": FilterExpression("a >>> (", FilterType.SQL)}, 5)
    try:
        with pytest.raises(BadRequestException) as e:
            c.startup()
            c.receive(16, 15)
        assert str(pb.Code.Value("ILLEGAL_FILTER_EXPRESSION")) in str(e.value)
    finally:
        try:
            c.shutdown()
        except Exception:  # noqa: BLE001
            pass


def test_invisible_time_too_short(stub):
    request = receive_request("Bad", "GBadInvisible")
    request.invisible_duration.seconds = 1
    responses = list(stub.ReceiveMessage(request, metadata=meta(), timeout=10))
    assert [code(r.status) for r in responses if r.HasField("status")] == ["ILLEGAL_INVISIBLE_TIME"]


def test_invisible_time_out_of_range(stub):
    request = receive_request("Bad", "GBadInvisible")
    request.invisible_duration.seconds = 10**13  # beyond protobuf's range of durations
    responses = list(stub.ReceiveMessage(request, metadata=meta(), timeout=10))
    assert [code(r.status) for r in responses if r.HasField("status")] == ["ILLEGAL_INVISIBLE_TIME"]


def test_born_timestamp_out_of_range(stub):
    m = raw_message("Bad", message_id="01RAWBORN")
    m.system_properties.born_timestamp.seconds = 10**15
    r = send(stub, m)
    assert code(r.status) == "BAD_REQUEST" and not r.entries


@pytest.mark.parametrize(
    "handle",
    ["bad", "not a handle at all", f"3 {int(time.time() * 1000)} 60000 0 0 storelib 1 3 12345"],
    ids=["garbage", "words", "unknown-claim"],
)
def test_unknown_receipt_handle_on_ack(stub, handle):
    r = stub.AckMessage(
        spb.AckMessageRequest(
            group=pb.Resource(name="GBadAck"),
            topic=pb.Resource(name="Bad"),
            entries=[spb.AckMessageEntry(message_id="01X", receipt_handle=handle)],
        ),
        metadata=meta(),
        timeout=10,
    )
    assert code(r.status) == "INVALID_RECEIPT_HANDLE"
    assert [code(e.status) for e in r.entries] == ["INVALID_RECEIPT_HANDLE"]


def test_stale_receipt_handle_on_ack(server):
    from rocketmq.v5.exception import BadRequestException

    with producer(server.address, "Bad") as p:
        p.send(message("Bad", b"twice"))
    with simple_consumer(server.address, "GStale", {"Bad": "*"}) as c:
        (m,) = [x for x in receive_until(c, 1)]
        c.ack(m)
        with pytest.raises(BadRequestException):
            c.ack(m)  # its claim ended with the first ack


def test_client_cancels_a_long_poll(server):
    stub, channel = raw_stub(server.address)
    try:
        call = stub.ReceiveMessage(receive_request("Bad", "GCancel", polling_s=20), metadata=meta(), timeout=30)
        time.sleep(1)
        call.cancel()
        with pytest.raises(grpc.RpcError) as e:
            list(call)
        assert e.value.code() == grpc.StatusCode.CANCELLED
    finally:
        channel.close()


def test_cancelled_long_poll_claims_nothing_afterwards(server):
    """A long poll whose client went away must stop polling: a message sent after the cancel goes to the
    next receive of the group at once (attempt 1), not to the dead call (invisible for 15 s)."""
    stub, channel = raw_stub(server.address)
    try:
        call = stub.ReceiveMessage(receive_request("Bad", "GAfterCancel", polling_s=20), metadata=meta(), timeout=30)
        time.sleep(1)
        call.cancel()
    finally:
        channel.close()
    time.sleep(0.5)
    with producer(server.address, "Bad") as p:
        receipt = p.send(message("Bad", b"after the cancel"))
    with simple_consumer(server.address, "GAfterCancel", {"Bad": "*"}) as c:
        got = [m for m in receive_until(c, 1, timeout=8) if m.message_id == receipt.message_id]
        assert got and got[0].delivery_attempt == 1, "the cancelled call claimed the message"
        c.ack(got[0])


def test_client_closes_its_channel_mid_stream(server):
    stub, channel = raw_stub(server.address)
    calls = [
        stub.ReceiveMessage(receive_request("Bad", f"GVanish{i}", polling_s=20), metadata=meta(), timeout=30)
        for i in range(3)
    ]
    telemetry = stub.Telemetry(iter([]), metadata=meta("vanishing@1@0@x"), timeout=30)

    def drain(call):
        try:
            list(call)
        except grpc.RpcError:
            pass

    threads = [threading.Thread(target=drain, args=(c,), daemon=True) for c in [*calls, telemetry]]
    for t in threads:
        t.start()
    time.sleep(1)
    channel.close()
    for t in threads:
        t.join(10)


VANISHING_CLIENT = """
import os, sys
from rocketmq import ClientConfiguration, Credentials, Message, Producer, SimpleConsumer, FilterExpression
address = sys.argv[1]
p = Producer(ClientConfiguration(address, Credentials()), ("Bad",))
p.startup()
m = Message(); m.topic = "Bad"; m.body = b"from a client that then disappears"
p.send(m)
c = SimpleConsumer(ClientConfiguration(address, Credentials()), "GVanishing", {"Bad": FilterExpression()}, 20)
c.startup()
c.receive_async(16, 15)  # a long poll under way
print("sent", flush=True)
os._exit(0)  # no shutdown: streams and calls just end
"""


def test_clients_that_vanish_without_shutdown(server):
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", VANISHING_CLIENT, server.address], capture_output=True, text=True, timeout=60
    )
    assert "sent" in out.stdout, out.stderr[-2000:]
