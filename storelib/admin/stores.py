"""``storelib store create PATH``: make a store (its empty tables), where a broker would make its store folder.

A path that already holds a store is refused (exit code 2, nothing changed), as is a local folder that holds
anything else: a mistyped path never lands in an existing store or scatters tables among other files.
``--exist-ok`` makes the verb idempotent for scripts: a store already there is opened and left as it is.

>>> from storelib.admin import main
>>> main(["store", "create", tmp + "/new"])   # doctest: +ELLIPSIS
created store at .../new: use it with --store .../new or export STORELIB_STORE=.../new
0
>>> main(["store", "create", tmp + "/new"])   # doctest: +ELLIPSIS
2
"""

from __future__ import annotations

import argparse
import os
import shlex
from pathlib import Path

from storelib.admin.command import add_verb
from storelib.admin.output import Output
from storelib.cli import Progress
from storelib.delta import location
from storelib.model.errors import StoreError, StoreNotFoundError
from storelib.store import MessageStore

__all__ = ["register", "StoreExistsError"]


class StoreExistsError(StoreError, FileExistsError):
    """``store create`` at a path that holds a store already, or (a local folder) other files."""


def _create(store: MessageStore | None, args: argparse.Namespace, out: Output, progress: Progress) -> str | None:
    path = args.path or os.environ.get("STORELIB_STORE")
    if not path:
        raise StoreError("PATH", "is missing: give the store's folder or URI, or set $STORELIB_STORE")
    options = dict(args.storage_options) or None
    try:
        MessageStore.open(path, storage_options=options).close()
    except StoreNotFoundError:
        pass
    else:
        if args.exist_ok:
            return f"a store is at {path} already: left as it is"
        raise StoreExistsError("PATH", f"a store is at {path} already: nothing changed (--exist-ok accepts it)")
    if location.is_local(path) and Path(path).is_dir() and any(Path(path).iterdir()):
        raise StoreExistsError("PATH", f"{path} holds other files, not a store: give a new or empty folder")
    MessageStore.create(path, storage_options=options).close()
    progress.committed(f"the store at {path}", "rerunning finds it there and refuses (--exist-ok accepts it)")
    quoted = shlex.quote(path)
    out.summary(f"created store at {path}: use it with --store {quoted} or export STORELIB_STORE={quoted}", store=path)
    return None


def register(sub: "argparse._SubParsersAction") -> None:
    """Add the ``store`` verbs to the command's parser.

    >>> sub = argparse.ArgumentParser().add_subparsers(); register(sub); sorted(sub.choices)
    ['store']
    """
    group = sub.add_parser("store", help="make a store")
    verbs = group.add_subparsers(title="store verbs", metavar="VERB", required=True)
    p = add_verb(
        verbs,
        "create",
        _create,
        "Create a store at PATH: its empty tables (a folder or an object-store URI).\n\n" + __doc__.split("\n\n")[1],
        writes=True,
        opens=False,
        store=False,
        prefix="store",
    )
    p.add_argument("path", nargs="?", default=None, help="the store's folder or URI (None: $STORELIB_STORE)")
    p.add_argument("--exist-ok", action="store_true", help="a store already at PATH is no error: it is left as it is")
