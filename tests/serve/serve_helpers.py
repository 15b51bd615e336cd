"""Helpers for the tests of ``storelib serve``: stores made without Spark, the endpoint as a real subprocess, and
the official RocketMQ 5 Python client pointed at it.

A server is ``python -m storelib serve`` on a free port; it is ready when it prints its one line, and
stopping it with SIGTERM must end it with exit code 0. Tests of one module share a server where they
do not interfere (each uses its own topics and groups).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READY = "serving RocketMQ 5 gRPC on "
READY_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_store(path: str, topics: dict[str, int] = {}, groups: dict[str, dict] = {}) -> str:  # noqa: B006
    """A store at ``path`` with ``topics`` ({name: queues}) and ``groups`` ({name: settings}), closed again."""
    from storelib import MessageStore

    s = MessageStore.create(path)
    try:
        for name, queues in topics.items():
            s.create_topic(name, queues=queues)
        for name, settings in groups.items():
            s.create_group(name, **settings)
    finally:
        s.close()
    return path


def server_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["STORELIB_SPARK_LOG_LEVEL"] = "ERROR"
    return env


class Server:
    """One ``storelib serve`` subprocess; ``address`` is ``host:port`` once :meth:`start` returned."""

    def __init__(self, path: str, *args: str, port: int | None = None, log_dir: Path | None = None):
        self.path = path
        self.args = list(args)
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log_dir = log_dir
        self.proc: subprocess.Popen | None = None
        self.lines: list[str] = []
        self.stderr_path: Path | None = None

    def start(self) -> "Server":
        cmd = [sys.executable, "-m", "storelib", "serve", "--store", self.path, "--port", str(self.port)]
        cmd += ["--min-long-polling-ms", "1000", *self.args]  # a receive that finds nothing answers in 1 s, not 5
        stderr = subprocess.DEVNULL
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            self.stderr_path = self.log_dir / f"serve-{self.port}-{int(time.time() * 1000)}.err"
            stderr = open(self.stderr_path, "wb")  # noqa: SIM115  (the child holds it)
        self.proc = subprocess.Popen(
            cmd, cwd=str(ROOT), env=server_env(), stdout=subprocess.PIPE, stderr=stderr, text=True, bufsize=1
        )
        if stderr is not subprocess.DEVNULL:
            stderr.close()
        ready = threading.Event()

        def read() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.lines.append(line)
                if line.startswith(READY):
                    ready.set()
            ready.set()  # ended: say so rather than wait out the timeout

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(READY_TIMEOUT_S) or not any(x.startswith(READY) for x in self.lines):
            self.kill()
            raise AssertionError(f"server not ready: {self.lines!r}; stderr: {self.stderr()}")
        line = next(x for x in self.lines if x.startswith(READY))
        assert f"127.0.0.1:{self.port} over " in line, line
        return self

    def stderr(self) -> str:
        if self.stderr_path is None or not self.stderr_path.exists():
            return ""
        return self.stderr_path.read_text(errors="replace")[-4000:]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> int:
        """SIGTERM, wait (kill after 30 s); the exit code (-9 when it had to be killed)."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return -9
        return self.proc.returncode

    def kill(self) -> None:
        """kill -9, as a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def stop_cleanly(server: Server) -> None:
    rc = server.stop()
    assert rc == 0, f"exit {rc}; stderr: {server.stderr()}"


# ---- clients ------------------------------------------------------------------------------------
def config(address: str):
    from rocketmq import ClientConfiguration, Credentials

    return ClientConfiguration(address, Credentials())


@contextlib.contextmanager
def producer(address: str, *topics: str, checker=None):
    from rocketmq import Producer

    p = Producer(config(address), topics, checker=checker) if checker else Producer(config(address), topics)
    p.startup()
    try:
        yield p
    finally:
        p.shutdown()


@contextlib.contextmanager
def simple_consumer(address: str, group: str, subscription: dict, await_duration: int = 1):
    from rocketmq import FilterExpression, SimpleConsumer

    subs = {t: (e if isinstance(e, FilterExpression) else FilterExpression(e)) for t, e in subscription.items()}
    c = SimpleConsumer(config(address), group, subs, await_duration=await_duration)
    c.startup()
    try:
        yield c
    finally:
        c.shutdown()


def message(topic: str, body: bytes, *, tag=None, keys=(), props=None, group=None, deliver_at=None):
    from rocketmq import Message

    m = Message()
    m.topic = topic
    m.body = body
    if tag:
        m.tag = tag
    for k in keys:
        m.keys = k
    for k, v in (props or {}).items():
        m.add_property(k, v)
    if group:
        m.message_group = group
    if deliver_at is not None:
        m.delivery_timestamp = deliver_at
    return m


def receive_until(consumer, want: int, *, invisible: int = 15, timeout: float = 30, batch: int = 32) -> list:
    """Receive until ``want`` messages came (or ``timeout``); each receive may hold up to its long poll."""
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got.extend(consumer.receive(batch, invisible))
    return got


def raw_stub(address: str):
    """A raw gRPC stub (no client-side checks) and its channel."""
    import grpc
    from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub

    channel = grpc.insecure_channel(address)
    return MessagingServiceStub(channel), channel


def meta(client_id: str | None = "raw-test@1@0@x") -> list[tuple[str, str]]:
    return [("x-mq-client-id", client_id)] if client_id else []


def wait_for(predicate, timeout: float = 30, every: float = 0.3):
    """``predicate()``'s first truthy value within ``timeout`` (None if none)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = predicate()
        except Exception:  # noqa: BLE001  (not there yet)
            value = None
        if value or time.monotonic() > deadline:
            return value
        time.sleep(every)


def live_claims(path: str, group: str, topic: str) -> list:
    """The group's receipts of ``topic`` not yet acked, read from the store (commits nothing)."""
    from storelib import MessageStore
    from storelib.consume.pop import PopService

    s = MessageStore.open(path)
    try:
        return PopService(s.context).live(group, topic)
    finally:
        s.close()


def dead_letters(path: str, group: str, timeout: float = 30) -> list:
    """The messages in ``%DLQ%<group>`` of the store at ``path``, once there are any (waits up to ``timeout``)."""
    from storelib import MessageStore

    def found():
        s = MessageStore.open(path)
        try:
            return s.get_message(group, "%DLQ%" + group, 0, 0).messages
        finally:
            s.close()

    return wait_for(found, timeout=timeout)


def send_and_receive(send_to: str, receive_from: str, topic: str, group: str, body: bytes):
    """Send one message through one endpoint and receive (and ack) it through another: the send's
    receipt and what was received."""
    with producer(send_to, topic) as p:
        receipt = p.send(message(topic, body))
    with simple_consumer(receive_from, group, {topic: "*"}) as c:
        got = receive_until(c, 1)
        for m in got:
            c.ack(m)
    return receipt, got
