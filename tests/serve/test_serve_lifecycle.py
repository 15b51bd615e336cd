"""Transactions (commit, rollback, check-back), invisibility and redelivery up to the DLQ, and a
PushConsumer, through ``storelib serve`` (started with short transaction timeouts)."""

from __future__ import annotations

import threading
import time

import pytest
from rocketmq import ConsumeResult, MessageListener, PushConsumer, TransactionChecker, TransactionResolution
from serve_helpers import (
    config,
    dead_letters,
    live_claims,
    make_store,
    message,
    producer,
    receive_until,
    simple_consumer,
    wait_for,
)

TOPICS = {
    "TxCommit": 2,
    "TxRollback": 2,
    "TxCheck": 2,
    "Retry": 2,
    "Push": 4,
    "Renew": 1,
    "PushRetry": 1,
    "FifoPush": 1,
}
GROUPS = {"GRetry": {"retry_max_times": 1}, "GFifoPush": {"retry_max_times": 1, "consume_message_orderly": True}}


@pytest.fixture(scope="module")
def server(serve, tmp_path_factory):
    path = make_store(str(tmp_path_factory.mktemp("lifecycle") / "store"), TOPICS, GROUPS)
    return serve(path, "--set", "transaction_timeout_ms=1000", "--set", "transaction_check_interval_ms=500")


class Checker(TransactionChecker):
    """Answers check-backs with ``resolution`` (by default: not known yet, so the half message waits)."""

    def __init__(self, resolution=TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED):
        self.resolution = resolution
        self.asked: list[str] = []

    def check(self, message):
        self.asked.append(message.message_id)
        return self.resolution


def test_transaction_commit_delivers(server):
    with producer(server.address, "TxCommit", checker=Checker()) as p:
        tx = p.begin_transaction()
        receipt = p.send(message("TxCommit", b"committed"), tx)
        with simple_consumer(server.address, "GTxCommit", {"TxCommit": "*"}) as c:
            assert c.receive(32, 15) == [], "a half message was delivered before its commit"
            tx.commit()
            got = receive_until(c, 1)
            assert [(m.message_id, m.body) for m in got] == [(receipt.message_id, b"committed")]
            c.ack(got[0])


def test_transaction_rollback_discards(server):
    with producer(server.address, "TxRollback", checker=Checker()) as p:
        tx = p.begin_transaction()
        p.send(message("TxRollback", b"rolled back"), tx)
        tx.rollback()
        p.send(message("TxRollback", b"plain"))
    with simple_consumer(server.address, "GTxRollback", {"TxRollback": "*"}) as c:
        got = receive_until(c, 1)
        for m in got:
            c.ack(m)
        got += c.receive(32, 15)
        assert [m.body for m in got] == [b"plain"]


def test_transaction_check_back_commits(server):
    checker = Checker(TransactionResolution.COMMIT)
    with producer(server.address, "TxCheck", checker=checker) as p:
        tx = p.begin_transaction()
        receipt = p.send(message("TxCheck", b"checked"), tx)  # neither committed nor rolled back
        with simple_consumer(server.address, "GTxCheck", {"TxCheck": "*"}) as c:
            got = receive_until(c, 1, timeout=30)
            assert [m.message_id for m in got] == [receipt.message_id]
            c.ack(got[0])
        assert receipt.message_id in checker.asked


def test_unacked_message_is_redelivered_then_dead_lettered(server):
    with producer(server.address, "Retry") as p:
        receipt = p.send(message("Retry", b"poison"))
    with simple_consumer(server.address, "GRetry", {"Retry": "*"}) as c:
        (first,) = receive_until(c, 1)
        assert first.delivery_attempt == 1
        c.change_invisible_duration(first, 1)  # visible again in a second instead of 15
        (second,) = receive_until(c, 1)
        assert (second.message_id, second.delivery_attempt) == (receipt.message_id, 2)
        c.change_invisible_duration(second, 1)
        time.sleep(1.5)
        assert c.receive(32, 15) == [], "delivered past the group's max attempts (retry_max_times=1)"

    dlq = dead_letters(server.path, "GRetry")
    assert dlq and [m.uniq_key for m in dlq] == [receipt.message_id]
    assert dlq[0].body == b"poison"


def test_change_invisible_duration_gives_a_new_handle(server):
    from rocketmq.v5.exception import BadRequestException

    with producer(server.address, "Retry") as p:
        p.send(message("Renew", b"renew"))
    with simple_consumer(server.address, "GRenew", {"Renew": "*"}) as c:
        got = [m for m in receive_until(c, 1) if m.body == b"renew"]
        m = got[0]
        old = m.receipt_handle
        c.change_invisible_duration(m, 30)
        assert m.receipt_handle and m.receipt_handle != old
        stale = type(m)()
        stale.topic, stale.receipt_handle = m.topic, old
        stale.message_id, stale.endpoints = m.message_id, m.endpoints
        with pytest.raises(BadRequestException):
            c.ack(stale)
        c.ack(m)


class Listener(MessageListener):
    def __init__(self):
        self.bodies: list[bytes] = []
        self.done = threading.Event()

    def consume(self, message):
        self.bodies.append(message.body)
        if len(self.bodies) >= 5:
            self.done.set()
        return ConsumeResult.SUCCESS


def test_push_consumer_receives_and_acks(server):
    from rocketmq import FilterExpression

    with producer(server.address, "Push") as p:
        for i in range(5):
            p.send(message("Push", f"push-{i}".encode()))
    listener = Listener()
    consumer = PushConsumer(config(server.address), "GPush", listener, {"Push": FilterExpression()})
    consumer.startup()
    try:
        assert listener.done.wait(30), listener.bodies
    finally:
        consumer.shutdown()
    assert sorted(listener.bodies) == [f"push-{i}".encode() for i in range(5)]
    # acked: the group holds no claim on the topic any more
    assert wait_for(lambda: live_claims(server.path, "GPush", "Push") == [], timeout=10)


class FailingOnce(MessageListener):
    """Fails each message's first delivery, then succeeds."""

    def __init__(self):
        self.attempts: dict[str, list[int]] = {}
        self.done = threading.Event()

    def consume(self, message):
        self.attempts.setdefault(message.message_id, []).append(message.delivery_attempt)
        if message.delivery_attempt >= 2:
            self.done.set()
            return ConsumeResult.SUCCESS
        return ConsumeResult.FAILURE


def test_push_consumer_failure_is_redelivered(server):
    from rocketmq import FilterExpression

    with producer(server.address, "PushRetry") as p:
        receipt = p.send(message("PushRetry", b"fail once"))
    listener = FailingOnce()
    consumer = PushConsumer(config(server.address), "GPushRetry", listener, {"PushRetry": FilterExpression()})
    consumer.startup()
    try:
        assert listener.done.wait(40), listener.attempts
    finally:
        consumer.shutdown()
    assert listener.attempts[receipt.message_id][:2] == [1, 2]
    assert wait_for(lambda: live_claims(server.path, "GPushRetry", "PushRetry") == [], timeout=10)


class FailingBody(MessageListener):
    """Fails every delivery of the message with body ``bad``; records the order of the rest."""

    def __init__(self):
        self.seen: list[bytes] = []
        self.done = threading.Event()

    def consume(self, message):
        self.seen.append(message.body)
        if message.body == b"bad":
            return ConsumeResult.FAILURE
        if message.body == b"after":
            self.done.set()
        return ConsumeResult.SUCCESS


def test_fifo_push_consumer_dead_letters_then_moves_on(server):
    from rocketmq import FilterExpression

    with producer(server.address, "FifoPush") as p:
        bad = p.send(message("FifoPush", b"bad", group="fp")).message_id
        p.send(message("FifoPush", b"after", group="fp"))
    listener = FailingBody()
    consumer = PushConsumer(config(server.address), "GFifoPush", listener, {"FifoPush": FilterExpression()})
    consumer.startup()
    try:
        assert listener.done.wait(40), listener.seen
    finally:
        consumer.shutdown()
    assert listener.seen == [b"bad", b"bad", b"after"]  # max attempts 2 (retry_max_times=1), in order
    dlq = dead_letters(server.path, "GFifoPush")
    assert dlq and [m.uniq_key for m in dlq] == [bad]
