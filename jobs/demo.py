"""The quick start: a few thousand messages over several topics and queues, sent, dispatched, read back, pulled.

``jobs/quickstart.py`` runs :func:`quickstart` and prints its summary.

>>> summary = quickstart(spark, "./data/quickstart", messages=2000)   # doctest: +SKIP
>>> print(summary.text())                                             # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from storelib.filter.selector import MessageSelector
from storelib.model.message import Message
from storelib.store import MessageStore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["quickstart", "QuickstartSummary"]

TOPICS = {"OrderEvents": 4, "PaymentEvents": 2, "AuditLog": 1}
TAGS = ["created", "paid", "shipped", "cancelled"]


@dataclass
class QuickstartSummary:
    """What the quick start did and found, for printing."""

    root: str
    sent_one_by_one: int
    sent_as_dataframe: int
    dispatched_from: int
    dispatched_to: int
    per_queue: list[tuple[str, int, int, int]] = field(default_factory=list)
    index_rows: int = 0
    lookup_key: str = ""
    lookup_hits: list[tuple[str, int, str]] = field(default_factory=list)
    sample: dict = field(default_factory=dict)
    filtered: list[tuple[str, str, int]] = field(default_factory=list)
    pulls: list[tuple[int, str, int, int]] = field(default_factory=list)
    lag: list[tuple[str, int, int, int, int]] = field(default_factory=list)

    def text(self) -> str:
        lines = [
            f"store: {self.root}",
            f"sent: {self.sent_one_by_one} messages one by one (send_batch), "
            f"{self.sent_as_dataframe} as a DataFrame (send_dataframe)",
            f"dispatched commitlog [{self.dispatched_from}, {self.dispatched_to}) into consume_queue and index",
            "",
            f"{'topic':<16}{'queue':>6}{'messages':>10}{'max offset':>12}",
        ]
        lines += [f"{t:<16}{q:>6}{n:>10}{m:>12}" for t, q, n, m in self.per_queue]
        lines += [
            "",
            f"index rows (KEYS and UNIQ_KEY): {self.index_rows}",
            f"messages with key {self.lookup_key!r}: "
            + ", ".join(f"{t} @ commitlog offset {o} ({msg_id})" for t, o, msg_id in self.lookup_hits),
            "",
            "filtered reads of OrderEvents (consume queue first, then the exact check):",
        ]
        lines += [f"  {who:<10} {expression:<44} {n:>5} messages" for who, expression, n in self.filtered]
        lines += ["", "group Shipping pulls OrderEvents queue 0, 32 at a time, committing as it goes:"]
        lines += [f"  offset {o:>5}: {status:<14} {n:>3} messages, next {nxt}" for o, status, n, nxt in self.pulls]
        lines += ["", "consumer lag of Shipping:", f"  {'topic':<22}{'queue':>6}{'max':>6}{'committed':>11}{'lag':>6}"]
        lines += [f"  {t:<22}{q:>6}{m:>6}{c:>11}{g:>6}" for t, q, m, c, g in self.lag]
        lines += ["", "one message as stored:"]
        lines += [f"  {k:<16} {v}" for k, v in self.sample.items()]
        return "\n".join(lines)


def quickstart(spark: "SparkSession", root: str, messages: int = 3000) -> QuickstartSummary:
    """Create the topics, send ``messages`` (a tenth one by one, the rest as a DataFrame), dispatch, read back."""
    from pyspark.sql import functions as F

    store = MessageStore.create(root, spark)
    for topic, queues in TOPICS.items():
        store.create_topic(topic, queues=queues)
    # Subscribed before sending, so dispatch computes their Bloom bits for every message.
    store.subscribe("Shipping", "OrderEvents", "paid || shipped")
    store.subscribe("Billing", "OrderEvents", MessageSelector.by_sql("region = 'eu' AND amount BETWEEN 100 AND 199"))
    names = list(TOPICS)
    few = max(1, messages // 10)
    batch = [
        Message(
            names[i % len(names)],
            body=f'{{"order": {i}}}'.encode(),
            tags=TAGS[i % len(TAGS)],
            keys=[f"order-{i}"],
            properties={"region": ["eu", "us", "apac"][i % 3], "amount": str(i % 500)},
        )
        for i in range(few)
    ]
    store.send_batch(batch)
    i = F.col("id")
    frame = spark.range(few, messages).select(
        F.element_at(F.array(*[F.lit(t) for t in names]), (F.pmod(i, len(names)) + 1).cast("int")).alias("topic"),
        F.concat(F.lit('{"order": '), i.cast("string"), F.lit("}")).alias("body"),
        F.element_at(F.array(*[F.lit(t) for t in TAGS]), (F.pmod(i, len(TAGS)) + 1).cast("int")).alias("tags"),
        F.array(F.concat(F.lit("order-"), i.cast("string"))).alias("keys"),
        F.create_map(
            F.lit("region"),
            F.element_at(F.array(F.lit("eu"), F.lit("us"), F.lit("apac")), (F.pmod(i, 3) + 1).cast("int")),
            F.lit("amount"),
            F.pmod(i, 500).cast("string"),
        ).alias("properties"),
    )
    sent = store.send_dataframe(frame)
    result = store.dispatch()

    cq = store.table("consume_queue")
    per_queue = [  # max offset as RocketMQ's getMaxOffsetInQueue: the next offset, one past the last message
        (r.topic, r.queue_id, r.n, store.max_queue_offset(r.topic, r.queue_id))
        for r in cq.groupBy("topic", "queue_id")
        .agg(F.count(F.lit(1)).alias("n"))
        .orderBy("topic", "queue_id")
        .collect()
    ]
    key = f"order-{messages // 2}"
    topic = names[(messages // 2) % len(names)]
    hits = store.query_by_key(topic, key)
    first = store.messages().orderBy("physical_offset").limit(1).collect()[0]
    sample = {
        "msg_id": first.msg_id,
        "topic": first.topic,
        "queue": f"{first.queue_id} @ {first.queue_offset}",
        "commitlog": f"{first.physical_offset} (+{first.size} bytes)",
        "properties": dict(first.properties),
        "body": bytes(first.body).decode(),
    }
    filtered = [
        (
            f"group {g}",
            store.subscription(g, "OrderEvents").selector.expression,
            store.read("OrderEvents", group=g).count(),
        )
        for g in ("Shipping", "Billing")
    ]
    filtered.append(("ad hoc", "tag cancelled", store.read("OrderEvents", MessageSelector.by_tag("cancelled")).count()))
    pulls, offset = [], 0
    for _ in range(4):
        r = store.pull("Shipping", "OrderEvents", 0, offset, 32, commit_offset=offset)
        pulls.append((offset, r.status.value, len(r.messages), r.next_begin_offset))
        offset = r.next_begin_offset
    store.commit_offset("Shipping", "OrderEvents", 0, offset)
    lag = [tuple(row) for row in store.consumer_lag("Shipping").collect()]
    return QuickstartSummary(
        store.root,
        len(batch),
        sent.count,
        result.from_offset,
        result.to_offset,
        per_queue,
        store.table("index").count(),
        key,
        [(h.topic, h.commitlog_offset, h.msg_id) for h in hits],
        sample,
        filtered,
        pulls,
        lag,
    )
