"""The stores the ``rocketmq`` source's tests read."""

from __future__ import annotations

import pytest

from storelib import Message


@pytest.fixture
def orders(store):
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
    return store, sent
