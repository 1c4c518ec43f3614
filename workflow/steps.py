"""Steps within a stage: a stage where the model calls tools several times (Workflow.max_steps),
reading each result before it proposes the next call.

After a tool call succeeds, the workflow's `done` says where the task goes. Where it keeps the task
at its stage and task version, that was one step of the stage's loop: the step is counted and its
result kept (the latest RESULTS_KEPT, each value cut to RESULT_CHARS) for the next proposal's
window, where the model sees it as the answer to its call (workflow/window.py). Where it moves the
task on, the count and the results start afresh. A loop whose budget is spent while `done` still
keeps the task there is parked for a person, with the reason: never left to spin. A reopen puts it
back with its count and results, and a fresh budget of max_steps calls.

Each step is execute-once on its own op key (Tool.key_for with the step number: the first step's
key is the one a stage of one step has always had), so the executor's intent-first and look-up-
after-a-crash rules hold step by step. Pure: the executor calls it inside the close's transition.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from wakeful.schemas.checkpoint import Checkpoint, StepResult
from wakeful.sdk.app import App
from wakeful.sdk.workflow import NEEDS_REVIEW, Workflow
from wakeful.workflow import engine

RESULTS_KEPT = 8  # results the next proposal is shown: the latest, oldest first
RESULT_CHARS = 2000  # of any one value a tool returned, as kept and shown


def after(
    app: App,
    wf: Workflow[Any],
    before: Checkpoint,
    moved: Checkpoint,
    call: tuple[str, Mapping[str, Any], Mapping[str, Any]],
) -> Checkpoint:
    """The task `moved` (what `wf`'s `done` made of `before` once the call (tool, args, result)
    had succeeded), with the step counted and its result kept, the loop's count started afresh,
    or the task parked because its budget is spent."""
    tool, args, result = call
    stays = (
        moved.stage == before.stage
        and moved.stage != NEEDS_REVIEW
        and moved.business.version == before.business.version
    )
    if not stays:
        if moved.execution.step == 0 and not moved.execution.results:
            return moved
        return _with(moved, 0, ())
    step = before.execution.step + 1
    asked_again = not moved.execution.pending_waits and bool(app.tools_at(moved.stage))
    found = app.tool(tool)
    b = before.business
    kept = StepResult(
        tool=tool,
        op_key=found.key_for(before.task_id, b.version, before.execution.step) if found else tool,
        args=dict(args),
        result={str(k): str(v)[:RESULT_CHARS] for k, v in result.items()},
        trust=found.output_trust if found else "untrusted",
    )
    counted = _with(moved, step, (*before.execution.results, kept)[-RESULTS_KEPT:])
    if asked_again and step % wf.max_steps == 0:  # each visit, and each reopen, has max_steps calls
        spent = (
            f"step budget spent: {wf.max_steps} tool call(s) at stage {moved.stage}, "
            f"the last {tool}, and the workflow keeps the task there"
        )
        # The count and the results stay: a reopen goes on from here, each step on a key not used.
        return engine.review(counted, spent)
    return counted


def _with(cp: Checkpoint, step: int, results: tuple[StepResult, ...]) -> Checkpoint:
    execution = cp.execution.model_copy(update={"step": step, "results": results})
    return cp.model_copy(update={"execution": execution})
