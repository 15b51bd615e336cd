"""The one wire of the machine-local servers (:mod:`storelib.local.relay`, :mod:`storelib.local.tail`).

A frame is a 4-byte big-endian length, a kind byte, a 16-byte request id, and a body. A client sends
:data:`REQUEST` frames; the server answers each, in any order, with :data:`ANSWER`, :data:`FAILED` (a
typed error as a record) or :data:`DECLINED` ("not served here: do it yourself"). A body is a JSON head
and Arrow rows (IPC stream), either empty (:func:`pack`, :func:`unpack`). :class:`Server` runs the
listening socket (one thread per connection, other users declined, a clean close) and :class:`Client`
the connection to it (request ids, a future per request, the requests left unanswered when it ends).

>>> import socket
>>> a, b = socket.socketpair()
>>> send_frame(a, REQUEST, "ab" * 16, *pack({"n": 1}, pa.table({"x": [1, 2]})))
>>> kind, request_id, body = receive_frame(b)
>>> kind == REQUEST, request_id == "ab" * 16, unpack(body)[0], unpack(body)[1].column("x").to_pylist()
(True, True, {'n': 1}, [1, 2])
>>> a.close(); receive_frame(b) is None                 # the other side closed
True
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import json
import logging
import os
import socket
import struct
import sys
import threading
import uuid
from concurrent.futures import Future
from typing import Callable

import pyarrow as pa

from storelib.model.errors import StoreError, StoreStateError, error_from_record

__all__ = [
    "PROTOCOL",
    "REQUEST",
    "ANSWER",
    "FAILED",
    "DECLINED",
    "local_address",
    "same_user",
    "send_frame",
    "receive_frame",
    "pack",
    "unpack",
    "error_body",
    "error_of",
    "Request",
    "Server",
    "Client",
]

log = logging.getLogger(__name__)

#: The wire's version, part of every socket's name: processes of another storelib never meet.
PROTOCOL = "v2"
#: Frame kinds: a request; its answers.
REQUEST, ANSWER, FAILED, DECLINED = b"Q", b"A", b"E", b"N"
_HEAD = struct.Struct(">I")
_ID_BYTES = 16
#: Bytes a body's JSON head may take at most (a longer one is not a head: the body is not ours).
_MAX_HEAD = 1 << 20


def _on_object_store(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def _table_digest(path: str) -> str:
    """What names one table on this machine, hashed: a local folder's real path, however it is spelled, or an
    object store's URI as given (the processes of one machine reach one bucket under one URI)."""
    key = path.rstrip("/") if _on_object_store(path) else os.path.realpath(path.removeprefix("file://"))
    return hashlib.sha1(key.encode()).hexdigest()[:24]


def local_address(role: str, path: str) -> str | None:
    """The name of a store's local socket for ``role``, in Linux's abstract namespace: one per table
    (``path``, a folder however it is spelled, or an object store's URI) and wire version; None off Linux.
    On an object store it names the table on this machine only: processes of other machines have their own.

    >>> local_address("commit", "/data/store/commitlog").startswith("\\0storelib-commit-v2-")
    True
    >>> local_address("commit", "s3://bucket/store/commitlog") == local_address("commit", "s3://bucket/store/commitlog/")
    True
    """
    if not sys.platform.startswith("linux"):
        return None
    return f"\0storelib-{role}-{PROTOCOL}-{_table_digest(path)}"


def local_lock_path(name: str, path: str) -> str:
    """The file whose ``flock`` is the machine-wide lock ``name`` of a table: a hidden file in a local
    table's folder, or one in this machine's temporary folder for an object store's table.

    >>> local_lock_path("_storelib_leader.lock", "/data/store/commitlog")
    '/data/store/commitlog/_storelib_leader.lock'
    >>> local_lock_path("_storelib_leader.lock", "s3://bucket/store/commitlog").endswith("_storelib_leader.lock")
    True
    """
    if _on_object_store(path):
        import tempfile

        return os.path.join(tempfile.gettempdir(), f"storelib-{_table_digest(path)}{name}")
    return os.path.join(path.removeprefix("file://"), name)


def same_user(sock: socket.socket) -> bool:
    """Is the process at the other end of a Unix socket this process's user (an abstract socket has no
    file permissions, so its server asks)?

    >>> a, b = socket.socketpair()
    >>> same_user(a)
    True
    """
    _, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid == os.getuid()


def send_frame(sock: socket.socket, kind: bytes, request_id: str, *body: bytes | pa.Buffer) -> None:
    """Write one frame whose body is the ``body`` parts one after the other (gathered by the kernel, not
    copied into one; see the module docstring for an example)."""
    views = [memoryview(p).cast("B") for p in (kind, bytes.fromhex(request_id), *body) if len(p)]
    views.insert(0, memoryview(_HEAD.pack(sum(len(v) for v in views))))
    while views:  # a stream socket may take part of it: send the rest
        sent = sock.sendmsg(views)
        while views and sent >= len(views[0]):
            sent -= len(views.pop(0))
        if views:
            views[0] = views[0][sent:]


def receive_frame(sock: socket.socket) -> tuple[bytes, str, memoryview] | None:
    """The next frame as (kind, request id, body); None when the other side closed (see the module
    docstring). A whole frame too short to hold a kind and a request id raises :class:`StoreStateError`;
    the frames after it can still be read.

    >>> a, b = socket.socketpair()
    >>> a.sendall(_HEAD.pack(3) + b"abc")
    >>> receive_frame(b)
    Traceback (most recent call last):
    ...
    storelib.model.errors.StoreStateError: wire: a frame of 3 bytes is too short for a kind and a request id
    """
    head = _exactly(sock, _HEAD.size)
    if head is None:
        return None
    payload = _exactly(sock, _HEAD.unpack(head)[0])
    if payload is None:
        return None
    if len(payload) < 1 + _ID_BYTES:
        raise StoreStateError("wire", f"a frame of {len(payload)} bytes is too short for a kind and a request id")
    return bytes(payload[:1]), payload[1 : 1 + _ID_BYTES].hex(), payload[1 + _ID_BYTES :]


def _exactly(sock: socket.socket, n: int) -> memoryview | None:
    """``n`` bytes read straight into one buffer (the body is not copied again); None at the end."""
    buffer = memoryview(bytearray(n))
    got = 0
    while got < n:
        chunk = sock.recv_into(buffer[got:], min(n - got, 1 << 20))
        if not chunk:
            return None
        got += chunk
    return buffer


def pack(head: dict | None = None, rows: pa.Table | None = None) -> tuple[bytes | pa.Buffer, ...]:
    """A body's parts: the JSON ``head`` (its length first) and ``rows`` in Arrow's IPC stream format
    (:func:`unpack` reads them back; :func:`send_frame` sends the parts without joining them).

    >>> unpack(b"".join(bytes(p) for p in pack({"a": 1})))
    ({'a': 1}, None)
    >>> unpack(b"".join(bytes(p) for p in pack(rows=pa.table({"x": [7]}))))[1].column("x").to_pylist()
    [7]
    """
    encoded = json.dumps(head, default=str).encode() if head is not None else b""
    if rows is None:
        return (_HEAD.pack(len(encoded)), encoded)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_table(rows)
    return (_HEAD.pack(len(encoded)), encoded, sink.getvalue())


def unpack(body: bytes | memoryview) -> tuple[dict | None, pa.Table | None]:
    """The (head, rows) :func:`pack` made, each None where it had none; a body that is not one raises
    :class:`StoreStateError`.

    >>> unpack(b"not a body")
    Traceback (most recent call last):
    ...
    storelib.model.errors.StoreStateError: wire: a body of 10 bytes that cannot be read: its head's length is 1852797984
    """
    view = memoryview(body).cast("B")
    n = _HEAD.unpack_from(view)[0] if len(view) >= _HEAD.size else -1
    if not 0 <= n <= min(len(view) - _HEAD.size, _MAX_HEAD):
        raise StoreStateError("wire", f"a body of {len(view)} bytes that cannot be read: its head's length is {n}")
    try:
        head = json.loads(bytes(view[_HEAD.size : _HEAD.size + n])) if n else None
        rest = view[_HEAD.size + n :]
        rows = pa.ipc.open_stream(pa.py_buffer(rest)).read_all() if len(rest) else None
    except (ValueError, pa.ArrowException) as e:  # ValueError: JSON's
        raise StoreStateError("wire", f"a body that cannot be read: {e}") from e
    return head, rows


def error_body(error: BaseException) -> tuple[bytes | pa.Buffer, ...]:
    """A :data:`FAILED` answer's body: ``error`` as a record (a typed one as itself, another as a
    :class:`StoreError` naming it); :func:`error_of` reads it back.

    >>> type(error_of(b"".join(bytes(p) for p in error_body(StoreStateError("commitlog", "full"))))).__name__
    'StoreStateError'
    >>> error_of(b"".join(bytes(p) for p in error_body(ValueError("bad")))).reason
    'ValueError: bad'
    """
    if isinstance(error, StoreError):
        return pack(error.to_record())
    return pack({"error": "StoreError", "field": None, "reason": f"{type(error).__name__}: {error}"})


def error_of(body: bytes | memoryview) -> StoreError:
    """The error an :func:`error_body` holds; a body that holds none raises :class:`StoreStateError`.

    >>> error_of(b"not JSON")
    Traceback (most recent call last):
    ...
    storelib.model.errors.StoreStateError: wire: a body of 8 bytes that cannot be read: its head's length is 1852797984
    """
    head, _ = unpack(body)
    if head is None:
        raise StoreStateError("wire", "a body that holds no error record: no head")
    try:
        return error_from_record(head)
    except (ValueError, AttributeError, TypeError, KeyError) as e:  # not a record of an error
        raise StoreStateError("wire", f"a body that holds no error record: {e}") from e


class Request:
    """One request a :class:`Server` took: its id and body; :meth:`answer` it once, now or later, from
    any thread (see :class:`Server`'s example), or :meth:`decline` it.

    >>> server = Server.bind(local_address("no", f"/tmp/no-{os.getpid()}"), "storelib-no")
    >>> server.serve(lambda request: request.decline())
    >>> Client.connect(server.address, "storelib-no").request(*pack({"n": 1})).result(timeout=10)[0] == DECLINED
    True
    >>> server.close()
    """

    __slots__ = ("request_id", "body", "_server", "_connection", "_answered")

    def __init__(self, server: "Server", connection: "_Connection", request_id: str, body: memoryview):
        self.request_id, self.body = request_id, body
        self._server, self._connection, self._answered = server, connection, False

    def answer(self, kind: bytes, *body: bytes | pa.Buffer) -> None:
        """Send this request's answer (its client may be gone: then nothing is sent); only the first counts."""
        with self._server._guard:
            if self._answered:
                return
            self._answered = True
        try:
            with contextlib.suppress(OSError), self._connection.writing:  # OSError: the client is gone
                send_frame(self._connection.sock, kind, self.request_id, *body)
        finally:
            with self._server._guard:
                self._server._answering -= 1
                self._connection.unanswered -= 1
                self._server._guard.notify_all()

    def decline(self) -> None:
        """Answer :data:`DECLINED`: the client does the work itself."""
        self.answer(DECLINED)


class _Connection:
    __slots__ = ("sock", "writing", "unanswered")

    def __init__(self, sock: socket.socket):
        self.sock, self.writing, self.unanswered = sock, threading.Lock(), 0


class Server:
    """A machine-local server on an abstract socket: :meth:`bind` takes the name (None when another
    process holds it), :meth:`serve` starts answering. One thread per connection reads its requests in
    order and hands each to ``handle(request)``, which answers it (:meth:`Request.answer`) at once or later
    from any thread; a request that ``handle`` fails on is declined. Requests of another user's processes
    (an abstract socket has no file permissions), and those arriving once the server is closing, are
    declined without being handed on.

    >>> server = Server.bind(local_address("echo", f"/tmp/echo-{os.getpid()}"), "storelib-echo")
    >>> server.serve(lambda request: request.answer(ANSWER, *pack({"got": unpack(request.body)[0]})))
    >>> client = Client.connect(server.address, "storelib-echo")
    >>> kind, body = client.request(*pack({"n": 1})).result(timeout=10)
    >>> kind == ANSWER, unpack(body)[0]
    (True, {'got': {'n': 1}})
    >>> one = Client.connect(server.address, "storelib-echo", reading=False)
    >>> unpack(one.call(*pack({"n": 2}), timeout=10)[1])[0]      # answered in this thread
    {'got': {'n': 2}}
    >>> server.close(); client.finished.wait(10)          # the client's connection ends with the server
    True
    """

    def __init__(self, address: str, listener: socket.socket, name: str):
        self.address, self.name, self._listener = address, name, listener
        self._handle: Callable[[Request], None] = Request.decline  # until it serves
        self._guard = threading.Condition()
        self._connections: set[socket.socket] = set()
        self._answering = 0  # requests taken and not yet answered
        #: Whether the server is closing: from then on it declines every request.
        self.closing = False

    @classmethod
    def bind(cls, address: str, name: str) -> "Server | None":
        """Take ``address`` and listen on it; None when another process holds it (see :class:`Server`)."""
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(address)
            listener.listen(64)
        except OSError as e:
            listener.close()
            log.info("%s: not serving, another process holds the address (%s)", name, e)
            return None
        return cls(address, listener, name)

    def serve(self, handle: Callable[[Request], None]) -> None:
        """Start taking connections, each request handed to ``handle`` (see :class:`Server`)."""
        self._handle = handle
        threading.Thread(target=self._accept, name=f"{self.name}-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._guard:
                if self.closing:
                    sock.close()
                    return
                self._connections.add(sock)
            threading.Thread(target=self._read, args=(sock,), name=f"{self.name}-client", daemon=True).start()

    def _read(self, sock: socket.socket) -> None:
        trusted = same_user(sock)
        connection = _Connection(sock)
        try:
            while (frame := receive_frame(sock)) is not None and frame[0] == REQUEST:
                with self._guard:
                    self._answering += 1
                    connection.unanswered += 1
                    closing = self.closing
                request = Request(self, connection, frame[1], frame[2])
                if not trusted or closing:
                    request.decline()
                    continue
                try:
                    self._handle(request)
                except Exception as e:  # noqa: BLE001  (its client does the work itself; the server goes on)
                    log.warning("%s: request %s could not be answered: %s", self.name, request.request_id, e)
                    request.decline()
        except (OSError, StoreStateError):  # gone, or not speaking the wire: its requests taken are still answered
            return
        finally:
            with self._guard:
                self._connections.discard(sock)
                self._guard.wait_for(lambda: not connection.unanswered)
            sock.close()

    def stop(self) -> None:
        """Take no more connections (the name is free at once) and decline every request from now on."""
        with self._guard:
            self.closing = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        self._listener.close()

    def close(self, wait_s: float = 0.0) -> None:
        """:meth:`stop`, wait up to ``wait_s`` for every request taken to be answered, and end every
        connection (their clients find no server next time)."""
        self.stop()
        with self._guard:
            self._guard.wait_for(lambda: not self._answering, timeout=wait_s)
            connections = list(self._connections)
        for sock in connections:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def forget(self) -> None:
        """In a forked child: close its copy of the listening socket, leaving the parent's serving."""
        self._listener.close()


class Client:
    """One connection to a :class:`Server`, used one of two ways. :meth:`request` sends a request under a
    fresh id and returns a future of its answer, (kind, body), so several are under way at once; a thread
    reads the answers, in whatever order they come. When the connection ends, or once :meth:`stop` was
    called and every request under way is answered, the futures of the requests left unanswered get None
    (in the order sent), ``ended()`` runs, and ``finished`` is set. Or, made with ``reading=False``,
    :meth:`call` sends one request and reads its answer in the calling thread (no hand-over between
    threads: a round trip costs half as much). Either way, an answer naming no request under way here (or
    a frame too short to name one) is skipped, with a warning.

    >>> Client.connect(local_address("echo", f"/tmp/nobody-{os.getpid()}"), "storelib-echo") is None  # nobody serves
    True
    """

    def __init__(self, sock: socket.socket, name: str, ended: Callable[[], None] | None = None, reading: bool = True):
        self.sock, self.name, self._ended = sock, name, ended
        self._lock = threading.Lock()
        self._pending: "collections.OrderedDict[str, Future]" = collections.OrderedDict()
        self._open = True
        self.finished = threading.Event()
        if reading:
            threading.Thread(target=self._read, name=f"{name}-answers", daemon=True).start()

    @classmethod
    def connect(
        cls,
        address: str | None,
        name: str,
        ended: Callable[[], None] | None = None,
        reading: bool = True,
        timeout: float | None = None,
    ) -> "Client | None":
        """A connection to the server at ``address``; None when nobody serves there, or (within ``timeout``
        seconds) nobody takes the connection (see :class:`Client`)."""
        if address is None:
            return None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)  # a server too busy to accept leaves a connection waiting
        try:
            sock.connect(address)
        except OSError:
            sock.close()
            return None
        sock.settimeout(None)
        return cls(sock, name, ended, reading)

    def call(self, *body: bytes | pa.Buffer, timeout: float) -> tuple[bytes, memoryview] | None:
        """Send a request (``body``'s parts) and read its answer here, (kind, body), within ``timeout``
        seconds; None, and the connection closed, when none came (a client made with ``reading=False``)."""
        request_id = uuid.uuid4().hex
        try:
            self.sock.settimeout(timeout)
            send_frame(self.sock, REQUEST, request_id, *body)
            while (frame := receive_frame(self.sock)) is not None:
                if frame[1] == request_id:
                    return frame[0], frame[2]
                log.warning(
                    "%s: the server answered request %s, which this process has not under way; skipped",
                    self.name,
                    frame[1],
                )
        except (OSError, StoreStateError) as e:  # gone, too slow, or not speaking the wire
            log.debug("%s: no answer (%s)", self.name, e)
        self.sock.close()
        return None

    def request(
        self, *body: bytes | pa.Buffer, request_id: str | None = None
    ) -> "Future[tuple[bytes, memoryview] | None] | None":
        """Send a request (``body``'s parts, under ``request_id`` or a fresh one); a future of its answer as
        (kind, body), None when it went unanswered; None rather than a future when this client takes no
        more requests (stopped, or the server is gone)."""
        request_id = request_id or uuid.uuid4().hex
        future: Future = Future()
        with self._lock:
            if not self._open:
                return None
            self._pending[request_id] = future
            try:
                send_frame(self.sock, REQUEST, request_id, *body)
            except OSError:  # the server is gone: this request is not sent, the others the reader settles
                del self._pending[request_id]
                self._open = False
                with contextlib.suppress(OSError):
                    self.sock.shutdown(socket.SHUT_RDWR)
                return None
        return future

    def stop(self) -> None:
        """Take no more requests; the connection ends once every request under way is answered."""
        with self._lock:
            self._open = False
            if not self._pending:
                with contextlib.suppress(OSError):
                    self.sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        """End the connection now (the requests under way get None)."""
        with self._lock:
            self._open = False
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def _read(self) -> None:
        try:
            while True:
                with self._lock:
                    if not self._open and not self._pending:
                        break  # every request under way is answered
                try:
                    frame = receive_frame(self.sock)
                except OSError:
                    frame = None
                except StoreStateError as e:  # a frame naming no request: skipped, as a stray answer is
                    log.warning("%s: %s; skipped", self.name, e)
                    continue
                if frame is None:
                    break
                kind, request_id, body = frame
                with self._lock:
                    future = self._pending.pop(request_id, None)
                if future is None:  # skipped, not taken as the server's end: alive, it may still serve ours
                    log.warning(
                        "%s: the server answered request %s, which this process has not under way; skipped",
                        self.name,
                        request_id,
                    )
                    continue
                future.set_result((kind, body))
        finally:
            with self._lock:
                self._open = False
                rest = list(self._pending.values())
                self._pending.clear()
            self.sock.close()
            for future in rest:  # in the order sent
                future.set_result(None)
            try:
                if self._ended is not None:
                    self._ended()
            finally:
                self.finished.set()
