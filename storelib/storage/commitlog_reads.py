"""Reading the commitlog back by offset: its smallest offset, and the rows or messages at given offsets.

A pull, a look-up by id or key, a retry and a delivery all end here: they know commitlog offsets
(from consume queue units or index entries) and want those rows. Only the files and row groups whose
offset statistics can hold one are read, with pyarrow on this process, no Spark job.

>>> t = store.context.tables.commitlog
>>> read_messages(t, t.view().actions, [0])[0].msg_id == r.msg_id
True
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.delta.files import fragment, map_io
from storelib.delta.log import add_actions
from storelib.delta.stats import ranges
from storelib.delta.table import Table
from storelib.model.message import MESSAGE_COLUMNS, StoredMessage
from storelib.storage.commitlog import is_clustered
from storelib.storage.schema import COMMITLOG

if TYPE_CHECKING:
    from deltalake import DeltaTable

__all__ = ["commitlog_min_offset", "min_physical_offset", "read_messages", "message_rows", "read_rows", "message_batch"]


def commitlog_min_offset(commitlog_snapshot: "DeltaTable") -> int:
    """The smallest physical offset still in the commitlog (``getMinPhyOffset``); 0 when it is empty.

    From the add actions' statistics alone. A file without statistics could hold anything, so
    its presence gives 0 (nothing is then cleaned on its account).

    >>> commitlog_min_offset(store.context.tables.commitlog.snapshot())
    0
    """
    return min_physical_offset(add_actions(commitlog_snapshot))


def min_physical_offset(actions: pa.Table) -> int:
    """:func:`commitlog_min_offset` from the commitlog's add actions.

    >>> min_physical_offset(store.context.tables.commitlog.view().actions), min_physical_offset(pa.table({"path": []}))
    (0, 0)
    """
    if actions.num_rows == 0 or "min.physical_offset" not in actions.column_names:
        return 0
    column = actions.column("min.physical_offset")
    if column.null_count:
        return 0
    return int(pc.min(column).as_py())


def read_messages(
    commitlog: Table, actions: pa.Table, offsets: Sequence[int], files_touched: dict[str, int] | None = None
) -> dict[int, StoredMessage]:
    """The messages at these commitlog offsets, by offset (missing ones left out): :func:`message_rows`, made
    messages."""
    rows = message_rows(commitlog, actions, offsets, files_touched) if len(offsets) else None
    return {m.commitlog_offset: m for m in StoredMessage.from_rows(rows)} if rows is not None else {}


def message_rows(
    commitlog: Table, actions: pa.Table, offsets: Sequence[int], files_touched: dict[str, int] | None = None
) -> pa.Table:
    """The rows (:data:`MESSAGE_COLUMNS`) at these commitlog offsets (some), sorted, missing ones left out:
    only the files and row groups whose offset statistics hold one are read, with pyarrow on this process.

    ``actions`` are the commitlog's add actions (a warm :meth:`Table.view`'s). ``files_touched``,
    when given, gets how many data files were opened.

    >>> t = store.context.tables.commitlog
    >>> message_rows(t, t.view().actions, [0]).column("msg_id").to_pylist() == [r.msg_id]
    True
    """
    wanted = pa.array(sorted(set(int(o) for o in offsets)), pa.int64())
    holding = commitlog.holding(ranges(actions, "physical_offset"), "physical_offset", wanted)
    if files_touched is not None:
        files_touched["commitlog"] = holding.num_rows
    return read_rows(commitlog, commitlog.paths(holding), wanted, columns=MESSAGE_COLUMNS)


def read_rows(
    commitlog: Table, paths: Sequence[str], offsets: pa.Array, columns: Sequence[str] | None = None
) -> pa.Table:
    """The commitlog rows at ``offsets`` (sorted int64) among the data files ``paths``, in ``columns``
    (None: all), read with pyarrow; in a clustered file only the row groups holding them are decoded.

    >>> t = store.context.tables.commitlog
    >>> read_rows(t, t.files(t.snapshot()), pa.array([0], pa.int64())).column("msg_id").to_pylist() == [r.msg_id]
    True
    >>> read_rows(t, t.files(t.snapshot()), pa.array([0], pa.int64()), columns=["physical_offset"]).column_names
    ['physical_offset']
    """
    wanted = offsets.to_numpy()
    parts = [
        commitlog.read_keyed(
            [p for p in paths if not is_clustered(p)], "physical_offset", values=wanted, columns=columns
        )
    ]

    def clustered(path: str) -> pa.Table | None:  # rows are not in offset order: find their row groups first
        sorted_offsets, rows_at, firsts = _locator(path)
        at = np.searchsorted(sorted_offsets, wanted)
        found = at < len(sorted_offsets)
        found[found] &= sorted_offsets[at[found]] == wanted[found]
        if not found.any():
            return None
        their_rows = rows_at[at[found]]  # in the file
        their_groups = np.searchsorted(firsts, their_rows, side="right") - 1
        chosen = np.unique(their_groups)  # decoded in this order, one after the other
        sizes = np.diff(firsts)[chosen]
        decoded_firsts = np.cumsum(sizes) - sizes
        rows = commitlog.read_row_groups(path, chosen.tolist(), columns=columns)
        at_decoded = decoded_firsts[np.searchsorted(chosen, their_groups)] + their_rows - firsts[their_groups]
        return rows.take(at_decoded)  # by position: no row is tested

    parts.extend(p for p in map_io(clustered, list(filter(is_clustered, paths))) if p is not None)
    return pa.concat_tables(parts)


@functools.lru_cache(maxsize=64)
def _locator(path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A clustered file's physical offsets, sorted, with the row of each in the file, and the first row of
    each row group (and, last, the number of rows): one column read, once per process (data files never change).
    """
    found = fragment(path)  # its footer kept, opened without a HEAD where its size is known
    sizes = [found.metadata.row_group(i).num_rows for i in range(found.metadata.num_row_groups)]
    offsets = (
        found.to_table(columns=["physical_offset"], use_threads=False).column(0).to_numpy()
    )  # ranges read at once (pre-buffered)
    order = np.argsort(offsets, kind="stable").astype(np.int32)
    return offsets[order], order, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)


def message_batch(messages: Sequence["StoredMessage"]) -> pa.RecordBatch:
    """Stored messages as one Arrow batch of commitlog rows (what ``match_batch`` gets in a pull).

    >>> message_batch([store.query_by_id(r.msg_id)]).column("tags").to_pylist()
    ['TagA']
    """
    rows = [
        {
            "physical_offset": m.commitlog_offset,
            "size": m.size,
            "topic": m.topic,
            "queue_id": m.queue_id,
            "queue_offset": m.queue_offset,
            "sysflag": m.sysflag,
            "flag": m.flag,
            "body_crc": m.body_crc,
            "born_timestamp": m.born_timestamp,
            "born_host": m.born_host,
            "store_timestamp": m.store_timestamp,
            "store_host": m.store_host,
            "reconsume_times": m.reconsume_times,
            "prepared_transaction_offset": m.prepared_transaction_offset,
            "properties": list(m.properties.items()),
            "body": m.body,
            "msg_id": m.msg_id,
            "tags": m.tags,
            "keys": m.keys,
            "uniq_key": m.uniq_key,
            "cluster_seq": None,
        }
        for m in messages
    ]
    return pa.RecordBatch.from_pylist(rows, schema=COMMITLOG.arrow)
