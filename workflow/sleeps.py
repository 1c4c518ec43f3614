"""Durable sleep (sdk Sleep): a task kept at its stage until a time, with no lease and no process.

A Sleep is stored as a pending wait that no event answers: its kind ("sleep") is no event kind and
it names no signer. The timer keeps its deadline like any wait's (the gate registers it, `wakeful
recover` rebuilds it from the checkpoint), and the deadline's wake moves the task to the stage its
on_deadline names ("wake:<stage>"). A decision that moves the task before then replaces its waits,
and with them the sleep; the deadline's wake then finds nothing due. Pure.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from wakeful.schemas.checkpoint import PendingWait
from wakeful.sdk.workflow import Next, Sleep

SLEEP_WAIT = "sleep"
WAKE = "wake"


def asleep(task_id: str, sleep: Sleep, stage: str, version: int, now: datetime) -> PendingWait:
    """A Sleep as the pending wait the timer keeps: due when it ends, then a wake to its stage."""
    cid = hashlib.sha256(f"{task_id}:v{version}:{SLEEP_WAIT}:{now.isoformat()}".encode()).hexdigest()[:20]
    return PendingWait(
        wait_for=SLEEP_WAIT,
        correlation_id=f"corr-{cid}",
        bound_to_version=version,
        allowed_signers=(),
        deadline=sleep.due(now),
        on_deadline=f"{WAKE}:{sleep.then or stage}",
    )


def problem(nxt: Next[Any]) -> str | None:
    """Why a decision's Sleep cannot be kept (the workflow's mistake: the task goes to a person
    rather than sleep on it), or None."""
    if nxt.sleep is None:
        return None
    if nxt.wait is not None:
        return f"the decision to move to {nxt.stage} both waits for {nxt.wait.event} and sleeps: give one"
    return nxt.sleep.problem()


def woken_to(wait: PendingWait) -> str | None:
    """The stage a due sleep wakes its task to; None for any other wait."""
    action, _, stage = wait.on_deadline.partition(":")
    return stage if wait.wait_for == SLEEP_WAIT and action == WAKE and stage else None
