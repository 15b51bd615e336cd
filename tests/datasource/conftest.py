"""The stores the ``rocketmq`` source's tests read."""

from __future__ import annotations

from storelib import Message
from tests.stores import copied_per_test


def fill_orders(store) -> list:
    """60 messages over 4 queues of Orders (three tags, two keys each, property a), 50 dispatched, 10 not."""
    store.create_topic("Orders", queues=4)
    sent = store.send_batch(
        [
            Message("Orders", tags=f"T{i % 3}", keys=[f"k{i}", f"g{i % 5}"], body=b"%d" % i, properties={"a": str(i)})
            for i in range(50)
        ]
    )
    store.dispatch()
    sent += store.send_batch([Message("Orders", tags="T9", keys=[f"k{i}"], body=b"late") for i in range(50, 60)])
    return sent


#: ``(store, sent)``: a store with TopicTest and :func:`fill_orders`'s Orders, and the send results, in offset
#: order (a copy of a store made once per run).
orders = copied_per_test(fill_orders)
