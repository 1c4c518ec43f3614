"""Retry is a policy: one exception that asks for it, one pure backoff function."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import redis
from confluent_kafka import KafkaException

from wakeful.core.errors import WakefulError


class Retry(WakefulError):
    """The message could not be handled now for a transient reason; try it again later.

    after: the first backoff step in seconds (it grows per attempt); None for the default.
    """

    def __init__(self, reason: str, after: float | None = None) -> None:
        self.reason = reason
        self.after = after
        super().__init__(f"retry: {reason}")


# Failures of the servers themselves: worth waiting out, never a reason to drop work.
TRANSIENT_IO = (redis.ConnectionError, redis.TimeoutError, KafkaException, BufferError)


def backoff(attempt: int, base: float = 0.05, cap: float = 5.0, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry number `attempt` (1-based): exponential, full jitter, capped."""
    ceiling = min(cap, base * (2 ** max(0, attempt - 1)))
    return (rng or random).uniform(ceiling / 2, ceiling)


def forever(step: Callable[[], bool], stop: threading.Event, log: Callable[..., None], idle: float) -> None:
    """Run step() until stop is set, waiting `idle` seconds whenever it returns False (nothing to
    do). A transient error (Redis or Kafka away, e.g. while a server restarts) is logged and
    retried with backoff instead of ending the loop."""
    attempt = 0
    while not stop.is_set():
        try:
            busy = step()
            attempt = 0
        except TRANSIENT_IO as exc:
            attempt += 1
            if attempt in (1, 10) or attempt % 50 == 0:
                log("loop.retry", attempt=attempt, error=repr(exc))
            stop.wait(backoff(attempt))
            continue
        if not busy:
            stop.wait(idle)
