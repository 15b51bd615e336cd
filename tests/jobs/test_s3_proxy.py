"""The benchmarks' S3 proxy (``jobs/benchmarks/s3_proxy.py``) in front of a real local S3 server (``moto_server``).

boto3 and pyarrow reach the server through it: requests are counted by kind, delayed, cut on demand, and
large and multipart bodies go through intact. Keep-alive, chunked bodies and ``Expect: 100-continue`` are
checked against a small HTTP/1.1 server of the standard library, since ``moto_server`` closes every
connection after one answer.
"""

from __future__ import annotations

import doctest
import hashlib
import http.client
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from jobs.benchmarks import s3_proxy
from jobs.benchmarks.s3_proxy import RequestParser, S3Proxy

ROOT = Path(__file__).resolve().parents[2]
BUCKET = "proxy-tests"
ZERO = dict.fromkeys(s3_proxy.KINDS, 0)
EMPTY_MD5 = hashlib.md5(b"").hexdigest()


def _client(endpoint: str):
    import boto3
    from botocore.config import Config

    # total_max_attempts: botocore's "max_attempts" counts retries, so 1 would still try twice
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="k",
        aws_secret_access_key="s",
        region_name="us-east-1",
        config=Config(retries={"total_max_attempts": 1}),
    )


@pytest.fixture(scope="module")
def moto_port() -> Iterator[int]:
    """A ``moto_server`` of this module's own, with :data:`BUCKET` in it."""
    from jobs.benchmarks.s3_proxy_process import start_moto

    port, process = start_moto()
    try:
        _client(f"http://127.0.0.1:{port}").create_bucket(Bucket=BUCKET)
        yield port
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def module_proxy(moto_port: int) -> Iterator[S3Proxy]:
    with S3Proxy("127.0.0.1", moto_port) as proxy:
        yield proxy


@pytest.fixture
def proxy(module_proxy: S3Proxy) -> Iterator[S3Proxy]:
    """The module's proxy, with no latency, no pending cuts and zero counts."""
    module_proxy.reset()
    yield module_proxy
    module_proxy.latency_s = 0
    module_proxy.cancel_cuts()


@pytest.fixture
def s3(proxy: S3Proxy):
    """A boto3 client that reaches the server through the proxy, and does not retry."""
    return _client(proxy.endpoint)


def _exists(s3, key: str) -> bool:
    from botocore.exceptions import ClientError

    try:
        s3.head_object(Bucket=BUCKET, Key=key)
        return True
    except ClientError as e:
        assert e.response["Error"]["Code"] == "404"
        return False


def test_doctests():
    assert doctest.testmod(s3_proxy).failed == 0


def test_parser_finds_every_request_whatever_the_reads():
    stream = (
        b"PUT /b/k HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
        b"\r\n"  # a blank line between requests is allowed
        b"POST /b/k?uploads HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;ext=1\r\nabc\r\n10\r\n0123456789abcdef\r\n0\r\nx-amz-checksum: y\r\n\r\n"
        b"GET /b?list-type=2&prefix=a HTTP/1.1\r\nHost: h\r\n\r\n"
        b"HEAD /b/k HTTP/1.1\r\nContent-Length: 0\r\n\r\n"
    )
    for size in (len(stream), 7, 1):
        parser = RequestParser()
        segments = [s for i in range(0, len(stream), size) for s in parser.feed(stream[i : i + size])]
        assert b"".join(s.data for s in segments) == stream
        heads = [s.request for s in segments if s.kind == "head"]
        assert [(r.method, r.kind) for r in heads] == [
            ("PUT", "PUT"),
            ("POST", "POST"),
            ("GET", "LIST"),
            ("HEAD", "HEAD"),
        ]
        assert [s.request.method for s in segments if s.final] == ["PUT", "POST", "GET", "HEAD"]


def test_counts_each_kind_of_request(proxy, s3):
    s3.put_object(Bucket=BUCKET, Key="count/before", Body=b"0")
    with proxy.counting() as counted:
        s3.put_object(Bucket=BUCKET, Key="count/a", Body=b"a")
        s3.put_object(Bucket=BUCKET, Key="count/b/c", Body=b"bc")
        assert s3.get_object(Bucket=BUCKET, Key="count/a")["Body"].read() == b"a"
        listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="count/")
        s3.list_objects_v2(Bucket=BUCKET, Prefix="count/", Delimiter="/")
        s3.list_objects(Bucket=BUCKET)
        s3.head_object(Bucket=BUCKET, Key="count/a")
        s3.delete_object(Bucket=BUCKET, Key="count/a")
    assert counted.counts == {**ZERO, "PUT": 2, "GET": 1, "LIST": 3, "HEAD": 1, "DELETE": 1}
    assert counted.total == 8
    assert [o["Key"] for o in listed["Contents"]] == ["count/a", "count/b/c", "count/before"]
    assert proxy.counts() == {**ZERO, "PUT": 3, "GET": 1, "LIST": 3, "HEAD": 1, "DELETE": 1}
    log = proxy.requests
    assert (log[1].method, log[1].kind, log[1].path) == ("PUT", "PUT", f"/{BUCKET}/count/a")
    assert [r.kind for r in log[4:7]] == ["LIST"] * 3 and all(r.method == "GET" for r in log[4:7])
    proxy.reset()
    assert proxy.counts() == ZERO and proxy.requests == []


def test_latency_delays_each_request(proxy, s3):
    s3.put_object(Bucket=BUCKET, Key="latency", Body=b"x")
    proxy.latency_s = 0.05
    start = time.monotonic()
    for _ in range(5):
        s3.head_object(Bucket=BUCKET, Key="latency")
    assert time.monotonic() - start >= 0.25


def test_cut_request_never_reaches_the_server(proxy, s3):
    from botocore.exceptions import BotoCoreError

    proxy.cut_next(kind="PUT")
    with pytest.raises(BotoCoreError):
        s3.put_object(Bucket=BUCKET, Key="cut/before", Body=b"lost")
    assert not _exists(s3, "cut/before")
    s3.put_object(Bucket=BUCKET, Key="cut/next", Body=b"kept")  # one cut only
    assert _exists(s3, "cut/next")
    assert proxy.counts()["PUT"] == 2


def test_cut_in_the_middle_of_a_body(proxy, s3):
    from botocore.exceptions import BotoCoreError

    proxy.cut_next(kind="PUT", after_bytes=64 * 1024)
    with pytest.raises(BotoCoreError):
        s3.put_object(Bucket=BUCKET, Key="cut/middle", Body=io.BytesIO(os.urandom(1024 * 1024)))
    assert not _exists(s3, "cut/middle")


def test_cut_response_after_the_server_applied_the_request(proxy, s3):
    from botocore.exceptions import BotoCoreError

    body = os.urandom(256 * 1024)
    proxy.cut_responses_next(kind="PUT")
    with pytest.raises(BotoCoreError):  # a file-like body: boto3 sends "Expect: 100-continue" first
        s3.put_object(Bucket=BUCKET, Key="cut/landed", Body=io.BytesIO(body))
    assert s3.get_object(Bucket=BUCKET, Key="cut/landed")["Body"].read() == body


def test_cuts_match_kind_and_path(proxy, s3):
    from botocore.exceptions import BotoCoreError

    proxy.cut_next(kind=None, path_contains="_delta_log")
    s3.put_object(Bucket=BUCKET, Key="table/part-0.parquet", Body=b"data")
    with pytest.raises(BotoCoreError):
        s3.put_object(Bucket=BUCKET, Key="table/_delta_log/00000.json", Body=b"commit")
    proxy.cut_next(kind="LIST")
    s3.get_object(Bucket=BUCKET, Key="table/part-0.parquet")
    with pytest.raises(BotoCoreError):
        s3.list_objects_v2(Bucket=BUCKET, Prefix="table/")
    assert [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="table/")["Contents"]] == [
        "table/part-0.parquet"
    ]


def test_large_and_multipart_bodies_go_through_intact(proxy, s3):
    from boto3.s3.transfer import TransferConfig

    big = os.urandom(5 * 1024 * 1024)
    with proxy.counting() as counted:
        s3.put_object(Bucket=BUCKET, Key="big/single", Body=big)
        assert s3.get_object(Bucket=BUCKET, Key="big/single")["Body"].read() == big
    assert counted.counts == {**ZERO, "PUT": 1, "GET": 1}
    parts = os.urandom(11 * 1024 * 1024)
    config = TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024)
    with proxy.counting() as counted:
        s3.upload_fileobj(io.BytesIO(parts), BUCKET, "big/multipart", Config=config)
    assert counted.counts == {**ZERO, "POST": 2, "PUT": 3}  # create, 3 parts in parallel, complete
    assert s3.get_object(Bucket=BUCKET, Key="big/multipart")["Body"].read() == parts


def test_pyarrow_through_the_proxy(proxy):
    from pyarrow.fs import FileSelector, S3FileSystem

    fs = S3FileSystem(
        endpoint_override=f"127.0.0.1:{proxy.port}", scheme="http", access_key="k", secret_key="s", region="us-east-1"
    )
    with proxy.counting() as written:
        with fs.open_output_stream(f"{BUCKET}/arrow/file.bin") as f:
            f.write(b"written by pyarrow")
    with proxy.counting() as read:
        with fs.open_input_file(f"{BUCKET}/arrow/file.bin") as f:
            assert f.read() == b"written by pyarrow"
    with proxy.counting() as listed:
        assert [i.path for i in fs.get_file_info(FileSelector(f"{BUCKET}/arrow"))] == [f"{BUCKET}/arrow/file.bin"]
    assert written.counts["PUT"] >= 1 and written.counts["GET"] == written.counts["LIST"] == 0
    assert read.counts["GET"] >= 1 and read.counts["PUT"] == read.counts["POST"] == 0
    assert listed.counts == {**ZERO, "LIST": 1}
    assert len(proxy.requests) == written.total + read.total + listed.total
    assert all(r.path.startswith(f"/{BUCKET}") for r in proxy.requests)


class _Echo(BaseHTTPRequestHandler):
    """Keeps connections alive; answers each request with its method, path, body length and the body's md5."""

    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = _read_chunked(self.rfile)
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.seen.append(self.client_address[1])  # type: ignore[attr-defined]
        reply = f"{self.command} {self.path} {len(body)} {hashlib.md5(body).hexdigest()}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    do_GET = do_PUT = do_POST = do_DELETE = _answer

    def log_message(self, *args: object) -> None:
        pass


def _read_chunked(rfile) -> bytes:
    body = b""
    while size := int(rfile.readline().split(b";")[0], 16):
        body += rfile.read(size)
        rfile.readline()
    while rfile.readline() not in (b"\r\n", b""):  # trailers
        pass
    return body


@pytest.fixture
def echo() -> Iterator[ThreadingHTTPServer]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    server.daemon_threads = True
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_keep_alive_chunked_and_expect_continue(echo):
    body = os.urandom(300 * 1024)
    md5 = hashlib.md5(body).hexdigest()
    with S3Proxy(*echo.server_address) as proxy:
        connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10)
        answers = []
        for method, path, kwargs in (
            ("PUT", "/b/plain", {"body": body}),
            ("POST", "/b/chunked?uploads", {"body": iter([body[:1000], body[1000:]]), "encode_chunked": True}),
            ("PUT", "/b/expect", {"body": body, "headers": {"Expect": "100-continue"}}),
            ("GET", "/b?list-type=2&prefix=x", {}),
            ("DELETE", "/b/plain", {}),
        ):
            connection.request(method, path, **kwargs)
            answers.append(connection.getresponse().read().decode())
        connection.close()
        assert answers == [
            f"PUT /b/plain {len(body)} {md5}",
            f"POST /b/chunked?uploads {len(body)} {md5}",
            f"PUT /b/expect {len(body)} {md5}",
            f"GET /b?list-type=2&prefix=x 0 {EMPTY_MD5}",
            f"DELETE /b/plain 0 {EMPTY_MD5}",
        ]
        assert len(set(echo.seen)) == 1  # one upstream connection carried them all
        assert proxy.counts() == {**ZERO, "PUT": 2, "POST": 1, "LIST": 1, "DELETE": 1}


def test_response_cut_after_interim_continue(echo):
    with S3Proxy(*echo.server_address) as proxy:
        proxy.cut_responses_next(kind="PUT")
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
            client.sendall(b"PUT /b/k HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
            interim = b""
            while not interim.endswith(b"\r\n\r\n"):
                interim += client.recv(1000)
            assert interim.startswith(b"HTTP/1.1 100 Continue\r\n")
            client.sendall(b"hello")
            with pytest.raises(ConnectionResetError):
                while client.recv(1000):
                    pass
        assert proxy.counts()["PUT"] == 1
        deadline = time.monotonic() + 5
        while not echo.seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(echo.seen) == 1  # the server got the request and answered it


def test_stop_closes_live_connections_promptly(echo):
    proxy = S3Proxy(*echo.server_address, latency_s=30).start()
    port = proxy.port
    idle = socket.create_connection(("127.0.0.1", port), timeout=10)
    waiting = socket.create_connection(("127.0.0.1", port), timeout=10)
    waiting.sendall(b"GET /b/k HTTP/1.1\r\nHost: h\r\n\r\n")  # held back by the latency
    time.sleep(0.2)
    start = time.monotonic()
    proxy.stop()
    assert time.monotonic() - start < 1.5
    for client in (idle, waiting):
        with client:
            assert client.recv(100) == b""
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("s3-proxy"))


def test_main_prints_the_endpoint_and_the_counts(moto_port):
    process = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "jobs/benchmarks/s3_proxy.py"),
            "--upstream",
            f"127.0.0.1:{moto_port}",
            "--latency-ms",
            "1",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        endpoint = process.stdout.readline().strip()
        assert endpoint.startswith("http://127.0.0.1:")
        _client(endpoint).head_bucket(Bucket=BUCKET)
        process.send_signal(signal.SIGINT)
        out, _ = process.communicate(timeout=30)
    finally:
        process.kill()
    assert process.returncode == 0
    assert "HEAD=1" in out and "total=1" in out


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("go") is None, reason="the Go S3 server is built with the go command, absent here")
def test_the_go_s3_server_keeps_pyarrow_bodies_and_refuses_a_second_put_of_a_delta_version(tmp_path):
    """The benchmarks' Go S3 server (``--s3-server go``): pyarrow's aws-chunked bodies stored as written, and a
    Delta commit of a version that exists refused (the conditional put that keeps offsets exact)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import CommitProperties, DeltaTable, write_deltalake
    from deltalake.exceptions import CommitFailedError
    from pyarrow import fs

    from jobs.benchmarks.s3_proxy_process import GoModulesUnreachable, start_s3_server

    try:
        port, process = start_s3_server("go")
    except GoModulesUnreachable as e:  # a machine with go but no route to its module proxy
        pytest.skip(str(e).splitlines()[0])
    try:
        endpoint = f"http://127.0.0.1:{port}"
        _client(endpoint).create_bucket(Bucket=BUCKET)
        s3 = fs.S3FileSystem(
            access_key="k", secret_key="s", region="us-east-1", endpoint_override=endpoint, scheme="http"
        )
        rows = pa.table({"n": pa.array(range(1000), pa.int64())})
        pq.write_table(rows, f"{BUCKET}/rows.parquet", filesystem=s3)
        assert pq.read_table(f"{BUCKET}/rows.parquet", filesystem=s3).equals(rows)
        with s3.open_output_stream(f"{BUCKET}/big") as out:  # multipart: over pyarrow's 10 MiB part
            out.write(b"x" * (11 * 2**20))
        assert s3.get_file_info(f"{BUCKET}/big").size == 11 * 2**20

        options = {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_ACCESS_KEY_ID": "k",
            "AWS_SECRET_ACCESS_KEY": "s",
            "AWS_REGION": "us-east-1",
        }
        uri = f"s3://{BUCKET}/table"
        write_deltalake(uri, rows, storage_options=options)
        first, second = (DeltaTable(uri, storage_options=options) for _ in range(2))
        write_deltalake(first, rows, mode="append")
        with pytest.raises(CommitFailedError):  # version 1 exists: the stale writer's put of it is refused
            second.create_write_transaction(
                [], mode="append", schema=second.schema(), commit_properties=CommitProperties(max_commit_retries=0)
            )
        assert DeltaTable(uri, storage_options=options).version() == 1
    finally:
        process.terminate()
        process.wait(timeout=30)
