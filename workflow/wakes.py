"""What a wake does to a task, for any workflow: the runtime's rules first, then the workflow's.

Pure: the gate calls `on_event` or `on_deadline` inside its compare-and-swap and writes what they
return (engine.Ruling).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from wakeful.authority.policy import authorize
from wakeful.authority.snapshot import Snapshot
from wakeful.schemas import events
from wakeful.schemas.approval import Approval
from wakeful.schemas.checkpoint import Checkpoint, PendingWait
from wakeful.sdk.app import App
from wakeful.sdk.memory import Remember
from wakeful.sdk.workflow import (
    APPROVAL_VALID_FOR,
    APPROVERS,
    CANCELLING,
    CLOSED,
    NEEDS_REVIEW,
    REQUESTER,
    Accept,
    Context,
    Next,
    Refuse,
)
from wakeful.workflow import cancels, effects, engine, pending, sleeps, together
from wakeful.workflow.engine import APPROVAL_WAIT, Ruling

APPROVAL_TTL = APPROVAL_VALID_FOR  # an approval's life when its workflow says nothing (D95)


@dataclass(frozen=True)
class Heard:
    """A signed event as the gate verified it: its kind, payload, signer and correlation id."""

    kind: str
    payload: Mapping[str, Any]
    principal: str
    correlation_id: str | None = None


def on_event(
    app: App,
    cp: Checkpoint,
    event: Heard,
    *,
    auth: Snapshot,
    now: datetime,
    started: frozenset[str] = frozenset(),
    recorded: Mapping[str, Mapping[str, Any]] | None = None,
) -> Ruling:
    """One signed event (already verified, addressed and fresh) applied to a task not finished.
    recorded: the outcomes the task's action log records (pending.outcomes), for a reopen."""
    kind, payload, principal = event.kind, event.payload, event.principal
    if cp.stage == CANCELLING:  # its undos are under way: nothing moves it but their end
        return Refuse("task is being cancelled; it accepts no more events")
    if kind == events.CANCEL:
        return cancels.cancel(app, cp, principal, payload, auth=auth, now=now)
    if kind == events.APPROVE:
        approved = approve(app, cp, event, auth=auth, now=now)
        return approved if isinstance(approved, Refuse) else engine.Moved(approved, {})
    if kind == events.RUN:
        return run(app, cp)
    if kind == events.COMPLETE:
        return complete(app, cp, event, auth=auth, now=now)
    wf = engine.workflow_of(app, cp)
    ctx = engine.context(app, cp, auth, now, principal=principal, payload=payload, started=started)
    if kind == events.REOPEN:
        return reopen(app, cp, ctx, now, recorded or {})
    accept = wf.events.get(kind)
    if accept is None:
        return Refuse(f"{kind} does not apply to an existing task")
    return own_kind(cp, event, accept, ctx, auth=auth, now=now)


def own_kind(
    cp: Checkpoint, event: Heard, accept: Accept[Any], ctx: Context[Any], *, auth: Snapshot, now: datetime
) -> Ruling:
    """An event of the workflow's own kind: from a signer its wait (or its Accept) names, before
    the wait's deadline, then the workflow decides. While a group of waits is pending, only an
    answer to one of them (workflow/together.py)."""
    kind, principal = event.kind, event.principal
    wait = _wait_for(cp, kind)
    if wait is None and (group := [w.wait_for for w in cp.execution.pending_waits if w.need]):
        return Refuse(f"task waits for {', '.join(group)}; {kind} answers none of them")
    signers = wait.allowed_signers if wait is not None else accept.signers
    if not engine.signed_by(signers, principal, cp, auth):
        if signers == (REQUESTER,):
            return Refuse(f"{principal} did not request this task and may not send {kind}")
        return Refuse(f"{principal} may not send {kind} for this task")
    if wait is not None:
        late = held_to(wait, kind, event.correlation_id, now)
        if late is not None:
            return late
    ruled = engine.ruling(cp, accept.decide(ctx), now)
    if wait is not None and isinstance(ruled, engine.Moved):  # one of a group: it may stay for the rest
        return engine.Moved(together.answered(cp, wait, ruled.checkpoint), ruled.evidence, ruled.remember)
    return ruled


def reopen(
    app: App, cp: Checkpoint, ctx: Context[Any], now: datetime, recorded: Mapping[str, Mapping[str, Any]]
) -> Ruling:
    """A person puts a task parked in needs_review back: where the workflow's `reopen` says, or,
    when it declares none, to the stage it was parked from if that stage offers a tool (the gate
    then asks the model afresh). A stage that waited for an event is not guessed back: its wait
    (who, until when) is the workflow's to make again. A call made there whose answer has not come
    (a tool that returned Pending) is waited on again, whatever the app: the call was made
    (pending.again, vouched for by the call's marker among the action log's `recorded` outcomes)."""
    wf = engine.workflow_of(app, cp)
    if cp.stage != NEEDS_REVIEW:
        return Refuse(f"task is {cp.stage}; only a task in needs_review can be reopened")
    if wf.reopen is not None:
        ruled = engine.ruling(cp, wf.reopen(ctx), now)
    else:
        back = cp.external_refs.get(engine.PARKED_FROM)
        if back is None:
            return Refuse(
                f"workflow {wf.name} declares no reopen, and the task's record does not say "
                "where it was parked from; settle the task another way"
            )
        if not app.tools_at(back):
            return Refuse(
                f"task was parked from {back}, which waits for an event; workflow {wf.name} "
                "declares no reopen to make that wait again"
            )
        ruled = engine.ruling(cp, Next(back), now)
    if isinstance(ruled, engine.Moved) and not engine.may_move(wf, cp.stage, ruled.checkpoint.stage):
        return Refuse(
            f"workflow {wf.name}'s reopen sends the task to {ruled.checkpoint.stage}, which its "
            "stage table does not allow from needs_review"
        )
    if isinstance(ruled, engine.Moved) and (call := pending.unanswered(ruled.checkpoint)) is not None:
        asleep = pending.again(ruled.checkpoint, app.tool(call.tool), recorded, now)
        if isinstance(asleep, Refuse):
            return asleep
        if asleep is not None:
            return engine.Moved(asleep, ruled.evidence, ruled.remember)
    return ruled


def complete(app: App, cp: Checkpoint, event: Heard, *, auth: Snapshot, now: datetime) -> Ruling:
    """An asynchronous tool's completion (workflow/pending.py): from a signer its wait names, for
    the handle the task waits on, before the deadline. It applies as the call's answer would have
    (effects.completed); a failure downstream parks the task for a person."""
    wait = _wait_for(cp, events.COMPLETE)
    if wait is None:
        return Refuse(f"task is {cp.stage}; no tool call of it waits for a completion")
    if not engine.signed_by(wait.allowed_signers, event.principal, cp, auth):
        return Refuse(f"{event.principal} may not complete this task's tool call")
    late = held_to(wait, "completion", event.correlation_id, now)
    if late is not None:
        return late
    answered = pending.answer(cp, event.payload)
    if isinstance(answered, Refuse):
        return answered
    if answered.failed is not None:
        return engine.ForReview(engine.review(answered.cleared, answered.failed), answered.failed)
    call, learned = answered.call, list[Remember]()
    moved = effects.completed(
        app, answered.cleared, call.tool, answered.result, auth=auth, now=now, args=call.args, learned=learned
    )
    return engine.Moved(moved, {}, tuple(learned))  # remembered on the completion's word: its signer's


def approve(app: App, cp: Checkpoint, event: Heard, *, auth: Snapshot, now: datetime) -> Checkpoint | Refuse:
    """An approval answers the task's pending approval wait: a live approver who is not the
    requester, the current task version, before the deadline. It binds that version and terms."""
    principal, version = event.principal, event.payload.get("version")
    wait = _wait_for(cp, events.APPROVE)
    if wait is None:
        return Refuse(f"task is {cp.stage}, not awaiting an approval")
    wf = engine.workflow_of(app, cp)
    decision = authorize(
        principal,
        "approve",
        engine.resource(wf, cp),
        auth,
        {"version": version, "now": int(now.timestamp())} if isinstance(version, int) else {},
        stamp=cp.versions.policy,
    )
    if not decision.allowed:
        return Refuse(decision.reason)
    if not engine.signed_by(wait.allowed_signers, principal, cp, auth):
        return Refuse(f"{principal} is not among the approvers this wait names")
    if not isinstance(version, int) or isinstance(version, bool):  # true is not version 1
        return Refuse(f"an approval names its task version as a whole number, got {version!r}")
    b = cp.business
    if version != b.version:
        return Refuse(f"approval is for version {version}, task is now version {b.version}")
    if wait.bound_to_version != b.version:
        return Refuse("no approval is pending for this version")
    late = held_to(wait, "approval", event.correlation_id, now)
    if late is not None:
        return late
    counted = quorum(wait, principal, auth)
    if isinstance(counted, Refuse):
        return counted
    if len(counted) < wait.count:  # counted, and the wait goes on for the others
        waits = tuple(
            w.model_copy(update={"counted": counted}) if w is wait else w for w in cp.execution.pending_waits
        )
        return cp.model_copy(update={"execution": cp.execution.model_copy(update={"pending_waits": waits})})
    approval = Approval(
        object=wf.name,
        object_version=b.version,
        object_digest=engine.terms(cp),
        approver_ref=principal,
        scope=wf.approval_scope or f"{wf.name}.execute",
        expires_at=now + wf.approval_valid_for,
        co_approvers=counted[:-1],
    )
    business = b.model_copy(
        update={"stage": wait.then or b.stage, "approval": approval, "last_refusal": None}
    )
    return cp.model_copy(
        update={"business": business, "execution": cp.execution.model_copy(update={"pending_waits": ()})}
    )


def quorum(wait: PendingWait, principal: str, auth: Snapshot) -> tuple[str, ...] | Refuse:
    """The approvers a quorum wait counts once `principal` is counted: each person once, and only
    those still live approvers now (one whose right was taken since no longer counts)."""
    if principal in wait.counted:
        return Refuse(f"{principal} has approved this version already; each approver counts once")
    kept = tuple(p for p in wait.counted if p in auth.approvers or wait.allowed_signers != (APPROVERS,))
    return (*kept, principal)


def run(app: App, cp: Checkpoint) -> Refuse | None:
    """A nudge to run now: fine where the stage offers a tool, refused otherwise."""
    if app.tools_at(cp.stage):
        return None
    waiting = cp.execution.pending_waits
    if waiting and waiting[0].wait_for == APPROVAL_WAIT:
        return Refuse(f"needs an approval for version {cp.business.version} before it can run")
    if waiting:
        return Refuse(f"waits for {waiting[0].wait_for} before it can run")
    return Refuse(f"task is {cp.stage}; it cannot run")


def on_deadline(app: App, cp: Checkpoint, now: datetime) -> Checkpoint | None:
    """Apply on_deadline if a pending wait's deadline has really passed; None otherwise. A wait that
    expires closes its task; where the workflow's table cannot close from this stage, the task is
    parked for a person instead, never left waiting past its deadline."""
    due = [w for w in cp.execution.pending_waits if w.deadline <= now]
    if not due:
        return None
    wait = due[0]
    if (stage := sleeps.woken_to(wait)) is not None:
        return woke(app, cp, stage, now)
    action, _, owner = wait.on_deadline.partition(":")
    cleared = cp.execution.model_copy(update={"pending_waits": (), "attempts": 0})
    what = "approval" if wait.wait_for == APPROVAL_WAIT else wait.wait_for
    call = pending.awaited(cp)
    if wait.wait_for == events.COMPLETE and call is not None:
        what = f"completion of {call.tool} (handle {call.result.get('handle')})"
    expired = f"expired: no {what} by {wait.deadline.isoformat()}"
    if action == "expire" and engine.may_move(engine.workflow_of(app, cp), cp.stage, CLOSED):
        update = {"stage": CLOSED, "last_refusal": expired}
    elif action == "expire":
        update = {"stage": NEEDS_REVIEW, "last_refusal": f"{expired}; stage {cp.stage} cannot close"}
    else:
        reason = f"{what} deadline {wait.deadline.isoformat()} passed; escalated to {owner or 'ops'}"
        update = {"stage": NEEDS_REVIEW, "last_refusal": reason}
    refs = engine.parked_refs(cp) if update["stage"] == NEEDS_REVIEW else cp.external_refs
    return cp.model_copy(
        update={
            "business": cp.business.model_copy(update=update),
            "execution": cleared,
            "external_refs": refs,
        }
    )


def woke(app: App, cp: Checkpoint, stage: str, now: datetime) -> Checkpoint:
    """A task whose sleep ended, at `stage`; parked for a person where the workflow's table does not
    allow that move (a version deployed while it slept may have changed the table)."""
    wf = engine.workflow_of(app, cp)
    if not engine.may_move(wf, cp.stage, stage):
        return engine.review(
            cp, f"woke from its sleep to {stage}, which workflow {wf.name} does not allow from {cp.stage}"
        )
    return engine.advance(cp, Next(stage), now)


def held_to(wait: PendingWait, noun: str, correlation_id: str | None, now: datetime) -> Refuse | None:
    """Why an answer to `wait` comes too late or answers another wait, or None."""
    if correlation_id is not None and correlation_id != wait.correlation_id:
        return Refuse(f"the {noun} answers another wait (correlation id mismatch)")
    if now >= wait.deadline:  # the deadline's owner decides now, not a late sender
        return Refuse(
            f"the {noun} wait's deadline {wait.deadline.isoformat()} has passed; "
            f"it is now for its owner ({wait.on_deadline})"
        )
    return None


def _wait_for(cp: Checkpoint, kind: str) -> PendingWait | None:
    wanted = APPROVAL_WAIT if kind == events.APPROVE else kind
    return next((w for w in cp.execution.pending_waits if w.wait_for == wanted), None)
