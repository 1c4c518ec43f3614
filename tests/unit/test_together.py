"""Waits for several things at once (Next.waits, workflow/together.py): a signature and a payment
in either order, any two of three replies; each wait with its own signers and deadline."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from wakeful.authority.snapshot import Snapshot
from wakeful.schemas import events
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
    Start,
    Wait,
    Workflow,
)
from wakeful.workflow import engine, wakes

NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice"}), limit=0)
SIGNED, PAID, NOTED = "deal.signed", "deal.paid", "deal.noted"


class Deal(BaseModel):
    got: tuple[str, ...] = ()


def done(ctx: Context[Deal], tool: str, result: Mapping[str, Any]) -> Next[Deal]:
    return Next(CLOSED)


def took(kind: str) -> Accept[Deal]:
    """Each answer records itself and says the deal is done: the runtime holds it until the group is."""
    return Accept(lambda ctx: Next(CLOSED, Deal(got=(*ctx.state.got, kind))), signers=(ANYONE,))


def flow(kinds: tuple[str, ...], need: int | None = None, within: tuple[int, ...] = ()) -> Workflow[Deal]:
    hours = within or (8,) * len(kinds)
    waits = tuple(
        Wait(k, (ANYONE,), timedelta(hours=h), on_deadline="escalate:ops")
        for k, h in zip(kinds, hours, strict=True)
    )
    return Workflow(
        name="deal",
        version=1,
        state=Deal,
        stages={"received": ("waiting",), "waiting": (CLOSED,)},
        start=lambda s: Next("waiting", Deal(), waits=waits, need=need),
        check=lambda ctx, effect: effect,
        done=done,
        events={k: took(k) for k in (SIGNED, PAID, NOTED)},
    )


def waiting(
    kinds: tuple[str, ...], need: int | None = None, within: tuple[int, ...] = ()
) -> tuple[App, Checkpoint]:
    app = App(name="deals", workflows=[flow(kinds, need, within)])
    made = engine.create(app, "deal", Start("t-1", "desk", "default", {}, AUTH, NOW))
    assert isinstance(made, engine.Moved)
    return app, made.checkpoint


def answer(app: App, cp: Checkpoint, kind: str) -> Checkpoint:
    wait = next(w for w in cp.execution.pending_waits if w.wait_for == kind)
    ruled = wakes.on_event(app, cp, wakes.Heard(kind, {}, "bank", wait.correlation_id), auth=AUTH, now=NOW)
    assert isinstance(ruled, engine.Moved), ruled
    return ruled.checkpoint


@pytest.mark.parametrize("order", [(SIGNED, PAID), (PAID, SIGNED)])
def test_a_signature_and_a_payment_move_the_task_on_in_either_order_and_only_once_both_came(
    order: tuple[str, str],
) -> None:
    app, cp = waiting((SIGNED, PAID))
    first = answer(app, cp, order[0])
    assert first.stage == "waiting" and [w.wait_for for w in first.execution.pending_waits] == [order[1]]
    assert first.business.data["got"] == [order[0]]  # what the decision kept is kept
    both = answer(app, first, order[1])
    assert both.stage == CLOSED and both.execution.pending_waits == ()
    assert both.business.data["got"] == list(order)


def test_any_two_of_three_move_the_task_on_at_the_second() -> None:
    app, cp = waiting((SIGNED, PAID, NOTED), need=2)
    first = answer(app, cp, NOTED)
    assert first.stage == "waiting" and len(first.execution.pending_waits) == 2
    assert answer(app, first, SIGNED).stage == CLOSED


def test_an_answer_to_a_wait_already_answered_is_refused() -> None:
    app, cp = waiting((SIGNED, PAID))
    first = answer(app, cp, SIGNED)
    again = wakes.on_event(app, first, wakes.Heard(SIGNED, {}, "bank"), auth=AUTH, now=NOW)
    assert isinstance(again, Refuse), again


def test_each_wait_of_a_group_keeps_its_own_deadline_and_rule() -> None:
    app, cp = waiting((SIGNED, PAID), within=(1, 8))
    first = answer(app, cp, PAID)
    lapsed = wakes.on_deadline(app, first, NOW + timedelta(hours=2))
    assert lapsed is not None and lapsed.stage == NEEDS_REVIEW, lapsed
    assert "deal.signed deadline" in (lapsed.business.last_refusal or "")


@pytest.mark.parametrize(
    ("nxt", "said"),
    [
        (Next("waiting", waits=(Wait(SIGNED, (ANYONE,), timedelta(hours=1)),) * 2), "waits twice"),
        (Next("waiting", waits=(Wait(SIGNED, (ANYONE,), timedelta(hours=1)),), need=2), "needs 2 of 1"),
        (
            Next("waiting", waits=(Wait(events.APPROVE, (ANYONE,), timedelta(hours=1)),)),
            "approval waits on its own",
        ),
        (
            Next(
                "waiting",
                wait=Wait(PAID, (ANYONE,), timedelta(hours=1)),
                waits=(Wait(SIGNED, (ANYONE,), timedelta(hours=1)),),
            ),
            "give one",
        ),
    ],
)
def test_a_group_that_cannot_be_kept_parks_the_task_with_why(nxt: Next[Any], said: str) -> None:
    _, cp = waiting((SIGNED,))
    parked = engine.advance(cp, nxt, NOW)
    assert parked.stage == NEEDS_REVIEW and said in (parked.business.last_refusal or ""), parked.business
