"""The properties string (``MessageDecoder.messageProperties2String`` / ``string2messageProperties``):
``name\\x01value\\x02`` per property. Its two separators may appear in no name, value, tag or key.

>>> properties_to_string({"TAGS": "a", "KEYS": "k"})
'TAGS\\x01a\\x02KEYS\\x01k\\x02'
>>> string_to_properties("TAGS\\x01a\\x02\\x01x\\x02KEYS\\x01k")
{'TAGS': 'a', 'KEYS': 'k'}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from storelib.model.message import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR

__all__ = [
    "NAME_VALUE_SEPARATOR",
    "PROPERTY_SEPARATOR",
    "properties_to_string",
    "string_to_properties",
    "edit_properties",
    "properties_lengths",
    "property_array",
]


def properties_to_string(props: Mapping[str, str]) -> str:
    """The properties string of ``props`` (trailing separator kept); None values are skipped, as in RocketMQ.

    >>> properties_to_string({"a": "1", "b": None})
    'a\\x011\\x02'
    """
    return "".join(
        f"{name}{NAME_VALUE_SEPARATOR}{value}{PROPERTY_SEPARATOR}" for name, value in props.items() if value is not None
    )


def string_to_properties(s: str) -> dict[str, str]:
    """Parse a properties string; the last duplicate wins.

    Entries with an empty name or empty value, or without a name/value separator, are dropped;
    the name ends at the first ``\\x01`` so a value may contain ``\\x01``.

    >>> string_to_properties("a\\x01x\\x01y\\x02")
    {'a': 'x\\x01y'}
    """
    result: dict[str, str] = {}
    index, end_all = 0, len(s or "")
    while index < end_all:
        end = s.find(PROPERTY_SEPARATOR, index)
        if end < 0:
            end = end_all
        sep = s.find(NAME_VALUE_SEPARATOR, index, end)
        if index < sep < end - 1:
            result[s[index:sep]] = s[sep + 1 : end]
        index = end + 1
    return result


def edit_properties(
    maps: "pa.Array",
    drop: "Sequence[str]" = (),
    put: "Mapping[str, pa.Array] | None" = None,
    rows: "np.ndarray | None" = None,
) -> "pa.MapArray":
    """A column of properties maps with the names ``drop`` removed and ``put``'s entries (a value array
    per name; null values are left out) set, over whole Arrow arrays: what ``clearProperty`` and
    ``putProperty`` do to each message. Entries keep their order; a set name goes last. ``rows`` (a
    boolean mask) limits the edit to those rows.

    >>> import pyarrow as pa
    >>> m = pa.array([[("a", "1"), ("DELAY", "3")], []], pa.map_(pa.string(), pa.string()))
    >>> edit_properties(m, ["DELAY"], {"b": pa.array(["x", None])}).to_pylist()
    [[('a', '1'), ('b', 'x')], []]
    """

    if isinstance(maps, pa.ChunkedArray):
        maps = maps.combine_chunks()
    put = dict(put or {})
    n = len(maps)
    keys, items = maps.keys, maps.items
    offsets = maps.offsets.to_numpy()
    parents = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    if offsets[0]:
        keys, items = (
            keys.slice(offsets[0], offsets[-1] - offsets[0]),
            items.slice(offsets[0], offsets[-1] - offsets[0]),
        )
    named = pc.is_in(keys, value_set=pa.array(list(drop) + list(put), pa.string())).to_numpy(zero_copy_only=False)
    keep = ~(named & rows[parents]) if rows is not None else ~named
    key_parts, item_parts, parent_parts = [keys.filter(pa.array(keep))], [items.filter(pa.array(keep))], [parents[keep]]
    for name, values in put.items():
        present = pc.is_valid(values).to_numpy(zero_copy_only=False)
        at = np.nonzero(present & rows if rows is not None else present)[0]
        key_parts.append(pa.repeat(pa.scalar(name), len(at)).cast(pa.string()))
        item_parts.append(pc.cast(values, pa.string()).take(pa.array(at)))
        parent_parts.append(at.astype(np.int64))
    all_parents = np.concatenate(parent_parts)
    order = np.argsort(all_parents, kind="stable")  # row order, kept entries first, then the set ones
    new_keys = pa.concat_arrays([k.cast(pa.string()) for k in key_parts]).take(pa.array(order))
    new_items = pa.concat_arrays([i.cast(pa.string()) for i in item_parts]).take(pa.array(order))
    counts = np.bincount(all_parents, minlength=n)
    new_offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int32)
    return pa.MapArray.from_arrays(
        pa.array(new_offsets), new_keys, new_items, mask=maps.is_null() if maps.null_count else None
    )


def properties_lengths(maps: "pa.Array") -> "np.ndarray":
    """The UTF-8 length of each message's properties string (``name\\x01value\\x02`` per entry),
    as the record size counts it.

    >>> import pyarrow as pa
    >>> properties_lengths(pa.array([[("a", "1"), ("bb", "é")], []], pa.map_(pa.string(), pa.string()))).tolist()
    [10, 0]
    """

    if isinstance(maps, pa.ChunkedArray):
        maps = maps.combine_chunks()
    offsets = maps.offsets.to_numpy()
    lo, hi = offsets[0], offsets[-1]
    entry = (
        pc.fill_null(pc.binary_length(maps.keys.slice(lo, hi - lo)), 0).to_numpy(zero_copy_only=False).astype(np.int64)
        + pc.fill_null(pc.binary_length(maps.items.slice(lo, hi - lo)), 0).to_numpy(zero_copy_only=False)
        + 2
    )
    sums = np.concatenate(([0], np.cumsum(entry)))
    at = offsets - lo
    return sums[at[1:]] - sums[at[:-1]]


def property_array(properties: "pa.Array | pa.ChunkedArray", key: str) -> pa.Array:
    """Each row's value of property ``key`` (null where it has none) from a ``map<string,string>``
    column, found in the map's flat key array at once (several times faster than ``map_lookup``):
    for class filters (``match_batch``, ``msg.properties``) and SQL92 on Arrow batches.

    >>> import pyarrow as pa
    >>> props = pa.array([[("SequenceId", "110"), ("a", "1")], [], None, [("SequenceId", "7")]],
    ...                  pa.map_(pa.string(), pa.string()))
    >>> property_array(props, "SequenceId").to_pylist(), property_array(props.slice(1), "a").to_pylist()
    (['110', None, None, '7'], [None, None, None])
    """

    if isinstance(properties, pa.ChunkedArray):
        properties = properties.combine_chunks()
    offsets = properties.offsets.to_numpy()
    start, end = int(offsets[0]), int(offsets[-1])
    hits = pc.equal(properties.keys.slice(start, end - start), pa.scalar(key, pa.string()))
    at = np.flatnonzero(pc.fill_null(hits, False).to_numpy(zero_copy_only=False)) + start
    rows = np.searchsorted(offsets, at, side="right") - 1
    take = np.full(len(properties), -1, dtype=np.int64)
    take[rows[::-1]] = at[::-1]  # the first of a row's entries wins
    if properties.null_count:
        take[pc.is_null(properties).to_numpy(zero_copy_only=False)] = -1
    return properties.items.take(pa.array(take, mask=take < 0))
