"""Named fault points: places where a process kills itself with SIGKILL, once, on purpose.

Selected by `--fault POINT` or WAKEFUL_FAULT=POINT[,POINT...] at start-up. When none is set,
`fault()` is one set lookup on an empty frozenset: nothing on the hot path.
Every point is declared here, so a typo is an error at start-up, not a silent no-op.
"""

from __future__ import annotations

import os
import signal
import sys

from wakeful.core.errors import ConfigError

POINTS: dict[str, str] = {
    "executor.after_intent": "the intent is recorded; the bank has not been called",
    "executor.after_downstream_call": "the bank booked the refund; its outcome is not recorded",
    "executor.after_outcome": "the outcome is recorded; the stage has not advanced",
    "executor.after_advance": "the task is closed; the proposal's offset is not stored",
    "gate.before_lease": "the gate consumed a wake and has not taken the task's lease",
    "gate.after_lease": "the gate holds the lease and has not loaded the state",
    "gate.after_load": "the gate loaded and verified the state and has not decided",
    "gate.after_cas": "the gate's transition is committed; the proposal request is not published",
    "timer.after_publish": "deadline wakes are on Kafka; the deadlines are not yet removed",
    "inbound.after_publish": "the wake is produced; the event is not marked seen, its offset not stored",
    "relay.mid_batch": "the relay published part of a batch to wakeful.log and trimmed none of it",
    "relay.after_publish": "the relay's batch is acknowledged by Kafka but not yet trimmed from Redis",
}

_armed: frozenset[str] = frozenset()


def arm(points: str | None) -> None:
    """Arm the comma-separated points (validated against POINTS)."""
    global _armed  # noqa: PLW0603  # one process-wide switch, set once at start-up
    names = frozenset(p.strip() for p in (points or "").split(",") if p.strip())
    unknown = names - POINTS.keys()
    if unknown:
        raise ConfigError(
            "WAKEFUL_FAULT",
            f"unknown fault point(s) {', '.join(sorted(unknown))}; known: {', '.join(POINTS)}",
        )
    _armed = names


def arm_from_env() -> None:
    arm(os.environ.get("WAKEFUL_FAULT"))


def fault(point: str) -> None:
    """Die here with SIGKILL if this point is armed (no cleanup, no flush: a real crash)."""
    if point in _armed:
        sys.stderr.write(f"wakeful: fault point {point} reached: SIGKILL\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
