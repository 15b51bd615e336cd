"""Orphan files: data files in a table's folder that no commit of its log mentions.

A writer that dies between writing its Parquet files and committing them (a killed dispatch,
compaction or send) leaves files no snapshot will ever read. Delta's VACUUM only deletes files a
commit removed; these it never sees. Here a file is an orphan when it is neither in the newest
snapshot nor a tombstone that VACUUM will handle, and it is older than a safety window longer than
any job runs (``orphan_file_min_age_hours``): a younger unreferenced file may belong to a write
that is about to commit, and is left alone.

Files a commit removed are orphans too once their tombstones have left the log, which a store's
local tables keep only briefly (:data:`~storelib.delta.table.TOMBSTONE_RETENTION`). Their age counts
from their removal, not their writing: :meth:`~storelib.delta.table.Table.commit` stamps each removed
file with the time. So the same window keeps them for readers still on an older snapshot.

Folders whose names start with ``_`` or ``.`` (``_delta_log``, ``_staging``) are not data; the
staging folder has its own clean-up (:meth:`~storelib.storage.commitlog.CommitLog.clean_staging`).

>>> import os
>>> t = store.context.tables.consume_queue
>>> stray = os.path.join(t.path, "part-dead.parquet"); open(stray, "wb").close()
>>> orphan_files(t, min_age_s=0)
['part-dead.parquet']
>>> remove_orphans(t, min_age_s=0), orphan_files(t, min_age_s=0)
(1, [])
"""

from __future__ import annotations

import time
from urllib.parse import unquote

from pyarrow import fs as pafs

from storelib.delta.location import filesystem
from storelib.delta.log import add_actions, tombstones
from storelib.delta.table import Table

__all__ = ["orphan_files", "remove_orphans"]


def orphan_files(table: Table, min_age_s: float, now: float | None = None) -> list[str]:
    """Paths (relative to the table's folder) of files no commit references, older than ``min_age_s`` seconds."""
    dt = table.snapshot()
    known = {unquote(p) for p in add_actions(dt).column("path").to_pylist()}
    filesys, base = filesystem(table.path)
    base = base.rstrip("/")
    known.update(_relative(unquote(p), base) for p in tombstones(dt))
    cutoff = (time.time() if now is None else now) - min_age_s
    out = []
    for info in filesys.get_file_info(pafs.FileSelector(base, recursive=True)):
        rel = _relative(info.path, base)
        if info.type != pafs.FileType.File or any(part[:1] in "_." for part in rel.split("/")):
            continue
        if rel not in known and info.mtime is not None and info.mtime.timestamp() <= cutoff:
            out.append(rel)
    return sorted(out)


def remove_orphans(table: Table, min_age_s: float, now: float | None = None) -> int:
    """Delete :func:`orphan_files`; return how many were deleted."""
    filesys, base = filesystem(table.path)
    orphans = orphan_files(table, min_age_s, now)
    for rel in orphans:
        filesys.delete_file(f"{base.rstrip('/')}/{rel}")
    return len(orphans)


def _relative(path: str, base: str) -> str:
    path = path.split("://", 1)[-1] if "://" in path and "://" not in base else path
    return path[len(base) + 1 :] if path.startswith(base + "/") else path.lstrip("/")
