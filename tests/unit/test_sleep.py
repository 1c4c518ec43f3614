"""Durable sleep (sdk Sleep, workflow/sleeps.py): a decision keeps its task at a stage until a
time, stored as a pending wait no event answers; the deadline's wake moves it on once, and a
decision that moves it first cancels the sleep."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from wakeful.authority.snapshot import Snapshot
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk import (
    ANYONE,
    CLOSED,
    NEEDS_REVIEW,
    Accept,
    App,
    Context,
    Next,
    Refuse,
    Sleep,
    Start,
    Wait,
    Workflow,
)
from wakeful.workflow import engine, sleeps, wakes

NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
MONDAY = datetime(2030, 6, 3, 9, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice"}), limit=0)
SIX_HOURS = timedelta(hours=6)


class Nap(BaseModel):
    naps: int = 0


def done(ctx: Context[Nap], tool: str, result: Mapping[str, Any]) -> Next[Nap]:
    return Next(CLOSED)


def flow(sleep: Sleep | None) -> Workflow[Nap]:
    return Workflow(
        name="nap",
        version=1,
        state=Nap,
        stages={"received": ("napping",), "napping": ("awake", CLOSED), "awake": (CLOSED,)},
        start=lambda s: Next("napping", Nap(), sleep=sleep),
        check=lambda ctx, effect: effect,
        done=done,
        events={"nap.poke": Accept(lambda ctx: Next("awake", Nap(naps=1)), signers=(ANYONE,))},
    )


def asleep(sleep: Sleep) -> tuple[App, Checkpoint]:
    app = App(name="naps", workflows=[flow(sleep)])
    moved = engine.create(app, "nap", Start("t-1", "desk", "default", {}, AUTH, NOW))
    assert isinstance(moved, engine.Moved)
    return app, moved.checkpoint


@pytest.mark.parametrize(
    ("sleep", "due", "wakes_to"),
    [
        (Sleep(for_=SIX_HOURS, then="awake"), NOW + SIX_HOURS, "awake"),
        (Sleep(until=MONDAY, then="awake"), MONDAY, "awake"),
        (Sleep(for_=SIX_HOURS), NOW + SIX_HOURS, "napping"),  # then=None: the stage it sleeps at
    ],
)
def test_a_sleep_is_stored_as_a_wait_no_event_answers_due_when_it_ends(
    sleep: Sleep, due: datetime, wakes_to: str
) -> None:
    _, cp = asleep(sleep)
    [wait] = cp.execution.pending_waits
    assert (wait.wait_for, wait.deadline, wait.on_deadline) == (sleeps.SLEEP_WAIT, due, f"wake:{wakes_to}")
    assert wait.allowed_signers == () and cp.stage == "napping"


def test_a_sleep_wakes_once_at_its_time_and_not_before() -> None:
    app, cp = asleep(Sleep(for_=SIX_HOURS, then="awake"))
    assert wakes.on_deadline(app, cp, NOW + SIX_HOURS - timedelta(seconds=1)) is None
    woke = wakes.on_deadline(app, cp, NOW + SIX_HOURS)
    assert woke is not None and woke.stage == "awake" and woke.execution.pending_waits == ()
    assert wakes.on_deadline(app, woke, NOW + 2 * SIX_HOURS) is None  # once: nothing is due again


def test_a_decision_that_moves_the_task_first_cancels_the_sleep() -> None:
    app, cp = asleep(Sleep(for_=SIX_HOURS, then="awake"))
    poked = wakes.on_event(
        app, cp, wakes.Heard("nap.poke", {}, "bob"), auth=AUTH, now=NOW + timedelta(hours=1)
    )
    assert isinstance(poked, engine.Moved) and poked.checkpoint.execution.pending_waits == ()
    assert wakes.on_deadline(app, poked.checkpoint, NOW + SIX_HOURS) is None


def test_no_event_answers_a_sleep() -> None:
    app, cp = asleep(Sleep(for_=SIX_HOURS, then="awake"))
    answered = wakes.on_event(app, cp, wakes.Heard(sleeps.SLEEP_WAIT, {}, "bob"), auth=AUTH, now=NOW)
    assert isinstance(answered, Refuse)


def test_a_wake_to_a_stage_the_table_does_not_allow_goes_to_a_person() -> None:
    app, cp = asleep(Sleep(for_=SIX_HOURS, then="received"))  # napping may not go back to received
    woke = wakes.on_deadline(app, cp, NOW + SIX_HOURS)
    assert woke is not None and woke.stage == NEEDS_REVIEW
    assert "woke from its sleep to received" in (woke.business.last_refusal or "")


@pytest.mark.parametrize(
    ("sleep", "wait", "why"),
    [
        (Sleep(), None, "exactly one of until= and for_="),
        (Sleep(until=MONDAY, for_=SIX_HOURS), None, "exactly one of until= and for_="),
        (Sleep(until=datetime(2030, 6, 3, 9, 0)), None, "timezone-aware"),
        (Sleep(for_=timedelta(0)), None, "more than 0"),
        (Sleep(for_=SIX_HOURS), Wait("nap.poke", (ANYONE,), SIX_HOURS), "both waits for nap.poke and sleeps"),
    ],
)
def test_a_sleep_that_cannot_be_kept_goes_to_a_person_with_why(
    sleep: Sleep, wait: Wait | None, why: str
) -> None:
    _, cp = asleep(Sleep(for_=SIX_HOURS))
    ruled = engine.ruling(cp, Next("awake", sleep=sleep, wait=wait), NOW)
    assert isinstance(ruled, engine.ForReview) and why in ruled.reason, ruled


def test_a_start_decision_whose_sleep_cannot_be_kept_sends_the_new_task_to_a_person() -> None:
    app = App(name="naps", workflows=[flow(Sleep())])
    moved = engine.create(app, "nap", Start("t-1", "desk", "default", {}, AUTH, NOW))
    assert isinstance(moved, engine.Moved) and moved.checkpoint.stage == NEEDS_REVIEW
    assert moved.checkpoint.execution.pending_waits == ()
    assert "exactly one of until= and for_=" in (moved.checkpoint.business.last_refusal or "")
