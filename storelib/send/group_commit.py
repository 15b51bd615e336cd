"""Group commit: sends from many threads of one process share one commitlog commit.

:class:`GroupCommitProducer` checks and encodes each message in its caller's thread, and one committer
thread appends everything queued so far in a single atomic commit, as RocketMQ's ``GroupCommitService``
serves every request of one flush. Ordering and handing groups on are in ``docs/internals.md``.

>>> sent = []
>>> def append(encoded):                 # what a commit does with a group; here, remember it
...     sent.append(list(encoded)); return [f"result of {e}" for e in encoded]
>>> with GroupCommitProducer(lambda m: m.upper(), append, linger_ms=0) as p:
...     p.send("a")
'result of A'
>>> sent
[['A']]
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from concurrent.futures import Future
from typing import Callable, ContextManager, Generic, Sequence, TypeVar

from storelib.delta.location import is_local
from storelib.model.errors import ConfigError, StoreStateError, translate_external

__all__ = ["GroupCommitProducer", "completed", "then"]

M = TypeVar("M")
E = TypeVar("E")
R = TypeVar("R")
T = TypeVar("T")


def completed(call: Callable[[], R]) -> "Future[R]":
    """A future already holding ``call()``'s result, or its error (a group committed where it was handed on).

    >>> completed(lambda: 7).result(), type(completed(lambda: 1 / 0).exception()).__name__
    (7, 'ZeroDivisionError')
    """
    future: Future = Future()
    try:
        future.set_result(call())
    except Exception as e:  # noqa: BLE001  (the future carries it)
        future.set_exception(e)
    return future


def then(future: "Future[T]", call: Callable[[T], R]) -> "Future[R]":
    """A future of ``call(future.result())`` (or of ``future``'s error), done when ``future`` is.

    >>> f = Future(); g = then(f, len); f.set_result("abc"); g.result()
    3
    """
    out: Future = Future()

    def done(f: Future) -> None:
        try:
            out.set_result(call(f.result()))
        except Exception as e:  # noqa: BLE001  (the future carries it)
            out.set_exception(e)

    future.add_done_callback(done)
    return out


#: The ``regather_ms`` of a committer to an object store. There a commit that kept its snapshot takes the next
#: group with no look at the log first (:data:`storelib.delta.turn.KEPT_S`); that look (three requests) was
#: the time in which the senders a commit answered sent again and their groups reached the committer (tens of
#: milliseconds, across processes). Without a wait they missed the next commit: ack p50 385 ms against 263 at
#: ``--window 24``; with 30 ms, 234-254 ms; 15 ms: 278 ms, 45 ms: 248 ms (the online suite on the Go server,
#: 20 ms a request, four groups in flight a producer).
REMOTE_REGATHER_MS = 30


def regather_ms(path: str) -> int:
    """The ``regather_ms`` of a committer to the table at ``path``: :data:`REMOTE_REGATHER_MS` on an object store,
    none on local disk (there a turn still looks at the log first, which takes no time to speak of).

    >>> regather_ms("s3://bucket/store/commitlog"), regather_ms("/data/store/commitlog")
    (30, 0)
    """
    return 0 if is_local(path) else REMOTE_REGATHER_MS


class GroupCommitProducer(Generic[M, E, R]):
    """Thread-safe sends grouped into shared commits: ``encode`` checks one message in the caller's
    thread, ``append`` commits a group atomically and returns one result per message, in order.

    ``linger_ms`` is how long a group waits for more messages after its first (0: commit whatever is
    queued as soon as the committer is free, so batching comes only from concurrency, with no added
    latency); ``max_batch`` caps a group. ``turn`` is a lock shared with other writers (the table's
    :meth:`~storelib.delta.table.Table.commit_turn`): the group is taken only once the turn is held,
    so everything sent while other writers commit joins it. ``submit`` replaces ``append`` with a
    call that hands a group on and returns a future of its results (they must land in the order
    handed on); up to ``in_flight`` groups are then under way at once. ``regather_ms``: after a commit of
    more than one caller, the next group is taken no sooner than this after they were answered, so that
    those who send again at once join it rather than the one after it (0: no wait; a lone sender, or one
    after a quiet spell, never waits).

    >>> p = GroupCommitProducer(lambda m: m, lambda group: [len(group)] * len(group), linger_ms=50)
    >>> futures = [p.send_async(i) for i in range(5)]       # all five queued within the linger
    >>> [f.result() for f in futures], p.commits
    ([5, 5, 5, 5, 5], 1)
    >>> p.close(); p.send(1)
    Traceback (most recent call last):
    ...
    storelib.model.errors.StoreStateError: producer: is closed; make a new one with store.producer()
    >>> from concurrent.futures import ThreadPoolExecutor
    >>> with ThreadPoolExecutor(1) as pool, GroupCommitProducer(
    ...         lambda m: m, None, submit=lambda group: pool.submit(lambda: [sum(group)] * len(group)),
    ...         in_flight=2) as q:
    ...     q.send(3)
    3
    """

    def __init__(
        self,
        encode: Callable[[M], E],
        append: Callable[[Sequence[E]], Sequence[R]] | None,
        *,
        linger_ms: int = 0,
        max_batch: int = 1000,
        name: str = "storelib-group-commit",
        turn: Callable[[], ContextManager[object]] = contextlib.nullcontext,
        on_close: Callable[[], None] | None = None,
        submit: Callable[[Sequence[E]], "Future[Sequence[R]]"] | None = None,
        in_flight: int = 1,
        regather_ms: int = 0,
    ):
        for field, value, low in (
            ("linger_ms", linger_ms, 0),
            ("regather_ms", regather_ms, 0),
            ("max_batch", max_batch, 1),
            ("in_flight", in_flight, 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ConfigError(field, f"must be an integer >= {low}", value=value)
        if (append is None) == (submit is None):
            raise ConfigError("append", "give exactly one of append and submit", value=None)
        self._encode = encode
        self._append = translate_external(append) if append is not None else None
        self._submit = translate_external(submit) if submit is not None else None
        self.in_flight = in_flight if submit is not None else 1
        self.linger_s, self.max_batch, self._turn, self._on_close = linger_ms / 1000, max_batch, turn, on_close
        self.regather_s = regather_ms / 1000
        self._landed = -1e9  # when the last commit's callers were answered (monotonic) ...
        self._answered = 0  # ... and how many they were
        self._queue: list[tuple[E, Future]] = []
        self._cond = threading.Condition()
        self._closed = False
        self._busy = 0  # groups taken and not yet settled
        #: Commits made, and messages committed (for tests and benchmarks) ...
        self.commits = 0
        self.committed = 0
        #: ... and (monotonic time it landed, seconds it took) of the latest commits.
        self.commit_seconds: "collections.deque[tuple[float, float]]" = collections.deque(maxlen=65536)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ---- the callers' side -----------------------------------------------------------------
    def send_async(self, message: M) -> "Future[R]":
        """Check and encode ``message`` now (a bad one raises here), queue it, and return a future of its result."""
        encoded = self._encode(message)
        future: Future = Future()
        with self._cond:
            if self._closed:
                raise StoreStateError("producer", "is closed; make a new one with store.producer()")
            self._queue.append((encoded, future))
            self._cond.notify_all()
        return future

    def send(self, message: M) -> R:
        """Send ``message`` and wait until the commit holding it lands; its result, or the commit's error."""
        return self.send_async(message).result()

    def flush(self) -> None:
        """Wait until everything queued before this call is committed (or failed)."""
        with self._cond:
            self._cond.wait_for(lambda: not self._queue and not self._busy)

    def close(self) -> None:
        """Commit what is queued, then stop the committer (and call ``on_close`` once); later sends
        raise :class:`StoreStateError`."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            on_close, self._on_close = self._on_close, None
        if threading.current_thread() is not self._thread:
            self._thread.join()
        if on_close is not None:
            on_close()

    def __enter__(self) -> "GroupCommitProducer[M, E, R]":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- the committer -----------------------------------------------------------------------
    def _wait(self) -> bool:
        """Wait for a first message (and the linger after it, or the regathering after the last commit); False
        once closed with nothing queued."""
        with self._cond:
            self._cond.wait_for(lambda: self._queue or self._closed)
            if not self._queue:
                return False
            if self.linger_s and len(self._queue) < self.max_batch and not self._closed:
                deadline = time.monotonic() + self.linger_s
                self._cond.wait_for(
                    lambda: len(self._queue) >= self.max_batch or self._closed,
                    timeout=max(0.0, deadline - time.monotonic()),
                )
            if self._answered > 1 and self._landed + self.regather_s > time.monotonic():  # for those answered
                self._cond.wait_for(
                    lambda: len(self._queue) >= self.max_batch or self._closed,
                    timeout=max(0.0, self._landed + self.regather_s - time.monotonic()),
                )
            return True

    def _take(self) -> list[tuple[E, Future]]:
        with self._cond:
            group, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
            self._busy += 1
            return group

    def _run(self) -> None:
        while self._wait():
            with self._cond:  # at most in_flight groups under way (1 without submit: the last has settled)
                self._cond.wait_for(lambda: self._busy < self.in_flight)
            group: list[tuple[E, Future]] = []
            try:
                with self._turn():
                    group = self._take()
                    began = time.monotonic()
                    encoded = [e for e, _ in group]
                    if self._submit is not None:
                        handed = self._submit(encoded)
                        handed.add_done_callback(
                            lambda f, g=group, b=began: self._settle(
                                g, b, f.exception(), None if f.exception() else f.result()
                            )
                        )
                        continue
                    assert self._append is not None  # exactly one of append and submit
                    results = self._append(encoded)
            except Exception as e:  # noqa: BLE001  (every caller of the group gets the commit's error)
                if not group:  # the turn itself failed: fail what is queued
                    group = self._take()
                self._settle(group, 0.0, e, None)
                continue
            self._settle(group, began, None, results)
        with self._cond:  # closed: the groups handed on land before the committer stops
            self._cond.wait_for(lambda: not self._busy)

    def _settle(
        self, group: list[tuple[E, Future]], began: float, error: BaseException | None, results: "Sequence[R] | None"
    ) -> None:
        """Give each caller of ``group`` its result, or the commit's error."""
        landed = time.monotonic()
        if error is None and (results is None or len(results) != len(group)):  # never leave a caller waiting
            error = StoreStateError(
                "producer", f"a commit answered {len(results or ())} results for {len(group)} sends"
            )
        for i, (_, future) in enumerate(group):
            if error is not None:
                future.set_exception(error)
            else:
                assert results is not None  # checked above: one per send
                future.set_result(results[i])
        with self._cond:
            self._landed, self._answered = time.monotonic(), len(group)  # answered: from now on they send again
            if error is None:
                self.commits += 1
                self.committed += len(group)
                self.commit_seconds.append((landed, landed - began))
            self._busy -= 1
            self._cond.notify_all()
