"""The machine's committer: the producer processes of one machine hand their groups to one of them.

RocketMQ's producers do not write the commit log: they hand their messages to the broker, whose one
append thread gives every message its offsets. Without that, each producer process of a machine
commits to the commitlog table itself, in the table's commit turn, and each turn first reads every
commit the other processes made since its last one: with four processes, about half of a turn.
So the first process on a machine to open a producer on a store becomes the machine's committer,
its *leader*: it holds a lock file beside the commitlog's commit lock and listens on a Unix socket
named after the table. The producers of the other processes send it their groups, encoded rows in
Arrow's IPC format; its one committer appends every group that arrived during its last commit in one
commit (a second level of group commit), and answers each group with where its rows landed.

Nothing depends on the leader for safety:

- no leader reachable: the producer commits the group itself, in the commit turn, as before;
- the leader's commit fails: each of its groups gets the error, typed, as a failed commit fails
  every send of its group, and nothing of them is written;
- the leader dies with a group in hand: the producer takes the commit turn (so the dead leader's
  commit has landed or never will), looks for the group's request id in the commits made since it
  sent it, and either reads back where its rows landed or commits them itself. No send is lost and
  none is written twice. Then the next producer to find no leader becomes it.

The leader hands the role on when its process closes its last producer. Only local stores on Linux
with the setting ``relay_sends`` on (in every producer process; off by default) have a leader (the
socket lives in Linux's abstract namespace, so nothing is left on disk); elsewhere every producer
commits itself. An abstract socket has no
file permissions, so the leader takes groups only from processes of its own user (the peer's
credentials); others' producers commit themselves.

>>> from storelib import MessageStore
>>> from storelib.storage.commitlog import EncodedMessage, now_millis
>>> relaying = MessageStore.open(store.root, spark, relay_sends=True)
>>> relay = relay_for(relaying.context.commitlog)
>>> rows = relaying.context.commitlog.stage([EncodedMessage("TopicTest", 0, 0, 0, b"r", {"UNIQ_KEY": "R1"}, now_millis(), "h:0")])
>>> with relay:
...     relay.commit(rows).column("uniq_key").to_pylist(), relay.leading
(['R1'], True)
>>> relay.leading, relaying.close()                     # its last user gone, the process hands the role on
(False, None)
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import socket
import struct
import sys
import threading
import time
import uuid
import weakref
from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from storelib.delta.log import entry_actions
from storelib.model.errors import StoreError, StoreStateError, error_from_record
from storelib.send.group_commit import GroupCommitProducer
from storelib.storage.commitlog import LANDED, STAGED_SCHEMA, CommitLog
from storelib.storage.schema import COMMITLOG

try:
    import fcntl
except ImportError:  # pragma: no cover  (not POSIX: no leader)
    fcntl = None  # type: ignore[assignment]

__all__ = ["Relay", "relay_for", "REQUESTS_INFO"]

#: The hidden file whose ``flock`` makes its holder the machine's committer for a commitlog.
LEADER_LOCK = "_storelib_leader.lock"
#: The commit info key listing the request ids of the groups a leader's commit holds.
REQUESTS_INFO = "storelib.requests"
#: How far back (seconds before a group was sent) a producer looks for it after its leader died: a
#: commit made after the send carries a later time, read from the same machine's clock.
LOOK_BACK_S = 5.0

#: The wire protocol's version, part of the socket's name: producers of another storelib never meet.
PROTOCOL = "v1"
# Frames: a 4-byte length, a kind byte, a 16-byte request id, the body.
_REQUEST, _LANDED_ROWS, _FAILED, _NOT_TAKEN = b"Q", b"K", b"E", b"N"
_HEAD = struct.Struct(">I")


class _LeaderLost(Exception):
    """The connection to the leader broke after a whole request went out: its outcome is unknown."""


@dataclass(frozen=True)
class _Group:
    request_id: str
    rows: pa.Table


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def _send(sock: socket.socket, kind: bytes, request_id: str, body: bytes) -> None:
    payload = kind + bytes.fromhex(request_id) + body
    sock.sendall(_HEAD.pack(len(payload)) + payload)


def _receive(sock: socket.socket) -> tuple[bytes, str, bytes] | None:
    """The next frame as (kind, request id, body); None when the other side closed."""
    head = _exactly(sock, _HEAD.size)
    if head is None:
        return None
    payload = _exactly(sock, _HEAD.unpack(head)[0])
    if payload is None or len(payload) < 17:
        return None
    return payload[:1], payload[1:17].hex(), payload[17:]


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    parts, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


class Relay:
    """Where this process's producers commit their groups for one commitlog (see the module docstring).

    ``commit(rows)`` appends staged rows (:data:`~storelib.storage.commitlog.STAGED_SCHEMA`) atomically
    and returns where each landed (:data:`~storelib.storage.commitlog.LANDED` columns, in order).
    Use it as a context manager, or :meth:`acquire` and :meth:`release`: the process leads while it
    holds the role and some producer of it is open.
    """

    def __init__(self, commitlog: CommitLog):
        self.commitlog = commitlog
        path = commitlog.table.path
        local = "://" not in path and fcntl is not None and sys.platform.startswith("linux")
        self.enabled = local and commitlog.config.relay_sends
        digest = hashlib.sha1(os.path.realpath(path).encode()).hexdigest()[:24]
        self.address = f"\0storelib-commit-{PROTOCOL}-{digest}"
        self._lock = threading.Lock()
        self._users = 0
        self._leader: _Leader | None = None
        self._local = threading.local()  # each committing thread keeps its own connection to the leader
        #: Commits this process made for the commitlog's producers, as leader or by itself, and
        #: (monotonic time it landed, seconds it held the commit turn) of the latest (for benchmarks).
        self.commits = 0
        self.commit_seconds: "collections.deque[tuple[float, float]]" = collections.deque(maxlen=65536)

    # ---- users -------------------------------------------------------------------------------
    def acquire(self) -> "Relay":
        """Count one more producer of this process using the relay (while any is, the process may lead).

        >>> relay = relay_for(store.context.commitlog)
        >>> relay.acquire() is relay
        True
        >>> relay.release()
        """
        with self._lock:
            self._users += 1
        return self

    def release(self) -> None:
        """One producer fewer; with none left, a leading process hands the role on (its taken groups committed first).

        >>> from storelib import Message
        >>> with store.producer() as p:                  # a producer acquires the relay, and releases it on close
        ...     p.send(Message("TopicTest")).send_status
        'SEND_OK'
        """
        with self._lock:
            self._users -= 1
            leader = None
            if self._users <= 0:
                leader, self._leader = self._leader, None
        if leader is not None:
            leader.close()

    def __enter__(self) -> "Relay":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    @property
    def leading(self) -> bool:
        """Whether this process is the machine's committer for the commitlog now.

        >>> from storelib import Message, MessageStore
        >>> with MessageStore.open(store.root, spark, relay_sends=True) as relaying:
        ...     _ = relaying.send(Message("TopicTest"))  # the first commit through the relay takes the role
        ...     relay_for(relaying.context.commitlog).leading, relay_for(store.context.commitlog).leading
        (True, False)
        """
        return self._leader is not None

    @property
    def committer(self) -> GroupCommitProducer | None:
        """The leader's committer (its ``commits`` and ``commit_seconds``), while this process leads.

        >>> from storelib import Message, MessageStore
        >>> with MessageStore.open(store.root, spark, relay_sends=True) as relaying:
        ...     _ = relaying.send(Message("TopicTest"))
        ...     relay_for(relaying.context.commitlog).committer.commits
        1
        """
        leader = self._leader
        return leader.committer if leader is not None else None

    # ---- committing ---------------------------------------------------------------------------
    def commit(self, rows: pa.Table) -> pa.Table:
        """Append ``rows`` in one atomic commit (shared with other groups where a leader takes it)."""
        if not self.enabled or not rows.num_rows:
            return self._direct(rows, None)
        request_id = uuid.uuid4().hex
        for _ in range(3):
            leader = self._leader
            if leader is None and getattr(self._local, "sock", None) is None:  # not connected to a leader: lead?
                leader = self._lead()
            if leader is not None:
                try:
                    return leader.committer.send(_Group(request_id, rows))
                except _NotTaken:
                    continue
            sent_at = time.time()
            try:
                landed = self._ask(request_id, rows)
            except _LeaderLost:
                return self._recover(request_id, rows, sent_at)
            if landed is not None:
                return landed
        return self._direct(rows, request_id)

    def _direct(self, rows: pa.Table, request_id: str | None) -> pa.Table:
        info = {REQUESTS_INFO: request_id} if request_id else None
        began = time.monotonic()
        landed = self.commitlog.append_arrow(rows, results="arrow", info=info).landed
        if landed is None:  # no rows: nothing was committed
            return COMMITLOG.arrow.empty_table().select(LANDED)
        with self._lock:
            self.commits += 1
            self.commit_seconds.append((time.monotonic(), time.monotonic() - began))
        return landed

    def _lead(self) -> "_Leader | None":
        """Become the leader if no process is (the lock is free), while some producer of ours is open."""
        with self._lock:
            if self._leader is None and self._users > 0:
                self._leader = _Leader.take(self)
            return self._leader

    def _ask(self, request_id: str, rows: pa.Table) -> pa.Table | None:
        """The leader's answer: the landed rows; None when no leader took the group (it was not written)."""
        sock = getattr(self._local, "sock", None)
        try:
            if sock is None:
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(self.address)
            _send(sock, _REQUEST, request_id, _ipc(rows))
        except OSError:  # no leader, or it left before the whole request went out: nothing written
            self._disconnect(sock)
            return None
        self._local.sock = sock
        try:
            reply = _receive(sock)
        except OSError:
            reply = None
        if reply is None or reply[1] != request_id:
            self._disconnect(sock)
            raise _LeaderLost()
        kind, _, body = reply
        if kind == _LANDED_ROWS:
            return pa.ipc.open_stream(body).read_all()
        if kind == _FAILED:
            raise error_from_record(json.loads(body))
        self._disconnect(sock)
        return None  # _NOT_TAKEN: the leader is leaving

    def _disconnect(self, sock: socket.socket | None) -> None:
        self._local.sock = None
        if sock is not None:
            sock.close()

    def _recover(self, request_id: str, rows: pa.Table, sent_at: float) -> pa.Table:
        """After the leader died holding our group: where its rows landed, or commit them now."""
        table = self.commitlog.table
        with table.commit_turn(snapshot=False):  # whatever the dead leader was committing has landed, or never will
            paths = self._files_holding(request_id, sent_at)
            if paths is None:  # the log no longer reaches back to the send: every file written since may hold it
                actions = table.view().actions
                since = pc.greater_equal(actions.column("modification_time"), int((sent_at - LOOK_BACK_S) * 1000))
                paths = table.paths(actions.filter(since))
            if paths:
                landed = table.read_arrow(paths=paths, columns=LANDED,
                                          filter=pc.field("uniq_key").isin(rows.column("uniq_key")))
                if landed.num_rows:
                    return _in_order(landed, rows)
            return self._direct(rows, request_id)

    def _files_holding(self, request_id: str, sent_at: float) -> list[str] | None:
        """The data files of the commit whose info names ``request_id`` ([] when no commit since the
        send does), walking the log back from its newest entry; None when an entry is gone first."""
        table = self.commitlog.table
        version = table.view().version
        while version >= 0:
            try:
                entry = entry_actions(table.path, version)
            except (OSError, ValueError):
                return None  # cleaned up (or being written): this walk cannot tell
            info = next((a["commitInfo"] for a in entry if "commitInfo" in a), {})
            if request_id in str(info.get(REQUESTS_INFO, "")).split(","):
                return [os.path.join(table.path, a["add"]["path"]) for a in entry if "add" in a]
            if info.get("timestamp", 0) < (sent_at - LOOK_BACK_S) * 1000:
                return []  # older than the send: the group never landed
            version -= 1
        return []


def _in_order(landed: pa.Table, rows: pa.Table) -> pa.Table:
    """``landed`` (found by uniq key) in the order of the staged ``rows``."""
    at = pc.index_in(rows.column("uniq_key"), landed.column("uniq_key"))
    if at.null_count or landed.num_rows != rows.num_rows:
        raise StoreStateError("commitlog", f"a group's commit holds {landed.num_rows} of its {rows.num_rows} rows")
    return landed.take(at)


class _NotTaken(Exception):
    """The leader is closing: the group was not queued."""


class _Leader:
    """The machine's committer: a lock, a listening socket, one thread per producer process, one committer."""

    def __init__(self, relay: Relay, lock_fd: int, server: socket.socket):
        self.relay, self._lock_fd, self._server = relay, lock_fd, server
        self._clients: set[socket.socket] = set()
        self._guard = threading.Condition()
        self._answering = 0  # requests taken and not yet answered
        self._closing = False
        table = relay.commitlog.table
        self.committer: GroupCommitProducer[_Group, _Group, pa.Table] = GroupCommitProducer(
            self._check, self._append, max_batch=64, name="storelib-relay-committer",
            turn=lambda: table.commit_turn(snapshot=False))
        threading.Thread(target=self._serve, name="storelib-relay-accept", daemon=True).start()

    @classmethod
    def take(cls, relay: Relay) -> "_Leader | None":
        fd = os.open(os.path.join(relay.commitlog.table.path, LEADER_LOCK), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None  # another process leads
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.bind(relay.address)
            server.listen(64)
        except OSError:  # the old leader's socket is not gone yet: lead next time
            server.close()
            os.close(fd)
            return None
        return cls(relay, fd, server)

    def _check(self, group: _Group) -> _Group:
        """A group is taken only while the leader is open, and only with the staged rows' columns (so
        a bad one fails alone, not the commit it would have joined)."""
        if self._closing:
            raise _NotTaken()
        if not group.rows.schema.equals(STAGED_SCHEMA):
            raise StoreStateError("commitlog", "a producer handed rows of another layout to the machine's committer",
                                  value=str(group.rows.schema.names))
        return group

    def _append(self, groups: Sequence[_Group]) -> list[pa.Table]:
        rows = pa.concat_tables([g.rows for g in groups])
        info = {REQUESTS_INFO: ",".join(g.request_id for g in groups)}
        landed = self.relay.commitlog.append_arrow(rows, results="arrow", info=info).landed
        out, at = [], 0
        for g in groups:
            out.append(landed.slice(at, g.rows.num_rows))
            at += g.rows.num_rows
        return out

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            with self._guard:
                if self._closing:
                    client.close()
                    return
                self._clients.add(client)
            threading.Thread(target=self._answer, args=(client,), name="storelib-relay-client", daemon=True).start()

    def _answer(self, client: socket.socket) -> None:
        # Only processes of this user hand groups in (an abstract socket has no file permissions):
        # others' groups are refused untaken, and their producers commit themselves.
        _, uid, _ = struct.unpack("3i", client.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        trusted = uid == os.getuid()
        try:
            while True:
                frame = _receive(client)
                if frame is None or frame[0] != _REQUEST:
                    return
                _, request_id, body = frame
                with self._guard:
                    self._answering += 1
                try:
                    if not trusted:
                        raise _NotTaken()
                    landed = self.committer.send(_Group(request_id, pa.ipc.open_stream(body).read_all()))
                    _send(client, _LANDED_ROWS, request_id, _ipc(landed))
                except _NotTaken:
                    _send(client, _NOT_TAKEN, request_id, b"")
                except StoreError as e:
                    _send(client, _FAILED, request_id, json.dumps(e.to_record(), default=str).encode())
                except Exception as e:  # noqa: BLE001  (the group's producer gets it, typed)
                    record = {"error": "StoreError", "field": None, "reason": f"{type(e).__name__}: {e}"}
                    _send(client, _FAILED, request_id, json.dumps(record).encode())
                finally:
                    with self._guard:
                        self._answering -= 1
                        self._guard.notify_all()
        except OSError:
            return
        finally:
            with self._guard:
                self._clients.discard(client)
            client.close()

    def close(self) -> None:
        """Stop taking groups, commit those taken, answer them, and give the role up."""
        with self._guard:
            self._closing = True
            clients = list(self._clients)
        try:
            self._server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread, so the name is free at once
        except OSError:
            pass
        self._server.close()  # no new producer connects
        self.committer.close()
        with self._guard:  # the groups committed are answered before their connections close
            self._guard.wait_for(lambda: not self._answering, timeout=30)
        for client in clients:  # idle connections: their producers find no leader next time
            try:
                client.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        os.close(self._lock_fd)
        with self.relay._lock:
            self.relay.commits += self.committer.commits
            self.relay.commit_seconds.extend(self.committer.commit_seconds)


_RELAYS: "weakref.WeakKeyDictionary[CommitLog, Relay]" = weakref.WeakKeyDictionary()
_RELAYS_LOCK = threading.Lock()


def _forget_in_child() -> None:
    """A forked child holds copies of its parent's leader lock, socket and connections: let go of them."""
    for relay in list(_RELAYS.values()):
        leader, relay._leader, relay._local, relay._lock = relay._leader, None, threading.local(), threading.Lock()
        if leader is not None:
            leader._server.close()
            os.close(leader._lock_fd)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def relay_for(commitlog: CommitLog) -> Relay:
    """The one :class:`Relay` of this process for ``commitlog``.

    >>> relay_for(store.context.commitlog) is relay_for(store.context.commitlog)
    True
    """
    with _RELAYS_LOCK:
        relay = _RELAYS.get(commitlog)
        if relay is None:
            relay = _RELAYS[commitlog] = Relay(commitlog)
        return relay
