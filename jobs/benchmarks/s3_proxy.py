"""A counting, delaying, fault-injecting HTTP/1.1 reverse proxy to put in front of a local S3 server.

Benchmarks and tests point their S3 clients (delta-rs, pyarrow, boto3) at :attr:`S3Proxy.endpoint` instead
of the server's (``moto_server``). Every byte of every connection is relayed unchanged, so signatures (which
cover the Host header) still verify; the request heads passing through are parsed on the way to count the
requests by kind (``GET``, ``PUT``, ``HEAD``, ``POST``, ``DELETE``, ``LIST``), to add a fixed latency to each
one, and, for tests, to cut a client's connection before its request reaches the server or before the
server's answer reaches the client. Standard library only; it does not import ``storelib``::

    python jobs/benchmarks/s3_proxy.py --upstream 127.0.0.1:5000 --port 5001 --latency-ms 20
"""

from __future__ import annotations

import argparse
import contextlib
import re
import selectors
import signal
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from types import FrameType, TracebackType
from typing import NamedTuple
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = [
    "KINDS",
    "CountWindow",
    "Request",
    "RequestHead",
    "RequestParser",
    "S3Proxy",
    "Segment",
    "classify",
    "main",
    "parse_head",
]

#: The kinds :meth:`S3Proxy.counts` always reports, zero or not.
KINDS = ("GET", "PUT", "HEAD", "POST", "DELETE", "LIST")

_LIST_MARKS = frozenset({"list-type", "prefix", "delimiter"})
_LIST_PARAMS = _LIST_MARKS | {"encoding-type", "marker", "max-keys", "continuation-token", "start-after", "fetch-owner"}
_MAX_LINE = 64 * 1024  # a request head or chunk-size line longer than this is not HTTP: relay the rest raw
_RECV = 256 * 1024


def classify(method: str, target: str) -> str:
    """The kind a request counts as: ``LIST`` for a listing of a bucket, otherwise its method.

    A listing is a ``GET`` of a bucket (path-style: at most one path segment) whose query has ``list-type``,
    ``prefix`` or ``delimiter``, or has nothing but listing parameters (an unfiltered ListObjects v1).

    >>> classify("GET", "/b?list-type=2&prefix=a%2F"), classify("GET", "/b/a/c"), classify("GET", "/b?location")
    ('LIST', 'GET', 'GET')
    >>> classify("GET", "/b?encoding-type=url"), classify("get", "/b/k"), classify("PUT", "/b")
    ('LIST', 'GET', 'PUT')
    """
    method = method.upper()
    if method != "GET":
        return method
    if target.startswith("/"):
        path, _, query = target.partition("?")
    else:  # absolute-form, as a client configured for a forward proxy sends it
        parts = urlsplit(target)
        path, query = parts.path, parts.query
    segments = [s for s in path.split("/") if s]
    if len(segments) > 1:
        return "GET"
    params = {name for name, _ in parse_qsl(query, keep_blank_values=True)}
    if params & _LIST_MARKS or (segments and params <= _LIST_PARAMS):
        return "LIST"
    return "GET"


@dataclass(frozen=True)
class RequestHead:
    """What the proxy needs of one request's head: what it is, and how long its body is."""

    method: str
    target: str
    kind: str
    body_length: int
    chunked: bool


def parse_head(head: bytes) -> RequestHead | None:
    """The request whose head (request line and headers, up to the blank line) this is; ``None`` if not HTTP.

    >>> parse_head(b"PUT /b/k HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 5\\r\\n\\r\\n")
    RequestHead(method='PUT', target='/b/k', kind='PUT', body_length=5, chunked=False)
    """
    lines = head.decode("latin-1").split("\r\n")
    words = lines[0].split(" ")
    if len(words) != 3 or not words[2].startswith("HTTP/"):
        return None
    method, target = words[0].upper(), words[1]
    length, chunked = 0, False
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        name = name.strip().lower()
        if not colon:
            continue
        if name == "content-length":
            if not re.fullmatch(r"[0-9]+", value.strip()):
                return None
            length = int(value)
        elif name == "transfer-encoding":
            chunked = value.split(",")[-1].strip().lower() == "chunked"
    return RequestHead(method, target, classify(method, target), 0 if chunked else length, chunked)


class Segment(NamedTuple):
    """A piece of the client's byte stream: a request's ``head``, part of its ``body``, or ``raw`` bytes.

    ``final`` is true when the piece ends its request; the pieces' ``data``, in order, are the stream.
    """

    kind: str
    data: bytes
    request: RequestHead | None
    final: bool


_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _TRAILER, _RAW = "head", "length", "size", "data", "trailer", "raw"


class RequestParser:
    """Splits a client's byte stream into request heads and bodies, incrementally (keep-alive, pipelining).

    A body is delimited by ``Content-Length`` or by chunked transfer coding (``aws-chunked`` bodies carry
    a ``Content-Length``); a request with neither has none. Bytes that do not parse as HTTP/1.1 make the
    rest of the stream ``raw``.

    >>> p = RequestParser()
    >>> [s.kind for s in p.feed(b"PUT /b/k HTTP/1.1\\r\\nContent-Length: 3\\r\\n\\r\\nab")]
    ['head', 'body']
    >>> [(s.kind, s.data, s.final) for s in p.feed(b"cGET /b HTTP/1.1\\r\\n")]
    [('body', b'c', True)]
    """

    def __init__(self) -> None:
        self._state = _HEAD
        self._rest = b""  # unconsumed bytes of an incomplete head or line
        self._left = 0  # bytes left of the body or of the chunk (with its CRLF)
        self._request: RequestHead | None = None

    def feed(self, data: bytes) -> list[Segment]:
        """The segments ``data`` completes, in stream order; what is incomplete waits for the next feed."""
        buf, self._rest = self._rest + data, b""
        out: list[Segment] = []
        pos = 0
        while pos < len(buf):
            step = {
                _HEAD: self._head,
                _LENGTH: self._body,
                _CHUNK_DATA: self._body,
                _CHUNK_SIZE: self._line,
                _TRAILER: self._line,
                _RAW: self._raw,
            }[self._state]
            end = step(buf, pos, out)
            if end is None:
                self._rest = buf[pos:]
                break
            pos = end
        return _merged(out)

    def _head(self, buf: bytes, pos: int, out: list[Segment]) -> int | None:
        if buf.startswith(b"\r\n", pos):  # blank lines between requests are allowed
            out.append(Segment(_RAW, b"\r\n", None, False))
            return pos + 2
        end = buf.find(b"\r\n\r\n", pos)
        if end < 0:
            return self._too_long(buf, pos)
        head = buf[pos : end + 4]
        request = parse_head(head)
        if request is None:
            self._state = _RAW
            return pos
        self._request = request
        if request.chunked:
            self._state = _CHUNK_SIZE
        elif request.body_length:
            self._state, self._left = _LENGTH, request.body_length
        out.append(Segment("head", head, request, self._state == _HEAD))
        return end + 4

    def _body(self, buf: bytes, pos: int, out: list[Segment]) -> int:
        take = min(self._left, len(buf) - pos)
        self._left -= take
        final = self._state == _LENGTH and not self._left
        out.append(Segment("body", buf[pos : pos + take], self._request, final))
        if not self._left:
            self._state = _HEAD if self._state == _LENGTH else _CHUNK_SIZE
        return pos + take

    def _line(self, buf: bytes, pos: int, out: list[Segment]) -> int | None:
        end = buf.find(b"\r\n", pos)
        if end < 0:
            return self._too_long(buf, pos)
        line = buf[pos : end + 2]
        final = False
        if self._state == _TRAILER:
            final = line == b"\r\n"
            self._state = _HEAD if final else _TRAILER
        else:
            try:
                size = int(line.split(b";")[0].strip(), 16)
            except ValueError:
                self._state = _RAW
                return pos
            self._state, self._left = (_CHUNK_DATA, size + 2) if size else (_TRAILER, 0)
        out.append(Segment("body", line, self._request, final))
        return end + 2

    def _raw(self, buf: bytes, pos: int, out: list[Segment]) -> int:
        out.append(Segment(_RAW, buf[pos:], None, False))
        return len(buf)

    def _too_long(self, buf: bytes, pos: int) -> int | None:
        if len(buf) - pos > _MAX_LINE:
            self._state = _RAW
            return pos
        return None


def _merged(segments: list[Segment]) -> list[Segment]:
    """Consecutive body pieces of one request joined (a chunked body comes in many small ones)."""
    out: list[Segment] = []
    for s in segments:
        last = out[-1] if out else None
        if last and last.kind == s.kind == "body" and not last.final and last.request is s.request:
            out[-1] = Segment("body", last.data + s.data, s.request, s.final)
        else:
            out.append(s)
    return out


class Request(NamedTuple):
    """One logged request: its method, the kind it counts as, and its target (path and query, as sent)."""

    method: str
    kind: str
    path: str


@dataclass
class _Cut:
    """A pending fault: cut the next ``left`` matching requests, or their responses."""

    left: int
    kind: str | None
    path_contains: str | None
    response: bool
    after_bytes: int = 0

    def matches(self, request: RequestHead) -> bool:
        return (
            self.left > 0
            and (self.kind is None or self.kind.upper() == request.kind)
            and (self.path_contains is None or self.path_contains in unquote(request.target))
        )


class CountWindow:
    """The requests counted over a ``with proxy.counting()`` block; live inside it, fixed once it ends."""

    def __init__(self, proxy: S3Proxy) -> None:
        self._proxy = proxy
        self._start = proxy.counts()
        self._final: dict[str, int] | None = None

    @property
    def counts(self) -> dict[str, int]:
        """Requests by kind since the block began (until it ended)."""
        if self._final is not None:
            return dict(self._final)
        now = self._proxy.counts()
        return {kind: n - self._start.get(kind, 0) for kind, n in now.items()}

    @property
    def total(self) -> int:
        """All requests counted in the window."""
        return sum(self.counts.values())

    def _end(self) -> None:
        self._final = self.counts


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` abruptly: an RST to the peer rather than a FIN where the platform allows it."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.close()


class _Connection:
    """One client connection and its own upstream connection, relayed by one thread."""

    def __init__(self, proxy: S3Proxy, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream: socket.socket | None = None
        self.parser = RequestParser()
        self.thread = threading.Thread(target=self.run, name="s3-proxy-connection", daemon=True)
        self.done = False
        self._budget: int | None = None  # body bytes to forward before cutting the current request
        self._cut_response = False  # the current request's response is to be cut...
        self._armed = False  # ...and the request has been forwarded whole: the next final response is
        self._held = b""  # response bytes held while an interim (1xx) response may be passing

    def run(self) -> None:
        """Relay both directions until either side closes, the connection is cut, or the proxy stops."""
        try:
            self.upstream = socket.create_connection(self.proxy.upstream, timeout=10)
            self.upstream.settimeout(None)
            self.upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._relay()
        except OSError:
            pass
        finally:
            self._close()
            self.proxy._forget(self)

    def abort(self) -> None:
        """Wake the relay and make it end (from another thread; the relay closes the sockets itself)."""
        for sock in (self.client, self.upstream):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def _relay(self) -> None:
        assert self.upstream is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.client, selectors.EVENT_READ, self._from_client)
            selector.register(self.upstream, selectors.EVENT_READ, self._from_upstream)
            while not self.done and selector.get_map():
                for key, _ in selector.select():
                    if not key.data():
                        if self.done:
                            return
                        selector.unregister(key.fileobj)

    def _from_client(self) -> bool:
        assert self.upstream is not None
        data = self.client.recv(_RECV)
        if not data:  # the client is done sending: pass the half-close on, keep relaying the answer
            with contextlib.suppress(OSError):
                self.upstream.shutdown(socket.SHUT_WR)
            return False
        return all(self._forward(segment) for segment in self.parser.feed(data))

    def _forward(self, segment: Segment) -> bool:
        assert self.upstream is not None
        if segment.kind == "head":
            return self._forward_head(segment)
        if segment.kind == "body" and self._budget is not None:
            return self._forward_part(segment)
        self.upstream.sendall(segment.data)
        self._armed = self._armed or (self._cut_response and segment.final)
        return True

    def _forward_head(self, segment: Segment) -> bool:
        assert self.upstream is not None and segment.request is not None
        cut = self.proxy._record(segment.request)
        if not self.proxy._delay():  # stopped while waiting
            self.done = True
            return False
        if cut is not None and not cut.response and (cut.after_bytes <= 0 or segment.final):
            return self._cut()
        data = segment.data
        if self.proxy.ignore_conditions:
            data = re.sub(rb"\r\nif-none-match:[^\r]*", b"", data, flags=re.IGNORECASE)
        self.upstream.sendall(data)
        if cut is not None and not cut.response:
            self._budget = cut.after_bytes
        self._cut_response = cut is not None and cut.response
        self._armed = self._cut_response and segment.final
        return True

    def _forward_part(self, segment: Segment) -> bool:
        """Forward body bytes up to the budget, never the request's last byte, then cut."""
        assert self.upstream is not None and self._budget is not None
        take = min(self._budget, len(segment.data) - (1 if segment.final else 0))
        if take > 0:
            self.upstream.sendall(segment.data[:take])
            self._budget -= take
        if self._budget > 0 and take == len(segment.data):
            return True
        return self._cut()

    def _from_upstream(self) -> bool:
        assert self.upstream is not None
        data = self.upstream.recv(_RECV)
        if not data:
            self.done = True
            return False
        if self._armed:
            return self._before_final_response(data)
        self.client.sendall(data)
        return True

    def _before_final_response(self, data: bytes) -> bool:
        """Pass interim (``1xx``) responses on; cut the client as soon as the final response begins."""
        self._held += data
        while len(self._held) >= 10:  # "HTTP/1.1 " and the status code's first digit
            if self._held[9:10] != b"1":
                return self._cut()
            end = self._held.find(b"\r\n\r\n")
            if end < 0:
                break
            self.client.sendall(self._held[: end + 4])
            self._held = self._held[end + 4 :]
        return True

    def _cut(self) -> bool:
        _reset(self.client)
        if self.upstream is not None:
            with contextlib.suppress(OSError):
                self.upstream.close()
        self.done = True
        return False

    def _close(self) -> None:
        for sock in (self.client, self.upstream):
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.close()


class S3Proxy:
    """A reverse proxy relaying each client connection to ``upstream_host:upstream_port`` byte for byte.

    It counts requests by kind (:func:`classify`), logs them (:attr:`requests`), delays each request's head
    by :attr:`latency_s` seconds (settable at any time), and cuts connections on demand (:meth:`cut_next`,
    :meth:`cut_responses_next`). ``port=0`` binds a free port, which :attr:`port` holds once started. Use it
    as a context manager, or call :meth:`start` and :meth:`stop`::

        with S3Proxy("127.0.0.1", 5000) as proxy:
            client = boto3.client("s3", endpoint_url=proxy.endpoint, ...)
    """

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        latency_s: float = 0.0,
        max_log: int = 100_000,
    ) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.host, self.port = host, port
        #: Seconds each request's head waits before it is forwarded.
        self.latency_s = latency_s
        #: Strip ``If-None-Match`` from requests, making the server an unsafe one that accepts every
        #: conditional put (a commit of a Delta log version that exists then overwrites it).
        self.ignore_conditions = False
        #: The latest requests, oldest first (at most ``max_log``; the oldest tenth goes when it is full).
        self.requests: list[Request] = []
        self.max_log = max_log
        self._counts: dict[str, int] = {}
        self._log_requests = 0
        self._cuts: list[_Cut] = []
        self._live: set[_Connection] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        """The URL clients use instead of the server's, e.g. ``http://127.0.0.1:54321``."""
        if self._listener is None:
            raise RuntimeError("the proxy is not started")
        return f"http://{self.host}:{self.port}"

    def start(self) -> S3Proxy:
        """Listen and serve in daemon threads; returns the proxy."""
        if self._listener is not None:
            raise RuntimeError("the proxy is already started")
        listener = socket.create_server((self.host, self.port), backlog=128)
        listener.settimeout(0.2)  # where closing does not wake accept(), stop() still returns promptly
        self._listener, self.port = listener, listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name="s3-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening and close every live connection; returns within about a second."""
        self._stopping.set()
        listener = self._listener
        if listener is not None:
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(1)
        if listener is not None:
            listener.close()
        with self._lock:
            live = list(self._live)
        for connection in live:
            connection.abort()
        deadline = time.monotonic() + 1
        for connection in live:
            connection.thread.join(max(0.0, deadline - time.monotonic()))

    def __enter__(self) -> S3Proxy:
        return self if self._listener is not None else self.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    def counts(self) -> dict[str, int]:
        """Requests by kind since the start or the last :meth:`reset`: every kind of :data:`KINDS`, and any
        other method seen. A ``LIST`` is not also a ``GET``; a request that was cut still counts."""
        with self._lock:
            return {**dict.fromkeys(KINDS, 0), **self._counts}

    def log_requests(self) -> int:
        """How many of the requests :meth:`counts` counts read or wrote a Delta log (a path with ``_delta_log``):
        a process's looks for new versions and its commits, as against its reads of data files."""
        with self._lock:
            return self._log_requests

    def reset(self) -> None:
        """Zero the counts and empty the log (pending cuts stay; an open :meth:`counting` window goes wrong)."""
        with self._lock:
            self._counts.clear()
            self._log_requests = 0
            self.requests.clear()

    @contextlib.contextmanager
    def counting(self) -> Iterator[CountWindow]:
        """``with proxy.counting() as counted:`` ... then ``counted.counts`` holds the block's requests."""
        window = CountWindow(self)
        try:
            yield window
        finally:
            window._end()

    def cut_next(
        self, n: int = 1, kind: str | None = "PUT", after_bytes: int = 0, path_contains: str | None = None
    ) -> None:
        """Reset the client connection of the next ``n`` requests of ``kind`` (a method, ``"LIST"``, or
        ``None`` for any) whose target contains ``path_contains``: before the request reaches the server
        (``after_bytes=0``), or after at most ``after_bytes`` of its body did, never the whole request."""
        with self._lock:
            self._cuts.append(_Cut(n, kind, path_contains, response=False, after_bytes=after_bytes))

    def cut_responses_next(self, n: int = 1, kind: str | None = "PUT", path_contains: str | None = None) -> None:
        """Let the next ``n`` matching requests (as :meth:`cut_next`) reach the server whole, then reset the
        client connection when the server's answer begins: the server applied a request whose client
        sees it fail."""
        with self._lock:
            self._cuts.append(_Cut(n, kind, path_contains, response=True))

    def cancel_cuts(self) -> None:
        """Forget the cuts not yet made."""
        with self._lock:
            self._cuts.clear()

    def _serve(self) -> None:
        assert self._listener is not None
        while not self._stopping.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stopping.is_set():
                    break
                time.sleep(0.05)  # e.g. out of file descriptors: try again shortly
                continue
            self._open(client)

    def _open(self, client: socket.socket) -> None:
        client.settimeout(None)
        with contextlib.suppress(OSError):
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        connection = _Connection(self, client)
        with self._lock:
            if self._stopping.is_set():
                client.close()
                return
            self._live.add(connection)
        connection.thread.start()

    def _forget(self, connection: _Connection) -> None:
        with self._lock:
            self._live.discard(connection)

    def _record(self, request: RequestHead) -> _Cut | None:
        """Count and log ``request``; the pending cut it takes, if any."""
        with self._lock:
            self._counts[request.kind] = self._counts.get(request.kind, 0) + 1
            self._log_requests += "_delta_log" in unquote(request.target)
            self.requests.append(Request(request.method, request.kind, request.target))
            if len(self.requests) > self.max_log:
                del self.requests[: len(self.requests) - self.max_log + self.max_log // 10]
            for cut in self._cuts:
                if cut.matches(request):
                    cut.left -= 1
                    if not cut.left:
                        self._cuts.remove(cut)
                    return cut
        return None

    def _delay(self) -> bool:
        """Wait :attr:`latency_s`; false when the proxy stopped meanwhile."""
        latency = self.latency_s
        if latency > 0:
            return not self._stopping.wait(latency)
        return not self._stopping.is_set()


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True, help="the S3 server, HOST:PORT (e.g. 127.0.0.1:5000)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: a free one)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="milliseconds added to each request")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the proxy until SIGINT or SIGTERM; print its endpoint first and the request counts last."""
    args = _parse_args(argv)
    host, _, port = args.upstream.rpartition(":")
    if not port.isdigit():
        raise SystemExit(f"--upstream must be HOST:PORT, not {args.upstream!r}")
    proxy = S3Proxy(host or "127.0.0.1", int(port), args.host, args.port, latency_s=args.latency_ms / 1000)
    stopped = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # set from a thread: the handler may run inside stopped.wait() with its lock held (stdlib only here;
        # the library's storelib.delta.teardown.set_from_signal_handler)
        threading.Thread(target=stopped.set, daemon=True).start()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    with proxy:
        print(proxy.endpoint, flush=True)
        while not stopped.wait(0.5):
            pass
    counts = proxy.counts()
    print(" ".join(f"{kind}={n}" for kind, n in counts.items()), f"total={sum(counts.values())}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
