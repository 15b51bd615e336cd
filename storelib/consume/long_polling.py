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

>>> p = store.pull("GroupA", "TopicTest", r.queue_id, offset=1, suspend_timeout_ms=200)   # nothing arrives
>>> p.status, p.suspended_ms >= 200
(<PullStatus.NO_NEW_MSG: 'NO_NEW_MSG'>, True)
"""

from __future__ import annotations

import time
from typing import Callable

from storelib.consume.get_message import GetMessageResult, GetMessageStatus
from storelib.context import MessageArrivals
from storelib.model.config import StoreConfig

__all__ = ["hold"]


def hold(
    config: StoreConfig,
    arrivals: MessageArrivals,
    offset: int,
    suspend_timeout_ms: int,
    look: Callable[[int], GetMessageResult],
    moved: Callable[[int], bool] | None = None,
    wait: Callable[[int, float], GetMessageResult | None] | None = None,
) -> int:
    """Hold a pull from ``offset`` that found nothing new, until ``look(offset)`` finds a message that
    passes its filter, or the time runs out; return the milliseconds it was held.

    ``look`` reads the queue again from the offset given (the pull's ``getMessage`` with its filter);
    units it scanned without a match are not looked at again. ``moved(offset)`` (cheap: has the queue
    units from that offset in a new consume queue version?) is asked first at each check, and the queue
    is read only when it says yes: a dispatch to other queues wakes no pull of this one. ``wait(offset,
    seconds)``, where the follower serves the queue's tail (:mod:`storelib.local.tail`), looks there,
    waiting up to the time left for a unit past the offset; None: look here instead.

    >>> from storelib.context import MessageArrivals
    >>> empty = lambda offset: store.get_message("GroupA", "TopicTest", r.queue_id, offset)
    >>> hold(store.config, MessageArrivals(), 1, 100, empty) >= 100        # nothing arrives: held the whole time
    True
    """
    began = time.monotonic()
    if not config.long_polling_enable:
        time.sleep(config.short_polling_time_mills / 1000)
    else:
        deadline = began + suspend_timeout_ms / 1000
        interval = max(config.long_polling_check_interval_ms, 1) / 1000
        cursor = offset
        seen = arrivals.generation
        while (remaining := deadline - time.monotonic()) > 0:
            got = wait(cursor, remaining) if wait is not None else None
            if got is None:
                seen = arrivals.wait(seen, min(remaining, interval))
                if moved is not None and not moved(cursor):
                    continue
                got = look(cursor)
            if got.status is GetMessageStatus.FOUND:
                break  # a matching message arrived: wake up
            if got.status is GetMessageStatus.NO_MATCHED_MESSAGE:
                cursor = got.next_begin_offset  # those units will not match; look only at newer ones
    return int((time.monotonic() - began) * 1000)
