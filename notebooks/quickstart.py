# Databricks notebook source
# MAGIC %md
# MAGIC # storelib quick start
# MAGIC RocketMQ's CommitLog, ConsumeQueue and IndexFile as Delta tables. This notebook creates a store,
# MAGIC sends messages one by one and as a DataFrame, dispatches them, and reads the tables back.
# MAGIC Set `root` to a path your cluster can write (DBFS, a Volume, or cloud storage).

# COMMAND ----------

# MAGIC %pip install -e /Workspace/Repos/<you>/storelib

# COMMAND ----------

from pyspark.sql import functions as F
from storelib import MessageStore, Message, MessageSelector

root = "/tmp/storelib/quickstart"   # change me
store = MessageStore.create(root, spark)
store.create_topic("OrderEvents", queues=4)

# COMMAND ----------

# MAGIC %md ## Send one message, then a DataFrame of messages

# COMMAND ----------

r = store.send(Message("OrderEvents", tags="created", keys=["order-1"], body=b'{"order": 1}', properties={"region": "eu"}))
print(r.msg_id, r.queue_id, r.queue_offset)

orders = spark.range(2, 5002).select(
    F.lit("OrderEvents").alias("topic"),
    F.concat(F.lit('{"order": '), F.col("id").cast("string"), F.lit("}")).alias("body"),
    F.when(F.col("id") % 2 == 0, "created").otherwise("paid").alias("tags"),
    F.array(F.concat(F.lit("order-"), F.col("id").cast("string"))).alias("keys"),
    F.create_map(F.lit("region"), F.lit("us")).alias("properties"))
store.send_dataframe(orders)

# COMMAND ----------

# MAGIC %md ## Dispatch: consume queue and index rows for everything new

# COMMAND ----------

result = store.dispatch()
print(result)
display(store.table("consume_queue").groupBy("topic", "queue_id").agg(F.count("*").alias("messages"), F.max("queue_offset")))

# COMMAND ----------

# MAGIC %md ## Filtered reads: by tag, by SQL92, by a group's subscription
# MAGIC Tags match by hash code in the consume queue first, then by the tag string; SQL92 groups prune with
# MAGIC their Bloom bits first, then evaluate the exact predicate on the message's properties.

# COMMAND ----------

display(store.read("OrderEvents", MessageSelector.by_tag("paid || shipped")).limit(10))
store.subscribe("Billing", "OrderEvents", MessageSelector.by_sql("region = 'eu' AND amount BETWEEN 100 AND 199"))
display(store.read("OrderEvents", group="Billing").limit(10))   # bitmaps apply to messages dispatched from now on
print(store.filter_stats("Billing", "OrderEvents"))

# COMMAND ----------

# MAGIC %md ## Point lookups (no Spark job) and SQL

# COMMAND ----------

m = store.query_by_id(r.msg_id)
print(m.topic, m.queue_offset, m.properties)
print([x.msg_id for x in store.query_by_key("OrderEvents", "order-42")])

from storelib.sql import register_views, run_file
register_views(spark, store)
display(run_file(spark, "sql/messages_by_key.sql", {"topic": "OrderEvents", "key": "order-42"}))

# COMMAND ----------

# MAGIC %md ## Consuming: pull with RocketMQ's statuses, commit offsets, lag, retry
# MAGIC A pull is a point read (no Spark job). `status` is the client's PullStatus, `get_status` the store's.

# COMMAND ----------

store.subscribe("Shipping", "OrderEvents", "paid || shipped")
p = store.pull("Shipping", "OrderEvents", queue_id=0, offset=0, max_msgs=32)
print(p.status, p.get_status, p.next_begin_offset, p.min_offset, p.max_offset, len(p.messages))
store.commit_offset("Shipping", "OrderEvents", 0, p.next_begin_offset)
display(store.consumer_lag("Shipping"))
if p.messages:
    print(store.send_back(p.messages[0], group="Shipping"))   # to SCHEDULE_TOPIC_XXXX, level 3, for %RETRY%Shipping
