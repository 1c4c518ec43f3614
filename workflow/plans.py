"""Approvals that cover a plan (Workflow.approval_plan), not only the first step that needs one.

Without a plan an approval permits one effect step, then is used up (single use). With one, it
permits the plan's tools at the task version it binds: each once, or, where the plan names a
`total`, any of them while the sum of that argument over the steps run stays within the state's
value of the same name, as approved (the approval binds the terms digest, so that value cannot
change under it). Single use then means one use of the plan: the approval is used up once every
tool has run, or once the total is spent. A step the plan does not allow is refused with the
reason, and the model may propose another (D62); nothing of the plan is spent by it.

Pure: check_proposal asks `refused` before a step, and done() records the step with `used`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

from wakeful.schemas.approval import Approval
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk.workflow import Workflow


def refused(wf: Workflow[Any], cp: Checkpoint, tool: str, args: Mapping[str, Any]) -> str | None:
    """Why the task's approval does not cover this step of its workflow's plan, or None (also when
    the workflow has no plan: the approval then covers its one step)."""
    plan, approval = wf.approval_plan, cp.business.approval
    if plan is None or approval is None:
        return None
    if tool not in plan.tools:
        return f"the approval covers {', '.join(plan.tools)}, not {tool}"
    if not plan.total:
        return f"{tool} has already run under this approval" if tool in approval.used else None
    amount, approved = args.get(plan.total), cp.business.data.get(plan.total)
    if not _whole(amount) or not _whole(approved):
        return f"{tool}'s {plan.total} and the approved {plan.total} must be whole numbers"
    if approval.spent + amount > approved:
        return (
            f"{tool} of {amount} would bring the approved plan to {approval.spent + amount}, "
            f"beyond the {approved} approved"
        )
    return None


def used(
    wf: Workflow[Any], cp: Checkpoint, approval: Approval, tool: str, args: Mapping[str, Any]
) -> Approval:
    """The approval after the step `tool` (with `args`) ran under it: used up, or, under a plan,
    with the step counted, and used up once the plan is."""
    plan = wf.approval_plan
    if plan is None:
        return approval.model_copy(update={"consumed": True})
    done = tuple(dict.fromkeys((*approval.used, tool)))
    if plan.total:
        amount, approved = args.get(plan.total), cp.business.data.get(plan.total)
        spent = approval.spent + (amount if _whole(amount) else 0)
        over = not _whole(approved) or spent >= approved
        return approval.model_copy(update={"used": done, "spent": spent, "consumed": over})
    return approval.model_copy(update={"used": done, "consumed": set(plan.tools) <= set(done)})


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
