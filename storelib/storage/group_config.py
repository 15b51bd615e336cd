"""The ``subscription_group`` Delta table (RocketMQ's SubscriptionGroupManager): one row per group,
the latest write wins; groups are created on first use (``autoCreateSubscriptionGroup``).

>>> GroupConfigTable(store.context.tables.subscription_group, store.config).find("GroupDoc").retry_max_times
16
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, fields

import pyarrow as pa

from storelib.delta.commit import with_retries
from storelib.delta.table import Table
from storelib.delta.writer import write_rows
from storelib.model.config import StoreConfig
from storelib.model.errors import SubscriptionGroupNotFoundError
from storelib.model.group import GroupConfig
from storelib.model.topic import validate_group
from storelib.storage.schema import SUBSCRIPTION_GROUP

__all__ = ["GroupConfigTable"]


class GroupConfigTable:
    """The ``subscription_group`` Delta table: one row per group, the latest write wins.

    Reads are served from memory until the table's version moves, as a broker keeps its groups.

    >>> groups = GroupConfigTable(store.context.tables.subscription_group, store.config)
    >>> groups.put(GroupConfig("GroupX", retry_max_times=2)).retry_max_times, sorted(groups.all())
    (2, ['GroupA', 'GroupX'])
    """

    def __init__(self, table: Table, config: StoreConfig):
        self.table = table
        self.config = config

    def all(self) -> dict[str, GroupConfig]:
        """Every group's configuration, from memory while the table has not moved."""
        return self.table.memo("all", lambda view: self._latest(self.table.read_view(view).to_pylist()))

    @staticmethod
    def _latest(rows: list[dict]) -> dict[str, GroupConfig]:
        names = {f.name for f in fields(GroupConfig)}
        return {
            r["group_name"]: GroupConfig(**{k: v for k, v in r.items() if k in names and v is not None})
            for r in sorted(rows, key=lambda r: r["updated_at"])
        }

    def find(self, group: str) -> GroupConfig:
        """``findSubscriptionGroupConfig``: the group's configuration, created with defaults where absent
        and ``auto_create_subscription_group`` is on; else :class:`SubscriptionGroupNotFoundError`."""
        validate_group(group)
        found = self.all().get(group)
        if found is not None:
            return found
        if not self.config.auto_create_subscription_group:
            raise SubscriptionGroupNotFoundError(
                "group",
                f"subscription group {group} does not exist and auto_create_subscription_group is off; "
                "create it with store.create_group",
                value=group,
            )
        return self.put(GroupConfig(group), only_if_absent=True)

    def put(self, config: GroupConfig, *, only_if_absent: bool = False) -> GroupConfig:
        """Write ``config`` for its group in one atomic commit; with ``only_if_absent``, keep an existing one."""

        def step(snapshot) -> GroupConfig:
            if only_if_absent:  # another writer may have created it since we looked
                existing = self._latest(self.table.read_arrow(snapshot).to_pylist()).get(config.group_name)
                if existing is not None:
                    return existing
            row = {**asdict(config), "updated_at": dt.datetime.now(dt.timezone.utc)}
            data = pa.Table.from_pylist([row], schema=SUBSCRIPTION_GROUP.arrow)
            write_rows(self.table, snapshot, data, prefix="group", operation="UPDATE_SUBSCRIPTION_GROUP")
            return config

        return with_retries(self.table, self.config.max_commit_attempts, step, what="subscription group")
