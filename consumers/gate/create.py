"""The gate's create: a create event's wake starts a task of the workflow it names (the app's
first by default), or is refused with a receipt that says why."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any

from wakeful.consumers.gate import memory_read as gate_memory
from wakeful.consumers.gate import writes as gate_writes
from wakeful.consumers.gate.wake import Taken, Wake, identity
from wakeful.core.errors import TaskExists
from wakeful.core.faults import fault
from wakeful.core.log import Log
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk.app import App
from wakeful.sdk.workflow import WORKFLOW_FIELD, Refuse, Start
from wakeful.state import last_step
from wakeful.state.store import Store
from wakeful.workflow import engine


def create(
    step: Taken, now: datetime, *, app: App, store: Store, writes: gate_writes.FollowUps, log: Log
) -> None:
    """A create event's wake: the workflow the event names starts the task, or refuses it; the
    task is stored with its evidence and its sender's receipt, and what follows is done."""
    wake, task_id = step.wake, step.wake.envelope.task_id
    event = wake.event
    assert event is not None and wake.principal is not None
    finish = functools.partial(writes.finish, pinned=step.pinned)
    workflow = event.payload.get(WORKFLOW_FIELD, app.workflows[0].name)
    fields = {k: v for k, v in event.payload.items() if k != WORKFLOW_FIELD}  # not the app's
    start = Start(task_id, wake.principal, wake.tenant, fields, wake.auth, now)
    decided = engine.create(app, str(workflow), start)
    if isinstance(decided, Refuse):
        return finish(event, "rejected", decided.reason, task_id, None)
    stored, evidence = wake, gate_writes.evidence_fields(task_id, decided.evidence)
    if evidence:
        wake = Wake(wake.envelope, event, wake.principal, wake.auth, evidence, tenant=wake.tenant)

    first = decided.checkpoint.model_copy(
        update={"versions": decided.checkpoint.versions.model_copy(update={"state_version": 1})}
    )  # as the create writes it: its state_version names the records it remembers
    who = gate_memory.writer(event, wake.principal, wake.envelope.payload.get("event"))
    remembered = gate_memory.admitted(app, decided, who, first, now, keyring=store.sealer.keyring)
    attached = gate_writes.PerTry(lambda new: gate_writes.attached(event, new, decided.evidence, remembered))

    def also(new: Checkpoint) -> list[tuple[Any, ...]]:
        """The evidence references, the memory records and the receipt, in the transaction that
        creates the task: a create that loses (the task exists) writes none of them."""
        return [*attached(new).inside, *gate_writes.change_receipt(event, None, new)]

    def before(new: Checkpoint) -> list[tuple[Any, ...]]:
        return [*last_step.wait_writes(new), *attached(new).ahead]

    try:
        created = store.create(
            decided.checkpoint,
            identity(wake.envelope, event),
            gate_writes.event_detail(event)
            | gate_memory.detail(*remembered)
            | gate_writes.custody(wake.envelope, event, None, first),
            also=also,
            before=before,
            pinned=step.pinned,
            first=step.first,
        )
    except TaskExists:
        return finish(event, "rejected", f"task {task_id} already exists", task_id, None)
    cp = created.checkpoint
    if created.status == "duplicate":  # applied before: follow up on the stored evidence, not this copy's
        finish(None, "", "", task_id, cp)
        return writes.follow_up(cp, stored)
    fault("gate.after_cas")
    log("gate.receipt", task_id=task_id, event_id=event.event_id, status="accepted", stage=cp.stage)
    return writes.follow_up(cp, wake)
