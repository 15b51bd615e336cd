"""Consumer offsets: RocketMQ's ConsumerOffsetManager on the ``consumer_offset`` Delta table.

Details: ``docs/internals.md``, section storelib.storage.consumer_offset.

>>> import tempfile
>>> from storelib.storage.schema import CONSUMER_OFFSET
>>> offsets = ConsumerOffsetTable(Table(tempfile.mkdtemp() + "/consumer_offset", CONSUMER_OFFSET).ensure(),
...                               StoreConfig())
>>> offsets.commit("GroupA", "TopicTest", 0, 42)
1
>>> offsets.commit_many("GroupA", {("TopicTest", 0): 40, ("TopicTest", 1): 7})
2
>>> (offsets.query("GroupA", "TopicTest", 0), offsets.query("GroupA", "TopicTest", 1),
...  offsets.query("GroupB", "TopicTest", 0))
(40, 7, -1)
>>> offsets.commit("GroupA", "TopicTest", -1, 0)
Traceback (most recent call last):
...
storelib.model.errors.OffsetError: queue_id: must be an integer in 0..2147483647 (got -1)
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Callable, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from storelib.delta.commit import remove_actions, with_retries
from storelib.delta.log import add_actions
from storelib.delta.stats import Prune
from storelib.delta.table import Table
from storelib.delta.writer import write_files
from storelib.model.config import StoreConfig
from storelib.model.errors import ConcurrentWriteError, OffsetError, require_int
from storelib.model.topic import validate_group, validate_topic
from storelib.storage.schema import CONSUMER_OFFSET

if TYPE_CHECKING:
    from deltalake import DeltaTable

__all__ = ["ConsumerOffsetTable", "latest_offsets", "check_offset_entry"]

log = logging.getLogger(__name__)

_KEYS = ("consumer_group", "topic", "queue_id")
_MAX_QUEUE_ID = 2**31 - 1
_MAX_OFFSET = 2**63 - 1
_COMMIT_PREFIX = "offset"
_COMPACT_PREFIX = "offset-compact"


class ConsumerOffsetTable:
    """The ``consumer_offset`` table: commit and query consumer offsets, compact old commits.

    ``fault`` is called with ``"written"`` (a commit's file is written, not yet committed) and
    ``"compact_written"`` (the same for a compaction), for tests that stop or race a writer there.

    >>> offsets = store.context.offsets
    >>> offsets.commit("GroupA", "TopicTest", 1, 4) < offsets.commit("GroupA", "TopicTest", 1, 5)
    True
    >>> offsets.offsets("GroupA").column("offset").to_pylist(), offsets.compact()   # two commit files, merged into one
    ([5], (2, 1))
    """

    def __init__(self, table: Table, config: StoreConfig, fault: Callable[[str], None] | None = None):
        self.table = table
        self.config = config
        self._fault = fault

    # ---- committing ----------------------------------------------------------------------------
    def commit(self, group: str, topic: str, queue_id: int, offset: int) -> int:
        """Commit ``offset`` for the group's queue (``commitOffset``); return the Delta version committed."""
        return self.commit_many(group, {(topic, queue_id): offset})

    def commit_many(self, group: str, entries: Mapping[tuple[str, int], int]) -> int:
        """Commit many queues' offsets in one atomic Delta commit; return its version.

        ``entries`` maps ``(topic, queue_id)`` to the offset. Every entry is checked first: one bad
        entry fails the whole batch with a typed error and nothing is written. An empty mapping
        commits nothing and returns the current version.
        """
        checked = _checked(group, entries)
        if not checked:
            return self.table.snapshot().version()

        def step(snapshot: "DeltaTable") -> tuple[int, int]:
            version = snapshot.version() + 1
            now = dt.datetime.now(dt.timezone.utc)
            data = pa.Table.from_pydict(
                {
                    "consumer_group": [group] * len(checked),
                    "topic": [t for t, _, _ in checked],
                    "queue_id": [q for _, q, _ in checked],
                    "offset": [o for _, _, o in checked],
                    "commit_version": [version] * len(checked),
                    "commit_timestamp": [now] * len(checked),
                },
                schema=CONSUMER_OFFSET.arrow,
            )
            files = write_files(self.table, data, prefix=_COMMIT_PREFIX, target_file_size=self.config.target_file_size)
            self._step("written")
            committed = self.table.commit(snapshot, files, operation="COMMIT_OFFSET")
            return committed, add_actions(snapshot).num_rows + len(files)

        version, files = with_retries(self.table, self.config.max_commit_attempts, step, what="commit offset")
        if files > self.config.consumer_offset_compact_files:
            try:
                self.compact(min_files=self.config.consumer_offset_compact_files + 1)
            except ConcurrentWriteError as e:  # the offsets are committed; the next commit compacts again
                log.warning("consumer offsets: compaction after commit %d gave way to other writers: %s", version, e)
        return version

    # ---- reading -------------------------------------------------------------------------------
    def query(self, group: str, topic: str, queue_id: int) -> int:
        """The group's committed offset of the queue, or -1 when it has none (``queryOffset``).

        Reads only the files whose statistics can hold the queue, with pyarrow on this process.
        """
        validate_group(group)
        validate_topic(topic)
        require_int(OffsetError, "queue_id", queue_id, 0, _MAX_QUEUE_ID)
        rows = self.table.read_view(
            self.table.view(),
            Prune(equal={"consumer_group": group, "topic": topic, "queue_id": queue_id}),
            columns=["offset", "commit_version"],
            filter=(pc.field("consumer_group") == group)
            & (pc.field("topic") == topic)
            & (pc.field("queue_id") == queue_id),
        )
        if rows.num_rows == 0:
            return -1
        newest = pc.index(rows.column("commit_version"), pc.max(rows.column("commit_version")))
        return int(rows.column("offset")[newest.as_py()].as_py())

    def offsets(self, group: str | None = None) -> pa.Table:
        """The latest row of every (group, topic, queue), or of one group's queues, sorted by them."""
        view = self.table.view()
        if group is None:
            return latest_offsets(self.table.read_view(view))
        validate_group(group)
        rows = self.table.read_view(
            view, Prune(equal={"consumer_group": group}), filter=pc.field("consumer_group") == group
        )
        return latest_offsets(rows)

    # ---- compaction ----------------------------------------------------------------------------
    def compact(self, *, min_files: int = 2) -> tuple[int, int]:
        """Rewrite the latest row of every queue into new files and remove the old ones, in one commit.

        Runs when the table holds at least ``min_files`` data files; returns (files removed, files
        added), (0, 0) when there was nothing to do. The commit is made as exactly the version after
        the snapshot it read; when another commit lands first, the rewrite is done again.
        """
        min_files = max(2, min_files)

        def step(snapshot: "DeltaTable") -> tuple[int, int]:
            actions = add_actions(snapshot)
            if actions.num_rows < min_files:
                return 0, 0
            latest = latest_offsets(self.table.read_arrow(snapshot))
            files = write_files(
                self.table,
                latest,
                prefix=_COMPACT_PREFIX,
                target_file_size=self.config.target_file_size,
                clustered=False,
            )
            self._step("compact_written")
            removes = remove_actions(actions, data_change=False)
            # data_change=False: the latest offset of every queue is the same before and after.
            self.table.commit(snapshot, files, removes=removes, operation="COMPACT_OFFSETS", data_change=False)
            return len(removes), len(files)

        return with_retries(self.table, self.config.max_commit_attempts, step, what="compact consumer offsets")

    # ---- internals -----------------------------------------------------------------------------
    def _step(self, name: str) -> None:
        if self._fault is not None:
            self._fault(name)


def latest_offsets(rows: pa.Table) -> pa.Table:
    """The row with the highest ``commit_version`` of each (group, topic, queue), sorted by them.

    >>> from storelib.storage.schema import CONSUMER_OFFSET
    >>> rows = pa.Table.from_pylist([
    ...     {"consumer_group": "G", "topic": "T", "queue_id": 0, "offset": 9, "commit_version": 1},
    ...     {"consumer_group": "G", "topic": "T", "queue_id": 0, "offset": 3, "commit_version": 2},
    ...     {"consumer_group": "G", "topic": "T", "queue_id": 1, "offset": 5, "commit_version": 1},
    ... ], schema=CONSUMER_OFFSET.arrow)
    >>> latest_offsets(rows).select(["queue_id", "offset"]).to_pylist()
    [{'queue_id': 0, 'offset': 3}, {'queue_id': 1, 'offset': 5}]
    """
    n = rows.num_rows
    if n == 0:
        return rows
    rows = rows.sort_by([(k, "ascending") for k in _KEYS] + [("commit_version", "descending")])
    first = None
    for k in _KEYS:
        col = rows.column(k)
        differs = pc.not_equal(col.slice(1), col.slice(0, n - 1))
        first = differs if first is None else pc.or_(first, differs)
    assert first is not None  # _KEYS is not empty
    mask = pa.concat_arrays([pa.array([True]), *first.chunks]) if n > 1 else pa.array([True])
    return rows.filter(mask)


def _checked(group: str, entries: Mapping[tuple[str, int], int]) -> list[tuple[str, int, int]]:
    """Validated ``(topic, queue_id, offset)`` entries of a commit, or the first typed error."""
    validate_group(group)
    if not isinstance(entries, Mapping):
        raise OffsetError("entries", "must be a mapping of (topic, queue_id) to offset", value=entries)
    out = []
    for key, offset in entries.items():
        if not isinstance(key, tuple) or len(key) != 2:
            raise OffsetError("entries", "keys must be (topic, queue_id) pairs", value=key)
        topic, queue_id = key
        check_offset_entry(topic, queue_id, offset)
        out.append((topic, queue_id, offset))
    return out


def check_offset_entry(topic: str, queue_id: int, offset: int) -> None:
    """The rule for one committed offset: a valid topic name, a queue id and an offset in range.

    >>> check_offset_entry("TopicTest", 0, -1)
    Traceback (most recent call last):
    ...
    storelib.model.errors.OffsetError: offset: must be an integer in 0..9223372036854775807 (got -1)
    """
    validate_topic(topic)
    require_int(OffsetError, "queue_id", queue_id, 0, _MAX_QUEUE_ID)
    require_int(OffsetError, "offset", offset, 0, _MAX_OFFSET)
