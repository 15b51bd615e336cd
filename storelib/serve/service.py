"""``apache.rocketmq.v2.MessagingService`` over one store: each RPC handed to what answers it.

Every call is known by its ``x-mq-client-id`` (CLIENT_ID_REQUIRED without one); every failure is a
response carrying a status, never a gRPC error, except on Telemetry, whose stream ends with
INVALID_ARGUMENT as the proxy ends it.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Callable, Iterator, TypeVar

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceServicer

from storelib.model.errors import RequestError
from storelib.serve.checks import check_group, check_topic
from storelib.serve.clients import Sessions, merged_settings, route, settings_reply
from storelib.serve.consuming import MIN_POLLING_MS, Consuming
from storelib.serve.producing import Producing
from storelib.serve.status import ok, status, status_of

if TYPE_CHECKING:
    from storelib.context import StoreContext

__all__ = ["MessagingService"]

log = logging.getLogger("storelib.serve")

R = TypeVar("R")


def _client_id(context: grpc.ServicerContext) -> str:
    for key, value in context.invocation_metadata():
        if key == "x-mq-client-id" and value:
            return str(value)
    return ""


def _peer_host(context: grpc.ServicerContext) -> str:
    """The caller's IP (``ipv4:1.2.3.4:5678`` or ``ipv6:[::1]:5678``), for born hosts."""
    peer = context.peer() or ""
    kind, _, rest = peer.partition(":")
    host = rest.rsplit(":", 1)[0] if kind in ("ipv4", "ipv6") else "127.0.0.1"
    return host.strip("[]") if kind == "ipv4" else "127.0.0.1"


class MessagingService(MessagingServiceServicer):
    """The RPCs of RocketMQ 5's proxy, answered by one store (each method is the RPC of its name; a
    running endpoint's client calls them, see ``tests/serve``).

    >>> service = MessagingService(store.context, pb.Broker(name="storelib")); service.close()
    """

    def __init__(self, ctx: "StoreContext", broker: pb.Broker, min_polling_ms: int = MIN_POLLING_MS):
        self.ctx = ctx
        self.broker = broker
        self.sessions = Sessions()
        self.producing = Producing(ctx, self.sessions, broker.name)
        self.consuming = Consuming(ctx, self.sessions, broker, min_polling_ms)
        self.stopping = threading.Event()

    def close(self) -> None:
        self.stopping.set()
        self.producing.close()

    def _answered(self, context: grpc.ServicerContext, response: Callable[..., R], answer: Callable[[], R]) -> R:
        """``answer()`` for a known client, else ``response`` carrying CLIENT_ID_REQUIRED's status."""
        try:
            self._known(context)
        except Exception as e:  # noqa: BLE001
            return response(status=status_of(e))
        return answer()

    def _known(self, context: grpc.ServicerContext) -> str:
        client_id = _client_id(context)
        if not client_id:
            raise RequestError("x-mq-client-id", "client id cannot be empty", code="CLIENT_ID_REQUIRED")
        self.sessions.session(client_id, context.peer())
        return client_id

    # ---- routes and clients --------------------------------------------------------------------
    def QueryRoute(self, request: spb.QueryRouteRequest, context: grpc.ServicerContext) -> spb.QueryRouteResponse:
        try:
            self._known(context)
            check_topic(request.topic.name)
            config = self.ctx.topics.get(request.topic.name)
        except Exception as e:  # noqa: BLE001
            return spb.QueryRouteResponse(status=status_of(e))
        return spb.QueryRouteResponse(status=ok(), message_queues=route(request.topic, config, self.broker))

    def Heartbeat(self, request: spb.HeartbeatRequest, context: grpc.ServicerContext) -> spb.HeartbeatResponse:
        try:
            session = self.sessions.get(self._known(context))
            if session is None or session.settings is None:
                return spb.HeartbeatResponse(
                    status=status("UNRECOGNIZED_CLIENT_TYPE", "cannot find client settings for this client")
                )
            if request.client_type in (pb.ClientType.PUSH_CONSUMER, pb.ClientType.SIMPLE_CONSUMER):
                check_group(request.group.name)
        except Exception as e:  # noqa: BLE001
            return spb.HeartbeatResponse(status=status_of(e))
        return spb.HeartbeatResponse(status=ok())

    def NotifyClientTermination(
        self, request: spb.NotifyClientTerminationRequest, context: grpc.ServicerContext
    ) -> spb.NotifyClientTerminationResponse:
        try:
            forgotten = self.sessions.forget(self._known(context))
            if forgotten is None or forgotten.settings is None:
                return spb.NotifyClientTerminationResponse(
                    status=status("UNRECOGNIZED_CLIENT_TYPE", "cannot find client settings for this client")
                )
            if request.HasField("group") and request.group.name:
                check_group(request.group.name)
        except Exception as e:  # noqa: BLE001
            return spb.NotifyClientTerminationResponse(status=status_of(e))
        return spb.NotifyClientTerminationResponse(status=ok())

    def Telemetry(
        self, request_iterator: Iterator[spb.TelemetryCommand], context: grpc.ServicerContext
    ) -> Iterator[spb.TelemetryCommand]:
        client_id = _client_id(context)
        if not client_id:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "client id cannot be empty")
        session = self.sessions.session(client_id, context.peer())
        box = self.sessions.open_stream(session)
        failure: list[str] = []

        def read() -> None:  # the client's commands, on a thread of their own; answers go to the outbox
            try:
                for command in request_iterator:
                    if command.HasField("settings"):
                        try:
                            merged = merged_settings(self.ctx, command.settings)
                            session.settings = merged  # the store's view (fifo, attempts), as the proxy keeps it
                            box.put(settings_reply(merged))
                        except Exception as e:  # noqa: BLE001
                            failure.append(f"process client telemetryCommand failed. {status_of(e).message}")
                            break
            except grpc.RpcError:
                pass  # the client went away
            except Exception as e:  # noqa: BLE001
                log.warning("telemetry of %s ended: %s", client_id, e)
            finally:
                self.sessions.close_stream(session, box)

        threading.Thread(target=read, name=f"storelib-telemetry-{client_id}", daemon=True).start()
        while context.is_active() and not self.stopping.is_set():
            try:
                item = box.get(timeout=0.5)
            except Exception:  # noqa: BLE001  (queue.Empty: look at the stream again)
                continue
            if Sessions.closed(item):
                break
            yield item
        if failure:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, failure[0])

    # ---- producers -----------------------------------------------------------------------------
    def SendMessage(self, request: spb.SendMessageRequest, context: grpc.ServicerContext) -> spb.SendMessageResponse:
        return self._answered(
            context, spb.SendMessageResponse, lambda: self.producing.send(request, _peer_host(context))
        )

    def EndTransaction(
        self, request: spb.EndTransactionRequest, context: grpc.ServicerContext
    ) -> spb.EndTransactionResponse:
        return self._answered(context, spb.EndTransactionResponse, lambda: self.producing.end(request))

    def RecallMessage(
        self, request: spb.RecallMessageRequest, context: grpc.ServicerContext
    ) -> spb.RecallMessageResponse:
        return self._answered(context, spb.RecallMessageResponse, lambda: self.producing.recall(request))

    # ---- consumers -----------------------------------------------------------------------------
    def QueryAssignment(
        self, request: spb.QueryAssignmentRequest, context: grpc.ServicerContext
    ) -> spb.QueryAssignmentResponse:
        return self._answered(context, spb.QueryAssignmentResponse, lambda: self.consuming.assignment(request))

    def ReceiveMessage(
        self, request: spb.ReceiveMessageRequest, context: grpc.ServicerContext
    ) -> Iterator[spb.ReceiveMessageResponse]:
        try:
            client_id = self._known(context)
        except Exception as e:  # noqa: BLE001
            yield spb.ReceiveMessageResponse(status=status_of(e))
            return
        yield from self.consuming.receive(
            request,
            client_id,
            context.time_remaining(),
            waiting=lambda: context.is_active() and not self.stopping.is_set(),
        )

    def AckMessage(self, request: spb.AckMessageRequest, context: grpc.ServicerContext) -> spb.AckMessageResponse:
        return self._answered(context, spb.AckMessageResponse, lambda: self.consuming.ack(request))

    def ChangeInvisibleDuration(
        self, request: spb.ChangeInvisibleDurationRequest, context: grpc.ServicerContext
    ) -> spb.ChangeInvisibleDurationResponse:
        return self._answered(
            context, spb.ChangeInvisibleDurationResponse, lambda: self.consuming.change_invisible(request)
        )

    def ForwardMessageToDeadLetterQueue(
        self, request: spb.ForwardMessageToDeadLetterQueueRequest, context: grpc.ServicerContext
    ) -> spb.ForwardMessageToDeadLetterQueueResponse:
        return self._answered(
            context, spb.ForwardMessageToDeadLetterQueueResponse, lambda: self.consuming.to_dead_letter(request)
        )
