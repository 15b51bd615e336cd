"""The S3 proxy (:mod:`jobs.benchmarks.s3_proxy`) in a process of its own, driven from this one.

A proxy thread inside a process that also calls deltalake can stall: some of deltalake's calls keep
Python's interpreter lock while they wait for the network (``DeltaTable.is_deltatable`` waited 30 s for a
listing the proxy thread could not answer). So tests and benchmarks run the proxy as a child process and
steer it over its standard input: :class:`ProxyProcess` has the proxy's own methods.

>>> ProxyProcess.__name__
'ProxyProcess'
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[2]

__all__ = [
    "GoModulesUnreachable",
    "ProxyProcess",
    "S3_SERVERS",
    "serve",
    "start_go_s3",
    "start_moto",
    "start_s3_server",
]


#: ``moto_server`` as its ``main`` runs it, with two costs per request taken out: its dispatcher lists moto's
#: package folders to find the service a request is for (15% of the server's time), under a lock every request
#: takes; and werkzeug logs a line per request. A store's S3 work took 25-30% less time (measured).
_MOTO_SERVER = """
import logging
import moto.backends as backends
if hasattr(backends, "list_of_moto_modules"):
    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules
logging.getLogger("werkzeug").setLevel(logging.ERROR)
from moto.server import main
main()
"""


def start_moto(extra_env: dict[str, str] | None = None) -> tuple[int, subprocess.Popen]:
    """``moto_server`` (the test extra installs it) on a free port of the loopback, answering; returns
    ``(port, process)``. ``extra_env``: its environment's additions (``INITIAL_NO_AUTH_ACTION_COUNT=0``
    makes it check credentials)."""
    import os
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-c", _MOTO_SERVER, "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(extra_env or {})},
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/", timeout=1).read()
            return port, process
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                raise RuntimeError("moto_server did not start: pip install 'moto[server]'") from None
            time.sleep(0.1)


class GoModulesUnreachable(RuntimeError):
    """``go build`` of the Go S3 server could not download its modules (no route to the Go module proxy)."""


def start_go_s3() -> tuple[int, subprocess.Popen]:
    """The Go S3 server of ``jobs/benchmarks/s3server`` (gofakes3, in memory) on a free port of the loopback,
    built with ``go`` on first use into a cache folder; returns ``(port, process)``. It costs a small fraction of
    moto's CPU a request, so a benchmark on a machine of two cores measures the store rather than the server."""
    import hashlib
    import os
    import shutil

    source = ROOT / "jobs" / "benchmarks" / "s3server"
    if shutil.which("go") is None:
        raise RuntimeError("the Go S3 server needs the go command on PATH (https://go.dev/dl/); or use moto")
    digest = hashlib.sha256(b"".join((source / f).read_bytes() for f in ("main.go", "go.mod", "go.sum"))).hexdigest()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "storelib"
    binary = cache / f"s3server-{digest[:16]}"
    if not binary.exists():
        cache.mkdir(parents=True, exist_ok=True)
        built = subprocess.run(
            ["go", "build", "-o", str(binary) + ".tmp", "."], cwd=source, capture_output=True, text=True, timeout=600
        )
        if built.returncode != 0:
            unreachable = any(w in built.stderr for w in ("dial tcp", "i/o timeout", "no such host", "proxy.golang"))
            raise (GoModulesUnreachable if unreachable else RuntimeError)(
                f"go build of {source} failed: {built.stderr.strip()[-500:]}"
            )
        os.replace(str(binary) + ".tmp", binary)
    process = subprocess.Popen([str(binary), "-addr", "127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
    endpoint = process.stdout.readline().strip()
    if not endpoint.startswith("http://"):
        process.kill()
        raise RuntimeError(f"the Go S3 server did not start (it said {endpoint!r})")
    return int(endpoint.rsplit(":", 1)[1]), process


#: The local S3 servers a benchmark can start, by name.
S3_SERVERS = ("moto", "go")


def start_s3_server(kind: str = "moto") -> tuple[int, subprocess.Popen]:
    """A local S3 server of ``kind`` (:data:`S3_SERVERS`): ``(port, process)``."""
    if kind not in S3_SERVERS:
        raise ValueError(f"no S3 server {kind!r}: one of {', '.join(S3_SERVERS)}")
    return start_go_s3() if kind == "go" else start_moto()


class ProxyProcess:
    """A proxy in front of ``upstream_host:upstream_port``, in a child process; a context manager.

    ``counts``, ``reset``, ``cut_next``, ``cut_responses_next`` and ``cancel_cuts`` are the proxy's;
    ``latency_s`` may be set; ``counting()`` yields an object whose ``counts`` is what its block added.
    """

    def __init__(self, upstream_host: str, upstream_port: int, latency_s: float = 0.0):
        self._args = [upstream_host, str(upstream_port), str(latency_s)]
        self._latency_s = latency_s
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self.endpoint = ""

    def start(self) -> "ProxyProcess":
        code = "import sys; from jobs.benchmarks.s3_proxy_process import serve; serve(*sys.argv[1:])"
        self._process = subprocess.Popen(
            [sys.executable, "-c", code, *self._args],
            cwd=ROOT,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.endpoint = self._process.stdout.readline().strip()
        if not self.endpoint.startswith("http://"):
            raise RuntimeError(f"the proxy did not start (it said {self.endpoint!r})")
        return self

    @property
    def pid(self) -> int | None:
        """The proxy process's id (None before :meth:`start`)."""
        return None if self._process is None else self._process.pid

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.stdin.close()
            self._process.wait(timeout=30)

    def __enter__(self) -> "ProxyProcess":
        return self.start() if self._process is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, name: str, **kwargs: Any) -> Any:
        with self._lock:
            self._process.stdin.write(json.dumps({"call": name, "kwargs": kwargs}) + "\n")
            self._process.stdin.flush()
            answer = json.loads(self._process.stdout.readline())
        if "error" in answer:
            raise RuntimeError(f"proxy: {answer['error']}")
        return answer["result"]

    def counts(self) -> dict[str, int]:
        return self._call("counts")

    def log_requests(self) -> int:
        return self._call("log_requests")

    def ignore_conditions(self, on: bool = True) -> None:
        """Make the server behind an unsafe one: conditional puts lose their condition."""
        self._call("ignore_conditions", on=on)

    def reset(self) -> None:
        self._call("reset")

    def cut_next(
        self, n: int = 1, kind: str | None = "PUT", after_bytes: int = 0, path_contains: str | None = None
    ) -> None:
        self._call("cut_next", n=n, kind=kind, after_bytes=after_bytes, path_contains=path_contains)

    def cut_responses_next(self, n: int = 1, kind: str | None = "PUT", path_contains: str | None = None) -> None:
        self._call("cut_responses_next", n=n, kind=kind, path_contains=path_contains)

    def cancel_cuts(self) -> None:
        self._call("cancel_cuts")

    def requests(self, last: int = 1000) -> list[tuple[str, str, str]]:
        """The newest ``last`` requests: (method, kind, path)."""
        return [tuple(r) for r in self._call("requests", last=last)]

    @property
    def latency_s(self) -> float:
        return self._latency_s

    @latency_s.setter
    def latency_s(self, value: float) -> None:
        self._call("set_latency", seconds=value)
        self._latency_s = value

    @contextlib.contextmanager
    def counting(self) -> Iterator[Any]:
        class Window:
            counts: dict[str, int] = {}
            log_requests = 0  # of which to Delta logs

        before, logged = self.counts(), self.log_requests()
        window = Window()
        try:
            yield window
        finally:
            after = self.counts()
            window.counts = {k: v - before.get(k, 0) for k, v in after.items()}
            window.log_requests = self.log_requests() - logged


def serve(upstream_host: str, upstream_port: str, latency_s: str = "0") -> None:
    """The child's side: start the proxy, print its endpoint, answer one JSON command per line of stdin
    until it closes."""
    from jobs.benchmarks.s3_proxy import S3Proxy

    with S3Proxy(upstream_host, int(upstream_port), latency_s=float(latency_s)) as proxy:
        print(proxy.endpoint, flush=True)
        for line in sys.stdin:
            request = json.loads(line)
            name, kwargs = request["call"], request.get("kwargs", {})
            try:
                if name == "set_latency":
                    proxy.latency_s = float(kwargs["seconds"])
                    result = None
                elif name == "ignore_conditions":
                    proxy.ignore_conditions = bool(kwargs["on"])
                    result = None
                elif name == "requests":  # the log's newest entries
                    result = [list(r) for r in proxy.requests[-int(kwargs.get("last", 1000)) :]]
                else:
                    result = getattr(proxy, name)(**kwargs)
                print(json.dumps({"result": result}), flush=True)
            except Exception as e:  # said to the parent, which raises it
                print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
