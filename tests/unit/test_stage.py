"""The refund's transition table, as the runtime holds every workflow to it: terminal stages accept
nothing, skipping a step is refused, staying put, review and quarantine are always open."""

from __future__ import annotations

import itertools
from collections import deque

import pytest

from wakeful.core.errors import IllegalTransition
from wakeful.examples.refund import Stage, refund
from wakeful.workflow import engine

R, W, Y, C, N, Q = (
    Stage.RECEIVED,
    Stage.AWAITING_APPROVAL,
    Stage.READY,
    Stage.CLOSED,
    Stage.NEEDS_REVIEW,
    Stage.QUARANTINED,
)

# The workflow written out by hand, independent of the table in code: any edit to the table must be
# made here too, on purpose. Staying put and quarantine are listed explicitly for every live stage.
ALLOWED: frozenset[tuple[Stage, Stage]] = frozenset(
    {
        (R, R), (R, W), (R, Y), (R, N), (R, Q),
        (W, W), (W, Y), (W, N), (W, Q),
        (Y, Y), (Y, C), (Y, W), (Y, N), (Y, Q),
        (N, N), (N, W), (N, Y), (N, C), (N, Q),
    }
)  # fmt: skip

ALL_PAIRS = list(itertools.product(Stage, Stage))
TERMINAL = frozenset(s for s in Stage if engine.terminal(refund, s))
LIVE = [s for s in Stage if s not in TERMINAL]
TRANSITIONS = {old: frozenset(new for new in Stage if engine.may_move(refund, old, new)) for old in Stage}


def check_transition(task_id: str, old: Stage, new: Stage) -> None:
    if not engine.may_move(refund, old, new):
        raise IllegalTransition(task_id, old, new)


def _allowed(old: Stage, new: Stage) -> bool:
    return engine.may_move(refund, old, new)


@pytest.mark.parametrize(("old", "new"), ALL_PAIRS, ids=[f"{a}->{b}" for a, b in ALL_PAIRS])
def test_check_transition_allows_exactly_the_written_workflow(old: Stage, new: Stage) -> None:
    assert _allowed(old, new) == ((old, new) in ALLOWED)


def test_closed_and_quarantined_are_the_only_terminal_stages() -> None:
    assert frozenset({C, Q}) == TERMINAL


@pytest.mark.parametrize("old", sorted(TERMINAL))
@pytest.mark.parametrize("new", list(Stage))
def test_terminal_stage_accepts_no_move_not_even_staying_or_quarantine(old: Stage, new: Stage) -> None:
    with pytest.raises(IllegalTransition):
        check_transition("t-1", old, new)
    assert TRANSITIONS[old] == frozenset()


@pytest.mark.parametrize("stage", LIVE)
def test_every_live_stage_may_stay_where_it_is(stage: Stage) -> None:
    check_transition("t-1", stage, stage)
    assert stage in TRANSITIONS[stage]


@pytest.mark.parametrize("stage", LIVE)
def test_every_live_stage_may_be_quarantined(stage: Stage) -> None:
    check_transition("t-1", stage, Q)
    assert Q in TRANSITIONS[stage]


def test_received_task_cannot_skip_straight_to_closed() -> None:
    with pytest.raises(IllegalTransition):
        check_transition("t-1", R, C)


def test_closed_is_entered_only_from_ready_or_a_human_review() -> None:
    assert {old for old in Stage if C in TRANSITIONS[old]} == {Y, N}


def test_illegal_move_names_the_task_and_both_stages() -> None:
    with pytest.raises(IllegalTransition) as info:
        check_transition("refund-42", W, C)
    error = info.value
    assert (error.task_id, error.old, error.new) == ("refund-42", "awaiting_approval", "closed")
    assert "refund-42" in str(info.value)
    assert "awaiting_approval -> closed" in str(info.value)


def test_the_workflow_names_no_stage_outside_its_own() -> None:
    named = set(refund.stages) | {to for row in refund.stages.values() for to in row}
    assert named <= set(Stage)


def _reachable(start: Stage) -> set[Stage]:
    seen, queue = {start}, deque([start])
    while queue:
        for nxt in TRANSITIONS[queue.popleft()]:
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen


def test_every_stage_is_reachable_from_received() -> None:
    assert _reachable(R) == set(Stage)


@pytest.mark.parametrize("stage", LIVE)
def test_every_live_stage_can_still_reach_closed(stage: Stage) -> None:
    # No live stage is a trap: a task can always be finished, not only quarantined.
    assert C in _reachable(stage)


def test_stage_values_are_the_stored_names() -> None:
    # These strings are persisted inside checkpoints and outbox records: renaming one breaks old data.
    assert [s.value for s in Stage] == [
        "received",
        "awaiting_approval",
        "ready",
        "closed",
        "needs_review",
        "quarantined",
    ]
