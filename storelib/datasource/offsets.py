"""Where a ``rocketmq`` read starts and ends in each queue: the offset options in the forms Spark's Kafka source
takes them, and the offsets of a stream, per topic and queue (``{"Orders": {"0": 5, "1": 7}}``).

``startingOffsets`` and ``endingOffsets`` take ``earliest``, ``latest``, ``group`` (the consumer group's
committed offsets; a start only) or JSON per topic and queue, ``{"Orders": {"0": 23, "1": -2}}``, where -2
is the queue's earliest offset and -1 its latest; ``startingTimestamp`` takes epoch milliseconds for every
queue and ``startingOffsetsByTimestamp`` JSON of epoch milliseconds per topic and queue (each queue starts at
the first message stored at or after that time, RocketMQ's ``getOffsetInQueueByTime``). A queue the JSON
leaves out starts or ends where the read's default puts it.

>>> spec = parse_offsets("startingOffsets", '{"Orders": {"0": 23, "1": -2}}')
>>> spec.at("Orders", 0), spec.at("Orders", 1), spec.at("Orders", 2), spec.topics
(Position(kind='offset', value=23), Position(kind='earliest', value=0), None, ['Orders'])
>>> parse_offsets("endingOffsets", "earliest", ending=True)  # doctest: +NORMALIZE_WHITESPACE
Traceback (most recent call last):
storelib.model.errors.DataSourceOptionError: endingOffsets: an end is latest or JSON offsets per topic and queue
    (-1 for latest) (got 'earliest')
>>> stream_offsets({"0": 5, "1": 7}, ["Orders"])   # a checkpoint of the one-topic stream of earlier versions
{('Orders', 0): 5, ('Orders', 1): 7}
>>> nested({("Orders", 1): 7, ("Audit", 0): 2, ("Orders", 0): 5})
{'Audit': {'0': 2}, 'Orders': {'0': 5, '1': 7}}
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from storelib.context import StoreContext
from storelib.model.errors import DataSourceOptionError
from storelib.query.lookup import MessageQuery
from storelib.storage.consume_queue import min_queue_marker, queue_offsets

__all__ = [
    "Position",
    "OffsetSpec",
    "parse_offsets",
    "parse_timestamp",
    "parse_timestamps",
    "stream_offsets",
    "nested",
    "queue_bounds",
    "resolve",
    "EARLIEST",
    "LATEST",
]

#: Kafka's special offsets in ``startingOffsets`` / ``endingOffsets`` JSON.
EARLIEST, LATEST = -2, -1
_WORDS = ("group", "earliest", "latest")


@dataclass(frozen=True)
class Position:
    """Where a read starts or ends in one queue: ``earliest``, ``latest``, ``group`` (the group's committed
    offset), ``offset`` (``value``, a queue offset) or ``timestamp`` (``value``, epoch ms)."""

    kind: str
    value: int = 0


@dataclass(frozen=True)
class OffsetSpec:
    """One offset option: a position for every queue (``default``; None: the read's own default) and
    positions per topic and queue that the option names."""

    default: Position | None = None
    queues: Mapping[str, Mapping[int, Position]] = field(default_factory=dict)
    #: The option's name as given (for errors).
    option: str = "startingOffsets"

    def at(self, topic: str, queue_id: int) -> Position | None:
        """The position of (topic, queue_id), None where the option leaves it to the read's default."""
        return self.queues.get(topic, {}).get(queue_id, self.default)

    @property
    def topics(self) -> list[str]:
        """The topics the option names (its JSON's), sorted."""
        return sorted(self.queues)


def parse_offsets(name: str, value: object, *, ending: bool = False) -> OffsetSpec:
    """``startingOffsets`` (``ending`` False) or ``endingOffsets``, checked; errors name the option.

    >>> parse_offsets("startingOffsets", "Latest").default
    Position(kind='latest', value=0)
    >>> parse_offsets("startingOffsets", '{"Orders": {"x": 1}}')  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    storelib.model.errors.DataSourceOptionError: startingOffsets: Orders: queue ids are integers >= 0
        (got 'x')
    """
    text = str(value).strip()
    if text.lower() in _WORDS:
        if ending and text.lower() != "latest":
            raise DataSourceOptionError(
                name, "an end is latest or JSON offsets per topic and queue (-1 for latest)", value=value
            )
        return OffsetSpec(Position(text.lower()), option=name)
    out: dict[str, dict[int, Position]] = {}
    words = "latest" if ending else "earliest, latest, group"
    for topic, queue_id, n in _per_queue(name, text, words):
        if n == EARLIEST and not ending:
            out.setdefault(topic, {})[queue_id] = Position("earliest")
        elif n == LATEST:
            out.setdefault(topic, {})[queue_id] = Position("latest")
        elif n >= 0:
            out.setdefault(topic, {})[queue_id] = Position("offset", n)
        else:
            allowed = "-1 (latest)" if ending else "-2 (earliest) or -1 (latest)"
            raise DataSourceOptionError(name, f"{topic}/{queue_id}: an offset is >= 0, {allowed}", value=n)
    return OffsetSpec(None, out, name)


def parse_timestamp(name: str, value: object) -> OffsetSpec:
    """``startingTimestamp``: epoch milliseconds, every queue's start.

    >>> parse_timestamp("startingTimestamp", "1700000000000").default
    Position(kind='timestamp', value=1700000000000)
    """
    return OffsetSpec(Position("timestamp", _millis(name, value)), option=name)


def parse_timestamps(name: str, value: object) -> OffsetSpec:
    """``startingOffsetsByTimestamp``: JSON of epoch milliseconds per topic and queue.

    >>> parse_timestamps("startingOffsetsByTimestamp", '{"Orders": {"1": 1700000000000}}').at("Orders", 1)
    Position(kind='timestamp', value=1700000000000)
    """
    out: dict[str, dict[int, Position]] = {}
    for topic, queue_id, ms in _per_queue(name, str(value), ""):
        out.setdefault(topic, {})[queue_id] = Position("timestamp", _millis(name, ms))
    return OffsetSpec(None, out, name)


def _millis(name: str, value: object) -> int:
    try:
        ms = int(str(value).strip())
    except ValueError:
        ms = -1
    if ms < 0:
        raise DataSourceOptionError(name, "a time is epoch milliseconds, an integer >= 0", value=value)
    return ms


def _per_queue(name: str, text: str, words: str) -> list[tuple[str, int, int]]:
    """The (topic, queue id, number) entries of Kafka's per-partition JSON, checked; ``words`` the other
    values the option takes, for the error."""
    shape = 'JSON per topic and queue, as in {"Orders": {"0": 23}}'
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not doc:
        raise DataSourceOptionError(name, f"must be {words + ' or ' if words else ''}{shape}", value=text)
    out = []
    for topic, queues in doc.items():
        if not isinstance(queues, dict):
            raise DataSourceOptionError(name, f"{topic}: must map queue ids to numbers, as in {shape}", value=queues)
        for queue_id, n in queues.items():
            try:
                q = int(queue_id)
            except ValueError:
                q = -1
            if q < 0:
                raise DataSourceOptionError(name, f"{topic}: queue ids are integers >= 0", value=queue_id)
            if not isinstance(n, int) or isinstance(n, bool):
                raise DataSourceOptionError(name, f"{topic}/{q}: must be an integer", value=n)
            out.append((str(topic), q, n))
    return out


def stream_offsets(raw: Mapping, topics: Sequence[str]) -> dict[tuple[str, int], int]:
    """A stream offset as Spark hands it back, by (topic, queue id). The flat ``{"<queue_id>": offset}`` of the
    one-topic streams of earlier versions (still in their checkpoints) is read as the offsets of the stream's
    only topic; a stream over several topics refuses it (it cannot tell whose they are)."""
    if raw and all(not isinstance(v, Mapping) for v in raw.values()):
        if len(topics) != 1:
            raise DataSourceOptionError(
                "checkpointLocation",
                "the checkpoint holds one topic's offsets ({queue_id: offset}, a stream of one topic): "
                f"a stream over {sorted(topics)} starts from a new checkpoint",
                value=dict(raw),
            )
        return {(topics[0], int(q)): int(o) for q, o in raw.items()}
    return {(str(t), int(q)): int(o) for t, queues in raw.items() for q, o in queues.items()}


def nested(flat: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """Offsets by (topic, queue id) in Kafka's JSON shape, topics and queues in order: the same offsets are
    the same JSON text in Spark's offset log."""
    out: dict[str, dict[str, int]] = {}
    for (topic, q), offset in sorted(flat.items()):
        out.setdefault(topic, {})[str(q)] = int(offset)
    return out


def queue_bounds(ctx: StoreContext, queues: Mapping[str, int]) -> dict[tuple[str, int], tuple[int, int]]:
    """``(getMinOffsetInQueue, getMaxOffsetInQueue)`` of each queue of ``queues`` (topic -> queue count), from
    the consume queue's log alone.

    >>> queue_bounds(store.context, {"TopicTest": 4})[("TopicTest", r.queue_id)]
    (0, 1)
    """
    cq = ctx.tables.consume_queue
    keys = [(t, q) for t, n in sorted(queues.items()) for q in range(n)]
    view = cq.view(markers=[min_queue_marker(t, q) for t, q in keys])
    return {(t, q): queue_offsets(cq, view, t, q) for t, q in keys}


def resolve(
    ctx: StoreContext,
    spec: OffsetSpec | None,
    default: Position,
    bounds: Mapping[tuple[str, int], tuple[int, int]],
    group: str | None = None,
    *,
    open_ends: bool = False,
) -> dict[tuple[str, int], int | None]:
    """Each queue's offset at the positions of ``spec`` (``default`` where it names none), within the queue's
    ``bounds``. ``open_ends`` (batch reads): ``earliest`` and ``latest`` are None (no bound), a queue offset
    stays as given and a group's missing offset is None; else each is a queue offset in ``[min, max]``.

    >>> bounds = queue_bounds(store.context, {"TopicTest": 4})
    >>> resolve(store.context, None, Position("latest"), bounds)[("TopicTest", r.queue_id)]
    1
    >>> resolve(store.context, parse_timestamp("t", 0), Position("latest"), bounds)[("TopicTest", r.queue_id)]
    0
    """
    positions = {k: (spec.at(*k) if spec is not None else None) or default for k in bounds}
    committed = {}
    if group is not None and any(p.kind == "group" for p in positions.values()):
        rows = ctx.offsets.offsets(group).to_pylist()
        committed = {(r["topic"], int(r["queue_id"])): int(r["offset"]) for r in rows}
    query = MessageQuery(ctx)
    out: dict[tuple[str, int], int | None] = {}
    for (topic, q), p in positions.items():
        lo, hi = bounds[(topic, q)]
        at: int | None
        if p.kind == "earliest":
            at = None if open_ends else lo
        elif p.kind == "latest":
            at = None if open_ends else hi
        elif p.kind == "group":
            mine = committed.get((topic, q), -1)
            at = (None if open_ends else lo) if mine < 0 else mine
        elif p.kind == "timestamp":
            at = query.search_offset(topic, q, p.value)
        else:
            at = p.value
        out[(topic, q)] = at if open_ends or at is None else min(max(at, lo), hi)
    return out
