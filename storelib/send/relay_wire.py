"""The machine's committer's wire protocol (:mod:`storelib.send.relay`): frames on a Unix socket.

A frame is a 4-byte big-endian length, a kind byte, a 16-byte request id, and a body. A producer
process sends :data:`REQUEST` frames, a group's staged rows in Arrow's IPC stream format. The leader
answers each one, in the order its commits land, with one of three frames: :data:`LANDED_ROWS` (where
the rows landed, as IPC), :data:`FAILED` (the commit's typed error as a record), or :data:`NOT_TAKEN`
(the leader was leaving, and its producer commits the group itself). :func:`answer_of` builds the
answer, and :func:`result_of` reads back any answer but ``not taken`` (which the producer acts on
itself). Rows go both ways as :func:`ipc` bytes and come back with :func:`rows_of`.

>>> import socket
>>> a, b = socket.socketpair()
>>> rows = pa.table({"x": [1, 2]})
>>> send_frame(a, REQUEST, "ab" * 16, ipc(rows))
>>> kind, request_id, body = receive_frame(b)
>>> kind == REQUEST, request_id == "ab" * 16, rows_of(body).equals(rows)
(True, True, True)
>>> a.close(); receive_frame(b) is None                 # the other side closed
True
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
from concurrent.futures import Future
from dataclasses import dataclass

import pyarrow as pa

from storelib.model.errors import StoreError, StoreStateError, error_from_record

__all__ = ["Group", "NotTaken", "PROTOCOL", "REQUEST", "LANDED_ROWS", "FAILED", "NOT_TAKEN", "abstract_address", "same_user", "ipc", "send_frame",
           "receive_frame", "answer_of", "result_of", "rows_of"]

#: The wire protocol's version, part of the socket's name: producers of another storelib never meet.
PROTOCOL = "v1"
#: Frame kinds: a group handed on; its answers.
REQUEST, LANDED_ROWS, FAILED, NOT_TAKEN = b"Q", b"K", b"E", b"N"
_HEAD = struct.Struct(">I")
_ID_BYTES = 16


@dataclass(frozen=True)
class Group:
    """A group handed on to the leader: its request id (32 hex digits) and its staged rows."""

    request_id: str
    rows: pa.Table


class NotTaken(Exception):
    """The leader is closing: the group was not queued."""


def abstract_address(role: str, path: str, protocol: str = PROTOCOL) -> str:
    """The name of a store's local socket for ``role``, in Linux's abstract namespace: one per table
    folder (``path``, however it is spelled) and wire protocol version.

    >>> abstract_address("commit", "/data/store/commitlog").startswith("\\0storelib-commit-v1-")
    True
    """
    digest = hashlib.sha1(os.path.realpath(path).encode()).hexdigest()[:24]
    return f"\0storelib-{role}-{protocol}-{digest}"


def same_user(sock: socket.socket) -> bool:
    """Is the process at the other end of a Unix socket this process's user (an abstract socket has no
    file permissions, so its server asks)?

    >>> a, b = socket.socketpair()
    >>> same_user(a)
    True
    """
    _, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid == os.getuid()


def ipc(table: pa.Table) -> bytes:
    """``table`` in Arrow's IPC stream format (:func:`rows_of` reads it back).

    >>> rows_of(ipc(pa.table({"x": [7]}))).column("x").to_pylist()
    [7]
    """
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def rows_of(body: bytes) -> pa.Table:
    """The table :func:`ipc` encoded (see its example)."""
    return pa.ipc.open_stream(body).read_all()


def send_frame(sock: socket.socket, kind: bytes, request_id: str, body: bytes) -> None:
    """Write one frame (see the module docstring for an example)."""
    payload = kind + bytes.fromhex(request_id) + body
    sock.sendall(_HEAD.pack(len(payload)) + payload)


def receive_frame(sock: socket.socket) -> tuple[bytes, str, bytes] | None:
    """The next frame as (kind, request id, body); None when the other side closed (see the module
    docstring). A whole frame too short to hold a kind and a request id raises :class:`StoreStateError`;
    the frames after it can still be read.

    >>> import socket
    >>> a, b = socket.socketpair()
    >>> a.sendall(_HEAD.pack(3) + b"abc")
    >>> receive_frame(b)
    Traceback (most recent call last):
    ...
    storelib.model.errors.StoreStateError: relay: a frame of 3 bytes is too short for a kind and a request id
    """
    head = _exactly(sock, _HEAD.size)
    if head is None:
        return None
    payload = _exactly(sock, _HEAD.unpack(head)[0])
    if payload is None:
        return None
    if len(payload) < 1 + _ID_BYTES:
        raise StoreStateError("relay", f"a frame of {len(payload)} bytes is too short for a kind and a request id")
    return payload[:1], payload[1:1 + _ID_BYTES].hex(), payload[1 + _ID_BYTES:]


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    parts, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def answer_of(error: BaseException | None, landed: "Future[pa.Table] | None") -> tuple[bytes, bytes]:
    """The answer to a group, as (kind, body): its landed rows, ``not taken``, or its typed error as a record.

    >>> answer_of(NotTaken(), None)
    (b'N', b'')
    >>> kind, body = answer_of(StoreStateError("commitlog", "full"), None)
    >>> kind, type(result_of(kind, body)).__name__
    (b'E', 'StoreStateError')
    """
    if error is None:
        return LANDED_ROWS, ipc(landed.result())
    if isinstance(error, NotTaken):
        return NOT_TAKEN, b""
    if isinstance(error, StoreError):
        return FAILED, json.dumps(error.to_record(), default=str).encode()
    return FAILED, json.dumps({"error": "StoreError", "field": None, "reason": f"{type(error).__name__}: {error}"}).encode()


def result_of(kind: bytes, body: bytes) -> pa.Table | StoreError:
    """What an answer other than ``not taken`` says: the landed rows, or the error to raise for the group.

    >>> done = Future(); done.set_result(pa.table({"x": [1]}))
    >>> result_of(*answer_of(None, done)).column("x").to_pylist()
    [1]
    >>> result_of(*answer_of(ValueError("bad"), None)).reason
    'ValueError: bad'
    >>> type(result_of(FAILED, b"not JSON")).__name__       # failed all the same: nothing of the group was written
    'StoreStateError'

    Landed rows that cannot be read raise (pyarrow's error): the group landed, and only the
    commitlog's log can say where.
    """
    if kind == LANDED_ROWS:
        return rows_of(body)
    if kind == FAILED:
        try:
            return error_from_record(json.loads(body))
        except (ValueError, AttributeError, TypeError) as e:  # not a record of an error
            return StoreStateError("commitlog", f"the machine's committer failed the group; its error cannot be read: {e}")
    return StoreStateError("commitlog", f"the machine's committer answered a group with an unknown frame {kind!r}")
