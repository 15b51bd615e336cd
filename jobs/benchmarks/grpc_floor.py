"""The official Python client's own ceiling: the gRPC suite's producers and consumers against a server that
stores nothing, so that what they reach is bound by the clients alone (issue 47's 3,000 msg/s target).

The server keeps sent messages in a deque in memory: SendMessage appends and answers OK, ReceiveMessage hands
out up to the batch asked for (waiting up to the long-polling timeout while there is none), AckMessage answers
OK; QueryRoute, Heartbeat and Telemetry answer as ``storelib serve`` does. Run it as ``python -m
jobs.benchmarks.grpc_floor`` (it prints ``serving ... on HOST:PORT`` as ``storelib serve`` does), or through
``jobs/benchmark.py --suite grpc --floor``.

>>> server, port = start(0)
>>> port > 0
True
>>> server.stop(None)  # doctest: +ELLIPSIS
<...>
"""

from __future__ import annotations

import collections
import sys
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import Iterator

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceServicer, add_MessagingServiceServicer_to_server

__all__ = ["FloorService", "start", "main"]

_OK = pb.Status(code=pb.Code.OK, message="OK")


class FloorService(MessagingServiceServicer):
    """A MessagingService over a deque: nothing stored, nothing checked beyond what a client needs."""

    def __init__(self, address: str, queues: int = 8):
        host, port = address.rsplit(":", 1)
        self.broker = pb.Broker(
            name="floor",
            id=0,
            endpoints=pb.Endpoints(scheme=pb.AddressScheme.IPv4, addresses=[pb.Address(host=host, port=int(port))]),
        )
        self.queues = queues
        self.messages: collections.deque[pb.Message] = collections.deque()
        self.arrived = threading.Condition()
        self.sequence = 0

    def QueryRoute(self, request, context):  # noqa: N802 - the RPC's name
        return spb.QueryRouteResponse(
            status=_OK,
            message_queues=[
                pb.MessageQueue(
                    topic=request.topic,
                    id=i,
                    permission=pb.Permission.READ_WRITE,
                    broker=self.broker,
                    accept_message_types=[pb.MessageType.NORMAL],
                )
                for i in range(self.queues)
            ],
        )

    def Heartbeat(self, request, context):  # noqa: N802
        return spb.HeartbeatResponse(status=_OK)

    def QueryAssignment(self, request, context):  # noqa: N802
        queue = pb.MessageQueue(topic=request.topic, id=0, permission=pb.Permission.READ_WRITE, broker=self.broker)
        return spb.QueryAssignmentResponse(status=_OK, assignments=[pb.Assignment(message_queue=queue)])

    def Telemetry(self, request_iterator, context) -> Iterator[spb.TelemetryCommand]:  # noqa: N802
        for command in request_iterator:
            if command.HasField("settings"):
                settings = pb.Settings()
                settings.CopyFrom(command.settings)
                if settings.HasField("publishing"):
                    settings.publishing.max_body_size = 4 * 1024 * 1024
                yield spb.TelemetryCommand(status=_OK, settings=settings)

    def SendMessage(self, request, context):  # noqa: N802
        entries = []
        with self.arrived:
            for m in request.messages:
                self.sequence += 1
                self.messages.append(m)
                entries.append(
                    spb.SendResultEntry(status=_OK, message_id=m.system_properties.message_id, offset=self.sequence)
                )
            self.arrived.notify_all()
        return spb.SendMessageResponse(status=_OK, entries=entries)

    def ReceiveMessage(self, request, context) -> Iterator[spb.ReceiveMessageResponse]:  # noqa: N802
        wait = request.long_polling_timeout.seconds + request.long_polling_timeout.nanos / 1e9
        deadline = time.monotonic() + min(wait or 20.0, max(0.0, (context.time_remaining() or 30.0) - 0.2))
        got: list[pb.Message] = []
        with self.arrived:
            while not self.messages and context.is_active() and time.monotonic() < deadline:
                self.arrived.wait(min(0.5, max(0.0, deadline - time.monotonic())))
            while self.messages and len(got) < max(1, request.batch_size):
                got.append(self.messages.popleft())
        if not got:
            yield spb.ReceiveMessageResponse(status=pb.Status(code=pb.Code.MESSAGE_NOT_FOUND, message="no new message"))
            return
        yield spb.ReceiveMessageResponse(status=_OK)
        for m in got:
            out = pb.Message()
            out.CopyFrom(m)
            sp = out.system_properties
            sp.receipt_handle = f"floor-{sp.message_id}"
            sp.delivery_attempt = 1
            sp.body_digest.CopyFrom(pb.Digest(type=pb.DigestType.CRC32, checksum=f"{zlib.crc32(m.body):08X}"))
            yield spb.ReceiveMessageResponse(message=out)

    def AckMessage(self, request, context):  # noqa: N802
        return spb.AckMessageResponse(
            status=_OK,
            entries=[
                spb.AckMessageResultEntry(message_id=e.message_id, receipt_handle=e.receipt_handle, status=_OK)
                for e in request.entries
            ],
        )

    def NotifyClientTermination(self, request, context):  # noqa: N802
        return spb.NotifyClientTerminationResponse(status=_OK)


def start(port: int = 0, host: str = "127.0.0.1") -> tuple[grpc.Server, int]:
    """Start the floor server on ``host:port`` (0: a free port); returns it and its port."""
    server = grpc.server(ThreadPoolExecutor(64))
    bound = server.add_insecure_port(f"{host}:{port}")
    add_MessagingServiceServicer_to_server(FloorService(f"{host}:{bound}"), server)
    server.start()
    return server, bound


def main() -> int:
    server, port = start(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
    print(f"serving the client floor (nothing stored) on 127.0.0.1:{port}", flush=True)
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
