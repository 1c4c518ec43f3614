"""A test app whose tasks sleep (sdk Sleep): `nap` sleeps for the `sleep_s` its create names, or
until the `until` (ISO 8601) it names, then closes. A `nap.poke` from the requester while it sleeps
wakes it early (and cancels the sleep). `quorum` waits for two different approvers of its version,
then closes (Wait(count=2))."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict

from wakeful.schemas import events
from wakeful.sdk import (
    APPROVERS,
    CLOSED,
    REQUESTER,
    Accept,
    App,
    Context,
    Effect,
    Next,
    Refuse,
    Review,
    Sleep,
    Start,
    Wait,
    Workflow,
)

NAPPING, AWAITING = "napping", "awaiting_quorum"
POKE = "nap.poke"


class Nap(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    poked: bool = False


def start(s: Start) -> Next[Nap] | Refuse:
    if "until" in s.payload:
        sleep = Sleep(until=datetime.fromisoformat(str(s.payload["until"])), then=CLOSED)
    else:
        sleep = Sleep(for_=timedelta(seconds=float(s.payload.get("sleep_s", 3))), then=CLOSED)
    return Next(NAPPING, Nap(), sleep=sleep)


def check(ctx: Context[Any], effect: Effect) -> Effect | Refuse | Review:
    return Refuse("a nap calls no tool")


def done(ctx: Context[Any], tool: str, result: Any) -> Next[Nap] | Review:
    return Review("a nap calls no tool")


nap = Workflow(
    name="nap",
    version=1,
    state=Nap,
    stages={"received": (NAPPING,), NAPPING: (CLOSED,)},
    start=start,
    check=check,
    done=done,
    events={POKE: Accept(lambda ctx: Next(CLOSED, Nap(poked=True)), signers=(REQUESTER,))},
)

quorum = Workflow(
    name="quorum",
    version=1,
    state=Nap,
    stages={"received": (AWAITING,), AWAITING: (CLOSED,)},
    start=lambda s: Next(
        AWAITING, Nap(), wait=Wait(events.APPROVE, (APPROVERS,), timedelta(hours=1), then=CLOSED, count=2)
    ),
    check=check,
    done=done,
)

app = App(name="naps", workflows=[nap, quorum])
