"""A test app whose tasks sleep (sdk Sleep): `nap` sleeps for the `sleep_s` its create names, or
until the `until` (ISO 8601) it names, then closes. A `nap.poke` from the requester while it sleeps
wakes it early (and cancels the sleep)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict

from wakeful.sdk import (
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
    Workflow,
)

NAPPING = "napping"
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

app = App(name="naps", workflows=[nap])
