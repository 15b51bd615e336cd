"""Class filters: user Python filters run on the executors for reads and in-process for pulls."""

from __future__ import annotations

import datetime as dt
import os
import re
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from storelib import FilterFailure, Message, MessageSelector, MessageStore
from storelib.consume.pull import PullStatus as P
from storelib.filter.class_batch import NOT_BOOL, NOT_LOADED, RAISED
from storelib.filter.class_filter import source_crc
from storelib.model.errors import (
    FilterClassError,
    FilterError,
    FilterNotSupportedError,
    StoreError,
    SubscriptionNotLatestError,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODULE = "storelib_test_filters"
TAGS = ("TagA", "TagB", "TagC")
N = 240


@pytest.fixture(scope="module")
def filters(spark):
    """The test filters' module, importable here and shipped to the executors."""
    import storelib_test_filters

    if not getattr(storelib_test_filters, "_shipped", False):
        spark.sparkContext.addPyFile(str(HERE / f"{MODULE}.py"))
        storelib_test_filters._shipped = True
    return storelib_test_filters


def send(store, n=N, bad=(), topic="TopicTest"):
    """Messages with SequenceId i (or 'bad' for i in ``bad``), tags cycling over TAGS, key k<i>, body m<i>."""
    store.send_batch(
        [
            Message(
                topic,
                tags=TAGS[i % 3],
                keys=[f"k{'bad' if i in bad else i}"],
                body=f"m{'bad' if i in bad else i}".encode(),
                properties={"SequenceId": "bad" if i in bad else str(i)},
            )
            for i in range(n)
        ]
    )
    store.dispatch()


def seed_column(tags=None):
    """The seed's predicate as a Spark Column (and the tag prefilter)."""
    seq = F.col("properties")["SequenceId"].try_cast("long")
    pred = F.coalesce((seq % 10 == 0) & (seq > 100), F.lit(False))
    return pred if tags is None else pred & F.col("tags").isin(*tags)


def ordered(df):
    return df.orderBy("physical_offset")


def pulled(store, group, queues=4, **kw):
    """Every message the group pulls from each queue, from offset 0 to the end, and the pulls' failures."""
    out, errors = [], []
    for q in range(queues):
        offset = 0
        while True:
            r = store.pull(group, "TopicTest", q, offset, 32, **kw)
            errors += r.filter_errors
            if r.status in (P.NO_NEW_MSG, P.OFFSET_ILLEGAL):
                break
            out += r.messages
            offset = r.next_begin_offset
    return out, errors


def expected_ids(store, tags=None):
    return sorted(r.msg_id for r in store.messages("TopicTest").where(seed_column(tags)).select("msg_id").collect())


# ---- subscribing ----------------------------------------------------------------------------------
def test_subscription_records_the_class_and_the_crc_of_its_source(spark, store, filters):
    sub = store.subscribe(
        "GroupC", "TopicTest", MessageSelector.by_class(f"{MODULE}:EvenSequence", tags="TagA || TagB")
    )
    assert sub.selector.filter_class == f"{MODULE}:EvenSequence" and sub.is_class
    assert sub.selector.filter_class_crc == source_crc((HERE / f"{MODULE}.py").read_text())
    assert sorted(sub.data.tags_set) == ["TagA", "TagB"] and sub.bloom is None
    again = store.subscribe(
        "GroupC", "TopicTest", MessageSelector.by_class(f"{MODULE}.EvenSequence", tags="TagA || TagB")
    )
    assert again.version == sub.version  # the same class, unchanged: no new version
    reopened = MessageStore.create(store.root, spark)
    assert reopened.subscription("GroupC", "TopicTest") == sub


@pytest.mark.parametrize(
    "name, why",
    [
        ("storelib_no_such_module:Even", "cannot import module 'storelib_no_such_module'"),
        (f"{MODULE}:Missing", "has no class 'Missing'"),
        (f"{MODULE}:NOT_A_CLASS", "has no class 'NOT_A_CLASS'"),
        (f"{MODULE}:NoMatchMethod", "has neither match(msg, context) nor match_batch(batch, context)"),
        (f"{MODULE}:NeedsArguments", "cannot be built without arguments"),
    ],
)
def test_a_class_that_cannot_load_is_refused_at_subscribe(store, filters, name, why):
    with pytest.raises(FilterClassError, match=re.escape(why)) as e:
        store.subscribe("GroupC", "TopicTest", MessageSelector.by_class(name))
    assert e.value.code == "SUBSCRIPTION_PARSE_FAILED" and e.value.field == "filter_class" and e.value.value == name
    assert isinstance(e.value, (FilterError, ValueError, StoreError))
    assert store.context.registry.current() == {}  # nothing written


def test_a_bad_import_path_is_refused():
    with pytest.raises(FilterClassError, match="import path"):
        MessageSelector.by_class("not a path")
    with pytest.raises(FilterClassError, match="import path"):
        MessageSelector.by_class("JustAClass")  # a module is needed unless source text is given


# ---- reads (executors) and pulls (in-process) -----------------------------------------------------
@pytest.mark.parametrize("cls", ["EvenSequence", "EvenSequenceBatch"])
def test_read_and_pull_without_tag_prefilter(store, filters, cls):
    send(store)
    store.subscribe("GroupC", "TopicTest", MessageSelector.by_class(f"{MODULE}:{cls}"))
    expected = ordered(store.messages("TopicTest").where(seed_column()))
    assert_df_equality(ordered(store.read("TopicTest", group="GroupC")), expected)
    assert expected.count() == 13  # 110, 120, ..., 230
    messages, errors = pulled(store, "GroupC")
    assert sorted(m.msg_id for m in messages) == expected_ids(store) and errors == []
    stats = store.filter_stats("GroupC", "TopicTest")
    assert (stats.checked, stats.passed_consume_queue, stats.matched, stats.filter_errors) == (N, N, 13, ())


@pytest.mark.parametrize("cls", ["FailsOnTagC", "EvenSequenceBatch"])
def test_read_and_pull_with_tag_prefilter(store, filters, cls):
    send(store)
    store.subscribe("GroupC", "TopicTest", MessageSelector.by_class(f"{MODULE}:{cls}", tags="TagA || TagB"))
    expected = ordered(store.messages("TopicTest").where(seed_column(("TagA", "TagB"))))
    assert_df_equality(ordered(store.read("TopicTest", group="GroupC")), expected)
    messages, errors = pulled(store, "GroupC")
    assert sorted(m.msg_id for m in messages) == expected_ids(store, ("TagA", "TagB"))
    assert errors == []  # FailsOnTagC never saw a TagC message: the tag codes pruned them first
    stats = store.filter_stats("GroupC", "TopicTest")
    assert stats.pruned_by_bitmap == N // 3 and stats.passed_consume_queue == 2 * N // 3
    assert stats.matched == len(messages) and stats.filter_errors == ()


def test_ad_hoc_class_selector_read(store, filters):
    send(store)
    df = store.read("TopicTest", MessageSelector.by_class(f"{MODULE}:EvenSequence", tags="TagB"))
    assert_df_equality(ordered(df), ordered(store.messages("TopicTest").where(seed_column(("TagB",)))))


def test_msg_and_context_carry_what_a_filter_is_promised(store, filters):
    send(store, 30)
    store.subscribe("GroupI", "TopicTest", MessageSelector.by_class(f"{MODULE}:Inspects"))
    assert store.read("TopicTest", group="GroupI").count() == 30
    messages, errors = pulled(store, "GroupI")
    assert len(messages) == 30 and errors == []
    assert store.filter_stats("GroupI", "TopicTest").filter_errors == ()


# ---- failures -------------------------------------------------------------------------------------
def test_raising_and_non_bool_results_do_not_match_and_are_reported(store, filters):
    bad = {5, 50, 150}
    send(store, bad=bad)
    store.subscribe("GroupF", "TopicTest", MessageSelector.by_class(f"{MODULE}:Flaky"))
    rows = store.read("TopicTest", group="GroupF").select("properties").collect()
    seqs = sorted(int(r.properties["SequenceId"]) for r in rows)
    assert seqs == [s for s in range(N) if s not in bad and s % 10 == 0 and s > 100]  # the read went on
    stats = store.filter_stats("GroupF", "TopicTest")
    errors = {f.kind: f for f in stats.filter_errors}
    assert set(errors) == {RAISED, NOT_BOOL}
    raised, not_bool = errors[RAISED], errors[NOT_BOOL]
    assert raised.count == 3 and raised.filter == f"{MODULE}:Flaky"
    bad_ids = {
        r.msg_id for r in store.messages("TopicTest").where(F.col("properties")["SequenceId"] == "bad").collect()
    }
    assert raised.msg_id in bad_ids
    assert raised.line.startswith(f"{MODULE}.py:") and "in match: ValueError: invalid literal for int()" in raised.line
    assert not_bool.count == len([s for s in range(N) if s % 10 == 7]) and "returned 'yes' (str)" in not_bool.line
    assert stats.matched == len(seqs)
    messages, pull_errors = pulled(store, "GroupF")
    assert sorted(int(m.properties["SequenceId"]) for m in messages) == seqs
    by_kind = {}
    for f in pull_errors:
        assert isinstance(f, FilterFailure) and f.filter == f"{MODULE}:Flaky"
        by_kind[f.kind] = by_kind.get(f.kind, 0) + f.count
    assert by_kind == {RAISED: 3, NOT_BOOL: not_bool.count}


@pytest.mark.parametrize(
    "cls, kind, line",
    [
        ("BatchRaises", RAISED, "in match_batch: ZeroDivisionError: no batches today"),
        ("BatchWrongLength", NOT_BOOL, "match_batch returned bool array of 1, not a BooleanArray of"),
    ],
)
def test_batch_failures_fail_the_whole_batch(store, filters, cls, kind, line):
    send(store, 60)
    store.subscribe("GroupF", "TopicTest", MessageSelector.by_class(f"{MODULE}:{cls}"))
    assert store.read("TopicTest", group="GroupF").count() == 0
    (failure,) = store.filter_stats("GroupF", "TopicTest").filter_errors
    assert (failure.kind, failure.count) == (kind, 60) and line in failure.line and len(failure.msg_id) == 32
    messages, errors = pulled(store, "GroupF")
    assert messages == [] and sum(f.count for f in errors) == 60 and {f.kind for f in errors} == {kind}


def test_batch_nulls_do_not_match(store, filters):
    send(store, 60, bad={10, 20})
    store.subscribe("GroupF", "TopicTest", MessageSelector.by_class(f"{MODULE}:BatchNulls"))
    got = sorted(r.properties["SequenceId"] for r in store.read("TopicTest", group="GroupF").collect())
    assert got == ["0", "30", "40", "50"]
    (failure,) = store.filter_stats("GroupF", "TopicTest").filter_errors
    assert (failure.kind, failure.count, failure.line) == (NOT_BOOL, 2, "match_batch returned null")


def test_a_class_the_executors_cannot_import_matches_nothing_and_is_reported(store, tmp_path):
    name = f"driver_only_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text("class Everything:\n    def match(self, msg, context):\n        return True\n")
    sys.path.insert(0, str(tmp_path))  # on this process only: the executors' Python workers lack it
    try:
        send(store, 30)
        store.subscribe("GroupX", "TopicTest", MessageSelector.by_class(f"{name}:Everything"))
        assert store.read("TopicTest", group="GroupX").count() == 0
        (failure,) = store.filter_stats("GroupX", "TopicTest").filter_errors
        assert failure.kind == NOT_LOADED and failure.count == 30
        assert f"cannot import module '{name}'" in failure.line and "on an executor" in failure.line
        assert len(pulled(store, "GroupX")[0]) == 30  # here, in-process, it loads
    finally:
        sys.path.remove(str(tmp_path))


# ---- a changed filter ---------------------------------------------------------------------------------
FILTER_V1 = "class Pick:\n    def match(self, msg, context):\n        return int(msg.properties['SequenceId']) < 3\n"
FILTER_V2 = (
    "# version 2: the first five\nclass Pick:\n    def match(self, msg, context):\n"
    "        return int(msg.properties['SequenceId']) < 5\n"
)


def _register_elsewhere(root: str, group: str, path: str, pkg_dir: Path) -> None:
    """Subscribe from another process (no Spark needed: the registry is a Delta table)."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(pkg_dir)!r})
        from storelib.delta.table import Table
        from storelib.storage.subscriptions import SubscriptionRegistry
        from storelib.filter.selector import MessageSelector
        from storelib.filter.subscription import check_selector
        from storelib.model.config import StoreConfig
        from storelib.storage.schema import SUBSCRIPTION
        reg = SubscriptionRegistry(Table({root + "/subscription"!r}, SUBSCRIPTION), StoreConfig())
        selector = check_selector("TopicTest", MessageSelector.by_class({path!r}), StoreConfig(), subscribing=True)
        reg.register({group!r}, "TopicTest", selector)
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=str(ROOT))


def test_a_changed_filter_is_picked_up_by_subscribing_again(store, tmp_path):
    name = f"changing_{uuid.uuid4().hex[:8]}"
    module = tmp_path / f"{name}.py"
    module.write_text(FILTER_V1)
    sys.path.insert(0, str(tmp_path))
    try:
        send(store, 8)
        selector = MessageSelector.by_class(f"{name}:Pick")
        v1 = store.subscribe("GroupV", "TopicTest", selector)
        assert v1.selector.filter_class_crc == source_crc(FILTER_V1)
        assert len(pulled(store, "GroupV")[0]) == 3

        module.write_text(FILTER_V2)  # changed on disk; this process still runs version 1 until it subscribes
        assert len(pulled(store, "GroupV")[0]) == 3
        v2 = store.subscribe("GroupV", "TopicTest", selector)
        assert v2.version > v1.version and v2.selector.filter_class_crc == source_crc(FILTER_V2)
        assert len(pulled(store, "GroupV")[0]) == 5

        # another consumer process registers version 1 again: this process's loaded class is no longer it
        module.write_text(FILTER_V1)
        _register_elsewhere(store.root, "GroupV", f"{name}:Pick", tmp_path)
        assert store.subscription("GroupV", "TopicTest").selector.filter_class_crc == source_crc(FILTER_V1)
        with pytest.raises(SubscriptionNotLatestError, match="subscribe again") as e:
            store.pull("GroupV", "TopicTest", 0, 0)
        assert e.value.code == "SUBSCRIPTION_NOT_LATEST" and e.value.field == "filter_class"
        with pytest.raises(SubscriptionNotLatestError):
            store.read("TopicTest", group="GroupV")
        store.subscribe("GroupV", "TopicTest", selector)  # reloads the module: version 1 again here
        assert len(pulled(store, "GroupV")[0]) == 3
    finally:
        sys.path.remove(str(tmp_path))


# ---- uploaded source ------------------------------------------------------------------------------
SOURCE = (
    "class Tenth:\n    def match(self, msg, context):\n        return int(msg.properties['SequenceId']) % 10 == 0\n"
)


def test_uploaded_source_is_refused_by_default(store):
    with pytest.raises(FilterNotSupportedError, match="enable_filter_class_source") as e:
        store.subscribe("GroupS", "TopicTest", MessageSelector.by_class("Tenth", source=SOURCE))
    assert e.value.code == "FILTER_NOT_SUPPORT" and store.context.registry.current() == {}
    with pytest.raises(FilterNotSupportedError):
        store.read("TopicTest", MessageSelector.by_class("Tenth", source=SOURCE))
    assert store.config.enable_filter_class_source is False


def test_uploaded_source_runs_when_the_store_allows_it(spark, store_path):
    store = MessageStore.create(store_path, spark, enable_filter_class_source=True)
    store.create_topic("TopicTest", queues=4)
    send(store, 60)
    sub = store.subscribe("GroupS", "TopicTest", MessageSelector.by_class("Tenth", source=SOURCE, tags="TagA"))
    assert sub.selector.filter_class_crc == source_crc(SOURCE)
    seqs = sorted(int(r.properties["SequenceId"]) for r in store.read("TopicTest", group="GroupS").collect())
    assert seqs == [0, 30]  # TagA is i % 3 == 0; % 10 == 0 on the executors, from the stored source
    assert sorted(int(m.properties["SequenceId"]) for m in pulled(store, "GroupS")[0]) == [0, 30]
    changed = SOURCE.replace("% 10", "% 20")
    later = store.subscribe("GroupS", "TopicTest", MessageSelector.by_class("Tenth", source=changed, tags="TagA"))
    assert later.version > sub.version
    assert sorted(int(r.properties["SequenceId"]) for r in store.read("TopicTest", group="GroupS").collect()) == [0]
    strict = MessageStore.create(store_path, spark)  # the same store, opened with the switch off
    with pytest.raises(FilterNotSupportedError):
        strict.pull("GroupS", "TopicTest", 0, 0)
    with pytest.raises(FilterNotSupportedError):
        strict.read("TopicTest", group="GroupS")


# ---- the subscription table of an older store ------------------------------------------------------
def test_an_older_subscription_table_gains_the_class_columns(spark, store_path, filters):
    from deltalake import DeltaTable, write_deltalake

    from storelib.storage.schema import SUBSCRIPTION

    old = pa.schema([SUBSCRIPTION.arrow.field(i) for i in range(10)])  # before class filters
    DeltaTable.create(f"{store_path}/subscription", old, name="subscription")
    write_deltalake(
        f"{store_path}/subscription",
        pa.Table.from_pylist(
            [
                {
                    "consumer_group": "GroupA",
                    "topic": "TopicTest",
                    "expression_type": "TAG",
                    "expression": "TagA",
                    "version": 1,
                    "sub_version": 1,
                    "born_timestamp": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc),
                    "dead": False,
                }
            ],
            schema=old,
        ),
        mode="append",
    )
    store = MessageStore.create(store_path, spark)
    assert DeltaTable(f"{store_path}/subscription").schema().fields[-1].name == "filter_class_source"
    assert store.subscription("GroupA", "TopicTest").selector == MessageSelector.by_tag("TagA")
    store.create_topic("TopicTest", queues=4)
    assert store.subscribe("GroupC", "TopicTest", MessageSelector.by_class(f"{MODULE}:EvenSequence")).is_class


def test_clustered_data_reads_the_same(store, filters):
    send(store)
    store.subscribe("GroupC", "TopicTest", MessageSelector.by_class(f"{MODULE}:EvenSequenceBatch", tags="TagB"))
    store.compact(settle_ms=0)  # clusters the commitlog: row groups by tags, read by cluster_seq ranges
    from storelib.storage.commitlog import is_clustered

    plan_files = store.context.tables.commitlog.files(store.context.tables.commitlog.snapshot())
    assert any(is_clustered(p) for p in plan_files)
    expected = ordered(store.messages("TopicTest").where(seed_column(("TagB",))))
    assert_df_equality(ordered(store.read("TopicTest", group="GroupC")), expected)
    assert store.filter_stats("GroupC", "TopicTest").matched == expected.count()
    messages, _ = pulled(store, "GroupC")
    assert sorted(m.msg_id for m in messages) == expected_ids(store, ("TagB",))


def test_retry_topic_pulls_apply_the_class_of_the_original_topic(store, filters):
    """Messages redelivered to %RETRY%group are filtered by the group's class subscription of their topic."""
    from storelib.storage.commitlog import EncodedMessage, now_millis

    store.create_topic("OtherTopic", queues=1)
    store.subscribe("GroupR", "TopicTest", MessageSelector.by_class(f"{MODULE}:EvenSequence", tags="TagA || TagB"))
    rows = [
        ("TopicTest", "TagA", "110"),
        ("TopicTest", "TagA", "111"),
        ("TopicTest", "TagC", "120"),
        ("OtherTopic", "TagB", "5"),
        ("TopicTest", "TagB", "200"),
    ]
    store.context.commitlog.append(
        [
            EncodedMessage(
                "%RETRY%GroupR",
                0,
                0,
                0,
                b"retry-" + n.encode(),
                {"TAGS": tags, "RETRY_TOPIC": topic, "SequenceId": n},
                now_millis(),
                "127.0.0.1:0",
                reconsume_times=1,
            )
            for topic, tags, n in rows
        ]
    )
    store.dispatch()
    r = store.pull("GroupR", "%RETRY%GroupR", 0, 0)
    assert [m.body for m in r.messages] == [b"retry-110", b"retry-5", b"retry-200"] and r.filter_errors == ()
