"""Fixtures for ``storelib serve`` (helpers in serve_helpers.py): ``serve`` starts real server subprocesses."""

from __future__ import annotations

from typing import Iterator

import pytest
from serve_helpers import Server


@pytest.fixture(scope="module")
def serve(tmp_path_factory) -> Iterator:
    """Start servers: ``serve(path, *args)`` returns a started :class:`Server`; at the end of the module
    each still running is stopped with SIGTERM and must exit with 0."""
    started: list[Server] = []
    logs = tmp_path_factory.mktemp("serve-logs")

    def start(path: str, *args: str, port: int | None = None) -> Server:
        server = Server(path, *args, port=port, log_dir=logs).start()
        started.append(server)
        return server

    yield start
    failures = []
    for server in started:
        if server.proc is None or server.proc.returncode is not None and server.proc.returncode < 0:
            continue  # killed on purpose by its test
        rc = server.stop()
        if rc != 0:
            failures.append(f"{server.address}: exit {rc}; stderr: {server.stderr()}")
        elif "Traceback" in server.stderr():
            failures.append(f"{server.address}: a traceback on stderr: {server.stderr()}")
    assert not failures, failures
