"""The tails a follower keeps: each queue's newest units and their messages, within ``tail_pulls_max_mb``.

A :class:`TailServer <storelib.local.tail.TailServer>` answers pulls from them; past the budget, the tails
of the queues pulled least recently go first (:meth:`Tails.trim`).

>>> units = pa.table({"queue_offset": [5, 6], "commitlog_offset": [0, 10], "size": [10, 10], "tags_code": [1, 1]})
>>> Tail(units, pa.table({"msg_id": ["A", "B"]})).nbytes
84
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Tail", "Tails", "by_queue", "TAIL_UNITS", "UNIT_BYTES", "MAX_CHUNKS"]

#: Units (with their messages) the follower keeps of each queue it was asked for (a quarter of them when
#: first asked; up to a quarter more between two cuts): a consumer further behind reads the tables itself.
TAIL_UNITS = 4_096
#: Bytes a tail counts for a unit beyond its message's stored size: its four columns.
UNIT_BYTES = 32
#: Chunks a tail's columns may have before they are joined into one (a concatenation, a slice and a read
#: cost per chunk: a tail grown by a few units a commit reaches hundreds of them).
MAX_CHUNKS = 32


def _held(units: pa.Table) -> int:
    """The bytes a tail counts for ``units`` (a table's own ``nbytes`` costs per chunk and per column: 1.3 ms
    for a tail of 42 chunks, measured; a sum of the stored sizes costs a few microseconds)."""
    return int(pc.sum(units.column("size")).as_py() or 0) + UNIT_BYTES * units.num_rows


class Tail:
    """One queue's tail: its units of queue offsets ``[start, end)``, contiguous (at least one), and the
    message of each, row by row; ``nbytes`` they count for (:func:`_held`).

    >>> units = pa.table({"queue_offset": [7, 8, 9], "size": [100, 100, 100]})
    >>> tail = Tail(units, pa.table({"body": [b"a", b"b", b"c"]}))
    >>> tail.start, tail.end, tail.nbytes
    (7, 10, 396)
    """

    __slots__ = ("units", "messages", "start", "end", "nbytes")

    def __init__(self, units: pa.Table, messages: pa.Table, nbytes: int | None = None):
        self.units, self.messages = units, messages
        self.end = units.column("queue_offset")[units.num_rows - 1].as_py() + 1
        self.start = self.end - units.num_rows
        self.nbytes = _held(units) if nbytes is None else nbytes

    def extended(self, units: pa.Table, messages: pa.Table) -> "Tail":
        """The tail with these units and messages after its own (a chunk more: nothing is copied). Past a
        quarter more than :data:`TAIL_UNITS`, it is cut back to them, in one chunk (a slice costs per chunk).

        >>> t = Tail(pa.table({"queue_offset": [1], "size": [100]}), pa.table({"body": [b"a"]}))
        >>> longer = t.extended(pa.table({"queue_offset": [2], "size": [150]}), pa.table({"body": [b"b"]}))
        >>> longer.messages.column(0).to_pylist(), longer.nbytes
        ([b'a', b'b'], 314)
        """
        nbytes = self.nbytes + _held(units)
        if units.schema != self.units.schema or messages.schema != self.messages.schema:
            # from another source (a table's files, a round, landed rows): joined in the tail's own layout
            units, messages = units.cast(self.units.schema), messages.cast(self.messages.schema)
        units, messages = pa.concat_tables([self.units, units]), pa.concat_tables([self.messages, messages])
        if units.num_rows > TAIL_UNITS * 5 // 4:
            cut = units.num_rows - TAIL_UNITS
            return Tail(units.slice(cut).combine_chunks(), messages.slice(cut).combine_chunks())
        if units.column(0).num_chunks > MAX_CHUNKS:  # every step costs per chunk: joined now and then
            return Tail(units.combine_chunks(), messages.combine_chunks(), nbytes)
        return Tail(units, messages, nbytes)


class Tails(dict):
    """Tails by ``(topic, queue_id)``, with the bytes they hold (``nbytes``); :meth:`trim` keeps them within
    ``budget`` bytes. Units landed past a tail's end wait ``ahead`` of it (:meth:`land`) until it reaches them.

    >>> tails = Tails(budget=1)
    >>> tails[("T", 0)] = Tail(pa.table({"queue_offset": [0], "size": [90]}), pa.table({"body": [b"x"]}))
    >>> tails.trim(lambda key: 0.0), len(tails), tails.nbytes
    ([('T', 0)], 0, 0)
    """

    def __init__(self, budget: int):
        super().__init__()
        self.budget = budget
        self.nbytes = 0
        #: Runs of units landed past a queue's tail (or before it has one), by queue.
        self.ahead: dict[tuple[str, int], Tail] = {}

    def __setitem__(self, key: tuple[str, int], tail: Tail) -> None:
        old = self.get(key)
        self.nbytes += tail.nbytes - (old.nbytes if old is not None else 0)
        super().__setitem__(key, tail)

    def __delitem__(self, key: tuple[str, int]) -> None:
        self.nbytes -= self[key].nbytes
        super().__delitem__(key)
        self._set_ahead(key, None)

    def land(self, key: tuple[str, int], run: Tail) -> bool:
        """Add ``run`` (units just landed in the commitlog, contiguous, with their messages) to ``key``'s
        tail: its part past the tail's end where it reaches the tail; else it waits ahead (after the run
        waiting there when it continues that one, else in its place: the newer run) until the tail grows
        to it (:meth:`reach`). Whether the tail grew.

        >>> tails = Tails(budget=1 << 20)
        >>> def run(*offsets):
        ...     units = pa.table({"queue_offset": list(offsets), "commitlog_offset": [o * 10 for o in offsets],
        ...                       "size": [10] * len(offsets)})
        ...     return Tail(units, pa.table({"queue_offset": list(offsets)}))
        >>> tails[("T", 0)] = run(0, 1)
        >>> tails.land(("T", 0), run(3, 4)), tails[("T", 0)].end      # a unit short: it waits ahead
        (False, 2)
        >>> tails.land(("T", 0), run(1, 2)), tails[("T", 0)].end      # the tail reaches it, and the run ahead
        (True, 5)
        >>> tails.land(("T", 0), run(2, 3)), tails[("T", 0)].end      # units it holds (a round brought them first)
        (False, 5)
        """
        tail = self.get(key)
        if tail is not None and run.start <= tail.end:
            grew = self._join(key, tail, run)
            return self.reach(key) or grew
        ahead = self.ahead.get(key)
        if ahead is not None and ahead.end == run.start:
            run = ahead.extended(run.units, run.messages)
        self._set_ahead(key, run)
        return self.reach(key)

    def reach(self, key: tuple[str, int], end: int | None = None) -> bool:
        """Join the run waiting ahead of ``key``'s tail once the tail's end reaches it; a queue with no tail
        starts one from the run where it begins at ``end`` (the queue's end in the consume queue). Whether
        the tail grew."""
        ahead, tail = self.ahead.get(key), self.get(key)
        if ahead is None or (ahead.start > tail.end if tail is not None else ahead.start != end):
            return False
        self._set_ahead(key, None)
        if tail is None:
            self[key] = ahead
            return True
        return self._join(key, tail, ahead)

    def _join(self, key: tuple[str, int], tail: Tail, run: Tail) -> bool:
        """``tail`` with the part of ``run`` (starting at or before its end) past its end; the units of the
        run it holds must be the same ones (else it is dropped: a topic deleted and sent to again, started
        again when next asked for). Whether it grew."""
        lo, hi = max(run.start, tail.start), min(run.end, tail.end)  # the units both hold
        held = tail.units.column("commitlog_offset").slice(lo - tail.start, max(0, hi - lo)).to_numpy()
        if not np.array_equal(held, run.units.column("commitlog_offset").slice(lo - run.start, len(held)).to_numpy()):
            del self[key]
            return False
        if run.end <= tail.end:
            return False
        cut = tail.end - run.start
        self[key] = tail.extended(run.units.slice(cut), run.messages.slice(cut))
        return True

    def _set_ahead(self, key: tuple[str, int], run: Tail | None) -> None:
        old = self.ahead.pop(key, None)
        self.nbytes -= old.nbytes if old is not None else 0
        if run is not None:
            self.ahead[key] = run
            self.nbytes += run.nbytes

    def pop(self, key: tuple[str, int], *default):
        if key not in self:
            return default[0] if default else super().pop(key)
        tail = self[key]
        del self[key]
        return tail

    def clear(self) -> None:
        super().clear()
        self.ahead.clear()
        self.nbytes = 0

    def trim(self, asked: Callable[[tuple[str, int]], float]) -> list[tuple[str, int]]:
        """Drop the tails asked for least recently (``asked(key)``: when) until the rest fit the budget;
        return the queues dropped."""
        dropped: list[tuple[str, int]] = []
        if self.nbytes <= self.budget:  # the common case, looked at on every pull: no sort
            return dropped
        for key in sorted(set(self) | set(self.ahead), key=asked):
            if self.nbytes <= self.budget:
                break
            if key in self:
                del self[key]
            self._set_ahead(key, None)
            dropped.append(key)
        return dropped


def by_queue(
    rows: pa.Table, queues: Iterable[tuple[str, int]] | None = None
) -> dict[tuple[str, int], tuple[pa.Table, np.ndarray]]:
    """``rows`` (units with ``topic`` and ``queue_id``) of each queue among ``queues`` (None: every queue) that
    has any, in queue offset order (stable), with their offsets; one sort for all of them.

    >>> rows = pa.table({"topic": ["T", "T", "U", "T"], "queue_id": [1, 0, 1, 1], "queue_offset": [5, 0, 9, 4]})
    >>> {k: v[1].tolist() for k, v in sorted(by_queue(rows, [("T", 1), ("U", 1), ("U", 2)]).items())}
    {('T', 1): [4, 5], ('U', 1): [9]}
    >>> sorted(by_queue(rows))
    [('T', 0), ('T', 1), ('U', 1)]
    """
    wanted = set(queues) if queues is not None else None
    if not rows.num_rows or wanted == set():
        return {}
    topics = pc.dictionary_encode(rows.column("topic")).combine_chunks()
    names, codes = topics.dictionary.to_pylist(), topics.indices.to_numpy()
    queue_ids, offsets = rows.column("queue_id").to_numpy(), rows.column("queue_offset").to_numpy()
    order = np.lexsort((offsets, queue_ids, codes))  # stable: equal offsets keep their order
    codes, queue_ids, offsets = codes[order], queue_ids[order], offsets[order]
    starts = np.flatnonzero(np.concatenate([[True], (codes[1:] != codes[:-1]) | (queue_ids[1:] != queue_ids[:-1])]))
    ends = np.append(starts[1:], len(order))
    out, ordered = {}, None
    for lo, hi in zip(starts.tolist(), ends.tolist()):
        key = (names[codes[lo]], int(queue_ids[lo]))
        if wanted is None or key in wanted:
            ordered = rows.take(order) if ordered is None else ordered
            out[key] = (ordered.slice(lo, hi - lo), offsets[lo:hi])
    return out
