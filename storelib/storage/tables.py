"""The store's Delta tables as one typed handle: where each lives under the root, made and checked together.

>>> StoreTables.at(tmp + "/fresh").ensure().exists()
True
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Mapping

from deltalake import DeltaTable

from storelib.delta.table import Table
from storelib.storage.schema import TABLES

__all__ = ["StoreTables"]


@dataclass(frozen=True)
class StoreTables:
    """The store's Delta tables, one attribute each (folders under the store's root).

    >>> tables = StoreTables.at(tmp + "/fresh").ensure()
    >>> tables.index.spec.name, len(tables.by_name())
    ('index', 13)
    """

    commitlog: Table
    commitlog_summary: Table
    consume_queue: Table
    consume_queue_ext: Table
    ext_summary: Table
    index: Table
    topic_config: Table
    subscription: Table
    subscription_group: Table
    consumer_offset: Table
    transaction_checker: Table
    commitlog_expired: Table
    pop_log: Table

    @classmethod
    def at(cls, root: str, properties: Mapping[str, str] | None = None) -> "StoreTables":
        """The tables of the store at ``root`` (not created: see :meth:`ensure`)."""
        return cls(*(Table(f"{root}/{spec.name}", spec, properties) for spec in TABLES.values()))  # the fields' order

    def by_name(self) -> dict[str, Table]:
        """Every table by its name (its folder), in dispatch order."""
        return {t.spec.name: t for t in (getattr(self, f.name) for f in fields(self))}

    def exists(self) -> bool:
        """Whether a store is here: its commitlog is a Delta table.

        >>> StoreTables.at(tmp + "/nothing").exists()
        False
        """
        return DeltaTable.is_deltatable(self.commitlog.path, storage_options=self.commitlog.storage_options)

    def ensure(self, loaded: Mapping[str, DeltaTable] | None = None) -> "StoreTables":
        """Create the tables where absent; check their columns where present. ``loaded``: snapshots read just
        before, by table name (:func:`~storelib.delta.health.table_problems` leaves them), not loaded again."""
        for name, table in self.by_name().items():
            table.ensure((loaded or {}).get(name))
        return self
