"""The gate's create: a create event's wake starts a task of the workflow it names (the app's
first by default), or is refused with a receipt that says why, or, over its tenant's in-flight
limit, is held until a slot frees (fair.py)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import Any

from wakeful.consumers.gate import memory_read as gate_memory
from wakeful.consumers.gate import rules as gate_rules
from wakeful.consumers.gate import writes as gate_writes
from wakeful.consumers.gate.fair import Fair
from wakeful.consumers.gate.wake import Taken, Wake, identity
from wakeful.core import metrics
from wakeful.core.errors import TaskExists
from wakeful.core.faults import fault
from wakeful.core.log import Log
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk.app import App
from wakeful.sdk.workflow import WORKFLOW_FIELD, Refuse, Start
from wakeful.state import last_step
from wakeful.state.store import Change, Store
from wakeful.workflow import engine


def create(
    step: Taken,
    now: datetime,
    *,
    app: App,
    store: Store,
    writes: gate_writes.FollowUps,
    log: Log,
    fair: Fair,
    hold: Callable[[str], None],
) -> None:
    """A create event's wake: the workflow the event names starts the task, or refuses it; over
    its tenant's limit, the decided create is held (`hold`, with why) instead; the task is stored
    with its evidence and its sender's receipt, and what follows is done."""
    wake, task_id = step.wake, step.wake.envelope.task_id
    event = wake.event
    assert event is not None and wake.principal is not None
    workflow = event.payload.get(WORKFLOW_FIELD, app.workflows[0].name)
    fields = {k: v for k, v in event.payload.items() if k != WORKFLOW_FIELD}  # not the app's
    start = Start(task_id, wake.principal, wake.tenant, fields, wake.auth, now)
    decided = engine.create(app, str(workflow), start)
    if isinstance(decided, Refuse):
        metrics.event_refused(decided.reason)
        fair.refused(step, str(workflow))
        return writes.finish(event, "rejected", decided.reason, task_id, None, pinned=step.pinned)
    over = fair.held(step, decided.checkpoint)
    if over is not None:
        return hold(over)
    decided = gate_rules.parked_move(app, decided, wake.auth)  # its first stage's tools all off (D117)
    created = _stored(step, decided, now, app=app, store=store, writes=writes)
    if created is None:
        return None  # another task has its id: refused
    fair.after(created.checkpoint, wake.auth)  # from the stored state: a duplicate redoes it
    if created.status == "applied":
        stage = created.checkpoint.stage
        log("gate.receipt", task_id=task_id, event_id=event.event_id, status="accepted", stage=stage)
    return None


def _stored(
    step: Taken,
    decided: engine.Moved,
    now: datetime,
    *,
    app: App,
    store: Store,
    writes: gate_writes.FollowUps,
) -> Change | None:
    """The decided task stored with its evidence, its memory and its sender's receipt, and what
    follows done: the change, or None when another task has its id (the sender is told)."""
    wake, task_id = step.wake, step.wake.envelope.task_id
    event = wake.event
    assert event is not None and wake.principal is not None
    finish = functools.partial(writes.finish, pinned=step.pinned)
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
        finish(event, "rejected", f"task {task_id} already exists", task_id, None)
        return None
    cp = created.checkpoint
    if created.status == "duplicate":  # applied before: follow up on the stored evidence, not this copy's
        finish(None, "", "", task_id, cp)
        writes.follow_up(cp, stored)
        return created
    fault("gate.after_cas")
    writes.follow_up(cp, wake)
    return created
