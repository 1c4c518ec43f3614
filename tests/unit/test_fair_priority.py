"""A held create's place in its tenant's queue (state/fair.place, D110): every create of a higher
priority goes before it, whatever their ages, and among one priority the older first; a place is a
whole number Redis keeps exactly."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from wakeful.state.fair import PRIORITIES, place

pytestmark = pytest.mark.timeout(60)
PRIORITY = st.integers(0, PRIORITIES - 1)
MS = st.integers(0, 10**14 - 1)  # any ms since 1970 until the year 5138


@given(PRIORITY, PRIORITY, MS, MS)
def test_a_higher_priority_goes_first_whatever_the_ages(a: int, b: int, a_ms: int, b_ms: int) -> None:
    if a > b:
        assert place(a, a_ms) < place(b, b_ms)


@given(PRIORITY, MS, MS)
def test_among_one_priority_the_older_goes_first(priority: int, older: int, newer: int) -> None:
    if older < newer:
        assert place(priority, older) < place(priority, newer)


@given(st.integers(-100, 100), MS)
def test_a_place_is_exact_as_a_redis_score_and_a_priority_out_of_range_is_held_to_the_range(
    priority: int, ms: int
) -> None:
    assert 0 <= place(priority, ms) < 2**53
    assert place(priority, ms) == place(max(0, min(PRIORITIES - 1, priority)), ms)
