"""The pop log: what RocketMQ 5's receive, ack and invisibility leave behind, as one Delta table.

A receive (``popMessage``) writes a checkpoint row per message it hands out, saying when the message
becomes receivable again, and the queue's new pop offset; an ack writes a row naming the checkpoint
(by its ``pop_time``); a message given up goes to the DLQ with a row saying so. The rows merge in any
order (:class:`PopState`), and every commit lands as exactly the version after the one its writer read,
so two servers never claim the same message: the loser reads what won and claims again.

>>> log = PopLog(store.context.tables.pop_log)
>>> ck = Checkpoint("GDoc", "TopicTest", 0, 5, 100, 1, pop_time=1_000, invisible_until=31_000)
>>> log.commit([ck.row(), offset_row("GDoc", "TopicTest", 0, 6)]) > 0
True
>>> state = log.state()
>>> state.pop_offset("GDoc", "TopicTest", 0), state.live("GDoc", "TopicTest")[0].queue_offset
(6, 5)
>>> _ = log.commit([ck.ack_row()]); log.state().live("GDoc", "TopicTest")
[]
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Iterable, Sequence

import pyarrow as pa

from storelib.delta.commit import remove_actions
from storelib.delta.log import add_actions
from storelib.delta.table import Table
from storelib.delta.writer import write_files
from storelib.storage.schema import POP_LOG

if TYPE_CHECKING:
    from deltalake import DeltaTable

__all__ = ["Checkpoint", "PopState", "PopLog", "offset_row", "CHECKPOINT", "ACK", "DEAD", "OFFSET"]

CHECKPOINT, ACK, DEAD, OFFSET = 0, 1, 2, 3

QueueKey = tuple[str, str, int]  # (group, topic, queue_id)
MessageKey = tuple[str, str, int, int]  # (group, topic, queue_id, queue_offset)


@dataclass(frozen=True)
class Checkpoint:
    """One received message of a group (RocketMQ's ``PopCheckPoint``, one message each): where it is,
    which delivery attempt it is, when it was received and when it becomes receivable again.

    >>> ck = Checkpoint("G", "T", 1, 7, 700, 2, pop_time=10, invisible_until=40)
    >>> ck.expired(40), ck.expired(39), ck.key
    (True, False, ('G', 'T', 1, 7))
    """

    group: str
    topic: str
    queue_id: int
    queue_offset: int
    commitlog_offset: int
    attempt: int
    pop_time: int
    invisible_until: int

    @property
    def key(self) -> MessageKey:
        return (self.group, self.topic, self.queue_id, self.queue_offset)

    def expired(self, now_ms: int) -> bool:
        """Whether the message is receivable again (its invisible time is over)."""
        return now_ms >= self.invisible_until

    def row(self, kind: int = CHECKPOINT) -> dict:
        """The checkpoint as a row of the pop log (or as an ack or dead-letter row naming it)."""
        return {
            "kind": kind,
            "consumer_group": self.group,
            "topic": self.topic,
            "queue_id": self.queue_id,
            "queue_offset": self.queue_offset,
            "commitlog_offset": self.commitlog_offset,
            "attempt": self.attempt,
            "pop_time": self.pop_time,
            "invisible_until": self.invisible_until,
        }

    def ack_row(self) -> dict:
        return self.row(ACK)

    def dead_row(self) -> dict:
        return self.row(DEAD)

    def again(self, pop_time: int, invisible_until: int, next_attempt: bool = True) -> "Checkpoint":
        """The checkpoint of the same message received again (``next_attempt``), or made invisible anew."""
        return replace(
            self, attempt=self.attempt + int(next_attempt), pop_time=pop_time, invisible_until=invisible_until
        )


def offset_row(group: str, topic: str, queue_id: int, offset: int) -> dict:
    """A row moving a queue's pop offset (the next offset a receive claims) to ``offset``."""
    return {
        "kind": OFFSET,
        "consumer_group": group,
        "topic": topic,
        "queue_id": queue_id,
        "queue_offset": offset,
        "commitlog_offset": -1,
        "attempt": 0,
        "pop_time": 0,
        "invisible_until": 0,
    }


@dataclass
class PopState:
    """The pop log merged: each queue's pop offset and each group's checkpoints not yet acked.

    Rows apply in any order: a checkpoint replaces an older one of the same message (by attempt, then
    receive time); an ack or a dead-letter row ends the checkpoint it names, and names no other.

    >>> s = PopState()
    >>> ck = Checkpoint("G", "T", 0, 3, 30, 1, pop_time=5, invisible_until=9)
    >>> s.apply([ck.ack_row(), ck.row(), offset_row("G", "T", 0, 4)])    # the ack read first: still ends it
    >>> s.live("G", "T"), s.pop_offset("G", "T", 0), s.pop_offset("G", "T", 1)
    ([], 4, None)
    """

    offsets: dict[QueueKey, int] = field(default_factory=dict)
    checkpoints: dict[MessageKey, Checkpoint] = field(default_factory=dict)
    ended: dict[MessageKey, set[int]] = field(default_factory=dict)  # pop_times acked, until their checkpoint is seen

    def apply(self, rows: Iterable[dict]) -> None:
        rows = list(rows)
        for r in rows:
            if r["kind"] == OFFSET:
                queue: QueueKey = (r["consumer_group"], r["topic"], r["queue_id"])
                self.offsets[queue] = max(self.offsets.get(queue, r["queue_offset"]), r["queue_offset"])
            elif r["kind"] == CHECKPOINT:
                ck = Checkpoint(
                    r["consumer_group"],
                    r["topic"],
                    r["queue_id"],
                    r["queue_offset"],
                    r["commitlog_offset"],
                    r["attempt"],
                    r["pop_time"],
                    r["invisible_until"],
                )
                old = self.checkpoints.get(ck.key)
                if old is None or (ck.attempt, ck.pop_time) > (old.attempt, old.pop_time):
                    self.checkpoints[ck.key] = ck
        for r in rows:
            if r["kind"] in (ACK, DEAD):
                key = (r["consumer_group"], r["topic"], r["queue_id"], r["queue_offset"])
                self.ended.setdefault(key, set()).add(r["pop_time"])
        for key in [k for k in self.ended if k in self.checkpoints]:
            if self.checkpoints[key].pop_time in self.ended[key]:
                del self.checkpoints[key]
            # An ack naming an older checkpoint (a handle changed since) ends nothing; either way it is spent.
            del self.ended[key]

    def pop_offset(self, group: str, topic: str, queue_id: int) -> int | None:
        """The queue's next offset to claim for ``group``, or None before the group's first receive of it."""
        return self.offsets.get((group, topic, queue_id))

    def live(self, group: str, topic: str) -> list[Checkpoint]:
        """The group's checkpoints of ``topic`` not acked, by queue and offset."""
        return sorted(
            (ck for (g, t, _, _), ck in self.checkpoints.items() if g == group and t == topic),
            key=lambda ck: (ck.queue_id, ck.queue_offset),
        )

    def find(self, group: str, topic: str, queue_id: int, queue_offset: int) -> Checkpoint | None:
        return self.checkpoints.get((group, topic, queue_id, queue_offset))

    def live_claim(self, group: str, receipt: Checkpoint) -> Checkpoint | None:
        """The live checkpoint ``receipt`` names for ``group``, or None (acked, received again since, another
        group's): what an ack, an invisibility change or a dead-letter may act on.

        >>> s = PopState(); ck = Checkpoint("G", "T", 0, 3, 30, 1, pop_time=5, invisible_until=9); s.apply([ck.row()])
        >>> s.live_claim("G", ck) == ck, s.live_claim("G", ck.again(6, 10)), s.live_claim("H", ck)
        (True, None, None)
        """
        found = self.find(group, receipt.topic, receipt.queue_id, receipt.queue_offset)
        live = found is not None and found.pop_time == receipt.pop_time and receipt.group == group
        return found if live else None

    def rows(self) -> list[dict]:
        """The rows that say all of this state: every live checkpoint and every queue's pop offset."""
        out = [ck.row() for ck in self.checkpoints.values()]
        out.extend(offset_row(g, t, q, o) for (g, t, q), o in self.offsets.items())
        return out


class PopLog:
    """The pop log table: its merged :meth:`state`, and commits as exactly the next version.

    The state is kept warm: :meth:`catch_up` reads only the files added since, and reads everything
    again when files were removed (a compaction by any writer).

    >>> log = PopLog(store.context.tables.pop_log)
    >>> log.catch_up().version() == log.version, log.compact(min_files=10**6)
    (True, (0, 0))
    >>> log.forget(); log.version
    -1
    """

    def __init__(self, table: Table, target_file_size: int = 64 << 20):
        self.table = table
        self.target_file_size = target_file_size
        self._state = PopState()
        self._files: set[str] = set()
        self._version = -1
        self._ensured = False

    @property
    def version(self) -> int:
        """The table version the state stands at."""
        return self._version

    def state(self) -> PopState:
        """The merged state at the table's newest version."""
        self.catch_up()
        return self._state

    @property
    def files(self) -> int:
        """Data files in the table as the state knows it (what makes a :meth:`compact` due)."""
        return len(self._files)

    @property
    def current(self) -> PopState:
        """The merged state as the last :meth:`catch_up` or commit left it (no look at the table)."""
        return self._state

    def catch_up(self, snapshot: "DeltaTable | None" = None) -> "DeltaTable":
        """Bring the state to ``snapshot`` (default: the newest); return the snapshot it stands at."""
        if not self._ensured:
            self.table.ensure()
            self._ensured = True
        dt = snapshot if snapshot is not None else self.table.snapshot()
        if dt.version() == self._version:
            return dt
        actions = add_actions(dt)
        paths = set(actions.column("path").to_pylist())
        if not self._files <= paths:  # files removed: a compaction rewrote the rows; merge them all again
            self._state, self._files = PopState(), set()
        new = sorted(paths - self._files)
        if new:
            self._state.apply(self.table.read_arrow(paths=[self.table.path_of(p) for p in new]).to_pylist())
        self._files |= paths
        self._version = dt.version()
        return dt

    def commit(
        self,
        rows: Sequence[dict],
        snapshot: "DeltaTable | None" = None,
        operation: str = "POP",
        *,
        applied: bool = False,
    ) -> int:
        """Commit ``rows`` as exactly the version after ``snapshot`` (default: the state's), or raise
        :class:`~storelib.delta.commit.CommitConflict`; the state then includes them (``applied``: the
        caller applied them to :meth:`state` already, and must :meth:`forget` it if this raises)."""
        dt = snapshot if snapshot is not None else self.catch_up()
        data = pa.Table.from_pylist(list(rows), schema=POP_LOG.arrow)
        files = write_files(self.table, data, prefix="pop", target_file_size=self.target_file_size, clustered=False)
        version = self.table.commit(dt, files, operation=operation)
        if dt.version() == self._version:  # nothing between: the rows are all that changed
            if not applied:
                self._state.apply(rows)
            self._files |= {f.path for f in files}
            self._version = version
        elif applied:
            self.forget()
        return version

    def forget(self) -> None:
        """Drop the merged state: the next :meth:`catch_up` reads the whole table again."""
        self._state, self._files, self._version = PopState(), set(), -1

    def compact(self, min_files: int = 64, snapshot: "DeltaTable | None" = None) -> tuple[int, int]:
        """Rewrite the state's rows (live checkpoints and pop offsets) as one file, removing the table's
        files, when it has at least ``min_files``; (files removed, files added), (0, 0) when not due.
        Raises :class:`~storelib.delta.commit.CommitConflict` when another commit landed first."""
        if self._version >= 0 and len(self._files) < max(2, min_files):
            return 0, 0  # not due as far as this handle knows: no look at the table
        dt = self.catch_up(snapshot)
        actions = add_actions(dt)
        if actions.num_rows < max(2, min_files):
            return 0, 0
        data = pa.Table.from_pylist(self._state.rows(), schema=POP_LOG.arrow)
        files = write_files(self.table, data, prefix="pop-compact", target_file_size=self.target_file_size)
        self.table.commit(dt, files, removes=remove_actions(actions, data_change=False), operation="POP_COMPACT")
        self.forget()  # read again: the folder changed under the state
        return actions.num_rows, len(files)
