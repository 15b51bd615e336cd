"""Per-file summaries of ``consume_queue_ext``: what a whole file can match, to skip it unopened.

Min/max statistics cannot say whether a file holds a message whose bitmap hits a group's Bloom
bits, so the writer also sums each ext file up while writing it (:class:`ExtSummarizer`): for each
SQL92 subscription it was given, whether any row's bitmap hits the subscription's bits (the
``isHit`` test, row by row: an OR of the bitmaps would soon have every bit set once a few dozen
groups subscribe); the OR of the bitmaps and the lowest registry version they were computed with;
and the file's distinct real tag codes (up to 64). A read skips a file when the summary proves that
no row can pass the consume queue stage:

* SQL92 with Bloom data: the subscription (at its version) is among the file's ``no_hit`` keys -
  every row has a bitmap computed knowing it and none hits its bits - or, failing that, the OR of
  the bitmaps misses one of its bits;
* tags: none of the file's tag codes is in the subscription's code set.

Summaries go to the ``consume_queue_ext_summary`` table before the ext files are committed, so
every committed file has one; a file without one (or with a partial one) is simply read.

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
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.delta.table import Table, WrittenFile, with_retries
from storelib.delta.writer import write_rows
from storelib.filter.bloom import bits_or
from storelib.storage.schema import EXT_SUMMARY

if TYPE_CHECKING:
    from typing import Iterable

    from deltalake import DeltaTable

    from storelib.filter.bloom import BloomFilterData
    from storelib.filter.registry import Subscription

__all__ = ["ExtSummarizer", "FileSummary", "record_summaries", "read_summaries", "subscription_key", "summarizer_for", "bitmap_hits",
           "MAX_TAG_CODES"]

#: A file with more distinct tag codes than this keeps none (it is read for every tag subscription).
MAX_TAG_CODES = 64


def subscription_key(group: str, version: int) -> str:
    """How a summary names a subscription: its group and registry version (``GroupB@7``).

    >>> subscription_key("GroupB", 7)
    'GroupB@7'
    """
    return f"{group}@{version}"


class ExtSummarizer:
    """A :class:`~storelib.delta.writer.Summarizer` for ``consume_queue_ext`` files.

    ``subscriptions`` maps :func:`subscription_key` to (registry version, Bloom data) for the SQL92
    subscriptions whose hits each file should record.
    """

    def __init__(self, subscriptions: Mapping[str, tuple[int, "BloomFilterData"]] | None = None):
        self.subscriptions = dict(subscriptions or {})

    def start(self) -> dict[str, Any]:
        return {"topic": None, "queue_id": None, "bitmap": None, "no_bitmap": False, "version_min": None,
                "codes": set(), "hit": {key: False for key in self.subscriptions}}

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
        for key, (version, data) in self.subscriptions.items():
            if state["hit"].get(key) is False:  # None: unknown for this file; True: some row hits
                if low < version or matrix is None or matrix.shape[1] * 8 != data.bit_num:
                    state["hit"][key] = None
                else:
                    state["hit"][key] = bool(_hits(matrix, data).any())
        ored = None if matrix is None else bytes(np.bitwise_or.reduce(matrix, axis=0))
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
        return json.dumps({"topic": state["topic"], "queue_id": state["queue_id"], "bitmap": bitmap,
                           "version_min": None if bitmap is None else state["version_min"], "codes": codes,
                           "no_hit": no_hit})


def summarizer_for(subscriptions: "Iterable[Subscription]") -> ExtSummarizer:
    """An :class:`ExtSummarizer` recording hits of the SQL92 ``subscriptions`` that have Bloom data.

    >>> list(summarizer_for([store.subscription("GroupA", "TopicTest")]).subscriptions)   # tag subscriptions: none
    []
    """
    return ExtSummarizer({subscription_key(s.group, s.version): (s.version, s.bloom)
                          for s in subscriptions if s.is_sql92 and s.bloom is not None})


def _matrix(bitmaps: pa.Array) -> np.ndarray | None:
    """Equal-length binary values as a (rows, bytes) uint8 matrix (None when their lengths differ)."""
    lengths = pc.binary_length(bitmaps)
    width = pc.min(lengths).as_py()
    if width is None or width != pc.max(lengths).as_py() or width == 0:
        return None
    offsets = np.frombuffer(bitmaps.buffers()[1], np.int32)[bitmaps.offset:bitmaps.offset + len(bitmaps) + 1]
    data = np.frombuffer(bitmaps.buffers()[2], np.uint8)[offsets[0]:offsets[-1]]
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


class FileSummary:
    """A file's summary as read back: bitmap OR, lowest filter version, tag codes (each may be None)."""

    __slots__ = ("bitmap", "version_min", "codes", "no_hit")

    def __init__(self, bitmap: bytes | None, version_min: int | None, codes: Sequence[int] | None,
                 no_hit: Sequence[str] | None = None):
        self.bitmap = bitmap
        self.version_min = version_min
        self.codes = None if codes is None else frozenset(codes)
        self.no_hit = frozenset(no_hit or ())


def record_summaries(table: Table, files: Sequence[WrittenFile], attempts: int = 50) -> int:
    """Append the summaries of ``files`` (not yet committed to the ext table); return how many.

    >>> record_summaries(store.context.tables.ext_summary, [])
    0
    """
    rows = []
    for f in files:
        if not f.summary:
            continue
        s = json.loads(f.summary)
        rows.append({"path": f.path, "topic": s["topic"], "queue_id": s["queue_id"], "num_records": f.num_records,
                     "filter_bitmap_or": bytes.fromhex(s["bitmap"]) if s["bitmap"] is not None else None,
                     "filter_version_min": s["version_min"], "tags_codes": s["codes"],
                     "no_hit": s.get("no_hit") or []})
    if not rows:
        return 0
    data = pa.Table.from_pylist(rows, schema=EXT_SUMMARY.arrow)

    def step(snapshot: "DeltaTable") -> int:
        write_rows(table, snapshot, data, prefix="summary", operation="SUMMARIZE")
        return len(rows)

    return with_retries(table, attempts, step, what="record ext summaries")


def read_summaries(table: Table, topic: str) -> dict[str, FileSummary]:
    """Summaries of the topic's ext files, by add path.

    >>> [sorted(s.codes) for s in read_summaries(store.context.tables.ext_summary, "TopicTest").values()]
    [[2598919]]
    """
    from storelib.delta.table import Prune

    rows = table.read_arrow(prune=Prune(equal={"topic": topic}), filter=pc.field("topic") == topic,
                            columns=["path", "filter_bitmap_or", "filter_version_min", "tags_codes", "no_hit"]).to_pylist()
    return {r["path"]: FileSummary(r["filter_bitmap_or"], r["filter_version_min"], r["tags_codes"], r["no_hit"])
            for r in rows}
