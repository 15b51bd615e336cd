"""Class filters: a consumer's own Python filter, run where RocketMQ's filter servers ran it.

A filter is a class with ``match(self, msg, context) -> bool`` (or ``match_batch``), named by import
path; reads run it on Spark's executors over Arrow batches, pulls in-process, and its failures are
counted, never raised. The details are in ``docs/internals.md``.

>>> f = load_filter("storelib.filter.class_filter:EveryTenth")
>>> f.name, f.has_batch, f.crc == source_crc(open(sys.modules["storelib.filter.class_filter"].__file__).read())
('storelib.filter.class_filter:EveryTenth', False, True)
>>> batch = pa.RecordBatch.from_pydict({"msg_id": ["A", "B"], "properties": pa.array(
...     [[("SequenceId", "110")], [("SequenceId", "7")]], pa.map_(pa.string(), pa.string()))})
>>> failures = FilterFailures(f.name)
>>> evaluate_batch(f, batch, FilterContext("GroupC", "TopicTest"), failures).tolist(), failures.report()
([True, False], ())
"""

from __future__ import annotations

import importlib
import logging
import sys
import threading
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.encoding.properties import property_array
from storelib.encoding.record import body_crc
from storelib.filter.class_batch import FilterFailures, evaluate_batch
from storelib.model.errors import FilterClassError, SubscriptionNotLatestError

if TYPE_CHECKING:
    from storelib.filter.selector import MessageSelector

__all__ = [
    "FilterContext",
    "LoadedFilter",
    "ClassFilter",
    "EveryTenth",
    "EveryTenthBatch",
    "Everything",
    "load_filter",
    "source_crc",
]

_log = logging.getLogger("storelib.filter")


def source_crc(text: str) -> int:
    """RocketMQ's ``UtilAll.crc32`` of the UTF-8 source: CRC32 & 0x7FFFFFFF.

    >>> source_crc("class F: pass")
    27687690
    """
    return body_crc(text.encode("utf-8"))


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


class Everything:
    """A filter that keeps every message.

    >>> Everything().match(None, None)
    True
    """

    def match(self, msg, context) -> bool:
        return True


class EveryTenthBatch:
    """:class:`EveryTenth` over a whole Arrow batch of commitlog rows (``match_batch``); a SequenceId
    that is not a number does not match.

    >>> b = pa.RecordBatch.from_pydict({"properties": pa.array([[("SequenceId", "110")], [("SequenceId", "x")], []],
    ...                                                        pa.map_(pa.string(), pa.string()))})
    >>> EveryTenthBatch().match_batch(b, None).to_pylist()
    [True, False, False]
    """

    def match_batch(self, batch: pa.RecordBatch, context) -> pa.BooleanArray:
        text = property_array(batch.column("properties"), "SequenceId")
        digits = pc.fill_null(pc.utf8_is_digit(text), False)
        seq = pc.cast(pc.if_else(digits, text, pa.scalar("0")), pa.int64())
        return pc.and_(digits, pc.and_(pc.equal(pc.remainder(seq, 10), 0), pc.greater(seq, 100)))


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

    >>> load_filter("storelib.nowhere:Even")  # doctest: +NORMALIZE_WHITESPACE
    Traceback (most recent call last):
    ...
    storelib.model.errors.FilterClassError: filter_class: cannot import module 'storelib.nowhere': ModuleNotFoundError:
        No module named 'storelib.nowhere' (got 'storelib.nowhere:Even')
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
                    raise FilterClassError(
                        "filter_class_source", f"cannot run the source of {name}: {type(e).__name__}: {e}", value=name
                    ) from None
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
            raise FilterClassError(
                "filter_class", f"cannot import module {module_name!r}: {type(e).__name__}: {e}", value=name
            ) from None
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
        raise FilterClassError(
            "filter_class", f"{name} cannot be built without arguments: {type(e).__name__}: {e}", value=name
        ) from None
    has_batch = callable(getattr(instance, "match_batch", None))
    if not has_batch and not callable(getattr(instance, "match", None)):
        raise FilterClassError(
            "filter_class", f"{name} has neither match(msg, context) nor match_batch(batch, context)", value=name
        )
    return LoadedFilter(name, crc, instance, has_batch)


# ---- a subscription's filter -----------------------------------------------------------------------
@dataclass(frozen=True)
class ClassFilter:
    """A class selector's filter for one (group, topic): loads the class, checks it is the registered
    one, and runs it over commitlog rows (:meth:`match_rows`), here or on an executor (:meth:`load_here`).

    >>> from storelib.filter.selector import MessageSelector
    >>> cf = ClassFilter.of(MessageSelector.by_class("storelib.filter.class_filter:Everything"), "GroupC", "TopicTest")
    >>> cf.match_rows(pa.table({"msg_id": ["A"]})).tolist(), cf.context.consumer_group
    ([True], 'GroupC')
    """

    name: str
    crc: int | None
    source: str | None
    group: str | None
    topic: str

    @classmethod
    def of(cls, selector: "MessageSelector", group: str | None, topic: str) -> "ClassFilter":
        if selector.filter_class is None:  # a class selector names its class (MessageSelector.parse)
            raise FilterClassError("filter_class", "must be an import path 'package.module:Class'", value=None)
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
                "filter_class",
                f"the class {self.name} loaded here (source crc {loaded.crc}) is not the one "
                f"registered{' by group ' + self.group if self.group else ''} for topic {self.topic} "
                f"(crc {self.crc}); subscribe again to use the changed class",
                value=self.name,
            )
        return loaded

    def match_rows(
        self,
        rows: pa.RecordBatch | pa.Table,
        failures: FilterFailures | None = None,
        loaded: LoadedFilter | None = None,
        why: str = "",
    ) -> np.ndarray:
        """Whether the filter keeps each of ``rows`` (commitlog rows): ``match_batch`` once over them, or
        ``match`` on a view of each row; failures go to ``failures``. ``loaded`` is the class if the caller
        loaded it already (None with ``why``: it could not be loaded, and nothing matches).

        >>> from storelib.filter.selector import MessageSelector
        >>> cf = ClassFilter.of(MessageSelector.by_class("storelib.filter.class_filter:EveryTenth"), None, "TopicTest")
        >>> rows = pa.table({"msg_id": ["A", "B"], "properties": pa.array(
        ...     [[("SequenceId", "110")], [("SequenceId", "7")]], pa.map_(pa.string(), pa.string()))})
        >>> cf.match_rows(rows).tolist()
        [True, False]
        """
        if loaded is None and not why:
            loaded = self.load()
        failures = failures if failures is not None else FilterFailures(self.name)
        return evaluate_batch(loaded, rows, self.context, failures, why)

    def load_here(self) -> tuple[LoadedFilter | None, str]:
        """The class where this runs (an executor): a changed module is reloaded once; a class that still
        differs from the registered one raises :class:`SubscriptionNotLatestError`; one that cannot be
        loaded here is None, with the reason.

        >>> from storelib.filter.selector import MessageSelector
        >>> ClassFilter.of(MessageSelector.by_class("nowhere_at_all:F"), None, "TopicTest").load_here()[0] is None
        True
        """
        try:
            try:
                return self.load(), ""
            except SubscriptionNotLatestError:
                return self.load(refresh=True), ""
        except FilterClassError as e:
            return None, f"{e} (on an executor, python {sys.version.split()[0]})"
