"""Per-file summaries of ``consume_queue_ext``: what a whole file can match, to skip it unopened.

A read skips an ext file its summary proves holds no row for the subscription; how, in ``docs/internals.md``.

>>> from storelib.filter.bloom import BloomFilterData
>>> s = ExtSummarizer({"G1@3": (3, BloomFilterData([0, 2], 16)), "G2@3": (3, BloomFilterData([1], 16))})
>>> import pyarrow as pa
>>> batch = pa.RecordBatch.from_pydict({"topic": ["T", "T"], "queue_id": [0, 0], "tags_code": [7, 7],
...     "filter_bitmap": [b"\\x01\\x00", b"\\x05\\x00"], "filter_version": [3, 5]})
>>> s.finish(s.add(s.start(), batch))
'{"topic": "T", "queue_id": 0, "bitmap": "0500", "version_min": 3, "codes": [7], "no_hit": ["G2@3"]}'
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.encoding.tags import tags_codes
from storelib.filter.bloom import bits_or

if TYPE_CHECKING:
    from typing import Iterable

    from storelib.filter.bloom import BloomFilterData
    from storelib.filter.subscription import Subscription

__all__ = [
    "ExtSummarizer",
    "RowGroupSummarizer",
    "subscription_key",
    "summarizer_for",
    "bitmap_hits",
    "MAX_TAG_CODES",
]

#: A file with more distinct tag codes than this keeps none (it is read for every tag subscription).
MAX_TAG_CODES = 64


def subscription_key(group: str, version: int) -> str:
    """How a summary names a subscription: its group and registry version (``GroupB@7``).

    >>> subscription_key("GroupB", 7)
    'GroupB@7'
    """
    return f"{group}@{version}"


class ExtSummarizer:
    """A :class:`~storelib.delta.sink.Summarizer` for ``consume_queue_ext`` files.

    ``subscriptions`` maps :func:`subscription_key` to (registry version, Bloom data) for the SQL92
    subscriptions whose hits each file should record.
    """

    def __init__(self, subscriptions: Mapping[str, tuple[int, "BloomFilterData"]] | None = None):
        self.subscriptions = dict(subscriptions or {})

    def start(self) -> dict[str, Any]:
        return {
            "topic": None,
            "queue_id": None,
            "bitmap": None,
            "no_bitmap": False,
            "version_min": None,
            "codes": set(),
            "hit": {key: False for key in self.subscriptions},
        }

    def add(self, state: dict[str, Any], batch: pa.RecordBatch) -> dict[str, Any]:
        if batch.num_rows == 0:
            return state
        state["topic"] = batch.column("topic")[0].as_py()
        state["queue_id"] = batch.column("queue_id")[0].as_py()
        if state["codes"] is not None:
            state["codes"].update(pc.unique(batch.column("tags_code")).to_pylist())
            if len(state["codes"]) > MAX_TAG_CODES:
                state["codes"] = None
        bitmaps, versions = batch.column("filter_bitmap"), batch.column("filter_version")
        if state["no_bitmap"] or bitmaps.null_count or versions.null_count:
            state["no_bitmap"] = True
            return state
        matrix = _matrix(bitmaps)
        low = pc.min(versions).as_py()
        ored = None if matrix is None else bytes(np.bitwise_or.reduce(matrix, axis=0))
        for key, (version, data) in self.subscriptions.items():
            if state["hit"].get(key) is False:  # None: unknown for this file; True: some row hits
                if low < version or matrix is None or matrix.shape[1] * 8 != data.bit_num:
                    state["hit"][key] = None
                elif ored is not None and all(ored[p // 8] >> (p % 8) & 1 for p in data.bit_pos):  # else no row can hit
                    state["hit"][key] = bool(_hits(matrix, data).any())
        if ored is None or (state["bitmap"] is not None and len(state["bitmap"]) != len(ored)):
            state["no_bitmap"] = True
            return state
        state["bitmap"] = ored if state["bitmap"] is None else bits_or([state["bitmap"], ored])
        state["version_min"] = low if state["version_min"] is None else min(state["version_min"], low)
        return state

    def finish(self, state: dict[str, Any]) -> str | None:
        if state["topic"] is None:
            return None
        codes = None if state["codes"] is None else sorted(state["codes"])
        bitmap = None if state["no_bitmap"] or state["bitmap"] is None else state["bitmap"].hex()
        no_hit = [] if state["no_bitmap"] else sorted(k for k, hit in state["hit"].items() if hit is False)
        return json.dumps(
            {
                "topic": state["topic"],
                "queue_id": state["queue_id"],
                "bitmap": bitmap,
                "version_min": None if bitmap is None else state["version_min"],
                "codes": codes,
                "no_hit": no_hit,
            }
        )


def summarizer_for(subscriptions: "Iterable[Subscription]") -> ExtSummarizer:
    """An :class:`ExtSummarizer` recording hits of the SQL92 ``subscriptions`` that have Bloom data.

    >>> list(summarizer_for([store.subscription("GroupA", "TopicTest")]).subscriptions)   # tag subscriptions: none
    []
    """
    return ExtSummarizer(
        {
            subscription_key(s.group, s.version): (s.version, s.bloom)
            for s in subscriptions
            if s.is_sql92 and s.bloom is not None
        }
    )


def _matrix(bitmaps: pa.Array) -> np.ndarray | None:
    """Equal-length binary values as a (rows, bytes) uint8 matrix (None when their lengths differ)."""
    lengths = pc.binary_length(bitmaps)
    width = pc.min(lengths).as_py()
    if width is None or width != pc.max(lengths).as_py() or width == 0:
        return None
    offsets = np.frombuffer(bitmaps.buffers()[1], np.int32)[bitmaps.offset : bitmaps.offset + len(bitmaps) + 1]
    data = np.frombuffer(bitmaps.buffers()[2], np.uint8)[offsets[0] : offsets[-1]]
    return data.reshape(len(bitmaps), width)


def bitmap_hits(bitmaps: pa.Array, data: "BloomFilterData") -> np.ndarray:
    """Per value of a binary array of equal-length bitmaps: does it hit ``data``'s bits (``isHit``)?
    Values of other lengths cannot be tested and count as hits (they prune nothing).

    >>> from storelib.filter.bloom import BloomFilterData
    >>> bitmap_hits(pa.array([b"\\x05\\x00", b"\\x01\\x00"]), BloomFilterData([0, 2], 16)).tolist()
    [True, False]
    """
    matrix = _matrix(bitmaps)
    if matrix is None or matrix.shape[1] * 8 < max(data.bit_pos) + 1:
        return np.ones(len(bitmaps), dtype=bool)
    return _hits(matrix, data)


def _hits(matrix: np.ndarray, data: "BloomFilterData") -> np.ndarray:
    """Per row: are all of ``data``'s bits set (``BloomFilter.isHit``, BitsArray layout)?"""
    hit = np.ones(matrix.shape[0], dtype=bool)
    for pos in data.bit_pos:
        hit &= (matrix[:, pos // 8] & (1 << (pos % 8))) != 0
    return hit


class RowGroupSummarizer:
    """A :class:`~storelib.delta.sink.Summarizer` for clustered commitlog files: one
    :class:`ExtSummarizer` summary per row group of ``row_group_rows`` rows (the writer cuts row
    groups at exact multiples), over batches of commitlog rows carrying their ``filter_bitmap``
    and ``filter_version``; tag codes come from ``tags``.

    >>> s = RowGroupSummarizer(ExtSummarizer(), 2)
    >>> batch = pa.RecordBatch.from_pydict({"topic": ["T"] * 3, "queue_id": [0] * 3, "tags": ["TagA", "TagA", None],
    ...     "cluster_seq": [10, 11, 12], "filter_bitmap": pa.nulls(3, pa.binary()),
    ...     "filter_version": pa.nulls(3, pa.int64())})
    >>> [(g["row_group"], g["num_records"], g["codes"]) for g in json.loads(s.finish(s.add(s.start(), batch)))]
    [(0, 2, [2598919]), (1, 1, [0])]
    """

    def __init__(self, groups: ExtSummarizer, row_group_rows: int):
        self.groups = groups
        self.row_group_rows = row_group_rows

    def start(self) -> dict[str, Any]:
        return {"done": [], "current": None, "rows": 0, "topics": set(), "seq": [None, None]}

    def add(self, state: dict[str, Any], batch: pa.RecordBatch) -> dict[str, Any]:
        at = 0
        while at < batch.num_rows:
            if state["current"] is None:
                state.update(current=self.groups.start(), rows=0, topics=set(), seq=[None, None])
            take = min(batch.num_rows - at, self.row_group_rows - state["rows"])
            part = batch.slice(at, take)
            units = pa.RecordBatch.from_arrays(
                [
                    part.column("topic"),
                    part.column("queue_id"),
                    pa.array(tags_codes(part.column("tags")), pa.int64()),
                    part.column("filter_bitmap"),
                    part.column("filter_version"),
                ],
                names=["topic", "queue_id", "tags_code", "filter_bitmap", "filter_version"],
            )
            state["current"] = self.groups.add(state["current"], units)
            state["topics"].update(pc.unique(part.column("topic")).to_pylist())
            lo, hi = pc.min_max(part.column("cluster_seq")).values()
            state["seq"] = [
                min(v for v in (state["seq"][0], lo.as_py()) if v is not None),
                max(v for v in (state["seq"][1], hi.as_py()) if v is not None),
            ]
            state["rows"] += take
            at += take
            if state["rows"] == self.row_group_rows:
                self._close(state)
        return state

    def _close(self, state: dict[str, Any]) -> None:
        finished = self.groups.finish(state["current"])
        assert finished is not None  # a group closed has rows, so a topic
        summary = json.loads(finished)
        summary.update(
            row_group=len(state["done"]),
            num_records=state["rows"],
            topics=len(state["topics"]),
            seq_min=state["seq"][0],
            seq_max=state["seq"][1],
        )
        state["done"].append(summary)
        state["current"] = None

    def finish(self, state: dict[str, Any]) -> str | None:
        if state["current"] is not None and state["rows"]:
            self._close(state)
        return json.dumps(state["done"]) if state["done"] else None
