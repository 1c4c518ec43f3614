"""Retry is a policy: one exception that asks for it and one pure backoff function (which Kafka and
Redis failures are worth retrying at all: consumers/kafka/failures.py, beside the clients)."""

from __future__ import annotations

import random

from wakeful.core.errors import WakefulError


class Retry(WakefulError):
    """The message could not be handled now for a transient reason; try it again later.

    after: the first backoff step in seconds (it grows per attempt); None for the default.
    """

    def __init__(self, reason: str, after: float | None = None) -> None:
        self.reason = reason
        self.after = after
        super().__init__(f"retry: {reason}")


class FunctionsMissing(Retry):
    """Redis lacks the function library this code calls (not loaded, or another version of it).

    A Retry, so a role waits for an operator to load it instead of dead-lettering every message;
    `wakeful worker` checks for it before a role starts and stops with this one line.
    """

    def __init__(self, library: str, problem: str) -> None:
        self.library = library
        super().__init__(problem, after=1.0)
        WakefulError.__init__(self, problem)


class SlotMoved(Retry):
    """A Redis Cluster slot a pinned batch needed has moved to another node (MOVED), is moving
    (ASK), or the cluster cannot serve it now (CLUSTERDOWN).

    A transaction cannot follow a redirect halfway (its WATCH was on the old node), so the whole
    step runs again: after MOVED the client's slot map already names the new node.
    """

    def __init__(self, reply: Exception) -> None:
        super().__init__(f"Redis Cluster slot not served here: {reply}", after=0.05)


def backoff(attempt: int, base: float = 0.05, cap: float = 5.0, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry number `attempt` (1-based): exponential, full jitter, capped."""
    ceiling = min(cap, base * (2 ** max(0, attempt - 1)))
    return (rng or random).uniform(ceiling / 2, ceiling)
