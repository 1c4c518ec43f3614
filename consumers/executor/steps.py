"""The executor's dealings with a tool, each under an op key so that it happens at most once: the
call, a step a crash left behind found again by its key, and the undo of the steps that succeeded
when a workflow compensates.

A step's call is made once per handling (`call_once`). A tool that is unavailable is not waited for
under the lease: `after_unavailable` counts the attempt (kept on the step's action-log entry) and
either fails the step for good, after `Tool.attempts`, or says how long the message should wait
before it is handled again, with the lease given back meanwhile (docs/decisions.md D61).

A tool held to a number of calls a second (D109) or calls at once (D111) counts each step's call
before its intent is written (`wait_turn`); a call over it is not made now: the message waits its
turn, the lease given back meanwhile, as for an unavailable tool. The step's slot of its tool's
calls at once is given back once its call has ended, however it ended.

settled() and compensate() write to the action log under the lease they are given; none of these
moves the task's stage (the executor does, after).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from wakeful.authority.snapshot import Snapshot
from wakeful.consumers.executor import guarding
from wakeful.consumers.executor.guarding import EgressRefusal
from wakeful.core import metrics
from wakeful.core.errors import LeaseLost
from wakeful.core.faults import fault
from wakeful.core.log import Log
from wakeful.core.retry import Retry, backoff
from wakeful.core.tracing import tool_call
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.events import Envelope
from wakeful.schemas.logs import UNDO_PREFIX, ActionLogEntry, ActionStatus
from wakeful.schemas.proposals import Call
from wakeful.sdk.app import App
from wakeful.sdk.tools import Pending, Tool, ToolFenced, ToolRefused, ToolUnavailable
from wakeful.sdk.workflow import Compensate, Effect, Refuse
from wakeful.state import rates as counted
from wakeful.state.actions import ActionLog
from wakeful.state.lease import Lease
from wakeful.workflow import batch, pending, rates, switches


@dataclass(frozen=True)
class Ran:
    """A call that answered: its tool, its op key, what it returned, and its arguments (as JSON)."""

    tool: str
    op_key: str
    result: Mapping[str, Any]
    args: Mapping[str, Any]


@dataclass(frozen=True)
class Unavailable:
    """The tool could not be reached this time (ToolUnavailable); it may be later."""

    reason: str


@metrics.tool_calls
def call_once(
    tool: Tool[Any], op_key: str, attempt: Callable[[], Mapping[str, Any] | Pending], lease: Lease
) -> Mapping[str, Any] | Unavailable | str:
    """One call, held to the tool's egress (D116): the tool's result (for an answer that comes
    later, the marker the action log records: workflow/pending.py), Unavailable, or why the step
    failed for good, which is what the guard refused if it refused anything, whatever the tool made
    of it. A fence the downstream refused is the lease lost (LeaseLost)."""
    try:
        made = guarding.held(tool, lease.task_id, attempt, (op_key, lease.fence))
    except ToolUnavailable as exc:
        return Unavailable(str(exc))
    except ToolRefused as exc:
        return f"{tool.name} refused: {exc}"
    except ToolFenced as exc:
        raise LeaseLost(lease.task_id, lease.token, str(exc)) from exc
    if isinstance(made, guarding.EgressRefusal):
        return made.reason
    return pending.outcome(tool, made, datetime.now(UTC))


call_once = tool_call(call_once)  # a span per call, with the tool's name and its outcome (D75)


def call_more(app: App, more: Sequence[Effect], lease: Lease) -> list[Ran]:
    """The read-only calls that share a turn with its first (D68), in order: each that answered,
    up to the first that did not (unavailable, refused, or an answer that comes later): the model
    sees what came back and may ask again."""
    made = []
    for effect in more:
        tool = app.tool(effect.tool)
        assert tool is not None and not tool.effect  # batch.check judged it
        outcome = call_once(
            tool, effect.op_key, functools.partial(tool.call, effect.op_key, effect.args, lease.fence), lease
        )
        if isinstance(outcome, Unavailable | str) or pending.MARK in outcome:
            break
        made.append(Ran(tool.name, effect.op_key, dict(outcome), effect.args.model_dump(mode="json")))
    return made


def after_unavailable(tool: Tool[Any], tried: int, reason: str) -> float | str:
    """After the `tried`-th call under an op key found the tool unavailable (counted over every
    handling of the step): the seconds to wait, without the lease, before the message is handled
    again; or, once `tool.attempts` calls have been made, why the step failed for good."""
    if tried < tool.attempts:
        return backoff(tried)
    where = tool.egress[0] if tool.egress else tool.name
    return f"{where} unavailable after {tried} attempts: {reason}"


def call(
    tool: Tool[Any], op_key: str, attempt: Callable[[], Mapping[str, Any]], lease: Lease
) -> Mapping[str, Any] | str:
    """An undo's call, retried in place while the tool is unavailable (at most `tool.attempts`
    calls, well under a second of backoff in all, under the executor's heartbeat); or why it
    failed for good."""
    tried = 0
    while True:  # ends: after_unavailable fails the step once `tool.attempts` calls were made
        tried += 1
        outcome = call_once(tool, op_key, attempt, lease)
        if not isinstance(outcome, Unavailable):
            return outcome
        decided = after_unavailable(tool, tried, outcome.reason)
        if isinstance(decided, str):
            return decided
        time.sleep(decided)


def settled(
    app: App, actions: ActionLog, cp: Checkpoint, ops: dict[bytes, bytes], lease: Lease
) -> Ran | None:
    """This stage's current step if it already ran, recording an outcome that a crash left
    unrecorded; None if it did not."""
    for tool in app.tools_at(cp.stage):
        op = tool.key_for(cp.task_id, cp.business.version, cp.execution.step)
        raw = ops.get(op.encode())
        intent = ActionLogEntry.decode(raw) if raw else None
        if intent is None or intent.status is ActionStatus.FAILED:
            continue
        if intent.status is ActionStatus.SUCCEEDED and intent.result is not None:
            return Ran(tool.name, op, intent.result, dict(intent.args or {}))
        looked = look_up(tool, cp.task_id, op, lease.fence)
        if looked is None or isinstance(looked, EgressRefusal):
            continue
        found = pending.outcome(tool, looked, datetime.now(UTC))
        if isinstance(found, str):  # not recordable: the call again under the key says so, and fails
            continue
        if intent.status is ActionStatus.IN_FLIGHT:
            actions.complete(cp.task_id, op, lease.fence, dict(found), intent)
        return Ran(tool.name, op, dict(found), dict(intent.args or {}))
    return None


def look_up(
    tool: Tool[Any], task_id: str, op: str, fence: int
) -> Mapping[str, str] | Pending | EgressRefusal | None:
    """The tool's lookup of `op` under the lease at `fence`, held to its egress: EgressRefusal when
    the guard refused anything tried (a call again under the key is refused too, and says so)."""
    return guarding.held(tool, task_id, lambda: tool.lookup(op), (op, fence))


def compensate(
    app: App, actions: ActionLog, cp: Checkpoint, decided: Compensate, lease: Lease, *, log: Log
) -> tuple[str, dict[str, str]]:
    """Undo each named tool's succeeded step of this task version, once each. Returns the reason
    to park the task with (saying what could not be undone, if anything), and the refs that
    record each undo (`undone:<tool>` -> the op key undone), which the workflow sees after."""
    failures: list[str] = []
    undone: dict[str, str] = {}
    for name in decided.tools:
        tool = app.tool(name)
        if tool is None or not tool.reversible:
            failures.append(f"{name} cannot be undone")
            continue
        op = tool.key_for(cp.task_id, cp.business.version)
        done = actions.lookup(cp.task_id, op)
        if done is None or done.status is not ActionStatus.SUCCEEDED:
            continue  # nothing was done, so nothing to undo
        failed = undo(actions, cp.task_id, tool, done, lease, log=log)
        if failed is not None:
            failures.append(failed)
            continue
        undone[f"undone:{name}"] = op
    names = ", ".join(key.removeprefix("undone:") for key in undone)
    said = "; ".join(failures) or f"undid {names or 'nothing: nothing had been done'}"
    return f"{decided.reason} ({said})", undone


def undo(
    actions: ActionLog, task_id: str, tool: Tool[Any], done: ActionLogEntry, lease: Lease, *, log: Log
) -> str | None:
    """Undo one succeeded step, once, under its own op key (UNDO_PREFIX + the step's): None once
    it is undone, now or before; else why it could not be."""
    op, undo_op = done.op_key, f"{UNDO_PREFIX}{done.op_key}"
    args = tool.args.model_validate(done.args or {}, strict=False)
    begun = actions.begin(task_id, undo_op, lease.fence, lease.token, tool=tool.name, args=done.args)
    if begun.entry.status is ActionStatus.SUCCEEDED:
        return None
    outcome = call(tool, undo_op, functools.partial(tool.undo, op, args, lease.fence), lease)
    if isinstance(outcome, str):
        actions.fail(task_id, undo_op, lease.fence, outcome)
        return f"undo of {tool.name} failed: {outcome}"
    fault("executor.after_undo")
    actions.complete(task_id, undo_op, lease.fence, dict(outcome), begun.entry)
    log("executor.undone", task_id=task_id, tool=tool.name, op_key=op)
    return None


def unanswered(app: App, cp: Checkpoint, env: Envelope) -> str | None:
    """Why a proposal answers no request the task has outstanding, or None. The gate asks once per
    state_version, and only of a task at a stage that offers a tool and waits for nothing."""
    if env.task_version != cp.state_version:
        return f"stale proposal: decided on state_version {env.task_version}, task is at {cp.state_version}"
    if cp.execution.pending_waits or not app.tools_at(cp.stage):
        return f"no proposal is outstanding: task {cp.task_id} is {cp.stage}"
    if env.in_reply_to != events.request_id(cp.task_id, cp.state_version):
        return f"proposal answers {env.in_reply_to!r}, not the task's outstanding request"
    return None


def superseded(cp: Checkpoint, env: Envelope) -> bool:
    """Whether the task moved on since the proposal's request was made: a proposal decided on an older
    state_version is dropped, not dead-lettered; one that claims a newer one is wrong."""
    return env.task_version < cp.state_version


def judge_more(
    app: App, cp: Checkpoint, first: Effect, more: Sequence[Call], *, auth: Snapshot, now: datetime
) -> list[Effect] | Refuse:
    """The read-only calls a proposal carries after its first (D68), each judged at its own step,
    none switched off; or why the proposal may not share its turn."""
    if not more:
        return []
    judged = batch.check(app, cp, first, [(c.tool, c.args) for c in more], auth=auth, now=now)
    if isinstance(judged, Refuse):
        return judged
    off = next((e.tool for e in judged if switches.refused(app.name, e.tool, None, auth)), None)
    return Refuse(f"{off} is switched off: propose without it") if off else judged


FULL_WAIT_S = 0.2  # a call whose tool runs its most calls at once looks again about this late


@dataclass(frozen=True)
class Turn:
    """A step's call of `tool` counted under its calls at once (D111): `most` 0 when no such limit
    holds the tool. The heartbeat renews the slot with the task's lease; the call's end gives it
    back; a slot an executor's death left behind lapses after a lease's time."""

    client: Any
    log: Log
    app: str
    tool: str
    op_key: str
    most: int = 0
    ttl_ms: int = 0

    def renew(self) -> None:
        if not counted.slot_take(
            self.client, self.app, self.tool, self.op_key, most=self.most, ttl_ms=self.ttl_ms
        ):
            self.log("executor.tool_slot_lost", tool=self.tool, op_key=self.op_key)  # runs on, one over

    def give_back(self) -> None:
        if self.most:
            counted.slot_give_back(self.client, self.app, self.tool, self.op_key)


def wait_turn(
    client: Any, app: App, tool: Tool[Any], auth: Snapshot, *, log: Log, lease: Lease, op_key: str
) -> Turn:
    """Count the step's call of `tool` under its calls per second and its calls at once, if a
    record holds it; a call over either raises Retry after the time until it may look again
    (nothing was written or called, nothing kept counted)."""
    rate, task_id = rates.rate_of(auth.limits, app.name, tool.name), lease.task_id
    if rate is None:
        return Turn(client, log, app.name, tool.name, op_key)
    turn = Turn(client, log, app.name, tool.name, op_key, rate.max_in_flight or 0, lease.ttl_ms)
    if turn.most and not counted.slot_take(
        client, app.name, tool.name, op_key, most=turn.most, ttl_ms=lease.ttl_ms
    ):
        log("executor.tool_full", task_id=task_id, tool=tool.name, most=turn.most)
        raise Retry(f"tool {tool.name} has {turn.most} calls running, its limit", FULL_WAIT_S)
    if rate.calls_per_s is None:
        return turn
    wait = counted.take(client, app.name, tool.name, rate.calls_per_s, rate.burst)
    if wait > 0:
        turn.give_back()
        log("executor.tool_rate", task_id=task_id, tool=tool.name, wait_s=round(wait, 3))
        raise Retry(f"tool {tool.name} is at its limit of {rate.calls_per_s:g} calls a second", wait)
    return turn
