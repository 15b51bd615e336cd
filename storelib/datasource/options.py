"""The ``rocketmq`` data source's options, checked once, and the shapes of its tables.

Details: ``docs/internals.md``, section storelib.datasource.options.

>>> o = SourceOptions.parse({"path": "/data/store", "table": "messages_by_key"})
>>> o.store, o.table, o.schema().fieldNames()[:3]
('/data/store', 'messages_by_key', ['topic', 'key', 'kind'])
>>> o.arrow_schema().field("key").type
DataType(string)
>>> SourceOptions.parse({})  # doctest: +NORMALIZE_WHITESPACE
Traceback (most recent call last):
storelib.model.errors.DataSourceOptionError: store: the rocketmq data source needs the store's path:
    .option("store", path) or .load(path)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Mapping

import pyarrow as pa

from storelib.delta.spec import spark_schema
from storelib.model.errors import DataSourceOptionError
from storelib.storage.schema import COMMITLOG

__all__ = ["SourceOptions", "MESSAGES", "MESSAGES_BY_KEY", "TABLES"]

#: One row per message: the commitlog's columns (its internal clustering sequence left out).
MESSAGES = pa.schema([f for f in COMMITLOG.arrow if f.name != "cluster_seq"])
#: One row per message and key it is indexed under (each of its KEYS, and its UNIQ_KEY).
MESSAGES_BY_KEY = pa.schema(
    [
        pa.field("topic", pa.string()),
        pa.field("key", pa.string()),
        pa.field("kind", pa.string()),
        *[f for f in MESSAGES if f.name != "topic"],
    ]
)
TABLES = {"messages": MESSAGES, "messages_by_key": MESSAGES_BY_KEY}
_KNOWN = {
    "store",
    "path",
    "table",
    "group",
    "topic",
    "startingoffsets",
    "maxmessagespertrigger",
    "commitoffsets",
    "partitions",
    "checkpointlocation",
}
_STARTS = ("group", "earliest", "latest")


@dataclass(frozen=True)
class SourceOptions:
    """The data source's options, checked (option names are case-insensitive, as Spark's are)."""

    store: str
    table: str = "messages"
    group: str | None = None
    topic: str | None = None
    starting_offsets: str = "group"
    max_messages_per_trigger: int | None = None
    commit_offsets: bool = True
    partitions: int | None = None
    checkpoint: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool = False, writing: bool = False) -> "SourceOptions":
        o = {str(k).lower(): v for k, v in dict(options).items()}
        unknown = sorted(set(o) - _KNOWN)
        if unknown:
            raise DataSourceOptionError(
                unknown[0], f"is not an option of the rocketmq data source; it takes {sorted(_KNOWN)}"
            )
        store = o.get("store") or o.get("path")
        if not store:
            raise DataSourceOptionError(
                "store", 'the rocketmq data source needs the store\'s path: .option("store", path) or .load(path)'
            )
        store = str(store).rstrip("/")
        if "://" not in store:
            store = os.path.abspath(store)
        table = o.get("table", "messages")
        if table not in TABLES:
            raise DataSourceOptionError("table", f"must be one of {sorted(TABLES)}", value=table)
        start = str(o.get("startingoffsets", "group")).lower()
        if start not in _STARTS:
            raise DataSourceOptionError(
                "startingOffsets", f"must be one of {list(_STARTS)}", value=o["startingoffsets"]
            )
        out = cls(
            store,
            table,
            o.get("group"),
            o.get("topic"),
            start,
            _positive(o, "maxmessagespertrigger", "maxMessagesPerTrigger"),
            _flag(o.get("commitoffsets", "true")),
            _positive(o, "partitions", "partitions"),
            o.get("checkpointlocation"),
        )
        if streaming:
            if out.table != "messages":
                raise DataSourceOptionError(
                    "table", "a stream reads messages; messages_by_key is for batch reads", value=out.table
                )
            for name, value in (("group", out.group), ("topic", out.topic)):
                if not value:
                    raise DataSourceOptionError(
                        name, f'a rocketmq stream consumes as a group: set .option("{name}", ...)'
                    )
        if writing and out.table != "messages":
            raise DataSourceOptionError("table", "writes take messages", value=out.table)
        return out

    def arrow_schema(self) -> pa.Schema:
        return TABLES[self.table]

    def schema(self):
        """The Spark schema of the rows this source reads."""
        return spark_schema(self.arrow_schema())


def _positive(o: Mapping[str, str], key: str, name: str) -> int | None:
    if key not in o:
        return None
    try:
        n = int(str(o[key]))
    except ValueError:
        n = 0
    if n < 1:
        raise DataSourceOptionError(name, "must be a positive integer", value=o[key])
    return n


def _flag(value: str) -> bool:
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise DataSourceOptionError("commitOffsets", "must be true or false", value=value)
    return text == "true"
