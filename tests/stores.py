"""Stores copied from a template made once per run: a create costs ~100 ms, a copy and an open ~25.

A module whose tests each start from the same filled store builds it once and gives each test
a copy (:func:`copied_per_test`): a test's writes land in its own copy, never in another test's store.
"""

from __future__ import annotations

import copy
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, TypeVar

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from storelib import MessageStore

T = TypeVar("T")


def copy_store(template: str, dest: str) -> None:
    """Copy the store at ``template`` to ``dest``, its files dated now, as if just made: Delta dates a version
    by its log entry's file time, and Delta Spark refuses time travel to a version older than the table's
    tombstone retention (a minute for a local store's), counted from its newest commit."""
    shutil.copytree(template, dest, copy_function=shutil.copy)


def copied_per_test(build: "Callable[[MessageStore], object]", *, with_value: bool = True):
    """A fixture giving each test an open copy of one store ``build`` filled once per run (and a copy of what
    ``build`` returned, send results say, as ``(store, value)`` unless ``with_value`` is false): a test's
    writes land in its own copy, never in another test's store."""
    made: dict[str, tuple[str, object]] = {}

    @pytest.fixture
    def fixture(spark, store_path, _fresh_store, tmp_path_factory):
        if "template" not in made:
            made["template"] = _built(_fresh_store, tmp_path_factory.mktemp(build.__name__), spark, build)
        root, value = made["template"]
        with opened_copy(root, store_path, spark) as store:
            yield (store, copy.deepcopy(value)) if with_value else store

    fixture.__doc__ = build.__doc__
    return fixture


def _built(fresh: str, folder: Path, spark: "SparkSession", build: "Callable[[MessageStore], T]") -> tuple[str, T]:
    """A template store: a copy of ``fresh`` (the run's empty store) in ``folder``, filled by ``build`` and
    closed; its root and what ``build`` returned."""
    from storelib import MessageStore

    root = str(folder / "store")
    copy_store(fresh, root)
    store = MessageStore.open(root, spark)
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
