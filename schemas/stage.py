"""Workflow stages and the transition table. An illegal move raises; skipping a step is impossible."""

from __future__ import annotations

from enum import StrEnum

from wakeful.core.errors import IllegalTransition


class Stage(StrEnum):
    RECEIVED = "received"
    AWAITING_APPROVAL = "awaiting_approval"
    READY = "ready"
    CLOSED = "closed"
    NEEDS_REVIEW = "needs_review"
    QUARANTINED = "quarantined"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def awaiting(self) -> bool:
        """The task sleeps on an outside event (an approval, a deadline)."""
        return self is Stage.AWAITING_APPROVAL


TERMINAL = frozenset({Stage.CLOSED, Stage.QUARANTINED})

# from -> the stages it may move to. Staying in a stage (recording a refusal, an attempt) is allowed
# for every non-terminal stage; terminal stages accept nothing.
TRANSITIONS: dict[Stage, frozenset[Stage]] = {
    Stage.RECEIVED: frozenset({Stage.AWAITING_APPROVAL, Stage.READY, Stage.NEEDS_REVIEW}),
    # An amendment while waiting keeps the task waiting (on a new version).
    Stage.AWAITING_APPROVAL: frozenset({Stage.READY, Stage.NEEDS_REVIEW}),
    # An amendment of a ready task may send it back for approval.
    Stage.READY: frozenset({Stage.CLOSED, Stage.AWAITING_APPROVAL, Stage.NEEDS_REVIEW}),
    # A person settles a reviewed task: back into the flow or closed.
    Stage.NEEDS_REVIEW: frozenset({Stage.AWAITING_APPROVAL, Stage.READY, Stage.CLOSED}),
    Stage.CLOSED: frozenset(),
    Stage.QUARANTINED: frozenset(),
}

NOT_TERMINAL = frozenset(Stage) - TERMINAL
for _stage in NOT_TERMINAL:
    TRANSITIONS[_stage] = TRANSITIONS[_stage] | {_stage, Stage.QUARANTINED}


def check_transition(task_id: str, old: Stage, new: Stage) -> None:
    """Raise IllegalTransition unless the table allows old -> new."""
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(task_id, old.value, new.value)
