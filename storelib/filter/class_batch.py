"""A class filter over Arrow batches: the messages it sees, how it is called, and how its failures count.

On the executors a filter's ``match(msg, context)`` gets a :class:`MessageView` per row of an
Arrow batch: the attributes of a :class:`~storelib.model.message.StoredMessage`, each converted
from the batch only when the filter first asks for it, and ``msg.properties`` looked up for the
whole batch at once by key (:func:`~storelib.encoding.properties.property_array`).
``match_batch(batch, context)`` gets the batch itself. :func:`evaluate_batch` calls either; a message
the filter raises on, or gives anything but a bool for, is not kept and is counted in
:class:`FilterFailures` (kind, count, one message id and the innermost traceback line).

>>> from types import SimpleNamespace
>>> even = SimpleNamespace(has_batch=False,
...                        instance=SimpleNamespace(match=lambda m, c: int(m.properties["n"]) % 2 == 0))
>>> batch = pa.RecordBatch.from_pydict({"msg_id": ["A", "B", "C"], "properties": pa.array(
...     [[("n", "2")], [("n", "3")], [("n", "x")]], pa.map_(pa.string(), pa.string()))})
>>> failures = FilterFailures("m:Even")
>>> evaluate_batch(even, batch, None, failures).tolist(), [(f.kind, f.count, f.msg_id) for f in failures.report()]
([True, False, False], [('raised', 1, 'C')])
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.encoding.properties import property_array

__all__ = [
    "FilterFailure",
    "FilterFailures",
    "MessageView",
    "message_views",
    "evaluate_batch",
    "error_line",
    "RAISED",
    "NOT_BOOL",
    "NOT_LOADED",
]

#: Failure kinds: the filter raised, returned something other than a bool, or could not be loaded.
RAISED, NOT_BOOL, NOT_LOADED = "raised", "not_bool", "import"


# ---- failures ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FilterFailure:
    """Messages a filter failed on, of one kind (:data:`RAISED`, :data:`NOT_BOOL`, :data:`NOT_LOADED`),
    with one example: a message id and a traceback line.

    >>> FilterFailure("raised", 3, "m:F", "7F00...", "f.py:4 in match: ValueError: bad")
    FilterFailure(kind='raised', count=3, filter='m:F', msg_id='7F00...', line='f.py:4 in match: ValueError: bad')
    """

    kind: str
    count: int
    filter: str
    msg_id: str | None
    line: str


@dataclass
class FilterFailures:
    """A tally of one filter's failures by kind, the first example of each kept.

    >>> t = FilterFailures("m:F")
    >>> t.add(NOT_BOOL, 2, "ID1", "returned 'yes' (str)"); t.add(NOT_BOOL, 1, "ID2", "returned None")
    >>> t.report()
    (FilterFailure(kind='not_bool', count=3, filter='m:F', msg_id='ID1', line="returned 'yes' (str)"),)
    """

    filter: str
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, tuple[str | None, str]] = field(default_factory=dict)

    def add(self, kind: str, count: int, msg_id: str | None, line: str) -> None:
        if count <= 0:
            return
        self.counts[kind] = self.counts.get(kind, 0) + count
        self.examples.setdefault(kind, (msg_id, line))

    def add_error(self, kind: str, count: int, msg_id: str | None, error: BaseException) -> None:
        """Count ``error`` with its innermost traceback line."""
        self.add(kind, count, msg_id, error_line(error))

    def report(self) -> tuple[FilterFailure, ...]:
        return tuple(FilterFailure(k, n, self.filter, *self.examples[k]) for k, n in sorted(self.counts.items()))

    def __bool__(self) -> bool:
        return bool(self.counts)


def error_line(error: BaseException) -> str:
    """``file:line in function: Type: message`` of the innermost frame where ``error`` was raised.

    >>> try:
    ...     int("x")
    ... except ValueError as e:
    ...     print(error_line(e))  # doctest: +NORMALIZE_WHITESPACE
    <doctest storelib.filter.class_batch.error_line[0]>:2 in <module>: ValueError: invalid literal for int() with
    base 10: 'x'
    """
    frames = traceback.extract_tb(error.__traceback__)
    where = f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno} in {frames[-1].name}: " if frames else ""
    return f"{where}{type(error).__name__}: {error}"


# ---- messages over an Arrow batch ------------------------------------------------------------------
class _Columns:
    """A batch's columns as Python lists, each converted on first use; properties looked up by key for
    the whole batch at once (``map_lookup``), so a filter reading one property never builds dicts."""

    __slots__ = ("batch", "lists", "props")

    def __init__(self, batch: pa.RecordBatch | pa.Table):
        self.batch = batch
        self.lists: dict[str, list] = {}
        self.props: dict[str, list] = {}

    def column(self, name: str) -> list:
        values = self.lists.get(name)
        if values is None:
            values = self.lists[name] = self.batch.column(name).to_pylist()
        return values

    def prop(self, key: str) -> list:
        values = self.props.get(key)
        if values is None:
            values = self.props[key] = property_array(self.batch.column("properties"), key).to_pylist()
        return values


class _RowProperties(Mapping):
    """One message's properties, read from its batch on demand (a read-only mapping)."""

    __slots__ = ("_c", "_i")

    def __init__(self, columns: _Columns, i: int):
        self._c, self._i = columns, i

    def get(self, key, default=None):
        values = self._c.props.get(key)
        if values is None:
            if type(key) is not str:
                return default
            values = self._c.prop(key)
        value = values[self._i]
        return default if value is None else value

    def __getitem__(self, key):
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __contains__(self, key) -> bool:
        return self.get(key) is not None

    def _dict(self) -> dict:
        return dict(self._c.column("properties")[self._i] or ())

    def __iter__(self):
        return iter(self._dict())

    def __len__(self) -> int:
        return len(self._dict())

    def __repr__(self) -> str:
        return repr(self._dict())


def _field(name: str):
    return property(lambda self: self._c.column(name)[self._i], doc=f"the message's ``{name}``")


class MessageView:
    """One commitlog row of an Arrow batch with :class:`~storelib.model.message.StoredMessage`'s
    attributes, each read from the batch when first asked for (what a filter's ``match`` gets on an executor).

    >>> batch = pa.table({"topic": ["TopicTest"], "tags": ["TagA"], "physical_offset": [0], "body": [b"hi"],
    ...                   "properties": pa.array([[("a", "5")]], pa.map_(pa.string(), pa.string()))})
    >>> m = MessageView(_Columns(batch), 0)
    >>> m.topic, m.tags, m.properties.get("a"), m.commitlog_offset, m.body
    ('TopicTest', 'TagA', '5', 0, b'hi')
    """

    __slots__ = ("_c", "_i")

    def __init__(self, columns: _Columns, i: int):
        self._c, self._i = columns, i

    @property
    def properties(self) -> Mapping:
        return _RowProperties(self._c, self._i)

    msg_id = _field("msg_id")
    topic = _field("topic")
    tags = _field("tags")
    keys = _field("keys")
    uniq_key = _field("uniq_key")
    queue_id = _field("queue_id")
    queue_offset = _field("queue_offset")
    commitlog_offset = _field("physical_offset")
    size = _field("size")
    sysflag = _field("sysflag")
    flag = _field("flag")
    body_crc = _field("body_crc")
    body = _field("body")
    born_timestamp = _field("born_timestamp")
    born_host = _field("born_host")
    store_timestamp = _field("store_timestamp")
    store_host = _field("store_host")
    reconsume_times = _field("reconsume_times")
    prepared_transaction_offset = _field("prepared_transaction_offset")

    def __repr__(self) -> str:
        return f"MessageView(msg_id={self.msg_id!r}, topic={self.topic!r}, queue_offset={self.queue_offset})"


def message_views(batch: pa.RecordBatch | pa.Table) -> list[MessageView]:
    """A :class:`MessageView` of every row of a batch of commitlog rows, sharing the batch's lazily converted columns.

    >>> [m.msg_id for m in message_views(pa.table({"msg_id": ["A", "B"]}))]
    ['A', 'B']
    """
    columns = _Columns(batch)  # a table's chunked columns convert as they are: no copy into one batch
    return [MessageView(columns, i) for i in range(batch.num_rows)]


# ---- evaluating ----------------------------------------------------------------------------------
def evaluate_batch(
    loaded: Any, batch: pa.RecordBatch, context: Any, failures: FilterFailures, load_error: str = ""
) -> np.ndarray:
    """Which rows of ``batch`` (commitlog columns) the filter keeps: ``match_batch`` once, or ``match``
    on each row; a row it fails on is not kept and is counted in ``failures``. ``loaded`` is a
    :class:`~storelib.filter.class_filter.LoadedFilter`, or None when the class could not be loaded
    here (``load_error`` says why): then no row is kept."""
    n = batch.num_rows
    keep = np.zeros(n, dtype=bool)
    if n == 0:
        return keep
    ids = batch.column("msg_id")
    if loaded is None:
        failures.add(NOT_LOADED, n, ids[0].as_py(), load_error)
        return keep
    if loaded.has_batch:
        return _evaluate_batch(loaded, batch, context, failures, ids)
    match = loaded.instance.match
    columns = _Columns(batch)
    kept = [False] * n
    for i in range(n):
        try:
            result = match(MessageView(columns, i), context)
        except Exception as e:
            failures.add_error(RAISED, 1, ids[i].as_py(), e)
            continue
        if result is True:
            kept[i] = True
        elif result is not False:
            if type(result) is np.bool_:
                kept[i] = bool(result)
            else:
                failures.add(
                    NOT_BOOL, 1, ids[i].as_py(), f"match returned {result!r} ({type(result).__name__}), not a bool"
                )
    return np.array(kept, dtype=bool)


def _evaluate_batch(
    loaded: Any, batch: pa.RecordBatch, context: Any, failures: FilterFailures, ids: pa.Array
) -> np.ndarray:
    n = batch.num_rows
    keep = np.zeros(n, dtype=bool)
    try:
        result = loaded.instance.match_batch(batch, context)
    except Exception as e:
        failures.add_error(RAISED, n, ids[0].as_py(), e)
        return keep
    if isinstance(result, pa.ChunkedArray):
        result = result.combine_chunks()
    if isinstance(result, np.ndarray) and result.dtype == np.bool_:
        result = pa.array(result)
    if not isinstance(result, pa.Array) or result.type != pa.bool_() or len(result) != n:
        kind = f"{result.type} array of {len(result)}" if isinstance(result, pa.Array) else type(result).__name__
        failures.add(NOT_BOOL, n, ids[0].as_py(), f"match_batch returned {kind}, not a BooleanArray of {n}")
        return keep
    if result.null_count:
        nulls = pc.is_null(result).to_numpy(zero_copy_only=False)
        failures.add(NOT_BOOL, int(nulls.sum()), ids[int(np.argmax(nulls))].as_py(), "match_batch returned null")
    return pc.fill_null(result, False).to_numpy(zero_copy_only=False).astype(bool, copy=False)
