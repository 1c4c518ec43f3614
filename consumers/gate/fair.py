"""The gate's side of a tenant's in-flight limit (D108) and a workflow's (D112): a create the
workflow decided is admitted or held, and a change gives its task's slot back or takes one again.

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
        """Why the create `step` carries is held over its tenant's limit or its workflow's, or
        None: it may go on (no limit holds it, the task is stored already, or it takes a slot
        now). A held create is queued by the priority of the workflow that `decided` its task,
        then by arrival: in its workflow's own queue while a limit holds the workflow (D112)."""
        wake, task_id = step.wake, step.wake.envelope.task_id
        workflow = decided.business.workflow
        limit = limits.applying(wake.auth.limits, wake.tenant)
        of_workflow = limits.of_workflow(wake.auth.limits, self.app.name, workflow)
        if (limit is None and of_workflow is None) or _stored(step):
            return None  # a create for a stored task is a duplicate or refused: its slot is its own
        priority = engine.workflow_of(self.app, decided).priority
        line = fair.Line(wake.tenant, (self.app.name, workflow), own_queue=of_workflow is not None)
        slots, at_most = limits.slots(limit), limits.slots(of_workflow)
        if fair.take(self.client, line, task_id, slots, _now_ms(), priority=priority, workflow_limit=at_most):
            return None
        self.log("gate.fair_held", task_id=task_id, tenant=wake.tenant, limit=slots, workflow_limit=at_most)
        return _why(wake.tenant, workflow, limit, of_workflow)

    def refused(self, step: Taken, workflow: str) -> None:
        """A create `workflow` refused starts no task: a slot it was let into goes back."""
        wake = step.wake
        if counting(wake.auth.limits) and not _stored(step):
            fair.give_back(self.client, wake.tenant, wake.envelope.task_id, (self.app.name, workflow))

    def after(self, cp: Checkpoint, auth: Snapshot, was: str | None = None) -> None:
        """After a change that left the task as `cp` (from stage `was`, when it is known): its
        slot given back once it no longer occupies one, or taken again when a person let it out
        of review."""
        workflow = (self.app.name, cp.business.workflow)
        if limits.frees(self.app, cp, auth.limits):
            fair.give_back(self.client, cp.security.tenant, cp.task_id, workflow)
        elif was is not None and limits.retakes(self.app, was, cp, auth.limits):
            fair.count_again(self.client, cp.security.tenant, cp.task_id, _now_ms(), workflow)


def _why(tenant: str, workflow: str, limit: limits.Limit | None, of_workflow: limits.Limit | None) -> str:
    """A held create's reason: the limits that hold it, a damaged record's named."""
    parts = [] if limit is None else [f"{limit.max_in_flight} tasks in flight, its limit{_damaged(limit)}"]
    if of_workflow is not None:
        parts.append(
            f"{of_workflow.max_in_flight} of workflow {workflow} in flight, the workflow's limit"
            f"{_damaged(of_workflow)}"
        )
    return f"tenant {tenant} has " + " or ".join(parts)


def _damaged(limit: limits.Limit) -> str:
    return f" (damaged record: {limit.damaged})" if limit.damaged else ""


def _stored(step: Taken) -> bool:
    """Whether the task was stored when the wake read it."""
    return first_step.watched(step.first)[0] is not None


def _now_ms() -> int:
    return int(time.time() * 1000)
