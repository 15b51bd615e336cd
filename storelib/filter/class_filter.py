"""Class filters: a consumer's own Python filter, run where RocketMQ's filter servers ran it.

In RocketMQ a consumer could subscribe with a class implementing ``MessageFilter.match(MessageExt,
FilterContext)``; filter servers next to the broker compiled it (checking a CRC of its source) and
ran it on every message they pulled for the consumer. RocketMQ 4.3 removed the filter servers.
Here Spark's executors take their place:

* a filter is a class with ``match(self, msg, context) -> bool``, named by import path
  (``'mypkg.filters:EvenSequence'``) and built without arguments. ``msg`` has the attributes of a
  :class:`~storelib.model.message.StoredMessage` (topic, tags, keys, properties, body, queue id and
  offset, commitlog offset, store and born timestamps, msg id, ...), ``context`` is a
  :class:`FilterContext` (group and topic). A class may offer ``match_batch(self, batch, context)``
  instead, taking a ``pyarrow.RecordBatch`` of commitlog rows and returning a ``pyarrow.BooleanArray``;
  then it is called once per batch;
* reads run it on the executors over Arrow batches (``mapInArrow``, :meth:`ClassFilter.apply`);
  pulls, a few dozen messages on the driver, call it in-process (:meth:`ClassFilter.matches`);
* a message on which the filter raises or returns anything but a bool does not match, and so does
  every message where the executor cannot import the class; each failure is counted by kind with
  the filter's name, one message id and one traceback line (:class:`FilterFailure`); the read goes on;
* a subscription records the class's import path and a CRC of its module's source, as RocketMQ
  kept the CRC of ``filterClassSource``. Re-subscribing picks up a changed module (a new registry
  version); a process whose loaded class has another CRC gets :class:`SubscriptionNotLatestError`;
* running uploaded source text instead of importing is possible only with
  ``enable_filter_class_source`` (off by default): it runs anyone's code on every executor.

>>> f = load_filter("storelib.filter.class_filter:EveryTenth")
>>> f.name, f.has_batch, f.crc == source_crc(open(sys.modules["storelib.filter.class_filter"].__file__).read())
('storelib.filter.class_filter:EveryTenth', False, True)
>>> import pyarrow as pa
>>> from storelib.storage.schema import COMMITLOG
>>> batch = message_batch([store.query_by_id(r.msg_id)])
>>> failures = FilterFailures(f.name)
>>> evaluate_batch(f, batch, FilterContext("GroupC", "TopicTest"), failures).tolist(), failures.report()
([False], ())
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import threading
import traceback
import types
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.model.errors import FilterClassError, SubscriptionNotLatestError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from storelib.filter.selector import MessageSelector
    from storelib.model.message import StoredMessage

__all__ = ["FilterContext", "LoadedFilter", "FilterFailure", "FilterFailures", "ClassFilter", "MessageView",
           "EveryTenth", "load_filter", "source_crc", "evaluate_batch", "message_batch", "RAISED", "NOT_BOOL",
           "NOT_LOADED"]

#: Failure kinds: the filter raised, returned something other than a bool, or could not be loaded.
RAISED, NOT_BOOL, NOT_LOADED = "raised", "not_bool", "import"

_log = logging.getLogger("storelib.filter")


def source_crc(text: str) -> int:
    """RocketMQ's ``UtilAll.crc32`` of the UTF-8 source: CRC32 & 0x7FFFFFFF.

    >>> source_crc("class F: pass")
    27687690
    """
    return zlib.crc32(text.encode("utf-8")) & 0x7FFFFFFF


@dataclass(frozen=True)
class FilterContext:
    """What a filter is told besides the message (RocketMQ's ``FilterContext``: the consumer group; here
    also the topic). ``consumer_group`` is None for a read with an ad hoc selector.

    >>> FilterContext("GroupC", "TopicTest").consumer_group
    'GroupC'
    """

    consumer_group: str | None
    topic: str


class EveryTenth:
    """The seed's example filter (RocketMQ's ``MessageFilterImpl``): ``SequenceId`` % 10 == 0 and > 100.

    >>> EveryTenth().match(types.SimpleNamespace(properties={"SequenceId": "110"}), None)
    True
    """

    def match(self, msg, context) -> bool:
        seq = msg.properties.get("SequenceId")
        return seq is not None and int(seq) % 10 == 0 and int(seq) > 100


# ---- loading -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadedFilter:
    """A filter class as this process loaded it: its name, the CRC of its source, an instance.

    >>> load_filter("storelib.filter.class_filter:EveryTenth").instance.__class__.__name__
    'EveryTenth'
    """

    name: str
    crc: int
    instance: Any
    has_batch: bool


_LOADED: dict[str, LoadedFilter] = {}
_LOCK = threading.RLock()


def load_filter(name: str, source: str | None = None, *, refresh: bool = False) -> LoadedFilter:
    """The filter class ``'module:Class'`` (imported once per process and kept), or the class of that
    name in ``source`` (run in a module of its own). ``refresh`` reloads a module whose file changed
    since this process loaded it (what subscribing does). :class:`FilterClassError` when it cannot be
    loaded or has neither ``match`` nor ``match_batch``.

    >>> load_filter("storelib.nowhere:Even")
    Traceback (most recent call last):
    ...
    storelib.model.errors.FilterClassError: filter_class: cannot import module 'storelib.nowhere': ModuleNotFoundError: No module named 'storelib.nowhere' (got 'storelib.nowhere:Even')
    >>> load_filter("Even", "class Even:\\n    def match(self, msg, context):\\n        return True\\n").has_batch
    False
    """
    module_name, _, cls_name = name.rpartition(":")
    with _LOCK:
        if source is not None:
            crc = source_crc(source)
            key = f"{name}@{crc}"
            if key not in _LOADED:
                module = types.ModuleType(f"storelib_filter_source_{crc}")
                module.__file__ = f"<filter source {name}, crc {crc}>"
                try:
                    exec(compile(source, module.__file__, "exec"), module.__dict__)
                except Exception as e:
                    raise FilterClassError("filter_class_source", f"cannot run the source of {name}: "
                                                                  f"{type(e).__name__}: {e}", value=name) from None
                _LOADED[key] = _build(name, module, cls_name, crc)
            return _LOADED[key]
        loaded = _LOADED.get(name)
        if loaded is not None and not refresh:
            return loaded
        try:
            module = importlib.import_module(module_name)
            text = _module_source(module, name)
            if loaded is not None and source_crc(text) != loaded.crc:
                module = importlib.reload(module)
                text = _module_source(module, name)
        except FilterClassError:
            raise
        except Exception as e:
            raise FilterClassError("filter_class", f"cannot import module {module_name!r}: {type(e).__name__}: {e}",
                                   value=name) from None
        _LOADED[name] = _build(name, module, cls_name, source_crc(text))
        return _LOADED[name]


def _module_source(module: types.ModuleType, name: str) -> str:
    """The text of the module's source: from its loader, else its ``.py`` file."""
    why = "its loader gives none"
    loader = getattr(module, "__loader__", None)
    try:
        text = loader.get_source(module.__name__) if loader is not None else None
    except Exception as e:
        text, why = None, f"{type(e).__name__}: {e}"
    path = getattr(module, "__file__", None) or ""
    if text is None and path.endswith(".py"):
        with open(path, encoding="utf-8") as f:
            text = f.read()
    if text is None:
        raise FilterClassError("filter_class", f"the module of {name} has no source to checksum ({why})", value=name)
    return text


def _build(name: str, module: types.ModuleType, cls_name: str, crc: int) -> LoadedFilter:
    cls = getattr(module, cls_name, None)
    if not isinstance(cls, type):
        raise FilterClassError("filter_class", f"module {module.__name__!r} has no class {cls_name!r}", value=name)
    try:
        instance = cls()
    except Exception as e:
        raise FilterClassError("filter_class", f"{name} cannot be built without arguments: {type(e).__name__}: {e}",
                               value=name) from None
    has_batch = callable(getattr(instance, "match_batch", None))
    if not has_batch and not callable(getattr(instance, "match", None)):
        raise FilterClassError("filter_class", f"{name} has neither match(msg, context) nor match_batch(batch, context)",
                               value=name)
    return LoadedFilter(name, crc, instance, has_batch)


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
    ...     error_line(e)
    "<doctest storelib.filter.class_filter.error_line[0]>:2 in <module>: ValueError: invalid literal for int() with base 10: 'x'"
    """
    frames = traceback.extract_tb(error.__traceback__)
    where = f"{frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno} in {frames[-1].name}: " if frames else ""
    return f"{where}{type(error).__name__}: {error}"


# ---- messages over an Arrow batch ------------------------------------------------------------------
class _Columns:
    """A batch's columns as Python lists, each converted on first use; properties looked up by key for
    the whole batch at once (``map_lookup``), so a filter reading one property never builds dicts."""

    __slots__ = ("batch", "lists", "props")

    def __init__(self, batch: pa.RecordBatch):
        self.batch, self.lists, self.props = batch, {}, {}

    def column(self, name: str) -> list:
        values = self.lists.get(name)
        if values is None:
            values = self.lists[name] = self.batch.column(name).to_pylist()
        return values

    def prop(self, key: str) -> list:
        values = self.props.get(key)
        if values is None:
            values = self.props[key] = pc.map_lookup(self.batch.column("properties"), pa.scalar(key, pa.string()),
                                                     "first").to_pylist()
        return values


class _RowProperties(Mapping):
    """One message's properties, read from its batch on demand (a read-only mapping)."""

    __slots__ = ("_c", "_i")

    def __init__(self, columns: _Columns, i: int):
        self._c, self._i = columns, i

    def get(self, key, default=None):
        if type(key) is not str:
            return default
        value = self._c.prop(key)[self._i]
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

    >>> m = MessageView(_Columns(message_batch([store.query_by_id(r.msg_id)])), 0)
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


def message_batch(messages: Sequence["StoredMessage"]) -> pa.RecordBatch:
    """Stored messages as one Arrow batch of commitlog rows (what ``match_batch`` gets in a pull).

    >>> message_batch([store.query_by_id(r.msg_id)]).column("tags").to_pylist()
    ['TagA']
    """
    from storelib.storage.schema import COMMITLOG

    rows = [{"physical_offset": m.commitlog_offset, "size": m.size, "topic": m.topic, "queue_id": m.queue_id,
             "queue_offset": m.queue_offset, "sysflag": m.sysflag, "flag": m.flag, "body_crc": m.body_crc,
             "born_timestamp": m.born_timestamp, "born_host": m.born_host, "store_timestamp": m.store_timestamp,
             "store_host": m.store_host, "reconsume_times": m.reconsume_times,
             "prepared_transaction_offset": m.prepared_transaction_offset, "properties": list(m.properties.items()),
             "body": m.body, "msg_id": m.msg_id, "tags": m.tags, "keys": m.keys, "uniq_key": m.uniq_key,
             "cluster_seq": None} for m in messages]
    return pa.RecordBatch.from_pylist(rows, schema=COMMITLOG.arrow)


# ---- evaluating ----------------------------------------------------------------------------------
def evaluate_batch(loaded: LoadedFilter | None, batch: pa.RecordBatch, context: FilterContext,
                   failures: FilterFailures, load_error: str = "") -> np.ndarray:
    """Which rows of ``batch`` (commitlog columns) the filter keeps: ``match_batch`` once, or ``match``
    on each row; a row it fails on is not kept and is counted in ``failures``. ``loaded`` None: the
    class could not be loaded here (``load_error`` says why), and no row is kept."""
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
    for i in range(n):
        try:
            result = match(MessageView(columns, i), context)
        except Exception as e:
            failures.add_error(RAISED, 1, ids[i].as_py(), e)
            continue
        if result is True:
            keep[i] = True
        elif result is not False:
            if type(result) is np.bool_:
                keep[i] = bool(result)
            else:
                failures.add(NOT_BOOL, 1, ids[i].as_py(), f"match returned {result!r} ({type(result).__name__}), not a bool")
    return keep


def _evaluate_batch(loaded: LoadedFilter, batch: pa.RecordBatch, context: FilterContext, failures: FilterFailures,
                    ids: pa.Array) -> np.ndarray:
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


# ---- a subscription's filter -----------------------------------------------------------------------
@dataclass(frozen=True)
class ClassFilter:
    """A class selector's filter for one (group, topic): loads the class, checks it is the registered
    one, and runs it on a DataFrame's executors (:meth:`apply`, :meth:`stats`) or on a message here
    (:meth:`matches`).

    >>> from storelib.filter.selector import MessageSelector
    >>> cf = ClassFilter.of(MessageSelector.by_class("storelib.filter.class_filter:EveryTenth"), "GroupC", "TopicTest")
    >>> cf.apply(store.messages("TopicTest")).count(), cf.matches(store.query_by_id(r.msg_id))
    (0, False)
    >>> cf.stats(store.messages("TopicTest"))
    (0, ())
    """

    name: str
    crc: int | None
    source: str | None
    group: str | None
    topic: str

    @classmethod
    def of(cls, selector: "MessageSelector", group: str | None, topic: str) -> "ClassFilter":
        return cls(selector.filter_class, selector.filter_class_crc, selector.filter_class_source, group, topic)

    @property
    def context(self) -> FilterContext:
        return FilterContext(self.group, self.topic)

    def load(self, refresh: bool = False) -> LoadedFilter:
        """The class as this process has it; :class:`SubscriptionNotLatestError` when its CRC is not the
        registered one (the module changed: re-subscribe), :class:`FilterClassError` when it cannot load."""
        loaded = load_filter(self.name, self.source, refresh=refresh)
        if self.crc is not None and loaded.crc != self.crc:
            raise SubscriptionNotLatestError(
                "filter_class", f"the class {self.name} loaded here (source crc {loaded.crc}) is not the one "
                                f"registered{' by group ' + self.group if self.group else ''} for topic {self.topic} "
                                f"(crc {self.crc}); subscribe again to use the changed class", value=self.name)
        return loaded

    def apply(self, df: "DataFrame") -> "DataFrame":
        """The rows of ``df`` (commitlog columns) the filter keeps, computed on the executors over Arrow batches."""
        self.load()
        return df.mapInArrow(functools.partial(_filter_partition, self), df.schema)

    def stats(self, df: "DataFrame") -> tuple[int, tuple[FilterFailure, ...]]:
        """How many rows of ``df`` the filter keeps, and its failures on the others (one Spark job)."""
        self.load()
        rows = df.mapInArrow(functools.partial(_stats_partition, self),
                             "kind string, count long, msg_id string, line string").collect()
        tally, kept = FilterFailures(self.name), 0
        for row in rows:
            if row.kind == "kept":
                kept += row["count"]
            else:
                tally.add(row.kind, row["count"], row.msg_id, row.line)
        return kept, tally.report()

    def match_all(self, messages: Sequence["StoredMessage"], failures: FilterFailures | None = None) -> dict[int, bool]:
        """Whether the filter keeps each message, by commitlog offset: ``match_batch`` once over them all
        as one Arrow batch, or ``match`` on each (pulls, in this process).

        >>> from storelib.filter.selector import MessageSelector
        >>> cf = ClassFilter.of(MessageSelector.by_class("storelib.filter.class_filter:EveryTenth"), None, "TopicTest")
        >>> cf.match_all([store.query_by_id(r.msg_id)])
        {0: False}
        """
        loaded = self.load()
        failures = failures if failures is not None else FilterFailures(self.name)
        if not messages:
            return {}
        if loaded.has_batch:
            keep = evaluate_batch(loaded, message_batch(messages), self.context, failures)
            return {m.commitlog_offset: bool(k) for m, k in zip(messages, keep)}
        return {m.commitlog_offset: self.matches(m, failures) for m in messages}

    def matches(self, message: "StoredMessage", failures: FilterFailures | None = None) -> bool:
        """Whether the filter keeps one message, run in this process (pulls); failures go to ``failures``."""
        loaded = self.load()
        failures = failures if failures is not None else FilterFailures(self.name)
        if loaded.has_batch:
            return self.match_all([message], failures)[message.commitlog_offset]
        try:
            result = loaded.instance.match(message, self.context)
        except Exception as e:
            failures.add_error(RAISED, 1, message.msg_id, e)
            return False
        if type(result) in (bool, np.bool_):
            return bool(result)
        failures.add(NOT_BOOL, 1, message.msg_id, f"match returned {result!r} ({type(result).__name__}), not a bool")
        return False


def _executor_load(spec: ClassFilter) -> tuple[LoadedFilter | None, str]:
    """The class on an executor: a changed module is reloaded once; a class that still differs from
    the registered one fails the task (:class:`SubscriptionNotLatestError`); one that cannot be
    loaded here is None, with the reason."""
    try:
        try:
            return spec.load(), ""
        except SubscriptionNotLatestError:
            return spec.load(refresh=True), ""
    except FilterClassError as e:
        return None, f"{e} (on an executor, python {sys.version.split()[0]})"


def _filter_partition(spec: ClassFilter, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    loaded, why = _executor_load(spec)
    context, failures = spec.context, FilterFailures(spec.name)
    for batch in batches:
        keep = evaluate_batch(loaded, batch, context, failures, why)
        if keep.any():
            yield batch.filter(pa.array(keep))
    for f in failures.report():
        _log.warning("class filter %s: %d messages failed (%s), e.g. %s: %s", f.filter, f.count, f.kind, f.msg_id, f.line)


def _stats_partition(spec: ClassFilter, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    loaded, why = _executor_load(spec)
    context, failures, kept = spec.context, FilterFailures(spec.name), 0
    for batch in batches:
        kept += int(evaluate_batch(loaded, batch, context, failures, why).sum())
    rows = [{"kind": "kept", "count": kept, "msg_id": None, "line": None}] + [
        {"kind": f.kind, "count": f.count, "msg_id": f.msg_id, "line": f.line} for f in failures.report()]
    yield pa.RecordBatch.from_pylist(rows, schema=pa.schema([("kind", pa.string()), ("count", pa.int64()),
                                                             ("msg_id", pa.string()), ("line", pa.string())]))
