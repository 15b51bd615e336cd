"""The commitlog record length (calMsgLength), one message and whole batches."""

from __future__ import annotations

import random

import numpy as np
import pytest

from storelib.encoding.record import RECORD_FIXED_FIELDS, message_length, message_lengths
from storelib.model.errors import MessageError


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


def test_message_lengths_match_codec():
    rnd = random.Random(5)
    rows = [
        (rnd.randrange(5000), rnd.choice([1, 9, 127, 128, 255]), rnd.randrange(300), rnd.random() < 0.5)
        for _ in range(200)
    ]
    for store_v6 in (False, True):
        got = message_lengths(*(np.array(c) for c in zip(*rows)), store_v6).tolist()
        assert got == [
            message_length(body_length=b, topic_length=t, properties_length=p, born_host_v6=v6, store_host_v6=store_v6)
            for b, t, p, v6 in rows
        ]
