"""Several read-only calls in one turn of a stage's loop (D68): a model's parallel tool calls.

A step is one turn of the loop: the gate asks, the model proposes, the executor runs the call and
closes. That turn, not the call, is what a step costs (D63). Calls that only read share a turn: a
proposal may carry more calls after its first (`Proposal.more`) when every one is to a read-only
tool. Each is judged as a step of its own, at the step number it takes (so on the op key it would
have had alone), and the close applies them in order, each through the workflow's `done`, for as
long as the task stays at its stage waiting for nothing. Pure: the executor calls these.

An effect never shares a turn: it runs alone, after whatever it needs to know has been read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from wakeful.authority.snapshot import Snapshot
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk.app import App
from wakeful.sdk.memory import Remember
from wakeful.sdk.workflow import NEEDS_REVIEW, Effect, Refuse, Review
from wakeful.workflow import effects, engine

Call = tuple[str, Mapping[str, Any]]  # (tool, arguments) as proposed
Done = tuple[str, Mapping[str, Any], Mapping[str, Any]]  # (tool, what it returned, its arguments)


def check(
    app: App, cp: Checkpoint, first: Effect, more: Sequence[Call], *, auth: Snapshot, now: datetime
) -> list[Effect] | Refuse:
    """The calls to make after `first` (already judged), each judged at its own step; or why the
    proposal may not share its turn (the model is asked again, told why)."""
    found = app.tool(first.tool)
    if found is None or found.effect:
        return Refuse(f"{first.tool} moves something: it runs alone, in a proposal of its own")
    wf = engine.workflow_of(app, cp)
    left = wf.max_steps - cp.execution.step % wf.max_steps
    if 1 + len(more) > left:
        return Refuse(f"{1 + len(more)} calls in one proposal, and the stage's step budget leaves {left}")
    judged = []
    for n, (tool, args) in enumerate(more, 1):
        other = app.tool(tool)
        if other is None or other.effect:
            return Refuse(f"{tool} is not a read-only tool: only read-only calls share a proposal")
        at = cp.model_copy(
            update={"execution": cp.execution.model_copy(update={"step": cp.execution.step + n})}
        )
        decided = effects.check_proposal(app, at, tool, args, auth=auth, now=now)
        if isinstance(decided, Refuse | Review):  # nothing has run: the model is asked again, told why
            return Refuse(f"call {n + 1} of the proposal: {decided.reason}")
        judged.append(decided)
    return judged


def done(
    app: App,
    cp: Checkpoint,
    calls: Sequence[Done],
    *,
    auth: Snapshot,
    now: datetime,
    learned: list[list[Remember]] | None = None,
) -> tuple[Checkpoint, int]:
    """The task after the calls of one turn, each applied as effects.done applies one, in order,
    while the task stays at its stage and task version waiting for nothing; and how many were
    applied (what the others returned is not: they only read). `learned` gets, per call applied,
    what its `done` remembered."""
    out: list[list[Remember]] = [] if learned is None else learned
    out.append([])
    tool, result, args = calls[0]
    current, count = effects.done(app, cp, tool, result, auth=auth, now=now, args=args, learned=out[-1]), 1
    for tool, result, args in calls[1:]:
        if not goes_on(cp, current):
            break
        out.append([])
        cp, current = (
            current,
            effects.done(app, current, tool, result, auth=auth, now=now, args=args, learned=out[-1]),
        )
        count += 1
    return current, count


def goes_on(before: Checkpoint, after: Checkpoint) -> bool:
    """Whether the step from `before` to `after` left the task in the same loop, ready for the
    next call: its stage and version, counted one step on, no wait, not parked."""
    return (
        after.stage == before.stage
        and after.stage != NEEDS_REVIEW
        and after.business.version == before.business.version
        and not after.execution.pending_waits
        and after.execution.step == before.execution.step + 1
    )
