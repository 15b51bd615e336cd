"""Transactional messages: half messages, end_transaction, and the check-back, crash-safe."""

from __future__ import annotations

import threading

import pytest

from storelib import Message, MessageStore, TransactionState
from storelib.model.errors import StoreError, TransactionEndedError, TransactionError, TransactionNotFoundError
from storelib.model.message import SysFlag
from storelib.model.topic import TRANS_CHECK_MAX_TIME_TOPIC, TRANS_HALF_TOPIC, TRANS_OP_HALF_TOPIC
from storelib.schedule.check import check_transactions
from storelib.schedule.transaction import pending_halves

FAR = 10**13  # a clock far past every timeout
CHECKER = "test_transaction:answer"
_HANG = threading.Event()


def answer(message):
    """The test producer group's checker: the body says what to answer."""
    body = message.body
    if body.startswith(b"commit"):
        return TransactionState.COMMIT_MESSAGE
    if body.startswith(b"rollback"):
        return "ROLLBACK_MESSAGE"
    if body.startswith(b"boom"):
        raise RuntimeError("the order service is down")
    if body.startswith(b"hang"):
        _HANG.wait()  # never set: the checker hangs
    return TransactionState.UNKNOW


def _unknown(m, arg):
    return TransactionState.UNKNOW


def _bodies(store, topic):
    return sorted(bytes(r.body) for r in store.messages(topic).collect())


def test_commit_writes_the_real_message_once(store):
    r = store.send_in_transaction(
        Message("TopicTest", body=b"order", tags="TagA", keys=["o-1"], queue_id=2), _unknown, producer_group="PG"
    )
    half = store.query_by_id(r.msg_id)
    p = half.properties
    assert (half.topic, half.queue_id, half.sysflag & SysFlag.TRANSACTION_ROLLBACK_TYPE) == (TRANS_HALF_TOPIC, 0, 0)
    assert (p["TRAN_MSG"], p["PGROUP"], p["REAL_TOPIC"], p["REAL_QID"], p["__transactionId__"]) == (
        "true",
        "PG",
        "TopicTest",
        "2",
        r.transaction_id,
    )
    store.dispatch()
    assert store.read("TopicTest").count() == 0 and store.query_by_key("TopicTest", "o-1") == []
    assert store.pull("GroupA", "TopicTest", 2, 0, selector="*").messages == []

    store.end_transaction(r.transaction_id, TransactionState.COMMIT)
    store.dispatch()
    got = store.pull("GroupA", "TopicTest", 2, 0, selector="*").messages
    assert [m.body for m in got] == [b"order"]
    m = got[0]
    assert m.sysflag & SysFlag.TRANSACTION_ROLLBACK_TYPE == SysFlag.TRANSACTION_COMMIT_TYPE
    assert "REAL_TOPIC" not in m.properties and m.properties["TRAN_MSG"] == "true" and m.uniq_key == r.transaction_id
    assert store.query_by_key("TopicTest", "o-1")[0].msg_id == m.msg_id
    ops = store.messages(TRANS_OP_HALF_TOPIC).collect()
    assert [(bytes(o.body), o.tags) for o in ops] == [(b"%d," % half.queue_offset, "d")]

    before = store.max_offset()
    for state in (TransactionState.COMMIT, TransactionState.ROLLBACK):
        with pytest.raises(TransactionEndedError) as e:
            store.end_transaction(r.transaction_id, state)
        assert isinstance(e.value, StoreError) and e.value.field == "transaction_id"
    assert store.max_offset() == before


def test_rollback_is_never_visible(store):
    r = store.send_in_transaction(
        Message("TopicTest", body=b"no"), lambda m, a: "ROLLBACK_MESSAGE", producer_group="PG"
    )
    assert r.local_state is TransactionState.ROLLBACK
    with pytest.raises(TransactionEndedError):
        store.end_transaction(r.transaction_id, "COMMIT_MESSAGE")
    store.register_transaction_checker("PG", CHECKER)
    assert store.check_transactions(now=FAR).checked == 0
    store.dispatch()
    assert store.read("TopicTest").count() == 0
    with pytest.raises(TransactionNotFoundError):
        store.end_transaction("NO-SUCH-ID", "COMMIT")
    with pytest.raises(TransactionError):
        store.end_transaction(r.transaction_id, "MAYBE")


def test_local_transaction_that_raises_is_unknown(store):
    r = store.send_in_transaction(Message("TopicTest"), lambda m, a: 1 / 0, producer_group="PG")
    assert r.local_state is TransactionState.UNKNOW and "ZeroDivisionError" in r.error
    assert pending_halves(store.context)[0].num_rows == 1


def test_check_back_applies_the_answers(spark, store_path):
    store = MessageStore.create(store_path, spark, transaction_checker_timeout_ms=300)
    store.create_topic("TopicTest", queues=4)
    store.register_transaction_checker("PG", CHECKER)
    sent = {
        body: store.send_in_transaction(Message("TopicTest", body=body), _unknown, producer_group="PG")
        for body in (b"commit", b"rollback", b"boom", b"hang", b"later")
    }
    young = store.send_in_transaction(
        Message("TopicTest", body=b"commit-young", properties={"CHECK_IMMUNITY_TIME_IN_SECONDS": "3600"}),
        _unknown,
        producer_group="PG",
    )
    born = store.query_by_id(young.msg_id).born_timestamp.timestamp() * 1000
    assert store.check_transactions(now=int(born) + 1000).checked == 0  # under transaction_timeout_ms (6 s)

    result = store.check_transactions(now=int(born) + 60_000)
    assert (result.checked, result.committed, result.rolled_back, result.unknown, result.given_up) == (5, 1, 1, 3, 0)
    assert any("the order service is down" in e for e in result.errors)
    assert any("did not answer" in e for e in result.errors)
    assert _bodies(store, "TopicTest") == [b"commit"]
    halves = {bytes(r["body"]): r for r in pending_halves(store.context)[0].to_pylist()}
    assert set(halves) == {b"boom", b"hang", b"later", b"commit-young"}
    assert dict(halves[b"later"]["properties"])["TRANSACTION_CHECK_TIMES"] == "1"
    assert "TRANSACTION_CHECK_TIMES" not in dict(halves[b"commit-young"]["properties"])

    store.end_transaction(sent[b"later"].transaction_id, "COMMIT")  # the producer answers late: the put-back copy
    result = store.check_transactions(now=int(born) + 3_700_000)
    assert (result.checked, result.committed, result.unknown) == (3, 1, 2)  # boom, hang again; young now ripe
    assert _bodies(store, "TopicTest") == [b"commit", b"commit-young", b"later"]


def test_given_up_after_the_check_max(spark, store_path):
    store = MessageStore.create(store_path, spark, transaction_check_max=2)
    store.create_topic("TopicTest", queues=4)
    store.register_transaction_checker("PG", CHECKER)
    r = store.send_in_transaction(Message("TopicTest", body=b"later"), _unknown, producer_group="PG")
    assert [store.check_transactions(now=FAR).unknown for _ in range(2)] == [1, 1]
    result = store.check_transactions(now=FAR)
    assert (result.checked, result.given_up, result.unknown) == (1, 1, 0)
    kept = store.messages(TRANS_CHECK_MAX_TIME_TOPIC).collect()
    assert len(kept) == 1 and dict(kept[0].properties)["TRANSACTION_CHECK_TIMES"] == "2"
    assert store.check_transactions(now=FAR).checked == 0
    with pytest.raises(TransactionEndedError):
        store.end_transaction(r.transaction_id, "COMMIT")
    store.dispatch()
    assert store.read("TopicTest").count() == 0


class TestCrashSafety:
    @pytest.mark.parametrize("step", ["asked", "committed"])
    def test_crash_at_every_step_then_rerun(self, store, step):
        store.register_transaction_checker("PG", CHECKER)
        for body in (b"commit-1", b"rollback-1", b"later-1", b"commit-2"):
            store.send_in_transaction(Message("TopicTest", body=body), _unknown, producer_group="PG")

        def crash(name: str) -> None:
            if name == step:
                raise KeyboardInterrupt(name)

        with pytest.raises(KeyboardInterrupt):
            check_transactions(store.context, now=FAR, fault=crash)
        again = store.check_transactions(now=FAR)
        assert again.checked == (4 if step == "asked" else 1)  # after a commit only the put-back copy is left
        assert _bodies(store, "TopicTest") == [b"commit-1", b"commit-2"]
        assert store.check_transactions(now=FAR).unknown == 1
        assert _bodies(store, "TopicTest") == [b"commit-1", b"commit-2"]


def test_check_job(store, python_env):
    import subprocess
    import sys
    from pathlib import Path

    store.register_transaction_checker("PG", "storelib.schedule.check:commit_all")
    store.send_in_transaction(Message("TopicTest", body=b"x"), _unknown, producer_group="PG")
    job = Path(__file__).resolve().parents[2] / "jobs" / "check_transactions.py"
    out = subprocess.run(
        [sys.executable, str(job), "--store", store.root, "--now", str(FAR)],
        env=python_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "checked 1 half messages: 1 committed, 0 rolled back, 0 unknown, 0 given up" in out.stdout
    assert _bodies(store, "TopicTest") == [b"x"]
