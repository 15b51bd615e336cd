"""The ``rocketmq`` Spark data source: the store's messages through Spark's own readers, streams and writers.

Built on PySpark's Python Data Source API (:mod:`pyspark.sql.datasource`); :func:`register` adds it to a
session (``storelib.session.get_spark`` and ``MessageStore.open`` do).

* batch reads (:mod:`~storelib.datasource.batch`): one row per message (``table`` ``messages``, the
  default) or per message and key (``messages_by_key``); filters on topic, queue, offsets, msg id, keys,
  tags and store time are answered the way the store's API answers them (an id opens one commitlog file,
  a key the index's hash slot first);
* streaming reads for a consumer group (:mod:`~storelib.datasource.stream`);
* writes, batch and streaming (:mod:`~storelib.datasource.sink`): ``send_dataframe``'s checks, one atomic commit.

>>> register(spark)
'rocketmq'
>>> df = spark.read.format("rocketmq").option("store", store.root).load()
>>> df.where("topic = 'TopicTest' AND keys = 'order-1'").select("msg_id", "tags").collect()
[Row(msg_id='7F00000100002A9F0000000000000000', tags='TagA')]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, DataSourceWriter
from pyspark.sql.types import StructType

from storelib.datasource.options import SourceOptions
from storelib.datasource.scope import check

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["RocketMQDataSource", "register", "NAME"]

#: The format name: ``spark.read.format("rocketmq")``.
NAME = "rocketmq"


class RocketMQDataSource(DataSource):
    """The store as a Spark data source; options are described in :class:`~storelib.datasource.options.SourceOptions`.

    >>> RocketMQDataSource({"store": store.root}).schema().fieldNames()[:4]
    ['physical_offset', 'size', 'topic', 'queue_id']
    """

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        """The rows' schema; Spark asks at ``load()``, so the options are checked against the store here
        (:func:`~storelib.datasource.scope.check`: the store, its topics, the group's subscriptions)."""
        options = SourceOptions.parse(self.options)
        check(options)
        return options.schema()

    # each part imported where Spark asks for it: a stream's own Python process, and the executors' workers
    # that read it, import the stream's layers only, not the writers' send path
    def reader(self, schema: StructType) -> DataSourceReader:
        from storelib.datasource.batch import MessageReader

        return MessageReader(SourceOptions.parse(self.options), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from storelib.datasource.stream import GroupStreamReader

        return GroupStreamReader(SourceOptions.parse(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from storelib.datasource.sink import MessageWriter

        return MessageWriter(SourceOptions.parse(self.options, writing=True), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from storelib.datasource.sink import MessageStreamWriter

        return MessageStreamWriter(SourceOptions.parse(self.options, writing=True), schema, overwrite)


def register(spark: "SparkSession") -> str:
    """Register the ``rocketmq`` format with ``spark`` (and turn on Python filter pushdown, which its
    reader uses); returns the format name. Idempotent.
    """
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(RocketMQDataSource)
    return NAME
