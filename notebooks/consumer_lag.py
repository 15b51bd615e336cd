# Databricks notebook source
# MAGIC %md
# MAGIC # Consumer lag per queue and group
# MAGIC A RocketMQ consumer group pulls each queue of a topic and commits the next offset it will consume. Its lag on
# MAGIC a queue is the queue's max offset (one past the last dispatched message) minus the committed offset:
# MAGIC `store.consumer_lag(group)`, RocketMQ's `getConsumeStats`, computed on the driver from table metadata.
# MAGIC
# MAGIC Three groups consume two topics at different paces; one message fails and comes back on the group's
# MAGIC `%RETRY%` topic. **Parameters**: `store`, `output` (PNG figures), `messages` (per topic).

# COMMAND ----------

# MAGIC %pip install "deltalake>=1.1,<2" "sqlglot>=25,<31"

# COMMAND ----------

import sys
from pathlib import Path

sys.path.insert(0, str((Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()).parent))

from functools import reduce  # noqa: E402

from pyspark.sql import functions as F  # noqa: E402

from storelib import MessageStore  # noqa: E402
from storelib.notebook import setup  # noqa: E402
from storelib.sql import register_views, run_file  # noqa: E402

nb = setup(globals(), "consumer_lag", messages="1200")
spark = nb.spark
N = nb.int_param("messages")

store = MessageStore.create(nb.fresh_store(), spark)
store.create_topic("Orders", queues=8)
store.create_topic("Payments", queues=4)
store.subscribe("Shipping", "Orders", "paid || shipped")  # consumes every queue, some further than others
store.subscribe("Billing", "Payments", "*")  # has caught up on half its queues
store.subscribe("Analytics", "Orders", "*")  # has not consumed anything yet

TAGS = ["created", "paid", "shipped", "cancelled"]
for topic in ("Orders", "Payments"):
    i = F.col("id")
    store.send_dataframe(
        spark.range(N).select(
            F.lit(topic).alias("topic"),
            F.concat(F.lit(topic + " "), i.cast("string")).cast("binary").alias("body"),
            F.element_at(F.array(*[F.lit(t) for t in TAGS]), (F.pmod(F.hash(i), len(TAGS)) + 1).cast("int")).alias(
                "tags"
            ),
        )
    )
print(store.dispatch())

# COMMAND ----------

# MAGIC %md ## Queue depth, from `sql/consume_queue_depth.sql`

# COMMAND ----------

register_views(spark, store)
depth = nb.show(run_file(spark, nb.path("../sql/consume_queue_depth.sql")), title="messages and offsets per queue")
max_offset = {(r.topic, r.queue_id): r.max_offset for r in depth}
assert sum(r.messages for r in depth) == 2 * N and len(depth) == 12

# COMMAND ----------

# MAGIC %md ## The groups consume
# MAGIC Shipping pulls queue `q` of Orders `q + 1` times, 8 messages a pull, committing as it goes (the pull's
# MAGIC commit-offset flag). Billing reads Payments' queues 0 and 1 to their end. Each pull is a point read, no
# MAGIC Spark job.

# COMMAND ----------


def consume(group: str, topic: str, queue_id: int, pulls: int | None) -> int:
    """Pull ``pulls`` times (None: to the queue's end), commit the next offset; return it."""
    offset, done = max(0, store.committed_offset(group, topic, queue_id)), 0
    while pulls is None or done < pulls:
        r = store.pull(group, topic, queue_id, offset, max_msgs=8, commit_offset=offset)
        if r.next_begin_offset == offset:
            break  # nothing further: the queue's end
        offset, done = r.next_begin_offset, done + 1
    store.commit_offset(group, topic, queue_id, offset)
    return offset


shipping = {q: consume("Shipping", "Orders", q, q + 1) for q in range(8)}
billing = {q: consume("Billing", "Payments", q, None) for q in (0, 1)}
nb.show(sorted(shipping.items()), title="Shipping: committed offset per Orders queue")
assert billing == {q: max_offset[("Payments", q)] for q in (0, 1)}

# COMMAND ----------

# MAGIC %md ## A failed message comes back on `%RETRY%Shipping`
# MAGIC `send_back` stores it delayed (level 1: 1 s); `deliver_delayed(now=...)` moves it to the retry topic once due
# MAGIC (here with a `now` two hours on, instead of waiting), and the group's lag counts it there.

# COMMAND ----------

failed = store.pull("Shipping", "Orders", 0, 0, max_msgs=1).messages[0]
back = store.send_back(failed, "Shipping", delay_level=1)
store.dispatch()
due = store.query_by_id(back.msg_id).store_timestamp.timestamp() * 1000 + 2 * 3_600_000
delivered = store.deliver_delayed(now=int(due))
store.dispatch()
nb.show(delivered, title="deliver_delayed")
assert delivered.delivered == 1

# COMMAND ----------

# MAGIC %md ## Lag per queue and group

# COMMAND ----------

GROUPS = ["Shipping", "Billing", "Analytics"]
lag = reduce(
    lambda a, b: a.unionByName(b), [store.consumer_lag(g).withColumn("group", F.lit(g)) for g in GROUPS]
).select("group", "topic", "queue_id", "max_offset", "committed_offset", "lag")
rows = nb.show(lag.orderBy("group", "topic", "queue_id"), 40, title="consumer_lag, every group")
by_group = {g: [r for r in rows if r.group == g] for g in GROUPS}

for r in rows:
    if r.topic.startswith("%RETRY%"):
        continue
    assert r.max_offset == max_offset[(r.topic, r.queue_id)] and r.lag == r.max_offset - r.committed_offset
assert all(r.committed_offset == shipping[r.queue_id] for r in by_group["Shipping"] if r.topic == "Orders")
assert [r.lag for r in by_group["Billing"] if r.topic == "Payments"][:2] == [0, 0]
assert all(r.committed_offset == 0 and r.lag == r.max_offset for r in by_group["Analytics"] if r.topic == "Orders")
assert [(r.topic, r.lag) for r in by_group["Shipping"] if r.topic.startswith("%RETRY%") and r.lag] == [
    ("%RETRY%Shipping", 1)
]

totals = nb.show(
    lag.groupBy("group").agg(F.sum("lag").alias("total_lag"), F.count("*").alias("queues")).orderBy("group"),
    title="total lag per group",
)
assert {r.group: r.total_lag for r in totals}["Analytics"] == N

# COMMAND ----------

# MAGIC %md ## Plotted: consumed and behind, per queue, per group

# COMMAND ----------

plt = nb.pyplot()
fig, axes = plt.subplots(1, len(GROUPS), figsize=(13, 3.8), sharey=True, layout="constrained")
for ax, group in zip(axes, GROUPS):
    queues = [r for r in by_group[group] if r.max_offset or not r.topic.startswith("%RETRY%")]
    labels = [f"{'%RETRY%' if r.topic.startswith('%RETRY%') else r.topic} {r.queue_id}" for r in queues]
    ax.bar(labels, [r.committed_offset for r in queues], label="consumed (committed offset)", color="tab:blue")
    behind = ax.bar(
        labels, [r.lag for r in queues], bottom=[r.committed_offset for r in queues], label="lag", color="tab:orange"
    )
    ax.bar_label(behind, labels=[str(r.lag) if r.lag else "" for r in queues], fontsize="x-small")
    ax.set_title(f"{group}: lag {sum(r.lag for r in queues)}")
    ax.tick_params(axis="x", labelrotation=60, labelsize="small")
axes[0].set_ylabel("messages (queue offsets)")
axes[0].set_ylim(0, 1.1 * max(r.max_offset for r in rows))
axes[-1].legend(loc="upper right", fontsize="small")
fig.suptitle("Consumer lag per queue and group")
nb.figure(fig, "lag_per_queue.png")
