"""What :class:`~storelib.store.MessageStore` finds and reads: messages by id, key, unique key and time,
offsets, and the tables as DataFrames. A part of the one handle (it inherits these), kept apart so
each module stays readable; every method delegates to the query services.

>>> store.query_by_id(r.msg_id).topic
'TopicTest'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from storelib.context import StoreContext
from storelib.delta.stats import Prune
from storelib.model.errors import translate_methods
from storelib.model.message import StoredMessage
from storelib.model.timestamps import Timestamp
from storelib.query.lookup import DEFAULT_QUERY_MAX_NUM, MessageQuery
from storelib.query.scan import queue_units, table_rows, topic_messages

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["Lookups"]


@translate_methods
class Lookups:
    """Finding messages and reading tables; :class:`~storelib.store.MessageStore` is the class to use.

    >>> isinstance(store, Lookups)
    True
    """

    _ctx: StoreContext
    _query: MessageQuery

    # ---- finding messages -------------------------------------------------------------------
    def query_by_id(self, msg_id: str) -> StoredMessage:
        """The message with this store message id, dispatched or not, or
        :class:`~storelib.model.errors.MessageNotFoundError`.

        An id of another store host, or a malformed id, raises :class:`~storelib.model.errors.MessageIdError`.

        >>> store.query_by_id(r.msg_id).tags
        'TagA'
        """
        return self._query.by_id(msg_id)

    def query_by_key(
        self,
        topic: str,
        key: str,
        max_num: int = DEFAULT_QUERY_MAX_NUM,
        *,
        begin: Timestamp | None = None,
        end: Timestamp | None = None,
    ) -> list[StoredMessage]:
        """Messages of ``topic`` with ``key`` among their KEYS, newest first (``max_num`` capped at 64), also
        those not dispatched yet (:meth:`undispatched`).

        ``begin`` and ``end`` bound the store time, inclusive: epoch milliseconds or aware datetimes.

        >>> [m.msg_id for m in store.query_by_key("TopicTest", "order-1", begin=0)] == [r.msg_id]
        True
        """
        return self._query.by_key(topic, key, max_num, begin, end)

    def query_by_unique_key(self, topic: str, uniq_key: str) -> StoredMessage:
        """The message whose UNIQ_KEY is ``uniq_key`` (RocketMQ client's message id).

        >>> store.query_by_unique_key("TopicTest", r.uniq_key).msg_id == r.msg_id
        True
        """
        return self._query.by_unique_key(topic, uniq_key)

    def search_offset(self, topic: str, queue_id: int, timestamp: Timestamp) -> int:
        """First queue offset stored at or after ``timestamp`` (``getOffsetInQueueByTime``).

        >>> store.search_offset("TopicTest", r.queue_id, 0)
        0
        """
        return self._query.search_offset(topic, queue_id, timestamp)

    # ---- reading ---------------------------------------------------------------------------
    def max_offset(self) -> int:
        """The next commitlog offset (RocketMQ's ``getMaxPhyOffset``).

        >>> store.max_offset() > 0
        True
        """
        return self._ctx.commitlog.next_offset()

    def undispatched(self, topic: str | None = None) -> dict[tuple[str, int], int]:
        """Messages sent but not dispatched yet, per (topic, queue id), of ``topic`` or of every topic: pulls,
        queue offsets and ``consumer_lag`` do not see them until :meth:`dispatch` runs (look-ups by key and id
        find them already). Empty when dispatch has caught up.

        >>> from storelib import Message
        >>> q = (r.queue_id + 1) % 4  # a queue the seeded message is not in
        >>> before, sent = store.undispatched(), store.send(Message("TopicTest", queue_id=q))
        >>> before, sent.queue_offset, store.undispatched() == {("TopicTest", q): 1}
        ({}, 0, True)
        """
        return self._query.undispatched(topic)

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        """One past the last dispatched queue offset of (topic, queue), 0 for none (``getMaxOffsetInQueue``);
        read from the consume queue files' statistics.

        >>> store.max_queue_offset("TopicTest", r.queue_id) >= 1
        True
        """
        return self._query.max_queue_offset(topic, queue_id)

    def table(self, name: str, prune: Prune | None = None) -> "DataFrame":
        """A table's current rows as a DataFrame (files skipped by ``prune``'s statistics).

        >>> store.table("topic_config").where("topic = 'TopicTest'").count() >= 1
        True
        """
        return table_rows(self._ctx, name, prune)

    def messages(self, topic: str | None = None) -> "DataFrame":
        """Commitlog rows, optionally of one topic.

        >>> store.messages("TopicTest").where("tags = 'TagA'").count()
        1
        """
        return topic_messages(self._ctx, topic)

    def consume_queue(self, topic: str, queue_id: int, begin: int = 0, end: int | None = None) -> "DataFrame":
        """Consume queue rows of one queue with ``begin <= queue_offset < end``, reading only files that can hold them.

        >>> store.consume_queue("TopicTest", r.queue_id, 0, 1).count()
        1
        """
        return queue_units(self._ctx, topic, queue_id, begin, end)
