"""A cancel, for any workflow: a signed `task.cancel` ends a task that is not finished, and what its
steps did is undone as the workflow declares (Workflow.cancel_by, Workflow.undo_on_cancel).

The gate rules on the event (`cancel`): the task moves to `cancelling`, its waits dropped and its
version moved on, so no approval or wait it had can answer any more. The executor then, under the
task's lease (a step in flight finishes first, its outcome on the action log), undoes the succeeded
steps of the declared tools, newest first, each once under its own op key (`to_undo`), and ends the
task (`ended`): `cancelled`, or in needs_review with what could not be undone. A workflow that
declares nothing to undo is cancelled at once. Pure: the roles load, call these, and write.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from wakeful.authority.snapshot import Snapshot
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.logs import UNDO_PREFIX, ActionLogEntry, ActionStatus
from wakeful.sdk.app import App
from wakeful.sdk.workflow import CANCELLED, CANCELLING, Refuse
from wakeful.workflow import engine

REASON_CHARS = 200  # of the reason a cancel gives, as the task keeps it
CANCEL_REASON, CANCELLED_BY = "cancel-reason", "cancelled-by"  # the refs a cancel leaves
UNDONE = "undone:"  # an undo's ref, as a failed step's compensation leaves it: undone:<tool> -> op keys


def cancel(
    app: App, cp: Checkpoint, principal: str, payload: Mapping[str, Any], *, auth: Snapshot, now: datetime
) -> engine.Ruling:
    """A verified `task.cancel` from `principal` applied to a task the gate found not finished."""
    wf = engine.workflow_of(app, cp)
    if cp.stage == CANCELLING:
        return Refuse("task is already being cancelled")
    if engine.terminal(wf, cp.stage):
        return Refuse(f"task is {cp.stage}; a finished task cannot be cancelled")
    if not engine.signed_by(wf.cancel_by, principal, cp, auth):
        return Refuse(f"{principal} may not cancel this task")
    reason = payload.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        return Refuse("a cancel needs a reason (payload field reason)")
    b = cp.business
    business = b.model_copy(
        update={
            "stage": CANCELLING if wf.undo_on_cancel else CANCELLED,
            "version": b.version + 1,  # no approval given for what it was can answer any more
            "approval": None,
            "last_refusal": None,
        }
    )
    refs = {**cp.external_refs, CANCEL_REASON: reason.strip()[:REASON_CHARS], CANCELLED_BY: principal}
    refs.pop(engine.PARKED_FROM, None)
    execution = cp.execution.model_copy(update={"pending_waits": (), "attempts": 0})
    moved = cp.model_copy(update={"business": business, "execution": execution, "external_refs": refs})
    return engine.Moved(moved, {})


def to_undo(app: App, cp: Checkpoint, entries: Iterable[ActionLogEntry]) -> list[ActionLogEntry]:
    """The steps a cancel undoes: each succeeded step of a tool the workflow names in
    undo_on_cancel, newest first, not counting the undos themselves (an undo already done is found
    again by its own op key and not called twice)."""
    wanted = set(engine.workflow_of(app, cp).undo_on_cancel)
    done = [
        e
        for e in entries
        if e.status is ActionStatus.SUCCEEDED and e.tool in wanted and not e.op_key.startswith(UNDO_PREFIX)
    ]
    return sorted(done, key=lambda e: (e.finished_at or e.started_at, e.op_key), reverse=True)


def ended(cp: Checkpoint, undone: Iterable[ActionLogEntry], failures: list[str]) -> Checkpoint:
    """The cancelling task once its undos ran: `cancelled`, with a ref per tool naming the op keys
    it undid; or, if an undo could not be done, in needs_review for a person, saying which."""
    ops: dict[str, list[str]] = {}
    for entry in undone:
        ops.setdefault(f"{UNDONE}{entry.tool}", []).append(entry.op_key)
    refs = {**cp.external_refs, **{name: ",".join(keys) for name, keys in ops.items()}}
    if failures:
        why = f"cancel could not undo everything: {'; '.join(failures)}"
        return engine.review(cp.model_copy(update={"external_refs": refs}), why)
    business = cp.business.model_copy(update={"stage": CANCELLED})
    return cp.model_copy(update={"business": business, "external_refs": refs})


def reason_of(cp: Checkpoint) -> str:
    return cp.external_refs.get(CANCEL_REASON, "")
