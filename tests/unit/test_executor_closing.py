"""The executor's close as one value (consumers/executor/closing.py), pure: what it writes is
decided once from the task as loaded, records as done only the read-only calls its turn applied,
and every try of its compare-and-swap writes that same change."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
import redis

from wakeful.authority.snapshot import Snapshot
from wakeful.bench import steps as bench_steps
from wakeful.consumers.executor import closing
from wakeful.consumers.executor.steps import Ran
from wakeful.core.errors import StaleVersion
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk import CLOSED, App, Fact, Next, Remember, Start
from wakeful.state.actions import ActionLog
from wakeful.state.seal import Keyring
from wakeful.workflow import engine

NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice"}), limit=0)
REF = {"ref": "t-1"}
ACTIONS = ActionLog(redis.Redis(port=1))  # builds commands only: it never connects here
RECORD = ("FCALL", "finish", "1", "wk:{t-1}:ops")  # the first call's outcome, as Executor._once gives it
RING = Keyring({"k1": b"k" * 32}, "k1")


def created(app: App) -> Checkpoint:
    moved = engine.create(app, "steps", Start("t-1", "desk", "default", {}, AUTH, NOW))
    assert isinstance(moved, engine.Moved)
    return moved.checkpoint


def turn(n: int) -> list[Ran]:
    return [Ran(f"read_{i}", f"read_{i}:t-1:s{i}", {"seen": "t-1"}, REF) for i in range(1, n + 1)]


def learning(moves_on: bool = False) -> App:
    base, app = bench_steps.reads.workflows[0], bench_steps.reads

    def done(ctx: Any, tool: str, result: Any) -> Any:
        said = Next(CLOSED) if moves_on else base.done(ctx, tool, result)
        assert isinstance(said, Next)
        return dataclasses.replace(said, remember=(Remember("vendor:v-1", "seen", f"by {tool}"),))

    wf = dataclasses.replace(base, done=done)
    return App(name="steps-learning", workflows=[wf], tools=app.tools, facts=[Fact("seen")])


def made(app: App, calls: list[Ran], record: tuple[Any, ...] | None = RECORD) -> closing.Closing:
    return closing.of(app, ACTIONS, created(app), 7, calls, record=record, auth=AUTH, now=NOW)


@pytest.mark.parametrize(
    ("moves_on", "applied"),
    [(False, 3), (True, 1)],  # a call whose done moves the task on ends the turn (batch.done)
)
def test_a_close_records_as_done_only_the_read_only_calls_its_turn_applied(
    moves_on: bool, applied: int
) -> None:
    close = made(learning(moves_on), turn(3))
    assert close.records[0] == RECORD  # the first call's outcome opens them: _check_recorded reads it
    hset = [c for c in close.records[1:] if c[0] == "HSET"]
    assert [c[2] for c in hset] == [r.op_key for r in turn(3)[1:applied]]
    assert [(said.op_key, [w.value for w in said.wishes]) for said in close.learned] == [
        (r.op_key, [f"by {r.tool}"]) for r in turn(3)[:applied]
    ]
    assert close.said["done"] == "read_1" and close.said["more"] == 2


def test_a_close_with_no_outcome_to_record_and_no_read_only_calls_writes_no_records() -> None:
    assert made(learning(), turn(1), record=None).records == ()


def test_every_try_of_a_close_writes_the_same_change_and_a_task_moved_on_is_never_closed() -> None:
    app = learning()
    close, cp = made(app, turn(2)), created(app)
    assert close.moved(cp) is close.after and close.moved(cp.model_copy()) is close.after
    versions = cp.versions.model_copy(update={"state_version": cp.state_version + 1})
    with pytest.raises(StaleVersion):
        close.moved(cp.model_copy(update={"versions": versions}))
    assert close.also(close.after) == list(close.records) == close.also(cp)
    with pytest.raises(dataclasses.FrozenInstanceError):
        close.records = ()  # type: ignore[misc]  # the point: it cannot be changed between tries


def test_the_close_detail_carries_what_the_step_said_and_each_applied_calls_memory() -> None:
    app = learning()
    close = made(app, turn(2))
    new = close.after.model_copy(
        update={"versions": close.after.versions.model_copy(update={"state_version": 9})}
    )
    said = closing.detail(app, RING, close, new)
    assert said["done"] == "read_1" and said["seen"] == "t-1" and said["more"] == 1
    assert len(said["learned"]) == 2 and "forgot" not in said
