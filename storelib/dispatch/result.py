"""What a dispatch run reports (:class:`DispatchResult`), and what hears of its consume queue units (:class:`UnitFeed`).

>>> DispatchResult(0, 10, {"consume_queue": 3}).consume_queue_rows
3
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import pyarrow as pa

__all__ = ["DispatchResult", "UnitFeed"]


@dataclass
class DispatchResult:
    """What one dispatch run did: the commitlog range it covered, the rows and version each table got,
    and the seconds of the one job that read and wrote (``scan``) and of each table's commit.

    >>> result = store.dispatch()                              # nothing new since the seed's dispatch
    >>> result.from_offset == result.to_offset == store.max_offset(), result.consume_queue_rows, result.index_rows
    (True, 0, 0)
    """

    from_offset: int
    to_offset: int
    rows: dict[str, int] = field(default_factory=dict)
    versions: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def consume_queue_rows(self) -> int:
        return self.rows.get("consume_queue", 0)

    @property
    def index_rows(self) -> int:
        return self.rows.get("index", 0)

    def then(self, later: "DispatchResult | None") -> "DispatchResult":
        """This run followed by ``later`` (a follower's rounds, added up), ``self`` updated.

        >>> DispatchResult(0, 5, {"index": 2}).then(DispatchResult(5, 9, {"index": 1})).rows
        {'index': 3}
        """
        if later is not None:
            self.to_offset = later.to_offset
            for name, n in later.rows.items():
                self.rows[name] = self.rows.get(name, 0) + n
            self.versions.update(later.versions)
        return self


class UnitFeed(Protocol):
    """What a dispatcher hands each run's consume queue units to, when it dispatched in this process
    (:attr:`Dispatcher.feed`; a follower serving tail pulls: :class:`~storelib.local.tail.TailServer`).

    >>> class Heard:
    ...     def expect(self, paths): print("committing", len(paths), "file")
    ...     def publish(self, units): print("committed", units.num_rows, "unit")
    >>> from storelib import Message
    >>> _ = store.send(Message("TopicTest", queue_id=0))
    >>> dispatcher = store.dispatcher(); dispatcher.feed = Heard()
    >>> _ = dispatcher.run()
    committing 1 file
    committed 1 unit
    """

    def expect(self, paths: list[str]) -> None:
        """Just before the consume queue commits: the files (paths relative to the table) whose units
        :meth:`publish` will bring, unless the commit fails."""

    def publish(self, units: pa.Table) -> None:
        """The moment the consume queue has committed, before the run's later tables: the units."""
