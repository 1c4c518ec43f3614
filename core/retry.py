"""Retry is a policy: one exception that asks for it, one pure backoff function."""

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


def backoff(attempt: int, base: float = 0.05, cap: float = 5.0, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry number `attempt` (1-based): exponential, full jitter, capped."""
    ceiling = min(cap, base * (2 ** max(0, attempt - 1)))
    return (rng or random).uniform(ceiling / 2, ceiling)
