"""Approvals that cover a plan (workflow/plans.py): two money steps under one approval, a third
beyond its amount refused; without a total, each covered tool once; single use is one use of the
plan, not of its first tool; an app whose plan cannot be followed is refused at load."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from wakeful.authority.snapshot import Snapshot
from wakeful.core.errors import ConfigError
from wakeful.schemas.approval import Approval
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk import CLOSED, App, Context, Effect, Next, Plan, Refuse, Review, Start, Tool, Workflow
from wakeful.workflow import effects, engine

NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice"}), limit=0)
PAYING = "paying"


class Payout(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    amount: int


class Money(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task_id: str
    amount: int


class Post(Tool[Money]):
    name, args, stages, description = "post_ledger", Money, (PAYING,), "Post to the ledger."


class Pay(Tool[Money]):
    name, args, stages, description = "pay_bank", Money, (PAYING,), "Pay through the bank."


class Notify(Tool[Money]):
    name, args, stages, description = "notify", Money, (PAYING,), "Tell the payee; ends the task."


def done(ctx: Context[Payout], tool: str, result: Mapping[str, Any]) -> Next[Payout]:
    return Next(CLOSED) if tool == "notify" else Next(PAYING)


def app_with(plan: Plan | None) -> App:
    flow = Workflow(
        name="payout",
        version=1,
        state=Payout,
        stages={"received": (PAYING,), PAYING: (CLOSED,)},
        start=lambda s: Next(PAYING, Payout(amount=int(s.payload["amount"]))),
        check=lambda ctx, effect: effect,
        done=done,
        needs_approval=lambda ctx: True,
        max_steps=6,
        approval_plan=plan,
    )
    return App(name="payouts", workflows=[flow], tools=[Post(), Pay(), Notify()])


TOTAL = app_with(Plan(("post_ledger", "pay_bank"), total="amount"))
EACH_ONCE = app_with(Plan(("post_ledger", "pay_bank")))
FIRST_STEP = app_with(None)


def approved(app: App, amount: int = 100) -> Checkpoint:
    moved = engine.create(app, "payout", Start("t-1", "desk", "default", {"amount": amount}, AUTH, NOW))
    assert isinstance(moved, engine.Moved)
    cp = moved.checkpoint
    approval = Approval(
        object="payout",
        object_version=1,
        object_digest=engine.terms(cp),
        approver_ref="alice",
        scope="payout.execute",
        expires_at=datetime(2031, 1, 1, tzinfo=UTC),
    )
    return cp.model_copy(update={"business": cp.business.model_copy(update={"approval": approval})})


def run(app: App, cp: Checkpoint, tool: str, amount: int) -> Checkpoint | Refuse | Review:
    """Check the step; if it may run, the task after it ran."""
    args = {"task_id": "t-1", "amount": amount}
    checked = effects.check_proposal(app, cp, tool, args, auth=AUTH, now=NOW)
    if not isinstance(checked, Effect):
        return checked
    return effects.done(app, cp, tool, {"ok": "1"}, auth=AUTH, now=NOW, args=args)


def test_two_money_steps_run_under_one_approval_and_a_third_beyond_its_amount_is_refused() -> None:
    cp = run(TOTAL, approved(TOTAL, 100), "post_ledger", 50)
    assert isinstance(cp, Checkpoint) and cp.business.approval is not None
    assert (cp.business.approval.spent, cp.business.approval.consumed) == (50, False)
    cp = run(TOTAL, cp, "pay_bank", 40)
    assert isinstance(cp, Checkpoint) and cp.business.approval is not None
    assert (cp.business.approval.spent, cp.business.approval.used) == (90, ("post_ledger", "pay_bank"))
    beyond = run(TOTAL, cp, "pay_bank", 20)
    assert beyond == Refuse("pay_bank of 20 would bring the approved plan to 110, beyond the 100 approved")
    last = run(TOTAL, cp, "pay_bank", 10)  # what is left of the total may still run
    assert isinstance(last, Checkpoint) and last.business.approval is not None
    assert last.business.approval.consumed  # spent: single use is one use of the plan
    again = run(TOTAL, last, "post_ledger", 1)
    assert isinstance(again, Review) and "already used" in again.reason


def test_without_a_total_each_covered_tool_runs_once_and_the_plan_is_then_used_up() -> None:
    cp = run(EACH_ONCE, approved(EACH_ONCE), "post_ledger", 70)
    assert isinstance(cp, Checkpoint) and cp.business.approval is not None
    assert not cp.business.approval.consumed
    assert run(EACH_ONCE, cp, "post_ledger", 70) == Refuse("post_ledger has already run under this approval")
    cp = run(EACH_ONCE, cp, "pay_bank", 70)
    assert isinstance(cp, Checkpoint) and cp.business.approval is not None and cp.business.approval.consumed


def test_a_tool_the_plan_does_not_cover_is_refused_and_spends_nothing() -> None:
    cp = approved(TOTAL)
    refused = run(TOTAL, cp, "notify", 0)
    assert refused == Refuse("the approval covers post_ledger, pay_bank, not notify")
    assert cp.business.approval is not None and cp.business.approval.spent == 0


def test_without_a_plan_the_approval_covers_its_first_step_only() -> None:
    cp = run(FIRST_STEP, approved(FIRST_STEP), "post_ledger", 50)
    assert isinstance(cp, Checkpoint) and cp.business.approval is not None and cp.business.approval.consumed
    second = run(FIRST_STEP, cp, "pay_bank", 40)
    assert isinstance(second, Review) and "already used" in second.reason


@pytest.mark.parametrize(
    ("plan", "said"),
    [
        (Plan(()), "names no tool"),
        (Plan(("post_ledger", "wire")), "unknown tool 'wire'"),
        (Plan(("post_ledger",), total="fee"), "total 'fee' is not a field of its state"),
    ],
)
def test_an_app_whose_plan_cannot_be_followed_is_refused_at_load(plan: Plan, said: str) -> None:
    with pytest.raises(ConfigError, match=said):
        app_with(plan)


def test_a_plan_may_not_name_a_read_only_tool() -> None:
    class Look(Tool[Money]):
        name, args, stages, description, effect = "look", Money, (PAYING,), "Read.", False

    wf = dataclasses.replace(TOTAL.workflows[0], approval_plan=Plan(("look",)))
    with pytest.raises(ConfigError, match="read-only tool 'look'"):
        App(name="payouts", workflows=[wf], tools=[Post(), Pay(), Notify(), Look()])
