"""A lost tail: commitlog data files that no commit names but whose messages continue the log where it ends.

A send's commit writes its data file, then its log entry. When the entry is lost (a power cut with
``ASYNC_FLUSH``, a log restored from an older copy), the acked messages sit in a file the log does not
name, and the next send would hand out their offsets and ids again. :func:`lost_tail` finds such files
with one listing of the commitlog's folder (and the footers of the few files newer than the newest
committed one); :func:`repair_lost_tail` checks their offsets, ids, body CRCs and queue offsets and
commits them back, as RocketMQ's recovery keeps every whole message it finds past the last checkpoint.

A file whose commit may still be under way is not a lost one: on a disk, the check takes the commitlog's
turn (every send writes and commits inside it) or else looks only at files older than :data:`GRACE_S`;
on an object store it always does. Files a Spark job places (``placed-*``) are never acked before their
commit, and a rerun of the job writes them again: they are orphans for vacuum, not a lost tail.

>>> lost_tail(store.context.tables.commitlog)
[]
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from urllib.parse import unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from deltalake import DeltaTable

from storelib.delta.location import filesystem
from storelib.delta.log import add_actions
from storelib.delta.sink import written_file
from storelib.delta.table import Table
from storelib.encoding.record import crc_mismatches
from storelib.storage.commitlog import COMMITLOG_MARKER, queue_marker

__all__ = ["LostFile", "Repaired", "lost_tail", "lost_tail_problems", "repair_lost_tail", "GRACE_S"]

#: A commitlog file younger than this may belong to a commit under way (another machine's, or one in this
#: machine's turn while the check cannot take it): not reported as lost until it is older.
GRACE_S = 60.0

#: What a send's own files are called (a job's placed files are ``placed-*``).
_SENT_PREFIX = "part-"


@dataclass(frozen=True)
class LostFile:
    """A commitlog data file no commit names, continuing the log: its messages start at ``first`` (where the
    log, or the lost file before it, ends) and end before ``end``."""

    name: str
    first: int
    end: int


@dataclass
class Repaired:
    """What :func:`repair_lost_tail` did: the files committed back (as ``version``) and those it could not."""

    files: list[LostFile] = field(default_factory=list)
    messages: int = 0
    version: int | None = None
    refused: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """One line per file, for the command.

        >>> Repaired([LostFile("part-1.parquet", 0, 90)], 1, 3).lines()
        ['part-1.parquet: committed back at version 3 (commitlog offsets [0, 90))']
        """
        done = [
            f"{f.name}: committed back at version {self.version} (commitlog offsets [{f.first}, {f.end}))"
            for f in self.files
        ]
        return done + self.refused


def lost_tail(commitlog: Table) -> list[LostFile]:
    """The commitlog's lost tail, in offset order (``[]`` for a sound store): see the module's description."""
    with commitlog.try_commit_turn() as held:
        snapshot = commitlog.snapshot()
        return _continuing(commitlog, snapshot, 0.0 if held else GRACE_S)


def lost_tail_problems(commitlog: Table) -> list[str]:
    """:func:`lost_tail` as the problems ``verify`` lists and ``open`` refuses with.

    >>> lost_tail_problems(store.context.tables.commitlog)
    []
    """
    return [
        f"commitlog data file {f.name} holds messages from offset {f.first}, where the log ends, but no commit "
        "names it: a commit was lost (storelib repair, or MessageStore.repair, commits it back)"
        for f in lost_tail(commitlog)
    ]


def repair_lost_tail(commitlog: Table) -> Repaired:
    """Commit the lost tail back in one commit, after checking each file's messages: offsets continuous from
    the log's end, message ids naming those offsets, body CRCs, and queue offsets continuing each queue's.
    The first file that fails and every one after it stay out, each reported with what is wrong.

    >>> repair_lost_tail(store.context.tables.commitlog).lines()
    []
    """
    out = Repaired()
    with commitlog.commit_turn() as snapshot:
        assert snapshot is not None  # commit_turn() yields one
        lost = _continuing(commitlog, snapshot, 0.0)
        queues: dict[str, int] = {}
        markers: dict[str, int] = {}
        files = []
        for i, lost_file in enumerate(lost):
            rows = _rows(commitlog, lost_file.name)
            wrong = _wrong(rows, lost_file.first, snapshot, queues)
            if wrong:
                out.refused += [f"{lost_file.name}: not recovered, {wrong}"]
                out.refused += [f"{f.name}: not recovered, it follows {lost_file.name}" for f in lost[i + 1 :]]
                break
            files.append(written_file(commitlog.path, lost_file.name, commitlog.spec.arrow))
            out.files.append(lost_file)
            out.messages += rows.num_rows
            markers = {COMMITLOG_MARKER: lost_file.end, **queues}
        if files:
            out.version = commitlog.commit(snapshot, files, markers=markers, operation="REPAIR")
    return out


def _continuing(commitlog: Table, snapshot: DeltaTable, grace_s: float) -> list[LostFile]:
    """The files sent (``part-*``), older than ``grace_s``, named by no add action of ``snapshot`` and no older
    than its newest file, that continue its end one after another."""
    actions = add_actions(snapshot)
    end = Table.marker(snapshot, COMMITLOG_MARKER)
    named = {unquote(p) for p in actions.column("path").to_pylist()}
    times = actions.column("modification_time") if "modification_time" in actions.column_names else None
    newest = pc.max(times).cast(pa.int64()).as_py() / 1000 if times is not None and actions.num_rows else 0.0
    fs, base = filesystem(commitlog.path)
    now = time.time()
    firsts: dict[int, str] = {}
    for info in fs.get_file_info(pafs.FileSelector(base, recursive=False)):
        name = info.base_name
        if info.type != pafs.FileType.File or not name.startswith(_SENT_PREFIX) or name in named:
            continue
        modified = info.mtime.timestamp() if info.mtime is not None else now
        if modified < newest - 1 or now - modified < grace_s:  # older than the log's files, or maybe under way
            continue
        first = _first_offset(fs, info.path)
        if first is not None and first >= end:
            firsts.setdefault(first, name)
    out: list[LostFile] = []
    while end in firsts:
        name = firsts.pop(end)
        rows = _rows(commitlog, name, ["physical_offset", "size"])
        last = int(pc.max(rows.column("physical_offset")).as_py())
        size = int(rows.column("size").to_numpy()[np.argmax(rows.column("physical_offset").to_numpy())])
        out.append(LostFile(name, end, last + size))
        end = last + size
    return out


def _first_offset(fs: pafs.FileSystem, path: str) -> int | None:
    """A commitlog file's smallest ``physical_offset``, from its footer (None: not readable as one)."""
    try:
        with fs.open_input_file(path) as f:
            metadata = pq.ParquetFile(f).metadata
    except (OSError, pa.ArrowInvalid):
        return None
    column = metadata.schema.names.index("physical_offset") if "physical_offset" in metadata.schema.names else -1
    lows = []
    for g in range(metadata.num_row_groups):
        stats = metadata.row_group(g).column(column).statistics if column >= 0 else None
        if stats is None or not stats.has_min_max:
            return None
        lows.append(stats.min)
    return int(min(lows)) if lows else None


def _rows(commitlog: Table, name: str, columns: list[str] | None = None) -> pa.Table:
    fs, base = filesystem(commitlog.path)
    return pq.read_table(f"{base.rstrip('/')}/{name}", filesystem=fs, columns=columns).sort_by("physical_offset")


def _wrong(rows: pa.Table, first: int, snapshot: DeltaTable, queues: dict[str, int]) -> str | None:
    """What is wrong with a lost file's messages (None: nothing), ``queues`` (each queue's next offset, from
    ``snapshot``'s markers) moved past them when nothing is."""
    offsets = rows.column("physical_offset").to_numpy()
    sizes = rows.column("size").to_numpy().astype(np.int64)
    if not len(offsets) or offsets[0] != first:
        return f"its first message is not at offset {first}, where the log ends"
    gaps = np.flatnonzero(offsets[1:] != offsets[:-1] + sizes[:-1])
    if len(gaps):
        return f"its messages are not contiguous after offset {offsets[gaps[0]]}"
    named = pc.utf8_slice_codeunits(pc.utf8_upper(rows.column("msg_id").fill_null("")), -16)
    bad = np.flatnonzero(named.to_numpy(zero_copy_only=False) != np.char.mod("%016X", offsets))
    if len(bad):
        return f"the message at offset {offsets[bad[0]]} has an id that names another offset"
    bad = crc_mismatches(rows)
    if len(bad):
        return f"the body of the message at offset {offsets[bad[0]]} does not match its CRC"
    moved = dict(queues)
    keyed = rows.group_by(["topic", "queue_id"], use_threads=False).aggregate([("queue_offset", "list")])
    for topic, queue_id, got in zip(*(keyed.column(c).to_pylist() for c in ("topic", "queue_id", "queue_offset_list"))):
        key = queue_marker(topic, queue_id)
        expected = moved[key] if key in moved else Table.marker(snapshot, key)
        wrong = np.flatnonzero(np.asarray(got) != np.arange(expected, expected + len(got)))
        if len(wrong):
            return f"queue {topic}:{queue_id} gets offset {got[wrong[0]]} where {expected + wrong[0]} comes next"
        moved[key] = expected + len(got)
    queues.update(moved)
    return None
