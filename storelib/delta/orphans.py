"""Orphan files: data files in a table's folder that no commit of its log mentions.

Details: ``docs/internals.md``, section storelib.delta.orphans.

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
