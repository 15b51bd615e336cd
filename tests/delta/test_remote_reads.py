"""Reads on an object store cost round trips: what keeps them few (issue 45's latency targets).

Through the suite's S3 server behind the counting proxy: data files open without HEAD requests, views are
kept current off the readers' path by the watcher (and never served past their bound when its looks
fail), and a filtered read skips the fresh files whose consume queue statistics rule out its tags.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from chispa import assert_df_equality

from storelib import Message, MessageStore
from storelib.delta import files
from storelib.delta.table import WATCH_SLACK_S
from storelib.delta.watch import WATCHER, Watcher


@pytest.fixture
def proxied(s3, s3_template, spark):
    """A store on the S3 server (``TopicTest``, 2 queues: a copy of one made once per run) reached through the
    counting proxy: ``(store, proxy)``."""
    from jobs.benchmarks.s3_proxy_process import ProxyProcess

    with ProxyProcess("127.0.0.1", s3.port) as proxy:
        options = {**s3.options, "AWS_ENDPOINT_URL": proxy.endpoint, "max_retries": "1", "retry_timeout": "2s"}
        store = MessageStore.open(s3.copy(s3_template(2)), spark, storage_options=options)
        yield store, proxy
        proxy.cancel_cuts()
        store.close()


def _data_heads(proxy) -> list[str]:
    return [path for _, kind, path in proxy.requests() if kind == "HEAD" and "_delta_log" not in path]


def test_look_ups_and_pulls_open_data_files_without_a_head_request(proxied):
    store, proxy = proxied
    store.subscribe("GroupA", "TopicTest", "*")
    sent = store.send_batch(
        [Message("TopicTest", body=b"m%d" % i, tags=f"Tag{i % 3}", keys=[f"k{i}"]) for i in range(60)]
    )
    store.dispatch()
    store.compact(full=True, settle_ms=0)  # clustered: a look-up reads row groups of a clustered file
    proxy.reset()
    assert store.query_by_key("TopicTest", "k7")[0].body == b"m7"
    assert store.query_by_id(sent[11].msg_id).body == b"m11"
    pulled = store.pull("GroupA", "TopicTest", sent[0].queue_id, 0, 32)
    assert [m.body for m in pulled.messages][:1] == [b"m0"]
    assert proxy.counts()["GET"] > 0 and _data_heads(proxy) == []


def test_merging_small_files_opens_them_without_a_head_request(proxied):
    """A follower merges its tables' small files every few rounds: their sizes come from the log."""
    store, proxy = proxied
    for i in range(3):
        store.send_batch([Message("TopicTest", body=b"x%d" % i, keys=[f"s{i}"], queue_id=0)])
        store.dispatch()
    proxy.reset()
    merged = store.dispatcher().compact_fresh()
    assert merged["commitlog"][0] >= 3 and merged["consume_queue"][0] >= 3 and merged["index"][0] >= 3
    assert _data_heads(proxy) == []


def test_the_watcher_brings_a_view_forward_with_another_process_s_commits(proxied, python_env):
    store, proxy = proxied
    table = store.context.tables.commitlog
    before = table.view().version
    env = {**python_env, **{k: v for k, v in store.context.tables.commitlog.storage_options.items()}}
    done = subprocess.run(
        [sys.executable, "-m", "storelib", "send", "TopicTest", "--store", store.root, "--body", "x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + 8  # within the watcher's idle time, without asking for the view
    while table._view.version == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert table._view.version > before


def test_a_view_is_not_served_past_its_bound_while_its_looks_fail(proxied):
    store, proxy = proxied
    table = store.context.tables.commitlog
    store.send(Message("TopicTest", body=b"x"))
    table.view()
    proxy.cut_next(100_000, kind=None, path_contains="/commitlog/_delta_log")
    time.sleep(table.spec.remote_look_s + WATCH_SLACK_S + 0.3)  # every look since has failed
    with pytest.raises(Exception):
        table.view()
    proxy.cancel_cuts()
    assert table.view().version >= 1


def test_a_batch_read_looks_once_and_leaves_nothing_watched(proxied):
    """A read plans once: its tables are looked at together, and no thread keeps looking after it."""
    store, proxy = proxied
    store.send_batch([Message("TopicTest", body=b"r%d" % i, tags=f"Tag{i % 2}") for i in range(10)])
    store.dispatch()
    WATCHER.stop()  # what sending and dispatching here asked to watch
    time.sleep(0.3)
    proxy.reset()
    assert store.read("TopicTest", "Tag1").count() == 5
    tables = store.context.tables
    assert not any(WATCHER.watching(t) for t in (tables.commitlog, tables.consume_queue, tables.consume_queue_ext))
    made = proxy.counts()
    time.sleep(3 * tables.commitlog.spec.remote_look_s)
    assert proxy.counts() == made  # nothing made after the read
    looks = [path for _, kind, path in proxy.requests() if kind == "HEAD" and "_delta_log" in path]
    assert looks and len(looks) == len(set(looks))  # each table looked at once at most


def test_the_watcher_stops_looking_at_a_table_nobody_asks_for():
    class Seen:
        spec = type("Spec", (), {"remote_look_s": 0.02})()
        looks = 0

        def refresh(self):
            self.looks += 1

    watcher, table = Watcher(idle_s=0.3), Seen()
    watcher.watch(table)
    time.sleep(0.8)
    looks = table.looks
    time.sleep(0.3)
    assert looks >= 3 and table.looks == looks and not watcher.watching(table)
    watcher.watch(table)  # asked again: looked at again
    time.sleep(0.2)
    assert table.looks > looks and watcher.watching(table)
    watcher.stop()


def test_a_filtered_read_skips_fresh_files_whose_tag_codes_rule_it_out(store, spark):
    store.create_topic("TopicTest", queues=2)
    for tag in ("TagA", "TagB", "TagC"):  # a fresh commitlog file and a consume queue file of each tag
        store.send_batch([Message("TopicTest", body=f"{tag}-{i}".encode(), tags=tag) for i in range(10)])
        store.dispatch()
    explained = store.explain_read("TopicTest", "TagB")
    assert explained.files_considered == 3 and explained.files_read == 1
    read = store.read("TopicTest", "TagB").select("physical_offset", "body")
    scan = store.messages("TopicTest").where("tags = 'TagB'").select("physical_offset", "body")
    assert_df_equality(read, scan, ignore_row_order=True)
    assert store.explain_read("TopicTest", "TagA || TagC").files_read == 2


def _log_versions_read(proxy, table: str) -> list[int]:
    return [
        int(path.rsplit("/", 1)[1].split(".")[0])
        for method, kind, path in proxy.requests()
        if kind == "GET" and f"/{table}/_delta_log/" in path and path.endswith(".json")
    ]


def test_a_dispatch_round_reads_new_files_without_heads_and_no_old_log_entry(proxied):
    store, proxy = proxied
    dispatcher = store.dispatcher()
    for _ in range(3):  # warm: the consume queue's log has entries a marker could be replayed from
        store.send_batch([Message("TopicTest", body=b"w", keys=["w"])])
        dispatcher.run()
    for i in range(4):  # four commitlog files, each its own commit
        store.send_batch([Message("TopicTest", body=b"n%d" % i, keys=[f"n{i}"]) for _ in range(5)])
    files._sizes.clear()  # as a follower that wrote none of them
    before = store.context.tables.consume_queue.view().version
    proxy.reset()
    assert dispatcher.run().consume_queue_rows == 20
    assert _data_heads(proxy) == []
    assert min(_log_versions_read(proxy, "consume_queue")) >= before  # no replay of the log for its marker
    assert sum(store.max_queue_offset("TopicTest", q) for q in range(2)) == 23  # every unit, once


def test_a_watcher_whose_pool_takes_no_more_work_ends_quietly(monkeypatch):
    """At a process's exit the watcher's look pool can stop taking work while its thread runs: the thread ends,
    and no traceback reaches stderr (seen at the end of scripts on S3 before)."""
    import threading

    class Quick:
        spec = type("Spec", (), {"remote_look_s": 0.0})()

        def refresh(self):
            pass

    raised: list = []
    monkeypatch.setattr(threading, "excepthook", lambda args: raised.append(args.exc_value))
    watcher, table = Watcher(), Quick()
    watcher.watch(table)
    watcher._pool.shutdown()
    deadline = time.monotonic() + 5
    while watcher.watching(table) and time.monotonic() < deadline:
        time.sleep(0.01)
    watcher.stop()
    assert not watcher.watching(table) and raised == []
