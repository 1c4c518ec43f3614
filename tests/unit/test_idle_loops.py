"""Loops that poll Redis ask less often while they find nothing (D78), and never more slowly than
their bound; timers wait a random share of their tick, so several of them share the deadlines."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable

import pytest
import redis

from wakeful.consumers.kafka.failures import forever
from wakeful.consumers.relay.main import IDLE_MAX_S, IDLE_S, idle_wait
from wakeful.consumers.timer import fair as timer_fair
from wakeful.consumers.timer import main as timer
from wakeful.consumers.timer.fair import Releaser
from wakeful.consumers.timer.main import TICK_S, pause
from wakeful.core import process


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


def test_an_idle_timer_waits_a_random_share_of_its_tick_never_under_half_or_over_all_of_it() -> None:
    rng = random.Random(7)
    waits = [pause(rng) for _ in range(10_000)]
    assert all(TICK_S / 2 <= w <= TICK_S for w in waits)  # a deadline fires at most TICK_S late
    assert len(set(waits)) > 9000


def test_timers_started_a_few_ms_apart_each_see_some_deadlines_first() -> None:
    # Deadlines due at one phase of the tick, rounds of work 5 s apart; the last two timers started
    # 3 ms apart. With a fixed wait the first saw every deadline first and the others none.
    due = [5.0 * k + 0.1 for k in range(1, 41)]
    offsets = [0.0, 0.05, 0.053]
    assert first_to_look(lambda _: TICK_S, offsets, due) == Counter({0: 40})
    spread = first_to_look(pause, offsets, due)
    assert all(spread[i] >= 5 for i in range(3)), spread


def test_a_running_timer_waits_what_pause_says_each_time_it_finds_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    given: list[Callable[[], float]] = []
    monkeypatch.setattr(timer, "forever", lambda _step, _stop, _log, idle, _nudge=None: given.append(idle))
    timer.Timer(client=None, producer=None, log=lambda *_, **__: None).run(threading.Event())  # type: ignore[arg-type]
    (idle,) = given
    waits = {idle() for _ in range(100)}
    assert all(TICK_S / 2 <= w <= TICK_S for w in waits) and len(waits) > 90


def test_a_nudged_loop_looks_again_before_its_idle_wait_is_over() -> None:
    stop, nudge, looks = threading.Event(), threading.Event(), []

    def step() -> bool:
        looks.append(1)
        if len(looks) == 1:
            nudge.set()  # another thread made work while this look ran: a held create let in
        else:
            stop.set()
        return False

    worker = threading.Thread(target=forever, args=(step, stop, lambda *_, **__: None, 3600.0, nudge))
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive() and len(looks) == 2  # not an hour: the nudge ended the wait
    assert not nudge.is_set()  # the next idle wait is a whole one again, unless nudged anew


class Refusing:
    """A Redis client whose user lacks a right the held creates' look needs (NOPERM), then has it
    (no tenant has creates held)."""

    def __init__(self) -> None:
        self.asked = 0

    def smembers(self, _name: str) -> set[bytes]:
        self.asked += 1
        if self.asked == 1:
            raise redis.exceptions.NoPermissionError("NOPERM this user has no permissions to run the command")
        return set()


def test_the_held_creates_look_outlives_a_refusal_and_looks_again() -> None:
    client, stop, said = Refusing(), threading.Event(), []
    releaser = Releaser(client, lambda event, **fields: said.append(event))  # type: ignore[arg-type]
    thread = timer_fair.start(releaser, stop)
    try:
        assert process.wait_until(lambda: client.asked >= 2, 10)  # looked again after the refusal
        assert thread.is_alive() and said == ["timer.fair_failed"]
    finally:
        stop.set()
        thread.join(timeout=10)


class Unanswered:
    """A producer whose broker never acknowledges: each flush leaves the message queued."""

    def __init__(self) -> None:
        self.produced = 0
        self.waits: list[float] = []

    def produce(self, *_: object, **__: object) -> None:
        self.produced += 1

    def flush(self, timeout: float) -> int:
        self.waits.append(timeout)
        return 1


class Due:
    """The deadlines set: one due now; what is removed from it is kept."""

    def __init__(self) -> None:
        self.removed: list[bytes] = []

    def zrangebyscore(self, *_: object, **__: object) -> list[bytes]:
        return [b"t-1|1000"]

    def zrem(self, _name: str, *members: bytes) -> None:
        self.removed += members


def test_a_timer_asked_to_stop_stops_waiting_for_the_broker_and_keeps_the_wakes_due() -> None:
    producer, due = Unanswered(), Due()
    ticking = timer.Timer(client=due, producer=producer, log=lambda *_, **__: None)  # type: ignore[arg-type]
    ticking.stopping.set()  # SIGTERM came while the broker does not answer
    assert ticking.tick(now_ms=2000) == 0
    # One short wait, not a whole FLUSH_S: a role has STOP_GRACE_S to stop before it is killed.
    assert producer.produced == 1 and producer.waits == [timer.FLUSH_SLICE_S] and timer.FLUSH_SLICE_S <= 1
    assert due.removed == []  # not acknowledged: still due, for the next tick or another timer
