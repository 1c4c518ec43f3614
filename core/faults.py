"""Named fault points: places where a process kills itself with SIGKILL, once, on purpose.

Selected by `--fault POINT` or WAKEFUL_FAULT=POINT[,POINT...] at start-up. `POINT:stop` stops the
process with SIGSTOP instead (to test a worker paused past its lease; SIGCONT resumes it).
`POINT@N` fires the N-th time the process reaches the point (the first by default): a stage's
third step, say, in a loop of tool calls. When
nothing is armed, `fault()` is one lookup in an empty frozenset: nothing on the hot path.
Every point is declared here, so a typo is an error at start-up, not a silent no-op.
"""

from __future__ import annotations

import os
import signal
import sys

from wakeful.core.errors import ConfigError

_RUNNER_ROLES = ("inbound", "gate", "proposer", "executor")

POINTS: dict[str, str] = {
    **{f"{r}.after_consume": f"the {r} consumed a batch and has handled none of it" for r in _RUNNER_ROLES},
    **{
        f"{r}.before_offsets": f"the {r} handled a batch and flushed its output; offsets not stored"
        for r in _RUNNER_ROLES
    },
    "inbound.after_publish": "the wake is produced; the event is not marked seen, its offset not stored",
    "gate.before_read": "the gate decoded a wake and has not read its task or its signer",
    "gate.after_read": "the gate read and authenticated a wake and has not decided on it",
    "gate.after_cas": "the gate's transition is committed; deadline, receipt and proposal request are not",
    "executor.after_intent": "the intent is recorded; the tool has not been called",
    "executor.after_downstream_call": "the tool's call is done downstream; its outcome is not recorded",
    "executor.after_advance": "the task is closed; the proposal's offset is not stored",
    "executor.after_undo": "a compensation's undo is done downstream; its outcome is not recorded",
    "timer.after_publish": "deadline wakes are on Kafka; the deadlines are not yet removed",
    "relay.mid_batch": "the relay published part of a batch to wakeful.log and trimmed none of it",
    "relay.after_publish": "the relay's batch is acknowledged by Kafka but not yet trimmed from Redis",
    "relay.after_memory": "memory's write door wrote a batch's records; the batch is not trimmed from Redis",
}
# Points only an app that remembers reaches (the crash suite walks the others for every app).
MEMORY_POINTS = frozenset({"relay.after_memory"})

_armed: dict[str, signal.Signals] = {}
_left: dict[str, int] = {}  # times a point is still to be passed before it fires
_names: frozenset[str] = frozenset()


def arm(points: str | None) -> None:
    """Arm the comma-separated points (validated against POINTS); `NAME:stop` pauses instead."""
    global _names  # noqa: PLW0603  # one process-wide switch, set once at start-up
    armed: dict[str, signal.Signals] = {}
    left: dict[str, int] = {}
    for item in (p.strip() for p in (points or "").split(",")):
        if not item:
            continue
        named, _, mode = item.partition(":")
        name, at, nth = named.partition("@")
        if at and not (nth.isdigit() and 1 <= int(nth) <= 1_000_000):
            raise ConfigError("WAKEFUL_FAULT", f"{item!r}: after '@' comes the time it fires, 1 or more")
        left[name] = int(nth) - 1 if at else 0
        if name not in POINTS:
            raise ConfigError("WAKEFUL_FAULT", f"unknown fault point {name!r}; known: {', '.join(POINTS)}")
        if mode not in ("", "kill", "stop"):
            raise ConfigError("WAKEFUL_FAULT", f"{item!r}: the mode after ':' is kill or stop")
        armed[name] = signal.SIGSTOP if mode == "stop" else signal.SIGKILL
    _armed.clear()
    _armed.update(armed)
    _left.clear()
    _left.update(left)
    _names = frozenset(armed)


def role_of(point: str) -> str:
    return point.partition(":")[0].split(".", 1)[0]


def fault(point: str) -> None:
    """Die (or stop) here if this point is armed: no cleanup, no flush, a real crash. Once."""
    if point in _names:
        if _left.get(point, 0) > 0:
            _left[point] -= 1
            return
        sig = _armed.pop(point)
        _disarm(point)
        sys.stderr.write(f"wakeful: fault point {point} reached: {sig.name}\n")
        sys.stderr.flush()
        os.kill(os.getpid(), sig)


def _disarm(point: str) -> None:
    global _names  # noqa: PLW0603
    _names = _names - {point}
