"""Loops that poll Redis ask less often while they find nothing (D78), and never more slowly than
their bound."""

from __future__ import annotations

import threading

import pytest

from wakeful.consumers.failures import forever
from wakeful.consumers.relay import IDLE_MAX_S, IDLE_S, idle_wait


@pytest.mark.parametrize(
    ("empty_in_a_row", "wait"),
    [
        (0, IDLE_S),
        (1, IDLE_S),
        (2, 2 * IDLE_S),
        (3, 4 * IDLE_S),
        (4, IDLE_MAX_S),
        (1000, IDLE_MAX_S),
        (10**6, IDLE_MAX_S),
    ],
)
def test_an_idle_relay_waits_longer_after_each_empty_claim_up_to_its_bound(
    empty_in_a_row: int, wait: float
) -> None:
    assert idle_wait(empty_in_a_row) == pytest.approx(wait)


def test_a_loop_asks_its_idle_wait_anew_each_time_it_finds_nothing() -> None:
    stop, asked = threading.Event(), list[int]()

    def idle() -> float:
        asked.append(len(asked))
        if len(asked) == 3:
            stop.set()
        return 0.0

    forever(lambda: False, stop, lambda *_, **__: None, idle)
    assert asked == [0, 1, 2]
