# Databricks notebook source
# MAGIC %md
# MAGIC # Delayed, timer and transactional messages
# MAGIC **Delayed**: RocketMQ 4.x delay levels (`1s 5s 10s 30s 1m ...`) and 5.x timer messages (a deliver time to the
# MAGIC millisecond) wait under system topics until `deliver_delayed` moves what is due to the real topic, exactly once.
# MAGIC **Transactional**: a half message stays invisible until the producer commits it; what the producer leaves
# MAGIC unanswered, `check_transactions` asks the producer group's registered checker about.
# MAGIC
# MAGIC Both runs take a `now=`: this notebook injects the clock instead of waiting (a scheduled job,
# MAGIC `jobs/deliver_delayed.py` or `jobs/check_transactions.py`, uses the real one). **Parameters**: `store`,
# MAGIC `output` (PNG figures), `per_level`.

# COMMAND ----------

# MAGIC %pip install "deltalake>=1.1,<2" "sqlglot>=25,<31"

# COMMAND ----------

import sys
from pathlib import Path

sys.path.insert(0, str((Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()).parent))

import time  # noqa: E402

from pyspark.sql import functions as F  # noqa: E402

from storelib import Message, MessageStore, TransactionState  # noqa: E402
from storelib.notebook import setup  # noqa: E402

nb = setup(globals(), "delayed_and_transactions", per_level="5")
spark = nb.spark
PER_LEVEL = nb.int_param("per_level")

store = MessageStore.create(nb.fresh_store(), spark)
store.create_topic("Orders", queues=4)
print("delay levels:", store.config.message_delay_level)


def ms(ts) -> int:
    return int(ts.timestamp() * 1000)


def visible() -> int:
    """Messages of Orders a consumer can see: dispatched into its consume queue."""
    store.dispatch()
    return sum(store.max_queue_offset("Orders", q) for q in range(4))


# COMMAND ----------

# MAGIC %md ## Send delayed and timer messages
# MAGIC Levels 1 to 4 (1 s, 5 s, 10 s, 30 s) go to `SCHEDULE_TOPIC_XXXX`, queue `level - 1`. Timer messages, an hour or
# MAGIC more ahead, go to `rmq_sys_wheel_timer`: by `deliver_time_ms`, or by the `TIMER_DELAY_SEC` property a 5.x
# MAGIC client sets. One timer message is recalled before its time.

# COMMAND ----------

LEVELS = [1, 2, 3, 4]
delayed = store.send_batch(
    [
        Message(
            "Orders", tags="reminder", keys=[f"level-{lvl}-{n}"], body=f"level {lvl} #{n}".encode(), delay_level=lvl
        )
        for lvl in LEVELS
        for n in range(PER_LEVEL)
    ]
)
HOUR = 3_600_000
clock = int(time.time() * 1000)  # timer deliver times must lie ahead of the real clock when sent
timers = [
    store.send(
        Message(
            "Orders",
            tags="timer",
            keys=[f"timer-{k}"],
            body=f"timer +{k}0 min".encode(),
            deliver_time_ms=clock + HOUR + k * 600_000,
        )
    )
    for k in (1, 2, 3)
]
by_property = store.send(
    Message("Orders", tags="timer", keys=["timer-90"], body=b"timer +90 min", properties={"TIMER_DELAY_SEC": "5400"})
)
recalled_at = store.recall(timers[2].msg_id)
print(f"recalled {timers[2].msg_id}, which was due at {recalled_at}")

waiting = (
    store.messages()
    .groupBy("topic", "queue_id")
    .agg(F.count("*").alias("messages"))
    .where("topic IN ('SCHEDULE_TOPIC_XXXX', 'rmq_sys_wheel_timer')")
    .orderBy("topic", "queue_id")
)
rows = nb.show(waiting, title="waiting under the system topics (the recall is a marker message in the timer topic)")
assert {r.topic for r in rows} == {"SCHEDULE_TOPIC_XXXX", "rmq_sys_wheel_timer"}
assert {r.queue_id: r.messages for r in rows if r.topic == "SCHEDULE_TOPIC_XXXX"} == {
    lvl - 1: PER_LEVEL for lvl in LEVELS
}
assert visible() == 0  # nothing reaches Orders before its time

# COMMAND ----------

# MAGIC %md ## Deliver, with an injected clock
# MAGIC Each run moves what is due at `now` in one commit; running it again at the same `now` delivers nothing.

# COMMAND ----------

stored = max(ms(store.query_by_id(r.msg_id).store_timestamp) for r in delayed)
runs = [("stored + 10 s", stored + 10_000), ("stored + 1 min", stored + 60_000), ("clock + 2 h", clock + 2 * HOUR)]
results = []
for label, now in runs:
    result = store.deliver_delayed(now=now)
    again = store.deliver_delayed(now=now)
    results.append((label, result, visible()))
    print(f"{label}: {result}")
    assert again.delivered == 0  # exactly once
nb.show(
    [(label, r.levels, r.timer, r.recalled, seen) for label, r, seen in results],
    title="run: delivered per level, from the timer, recalled, messages visible in Orders",
)
assert [r.levels for _, r, _ in results] == [{1: PER_LEVEL, 2: PER_LEVEL, 3: PER_LEVEL}, {4: PER_LEVEL}, {}]
assert (results[2][1].timer, results[2][1].recalled) == (3, 1)
assert results[-1][2] == len(LEVELS) * PER_LEVEL + 3

arrived = store.query_by_key("Orders", "timer-1")[0]
nb.show(
    [
        (
            arrived.topic,
            arrived.queue_id,
            arrived.properties.get("TIMER_OUT_MS"),
            arrived.properties.get("TIMER_DEQUEUE_MS"),
        )
    ],
    title="a timer message in Orders: topic, queue, TIMER_OUT_MS, TIMER_DEQUEUE_MS",
)
assert store.query_by_key("Orders", "timer-3") == []  # recalled: never delivered

plt = nb.pyplot()
fig, ax = plt.subplots(figsize=(7, 3.2), layout="constrained")
labels = [label for label, _, _ in results]
bottom = [0] * len(results)
for lvl in LEVELS:
    counts = [r.levels.get(lvl, 0) for _, r, _ in results]
    ax.bar(labels, counts, bottom=bottom, label=f"level {lvl} ({store.config.message_delay_level.split()[lvl - 1]})")
    bottom = [b + c for b, c in zip(bottom, counts)]
ax.bar(labels, [r.timer for _, r, _ in results], bottom=bottom, label="timer", color="tab:gray")
ax.plot(labels, [seen for _, _, seen in results], "k.-", label="visible in Orders after the run")
ax.set_ylabel("messages")
ax.set_title("deliver_delayed(now=...): what each run delivered")
ax.legend(loc="upper left", bbox_to_anchor=(1, 1), fontsize="small")
nb.figure(fig, "delivered_per_run.png")

# COMMAND ----------

# MAGIC %md ## Transactions: commit, rollback, and the check-back
# MAGIC `send_in_transaction` stores a half message under `RMQ_SYS_TRANS_HALF_TOPIC`, runs the local transaction and
# MAGIC ends the transaction with its answer. UNKNOW (or an exception) leaves it pending for the check-back: the
# MAGIC producer group's checker, registered by import path. Here it is a function of this notebook (`__main__`);
# MAGIC in production, register a function of your own package so `jobs/check_transactions.py` can import it.

# COMMAND ----------


def check_order(half) -> TransactionState:
    """The check-back of producer group OrderProducers: commit an order that was paid, roll back the rest."""
    return (
        TransactionState.COMMIT_MESSAGE if half.properties.get("paid") == "true" else TransactionState.ROLLBACK_MESSAGE
    )


store.register_transaction_checker("OrderProducers", f"{__name__}:check_order")


def place(n: int, answer: TransactionState, paid: bool):
    msg = Message(
        "Orders",
        tags="placed",
        keys=[f"tx-order-{n}"],
        body=f"order {n}".encode(),
        properties={"paid": str(paid).lower()},
    )
    return store.send_in_transaction(msg, lambda m, arg: answer, producer_group="OrderProducers")


tx = {
    1: place(1, TransactionState.COMMIT_MESSAGE, True),  # committed by the local transaction
    2: place(2, TransactionState.ROLLBACK_MESSAGE, False),  # rolled back by it
    3: place(3, TransactionState.UNKNOW, True),  # the producer answers later, by hand
    4: place(4, TransactionState.UNKNOW, True),  # left to the check-back: paid
    5: place(5, TransactionState.UNKNOW, False),
}  # left to the check-back: not paid
nb.show(
    [(n, r.transaction_id, r.topic, r.local_state.value) for n, r in tx.items()],
    title="send_in_transaction: order, transaction id, half message topic, local answer",
)
store.end_transaction(tx[3].transaction_id, TransactionState.COMMIT)

born = max(ms(store.query_by_id(r.msg_id).born_timestamp) for r in tx.values())
early = store.check_transactions(now=born + 1_000)  # younger than transaction_timeout_ms (6 s): not asked yet
checked = store.check_transactions(now=born + 60_000)
nb.show([early, checked], title="check_transactions at born + 1 s, then at born + 60 s")
assert early.checked == 0
assert (checked.checked, checked.committed, checked.rolled_back, checked.unknown) == (2, 1, 1, 0), checked

store.dispatch()
placed = (
    store.read("Orders")
    .where("tags = 'placed'")
    .select(
        "keys", "body", F.col("properties")["paid"].alias("paid"), F.col("properties")["TRAN_MSG"].alias("TRAN_MSG")
    )
    .orderBy("keys")
)
rows = nb.show(placed, title="what consumers of Orders see: the committed orders")
assert [r["keys"] for r in rows] == ["tx-order-1", "tx-order-3", "tx-order-4"]

system = store.messages().where("topic LIKE 'RMQ_SYS_TRANS%'").groupBy("topic").count().orderBy("topic")
rows = nb.show(system, title="the transaction system topics: half messages and op (end) markers")
assert {r.topic for r in rows} == {"RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC"}
