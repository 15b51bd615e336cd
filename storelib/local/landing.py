"""Landed rows: the machine's committer hands each commit's rows to the follower of the same machine.

A commit the relay's leader (:mod:`storelib.local.relay`) makes is in the commitlog once its conditional put
is taken, but in no consume queue until the follower's next round has read it back and committed its
units: on an object store that is most of a message's way from its send to the pull that returns it. So
the leader hands the rows of each commit, as it lands, to the follower's tail server
(:class:`~storelib.local.tail.TailServer`, listening on :func:`landing_address`), which answers pulls of
them at once. RocketMQ does the same: its ReputMessageService wakes the long-polling pulls once a message
is in the consume queue in memory, before any of it is flushed.

Nothing depends on it: rows not handed on (no follower here, a full queue, a slow one) reach the tail by
the follower's rounds, as every other commit's do.

>>> feed = LandedFeed(store.context.tables.commitlog.path)
>>> feed.hand(store.context.tables.commitlog.read_arrow())       # nobody listens: dropped, never waited for
>>> feed.close(); feed.handed
0
"""

from __future__ import annotations

import queue
import threading
import time

import pyarrow as pa

from storelib.local.wire import ANSWER, Client, local_address, pack

__all__ = ["LandedFeed", "landing_address", "LANDED_WAITING"]

#: Commits' rows a feed keeps waiting for its thread at most; past that a commit's are dropped (the
#: follower's rounds bring them).
LANDED_WAITING = 16
#: Seconds the feed waits for the follower to take a commit's rows (a follower busy for a moment still takes
#: them: the commits after wait, in order, rather than being dropped).
_TIMEOUT_S = 5.0
#: Seconds the feed waits, after no follower took a commit's rows, before it looks for one again.
_LOOK_AGAIN_S = 1.0


def landing_address(commitlog_path: str) -> str | None:
    """The socket a follower takes landed rows of a commitlog on, on this machine (None off Linux).

    >>> landing_address("/data/store/commitlog").startswith("\\0storelib-landed-")
    True
    """
    return local_address("landed", commitlog_path)


class LandedFeed:
    """Hands the rows of each commit to the follower listening on :func:`landing_address`, in commit order,
    from a thread of its own (the commits that land while one is handed on go together next): :meth:`hand`
    never waits. A commit's rows go no sooner than ``after_s`` after it landed: the consumers they wake then
    leave the machine's CPU to the producers the commit answered while those send again (the committer's
    regather; with 30 ms on the S3 store, 5,083–5,098 msg/s against 4,972–4,981 handed at once, end to end
    p50 302–303 against 309 ms). Rows are dropped, and counted, where no follower listens or the thread is
    :data:`LANDED_WAITING` commits behind.

    >>> feed = LandedFeed("/tmp/nowhere/commitlog")
    >>> feed.hand(pa.table({"x": [1]})); feed.close()
    >>> feed.handed, feed.dropped
    (0, 1)
    """

    def __init__(self, commitlog_path: str, after_s: float = 0.0):
        self.address = landing_address(commitlog_path)
        self.after_s = after_s
        #: Commits whose rows a follower took, and those dropped.
        self.handed = 0
        self.dropped = 0
        self._waiting: "queue.Queue[tuple[float, pa.Table] | None]" = queue.Queue(LANDED_WAITING)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._client: Client | None = None
        self._down_until = 0.0

    def hand(self, rows: pa.Table) -> None:
        """Hand a commit's rows on (every column of the commitlog, as committed), without waiting."""
        if self.address is None:
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="storelib-landed", daemon=True)
                self._thread.start()
        try:
            self._waiting.put_nowait((time.monotonic(), rows))
        except queue.Full:
            self.dropped += 1

    def close(self) -> None:
        """Hand on what waits, then stop the thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._waiting.put(None)
            thread.join(timeout=2 * _TIMEOUT_S)
        if self._client is not None:
            self._client.close()
            self._client = None

    def _run(self) -> None:
        while (item := self._waiting.get()) is not None:
            at, rows = item
            time.sleep(max(0.0, at + self.after_s - time.monotonic()))
            taken = [rows]  # and every commit that landed while the last was handed on: one hand-off for all
            while len(taken) < LANDED_WAITING and (more := self._take_waiting()) is not None:
                taken.append(more)
            client = self._connected()
            joined = pa.concat_tables(taken) if len(taken) > 1 else rows
            reply = client.call(*pack(rows=joined), timeout=_TIMEOUT_S) if client is not None else None
            if reply is not None and reply[0] == ANSWER:
                self.handed += len(taken)
                continue
            self.dropped += len(taken)
            if client is not None and reply is None:  # the follower is gone or too slow: look again later
                self._client, self._down_until = None, time.monotonic() + _LOOK_AGAIN_S

    def _take_waiting(self) -> pa.Table | None:
        """The next commit's rows already waiting, or None (none, or the feed is closing: put back)."""
        try:
            item = self._waiting.get_nowait()
        except queue.Empty:
            return None
        if item is None:
            self._waiting.put(None)  # the close, for the loop to see after this hand-off
            return None
        return item[1]

    def _connected(self) -> Client | None:
        if self._client is None and time.monotonic() >= self._down_until:
            self._client = Client.connect(self.address, "storelib-landed", reading=False, timeout=_TIMEOUT_S)
            if self._client is None:
                self._down_until = time.monotonic() + _LOOK_AGAIN_S
        return self._client
