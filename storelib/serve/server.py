"""An endpoint: the gRPC server over a store, with what a broker runs beside it (the dispatch follower,
delivery of delayed messages, transaction check-backs), started and stopped together.

>>> with Endpoint(store, port=0) as endpoint:
...     endpoint.address.startswith("127.0.0.1:")
True
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Callable

import grpc
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol.service_pb2_grpc import add_MessagingServiceServicer_to_server

from storelib.delta import location
from storelib.delta.teardown import set_from_signal_handler
from storelib.model.errors import StoreError
from storelib.schedule.check import check_transactions
from storelib.schedule.deliver import deliver, may_hold_scheduled
from storelib.serve.clients import endpoints
from storelib.serve.consuming import MIN_POLLING_MS
from storelib.serve.service import MessagingService

if TYPE_CHECKING:
    from storelib.store import MessageStore

__all__ = ["Endpoint", "BROKER_NAME"]

log = logging.getLogger("storelib.serve")

#: The broker name routes give (one broker: the store).
BROKER_NAME = "storelib"
#: Threads answering calls: a long-polling receive and a Telemetry stream each hold one while open.
WORKERS = 256
#: How often due delayed messages are moved to their topics (RocketMQ's timer ticks once a second).
DELIVER_EVERY_S = 1.0


def _die_with_parent() -> None:
    """In a child about to run: have Linux stop it when its parent dies (a killed endpoint leaves no follower)."""
    if sys.platform.startswith("linux"):
        import ctypes  # noqa: PLC0415  (Linux only, in the child)

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Endpoint:
    """A RocketMQ 5 gRPC endpoint over ``store``, listening on ``host:port`` (0: a free port, see
    :attr:`address`). ``follow``: dispatch new messages on a thread here (``"thread"`` or True), in a
    ``storelib dispatch --follow`` process of the endpoint's (``"process"``: the two use two cores rather
    than share one interpreter's lock), or not at all (False: a second endpoint over the store may leave it
    to the first); ``advertise``: the host clients are told to reach (default ``host``);
    ``min_polling_ms``: the shortest hold of a receive that finds nothing (the proxy's
    ``grpcClientConsumerMinLongPollingTimeoutMillis``, 5 s).

    >>> endpoint = Endpoint(store, port=0, follow=False).start()
    >>> endpoint.request_stop(); endpoint.wait(); endpoint.stop()
    """

    def __init__(
        self,
        store: "MessageStore",
        *,
        host: str = "127.0.0.1",
        port: int = 8081,
        follow: bool | str = True,
        advertise: str | None = None,
        min_polling_ms: int = MIN_POLLING_MS,
    ):
        self.store = store
        self.host = host
        self._port = port
        self.follow = follow
        self.advertise = advertise or host
        self.min_polling_ms = min_polling_ms
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._server: grpc.Server | None = None
        self.service: MessagingService | None = None
        self.port = 0

    @property
    def address(self) -> str:
        return f"{self.advertise}:{self.port}"

    def start(self) -> "Endpoint":
        server = grpc.server(
            ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="storelib-grpc"),
            options=[("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)],
        )
        self.port = server.add_insecure_port(f"{self.host}:{self._port}")
        if self.port == 0:
            raise StoreError("port", f"cannot listen on {self.host}:{self._port}", value=self._port)
        broker = pb.Broker(name=BROKER_NAME, id=0, endpoints=endpoints(self.advertise, self.port))
        service = self.service = MessagingService(self.store.context, broker, self.min_polling_ms)
        add_MessagingServiceServicer_to_server(service, server)
        server.start()
        self._server = server
        ctx = self.store.context
        if self.follow == "process":
            self._thread("follow", self._follower_process)
        elif self.follow:
            self._thread("follow", lambda: self.store.dispatcher().run(follow=True, stop=self._stop))
        self._every("deliver", DELIVER_EVERY_S, lambda: may_hold_scheduled(ctx) and deliver(ctx))
        interval = ctx.config.transaction_check_interval_ms / 1000
        self._every("check", interval, lambda: check_transactions(ctx, ask=service.producing.ask_producers))
        return self

    def stop(self, grace_s: float = 2.0) -> None:
        """Stop taking calls, let those under way end (``grace_s``), then stop the threads beside them."""
        self._stop.set()
        if self.service is not None:
            self.service.stopping.set()
        if self._server is not None:
            self._server.stop(grace_s).wait()
        for t in self._threads:
            t.join(timeout=30)
        if self.service is not None:
            self.service.close()

    def request_stop(self) -> None:
        """Ask :meth:`wait` to return (safe from a signal handler); :meth:`stop` then stops."""
        set_from_signal_handler(self._stop)

    def wait(self) -> None:
        """Block until :meth:`stop` (from another thread or a signal handler)."""
        self._stop.wait()

    def __enter__(self) -> "Endpoint":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _thread(self, name: str, run: Callable[[], object]) -> None:
        def body() -> None:
            try:
                run()
            except Exception as e:  # noqa: BLE001  (said, and the endpoint keeps serving)
                log.error("endpoint %s stopped: %s", name, e, exc_info=not isinstance(e, StoreError))

        t = threading.Thread(target=body, name=f"storelib-serve-{name}", daemon=True)
        t.start()
        self._threads.append(t)

    def _follower_process(self) -> None:
        """Keep a ``storelib dispatch --follow`` process running until the endpoint stops (started again,
        said on the log, if it ever exits)."""
        argv = [sys.executable, "-m", "storelib", "dispatch", "--follow", "--store", self.store.root]
        for key, value in (location.options_for(self.store.root) or {}).items():
            argv += ["--storage-option", f"{key}={value}"]
        while not self._stop.is_set():
            with tempfile.TemporaryFile() as err:  # its progress lines, read only if it fails
                proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, preexec_fn=_die_with_parent
                )
                while proc.poll() is None and not self._stop.wait(0.2):
                    pass
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                    return
                err.seek(0)
                said = (err.read().decode(errors="replace").strip().splitlines() or [""])[-1]
            log.error("the follower process exited with %s (%s); starting it again", proc.returncode, said[:300])
            self._stop.wait(1.0)

    def _every(self, name: str, seconds: float, run: Callable[[], object]) -> None:
        def loop() -> None:
            while not self._stop.wait(seconds):
                try:
                    run()
                except Exception as e:  # noqa: BLE001  (the next turn tries again)
                    log.warning("endpoint %s: %s", name, e, exc_info=not isinstance(e, StoreError))

        self._thread(name, loop)
