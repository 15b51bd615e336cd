"""Pulling: RocketMQ's PullMessageProcessor and the client's PullAPIWrapper over :mod:`storelib.consume.get_message`.

Details: ``docs/internals.md``, section storelib.consume.pull.

>>> p = store.pull("GroupA", "TopicTest", queue_id=r.queue_id, offset=0, max_msgs=32)
>>> p.status, p.next_begin_offset, len(p.messages)
(<PullStatus.FOUND: 'FOUND'>, 1, 1)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from storelib.consume.get_message import GetMessageResult, GetMessageStatus, get_message
from storelib.consume.long_polling import hold
from storelib.context import StoreContext
from storelib.filter.class_batch import FilterFailures
from storelib.filter.message_filter import MessageFilter
from storelib.filter.selector import MessageSelector
from storelib.filter.subscription import check_selector
from storelib.local.tail import TailClient, tail_client
from storelib.model.errors import (
    ConsumeDisabledError,
    FilterNotSupportedError,
    InvalidQueueIdError,
    OffsetError,
    StoreError,
    StorePermissionError,
    SubscriptionNotLatestError,
    TopicPermissionError,
    require_int,
)
from storelib.model.message import MessageConst, StoredMessage
from storelib.model.topic import PERM_READ, RETRY_GROUP_TOPIC_PREFIX, retry_topic, validate_group
from storelib.storage.commitlog_reads import message_batch
from storelib.storage.consume_queue import queue_offsets

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from storelib.filter.subscription import Subscription

__all__ = [
    "PullStatus",
    "PullResult",
    "PullRequest",
    "PullFilter",
    "PullMessageProcessor",
    "response_code",
    "get_message_by_selector",
]


class PullStatus(enum.StrEnum):
    """The client's ``PullStatus``.

    >>> store.pull("GroupA", "TopicTest", r.queue_id, 5).status                # past the queue's end
    <PullStatus.OFFSET_ILLEGAL: 'OFFSET_ILLEGAL'>
    """

    FOUND = "FOUND"
    NO_NEW_MSG = "NO_NEW_MSG"
    NO_MATCHED_MSG = "NO_MATCHED_MSG"
    OFFSET_ILLEGAL = "OFFSET_ILLEGAL"


_CLIENT_STATUS = {
    "SUCCESS": PullStatus.FOUND,
    "PULL_NOT_FOUND": PullStatus.NO_NEW_MSG,
    "PULL_RETRY_IMMEDIATELY": PullStatus.NO_MATCHED_MSG,
    "PULL_OFFSET_MOVED": PullStatus.OFFSET_ILLEGAL,
}


def response_code(status: GetMessageStatus, request_offset: int) -> str:
    """The broker's response code for a store status (PullMessageProcessor, on a master).

    >>> response_code(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 0), response_code(GetMessageStatus.NO_MESSAGE_IN_QUEUE, 5)
    ('PULL_NOT_FOUND', 'PULL_OFFSET_MOVED')
    """
    S = GetMessageStatus
    if status is S.FOUND:
        return "SUCCESS"
    if status in (S.MESSAGE_WAS_REMOVING, S.NO_MATCHED_MESSAGE):
        return "PULL_RETRY_IMMEDIATELY"
    if status in (S.NO_MATCHED_LOGIC_QUEUE, S.NO_MESSAGE_IN_QUEUE):
        return "PULL_OFFSET_MOVED" if request_offset != 0 else "PULL_NOT_FOUND"
    if status in (S.OFFSET_FOUND_NULL, S.OFFSET_OVERFLOW_ONE):
        return "PULL_NOT_FOUND"
    return "PULL_OFFSET_MOVED"  # OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL


@dataclass
class PullResult:
    """What a pull returns: the client's status and messages, with the broker's answer kept beside them.

    ``messages`` are the ones left after the client's tag string re-check; each carries the
    ``MIN_OFFSET`` and ``MAX_OFFSET`` properties, as RocketMQ's client adds them.

    >>> p = store.pull("GroupA", "TopicTest", r.queue_id, 0)
    >>> p.response_code, p.get_status, p.messages[0].properties["MAX_OFFSET"]
    ('SUCCESS', <GetMessageStatus.FOUND: 'FOUND'>, '1')
    """

    status: PullStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list[StoredMessage] = field(default_factory=list)
    #: The broker's response code (``SUCCESS``, ``PULL_NOT_FOUND``, ...).
    response_code: str = "SUCCESS"
    #: The store's ``GetMessageStatus``.
    get_status: GetMessageStatus = GetMessageStatus.FOUND
    #: Milliseconds the pull was held waiting for messages.
    suspended_ms: int = 0
    #: A class filter's failures on this pull's messages (:class:`~storelib.filter.class_filter.FilterFailure`).
    filter_errors: tuple = ()

    @property
    def msg_found_list(self) -> list[StoredMessage]:
        """RocketMQ's name for :attr:`messages`."""
        return self.messages


class PullFilter:
    """RocketMQ's ExpressionMessageFilter, and ExpressionForRetryMessageFilter on a group's retry topic.

    The consume queue stage is :class:`~storelib.filter.message_filter.MessageFilter`'s (tag code,
    or Bloom bits). The broker's commitlog stage evaluates SQL92 only; tag strings are left to the
    client. On a retry topic each message is checked against the group's subscription of its
    original topic (``RETRY_TOPIC``): its SQL92 expression, and its tag expression too.

    >>> f = PullFilter(MessageFilter("TopicTest", MessageSelector.by_tag("TagA")))
    >>> f.passes_every_unit
    False
    >>> m = store.query_by_id(r.msg_id)
    >>> f.is_matched_by_commitlog(m), f.client_kept([m]) == [m]
    (True, True)
    >>> import pyarrow as pa
    >>> f.consume_queue_mask(pa.table({"tags_code": [2598919], "filter_bitmap": pa.nulls(1, pa.binary()),
    ...                                "filter_version": pa.nulls(1, pa.int64())})).tolist()
    [True]
    """

    def __init__(self, message_filter: MessageFilter, retry: Callable[[str], MessageFilter | None] | None = None):
        self.filter = message_filter
        self.retry = retry
        #: Failures of class filters on the messages checked so far.
        self.failures: dict[str, FilterFailures] = {}
        self._decided: dict[int, bool] = {}

    @property
    def passes_every_unit(self) -> bool:
        return self.filter.passes_every_unit

    def consume_queue_mask(self, units: "pa.Table") -> "np.ndarray":
        """``isMatchedByConsumeQueue`` of each unit (real ``tags_code``, ``filter_bitmap``, ``filter_version``)."""
        return self.filter.consume_queue_mask(units)

    def is_matched_by_commitlog(self, message: StoredMessage) -> bool:
        if self.retry is not None:
            real_topic = message.properties.get(MessageConst.RETRY_TOPIC)
            real = self.retry(real_topic) if real_topic else None
            return real is None or (
                real.is_matched_by_commitlog(tags=message.tags, properties=message.properties)
                and self._class_keeps(real, message)
            )
        if self.filter.selector.is_tag:
            return True
        if self.filter.selector.is_class:  # the tag string first: the class sees only subscribed tags
            return self.filter.data.matches_tag(message.tags) and self._class_keeps(self.filter, message)
        return self.filter.is_matched_by_commitlog(properties=message.properties)

    def _class_keeps(self, message_filter: MessageFilter, message: StoredMessage) -> bool:
        cf = message_filter.class_filter
        if cf is None:
            return True
        if message_filter is self.filter and message.commitlog_offset in self._decided:
            return self._decided.pop(message.commitlog_offset)
        failures = self.failures.setdefault(cf.name, FilterFailures(cf.name))
        return bool(cf.match_rows(message_batch([message]), failures)[0])

    def prefetch(self, messages: list[StoredMessage]) -> None:
        """A class filter with ``match_batch`` decides the messages the pull reads as one Arrow batch
        (those whose TAGS the subscription takes), as a read's executors do; ``match`` runs per message."""
        cf = self.filter.class_filter
        if cf is None or self.retry is not None or not cf.load().has_batch:
            return
        subscribed = [m for m in messages if self.filter.data.matches_tag(m.tags)]
        if subscribed:
            keep = cf.match_rows(message_batch(subscribed), self.failures.setdefault(cf.name, FilterFailures(cf.name)))
            self._decided.update((m.commitlog_offset, bool(k)) for m, k in zip(subscribed, keep))

    def filter_errors(self) -> tuple:
        """The class filters' failures so far (:class:`~storelib.filter.class_filter.FilterFailure`)."""
        return tuple(f for tally in self.failures.values() for f in tally.report())

    def client_kept(self, messages: list[StoredMessage]) -> list[StoredMessage]:
        """``PullAPIWrapper.processPullResult``: a tag subscription keeps the messages whose TAGS is in its tags set."""
        if not self.filter.selector.by_tags:
            return messages
        data = self.filter.data
        return [m for m in messages if data.matches_tag(m.tags)]


@dataclass(frozen=True)
class PullRequest:
    """One pull as the client sends it (PullMessageRequestHeader)."""

    group: str
    topic: str
    queue_id: int
    offset: int
    max_msgs: int = 32
    selector: MessageSelector | None = None
    sub_version: int | None = None
    suspend_timeout_ms: int = 0
    commit_offset: int | None = None


class PullMessageProcessor:
    """Checks pulls, runs them against the store, and holds those that find nothing new.

    >>> processor = PullMessageProcessor(store.context)
    >>> request = PullRequest("GroupA", "TopicTest", r.queue_id, 0)
    >>> processor.check(request).passes_every_unit                   # a tag subscription checks codes
    False
    >>> processor.pull(request).msg_found_list[0].msg_id == r.msg_id
    True
    """

    def __init__(self, ctx: StoreContext):
        self.ctx = ctx

    def pull(self, request: PullRequest) -> PullResult:
        _check_request(request)
        message_filter = self.check(request)
        if request.commit_offset is not None:
            self.ctx.offsets.commit(request.group, request.topic, request.queue_id, request.commit_offset)
        result = self.answer(request, message_filter)
        if result.response_code == "PULL_NOT_FOUND" and request.suspend_timeout_ms > 0:
            cq = self.ctx.tables.consume_queue
            seen = [cq.view().version]

            def moved(offset: int) -> bool:  # one look at the log while nothing was dispatched
                view = cq.view()
                changed, seen[0] = view.version != seen[0], view.version
                return changed and queue_offsets(cq, view, request.topic, request.queue_id)[1] > offset

            looked: list[GetMessageResult] = []

            def kept(offset: int, got: GetMessageResult | None) -> GetMessageResult | None:
                looked[:] = [got] if offset == request.offset and got and got.status is GetMessageStatus.FOUND else []
                return got

            wait = None
            if (tail := self._tail(message_filter)) is not None:

                def wait(offset: int, seconds: float) -> GetMessageResult | None:  # the follower holds it
                    return kept(
                        offset,
                        tail.get(
                            request.topic,
                            request.queue_id,
                            offset,
                            request.max_msgs,
                            message_filter.filter.selector.expression,
                            wait_ms=int(seconds * 1000),
                        ),
                    )

            def look(offset: int) -> GetMessageResult:  # the follower, if any, declined just before
                got = self.get(request, message_filter, offset, ask_tail=wait is None)
                kept(offset, got)
                return got

            suspended_ms = hold(
                self.ctx.config, self.ctx.arrivals, request.offset, request.suspend_timeout_ms, look, moved, wait
            )
            woken = self.check(request)  # run again as the broker does on waking it, checks and all
            if looked and _same_filter(woken, message_filter):  # what woke it is the answer: not read twice
                result = self.answer(request, message_filter, looked[0])
            else:
                result = self.answer(request, woken)
            result.suspended_ms = suspended_ms
        return result

    def answer(
        self, request: PullRequest, message_filter: PullFilter, got: GetMessageResult | None = None
    ) -> PullResult:
        """The broker's answer to a checked request (``got``: the store's, when already read), turned into
        the client's result."""
        got = got or self.get(request, message_filter)
        code = response_code(got.status, request.offset)
        messages = got.messages
        if code == "SUCCESS":
            messages = message_filter.client_kept(messages)
            for m in messages:
                m.properties[MessageConst.MIN_OFFSET] = str(got.min_offset)
                m.properties[MessageConst.MAX_OFFSET] = str(got.max_offset)
        return PullResult(
            _CLIENT_STATUS[code],
            got.next_begin_offset,
            got.min_offset,
            got.max_offset,
            messages,
            code,
            got.status,
            filter_errors=message_filter.filter_errors(),
        )

    def get(
        self, request: PullRequest, message_filter: PullFilter, offset: int | None = None, ask_tail: bool = True
    ) -> GetMessageResult:
        """The store's ``getMessage`` for a checked request: from the follower's tail where it serves the
        pull (:mod:`storelib.local.tail`; ``ask_tail``), else read from the tables here."""
        offset = request.offset if offset is None else offset
        if ask_tail and (tail := self._tail(message_filter)) is not None:
            got = tail.get(
                request.topic, request.queue_id, offset, request.max_msgs, message_filter.filter.selector.expression
            )
            if got is not None:
                return got
        return get_message(
            self.ctx, request.group, request.topic, request.queue_id, offset, request.max_msgs, message_filter
        )

    def _tail(self, message_filter: PullFilter) -> "TailClient | None":
        """Where the follower's tail may answer this filter's pulls (a tag subscription, not a retry topic)."""
        if message_filter.retry is None and message_filter.filter.selector.is_tag:
            return tail_client(self.ctx)
        return None

    # ---- the broker's checks, in PullMessageProcessor's order ------------------------------------
    def check(self, request: PullRequest) -> PullFilter:
        """Raise the typed error the broker would answer with; else the request's message filter."""
        ctx, group, topic = self.ctx, request.group, request.topic
        if not ctx.config.broker_permission & PERM_READ:
            raise StorePermissionError(
                "store",
                f"the store {ctx.config.store_host} forbids pulling (broker_permission {ctx.config.broker_permission})",
            )
        group_config = ctx.groups.find(group)
        if not group_config.consume_enable:
            raise ConsumeDisabledError(
                "group", f"subscription group {group} may not consume (consume_enable=false)", value=group
            )
        topic_config = ctx.topics.get(topic)
        if not topic_config.perm & PERM_READ:
            raise TopicPermissionError(
                "topic", f"the topic {topic} forbids pulling (perm {topic_config.perm})", value=topic
            )
        if not 0 <= request.queue_id < topic_config.read_queue_nums:
            raise InvalidQueueIdError(
                "queue_id",
                f"queue id must be in [0, {topic_config.read_queue_nums}) (read_queue_nums of topic {topic})",
                value=request.queue_id,
                code="SYSTEM_ERROR",
            )
        selector, subscription = self._subscription(request)
        if selector.is_sql92 and not ctx.config.enable_property_filter:
            raise FilterNotSupportedError(
                "expression_type",
                "the store does not filter messages by SQL92 (enable_property_filter=false)",
                value=selector.expression,
                code="SYSTEM_ERROR",
            )
        message_filter = MessageFilter(topic, selector, subscription, ctx.registry.bloom_filter, config=ctx.config)
        if ctx.config.filter_support_retry and topic == retry_topic(group):
            return PullFilter(message_filter, retry=self._retry_filters(group))
        return PullFilter(message_filter)

    def _subscription(self, request: PullRequest) -> tuple[MessageSelector, "Subscription | None"]:
        registered = self.ctx.registry.current().get((request.group, request.topic))
        if request.selector is not None:  # the pull carries its subscription (hasSubscriptionFlag)
            selector = request.selector
            if selector.is_class:  # loads here, is the registered class, source allowed; compared by CRC below
                selector = check_selector(request.topic, selector, self.ctx.config, request.group)
            else:
                selector.parse(request.topic, self.ctx.config)  # FilterAPI.build of the pull's own subscription
            return selector, registered if registered is not None and registered.selector == selector else None
        if registered is None:
            if request.topic == retry_topic(request.group):  # consumers subscribe their retry topic to "*"
                return MessageSelector.by_tag("*"), None
            registered = self.ctx.registry.get(request.group, request.topic)  # raises SUBSCRIPTION_NOT_EXIST
        if request.sub_version is not None and registered.sub_version < request.sub_version:
            raise SubscriptionNotLatestError(
                "sub_version",
                f"the store holds subscription version {registered.sub_version} of group "
                f"{request.group} to {request.topic}, older than the consumer's",
                value=request.sub_version,
            )
        if registered.selector.is_class:  # loads here, is the registered class
            return check_selector(request.topic, registered.selector, self.ctx.config, request.group), registered
        return registered.selector, registered

    def _retry_filters(self, group: str) -> Callable[[str], MessageFilter | None]:
        subs = self.ctx.registry.current()
        cache: dict[str, MessageFilter | None] = {}

        def real_filter(real_topic: str) -> MessageFilter | None:
            if real_topic not in cache:
                sub = subs.get((group, real_topic))
                usable = sub is not None and not real_topic.startswith(RETRY_GROUP_TOPIC_PREFIX)
                cache[real_topic] = MessageFilter(real_topic, sub.selector, sub) if sub is not None and usable else None
            return cache[real_topic]

        return real_filter


def _same_filter(a: PullFilter, b: PullFilter) -> bool:
    """Do two checks of one request filter alike (same selector, same subscription version, no retry topic)?"""
    return (
        a.retry is None
        and b.retry is None
        and a.filter.selector == b.filter.selector
        and a.filter.version == b.filter.version
    )


def _check_request(r: PullRequest) -> None:
    """The client's own checks before a pull leaves it (DefaultMQPullConsumerImpl.pullSyncImpl)."""
    validate_group(r.group)
    require_int(StoreError, "queue_id", r.queue_id)  # its range is the broker's check (SYSTEM_ERROR)
    require_int(OffsetError, "offset", r.offset, 0)
    require_int(StoreError, "max_msgs", r.max_msgs, 1)
    require_int(StoreError, "suspend_timeout_ms", r.suspend_timeout_ms, 0)
    require_int(OffsetError, "commit_offset", r.commit_offset, 0, optional=True)


def get_message_by_selector(
    ctx: StoreContext,
    group: str,
    topic: str,
    queue_id: int,
    offset: int,
    max_msgs: int = 32,
    selector: MessageSelector | str | None = None,
) -> GetMessageResult:
    """The store's own answer (``DefaultMessageStore.getMessage``) filtered by ``selector``, if any:
    no checks of the group, topic or subscription, and no client re-check.

    >>> get_message_by_selector(store.context, "GroupA", "TopicTest", r.queue_id, 0, selector="TagB").status
    <GetMessageStatus.NO_MATCHED_MESSAGE: 'NO_MATCHED_MESSAGE'>
    """
    message_filter = None
    if selector is not None:
        message_filter = PullFilter(MessageFilter(topic, MessageSelector.of(selector), config=ctx.config))
    return get_message(ctx, group, topic, queue_id, offset, max_msgs, message_filter)
