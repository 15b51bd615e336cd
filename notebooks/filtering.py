# Databricks notebook source
# MAGIC %md
# MAGIC # Filtering: tags, SQL92 and Bloom pruning
# MAGIC A RocketMQ consumer subscribes with a tag expression (`refunded || paid`) or a SQL92 expression over the
# MAGIC message's properties (`region = 'eu' AND amount >= 990`). The store filters in two stages, as the broker
# MAGIC does: first what summaries rule out without reading a message (consume queue tag codes, the SQL92 groups'
# MAGIC Bloom bits, per-file and per-row-group summaries), then the exact check on every message read.
# MAGIC
# MAGIC This notebook sends an hour of orders in three batches, reads them by tag and by SQL92, measures what each
# MAGIC read skips on fresh data and after `store.compact()` clusters it, and plots both.
# MAGIC
# MAGIC **Parameters**: `store`, `output` (PNG figures), `messages` (at least 4,096: a few row groups of 1,024).

# COMMAND ----------

# MAGIC %pip install "deltalake>=1.1,<2" "sqlglot>=25,<31"

# COMMAND ----------

import sys
from pathlib import Path

sys.path.insert(0, str((Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()).parent))

from pyspark.sql import functions as F  # noqa: E402

from storelib import MessageSelector, MessageStore, compile_sql92  # noqa: E402
from storelib.notebook import setup  # noqa: E402

nb = setup(globals(), "filtering", messages="4500")
spark = nb.spark
N = nb.int_param("messages")
assert N >= 4096, "messages: at least 4,096, so the clustered data has enough row groups for pruning to pay"

store = MessageStore.create(nb.fresh_store(), spark)
# Clustering keys: compact() sorts settled data by topic, TAGS, region, then the rarest groups' Bloom hits.
store.create_topic("Orders", queues=4, cluster_by=["TAGS", "region"])
# Registered before sending, so dispatch sets each SQL92 group's Bloom bits in every message's bitmap.
store.subscribe("Refunds", "Orders", "refunded")
store.subscribe("BigEU", "Orders", MessageSelector.by_sql("region = 'eu' AND amount >= 990"))
store.subscribe("Audit", "Orders", "*")

# COMMAND ----------

# MAGIC %md ## An hour of orders, in three batches
# MAGIC Order `i` is born at minute `60 * i / N`; refunds start in the last third of the hour (the third batch).
# MAGIC Each batch is sent as one DataFrame and dispatched.

# COMMAND ----------

TAGS = ["created", "paid", "shipped"]
START = 1_767_225_600  # 2026-01-01 00:00 UTC: born times are the producer's, set by the DataFrame
i = F.col("id")


def orders(lo: int, hi: int):
    tag = F.element_at(F.array(*[F.lit(t) for t in TAGS]), (F.pmod(F.hash(i), len(TAGS)) + 1).cast("int"))
    return spark.range(lo, hi).select(
        F.lit("Orders").alias("topic"),
        F.concat(F.lit('{"order": '), i.cast("string"), F.lit("}")).cast("binary").alias("body"),
        F.when((i >= 2 * N // 3) & (F.pmod(i, 7) == 5), "refunded").otherwise(tag).alias("tags"),
        F.array(F.concat(F.lit("order-"), i.cast("string"))).alias("keys"),
        F.create_map(
            F.lit("region"),
            F.element_at(F.array(F.lit("eu"), F.lit("us"), F.lit("apac")), (F.pmod(i, 3) + 1).cast("int")),
            F.lit("amount"),
            F.pmod(i * 7, 1000).cast("string"),
        ).alias("properties"),
        (F.lit(START) + i * 3600.0 / N).cast("timestamp").alias("born_timestamp"),
    )


for b in range(3):
    sent = store.send_dataframe(orders(b * N // 3, (b + 1) * N // 3))
    store.dispatch()
    print(f"batch {b + 1}: {sent.count} messages sent and dispatched")

expected = {
    "refunded": [n for n in range(2 * N // 3, N) if n % 7 == 5],
    "BigEU": [n for n in range(N) if n % 3 == 0 and (n * 7) % 1000 >= 990],
}
assert store.dispatch_progress()["consume_queue"] == store.max_offset()

# COMMAND ----------

# MAGIC %md ## Messages per minute, per tag
# MAGIC Born time, bucketed by minute: the refunds arrive in the last twenty minutes.

# COMMAND ----------

per_minute = (
    store.messages("Orders")
    .groupBy(F.date_trunc("minute", "born_timestamp").alias("minute"), "tags")
    .count()
    .orderBy("minute", "tags")
)
rows = nb.show(per_minute, 8, title="messages per minute and tag (first rows)")
counts = {}
for row in per_minute.collect():
    counts.setdefault(row.tags, {})[row.minute] = row["count"]
minutes = sorted({m for by_minute in counts.values() for m in by_minute})
assert sum(sum(v.values()) for v in counts.values()) == N and len(minutes) == 60
assert sum(counts["refunded"].values()) == len(expected["refunded"]) and min(counts["refunded"]) >= minutes[40]

plt = nb.pyplot()
fig, ax = plt.subplots(figsize=(8, 3.5))
for tag in [*TAGS, "refunded"]:
    ax.plot(
        [m.strftime("%H:%M") for m in minutes],
        [counts[tag].get(m, 0) for m in minutes],
        label=tag,
        marker="." if tag == "refunded" else None,
    )
ax.set_xticks(range(0, len(minutes), 10))
ax.set_title("Orders: messages per minute (born time), per tag")
ax.set_ylabel("messages")
ax.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize="small")
nb.figure(fig, "messages_per_minute_per_tag.png")

# COMMAND ----------

# MAGIC %md ## Reading by tag, by SQL92, by a group's subscription
# MAGIC `read` with a selector needs nothing registered; `group=` uses the group's subscription, and its Bloom bits.
# MAGIC `compile_sql92` turns an expression into a Spark Column over a `properties` map, for any DataFrame.

# COMMAND ----------

by_tag = store.read("Orders", MessageSelector.by_tag("refunded"))
nb.show(by_tag.select("msg_id", "tags", "keys", "born_timestamp"), 5, title="read by tag: refunded")
by_group = store.read("Orders", group="BigEU")
nb.show(
    by_group.select("msg_id", "tags", "properties", "body"),
    5,
    title="read by group BigEU: region = 'eu' AND amount >= 990",
)
ad_hoc = store.messages("Orders").where(compile_sql92("region = 'eu' AND amount >= 990"))


def order_numbers(df) -> list[int]:
    return sorted(int(k.removeprefix("order-")) for k in (r.keys for r in df.select("keys").collect()))


assert order_numbers(by_tag) == expected["refunded"]
assert order_numbers(by_group) == order_numbers(ad_hoc) == expected["BigEU"]

# COMMAND ----------

# MAGIC %md ## What a read skips, on fresh data
# MAGIC Fresh (unclustered) files are ruled out whole when no `consume_queue_ext` file pointing into them can match:
# MAGIC the refunds are all in the third batch, so the first two batches' files are never opened. `explain_read`
# MAGIC plans the read on the driver from the tables' logs and summaries, without a Spark job.

# COMMAND ----------

READS = {
    "tag refunded": dict(selector=MessageSelector.by_tag("refunded")),
    "group BigEU (SQL92)": dict(group="BigEU"),
    "tag paid": dict(selector=MessageSelector.by_tag("paid")),
    "SQL92 region = 'apac'": dict(selector=MessageSelector.by_sql("region = 'apac'")),
}
fresh = {name: store.explain_read("Orders", **how) for name, how in READS.items()}
for e in fresh.values():
    print(e)
assert fresh["tag refunded"].files_skipped_by_summary >= 1 and fresh["tag refunded"].choice == "prune"
assert fresh["tag refunded"].files_read < fresh["tag refunded"].files_considered

# COMMAND ----------

# MAGIC %md ## Compact, then read again
# MAGIC `compact()` clusters settled data (here everything: `settle_ms=0`) into files of row groups of 1,024 rows,
# MAGIC sorted by the clustering keys and the groups' Bloom hits. A tag read now skips row groups by their tag codes,
# MAGIC a SQL92 group's read skips those whose OR-ed bitmaps lack the group's bits. Offsets, ids and keys are unchanged.

# COMMAND ----------

compacted = store.compact(settle_ms=0)
print("files (removed, added) per table:", compacted)
clustered = {name: store.explain_read("Orders", **how) for name, how in READS.items()}
for e in clustered.values():
    print(e)
stats = [store.filter_stats(g, "Orders") for g in ("Refunds", "BigEU", "Audit")]
table = spark.createDataFrame(
    [
        (
            s.group,
            s.expression,
            s.checked,
            s.pruned_by_bitmap,
            s.matched,
            s.choice,
            s.row_groups,
            s.row_groups_skipped_by_statistics,
            s.row_groups_skipped_by_bitmap,
        )
        for s in stats
    ],
    "group string, expression string, units long, pruned_in_consume_queue long, matched long, choice string, "
    "row_groups long, skipped_by_tag_codes long, skipped_by_bitmap long",
)
nb.show(table, title="filter_stats per group, after compaction")

assert clustered["tag refunded"].choice == "prune" and clustered["tag refunded"].row_groups_skipped_by_statistics >= 1
assert (
    clustered["group BigEU (SQL92)"].row_groups_skipped_by_bitmap >= 1
    and clustered["group BigEU (SQL92)"].choice == "prune"
)
assert all(
    e.row_groups_read == e.row_groups_considered - e.row_groups_skipped_by_statistics - e.row_groups_skipped_by_bitmap
    for e in clustered.values()
    if e.choice == "prune"
)  # the figure's skipped row groups are never read
assert clustered["SQL92 region = 'apac'"].choice == "scan"  # no group registered it: no bitmap to prune with
assert [s.matched for s in stats] == [len(expected["refunded"]), len(expected["BigEU"]), N]
assert order_numbers(store.read("Orders", group="BigEU")) == expected["BigEU"]  # the same answer, fewer bytes read

# COMMAND ----------

# MAGIC %md ## Files and row groups skipped, plotted

# COMMAND ----------

names = list(READS)
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
y = range(len(names))
left.barh([v + 0.2 for v in y], [fresh[n].files_considered for n in names], 0.4, label="considered", color="lightgray")
left.barh(
    [v - 0.2 for v in y],
    [fresh[n].files_skipped_by_summary for n in names],
    0.4,
    label="skipped by ext summaries",
    color="tab:green",
)
left.set_title("fresh data: commitlog files")
left.set_yticks(list(y), names)
left.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
considered = [clustered[n].row_groups_considered for n in names]
by_stats = [clustered[n].row_groups_skipped_by_statistics for n in names]
by_bitmap = [clustered[n].row_groups_skipped_by_bitmap for n in names]
right.barh([v + 0.2 for v in y], considered, 0.4, label="considered", color="lightgray")
right.barh([v - 0.2 for v in y], by_stats, 0.4, label="skipped by tag codes", color="tab:green")
right.barh([v - 0.2 for v in y], by_bitmap, 0.4, left=by_stats, label="skipped by Bloom bitmaps", color="tab:purple")
right.set_title("after compact(): clustered row groups")
right.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3)
for ax in (left, right):
    ax.xaxis.get_major_locator().set_params(integer=True)
fig.suptitle("What a filtered read of Orders never opens")
nb.figure(fig, "files_and_row_groups_skipped.png")
