"""An approval is good for as long as its app's workflow says (Workflow.approval_valid_for, 24 hours
when it says nothing), counted from the moment it is given: the step it permits runs before then and
is parked for a person from then on. Its expiry is fixed when it is given, so an approval already
recorded keeps its own whatever the app says later. A validity that is not a positive timedelta of
at most a year stops the app at load, with every other problem. Pure: the gate's and the executor's
rules (workflow/wakes.py, workflow/effects.py) over the tutorial app."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from wakeful.authority.snapshot import Snapshot
from wakeful.core.errors import ConfigError
from wakeful.examples.tutorial import READY, app, rooms
from wakeful.schemas import events
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk import APPROVAL_VALID_FOR, App, Effect, Review, Start
from wakeful.workflow import effects, engine, wakes

NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice"}), limit=1000, app="rooms", shipped=app.shipped_policy)
ARGS = {"task_id": "t-1", "room": "boardroom", "day": "2030-06-03"}
EXPIRED = Review("the approval has expired")
SECOND = timedelta(seconds=1)


def valid_for(validity: timedelta | None) -> App:
    """The tutorial app, its workflow saying `validity` (None: saying nothing)."""
    if validity is None:
        return app
    return dataclasses.replace(app, workflows=[dataclasses.replace(rooms, approval_valid_for=validity)])


def approved(on: App, given: datetime) -> Checkpoint:
    """A boardroom booking, approved by alice at `given` (inside its eight-hour wait)."""
    start = Start(
        "t-1", "rooms-desk", "default", {"room": "boardroom", "day": "2030-06-03", "people": 3}, AUTH, NOW
    )
    made = engine.create(on, "room_booking", start)
    assert isinstance(made, engine.Moved)
    wait = made.checkpoint.execution.pending_waits[0]
    heard = wakes.Heard(events.APPROVE, {"version": 1}, "alice", wait.correlation_id)
    moved = wakes.on_event(on, made.checkpoint, heard, auth=AUTH, now=given)
    assert isinstance(moved, engine.Moved) and moved.checkpoint.stage == READY, moved
    return moved.checkpoint


def ruling(on: App, cp: Checkpoint, at: datetime) -> Any:
    return effects.check_proposal(on, cp, "book_room", ARGS, auth=AUTH, now=at)


@pytest.mark.parametrize(
    ("validity", "age", "runs"),
    [
        (None, APPROVAL_VALID_FOR - SECOND, True),
        (None, APPROVAL_VALID_FOR, False),
        (timedelta(hours=2), timedelta(hours=2) - SECOND, True),
        (timedelta(hours=2), timedelta(hours=2), False),
        (timedelta(hours=2), timedelta(hours=3), False),  # well within what the default would allow
        (timedelta(minutes=5), timedelta(minutes=5) - SECOND, True),
        (timedelta(days=30), timedelta(days=30) - SECOND, True),  # long past the default's 24 hours
        (timedelta(days=30), timedelta(days=30), False),
    ],
)
def test_an_approval_given_at_t_permits_its_step_before_t_plus_its_apps_validity_and_not_after(
    validity: timedelta | None, age: timedelta, runs: bool
) -> None:
    on, given = valid_for(validity), NOW + timedelta(hours=1)
    cp = approved(on, given)
    assert cp.business.approval is not None
    assert cp.business.approval.expires_at == given + (validity or timedelta(hours=24))
    out = ruling(on, cp, given + age)
    assert (isinstance(out, Effect) and out.tool == "book_room") if runs else out == EXPIRED


def test_an_approval_already_given_keeps_its_own_expiry_when_the_app_changes_its_validity() -> None:
    given = NOW + timedelta(hours=1)
    cp = approved(valid_for(None), given)  # recorded under the default, 24 hours
    shorter = valid_for(timedelta(hours=2))
    assert isinstance(ruling(shorter, cp, given + timedelta(hours=3)), Effect)
    assert ruling(shorter, cp, given + APPROVAL_VALID_FOR) == EXPIRED


def test_the_default_validity_is_unchanged_at_24_hours() -> None:
    assert rooms.approval_valid_for == APPROVAL_VALID_FOR == wakes.APPROVAL_TTL == timedelta(hours=24)


@pytest.mark.parametrize(
    "validity",
    [timedelta(0), timedelta(hours=-1), timedelta(days=367), 3600],
    ids=["zero", "negative", "past-a-year", "seconds-not-a-timedelta"],
)
def test_a_validity_that_is_not_a_positive_timedelta_of_at_most_a_year_stops_the_app_naming_it(
    validity: Any,
) -> None:
    wf = dataclasses.replace(rooms, approval_valid_for=validity, max_steps=0)
    with pytest.raises(ConfigError) as caught:
        App(name="rooms", workflows=[wf], tools=list(app.tools))
    said = str(caught.value)
    assert f"workflow room_booking's approval_valid_for {validity!r} must be a timedelta above 0" in said
    assert "max_steps 0" in said  # every problem at once


def test_a_year_is_the_longest_validity_an_app_may_give() -> None:
    wf = dataclasses.replace(rooms, approval_valid_for=timedelta(days=366))
    assert (
        App(name="rooms", workflows=[wf], tools=list(app.tools)).workflows[0].approval_valid_for.days == 366
    )
