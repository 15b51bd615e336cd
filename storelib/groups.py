"""Consumer groups: RocketMQ's SubscriptionGroupConfig and SubscriptionGroupManager on a Delta table.

A group's configuration says whether it may consume, how many queues its ``%RETRY%`` topic has and
how many redeliveries a message gets before it goes to ``%DLQ%``. Groups are created on first use
(``autoCreateSubscriptionGroup``), or explicitly with settings of their own.

>>> GroupConfig("GroupA").retry_max_times, GroupConfig("GroupA").retry_queue_nums
(16, 1)
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, fields

import pyarrow as pa

from storelib.config import StoreConfig
from storelib.errors import ConfigError, SubscriptionGroupNotFoundError, require_int
from storelib.schema import SUBSCRIPTION_GROUP
from storelib.tables import Table, with_retries
from storelib.topics import validate_group

__all__ = ["GroupConfig", "GroupConfigTable"]


@dataclass(frozen=True)
class GroupConfig:
    """RocketMQ's ``SubscriptionGroupConfig`` with its defaults."""

    group_name: str
    consume_enable: bool = True
    consume_from_min_enable: bool = True
    consume_broadcast_enable: bool = True
    retry_queue_nums: int = 1
    retry_max_times: int = 16
    broker_id: int = 0
    which_broker_when_consume_slowly: int = 1

    def __post_init__(self) -> None:
        validate_group(self.group_name)
        for name in ("retry_queue_nums", "retry_max_times", "broker_id", "which_broker_when_consume_slowly"):
            require_int(ConfigError, name, getattr(self, name), 0)
        for name in ("consume_enable", "consume_from_min_enable", "consume_broadcast_enable"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, "must be true or false", value=getattr(self, name))


class GroupConfigTable:
    """The ``subscription_group`` Delta table: one row per group, the latest write wins.

    Reads are served from memory until the table's version moves, as a broker keeps its groups.
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
        return {r["group_name"]: GroupConfig(**{k: v for k, v in r.items() if k in names})
                for r in sorted(rows, key=lambda r: r["updated_at"])}

    def find(self, group: str) -> GroupConfig:
        """``findSubscriptionGroupConfig``: the group's configuration, created with defaults where absent
        and ``auto_create_subscription_group`` is on; else :class:`SubscriptionGroupNotFoundError`."""
        validate_group(group)
        found = self.all().get(group)
        if found is not None:
            return found
        if not self.config.auto_create_subscription_group:
            raise SubscriptionGroupNotFoundError(
                "group", f"subscription group {group} does not exist and auto_create_subscription_group is off; "
                         "create it with store.create_group", value=group)
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
            self.table.write_rows(snapshot, data, prefix="group", operation="UPDATE_SUBSCRIPTION_GROUP")
            return config

        return with_retries(self.table, self.config.max_commit_attempts, step, what="subscription group")
