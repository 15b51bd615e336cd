# Databricks notebook source
# MAGIC %md
# MAGIC # storelib quick start
# MAGIC RocketMQ's CommitLog, ConsumeQueue and IndexFile as Delta tables. This notebook creates a store, sends
# MAGIC messages one by one and as a DataFrame, dispatches them, reads them back filtered, finds one by key and
# MAGIC by id, pulls a queue as a consumer group and shows its lag.
# MAGIC
# MAGIC **Parameters** (widgets on Databricks; `STORELIB_NOTEBOOK_<NAME>` environment variables locally):
# MAGIC `store` (a folder the cluster can write: a Volume, or `/tmp` on a single-node cluster; emptied first
# MAGIC if it holds an earlier run's store), `output` (where figures are saved as PNG), `messages`.
# MAGIC
# MAGIC Locally: `.venv/bin/python notebooks/quickstart.py` (the store goes to `data/notebooks/quickstart`).
# MAGIC On Databricks (a classic cluster with Spark 4): the cell below installs the two dependencies the runtime lacks;
# MAGIC storelib is imported from the repository holding this notebook. On a cluster of several nodes, install
# MAGIC storelib itself on the cluster too (for example `%pip install --no-deps /Workspace/<path to the repository>`).

# COMMAND ----------

# MAGIC %pip install "deltalake>=1.1,<2" "sqlglot>=25,<31"

# COMMAND ----------

import sys
from pathlib import Path

# This checkout's storelib: the notebook's folder is __file__'s locally, the working directory on Databricks.
sys.path.insert(0, str((Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()).parent))

from pyspark.sql import functions as F  # noqa: E402

from storelib import Message, MessageSelector, MessageStore  # noqa: E402
from storelib.notebook import setup  # noqa: E402
from storelib.sql import register_views, run_file  # noqa: E402

nb = setup(globals(), "quickstart", messages="2000")
spark = nb.spark
N = nb.int_param("messages")

store = MessageStore.create(nb.fresh_store(), spark)
store.create_topic("OrderEvents", queues=4)
# Subscribed before sending: dispatch computes the SQL92 group's Bloom bits for every message.
store.subscribe("Shipping", "OrderEvents", "paid || shipped")
store.subscribe("Billing", "OrderEvents", MessageSelector.by_sql("region = 'eu' AND amount BETWEEN 100 AND 199"))
print(f"store at {store.root}")

# COMMAND ----------

# MAGIC %md ## Send one message, then a DataFrame of messages
# MAGIC Each send returns RocketMQ's message id (store host, port, commitlog offset) and the queue it went to.

# COMMAND ----------

r = store.send(
    Message(
        "OrderEvents",
        tags="created",
        keys=["order-1"],
        body=b'{"order": 1}',
        properties={"region": "eu", "amount": "150"},
    )
)
nb.show(r, title="one message sent")

TAGS = ["created", "paid", "shipped", "cancelled"]
i = F.col("id")
orders = spark.range(2, N + 1).select(
    F.lit("OrderEvents").alias("topic"),
    F.concat(F.lit('{"order": '), i.cast("string"), F.lit("}")).alias("body"),
    F.element_at(F.array(*[F.lit(t) for t in TAGS]), (F.pmod(F.hash(i), len(TAGS)) + 1).cast("int")).alias("tags"),
    F.array(F.concat(F.lit("order-"), i.cast("string"))).alias("keys"),
    F.create_map(
        F.lit("region"),
        F.element_at(F.array(F.lit("eu"), F.lit("us"), F.lit("apac")), (F.pmod(i, 3) + 1).cast("int")),
        F.lit("amount"),
        F.pmod(i, 500).cast("string"),
    ).alias("properties"),
)
sent = store.send_dataframe(orders)
print(f"sent {sent.count} messages as a DataFrame, in one commit")
assert sent.count == N - 1

# COMMAND ----------

# MAGIC %md ## Dispatch: consume queue and index rows for everything new
# MAGIC RocketMQ's ReputMessageService: one Spark job reads the new commitlog files and writes the consume queue,
# MAGIC its ext (tag codes and the SQL92 groups' Bloom bitmaps) and the index.

# COMMAND ----------

result = store.dispatch()
print(result)
assert result.consume_queue_rows == N and result.index_rows == 2 * N  # a KEYS and a UNIQ_KEY entry each

per_queue = (
    store.table("consume_queue")
    .groupBy("topic", "queue_id")
    .agg(F.count("*").alias("messages"), (F.max("queue_offset") + 1).alias("max_offset"))
    .orderBy("topic", "queue_id")
)
rows = nb.show(per_queue, title="messages per queue")
assert sum(row.messages for row in rows) == N and len(rows) == 4

by_tag = {
    (row.queue_id, row.tags): row["count"]
    for row in store.messages("OrderEvents").groupBy("queue_id", "tags").count().collect()
}
plt = nb.pyplot()
fig, ax = plt.subplots(figsize=(6, 3))
bottom = [0] * len(rows)
for tag in TAGS:
    counts = [by_tag.get((row.queue_id, tag), 0) for row in rows]
    ax.bar([f"queue {row.queue_id}" for row in rows], counts, bottom=bottom, label=tag)
    bottom = [b + c for b, c in zip(bottom, counts)]
ax.set_title(f"OrderEvents: messages per queue and tag ({N} in all)")
ax.set_ylabel("messages")
ax.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize="small")
assert bottom == [row.messages for row in rows]
nb.figure(fig, "messages_per_queue.png")

# COMMAND ----------

# MAGIC %md ## Filtered reads: by tag, by SQL92, by a group's subscription
# MAGIC Tags match by hash code in the consume queue first, then by the tag string; SQL92 groups prune with their
# MAGIC Bloom bits first, then evaluate the exact predicate on the message's properties.

# COMMAND ----------

paid = store.read("OrderEvents", MessageSelector.by_tag("paid || shipped")).select(
    "msg_id", "tags", "keys", "properties"
)
nb.show(paid, 5, title="read by tag: paid || shipped")
billing = store.read("OrderEvents", group="Billing").select("msg_id", "tags", "properties", "body")
nb.show(billing, 5, title="read by group Billing: region = 'eu' AND amount BETWEEN 100 AND 199")
stats = store.filter_stats("Billing", "OrderEvents")
nb.show(stats, title="how Billing's subscription filters the topic")
want = (
    sum(1 for n in range(1, N + 1) if n % 3 == 0 and 100 <= n % 500 <= 199) + 1
)  # + the single eu order 1 (amount 150)
assert stats.matched == billing.count() == want, (stats, want)

# COMMAND ----------

# MAGIC %md ## Point lookups (no Spark job) and SQL
# MAGIC The SQL files live in the repository's `sql/` folder, found from this notebook's own folder.

# COMMAND ----------

m = store.query_by_id(r.msg_id)
nb.show(
    [(m.msg_id, m.topic, m.queue_id, m.queue_offset, m.keys, m.properties, bytes(m.body))],
    title=f"query_by_id({r.msg_id!r}): id, topic, queue, offset, keys, properties, body",
)
hits = store.query_by_key("OrderEvents", "order-42")
nb.show([(h.msg_id, h.queue_id, h.queue_offset, bytes(h.body)) for h in hits], title="query_by_key('order-42')")
assert m.keys == "order-1" and bytes(hits[0].body) == b'{"order": 42}'

register_views(spark, store)
by_key = run_file(spark, nb.path("../sql/messages_by_key.sql"), {"topic": "OrderEvents", "key": "order-42"})
assert nb.show(by_key, title="sql/messages_by_key.sql")[0].msg_id == hits[0].msg_id

# COMMAND ----------

# MAGIC %md ## Consuming: pull with RocketMQ's statuses, commit offsets, lag, retry
# MAGIC A pull is a point read (no Spark job). `status` is the client's PullStatus, `get_status` the store's.

# COMMAND ----------

p = store.pull("Shipping", "OrderEvents", queue_id=0, offset=0, max_msgs=32)
nb.show(
    [(p.status.value, p.get_status.value, p.next_begin_offset, p.min_offset, p.max_offset, len(p.messages))],
    title="pull: status, store status, next offset, min, max, messages",
)
assert p.messages and all(x.tags in ("paid", "shipped") for x in p.messages)
store.commit_offset("Shipping", "OrderEvents", 0, p.next_begin_offset)
lag = nb.show(
    store.consumer_lag("Shipping").where("topic = 'OrderEvents'").orderBy("queue_id"), title="consumer lag of Shipping"
)
assert lag[0].committed_offset == p.next_begin_offset and lag[0].lag == lag[0].max_offset - p.next_begin_offset

back = store.send_back(p.messages[0], group="Shipping")
nb.show(back, title="send_back: to SCHEDULE_TOPIC_XXXX, level 3, for %RETRY%Shipping")
assert back.topic == "SCHEDULE_TOPIC_XXXX"
