"""The runtime's side of every workflow: events, waits, approvals and deadlines, as pure functions.

The gate calls `on_event` / `on_deadline` inside its compare-and-swap; `create` makes a task's
first checkpoint. The workflow (an SDK `Workflow`) decides only what is its own: where a task goes
on its own event kinds, and on a reopen. What no app may switch off is here: an approval answers a
pending wait, from a live approver who is not the requester, for the current task version, before
the wait's deadline; an amendment voids the approval; a wait's deadline is applied by its rule.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from wakeful.authority.snapshot import Snapshot
from wakeful.core.errors import ConfigError
from wakeful.schemas import events
from wakeful.schemas.approval import terms_digest
from wakeful.schemas.base import cut
from wakeful.schemas.checkpoint import BusinessState, Checkpoint, PendingWait, SecurityScope, VersionStamps
from wakeful.sdk.app import App
from wakeful.sdk.memory import Remember
from wakeful.sdk.workflow import (
    ANYONE,
    APPROVERS,
    CANCELLED,
    CANCELLING,
    CLOSED,
    NEEDS_REVIEW,
    QUARANTINED,
    REQUESTER,
    Context,
    Next,
    Refuse,
    Review,
    Start,
    Wait,
    Workflow,
)
from wakeful.workflow import rollouts, sleeps, together

APPROVAL_WAIT = "approval"  # a pending wait's wait_for for approvals (any other wait: its event kind)
# The runtime's external ref on a task in needs_review: the stage it was parked from. Kept in the
# refs (no stored-schema change), dropped by the move that takes the task out of review.
PARKED_FROM = "parked-from"


@dataclass(frozen=True)
class ForReview:
    """The task goes to needs_review for a person (the SDK's Review): `checkpoint` is what to
    write, `reason` why."""

    checkpoint: Checkpoint
    reason: str


@dataclass(frozen=True)
class Moved:
    """The task moves on: `checkpoint` is what to write, `evidence` the documents (name -> text)
    the decision attached, kept beside the task as untrusted input."""

    checkpoint: Checkpoint
    evidence: Mapping[str, str]
    remember: tuple[Remember, ...] = ()  # memory candidates, for the write door (workflow/memory.py)


# What the runtime makes of one decision for a task: a move, a refusal that writes nothing but the
# sender's receipt, the task for review, or None (nothing to do).
Ruling = Moved | Refuse | ForReview | None
EVIDENCE_LIMIT = 10_000  # characters kept of any one document


class UnknownWorkflow(ConfigError):
    """The task's workflow is not in the app this worker loaded: keep the message, touch nothing."""

    def __init__(self, name: str) -> None:
        super().__init__(
            "WAKEFUL_APP", f"the loaded app has no workflow {name!r}: run the app the task started on"
        )


class UnknownWorkflowVersion(UnknownWorkflow):
    """The task's workflow version is neither the deployed one nor one the app keeps: gate 4
    migrates or quarantines the task at its next wake (workflow/compat.py); nothing else runs it."""

    def __init__(self, name: str, version: int, deployed: int) -> None:
        ConfigError.__init__(
            self,
            "WAKEFUL_APP",
            f"the task runs workflow {name} v{version}, which the loaded app neither deploys (v{deployed}) "
            "nor keeps: its next wake migrates or quarantines it",
        )


def workflow_of(app: App, cp: Checkpoint) -> Workflow[Any]:
    """The version of its workflow the task runs: the deployed one, or (pinned) one the app keeps."""
    name, version = cp.business.workflow, cp.business.workflow_version
    found = app.workflow_at(name, version)
    if found is None:
        current = app.workflow(name)
        if current is None:
            raise UnknownWorkflow(name)
        raise UnknownWorkflowVersion(name, version, current.version)
    return found


def requester(cp: Checkpoint) -> str:
    return cp.security.principal_ref.removeprefix("principal:")


def context(
    app: App,
    cp: Checkpoint,
    auth: Snapshot,
    now: datetime,
    *,
    principal: str = "",
    payload: Mapping[str, Any] | None = None,
    started: frozenset[str] = frozenset(),
) -> Context[Any]:
    wf, b = workflow_of(app, cp), cp.business

    def op_key(tool: str) -> str:
        found = app.tool(tool)
        if found is None:
            return f"{tool}:{cp.task_id}:v{b.version}"
        return found.key_for(cp.task_id, b.version, cp.execution.step)

    return Context(
        task_id=cp.task_id,
        stage=b.stage,
        version=b.version,
        state=state_of(wf, cp),
        requester=requester(cp),
        tenant=cp.security.tenant,
        approval=b.approval,
        waits=cp.execution.pending_waits,
        refs=cp.external_refs,
        auth=auth,
        now=now,
        started=started,
        principal=principal,
        payload=payload or {},
        op_key=op_key,
        policy=cp.versions.policy,
        resource=resource(wf, cp),
    )


def state_of(wf: Workflow[Any], cp: Checkpoint) -> Any:
    """The task's state as its workflow's model, as every decision and view reads it."""
    return wf.state.model_validate(cp.business.data, strict=False)


def resource(wf: Workflow[Any], cp: Checkpoint) -> dict[str, Any]:
    """The task as its app's policy sees it (authority/policy.py): its public fields and the
    business fields its workflow exposes."""
    b = cp.business
    shown = {name: b.data[name] for name in wf.exposes if name in b.data}
    return {
        **shown,
        "task": cp.task_id,
        "workflow": wf.name,
        "tenant": cp.security.tenant,
        "stage": b.stage,
        "requester": requester(cp),
    }


def create(app: App, workflow: str, start: Start) -> Moved | Refuse:
    """A new task's first checkpoint and its evidence documents, or why not. It starts on the
    version a rollout of the workflow chooses for it (workflow/rollouts.py), else the current one."""
    wf = app.workflow(workflow)
    if wf is None:
        return Refuse(f"no workflow {cut(repr(workflow), 60)} in app {app.name}")
    rollout = rollouts.of(app, wf.name, wf.version, start.auth.rollouts)
    if rollout is not None:
        wf = app.workflow_at(wf.name, rollouts.chosen(rollout, wf.version, start.tenant, start.task_id)) or wf
    decided = wf.start(start)
    if isinstance(decided, Refuse):
        return decided
    if decided.state is None:
        return Refuse(f"workflow {wf.name} started the task with no state")
    first = Checkpoint(
        task_id=start.task_id,
        business=BusinessState(workflow=wf.name, workflow_version=wf.version, stage="received"),
        security=SecurityScope(tenant=start.tenant, principal_ref=f"principal:{start.principal}"),
        versions=VersionStamps(
            policy=start.auth.policy, tool_catalog=app.catalog, agent_id=f"{app.name}-agent", state_version=0
        ),
        updated_at=start.now,
        created_at=start.now,
    )
    return Moved(advance(first, decided, start.now), kept(decided.evidence), tuple(decided.remember))


def advance(cp: Checkpoint, nxt: Next[Any], now: datetime) -> Checkpoint:
    """The checkpoint after a workflow's Next (one whose sleep cannot be kept: the task parked)."""
    if (wrong := unkept(nxt)) is not None:
        return review(cp, wrong)
    b = cp.business
    version = b.version + 1 if nxt.amended else b.version
    waits: tuple[PendingWait, ...] = (pending(cp.task_id, nxt.wait, version, now),) if nxt.wait else ()
    if nxt.waits:  # several at once (workflow/together.py)
        waits = together.grouped(tuple(pending(cp.task_id, w, version, now) for w in nxt.waits), nxt.need)
    waits = (sleeps.asleep(cp.task_id, nxt.sleep, nxt.stage, version, now),) if nxt.sleep else waits
    business = b.model_copy(
        update={
            "stage": nxt.stage,
            "version": version,
            "data": nxt.state.model_dump(mode="json") if nxt.state is not None else b.data,
            "approval": None if nxt.amended else b.approval,
            "evidence": tuple(sorted({*b.evidence, *nxt.evidence})),
            "last_refusal": None,
        }
    )
    refs = {name: ref for name, ref in {**cp.external_refs, **nxt.refs}.items() if name != PARKED_FROM}
    return cp.model_copy(
        update={
            "business": business,
            # a move starts the count of refused proposals afresh (effects.refused)
            "execution": cp.execution.model_copy(update={"pending_waits": waits, "attempts": 0}),
            "external_refs": refs,
        }
    )


def pending(task_id: str, wait: Wait, version: int, now: datetime) -> PendingWait:
    kind = APPROVAL_WAIT if wait.event == events.APPROVE else wait.event
    suffix = "" if kind == APPROVAL_WAIT else f":{kind}"
    cid = hashlib.sha256(f"{task_id}:v{version}{suffix}".encode()).hexdigest()[:20]
    return PendingWait(
        wait_for=kind,
        correlation_id=f"corr-{cid}",
        bound_to_version=version,
        allowed_signers=wait.signers,
        deadline=now + wait.within,
        on_deadline=wait.on_deadline,
        then=wait.then,
        count=wait.count,
    )


def terms(cp: Checkpoint) -> str:
    """The digest an approval binds: the task's own fields at this version (any change voids it)."""
    b = cp.business
    return terms_digest(**{**b.data, "task": cp.task_id, "version": b.version})


def review(cp: Checkpoint, reason: str) -> Checkpoint:
    """The task parked in needs_review for a person, with why, and the stage it was parked from
    (a reopen's default destination, wakes.reopen)."""
    business = cp.business.model_copy(update={"stage": NEEDS_REVIEW, "last_refusal": reason})
    execution = cp.execution.model_copy(update={"pending_waits": (), "attempts": 0})
    return cp.model_copy(
        update={"business": business, "execution": execution, "external_refs": parked_refs(cp)}
    )


def parked_refs(cp: Checkpoint) -> dict[str, str]:
    """The task's refs once parked: PARKED_FROM names the stage it leaves (kept when it is parked
    again while in review)."""
    if cp.stage == NEEDS_REVIEW:
        return dict(cp.external_refs)
    return {**cp.external_refs, PARKED_FROM: cp.stage}


def refused(cp: Checkpoint, reason: str) -> Checkpoint:
    """Record a refusal without moving the task."""
    return cp.model_copy(update={"business": cp.business.model_copy(update={"last_refusal": reason})})


def terminal(wf: Workflow[Any], stage: str) -> bool:
    return stage in (CLOSED, QUARANTINED, CANCELLED) or (
        stage != NEEDS_REVIEW and not wf.stages.get(stage, ()) and stage in _targets(wf)
    )


def _targets(wf: Workflow[Any]) -> set[str]:
    return {to for targets in wf.stages.values() for to in targets}


def may_move(wf: Workflow[Any], old: str, new: str) -> bool:
    """The workflow's transition table, with the runtime's moves added: staying put, parking a task
    that is not finished for review or quarantine, and (unless the workflow lists needs_review in
    its table) leaving review for any of the workflow's stages: a reopen (wakes.reopen); and a
    cancel's, from any stage not finished into cancelling or cancelled, and out of cancelling only
    to cancelled (workflow/cancels.py)."""
    if terminal(wf, old):
        return False
    if new == old or new in (NEEDS_REVIEW, QUARANTINED, CANCELLING, CANCELLED):
        return True
    if old == CANCELLING:
        return False
    if old == NEEDS_REVIEW and NEEDS_REVIEW not in wf.stages:  # the runtime's stage: a person may
        return new in _targets(wf) or new in wf.stages  # send the task back to any of the workflow's
    return new in wf.stages.get(old, ())


def moves(app: App) -> Callable[[str, str, str], bool]:
    """The store's transition check for every workflow of `app` (an unknown workflow moves nowhere):
    a move its deployed version or a version the app keeps (a pinned task's) allows."""
    versions: dict[str, list[Workflow[Any]]] = {}
    for wf in (*app.workflows, *app.retired):
        versions.setdefault(wf.name, []).append(wf)

    def allowed(workflow: str, old: str, new: str) -> bool:
        return any(may_move(wf, old, new) for wf in versions.get(workflow, ()))

    return allowed


def signed_by(signers: tuple[str, ...], principal: str, cp: Checkpoint, auth: Snapshot) -> bool:
    for who in signers:
        if who == ANYONE or (who == REQUESTER and principal == requester(cp)):
            return True
        if who == APPROVERS and principal in auth.approvers:
            return True
        if who == f"principal:{principal}":
            return True
    return False


def ruling(cp: Checkpoint, decided: Next[Any] | Refuse | Review | None, now: datetime) -> Ruling:
    """What a workflow's decision means for the stored task."""
    if isinstance(decided, Next) and (wrong := unkept(decided)) is not None:
        decided = Review(wrong)
    if isinstance(decided, Review):
        return ForReview(review(cp, decided.reason), decided.reason)
    if isinstance(decided, Next):
        return Moved(advance(cp, decided, now), kept(decided.evidence), tuple(decided.remember))
    return decided


def unkept(nxt: Next[Any]) -> str | None:
    """Why a decision's waits or sleep cannot be kept (the task then goes to a person), or None."""
    return together.problem(nxt) or sleeps.problem(nxt)


def kept(evidence: Mapping[str, str]) -> dict[str, str]:
    """Documents as they are kept: strings only, each cut to EVIDENCE_LIMIT characters."""
    return {str(name)[:64]: text[:EVIDENCE_LIMIT] for name, text in evidence.items() if isinstance(text, str)}
