"""The store in plain SQL: temporary views over its tables, and the parameterised files in ``sql/``.

:func:`register_views` names each table's current snapshot (``commitlog``, ``consume_queue``,
``consume_queue_ext``, ``index``, ``topic_config``; the queue tables without units below their queue's
min offset, which retention passed) plus ``messages_by_key``, the index joined to the messages it points
at. Files in ``sql/`` are one statement each, with a header naming their parameters (``-- :topic string``);
:func:`run_file` binds the values as Spark SQL parameters, so a value is never part of the statement's text.

    storelib sql messages_by_key topic=OrderEvents key=order-42 --store ./data/quickstart

>>> parse_parameters("-- :topic string\\n-- :max_num int = 32\\nSELECT 1")
{'topic': ('string', None), 'max_num': ('int', '32')}
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from storelib.model.errors import SessionError, StoreError
from storelib.session import delta_available, delta_settings, shared_file
from storelib.storage.consume_queue import moved_min_offsets
from storelib.store import MessageStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from storelib.store import MessageStore

__all__ = [
    "register_views",
    "run_file",
    "parse_parameters",
    "bind",
    "sql_file",
    "parse_assignments",
    "SqlParameterError",
    "SQL_DIR",
]

SQL_DIR = shared_file("sql")
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
    from storelib.datasource import register  # PySpark's data source classes: with the session, not the command

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


def sql_file(name: str | Path) -> Path:
    """The SQL file ``name`` names: a path, else a file of ``sql/`` by its name (``.sql`` optional); a name of
    neither raises :class:`SqlParameterError` listing the files of ``sql/``.

    >>> sql_file("messages_by_key").name, sql_file(SQL_DIR / "message_by_id.sql").name
    ('messages_by_key.sql', 'message_by_id.sql')
    >>> sql_file("nope")   # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    storelib.sql.SqlParameterError: FILE: no SQL file 'nope', neither a path nor in sql/ (consume_queue_depth, ...)
    """
    path = Path(name)
    if path.is_file():
        return path
    for candidate in (SQL_DIR / path.name, SQL_DIR / (path.name + ".sql")):
        if path.parent == Path(".") and candidate.is_file():
            return candidate
    known = ", ".join(sorted(p.stem for p in SQL_DIR.glob("*.sql")))
    raise SqlParameterError("FILE", f"no SQL file {str(name)!r}, neither a path nor in sql/ ({known})")


def bind(path: str | Path, params: Mapping[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """The statement of SQL file ``path`` and its parameters' values, checked against the file's header: an
    unknown or missing parameter, or a value of the wrong kind, raises :class:`SqlParameterError`. Reads
    the file alone: call it before a session starts, so a mistake costs no Spark start.

    >>> bind(SQL_DIR / "message_by_id.sql", {"msg_id": "7F00"})[1]
    {'msg_id': '7F00'}
    >>> bind(SQL_DIR / "messages_by_key.sql", {"topic": "T"})
    Traceback (most recent call last):
    ...
    storelib.sql.SqlParameterError: key: messages_by_key.sql needs :key (string)
    """
    path = sql_file(path)
    text = path.read_text()
    declared = parse_parameters(text)
    given = dict(params or {})
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise SqlParameterError("params", f"{path.name} takes {sorted(declared)}, not {unknown}")
    args = {}
    for name, (kind, default) in declared.items():
        raw = given.get(name, default)
        if raw is None:
            raise SqlParameterError(name, f"{path.name} needs :{name} ({kind})")
        args[name] = _convert(name, kind, raw)
    return text.strip().rstrip(";"), args


def parse_assignments(items: Sequence[str]) -> dict[str, str]:
    """``name=value`` arguments as a dict; one without ``=`` raises :class:`SqlParameterError`.

    >>> parse_assignments(["topic=Orders", "key=a=b"])
    {'topic': 'Orders', 'key': 'a=b'}
    """
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise SqlParameterError("params", "are name=value, one an argument", value=item)
        out[name] = value
    return out


def run_file(spark: "SparkSession", path: str | Path, params: Mapping[str, Any] | None = None) -> "DataFrame":
    """Run one SQL file with its parameters bound (not formatted into the text); views must be registered.
    ``path`` is a path or the name of a file of ``sql/`` (:func:`sql_file`).

    >>> _ = register_views(spark, store)
    >>> run_file(spark, SQL_DIR / "messages_by_key.sql", {"topic": "TopicTest", "key": "order-1"}).count()
    1
    """
    text, args = bind(path, params)
    return spark.sql(text, args=args)


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
    """``python -m storelib.sql``: what ``storelib sql`` does (:mod:`storelib.admin`), with ``--store`` first.
    The file and its parameters are checked before Spark starts; the store defaults to ``$STORELIB_STORE``."""
    env = os.environ.get("STORELIB_STORE")
    parser = argparse.ArgumentParser(description="Run a storelib SQL file against a store.")
    parser.add_argument("--store", default=env, required=env is None, help="root folder or URI ($STORELIB_STORE)")
    parser.add_argument("file", help="a .sql file, or the name of one in sql/ (messages_by_key, ...)")
    parser.add_argument("params", nargs="*", help="name=value for each parameter in the file's header")
    args = parser.parse_args(argv)
    try:
        text, bound = bind(args.file, parse_assignments(args.params))
        store = MessageStore.open(args.store)  # a wrong path is said before Spark starts, too
        register_views(store.spark, store)  # Spark starts here, when first asked for
        store.spark.sql(text, args=bound).show(truncate=False)
    except StoreError as e:
        print(f"sql failed: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
