"""The machine's committer: the producer processes of one machine hand their groups to one of them.

The first process on a machine to open a producer on a store (local, Linux, ``relay_sends`` on) becomes
the leader and appends every group that arrived during its last commit in one commit; nothing depends
on it for safety. Why, and what happens when it fails, is in ``docs/internals.md``.

>>> from storelib import MessageStore
>>> from storelib.storage.commitlog import EncodedMessage, now_millis
>>> relaying = MessageStore.open(store.root, spark, relay_sends=True)
>>> relay = relay_for(relaying.context.commitlog)
>>> rows = relaying.context.commitlog.stage(
...     [EncodedMessage("TopicTest", 0, 0, 0, b"r", {"UNIQ_KEY": "R1"}, now_millis(), "h:0")])
>>> with relay:
...     relay.commit(rows).column("uniq_key").to_pylist(), relay.leading
(['R1'], True)
>>> relay.leading, relaying.close()                     # its last user gone, the process hands the role on
(False, None)
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
import uuid
import weakref
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from storelib.delta.location import is_local
from storelib.delta.log import entry_actions
from storelib.local.landing import LandedFeed
from storelib.local.wire import (
    ANSWER,
    DECLINED,
    FAILED,
    Client,
    Request,
    Server,
    error_body,
    error_of,
    local_address,
    local_lock_path,
    pack,
    unpack,
)
from storelib.model.errors import StoreStateError
from storelib.send.group_commit import GroupCommitProducer, completed, regather_ms
from storelib.storage.commitlog import LANDED, STAGED_SCHEMA, CommitLog
from storelib.storage.schema import COMMITLOG

try:
    import fcntl
except ImportError:  # pragma: no cover  (not POSIX: no leader)
    fcntl = None  # type: ignore[assignment]

__all__ = ["Relay", "relay_for", "REQUESTS_INFO", "RELAY_IN_FLIGHT"]

log = logging.getLogger(__name__)

#: On an object store, how long a producer whose leader died waits before it looks for its group: a commit the
#: leader sent whole before it died lands meanwhile (the server finishes a request it has), so the group is
#: not committed twice.
REMOTE_RECOVER_WAIT_S = 2.0

#: The hidden file whose ``flock`` makes its holder the machine's committer for a commitlog.
LEADER_LOCK = "_storelib_leader.lock"
#: The commit info key listing the request ids of the groups a leader's commit holds.
REQUESTS_INFO = "storelib.requests"
#: How far back (seconds before a group was sent) a producer looks for it after its leader died: a
#: commit made after the send carries a later time, read from the same machine's clock.
LOOK_BACK_S = 5.0

#: Groups a producer keeps handed on to the leader at once: one in its commit, others waiting to join the
#: next (so a group never waits in its own process for the last one to land). On an object store with 20 ms a
#: request (the online suite, ``--window 24``, the Go server): 2 gave ack p99 586-818 ms, 4 gave 487-543 (five
#: runs) and 8 gave 509 (one), at p50 234-254 ms.
RELAY_IN_FLIGHT = 4


@dataclass(frozen=True)
class Group:
    """A group handed on to the leader: its request id (32 hex digits) and its staged rows."""

    request_id: str
    rows: pa.Table


class NotTaken(Exception):
    """The leader is closing: the group was not queued (its producer commits it itself)."""


class Relay:
    """Where this process's producers commit their groups for one commitlog (see the module docstring).

    ``commit(rows)`` appends staged rows (:data:`~storelib.storage.commitlog.STAGED_SCHEMA`) atomically
    and returns where each landed (:data:`~storelib.storage.commitlog.LANDED` columns, in order).
    Use it as a context manager, or :meth:`acquire` and :meth:`release`: the process leads while it
    holds the role and some producer of it is open.
    """

    def __init__(self, commitlog: CommitLog):
        self.commitlog = commitlog
        self.address = local_address("commit", commitlog.table.path)
        self.enabled = self.address is not None and fcntl is not None and commitlog.config.relay_sends
        self._lock = threading.Lock()
        self._users = 0
        self._leader: _Leader | None = None
        self._order = threading.Lock()  # groups are handed on one at a time, in order
        self._link: _Link | None = None  # the connection to another process's leader
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
        """Append ``rows`` in one atomic commit (shared with other groups where a leader takes it); where each
        row landed."""
        return self.submit(rows).result()

    def submit(self, rows: pa.Table) -> "Future[pa.Table]":
        """Hand ``rows`` on to be appended in one atomic commit; a future of where each row landed.

        Groups land in the order they are handed on, and several may be under way at once: each waits
        at the leader for its next commit, with every other group that arrived meanwhile. Without a
        leader the group is committed here, and the future is done on return.

        >>> from storelib.storage.commitlog import EncodedMessage, now_millis
        >>> relay = relay_for(store.context.commitlog)          # a store without relay_sends: committed here
        >>> rows = store.context.commitlog.stage(
        ...     [EncodedMessage("TopicTest", 0, 0, 0, b"s", {"UNIQ_KEY": "S1"}, now_millis(), "h:0")])
        >>> future = relay.submit(rows)
        >>> future.done(), future.result().column("uniq_key").to_pylist()
        (True, ['S1'])
        """
        if not self.enabled or not rows.num_rows:
            return completed(lambda: self._direct(rows, None))
        request_id = uuid.uuid4().hex
        with self._order:  # one group handed on at a time, after every earlier one is on its way or recovered
            for _ in range(3):
                leader = self._leader
                if leader is None and self._link is None:  # not connected to a leader: lead?
                    leader = self._lead()
                if leader is not None:
                    try:
                        return leader.committer.send_async(Group(request_id, rows))
                    except NotTaken:  # leaving: the groups it took from us land first
                        leader.committer.flush()
                        continue
                link = self._link or self._connect()
                if link is None:
                    break  # no leader reachable
                handed = link.send(request_id, rows)
                if handed is not None:
                    return handed
                link.finished.wait()  # the groups it had under way are settled: then go elsewhere
                self._link = None
        return completed(lambda: self._direct(rows, request_id))

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

    def _connect(self) -> "_Link | None":
        """A connection to the leader of another process; None when there is none."""
        self._link = _Link.connect(self)
        return self._link

    def _recover(self, request_id: str, rows: pa.Table, sent_at: float) -> pa.Table:
        """After the leader died holding our group: where its rows landed, or commit them now."""
        table = self.commitlog.table
        if not is_local(table.path):  # a request the dead leader sent may still be landing (no machine-wide turn)
            time.sleep(REMOTE_RECOVER_WAIT_S)
        with table.commit_turn(snapshot=False):  # whatever the dead leader was committing has landed, or never will
            paths = self._files_holding(request_id, sent_at)
            if paths is None:  # the log no longer reaches back to the send: every file written since may hold it
                actions = table.view().actions
                since = pc.greater_equal(actions.column("modification_time"), int((sent_at - LOOK_BACK_S) * 1000))
                paths = table.paths(actions.filter(since))
            if paths:
                landed = table.read_arrow(
                    paths=paths, columns=LANDED, filter=pc.field("uniq_key").isin(rows.column("uniq_key"))
                )
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
            info: dict[str, Any] = next((a["commitInfo"] for a in entry if "commitInfo" in a), {})
            if request_id in str(info.get(REQUESTS_INFO, "")).split(","):
                return [os.path.join(table.path, a["add"]["path"]) for a in entry if "add" in a]
            if info.get("timestamp", 0) < (sent_at - LOOK_BACK_S) * 1000:
                return []  # older than the send: the group never landed
            version -= 1
        return []


class _Link:
    """This process's connection to the leader (a :class:`~storelib.local.wire.Client`): groups go out in
    order, several at a time. When the leader leaves (declining a group) or dies, the link stops taking
    groups, and once every group under way is answered or the connection is gone, it settles the rest
    in the order they were sent (a group declined is committed here; a lost one is recovered,
    :meth:`Relay._recover`), then the client's ``finished`` is set. A group whose landed rows cannot be
    read is found in the log, as if the leader had died."""

    client: Client

    def __init__(self, relay: Relay):
        self.relay = relay
        self.lock = threading.Lock()
        self.pending: "collections.OrderedDict[str, tuple[Future, pa.Table, float]]" = collections.OrderedDict()
        self.declined: set[str] = set()

    @classmethod
    def connect(cls, relay: Relay) -> "_Link | None":
        """A link to the leader of another process; None when there is none."""
        link = cls(relay)
        client = Client.connect(relay.address, "storelib-relay", ended=link.settle_rest)
        if client is None:
            return None
        link.client = client
        return link

    @property
    def finished(self) -> threading.Event:
        return self.client.finished

    def send(self, request_id: str, rows: pa.Table) -> "Future[pa.Table] | None":
        """Send a group; a future of its landed rows, or None when this link takes no more groups."""
        future: Future = Future()
        with self.lock:  # registered before its answer can be read
            answer = self.client.request(*pack(rows=rows), request_id=request_id)
            if answer is None:
                return None
            self.pending[request_id] = (future, rows, time.time())
        answer.add_done_callback(lambda a: self._answered(request_id, a.result()))
        return future

    def _answered(self, request_id: str, answer: "tuple[bytes, memoryview] | None") -> None:
        if answer is None:
            return  # unanswered: settled with the rest when the connection ends
        kind, body = answer
        with self.lock:
            if kind == DECLINED:  # the leader is leaving: no more groups to it
                self.declined.add(request_id)
                self.client.stop()
                return
            future, rows, sent_at = self.pending.pop(request_id)
        if kind == FAILED:
            try:
                future.set_exception(error_of(body))
            except StoreStateError as e:  # failed all the same: nothing of the group was written
                future.set_exception(
                    StoreStateError(
                        "commitlog", f"the machine's committer failed the group; its error cannot be read: {e.reason}"
                    )
                )
            return
        if kind != ANSWER:
            future.set_exception(
                StoreStateError(
                    "commitlog", f"the machine's committer answered a group with a frame of unknown kind {kind!r}"
                )
            )
            return
        try:
            landed = unpack(body)[1]
            if landed is None:
                raise StoreStateError("commitlog", "the machine's committer answered a group without its rows")
        except StoreStateError as e:  # landed rows unreadable: the log says where the group landed
            log.warning(
                "relay: the rows the leader answered request %s with could not be read (%s); looking "
                "for the group in the log",
                request_id,
                e,
            )
            _settle(future, lambda: self.relay._recover(request_id, rows, sent_at))
            return
        future.set_result(landed)

    def settle_rest(self) -> None:
        """The connection has ended: settle the groups still here, in the order they were sent."""
        with self.lock:
            rest = list(self.pending.items())
            self.pending.clear()
        for request_id, (future, rows, sent_at) in rest:
            if request_id in self.declined:
                _settle(future, lambda: self.relay._direct(rows, request_id))
            else:
                _settle(future, lambda: self.relay._recover(request_id, rows, sent_at))


def _settle(future: Future, outcome: Callable[[], pa.Table]) -> None:
    """Set ``future`` to what ``outcome()`` returns, or to the error it raises (the group's senders get it)."""
    try:
        future.set_result(outcome())
    except Exception as e:  # noqa: BLE001
        future.set_exception(e)


def _in_order(landed: pa.Table, rows: pa.Table) -> pa.Table:
    """``landed`` (found by uniq key) in the order of the staged ``rows``."""
    at = pc.index_in(rows.column("uniq_key"), landed.column("uniq_key"))
    if at.null_count or landed.num_rows != rows.num_rows:
        raise StoreStateError("commitlog", f"a group's commit holds {landed.num_rows} of its {rows.num_rows} rows")
    return landed.take(at)


class _Leader:
    """The machine's committer: a lock, a :class:`~storelib.local.wire.Server` (one thread per producer
    process), one committer."""

    def __init__(self, relay: Relay, lock_fd: int, server: Server):
        self.relay, self._lock_fd, self.server = relay, lock_fd, server
        table = relay.commitlog.table
        self.committer: GroupCommitProducer[Group, Group, pa.Table] = GroupCommitProducer(
            self._check,
            self._append,
            max_batch=64,
            regather_ms=regather_ms(table.path),
            name="storelib-relay-committer",
            turn=table.commit_turn,  # the snapshot brought forward first: groups arriving meanwhile join
        )
        #: Each commit's rows go on to the follower of this machine, if one listens (a pull need not wait
        #: for its round), once the producers the commit answered have had the regather to send again.
        self.landing = LandedFeed(table.path, after_s=regather_ms(table.path) / 1000)
        server.serve(self._take)

    @classmethod
    def take(cls, relay: Relay) -> "_Leader | None":
        fd = os.open(local_lock_path(LEADER_LOCK, relay.commitlog.table.path), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None  # another process leads
        server = Server.bind(relay.address, "storelib-relay") if relay.address is not None else None
        if server is None:  # the old leader's socket is not gone yet: lead next time
            os.close(fd)
            return None
        return cls(relay, fd, server)

    def _check(self, group: Group) -> Group:
        """A group is taken only while the leader is open, and only with the staged rows' columns (so
        a bad one fails alone, not the commit it would have joined)."""
        if self.server.closing:
            raise NotTaken()
        if group.rows is None or not group.rows.schema.equals(STAGED_SCHEMA):
            raise StoreStateError(
                "commitlog",
                "a producer handed rows of another layout to the machine's committer",
                value=str(group.rows.schema.names if group.rows is not None else None),
            )
        return group

    def _append(self, groups: Sequence[Group]) -> list[pa.Table]:
        rows = pa.concat_tables([g.rows for g in groups])
        info = {REQUESTS_INFO: ",".join(g.request_id for g in groups)}
        result = self.relay.commitlog.append_arrow(rows, results="arrow", info=info)
        landed = result.landed
        assert landed is not None and result.written is not None  # results="arrow", and every group has rows
        self.landing.hand(result.written)
        out, at = [], 0
        for g in groups:
            out.append(landed.slice(at, g.rows.num_rows))
            at += g.rows.num_rows
        return out

    def _take(self, request: Request) -> None:
        """A group from another process: answered, as its commit lands, with where its rows landed, its
        typed error, or declined (the leader is leaving: its producer commits it itself)."""
        try:
            handed = self.committer.send_async(Group(request.request_id, unpack(request.body)[1]))
        except Exception as e:  # noqa: BLE001  (not taken, or refused: the group's producer hears it)
            _answer(request, e, None)
            return
        handed.add_done_callback(lambda f: _answer(request, f.exception(), None if f.exception() else f.result()))

    def close(self) -> None:
        """Stop taking groups, commit those taken, answer them, and give the role up."""
        self.server.stop()  # no new producer connects; groups are declined from now on
        self.committer.close()
        self.server.close(wait_s=30)  # the groups committed are answered before their connections end
        self.landing.close()
        os.close(self._lock_fd)
        with self.relay._lock:
            self.relay.commits += self.committer.commits
            self.relay.commit_seconds.extend(self.committer.commit_seconds)


def _answer(request: Request, error: BaseException | None, landed: pa.Table | None) -> None:
    """Answer a group: its landed rows, declined, or its typed error as a record."""
    if isinstance(error, NotTaken):
        request.decline()
    elif error is not None:
        request.answer(FAILED, *error_body(error))
    else:
        request.answer(ANSWER, *pack(rows=landed))


_RELAYS: "weakref.WeakKeyDictionary[CommitLog, Relay]" = weakref.WeakKeyDictionary()
_RELAYS_LOCK = threading.Lock()


def _forget_in_child() -> None:
    """A forked child holds copies of its parent's leader lock, socket and connections: let go of them."""
    for relay in list(_RELAYS.values()):
        leader, relay._leader, relay._link = relay._leader, None, None
        relay._lock, relay._order = threading.Lock(), threading.Lock()
        if leader is not None:
            leader.server.forget()
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
