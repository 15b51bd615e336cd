"""Pop consumption (RocketMQ 5's SimpleConsumer): receive, ack, change invisibility, give up to the DLQ.

A receive claims messages of a topic's queues for a group and makes them invisible for a while; an
ack ends the claim; a claim not acked in time makes the message receivable again with its delivery
attempt raised, and past the group's attempts it goes to the group's DLQ. RocketMQ writes such
messages to a retry topic; here they are received again from where they are, which the client sees
alike (same message id, delivery attempt + 1). Claims and acks are rows of the pop log
(:mod:`storelib.storage.pop_log`), each commit exactly the next version: nothing is held in memory only.

>>> pop = PopService(store.context)
>>> got = pop.receive("GroupPop", "TopicTest", 32, invisible_ms=30_000)
>>> [(g.message.msg_id == r.msg_id, g.checkpoint.attempt) for g in got]
[(True, 1)]
>>> pop.receive("GroupPop", "TopicTest", 32, invisible_ms=30_000)          # invisible now
[]
>>> pop.ack("GroupPop", [got[0].checkpoint])
[True]
"""

from __future__ import annotations

import logging
import random
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from storelib.consume.get_message import get_message
from storelib.consume.pull import PullFilter, PullMessageProcessor, PullRequest
from storelib.consume.retry import send_back
from storelib.context import StoreContext
from storelib.delta.commit import CommitConflict
from storelib.filter.selector import MessageSelector
from storelib.model.errors import ConcurrentWriteError, StoreError
from storelib.model.message import StoredMessage
from storelib.model.timestamps import now_ms
from storelib.storage.commitlog_reads import read_messages
from storelib.storage.consume_queue import min_queue_marker, queue_offsets
from storelib.storage.pop_log import OFFSET, Checkpoint, PopLog, PopState, offset_row

__all__ = ["PopService", "Received"]

log = logging.getLogger("storelib.consume.pop")

#: Commit attempts before a batch of receives and acks gives way (other servers took the versions).
_ATTEMPTS = 30
#: Files in the pop log that make the next committer compact it.
COMPACT_FILES = 200
#: How often the pop offsets moved are committed as consumer offsets (what consumer lag reads), in seconds.
OFFSETS_EVERY_S = 1.0
#: How often a held receive looks again when nothing woke it (other machines dispatch, claims expire).
LOOK_AGAIN_S = 0.1


@dataclass(frozen=True)
class Received:
    """A message a receive handed out, with the checkpoint that names it (its receipt).

    >>> got = PopService(store.context).receive("GroupPopDoc", "TopicTest", 1, invisible_ms=1000)
    >>> got[0].delivery_attempt
    1
    """

    message: StoredMessage
    checkpoint: Checkpoint

    @property
    def delivery_attempt(self) -> int:
        return self.checkpoint.attempt


Step = Callable[[PopState, int], tuple[list[dict], Any]]


class PopService:
    """Receives, acks and invisibility changes of every group, for one process.

    Concurrent calls share commits: the first caller to find no commit under way commits every step
    queued so far (each step sees the ones before it), then hands the results out.

    >>> pop = PopService(store.context)
    >>> (got,) = pop.receive("GroupPopDoc2", "TopicTest", 1, invisible_ms=60_000)
    >>> renewed = pop.change_invisible("GroupPopDoc2", got.checkpoint, 1_000)
    >>> [ck.pop_time for ck in pop.live("GroupPopDoc2", "TopicTest")] == [renewed.pop_time]
    True
    >>> pop.to_dead_letter("GroupPopDoc2", renewed), pop.live("GroupPopDoc2", "TopicTest")
    (True, [])
    """

    def __init__(self, ctx: StoreContext):
        self.ctx = ctx
        self.log = PopLog(ctx.tables.pop_log, ctx.config.target_file_size)
        self._pulls = PullMessageProcessor(ctx)
        self._cond = threading.Lock()  # guards the queue of steps and who leads
        self._queue: list[tuple[Step, Future]] = []
        self._leading = False
        self._rotation = random.randrange(1 << 16)
        self._moved: dict[str, dict[tuple[str, int], int]] = {}  # pop offsets not yet committed as consumer offsets
        self._offsets_committed = 0.0

    # ---- what clients ask ----------------------------------------------------------------------
    def receive(
        self,
        group: str,
        topic: str,
        max_msgs: int,
        invisible_ms: int,
        selector: MessageSelector | None = None,
        *,
        fifo: bool = False,
        wait_ms: int = 0,
        max_attempts: int | None = None,
        waiting: Callable[[], bool] | None = None,
    ) -> list[Received]:
        """Up to ``max_msgs`` messages of ``topic`` for ``group`` (``popMessage``), invisible to the
        group for ``invisible_ms``; waits up to ``wait_ms`` for one (long polling). ``fifo``: a queue
        with a message in flight hands out nothing more until it is acked or visible again, so each
        message group is consumed in order. ``waiting``: asked between looks; the wait ends when it says
        no (the caller went away, the server stops). Raises what a pull's checks raise (topic, group, filter)."""
        selector = selector or MessageSelector.by_tag("*")  # a receive carries its filter, as a pull may
        message_filter = self._pulls.check(PullRequest(group, topic, 0, 0, max_msgs, selector))
        if max_attempts is None:
            max_attempts = self.ctx.groups.find(group).retry_max_times + 1
        deadline = time.monotonic() + wait_ms / 1000
        cq = self.ctx.tables.consume_queue
        while True:
            seen, version = self.ctx.arrivals.generation, cq.view().version
            next_due: list[int] = []
            got = self._run(
                lambda state, now: self._claim(
                    state, now, group, topic, max_msgs, invisible_ms, message_filter, fifo, max_attempts, next_due
                )
            )
            # Nothing to hand out: look again only once something may have changed (a dispatch here or by
            # another process, a claim's invisible time over), not on every tick of the wait.
            while not got:
                left = deadline - time.monotonic()
                if left <= 0 or (waiting is not None and not waiting()):
                    return got
                self.ctx.arrivals.wait(seen, min(left, LOOK_AGAIN_S))
                if (
                    self.ctx.arrivals.generation != seen
                    or cq.view().version != version
                    or (next_due and now_ms() >= next_due[0])
                ):
                    break
            if got:
                return got

    def ack(self, group: str, receipts: Sequence[Checkpoint]) -> list[bool]:
        """Ack received messages (``ackMessage``): for each, whether its claim was live and is now
        ended (False: acked before, or received again since under a newer receipt)."""

        def step(state: PopState, now: int) -> tuple[list[dict], list[bool]]:
            rows, out = [], []
            for r in receipts:
                found = state.live_claim(group, r)
                out.append(found is not None)
                if found is not None:
                    rows.append(found.ack_row())
                    state.apply([rows[-1]])
            return rows, out

        return self._run(step)

    def change_invisible(self, group: str, receipt: Checkpoint, invisible_ms: int) -> Checkpoint | None:
        """Make a received message invisible for ``invisible_ms`` from now (``changeInvisibleTime``): its
        new receipt, or None when the receipt is not live (acked, or received again since)."""

        def step(state: PopState, now: int) -> tuple[list[dict], Checkpoint | None]:
            found = state.live_claim(group, receipt)
            if found is None:
                return [], None
            renewed = found.again(max(now, found.pop_time + 1), now + invisible_ms, next_attempt=False)
            rows = [found.ack_row(), renewed.row()]
            state.apply(rows)
            return rows, renewed

        return self._run(step)

    def to_dead_letter(self, group: str, receipt: Checkpoint) -> bool:
        """Send a received message to the group's DLQ and end its claim (``forwardMessageToDeadLetterQueue``);
        False when the receipt is not live."""

        def step(state: PopState, now: int) -> tuple[list[dict], bool]:
            found = state.live_claim(group, receipt)
            if found is None:
                return [], False
            self._bury([found], group)
            rows = [found.dead_row()]
            state.apply(rows)
            return rows, True

        return self._run(step)

    def live(self, group: str, topic: str) -> list[Checkpoint]:
        """The group's receipts of ``topic`` not yet acked (in flight or due again)."""
        return self._run(lambda state, now: ([], state.live(group, topic)))

    # ---- one receive's claim ------------------------------------------------------------------
    def _claim(
        self,
        state: PopState,
        now: int,
        group: str,
        topic: str,
        max_msgs: int,
        invisible_ms: int,
        message_filter: PullFilter,
        fifo: bool,
        max_attempts: int,
        next_due: list[int] | None = None,
    ) -> tuple[list[dict], list[Received]]:
        """One receive's claim on the state; ``next_due`` gets when the earliest claim still invisible ends."""
        rows: list[dict] = []
        claimed: list[Checkpoint] = []
        messages: dict[int, StoredMessage] = {}
        live = state.live(group, topic)
        due = [ck for ck in live if ck.expired(now)]
        if next_due is not None:
            next_due[:] = [min((ck.invisible_until for ck in live if not ck.expired(now)), default=2**62)]
        busy = {ck.queue_id for ck in live} if fifo else set()
        dead = [ck for ck in due if ck.attempt >= max_attempts]
        if dead:
            self._bury(dead, group)
            rows.extend(ck.dead_row() for ck in dead)
        for ck in [ck for ck in due if ck.attempt < max_attempts][:max_msgs]:
            claimed.append(ck.again(now, now + invisible_ms))
        if claimed:
            table = self.ctx.tables.commitlog
            messages.update(read_messages(table, table.view().actions, [ck.commitlog_offset for ck in claimed]))
        queues = self.ctx.topics.get(topic).read_queue_nums
        cq = self.ctx.tables.consume_queue
        view = cq.view(markers=[min_queue_marker(topic, q) for q in range(queues)])
        self._rotation += 1
        for i in range(queues):
            if len(claimed) >= max_msgs:
                break
            queue_id = (self._rotation + i) % queues
            if queue_id in busy:
                continue
            offset = state.pop_offset(group, topic, queue_id)
            if offset is None:
                offset = max(0, self.ctx.offsets.query(group, topic, queue_id))
            if offset == queue_offsets(cq, view, topic, queue_id)[1]:
                continue  # caught up: nothing dispatched past the pop offset (no read of the queue)
            for _ in range(2):  # a second look when the first only corrected the offset
                got = get_message(self.ctx, group, topic, queue_id, offset, max_msgs - len(claimed), message_filter)
                kept = message_filter.client_kept(got.messages)
                for m in kept:
                    ck = Checkpoint(
                        group, topic, queue_id, m.queue_offset, m.commitlog_offset, 1, now, now + invisible_ms
                    )
                    claimed.append(ck)
                    messages[m.commitlog_offset] = m
                moved = got.next_begin_offset != offset
                if moved:
                    rows.append(offset_row(group, topic, queue_id, got.next_begin_offset))
                    offset = got.next_begin_offset
                if got.messages or not moved:
                    break
        received = [Received(messages[ck.commitlog_offset], ck) for ck in claimed if ck.commitlog_offset in messages]
        lost = [ck for ck in claimed if ck.commitlog_offset not in messages]  # removed by retention meanwhile
        rows.extend(ck.row() for ck in claimed if ck.commitlog_offset in messages)
        rows.extend(ck.dead_row() for ck in lost if ck.attempt > 1)
        state.apply(rows)
        return rows, received

    def _bury(self, checkpoints: Sequence[Checkpoint], group: str) -> None:
        table = self.ctx.tables.commitlog
        found = read_messages(table, table.view().actions, [ck.commitlog_offset for ck in checkpoints])
        for ck in checkpoints:
            message = found.get(ck.commitlog_offset)
            if message is not None:
                send_back(self.ctx, message, group, -1)

    # ---- group commit of steps ----------------------------------------------------------------
    def _run(self, step: Step) -> Any:
        future: Future = Future()
        with self._cond:
            self._queue.append((step, future))
            if self._leading:
                lead = False
            else:
                self._leading = lead = True
        if lead:
            try:
                while True:
                    with self._cond:
                        batch, self._queue = self._queue, []
                        if not batch:
                            self._leading = False
                            break
                    self._commit(batch)
            except BaseException:
                with self._cond:
                    self._leading = False
                raise
        return future.result()

    def _commit(self, batch: list[tuple[Step, Future]]) -> None:
        try:
            results = self._attempts(batch)
        except BaseException as e:  # noqa: BLE001  (every caller of the batch gets it)
            self.log.forget()
            for _, future in batch:
                future.set_exception(e)
            return
        for future, result, error in results:
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

    def _attempts(self, batch: list[tuple[Step, Future]]) -> list[tuple[Future, Any, BaseException | None]]:
        for attempt in range(_ATTEMPTS):
            try:
                # the machine's turn (other endpoints here queue rather than conflict) and its warm snapshot
                with self.log.table.commit_turn() as dt:
                    assert dt is not None  # commit_turn() yields one
                    self.log.catch_up(dt)
                    results, rows = self._steps(batch, self.log.current, now_ms())
                    if not rows:
                        self._commit_offsets(rows)  # a receive waiting for messages still commits what moved
                        return results
                    self.log.commit(rows, dt, applied=True)
            except CommitConflict:
                self.log.forget()  # the steps changed the state: read it again, then run them again
                time.sleep(min(0.2, 0.002 * 2**attempt) * random.uniform(0.5, 1.5))
                continue
            self._compact()
            self._commit_offsets(rows)
            return results
        raise ConcurrentWriteError("pop_log", f"other servers won {_ATTEMPTS} commits in a row")

    @staticmethod
    def _steps(
        batch: list[tuple[Step, Future]], state: PopState, now: int
    ) -> tuple[list[tuple[Future, Any, BaseException | None]], list[dict]]:
        """Run each step of a batch on the state (each sees the ones before it): their results and rows."""
        rows: list[dict] = []
        results: list[tuple[Future, Any, BaseException | None]] = []
        for step, future in batch:
            try:
                more, result = step(state, now)
            except Exception as e:  # noqa: BLE001  (the step's caller gets it)
                results.append((future, None, e))
                continue
            rows.extend(more)
            results.append((future, result, None))
        return results, rows

    def _commit_offsets(self, rows: list[dict]) -> None:
        """The pop offsets moved, committed as the groups' consumer offsets at most every :data:`OFFSETS_EVERY_S`
        (RocketMQ's pop commits a queue's consumer offset as it pops), so consumer lag counts what no receive
        has taken yet."""
        for r in rows:
            if r["kind"] == OFFSET:
                self._moved.setdefault(r["consumer_group"], {})[(r["topic"], r["queue_id"])] = r["queue_offset"]
        now = time.monotonic()
        if not self._moved or now - self._offsets_committed < OFFSETS_EVERY_S:
            return
        moved, self._moved, self._offsets_committed = self._moved, {}, now
        for group, entries in moved.items():
            try:
                self.ctx.offsets.commit_many(group, entries)
            except StoreError as e:  # the pop log holds the truth; the next receive's commit tries again
                log.warning("consumer offsets of %s after a receive: %s", group, e)
                self._moved.setdefault(group, {}).update(entries)

    def _compact(self) -> None:
        if self.log.files < COMPACT_FILES:
            return
        try:
            with self.log.table.commit_turn() as dt:
                self.log.compact(COMPACT_FILES, dt)
        except (CommitConflict, StoreError):  # another writer landed first: the next commit tries again
            self.log.forget()
