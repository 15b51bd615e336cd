"""Does the store hold together? The checks a store gets when it opens, and a fuller one on demand.

At open the cheap checks (table logs, file statistics, a lost tail); with ``full=True`` every data file of every
table read whole, the commitlog's offsets and its bodies' CRCs too. What each checks: ``docs/internals.md``.

>>> store_problems(store.context)
[]
>>> check_store(store.context)
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from storelib.context import StoreContext
from storelib.delta.files import map_io
from storelib.delta.health import damaged_files, table_problems
from storelib.delta.location import is_local
from storelib.delta.log import add_actions
from storelib.delta.table import Table
from storelib.encoding.record import crc_mismatches, message_lengths
from storelib.maintenance.lost_tail import lost_tail_problems
from storelib.model.errors import StoreCorruptedError
from storelib.storage.commitlog import COMMITLOG_MARKER
from storelib.storage.dispatched import REPUT_MARKER, ahead_of_commitlog, dispatch_targets
from storelib.storage.expired import bridged, read_runs

__all__ = ["store_problems", "check_store"]

#: Repair hint for a dispatched table that lost its footing (they are rebuilt from the commitlog).
_REBUILD = (
    "commit the commitlog's lost tail back (storelib repair) where it is found, or else move the consume_queue, "
    "consume_queue_ext and index folders away to rebuild them"
)


def check_store(ctx: StoreContext) -> None:
    """Raise :class:`~storelib.model.errors.StoreCorruptedError` when the checks across tables find a
    problem (the tables themselves were checked by ``StoreContext.open``)."""
    problems = _across_tables(ctx, full=False) + lost_tail_problems(ctx.tables.commitlog)
    if problems:
        raise StoreCorruptedError(problems, ctx.root)


def store_problems(ctx: StoreContext, *, full: bool = False) -> list[str]:
    """Every problem found (see the module's description); ``[]`` for a sound store. ``full`` also reads every
    data file of every table whole, and checks each commitlog body against its CRC."""
    tables = ctx.tables.by_name()
    problems = [p for t in tables.values() for p in table_problems(t)]
    if problems:  # the checks across tables read these logs
        return problems
    if full:
        targets = dispatch_targets(ctx.tables, ctx.config)
        for name, table in tables.items():
            check = _crcs if table is ctx.tables.commitlog else None
            problems += damaged_files(table, _repair_of(name, targets), check)
        if not problems:
            problems += _queue_continuity(ctx.tables.consume_queue)
    return problems + _across_tables(ctx, full and not problems) + lost_tail_problems(ctx.tables.commitlog)


def _queue_continuity(consume_queue: Table) -> list[str]:
    """Each queue's units hold every queue offset from its first to its last once (retention cuts only below)."""
    units = consume_queue.read_arrow(columns=["topic", "queue_id", "queue_offset"])
    if not units.num_rows:
        return []
    spans = units.group_by(["topic", "queue_id"], use_threads=False).aggregate(
        [
            ("queue_offset", "count"),
            ("queue_offset", "count_distinct"),
            ("queue_offset", "min"),
            ("queue_offset", "max"),
        ]
    )
    out = []
    for row in spans.to_pylist():
        lo, hi, n, distinct = (row[f"queue_offset_{k}"] for k in ("min", "max", "count", "count_distinct"))
        if n != distinct or n != hi - lo + 1:
            out.append(
                f"consume_queue: queue {row['topic']}:{row['queue_id']} holds {n} units ({distinct} distinct) for "
                f"queue offsets {lo}..{hi}: some are missing or doubled; {_rebuild('consume_queue')}"
            )
    return out


def _rebuild(name: str) -> str:
    return f"move the {name} folder away and dispatch again to rebuild it"


def _repair_of(name: str, derived: dict) -> str:
    if name == "commitlog":
        return "restore it from a copy: its messages are nowhere else"
    if name in derived:
        return _rebuild(name)
    if name.endswith("_summary"):
        return f"move the {name} folder away: summaries only let filtered reads skip files"
    return "restore it from a copy"


def _crcs(rows: pa.Table) -> str | None:
    bad = crc_mismatches(rows)
    if not len(bad):
        return None
    first = rows.column("physical_offset")[int(bad[0])].as_py()
    return f"{len(bad)} message bodies do not match their CRCs (the first at commitlog offset {first})"


def _across_tables(ctx: StoreContext, full: bool) -> list[str]:
    targets = dispatch_targets(ctx.tables, ctx.config)
    tables = [ctx.tables.commitlog, *targets.values()]  # their logs, read at once on an object store
    commitlog, *snapshots = map_io(lambda t: t.snapshot(), tables, remote=not is_local(ctx.root))
    runs = read_runs(ctx.tables.commitlog_expired)  # not on map_io's threads: its reads may use them
    end = Table.marker(commitlog, COMMITLOG_MARKER)
    markers = {name: Table.marker(snapshot, REPUT_MARKER) for name, snapshot in zip(targets, snapshots)}
    problems = [f"{p}: {_REBUILD}" for p in ahead_of_commitlog(markers, end)]
    actions = add_actions(commitlog)
    problems += _commitlog_ranges(actions, end, _longest_message(ctx), runs)
    if full and not problems:
        problems += _commitlog_continuity(ctx.tables.commitlog, actions, end, runs)
    return problems


def _longest_message(ctx: StoreContext) -> int:
    """The most bytes one stored message can take: the largest body, a 16-bit properties length,
    the longest topic, both hosts IPv6."""
    return int(
        message_lengths(np.array([ctx.config.max_message_size]), np.array([255]), np.array([2**15 - 1]), True, True)[0]
    )


def _commitlog_ranges(actions: pa.Table, end: int, longest: int, runs: dict[int, int]) -> list[str]:
    if actions.num_rows == 0:
        return []
    lo = actions.column("min.physical_offset").to_numpy(zero_copy_only=False)
    hi = actions.column("max.physical_offset").to_numpy(zero_copy_only=False)
    paths = actions.column("path").to_pylist()
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    out = []
    for i in np.flatnonzero(lo[1:] <= hi[:-1])[:3]:
        out.append(
            f"commitlog files {paths[order[i]]} and {paths[order[i + 1]]} hold the same offsets ({lo[i + 1]}..{hi[i]})"
        )
    # removed runs past the first file are spans too (a file's range, or the whole file, may be gone)
    kept = [(s, e - 1) for s, e in runs.items() if e > lo[0]]
    span_lo = np.concatenate([lo, np.array([s for s, _ in kept], dtype=lo.dtype)])
    span_hi = np.concatenate([hi, np.array([e for _, e in kept], dtype=hi.dtype)])
    by_lo = np.argsort(span_lo, kind="stable")
    span_lo, reach = span_lo[by_lo], np.maximum.accumulate(span_hi[by_lo])
    for i in np.flatnonzero(span_lo[1:] - reach[:-1] > longest)[:3]:
        out.append(
            f"commitlog offsets {reach[i]}..{span_lo[i + 1]} are missing between two files: a data file was lost"
        )
    last = reach[-1]
    if not last < end <= last + longest:
        out.append(
            f"the commitlog's end marker {end} does not follow its last message at offset {last}: "
            "its log and its files disagree"
        )
    return out


def _commitlog_continuity(commitlog: Table, actions: pa.Table, end: int, runs: dict[int, int]) -> list[str]:
    if actions.num_rows == 0:
        return []
    paths = [commitlog.path_of(p) for p in actions.column("path").to_pylist()]
    rows = commitlog.read_arrow(paths=paths, columns=["physical_offset", "size"])
    rows = rows.sort_by("physical_offset")
    offset = rows.column("physical_offset").to_numpy()
    size = rows.column("size").to_numpy().astype(np.int64)
    nxt = offset + size
    broken = np.array(
        [i for i in np.flatnonzero(offset[1:] != nxt[:-1]) if not bridged(runs, int(nxt[i]), int(offset[i + 1]))],
        dtype=np.int64,
    )
    out = [
        f"commitlog message at offset {offset[i]} (size {size[i]}) is followed by one at {offset[i + 1]}, "
        f"not at {nxt[i]}"
        for i in broken[:3]
    ]
    if nxt[-1] != end and not bridged(runs, int(nxt[-1]), end):
        out.append(f"the commitlog's last message ends at {nxt[-1]}, its end marker says {end}")
    if len(broken) > 3:
        out.append(f"... {len(broken) - 3} more breaks in the commitlog's offsets")
    return out
