"""Tools whose answer comes later (sdk.tools.Pending): the call's handle recorded once, the task
asleep on a completion, and the completion applied once. Pure.

The executor calls the tool under its op key as always. A call that returns Pending is recorded on
the action log as the step's outcome, a marker that names the handle and the deadline (`recorded`),
so a crash after it finds it again by its key like any other outcome, and the call is never made a
second time. The close then puts the task to sleep (`waiting`): a wait for `tool.completed` from the
tool's `completed_by`, bound to the task version, with the tool's deadline rule, and the call kept
as the stage's latest result, marked pending, with its handle.

The gate applies a `tool.completed` event (`answer`, then effects.completed): the one for the
handle the task waits on, from a signer the wait names, before its deadline. A second completion
finds no wait and is refused with a receipt, as is one for a handle the task does not wait on.

A deadline that passes (or any park for review) clears the wait but keeps the call as pending: the
call was made, its answer is still to come. A reopen that sends the task back where the call's tool
is offered puts it to sleep on that same call again (`again`): its op key, handle and correlation
id, the deadline the action log's marker records, or once that has passed as long again from now.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from wakeful.schemas import events
from wakeful.schemas.base import cut
from wakeful.schemas.checkpoint import Checkpoint, PendingWait, StepResult
from wakeful.schemas.logs import ActionLogEntry, ActionStatus
from wakeful.sdk.tools import Pending, Tool
from wakeful.sdk.workflow import Refuse

HANDLE = re.compile(r"[A-Za-z0-9_.:@/-]{1,200}")
LONGEST = timedelta(days=90)  # the furthest a completion's deadline may be
# The marker an outcome on the action log carries when the call's answer comes later. Keys a tool's
# own result cannot clash with: its result is shown under these names only while it is pending.
MARK, DUE, WITHIN = "wakeful.pending", "wakeful.due", "wakeful.within"
PENDING = "pending"  # the status a pending call's kept result shows
RESULT_VALUES = 50  # the most values a completion's result may carry


def recorded(tool: Tool[Any], later: Pending, now: datetime) -> dict[str, str] | str:
    """What the action log records for a call that returned `later`: the marker, with the
    deadline made absolute once (a redelivery keeps it); or why the step fails for good."""
    if not tool.completed_by:
        return f"{tool.name} returned Pending but names no one who may complete it (Tool.completed_by)"
    handle = later.handle
    if not isinstance(handle, str) or not HANDLE.fullmatch(handle):
        return f"{tool.name} returned the handle {cut(repr(handle), 80)}, not 1-200 of {HANDLE.pattern}"
    due = later.deadline if isinstance(later.deadline, datetime) else now + later.deadline
    if due.tzinfo is None or not now < due <= now + LONGEST:
        return f"{tool.name} returned a deadline {due.isoformat()}, not in the next {LONGEST.days} days"
    return {MARK: handle, DUE: due.isoformat(), WITHIN: str(int((due - now).total_seconds()))}


def outcome(tool: Tool[Any], answer: Mapping[str, Any] | Pending, now: datetime) -> Mapping[str, Any] | str:
    """What the action log records of a call's (or a lookup's) answer: the result, or for an
    answer that comes later its marker; or why the step fails for good."""
    return recorded(tool, answer, now) if isinstance(answer, Pending) else plain(tool, answer)


def plain(tool: Tool[Any], result: Mapping[str, Any]) -> Mapping[str, Any] | str:
    """A result a call returned at once, or why the step fails for good: it may not carry the
    runtime's marker (a downstream echoing outside text could otherwise pass for a pending call)."""
    if any(name in result for name in (MARK, DUE, WITHIN)):
        return f"{tool.name} returned a result with the runtime's names {MARK}, {DUE} or {WITHIN}"
    return result


def due(result: Mapping[str, Any], now: datetime) -> tuple[str, datetime] | None:
    """(handle, deadline) if `result` is a pending call's marker, else None. The deadline is the
    one the call set; once it has passed (the task was parked, then reopened, and waits again on
    the same call), as long again from `now`."""
    handle, when, within = result.get(MARK), result.get(DUE), result.get(WITHIN)
    if not isinstance(handle, str) or not isinstance(when, str) or not isinstance(within, str):
        return None
    try:
        deadline, again = datetime.fromisoformat(when), now + timedelta(seconds=int(within))
    except ValueError:
        return None
    return handle, deadline if deadline > now else again


def waiting(
    cp: Checkpoint, tool: Tool[Any], op_key: str, args: Mapping[str, Any], later: tuple[str, datetime]
) -> Checkpoint:
    """The task asleep on the completion of `tool`'s call under `op_key` (`later`: its handle and
    deadline), the call kept as the stage's latest result, pending."""
    handle, deadline = later
    b = cp.business
    cid = hashlib.sha256(f"{cp.task_id}:v{b.version}:{op_key}".encode()).hexdigest()[:20]
    wait = PendingWait(
        wait_for=events.COMPLETE,
        correlation_id=f"corr-{cid}",
        bound_to_version=b.version,
        allowed_signers=tool.completed_by,
        deadline=deadline,
        on_deadline=tool.on_deadline,
    )
    call = StepResult(
        tool=tool.name,
        op_key=op_key,
        args=dict(args),
        result={"status": PENDING, "handle": handle, "due": deadline.isoformat()},
        trust=tool.output_trust,
    )
    kept = (*(r for r in cp.execution.results if r.op_key != op_key), call)
    execution = cp.execution.model_copy(update={"pending_waits": (wait,), "results": kept, "attempts": 0})
    business = b.model_copy(update={"last_refusal": None})
    return cp.model_copy(update={"business": business, "execution": execution})


def awaited(cp: Checkpoint) -> StepResult | None:
    """The call whose completion the task waits on, or None."""
    if not any(w.wait_for == events.COMPLETE for w in cp.execution.pending_waits):
        return None
    return unanswered(cp)


def unanswered(cp: Checkpoint) -> StepResult | None:
    """The call of the task's stage whose answer has not come, waited on or not (a deadline or a
    review clears the wait, never the call): its latest result, still pending; or None."""
    latest = cp.execution.results[-1] if cp.execution.results else None
    return latest if latest is not None and latest.result.get("status") == PENDING else None


def outcomes(entries: Mapping[str, ActionLogEntry]) -> dict[str, Mapping[str, Any]]:
    """What the action log (op key -> entry) records of each call that succeeded: its result, or
    for a call that returned Pending its marker."""
    return {
        op_key: e.result
        for op_key, e in entries.items()
        if e.status is ActionStatus.SUCCEEDED and e.result is not None
    }


def again(
    cp: Checkpoint, tool: Tool[Any] | None, recorded: Mapping[str, Mapping[str, Any]], now: datetime
) -> Checkpoint | Refuse | None:
    """A reopened task (`cp`: where the reopen sends it) asleep again on the call whose answer has
    not come, when it lands where that call's `tool` is offered and waits for nothing else; None
    when there is no such call, or the reopen sent the task elsewhere. `recorded`: the action log's
    outcomes (`outcomes`), whose marker must vouch for the call and its handle."""
    call = unanswered(cp)
    if call is None or cp.execution.pending_waits or tool is None or cp.stage not in tool.stages:
        return None
    handle, marker = call.result.get("handle"), recorded.get(call.op_key)
    if not tool.completed_by or (marker is not None and MARK not in marker):
        return None  # a call that answered at once, whose result merely reads "pending"
    later = due(marker, now) if marker is not None else None
    if later is None:
        return Refuse(
            f"the task waits for the completion of {call.tool} (handle {handle}), but the action log "
            f"has no pending record of its call {call.op_key}: a reopen cannot make that wait again"
        )
    if later[0] != handle:
        return Refuse(
            f"the task waits for the completion of {call.tool} under handle {handle}, but the action "
            f"log records handle {cut(repr(later[0]), 80)} for {call.op_key}: a reopen cannot make "
            "that wait again"
        )
    return waiting(cp, tool, call.op_key, call.args, later)


@dataclass(frozen=True)
class Completed:
    """A completion that applies: the call it completes, the task with the wait cleared and the
    call no longer kept as pending, and what the call returned, or why it failed for good."""

    call: StepResult
    cleared: Checkpoint
    result: dict[str, str]
    failed: str | None = None


def answer(cp: Checkpoint, payload: Mapping[str, Any]) -> Completed | Refuse:
    """A completion's payload against the call the task waits on (signer and deadline checked by
    the caller): the one for its handle, with a result of names and plain values, or a failure."""
    call = awaited(cp)
    handle = payload.get("handle")
    if call is None:
        return Refuse("no tool call of this task waits for a completion")
    if not isinstance(handle, str) or handle != call.result.get("handle"):
        return Refuse(f"no tool call of this task waits under handle {cut(repr(handle), 80)}")
    execution = cp.execution.model_copy(
        update={"pending_waits": (), "results": cp.execution.results[:-1], "attempts": 0}
    )
    cleared = cp.model_copy(update={"execution": execution})
    failed = payload.get("failed")
    if failed is not None:
        if not isinstance(failed, str) or not failed:
            return Refuse("a completion's failed names why, as text")
        return Completed(call, cleared, {}, f"{call.tool} failed downstream: {cut(failed, 300)}")
    result = payload.get("result", {})
    if not isinstance(result, dict) or len(result) > RESULT_VALUES:
        return Refuse(f"a completion's result is an object of at most {RESULT_VALUES} names")
    if not all(isinstance(v, str | int | float | bool) for v in result.values()):
        return Refuse("a completion's result holds text, numbers and booleans only")
    if any(k in (MARK, DUE, WITHIN) for k in result):
        return Refuse(f"a completion's result may not use the runtime's names {MARK}, {DUE}, {WITHIN}")
    return Completed(call, cleared, {str(k): str(v) for k, v in result.items()})
