"""``storelib sql FILE name=value ...``: run a SQL file of ``sql/`` (or any) against the store, through Spark.

FILE is a path, or the name of a file in ``sql/`` (``messages_by_key``). The file's header names its
parameters (``-- :key string``); the values are bound as Spark SQL parameters, never pasted into the text.
A missing or unknown parameter, or a value of the wrong kind, is refused before Spark starts (exit code 2);
so is a path that holds no store. The rows come back as a table (times in UTC), or JSON with ``--json``.

>>> top = argparse.ArgumentParser(); register(top.add_subparsers())
>>> top.parse_args(["sql", "messages_by_key", "topic=Orders", "key=k", "--store", "/tmp/s"]).params
['topic=Orders', 'key=k']
"""

from __future__ import annotations

import argparse

from storelib.admin.command import add_verb, open_store
from storelib.admin.output import Output
from storelib.cli import Progress, positive_int
from storelib.sql import SQL_DIR, bind, parse_assignments, register_views, sql_file
from storelib.store import MessageStore

__all__ = ["register"]


def _sql(store: MessageStore | None, args: argparse.Namespace, out: Output, progress: Progress) -> str | None:
    path = sql_file(args.file)
    text, values = bind(path, parse_assignments(args.params))  # every mistake of the call, before Spark starts
    with open_store(args) as opened:
        if not opened.context.spark_started:  # a start takes seconds: say why nothing shows yet
            progress.say(f"starting Spark to run {path.name}")
        register_views(opened.spark, opened)
        rows = opened.spark.sql(text, args=values).limit(args.limit + 1).toArrow().to_pylist()
    out.table(rows[: args.limit], nothing=f"{path.name} returned no rows")
    if len(rows) > args.limit and not out.as_json:
        return f"the first {args.limit} rows shown (--limit)"
    return None


def register(sub: "argparse._SubParsersAction") -> None:
    """Add ``sql`` to the command's parser.

    >>> sub = argparse.ArgumentParser().add_subparsers(); register(sub); sorted(sub.choices)
    ['sql']
    """
    p = add_verb(
        sub,
        "sql",
        _sql,
        "Run a SQL file (a path, or the name of one in sql/) with its parameters (starts Spark).\n\n"
        + __doc__.split("\n\n")[1],
        opens=False,
    )
    names = ", ".join(sorted(p.stem for p in SQL_DIR.glob("*.sql")))
    p.add_argument("file", help=f"a .sql file, or the name of one in sql/: {names}")
    p.add_argument("params", nargs="*", metavar="name=value", help="a value for each parameter of the file's header")
    p.add_argument("--limit", type=positive_int, default=100, help="most rows shown")
