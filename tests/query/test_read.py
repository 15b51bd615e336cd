"""Subscriptions, filter bitmaps at dispatch, and two-stage reads (tag, SQL92, Bloom-pruned)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from chispa import assert_df_equality

from storelib import Message, MessageStore
from storelib.encoding.ext_addr import is_ext_addr, undecorate_ext_addr
from storelib.encoding.tags import tags_code
from storelib.filter.bloom import BloomFilter
from storelib.filter.selector import MessageSelector
from storelib.filter.sql92 import parse_sql92
from storelib.model.errors import (
    FilterClassError,
    FilterExpressionError,
    FilterNotSupportedError,
    InvalidTopicError,
    SubscriptionNotFoundError,
    TopicNotFoundError,
)

SQL_B = "(TAGS is not null and TAGS in ('TagA', 'TagB')) and (a is not null and a between 0 and 3)"
TAGS = ("TagA", "TagB", "TagC", "Aa", "BB")


def send_props(store, n, start=0, topic="TopicTest"):
    """Messages with tags cycling over TAGS and properties a = i % 7, b = 'x' or 'y'."""
    return store.send_batch(
        [
            Message(
                topic,
                body=f"m{i}".encode(),
                tags=TAGS[i % len(TAGS)],
                keys=[f"k{i}"],
                properties={"a": str(i % 7), "b": "x" if i % 2 else "y"},
            )
            for i in range(start, start + n)
        ]
    )


def bodies(df):
    return sorted(r.body.decode() for r in df.select("body").collect())


def expected_bodies(store, predicate):
    """The answer computed the slow way: every message through the Python evaluator."""
    return sorted(
        r.body.decode() for r in store.messages("TopicTest").collect() if predicate(r.tags, dict(r.properties or {}))
    )


class TestRegistry:
    def test_register_replace_and_versions(self, store):
        first = store.subscribe("GroupA", "TopicTest", "TagA || TagB")
        assert first.selector == MessageSelector.by_tag("TagA || TagB") and first.bloom is None
        assert first.data.tags_set == {"TagA", "TagB"}
        same = store.subscribe("GroupA", "TopicTest", "TagA || TagB")
        assert same.version == first.version  # nothing changed: no new version
        later = store.subscribe("GroupA", "TopicTest", MessageSelector.by_sql("a > 5"))
        assert later.version > first.version and later.sub_version > first.sub_version
        assert store.subscription("GroupA", "TopicTest") == later
        assert later.bloom == BloomFilter().generate("GroupA#TopicTest")

    def test_a_store_keeps_the_bloom_filter_its_subscriptions_were_sized_with(self, spark, store_path):
        """Opened with the default settings, a store sized for 64 consumers keeps pruning by its
        subscriptions' bits; opened with other settings, those win and the old bits are not trusted."""
        sized = MessageStore.create(store_path, spark, expect_consumer_num_use_filter=64)
        sized.create_topic("TopicTest", queues=2)
        sub = sized.subscribe("GroupB", "TopicTest", MessageSelector.by_sql("a > 4"))
        assert sub.bloom == BloomFilter(20, 64).generate("GroupB#TopicTest") and sub.bloom.bit_num == 216
        plain = MessageStore.open(store_path, spark)
        assert plain.context.registry.bloom_filter.is_valid(sub.bloom)
        assert plain.subscribe("GroupB", "TopicTest", MessageSelector.by_sql("a > 4")) == sub  # nothing new
        send_props(plain, 28)
        plain.dispatch()
        want = expected_bodies(plain, lambda t, p: int(p["a"]) > 4)
        assert bodies(plain.read("TopicTest", group="GroupB")) == want
        stats = plain.filter_stats("GroupB", "TopicTest")
        assert stats.pruned_by_bitmap + stats.skipped_by_file == 28 - len(want)
        wider = MessageStore.open(store_path, spark, expect_consumer_num_use_filter=128)
        assert not wider.context.registry.bloom_filter.is_valid(sub.bloom)
        assert bodies(wider.read("TopicTest", group="GroupB")) == want  # checked exactly
        again = wider.subscribe("GroupB", "TopicTest", MessageSelector.by_sql("a > 4"))
        assert again.version > sub.version and again.bloom == BloomFilter(20, 128).generate("GroupB#TopicTest")

    def test_persisted_as_delta_table(self, spark, store):
        store.subscribe("GroupB", "TopicTest", MessageSelector.by_sql(SQL_B))
        reopened = MessageStore.create(store.root, spark)
        assert reopened.subscription("GroupB", "TopicTest").selector.expression == SQL_B
        from deltalake import DeltaTable

        assert DeltaTable(f"{store.root}/subscription").to_pyarrow_table().num_rows == 1

    def test_concurrent_registrations_all_land(self, store):
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(4) as pool:
            subs = list(
                pool.map(lambda i: store.subscribe(f"G{i}", "TopicTest", MessageSelector.by_sql(f"a = {i}")), range(8))
            )
        assert sorted(s.version for s in subs) == list(range(1, 9))  # one commit each, none lost
        assert {s.group for s in store.context.registry.all()} == {f"G{i}" for i in range(8)}

    def test_unsubscribe(self, store):
        store.subscribe("GroupA", "TopicTest", "TagA")
        assert store.unsubscribe("GroupA", "TopicTest") is True
        assert store.unsubscribe("GroupA", "TopicTest") is False
        with pytest.raises(SubscriptionNotFoundError) as e:
            store.subscription("GroupA", "TopicTest")
        assert e.value.code == "SUBSCRIPTION_NOT_EXIST"

    @pytest.mark.parametrize(
        "selector, error",
        [
            ("||", FilterExpressionError),
            (MessageSelector.by_sql("a LIKE 'x%'"), FilterExpressionError),
            (MessageSelector.by_sql("a = 1 garbage"), FilterExpressionError),
            (MessageSelector("CLASS", "com.x.Filter"), FilterClassError),  # a class selector names no class
            (MessageSelector("CLASS", "*", "com.x.NotInstalled"), FilterClassError),
            (MessageSelector("JAVA", "com.x.Filter"), FilterNotSupportedError),
        ],
    )
    def test_bad_subscriptions_write_nothing(self, store, selector, error):
        with pytest.raises(error):
            store.subscribe("GroupA", "TopicTest", selector)
        assert store.context.tables.subscription.read_arrow().num_rows == 0

    def test_unknown_topic_and_bad_group(self, store):
        with pytest.raises(TopicNotFoundError):
            store.subscribe("GroupA", "NoSuchTopic", "*")
        with pytest.raises(InvalidTopicError):
            store.subscribe("bad group", "TopicTest", "*")

    def test_sql92_needs_property_filtering(self, spark, store_path):
        off = MessageStore.create(store_path, spark, enable_property_filter=False)
        off.create_topic("TopicTest", queues=2)
        with pytest.raises(FilterNotSupportedError) as e:
            off.subscribe("GroupB", "TopicTest", MessageSelector.by_sql("a > 1"))
        assert e.value.code == "FILTER_NOT_SUPPORT"
        with pytest.raises(FilterNotSupportedError):
            off.read("TopicTest", MessageSelector.by_sql("a > 1"))
        off.subscribe("GroupA", "TopicTest", "TagA")  # tags still work


class TestBitmaps:
    def test_dispatch_sets_bloom_bits_of_matching_subscriptions(self, spark, store):
        subs = {
            g: store.subscribe(g, "TopicTest", MessageSelector.by_sql(e))
            for g, e in [("G1", "a > 3"), ("G2", "b = 'x'"), ("G3", SQL_B)]
        }
        send_props(store, 20)
        store.dispatch()
        bf = BloomFilter()
        version = store.context.tables.subscription.snapshot().version()
        ext = {r.commitlog_offset: r for r in store.table("consume_queue_ext").collect()}
        for m in store.messages("TopicTest").collect():
            unit = ext[m.physical_offset]
            bits = bytearray(bf.m // 8 + (bf.m % 8 > 0))
            for s in subs.values():
                if parse_sql92(s.selector.expression).evaluate(dict(m.properties)):
                    bf.hash_to(s.bloom, bits)
            assert unit.filter_bitmap == bytes(bits) and unit.filter_version == version
            assert unit.tags_code == tags_code(m.tags)
        cq = store.table("consume_queue").collect()
        assert all(is_ext_addr(r.tags_code) and undecorate_ext_addr(r.tags_code) == r.queue_offset for r in cq)

    def test_no_sql92_subscription_no_bitmap(self, store):
        store.subscribe("GroupA", "TopicTest", "TagA")
        send_props(store, 3)
        store.dispatch()
        assert store.table("consume_queue_ext").count() == 0  # no bitmap to keep: no ext unit
        assert {r.tags_code for r in store.table("consume_queue").collect()} == {tags_code(t) for t in TAGS[:3]}

    def test_bitmap_calculation_off(self, spark, store_path):
        off = MessageStore.create(store_path, spark, enable_calc_filter_bitmap=False)
        off.create_topic("TopicTest", queues=2)
        off.subscribe("GroupB", "TopicTest", MessageSelector.by_sql("a > 3"))
        send_props(off, 10)
        off.dispatch()
        assert off.table("consume_queue_ext").count() == 0  # no bitmap computed: no ext unit
        assert bodies(off.read("TopicTest", group="GroupB")) == expected_bodies(off, lambda t, p: int(p["a"]) > 3)


class TestTagReads:
    def test_colliding_tags_never_mix(self, store):
        assert tags_code("Aa") == tags_code("BB")
        send_props(store, 25)
        store.dispatch()
        got = bodies(store.read("TopicTest", MessageSelector.by_tag("Aa")))
        assert got == expected_bodies(store, lambda t, p: t == "Aa") and len(got) == 5
        store.subscribe("GA", "TopicTest", "Aa")
        s = store.filter_stats("GA", "TopicTest")  # the code stage lets BB through; the tag stage drops it
        assert (s.checked, s.passed_consume_queue, s.matched, s.false_positives) == (25, 10, 5, 5)

    @pytest.mark.parametrize("expression", ["TagA || TagB", "TagC", "*", "", "Nope"])
    def test_tag_expressions(self, store, expression):
        send_props(store, 15)
        store.dispatch()
        sub = MessageSelector.by_tag(expression)
        wanted = {t.strip() for t in expression.split("||")} if expression.strip() not in ("", "*") else None
        got = bodies(store.read("TopicTest", sub))
        assert got == expected_bodies(store, lambda t, p: wanted is None or t in wanted)

    def test_group_read_uses_its_subscription(self, store):
        store.subscribe("GroupA", "TopicTest", "TagA || TagB")
        send_props(store, 10)
        store.dispatch()
        assert bodies(store.read("TopicTest", group="GroupA")) == expected_bodies(
            store, lambda t, p: t in ("TagA", "TagB")
        )
        with pytest.raises(SubscriptionNotFoundError):
            store.read("TopicTest", group="Nobody")

    def test_only_dispatched_messages_are_read(self, store):
        send_props(store, 5)
        store.dispatch()
        send_props(store, 5, start=5)
        assert len(bodies(store.read("TopicTest"))) == 5

    def test_files_of_several_topics_and_undispatched_tails(self, store):
        """A file holding several topics, or messages not yet dispatched, is cut by its rows; a file
        whose statistics say it holds only the topic's dispatched messages needs no cut."""
        from storelib import Message

        store.create_topic("Other", queues=2)
        store.send_batch(
            [Message("TopicTest" if i % 2 else "Other", tags="TagA", body=f"m{i}".encode()) for i in range(8)]
        )
        store.dispatch()
        store.send_batch([Message("TopicTest", tags="TagA", body=b"late")] * 3)  # in the same table, not dispatched
        assert bodies(store.read("TopicTest", "TagA")) == [f"m{i}" for i in range(1, 8, 2)]
        assert bodies(store.read("Other", "TagA")) == [f"m{i}" for i in range(0, 8, 2)]
        store.dispatch()
        assert bodies(store.read("TopicTest", "TagA")).count("late") == 3

    def test_prepared_messages_are_left_out_unless_statistics_rule_them_out(self, store):
        """A file whose ``sysflag`` statistics stay below the transaction bits holds only normal
        messages, so its read is the plain query; a prepared message (older RocketMQ kept them in the
        real topic) makes the read test every row again, and is not read."""
        from storelib.model.message import SysFlag

        def queued_test(df):
            return f"& {SysFlag.TRANSACTION_ROLLBACK_TYPE})" in df._jdf.queryExecution().optimizedPlan().toString()

        send_props(store, 10)
        store.dispatch()
        plain = store.read("TopicTest", "TagA")
        assert not queued_test(plain) and bodies(plain) == ["m0", "m5"]
        ctx = store.context
        batch = [Message("TopicTest", tags="TagA", body=body) for body in (b"m10", b"prepared", b"m11")]
        encoded = ctx.producer.encode(batch, ctx.topics.all())
        encoded[1].sysflag |= SysFlag.TRANSACTION_PREPARED_TYPE
        ctx.commitlog.append(encoded)  # one file: two normal messages and a prepared one
        store.dispatch()
        mixed = store.read("TopicTest", "TagA")
        assert queued_test(mixed) and bodies(mixed) == ["m0", "m10", "m11", "m5"]

    def test_ext_queue_off(self, spark, store_path):
        plain = MessageStore.create(store_path, spark, enable_consume_queue_ext=False)
        plain.create_topic("TopicTest", queues=3)
        send_props(plain, 12)
        plain.dispatch()
        assert bodies(plain.read("TopicTest", "Aa")) == expected_bodies(plain, lambda t, p: t == "Aa")
        assert bodies(plain.read("TopicTest", MessageSelector.by_sql("a >= 5"))) == expected_bodies(
            plain, lambda t, p: int(p["a"]) >= 5
        )


class TestSql92Reads:
    def test_group_read_with_bloom_pruning_is_exact(self, store):
        for i in range(8):  # several subscriptions share the bitmap
            store.subscribe(f"G{i}", "TopicTest", MessageSelector.by_sql(f"a = {i % 7}"))
        store.subscribe("GroupB", "TopicTest", MessageSelector.by_sql(SQL_B))
        send_props(store, 70)
        store.dispatch()
        want = expected_bodies(store, lambda t, p: t in ("TagA", "TagB") and 0 <= int(p["a"]) <= 3)
        assert bodies(store.read("TopicTest", group="GroupB")) == want
        s = store.filter_stats("GroupB", "TopicTest")
        assert s.checked == 70 and s.matched == len(want)
        assert s.pruned_by_bitmap + s.skipped_by_file > 0 and s.false_positives >= 0
        assert s.skipped_by_file + s.pruned_by_bitmap + s.passed_consume_queue == s.checked

    def test_messages_before_the_subscription_pass_to_exact_evaluation(self, store):
        send_props(store, 14)
        store.dispatch()  # dispatched while nobody subscribed: no bitmap
        store.subscribe("GroupB", "TopicTest", MessageSelector.by_sql("a > 4"))
        send_props(store, 14, start=14)
        store.dispatch()
        want = expected_bodies(store, lambda t, p: int(p["a"]) > 4)
        assert bodies(store.read("TopicTest", group="GroupB")) == want
        s = store.filter_stats("GroupB", "TopicTest")
        assert s.passed_consume_queue >= 14  # the first 14 all pass the consume queue stage
        # ... unjudged, not as false positives: a = i % 7 > 4 for 4 of them
        assert (s.no_bitmap, s.no_bitmap_matched) == (14, 4)
        assert s.false_positives == s.passed_consume_queue - 14 - (s.matched - 4) >= 0

    def test_replaced_subscription_does_not_trust_old_bitmaps(self, store):
        store.subscribe("GroupB", "TopicTest", MessageSelector.by_sql("a = 1"))
        send_props(store, 14)
        store.dispatch()
        store.subscribe("GroupB", "TopicTest", MessageSelector.by_sql("a = 2"))
        assert bodies(store.read("TopicTest", group="GroupB")) == expected_bodies(store, lambda t, p: p["a"] == "2")

    def test_whole_files_are_skipped(self, spark, store):
        store.subscribe("GroupB", "TopicTest", MessageSelector.by_sql("region = 'eu'"))
        store.send_batch(
            [Message("TopicTest", body=b"us", tags="T", properties={"region": "us"}, queue_id=0) for _ in range(10)]
        )
        store.dispatch()
        store.send_batch(
            [Message("TopicTest", body=b"eu", tags="T", properties={"region": "eu"}, queue_id=0) for _ in range(3)]
        )
        store.dispatch()
        from storelib.query.read import plan_read

        plan = plan_read(store.context, "TopicTest", group="GroupB")
        assert plan.files_skipped == 1 and plan.units_skipped == 10 and len(plan.ext_files) == 1
        assert bodies(store.read("TopicTest", group="GroupB")) == ["eu"] * 3
        assert len(plan.commitlog_files()) == 1 and plan.choice == "prune"  # the 'us' file is never opened
        explain = store.explain_read("TopicTest", group="GroupB")
        assert (explain.files_considered, explain.files_skipped_by_summary, explain.files_read) == (2, 1, 1)
        stats = store.filter_stats("GroupB", "TopicTest")
        assert stats.skipped_by_file == 10 and stats.files_skipped_by_summary == 1 and stats.choice == "prune"

    def test_ad_hoc_sql92_read(self, store):
        send_props(store, 21)
        store.dispatch()
        got = store.read("TopicTest", MessageSelector.by_sql("b = 'x' AND a <> 3"))
        assert bodies(got) == expected_bodies(store, lambda t, p: p["b"] == "x" and p["a"] != "3")
        explain = store.explain_read("TopicTest", MessageSelector.by_sql("b = 'x' AND a NOT IN ('3')"))
        assert explain.spark_sql == "b = 'x' AND NOT a IN ('3')" and "  spark sql   b = 'x'" in str(explain)
        assert store.explain_read("TopicTest", MessageSelector.by_tag("TagA")).spark_sql is None
        from storelib.query.filter_stats import filter_stats

        assert (
            filter_stats(store.context, "TopicTest", MessageSelector.by_sql("b CONTAINS 'x'")).spark_sql
            == "CONTAINS(b, 'x')"
        )

    def test_read_equals_exact_filter_over_every_message(self, spark, store):
        store.subscribe("GroupB", "TopicTest", MessageSelector.by_sql(SQL_B))
        send_props(store, 30)
        store.dispatch()
        slow = store.messages("TopicTest").where(parse_sql92(SQL_B).to_column("properties"))
        assert_df_equality(
            store.read("TopicTest", group="GroupB").drop("properties"),
            slow.drop("properties"),
            ignore_row_order=True,
            ignore_nullable=True,
        )  # (chispa cannot sort map columns)

    def test_ansi_mode_never_fails_a_read(self, spark, store):
        store.send_batch(
            [
                Message("TopicTest", body=b"x", properties={"a": v})
                for v in ("abc", " 7", "99999999999999999999", "1e400", "3")
            ]
        )
        store.dispatch()
        assert spark.conf.get("spark.sql.ansi.enabled") == "true"
        assert len(bodies(store.read("TopicTest", MessageSelector.by_sql("a > 2")))) == 1

    def test_compaction_keeps_file_summaries(self, store):
        store.subscribe("GroupB", "TopicTest", MessageSelector.by_sql("a = 6"))
        for start in range(0, 21, 7):
            send_props(store, 7, start=start)
            store.dispatch()
        before = bodies(store.read("TopicTest", group="GroupB"))
        store.compact()
        from storelib.query.read import plan_read

        plan = plan_read(store.context, "TopicTest", group="GroupB")
        assert bodies(store.read("TopicTest", group="GroupB")) == before
        assert len(plan.ext_files) < 12


class TestPassingUnits:
    """The consume queue stage computed two ways: Spark columns, and Arrow/numpy on the driver."""

    @pytest.mark.parametrize("selector", [MessageSelector.by_tag("Aa || TagC"), None, "group"])
    def test_driver_and_spark_agree(self, spark, store, selector):
        import storelib.query.read as read

        store.subscribe("G1", "TopicTest", MessageSelector.by_sql("a > 4"))
        send_props(store, 12)
        store.dispatch()
        store.subscribe("GroupB", "TopicTest", MessageSelector.by_sql("b = 'x'"))  # after: its old units pass
        send_props(store, 30, start=12)
        store.dispatch()
        group = "GroupB" if selector == "group" else None
        plan = read.plan_read(store.context, "TopicTest", None if group else selector, group)
        units = plan.units(spark)
        in_spark = sorted(r.commitlog_offset for r in units.where(plan.filter.consume_queue_column()).collect())
        table = pa.Table.from_pylist([r.asDict() for r in units.collect()])
        on_driver = sorted(table.column("commitlog_offset").to_numpy()[plan.filter.consume_queue_mask(table)])
        assert in_spark == on_driver and len(in_spark) < 42 or selector is None
