"""The IndexFile: one entry per message key (each key of KEYS, and the UNIQ_KEY), holding the hash of
``topic#key``, the message's commitlog offset and store time. Entries are filed by hash range (the
high bits of the hash), so a key's entries sit in few files; a look-up reads the files whose
statistics hold its hash and checks the real key on the messages it points at.

>>> import pyarrow as pa
>>> hash_range_shift(64)
25
>>> batch = pa.RecordBatch.from_pydict({"topic": ["TopicTest"], "keys": ["order-1 order-2"],
...     "uniq_key": pa.array([None], pa.string()), "physical_offset": pa.array([0], pa.int64()),
...     "store_timestamp": pa.array([0], pa.timestamp("us", "UTC"))})
>>> entries(batch, hash_range_shift(64)).column("key_hash").to_pylist()[0] == index_key_hash("TopicTest#order-1")
True
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.delta.stats import Prune
from storelib.delta.table import Table
from storelib.encoding.index_key import index_key_hash, index_key_hashes, topic_key_prefixes  # noqa: F401  (doctest)
from storelib.model.message import MessageConst
from storelib.model.timestamps import arrow_timestamp
from storelib.storage.schema import INDEX

__all__ = ["INDEX", "hash_range_shift", "entries", "offsets_of"]


def hash_range_shift(ranges: int) -> int:
    """How far a key hash (31 bits) is shifted right to give its hash range, for ``ranges`` ranges."""
    return 31 - max(0, (ranges - 1).bit_length())


def entries(b: pa.RecordBatch, shift: int) -> pa.RecordBatch:
    """``IndexService.buildIndex`` over a batch of commitlog rows: an entry for the UNIQ_KEY and for each
    non-empty key of KEYS of every row, filed under the hash range ``key_hash >> shift``."""
    prefixes = topic_key_prefixes(b.column("topic"))
    uniq = b.column("uniq_key")
    split = pc.split_pattern(b.column("keys"), MessageConst.KEY_SEPARATOR)
    keys, parents = pc.list_flatten(split), pc.list_parent_indices(split).to_numpy()
    hashes, owners = [], []
    for values, owner in ((uniq, np.arange(b.num_rows)), (keys, parents)):
        filled = pc.fill_null(pc.greater(pc.binary_length(values), 0), False).to_numpy(zero_copy_only=False)
        hashes.append(index_key_hashes(prefixes[owner], values)[filled])
        owners.append(owner[filled])
    key_hash, owner = pa.array(np.concatenate(hashes), pa.int32()), pa.array(np.concatenate(owners))
    return pa.RecordBatch.from_arrays(
        [
            pc.shift_right(key_hash, shift),
            key_hash,
            b.column("physical_offset").take(owner),
            b.column("store_timestamp").take(owner),
        ],
        schema=INDEX.arrow,
    )


def offsets_of(table: Table, key_hash: int, begin_ms: int, end_ms: int) -> tuple[list[int], int]:
    """Commitlog offsets of the entries with ``key_hash`` stored within ``[begin_ms, end_ms]``, newest
    first and each once, and how many index files were opened to find them (only those whose
    statistics can hold the hash).

    >>> offsets_of(store.context.tables.index, index_key_hash("TopicTest#order-1"), 0, 2 ** 62)
    ([0], 1)
    """
    paths = table.paths(table.prune(table.view().actions, Prune(equal={"key_hash": key_hash})))
    stored = pc.field("store_timestamp")
    cond = (
        (pc.field("key_hash") == key_hash) & (stored >= arrow_timestamp(begin_ms)) & (stored <= arrow_timestamp(end_ms))
    )
    hits = (
        table.read_arrow(paths=paths, columns=["commitlog_offset"], filter=cond).column("commitlog_offset").to_numpy()
    )
    return [int(o) for o in np.unique(hits)[::-1]], len(paths)
