"""Data files as this process reads them: where they live, and what is kept of them between reads.

A Delta data file never changes once written, so whatever a process learned of it stays true: its
parsed Parquet footer (row groups and their statistics, for skipping), and, for a small file, its
decoded rows. Consumers pulling fresh messages read the same small files again and again (a group
commit's file holds a few messages of every queue; each queue's pull opens it), so those are kept
decoded. Both are least-recently-used caches bounded in bytes of memory.

>>> cache = ByteLRU(100)
>>> cache.get("a", lambda: ("A", 60)), cache.get("b", lambda: ("B", 60)), len(cache)   # "a" is forgotten
('A', 'B', 1)
>>> cache.get("b", lambda: ("never built", 0))
'B'
"""

from __future__ import annotations

import functools
import os
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from storelib.delta.location import filesystem, is_local

if TYPE_CHECKING:  # pyarrow.dataset imports pandas (0.15-0.25 s): only where a read needs it
    import pyarrow.dataset as ds

__all__ = [
    "ByteLRU",
    "filesystem",
    "is_local",
    "local_bytes",
    "parquet_format",
    "fragment",
    "fragment_dataset",
    "map_io",
    "remember_sizes",
    "small_file",
    "scan_files",
    "kept_batches",
    "row_groups_of",
    "keyed_rows",
    "FOOTER_CACHE_BYTES",
    "SMALL_FILE_CACHE_BYTES",
    "SMALL_FILE_ROWS",
    "SMALL_FILE_READ_BYTES",
    "REMOTE_SMALL_FILE_BYTES",
]

#: Parsed Parquet footers kept per process (the driver's point reads, an executor's row group reads), in
#: bytes of memory: a clustered file's ~800 row groups parse to ~15 MB, about 10x their footer's size.
FOOTER_CACHE_BYTES = 256 * 1024 * 1024
_FOOTER_MEMORY_PER_BYTE = 10
#: Decoded rows of small data files kept per process, in bytes of Arrow memory ...
SMALL_FILE_CACHE_BYTES = 64 * 1024 * 1024
#: ... for files of at most this many rows (a group commit's or a dispatch round's file).
SMALL_FILE_ROWS = 8192
#: A local data file of at most this many bytes is read whole in one call before it is decoded.
SMALL_FILE_READ_BYTES = 4 * 1024 * 1024
#: An object store's data file of at most this many bytes is small whatever its rows (a queue's consume queue
#: file of 10^5 units): decoded whole in one request and kept, since each later read of it would be a
#: round trip.
REMOTE_SMALL_FILE_BYTES = 2 * 1024 * 1024


class ByteLRU:
    """A thread-safe least-recently-used cache bounded by the bytes its values cost.

    ``get(key, build)`` returns the kept value, or calls ``build()`` for ``(value, cost)`` and keeps it,
    forgetting the least recently used values beyond ``budget`` (the newest is always kept). Threads
    asking for a key while it is being built wait for that build instead of repeating it: the pulls a
    dispatch wakes all want the same new files at once (a consumer's 4 pulling threads decoded 160 fresh
    commitlog files 215 times before, measured).
    """

    def __init__(self, budget: int):
        self.budget = budget
        self._values: "OrderedDict[str, tuple[Any, int]]" = OrderedDict()
        self._lock = threading.Lock()
        self._bytes = 0
        self._building: dict[str, Future] = {}  # keys being built, and the value each will be

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key: str, build: Callable[[], tuple[Any, int]]) -> Any:
        with self._lock:
            hit = self._values.get(key)
            if hit is not None:
                self._values.move_to_end(key)
                return hit[0]
            under_way = self._building.get(key)
            mine = under_way is None
            if under_way is None:  # mine
                under_way = self._building[key] = Future()
        if not mine:
            return under_way.result()  # that build's value, or its error
        try:
            value, cost = build()
        except BaseException as e:
            with self._lock:
                del self._building[key]
            under_way.set_exception(e)
            raise
        with self._lock:
            del self._building[key]
            if key not in self._values:
                self._values[key] = (value, cost)
                self._bytes += cost
            while self._bytes > self.budget and len(self._values) > 1:
                _, (_, freed) = self._values.popitem(last=False)
                self._bytes -= freed
        under_way.set_result(value)
        return value


#: What a read request to an object store costs, for coalescing: the time to its first byte and the bytes a
#: second one connection then brings (S3 from inside its region: tens of milliseconds, tens of MiB/s).
REMOTE_FIRST_BYTE_MS = 20
REMOTE_MIB_PER_S = 50


@functools.lru_cache(maxsize=2)
def parquet_format(remote: bool = False):
    """pyarrow's Parquet format, made once; ``remote=True``: for an object store's files, whose wanted column
    chunks are fetched together: ranges closer than what a request's wait would bring
    (:data:`REMOTE_FIRST_BYTE_MS` at :data:`REMOTE_MIB_PER_S`: 1 MiB) in one request, of at most 9 MiB,
    those requests at once. A pull of 32 from a clustered file of 10^6 messages (its messages in ~30 of
    977 row groups), 20 ms added to each request: p50 59 ms and 3 requests, against 132 ms and 25 with
    pyarrow's default (8 KiB), and 62 ms and 1.1 with 2 MiB (measured).

    >>> parquet_format().default_extname, parquet_format(True) is parquet_format(True)
    ('parquet', True)
    """
    import pyarrow.dataset as ds

    if not remote:
        return ds.ParquetFileFormat()
    cache = pa.CacheOptions.from_network_metrics(REMOTE_FIRST_BYTE_MS, REMOTE_MIB_PER_S)
    return ds.ParquetFileFormat(
        default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=True, cache_options=cache)
    )


_footers = ByteLRU(FOOTER_CACHE_BYTES)
_small = ByteLRU(SMALL_FILE_CACHE_BYTES)


#: Sizes of data files (immutable) named by the add actions this process has seen: opening one on an object
#: store then costs no HEAD request.
_sizes: dict[str, int] = {}
_SIZES_KEPT = 1_000_000


_io_pool: Any = None


def map_io(fn: Callable[[Any], Any], items: Sequence[Any], remote: bool | None = None) -> list[Any]:
    """``fn`` over ``items`` (reads or writes of data files), in order: one after another for local files, at
    once on a few threads for an object store's, where each waits a round trip (pyarrow releases the GIL).
    ``remote`` says where the files are when the items are not their paths.

    >>> map_io(len, ["s3://b/a", "s3://b/bc"]), map_io(len, ["/a"]), map_io(len, [[1], [2, 3]], remote=True)
    ([8, 9], [2], [1, 2])
    """
    global _io_pool
    if remote is None:
        remote = not all(is_local(str(i)) for i in items)
    if len(items) < 2 or not remote:
        return [fn(i) for i in items]
    if _io_pool is None:
        _io_pool = ThreadPoolExecutor(8, thread_name_prefix="storelib-io")
    return list(_io_pool.map(fn, items))


def remember_sizes(paths: Sequence[str], sizes: Sequence[int]) -> None:
    """Keep the sizes of data files (from their add actions), so that :func:`fragment` need not ask the
    object store (a HEAD request per file).

    >>> remember_sizes(["s3://b/t/part-1.parquet"], [1234]); _sizes["s3://b/t/part-1.parquet"]
    1234
    """
    if len(_sizes) > _SIZES_KEPT:
        _sizes.clear()
    _sizes.update(zip(paths, sizes))


def fragment(path: str):
    """A data file as a pyarrow fragment whose footer (row groups and their statistics) is already parsed,
    kept within :data:`FOOTER_CACHE_BYTES`.

    >>> t = store.context.tables.commitlog
    >>> fragment(t.files(t.snapshot())[0]).metadata.num_rows
    1
    """

    def build():
        fs, local = filesystem(path)
        made = parquet_format(not is_local(path)).make_fragment(local, fs, file_size=_sizes.get(path))
        made.ensure_complete_metadata()
        return made, made.metadata.serialized_size * _FOOTER_MEMORY_PER_BYTE

    return _footers.get(path, build)


def fragment_dataset(paths: Sequence[str], schema: pa.Schema) -> ds.FileSystemDataset:
    r"""The data files ``paths`` (one table's, non-empty) as a pyarrow dataset of their kept :func:`fragment`\ s,
    read with the format those were made with (an object store's coalesces its ranges).

    >>> t = store.context.tables.commitlog
    >>> fragment_dataset(t.files(t.snapshot()), t.spec.arrow).count_rows()
    1
    """
    import pyarrow.dataset as ds

    made = [fragment(p) for p in paths]
    return ds.FileSystemDataset(made, schema, made[0].format, filesystem(paths[0])[0])


def small_file(path: str, schema: pa.Schema) -> pa.Table | None:
    """Every row of the data file at ``path`` in ``schema``'s columns (columns it lacks are null), kept
    decoded within :data:`SMALL_FILE_CACHE_BYTES`; None when the file has more than :data:`SMALL_FILE_ROWS`
    rows and, on an object store, more than :data:`REMOTE_SMALL_FILE_BYTES` bytes (read those by row groups).

    A local file of at most :data:`SMALL_FILE_READ_BYTES` is read whole in one call and decoded from
    memory: Parquet's many small reads of footer and pages were most of a small file's cost (0.14
    against 0.27 ms for a 46-unit consume queue file, 0.57 against 0.78 ms for a 750-message
    commitlog one).

    >>> t = store.context.tables.commitlog
    >>> small_file(t.files(t.snapshot())[0], t.spec.arrow).num_rows
    1
    """
    return _small.get(f"{path}\0{schema.names}", lambda: _small_rows(path, schema))


def local_bytes(path: str) -> tuple[Any, Any]:
    """``(source, filesystem)`` to open the data file at ``path`` with pyarrow: a local file of at most
    :data:`SMALL_FILE_READ_BYTES` already read whole (one call instead of a read per footer and page),
    else its path and filesystem.

    >>> t = store.context.tables.commitlog
    >>> type(local_bytes(t.files(t.snapshot())[0])[0]).__name__
    'BufferReader'
    """

    if is_local(path) and os.path.getsize(path.removeprefix("file://")) <= SMALL_FILE_READ_BYTES:
        with open(path.removeprefix("file://"), "rb") as f:
            return pa.BufferReader(f.read()), None
    fs, local = filesystem(path)
    return local, fs


def _small_rows(path: str, schema: pa.Schema) -> tuple[pa.Table | None, int]:
    """:func:`small_file`'s rows and their cost (None for a file with too many rows: kept, costing nothing)."""

    source, _ = local_bytes(path)
    if isinstance(source, pa.BufferReader):
        file = pq.ParquetFile(source)
        if file.metadata.num_rows > SMALL_FILE_ROWS:
            return None, 0
        read = file.read(columns=schema.names, use_threads=False)  # a column the file lacks is left out ...
        if read.schema.equals(schema, check_metadata=False):  # ... so this says it has them all, typed alike
            rows = pa.Table.from_arrays(read.columns, schema=schema)
            return rows, rows.nbytes
    found = fragment(path)
    remote_small = not is_local(path) and _sizes.get(path, REMOTE_SMALL_FILE_BYTES + 1) <= REMOTE_SMALL_FILE_BYTES
    if found.metadata.num_rows > SMALL_FILE_ROWS and not remote_small:
        return None, 0
    return _decoded(found, path, schema)


def row_groups_of(
    path: str, schema: pa.Schema, row_groups: Sequence[int], columns: Sequence[str] | None = None
) -> pa.Table:
    """Rows of some row groups of one data file (of a table with ``schema``), in ``columns`` (None: all), decoded
    on this thread; a local file whose columns are the table's without a dataset scan's set-up (29 row groups
    of a clustered commitlog file, the columns of a pull: 24-33 against 37 ms).

    >>> t = store.context.tables.commitlog
    >>> row_groups_of(t.files(t.snapshot())[0], t.spec.arrow, [0], ["msg_id", "physical_offset"]).column_names
    ['msg_id', 'physical_offset']
    """
    found = fragment(path)
    names = list(columns) if columns else schema.names
    if is_local(path) and found.physical_schema.equals(schema, check_metadata=False):
        fs, local = filesystem(path)
        wanted = pa.schema([schema.field(n) for n in names])
        with pq.ParquetFile(local, metadata=found.metadata, filesystem=fs) as file:
            read = file.read_row_groups(list(row_groups), columns=names, use_threads=False).select(names)
        return pa.Table.from_arrays(read.columns, schema=wanted)
    return found.subset(row_group_ids=list(row_groups)).to_table(schema=schema, columns=names, use_threads=False)


def _decoded(found: Any, path: str, schema: pa.Schema) -> tuple[pa.Table, int]:
    """The rows of a file whose footer is parsed (``found``, its :func:`fragment`) in ``schema``'s columns."""
    fs, local = filesystem(path)
    if is_local(path) and found.physical_schema.equals(schema, check_metadata=False):
        # the file's own columns are the table's (the usual case): read them without a dataset
        # scan's set-up, which is most of a small file's cost (this whole call: 0.61 against 0.72 ms
        # for a 256-message commitlog file, 0.20 against 0.38 ms for a 64-unit consume queue one)

        with pq.ParquetFile(local, metadata=found.metadata, filesystem=fs) as file:
            rows = pa.Table.from_arrays(file.read(use_threads=False).columns, schema=schema)
    else:
        # (on an object store: through the fragment, which knows the file's size, so no HEAD request)
        rows = fragment_dataset([path], schema).to_table(use_threads=False)
    return rows, rows.nbytes


def scan_files(
    paths: Sequence[str],
    schema: pa.Schema,
    filter: Any = None,
    batch_size: int = 64 * 1024,
    *,
    prune: Any = None,
    keep: "Callable[[pa.RecordBatch], Any] | pc.Expression | None" = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of data files (full paths or URIs, one table's) in ``schema`` that pass ``filter`` (a
    pyarrow expression), streamed in Arrow batches on this thread; row groups whose statistics rule the
    filter out are not decoded. Or: the rows ``keep`` keeps (:func:`kept_batches`) of the row groups whose
    statistics do not rule ``prune`` out.

    >>> t = store.context.tables.commitlog
    >>> files = t.files(t.snapshot())
    >>> sum(b.num_rows for b in scan_files(files, t.spec.arrow, pc.field("topic") == "TopicTest"))
    1
    >>> topic = lambda b: pc.equal(b.column("topic"), "TopicTest")    # a test numpy or pyarrow states
    >>> [b.num_rows for b in scan_files(files, t.spec.arrow, prune=pc.field("topic") == "Other", keep=topic)]
    []
    """
    if filter is not None:
        if prune is not None or keep is not None:
            raise ValueError("scan_files: give filter, or prune and keep, not both")
        prune = keep = filter
    return _kept_batches(paths, schema, prune, keep, batch_size)


def _kept_batches(
    paths: Sequence[str],
    schema: pa.Schema,
    prune: Any,
    keep: "Callable[[pa.RecordBatch], Any] | pc.Expression | None",
    batch_size: int,
) -> Iterator[pa.RecordBatch]:
    for path in paths:
        found = fragment(path)
        if prune is not None:
            found = found.subset(filter=prune)  # the row groups statistics leave, none decoded yet
        yield from kept_batches(found, schema, keep, batch_size)


def kept_batches(
    found: "ds.ParquetFileFragment",
    schema: pa.Schema,
    keep: "Callable[[pa.RecordBatch], Any] | pc.Expression | None",
    batch_size: int = 64 * 1024,
) -> Iterator[pa.RecordBatch]:
    """The rows of a data file's row groups (``found``: its :func:`fragment`, or a subset of it) in ``schema``
    that ``keep`` keeps, decoded on this thread (an executor task has one core; pyarrow's own pool would
    compete with the other tasks' Python). ``keep`` is a pyarrow expression, or a function giving a batch's
    mask (a boolean numpy or Arrow array), or None for every row.

    Rows are tested, never filtered by the expression: its mask comes from a projection, and a batch every
    row of which passes goes on as decoded. Filtering by an expression copies every column of every batch,
    which cost about what decoding did (29 against 41 ms for 64k commitlog rows; its mask: 2.6 ms).

    >>> t = store.context.tables.commitlog
    >>> [b.num_rows for b in kept_batches(fragment(t.files(t.snapshot())[0]), t.spec.arrow, None)]
    [1]
    """
    if not found.row_groups:
        return
    for batch in found.to_batches(schema=schema, batch_size=batch_size, use_threads=False):
        if keep is None:
            yield batch
            continue
        mask = _mask(batch, keep)
        passed = int(mask.sum())
        if passed == batch.num_rows:
            yield batch
        elif passed:
            yield batch.filter(pa.array(mask, pa.bool_()))


def _mask(batch: pa.RecordBatch, keep: "Callable[[pa.RecordBatch], Any] | pc.Expression") -> np.ndarray:
    """``keep``'s test of ``batch`` as a numpy mask (null: not kept)."""
    if isinstance(keep, pc.Expression):
        import pyarrow.dataset as ds

        found = ds.dataset(pa.Table.from_batches([batch])).to_table(columns={"keep": keep}, use_threads=False)
        mask: Any = found.column(0).combine_chunks()
    else:
        mask = keep(batch)
    if isinstance(mask, (pa.Array, pa.ChunkedArray)):
        return pc.fill_null(mask, False).to_numpy(zero_copy_only=False)
    return np.asarray(mask, dtype=bool)


def keyed_rows(
    rows: pa.Table, column: str, values: np.ndarray | None = None, between: tuple[int, int] | None = None
) -> pa.Table:
    """The rows of a decoded file whose integer ``column`` is among ``values`` (sorted) or in
    ``[lo, hi)``: a binary search when the file is in that column's order (a commitlog file by offset,
    a consume queue file by queue offset), else a mask; no query engine is started for a point read.

    >>> rows = pa.table({"offset": [10, 20, 30, 40]})
    >>> keyed_rows(rows, "offset", between=(20, 40))["offset"].to_pylist()
    [20, 30]
    >>> keyed_rows(rows, "offset", values=np.array([5, 30, 40]))["offset"].to_pylist()
    [30, 40]
    >>> keyed_rows(pa.table({"offset": [30, 10, 20]}), "offset", values=np.array([10, 30]))["offset"].to_pylist()
    [30, 10]
    """
    keys = rows.column(column).to_numpy()
    if len(keys) > 1 and not (keys[1:] >= keys[:-1]).all():  # not in order: test every row
        if values is not None:
            mask = np.isin(keys, values)
        else:
            assert between is not None  # the caller gives values or between
            mask = (keys >= between[0]) & (keys < between[1])
        return rows.take(np.flatnonzero(mask))
    if values is None:
        assert between is not None  # the caller gives values or between
        lo, hi = np.searchsorted(keys, between)
        return rows.slice(int(lo), int(max(hi - lo, 0)))
    at = np.searchsorted(keys, values)
    found = at < len(keys)
    found[found] &= keys[at[found]] == values[found]
    return rows.take(at[found])
