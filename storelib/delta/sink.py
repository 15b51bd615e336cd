"""Writing Parquet data files into a table's folder, with the Delta statistics of each file.

:class:`FileSink` takes Arrow record batches in any order, files each row by the table's cluster columns
(one open file per queue, or per key-hash range), and returns one
:class:`~storelib.delta.commit.WrittenFile` per file with Delta's per-file min/max/null statistics read
from the Parquet footer it just wrote.

>>> import tempfile
>>> from storelib.storage.schema import TOPIC_CONFIG
>>> sink = FileSink(tempfile.mkdtemp(), TOPIC_CONFIG.arrow)
>>> sink.write(TOPIC_CONFIG.arrow.empty_table().to_batches() or [])
>>> sink.close()
[]
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import uuid
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Protocol, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import ColumnProperties, WriterProperties

from storelib.delta.commit import WrittenFile
from storelib.delta.files import SMALL_FILE_ROWS, map_io
from storelib.delta.location import filesystem, is_local

if TYPE_CHECKING:
    from storelib.delta.spec import TableSpec

__all__ = ["FileSink", "Summarizer", "written_file", "writer_properties"]

_STATS_STRING_PREFIX = 32


class Summarizer(Protocol):
    """Sums up each written file beyond min/max statistics (e.g. the OR of its filter bitmaps).

    ``start`` makes a fresh state for a file, ``add`` folds a batch of its rows in, ``finish``
    returns the summary as a string (JSON) kept on the :class:`WrittenFile`.

    >>> class Rows:
    ...     def start(self): return 0
    ...     def add(self, state, batch): return state + batch.num_rows
    ...     def finish(self, state): return str(state)
    >>> sink = FileSink(tmp, pa.schema([("q", pa.int32())]), summarize=Rows())
    >>> sink.write([pa.RecordBatch.from_pydict({"q": pa.array([1, 2], pa.int32())})])
    >>> [f.summary for f in sink.close()]
    ['2']
    """

    def start(self) -> Any: ...

    def add(self, state: Any, batch: pa.RecordBatch) -> Any: ...

    def finish(self, state: Any) -> str | None: ...


class FileSink:
    """Writes batches of one schema into new Parquet files under ``root``.

    Rows are grouped by the ``cluster_by`` columns as they come (no sort needed): each cluster
    value has its own open file, so a file never holds two values, and rows keep their arrival
    order inside a file. Rows are buffered into row groups of ``row_group_rows``.

    >>> sink = FileSink(tmp, pa.schema([("q", pa.int32()), ("v", pa.int64())]), cluster_by=["q"])
    >>> sink.write([pa.RecordBatch.from_pydict({"q": pa.array([0, 1, 0], pa.int32()), "v": [1, 2, 3]})])
    >>> sorted(f.num_records for f in sink.close())                # one file per cluster value
    [1, 2]
    >>> sink = FileSink(tmp, pa.schema([("q", pa.int32())]))
    >>> sink.write([pa.RecordBatch.from_pydict({"q": pa.array([1], pa.int32())})])
    >>> sink.abort()                                              # nothing written is left behind
    """

    def __init__(
        self,
        root: str,
        schema: pa.Schema,
        *,
        cluster_by: Sequence[str] = (),
        target_file_size: int = 128 * 1024 * 1024,
        prefix: str = "part",
        row_group_rows: int = 64 * 1024,
        summarize: Summarizer | None = None,
        dictionary: Sequence[str] | None = None,
        statistics: Sequence[str] | None = None,
        delta_encoded: Sequence[str] = (),
    ):
        self.root = root.rstrip("/")
        if delta_encoded and dictionary is None:
            dictionary = [name for name in schema.names if name not in delta_encoded]
        #: What every file's ParquetWriter is given besides its codec.
        self.options: dict[str, Any] = {
            "use_dictionary": True if dictionary is None else list(dictionary),
            "write_statistics": True if statistics is None else list(statistics),
        }
        if delta_encoded:
            self.options["column_encoding"] = {name: "DELTA_BINARY_PACKED" for name in delta_encoded}
        self.summarize = summarize
        self.schema = schema
        self.cluster_by = list(cluster_by)
        self.target = target_file_size
        self.prefix = prefix
        self.row_group_rows = row_group_rows
        self._open: dict[tuple | None, _OpenFile] = {}
        self.files: list[WrittenFile] = []

    def write(self, batches: Iterable[pa.RecordBatch]) -> None:
        for batch in batches:
            for key, raw in _groups(batch, self.cluster_by):
                part = _conform(raw, self.schema)
                f = self._open.get(key)
                if f is None:
                    f = self._open[key] = _OpenFile(self.root, self.schema, self.prefix, self.summarize, self.options)
                f.add(part, self.row_group_rows, raw)
                if f.bytes >= self.target:
                    self.files.append(self._open.pop(key).close())

    def close(self) -> list[WrittenFile]:
        """Close every open file (on an object store at once: each is a PUT, and a round's files are many)."""
        self.files.extend(map_io(_OpenFile.close, list(self._open.values()), remote=not is_local(self.root)))
        self._open.clear()
        return self.files

    def abort(self) -> None:
        """Delete everything this sink wrote, files still open or whose writing failed too. It raises nothing
        of its own: a failed write's caller raises the write's error (a closed or broken stream would
        otherwise hide it)."""
        for f in self._open.values():
            f.discard()
        self._open.clear()
        fs, base = filesystem(self.root)
        for done in self.files:
            with contextlib.suppress(OSError):
                fs.delete_file(f"{base}/{done.path}")
        self.files = []


def writer_properties(spec: "TableSpec") -> WriterProperties:
    """The Parquet settings :class:`FileSink` gives a small file of ``spec``'s table (snappy, its row groups, the
    columns it encodes with a dictionary, with ``DELTA_BINARY_PACKED`` and with statistics), for delta-rs's writer
    when delta-rs writes a few rows itself (:meth:`~storelib.delta.commit.Committing.commit_rows`).

    >>> from storelib.storage.schema import COMMITLOG
    >>> props = writer_properties(COMMITLOG)
    >>> props.max_row_group_size, props.column_properties["topic"].dictionary_enabled
    (8192, True)
    """
    leaves = _leaves(spec.arrow)
    dictionary = set(leaves if spec.dictionary is None else spec.dictionary) - set(spec.delta_encoded)
    statistics = set(leaves if spec.statistics is None else spec.statistics)
    columns = {
        name: ColumnProperties(
            dictionary_enabled=name in dictionary,
            statistics_enabled="CHUNK" if name in statistics else "NONE",
            encoding="DELTA_BINARY_PACKED" if name in spec.delta_encoded else None,
        )
        for name in leaves
    }
    return WriterProperties(compression="SNAPPY", max_row_group_size=spec.row_group_rows, column_properties=columns)


def _leaves(schema: pa.Schema) -> list[str]:
    """The dotted paths of the schema's leaf columns, as Parquet names them (``properties.key_value.key``)."""
    out: list[str] = []

    def walk(prefix: str, kind: pa.DataType) -> None:
        if pa.types.is_map(kind):
            walk(f"{prefix}.key_value.key", kind.key_type)
            walk(f"{prefix}.key_value.value", kind.item_type)
        elif pa.types.is_struct(kind):
            for f in kind:
                walk(f"{prefix}.{f.name}", f.type)
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            walk(f"{prefix}.list.element", kind.value_type)
        else:
            out.append(prefix)

    for f in schema:
        walk(f.name, f.type)
    return out


class _OpenFile:
    """One Parquet file being written: buffered rows, running statistics.

    A file written in one go with at most :data:`SMALL_FILE_ROWS` rows (a group commit's, a dispatch
    round's) is compressed with snappy, which costs half of zstd's set-up per column on a few rows;
    compaction rewrites such files with zstd soon after.
    """

    def __init__(
        self,
        root: str,
        schema: pa.Schema,
        prefix: str,
        summarize: Summarizer | None = None,
        options: Mapping[str, Any] | None = None,
    ):
        self.summarize = summarize
        self.summary = summarize.start() if summarize else None
        self.prefix, self.options = prefix, options or {}
        self.fs, self.base = filesystem(root)
        self.writer: pq.ParquetWriter | None = None
        self.schema = schema
        self.pending: list[pa.RecordBatch] = []
        self.pending_rows = 0
        self.bytes = 0

    def _open(self, small: bool) -> pq.ParquetWriter:
        codec = "snappy" if small else "zstd"
        self.name = f"{self.prefix}-{uuid.uuid4().hex}.c000.{codec}.parquet"
        self.path = f"{self.base}/{self.name}"
        self.stream = self.fs.open_output_stream(self.path)  # its position at the end is the file's size
        self.writer = pq.ParquetWriter(self.stream, self.schema, compression=codec, **self.options)
        return self.writer

    def add(self, part: pa.RecordBatch, row_group_rows: int, raw: pa.RecordBatch | None = None) -> None:
        """Buffer ``part``; ``raw`` (the same rows, with any extra columns) is what the summarizer sees."""
        self.pending.append(part)
        if self.summarize:
            self.summary = self.summarize.add(self.summary, part if raw is None else raw)
        self.pending_rows += part.num_rows
        self.bytes += part.nbytes
        if self.pending_rows >= row_group_rows:
            self.flush(row_group_rows)

    def flush(self, row_group_rows: int | None = None) -> None:
        """Write the buffered rows as row groups of exactly ``row_group_rows``, keeping the rest
        buffered (so row group ``i`` of a file is always rows ``[i * n, (i + 1) * n)``); all of
        them as one last row group by default."""
        if not self.pending:
            return
        rows = pa.Table.from_batches(self.pending)
        whole = rows.num_rows if row_group_rows is None else rows.num_rows - rows.num_rows % row_group_rows
        if whole:
            writer = self.writer or self._open(small=row_group_rows is None and whole <= SMALL_FILE_ROWS)
            writer.write_table(rows.slice(0, whole), row_group_size=max(min(whole, row_group_rows or whole), 1))
        rest = rows.slice(whole)
        self.pending, self.pending_rows = rest.to_batches(), rest.num_rows

    def discard(self) -> None:
        """Close quietly and delete whatever was written of this file (nothing is raised)."""
        if self.writer is None:  # nothing opened, nothing written
            return
        for step in (self.writer.close, self.stream.close, lambda: self.fs.delete_file(self.path)):
            with contextlib.suppress(Exception):
                step()

    def close(self) -> WrittenFile:
        self.flush()
        writer = self.writer or self._open(small=True)
        writer.close()
        size = self.stream.tell()  # not asked of the store (on an object store: a HEAD request)
        self.stream.close()
        stats = _Stats.from_metadata(self.schema, writer.writer.metadata)
        summary = self.summarize.finish(self.summary) if self.summarize else None
        return WrittenFile(self.name, size, stats.rows, stats.to_json(), summary)


def _conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """The batch with exactly the schema's columns: extra ones dropped, missing nullable ones null."""
    if batch.schema.equals(schema, check_metadata=False):
        return batch
    names = set(batch.schema.names)
    columns = [
        batch.column(f.name).cast(f.type) if f.name in names or not f.nullable else pa.nulls(batch.num_rows, f.type)
        for f in schema
    ]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _groups(batch: pa.RecordBatch, cluster_by: Sequence[str]) -> Iterator[tuple[tuple | None, pa.RecordBatch]]:
    """The batch's rows split by their cluster columns' values, each part in arrival order."""
    n = batch.num_rows
    if n == 0:
        return
    if not cluster_by:
        yield None, batch
        return
    varying = [
        c
        for c in cluster_by
        if batch.column(c).null_count or pc.all(pc.equal(batch.column(c), batch.column(c)[0])).as_py() is not True
    ]
    if not varying:
        yield tuple(batch.column(c)[0].as_py() for c in cluster_by), batch
        return
    # stable; by the varying columns alone (one queue_id column sorts ~30x faster than it with the topic)
    order = pc.sort_indices(batch, sort_keys=[(c, "ascending") for c in varying])
    batch = batch.take(order)
    change = None
    for c in varying:
        col = batch.column(c)
        diff = pc.not_equal(col.slice(1), col.slice(0, n - 1))
        change = diff if change is None else pc.or_(change, diff)
    starts = [0] + [i + 1 for i in pc.indices_nonzero(change).to_pylist()]
    for start, end in zip(starts, starts[1:] + [n]):
        yield tuple(batch.column(c)[start].as_py() for c in cluster_by), batch.slice(start, end - start)


def written_file(root: str, name: str, schema: pa.Schema) -> WrittenFile:
    """A data file already in the table's folder at ``root``, as a :class:`WrittenFile` to commit: its size and
    Delta statistics from its footer (a lost commit's file, committed back by a repair).

    >>> sink = FileSink(tmp, pa.schema([("q", pa.int32())]))
    >>> sink.write([pa.RecordBatch.from_pydict({"q": pa.array([4, 2], pa.int32())})]); name = sink.close()[0].path
    >>> found = written_file(tmp, name, pa.schema([("q", pa.int32())]))
    >>> found.num_records, json.loads(found.stats)["minValues"]
    (2, {'q': 2})
    """
    fs, base = filesystem(root)
    with fs.open_input_file(f"{base.rstrip('/')}/{name}") as f:
        size, metadata = f.size(), pq.ParquetFile(f).metadata
    stats = _Stats.from_metadata(schema, metadata)
    return WrittenFile(name, size, stats.rows, stats.to_json())


class _Stats:
    """Delta per-file statistics (numRecords, minValues, maxValues, nullCount) from a Parquet footer."""

    def __init__(self, schema: pa.Schema):
        self.cols = [f for f in schema if _has_stats(f.type)]
        self.rows = 0
        self.min: dict[str, Any] = {}
        self.max: dict[str, Any] = {}
        self.nulls: dict[str, int] = {f.name: 0 for f in self.cols}

    @classmethod
    def from_metadata(cls, schema: pa.Schema, md: "pq.FileMetaData") -> "_Stats":
        out = cls(schema)
        out.rows = md.num_rows
        wanted = {f.name for f in out.cols}
        missing: set[str] = set()
        for g in range(md.num_row_groups):
            group = md.row_group(g)
            for j in range(group.num_columns):
                chunk = group.column(j)
                name = chunk.path_in_schema
                st = chunk.statistics
                if name not in wanted:
                    continue
                if st is None or not st.has_null_count:
                    missing.add(name)
                    continue
                out.nulls[name] += st.null_count
                if st.has_min_max:
                    out.min[name] = st.min if name not in out.min else min(out.min[name], st.min)
                    out.max[name] = st.max if name not in out.max else max(out.max[name], st.max)
        for name in missing:  # unknown for some row group: no statistics for the file
            out.nulls.pop(name, None)
            out.min.pop(name, None)
            out.max.pop(name, None)
        return out

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
        return json.dumps(
            {"numRecords": self.rows, "minValues": mins, "maxValues": maxs, "nullCount": self.nulls},
            separators=(",", ":"),
        )


def _has_stats(kind: pa.DataType) -> bool:
    return (
        pa.types.is_integer(kind)
        or pa.types.is_string(kind)
        or pa.types.is_timestamp(kind)
        or pa.types.is_boolean(kind)
    )


def _iso(ts, up: bool) -> str:
    """Delta writes timestamp statistics in milliseconds; round outward so bounds stay bounds."""

    ms = ts.replace(microsecond=(ts.microsecond // 1000) * 1000)
    if up and ms != ts:
        ms += _dt.timedelta(milliseconds=1)
    return ms.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms.microsecond // 1000:03d}Z"
