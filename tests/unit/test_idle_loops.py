"""Loops that poll Redis ask less often while they find nothing (D78), and never more slowly than
their bound; timers wait a random share of their tick, so several of them share the deadlines."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable

import pytest

from wakeful.consumers.failures import forever
from wakeful.consumers.relay import IDLE_MAX_S, IDLE_S, idle_wait
from wakeful.consumers.timer import TICK_S, pause


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


def first_to_look(
    pause_of: Callable[[random.Random], float], offsets_s: list[float], due_s: list[float]
) -> Counter[int]:
    """Which of several timers, started `offsets_s` apart and each waiting `pause_of` between looks,
    looks first after each deadline in `due_s` (ascending)."""
    rngs = [random.Random(i) for i in range(len(offsets_s))]
    nxt, firsts = list(offsets_s), Counter[int]()
    for due in due_s:
        for i, rng in enumerate(rngs):
            while nxt[i] < due:
                nxt[i] += pause_of(rng)
        firsts[min(range(len(nxt)), key=nxt.__getitem__)] += 1
    return firsts


def test_an_idle_timer_waits_its_tick_on_average_never_under_half_or_over_one_and_a_half() -> None:
    rng = random.Random(7)
    waits = [pause(rng) for _ in range(10_000)]
    assert all(TICK_S / 2 <= w <= 1.5 * TICK_S for w in waits)
    assert sum(waits) / len(waits) == pytest.approx(TICK_S, rel=0.02)  # Redis is asked no more often
    assert len(set(waits)) > 9000


def test_timers_a_few_ms_apart_each_see_deadlines_first_whatever_their_offsets() -> None:
    # Deadlines due at one phase of the tick, rounds of work 5 s apart; the third timer started
    # 3 ms after the second. With a fixed wait the second saw every deadline before the third.
    due = [5.0 * k + 0.1 for k in range(1, 41)]
    offsets = [0.0, 0.05, 0.053]
    fixed = first_to_look(lambda _: TICK_S, offsets, due)
    assert fixed[2] == 0
    spread = first_to_look(pause, offsets, due)
    assert all(spread[i] >= 5 for i in range(3)), spread
