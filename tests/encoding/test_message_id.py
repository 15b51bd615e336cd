"""Store message ids: createMessageId / decodeMessageId, one id and whole batches."""

from __future__ import annotations

import ipaddress

import numpy as np
import pytest

from storelib.encoding.arrow import hex_strings
from storelib.encoding.message_id import create_message_id, decode_message_id
from storelib.model.errors import MessageIdError
from tests.conformance import conformance_params

MSGID_CASES = conformance_params("msgid_cases.json", "cases", lambda c: f"{c['ip_in']}_{c['port']}")


MSGID_DECODE_ONLY_CASES = conformance_params("msgid_cases.json", "decode_only_cases", lambda c: c["msgId"])


class TestMessageId:
    @pytest.mark.parametrize("case", MSGID_CASES)
    def test_conformance(self, case):
        msg_id = create_message_id(case["ip_in"], case["port"], case["offset"])
        assert msg_id == case["msgId"] and len(msg_id) == case["msgId_length"]
        host, port, offset = decode_message_id(case["msgId"])
        assert ipaddress.ip_address(host) == ipaddress.ip_address(case["decoded"]["ip"])
        assert (port, offset) == (case["decoded"]["port"], case["decoded"]["offset"])

    @pytest.mark.parametrize("case", MSGID_DECODE_ONLY_CASES)
    def test_conformance_decode_only(self, case):
        if case["exception"]:
            with pytest.raises(MessageIdError, match="port out of range"):
                decode_message_id(case["msgId"])
        else:
            host, port, offset = decode_message_id(case["msgId"])
            assert ipaddress.ip_address(host) == ipaddress.ip_address(case["decoded"]["ip"])
            assert (port, offset) == (case["decoded"]["port"], case["decoded"]["offset"])

    def test_ipv4_mapped_ipv6_is_ipv4(self):
        assert create_message_id("::ffff:10.0.0.1", 1, 5) == create_message_id("10.0.0.1", 1, 5)
        mapped = "00000000000000000000FFFF0A00000100002A9F0000000000000005"
        assert decode_message_id(mapped) == ("10.0.0.1", 10911, 5)

    def test_ipv6_round_trip_is_compressed(self):
        msg_id = create_message_id("fe80:0:0:0:0:0:0:1", 8080, 2**40)
        assert msg_id == "FE800000000000000000000000000001" + "00001F90" + "0000010000000000"
        assert decode_message_id(msg_id) == ("fe80::1", 8080, 2**40)

    def test_lowercase_and_full_long_range(self):
        msg_id = create_message_id("1.2.3.4", 65535, -1)
        assert msg_id == "010203040000FFFFFFFFFFFFFFFFFFFF"
        assert decode_message_id(msg_id.lower()) == ("1.2.3.4", 65535, -1)

    @pytest.mark.parametrize(
        "host, port, offset, field",
        [
            ("localhost", 1, 0, "host"),
            ("1.2.3.256", 1, 0, "host"),
            (0x7F000001, 1, 0, "host"),
            ("1.2.3.4", -1, 0, "port"),
            ("1.2.3.4", 65536, 0, "port"),
            ("1.2.3.4", True, 0, "port"),
            ("1.2.3.4", 1, 2**63, "commitlog_offset"),
            ("1.2.3.4", 1, "5", "commitlog_offset"),
        ],
    )
    def test_create_rejects(self, host, port, offset, field):
        with pytest.raises(MessageIdError) as info:
            create_message_id(host, port, offset)
        assert info.value.field == field

    @pytest.mark.parametrize(
        "msg_id, reason",
        [
            ("", "length is 0"),
            ("7F00000100002A9F000000000000001", "length is 31"),
            ("7F00000100002A9F00000000000000011", "length is 33"),
            ("AB" * 20, "length is 40"),
            ("7F000G0100002A9F0000000000000001", "'G' at position 5"),
            ("7F00000100002A9F000000000000000 ", "' ' at position 31"),
            ("7F000001FFFFFFFF0000000000000001", "port out of range: -1"),
            (b"7F00000100002A9F0000000000000001", "must be a hex string"),
        ],
    )
    def test_decode_rejects(self, msg_id, reason):
        with pytest.raises(MessageIdError, match=reason) as info:
            decode_message_id(msg_id)
        assert info.value.field == "msg_id"


def test_hex_strings_are_message_ids():
    offsets = np.array([0, 1, 255, 2**40 + 7, 2**63 - 1], dtype=np.int64)
    prefix = create_message_id("10.0.0.1", 10911, 0)[:-16]
    assert hex_strings(prefix, offsets, 16).to_pylist() == [
        create_message_id("10.0.0.1", 10911, int(o)) for o in offsets
    ]
    assert hex_strings("", np.array([0xABC], dtype=np.int64), 4).to_pylist() == ["0ABC"]
