"""Reading a store's table: which data files may hold wanted rows (their statistics), and those rows, read
by Spark over a pruned file list or on this process with pyarrow (point reads keep small files decoded).

>>> t = store.context.tables.commitlog
>>> len(t.files(t.snapshot())), t.read_arrow(columns=["queue_offset"]).num_rows, t.read(spark).count()
(1, 1, 1)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from storelib.delta.files import (
    fragment_dataset,
    is_local,
    keyed_rows,
    map_io,
    remember_sizes,
    row_groups_of,
    scan_files,
    small_file,
)
from storelib.delta.log import add_actions
from storelib.delta.spark_read import read_paths
from storelib.delta.stats import Prune, clustered, holding, only, prune_actions

if TYPE_CHECKING:
    import numpy as np
    from pyspark.sql import DataFrame, SparkSession

    from storelib.delta.spec import TableSpec

__all__ = ["Reading", "POINT_READ_FILES"]

#: A read of at most this many files is a point read: its small files are kept decoded (:func:`small_file`).
POINT_READ_FILES = 32


class Reading:
    """What a :class:`~storelib.delta.table.Table` does to read: prune its files on their statistics and read them.

    >>> t = store.context.tables.commitlog
    >>> actions = t.actions(t.snapshot(), Prune(equal={"topic": "TopicTest"}))
    >>> t.paths(actions) == t.files(t.snapshot()) == [t.path_of(p) for p in actions.column("path").to_pylist()]
    True
    >>> t.read_files(spark, actions).count(), len(t.files_holding(t.snapshot(), "physical_offset", pa.array([0])))
    (1, 1)
    """

    path: str
    spec: "TableSpec"

    if TYPE_CHECKING:

        def snapshot(self, version: int | None = None) -> DeltaTable: ...  # the Table's

    def files(self, dt: DeltaTable, prune: Prune | None = None) -> list[str]:
        """Absolute paths of the snapshot's data files that may hold rows matching ``prune``.

        A file is skipped only when its statistics prove it holds no such row; files without
        statistics are always kept.
        """
        return self.paths(self.actions(dt, prune))

    @staticmethod
    def actions(dt: DeltaTable, prune: Prune | None = None) -> pa.Table:
        """The add actions (with flattened statistics) of the files :meth:`files` keeps."""
        return prune_actions(add_actions(dt), prune)

    # what the files' statistics say they may hold (storelib.delta.stats)
    prune = staticmethod(prune_actions)
    clustered = staticmethod(clustered)
    only = staticmethod(only)
    holding = staticmethod(holding)

    def files_holding(self, dt: DeltaTable, col: str, values: pa.Array) -> list[str]:
        """Absolute paths of the files whose ``[min, max]`` of ``col`` holds at least one of ``values``."""
        return self.paths(self.holding(add_actions(dt), col, values))

    def paths(self, actions: pa.Table) -> list[str]:
        paths = [self.path_of(p) for p in actions.column("path").to_pylist()]
        if not is_local(self.path) and "size_bytes" in actions.column_names:  # opened later without a HEAD
            remember_sizes(paths, actions.column("size_bytes").to_pylist())
        return paths

    def path_of(self, action_path: str) -> str:
        """Absolute path of a file named in an add action (there a URI-encoded relative path)."""
        return f"{self.path}/{unquote(action_path)}"

    def read(self, spark: "SparkSession", dt: DeltaTable | None = None, prune: Prune | None = None) -> "DataFrame":
        """The rows of the snapshot's files that may match ``prune``, as a Spark DataFrame; callers add their
        exact predicate (Spark pushes it down to Parquet row groups too)."""
        return self.read_files(spark, self.actions(dt or self.snapshot(), prune))

    def read_files(self, spark: "SparkSession", actions: pa.Table) -> "DataFrame":
        """The rows of the files named by ``actions`` (add actions, e.g. from :meth:`actions`), as a Spark DataFrame."""
        return read_paths(spark, self.spec.arrow, self.paths(actions), actions.column("size_bytes").to_pylist())

    def read_arrow(
        self,
        dt: DeltaTable | None = None,
        prune: Prune | None = None,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        paths: Sequence[str] | None = None,
    ) -> pa.Table:
        """The same rows read on this process with pyarrow: for point reads that need no Spark job.

        ``paths`` (from :meth:`files` or :meth:`files_holding`) replaces the snapshot's pruned list.
        Data files never change once written, so their Parquet footers are parsed once per process
        and kept: a filter then skips row groups without opening the file again.
        """
        if paths is None:
            paths = self.files(dt or self.snapshot(), prune)
        wanted = list(columns or self.spec.columns)
        if not paths:
            return self.spec.arrow.empty_table().select(wanted)
        small, large = self._decoded(paths)
        parts = []
        if small:
            rows = small[0] if len(small) == 1 else pa.concat_tables(small)
            parts.append((rows if filter is None else rows.filter(filter)).select(wanted))
        if large:
            parts.append(fragment_dataset(large, self.spec.arrow).to_table(columns=wanted, filter=filter))
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def read_keyed(
        self,
        paths: Sequence[str],
        column: str,
        *,
        values: "np.ndarray | None" = None,
        between: tuple[int, int] | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """:meth:`read_arrow` of the rows whose integer ``column`` is among ``values`` (sorted) or in ``[lo, hi)``
        (``between``): small files searched decoded (:func:`~storelib.delta.files.keyed_rows`), the rest scanned.

        >>> t = store.context.tables.commitlog
        >>> t.read_keyed(t.files(t.snapshot()), "physical_offset", between=(0, 1), columns=["queue_offset"]).num_rows
        1
        """
        wanted = list(columns or self.spec.columns)
        small, large = self._decoded(paths, wanted if column in wanted else [*wanted, column])
        parts = [keyed_rows(rows, column, values, between).select(wanted) for rows in small]
        if large:
            key = pc.field(column)
            if values is not None:
                test = key.isin(pa.array(values, pa.int64()))
            else:
                assert between is not None  # the caller gives values or between
                test = (key >= between[0]) & (key < between[1])
            parts.append(self.read_arrow(paths=large, columns=wanted, filter=test))
        if not parts:
            return self.spec.arrow.empty_table().select(wanted)
        return parts[0] if len(parts) == 1 else pa.concat_tables(parts)

    def _decoded(self, paths: Sequence[str], columns: Sequence[str] | None = None) -> tuple[list[pa.Table], list[str]]:
        """A point read's small files decoded (from this process's cache), in ``columns`` (None: all), and
        the rest's paths. A read that needs some columns decodes and keeps only those (a pull's consume
        queue units: 4 of 7; its messages: 17 of 21, not the copies of their properties nor their cluster rank)."""
        schema, keep = self.spec.arrow, set(columns or ())
        if keep and len(keep) < len(schema):  # in the table's order, as in its files
            schema = pa.schema([f for f in schema if f.name in keep])
        small, large = [], []
        decoded = (
            map_io(lambda p: small_file(p, schema), paths) if len(paths) <= POINT_READ_FILES else [None] * len(paths)
        )
        for path, rows in zip(paths, decoded):
            if rows is None:
                large.append(path)
            else:
                small.append(rows)
        return small, large

    def scan(
        self,
        paths: Sequence[str],
        filter: pc.Expression | None = None,
        batch_size: int = 64 * 1024,
        *,
        prune: pc.Expression | None = None,
        keep: Callable[[pa.RecordBatch], Any] | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """The rows of data files (full paths, from :meth:`paths`) that pass ``filter``, streamed in Arrow
        batches with pyarrow on this process, on one thread (an executor task's share of a read); row
        groups whose statistics rule the filter out are not decoded. Or those ``keep`` (a vectorized
        mask) keeps, of the row groups ``prune`` leaves: :func:`~storelib.delta.files.scan_files`.

        >>> t = store.context.tables.commitlog
        >>> [b.num_rows for b in t.scan(t.files(t.snapshot()), pc.field("topic") == "TopicTest")]
        [1]
        """
        return scan_files(paths, self.spec.arrow, filter, batch_size, prune=prune, keep=keep)

    def read_row_groups(self, path: str, row_groups: Sequence[int], columns: Sequence[str] | None = None) -> pa.Table:
        """Rows of some row groups of one data file (a full path, from :meth:`paths`), with pyarrow
        (:func:`~storelib.delta.files.row_groups_of`).

        >>> t = store.context.tables.commitlog
        >>> t.read_row_groups(t.files(t.snapshot())[0], [0], columns=["physical_offset"]).num_rows
        1
        """
        return row_groups_of(path, self.spec.arrow, row_groups, columns)
