"""Which input message the current thread is handling, and the run loop's floor for its partition:
what a change's outbox record carries so that `wakeful recover` knows how far back to re-drive
(D87, state/redrive.py).

The floor is the lowest offset of the message's partition that the run loop has not yet stored as
done when the handler took the message: what it would commit. Every message below it was handled
before this one was taken, so its change (if it made one) was in Redis before this one's.
consumers/kafka/handling.py sets it around each handler call; state/last_step.py reads it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class Taken:
    topic: str
    partition: int
    offset: int
    floor: int  # <= offset


_current = threading.local()


def current() -> Taken | None:
    """The message the current thread's handler took, or None outside a run loop's handler."""
    taken: Taken | None = getattr(_current, "taken", None)
    return taken


@contextmanager
def taking(taken: Taken | None) -> Iterator[None]:
    _current.taken = taken
    try:
        yield
    finally:
        _current.taken = None
