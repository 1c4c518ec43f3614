"""Waits for several things at once (Next.waits): a signature and a payment in either order, or any
two of three replies. Each wait has its own signers, correlation id and deadline, as a wait of its
own does; the group moves on once `need` of them are answered (all, by default).

An event that answers one wait of a group not yet complete is decided by the workflow as ever (its
Accept), and what the decision keeps (state, refs, evidence) is kept; but the task stays at its
stage with the group's other waits, whatever stage the decision names. The answer that completes
the group is applied in full: its stage, its waits. A wait of the group whose deadline passes
applies its own rule (escalate or expire) to the task. Pure.
"""

from __future__ import annotations

from typing import Any

from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint, PendingWait
from wakeful.sdk.workflow import Next


def problem(nxt: Next[Any]) -> str | None:
    """Why a decision's waits cannot be kept: its group's, or its one wait's quorum; or None."""
    count = nxt.wait.count if nxt.wait is not None else 1
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return f"the wait of the decision to move to {nxt.stage} counts {count!r}: a whole number from 1"
    if count > 1 and nxt.wait is not None and nxt.wait.event != events.APPROVE:
        return f"the wait for {nxt.wait.event} counts {count}: only an approval wait has a quorum"
    if not nxt.waits:
        return (
            None if nxt.need is None else f"the decision to move to {nxt.stage} needs {nxt.need} of no waits"
        )
    if nxt.wait is not None or nxt.sleep is not None:
        return f"the decision to move to {nxt.stage} gives `waits` and a `wait` or a `sleep`: give one"
    kinds = [w.event for w in nxt.waits]
    if len(set(kinds)) != len(kinds):
        return f"the decision to move to {nxt.stage} waits twice for one event kind ({', '.join(kinds)})"
    if events.APPROVE in kinds:
        return "an approval waits on its own (Wait(count=N) asks several approvers), not in a group"
    need = len(kinds) if nxt.need is None else nxt.need
    if not isinstance(need, int) or isinstance(need, bool) or not 1 <= need <= len(kinds):
        return f"the move to {nxt.stage} needs {nxt.need!r} of {len(kinds)} waits: from 1 to {len(kinds)}"
    return None


def grouped(waits: tuple[PendingWait, ...], need: int | None) -> tuple[PendingWait, ...]:
    """The pending waits of a group, each marked with what the group needs."""
    if len(waits) < 2 and need is None:
        return waits
    wanted = len(waits) if need is None else need
    return tuple(w.model_copy(update={"need": wanted, "of": len(waits)}) for w in waits)


def answered(cp: Checkpoint, wait: PendingWait, moved: Checkpoint) -> Checkpoint:
    """The task once `wait`, one of a group, is answered by a decision that made `moved` of it:
    `moved` as it is if that completes the group; else the task at its stage, with what the
    decision kept and the group's other waits."""
    if not wait.need:
        return moved
    rest = tuple(w for w in cp.execution.pending_waits if w.correlation_id != wait.correlation_id)
    if wait.of - len(rest) >= wait.need:
        return moved
    business = moved.business.model_copy(update={"stage": cp.stage, "version": cp.business.version})
    execution = moved.execution.model_copy(update={"pending_waits": rest})
    return moved.model_copy(update={"business": business, "execution": execution})
