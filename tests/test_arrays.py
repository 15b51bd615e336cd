"""storelib.encoding: RocketMQ's encodings over whole Arrow arrays, checked against storelib.encoding and RocketMQ."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pytest

from conformance import load_cases
from storelib.encoding.arrow import hex_strings
from storelib.encoding.hashcode import java_hash_codes, java_string_hash
from storelib.encoding.index_key import index_key_hash, index_key_hashes
from storelib.encoding.message_id import create_message_id
from storelib.encoding.record import message_length, message_lengths
from storelib.encoding.tags import tags_codes


def utf8_cases(name: str) -> list[dict]:
    """The conformance cases whose strings Arrow can hold (valid UTF-8: no unpaired surrogates)."""
    out = []
    for case in load_cases(name)["cases"]:
        try:
            "".join(str(v) for v in case.values()).encode("utf-8")
        except UnicodeEncodeError:
            continue
        out.append(case)
    return out


class TestJavaHashCodes:
    @pytest.mark.parametrize("strings", [
        [], [None], [""], ["a", "ab", "Aa", "BB"], ["polygenelubricants"], ["\U0001F600", "é中", "a\U0001F600b"],
        ["x" * 5000, "y"],  # one long string among short ones: the sparse fold
    ])
    def test_literals(self, strings):
        expected = [java_string_hash(s) if s is not None else 0 for s in strings]
        assert java_hash_codes(pa.array(strings, pa.string())).tolist() == expected

    def test_random_strings_and_slices(self):
        rnd = random.Random(11)
        alphabet = "abcXYZ019 #|é中\u0800\uffff😀"
        for longest in (1, 8, 40, 300):
            strings = ["".join(rnd.choice(alphabet) for _ in range(rnd.randrange(longest + 1)))
                       if rnd.random() > 0.1 else None for _ in range(2000)]
            expected = [java_string_hash(s) if s is not None else 0 for s in strings]
            array = pa.array(strings, pa.string())
            assert java_hash_codes(array).tolist() == expected
            assert java_hash_codes(array.slice(123, 700)).tolist() == expected[123:823]
            assert java_hash_codes(pa.chunked_array([array.slice(0, 5), array.slice(5)])).tolist() == expected

    def test_tags_conformance(self):
        cases = utf8_cases("tags_hash_cases.json")
        got = tags_codes(pa.array([c["tag"] for c in cases], pa.string())).tolist()
        assert got == [c["tagsCode"] for c in cases]

    def test_no_tags_is_zero(self):
        assert tags_codes(pa.array([None, ""], pa.string())).tolist() == [0, 0]


class TestIndexKeyHashes:
    def test_conformance(self):
        cases = utf8_cases("index_key_cases.json")
        got = index_key_hashes(pa.array([c["topic"] for c in cases]), pa.array([c["key"] for c in cases]))
        assert got.tolist() == [c["keyHash"] for c in cases]

    def test_matches_codec_over_many_topics(self):
        rnd = random.Random(5)
        topics = [rnd.choice(["TopicTest", "T2", "Tö", "%RETRY%G"]) for _ in range(3000)]
        keys = ["".join(rnd.choice("ab #é😀") for _ in range(rnd.randrange(1, 30))) for _ in topics]
        got = index_key_hashes(pa.array(topics), pa.array(keys))
        assert got.tolist() == [index_key_hash(f"{t}#{k}") for t, k in zip(topics, keys)]


def test_hex_strings_are_message_ids():
    offsets = np.array([0, 1, 255, 2**40 + 7, 2**63 - 1], dtype=np.int64)
    prefix = create_message_id("10.0.0.1", 10911, 0)[:-16]
    assert hex_strings(prefix, offsets, 16).to_pylist() == \
        [create_message_id("10.0.0.1", 10911, int(o)) for o in offsets]
    assert hex_strings("", np.array([0xABC], dtype=np.int64), 4).to_pylist() == ["0ABC"]


def test_message_lengths_match_codec():
    rnd = random.Random(5)
    rows = [(rnd.randrange(5000), rnd.choice([1, 9, 127, 128, 255]), rnd.randrange(300), rnd.random() < 0.5)
            for _ in range(200)]
    for store_v6 in (False, True):
        got = message_lengths(*(np.array(c) for c in zip(*rows)), store_v6).tolist()
        assert got == [message_length(body_length=b, topic_length=t, properties_length=p, born_host_v6=v6,
                                            store_host_v6=store_v6) for b, t, p, v6 in rows]


class TestEncodedFrame:
    """The executors' half of a DataFrame send: property checks and the properties map, over batches."""

    @staticmethod
    def batch(rows, tags=None, keys=None):
        """A batch as ``Producer.encode_dataframe`` sends it: names and values joined, nulls as \\x02."""
        n = len(rows)
        join = lambda parts: "\x01".join(parts) if parts else None  # noqa: E731
        return pa.RecordBatch.from_pydict({
            "topic": pa.array(["T"] * n), "queue_id": pa.nulls(n, pa.int32()), "body": pa.array([b"x"] * n),
            "property_names": pa.array([join([k for k, _ in r]) for r in rows], pa.string()),
            "property_values": pa.array([join(["\x02" if v is None else v for _, v in r]) for r in rows], pa.string()),
            "property_count": pa.array([len(r) for r in rows], pa.int32()),
            "tags": pa.array(tags or [None] * n, pa.string()), "keys": pa.array(keys or [None] * n, pa.string()),
        })

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
            expected = [r + ([("TAGS", t)] if t else []) + ([("KEYS", k)] if k else []) + [("UNIQ_KEY", u)]
                        for r, t, k, u in zip(rows[lo:hi], tags[lo:hi], keys[lo:hi], uniq)]
            assert cols["properties"].to_pylist() == expected

    @pytest.mark.parametrize("props, tags, keys", [
        ({"a": "1"}, "T", "k1 k2"), ({"UNIQ_KEY": "x"}, None, None), ({"a": "1", "DELAY": "3"}, None, None),
        ({"a": " "}, None, None), ({"a": "\t"}, None, None), ({"a": "\x00"}, None, None), ({"a": "\u00a0"}, None, None),
        ({" \r": "1"}, None, None), ({"a": "1", "b": ""}, None, None), ({"a": None}, None, None),
        ({"a\x01b": "1"}, None, None), ({"a": "1\x012"}, None, None), ({"a\x01b": "1\x012"}, None, None),
        ({"a": "x\x02"}, None, None), ({"a\x02": "x"}, None, None), ({}, "T\x01", None), ({}, None, "k\x02"),
        ({"a": "1"}, "  ", "  "),
    ])
    def test_refusals_agree_with_the_list_path(self, props, tags, keys):
        """Each row is refused exactly when ``validate_message`` refuses the same message, for the same field."""
        from storelib import Message
        from storelib.model.errors import StoreError
        from storelib.model.validation import validate_message

        try:
            validate_message(Message("T", tags=tags, keys=keys, properties={k: v for k, v in props.items()}), max_body=10)
            expected = None
        except StoreError as e:
            expected = (type(e).__name__, e.field.split("[")[0])
        good = self.batch([[("g", "1")]] * 3)
        bad = self.batch([list(props.items())], [tags], [keys])
        errors = self.frame().refusals(pa.Table.from_batches([good, bad]).combine_chunks().to_batches()[0]).to_pylist()
        assert errors[:3] == [None] * 3
        record = errors[3] and json.loads(errors[3])
        found = record and (record["error"], record["field"])
        assert found == expected
