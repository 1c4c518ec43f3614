"""Tools whose answer comes later (workflow/pending.py): the call recorded once as pending, the
task asleep on its completion, and the completion applied once, from the tool's own signer, for
the handle the task waits on, before the deadline; anything else refused with a reason."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import async_app
import pytest
from async_app import HOOK, PAYING, PayInvoice, handle_of

from wakeful.authority.snapshot import Snapshot
from wakeful.core.errors import ConfigError
from wakeful.schemas import events
from wakeful.schemas.approval import Approval
from wakeful.schemas.checkpoint import Checkpoint
from wakeful.sdk import CLOSED, NEEDS_REVIEW, App, Effect, Pending, Refuse, Start
from wakeful.sdk.tools import catalog
from wakeful.workflow import effects, engine, pending, wakes

NOW = datetime(2030, 6, 1, 9, 0, tzinfo=UTC)
AUTH = Snapshot(approvers=frozenset({"alice"}), limit=0)
ARGS = {"task_id": "t-1", "invoice": "inv-7", "amount": 120}
OP = "pay_invoice:t-1:v1"
HANDLE = handle_of(OP)


def created(app: App = async_app.app) -> Checkpoint:
    start = Start("t-1", "desk", "default", {"invoice": "inv-7", "amount": 120}, AUTH, NOW)
    moved = engine.create(app, "invoice", start)
    assert isinstance(moved, engine.Moved)
    return moved.checkpoint


def asleep(app: App = async_app.app) -> Checkpoint:
    """The task after the executor recorded the payment's call as pending and closed the step."""
    cp = created(app)
    checked = effects.check_proposal(app, cp, "pay_invoice", ARGS, auth=AUTH, now=NOW)
    assert isinstance(checked, Effect) and checked.op_key == OP
    marker = pending.recorded(PayInvoice(), Pending(HANDLE, timedelta(hours=1)), NOW)
    assert isinstance(marker, dict)
    return effects.done(app, cp, "pay_invoice", marker, auth=AUTH, now=NOW, args=ARGS)


def completion(payload: dict[str, Any], by: str = HOOK, at: datetime = NOW) -> engine.Ruling:
    heard = wakes.Heard(events.COMPLETE, payload, by)
    return wakes.on_event(async_app.app, asleep(), heard, auth=AUTH, now=at)


def test_a_pending_call_puts_the_task_to_sleep_on_its_completion_with_the_tools_deadline_rule() -> None:
    cp = asleep()
    [wait] = cp.execution.pending_waits
    assert (wait.wait_for, wait.allowed_signers, wait.on_deadline) == (
        events.COMPLETE,
        (f"principal:{HOOK}",),
        "escalate:ops",
    )
    assert (wait.deadline, wait.bound_to_version, cp.stage, cp.execution.step) == (
        NOW + timedelta(hours=1),
        1,
        PAYING,
        0,
    )
    [call] = cp.execution.results
    assert (call.op_key, call.args, call.result["status"], call.result["handle"]) == (
        OP,
        ARGS,
        "pending",
        HANDLE,
    )


def test_the_completion_for_the_handle_applies_as_the_calls_answer_and_counts_the_step() -> None:
    moved = completion({"handle": HANDLE, "result": {"settlement": "set-1", "settled": True}})
    assert isinstance(moved, engine.Moved)
    cp = moved.checkpoint
    assert (cp.stage, cp.execution.pending_waits, cp.execution.step) == (PAYING, (), 1)
    [call] = cp.execution.results
    assert (call.op_key, call.args, call.result) == (OP, ARGS, {"settlement": "set-1", "settled": "True"})
    assert cp.external_refs == {"settlement": "set-1"}


def test_a_second_completion_finds_no_wait_and_is_refused() -> None:
    first = completion({"handle": HANDLE, "result": {"settlement": "set-1"}})
    assert isinstance(first, engine.Moved)
    again = wakes.on_event(
        async_app.app,
        first.checkpoint,
        wakes.Heard(events.COMPLETE, {"handle": HANDLE, "result": {"settlement": "set-1"}}, HOOK),
        auth=AUTH,
        now=NOW,
    )
    assert again == Refuse("task is paying; no tool call of it waits for a completion")


@pytest.mark.parametrize(
    ("payload", "by", "at", "reason"),
    [
        ({"handle": "pay-unknown", "result": {}}, HOOK, NOW, "waits under handle 'pay-unknown'"),
        ({"result": {}}, HOOK, NOW, "waits under handle None"),
        ({"handle": HANDLE, "result": {}}, "mallory", NOW, "mallory may not complete"),
        ({"handle": HANDLE, "result": {}}, "desk", NOW, "desk may not complete"),  # the requester
        ({"handle": HANDLE, "result": {}}, HOOK, NOW + timedelta(hours=2), "deadline"),
        ({"handle": HANDLE, "result": ["set-1"]}, HOOK, NOW, "an object of at most 50 names"),
        ({"handle": HANDLE, "result": {"a": {"nested": 1}}}, HOOK, NOW, "text, numbers and booleans"),
        ({"handle": HANDLE, "result": dict.fromkeys(map(str, range(51)), 1)}, HOOK, NOW, "at most 50"),
        ({"handle": HANDLE, "result": {pending.MARK: "x"}}, HOOK, NOW, "runtime's names"),
        ({"handle": HANDLE, "failed": 7}, HOOK, NOW, "failed names why"),
    ],
)
def test_a_completion_that_does_not_fit_is_refused_with_why(
    payload: dict[str, Any], by: str, at: datetime, reason: str
) -> None:
    refused = completion(payload, by, at)
    assert isinstance(refused, Refuse) and reason in refused.reason, refused


def test_a_completion_on_a_task_that_waits_for_none_is_refused() -> None:
    heard = wakes.Heard(events.COMPLETE, {"handle": HANDLE, "result": {}}, HOOK)
    refused = wakes.on_event(async_app.app, created(), heard, auth=AUTH, now=NOW)
    assert refused == Refuse("task is paying; no tool call of it waits for a completion")


def test_a_failure_downstream_parks_the_task_with_its_reason() -> None:
    parked = completion({"handle": HANDLE, "failed": "account closed"})
    assert isinstance(parked, engine.ForReview)
    cp = parked.checkpoint
    assert (cp.stage, cp.execution.pending_waits) == (NEEDS_REVIEW, ())
    assert cp.business.last_refusal == "pay_invoice failed downstream: account closed"


def test_a_completion_that_never_comes_meets_the_tools_deadline_rule() -> None:
    cp = asleep()
    assert wakes.on_deadline(async_app.app, cp, NOW + timedelta(minutes=59)) is None
    due = wakes.on_deadline(async_app.app, cp, NOW + timedelta(hours=1))
    assert due is not None and due.stage == NEEDS_REVIEW
    assert f"completion of pay_invoice (handle {HANDLE}) deadline" in (due.business.last_refusal or "")


def test_a_reopened_task_waits_on_the_same_call_again_with_a_fresh_deadline() -> None:
    later = NOW + timedelta(hours=3)
    marker = pending.recorded(PayInvoice(), Pending(HANDLE, timedelta(hours=1)), NOW)
    assert isinstance(marker, dict)
    assert pending.due(marker, NOW + timedelta(minutes=5)) == (HANDLE, NOW + timedelta(hours=1))
    assert pending.due(marker, later) == (HANDLE, later + timedelta(hours=1))


@pytest.mark.parametrize(
    ("returned", "reason"),
    [
        (Pending("has space", timedelta(hours=1)), "returned the handle 'has space'"),
        (Pending("", timedelta(hours=1)), "returned the handle ''"),
        (Pending("h" * 201, timedelta(hours=1)), "returned the handle"),
        (Pending("ok", timedelta(seconds=-1)), "not in the next 90 days"),
        (Pending("ok", timedelta(days=91)), "not in the next 90 days"),
        (Pending("ok", datetime(2030, 6, 1, 10, 0)), "not in the next 90 days"),  # no time zone
    ],
)
def test_a_pending_answer_that_cannot_be_recorded_fails_the_step_for_good(
    returned: Pending, reason: str
) -> None:
    failed = pending.recorded(PayInvoice(), returned, NOW)
    assert isinstance(failed, str) and reason in failed, failed


def test_a_tool_that_names_no_completer_cannot_leave_a_call_pending() -> None:
    nobody = type("Nobody", (PayInvoice,), {"completed_by": ()})()
    failed = pending.recorded(nobody, Pending("ok", timedelta(hours=1)), NOW)
    assert isinstance(failed, str) and "names no one who may complete it" in failed


def test_the_call_uses_up_the_approval_it_needed_when_it_is_made() -> None:
    wf = dataclasses.replace(async_app.invoice, needs_approval=lambda ctx: True)
    app = App(name="settling", workflows=[wf], tools=async_app.app.tools)
    cp = created(app)
    approval = Approval(
        object="invoice",
        object_version=1,
        object_digest=engine.terms(cp),
        approver_ref="alice",
        scope="invoice.execute",
        expires_at=NOW + timedelta(hours=24),
    )
    cp = cp.model_copy(update={"business": cp.business.model_copy(update={"approval": approval})})
    checked = effects.check_proposal(app, cp, "pay_invoice", ARGS, auth=AUTH, now=NOW)
    assert isinstance(checked, Effect)
    marker = pending.recorded(PayInvoice(), Pending(HANDLE, timedelta(hours=1)), NOW)
    assert isinstance(marker, dict)
    after = effects.done(app, cp, "pay_invoice", marker, auth=AUTH, now=NOW, args=ARGS)
    assert after.business.approval is not None and after.business.approval.consumed


def test_an_asynchronous_tool_is_part_of_the_catalog_contract_and_plain_tools_keep_their_stamps() -> None:
    plain = type("Plain", (PayInvoice,), {"completed_by": ()})()
    assert "completed_by" not in plain.describe()
    assert PayInvoice().describe()["completed_by"] == [f"principal:{HOOK}"]
    assert catalog([plain]).split(".")[0] != catalog([PayInvoice()]).split(".")[0]


@pytest.mark.parametrize(
    ("completed_by", "on_deadline", "problem"),
    [
        (("bank",), "escalate:ops", "completed_by names 'bank'"),
        (("principal:",), "escalate:ops", "completed_by names 'principal:'"),
        ("principal:bank", "escalate:ops", "a tuple of signers"),
        (("principal:bank",), "ignore", "on_deadline 'ignore'"),
        (("principal:bank",), "escalate:a:b", "on_deadline 'escalate:a:b'"),
    ],
)
def test_an_app_whose_completers_or_deadline_rule_do_not_parse_does_not_load(
    completed_by: Any, on_deadline: str, problem: str
) -> None:
    odd = type("Odd", (PayInvoice,), {"completed_by": completed_by, "on_deadline": on_deadline})()
    with pytest.raises(ConfigError, match=problem):
        App(name="settling", workflows=[async_app.invoice], tools=[odd, async_app.Notice()])


def test_the_finishing_step_after_the_completion_closes_the_task() -> None:
    moved = completion({"handle": HANDLE, "result": {"settlement": "set-1"}})
    assert isinstance(moved, engine.Moved)
    cp = moved.checkpoint
    notice = {"task_id": "t-1", "text": "paid"}
    checked = effects.check_proposal(async_app.app, cp, "send_notice", notice, auth=AUTH, now=NOW)
    assert isinstance(checked, Effect) and checked.op_key == "send_notice:t-1:v1:s1"
    closed = effects.done(async_app.app, cp, "send_notice", {"done": "n"}, auth=AUTH, now=NOW, args=notice)
    assert closed.stage == CLOSED


def test_a_result_from_outside_cannot_pass_for_a_pending_call() -> None:
    forged = {
        pending.MARK: "pay-x",
        pending.DUE: (NOW + timedelta(hours=1)).isoformat(),
        pending.WITHIN: "3600",
    }
    failed = pending.plain(PayInvoice(), {"status": "ok", **forged})
    assert isinstance(failed, str) and "runtime's names" in failed
    assert pending.plain(PayInvoice(), {"status": "ok"}) == {"status": "ok"}
    # and a tool that names no completer never waits, whatever its result holds
    cp = created()
    notice = {"task_id": "t-1", "text": "paid"}
    after = effects.done(async_app.app, cp, "send_notice", forged, auth=AUTH, now=NOW, args=notice)
    assert after.execution.pending_waits == () and after.stage == CLOSED
