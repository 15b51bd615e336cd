"""Tail pulls: the follower answers pulls of what it has just dispatched, from memory.

Details: ``docs/internals.md``, section storelib.local.tail.

>>> from storelib import MessageStore
>>> asking = MessageStore.open(store.root, spark)
>>> with TailServer(store.context) as server:
...     p = asking.pull("GroupA", "TopicTest", r.queue_id, 0)
...     p.status, p.messages[0].msg_id == r.msg_id, server.answered
(<PullStatus.FOUND: 'FOUND'>, True, 1)
>>> asking.close()
"""

from __future__ import annotations

import collections
import enum
import logging
import threading
import time
import weakref
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.consume.get_message import (
    GetMessageResult,
    GetMessageStatus,
    batch_full,
    scan_window,
    total_physical_memory,
)
from storelib.context import StoreContext
from storelib.dispatch.request import queued_units
from storelib.encoding.ext_addr import MAX_EXT_ADDR
from storelib.filter.message_filter import MessageFilter
from storelib.filter.selector import MessageSelector
from storelib.local.landing import landing_address
from storelib.local.tails import TAIL_UNITS, Tail, Tails, by_queue
from storelib.local.wire import ANSWER, Client, Request, Server, local_address, pack, unpack
from storelib.model.errors import StoreStateError
from storelib.model.message import MESSAGE_COLUMNS, StoredMessage
from storelib.storage.commitlog import COMMITLOG_MARKER
from storelib.storage.commitlog_reads import message_rows, min_physical_offset
from storelib.storage.consume_queue import min_queue_marker, queue_files, queue_offsets, read_units
from storelib.storage.schema import COMMITLOG, CONSUME_QUEUE

__all__ = [
    "TailServer",
    "TailClient",
    "tail_client",
    "tail_address",
    "TAIL_TIMEOUT_S",
]

log = logging.getLogger(__name__)

#: Seconds a queue's tail is kept after its last pull.
TAIL_IDLE_S = 60.0
#: Seconds a consumer waits for the follower's answer before it reads the tables itself.
TAIL_TIMEOUT_S = 2.0
#: Seconds a held pull waits at most, at the follower, before it looks at the consume queue's log again.
_WAKE_S = 0.1
#: Seconds a pull waits at most for the units of a consume queue version its dispatcher has committed
#: but not yet handed over (:meth:`TailServer.publish`), before it reads that version's files.
_PUBLISH_WAIT_S = 0.5
#: Seconds a consumer waits, after finding no follower serving, before it looks again.
_LOOK_AGAIN_S = 1.0


#: :meth:`TailServer._answer`'s "wait for the units a dispatcher here has committed".
class _Handing(enum.Enum):
    HANDING = 0


_HANDING = _Handing.HANDING
_UNIT_COLUMNS = ["queue_offset", "commitlog_offset", "size", "tags_code"]
#: The units' columns as landed rows make them (what joins a tail takes its layout: :meth:`Tail.extended`).
_UNIT_SCHEMA = pa.schema([CONSUME_QUEUE.arrow.field(c) for c in _UNIT_COLUMNS])
#: The messages' columns as the tail keeps and sends them.
MESSAGE_SCHEMA = pa.schema([COMMITLOG.arrow.field(c) for c in MESSAGE_COLUMNS])


def tail_address(ctx: StoreContext) -> str | None:
    """The socket a store's follower serves pulls on, on this machine (None where there can be none: not Linux).

    >>> tail_address(store.context).startswith("\\0storelib-tail-")
    True
    """
    return local_address("tail", ctx.tables.consume_queue.path)


class TailServer:
    """Answers tail pulls from memory, in the follower's process (see the module docstring).

    Use it as a context manager, or :meth:`start` and :meth:`close`. Another process already serving
    the store leaves this one idle (:attr:`serving` False).

    >>> with TailServer(store.context) as server:
    ...     server.serving, server.get("TopicTest", r.queue_id, 0, 32, "*")[0]["status"]
    (True, <GetMessageStatus.FOUND: 'FOUND'>)
    """

    def __init__(self, ctx: StoreContext):
        self.ctx = ctx
        self.address = tail_address(ctx)
        self.serving = False
        #: Pulls answered from the tail, and those handed back to read the tables, by why.
        self.answered = 0
        self.declined: collections.Counter[str] = collections.Counter()
        #: Tails dropped to stay within the ``tail_pulls_max_mb`` setting.
        self.dropped = 0
        self._lock = threading.Lock()
        self._grown = threading.Condition(self._lock)  # notified when tails gain units
        self._tails = Tails(ctx.config.tail_pulls_max_mb * 1024 * 1024)  # by queue, within the budget
        self._asked: dict[tuple[str, int], float] = {}  # when each tail was last asked for
        self._version = -1  # the consume queue version the tails are brought up to
        self._known: set[str] = set()  # the consume queue's files at that version
        self._expected: set[str] = set()  # files a dispatcher here is committing: their units come by publish
        self._handing = 0.0  # since when a version holds expected files whose units are not published yet
        self._filters: dict[tuple[str, str], tuple[MessageFilter, bool]] = {}
        self._memory = total_physical_memory()
        self._server: Server | None = None
        self._landing: Server | None = None
        #: Commits whose landed rows the machine's committer handed here (:meth:`land`).
        self.landed = 0

    def __enter__(self) -> "TailServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> "TailServer":
        """Listen on :func:`tail_address`, unless another process does."""
        server = Server.bind(self.address, "storelib-tail") if self.address is not None else None
        if server is not None:
            self._server, self.serving = server, True
            server.serve(self._take)
            landing = landing_address(self.ctx.tables.commitlog.path)
            self._landing = Server.bind(landing, "storelib-landed") if landing is not None else None
            if self._landing is not None:
                self._landing.serve(self._take_landed)
        return self

    def close(self) -> None:
        """Stop serving; consumers then read the tables themselves."""
        server, self._server, self.serving = self._server, None, False
        landing, self._landing = self._landing, None
        for s in (server, landing):
            if s is not None:
                s.close()
        with self._lock:
            self._tails.clear()

    # ---- answering -------------------------------------------------------------------------------
    def get(
        self, topic: str, queue_id: int, offset: int, max_msgs: int, expression: str, wait_ms: int = 0
    ) -> tuple[dict, pa.Table | None] | None:
        """``getMessage`` of a tag subscription (``expression``) from the tail, as (header, message rows);
        None when the tail cannot answer it exactly. A pull at the queue's end (``OFFSET_OVERFLOW_ONE``)
        waits up to ``wait_ms`` for the tail to grow, then is answered again: a held pull's look."""
        deadline = time.monotonic() + wait_ms / 1000
        with self._lock:
            while True:
                answer = self._answer(topic, queue_id, offset, max_msgs, expression)
                if answer is _HANDING:  # committed here a moment ago: its units are on their way
                    self._grown.wait(_WAKE_S)
                    continue
                left = deadline - time.monotonic()
                if answer is None or answer[0]["status"] != GetMessageStatus.OFFSET_OVERFLOW_ONE or left <= 0:
                    break
                self._grown.wait(
                    min(left, _WAKE_S)
                )  # a dispatcher elsewhere publishes nothing: look again now and then
            self.answered += answer is not None
            return answer

    def _answer(
        self, topic: str, queue_id: int, offset: int, max_msgs: int, expression: str
    ) -> tuple[dict, pa.Table | None] | _Handing | None:
        """:meth:`get` without waiting, in the lock; ``_HANDING`` while the units that would answer it are
        on their way from a dispatcher here (:meth:`expect`)."""
        cq, config = self.ctx.tables.consume_queue, self.ctx.config
        view = self._refresh(cq.view(markers=[min_queue_marker(topic, queue_id)]), (topic, queue_id))
        tail = self._tails.get((topic, queue_id))
        min_offset, max_offset = queue_offsets(cq, view, topic, queue_id)
        why = (
            "no tail"
            if tail is None
            else "tail behind"
            if tail.end < max_offset
            else "offset outside"
            if not max(tail.start, min_offset) <= offset <= tail.end
            else None
        )
        if why == "tail behind" and self._handing:  # _refresh has just let go of a hand-over waited for too long
            return _HANDING
        if why is not None or tail is None:
            self.declined[why or "no tail"] += 1
            return None
        max_offset = tail.end  # past the consume queue's end by units landed, not yet committed to it (land)
        head = {
            "min_offset": min_offset,
            "max_offset": max_offset,
            "queue_offsets": [],
            "buffer_total_size": 0,
            "suggest_pulling_from_slave": False,
        }
        if offset == max_offset:
            return {**head, "status": GetMessageStatus.OFFSET_OVERFLOW_ONE, "next_begin_offset": offset}, None
        at = offset - tail.start
        window = tail.units.slice(at, scan_window(config, offset, max_offset, max_msgs))
        codes = window.column("tags_code")
        message_filter, every = self._filter(topic, expression)
        if not every and pc.min(codes).as_py() <= MAX_EXT_ADDR:
            self.declined["ext unit"] += 1  # the tables hold its real tag code
            return None
        clog = self.ctx.tables.commitlog.view(markers=[COMMITLOG_MARKER])
        physical = window.column("commitlog_offset").to_pylist()
        if physical and physical[0] < self.ctx.tables.commitlog.memo(
            "min_physical_offset", lambda v: min_physical_offset(v.actions), view=clog
        ):
            self.declined["removed"] += 1  # retention reached the tail: the tables say what was removed
            return None
        passed = (
            [True] * window.num_rows
            if every
            else message_filter.consume_queue_mask(
                pa.table(
                    {
                        "tags_code": codes,
                        "filter_bitmap": pa.nulls(len(codes), pa.binary()),
                        "filter_version": pa.nulls(len(codes), pa.int64()),
                    }
                )
            ).tolist()
        )
        memory = self._memory * config.access_message_in_memory_max_ratio // 100
        end_py = clog.marker(COMMITLOG_MARKER)
        picked: list[int] = []
        status, taken, total, last = GetMessageStatus.NO_MATCHED_MESSAGE, 0, 0, 0
        sizes = window.column("size").to_pylist()
        for i, (physical_py, size_py) in enumerate(zip(physical, sizes)):
            last = physical_py  # the last unit looked at, taken or not (maxPhyOffsetPulling)
            if batch_full(config, size_py, max_msgs, total, len(picked), (end_py - physical_py) > memory):
                break
            taken += 1
            if passed[i]:
                picked.append(at + i)
                total += size_py
                status = GetMessageStatus.FOUND
        head.update(
            status=status,
            next_begin_offset=offset + taken,
            buffer_total_size=total,
            queue_offsets=[offset + i - at for i in picked],
            suggest_pulling_from_slave=(end_py - last) > memory,
        )
        if not picked:
            return head, None
        rows = tail.messages.slice(picked[0], picked[-1] + 1 - picked[0]).combine_chunks()
        return head, (rows if len(picked) == rows.num_rows else rows.take(np.asarray(picked) - picked[0]))

    def _filter(self, topic: str, expression: str) -> tuple[MessageFilter, bool]:
        """The tag filter of ``expression``, and whether it lets every unit through (``*``)."""
        key = (topic, expression)
        if key not in self._filters:
            f = MessageFilter(topic, MessageSelector.by_tag(expression), config=self.ctx.config)
            self._filters[key] = (f, f.passes_every_unit)
        return self._filters[key]

    # ---- keeping the tails -------------------------------------------------------------------------
    def _refresh(self, view, wanted: tuple[str, int]):
        """Bring every tail up to ``view`` (new files' units read once for all queues); start ``wanted``'s."""
        cq = self.ctx.tables.consume_queue
        if self._handing and time.monotonic() - self._handing >= _PUBLISH_WAIT_S:  # never handed over: read them
            self._known = {p for p in self._known if unquote(p) not in self._expected}
            self._expected, self._handing, self._version = set(), 0.0, -1
        if view.version != self._version:
            paths = view.actions.column("path").to_pylist()
            fresh = [i for i, p in enumerate(paths) if p not in self._known]
            if self._expected and (handed := {i for i in fresh if unquote(paths[i]) in self._expected}):
                fresh = [i for i in fresh if i not in handed]  # their units come by publish, without a read
                self._handing = self._handing or time.monotonic()
            self._known, self._version = set(paths), view.version
            unread = self._unread(view.actions.take(fresh)) if fresh and self._tails else []
            if unread:
                self._grown.notify_all()
                self._extend(
                    cq.read_arrow(paths=[cq.path_of(p) for p in unread], columns=["topic", "queue_id", *_UNIT_COLUMNS])
                )
        now = self._asked[wanted] = time.monotonic()
        for key in [k for k, at in self._asked.items() if now - at > TAIL_IDLE_S]:
            self._tails.pop(key, None)
            del self._asked[key]
        if wanted not in self._tails:
            topic, queue_id = wanted
            top = queue_offsets(cq, view, topic, queue_id)[1]
            units = read_units(cq, queue_files(cq, view, topic, queue_id), max(0, top - TAIL_UNITS // 4), top)
            self._start(wanted, units, top)
        return view

    def expect(self, paths: list[str]) -> None:
        """Before a dispatcher of this process commits consume queue files (paths relative to the table):
        their units come by :meth:`publish`, so a pull that finds the new version waits for that (up to
        :data:`_PUBLISH_WAIT_S`) rather than reading the files.

        >>> with TailServer(store.context) as server:
        ...     server.expect(["part-x.parquet"])       # a commit of that file is under way here
        """
        with self._lock:
            self._expected = set(paths)

    def publish(self, units: pa.Table) -> None:
        """Add the consume queue units a dispatcher of this process has just committed
        (:attr:`~storelib.dispatch.reput.Dispatcher.feed`), without reading their files, and wake the
        pulls held for them. A failure here drops the tails (they start again from the tables) and is
        logged: the dispatcher goes on.

        >>> from storelib import Message
        >>> with TailServer(store.context) as server:
        ...     _ = server.get("TopicTest", r.queue_id, 0, 32, "*")
        ...     _ = store.send(Message("TopicTest", queue_id=r.queue_id))
        ...     dispatcher = store.dispatcher(); dispatcher.feed = server
        ...     _ = dispatcher.run(); server._tails[("TopicTest", r.queue_id)].end
        2
        """
        with self._lock:
            self._expected, self._handing = set(), 0.0
            if not self._tails or not units.num_rows:
                self._grown.notify_all()
                return
            try:
                self._extend(units)
            except Exception as e:  # noqa: BLE001  (the round has committed; only the tails are lost)
                log.warning("tail pulls: a round's units could not be added; the tails start again: %s", e)
                self._tails.clear()
            self._grown.notify_all()

    def _trim(self) -> None:
        """Keep the tails within ``tail_pulls_max_mb`` once they have grown (a tail started, or extended):
        those of the queues pulled least recently go first."""
        for key in self._tails.trim(lambda key: self._asked.get(key, 0.0)):
            self.dropped += 1
            log.debug("tail pulls: %s's tail dropped to stay within tail_pulls_max_mb", key)

    def _unread(self, actions: pa.Table) -> list[str]:
        """Of the new files, those that may hold units a tail lacks: not a merge's rewrite (``dataChange``
        false: the units of files seen before), nor a file of one queue whose units are all before its tail's
        end (those published, or of a queue nobody asked for)."""
        out = []
        stats = {
            c: actions.column(c).to_pylist() if c in actions.column_names else [None] * actions.num_rows
            for c in ("min.topic", "max.topic", "min.queue_id", "max.queue_id", "max.queue_offset", "data_change")
        }
        for i, path in enumerate(actions.column("path").to_pylist()):
            topic, queue_id, top = stats["min.topic"][i], stats["min.queue_id"][i], stats["max.queue_offset"][i]
            if stats["data_change"][i] is False:
                continue
            if None in (topic, queue_id, top) or topic != stats["max.topic"][i] or queue_id != stats["max.queue_id"][i]:
                out.append(path)  # several queues (a merged file), or no statistics
            elif (tail := self._tails.get((topic, queue_id))) is not None and top >= tail.end:
                out.append(path)
        return out

    def _start(self, key: tuple[str, int], units: pa.Table, end: int) -> None:
        got = units.column("queue_offset").to_numpy()
        if len(got) and got[-1] == end - 1 and (np.diff(got) == 1).all():  # else a gap, or nothing yet
            messages = self._messages(units)
            if messages is not None:
                self._tails[key] = Tail(units, messages)
        self._tails.reach(key, end)  # units landed past the consume queue's end join it, or start the tail
        self._trim()

    def _extend(self, rows: pa.Table) -> None:
        """Add each tail's new units, those past its end. A merged file's older units must be the tail's own:
        others (a topic deleted and sent to again) drop the tail, started again when next asked for."""
        news: dict[tuple[str, int], pa.Table] = {}
        for key, (mine, offsets) in by_queue(rows, self._tails).items():
            tail = self._tails[key]
            held = (offsets >= tail.start) & (offsets < tail.end)
            if held.any() and not np.array_equal(
                tail.units.column("commitlog_offset").to_numpy()[offsets[held] - tail.start],
                mine.column("commitlog_offset").to_numpy()[held],
            ):
                del self._tails[key]
                continue
            fresh = offsets >= tail.end
            if not fresh.any():
                continue
            first = int(np.argmax(fresh))  # sorted: the fresh ones are the last
            mine, got = mine.slice(first), offsets[first:]
            keep = np.concatenate([[True], got[1:] != got[:-1]])
            mine = mine.filter(pa.array(keep)) if not keep.all() else mine
            got = got[keep]
            if got[0] == tail.end and (np.diff(got) == 1).all():
                news[key] = mine.select(_UNIT_COLUMNS)
            else:
                del self._tails[key]  # not contiguous with what it held
        messages = self._messages(pa.concat_tables(list(news.values()))) if news else None
        at = 0
        for key, mine in news.items():  # one read of the commitlog for all of them
            if messages is None:
                del self._tails[key]
                continue
            self._tails[key] = self._tails[key].extended(mine, messages.slice(at, mine.num_rows))
            self._tails.reach(key)
            at += mine.num_rows
        self._trim()

    def land(self, rows: pa.Table) -> None:
        """Take the rows of a commit that has just landed in the commitlog (every column, as committed; from
        the machine's committer, :class:`~storelib.local.landing.LandedFeed`): the units they make join the
        tails, before any round has committed them, and wake the pulls held for them. Units that do not follow
        a tail's end, or of a queue with no tail yet, wait until the rounds bring the ones between, or its first
        pull starts its tail from them (:meth:`Tails.land`); within ``tail_pulls_max_mb``.

        >>> from storelib.storage.commitlog import EncodedMessage, now_millis
        >>> log = store.context.commitlog
        >>> with TailServer(store.context) as server:
        ...     _ = server.get("TopicTest", r.queue_id, 0, 32, "*")
        ...     staged = log.stage([EncodedMessage("TopicTest", r.queue_id, 0, 0, b"l", {}, now_millis(), "h:0")])
        ...     sent = log.append_arrow(staged, results="arrow")
        ...     server.land(sent.written)          # before any round dispatched it
        ...     server.get("TopicTest", r.queue_id, sent.landed["queue_offset"][0].as_py(), 32, "*")[0]["status"]
        <GetMessageStatus.FOUND: 'FOUND'>
        """
        queued = queued_units(rows, self.ctx.config.delay_levels_ms)
        units = queued.select(["queue_offset", "physical_offset", "size", "tags_code"])
        units = units.rename_columns(_UNIT_COLUMNS).cast(_UNIT_SCHEMA)
        both = pa.Table.from_arrays(
            [*units.columns, *queued.select(MESSAGE_SCHEMA.names).cast(MESSAGE_SCHEMA).columns],
            schema=pa.schema([*(f.with_name(f"unit.{f.name}") for f in _UNIT_SCHEMA), *MESSAGE_SCHEMA]),
        )
        with self._lock:
            grew = False
            for key, (mine, offsets) in by_queue(both).items():  # a queue not pulled yet too: kept ahead
                if (np.diff(offsets) != 1).any():
                    continue  # not one run (the same rows handed twice?): the rounds bring them
                run = Tail(
                    mine.select([f"unit.{c}" for c in _UNIT_COLUMNS]).rename_columns(_UNIT_COLUMNS),
                    mine.select(MESSAGE_SCHEMA.names),
                )
                grew = self._tails.land(key, run) or grew
            self._trim()
            self.landed += 1
            if grew:
                self._grown.notify_all()

    def _messages(self, units: pa.Table) -> pa.Table | None:
        """The message of each unit, in the units' order (None: some are not in the commitlog)."""
        commitlog = self.ctx.tables.commitlog
        offsets = units.column("commitlog_offset")
        rows = message_rows(commitlog, commitlog.view(markers=[COMMITLOG_MARKER]).actions, offsets.to_pylist())
        at = pc.index_in(offsets, rows.column("physical_offset"))
        if at.null_count:
            return None
        return rows.take(at).cast(MESSAGE_SCHEMA)

    # ---- the wire ----------------------------------------------------------------------------------
    def _take_landed(self, request: Request) -> None:
        """A commit's landed rows from the machine's committer; answered once taken."""
        _, rows = unpack(request.body)
        if rows is not None:
            self.land(rows)
        request.answer(ANSWER)

    def _take(self, request: Request) -> None:
        """A consumer's pull: the tail's answer (a JSON head and the messages' rows), or declined (read the
        tables); answered before the connection's next pull is read (a held pull holds its connection)."""
        pull, _ = unpack(request.body)
        answer = self.get(**pull) if pull is not None else None
        if answer is None:
            request.decline()
        else:
            request.answer(ANSWER, *pack(answer[0], answer[1]))


class TailClient:
    """A consumer process's way to the follower's tail: one connection per thread (the follower answers
    a connection's pulls one after another), looked for again a second after none answered.

    >>> client = TailClient(tail_address(store.context))
    >>> client.get("TopicTest", r.queue_id, 0, 32, "*") is None      # no follower serves: read the tables
    True
    """

    def __init__(self, address: str | None):
        self.address = address
        #: Pulls the follower answered.
        self.answered = 0
        self._local = threading.local()
        self._down_until = 0.0

    def get(
        self, topic: str, queue_id: int, offset: int, max_msgs: int, expression: str, wait_ms: int = 0
    ) -> GetMessageResult | None:
        """The follower's ``getMessage`` of a tag subscription (waiting up to ``wait_ms`` at the queue's
        end for a message to arrive); None: read the tables."""
        client = self._client()
        if client is None:
            return None
        pull = {
            "topic": topic,
            "queue_id": queue_id,
            "offset": offset,
            "max_msgs": max_msgs,
            "expression": expression,
            "wait_ms": wait_ms,
        }
        reply = client.call(*pack(pull), timeout=TAIL_TIMEOUT_S + wait_ms / 1000)
        if reply is None:  # the follower is gone, or too slow: read the tables, and look again later
            self._drop()
            return None
        if reply[0] != ANSWER:
            return None
        try:
            head, rows = unpack(reply[1])
            if head is None:
                raise StoreStateError("wire", "an answer without its head")
        except StoreStateError as e:
            log.warning("tail pulls: the follower's answer could not be read (%s); reading the tables", e)
            return None
        messages = StoredMessage.from_rows(rows) if rows is not None else []
        self.answered += 1
        status = GetMessageStatus(head.pop("status"))
        return GetMessageResult(
            status, head.pop("next_begin_offset"), head.pop("min_offset"), head.pop("max_offset"), messages, **head
        )

    def _client(self) -> Client | None:
        client = getattr(self._local, "client", None)
        if client is not None or self.address is None or time.monotonic() < self._down_until:
            return client
        client = self._local.client = Client.connect(
            self.address, "storelib-tail", reading=False, timeout=TAIL_TIMEOUT_S
        )
        if client is None:
            self._down_until = time.monotonic() + _LOOK_AGAIN_S
        return client

    def _drop(self) -> None:
        """Forget this thread's client (its call closed the connection), and look again later."""
        self._local.client = None
        self._down_until = time.monotonic() + _LOOK_AGAIN_S


_CLIENTS: "weakref.WeakKeyDictionary[StoreContext, TailClient | None]" = weakref.WeakKeyDictionary()
_CLIENTS_LOCK = threading.Lock()


def tail_client(ctx: StoreContext) -> TailClient | None:
    """The process's :class:`TailClient` for a store's context; None without the ``tail_pulls`` setting,
    or where no follower can serve (not Linux).

    >>> tail_client(store.context).get("TopicTest", r.queue_id, 0, 32, "*") is None     # no follower serves it
    True
    """
    if not ctx.config.tail_pulls:
        return None
    with _CLIENTS_LOCK:
        if ctx not in _CLIENTS:
            address = tail_address(ctx)
            _CLIENTS[ctx] = TailClient(address) if address is not None else None
        return _CLIENTS[ctx]
