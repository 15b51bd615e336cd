"""Running a ``rocketmq`` stream in a test: into Parquet, until what is there now is read."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from storelib import MessageStore


def stream_once(spark: SparkSession, store: MessageStore, out: str, ck: str, **options: object) -> StreamingQuery:
    """Stream the ``rocketmq`` source with ``options`` into Parquet at ``out`` (checkpoint ``ck``) under
    ``Trigger.AvailableNow``; the query, ended."""
    reader = spark.readStream.format("rocketmq").option("store", store.root)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    q = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", out)
        .option("checkpointLocation", ck)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    return q
