"""What the executor does with one proposal, from what its handling read: pure (main.py carries
each ruling out, and only main.py writes).

Two looks, because between them the writer settles by key a step of this stage that may already
have run (steps.settled: it asks the tool's lookup, and records an outcome a crash left
unrecorded), and does so only for a proposal that is its task's to carry out: `admit()` before
that, `rule()` after, with what it found.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from wakeful.authority import freezes
from wakeful.authority.snapshot import Snapshot
from wakeful.consumers.executor import steps as executor_steps
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.events import Envelope
from wakeful.schemas.logs import ActionLogEntry
from wakeful.schemas.proposals import Proposal
from wakeful.sdk.app import App
from wakeful.sdk.workflow import Effect, Refuse, Review
from wakeful.state import keys
from wakeful.workflow import compat, effects, engine, revoked, switches


@dataclass(frozen=True)
class Drop:
    """Nothing wrong with the proposal, but not this executor's to carry out: dropped and counted
    (its task moved on, or runs a workflow this release lacks). Writes nothing."""

    why: str


@dataclass(frozen=True)
class DeadLetter:
    """The proposal answers no request its task has outstanding: to the dead-letter topic."""

    reason: str


@dataclass(frozen=True)
class Close:
    """A step of this stage already ran (cases C and D): advance the task past it, calling nothing."""

    step: executor_steps.Ran


@dataclass(frozen=True)
class Hold:
    """A freeze holds the task (the kill path): no new step; the task is marked for the thaw."""

    scope: str


@dataclass(frozen=True)
class Park:
    """The task goes to review for a person, under the runtime's own message id, with why."""

    message_id: str
    reason: str
    detail: Mapping[str, Any]  # the outbox record's
    event: str  # what the executor logs
    logged: Mapping[str, Any] = field(default_factory=dict)  # beside the task id


@dataclass(frozen=True)
class Quarantine:
    """Gate 4 fails under the lease: the task runs under versions the deployed app cannot run."""

    detail: str


@dataclass(frozen=True)
class Refused:
    """The workflow refused the proposal (asked again, or parked past max_reproposals) or sent it
    to review, recorded under the runtime's own id for a refusal at this version."""

    message_id: str
    decided: Refuse | Review


@dataclass(frozen=True)
class Run:
    """Carry out the step: `effect` once under its op key, then the read-only calls sharing its turn."""

    effect: Effect
    more: tuple[Effect, ...] = ()


Admission = Drop | DeadLetter | None
Written = Close | Hold | Park | Quarantine | Refused  # carried out by writes alone (Writes.ruled)
Ruling = Written | Run


def admit(app: App, cp: Checkpoint, env: Envelope) -> Admission:
    """Whether the proposal is its task's to carry out (None), before anything is settled by key."""
    refused = executor_steps.unanswered(app, cp, env)
    if refused is not None:
        return Drop(refused) if executor_steps.superseded(cp, env) else DeadLetter(refused)
    try:
        engine.workflow_of(app, cp)
    except engine.UnknownWorkflow as exc:
        # Another release's (a deploy under way) or one the app dropped: the gate judges which at
        # the task's next wake, which the timer's sweep gives it if nothing else does (D85).
        return Drop(f"{exc}: left to the gate's next wake")
    return None


def rule(
    app: App,
    cp: Checkpoint,
    proposal: Proposal,
    *,
    ops: Mapping[bytes, bytes],
    auth: Snapshot,
    now: datetime,
    settled: executor_steps.Ran | None,
) -> Ruling:
    """What to do with an admitted proposal, given the step `settled` found already run (or None).
    A step that ran completes whatever came since: it was validated before its intent was
    written, and re-validating it against today's authority could park a task whose effect has
    already happened."""
    if settled is not None:
        return Close(settled)
    stopped = _stopped(app, cp, auth)
    if stopped is not None:
        return stopped
    refused_id = keys.runtime_id("refused", cp.task_id, cp.state_version)
    decided = effects.check_proposal(
        app,
        cp,
        proposal.tool,
        proposal.args,
        auth=auth,
        now=now,
        unusable=proposal.unusable,
        failed=proposal.failed,
    )
    if isinstance(decided, Refuse | Review):
        return Refused(refused_id, decided)
    off = _switched_off(app, cp, decided, ops, auth)
    if off is not None:
        return off
    more = executor_steps.judge_more(app, cp, decided, proposal.more, auth=auth, now=now)
    if isinstance(more, Refuse):
        return Refused(refused_id, more)
    return Run(decided, tuple(more))


def _stopped(app: App, cp: Checkpoint, auth: Snapshot) -> Hold | Park | Quarantine | None:
    """What stops any new step of the task, before its proposal is judged: a freeze (the kill
    path; the thaw wakes it and the gate asks again), a revoked signer the task rests on (the
    app's rule), or gate 4 again (a proposal in flight across a deploy runs only under the tools
    and policy its task was admitted to)."""
    freeze = freezes.holding(auth.frozen, app.name, cp.security.tenant, cp.task_id)
    if freeze is not None:
        return Hold(freeze.scope)
    parked = revoked.parks(app, cp, auth)
    if parked is not None:
        parked_id = keys.runtime_id("revoked", cp.task_id, cp.state_version)
        return Park(parked_id, parked, {"refused": parked}, "executor.needs_review", {"reason": parked})
    incompatible = compat.check_app(app, cp, auth)
    return Quarantine(incompatible) if isinstance(incompatible, str) else None


def _switched_off(
    app: App, cp: Checkpoint, decided: Effect, ops: Mapping[bytes, bytes], auth: Snapshot
) -> Park | None:
    """The step's tool switched off, read live with this load: the step is refused before its
    intent (one already begun goes on: switches.refused)."""
    raw = ops.get(decided.op_key.encode())
    begun = ActionLogEntry.decode(raw).status if raw else None
    off = switches.refused(app.name, decided.tool, begun, auth)
    if off is None:
        return None
    parked_id = keys.runtime_id("review", decided.op_key, cp.state_version)
    said = {"tool": decided.tool, "by": off.switch.by}
    return Park(parked_id, off.reason, off.detail(), "executor.tool_disabled", said)
