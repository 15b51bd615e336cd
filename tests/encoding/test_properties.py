"""The properties string (messageProperties2String / string2messageProperties)."""

from __future__ import annotations

import pytest

from storelib.encoding.properties import properties_to_string, string_to_properties


class TestProperties:
    def test_each_property_ends_with_separator(self):
        assert properties_to_string({"A": "1", "B": "2"}) == "A\x011\x02B\x012\x02"
        assert properties_to_string({}) == ""

    def test_none_values_skipped(self):
        assert properties_to_string({"A": None, "B": "2"}) == "B\x012\x02"

    def test_round_trip(self):
        props = {"TAGS": "TagA", "KEYS": "k1 k2", "UNIQ_KEY": "7F00", "ünï": "日本\U0001f600"}
        assert string_to_properties(properties_to_string(props)) == props

    @pytest.mark.parametrize(
        "text, expected",
        [
            ("", {}),
            (None, {}),
            ("A\x011", {"A": "1"}),
            ("A\x01\x02B\x012\x02", {"B": "2"}),  # empty value dropped
            ("\x01x\x02B\x012", {"B": "2"}),  # empty name dropped
            ("AB\x02\x02C\x013", {"C": "3"}),  # no separator, empty entry
            ("A\x01x\x01y\x02", {"A": "x\x01y"}),  # the name ends at the first \x01
            ("A\x011\x02A\x012\x02", {"A": "2"}),  # the last duplicate wins
        ],
    )
    def test_parse_edge_cases(self, text, expected):
        assert string_to_properties(text) == expected
