"""A cancel (workflow/cancels.py): a signed task.cancel ends a task not finished; its waits and any
approval stop counting; the executor undoes the declared tools' succeeded steps newest first, each
once, and the task ends cancelled, or with a person when an undo could not be done."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from wakeful.authority.snapshot import Snapshot
from wakeful.core.errors import ConfigError
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.schemas.logs import UNDO_PREFIX, ActionLogEntry, ActionStatus
from wakeful.sdk import (
    ANYONE,
    CANCELLED,
    CANCELLING,
    CLOSED,
    NEEDS_REVIEW,
    REQUESTER,
    App,
    Context,
    Next,
    Refuse,
    Start,
    Tool,
    Wait,
    Workflow,
)
from wakeful.workflow import cancels, engine, retention, stuck, wakes

NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice"}), limit=0)


class Order(BaseModel):
    amount: int = 0


class Args(BaseModel):
    amount: int = 0


class Reserve(Tool[Args]):
    name: ClassVar[str] = "reserve"
    args: ClassVar[type[BaseModel]] = Args
    description: ClassVar[str] = "hold stock"
    stages: ClassVar[tuple[str, ...]] = ("reserving",)
    reversible: ClassVar[bool] = True


class Charge(Tool[Args]):
    name: ClassVar[str] = "charge"
    args: ClassVar[type[BaseModel]] = Args
    description: ClassVar[str] = "take the money"
    stages: ClassVar[tuple[str, ...]] = ("charging",)
    reversible: ClassVar[bool] = True


class Notify(Tool[Args]):
    name: ClassVar[str] = "notify"
    args: ClassVar[type[BaseModel]] = Args
    description: ClassVar[str] = "tell the customer"
    stages: ClassVar[tuple[str, ...]] = ("charging",)


def done(ctx: Context[Order], tool: str, result: Mapping[str, Any]) -> Next[Order]:
    return Next(CLOSED)


def flow(undo: tuple[str, ...] = ("reserve", "charge"), by: tuple[str, ...] = (ANYONE,)) -> Workflow[Order]:
    return Workflow(
        name="order",
        version=1,
        state=Order,
        stages={"received": ("reserving",), "reserving": ("charging",), "charging": (CLOSED,)},
        start=lambda s: Next(
            "reserving", Order(amount=5), wait=Wait(events.APPROVE, ("role:approver",), timedelta(hours=1))
        ),
        check=lambda ctx, effect: effect,
        done=done,
        cancel_by=by,
        undo_on_cancel=undo,
    )


def task(wf: Workflow[Order] | None = None) -> tuple[App, Checkpoint]:
    app = App(name="shop", workflows=[wf or flow()], tools=[Reserve(), Charge(), Notify()])
    made = engine.create(app, "order", Start("t-1", "carol", "default", {}, AUTH, NOW))
    assert isinstance(made, engine.Moved)
    return app, made.checkpoint


def cancel(app: App, cp: Checkpoint, by: str = "carol", reason: str = "changed my mind") -> engine.Ruling:
    heard = wakes.Heard(events.CANCEL, {"reason": reason}, by)
    return wakes.on_event(app, cp, heard, auth=AUTH, now=NOW)


def entry(op: str, tool: str, status: ActionStatus, at_min: int) -> ActionLogEntry:
    at = NOW + timedelta(minutes=at_min)
    return ActionLogEntry(
        op_key=op, task_id="t-1", status=status, fence=1, started_at=at, finished_at=at, tool=tool
    )


def test_a_cancel_moves_the_task_to_cancelling_with_its_waits_gone_and_its_version_moved_on() -> None:
    app, cp = task()
    assert cp.execution.pending_waits
    ruled = cancel(app, cp)
    assert isinstance(ruled, engine.Moved)
    moved = ruled.checkpoint
    assert moved.stage == CANCELLING and moved.execution.pending_waits == ()
    assert moved.business.version == cp.business.version + 1  # an approval of what it was is void
    assert moved.external_refs[cancels.CANCEL_REASON] == "changed my mind"
    assert moved.external_refs[cancels.CANCELLED_BY] == "carol"
    assert engine.may_move(engine.workflow_of(app, cp), cp.stage, moved.stage)


def test_a_workflow_that_undoes_nothing_is_cancelled_at_once() -> None:
    app, cp = task(flow(undo=()))
    ruled = cancel(app, cp)
    assert isinstance(ruled, engine.Moved) and ruled.checkpoint.stage == CANCELLED


@pytest.mark.parametrize(
    ("by", "reason", "refused"),
    [
        ("mallory", "x", "mallory may not cancel this task"),
        ("carol", "   ", "a cancel needs a reason"),
    ],
)
def test_a_cancel_from_a_signer_the_workflow_does_not_name_or_without_a_reason_is_refused(
    by: str, reason: str, refused: str
) -> None:
    app, cp = task(flow(by=(REQUESTER,)))
    ruled = cancel(app, cp, by, reason)
    assert isinstance(ruled, Refuse) and ruled.reason.startswith(refused), ruled


@pytest.mark.parametrize("stage", [CLOSED, CANCELLED])
def test_a_cancel_of_a_finished_task_is_refused_with_its_reason(stage: str) -> None:
    app, cp = task()
    finished = cp.model_copy(update={"business": cp.business.model_copy(update={"stage": stage})})
    ruled = cancels.cancel(app, finished, "carol", {"reason": "late"}, auth=AUTH, now=NOW)
    assert (
        isinstance(ruled, Refuse) and ruled.reason == f"task is {stage}; a finished task cannot be cancelled"
    )


@pytest.mark.parametrize("kind", [events.CANCEL, events.APPROVE, events.RUN, events.REOPEN])
def test_a_task_being_cancelled_accepts_no_event_not_even_a_second_cancel(kind: str) -> None:
    app, cp = task()
    ruled = cancel(app, cp)
    assert isinstance(ruled, engine.Moved)
    again = wakes.on_event(
        app, ruled.checkpoint, wakes.Heard(kind, {"reason": "x", "version": 2}, "alice"), auth=AUTH, now=NOW
    )
    assert isinstance(again, Refuse) and "being cancelled" in again.reason


def test_a_cancel_from_review_is_allowed_and_cancelling_leads_only_to_cancelled_or_a_person() -> None:
    app, cp = task()
    wf = engine.workflow_of(app, cp)
    parked = engine.review(cp, "looked at")
    assert isinstance(cancel(app, parked), engine.Moved)
    assert [
        s for s in (*wf.stages, CLOSED, CANCELLED, NEEDS_REVIEW) if engine.may_move(wf, CANCELLING, s)
    ] == [
        CANCELLED,
        NEEDS_REVIEW,
    ]
    assert not engine.may_move(wf, CANCELLED, CANCELLING) and engine.terminal(wf, CANCELLED)
    assert CANCELLED in retention.finished_stages(app)["order"]  # purged as a closed task is
    assert CANCELLING not in retention.finished_stages(app)["order"]


def test_the_undos_are_the_declared_tools_succeeded_steps_newest_first_never_an_undo_or_a_failed_step() -> (
    None
):
    app, cp = task()
    entries = [
        entry("reserve:t-1:v1", "reserve", ActionStatus.SUCCEEDED, 1),
        entry("charge:t-1:v1", "charge", ActionStatus.SUCCEEDED, 2),
        entry("notify:t-1:v1", "notify", ActionStatus.SUCCEEDED, 3),  # not declared: stays done
        entry("charge:t-1:v2", "charge", ActionStatus.FAILED, 4),  # never done
        entry(f"{UNDO_PREFIX}reserve:t-1:v0", "reserve", ActionStatus.SUCCEEDED, 5),  # an undo itself
        entry("reserve:t-1:v3", "reserve", ActionStatus.IN_FLIGHT, 6),  # the executor settles it first
    ]
    assert [e.op_key for e in cancels.to_undo(app, cp, entries)] == ["charge:t-1:v1", "reserve:t-1:v1"]


def test_a_cancel_ends_cancelled_with_what_it_undid_or_with_a_person_when_an_undo_failed() -> None:
    app, cp = task()
    ruled = cancel(app, cp)
    assert isinstance(ruled, engine.Moved)
    undone = [entry("charge:t-1:v1", "charge", ActionStatus.SUCCEEDED, 2)]
    ended = cancels.ended(ruled.checkpoint, undone, [])
    assert ended.stage == CANCELLED and ended.external_refs["undone:charge"] == "charge:t-1:v1"
    failed = cancels.ended(ruled.checkpoint, undone, ["undo of reserve failed: closed"])
    assert failed.stage == NEEDS_REVIEW and "undo of reserve failed: closed" in (
        failed.business.last_refusal or ""
    )


def test_a_cancelling_task_is_never_parked_as_stranded_and_is_stuck_once_nothing_came() -> None:
    app, cp = task()
    ruled = cancel(app, cp)
    assert isinstance(ruled, engine.Moved)
    moved = ruled.checkpoint.model_copy(update={"updated_at": NOW})
    late = NOW + timedelta(seconds=stuck.STUCK_AFTER_S + 1)
    assert stuck.stranded(app, moved, late) is None  # the gate asks the executor again instead
    assert "undos have not run" in (stuck.stuck(app, moved, late, timedelta(seconds=60)) or "")


@pytest.mark.parametrize(
    ("undo", "by", "said"),
    [
        (("nothing",), (ANYONE,), "undo_on_cancel names unknown tool 'nothing'"),
        (("notify",), (ANYONE,), "undo_on_cancel names 'notify', a tool with no undo"),
        (("reserve",), ("bank",), "cancel_by names 'bank'"),
        (("reserve",), (), "cancel_by names no signer"),
    ],
)
def test_an_app_whose_cancel_names_a_tool_it_cannot_undo_or_no_signer_does_not_load(
    undo: tuple[str, ...], by: tuple[str, ...], said: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        App(name="shop", workflows=[flow(undo=undo, by=by)], tools=[Reserve(), Charge(), Notify()])
    assert said in str(refused.value)


def test_a_cancelling_task_restored_by_recover_is_woken_and_a_cancelled_one_is_not() -> None:
    from wakeful.operate.recover.run import _wakes

    app, cp = task(flow())
    ruled = cancel(app, cp)
    assert isinstance(ruled, engine.Moved)
    wakes_it = _wakes(app, {}, {})
    assert wakes_it(ruled.checkpoint)  # the gate then asks the executor for its undos again
    assert not wakes_it(cancels.ended(ruled.checkpoint, [], []))
