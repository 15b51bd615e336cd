"""Stores copied from a template made once per run: a create costs ~100 ms, a copy and an open ~25.

A module whose tests each start from the same filled store builds it once (:func:`built`) and gives each test
a copy (:func:`opened_copy`): a test's writes land in its own copy, never in another test's store.
"""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, TypeVar

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from storelib import MessageStore

T = TypeVar("T")


def copy_store(template: str, dest: str) -> None:
    """Copy the store at ``template`` to ``dest``, its files dated now, as if just made: Delta dates a version
    by its log entry's file time, and Delta Spark refuses time travel to a version older than the table's
    tombstone retention (a minute for a local store's), counted from its newest commit."""
    shutil.copytree(template, dest, copy_function=shutil.copy)


def built(
    fresh: str, folder: Path, spark: "SparkSession", build: "Callable[[MessageStore], T]", **settings: object
) -> tuple[str, T]:
    """A template store: a copy of ``fresh`` (the run's empty store) in ``folder``, opened with ``settings``,
    filled by ``build`` and closed; its root and what ``build`` returned (send results, say)."""
    from storelib import MessageStore

    root = str(folder / "store")
    copy_store(fresh, root)
    store = MessageStore.open(root, spark, **settings)
    try:
        value = build(store)
    finally:
        store.close()
    return root, value


@contextmanager
def opened_copy(template: str, dest: str, spark: "SparkSession", **settings: object) -> "Iterator[MessageStore]":
    """A copy of the store at ``template`` at ``dest``, open (with ``settings``) until the block ends."""
    from storelib import MessageStore

    copy_store(template, dest)
    store = MessageStore.open(dest, spark, **settings)
    try:
        yield store
    finally:
        store.close()  # its producers, and the machine's committer role with them (storelib.local.relay)
