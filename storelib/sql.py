"""The store in plain SQL: temporary views over its tables, and the parameterised files in ``sql/``.

:func:`register_views` names each table's current snapshot (``commitlog``, ``consume_queue``,
``consume_queue_ext``, ``index``, ``topic_config``; the queue tables without units below their queue's
min offset, which retention passed) plus ``messages_by_key``, the index joined to the messages it points
at. Files in ``sql/`` are one statement each, with a header naming their parameters (``-- :topic string``);
:func:`run_file` binds the values as Spark SQL parameters, so a value is never part of the statement's text.

    python -m storelib.sql --store ./data/quickstart sql/messages_by_key.sql topic=OrderEvents key=order-42

>>> parse_parameters("-- :topic string\\n-- :max_num int = 32\\nSELECT 1")
{'topic': ('string', None), 'max_num': ('int', '32')}
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from storelib.datasource import register
from storelib.model.errors import SessionError, StoreError
from storelib.session import delta_available, delta_settings, get_spark
from storelib.storage.consume_queue import moved_min_offsets
from storelib.store import MessageStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from storelib.store import MessageStore

__all__ = ["register_views", "run_file", "parse_parameters", "SQL_DIR"]

SQL_DIR = Path(__file__).resolve().parents[1] / "sql"
_PARAM = re.compile(r"^--\s*:(\w+)\s+(string|int|bigint|timestamp)\s*(?:=\s*(\S+))?\s*$")
_KINDS = {"string": str, "int": int, "bigint": int}


class SqlParameterError(StoreError):
    """A SQL file's parameter that is missing, unknown, or of the wrong kind."""


def register_views(spark: "SparkSession", store: "MessageStore", *, delta: bool = False) -> list[str]:
    """Register the store's tables (current snapshots) and the ``rocketmq`` source's ``messages`` and
    ``messages_by_key`` as temporary views.

    ``messages`` and ``messages_by_key`` answer filters on msg id, key, queue and time through the
    store's own look-ups (the data source's pushdown), so a query by key reads the index's hash slot,
    not the store. With ``delta=True`` the tables are read through Delta Spark (``VERSION AS OF`` works
    on ``delta.`path```); it must be in the session (:func:`storelib.session.delta_settings`).

    >>> register_views(spark, store)[-2:]
    ['messages', 'messages_by_key']
    >>> spark.sql("SELECT kind FROM messages_by_key WHERE topic = 'TopicTest' AND key = 'order-1'").first().kind
    'KEYS'
    """

    if delta and not delta_available(spark):
        raise SessionError(
            "spark.jars.packages",
            "this session has no Delta Spark; start it with storelib.session."
            f"get_spark() or with {delta_settings()['spark.jars.packages']!r}",
        )
    names = []
    for name in ("commitlog", "consume_queue", "consume_queue_ext", "index", "topic_config"):
        table = store.context.tables.by_name()[name]
        df = spark.read.format("delta").load(table.path) if delta else store.table(name)
        if name.startswith("consume_queue"):
            df = _served(spark, store, df)
        df.createOrReplaceTempView(name)
        names.append(name)
    register(spark)
    for name in ("messages", "messages_by_key"):
        # The always-true filter makes Spark hand the source every query's filters. PySpark 4.2 keeps the
        # plan of a pushed-down read on the relation, and a later query on it that pushes no filter
        # would reuse that plan (fixed upstream: apache/spark PythonScanBuilder keeps it per scan).
        source = spark.read.format("rocketmq").option("store", store.root).option("table", name).load()
        source.where("physical_offset >= 0").createOrReplaceTempView(name)
        names.append(name)
    return names


def _served(spark: "SparkSession", store: "MessageStore", units: "DataFrame") -> "DataFrame":
    """Queue units at or above their queue's min offset (where retention moved it)."""
    from pyspark.sql import functions as F

    queues = [
        (t, q) for t, c in store.context.topics.all().items() for q in range(max(c.read_queue_nums, c.write_queue_nums))
    ]
    mins = moved_min_offsets(store.context.tables.consume_queue, queues)
    if not mins:
        return units
    floor = spark.createDataFrame([(t, q, m) for (t, q), m in mins.items()], "topic string, queue_id int, _min bigint")
    return (
        units.join(F.broadcast(floor), ["topic", "queue_id"], "left")
        .where(F.col("_min").isNull() | (F.col("queue_offset") >= F.col("_min")))
        .select(*units.columns)
    )


def parse_parameters(text: str) -> dict[str, tuple[str, str | None]]:
    """The ``-- :name kind [= default]`` header lines of a SQL file."""
    out = {}
    for line in text.splitlines():
        m = _PARAM.match(line.strip())
        if m:
            out[m.group(1)] = (m.group(2), m.group(3))
    return out


def run_file(spark: "SparkSession", path: str | Path, params: Mapping[str, Any] | None = None) -> "DataFrame":
    """Run one SQL file with its parameters bound (not formatted into the text); views must be registered.

    >>> _ = register_views(spark, store)
    >>> run_file(spark, SQL_DIR / "messages_by_key.sql", {"topic": "TopicTest", "key": "order-1"}).count()
    1
    """
    text = Path(path).read_text()
    declared = parse_parameters(text)
    given = dict(params or {})
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise SqlParameterError("params", f"{Path(path).name} takes {sorted(declared)}, not {unknown}")
    args = {}
    for name, (kind, default) in declared.items():
        raw = given.get(name, default)
        if raw is None:
            raise SqlParameterError(name, f"{Path(path).name} needs :{name} ({kind})")
        args[name] = _convert(name, kind, raw)
    return spark.sql(text.strip().rstrip(";"), args=args)


def _convert(name: str, kind: str, raw: Any) -> Any:
    try:
        if kind == "timestamp":
            if isinstance(raw, dt.datetime):
                return raw
            if isinstance(raw, int) or str(raw).lstrip("-").isdigit():
                return dt.datetime.fromtimestamp(int(raw) / 1000, dt.timezone.utc)
            return dt.datetime.fromisoformat(str(raw))
        return _KINDS[kind](raw)
    except (TypeError, ValueError):
        raise SqlParameterError(name, f"must be a {kind}", value=raw) from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a storelib SQL file against a store.")
    parser.add_argument("--store", required=True, help="root folder or URI of the store")
    parser.add_argument("file", help="a .sql file, e.g. sql/messages_by_key.sql")
    parser.add_argument("params", nargs="*", help="name=value for each parameter in the file's header")
    args = parser.parse_args(argv)

    try:
        params = dict(p.split("=", 1) for p in args.params)
    except ValueError:
        print("parameters are name=value", file=sys.stderr)
        return 2
    try:
        spark = get_spark("storelib-sql")
        register_views(spark, MessageStore.open(args.store, spark))
        run_file(spark, args.file, params).show(truncate=False)
    except StoreError as e:
        print(f"sql failed: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
