"""The agent docs/agents.md builds: book a meeting room; the boardroom needs an approver's OK first.

wakeful worker all --app wakeful.examples.tutorial:app
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from datetime import date, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from wakeful.core.settings import Settings
from wakeful.schemas import events
from wakeful.sdk import (
    APPROVERS,
    CLOSED,
    App,
    Context,
    Effect,
    Next,
    Refuse,
    Review,
    Start,
    Tool,
    ToolRefused,
    Wait,
    Workflow,
    policy_file,
)

ROOMS = {"huddle": 4, "garden": 10, "boardroom": 24}  # room -> seats
NEEDS_OK = "boardroom"
RECEIVED, AWAITING_APPROVAL, READY = "received", "awaiting_approval", "ready"


class Booking(BaseModel):
    """The business state: which room, which day, for how many people."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    room: str
    day: date
    people: int = Field(gt=0)


class BookArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    room: str
    day: date


class BookRoom(Tool[BookArgs]):
    """A toy room calendar: one JSON line per booking in $WAKEFUL_HOME, found again by op key."""

    name = "book_room"
    args = BookArgs
    description = "Book the task's room for its day, once, under its op key."
    stages = (READY,)
    op_key = "BOOK:{task_id}:v{version}"
    egress = ("rooms",)

    def connect(self, settings: Settings) -> None:
        self.path, self.lock = settings.home / "tutorial-rooms.jsonl", threading.Lock()

    def call(self, op_key: str, args: BookArgs, fence: int) -> Mapping[str, str]:
        with self.lock:
            rows = self._rows()
            if op_key in rows:  # called again after a crash: the booking made the first time
                return {"booking": rows[op_key]["booking"]}
            day = args.day.isoformat()
            if any((r["room"], r["day"]) == (args.room, day) for r in rows.values()):
                raise ToolRefused(f"{args.room} is already booked on {day}")
            booking = "bk-" + hashlib.sha256(op_key.encode()).hexdigest()[:12]
            row = {"op_key": op_key, "booking": booking, "room": args.room, "day": day}
            with self.path.open("a") as calendar:
                calendar.write(json.dumps(row) + "\n")
            return {"booking": booking}

    def lookup(self, op_key: str) -> Mapping[str, str] | None:
        with self.lock:
            row = self._rows().get(op_key)
        return {"booking": row["booking"]} if row else None

    def _rows(self) -> dict[str, dict[str, str]]:
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        return {row["op_key"]: row for row in map(json.loads, lines)}


def start(s: Start) -> Next[Booking] | Refuse:
    """A booking that can be made; the boardroom first waits for an approver."""
    try:
        booking = Booking.model_validate({k: v for k, v in s.payload.items() if k in Booking.model_fields})
    except ValidationError as exc:
        first = exc.errors()[0]
        return Refuse(f"not a booking: {first['loc'][0]}: {first['msg']}")
    seats = ROOMS.get(booking.room)
    if seats is None:
        return Refuse(f"no room {booking.room!r}; rooms are {', '.join(ROOMS)}")
    if booking.people > seats:
        return Refuse(f"{booking.room} seats {seats}, not {booking.people}")
    if booking.day < s.now.date():
        return Refuse(f"{booking.day} has passed")
    if booking.room == NEEDS_OK:
        ok = Wait(events.APPROVE, (APPROVERS,), timedelta(hours=8), on_deadline="expire", then=READY)
        return Next(AWAITING_APPROVAL, booking, wait=ok)
    return Next(READY, booking)


def check(ctx: Context[Booking], effect: Effect) -> Effect | Refuse | Review:
    """The booking the model proposed must be the booking on record."""
    args = effect.args
    assert isinstance(args, BookArgs)
    if (args.task_id, args.room, args.day) != (ctx.task_id, ctx.state.room, ctx.state.day):
        return Review(f"proposed {args.room} on {args.day} is not the booking on record")
    return effect


def booked(ctx: Context[Booking], tool: str, result: Mapping[str, Any]) -> Next[Booking]:
    return Next(CLOSED, refs={"booking": str(result["booking"])})


rooms = Workflow(
    name="room_booking",
    version=1,
    state=Booking,
    stages={
        RECEIVED: (AWAITING_APPROVAL, READY),
        AWAITING_APPROVAL: (READY, CLOSED),  # CLOSED: no approval before the deadline expires it
        READY: (CLOSED,),
    },
    start=start,
    check=check,
    done=booked,
    needs_approval=lambda ctx: ctx.state.room == NEEDS_OK,
    exposes=("room",),  # what its policy may read of a booking: resource.room
)

app = App(name="rooms", workflows=[rooms], tools=[BookRoom()], policy=policy_file(__file__, "tutorial.cedar"))
