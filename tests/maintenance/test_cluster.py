"""Clustering the commitlog (storelib.maintenance.cluster): every address keeps working, reads prune, crashes are
safe."""

from __future__ import annotations

import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from storelib import Message, MessageSelector
from storelib.maintenance.cluster import cluster_commitlog
from storelib.storage.commitlog import is_clustered
from storelib.storage.schema import CLUSTERED_ROW_GROUP_ROWS
from tests.stores import copied_per_test

N = 3 * CLUSTERED_ROW_GROUP_ROWS + 200  # a few row groups per clustered file


def fill(store, n: int = N, batches: int = 3) -> None:
    """Messages with tags Tag0..Tag9 (TagRare on every 100th), regions r0..r6 and a 'v' property."""
    store.create_topic("TopicTest", queues=4, cluster_by=["TAGS", "region"])
    msgs = [
        Message(
            "TopicTest",
            tags="TagRare" if i % 100 == 7 else f"Tag{i % 10}",
            keys=[f"k{i}"],
            body=f"m{i}".encode(),
            properties={"region": f"r{i % 7}", "v": str(i % 50)},
        )
        for i in range(n)
    ]
    step = -(-n // batches)
    for lo in range(0, n, step):
        store.send_batch(msgs[lo : lo + step])
        store.dispatch()


def messages(store):
    return store.messages().drop("cluster_seq")


def commitlog_files(store) -> list[str]:
    t = store.context.tables.commitlog
    return t.files(t.snapshot())


def subscribed_and_filled(store) -> None:
    store.subscribe("GRare", "TopicTest", MessageSelector.by_sql("v = '7'"))
    store.subscribe("GTag", "TopicTest", "TagRare || Tag3")
    store.subscribe("GAll", "TopicTest", "*")
    fill(store)


#: Three groups and :func:`fill`'s messages in three commits, dispatched (a copy of a store made once).
filled = copied_per_test(subscribed_and_filled, with_value=False)


class TestClusteringKeepsEveryAddress:
    def test_rows_offsets_and_ids_unchanged(self, spark, filled):
        before = messages(filled).localCheckpoint()
        result = cluster_commitlog(filled.context, settle_ms=0)
        assert result.files_removed == 3 and result.files_added == 1 and result.rows == N
        files = commitlog_files(filled)
        assert len(files) == 1 and is_clustered(files[0])
        assert_df_equality(messages(filled).drop("properties"), before.drop("properties"), ignore_row_order=True)
        assert messages(filled).select("physical_offset").distinct().count() == N

    def test_sorted_by_topic_tags_and_keys_inside_one_offset_range(self, filled):
        cluster_commitlog(filled.context, settle_ms=0)
        rows = pq.read_table(commitlog_files(filled)[0]).to_pylist()
        keys = [(r["tags"], r["properties"] and dict(r["properties"])["region"]) for r in rows]
        assert keys == sorted(keys)
        seq = [r["cluster_seq"] for r in rows]
        assert seq == list(range(seq[0], seq[0] + N)) and seq[0] == min(r["physical_offset"] for r in rows)
        md = pq.ParquetFile(commitlog_files(filled)[0]).metadata
        assert {md.row_group(i).num_rows for i in range(md.num_row_groups - 1)} == {CLUSTERED_ROW_GROUP_ROWS}

    def test_key_and_id_lookups_and_pulls_unchanged(self, filled):
        probes = [0, 7, 1234, N - 1]
        by_key = [filled.query_by_key("TopicTest", f"k{i}")[0] for i in probes]
        by_id = [filled.query_by_id(m.msg_id) for m in by_key]
        pulls = {
            (g, q): filled.pull(g, "TopicTest", q, 5, max_msgs=32) for g in ("GRare", "GTag", "GAll") for q in range(4)
        }
        cluster_commitlog(filled.context, settle_ms=0)
        assert [filled.query_by_key("TopicTest", f"k{i}")[0] for i in probes] == by_key
        assert [filled.query_by_id(m.msg_id) for m in by_key] == by_id
        assert by_key[1].body == b"m7" and by_key[1].properties["region"] == "r0"
        for (g, q), r in pulls.items():
            again = filled.pull(g, "TopicTest", q, 5, max_msgs=32)
            assert (again.status, again.next_begin_offset, again.messages) == (
                r.status,
                r.next_begin_offset,
                r.messages,
            )
        assert all(any(r.messages for (g2, _), r in pulls.items() if g2 == g) for g in ("GRare", "GTag", "GAll"))

    def test_key_lookup_opens_one_commitlog_file(self, filled):
        cluster_commitlog(filled.context, settle_ms=0)
        from storelib.query.lookup import MessageQuery

        q = MessageQuery(filled.context)  # keeps the data files its last lookup opened
        assert q.by_key("TopicTest", "k3210")[0].body == b"m3210"
        assert q.files_touched["commitlog"] == 1 and q.files_touched["index"] + 1 <= 2 + 1

    def test_unsettled_data_waits(self, store):
        fill(store, n=300, batches=1)
        store.send(Message("TopicTest", tags="TagX", body=b"late"))  # not dispatched: its file stays
        assert cluster_commitlog(store.context, settle_ms=10**9).files_added == 0  # nothing old enough yet
        assert cluster_commitlog(store.context, settle_ms=0).files_removed == 1
        assert sum(not is_clustered(p) for p in commitlog_files(store)) == 1

    def test_idempotent_and_incremental(self, filled):
        cluster_commitlog(filled.context, settle_ms=0)
        assert cluster_commitlog(filled.context, settle_ms=0).files_added == 0
        filled.send_batch([Message("TopicTest", tags="TagRare", body=b"new", properties={"v": "7"})])
        filled.dispatch()
        again = cluster_commitlog(filled.context, settle_ms=0)  # the small new file joins a run of its own
        assert again.files_added == 1
        assert messages(filled).count() == N + 1
        assert "new" in {r.body.decode() for r in filled.read("TopicTest", group="GRare").collect()}


@pytest.fixture(params=["spark", "row groups"])
def reader(request, monkeypatch):
    """Which reader a pruned read of clustered files uses: Spark's with ``cluster_seq`` ranges, or
    pyarrow tasks reading only the kept row groups (chosen by the share of bytes kept; forced here)."""
    from storelib.query import read

    monkeypatch.setattr(read, "ROW_GROUP_LIMIT", 1.0 if request.param == "row groups" else 0.0)
    return request.param


class TestReadsOnClusteredData:
    @pytest.mark.parametrize(
        "selector",
        [
            MessageSelector.by_tag("TagRare"),
            MessageSelector.by_tag("Tag3 || TagRare"),
            MessageSelector.by_sql("v = '7'"),
            MessageSelector.by_sql("region = 'r2'"),
            MessageSelector.by_tag("*"),
        ],
    )
    def test_read_equals_the_exact_scan(self, filled, selector, reader):
        cluster_commitlog(filled.context, settle_ms=0)
        filled.send_batch([Message("TopicTest", tags="TagRare", body=b"fresh", properties={"v": "7", "region": "r2"})])
        filled.dispatch()  # a fresh file beside the clustered one: both parts of the read
        want = filled.messages("TopicTest").where(_sql(selector) if selector.is_sql92 else _tag(filled, selector))
        got = filled.read("TopicTest", selector)
        assert_df_equality(got.drop("properties"), want.drop("properties"), ignore_row_order=True, ignore_nullable=True)
        e = filled.explain_read("TopicTest", selector)
        assert e.reader == (reader if e.choice == "prune" and e.row_groups_read else "spark")

    def test_rare_tag_reads_few_row_groups(self, filled, reader):
        cluster_commitlog(filled.context, settle_ms=0)
        e = filled.explain_read("TopicTest", MessageSelector.by_tag("TagRare"))
        assert e.choice == "prune" and e.row_groups_considered == 4 and e.reader == reader
        assert e.row_groups_read == 1 and e.row_groups_skipped_by_statistics == 3
        assert e.ranges == 0  # Spark's reader: the tag predicate's pushdown skips the row groups by statistics
        assert e.estimated_bytes < e.scan_bytes / 2
        assert "PRUNE" in str(e) and ("pyarrow" in str(e)) == (reader == "row groups")
        assert sorted(r.body for r in filled.read("TopicTest", MessageSelector.by_tag("TagRare")).collect()) == sorted(
            f"m{i}".encode() for i in range(N) if i % 100 == 7
        )

    def test_row_group_reader_reads_only_the_kept_row_groups(self, spark, filled, monkeypatch):
        """The kept row groups, each read once (by its task), whatever the split of the files."""
        from storelib.query import read

        cluster_commitlog(filled.context, settle_ms=0)
        monkeypatch.setattr(read, "ROW_GROUP_LIMIT", 0.0)
        assert read.plan_read(filled.context, "TopicTest", "TagRare").row_groups is None
        monkeypatch.setattr(read, "ROW_GROUP_LIMIT", 1.0)
        plan = read.plan_read(filled.context, "TopicTest", "TagRare")
        [only] = plan.row_groups
        assert only.row_groups == (next(i for i, r in enumerate(_row_group_tags(only.path)) if "TagRare" in r),)
        import pyarrow.compute as pc

        from storelib.delta.spark_read import read_row_groups
        from storelib.storage.schema import COMMITLOG

        everything = read_row_groups(spark, COMMITLOG.arrow, plan.row_groups, pc.scalar(True))
        assert everything.count() == pq.ParquetFile(only.path).metadata.row_group(only.row_groups[0]).num_rows  # whole

    def test_group_pruned_by_its_bloom_bits(self, filled, reader):
        cluster_commitlog(filled.context, settle_ms=0)
        e = filled.explain_read("TopicTest", group="GRare")
        assert e.row_groups_considered == 4 and e.row_groups_skipped_by_bitmap >= 1
        got = sorted(r.body for r in filled.read("TopicTest", group="GRare").collect())
        assert got == sorted(f"m{i}".encode() for i in range(N) if i % 50 == 7)
        # the SQL92 check runs in the pyarrow tasks (row groups) or in Spark: the same rows as the exact scan
        want = filled.messages("TopicTest").where(_sql(MessageSelector.by_sql("v = '7'")))
        assert_df_equality(
            filled.read("TopicTest", group="GRare").drop("properties"),
            want.drop("properties"),
            ignore_row_order=True,
            ignore_nullable=True,
        )
        stats = filled.filter_stats("GRare", "TopicTest")
        assert stats.row_groups == 4 and stats.row_groups_skipped_by_bitmap == e.row_groups_skipped_by_bitmap
        assert stats.reader == e.reader == reader

    def test_pushed_down_to_parquet(self, spark, filled, monkeypatch):
        from storelib.query import read

        monkeypatch.setattr(read, "ROW_GROUP_LIMIT", 0.0)  # Spark reads the clustered file
        before = spark.conf.get("spark.sql.maxMetadataStringLength")
        spark.conf.set("spark.sql.maxMetadataStringLength", "100000")  # the plan's PushedFilters in full
        cluster_commitlog(filled.context, settle_ms=0)
        plan = filled.read("TopicTest", group="GRare")._jdf.queryExecution().executedPlan().toString()
        assert "cluster_seq" in plan and "PushedFilters" in plan
        tag_plan = (
            filled.read("TopicTest", MessageSelector.by_tag("TagRare"))._jdf.queryExecution().executedPlan().toString()
        )
        spark.conf.set("spark.sql.maxMetadataStringLength", before)
        pushed = tag_plan[tag_plan.index("PushedFilters") :]
        assert "EqualTo(tags,TagRare)" in pushed or "In(tags" in pushed

    def test_plain_scan_where_pruning_cannot_pay(self, filled):
        e = filled.explain_read("TopicTest", MessageSelector.by_tag("Tag3"))  # fresh data: Tag3 is in every file
        assert e.choice == "scan" and e.files_read == e.files_considered == 3
        cluster_commitlog(filled.context, settle_ms=0)
        e = filled.explain_read("TopicTest", MessageSelector.by_sql("region = 'r2' OR v <> '7'"))  # not registered
        assert e.choice == "scan" and e.ranges == 0 and e.estimated_bytes == e.scan_bytes
        assert filled.explain_read("TopicTest", MessageSelector.by_tag("*")).choice == "scan"

    def test_group_registered_after_clustering_falls_back_to_exact_evaluation(self, filled):
        cluster_commitlog(filled.context, settle_ms=0)
        filled.subscribe("GLate", "TopicTest", MessageSelector.by_sql("v = '8'"))
        e = filled.explain_read("TopicTest", group="GLate")
        assert e.row_groups_skipped_by_bitmap == 0
        assert filled.read("TopicTest", group="GLate").count() == len([i for i in range(N) if i % 50 == 8])


def _row_group_tags(path: str) -> list[set[str]]:
    f = pq.ParquetFile(path)
    return [set(f.read_row_group(i, columns=["tags"]).column(0).to_pylist()) for i in range(f.num_row_groups)]


def _sql(selector):
    from storelib.filter.sql92 import compile_sql92

    return compile_sql92(selector.expression)


def _tag(store, selector):
    tags = [t.strip() for t in selector.expression.split("||")]
    return F.lit(True) if tags == ["*"] else F.col("tags").isin(tags)


class TestCrashSafety:
    @pytest.mark.parametrize("step", ["written", "summarized"])
    def test_crash_then_rerun(self, spark, filled, step):
        before = messages(filled).localCheckpoint()

        def crash(name: str) -> None:
            if name == step:
                raise KeyboardInterrupt(name)  # as a killed job: nothing after this step runs

        with pytest.raises(KeyboardInterrupt):
            cluster_commitlog(filled.context, settle_ms=0, fault=crash)
        assert not any(is_clustered(p) for p in commitlog_files(filled))  # nothing committed
        assert_df_equality(messages(filled).drop("properties"), before.drop("properties"), ignore_row_order=True)
        assert cluster_commitlog(filled.context, settle_ms=0).files_added == 1
        assert_df_equality(messages(filled).drop("properties"), before.drop("properties"), ignore_row_order=True)
        assert filled.read("TopicTest", group="GRare").count() == len([i for i in range(N) if i % 50 == 7])

    def test_killed_process_then_rerun(self, spark, filled, python_env):
        before = messages(filled).localCheckpoint()
        crashed = subprocess.run(
            [sys.executable, "-c", CRASHING_CLUSTER, filled.root, "summarized"],
            env=python_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert crashed.returncode == 86, crashed.stderr[-2000:]
        assert not any(is_clustered(p) for p in commitlog_files(filled))
        assert cluster_commitlog(filled.context, settle_ms=0).files_added == 1
        assert_df_equality(messages(filled).drop("properties"), before.drop("properties"), ignore_row_order=True)
        assert filled.query_by_key("TopicTest", "k99")[0].body == b"m99"


#: Clustering in its own process that dies hard (no cleanup) at the step named by argv[2].
CRASHING_CLUSTER = """
import os, sys
from storelib import MessageStore
from storelib.maintenance.cluster import cluster_commitlog
from storelib.session import get_spark

store = MessageStore.create(sys.argv[1], get_spark("crashing-cluster"))
cluster_commitlog(store.context, settle_ms=0, fault=lambda step: os._exit(86) if step == sys.argv[2] else None)
"""


def test_summaries_of_removed_files_are_forgotten(filled):
    from storelib.delta.log import add_actions
    from storelib.storage.summaries import forget_summaries

    summaries = filled.context.tables.commitlog_summary
    cluster_commitlog(filled.context, settle_ms=0)
    first = add_actions(filled.context.tables.commitlog.snapshot()).column("path").to_pylist()
    filled.send_batch([Message("TopicTest", tags="TagRare", body=b"new")])
    filled.dispatch()
    cluster_commitlog(filled.context, settle_ms=0)  # the small clustered file and the new one become one
    live = add_actions(filled.context.tables.commitlog.snapshot()).column("path").to_pylist()
    assert len(live) == 1 and live != first
    assert forget_summaries(summaries, live, min_age_ms=10**9) == 0  # too young to be forgotten
    assert forget_summaries(summaries, live, min_age_ms=0) == 1  # the first file's summaries
    assert forget_summaries(summaries, live, min_age_ms=0) == 0
    assert filled.explain_read("TopicTest", MessageSelector.by_tag("TagRare")).row_groups_considered == 4


def test_each_clustered_file_is_planned_with_its_own_row_groups(spark, store_path):
    """Three clustered files of different lengths, taken in the log's order and in the reverse: each is read for
    the row groups of its own that hold the tag (a plan once matched summaries to files by their names' order)."""
    from storelib import MessageStore
    from storelib.query import read

    store = MessageStore.create(store_path, spark, target_file_size=4096)  # each file a clustering bin of its own
    store.create_topic("TopicTest", queues=2)
    for n in (2 * CLUSTERED_ROW_GROUP_ROWS + 100, CLUSTERED_ROW_GROUP_ROWS + 100, 3 * CLUSTERED_ROW_GROUP_ROWS + 100):
        store.send_batch([Message("TopicTest", tags="TagRare" if i % 100 == 7 else f"Tag{i % 10}") for i in range(n)])
        store.dispatch()
    assert cluster_commitlog(store.context, settle_ms=0).files_added == 3
    want = {f: tuple(i for i, t in enumerate(_row_group_tags(f)) if "TagRare" in t) for f in commitlog_files(store)}
    assert len(set(want.values())) == 3  # TagRare sorts last: in each file's last row group, a different one
    actions = store.context.tables.commitlog.view().actions
    mf = read._message_filter(store.context, "TopicTest", MessageSelector.by_tag("TagRare"), None)
    for order in (actions, actions.take(list(range(actions.num_rows))[::-1])):
        reads = read._plan_clustered(store.context, mf, order, {})[3]
        assert {r.path: r.row_groups for r in reads} == want
    store.close()
