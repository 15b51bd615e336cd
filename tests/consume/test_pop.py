"""Pop consumption: receive, ack, invisibility, redelivery, the DLQ, FIFO queues and two servers at once."""

from __future__ import annotations

import threading
import time

from storelib import Message, MessageStore
from storelib.consume.pop import PopService
from storelib.filter.selector import MessageSelector
from storelib.storage.pop_log import PopLog


def _sent(store: MessageStore, n: int, topic: str = "TopicTest", **kw) -> list[str]:
    ids = [store.send(Message(topic, body=f"m{i}".encode(), **kw)).uniq_key for i in range(n)]
    store.dispatch()
    return ids


def _ids(got) -> list[str]:
    return [g.message.uniq_key for g in got]


def test_received_once_then_acked(store):
    ids = _sent(store, 5)
    pop = PopService(store.context)
    got = pop.receive("GPop1", "TopicTest", 32, invisible_ms=60_000)
    assert sorted(_ids(got)) == sorted(ids)
    assert {g.delivery_attempt for g in got} == {1}
    assert pop.receive("GPop1", "TopicTest", 32, invisible_ms=60_000) == []
    assert pop.ack("GPop1", [g.checkpoint for g in got]) == [True] * 5
    assert pop.ack("GPop1", [got[0].checkpoint]) == [False]  # acked before
    assert pop.live("GPop1", "TopicTest") == []


def test_batch_size_is_kept_and_the_rest_comes_next(store):
    ids = _sent(store, 7)
    pop = PopService(store.context)
    first = pop.receive("GPop2", "TopicTest", 3, invisible_ms=60_000)
    rest = pop.receive("GPop2", "TopicTest", 32, invisible_ms=60_000)
    assert len(first) == 3
    assert sorted(_ids(first) + _ids(rest)) == sorted(ids)


def test_not_acked_in_time_is_received_again_with_the_attempt_raised(store):
    (mid,) = _sent(store, 1)
    pop = PopService(store.context)
    (first,) = pop.receive("GPop3", "TopicTest", 32, invisible_ms=200)
    time.sleep(0.3)
    (again,) = pop.receive("GPop3", "TopicTest", 32, invisible_ms=60_000)
    assert (again.message.uniq_key, again.delivery_attempt) == (mid, 2)
    assert pop.ack("GPop3", [first.checkpoint]) == [False]  # the old receipt is spent
    assert pop.ack("GPop3", [again.checkpoint]) == [True]


def test_past_the_groups_attempts_the_message_goes_to_the_dlq(store):
    store.create_group("GPopDead", retry_max_times=1)  # two deliveries
    (mid,) = _sent(store, 1)
    pop = PopService(store.context)
    for attempt in (1, 2):
        (got,) = pop.receive("GPopDead", "TopicTest", 32, invisible_ms=100)
        assert got.delivery_attempt == attempt
        time.sleep(0.15)
    assert pop.receive("GPopDead", "TopicTest", 32, invisible_ms=100) == []
    store.dispatch()
    dead = store.get_message("GPopDead", "%DLQ%GPopDead", 0, 0).messages
    assert [m.uniq_key for m in dead] == [mid]
    assert pop.live("GPopDead", "TopicTest") == []


def test_change_invisible_gives_a_new_receipt_and_spends_the_old(store):
    _sent(store, 1)
    pop = PopService(store.context)
    (got,) = pop.receive("GPop4", "TopicTest", 32, invisible_ms=100)
    renewed = pop.change_invisible("GPop4", got.checkpoint, 60_000)
    assert renewed is not None and renewed.attempt == 1 and renewed.pop_time > got.checkpoint.pop_time
    time.sleep(0.15)
    assert pop.receive("GPop4", "TopicTest", 32, invisible_ms=100) == []  # still invisible
    assert pop.change_invisible("GPop4", got.checkpoint, 1000) is None
    assert pop.ack("GPop4", [got.checkpoint, renewed]) == [False, True]


def test_forward_to_dead_letter_ends_the_claim(store):
    (mid,) = _sent(store, 1)
    pop = PopService(store.context)
    (got,) = pop.receive("GPop5", "TopicTest", 32, invisible_ms=60_000)
    assert pop.to_dead_letter("GPop5", got.checkpoint) is True
    assert pop.to_dead_letter("GPop5", got.checkpoint) is False
    store.dispatch()
    assert [m.uniq_key for m in store.get_message("GPop5", "%DLQ%GPop5", 0, 0).messages] == [mid]


def test_fifo_hands_out_a_queue_in_order_one_flight_at_a_time(store):
    ids = _sent(store, 3, queue_id=2)
    pop = PopService(store.context)
    seen = []
    for _ in range(3):
        (got,) = pop.receive("GPopFifo", "TopicTest", 1, invisible_ms=60_000, fifo=True)
        assert pop.receive("GPopFifo", "TopicTest", 1, invisible_ms=60_000, fifo=True) == []  # queue busy
        seen.append(got.message.uniq_key)
        pop.ack("GPopFifo", [got.checkpoint])
    assert seen == ids


def test_tag_filter(store):
    a = _sent(store, 2, tags="TagA")
    _sent(store, 2, tags="TagB")
    pop = PopService(store.context)
    got = pop.receive("GPopTag", "TopicTest", 32, invisible_ms=60_000, selector=MessageSelector.by_tag("TagA"))
    assert sorted(_ids(got)) == sorted(a)
    assert pop.receive("GPopTag", "TopicTest", 32, invisible_ms=60_000, selector=MessageSelector.by_tag("TagA")) == []


def test_long_polling_answers_when_a_message_arrives(store):
    pop = PopService(store.context)
    assert pop.receive("GPopWait", "TopicTest", 32, invisible_ms=60_000) == []
    timer = threading.Timer(0.3, lambda: _sent(store, 1))
    timer.start()
    started = time.monotonic()
    got = pop.receive("GPopWait", "TopicTest", 32, invisible_ms=60_000, wait_ms=20_000)
    timer.join()
    assert len(got) == 1 and time.monotonic() - started < 20


def test_claims_survive_a_restart_and_compaction(store):
    _sent(store, 4)
    pop = PopService(store.context)
    got = pop.receive("GPopKeep", "TopicTest", 2, invisible_ms=60_000)
    pop.ack("GPopKeep", [got[0].checkpoint])
    log = PopLog(store.context.tables.pop_log)
    before = log.state().live("GPopKeep", "TopicTest")
    assert log.compact(min_files=2)[1] == 1
    restarted = PopService(store.context)
    assert restarted.live("GPopKeep", "TopicTest") == before == [got[1].checkpoint]
    rest = restarted.receive("GPopKeep", "TopicTest", 32, invisible_ms=60_000)
    assert len(rest) == 2 and set(_ids(rest)).isdisjoint(_ids(got))


def test_two_servers_never_hand_out_one_message_twice(store):
    ids = _sent(store, 40)
    servers = [PopService(store.context), PopService(store.context)]
    got: list[list[str]] = [[], []]

    def consume(i: int) -> None:
        for _ in range(30):
            got[i].extend(_ids(servers[i].receive("GPopTwo", "TopicTest", 3, invisible_ms=60_000)))

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got[0] + got[1]) == sorted(ids)


def test_receives_commit_the_groups_consumer_offsets_so_lag_counts_what_no_receive_took(store):
    _sent(store, 3, queue_id=2)
    pop = PopService(store.context)
    assert len(pop.receive("GPopLag", "TopicTest", 32, invisible_ms=60_000)) == 3
    assert store.committed_offset("GPopLag", "TopicTest", 2) == 3
