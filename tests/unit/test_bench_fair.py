"""`wakeful bench-fair`'s order of creates: every create of both tenants goes out once, the steady
tenant's spread evenly among the flood's, so each lands behind its share of the flood."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakeful.bench.fair import FLOOD, STEADY, interleaved

pytestmark = pytest.mark.timeout(60)


@given(st.integers(0, 3000), st.integers(0, 200))
def test_every_create_of_both_tenants_goes_out_once(flood: int, steady: int) -> None:
    order = list(interleaved(flood, steady))
    assert order.count(FLOOD) == flood and order.count(STEADY) == steady


@given(st.integers(1, 3000), st.integers(1, 200))
def test_the_steady_tenants_creates_are_spread_evenly_among_the_floods(flood: int, steady: int) -> None:
    order = list(interleaved(flood, steady))
    ahead = [order[:i].count(FLOOD) for i, t in enumerate(order) if t == STEADY]
    gap = flood / steady
    for j, floods in enumerate(ahead):  # the j-th behind about (j + 1/2) of a share of the flood
        assert abs(floods - (j + 0.5) * gap) <= 1


def test_a_steady_tenant_alone_sends_all_of_its_creates() -> None:
    assert list(interleaved(0, 3)) == [STEADY] * 3
