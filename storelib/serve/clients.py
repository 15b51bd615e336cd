"""The clients an endpoint knows: their settings (from Telemetry), their Telemetry streams, and what the
proxy answers them with about routes and settings (``ClientActivity``, ``RouteActivity``).

A client is known by the ``x-mq-client-id`` its calls carry. Its first Telemetry command carries its
settings; the endpoint answers with them merged with the store's (body size, retry policy, the group's
FIFO flag and attempts), and later pushes transaction check-backs on the same stream.

>>> sessions = Sessions()
>>> s = sessions.session("host@1@0@abc", "ipv4:127.0.0.1:5000")
>>> sql = pb.FilterExpression(type=pb.FilterType.SQL, expression="a > 1")
>>> s.client_id, s.producer_of("Orders"), selector_of(sql).is_sql92
('host@1@0@abc', False, True)
>>> broker = pb.Broker(name="storelib", id=0, endpoints=endpoints("127.0.0.1", 8081))
>>> [pb.Permission.Name(q.permission) for q in route(pb.Resource(name="T"), TopicConfig("T", 2, 2), broker)]
['READ_WRITE', 'READ_WRITE']
>>> settings = pb.Settings(client_type=pb.ClientType.PRODUCER, publishing=pb.Publishing(topics=[pb.Resource(name="T")]))
>>> merged_settings(store.context, settings).publishing.max_body_size
4194304
"""

from __future__ import annotations

import ipaddress
import queue
import random
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb

from storelib.consume.subscription import subscribe
from storelib.filter.selector import MessageSelector
from storelib.model.errors import RequestError
from storelib.model.topic import PERM_READ, PERM_WRITE, TopicConfig
from storelib.serve.checks import check_group, check_topic
from storelib.serve.convert import duration
from storelib.serve.status import ok

if TYPE_CHECKING:
    from storelib.context import StoreContext

__all__ = ["Session", "Sessions", "selector_of", "route", "merged_settings", "ACCEPTED_TYPES"]

#: Every topic takes every kind of message (RocketMQ 5's MIXED topics): the store's topics have no type.
ACCEPTED_TYPES = (pb.MessageType.NORMAL, pb.MessageType.FIFO, pb.MessageType.DELAY, pb.MessageType.TRANSACTION)
#: What a consumer is told (``ProxyConfig``): batch size and longest poll.
RECEIVE_BATCH_SIZE = 32
LONG_POLLING_MS = 20_000
_CONSUMERS = (pb.ClientType.PUSH_CONSUMER, pb.ClientType.SIMPLE_CONSUMER)
_CLOSE = object()


@dataclass
class Session:
    """One client: its id, its address, its settings once told, and its Telemetry stream's outbox.

    >>> s = Session("c1", "ipv4:127.0.0.1:1"); s.push(spb.TelemetryCommand())
    False
    """

    client_id: str
    peer: str
    settings: pb.Settings | None = None
    outbox: "queue.Queue[object] | None" = None

    def producer_of(self, topic: str) -> bool:
        """Whether this client is a producer publishing ``topic`` (the one a check-back of it goes to)."""
        s = self.settings
        return (
            s is not None
            and s.client_type == pb.ClientType.PRODUCER
            and self.outbox is not None
            and any(t.name == topic for t in s.publishing.topics)
        )

    def push(self, command: spb.TelemetryCommand) -> bool:
        """Send ``command`` on the client's Telemetry stream; False when it has none open."""
        box = self.outbox
        if box is None:
            return False
        box.put(command)
        return True


class Sessions:
    """Every client that called, by client id.

    >>> sessions = Sessions(); s = sessions.session("c1", "peer")
    >>> box = sessions.open_stream(s); s.push(spb.TelemetryCommand()), sessions.get("c1") is s
    (True, True)
    >>> sessions.producers_of("T"), sessions.close_stream(s, box)
    ([], None)
    >>> box.get() is not None and Sessions.closed(box.get()), sessions.forget("c1") is s
    (True, True)
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, Session] = {}

    def session(self, client_id: str, peer: str) -> Session:
        with self._lock:
            s = self._by_id.get(client_id)
            if s is None:
                s = self._by_id[client_id] = Session(client_id, peer)
            return s

    def get(self, client_id: str) -> Session | None:
        with self._lock:
            return self._by_id.get(client_id)

    def forget(self, client_id: str) -> Session | None:
        with self._lock:
            return self._by_id.pop(client_id, None)

    def producers_of(self, topic: str) -> list[Session]:
        with self._lock:
            found = [s for s in self._by_id.values() if s.producer_of(topic)]
        random.shuffle(found)
        return found

    def open_stream(self, session: Session) -> "queue.Queue[object]":
        box: "queue.Queue[object]" = queue.Queue()
        session.outbox = box
        return box

    def close_stream(self, session: Session, box: "queue.Queue[object]") -> None:
        if session.outbox is box:
            session.outbox = None
        box.put(_CLOSE)

    @staticmethod
    def closed(item: object) -> bool:
        return item is _CLOSE


def selector_of(expression: pb.FilterExpression) -> MessageSelector:
    """A subscription's filter as the store's selector: TAG (``*`` or empty: every message) or SQL92."""
    if expression.type == pb.FilterType.SQL:
        return MessageSelector.by_sql(expression.expression)
    return MessageSelector.by_tag(expression.expression or "*")


def endpoints(host: str, port: int) -> pb.Endpoints:
    """This endpoint's address as clients are told to reach it (IPv4, IPv6 or a name)."""
    try:
        scheme = pb.AddressScheme.IPv6 if ipaddress.ip_address(host).version == 6 else pb.AddressScheme.IPv4
    except ValueError:
        scheme = pb.AddressScheme.DOMAIN_NAME
    return pb.Endpoints(scheme=scheme, addresses=[pb.Address(host=host, port=port)])


def route(request_topic: pb.Resource, config: TopicConfig, broker: pb.Broker) -> list[pb.MessageQueue]:
    """``RouteActivity``'s queues of a topic: read-only, then write-only, then read-write ones, numbered
    in that order (the numbers name no queue of the store: a send and a receive choose the queues)."""
    readable, writable = bool(config.perm & PERM_READ), bool(config.perm & PERM_WRITE)
    r = w = rw = 0
    if readable and writable:
        rw = min(config.read_queue_nums, config.write_queue_nums)
        r, w = config.read_queue_nums - rw, config.write_queue_nums - rw
    elif readable:
        r = config.read_queue_nums
    elif writable:
        w = config.write_queue_nums
    perms = [pb.Permission.READ] * r + [pb.Permission.WRITE] * w + [pb.Permission.READ_WRITE] * rw
    if not perms:
        perms = [pb.Permission.NONE] * max(config.read_queue_nums, config.write_queue_nums, 1)
    return [
        pb.MessageQueue(topic=request_topic, id=i, permission=p, broker=broker, accept_message_types=ACCEPTED_TYPES)
        for i, p in enumerate(perms)
    ]


def merged_settings(ctx: "StoreContext", settings: pb.Settings) -> pb.Settings:
    """The settings a client sends, checked, and answered merged with the store's (``GrpcClientSettingsManager``).
    A consumer's subscriptions are registered with the store (so dispatch builds their Bloom bits)."""
    out = pb.Settings()
    out.CopyFrom(settings)
    if settings.HasField("publishing"):
        for t in settings.publishing.topics:
            check_topic(t.name)
        out.publishing.max_body_size = ctx.config.max_message_size
        out.publishing.validate_message_type = True
        out.backoff_policy.CopyFrom(
            pb.RetryPolicy(
                max_attempts=3,
                exponential_backoff=pb.ExponentialBackoff(initial=duration(10), max=duration(1000), multiplier=2.0),
            )
        )
    elif settings.HasField("subscription"):
        group = settings.subscription.group.name
        check_group(group)
        config = ctx.groups.find(group)
        for entry in settings.subscription.subscriptions:
            check_topic(entry.topic.name)
            selector = selector_of(entry.expression)
            registered = ctx.registry.current().get((group, entry.topic.name))
            same = registered is not None and (registered.selector.expression, registered.selector.is_sql92) == (
                selector.expression,
                selector.is_sql92,
            )
            if not same:  # a settings sync every 5 minutes writes nothing when nothing changed
                subscribe(ctx, group, entry.topic.name, selector)
        out.subscription.fifo = config.consume_message_orderly
        out.subscription.receive_batch_size = RECEIVE_BATCH_SIZE
        out.subscription.long_polling_timeout.CopyFrom(duration(LONG_POLLING_MS))
        out.backoff_policy.CopyFrom(
            pb.RetryPolicy(
                max_attempts=config.retry_max_times + 1,
                customized_backoff=pb.CustomizedBackoff(next=[duration(ms) for ms in ctx.config.delay_levels_ms]),
            )
        )
    else:
        raise RequestError("settings", "there is no publishing or subscription data in settings", code="BAD_REQUEST")
    out.metric.on = False
    return out


def settings_reply(settings: pb.Settings) -> spb.TelemetryCommand:
    return spb.TelemetryCommand(status=ok(), settings=settings)
