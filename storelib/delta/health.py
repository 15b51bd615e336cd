"""Is a Delta table whole? Its folder, its log, and the data files its snapshot names.

Checked when a store opens, before anything reads or writes: a table folder that is a file, a log
that cannot be read, data files with no log beside them (a deleted ``_delta_log``: opening would
start an empty table over them), and data files the snapshot names but the folder lacks. Each
finding is one sentence naming the table; none found is ``[]``. Costs one folder listing and one
log read per table, no data file is opened.

>>> table_problems(store.context.tables.commitlog)
[]
>>> import os
>>> os.remove(store.context.tables.index.snapshot().file_uris()[0])
>>> table_problems(store.context.tables.index)                    # doctest: +ELLIPSIS
['index: 1 data file(s) its log names are missing (part-...parquet): restore them, or ...']
"""

from __future__ import annotations

import threading
import uuid
from typing import Callable
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from pyarrow import fs as pafs

from storelib.delta.files import map_io
from storelib.delta.location import filesystem, is_local, options_for
from storelib.delta.log import add_actions
from storelib.delta.table import Table

__all__ = ["table_problems", "damaged_files", "unsafe_commits"]


def table_problems(table: Table, loaded: dict[str, DeltaTable] | None = None) -> list[str]:
    """What is wrong with ``table`` (see the module's description); a missing folder is not wrong
    (the store creates its tables). ``loaded`` gets the snapshot read for the check, by table name, for
    :meth:`~storelib.delta.table.Table.ensure` to take instead of loading the table again."""
    name = table.spec.name
    filesys, base = filesystem(table.path)
    info = filesys.get_file_info(base)
    if info.type == pafs.FileType.NotFound:
        return []
    if info.type != pafs.FileType.Directory:
        return [f"{name}: {table.path} is not a folder"]
    try:
        files = {
            i.path.rsplit("/", 1)[-1]
            for i in filesys.get_file_info(pafs.FileSelector(base))
            if i.type == pafs.FileType.File
        }
    except OSError as e:
        return [f"{name}: its folder cannot be listed ({e})"]
    data = sorted(f for f in files if f.endswith(".parquet"))
    try:
        dt = table.snapshot()
    except TableNotFoundError:
        if data:
            return [
                f"{name}: {len(data)} data file(s) but no Delta log (_delta_log is gone): restore it from a "
                "backup; opening would start an empty table over the old data"
            ]
        return []
    except (DeltaError, OSError, ValueError) as e:
        return [f"{name}: its Delta log cannot be read ({str(e).splitlines()[0][:200]})"]
    if loaded is not None:
        loaded[name] = dt
    named = [unquote(p) for p in add_actions(dt).column("path").to_pylist()]
    # the folder was listed before the log was read: a file committed in between is looked for again
    unlisted = sorted(p for p in named if "/" in p or p not in files)
    missing = [p for p in unlisted if filesys.get_file_info(f"{base}/{p}").type == pafs.FileType.NotFound]
    if missing:
        return [
            f"{name}: {len(missing)} data file(s) its log names are missing ({', '.join(missing[:3])}): restore them, "
            "or rebuild the table if it is derived (consume_queue, consume_queue_ext, index: move it away and "
            "dispatch again)"
        ]
    return []


def damaged_files(table: Table, repair: str, check: Callable[[pa.Table], str | None] | None = None) -> list[str]:
    """Every data file of ``table``'s snapshot read whole (``verify --full``): one problem per file whose footer or
    pages cannot be decoded, whose rows are not as many as its add action says, or that ``check`` (given its rows)
    finds wrong; each names the file, what is wrong and ``repair`` (what to do about it).

    >>> damaged_files(store.context.tables.consume_queue, "rebuild it")
    []
    """
    name, (fs, base) = table.spec.name, filesystem(table.path)
    try:
        actions = add_actions(table.snapshot())
    except TableNotFoundError:  # not created yet: the store creates it
        return []
    paths = [unquote(p) for p in actions.column("path").to_pylist()]
    counts = actions.column("num_records").to_pylist() if "num_records" in actions.column_names else [None] * len(paths)

    def problem(item: tuple[str, int | None]) -> str | None:
        path, expected = item
        try:
            rows = pq.read_table(f"{base}/{path}", filesystem=fs)  # every page decoded
        except (OSError, pa.ArrowException) as e:
            wrong: str | None = f"it cannot be read ({str(e).splitlines()[0][:160]})"
        else:
            wrong = (
                f"it holds {rows.num_rows} rows where its log says {expected}"
                if expected not in (None, rows.num_rows)
                else None
            )
            wrong = wrong or (check(rows) if check else None)
        return None if wrong is None else f"{name}: data file {path} is damaged: {wrong}; {repair}"

    found = map_io(problem, list(zip(paths, counts)), remote=not is_local(table.path))
    return [p for p in found if p is not None]


def unsafe_commits(root: str) -> str | None:
    """Why the object store under ``root`` cannot arbitrate commits, or None where it can: two writers race
    to commit the same version of a scratch table (under ``_storelib_probe``, removed after), and one must be
    refused. A server that accepts a conditional put it should refuse (If-None-Match ignored) would let two
    machines' commits overwrite each other, losing messages. The two commits run on two threads released
    at once: deltalake lists the log before it puts, so commits one after the other would never reach the
    server's arbitration. About ten requests: made when a store is created, never on open. Local roots are
    not probed.

    >>> unsafe_commits(tmp) is None
    True
    """
    if is_local(root):
        return None
    probe = f"{root}/_storelib_probe/{uuid.uuid4().hex}"
    options = options_for(probe)
    try:
        DeltaTable.create(probe, pa.schema([("x", pa.int64())]), storage_options=options)
        writers = [DeltaTable(probe, storage_options=options) for _ in range(2)]
        start, landed = threading.Barrier(2), [False, False]

        def commit(i: int) -> None:
            props = CommitProperties(max_commit_retries=0, app_transactions=[Transaction(f"probe-{i}", 1)])
            start.wait()
            try:
                writers[i].create_write_transaction(
                    [], mode="append", schema=writers[i].schema(), commit_properties=props
                )
                landed[i] = True
            except CommitFailedError:
                pass

        racers = [threading.Thread(target=commit, args=(i,), name=f"storelib-probe-{i}") for i in range(2)]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join()
        if all(landed):
            return (
                "it accepted two commits of the same Delta log version (a conditional put it should have "
                "refused): writers on two machines would overwrite each other's messages"
            )
        return None if any(landed) else "both of two racing commits were refused"
    finally:
        filesys, base = filesystem(probe)
        try:
            filesys.delete_dir(base)
        except OSError:
            pass
