"""A lost tail (issue 48): a send's data file whose log entry was lost is found at open and by verify, and
committed back by repair with its own offsets and ids, after its messages are checked."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storelib import Message, MessageStore
from storelib.maintenance.lost_tail import lost_tail
from storelib.model.errors import StoreCorruptedError


def _lose_newest_commit(store: MessageStore) -> tuple[str, list]:
    """Send two commits, keep the second's acked results, then delete its log entry: ``(its file, results)``."""
    store.send_batch([Message("TopicTest", body=b"first-%d" % i, keys=[f"f{i}"]) for i in range(5)])
    acked = store.send_batch([Message("TopicTest", body=b"acked-%d" % i, keys=[f"a{i}"]) for i in range(20)])
    entries = sorted(glob.glob(f"{store.root}/commitlog/_delta_log/*.json"))
    os.remove(entries[-1])
    store.close()
    newest = max(glob.glob(f"{store.root}/commitlog/part-*.parquet"), key=os.path.getmtime)
    return os.path.basename(newest), acked


def test_open_refuses_a_store_whose_newest_commit_was_lost_and_repair_brings_it_back(spark, store):
    name, acked = _lose_newest_commit(store)
    with pytest.raises(StoreCorruptedError, match=f"{name} holds messages from offset"):
        MessageStore.open(store.root, spark)
    assert any(name in p for p in MessageStore.verify(store.root, spark))
    repaired = MessageStore.repair(store.root, spark)
    assert [f.name for f in repaired.files] == [name] and repaired.messages == 20 and repaired.refused == []
    reopened = MessageStore.open(store.root, spark)
    assert reopened.query_by_id(acked[7].msg_id).body == b"acked-7"  # its own id, its own offset
    assert reopened.query_by_id(acked[7].msg_id).commitlog_offset == acked[7].commitlog_offset
    after = reopened.send_batch([Message("TopicTest", body=b"after", queue_id=acked[-1].queue_id)])
    assert after[0].commitlog_offset >= max(r.commitlog_offset for r in acked) + 1  # no offset handed out twice
    assert after[0].queue_offset == max(r.queue_offset for r in acked if r.queue_id == acked[-1].queue_id) + 1
    assert after[0].msg_id not in {r.msg_id for r in acked}
    reopened.dispatch()
    assert MessageStore.verify(store.root, spark, full=True) == []
    assert reopened.messages("TopicTest").count() == 26
    reopened.close()


def test_repair_refuses_a_lost_file_whose_messages_are_damaged(spark, store):
    name, _ = _lose_newest_commit(store)
    path = f"{store.root}/commitlog/{name}"
    rows = pq.read_table(path)
    bodies = rows.column("body").to_pylist()
    bodies[3] = b"tampered"
    pq.write_table(rows.set_column(rows.schema.get_field_index("body"), "body", pa.array(bodies, pa.binary())), path)
    repaired = MessageStore.repair(store.root, spark)
    assert repaired.files == [] and "does not match its CRC" in repaired.refused[0]
    with pytest.raises(StoreCorruptedError):  # still refused: nothing was committed
        MessageStore.open(store.root, spark)


def test_the_command_repairs_and_says_what_it_did(spark, store, python_env):
    name, _ = _lose_newest_commit(store)
    run = [sys.executable, "-m", "storelib", "repair", "--store", store.root]
    done = subprocess.run(run, env=python_env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"{name}: committed back at version" in done.stdout and "committed back 20 messages" in done.stdout
    again = subprocess.run(run, env=python_env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "nothing to repair" in again.stdout


def test_a_file_of_a_commit_under_way_is_not_a_lost_tail(store):
    """While a sender holds the commitlog's turn, a fresh unnamed file may be its commit's: not reported."""
    name, _ = _lose_newest_commit(store)
    table = store.context.tables.commitlog
    table.release()  # as a new process: the log read afresh
    assert [f.name for f in lost_tail(table)] == [name]
    seen: list = []
    with table.commit_turn(snapshot=False):  # another thread of this process in its turn: the check cannot take it
        worker = threading.Thread(target=lambda: seen.append(lost_tail(table)))
        worker.start()
        worker.join()
    assert seen == [[]]
