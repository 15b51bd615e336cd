"""What dispatch has done, as every reader sees it: the ``reput`` marker each dispatched table keeps in its
Delta log, which tables dispatch writes, which messages get a consume queue unit at all, and where the
messages past a marker are (sent, not dispatched yet: the readers that find them too read them there).

>>> cq = store.context.tables.consume_queue
>>> cq.marker(cq.snapshot(), REPUT_MARKER) == store.max_offset()
True
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from storelib.delta.stats import Prune
from storelib.delta.table import Table
from storelib.model.config import StoreConfig
from storelib.model.message import SysFlag
from storelib.storage.tables import StoreTables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "REPUT_MARKER",
    "queued",
    "queued_expression",
    "queued_mask",
    "ahead_of_commitlog",
    "dispatch_targets",
    "dispatched_to",
    "undispatched_paths",
    "undispatched_rows",
]

#: The marker each dispatched table keeps: the commitlog offset up to which it holds rows.
REPUT_MARKER = "reput"


def queued(rows: "DataFrame") -> "DataFrame":
    """Messages that get a consume queue row: normal and committed ones (not prepared, not rolled back).

    >>> queued(store.messages("TopicTest")).count()       # not prepared, not rolled back
    1
    """
    from pyspark.sql import functions as F  # pyspark is not imported by the pyarrow-only paths

    kind = F.col("sysflag").bitwiseAND(F.lit(SysFlag.TRANSACTION_ROLLBACK_TYPE))
    return rows.where(kind.isin(*SysFlag.QUEUED_TRANSACTION_TYPES))


def queued_expression():
    """:func:`queued` as a pyarrow expression over ``sysflag``, for rows read with pyarrow.

    >>> import pyarrow as pa
    >>> pa.table({"sysflag": [0, 4, 8, 12]}).filter(queued_expression()).column(0).to_pylist()
    [0, 8]
    """
    kind = pc.bit_wise_and(pc.field("sysflag"), pa.scalar(SysFlag.TRANSACTION_ROLLBACK_TYPE, pa.int32()))
    return kind.isin(list(SysFlag.QUEUED_TRANSACTION_TYPES))


def queued_mask(sysflag: "pa.Array | pa.ChunkedArray") -> pa.Array:
    """:func:`queued` over a ``sysflag`` array already read: a boolean array, no expression evaluated row by row.

    >>> queued_mask(pa.array([0, 4, 8, 12], pa.int32())).to_pylist()
    [True, False, True, False]
    """
    kind = pc.bit_wise_and(sysflag, pa.scalar(SysFlag.TRANSACTION_ROLLBACK_TYPE, sysflag.type))
    return pc.is_in(kind, pa.array(SysFlag.QUEUED_TRANSACTION_TYPES, sysflag.type))


def ahead_of_commitlog(markers: Mapping[str, int], end: int) -> list[str]:
    """The dispatched tables whose ``reput`` marker is past the commitlog's end ``end``: the commitlog lost
    commits they point into, and sends would hand out those offsets and message ids again.

    >>> ahead_of_commitlog({"consume_queue": 900, "index": 400}, 500)
    ["consume_queue is dispatched to commitlog offset 900, past the commitlog's end 500"]
    """
    return [
        f"{name} is dispatched to commitlog offset {marker}, past the commitlog's end {end}"
        for name, marker in markers.items()
        if marker > end
    ]


def dispatch_targets(tables: StoreTables, config: StoreConfig) -> dict[str, Table]:
    """The tables dispatch writes, in commit order: the ext rows land before the consume queue rows
    that point at them (putMessagePositionInfoWrapper), the index last (when ``message_index_enable``).

    >>> list(dispatch_targets(store.context.tables, store.context.config))
    ['consume_queue_ext', 'consume_queue', 'index']
    """
    targets = {"consume_queue_ext": tables.consume_queue_ext, "consume_queue": tables.consume_queue}
    if config.message_index_enable:
        targets["index"] = tables.index
    return targets


def dispatched_to(tables: StoreTables, config: StoreConfig) -> int:
    """The commitlog offset every dispatched table holds rows up to (the lowest ``reput`` marker): messages
    at or past it wait for dispatch.

    >>> dispatched_to(store.context.tables, store.context.config) == store.max_offset()
    True
    """
    targets = dispatch_targets(tables, config).values()
    return min(t.view(markers=[REPUT_MARKER]).marker(REPUT_MARKER) for t in targets)


def undispatched_paths(commitlog: Table, actions: pa.Table, marker: int) -> list[str]:
    """The commitlog files (of add ``actions``) that can hold offsets at or past ``marker``: where the messages
    a table dispatched to ``marker`` does not hold yet are.

    >>> t = store.context.tables.commitlog
    >>> undispatched_paths(t, t.view().actions, store.max_offset()), len(undispatched_paths(t, t.view().actions, 0))
    ([], 1)
    """
    return commitlog.paths(commitlog.prune(actions, Prune(between={"physical_offset": (marker, 2**62)})))


def undispatched_rows(
    commitlog: Table, marker: int, columns: Sequence[str], filter: pc.Expression | None = None
) -> pa.Table:
    """The commitlog rows at or past ``marker`` that pass ``filter``, in ``columns``, read with pyarrow.

    >>> t = store.context.tables.commitlog
    >>> undispatched_rows(t, 0, ["topic"]).column("topic").to_pylist(), undispatched_rows(t, 10**9, ["topic"]).num_rows
    (['TopicTest'], 0)
    """
    paths = undispatched_paths(commitlog, commitlog.view().actions, marker)
    past = pc.field("physical_offset") >= marker
    return commitlog.read_arrow(paths=paths, columns=list(columns), filter=past if filter is None else past & filter)
