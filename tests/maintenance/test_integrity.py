"""A damaged store is refused at open with StoreCorruptedError; orphan files of killed writes are cleaned."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from storelib import Message, MessageSelector, MessageStore, StoreConfig
from storelib.delta.commit import remove_actions
from storelib.delta.log import add_actions
from storelib.delta.orphans import orphan_files
from storelib.dispatch.reput import Dispatcher
from storelib.maintenance.cluster import cluster_commitlog
from storelib.model.errors import StoreCorruptedError, StoreError
from storelib.schedule.check import check_transactions
from storelib.schedule.deliver import deliver
from storelib.storage.summaries import read_summaries


def filled(store, batches: int = 3) -> MessageStore:
    for i in range(batches):
        store.send_batch(
            [Message("TopicTest", body=b"m%d" % j, tags=f"Tag{j % 2}", keys=[f"k{i}-{j}"]) for j in range(5)]
        )
    store.dispatch()
    return store


def newest_commit(table_path: str) -> str:
    return sorted(glob.glob(f"{table_path}/_delta_log/*.json"))[-1]


def _delete_newest_commitlog_commit(root):
    os.remove(newest_commit(f"{root}/commitlog"))


def _delete_commitlog_log(root):
    shutil.rmtree(f"{root}/commitlog/_delta_log")


def _delete_consume_queue_file(root):
    os.remove(sorted(glob.glob(f"{root}/consume_queue/*.parquet"))[0])


def _table_folder_is_a_file(root):
    shutil.rmtree(f"{root}/index")
    open(f"{root}/index", "w").close()


def _garbled_log(root):
    with open(newest_commit(f"{root}/consume_queue"), "w") as f:
        f.write("{not json")


DAMAGES = [
    pytest.param(_delete_newest_commitlog_commit, "past the commitlog's end", id="newest-commitlog-commit-deleted"),
    pytest.param(_delete_commitlog_log, "no Delta log", id="commitlog-delta-log-deleted"),
    pytest.param(_delete_consume_queue_file, "data file(s) its log names are missing", id="data-file-deleted"),
    pytest.param(_table_folder_is_a_file, "is not a folder", id="table-folder-is-a-file"),
    pytest.param(_garbled_log, "cannot be read", id="garbled-log"),
]


@pytest.mark.parametrize("damage, says", DAMAGES)
def test_open_refuses_a_damaged_store(spark, store, damage, says):
    filled(store)
    damage(store.root)
    listing = sorted(os.walk(store.root))
    for attempt in (lambda: MessageStore.open(store.root, spark), lambda: MessageStore.create(store.root, spark)):
        with pytest.raises(StoreCorruptedError) as info:
            attempt()
        assert isinstance(info.value, StoreError) and info.value.field == "root"
        assert says in str(info.value) and any(says in p for p in info.value.problems)
        assert "MessageStore.verify" in str(info.value)
    assert sorted(os.walk(store.root)) == listing  # refused before anything was created or written
    assert any(says in p for p in MessageStore.verify(store.root, spark))


def test_a_sound_store_verifies_clean(spark, store):
    filled(store)
    store.compact(settle_ms=0)
    assert MessageStore.verify(store.root, spark, full=True) == []
    MessageStore.open(store.root, spark)


def test_dispatch_refuses_when_the_commitlog_lost_commits(store):
    filled(store)
    _delete_newest_commitlog_commit(store.root)
    store.context.tables.commitlog.release()  # forget the warm snapshot, as a new process would
    with pytest.raises(StoreCorruptedError, match="past the commitlog's end"):
        store.dispatch()


def test_no_offset_or_msg_id_is_handed_out_twice_after_a_lost_commit(spark, store):
    """A lost commit that was dispatched is refused; without its file (nothing to commit back), rebuilding the
    derived tables lets sends go on without reusing an id that the old consume queue or index pointed at."""
    filled(store)
    old_ids = {r.msg_id for r in store.messages("TopicTest").select("msg_id").collect()}
    _delete_newest_commitlog_commit(store.root)
    with pytest.raises(StoreCorruptedError):
        MessageStore.open(store.root, spark)
    newest = max(glob.glob(f"{store.root}/commitlog/part-*.parquet"), key=os.path.getmtime)
    os.remove(newest)  # the lost commit's data file is gone too: its messages cannot come back
    for name in ("consume_queue", "consume_queue_ext", "index"):  # the repair the error names
        shutil.move(f"{store.root}/{name}", f"{store.root}/../{name}-damaged")
    reopened = MessageStore.open(store.root, spark)
    reopened.dispatch()
    assert reopened.dispatch_progress()["consume_queue"] == reopened.max_offset()
    assert MessageStore.verify(store.root, spark, full=True) == []
    assert len(old_ids) == 15 and reopened.messages("TopicTest").count() == 10


def test_full_verify_finds_a_hole_in_the_commitlog(spark, store):
    filled(store)
    table = store.context.tables.commitlog
    dt = table.snapshot()
    actions = add_actions(dt).sort_by("min.physical_offset")
    middle = actions.slice(1, 1)
    table.commit(dt, [], removes=remove_actions(middle), operation="DAMAGE")
    problems = MessageStore.verify(store.root, spark, full=True)
    assert problems and "is followed by one at" in problems[0]


# ---- orphan files ------------------------------------------------------------------------------


def orphans(store) -> dict[str, list[str]]:
    found = {name: orphan_files(t, min_age_s=0) for name, t in store.context.tables.by_name().items()}
    return {k: v for k, v in found.items() if v}


def folder_bytes_beyond_snapshot(store) -> int:
    """Bytes of data files in the table folders that the newest snapshots do not hold."""
    extra = 0
    for t in store.context.tables.by_name().values():
        live = set(add_actions(t.snapshot()).column("path").to_pylist())
        for f in glob.glob(f"{t.path}/*.parquet"):
            if os.path.basename(f) not in live:
                extra += os.path.getsize(f)
    return extra


class Killed(BaseException):
    """A job stopped dead at a step: no ``except Exception`` clean-up runs after it."""


def _kill_at(step):
    def fault(name):
        if name == step:
            raise Killed(name)

    return fault


JOBS = [
    ("dispatch", "consume_queue_ext.written", lambda ctx, f: Dispatcher.of(ctx, fault=f).run()),
    ("dispatch", "consume_queue.written", lambda ctx, f: Dispatcher.of(ctx, fault=f).run()),
    ("dispatch", "index.written", lambda ctx, f: Dispatcher.of(ctx, fault=f).run()),
    ("dispatch", "consume_queue.committed", lambda ctx, f: Dispatcher.of(ctx, fault=f).run()),  # ext summaries after
    ("compaction", "written", lambda ctx, f: cluster_commitlog(ctx, settle_ms=0, fault=f)),
    ("compaction", "summarized", lambda ctx, f: cluster_commitlog(ctx, settle_ms=0, fault=f)),
    ("delivery", "planned", lambda ctx, f: deliver(ctx, now=2**50, fault=f)),
    ("check-back", "asked", lambda ctx, f: check_transactions(ctx, now=2**50, fault=f)),
]


def test_kill_and_rerun_every_job_leaves_no_orphans_after_vacuum(spark, store_path):
    """Each job killed at each step, then rerun: the rows are whole, and vacuum takes the disk back to what
    the snapshots hold."""
    store = MessageStore.create(store_path, spark, config=StoreConfig(orphan_file_min_age_hours=0))
    store.create_topic("TopicTest", queues=2)
    store.register_transaction_checker("PG", "storelib.schedule.check:commit_all")
    sent, removed = 0, {}
    for job, step, run in JOBS:
        store.send_batch(
            [Message("TopicTest", body=b"x", keys=[f"k{sent + i}"], delay_level=1 + i % 2) for i in range(6)]
        )
        sent += 6
        if job == "check-back":
            for _ in range(3):
                store.send_in_transaction(
                    Message("TopicTest", body=b"half"), lambda m, a: "UNKNOW", producer_group="PG"
                )
            sent += 3
        with pytest.raises(Killed):
            run(store.context, _kill_at(step))
        run(store.context, None)  # the rerun
        store.dispatch()
        assert store.dispatch_progress()["consume_queue"] == store.max_offset(), (job, step)
        counts = store.vacuum(retention_hours=0)
        removed[(job, step)] = counts["orphans"]
        assert orphans(store) == {} and folder_bytes_beyond_snapshot(store) == 0, (job, step, counts)
        assert MessageStore.verify(store.root, spark, full=True) == [], (job, step)
    # a compaction stopped after writing leaves its files (dispatch deletes its own on the way out; a
    # process killed hard leaves them too: see the next test); vacuum found and removed them
    assert removed[("compaction", "written")] > 0 and removed[("compaction", "summarized")] > 0, removed
    deliver(store.context, now=2**50)
    store.dispatch()
    topic = store.messages("TopicTest")
    assert topic.count() == sent and topic.select("uniq_key").distinct().count() == sent


#: Dispatch in its own process that dies hard (os._exit: no clean-up at all) after writing its files.
CRASHING_DISPATCH = """
import os, sys
from storelib import MessageStore
from storelib.dispatch.reput import Dispatcher
from storelib.session import get_spark

store = MessageStore.open(sys.argv[1], get_spark("crashing-dispatch"))
Dispatcher.of(store.context, fault=lambda step: os._exit(86) if step == "index.written" else None).run()
"""


def test_a_killed_process_leaves_orphans_that_vacuum_removes(spark, store, python_env):
    store.send_batch([Message("TopicTest", body=b"x", keys=[f"k{i}"], tags=f"Tag{i % 2}") for i in range(20)])
    crashed = subprocess.run(
        [sys.executable, "-c", CRASHING_DISPATCH, store.root],
        env=python_env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert crashed.returncode == 86, crashed.stderr[-2000:]
    left = orphans(store)
    assert set(left) == {"index"}  # the ext and consume queue rows were committed before the kill
    store.dispatch()
    assert store.vacuum()["orphans"] == 0  # younger than orphan_file_min_age_hours: could be a live write
    assert orphans(store) == left
    fresh = MessageStore.open(store.root, spark, orphan_file_min_age_hours=0)
    assert fresh.vacuum()["orphans"] == len(left["index"])
    assert orphans(fresh) == {} and folder_bytes_beyond_snapshot(fresh) == 0
    assert len(fresh.query_by_key("TopicTest", "k7")) == 1
    # the ext files' summaries come after the commits, so the kill left them unrecorded: reads use the files
    assert read_summaries(fresh.context.tables.ext_summary, "TopicTest").num_rows == 0
    assert sorted(r.keys for r in fresh.read("TopicTest", MessageSelector.by_tag("Tag1")).collect()) == sorted(
        f"k{i}" for i in range(1, 20, 2)
    )


def test_a_library_error_under_a_call_leaves_as_a_store_error(spark, store):
    """A data file garbled on disk (its log is fine): the read under query_by_id fails in pyarrow, and the
    caller gets a StoreError (pyarrow reports a garbled page as an OSError: StoreIOError) with it chained."""
    from storelib.model.errors import ExternalError, StoreIOError

    r = filled(store, batches=1) and store.messages("TopicTest").first()
    for path in glob.glob(f"{store.root}/commitlog/*.parquet"):
        with open(path, "r+b") as f:
            f.seek(0)
            f.write(b"garbage!" * 8)
    with pytest.raises((ExternalError, StoreIOError)) as info:
        store.query_by_id(r.msg_id)
    assert isinstance(info.value, StoreError) and info.value.__cause__ is not None
    assert "Deserializing page header failed" in str(info.value) and info.value.where == "query_by_id"


def test_a_store_opens_while_another_process_sends(store):
    """Opening lists each table's folder, then reads its log: a file committed in between is not 'missing'."""
    from storelib.delta.health import table_problems

    script = (
        "import sys, time\nfrom storelib import Message, MessageStore\ns = MessageStore.open(sys.argv[1])\n"
        "end = time.monotonic() + 5\nwhile time.monotonic() < end:\n"
        "    s.send_batch([Message('TopicTest', body=b'x')])\n"
    )
    sender = subprocess.Popen([sys.executable, "-c", script, store.root])
    try:
        table = store.context.tables.commitlog
        first = table.snapshot().version()
        while table.snapshot().version() < first + 3 and sender.poll() is None:
            pass
        seen = []
        while sender.poll() is None:
            seen.append(table_problems(table))
    finally:
        sender.kill()
        sender.wait()
    assert len(seen) > 20 and all(p == [] for p in seen)


def _overwrite_footer(path: str) -> None:
    """64 bytes of the footer overwritten (pyarrow always notices there; in pages it may decode garbage)."""
    with open(path, "r+b") as f:
        f.seek(-72, os.SEEK_END)
        f.write(b"\xa5" * 64)


def _first_file(root: str, table: str) -> str:
    return sorted(glob.glob(f"{root}/{table}/*.parquet"))[0]


def _tamper_a_body(root: str) -> None:
    path = _first_file(root, "commitlog")
    rows = pq.read_table(path)
    bodies = rows.column("body").to_pylist()
    bodies[0] = b"not what was sent"
    pq.write_table(rows.set_column(rows.schema.get_field_index("body"), "body", pa.array(bodies, pa.binary())), path)


def _fewer_rows(root: str) -> None:
    path = _first_file(root, "consume_queue")
    rows = pq.read_table(path)
    pq.write_table(rows.slice(0, rows.num_rows - 1), path)


FILE_DAMAGES = [
    pytest.param(
        lambda root: _overwrite_footer(_first_file(root, "consume_queue")),
        "consume_queue: data file part-",
        "dispatch again",
        id="consume-queue-bytes",
    ),
    pytest.param(
        lambda root: _overwrite_footer(_first_file(root, "commitlog")),
        "commitlog: data file part-",
        "restore it from a copy",
        id="commitlog-bytes",
    ),
    pytest.param(_tamper_a_body, "do not match their CRCs", "restore it from a copy", id="commitlog-body"),
    pytest.param(_fewer_rows, "rows where its log says", "dispatch again", id="consume-queue-rows"),
]


@pytest.mark.parametrize("damage, says, repair", FILE_DAMAGES)
def test_full_verify_names_every_damaged_file_and_its_repair(spark, store, damage, says, repair):
    filled(store)  # sound before the damage: test_a_sound_store_verifies_clean
    damage(store.root)
    problems = MessageStore.verify(store.root, spark, full=True)
    named = [p for p in problems if says in p]
    assert named and repair in named[0] and "is damaged" in named[0]


def test_full_verify_finds_a_queue_missing_units(spark, store):
    """A consume queue file dropped from the log (a commit removing it) leaves a queue with a gap."""
    filled(store, batches=1)
    table = store.context.tables.consume_queue
    for _ in range(2):  # a second round on the same queues, in its own files
        store.send_batch([Message("TopicTest", body=b"x", queue_id=q) for q in range(4)])
        store.dispatch()
    dt = table.snapshot()
    files = add_actions(dt).sort_by("min.queue_offset").to_pylist()
    by_queue: dict = {}
    for f in files:  # one queue a file
        by_queue.setdefault((f["min.topic"], f["min.queue_id"]), []).append(f)
    middle = [fs[1] for fs in by_queue.values() if len(fs) >= 3][:1]
    assert middle
    table.commit(dt, [], removes=remove_actions(middle))
    problems = MessageStore.verify(store.root, spark, full=True)
    assert any("some are missing or doubled" in p and "dispatch again" in p for p in problems)
