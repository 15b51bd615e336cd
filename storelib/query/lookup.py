"""Finding messages: by message id, by key, by unique key, and a queue's offset by time.

RocketMQ's QueryMessageProcessor, ViewMessageById and getOffsetInQueueByTime, as point reads: each
lookup prunes the index or consume queue files by their statistics (a key's hash range, a queue),
reads the few row groups that can match with pyarrow on this process, then reads the messages at
the offsets it found from the commitlog files whose offset range holds them. No Spark job runs, so
a lookup costs what it returns, not what the store holds. A look-up by key also finds the messages sent
but not dispatched yet, as the ``rocketmq`` source does: it reads the commitlog past the index's marker
(empty once dispatch has caught up) and files those messages as the next dispatch will; one by id reads
the commitlog at the id's offset, dispatched or not.

>>> store.query_by_id(r.msg_id).topic
'TopicTest'
>>> [m.queue_offset for m in store.query_by_key("TopicTest", "order-1")]
[0]
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.context import StoreContext
from storelib.delta.log import add_actions
from storelib.delta.stats import Prune
from storelib.delta.table import Table
from storelib.dispatch.request import REQUEST_COLUMNS, DispatchRequests
from storelib.encoding.index_key import build_index_key, index_key_hash
from storelib.encoding.message_id import decode_message_id, ip_bytes
from storelib.model.errors import MessageIdError, MessageNotFoundError, StoreError
from storelib.model.message import StoredMessage
from storelib.model.timestamps import FAR_FUTURE_MS, arrow_timestamp, epoch_ms
from storelib.storage.commitlog_reads import read_messages
from storelib.storage.consume_queue import min_offset, queue_max_offset
from storelib.storage.dispatched import REPUT_MARKER, dispatched_to, queued_expression, undispatched_rows
from storelib.storage.index_file import offsets_of

__all__ = ["StoredMessage", "MessageQuery", "read_messages", "DEFAULT_QUERY_MAX_NUM", "MAX_MSGS_NUM_BATCH"]

#: ``defaultQueryMaxNum``: messages a key query returns unless told otherwise.
DEFAULT_QUERY_MAX_NUM = 32
#: ``maxMsgsNumBatch``: the most a key query ever returns.
MAX_MSGS_NUM_BATCH = 64


class MessageQuery:
    """Point lookups over one store's tables, with the data files the last one opened.

    >>> query = MessageQuery(store.context)
    >>> [m.msg_id for m in query.by_key("TopicTest", "order-1")] == [r.msg_id], query.files_touched
    (True, {'index': 1, 'commitlog': 1})
    >>> from storelib import Message
    >>> late = store.send(Message("TopicTest", keys=["order-1"], queue_id=2))   # not dispatched
    >>> [m.msg_id for m in query.by_key("TopicTest", "order-1")] == [late.msg_id, r.msg_id], query.undispatched()
    (True, {('TopicTest', 2): 1})
    >>> query.by_unique_key("TopicTest", r.uniq_key).queue_offset, query.max_queue_offset("TopicTest", r.queue_id)
    (0, 1)
    """

    def __init__(self, ctx: StoreContext):
        self.ctx = ctx
        self.commitlog: Table = ctx.tables.commitlog
        self.index: Table = ctx.tables.index
        self.consume_queue: Table = ctx.tables.consume_queue
        #: Data files each table's last lookup opened (for benchmarks and tests).
        self.files_touched: dict[str, int] = {}

    # ---- commitlog -------------------------------------------------------------------------
    def by_offsets(self, offsets: Sequence[int]) -> list[StoredMessage]:
        """Messages at these commitlog offsets, in the order given (missing ones left out)."""
        found = read_messages(self.commitlog, self.commitlog.view().actions, offsets, self.files_touched)
        return [found[o] for o in offsets if o in found]

    def by_id(self, msg_id: str) -> StoredMessage:
        """The message with this store message id (``viewMessageById``)."""
        host, port, offset = decode_message_id(msg_id)
        mine = self.ctx.config.store_address
        if (ip_bytes("msg_id", host), port) != (ip_bytes("store_host", mine[0]), mine[1]):
            raise MessageIdError(
                "msg_id", f"names store {host}:{port}, but this store is {mine[0]}:{mine[1]}", value=msg_id
            )
        found = self.by_offsets([offset])
        if not found:
            raise MessageNotFoundError("msg_id", f"no message at commitlog offset {offset} in this store", value=msg_id)
        return found[0]

    # ---- index -----------------------------------------------------------------------------
    def by_key(
        self,
        topic: str,
        key: str,
        max_num: int = DEFAULT_QUERY_MAX_NUM,
        begin: object = None,
        end: object = None,
        *,
        unique: bool = False,
    ) -> list[StoredMessage]:
        """Messages of ``topic`` indexed under ``key`` (one of their KEYS, or their UNIQ_KEY), newest first.

        ``max_num`` is capped at 64 (``maxMsgsNumBatch``); ``begin`` and ``end`` bound the store
        time (epoch milliseconds or datetimes, both inclusive). Index rows hold only the hash of
        ``topic#key``, as IndexFile entries do; each candidate message is checked for the real
        topic and key, so keys whose hashes collide never return each other's messages.
        """
        if not isinstance(max_num, int) or isinstance(max_num, bool) or max_num < 1:
            raise StoreError("max_num", "must be a positive integer", value=max_num)
        if not isinstance(key, str) or not key:
            raise StoreError("key", "must be a non-empty string", value=key)
        max_num = min(max_num, MAX_MSGS_NUM_BATCH)
        lo, hi = epoch_ms(begin, "begin", default=0), epoch_ms(end, "end", default=FAR_FUTURE_MS)
        key_hash = index_key_hash(build_index_key(topic, key))
        # The marker first: an index read after it holds at least up to it, so nothing falls between the two.
        marker = self.index.view(markers=[REPUT_MARKER]).marker(REPUT_MARKER)
        indexed, opened = offsets_of(self.index, key_hash, lo, hi)
        waiting = self._undispatched_offsets(topic, key_hash, lo, hi, marker)
        candidates = sorted(set(waiting).union(indexed), reverse=True)  # newest first, as offsets_of gives them
        self.files_touched = {"index": opened}
        found: list[StoredMessage] = []
        commitlog_files = 0
        for start in range(0, len(candidates), MAX_MSGS_NUM_BATCH):
            for m in self.by_offsets(candidates[start : start + MAX_MSGS_NUM_BATCH]):
                if m.topic == topic and (m.uniq_key == key or (not unique and key in (m.keys or "").split(" "))):
                    found.append(m)
            commitlog_files += self.files_touched.get("commitlog", 0)
            if len(found) >= max_num:
                break
        self.files_touched["commitlog"] = commitlog_files
        return found[:max_num]

    def _undispatched_offsets(self, topic: str, key_hash: int, lo: int, hi: int, marker: int) -> list[int]:
        """Commitlog offsets past the index's ``marker`` that the next dispatch files under ``key_hash`` within
        ``[lo, hi]`` ms, newest first: the index's own rows of those messages (:class:`DispatchRequests`)."""
        rows = undispatched_rows(self.commitlog, marker, REQUEST_COLUMNS, pc.field("topic") == topic)
        if not rows.num_rows:
            return []
        entries = [cut["index"] for cut in DispatchRequests({"index": marker}, False, 0, ())(iter(rows.to_batches()))]
        index = pa.Table.from_batches(entries)
        stored = pc.field("store_timestamp")
        hits = index.filter(
            (pc.field("key_hash") == key_hash) & (stored >= arrow_timestamp(lo)) & (stored <= arrow_timestamp(hi))
        )
        return [int(o) for o in np.unique(hits.column("commitlog_offset").to_numpy())[::-1]]

    def undispatched(self, topic: str | None = None) -> dict[tuple[str, int], int]:
        """Messages sent but not dispatched yet, per (topic, queue) (of ``topic`` only, when given): the
        consume queue (pulls, queue offsets) and the index do not hold them until the next dispatch, though
        look-ups by key and id find them."""
        wanted = queued_expression() if topic is None else queued_expression() & (pc.field("topic") == topic)
        marker = dispatched_to(self.ctx.tables, self.ctx.config)
        rows = undispatched_rows(self.commitlog, marker, ["topic", "queue_id"], wanted)
        counts = rows.group_by(["topic", "queue_id"]).aggregate([([], "count_all")])
        return {
            (t, q): n
            for t, q, n in zip(
                counts.column("topic").to_pylist(),
                counts.column("queue_id").to_pylist(),
                counts.column("count_all").to_pylist(),
            )
        }

    def by_unique_key(self, topic: str, uniq_key: str) -> StoredMessage:
        """The message whose UNIQ_KEY (the producer's message id) is ``uniq_key``; the first stored wins."""
        found = self.by_key(topic, uniq_key, DEFAULT_QUERY_MAX_NUM, unique=True)
        if not found:
            raise MessageNotFoundError("uniq_key", f"no message of topic {topic} has this UNIQ_KEY", value=uniq_key)
        return min(found, key=lambda m: m.commitlog_offset)

    # ---- consume queue ---------------------------------------------------------------------
    def search_offset(self, topic: str, queue_id: int, timestamp: object) -> int:
        """First queue offset stored at or after ``timestamp`` (``getOffsetInQueueByTime``, lower boundary).

        Past the last message it is the queue's max offset; before the first, its min offset (also when
        units below it, which retention passed, are still stored); 0 for an empty queue.
        """
        t = arrow_timestamp(epoch_ms(timestamp, "timestamp"))
        snapshot = self.consume_queue.snapshot()
        queue = {"topic": topic, "queue_id": queue_id}
        later = self.consume_queue.files(
            snapshot, Prune(equal=queue, between={"store_timestamp": (t, arrow_timestamp(FAR_FUTURE_MS))})
        )
        self.files_touched["consume_queue"] = len(later)
        found = self.consume_queue.read_arrow(
            paths=later,
            columns=["queue_offset"],
            filter=(pc.field("topic") == topic)
            & (pc.field("queue_id") == queue_id)
            & (pc.field("store_timestamp") >= t),
        ).column("queue_offset")
        if len(found):
            return max(int(pc.min(found).as_py()), min_offset(self.consume_queue, topic, queue_id))
        return self.max_queue_offset(topic, queue_id, snapshot)

    def max_queue_offset(self, topic: str, queue_id: int, snapshot=None) -> int:
        """One past the last dispatched queue offset, 0 for an empty queue, from file statistics alone."""
        snapshot = snapshot or self.consume_queue.snapshot()
        return queue_max_offset(Table.only(add_actions(snapshot), {"topic": topic, "queue_id": queue_id}))
