"""storelib.encoding against literal cases and RocketMQ's own reference outputs."""

from __future__ import annotations

import ipaddress
from concurrent.futures import ThreadPoolExecutor

import pytest

from conformance import load_cases
from storelib.encoding.ext_addr import MAX_EXT_ADDR, decorate_ext_addr, is_ext_addr, undecorate_ext_addr
from storelib.encoding.hashcode import java_string_hash
from storelib.encoding.index_key import build_index_key, index_key_hash, index_slot
from storelib.encoding.message_id import create_message_id, decode_message_id
from storelib.encoding.properties import properties_to_string, string_to_properties
from storelib.encoding.record import RECORD_FIXED_FIELDS, message_length
from storelib.encoding.tags import tags_code
from storelib.encoding.uniq_id import UniqIdGenerator, decode_uniq_id_time, uniq_id_prefix_hex
from storelib.model.errors import MessageError, MessageIdError, StoreError

MARCH_2024 = 1_709_251_200_000  # 2024-03-01T00:00:00Z
JAN_2024 = 1_704_067_200_000  # 2024-01-01T00:00:00Z
DAY = 86_400_000


def conformance_params(name: str, key: str, id_of) -> list:
    """One pytest.param per case, or a single skipped param when the folder is absent."""
    try:
        cases = load_cases(name)[key]
    except pytest.skip.Exception as skipped:
        return [pytest.param(None, marks=pytest.mark.skip(reason=str(skipped)))]
    return [pytest.param(case, id=f"{i:02d}-{id_of(case)}") for i, case in enumerate(cases)]


def reference_hash(s: str) -> int:
    """Java's hashCode written the slow, obvious way."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (h * 31 + int.from_bytes(data[i:i + 2], "big")) % 2**32
    return h - 2**32 if h >= 2**31 else h


TAG_CASES = conformance_params("tags_hash_cases.json", "cases", lambda c: ascii(c["tag"])[:24])
MSGID_CASES = conformance_params("msgid_cases.json", "cases", lambda c: f"{c['ip_in']}_{c['port']}")
MSGID_DECODE_ONLY_CASES = conformance_params("msgid_cases.json", "decode_only_cases", lambda c: c["msgId"])
EXT_ADDR_CASES = conformance_params("cq_ext_addr_cases.json", "cases", lambda c: c["value_hex"])
INDEX_KEY_CASES = conformance_params("index_key_cases.json", "cases", lambda c: c["index_key"][:30])


# --- String.hashCode and tag codes ---------------------------------------------------------

class TestJavaStringHash:
    @pytest.mark.parametrize("s, expected", [
        ("", 0), ("a", 97), ("ab", 97 * 31 + 98), ("Aa", 2112), ("BB", 2112),
        ("polygenelubricants", -2**31),  # the classic Integer.MIN_VALUE string
        ("\U0001F600", 31 * 0xD83D + 0xDE00),  # one code point, two UTF-16 units
        ("\ud800", 0xD800),  # a lone surrogate hashes as its unit
    ])
    def test_literals(self, s, expected):
        assert java_string_hash(s) == expected

    @pytest.mark.parametrize("s", ["x" * 1000, "日本\U0001F600é" * 300, "TopicTest#" + "9" * 63])
    def test_long_strings_match_reference(self, s):
        assert java_string_hash(s) == reference_hash(s)

    @pytest.mark.parametrize("case", TAG_CASES)
    def test_conformance(self, case):
        assert java_string_hash(case["tag"]) == case["java_hashCode"]
        assert tags_code(case["tag"]) == case["tagsCode"]


class TestTagsCode:
    def test_no_tags_is_zero(self):
        assert tags_code(None) == 0
        assert tags_code("") == 0

    def test_whole_string_is_hashed(self):
        assert tags_code("TagA||TagB") == java_string_hash("TagA||TagB")
        assert tags_code("TagA||TagB") != tags_code("TagA")


# --- Message ids -----------------------------------------------------------------------------

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

    @pytest.mark.parametrize("host, port, offset, field", [
        ("localhost", 1, 0, "host"), ("1.2.3.256", 1, 0, "host"), (0x7F000001, 1, 0, "host"),
        ("1.2.3.4", -1, 0, "port"), ("1.2.3.4", 65536, 0, "port"), ("1.2.3.4", True, 0, "port"),
        ("1.2.3.4", 1, 2**63, "commitlog_offset"), ("1.2.3.4", 1, "5", "commitlog_offset"),
    ])
    def test_create_rejects(self, host, port, offset, field):
        with pytest.raises(MessageIdError) as info:
            create_message_id(host, port, offset)
        assert info.value.field == field

    @pytest.mark.parametrize("msg_id, reason", [
        ("", "length is 0"), ("7F00000100002A9F000000000000001", "length is 31"),
        ("7F00000100002A9F00000000000000011", "length is 33"), ("AB" * 20, "length is 40"),
        ("7F000G0100002A9F0000000000000001", "'G' at position 5"),
        ("7F00000100002A9F000000000000000 ", "' ' at position 31"),
        ("7F000001" "FFFFFFFF" "0000000000000001", "port out of range: -1"),
        (b"7F00000100002A9F0000000000000001", "must be a hex string"),
    ])
    def test_decode_rejects(self, msg_id, reason):
        with pytest.raises(MessageIdError, match=reason) as info:
            decode_message_id(msg_id)
        assert info.value.field == "msg_id"


# --- ConsumeQueueExt addresses ---------------------------------------------------------------

class TestExtAddr:
    @pytest.mark.parametrize("case", EXT_ADDR_CASES)
    def test_conformance(self, case):
        value, decorated = case["value"], decorate_ext_addr(case["value"])
        assert is_ext_addr(value) is case["isExtAddr"]
        assert decorated == case["decorate"]
        assert format(decorated % 2**64, "016x") == case["decorate_hex"]
        assert is_ext_addr(decorated) is case["isExtAddr_of_decorate"]
        assert undecorate_ext_addr(value) == case["unDecorate"]
        assert undecorate_ext_addr(decorated) == case["unDecorate_of_decorate"]
        assert decorate_ext_addr(undecorate_ext_addr(value)) == case["decorate_of_unDecorate"]

    def test_boundary_is_just_below_int_min(self):
        assert MAX_EXT_ADDR == -2**31 - 1
        assert not is_ext_addr(-2**31) and is_ext_addr(-2**31 - 1)

    @pytest.mark.parametrize("offset", [0, 1, 2**40, 2**63 - 2**31 - 1])
    def test_real_offsets_round_trip(self, offset):
        addr = decorate_ext_addr(offset)
        assert is_ext_addr(addr) and undecorate_ext_addr(addr) == offset

    @pytest.mark.parametrize("func", [decorate_ext_addr, undecorate_ext_addr])
    @pytest.mark.parametrize("value", [2**63, -2**63 - 1, 1.0])
    def test_rejects_non_long(self, func, value):
        with pytest.raises(StoreError):
            func(value)


# --- IndexFile keys --------------------------------------------------------------------------

class TestIndexKey:
    @pytest.mark.parametrize("case", INDEX_KEY_CASES)
    def test_conformance(self, case):
        key = build_index_key(case["topic"], case["key"])
        assert key == case["index_key"]
        assert java_string_hash(key) == case["java_hashCode"]
        assert index_key_hash(key) == case["keyHash"]
        assert index_slot(key) == case["slotPos"]
        assert 40 + index_slot(key) * 4 == case["absSlotPos"]

    def test_int_min_hash_gives_zero_and_negatives_flip(self):
        assert index_key_hash("polygenelubricants") == 0
        assert index_key_hash("TopicTest#erAHomt") == 0
        assert index_key_hash("Topic_1#key_6_ed1dd874") == 1502440466

    def test_custom_slot_count(self):
        assert index_slot("#", 10) == 35 % 10
        with pytest.raises(StoreError):
            index_slot("#", 0)


# --- Commit log record length ----------------------------------------------------------------

class TestMessageLength:
    def test_fixed_part(self):
        assert sum(size for _, size in RECORD_FIXED_FIELDS) == 90
        assert message_length(body_length=0, topic_length=0, properties_length=0) == 91

    def test_adds_variable_parts(self):
        assert message_length(body_length=10, topic_length=9, properties_length=20) == 91 + 39

    def test_topic_length_field_grows_past_127_bytes(self):
        v1 = message_length(body_length=0, topic_length=127, properties_length=0)
        v2 = message_length(body_length=0, topic_length=128, properties_length=0)
        assert (v1, v2) == (91 + 127, 92 + 128)

    def test_ipv6_hosts_add_12_bytes_each(self):
        base = dict(body_length=1, topic_length=1, properties_length=1)
        assert message_length(**base, born_host_v6=True) == message_length(**base) + 12
        both = message_length(**base, born_host_v6=True, store_host_v6=True)
        assert both == message_length(**base) + 24

    @pytest.mark.parametrize("field", ["body_length", "topic_length", "properties_length"])
    def test_rejects_negative(self, field):
        lengths = {"body_length": 0, "topic_length": 0, "properties_length": 0, field: -1}
        with pytest.raises(MessageError) as info:
            message_length(**lengths)
        assert info.value.field == field


# --- Properties string -----------------------------------------------------------------------

class TestProperties:
    def test_each_property_ends_with_separator(self):
        assert properties_to_string({"A": "1", "B": "2"}) == "A\x011\x02B\x012\x02"
        assert properties_to_string({}) == ""

    def test_none_values_skipped(self):
        assert properties_to_string({"A": None, "B": "2"}) == "B\x012\x02"

    def test_round_trip(self):
        props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "7F00", "ünï": "日本\U0001F600"}
        assert string_to_properties(properties_to_string(props)) == props

    @pytest.mark.parametrize("text, expected", [
        ("", {}), (None, {}), ("A\x011", {"A": "1"}),
        ("A\x01\x02B\x012\x02", {"B": "2"}),  # empty value dropped
        ("\x01x\x02B\x012", {"B": "2"}),  # empty name dropped
        ("AB\x02\x02C\x013", {"C": "3"}),  # no separator, empty entry
        ("A\x01x\x01y\x02", {"A": "x\x01y"}),  # the name ends at the first \x01
        ("A\x011\x02A\x012\x02", {"A": "2"}),  # the last duplicate wins
    ])
    def test_parse_edge_cases(self, text, expected):
        assert string_to_properties(text) == expected


# --- Client unique ids -----------------------------------------------------------------------

class TestUniqId:
    def test_prefix_layout(self):
        assert uniq_id_prefix_hex("10.0.0.1", 1, -1) == "0A000001" + "0001" + "FFFFFFFF"
        assert uniq_id_prefix_hex("10.0.0.1", 0x12345, 2**32 + 7) == "0A000001" + "2345" + "00000007"
        assert len(uniq_id_prefix_hex("::1", 1, 1)) == 44

    def test_defaults_give_a_valid_ipv4_prefix(self):
        prefix = uniq_id_prefix_hex()
        assert len(prefix) == 20 and int(prefix, 16) >= 0

    def test_rejects_bad_ip(self):
        with pytest.raises(MessageIdError):
            UniqIdGenerator(ip="not-an-ip")

    def test_time_and_counter(self):
        gen = UniqIdGenerator("10.0.0.1", pid=1, seed=0)
        first, second = gen.next_id(MARCH_2024 + 5), gen.next_id(MARCH_2024 + 6)
        assert first == gen.prefix + "00000005" + "0000"
        assert second == gen.prefix + "00000006" + "0001"
        assert decode_uniq_id_time(first, now_ms=MARCH_2024 + 10) == MARCH_2024 + 5

    def test_counter_wraps_at_16_bits(self):
        gen = UniqIdGenerator("10.0.0.1", pid=1, seed=0)
        ids = [gen.next_id(MARCH_2024) for _ in range(65537)]
        assert ids[-1] == ids[0] and ids[-2].endswith("FFFF")

    def test_late_in_month_uses_unsigned_32_bits(self):
        now = JAN_2024 + 30 * DAY  # 2_592_000_000 ms > Integer.MAX_VALUE
        msg_id = UniqIdGenerator("10.0.0.1", pid=1, seed=0).next_id(now)
        assert msg_id[20:28] == format(30 * DAY, "08X")
        assert decode_uniq_id_time(msg_id, now_ms=now + 1) == now

    def test_month_rollover_and_small_clock_step_back(self):
        gen = UniqIdGenerator("10.0.0.1", pid=1, seed=0)
        feb = JAN_2024 + 31 * DAY
        assert gen.next_id(feb - 1)[20:28] == format(31 * DAY - 1, "08X")
        assert gen.next_id(feb)[20:28] == "00000000"
        assert gen.next_id(feb - 500)[20:28] == "00000000"  # NTP step back: clamped to 0
        assert gen.next_id(JAN_2024 + 3)[20:28] == "00000003"  # far back: its own month

    def test_decode_prefers_previous_month_when_not_in_the_past(self):
        made = MARCH_2024 + 5 * DAY
        msg_id = UniqIdGenerator("10.0.0.1", pid=1, seed=0).next_id(made)
        # read at exactly that instant, Java's ">=" moves it to the previous month (Feb 2024: 29 days)
        assert decode_uniq_id_time(msg_id, now_ms=made) == made - 29 * DAY
        assert decode_uniq_id_time(msg_id, now_ms=made + 1) == made
        # only the offset into a month is stored: read in April it lands in April
        assert decode_uniq_id_time(msg_id, now_ms=MARCH_2024 + 40 * DAY) == MARCH_2024 + 36 * DAY

    def test_decode_rejects_bad_id(self):
        with pytest.raises(MessageIdError, match="length is 20") as info:
            decode_uniq_id_time("0A000001000100000000")
        assert info.value.field == "uniq_id"

    def test_thread_safe(self):
        gen = UniqIdGenerator("10.0.0.1", pid=1, seed=0)
        with ThreadPoolExecutor(8) as pool:
            batches = list(pool.map(lambda _: [gen.next_id(MARCH_2024) for _ in range(2000)], range(8)))
        assert len({i for batch in batches for i in batch}) == 16000
