"""Gate 7 for any workflow: a proposal against Progress and live authority, and what an effect's
outcome does to the task. Pure but for one counter (a tool the stage does not offer): the executor
loads, calls these, and writes what they return.

The runtime's checks come first and no app can skip them: the tool is offered at the task's stage,
its arguments fit the tool's model, and, where the workflow says a step needs an approval, the
approval binds this task version and its terms, permits this workflow's scope, has not expired or
been used, and its approver is still an approver; and the app's policy, in the version the task is
stamped with, permits the tool (the action) to the approver, else the requester (authority/policy.py).
Then the workflow's own check has its say.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from wakeful.authority.snapshot import Snapshot
from wakeful.core import metrics
from wakeful.schemas.base import cut
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk.app import App
from wakeful.sdk.memory import Remember
from wakeful.sdk.workflow import Compensate, Effect, Next, Refuse, Review
from wakeful.workflow import engine, pending, plans, steps
from wakeful.workflow.engine import APPROVAL_WAIT


def check_proposal(
    app: App,
    cp: Checkpoint,
    tool: str,
    args: Mapping[str, Any],
    *,
    auth: Snapshot,
    now: datetime,
    unusable: str | None = None,
    failed: str | None = None,
) -> Effect | Refuse | Review:
    """What to execute for this proposal, or why not (Refuse: recorded; Review: parked).

    unusable: the proposer could not read the model's reply as a proposal (recorded, the task
    stays). failed: the model failed for good (parked for a person)."""
    b, waits = cp.business, cp.execution.pending_waits
    if waits and waits[0].wait_for == APPROVAL_WAIT:
        return Refuse(f"this step needs an approval for version {b.version} first")
    if waits:
        return Refuse(f"task waits for {waits[0].wait_for}; nothing may run")
    if not app.tools_at(cp.stage):
        return Refuse(f"task is {cp.stage}; nothing may run")
    if failed is not None:
        return Review(f"the model failed: {cut(failed, 200)}")
    if unusable is not None:
        return Refuse(f"the model's reply was not a usable proposal: {cut(unusable, 200)}")
    found = app.tool(tool)
    if found is None or cp.stage not in found.stages:
        # Counted where every proposal's tool is judged: a model reaching for a tool it was not
        # offered is an alert (docs/alerts.md), not only a review. A counter is all this touches.
        metrics.unexpected_tool(app.name, found.name if found else None)
        return Review(f"tool {cut(repr(tool), 64)} is not permitted at stage {cp.stage}")
    try:
        parsed = found.args.model_validate(dict(args))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "arguments"
        return Review(f"arguments for {found.name} do not fit its model: {where}: {cut(first['msg'], 120)}")
    wf = engine.workflow_of(app, cp)
    ctx = engine.context(app, cp, auth, now)
    if found.effect and wf.needs_approval(ctx):  # a read-only tool needs no approval
        unbound = _unbound(cp, wf.approval_scope or f"{wf.name}.execute", auth, now)
        if unbound is not None:
            return Review(unbound)
        if wf.approval_plan is not None:  # the model may propose another step: told why, nothing spent
            beyond = plans.refused(wf, cp, found.name, parsed.model_dump(mode="json"))
            if beyond is not None:
                return Refuse(beyond)
    approval = b.approval
    facts: dict[str, Any] = (
        {} if approval is None else {"approver": approval.approver_ref, "version": approval.object_version}
    )
    # a policy may forbid a tool by what it reaches: context.egress.contains("...") (D116)
    facts |= {"egress": list(found.egress)} if found.egress else {}
    decision = ctx.authorize(approval.approver_ref if approval else ctx.requester, found.name, **facts)
    if not decision.allowed:
        return Review(decision.reason)
    return wf.check(ctx, Effect(found.name, parsed, found.key_for(cp.task_id, b.version, cp.execution.step)))


def refused(app: App, cp: Checkpoint, reason: str) -> Checkpoint:
    """The task after its proposal was refused (its workflow's check said Refuse, or the model's
    reply was no usable proposal): it stays, with the reason and one more refusal in a row counted
    (execution.attempts), and the model is asked again, shown why (window.build); the refusal past
    the workflow's max_reproposals parks it in needs_review instead. Counted in the transition
    that records it: a proposal redelivered after it answers an older state_version and is
    dead-lettered, never counted."""
    wf = engine.workflow_of(app, cp)
    count = cp.execution.attempts + 1
    if count > wf.max_reproposals:
        asked = f"asked again {wf.max_reproposals} times" if wf.max_reproposals else "not asked again"
        return engine.review(cp, f"{count} proposals in a row were refused ({asked}); the last: {reason}")
    business = cp.business.model_copy(update={"last_refusal": reason})
    execution = cp.execution.model_copy(update={"attempts": count})
    return cp.model_copy(update={"business": business, "execution": execution})


def refusal_detail(old: Checkpoint, new: Checkpoint) -> dict[str, Any]:
    """The history's record of a refused proposal (its outbox record on wakeful.log): why, which
    refusal in a row, and whether it parked the task."""
    count = old.execution.attempts + 1
    return {"refused": new.business.last_refusal, "refusals": count, "parked": new.stage != old.stage}


def _unbound(cp: Checkpoint, scope: str, auth: Snapshot, now: datetime) -> str | None:
    """Why the task's approval does not permit this step now, or None."""
    b, approval = cp.business, cp.business.approval
    if approval is None:
        return f"this step needs an approval for version {b.version}, and there is none"
    if not approval.binds(b.version, engine.terms(cp)):
        return f"approval is for version {approval.object_version}, task is now version {b.version}"
    if approval.scope != scope:
        return f"the approval is for {approval.scope!r}, not {scope!r}"
    if approval.expired(now):
        return "the approval has expired"
    if approval.single_use and approval.consumed:
        return "the single-use approval was already used"
    if approval.approver_ref not in auth.approvers:
        return f"approver {approval.approver_ref} is no longer authorised"
    if approval.approver_ref == engine.requester(cp):
        return "a requester cannot approve their own request"
    return None


def done(
    app: App,
    cp: Checkpoint,
    tool: str,
    result: Mapping[str, Any],
    *,
    auth: Snapshot,
    now: datetime,
    args: Mapping[str, Any] | None = None,
    learned: list[Remember] | None = None,
) -> Checkpoint:
    """The task after `tool` (called with `args`) succeeded: the workflow says where it goes; an
    approval that the step needed is used up (a read-only tool's uses none); a step of a stage's
    loop is counted, its result kept for the next proposal (workflow/steps.py). A call whose answer
    comes later (its result a pending marker) puts the task to sleep on its completion instead
    (workflow/pending.py), the approval used up all the same: the call was made. What the
    workflow's `done` remembers is added to `learned` (the caller writes it: workflow/memory.py)."""
    wf = engine.workflow_of(app, cp)
    ctx = engine.context(app, cp, auth, now)
    found = app.tool(tool)
    needed = (found is None or found.effect) and wf.needs_approval(ctx)
    later = pending.due(result, now) if found is not None and found.completed_by else None
    if later is not None and found is not None:
        op_key = found.key_for(cp.task_id, cp.business.version, cp.execution.step)
        after = pending.waiting(cp, found, op_key, args or {}, later)
    else:
        after = _decided(cp, wf.done(ctx, tool, result), now, learned)
    approval = after.business.approval
    if needed and approval is not None:
        used = plans.used(wf, cp, approval, tool, args or {})
        after = after.model_copy(update={"business": after.business.model_copy(update={"approval": used})})
    if later is not None:
        return after
    return steps.after(app, wf, cp, after, (tool, args or {}, result))


def completed(
    app: App,
    cp: Checkpoint,
    tool: str,
    result: Mapping[str, Any],
    *,
    auth: Snapshot,
    now: datetime,
    args: Mapping[str, Any],
    learned: list[Remember] | None = None,
) -> Checkpoint:
    """The task after the completion of `tool`'s call (made with `args`, its approval used up when
    it was made) brought `result`: as done() after a call that answered at once."""
    wf = engine.workflow_of(app, cp)
    after = _decided(cp, wf.done(engine.context(app, cp, auth, now), tool, result), now, learned)
    return steps.after(app, wf, cp, after, (tool, args, result))


def _decided(
    cp: Checkpoint, decided: Next[Any] | Review, now: datetime, learned: list[Remember] | None
) -> Checkpoint:
    if isinstance(decided, Review):
        return engine.review(cp, decided.reason)
    if learned is not None:
        learned.extend(decided.remember)
    return engine.advance(cp, decided, now)


def failed(
    app: App, cp: Checkpoint, tool: str, reason: str, *, auth: Snapshot, now: datetime
) -> Compensate | Review:
    """What to do when `tool` failed for good: undo what the workflow names, or park the task."""
    wf = engine.workflow_of(app, cp)
    if wf.failed is None:
        return Review(reason)
    return wf.failed(engine.context(app, cp, auth, now), tool, reason)
