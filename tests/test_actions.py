"""The intent-first action log: one intent per op key, first outcome wins, stale holders refused."""

from __future__ import annotations

import pytest
from helpers import new_checkpoint

from wakeful.consumers.kafka import wiring
from wakeful.core.errors import ActionError
from wakeful.core.settings import Settings
from wakeful.schemas.logs import ActionStatus
from wakeful.state.actions import ActionLog


@pytest.fixture(scope="module")
def actions(settings: Settings, redis_url: str) -> ActionLog:
    return wiring.actions_for(settings, "executor")


def test_second_begin_of_the_same_op_key_gets_the_existing_intent(actions: ActionLog) -> None:
    task = new_checkpoint().task_id
    op = f"REFUND:{task}:v1"
    first = actions.begin(task, op, fence=1)
    second = actions.begin(task, op, fence=2)
    assert first.inserted and not second.inserted
    assert second.entry.status is ActionStatus.IN_FLIGHT and second.entry.fence == 1


def test_outcome_is_recorded_once_and_looked_up_by_key(actions: ActionLog) -> None:
    task = new_checkpoint().task_id
    op = f"REFUND:{task}:v1"
    actions.begin(task, op, fence=3)
    done = actions.complete(task, op, 3, {"ledger_entry": "L-1"})
    again = actions.fail(task, op, 3, "late failure report")
    assert done.status is ActionStatus.SUCCEEDED and again.status is ActionStatus.SUCCEEDED
    looked_up = actions.lookup(task, op)
    assert looked_up is not None and looked_up.result == {"ledger_entry": "L-1"}
    assert actions.begin(task, op, fence=4).entry.status is ActionStatus.SUCCEEDED


def test_outcome_without_a_recorded_intent_is_refused(actions: ActionLog) -> None:
    task = new_checkpoint().task_id
    with pytest.raises(ActionError, match="begin"):
        actions.complete(task, f"REFUND:{task}:v1", 1, {})
    assert actions.lookup(task, f"REFUND:{task}:v1") is None


def test_outcome_from_an_older_lease_holder_is_refused(actions: ActionLog) -> None:
    task = new_checkpoint().task_id
    op = f"REFUND:{task}:v1"
    actions.begin(task, op, fence=7)
    with pytest.raises(ActionError, match="stale"):
        actions.fail(task, op, 6, "timeout")
    entry = actions.lookup(task, op)
    assert entry is not None and entry.status is ActionStatus.IN_FLIGHT


def test_gate_cannot_write_the_action_log(settings: Settings) -> None:
    import redis

    gate_log = wiring.actions_for(settings, "gate")
    task = new_checkpoint().task_id
    with pytest.raises(redis.exceptions.NoPermissionError):
        gate_log.begin(task, f"REFUND:{task}:v1", fence=1)
