"""``flush_disk_type``: what a send's ack promises (RocketMQ's ASYNC_FLUSH and SYNC_FLUSH)."""

from __future__ import annotations

import os

import pytest

from storelib import Message, MessageStore
from storelib.delta.log import entry_path
from storelib.model.errors import ConfigError


@pytest.fixture
def fsyncs(monkeypatch):
    """The real paths ``os.fsync`` is called on from now, in order."""
    synced: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return synced


def test_sync_flush_has_a_send_on_the_disk_before_its_ack(store_path, spark, fsyncs):
    store = MessageStore.create(store_path, spark, flush_disk_type="SYNC_FLUSH")
    store.create_topic("T", queues=1)
    fsyncs.clear()
    sent = store.send_batch([Message("T", body=b"x%d" % i) for i in range(3)])
    table = store.context.tables.commitlog
    root, version = os.path.realpath(table.path), table.view().version
    files = [p for p in fsyncs if p.startswith(root + "/") and p.endswith(".parquet")]
    entry = os.path.realpath(entry_path(table.path, version))
    assert len(files) == 1 and fsyncs.index(files[0]) < fsyncs.index(root) < fsyncs.index(entry)
    assert fsyncs[-2:] == [entry, os.path.realpath(f"{table.path}/_delta_log")]  # the last thing before the ack
    assert [store.query_by_id(r.msg_id).body for r in sent] == [b"x0", b"x1", b"x2"]
    store.close()


def test_async_flush_leaves_the_writing_out_to_the_operating_system(store, fsyncs):
    store.create_topic("T", queues=1)
    fsyncs.clear()
    store.send(Message("T", body=b"x"))
    assert store.context.config.flush_disk_type == "ASYNC_FLUSH" and fsyncs == []


def test_an_unknown_flush_type_is_refused_by_name(store_path, spark):
    with pytest.raises(ConfigError, match="flush_disk_type.*ASYNC_FLUSH, SYNC_FLUSH"):
        MessageStore.create(store_path, spark, flush_disk_type="SOMETIMES")
    assert not os.path.exists(os.path.join(store_path, "commitlog"))
