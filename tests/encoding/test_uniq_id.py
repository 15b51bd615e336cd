"""Client unique ids (MessageClientIDSetter) and the local address."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from storelib.encoding.uniq_id import UniqIdGenerator, decode_uniq_id_time, uniq_id_prefix_hex
from storelib.model.errors import MessageIdError

MARCH_2024 = 1_709_251_200_000  # 2024-03-01T00:00:00Z


JAN_2024 = 1_704_067_200_000  # 2024-01-01T00:00:00Z


DAY = 86_400_000


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
