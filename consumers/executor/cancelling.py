"""A cancelling task's undos, under its lease (workflow/cancels.py says what they are).

The gate moved the task to `cancelling` and asked (events.UNDO_REQUEST); the executor holds the
task's lease, so a step another executor was running has finished, or its holder is gone. A step
left in flight is settled first by its tool's lookup: what the downstream did is recorded (and is
then undone), and what it did not do is recorded as never done, so nothing runs it later. Then
each succeeded step of the declared tools is undone, newest first, once, under its own op key; a
crash anywhere here redoes the undo by the same key, which the downstream does at most once.
"""

from __future__ import annotations

from datetime import UTC, datetime

from wakeful.consumers.executor import guarding
from wakeful.consumers.executor import steps as executor_steps
from wakeful.core.errors import DecodeError
from wakeful.core.log import Log
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.logs import UNDO_PREFIX, ActionLogEntry, ActionStatus
from wakeful.sdk.app import App
from wakeful.state.actions import ActionLog
from wakeful.state.lease import Lease
from wakeful.workflow import cancels, pending

NOT_DONE = "cancelled before it was done"  # a step in flight that the downstream never did


def undo_all(
    app: App, actions: ActionLog, cp: Checkpoint, ops: dict[bytes, bytes], lease: Lease, *, log: Log
) -> tuple[list[ActionLogEntry], list[str]]:
    """The steps undone, and what could not be (each a line), for the cancelling task `cp` whose
    action log `ops` was read with its lease."""
    entries, failures = _entries(ops)
    settled = [_settled(app, actions, cp.task_id, e, lease) for e in entries]
    entries = [entry for entry, _ in settled]
    failures += [why for _, why in settled if why]
    undone: list[ActionLogEntry] = []
    for done in cancels.to_undo(app, cp, entries):
        tool = app.tool(done.tool or "")
        if tool is None or not tool.reversible:
            failures.append(f"{done.tool} cannot be undone: the deployed app has no undo for it")
            continue
        failed = executor_steps.undo(actions, cp.task_id, tool, done, lease, log=log)
        if failed is None:
            undone.append(done)
        else:
            failures.append(failed)
    return undone, failures


def _entries(ops: dict[bytes, bytes]) -> tuple[list[ActionLogEntry], list[str]]:
    """The action log's records, and a line for each that does not decode (left as it is)."""
    entries: list[ActionLogEntry] = []
    failures: list[str] = []
    for op, raw in ops.items():
        try:
            entries.append(ActionLogEntry.decode(raw))
        except DecodeError as exc:
            failures.append(f"action record {op.decode(errors='replace')[:80]} is unreadable: {exc}")
    return entries, failures


def _settled(
    app: App, actions: ActionLog, task_id: str, entry: ActionLogEntry, lease: Lease
) -> tuple[ActionLogEntry, str | None]:
    """A step's record once settled: one left in flight is looked up by its key and recorded as
    done (with what it did) or as never done. Anything else, and an undo, as it is; and one whose
    lookup the egress guard refused (nothing is known of it), with why."""
    if entry.status is not ActionStatus.IN_FLIGHT or entry.op_key.startswith(UNDO_PREFIX):
        return entry, None
    tool = app.tool(entry.tool or "")
    looked = executor_steps.look_up(tool, task_id, entry.op_key, lease.fence) if tool is not None else None
    if isinstance(looked, guarding.EgressRefusal):
        return entry, f"{entry.op_key} could not be looked up: {looked.reason}"
    if tool is not None and looked is not None:
        found = pending.outcome(tool, looked, datetime.now(UTC))
        if not isinstance(found, str):
            return actions.complete(task_id, entry.op_key, lease.fence, dict(found), entry), None
    return actions.fail(task_id, entry.op_key, lease.fence, NOT_DONE), None
