"""Small writes of whole rows through deltalake's own operations: append, replace and delete by key.

The settings tables (topics, transaction checkers) and the record of expired runs take a row or two at a
time, replacing a key's rows in one commit. deltalake's ``write_deltalake`` and ``delete`` do that; this
module is their one caller, with the table's storage options, the operation named in the commit, and
the predicate built here from column names and quoted values (never from text a caller wrote), so
views of the table in this process see the commit at once (:meth:`~storelib.delta.table.Table.touched`).

>>> from storelib.storage.schema import TRANSACTION_CHECKER
>>> t = Table(tmp + "/checkers", TRANSACTION_CHECKER).ensure()
>>> import datetime as dt
>>> row = {"producer_group": "PG", "checker": "m:f", "updated_at": dt.datetime.now(dt.timezone.utc)}
>>> append_rows(t, pa.Table.from_pylist([row], schema=TRANSACTION_CHECKER.arrow), "DOC")
>>> delete_rows(t, {"producer_group": "PG"}, "DOC"), t.read_arrow().num_rows
(None, 0)
"""

from __future__ import annotations

from typing import Mapping

import pyarrow as pa
from deltalake import CommitProperties, write_deltalake

from storelib.delta.table import Table

__all__ = ["append_rows", "replace_rows", "delete_rows", "equals"]


def equals(where: Mapping[str, str]) -> str:
    """A deltalake predicate: each string column equal to its value, quotes doubled.

    >>> equals({"topic": "it's"})
    "topic = 'it''s'"
    """
    if not where or not all(name.isidentifier() for name in where):
        raise ValueError(f"a predicate needs plain column names: {list(where)}")
    return " AND ".join(f"{name} = '{str(value).replace(chr(39), chr(39) * 2)}'" for name, value in where.items())


def _props(operation: str) -> CommitProperties:
    return CommitProperties(custom_metadata={"storelib.operation": operation})


def append_rows(table: Table, data: pa.Table, operation: str) -> None:
    """Append ``data`` (the table's columns) in one commit."""
    write_deltalake(
        table.path, data, mode="append", storage_options=table.storage_options, commit_properties=_props(operation)
    )
    table.touched()


def replace_rows(table: Table, data: pa.Table, where: Mapping[str, str], operation: str) -> None:
    """Replace the rows matching ``where`` (columns equal to values) with ``data``, in one commit.

    >>> import pyarrow.compute as pc
    >>> t = store.context.tables.topic_config
    >>> before = t.read_arrow().num_rows
    >>> replace_rows(t, t.read_arrow(filter=pc.field("topic") == "TopicTest"), {"topic": "TopicTest"}, "DOC")
    >>> t.read_arrow().num_rows == before
    True
    """
    write_deltalake(
        table.path,
        data,
        mode="overwrite",
        predicate=equals(where),
        storage_options=table.storage_options,
        commit_properties=_props(operation),
    )
    table.touched()


def delete_rows(table: Table, where: Mapping[str, str], operation: str) -> None:
    """Delete the rows matching ``where`` in one commit."""
    table.snapshot().delete(equals(where), commit_properties=_props(operation))
    table.touched()
