"""ConsumeQueueExt addresses: decorate, unDecorate, isExtAddr."""

from __future__ import annotations

import pytest

from storelib.encoding.ext_addr import MAX_EXT_ADDR, decorate_ext_addr, is_ext_addr, undecorate_ext_addr
from storelib.model.errors import StoreError
from tests.conformance import conformance_params

EXT_ADDR_CASES = conformance_params("cq_ext_addr_cases.json", "cases", lambda c: c["value_hex"])


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
        assert MAX_EXT_ADDR == -(2**31) - 1
        assert not is_ext_addr(-(2**31)) and is_ext_addr(-(2**31) - 1)

    @pytest.mark.parametrize("offset", [0, 1, 2**40, 2**63 - 2**31 - 1])
    def test_real_offsets_round_trip(self, offset):
        addr = decorate_ext_addr(offset)
        assert is_ext_addr(addr) and undecorate_ext_addr(addr) == offset

    @pytest.mark.parametrize("func", [decorate_ext_addr, undecorate_ext_addr])
    @pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 1.0])
    def test_rejects_non_long(self, func, value):
        with pytest.raises(StoreError):
            func(value)
