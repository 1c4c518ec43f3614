"""A test app whose tasks sleep (sdk Sleep): `nap` sleeps for the `sleep_s` its create names, or
until the `until` (ISO 8601) it names, then closes. A `nap.poke` from the requester while it sleeps
wakes it early (and cancels the sleep). `quorum` waits for two different approvers of its version,
then closes (Wait(count=2)). `pair` waits for a `pair.signed` and a `pair.paid` from its requester,
in either order (Next.waits), then closes."""

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

NAPPING, AWAITING, PAIRING = "napping", "awaiting_quorum", "pairing"
SIGNED, PAID = "pair.signed", "pair.paid"
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

pair = Workflow(
    name="pair",
    version=1,
    state=Nap,
    stages={"received": (PAIRING,), PAIRING: (CLOSED,)},
    start=lambda s: Next(
        PAIRING, Nap(), waits=tuple(Wait(k, (REQUESTER,), timedelta(hours=1)) for k in (SIGNED, PAID))
    ),
    check=check,
    done=done,
    events={k: Accept(lambda ctx: Next(CLOSED), signers=(REQUESTER,)) for k in (SIGNED, PAID)},
)

app = App(name="naps", workflows=[nap, quorum, pair])
