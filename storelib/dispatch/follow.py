"""A follower: dispatch round after round as messages arrive, until told to stop.

Each round is one run like any other, so a follower killed anywhere is restarted with nothing lost or
dispatched twice. Beside the rounds, a thread builds the index once a second and another merges the
small files the tables gained, so a round waits for neither.

>>> from storelib import Message
>>> stop = threading.Event()
>>> def heard(r):
...     print("dispatched", r.consume_queue_rows); stop.set()
>>> _ = store.send(Message("TopicTest"))
>>> follow(store.dispatcher(), stop, on_round=heard).consume_queue_rows
dispatched 1
1
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Mapping, Protocol

from storelib.dispatch.result import DispatchResult
from storelib.model.errors import StoreError

__all__ = ["follow", "Rounds", "ROUND_MS", "INDEX_EVERY_S", "SUMMARY_EVERY_S"]

log = logging.getLogger("storelib.dispatch.reput")

#: A follower records the summaries of the ext files it committed at most this often (one commit of the
#: summary table a second instead of one a round); a filtered read reads files not yet summed up.
SUMMARY_EVERY_S = 1.0
#: ... and builds the index at most this often, on a thread of its own (one commit of it a second, of all
#: that arrived since), and moves a lagging ext marker: a message's keys are found at most this long after
#: its queue unit.
INDEX_EVERY_S = 1.0
#: A follower starts a round at most this often (ms) while messages keep coming: a round's commits, and the
#: pulls it wakes in every consumer, cost per round, so back-to-back rounds of a few hundred messages cost
#: more CPU than they save in wait on a busy machine (see the online figures in docs/benchmarks.md).
ROUND_MS = 120


class Rounds(Protocol):
    """What a follower drives: a dispatcher (:class:`~storelib.dispatch.reput.Dispatcher`).

    >>> rounds = store.dispatcher()
    >>> rounds.pace(0.0, 0.0); rounds.set_apart(())
    >>> rounds.run().to_offset == rounds.alone("index").run().to_offset == store.max_offset()
    True
    >>> rounds.summarize(force=True); sorted(rounds.compact_fresh())[:2]
    ['commitlog', 'consume_queue']
    """

    @property
    def targets(self) -> Mapping[str, object]:
        """The tables it dispatches to, by name (read only here)."""

    def run(self) -> DispatchResult:
        """One round."""

    def alone(self, name: str) -> "Rounds":
        """A dispatcher of the target ``name`` alone."""

    def pace(self, summary_every_s: float, full_every_s: float) -> None:
        """How often rounds record summaries and dispatch every target (0: every round)."""

    def set_apart(self, names: tuple[str, ...]) -> None:
        """Targets another thread dispatches."""

    def summarize(self, force: bool = False) -> None:
        """Record the summaries not yet recorded."""

    def compact_fresh(self) -> Mapping[str, object]:
        """Merge the small files the tables gained."""


def follow(
    rounds: Rounds,
    stop: threading.Event,
    interval_ms: int = 100,
    on_round: Callable[[DispatchResult], None] | None = None,
    compact_every_ms: int = 10_000,
    round_ms: int = ROUND_MS,
) -> DispatchResult:
    """Run ``rounds`` round after round until ``stop`` is set; the result covers every round.

    A round that found nothing new waits ``interval_ms``; ``on_round`` hears of each round that dispatched
    something. A round starts at most once every ``round_ms`` (0: as soon as the last one ends; see
    :data:`ROUND_MS`). A thread builds the index, once every :data:`INDEX_EVERY_S`, so a round never waits
    for it; stopping brings it up to the rest. Every ``compact_every_ms`` (0: never) another thread merges
    the small files the tables gained, so reads and commits stay as fast as the tables grow.
    """
    total: DispatchResult | None = None
    compactor = None
    if compact_every_ms:  # in the background: a round never waits for a merge, only for its commit turn
        compactor = threading.Thread(
            target=_compact_until,
            args=(rounds, stop, compact_every_ms / 1000),
            name="storelib-compact-fresh",
            daemon=True,
        )
        compactor.start()
    # a follower records summaries, and moves the ext marker alone, once a second rather than every round
    rounds.pace(SUMMARY_EVERY_S, INDEX_EVERY_S)
    indexing = _index_apart(rounds, stop)
    try:
        while not stop.is_set():
            began = time.monotonic()
            r = rounds.run()
            total = (total or DispatchResult(r.from_offset, r.to_offset)).then(r)
            if r.to_offset > r.from_offset:
                if on_round is not None:
                    on_round(r)
                stop.wait(max(0.0, round_ms / 1000 - (time.monotonic() - began)))
            else:
                rounds.summarize(force=True)  # idle: nothing to wait for
                stop.wait(interval_ms / 1000)
    except BaseException:
        stop.set()  # the follower's other threads end with it
        raise
    rounds.pace(0.0, 0.0)
    rounds.summarize(force=True)
    if compactor is not None:
        compactor.join()
    total = _index_joined(rounds, indexing, total)
    last = rounds.run()  # the index brought up to where the rest is
    return (total or DispatchResult(last.from_offset, last.from_offset)).then(last)


def _index_apart(rounds: Rounds, stop: threading.Event) -> tuple[threading.Thread, list] | None:
    """Start a follower's index thread: a dispatcher of the index alone, a run every :data:`INDEX_EVERY_S`
    until ``stop``; its rounds' results and its failure (which stops the follower) go into the list."""
    if "index" not in rounds.targets:
        return None
    indexer = rounds.alone("index")
    heard: list = []

    def index_until() -> None:
        while not stop.wait(INDEX_EVERY_S):
            try:
                heard.append(indexer.run())
            except BaseException as e:  # the follower stops, and raises it
                heard.append(e)
                stop.set()
                return

    rounds.set_apart(("index",))
    thread = threading.Thread(target=index_until, name="storelib-index", daemon=True)
    thread.start()
    return thread, heard


def _index_joined(
    rounds: Rounds, indexing: tuple[threading.Thread, list] | None, total: DispatchResult | None
) -> DispatchResult | None:
    """Wait for the index thread :func:`_index_apart` started; ``total`` with the index rows it added.
    Its failure is raised here."""
    if indexing is None:
        return total
    thread, heard = indexing
    thread.join()
    rounds.set_apart(())
    for r in heard:
        if isinstance(r, BaseException):
            raise r
        if total is not None:
            total.rows["index"] = total.rows.get("index", 0) + r.index_rows
    return total


def _compact_until(rounds: Rounds, stop: threading.Event, every_s: float) -> None:
    while not stop.wait(every_s):
        try:
            rounds.compact_fresh()
        except StoreError as e:  # the next time tries again; dispatching goes on
            log.warning("dispatch: compacting fresh files failed: %s", e)
