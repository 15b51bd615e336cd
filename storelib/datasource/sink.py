"""Writes to the ``rocketmq`` source: ``df.write.format("rocketmq")`` and streaming writes store the rows as
messages, with ``send_dataframe``'s checks and one atomic commit per write (per micro-batch).

The columns are ``send_dataframe``'s (:data:`~storelib.send.arrow_frame.DATAFRAME_COLUMNS`), checked when
the write is planned; rows read with the source write back as they are (the store's own columns and the
properties that repeat them are given anew: :data:`~storelib.send.arrow_frame.ASSIGNED_COLUMNS`,
:data:`~storelib.send.arrow_frame.MIRRORED_PROPERTIES`). Each task encodes its rows
(:func:`~storelib.send.arrow_frame.encode_batch`), checks and stages them as a DataFrame send's first step
does; the commit then gives the staged parts their offsets and commits them as the commitlog's next version
(in the process Spark commits in, as Python data sources commit), or raises the first refused row's typed
error with nothing written. A micro-batch commits with a marker of its query and batch id, so a batch Spark
replays after a restart is not stored twice. A message store only appends: ``overwrite`` is refused.

>>> df = spark.createDataFrame([("TopicTest", "hello", "TagS")], "topic string, body string, tags string")
>>> df.write.format("rocketmq").option("store", store.root).mode("append").save()
>>> store.messages("TopicTest").where("tags = 'TagS'").select("body").first().body
b'hello'
"""

from __future__ import annotations

import json
import shutil
import uuid
import zlib
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from storelib.context import StoreContext
from storelib.datasource.options import SourceOptions
from storelib.delta.location import filesystem
from storelib.delta.table import Table
from storelib.delta.writer import write_items_here
from storelib.model.config import StoreConfig
from storelib.model.errors import DataSourceOptionError, StoreNotFoundError
from storelib.send.arrow_frame import check_columns, encode_batch, spark_types
from storelib.send.producer import Producer
from storelib.storage.commitlog import Progress, stage_partition

__all__ = ["MessageWriter", "MessageStreamWriter", "StagedPart"]


@dataclass
class StagedPart(WriterCommitMessage):
    """What a write task staged: ``stage_partition``'s record (or its refused row)."""

    record: dict[str, Any]


class MessageWriter(DataSourceArrowWriter):
    """Batch writes: stage on the executors (:meth:`write`), place and commit once (:meth:`commit`);
    :meth:`abort` removes what was staged.

    >>> from pyspark.sql.types import StringType, StructField, StructType
    >>> w = MessageWriter(SourceOptions.parse({"store": store.root}),
    ...                   StructType([StructField("topic", StringType())]), False)
    >>> part = w.write(iter([pa.RecordBatch.from_pydict({"topic": ["TopicTest", "TopicTest"]})]))
    >>> part.record["rows"], w.commit([part]), store.messages("TopicTest").count()
    (2, None, 3)
    >>> w.abort([])
    """

    def __init__(self, options: SourceOptions, schema: Any, overwrite: bool) -> None:
        if overwrite:
            raise DataSourceOptionError("mode", "a message store only appends: use mode('append')", value="overwrite")
        names = [f.name for f in schema.fields]
        check_columns(spark_types(schema))
        keys = schema["keys"].dataType.typeName() == "array" if "keys" in names else False
        self.options = options
        ctx = self._context()
        self.frame = ctx.producer.frame(ctx.topics.all(), keys)
        self.attempt = uuid.uuid4().hex[:12]

    def _context(self) -> StoreContext:
        ctx = StoreContext.build(self.options.store, None, StoreConfig())  # type: ignore[arg-type]  # no Spark here
        if not ctx.tables.exists():
            raise StoreNotFoundError("store", f"no store at {self.options.store}: create it with MessageStore.create")
        return ctx

    @property
    def _staging(self) -> str:
        return f"{self.options.store}/commitlog/_staging/{self.attempt}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedPart:
        from pyspark import TaskContext

        fs, base = filesystem(self._staging)
        fs.create_dir(base, recursive=True)
        task = TaskContext.get()
        pid = task.partitionId() if task else 0
        return StagedPart(stage_partition(self._staging, self.frame, pid, (encode_batch(b) for b in iterator)))

    def commit(  # type: ignore[override]  # Spark hands back the StagedParts of write
        self, messages: Sequence[StagedPart | None], progress: Progress | None = None, attempt: str | None = None
    ) -> None:
        try:
            records = [m.record for m in messages if m is not None]
            bad = [r for r in records if r["refused"]]
            if bad:
                Producer.refuse(json.loads(min(bad, key=lambda r: r["partition"])["refused"]))
            ctx = self._context()

            def write(placed, place, target):
                return write_items_here(placed, {"commitlog": target}, place)["commitlog"]

            ctx.commitlog.place_staged(records, attempt or self.attempt, write, progress, operation="WRITE")
        finally:
            self._clean()

    def abort(self, messages: Sequence[StagedPart | None]) -> None:  # type: ignore[override]
        self._clean()

    def _clean(self) -> None:

        fs, base = filesystem(self._staging)
        try:
            fs.delete_dir(base)
        except (FileNotFoundError, OSError):
            shutil.rmtree(base, ignore_errors=True)


class MessageStreamWriter(DataSourceStreamArrowWriter, MessageWriter):
    """Streaming writes: one commit per micro-batch, each batch id stored once (a replayed batch is skipped);
    :meth:`abort` removes what a failed batch staged.

    >>> from pyspark.sql.types import StringType, StructField, StructType
    >>> options = SourceOptions.parse({"store": store.root, "checkpointLocation": tmp + "/ck"}, writing=True)
    >>> w = MessageStreamWriter(options, StructType([StructField("topic", StringType())]), False)
    >>> part = w.write(iter([pa.RecordBatch.from_pydict({"topic": ["TopicTest"]})]))
    >>> w.commit([part], 0); w.commit([part], 0); store.messages("TopicTest").count()     # batch 0, replayed
    2
    >>> w.abort([], 1)
    """

    def __init__(self, options: SourceOptions, schema: Any, overwrite: bool) -> None:
        MessageWriter.__init__(self, options, schema, False)
        if not options.checkpoint:
            raise DataSourceOptionError(
                "checkpointLocation",
                "a streaming write to the store needs the query's "
                "checkpoint: it names the query's batches in the commitlog",
            )
        self.query = f"sink/{zlib.crc32(options.checkpoint.encode()):08x}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedPart:
        return MessageWriter.write(self, iterator)

    def commit(self, messages: Sequence[StagedPart | None], batchId: int) -> None:  # type: ignore[override]  # noqa: N803
        done = Table.marker(self._context().tables.commitlog.snapshot(), self.query)  # batches stored: 0, 1, ...
        if batchId < done:  # committed before a restart: Spark replays it, the store has it
            self._clean()
            return
        MessageWriter.commit(
            self, messages, Progress({self.query: done}, {self.query: batchId + 1}), attempt=f"{self.attempt}-{batchId}"
        )

    def abort(self, messages: Sequence[StagedPart | None], batchId: int) -> None:  # type: ignore[override]  # noqa: N803
        self._clean()
