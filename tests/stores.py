"""Stores copied from a template made once per run: a create costs ~100 ms, a copy and an open ~25."""

from __future__ import annotations

import shutil


def copy_store(template: str, dest: str) -> None:
    """Copy the store at ``template`` to ``dest``, its files dated now, as if just made: Delta dates a version
    by its log entry's file time, and Delta Spark refuses time travel to a version older than the table's
    tombstone retention (a minute for a local store's), counted from its newest commit."""
    shutil.copytree(template, dest, copy_function=shutil.copy)
