"""The machine-local servers' one wire (storelib.local.wire): frames of any size, a server that answers
in any order and closes cleanly, clients that settle every request they sent."""

from __future__ import annotations

import os
import socket
import threading
import time

import pyarrow as pa
import pytest

from storelib.local import wire
from storelib.model.errors import StoreStateError


def _address(name: str) -> str:
    return wire.local_address(name, f"/tmp/test-wire-{name}-{os.getpid()}-{time.monotonic_ns()}")


def test_a_frame_larger_than_the_socket_buffer_arrives_whole():
    """A body of many megabytes goes out in several writes and is read back as sent."""
    rows = pa.table({"body": [os.urandom(1 << 16) for _ in range(128)]})  # 8 MiB
    a, b = socket.socketpair()
    got = []
    reader = threading.Thread(target=lambda: got.append(wire.receive_frame(b)))
    reader.start()
    wire.send_frame(a, wire.ANSWER, "cd" * 16, *wire.pack({"n": 128}, rows))
    reader.join(timeout=60)
    kind, request_id, body = got[0]
    head, back = wire.unpack(body)
    assert (kind, request_id, head) == (wire.ANSWER, "cd" * 16, {"n": 128}) and back.equals(rows)


def test_answers_come_in_any_order_and_each_finds_its_request():
    """The server answers the second request first: each client future gets its own answer."""
    held: list[wire.Request] = []
    server = wire.Server.bind(_address("order"), "test-order")
    server.serve(held.append)  # answered later, from this thread
    client = wire.Client.connect(server.address, "test-order")
    try:
        first, second = client.request(*wire.pack({"n": 1})), client.request(*wire.pack({"n": 2}))
        deadline = time.monotonic() + 30
        while len(held) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        for request in reversed(held):
            request.answer(wire.ANSWER, *wire.pack({"got": wire.unpack(request.body)[0]["n"]}))
        assert [wire.unpack(f.result(timeout=30)[1])[0] for f in (first, second)] == [{"got": 1}, {"got": 2}]
    finally:
        server.close()


def test_a_closing_server_answers_what_it_took_and_declines_the_rest():
    """Requests taken before the server closes are answered (within its wait); one arriving after is
    declined; then the connection ends, and the client's unanswered requests get None, in the order sent."""
    held: list[wire.Request] = []
    server = wire.Server.bind(_address("close"), "test-close")
    server.serve(held.append)
    ended = []
    client = wire.Client.connect(server.address, "test-close", ended=lambda: ended.append(True))
    taken = client.request(*wire.pack({"n": 1}))
    deadline = time.monotonic() + 30
    while not held and time.monotonic() < deadline:
        time.sleep(0.01)
    server.stop()
    late = client.request(*wire.pack({"n": 2}))
    assert late.result(timeout=30)[0] == wire.DECLINED and not taken.done()
    threading.Timer(0.2, lambda: held[0].answer(wire.ANSWER, *wire.pack({"ok": True}))).start()
    server.close(wait_s=30)  # waits for the answer the timer sends
    assert wire.unpack(taken.result(timeout=30)[1])[0] == {"ok": True}
    assert client.finished.wait(30) and ended == [True]
    assert client.request(*wire.pack({"n": 3})) is None  # the server is gone: nothing more is taken


def test_requests_under_way_when_the_server_dies_get_none_in_the_order_sent():
    """The connection ends with two requests unanswered: both futures get None, then ``ended`` runs."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    address = _address("dies")
    listener.bind(address)
    listener.listen(1)
    order: list[str] = []
    client = wire.Client.connect(address, "test-dies", ended=lambda: order.append("ended"))
    futures = [client.request(*wire.pack({"n": n})) for n in range(2)]
    for n, f in enumerate(futures):
        f.add_done_callback(lambda f, n=n: order.append(f"request {n}: {f.result()}"))
    peer, _ = listener.accept()
    for _ in range(2):
        wire.receive_frame(peer)
    peer.close()  # the server dies without answering
    listener.close()
    assert client.finished.wait(30)
    assert order == ["request 0: None", "request 1: None", "ended"]


def test_a_call_not_answered_in_time_gives_none_and_closes_its_connection():
    server = wire.Server.bind(_address("slow"), "test-slow")
    server.serve(lambda request: None)  # never answers
    client = wire.Client.connect(server.address, "test-slow", reading=False)
    try:
        began = time.monotonic()
        assert client.call(*wire.pack({"n": 1}), timeout=0.2) is None
        assert 0.2 <= time.monotonic() - began < 10 and client.sock.fileno() == -1
    finally:
        server.close()


def test_a_failing_handler_declines_and_the_server_goes_on():
    def handle(request: wire.Request) -> None:
        if wire.unpack(request.body)[0]["n"] == 1:
            raise ValueError("no")
        request.answer(wire.ANSWER)

    server = wire.Server.bind(_address("fail"), "test-fail")
    server.serve(handle)
    client = wire.Client.connect(server.address, "test-fail", reading=False)
    try:
        assert client.call(*wire.pack({"n": 1}), timeout=30)[0] == wire.DECLINED
        assert client.call(*wire.pack({"n": 2}), timeout=30)[0] == wire.ANSWER
    finally:
        server.close()


def test_one_process_holds_an_address():
    address = _address("one")
    server = wire.Server.bind(address, "test-one")
    try:
        assert wire.Server.bind(address, "test-one") is None
    finally:
        server.close()
    again = wire.Server.bind(address, "test-one")  # free at once after close
    assert again is not None
    again.close()


def test_an_error_record_travels_typed():
    from storelib.model.errors import TopicNotFoundError

    body = b"".join(bytes(p) for p in wire.error_body(TopicNotFoundError("topic", "not found", value="T")))
    error = wire.error_of(body)
    assert isinstance(error, TopicNotFoundError) and error.value == "T"
    with pytest.raises(StoreStateError, match="holds no error record"):
        wire.error_of(b"".join(bytes(p) for p in wire.pack(rows=pa.table({"x": [1]}))))  # rows, no record
