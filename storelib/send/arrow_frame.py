"""User rows of messages as Arrow batches, encoded the way :meth:`Producer.encode_dataframe` encodes a
DataFrame with Spark columns: for writers that get Arrow batches (the ``rocketmq`` sink), not a DataFrame.

Details: ``docs/internals.md``, section storelib.send.arrow_frame.

>>> b = pa.RecordBatch.from_pydict({"topic": ["T"], "body": ["hi"], "keys": [["k1", "k2"]],
...                                 "properties": pa.array([[("a", "5")]], pa.map_(pa.string(), pa.string()))})
>>> e = encode_batch(b)
>>> e.column("body").to_pylist(), e.column("keys").to_pylist(), e.column("property_count").to_pylist()
([b'hi'], ['k1 k2'], [1])
>>> e.column("body_crc").to_pylist()          # RocketMQ's UtilAll.crc32 of the UTF-8 bytes
[1486039724]
>>> check_columns({"topic": "string", "colour": "string"})  # doctest: +NORMALIZE_WHITESPACE
Traceback (most recent call last):
storelib.model.errors.MessageError: columns: unknown message columns ['colour']; allowed: ['body', 'born_host',
    'born_timestamp', 'flag', 'keys', 'properties', 'queue_id', 'tags', 'topic']
>>> check_columns({"topic": "string", "keys": "int", "queue_id": "double"})  # doctest: +NORMALIZE_WHITESPACE
Traceback (most recent call last):
storelib.model.errors.MessageError: columns: wrongly typed message columns: keys int (allowed: string, array<string>),
    queue_id double (allowed: tinyint, smallint, int, bigint); nothing is cast silently
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.encoding.properties import PROPERTY_SEPARATOR
from storelib.encoding.record import body_crcs
from storelib.model.errors import MessageError
from storelib.model.message import PROPERTY_JOIN, MessageConst
from storelib.send.frame import NULL_KEY
from storelib.storage.schema import COMMITLOG

__all__ = [
    "DATAFRAME_COLUMNS",
    "ASSIGNED_COLUMNS",
    "MIRRORED_PROPERTIES",
    "NULL_VALUE",
    "check_columns",
    "spark_types",
    "arrow_types",
    "encode_batch",
]

_INTEGERS = ("tinyint", "smallint", "int", "bigint")
#: The columns a DataFrame (or Arrow batch) of messages may have, and the Spark types each may have
#: (``simpleString``). Nothing is cast silently: an integer column must hold integers, a timestamp a
#: timestamp; out-of-range integers are refused row by row (``queue_id``, ``flag``).
DATAFRAME_COLUMNS: dict[str, tuple[str, ...]] = {
    "topic": ("string",),
    "body": ("binary", "string"),
    "tags": ("string",),
    "keys": ("string", "array<string>"),
    "properties": ("map<string,string>",),
    "queue_id": _INTEGERS,
    "flag": _INTEGERS,
    "born_timestamp": ("timestamp",),
    "born_host": ("string",),
}
#: Columns of a stored message that the store assigns at every write (offsets, size, ids, store time and host,
#: CRC, system flag, reconsume times): a frame read from the store (the ``rocketmq`` source's rows) may carry them
#: and writes back as it is; the new messages get their own.
ASSIGNED_COLUMNS = frozenset(COMMITLOG.columns) - set(DATAFRAME_COLUMNS) - {"cluster_seq"}
#: System properties that repeat a row's own columns (``tags``, ``keys``) or the id the store gives each message:
#: a row read from the store carries them; they are taken from the row's columns and the new id, never from the
#: map. Every other system property in a row's map is refused with its name.
MIRRORED_PROPERTIES = (MessageConst.TAGS, MessageConst.KEYS, MessageConst.UNIQ_KEY)
#: How a null property value crosses (it is refused as blank): a separator, which no value may hold.
NULL_VALUE = PROPERTY_SEPARATOR
_OPTIONAL = {"queue_id": pa.int64(), "flag": pa.int64(), "born_host": pa.string()}
_ARROW_NAMES = {
    pa.string(): "string",
    pa.large_string(): "string",
    pa.binary(): "binary",
    pa.large_binary(): "binary",
    pa.int8(): "tinyint",
    pa.int16(): "smallint",
    pa.int32(): "int",
    pa.int64(): "bigint",
}


def check_columns(types: Mapping[str, str]) -> None:
    """The rule for a DataFrame's columns, given as ``{name: Spark simpleString}``: only
    :data:`DATAFRAME_COLUMNS`, ``topic`` among them, each of one of its allowed types; the store's own
    :data:`ASSIGNED_COLUMNS` are let through and ignored."""
    types = {name: kind for name, kind in types.items() if name not in ASSIGNED_COLUMNS}
    unknown = sorted(set(types) - set(DATAFRAME_COLUMNS))
    if unknown:
        raise MessageError("columns", f"unknown message columns {unknown}; allowed: {sorted(DATAFRAME_COLUMNS)}")
    if "topic" not in types:
        raise MessageError("columns", "a DataFrame of messages needs a 'topic' column")
    wrong = [
        f"{name} {kind} (allowed: {', '.join(DATAFRAME_COLUMNS[name])})"
        for name, kind in types.items()
        if kind not in DATAFRAME_COLUMNS[name]
    ]
    if wrong:
        raise MessageError("columns", f"wrongly typed message columns: {', '.join(wrong)}; nothing is cast silently")


def spark_types(schema: object) -> dict[str, str]:
    """``{name: simpleString}`` of a Spark ``StructType``, for :func:`check_columns`; a name given twice
    (Spark compares names without case) is refused by name, before Spark would fail on it mid-job.

    >>> from pyspark.sql.types import StructType, StructField, StringType
    >>> spark_types(StructType([StructField("topic", StringType())]))
    {'topic': 'string'}
    >>> spark_types(StructType([StructField("topic", StringType()), StructField("Topic", StringType())]))
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    storelib.model.errors.MessageError: columns: the DataFrame has more than one column named ['topic']; ...
    """
    names = [f.name for f in schema.fields]  # type: ignore[attr-defined]
    seen: dict[str, int] = {}
    for n in names:
        seen[n.lower()] = seen.get(n.lower(), 0) + 1
    twice = sorted(n for n, k in seen.items() if k > 1)
    if twice:
        raise MessageError(
            "columns",
            f"the DataFrame has more than one column named {twice}; rename or drop all but one",
            value=names,
        )
    return {f.name: f.dataType.simpleString() for f in schema.fields}  # type: ignore[attr-defined]


def arrow_types(schema: pa.Schema) -> dict[str, str]:
    """``{name: Spark simpleString}`` of an Arrow schema, for :func:`check_columns`.

    >>> arrow_types(pa.schema([("topic", pa.string()), ("keys", pa.list_(pa.string())),
    ...                        ("born_timestamp", pa.timestamp("us", "UTC"))]))
    {'topic': 'string', 'keys': 'array<string>', 'born_timestamp': 'timestamp'}
    """

    def name(t: pa.DataType) -> str:
        if t in _ARROW_NAMES:
            return _ARROW_NAMES[t]
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return f"array<{name(t.value_type)}>"
        if pa.types.is_map(t):
            return f"map<{name(t.key_type)},{name(t.item_type)}>"
        if pa.types.is_timestamp(t):
            return "timestamp" if t.tz else "timestamp_ntz"
        return str(t)

    return {f.name: name(f.type) for f in schema}


def encode_batch(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The encoded form of a batch of user rows (see the module's description)."""
    check_columns(arrow_types(batch.schema))
    n = batch.num_rows
    names = batch.schema.names
    body = batch.column("body") if "body" in names else pa.array([b""] * n, pa.binary())
    body = body.cast(pa.binary())  # a string body: its UTF-8 bytes
    crc = body_crcs(body)
    keys = batch.column("keys") if "keys" in names else pa.nulls(n, pa.string())
    if pa.types.is_list(keys.type) or pa.types.is_large_list(keys.type):
        keys = _join(keys, MessageConst.KEY_SEPARATOR, NULL_KEY)
    tags = batch.column("tags") if "tags" in names else pa.nulls(n, pa.string())
    columns = {"topic": batch.column("topic").cast(pa.string()), "body_crc": crc}
    columns.update(_properties(batch.column("properties") if "properties" in names else None, n))
    columns.update(
        {"body": body, "tags": _blank_to_null(tags.cast(pa.string())), "keys": _blank_to_null(keys.cast(pa.string()))}
    )
    for name, kind in _OPTIONAL.items():
        if name in names:
            columns[name] = batch.column(name).cast(kind)
    if "born_timestamp" in names:
        born = batch.column("born_timestamp").cast(pa.timestamp("us", "UTC"))
        columns["born_timestamp"] = pc.floor_temporal(born, unit="millisecond")
    return pa.RecordBatch.from_pydict(columns)


def _properties(props: pa.Array | None, n: int) -> dict[str, pa.Array]:
    """Names and values joined by :data:`PROPERTY_JOIN` (null when there are none), and their count."""
    if props is None:
        return {
            "property_names": pa.nulls(n, pa.string()),
            "property_values": pa.nulls(n, pa.string()),
            "property_count": pa.array(np.zeros(n, np.int32)),
        }
    props = props.cast(pa.map_(pa.string(), pa.string()))
    if isinstance(props, pa.ChunkedArray):
        props = props.combine_chunks()
    props = _without_mirrored(props)
    names = pa.ListArray.from_arrays(props.offsets, props.keys)  # offsets and entries of the same buffers
    values = pa.ListArray.from_arrays(props.offsets, props.items)
    count = pc.if_else(pc.is_null(props), 0, pc.list_value_length(names)).cast(pa.int32())
    some = pc.greater(count, 0)
    return {
        "property_names": pc.if_else(some, _join(names, PROPERTY_JOIN, None), None),
        "property_values": pc.if_else(some, _join(values, PROPERTY_JOIN, NULL_VALUE), None),
        "property_count": count,
    }


def _without_mirrored(props: pa.MapArray) -> pa.MapArray:
    """``props`` without the :data:`MIRRORED_PROPERTIES` entries (maps that held only those become empty).

    >>> m = pa.array([[("TAGS", "TagA"), ("a", "1")], None], pa.map_(pa.string(), pa.string()))
    >>> _without_mirrored(m).to_pylist()
    [[('a', '1')], None]
    """
    first, last = props.offsets[0].as_py(), props.offsets[-1].as_py()
    entries = props.values.slice(first, last - first)  # the slice's entries: a struct of key and value
    keys, items = entries.field(0), entries.field(1)
    drop = pc.is_in(keys, value_set=pa.array(MIRRORED_PROPERTIES))
    if not pc.any(drop).as_py():
        return props
    starts = pc.subtract(props.offsets, props.offsets[0])
    lists = pa.ListArray.from_arrays(starts, keys)
    keep = pc.invert(drop)
    kept = np.bincount(pc.list_parent_indices(lists).filter(keep).to_numpy(zero_copy_only=False), minlength=len(props))
    nulls = np.append(pc.is_null(props).to_numpy(zero_copy_only=False), False)
    offsets = pa.array(np.concatenate([[0], np.cumsum(kept)]).astype(np.int32), mask=nulls)
    return pa.MapArray.from_arrays(offsets, keys.filter(keep), items.filter(keep))


def _join(lists: pa.Array, separator: str, null_as: str | None) -> pa.Array:
    """Each list's strings joined by ``separator``; null elements as ``null_as`` (Spark's ``array_join``)."""
    if null_as is not None:
        flat = pc.fill_null(pc.list_flatten(lists), null_as)
        lists = pa.ListArray.from_arrays(pc.subtract(lists.offsets, lists.offsets[0]), flat, mask=pc.is_null(lists))
    return pc.binary_join(lists, separator)


def _blank_to_null(strings: pa.Array) -> pa.Array:
    return pc.if_else(pc.fill_null(pc.greater(pc.binary_length(strings), 0), False), strings, None)
