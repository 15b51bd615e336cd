"""The Arrow half of a DataFrame send: the send rules over batches, agreeing with the list path, and row completion."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest


class TestEncodedFrame:
    """The executors' half of a DataFrame send: property checks and the properties map, over batches."""

    @staticmethod
    def batch(rows, tags=None, keys=None):
        """A batch as ``Producer.encode_dataframe`` sends it: names and values joined, nulls as \\x02."""
        n = len(rows)
        join = lambda parts: "\x01".join(parts) if parts else None  # noqa: E731
        return pa.RecordBatch.from_pydict(
            {
                "topic": pa.array(["T"] * n),
                "queue_id": pa.nulls(n, pa.int32()),
                "body": pa.array([b"x"] * n),
                "property_names": pa.array([join([k for k, _ in r]) for r in rows], pa.string()),
                "property_values": pa.array(
                    [join(["\x02" if v is None else v for _, v in r]) for r in rows], pa.string()
                ),
                "property_count": pa.array([len(r) for r in rows], pa.int32()),
                "tags": pa.array(tags or [None] * n, pa.string()),
                "keys": pa.array(keys or [None] * n, pa.string()),
            }
        )

    @staticmethod
    def frame():
        from storelib.model.topic import TopicConfig
        from storelib.send.frame import EncodedFrame, UniqKeys

        return EncodedFrame({"sysflag": 0}, UniqKeys("0A0000010001", "nonce", 5), {"T": TopicConfig("T")}, max_body=10)

    def test_properties_follow_each_row_in_order(self):
        rnd = random.Random(3)
        rows = [[(f"k{j}", f"v{i}.{j}") for j in range(rnd.randrange(4))] for i in range(300)]
        tags = [rnd.choice([None, "T1", "T2"]) for _ in rows]
        keys = [rnd.choice([None, "a b"]) for _ in rows]
        batch = self.batch(rows, tags, keys)
        for lo, hi in ((0, 300), (41, 260)):
            part = batch.slice(lo, hi - lo)
            assert self.frame().refusals(part).null_count == hi - lo
            cols = self.frame().complete(part, 0, lo)
            uniq = cols["uniq_key"].to_pylist()
            expected = [
                r + ([("TAGS", t)] if t else []) + ([("KEYS", k)] if k else []) + [("UNIQ_KEY", u)]
                for r, t, k, u in zip(rows[lo:hi], tags[lo:hi], keys[lo:hi], uniq)
            ]
            assert cols["properties"].to_pylist() == expected

    @pytest.mark.parametrize(
        "props, tags, keys",
        [
            ({"a": "1"}, "T", "k1 k2"),
            ({"UNIQ_KEY": "x"}, None, None),
            ({"a": "1", "DELAY": "3"}, None, None),
            ({"a": " "}, None, None),
            ({"a": "\t"}, None, None),
            ({"a": "\x00"}, None, None),
            ({"a": "\u00a0"}, None, None),
            ({" \r": "1"}, None, None),
            ({"a": "1", "b": ""}, None, None),
            ({"a": None}, None, None),
            ({"a\x01b": "1"}, None, None),
            ({"a": "1\x012"}, None, None),
            ({"a\x01b": "1\x012"}, None, None),
            ({"a": "x\x02"}, None, None),
            ({"a\x02": "x"}, None, None),
            ({}, "T\x01", None),
            ({}, None, "k\x02"),
            ({"a": "1"}, "  ", "  "),
        ],
    )
    def test_refusals_agree_with_the_list_path(self, props, tags, keys):
        """Each row is refused exactly when ``validate_message`` refuses the same message, for the same field."""
        from storelib import Message
        from storelib.model.errors import StoreError
        from storelib.model.validation import validate_message

        try:
            validate_message(
                Message("T", tags=tags, keys=keys, properties={k: v for k, v in props.items()}), max_body=10
            )
            expected = None
        except StoreError as e:
            expected = (type(e).__name__, e.field)
        good = self.batch([[("g", "1")]] * 3)
        bad = self.batch([list(props.items())], [tags], [keys])
        errors = self.frame().refusals(pa.Table.from_batches([good, bad]).combine_chunks().to_batches()[0]).to_pylist()
        assert errors[:3] == [None] * 3
        record = errors[3] and json.loads(errors[3])
        found = record and (record["error"], record["field"])
        outline = lambda f: f and (f[0], f[1].split("[")[0])  # noqa: E731  (the frame names some keys, not all)
        assert outline(found) == outline(expected)
        if found and "[" in found[1]:
            assert found == expected  # a key the frame names is the one the list path names
