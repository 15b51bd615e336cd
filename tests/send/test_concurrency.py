"""Two producer processes sending to one store at once: no duplicate, no gap, no lost message."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from storelib import MessageStore

PRODUCER = textwrap.dedent("""
    import sys
    from storelib.storage.commitlog import CommitLog
    from storelib.model.config import StoreConfig
    from storelib.model.message import Message
    from storelib.send.producer import Producer
    from storelib.storage.schema import COMMITLOG, TOPIC_CONFIG
    from storelib.delta.table import Table
    from storelib.storage.topic_config import TopicConfigTable

    root, name, batches = sys.argv[1], sys.argv[2], int(sys.argv[3])
    config = StoreConfig()
    log = CommitLog(Table(root + "/commitlog", COMMITLOG), config)
    topics = TopicConfigTable(Table(root + "/topic_config", TOPIC_CONFIG)).all()
    producer = Producer(config)
    for b in range(batches):
        msgs = [Message("TopicTest", body=f"{name}-{b}-{i}".encode(), keys=[f"{name}-{b}-{i}"]) for i in range(3)]
        log.append(producer.encode(msgs, topics))
""")


def test_parallel_producers(spark, store_path, python_env):
    store = MessageStore.create(store_path, spark)
    store.create_topic("TopicTest", queues=2)
    batches = 25
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PRODUCER, store.root, name, str(batches)],
            env=python_env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("p1", "p2")
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err

    rows = (
        store.messages()
        .orderBy("physical_offset")
        .select("physical_offset", "size", "queue_id", "queue_offset", "body")
        .collect()
    )
    bodies = sorted(bytes(r.body).decode() for r in rows)
    expected = sorted(f"{n}-{b}-{i}" for n in ("p1", "p2") for b in range(batches) for i in range(3))
    assert bodies == expected  # every message once: nothing lost, nothing twice
    assert rows[0].physical_offset == 0
    assert all(a.physical_offset + a.size == b.physical_offset for a, b in zip(rows, rows[1:]))
    for q in (0, 1):
        offsets = sorted(r.queue_offset for r in rows if r.queue_id == q)
        assert offsets == list(range(len(offsets)))
    assert store.max_offset() == rows[-1].physical_offset + rows[-1].size
    # Each batch is its own commit, and batches of one producer stay in their order.
    for name in ("p1", "p2"):
        mine = [bytes(r.body).decode() for r in rows if bytes(r.body).startswith(name.encode())]
        assert mine == [f"{name}-{b}-{i}" for b in range(batches) for i in range(3)]
