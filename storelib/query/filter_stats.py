"""How well a subscription filters its topic: what each stage of a filtered read lets through (RocketMQ's
consume queue stage, the Bloom bitmap or tag code, then the exact check), for ``subscriptions --stats``.

>>> store.filter_stats("GroupA", "TopicTest").matched
1
"""

from __future__ import annotations

from dataclasses import dataclass

from storelib.context import StoreContext
from storelib.delta.stats import Prune
from storelib.filter.class_batch import FilterFailure
from storelib.filter.selector import MessageSelector
from storelib.query.class_scan import count_kept
from storelib.query.read import plan_read

__all__ = ["FilterStats", "filter_stats"]


@dataclass(frozen=True)
class FilterStats:
    """How a group's subscription filters its topic now: per stage, how many units or messages.

    >>> stats = store.filter_stats("GroupA", "TopicTest")
    >>> stats.checked, stats.matched, stats.false_positives
    (1, 1, 0)
    """

    group: str | None
    topic: str
    expression: str
    #: Consume queue units of the topic (every dispatched message).
    checked: int
    #: Units never opened: their ext file's summary ruled them out.
    skipped_by_file: int
    #: Units opened and ruled out by the Bloom bitmap (SQL92) or the tag code (tags).
    pruned_by_bitmap: int
    #: Units that passed the consume queue stage and had their message read.
    passed_consume_queue: int
    #: Messages that matched exactly.
    matched: int
    #: The read's plan (:func:`explain_read`): the choice, and clustered row groups considered and skipped.
    choice: str = "scan"
    row_groups: int = 0
    row_groups_skipped_by_statistics: int = 0
    row_groups_skipped_by_bitmap: int = 0
    files_skipped_by_summary: int = 0
    #: How clustered files were read (:attr:`ReadExplain.reader`).
    reader: str = "spark"
    #: A class filter's failures by kind, each with a count, the filter's name, a message id and a
    #: traceback line (:class:`~storelib.filter.class_filter.FilterFailure`); empty for other filters.
    filter_errors: tuple = ()
    #: A SQL92 expression as Spark SQL (:attr:`ReadExplain.spark_sql`), for display.
    spark_sql: str | None = None
    #: Of the units that passed the consume queue stage, those with no bitmap made for this subscription
    #: (dispatched before it existed, or before its Bloom sizing): let through unjudged, not false
    #: positives; and how many of them matched.
    no_bitmap: int = 0
    no_bitmap_matched: int = 0

    @property
    def false_positives(self) -> int:
        """Units the consume queue stage judged by a bitmap and let through that the exact check then refused."""
        return (self.passed_consume_queue - self.no_bitmap) - (self.matched - self.no_bitmap_matched)


def filter_stats(
    ctx: StoreContext, topic: str, selector: MessageSelector | str | None = None, group: str | None = None
) -> FilterStats:
    """Count what each stage of a filtered read of ``topic`` does (one Spark job; a class filter runs in a
    second, on the executors, which also count its failures)."""
    from pyspark.sql import functions as F

    plan = plan_read(ctx, topic, selector, group)
    spark = ctx.spark
    units = plan.units(spark).withColumn("_pass", plan.filter.consume_queue_column())
    messages = ctx.tables.commitlog.read(spark, prune=Prune(equal={"topic": topic}))
    joined = units.join(
        messages.select("physical_offset", "tags", "properties"),
        units.commitlog_offset == messages.physical_offset,
        "left",
    )
    exact = F.coalesce(plan.filter.commitlog_column(), F.lit(False))
    unjudged = F.col("_pass") & (~plan.filter.trusted_bitmap() if plan.filter.uses_bitmap else F.lit(False))
    row = joined.agg(
        F.count(F.lit(1)).alias("opened"),
        F.count_if(~F.col("_pass")).alias("pruned"),
        F.count_if(F.col("_pass")).alias("passed"),
        F.count_if(F.col("_pass") & exact).alias("matched"),
        F.count_if(unjudged).alias("no_bitmap"),
        F.count_if(unjudged & exact).alias("no_bitmap_matched"),
    ).first()
    assert row is not None  # an aggregate without grouping has one row
    matched = int(row["matched"])
    failures: tuple[FilterFailure, ...] = ()
    if plan.filter.class_filter is not None:  # the rows the read gives the class, counted on the executors
        matched, failures = count_kept(spark, plan.filter.class_filter, plan.commitlog.path, *plan.class_scan())
    e = plan.explain()
    return FilterStats(
        group,
        topic,
        plan.filter.selector.expression,
        plan.units_total,
        plan.units_skipped,
        int(row["pruned"]),
        int(row["passed"]),
        matched,
        e.choice,
        e.row_groups_considered,
        e.row_groups_skipped_by_statistics,
        e.row_groups_skipped_by_bitmap,
        e.files_skipped_by_summary,
        e.reader,
        failures,
        e.spark_sql,
        int(row["no_bitmap"]),
        int(row["no_bitmap_matched"]),
    )
