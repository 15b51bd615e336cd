"""What a Delta table of the store is made of: its name, columns, and how its writers lay rows out in files.

>>> import pyarrow as pa
>>> TableSpec("t", pa.schema([("a", pa.int64())]), cluster_by=("a",)).columns
['a']
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

__all__ = ["TableSpec", "spark_schema"]


@dataclass(frozen=True)
class TableSpec:
    """A table's name (its folder), columns, and how its writers cluster rows into files.

    ``cluster_by``: rows of one file share these values (a queue, a key-hash range).
    ``sort_by``: order of rows inside a file, so min/max statistics stay tight.
    ``row_group_rows``: rows per Parquet row group. Point reads (pulls, lookups) decode whole row
    groups, so tables read a few rows at a time keep them small.
    ``dictionary``: the (leaf) columns worth dictionary encoding, the repetitive ones; None for all.
    Trying a dictionary on a column of unique values (offsets, bodies, ids) costs about as much
    as writing it, and the writer then drops it anyway.
    ``statistics``: the columns whose min/max the files keep (for skipping files and row groups);
    None for all. Bodies and property maps are never searched by range.
    ``view_statistics``: the columns whose min/max a process's warm view keeps (None: all it gets);
    a view is brought forward at every commit, and fills each column it keeps for each new file.
    ``delta_encoded``: integer columns that grow by small steps inside a file (queue offsets, commitlog
    offsets), written with Parquet's ``DELTA_BINARY_PACKED`` encoding rather than plain values: consume
    queue files take half the bytes and ext files a fifth (10^6 messages, measured), and both write
    and read back faster, since the compressor has little left to do. Never a dictionary column.
    ``brief_tombstones``: every file that leaves the table leaves it through :meth:`Table.commit
    <storelib.delta.table.Table.commit>`, which stamps it with the time of its removal; so a local table keeps
    its ``remove`` actions in the log only briefly (:data:`~storelib.delta.table.TOMBSTONE_RETENTION`).
    False for a table that deltalake's own operations rewrite (the topic configuration's ``overwrite``).
    ``remote_look_s``: on an object store, how often at most a warm view of the table looks for new log
    entries (a request each): often for the tables pulls follow, seldom for settings other processes change.

    >>> TableSpec("events", pa.schema([("id", pa.int64()), ("at", pa.int64())])).columns
    ['id', 'at']
    """

    name: str
    arrow: pa.Schema
    cluster_by: tuple[str, ...] = ()
    sort_by: tuple[str, ...] = ()
    description: str = ""
    row_group_rows: int = 64 * 1024
    dictionary: tuple[str, ...] | None = None
    statistics: tuple[str, ...] | None = None
    view_statistics: tuple[str, ...] | None = None
    delta_encoded: tuple[str, ...] = ()
    brief_tombstones: bool = True
    remote_look_s: float = 0.2

    @property
    def columns(self) -> list[str]:
        return list(self.arrow.names)


def spark_schema(schema: pa.Schema):
    """The Spark StructType of an Arrow schema, keeping each field's comment.

    >>> spark_schema(pa.schema([pa.field("id", pa.int64(), metadata={"comment": "an id"})]))["id"].metadata
    {'comment': 'an id'}
    """
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import StructField, StructType

    struct = from_arrow_schema(schema)
    out = []
    for sf, af in zip(struct.fields, schema):
        meta = {"comment": af.metadata[b"comment"].decode()} if af.metadata and b"comment" in af.metadata else {}
        out.append(StructField(sf.name, sf.dataType, True, meta))
    return StructType(out)
