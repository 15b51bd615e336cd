"""Long and short polling: RocketMQ's PullRequestHoldService and its MessageArrivingListener.

A pull that finds nothing new (``PULL_NOT_FOUND``) and carries ``suspend_timeout_ms`` is held:

* **long polling** (``long_polling_enable``, the default): the pull waits until a message that
  matches its subscription arrives in its queue, or the time runs out. Each newly dispatched unit is
  pre-checked as ``notifyMessageArriving`` checks it - tag code or Bloom bitmap at the consume
  queue, then the SQL92 expression on the message - so messages the consumer would not get do not
  wake it. A dispatch in this process wakes held pulls at once (the arriving listener); dispatches
  in other processes are seen within ``long_polling_check_interval_ms``.
* **short polling**: the pull waits ``short_polling_time_mills`` (1 s), then answers.

Either way the pull is then run again from its own offset, as ``executeRequestWhenWakeup`` does,
without holding again and without committing its offset a second time.

>>> r = store.pull("GroupA", "TopicTest", 0, offset=r.next_begin_offset, suspend_timeout_ms=15000)  # doctest: +SKIP
>>> r.status, r.suspended_ms                                                                       # doctest: +SKIP
(<PullStatus.FOUND: 'FOUND'>, 412)
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING

from storelib.get_message import GetMessageStatus

if TYPE_CHECKING:
    from storelib.pull import PullFilter, PullMessageProcessor, PullRequest, PullResult

__all__ = ["PullRequestHoldService", "hold"]


class PullRequestHoldService:
    """Where held pulls wait; dispatch in this process wakes them (``notifyMessageArriving``)."""

    def __init__(self) -> None:
        self._arrived = threading.Condition()
        self._generation = 0

    def notify_message_arriving(self) -> None:
        """New consume queue units were committed: let every held pull look."""
        with self._arrived:
            self._generation += 1
            self._arrived.notify_all()

    def wait(self, seen: int, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for an arrival after generation ``seen``; return the generation now."""
        with self._arrived:
            if self._generation == seen:
                self._arrived.wait(timeout_s)
            return self._generation

    @property
    def generation(self) -> int:
        return self._generation


def hold(processor: "PullMessageProcessor", request: "PullRequest", message_filter: "PullFilter") -> "PullResult":
    """Hold a pull that found nothing new; answer when a message passing ``message_filter`` arrived or
    time ran out."""
    store, config = processor.store, processor.store.config
    service: PullRequestHoldService = store.hold_service
    began = time.monotonic()
    if not config.long_polling_enable:
        time.sleep(config.short_polling_time_mills / 1000)
    else:
        deadline = began + request.suspend_timeout_ms / 1000
        interval = max(config.long_polling_check_interval_ms, 1) / 1000
        cursor = request.offset
        seen = service.generation
        while (remaining := deadline - time.monotonic()) > 0:
            seen = service.wait(seen, min(remaining, interval))
            got = processor.get(request, message_filter, offset=cursor)
            if got.status is GetMessageStatus.FOUND:
                break  # a matching message arrived: wake up
            if got.status is GetMessageStatus.NO_MATCHED_MESSAGE:
                cursor = got.next_begin_offset  # those units will not match; look only at newer ones
    result = processor.answer(request, processor.check(request))
    result.suspended_ms = int((time.monotonic() - began) * 1000)
    return result
