"""Where a table's data files are written: in Spark's executors (``mapInArrow``) so bulk writes never pass
through the driver, or here for small ones; each through a :class:`~storelib.delta.sink.FileSink`. Committing
the files is the caller's job (:meth:`Table.commit`).

>>> from storelib.storage.schema import TOPIC_CONFIG
>>> t = Table(tmp + "/written", TOPIC_CONFIG).ensure()
>>> write_files(t, TOPIC_CONFIG.arrow.empty_table())
[]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import pyarrow as pa

from storelib.delta.commit import WrittenFile
from storelib.delta.location import is_local
from storelib.delta.sink import FileSink, Summarizer, writer_properties
from storelib.delta.spark_read import contiguous_groups, parallelism
from storelib.delta.spec import spark_schema
from storelib.delta.table import Table

if TYPE_CHECKING:
    from deltalake import DeltaTable
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "parallelism",
    "write_items_here",
    "Target",
    "write_dataframe",
    "write_split",
    "write_items",
    "contiguous_groups",
    "write_files",
    "write_rows",
]

T = TypeVar("T")


def write_dataframe(
    df: "DataFrame",
    table: Table,
    *,
    cluster_by: Sequence[str] = (),
    target_file_size: int = 128 * 1024 * 1024,
    prefix: str = "part",
    transform: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]] | None = None,
    summarize: Summarizer | None = None,
    row_group_rows: int | None = None,
) -> list[WrittenFile]:
    """Write ``df`` as Parquet files into the table's folder from the executors.

    Without ``transform``, ``df`` has the table's columns. With it, each partition's batches pass
    through ``transform`` (run on the executor, it yields batches with the table's columns) on
    their way to the files. Rows keep their order within each file. Returns the files, to be
    committed by the caller: only file metadata reaches the driver. ``summarize`` adds a
    per-file summary to each :class:`WrittenFile` (computed on the executor).

    >>> table = store.context.tables.topic_config
    >>> df = store.table("topic_config")
    >>> files = write_dataframe(df, table)
    >>> sum(f.num_records for f in files) == df.count()
    True
    >>> table.discard(files)
    """
    name = table.spec.name
    target = Target.of(
        table,
        cluster_by=cluster_by,
        target_file_size=target_file_size,
        prefix=prefix,
        summarize=summarize,
        row_group_rows=row_group_rows,
    )
    source = df if transform else df.select(*table.spec.columns)
    return write_split(source, {name: target}, _OneTable(name, transform))[name]


@dataclass(frozen=True)
class Target:
    """One table a :func:`write_split` fills: its folder, its columns and how its files are cut.

    >>> target = Target.of(store.context.tables.consume_queue)
    >>> sink = target.sink()
    >>> sink.write(store.context.tables.consume_queue.read_arrow().to_batches())
    >>> files = sink.close(); [f.num_records for f in files]
    [1]
    >>> store.context.tables.consume_queue.discard(files)
    """

    root: str
    schema: pa.Schema
    cluster_by: tuple[str, ...] = ()
    target_file_size: int = 128 * 1024 * 1024
    row_group_rows: int = 64 * 1024
    prefix: str = "part"
    summarize: Summarizer | None = None
    dictionary: tuple[str, ...] | None = None
    statistics: tuple[str, ...] | None = None
    delta_encoded: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        table: Table,
        *,
        cluster_by: Sequence[str] | None = None,
        target_file_size: int = 128 * 1024 * 1024,
        prefix: str = "part",
        summarize: Summarizer | None = None,
        row_group_rows: int | None = None,
    ) -> "Target":
        """The target for ``table``: its path, schema and row group size; clustered by ``cluster_by``."""
        return cls(
            table.path,
            table.spec.arrow,
            tuple(table.spec.cluster_by if cluster_by is None else cluster_by),
            target_file_size,
            row_group_rows or table.spec.row_group_rows,
            prefix,
            summarize,
            table.spec.dictionary,
            table.spec.statistics,
            table.spec.delta_encoded,
        )

    def sink(self) -> FileSink:
        return FileSink(
            self.root,
            self.schema,
            cluster_by=self.cluster_by,
            target_file_size=self.target_file_size,
            prefix=self.prefix,
            row_group_rows=self.row_group_rows,
            summarize=self.summarize,
            dictionary=self.dictionary,
            statistics=self.statistics,
            delta_encoded=self.delta_encoded,
        )


def write_split(
    df: "DataFrame",
    targets: Mapping[str, Target],
    split: Callable[[Iterator[pa.RecordBatch]], Iterator[Mapping[str, pa.RecordBatch]]],
) -> dict[str, list[WrittenFile]]:
    """Write one DataFrame into several tables in one Spark job, each row read once.

    ``split`` runs on the executors over a partition's batches and yields, per batch, the rows
    each target gets (a batch with the target's columns, keyed by target name). Returns each
    target's files, uncommitted; a failing task deletes what it wrote.

    >>> from storelib.storage.consume_queue import units
    >>> targets = {"consume_queue": Target.of(store.context.tables.consume_queue)}
    >>> split = lambda batches: ({"consume_queue": units(b, b.column("queue_offset"))} for b in batches)
    >>> files = write_split(store.messages("TopicTest"), targets, split)
    >>> [f.num_records for f in files["consume_queue"]]      # written, not committed
    [1]
    >>> store.context.tables.consume_queue.discard(files["consume_queue"])
    """
    names = list(targets)

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        files = _into_sinks(targets, split(batches))
        written = [{"table": name, **f.__dict__} for name in names for f in files[name]]
        yield pa.RecordBatch.from_pylist(written, schema=_WRITTEN_FILE_ARROW)

    out: dict[str, list[WrittenFile]] = {name: [] for name in names}
    for r in df.mapInArrow(write_partition, spark_schema(_WRITTEN_FILE_ARROW)).collect():
        out[r.table].append(WrittenFile(r.path, r.size, r.num_records, r.stats, r.summary))
    return out


def write_items(
    spark: "SparkSession",
    items: Sequence[T],
    sizes: Sequence[int],
    targets: Mapping[str, Target],
    per_item: Callable[[T], Iterator[Mapping[str, pa.RecordBatch]]],
) -> dict[str, list[WrittenFile]]:
    """:func:`write_split` over work items (files) rather than a DataFrame's rows.

    The items are cut into contiguous runs of about equal ``sizes`` (:func:`contiguous_groups`), one
    task per run; on the executors ``per_item`` turns each item, in order, into the rows each
    target gets.

    >>> import pyarrow.parquet as pq
    >>> from storelib.storage.consume_queue import units
    >>> paths = store.context.tables.commitlog.files(store.context.tables.commitlog.snapshot())
    >>> targets = {"consume_queue": Target.of(store.context.tables.consume_queue)}
    >>> per_file = lambda path: (
    ...     {"consume_queue": units(b, b.column("queue_offset"))} for b in pq.read_table(path).to_batches()
    ... )
    >>> files = write_items(spark, paths, [1] * len(paths), targets, per_file)
    >>> sum(f.num_records for f in files["consume_queue"])
    1
    >>> store.context.tables.consume_queue.discard(files["consume_queue"])
    """
    runs = contiguous_groups(items, sizes, parallelism(spark))
    return write_split(spark.range(0, len(runs), 1, max(1, len(runs))), targets, _Runs(runs, per_item))


def write_items_here(
    items: Sequence[T], targets: Mapping[str, Target], per_item: Callable[[T], Iterator[Mapping[str, pa.RecordBatch]]]
) -> dict[str, list[WrittenFile]]:
    """:func:`write_items` in this process, one item after another: for work a Spark job cannot run (a Python
    data source's commit runs where no session is).

    >>> from storelib.storage.consume_queue import units
    >>> targets = {"consume_queue": Target.of(store.context.tables.consume_queue)}
    >>> rows = store.context.tables.commitlog.read_arrow().to_batches()
    >>> files = write_items_here(rows, targets, lambda b: [{"consume_queue": units(b, b.column("queue_offset"))}])
    >>> sum(f.num_records for f in files["consume_queue"])
    1
    >>> store.context.tables.consume_queue.discard(files["consume_queue"])
    """
    return _into_sinks(targets, (parts for item in items for parts in per_item(item)))


def _into_sinks(
    targets: Mapping[str, Target], parts: Iterable[Mapping[str, pa.RecordBatch]]
) -> dict[str, list[WrittenFile]]:
    """Each target's rows into its own sink; the files written, or nothing left behind on an error."""
    sinks = {name: target.sink() for name, target in targets.items()}
    try:
        for batch in parts:
            for name, part in batch.items():
                sinks[name].write([part])
        return {name: sink.close() for name, sink in sinks.items()}
    except BaseException:
        for sink in sinks.values():
            sink.abort()
        raise


@dataclass(frozen=True)
class _Runs:
    """Task ``i`` of a :func:`write_items` job: the items of ``runs[i]``, each through ``per_item``."""

    runs: Sequence[Sequence[Any]]
    per_item: Callable[[Any], Iterator[Mapping[str, pa.RecordBatch]]]

    def __call__(self, tasks: Iterator[pa.RecordBatch]) -> Iterator[Mapping[str, pa.RecordBatch]]:
        for task in tasks:
            for i in task.column(0).to_pylist():
                for item in self.runs[i]:
                    yield from self.per_item(item)


@dataclass(frozen=True)
class _OneTable:
    """The :func:`write_split` of a single table: every batch (``transform``-ed) goes to it."""

    name: str
    transform: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]] | None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[Mapping[str, pa.RecordBatch]]:
        for batch in self.transform(batches) if self.transform else batches:
            yield {self.name: batch}


_WRITTEN_FILE_ARROW = pa.schema(
    [
        ("table", pa.string()),
        ("path", pa.string()),
        ("size", pa.int64()),
        ("num_records", pa.int64()),
        ("stats", pa.string()),
        ("summary", pa.string()),
    ]
)


def write_files(
    table: Table,
    data: pa.Table,
    *,
    prefix: str = "part",
    target_file_size: int | None = None,
    clustered: bool = True,
    row_group_rows: int | None = None,
    summarize: Summarizer | None = None,
) -> list[WrittenFile]:
    """Write rows from this process into new, uncommitted files of ``table`` (one per cluster unless
    not ``clustered``); on an error nothing written is left behind.

    >>> table = store.context.tables.topic_config
    >>> files = write_files(table, table.read_arrow())
    >>> sum(f.num_records for f in files) == table.read_arrow().num_rows
    True
    >>> table.discard(files)
    """
    sink = Target.of(
        table,
        cluster_by=None if clustered else (),
        prefix=prefix,
        row_group_rows=row_group_rows,
        summarize=summarize,
        **({"target_file_size": target_file_size} if target_file_size else {}),
    ).sink()
    try:
        sink.write(data.to_batches())
        return sink.close()
    except BaseException:
        sink.abort()
        raise


def write_rows(
    table: Table,
    snapshot: "DeltaTable",
    data: pa.Table,
    *,
    prefix: str = "part",
    target_file_size: int | None = None,
    **commit: Any,
) -> tuple[int, list[WrittenFile]]:
    """Write a few rows from this process into new files of ``table`` and :meth:`~Table.commit` them
    right after ``snapshot``.

    Returns (version, files); raises :class:`~storelib.delta.table.CommitConflict` (files deleted) to be retried.
    On an object store, rows of an unclustered table that fit one file are written by delta-rs as it commits
    them (:meth:`~storelib.delta.commit.Committing.commit_rows`: the table's turn then needs no look before its
    next commit here); the files returned are then none. ``rebase=True`` (there: see ``commit_rows``) lets
    the commit pass commits that set none of its markers; on local disk writers take turns, and it is ignored.

    >>> table = store.context.tables.topic_config
    >>> snapshot = table.snapshot()
    >>> version, files = write_rows(table, snapshot, table.read_arrow(snapshot), operation="COPY")
    >>> version == snapshot.version() + 1
    True
    """
    rebase = commit.pop("rebase", False)
    if not is_local(table.path) and not table.spec.cluster_by and set(commit) <= {"markers", "operation", "info"}:
        if data.nbytes < (target_file_size or Target.target_file_size):  # one file, which delta-rs writes
            return table.commit_rows(snapshot, data, writer_properties(table.spec), rebase=rebase, **commit), []
    files = write_files(table, data, prefix=prefix, target_file_size=target_file_size)
    return table.commit(snapshot, files, **commit), files
