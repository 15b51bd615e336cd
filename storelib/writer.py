"""Writing Parquet data files into a table's folder, with Delta statistics, from anywhere.

:class:`FileSink` takes Arrow record batches already sorted by the table's cluster columns, starts a
new file whenever the cluster value changes (or a file reaches its target size), and returns one
:class:`~storelib.tables.WrittenFile` per file with Delta's per-file min/max/null statistics taken
from the batches as they pass. The producer uses it on the driver for small batches;
:func:`write_dataframe` runs it inside Spark executors (``mapInArrow``) so bulk writes never pass
through the driver. Committing the files is the caller's job (:meth:`Table.commit`).

>>> import tempfile, pyarrow as pa
>>> from storelib.schema import TOPIC_CONFIG
>>> root = tempfile.mkdtemp()
>>> sink = FileSink(root, TOPIC_CONFIG.arrow)
>>> sink.write(TOPIC_CONFIG.arrow.empty_table().to_batches() or [])
>>> sink.close()
[]
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storelib.tables import Table, WrittenFile

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["FileSink", "write_dataframe", "WRITTEN_FILE_DDL"]

WRITTEN_FILE_DDL = "path string, size long, num_records long, stats string"
_STATS_STRING_PREFIX = 32


class FileSink:
    """Writes batches of one schema into new Parquet files under ``root``.

    ``cluster_by`` columns must arrive sorted: a file never holds two values of them.
    """

    def __init__(self, root: str, schema: pa.Schema, *, cluster_by: Sequence[str] = (),
                 target_file_size: int = 128 * 1024 * 1024, prefix: str = "part"):
        self.root = root.rstrip("/")
        self.schema = schema
        self.cluster_by = list(cluster_by)
        self.target = target_file_size
        self.prefix = prefix
        self._writer: pq.ParquetWriter | None = None
        self._name = ""
        self._key: tuple | None = None
        self._stats: _Stats | None = None
        self._bytes = 0
        self.files: list[WrittenFile] = []

    def write(self, batches: Iterable[pa.RecordBatch]) -> None:
        for batch in batches:
            batch = _conform(batch, self.schema)
            for start, length, key in _runs(batch, self.cluster_by):
                part = batch.slice(start, length)
                if self._writer is None or key != self._key or self._bytes >= self.target:
                    self._roll(key)
                self._writer.write_batch(part)
                self._stats.add(part)
                self._bytes += part.nbytes

    def close(self) -> list[WrittenFile]:
        self._roll(None, reopen=False)
        return self.files

    def abort(self) -> None:
        """Close and delete everything this sink wrote."""
        self.close()
        fs, base = _filesystem(self.root)
        for f in self.files:
            try:
                fs.delete_file(f"{base}/{f.path}")
            except FileNotFoundError:
                pass
        self.files = []

    def _roll(self, key: tuple | None, reopen: bool = True) -> None:
        if self._writer is not None:
            self._writer.close()
            fs, base = _filesystem(self.root)
            size = fs.get_file_info(f"{base}/{self._name}").size
            self.files.append(WrittenFile(self._name, size, self._stats.rows, self._stats.to_json()))
            self._writer = None
        if reopen:
            self._name = f"{self.prefix}-{uuid.uuid4().hex}.c000.zstd.parquet"
            fs, base = _filesystem(self.root)
            self._writer = pq.ParquetWriter(f"{base}/{self._name}", self.schema, filesystem=fs,
                                            compression="zstd", write_statistics=True)
            self._key, self._stats, self._bytes = key, _Stats(self.schema), 0


def write_dataframe(df: "DataFrame", table: Table, *, cluster_by: Sequence[str] = (),
                    target_file_size: int = 128 * 1024 * 1024) -> list[WrittenFile]:
    """Write ``df`` (columns of ``table``) as Parquet files into the table's folder from the executors.

    Rows are written in the order each partition holds them; sort them first where the table
    clusters. Returns the files, to be committed by the caller: only file metadata reaches the
    driver.
    """
    root, schema = table.path, table.spec.arrow
    cluster = list(cluster_by)

    def write_partition(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        sink = FileSink(root, schema, cluster_by=cluster, target_file_size=target_file_size)
        try:
            sink.write(batches)
            files = sink.close()
        except BaseException:
            sink.abort()
            raise
        yield pa.RecordBatch.from_pylist([f.__dict__ for f in files], schema=_WRITTEN_FILE_ARROW)

    rows = df.select(*schema.names).mapInArrow(write_partition, WRITTEN_FILE_DDL).collect()
    return [WrittenFile(r.path, r.size, r.num_records, r.stats) for r in rows]


_WRITTEN_FILE_ARROW = pa.schema([("path", pa.string()), ("size", pa.int64()), ("num_records", pa.int64()),
                                 ("stats", pa.string())])


def _filesystem(root: str):
    from pyarrow import fs

    if "://" in root:
        return fs.FileSystem.from_uri(root)
    return fs.LocalFileSystem(), root


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    if batch.schema.equals(schema, check_metadata=False):
        return batch
    columns = [batch.column(f.name).cast(f.type) for f in schema]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _runs(batch: pa.RecordBatch, cluster_by: Sequence[str]) -> Iterator[tuple[int, int, tuple | None]]:
    """(start, length, key) of each stretch of rows sharing the cluster columns' values."""
    n = batch.num_rows
    if n == 0:
        return
    if not cluster_by:
        yield 0, n, None
        return
    change = None
    for name in cluster_by:
        col = batch.column(name)
        diff = pc.not_equal(col.slice(1), col.slice(0, n - 1))
        change = diff if change is None else pc.or_(change, diff)
    starts = [0] + [i + 1 for i in pc.indices_nonzero(change).to_pylist()] if n > 1 else [0]
    ends = starts[1:] + [n]
    for s, e in zip(starts, ends):
        yield s, e - s, tuple(batch.column(c)[s].as_py() for c in cluster_by)


class _Stats:
    """Delta per-file statistics gathered batch by batch: numRecords, minValues, maxValues, nullCount."""

    def __init__(self, schema: pa.Schema):
        self.cols = [f for f in schema if _has_stats(f.type)]
        self.rows = 0
        self.min: dict[str, Any] = {}
        self.max: dict[str, Any] = {}
        self.nulls: dict[str, int] = {f.name: 0 for f in self.cols}

    def add(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        for f in self.cols:
            col = batch.column(f.name)
            self.nulls[f.name] += col.null_count
            mm = pc.min_max(col)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if lo is None:
                continue
            self.min[f.name] = lo if f.name not in self.min else min(self.min[f.name], lo)
            self.max[f.name] = hi if f.name not in self.max else max(self.max[f.name], hi)

    def to_json(self) -> str:
        mins, maxs = {}, {}
        for f in self.cols:
            if f.name not in self.min:
                continue
            lo, hi = self.min[f.name], self.max[f.name]
            if pa.types.is_string(f.type):
                mins[f.name] = lo[:_STATS_STRING_PREFIX]
                if len(hi) <= _STATS_STRING_PREFIX:  # a cut maximum would not be an upper bound
                    maxs[f.name] = hi
            elif pa.types.is_timestamp(f.type):
                mins[f.name] = _iso(lo, up=False)
                maxs[f.name] = _iso(hi, up=True)
            else:
                mins[f.name], maxs[f.name] = lo, hi
        return json.dumps({"numRecords": self.rows, "minValues": mins, "maxValues": maxs, "nullCount": self.nulls},
                          separators=(",", ":"))


def _has_stats(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_timestamp(kind) or pa.types.is_boolean(kind)


def _iso(ts, up: bool) -> str:
    """Delta writes timestamp statistics in milliseconds; round outward so bounds stay bounds."""
    import datetime as _dt

    ms = ts.replace(microsecond=(ts.microsecond // 1000) * 1000)
    if up and ms != ts:
        ms += _dt.timedelta(milliseconds=1)
    return ms.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms.microsecond // 1000:03d}Z"
