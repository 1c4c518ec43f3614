"""The tutorial's agent (docs/agents.md) on the real stack: worker processes driving
wakeful.examples.tutorial:app, signed events in, one booking out."""

from __future__ import annotations

import dataclasses
import json
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from wakeful.core.settings import Settings
from wakeful.devstack.fleet import Fleet
from wakeful.operate.client import Client
from wakeful.schemas import events

APP = "wakeful.examples.tutorial:app"
DESK = "rooms-desk"  # the upstream system that asks for bookings
FIRST_RECEIPT_S = 120.0  # the first event also waits for the fresh roles to join their groups
SETTLE_S = 60.0


@pytest.fixture(scope="module")
def workers(client: Client) -> Iterator[Fleet]:
    client.add_signer(DESK, (events.CREATE, events.RUN))
    fleet = Fleet({**os.environ, "WAKEFUL_APP": APP}).start()
    yield fleet
    fleet.stop()


def calendar(settings: Settings) -> list[dict[str, str]]:
    path = settings.home / "tutorial-rooms.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def free_day(settings: Settings, room: str) -> date:
    """A day on which the toy calendar has no booking of `room` yet (it outlives test runs)."""
    taken = {row["day"] for row in calendar(settings) if row["room"] == room}
    day = datetime.now(UTC).date() + timedelta(days=1)
    while day.isoformat() in taken:
        day += timedelta(days=1)
    return day


def book(client: Client, room: str, day: date, people: int) -> tuple[str, dict[str, Any]]:
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    payload = {"workflow": "room_booking", "room": room, "day": day.isoformat(), "people": people}
    event = client.send(DESK, events.CREATE, payload, task_id=task_id)
    return task_id, client.receipt(event.event_id, task_id, FIRST_RECEIPT_S, key_id=event.key_id)


def booked_once(client: Client, settings: Settings, task_id: str) -> dict[str, Any]:
    """The closed task, after checking it made exactly one booking, under its op key."""
    shown = client.wait_settled(task_id, SETTLE_S)
    assert shown["stage"] == "closed", shown
    op_key = f"BOOK:{task_id}:v1"
    assert {op: a["status"] for op, a in shown["actions"].items()} == {op_key: "succeeded"}
    rows = [row for row in calendar(settings) if row["op_key"] == op_key]
    assert len(rows) == 1
    assert shown["external_refs"] == {"booking": rows[0]["booking"]}
    # What an operator of this app reads: the calendar's own word for the booking, asked of its tool.
    mine = Client(dataclasses.replace(settings, app=APP)).show(task_id)
    assert mine["effects"] == {op_key: {"booking": rows[0]["booking"]}} and "ledger" not in mine
    return shown


def test_boardroom_booking_waits_for_an_approver_then_books_exactly_once(
    client: Client, settings: Settings, workers: Fleet
) -> None:
    day = free_day(settings, "boardroom")
    task_id, created = book(client, "boardroom", day, 12)
    assert (created["status"], created["stage"], created["version"]) == ("accepted", "awaiting_approval", 1)
    ran = client.run(task_id, DESK)
    assert ran["status"] == "rejected" and "needs an approval for version 1" in ran["reason"]
    assert client.show(task_id)["actions"] == {}

    assert client.approve(task_id, "alice", 1)["status"] == "accepted"
    shown = booked_once(client, settings, task_id)
    assert shown["approval"]["approver_ref"] == "alice" and shown["approval"]["consumed"] is True
    assert shown["room"] == "boardroom" and shown["day"] == day.isoformat()


def test_small_room_books_at_once_without_an_approval(
    client: Client, settings: Settings, workers: Fleet
) -> None:
    task_id, created = book(client, "huddle", free_day(settings, "huddle"), 3)
    assert (created["status"], created["stage"]) == ("accepted", "ready")
    assert booked_once(client, settings, task_id)["approval"] is None


def test_room_already_booked_that_day_parks_the_second_task_with_nothing_booked(
    client: Client, settings: Settings, workers: Fleet
) -> None:
    day = free_day(settings, "garden")
    first, _ = book(client, "garden", day, 6)
    booked_once(client, settings, first)
    second, created = book(client, "garden", day, 2)
    assert created["status"] == "accepted"
    shown = client.wait_settled(second, SETTLE_S)
    assert shown["stage"] == "needs_review"
    assert shown["last_refusal"] == f"book_room refused: garden is already booked on {day.isoformat()}"
    assert [a["status"] for a in shown["actions"].values()] == ["failed"]
    same = [row["op_key"] for row in calendar(settings) if (row["room"], row["day"]) == ("garden", str(day))]
    assert same == [f"BOOK:{first}:v1"]


def test_event_of_a_workflow_the_app_lacks_is_refused(client: Client, workers: Fleet) -> None:
    task_id = f"t-{uuid.uuid4().hex[:12]}"
    event = client.send(DESK, events.CREATE, {"workflow": "refund", "amount": 5}, task_id=task_id)
    receipt = client.receipt(event.event_id, task_id, FIRST_RECEIPT_S, key_id=event.key_id)
    assert (receipt["status"], receipt["reason"]) == ("rejected", "no workflow 'refund' in app rooms")
