"""The gate's side of a tenant's in-flight limit (D108): a create the workflow decided is admitted
or held, and a change gives its task's slot back or takes one again.

A create is counted only after the workflow has decided it (one it refuses is refused at once,
never held) and after the freeze check, and only while a limit holds its tenant (the Snapshot
read with the wake). A create over the limit is held as a frozen task's wakes are (hold.py): the
wake kept on the task's held list, the sender told "held", nothing refused; the timer lets it in
when a slot frees and wakes the task, and the held create is replayed then (consumers/timer/fair.py).
What a change does to the count follows from the stored state, so a redelivery or a replay
redoes it.
"""

from __future__ import annotations

import time
from typing import Any

from wakeful.authority.limit_store import counting
from wakeful.authority.snapshot import Snapshot
from wakeful.consumers.gate.wake import Taken
from wakeful.core.log import Log
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk.app import App
from wakeful.state import fair, first_step
from wakeful.workflow import engine, limits

WHEN = "it starts when one of the tenant's tasks in flight ends"  # a held create's receipt says so


class Fair:
    def __init__(self, client: Any, app: App, log: Log) -> None:
        self.client, self.app, self.log = client, app, log

    def held(self, step: Taken, decided: Checkpoint) -> str | None:
        """Why the create `step` carries is held over its tenant's limit, or None: it may go on
        (no limit holds the tenant, the task is stored already, or it takes a slot now). A held
        create is queued by the priority of the workflow that `decided` its task, then by arrival."""
        wake, task_id = step.wake, step.wake.envelope.task_id
        limit = limits.applying(wake.auth.limits, wake.tenant)
        if limit is None or _stored(step):
            return None  # a create for a stored task is a duplicate or refused: its slot is its own
        priority = engine.workflow_of(self.app, decided).priority
        if fair.take(self.client, wake.tenant, task_id, limit.max_in_flight, _now_ms(), priority=priority):
            return None
        said = f" (damaged record: {limit.damaged})" if limit.damaged else ""
        self.log("gate.fair_held", task_id=task_id, tenant=wake.tenant, limit=limit.max_in_flight)
        return f"tenant {wake.tenant} has {limit.max_in_flight} tasks in flight, its limit{said}"

    def refused(self, step: Taken) -> None:
        """A create the workflow refused starts no task: a slot it was let into goes back."""
        wake = step.wake
        if counting(wake.auth.limits) and not _stored(step):
            fair.give_back(self.client, wake.tenant, wake.envelope.task_id)

    def after(self, cp: Checkpoint, auth: Snapshot, was: str | None = None) -> None:
        """After a change that left the task as `cp` (from stage `was`, when it is known): its
        slot given back once it no longer occupies one, or taken again when a person let it out
        of review."""
        if limits.frees(self.app, cp, auth.limits):
            fair.give_back(self.client, cp.security.tenant, cp.task_id)
        elif was is not None and limits.retakes(self.app, was, cp, auth.limits):
            fair.count_again(self.client, cp.security.tenant, cp.task_id, _now_ms())


def _stored(step: Taken) -> bool:
    """Whether the task was stored when the wake read it."""
    return first_step.watched(step.first)[0] is not None


def _now_ms() -> int:
    return int(time.time() * 1000)
