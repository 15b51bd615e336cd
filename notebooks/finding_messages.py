# Databricks notebook source
# MAGIC %md
# MAGIC # Finding messages by key and by id
# MAGIC RocketMQ finds a message by its **message id** (store host, port and commitlog offset: one file to open), by
# MAGIC one of its **KEYS** (the IndexFile: a hash slot of `topic#key`), by its **UNIQ_KEY** (the client's id) and by
# MAGIC **time** (`searchOffset`). Each works through the API (point reads on the driver, no Spark job) and through
# MAGIC SQL: the views `messages` and `messages_by_key` and the parameterised files in the repository's `sql/` folder.
# MAGIC
# MAGIC **Parameters**: `store`, `output`, `customers` (orders are keyed by order and by customer).

# COMMAND ----------

# MAGIC %pip install "deltalake>=1.1,<2" "sqlglot>=25,<31"

# COMMAND ----------

import sys
from pathlib import Path

sys.path.insert(0, str((Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()).parent))

from storelib import Message, MessageStore  # noqa: E402
from storelib.model.errors import MessageNotFoundError  # noqa: E402
from storelib.notebook import setup  # noqa: E402
from storelib.sql import register_views, run_file  # noqa: E402

nb = setup(globals(), "finding_messages", customers="20")
spark = nb.spark
CUSTOMERS = nb.int_param("customers")

store = MessageStore.create(nb.fresh_store(), spark)
store.create_topic("Orders", queues=4)

# COMMAND ----------

# MAGIC %md ## Orders keyed by order and by customer, in two batches
# MAGIC Every order has two KEYS: `order-<n>` and `customer-<c>`. Customer 7 orders in both batches.

# COMMAND ----------


def order(n: int, day: str) -> Message:
    customer = n % CUSTOMERS
    return Message(
        "Orders",
        tags="created",
        keys=[f"order-{n}", f"customer-{customer}"],
        body=f'{{"order": {n}, "customer": {customer}, "day": "{day}"}}'.encode(),
        properties={"customer": str(customer)},
    )


first = store.send_batch([order(n, "monday") for n in range(5 * CUSTOMERS)])
second = store.send_batch([order(n, "tuesday") for n in range(5 * CUSTOMERS, 8 * CUSTOMERS)])
store.dispatch()
nb.show(first[:3], title="the first send results: msg_id (host, port, commitlog offset), queue, offset")
sent = {r.msg_id: r for r in first + second}
assert len(sent) == 8 * CUSTOMERS

# COMMAND ----------

# MAGIC %md ## By message id: `query_by_id`, the `messages` view, `sql/message_by_id.sql`
# MAGIC The id holds the commitlog offset, so only the one commitlog file holding it is read.

# COMMAND ----------

target = second[5]
m = store.query_by_id(target.msg_id)
nb.show(
    [(m.msg_id, m.topic, m.queue_id, m.queue_offset, m.commitlog_offset, m.keys, bytes(m.body))],
    title=f"query_by_id({target.msg_id!r})",
)
assert (m.queue_id, m.queue_offset, m.commitlog_offset) == (
    target.queue_id,
    target.queue_offset,
    target.commitlog_offset,
)

register_views(spark, store)  # commitlog, consume_queue, ..., messages, messages_by_key
by_sql = spark.sql(
    "SELECT msg_id, topic, queue_id, queue_offset, keys, body FROM messages WHERE msg_id = :id",
    args={"id": target.msg_id},
)
assert nb.show(by_sql, title="SELECT ... FROM messages WHERE msg_id = :id")[0].queue_offset == m.queue_offset

sql_dir = nb.path("../sql")  # the repository's sql/ folder, from this notebook's folder (any working directory)
by_file = run_file(spark, sql_dir / "message_by_id.sql", {"msg_id": target.msg_id.lower()})
assert (
    nb.show(
        by_file.select("msg_id", "commitlog_offset", "size", "store_timestamp", "tags", "keys"),
        title="sql/message_by_id.sql (ids are matched case-insensitively)",
    )[0].commitlog_offset
    == m.commitlog_offset
)

past_the_end = target.msg_id[:-16] + f"{store.max_offset() + 4096:016X}"  # this store's host, an offset never written
try:
    store.query_by_id(past_the_end)
    raise AssertionError("found a message past the commitlog's end")
except MessageNotFoundError as e:
    print(f"an id past the end: {type(e).__name__}: {e}")

# COMMAND ----------

# MAGIC %md ## By key: `query_by_key`, the `messages_by_key` view, `sql/messages_by_key.sql`
# MAGIC Newest first; `max_num` (32 by default, 64 at most) and `begin`/`end` (store time) bound the answer.

# COMMAND ----------

hits = store.query_by_key("Orders", "customer-7")
nb.show(
    [(h.msg_id, h.queue_offset, str(h.store_timestamp), bytes(h.body)) for h in hits],
    8,
    title="query_by_key('customer-7')",
)
assert len(hits) == 8 and [h.commitlog_offset for h in hits] == sorted((h.commitlog_offset for h in hits), reverse=True)
assert all(h.properties["customer"] == "7" for h in hits)

since = hits[0].store_timestamp  # the newest order's store time: only tuesday's orders are at or after it
recent = store.query_by_key("Orders", "customer-7", begin=since)
nb.show(
    [(h.msg_id, str(h.store_timestamp), bytes(h.body)) for h in recent],
    title=f"query_by_key('customer-7', begin={since})",
)
assert (
    recent[0].msg_id == hits[0].msg_id and len(recent) < len(hits) and all(h.store_timestamp >= since for h in recent)
)

by_key_view = spark.sql(
    "SELECT msg_id, kind, queue_id, queue_offset FROM messages_by_key "
    "WHERE topic = 'Orders' AND key = 'customer-7' ORDER BY queue_offset"
)
nb.show(by_key_view, title="SELECT ... FROM messages_by_key WHERE topic = 'Orders' AND key = 'customer-7'")
by_key_file = run_file(spark, sql_dir / "messages_by_key.sql", {"topic": "Orders", "key": "customer-7", "max_num": 3})
rows = nb.show(by_key_file, title="sql/messages_by_key.sql, max_num = 3: the three newest")
assert sorted(r.msg_id for r in by_key_view.collect()) == sorted(h.msg_id for h in hits)
assert [r.msg_id for r in rows] == [h.msg_id for h in hits[:3]]

# COMMAND ----------

# MAGIC %md ## By UNIQ_KEY (the client's message id) and by time

# COMMAND ----------

u = store.query_by_unique_key("Orders", target.uniq_key)
nb.show([(target.uniq_key, u.msg_id)], title="query_by_unique_key: UNIQ_KEY -> store msg_id")
assert u.msg_id == target.msg_id

tuesday = store.query_by_id(second[0].msg_id)
offset = store.search_offset("Orders", tuesday.queue_id, tuesday.store_timestamp)
nb.show(
    [(tuesday.queue_id, str(tuesday.store_timestamp), offset)],
    title="search_offset: queue, store time, first queue offset stored at or after it",
)
assert offset <= tuesday.queue_offset

span = store.messages("Orders").selectExpr("min(store_timestamp) AS lo", "max(store_timestamp) AS hi").first()
by_time = run_file(spark, sql_dir / "messages_by_time.sql", {"topic": "Orders", "begin": span.lo, "end": span.hi})
assert len(nb.show(by_time, 5, title="sql/messages_by_time.sql over the whole span (first rows)")) == 5
assert by_time.count() == 8 * CUSTOMERS

# COMMAND ----------

# MAGIC %md ## The same look-ups with Spark's reader: the `rocketmq` data source
# MAGIC Filters on msg id, key, queue and time are answered the way the API answers them.

# COMMAND ----------

by_key_source = spark.read.format("rocketmq").option("store", store.root).option("table", "messages_by_key").load()
rows = nb.show(
    by_key_source.where("topic = 'Orders' AND key = 'customer-7'").select("msg_id", "key", "kind", "queue_offset"),
    title="spark.read.format('rocketmq').option('table', 'messages_by_key') ... WHERE key = 'customer-7'",
)
assert sorted(r.msg_id for r in rows) == sorted(h.msg_id for h in hits)
source = spark.read.format("rocketmq").option("store", store.root).load()  # load() per query: each is planned afresh
rows = nb.show(
    source.where(f"msg_id = '{target.msg_id}'").select("msg_id", "queue_id", "queue_offset", "keys"),
    title="spark.read.format('rocketmq') ... WHERE msg_id = ...",
)
assert rows[0].queue_offset == target.queue_offset
